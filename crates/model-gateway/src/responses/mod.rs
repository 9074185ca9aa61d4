//! OpenAI's Responses API (`POST {base}/responses`), on async-openai's client.
//!
//! The request and the answer are our own JSON ([`wire`], [`events`]), sent through
//! async-openai's `responses().create_byot` / `create_stream_byot`: the client, its retry
//! layer (429, 5xx, connection errors, `Retry-After`, per-attempt timeout, deadline) and its
//! configuration are the chat backend's ([`OpenAiConfig`]).
//!
//! Stateless by default: `store: false`, and the reasoning of each round comes back with
//! `include: ["reasoning.encrypted_content"]`, is kept as [`Part::Reasoning`] parts tagged
//! `"openai-responses"`, and goes back unchanged in the next request.

mod events;
mod wire;

use crate::settings::{self, Vars};
use std::collections::VecDeque;
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use futures::StreamExt;
use serde_json::Value;

use crate::openai::{OpenAiConfig, client, map_error};
use crate::{ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError, ModelInfo};
#[cfg(doc)]
use toolwright_core::Part;

/// The environment variables [`ResponsesOptions::from_env`] reads (the connection itself is
/// [`OpenAiConfig::from_env`]'s: `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENAI_MODEL`, …).
pub mod env {
    /// Reasoning effort (`none`, `minimal`, `low`, `medium`, `high`, `xhigh`, …).
    pub const REASONING_EFFORT: &str = "OPENAI_REASONING_EFFORT";
    /// Reasoning summary (`auto`, `concise`, `detailed`).
    pub const REASONING_SUMMARY: &str = "OPENAI_REASONING_SUMMARY";
    /// `true`/`false`: let OpenAI store the responses (default false).
    pub const STORE: &str = "OPENAI_RESPONSES_STORE";
}

/// What the Responses API takes beyond the connection ([`OpenAiConfig`]).
///
/// ```
/// use toolwright_model_gateway::ResponsesOptions;
/// let o = ResponsesOptions::default().with_reasoning_effort("low").with_reasoning_summary("auto");
/// assert!(!o.store);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResponsesOptions {
    /// Let OpenAI store the responses (`store`; default false). Either way the reasoning is
    /// asked for encrypted and sent back, so nothing depends on what OpenAI keeps.
    pub store: bool,
    /// `reasoning.effort`; `None` leaves it to the model.
    pub reasoning_effort: Option<String>,
    /// `reasoning.summary` (`auto`, `concise`, `detailed`); `None` asks for no summary.
    pub reasoning_summary: Option<String>,
    /// The `detail` of every image sent (`auto`, `low`, `high`; default `auto`).
    pub image_detail: String,
}

impl Default for ResponsesOptions {
    fn default() -> Self {
        Self {
            store: false,
            reasoning_effort: None,
            reasoning_summary: None,
            image_detail: "auto".into(),
        }
    }
}

impl ResponsesOptions {
    /// The options the environment sets (see [`mod@env`]); defaults for the rest.
    pub fn from_env() -> Result<Self, ModelError> {
        Self::from_vars(&settings::process_env)
    }

    fn from_vars(var: Vars<'_>) -> Result<Self, ModelError> {
        let mut o = Self {
            reasoning_effort: var(env::REASONING_EFFORT).map(|v| v.trim().to_owned()),
            reasoning_summary: var(env::REASONING_SUMMARY).map(|v| v.trim().to_owned()),
            ..Self::default()
        };
        if let Some(v) = var(env::STORE) {
            o.store = settings::flag(env::STORE, &v)?;
        }
        Ok(o)
    }
    /// Let OpenAI store the responses, or not ([`ResponsesOptions::store`]).
    pub fn with_store(mut self, on: bool) -> Self {
        self.store = on;
        self
    }
    /// Set `reasoning.effort`.
    pub fn with_reasoning_effort(mut self, effort: impl Into<String>) -> Self {
        self.reasoning_effort = Some(effort.into());
        self
    }
    /// Set `reasoning.summary`.
    pub fn with_reasoning_summary(mut self, summary: impl Into<String>) -> Self {
        self.reasoning_summary = Some(summary.into());
        self
    }
    /// Set the `detail` of images.
    pub fn with_image_detail(mut self, detail: impl Into<String>) -> Self {
        self.image_detail = detail.into();
        self
    }
}

/// A [`ChatModel`] on OpenAI's Responses API.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolwright_core::ModelError> {
/// use toolwright_model_gateway::{OpenAiConfig, OpenAiResponsesModel, ResponsesOptions};
/// use toolwright_core::{ChatModel, ChatRequest, Message};
/// let model = OpenAiResponsesModel::new(OpenAiConfig::new("gpt-5.4").with_api_key("sk-..."))?
///     .with_options(ResponsesOptions::default().with_reasoning_effort("low"));
/// let answer = model.chat(ChatRequest::new(vec![Message::user("Say hi")])).await?;
/// println!("{}", answer.content);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OpenAiResponsesModel {
    client: Client<OpenAIConfig>,
    config: OpenAiConfig,
    options: ResponsesOptions,
}

impl std::fmt::Debug for OpenAiResponsesModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiResponsesModel")
            .field("config", &self.config)
            .field("options", &self.options)
            .finish()
    }
}

impl OpenAiResponsesModel {
    /// A client for this configuration, with the default [`ResponsesOptions`].
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        if config.model.trim().is_empty() {
            return Err(ModelError::Config(
                "the model name is empty: set OPENAI_MODEL or OpenAiConfig::new(model)".into(),
            ));
        }
        let client = client(&config)?;
        Ok(Self {
            client,
            config,
            options: ResponsesOptions::default(),
        })
    }

    /// The model configured by the environment ([`OpenAiConfig::from_env`] and
    /// [`ResponsesOptions::from_env`]); `None` when no provider is configured.
    pub fn from_env() -> Result<Option<Self>, ModelError> {
        let Some(config) = OpenAiConfig::from_env()? else {
            return Ok(None);
        };
        Ok(Some(
            Self::new(config)?.with_options(ResponsesOptions::from_env()?),
        ))
    }

    /// The same model with these options.
    pub fn with_options(mut self, options: ResponsesOptions) -> Self {
        self.options = options;
        self
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The options in use.
    pub fn options(&self) -> &ResponsesOptions {
        &self.options
    }

    /// async-openai's error as the seam's: an API error keeps OpenAI's `code` (or its `type`
    /// when the code is null).
    fn map_err(&self, e: OpenAIError) -> ModelError {
        match e {
            OpenAIError::ApiError(r) => {
                let status = r.status_code.as_u16();
                let mut message = r.api_error.message;
                if matches!(status, 401 | 403) {
                    message.push_str(&format!(
                        " [the key comes from {}]",
                        crate::openai::env::API_KEY
                    ));
                }
                ModelError::Api {
                    status,
                    message,
                    code: r.api_error.code.or(r.api_error.r#type),
                }
            }
            other => map_error(&self.config, other),
        }
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiResponsesModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new(self.config.model.clone(), self.config.function_calling)
            .with_provider("openai")
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let body = wire::request_body(&request, &self.config.model, &self.options, false)?;
        let responses = self.client.responses();
        let value = tokio::time::timeout(
            self.config.deadline,
            responses.create_byot::<Value, Value>(body),
        )
        .await
        .map_err(|_| ModelError::Timeout(self.config.deadline))?
        .map_err(|e| self.map_err(e))?;
        wire::parse_response(&value)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let body = wire::request_body(&request, &self.config.model, &self.options, true)?;
        let responses = self.client.responses();
        let call = responses.create_stream_byot::<Value, Value>(body);
        let inner = tokio::time::timeout(self.config.deadline, call)
            .await
            .map_err(|_| ModelError::Timeout(self.config.deadline))?
            .map_err(|e| self.map_err(e))?;
        let state = StreamState {
            inner,
            timeout: self.config.timeout,
            parser: events::StreamParser::new(),
            pending: VecDeque::new(),
            done: false,
        };
        Ok(Box::pin(futures::stream::unfold(state, StreamState::next)))
    }
}

struct StreamState {
    inner: async_openai::types::stream::StreamResponse<Value>,
    timeout: Duration,
    parser: events::StreamParser,
    pending: VecDeque<ChatEvent>,
    done: bool,
}

impl StreamState {
    async fn next(mut self) -> Option<(Result<ChatEvent, ModelError>, Self)> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some((Ok(ev), self));
            }
            if self.done {
                return None;
            }
            let item = match tokio::time::timeout(self.timeout, self.inner.next()).await {
                Err(_) => {
                    self.done = true;
                    return Some((Err(ModelError::Timeout(self.timeout)), self));
                }
                Ok(item) => item,
            };
            let mut out = Vec::new();
            let step = match item {
                Some(Ok(event)) => self.parser.on_event(&event, &mut out),
                Some(Err(OpenAIError::JSONDeserialize(err, raw))) => {
                    Err(ModelError::malformed("stream chunk", err, &raw))
                }
                Some(Err(OpenAIError::StreamError(s))) => Err(ModelError::StreamInterrupted {
                    detail: s.to_string(),
                    partial_text: self.parser.take_text(),
                }),
                Some(Err(other)) => Err(crate::openai::map_err(other)),
                None => {
                    self.done = true;
                    self.parser.on_end()
                }
            };
            self.pending.extend(out);
            if self.parser.is_finished() {
                // Nothing after the final event counts (and the server closes anyway).
                self.done = true;
            }
            if let Err(e) = step {
                self.done = true;
                self.pending.clear();
                return Some((Err(e), self));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::events::{StreamParser, read_output};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// One event from the stream's vocabulary, with fields that may be missing, of the wrong
    /// type, or pointing at items that do not exist.
    fn event() -> impl Strategy<Value = Value> {
        let kinds = prop::sample::select(vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.content_part.added",
            "response.output_text.delta",
            "response.refusal.delta",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_text.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.completed",
            "response.incomplete",
            "response.failed",
            "error",
            "response.unknown",
        ]);
        let item_kinds = prop::sample::select(vec![
            "reasoning",
            "function_call",
            "message",
            "web_search_call",
            "",
        ]);
        let scalar = prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
            Just(json!({})),
            Just(json!([])),
        ];
        (kinds, item_kinds, 0u64..4, prop::option::of(scalar.clone()), ".{0,8}", any::<bool>(), prop::option::of(scalar))
            .prop_map(|(kind, item_kind, index, odd, text, with_id, odd2)| {
                let item = json!({
                    "type": item_kind, "id": if with_id { json!(format!("it_{index}")) } else { Value::Null },
                    "call_id": format!("call_{index}"), "name": "f", "arguments": text,
                    "summary": [{"type": "summary_text", "text": text}], "encrypted_content": odd2,
                    "content": [{"type": "output_text", "text": text}, {"type": "refusal", "refusal": text}],
                });
                json!({
                    "type": kind, "output_index": index, "item_id": format!("it_{index}"),
                    "summary_index": index, "delta": text, "arguments": odd, "item": item,
                    "response": {"status": if index % 2 == 0 { "completed" } else { "incomplete" },
                                 "incomplete_details": {"reason": odd}, "usage": {"input_tokens": odd},
                                 "output": [item], "error": odd},
                    "code": odd, "message": text,
                })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn the_stream_parser_never_panics_on_arbitrary_event_sequences(events in prop::collection::vec(event(), 0..40)) {
            let mut p = StreamParser::new();
            let mut out = Vec::new();
            let mut failed = false;
            for e in &events {
                if p.on_event(e, &mut out).is_err() {
                    failed = true;
                    break;
                }
            }
            let end = p.on_end();
            // Whatever came, the stream either ended with Finish or said why not.
            let finished = out.iter().any(|e| matches!(e, toolwright_core::ChatEvent::Finish { .. }));
            prop_assert!(failed || finished || end.is_err());
            let _ = read_output(&events);
        }
    }
}

#[cfg(test)]
mod from_env_tests {
    use super::*;
    use crate::settings::vars;

    #[test]
    fn the_options_are_read_and_a_bad_store_flag_is_named() {
        let o = ResponsesOptions::from_vars(&vars(&[
            (env::REASONING_EFFORT, " high "),
            (env::STORE, "true"),
        ]))
        .unwrap();
        assert_eq!(o.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(o.reasoning_summary, None);
        assert!(o.store);
        let e = ResponsesOptions::from_vars(&vars(&[(env::STORE, "keep")])).unwrap_err();
        assert!(e.to_string().contains(env::STORE), "{e}");
    }
}
