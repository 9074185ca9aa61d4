//! The OpenAI-compatible backend, built on `async-openai` (G1).
//!
//! Works with OpenAI, DeepSeek, DashScope (Qwen), vLLM, llama.cpp's server, Ollama and anything
//! else that speaks `POST {base}/chat/completions`.

mod embed;
mod retry;
mod wire;

use std::collections::VecDeque;
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use futures::StreamExt;
use serde_json::Value;

pub use crate::retry::RetryPolicy;
pub use embed::OpenAiEmbedder;

use crate::default_finish;
use crate::settings::{self, Vars, connection_setters};
use crate::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, ModelError,
    ModelInfo, Usage,
};
use toolwright_core::{Part, Reasoning, ReasoningKind, ToolCallAssembler};

/// Configuration of an OpenAI-compatible endpoint.
///
/// ```
/// use toolwright_model_gateway::OpenAiConfig;
/// use std::time::Duration;
/// let cfg = OpenAiConfig::new("qwen2.5:7b")
///     .with_base_url("http://127.0.0.1:11434/v1") // Ollama
///     .with_header("x-trace", "demo")
///     .with_timeout(Duration::from_secs(120));
/// assert!(cfg.function_calling);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1` (default `https://api.openai.com/v1`).
    pub base_url: String,
    /// API key, sent as a bearer token; local servers usually need none.
    pub api_key: Option<String>,
    /// Model name.
    pub model: String,
    /// Extra headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Per attempt: the longest wait for one HTTP attempt's response, and between two stream
    /// chunks. A timed-out attempt is retried like a connection error (default 60 s).
    pub timeout: Duration,
    /// The whole call, every attempt, backoff and `Retry-After` wait included: no retry
    /// starts past it (default 300 s). A `Retry-After` is honoured up to
    /// [`RetryPolicy::max_retry_after`] while the deadline allows.
    pub deadline: Duration,
    /// Whether the model supports native function calling (G7).
    pub function_calling: bool,
    /// Retry policy for 429, 5xx and connection errors.
    pub retry: RetryPolicy,
    /// Ask for usage in streamed responses (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// Send the model's reasoning (`reasoning_content`) back with its assistant messages of
    /// the turn in flight, as DeepSeek's thinking mode asks during tool calls (default
    /// true). Earlier turns' reasoning is never sent; turn off for a server that rejects
    /// the field.
    pub replay_reasoning: bool,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("deadline", &self.deadline)
            .field("function_calling", &self.function_calling)
            .field("retry", &self.retry)
            .field("stream_usage", &self.stream_usage)
            .field("replay_reasoning", &self.replay_reasoning)
            .finish()
    }
}

/// The environment variables [`OpenAiConfig::from_env`] reads.
pub mod env {
    /// API key.
    pub const API_KEY: &str = "OPENAI_API_KEY";
    /// Base URL, e.g. `http://127.0.0.1:8000/v1`.
    pub const BASE_URL: &str = "OPENAI_BASE_URL";
    /// Model name.
    pub const MODEL: &str = "OPENAI_MODEL";
    /// `true`/`false`: native function calling (default true).
    pub const FUNCTION_CALLING: &str = "OPENAI_FUNCTION_CALLING";
    /// Per-attempt timeout in seconds (default 60).
    pub const TIMEOUT_SECS: &str = "OPENAI_TIMEOUT_SECS";
    /// Deadline of a whole call, retries included, in seconds (default 300).
    pub const DEADLINE_SECS: &str = "OPENAI_DEADLINE_SECS";
    /// Extra headers: `Name: value` pairs separated by newlines or `;`.
    pub const HEADERS: &str = "OPENAI_HEADERS";
}

impl OpenAiConfig {
    /// A configuration for `model` at OpenAI, with defaults for everything else.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            model: model.into(),
            headers: Vec::new(),
            timeout: Duration::from_secs(60),
            deadline: Duration::from_secs(300),
            function_calling: true,
            retry: RetryPolicy::default(),
            stream_usage: true,
            replay_reasoning: true,
        }
    }

    /// Reads the configuration from the environment (see `env`); `None` when neither
    /// `OPENAI_API_KEY` nor `OPENAI_BASE_URL` is set, i.e. no provider is configured.
    pub fn from_env() -> Result<Option<Self>, ModelError> {
        Self::from_vars(&settings::process_env)
    }

    fn from_vars(var: Vars<'_>) -> Result<Option<Self>, ModelError> {
        let key = var(env::API_KEY);
        let base = var(env::BASE_URL);
        if key.is_none() && base.is_none() {
            return Ok(None);
        }
        let mut cfg = Self::new(var(env::MODEL).unwrap_or_else(|| "gpt-4o-mini".into()));
        cfg.api_key = key;
        if let Some(base) = base {
            cfg.base_url = base;
        }
        if let Some(v) = var(env::FUNCTION_CALLING) {
            cfg.function_calling = settings::flag(env::FUNCTION_CALLING, &v)?;
        }
        if let Some(t) = var(env::TIMEOUT_SECS) {
            cfg.timeout = settings::secs(env::TIMEOUT_SECS, &t)?;
        }
        if let Some(t) = var(env::DEADLINE_SECS) {
            cfg.deadline = settings::secs(env::DEADLINE_SECS, &t)?;
        }
        if let Some(h) = var(env::HEADERS) {
            cfg.headers = settings::headers(env::HEADERS, &h)?;
        }
        Ok(Some(cfg))
    }

    /// Declare whether the model supports native function calling (G7).
    pub fn with_function_calling(mut self, on: bool) -> Self {
        self.function_calling = on;
        self
    }
    /// Ask (or not) for usage in streamed responses; turn off for servers that reject
    /// `stream_options`.
    pub fn with_stream_usage(mut self, on: bool) -> Self {
        self.stream_usage = on;
        self
    }
    /// Send (or not) the turn's reasoning back ([`OpenAiConfig::replay_reasoning`]).
    pub fn with_replay_reasoning(mut self, on: bool) -> Self {
        self.replay_reasoning = on;
        self
    }
}

connection_setters!(
    OpenAiConfig,
    "Set the base URL (up to and including `/v1`)."
);

/// A [`ChatModel`] talking to an OpenAI-compatible endpoint.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolwright_core::ModelError> {
/// use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};
/// use toolwright_core::{ChatModel, ChatRequest, Message};
/// let model = OpenAiModel::new(OpenAiConfig::new("gpt-4o-mini").with_api_key("sk-..."))?;
/// let answer = model.chat(ChatRequest::new(vec![Message::user("Say hi")])).await?;
/// println!("{}", answer.content);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OpenAiModel {
    client: Client<OpenAIConfig>,
    config: OpenAiConfig,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("config", &self.config)
            .finish()
    }
}

impl OpenAiModel {
    /// A client for this configuration.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        if config.model.trim().is_empty() {
            return Err(ModelError::Config(
                "the model name is empty: set OPENAI_MODEL or OpenAiConfig::new(model)".into(),
            ));
        }
        let client = client(&config)?;
        Ok(Self { client, config })
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

/// The async-openai client of a configuration: base URL, key, headers, and the retry layer
/// (429, 5xx, connection errors; per-attempt timeout and whole-call deadline).
pub(crate) fn client(config: &OpenAiConfig) -> Result<Client<OpenAIConfig>, ModelError> {
    let mut oa = OpenAIConfig::new()
        .with_api_base(config.base_url.trim_end_matches('/'))
        .with_api_key(config.api_key.clone().unwrap_or_default())
        .with_org_id("")
        .with_project_id("");
    for (k, v) in &config.headers {
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| ModelError::Config(format!("header name {k:?}: {e}")))?;
        oa = oa
            .with_header(name, v.as_str())
            .map_err(|e| ModelError::Config(format!("header {k:?}: {e}")))?;
    }
    // Before the first reqwest client (async-openai's own, in `with_config`, is one).
    crate::ensure_crypto_provider();
    let http = reqwest::Client::builder()
        .connect_timeout(config.timeout.min(Duration::from_secs(30)))
        .build()
        .map_err(|e| ModelError::Config(format!("HTTP client: {e}")))?;
    let service = tower::ServiceBuilder::new()
        .layer(retry::RetryLayer {
            policy: config.retry.clone(),
            attempt_timeout: config.timeout,
            deadline: config.deadline,
        })
        .service(ReqwestService::new(http));
    Ok(Client::with_config(oa).with_http_service(service))
}

impl OpenAiModel {
    fn map_err(&self, e: OpenAIError) -> ModelError {
        map_error(&self.config, e)
    }
}

/// async-openai's error as the seam's, an attempt's timeout named with `config`'s.
pub(crate) fn map_error(config: &OpenAiConfig, e: OpenAIError) -> ModelError {
    match e {
        OpenAIError::InvalidArgument(m) if m == retry::ATTEMPT_TIMED_OUT => {
            ModelError::Timeout(config.timeout)
        }
        other => map_err(other),
    }
}

pub(crate) fn map_err(e: OpenAIError) -> ModelError {
    match e {
        OpenAIError::ApiError(r) => {
            let status = r.status_code.as_u16();
            let mut message = r.api_error.message;
            if matches!(status, 401 | 403) {
                message.push_str(&format!(" [the key comes from {}]", env::API_KEY));
            }
            ModelError::Api {
                status,
                message,
                code: r.api_error.code,
            }
        }
        OpenAIError::Reqwest(e) if e.is_connect() => {
            ModelError::Connect(format!("{e} [the base URL comes from {}]", env::BASE_URL))
        }
        OpenAIError::Reqwest(e) if e.is_timeout() => ModelError::Timeout(Duration::ZERO),
        OpenAIError::Reqwest(e) => ModelError::Http(e.to_string()),
        OpenAIError::JSONDeserialize(err, raw) => ModelError::malformed("response", err, &raw),
        OpenAIError::StreamError(s) => ModelError::StreamInterrupted {
            detail: s.to_string(),
            partial_text: String::new(),
        },
        other => ModelError::Http(other.to_string()),
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiModel {
    fn info(&self) -> ModelInfo {
        // Any OpenAI-compatible server speaks the `openai` API (OpenTelemetry's provider name).
        ModelInfo::new(self.config.model.clone(), self.config.function_calling)
            .with_provider("openai")
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let body = wire::request_body(
            &request,
            &self.config.model,
            false,
            false,
            self.config.replay_reasoning,
        )?;
        let chat = self.client.chat();
        let value =
            tokio::time::timeout(self.config.deadline, chat.create_byot::<Value, Value>(body))
                .await
                .map_err(|_| ModelError::Timeout(self.config.deadline))?
                .map_err(|e| self.map_err(e))?;
        wire::parse_response(&value)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let body = wire::request_body(
            &request,
            &self.config.model,
            true,
            self.config.stream_usage,
            self.config.replay_reasoning,
        )?;
        let chat = self.client.chat();
        let call = chat.create_stream_byot::<Value, Value>(body);
        let inner = tokio::time::timeout(self.config.deadline, call)
            .await
            .map_err(|_| ModelError::Timeout(self.config.deadline))?
            .map_err(|e| self.map_err(e))?;
        let state = StreamState {
            inner,
            timeout: self.config.timeout,
            pending: VecDeque::new(),
            assembler: ToolCallAssembler::new(),
            text: String::new(),
            reasoning: String::new(),
            finish: None,
            usage: None,
            done: false,
        };
        Ok(Box::pin(futures::stream::unfold(state, StreamState::next)))
    }
}

struct StreamState {
    inner: async_openai::types::stream::StreamResponse<Value>,
    timeout: Duration,
    pending: VecDeque<Result<ChatEvent, ModelError>>,
    assembler: ToolCallAssembler,
    text: String,
    reasoning: String,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    done: bool,
}

impl StreamState {
    async fn next(mut self) -> Option<(Result<ChatEvent, ModelError>, Self)> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some((ev, self));
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
            match item {
                Some(Ok(chunk)) => {
                    if let Err(e) = self.on_chunk(&chunk) {
                        self.done = true;
                        return Some((Err(e), self));
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    let err = match e {
                        OpenAIError::JSONDeserialize(err, raw) => {
                            ModelError::malformed("stream chunk", err, &raw)
                        }
                        OpenAIError::StreamError(s) => ModelError::StreamInterrupted {
                            detail: s.to_string(),
                            partial_text: std::mem::take(&mut self.text),
                        },
                        other => map_err(other),
                    };
                    return Some((Err(err), self));
                }
                None => {
                    self.done = true;
                    self.on_end();
                }
            }
        }
    }

    fn on_chunk(&mut self, chunk: &Value) -> Result<(), ModelError> {
        if let Some(err) = wire::error_in_body(chunk) {
            return Err(err);
        }
        if let Some(u) = wire::usage(chunk) {
            self.usage = Some(u);
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(()); // usage-only or keep-alive chunk
        };
        let delta = choice.get("delta").or_else(|| choice.get("message"));
        if let Some(delta) = delta {
            if let Some(t) = wire::reasoning_text(delta)
                && !t.is_empty()
            {
                self.reasoning.push_str(t);
                self.pending
                    .push_back(Ok(ChatEvent::ReasoningDelta(t.to_owned())));
            }
            if let Some(t) = delta.get("content").and_then(Value::as_str)
                && !t.is_empty()
            {
                self.text.push_str(t);
                self.pending
                    .push_back(Ok(ChatEvent::TextDelta(t.to_owned())));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for c in calls {
                    let index = c.get("index").and_then(Value::as_u64).map(|i| i as usize);
                    let id = c.get("id").and_then(Value::as_str);
                    let f = c.get("function").unwrap_or(&Value::Null);
                    let name = f.get("name").and_then(Value::as_str);
                    let args = wire::arguments_text(f.get("arguments"));
                    let index = self.assembler.push(index, id, name, args.as_deref());
                    self.pending.push_back(Ok(ChatEvent::ToolCallDelta {
                        index,
                        id: id.map(str::to_owned),
                        name: name.map(str::to_owned),
                        arguments: args.unwrap_or_default(),
                    }));
                }
            }
        }
        if let Some(reason) = wire::finish_reason(choice) {
            self.finish = Some(reason);
        }
        Ok(())
    }

    fn on_end(&mut self) {
        let assembler = std::mem::take(&mut self.assembler);
        let has_calls = !assembler.is_empty();
        let Some(reason) = self
            .finish
            .take()
            .or_else(|| has_calls.then(|| default_finish(true)))
        else {
            // No finish_reason and no tool call: the server closed early. Never present a
            // truncated answer as a complete one.
            self.pending.push_back(Err(ModelError::StreamInterrupted {
                detail: "the stream closed without a finish_reason".into(),
                partial_text: std::mem::take(&mut self.text),
            }));
            return;
        };
        if !self.reasoning.is_empty() {
            let text = std::mem::take(&mut self.reasoning);
            self.pending
                .push_back(Ok(ChatEvent::Part(Part::Reasoning(Reasoning::new(
                    wire::PROVIDER,
                    ReasoningKind::Full,
                    text,
                )))));
        }
        // A call with broken arguments is an event like the others (G5): the stream goes on.
        for call in assembler.finish() {
            self.pending.push_back(Ok(match call {
                Ok(c) => ChatEvent::ToolCall(c),
                Err(bad) => ChatEvent::InvalidToolCall(bad),
            }));
        }
        self.pending.push_back(Ok(ChatEvent::Finish {
            reason,
            usage: self.usage,
        }));
    }
}

#[cfg(test)]
mod from_env_tests {
    use super::*;
    use crate::settings::vars;

    #[test]
    fn no_key_and_no_base_url_is_no_provider() {
        assert!(OpenAiConfig::from_vars(&vars(&[])).unwrap().is_none());
        assert!(
            OpenAiConfig::from_vars(&vars(&[(env::MODEL, "gpt-5")]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn every_variable_is_read_and_a_bad_one_is_named() {
        let cfg = OpenAiConfig::from_vars(&vars(&[
            (env::BASE_URL, "http://127.0.0.1:8000/v1"),
            (env::MODEL, "qwen3"),
            (env::FUNCTION_CALLING, "off"),
            (env::TIMEOUT_SECS, "5"),
            (env::DEADLINE_SECS, "30"),
            (env::HEADERS, "X-Tenant: a; X-Trace: b"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(cfg.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!((cfg.model.as_str(), cfg.api_key), ("qwen3", None));
        assert!(!cfg.function_calling);
        assert_eq!(cfg.timeout, Duration::from_secs(5));
        assert_eq!(cfg.deadline, Duration::from_secs(30));
        assert_eq!(cfg.headers.len(), 2);
        let e = OpenAiConfig::from_vars(&vars(&[(env::API_KEY, "k"), (env::TIMEOUT_SECS, "0")]))
            .unwrap_err();
        assert!(e.to_string().contains(env::TIMEOUT_SECS), "{e}");
        let e = OpenAiConfig::from_vars(&vars(&[
            (env::API_KEY, "k"),
            (env::FUNCTION_CALLING, "sometimes"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(env::FUNCTION_CALLING), "{e}");
    }
}
