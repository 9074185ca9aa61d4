//! Google's Gemini API, natively: `models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`, a thin serde_json wire over reqwest.
//!
//! Thought summaries, and the thought signatures Gemini puts on text and function-call parts,
//! come back as [`Part::Reasoning`](toolwright_core::Part) tagged `"gemini"` and go back on the
//! part they came with in the next request (Gemini 3 rejects a step whose first function call
//! lost its signature). See `docs/backends-gemini.md` for what is mapped and what is not.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolwright_core::ModelError> {
//! use toolwright_model_gateway::gemini::{GeminiConfig, GeminiModel};
//! use toolwright_core::{ChatModel, ChatRequest, Message};
//! let cfg = GeminiConfig::from_env()?
//!     .unwrap_or_else(|| GeminiConfig::new("gemini-2.5-flash").with_api_key("AIza..."));
//! let model = GeminiModel::new(cfg.with_include_thoughts(true))?;
//! let answer = model.chat(ChatRequest::new(vec![Message::user("Say hi")])).await?;
//! println!("{}", answer.content);
//! # Ok(()) }
//! ```

mod wire;

use std::collections::VecDeque;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::http::{Poster, SseStream, json_body, sse};
use crate::settings::{self, Vars, connection_setters};
use crate::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError, ModelInfo, RetryPolicy,
};

/// The environment variables [`GeminiConfig::from_env`] reads.
pub mod env {
    /// API key (Google AI Studio), sent as `x-goog-api-key`.
    pub const API_KEY: &str = "GEMINI_API_KEY";
    /// API key too; wins over [`API_KEY`] when both are set, as in Google's own SDKs.
    pub const GOOGLE_API_KEY: &str = "GOOGLE_API_KEY";
    /// Base URL up to and including the version, e.g. `https://generativelanguage.googleapis.com/v1beta`.
    pub const BASE_URL: &str = "GEMINI_BASE_URL";
    /// Model name (default `gemini-2.5-flash`).
    pub const MODEL: &str = "GEMINI_MODEL";
    /// Per-attempt timeout in seconds (default 60).
    pub const TIMEOUT_SECS: &str = "GEMINI_TIMEOUT_SECS";
    /// Deadline of a whole call, retries included, in seconds (default 300).
    pub const DEADLINE_SECS: &str = "GEMINI_DEADLINE_SECS";
    /// Extra headers: `Name: value` pairs separated by newlines or `;`.
    pub const HEADERS: &str = "GEMINI_HEADERS";
    /// Thinking budget in tokens (`thinkingConfig.thinkingBudget`; 0 off, -1 dynamic).
    pub const THINKING_BUDGET: &str = "GEMINI_THINKING_BUDGET";
    /// Thinking level (`thinkingConfig.thinkingLevel`: `minimal`, `low`, `medium`, `high`).
    pub const THINKING_LEVEL: &str = "GEMINI_THINKING_LEVEL";
    /// `true`/`false`: ask for thought summaries (`thinkingConfig.includeThoughts`).
    pub const INCLUDE_THOUGHTS: &str = "GEMINI_INCLUDE_THOUGHTS";
}

/// The public endpoint of the Gemini API.
const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// Configuration of the Gemini backend.
///
/// ```
/// use toolwright_model_gateway::gemini::GeminiConfig;
/// use std::time::Duration;
/// let cfg = GeminiConfig::new("gemini-3-flash-preview")
///     .with_api_key("AIza...")
///     .with_thinking_level("low")
///     .with_include_thoughts(true)
///     .with_timeout(Duration::from_secs(120));
/// assert!(!format!("{cfg:?}").contains("AIza"));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct GeminiConfig {
    /// Base URL up to and including the API version (default
    /// `https://generativelanguage.googleapis.com/v1beta`).
    pub base_url: String,
    /// API key, sent as the `x-goog-api-key` header.
    pub api_key: Option<String>,
    /// Model name (`gemini-2.5-flash`; a leading `models/` is accepted).
    pub model: String,
    /// Extra headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Per attempt: the longest wait for one HTTP attempt's response headers, and between two
    /// stream events (default 60 s).
    pub timeout: Duration,
    /// The whole call, every attempt and wait included: no retry starts past it (default
    /// 300 s).
    pub deadline: Duration,
    /// Retry policy for 429, 5xx and connection errors. The wait is the `Retry-After` header's,
    /// or else the error body's `RetryInfo.retryDelay`, or else the backoff.
    pub retry: RetryPolicy,
    /// `thinkingConfig.thinkingBudget` in tokens (0 turns thinking off where the model allows,
    /// -1 lets the model decide); Gemini 2.5 models.
    pub thinking_budget: Option<i32>,
    /// `thinkingConfig.thinkingLevel` (`minimal`, `low`, `medium`, `high`); Gemini 3 models.
    /// Send either this or a budget, not both.
    pub thinking_level: Option<String>,
    /// `thinkingConfig.includeThoughts`: return thought summaries (as reasoning parts of kind
    /// `Summary`). Signatures come back either way.
    pub include_thoughts: bool,
}

impl std::fmt::Debug for GeminiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeminiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("deadline", &self.deadline)
            .field("retry", &self.retry)
            .field("thinking_budget", &self.thinking_budget)
            .field("thinking_level", &self.thinking_level)
            .field("include_thoughts", &self.include_thoughts)
            .finish()
    }
}

impl GeminiConfig {
    /// A configuration for `model` at Google's endpoint, with defaults for everything else.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            model: model.into(),
            headers: Vec::new(),
            timeout: Duration::from_secs(60),
            deadline: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            thinking_budget: None,
            thinking_level: None,
            include_thoughts: false,
        }
    }

    /// Reads the configuration from the environment (see [`env`](mod@env)); `None` when no key
    /// (`GOOGLE_API_KEY`, `GEMINI_API_KEY`) and no `GEMINI_BASE_URL` is set.
    pub fn from_env() -> Result<Option<Self>, ModelError> {
        Self::from_vars(&settings::process_env)
    }

    fn from_vars(var: Vars<'_>) -> Result<Option<Self>, ModelError> {
        let key = var(env::GOOGLE_API_KEY).or_else(|| var(env::API_KEY));
        let base = var(env::BASE_URL);
        if key.is_none() && base.is_none() {
            return Ok(None);
        }
        let mut cfg = Self::new(var(env::MODEL).unwrap_or_else(|| "gemini-2.5-flash".into()));
        cfg.api_key = key;
        if let Some(base) = base {
            cfg.base_url = base;
        }
        if let Some(t) = var(env::TIMEOUT_SECS) {
            cfg.timeout = settings::secs(env::TIMEOUT_SECS, &t)?;
        }
        if let Some(t) = var(env::DEADLINE_SECS) {
            cfg.deadline = settings::secs(env::DEADLINE_SECS, &t)?;
        }
        if let Some(b) = var(env::THINKING_BUDGET) {
            cfg.thinking_budget = Some(settings::tokens(
                env::THINKING_BUDGET,
                &b,
                " (0 off, -1 dynamic)",
            )?);
        }
        cfg.thinking_level = var(env::THINKING_LEVEL);
        if let Some(v) = var(env::INCLUDE_THOUGHTS) {
            cfg.include_thoughts = settings::flag(env::INCLUDE_THOUGHTS, &v)?;
        }
        if let Some(h) = var(env::HEADERS) {
            cfg.headers = settings::headers(env::HEADERS, &h)?;
        }
        Ok(Some(cfg))
    }

    /// Set the thinking budget in tokens ([`GeminiConfig::thinking_budget`]).
    pub fn with_thinking_budget(mut self, tokens: i32) -> Self {
        self.thinking_budget = Some(tokens);
        self
    }
    /// Set the thinking level ([`GeminiConfig::thinking_level`]).
    pub fn with_thinking_level(mut self, level: impl Into<String>) -> Self {
        self.thinking_level = Some(level.into());
        self
    }
    /// Ask (or not) for thought summaries ([`GeminiConfig::include_thoughts`]).
    pub fn with_include_thoughts(mut self, on: bool) -> Self {
        self.include_thoughts = on;
        self
    }

    /// `generationConfig.thinkingConfig`, when anything about thinking is configured.
    fn thinking_config(&self) -> Option<Value> {
        let mut t = Map::new();
        if let Some(b) = self.thinking_budget {
            t.insert("thinkingBudget".into(), json!(b));
        }
        if let Some(l) = &self.thinking_level {
            t.insert("thinkingLevel".into(), json!(l));
        }
        if self.include_thoughts {
            t.insert("includeThoughts".into(), json!(true));
        }
        (!t.is_empty()).then_some(Value::Object(t))
    }
}

connection_setters!(
    GeminiConfig,
    "Set the base URL (up to and including the API version)."
);

/// A [`ChatModel`] talking to the Gemini API.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolwright_core::ModelError> {
/// use futures::StreamExt;
/// use toolwright_model_gateway::gemini::{GeminiConfig, GeminiModel};
/// use toolwright_core::{ChatEvent, ChatModel, ChatRequest, Message};
/// let model = GeminiModel::new(GeminiConfig::new("gemini-2.5-flash").with_api_key("AIza..."))?;
/// let mut stream = model.stream(ChatRequest::new(vec![Message::user("Count to 3")])).await?;
/// while let Some(event) = stream.next().await {
///     if let ChatEvent::TextDelta(t) = event? { print!("{t}"); }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct GeminiModel {
    config: GeminiConfig,
    poster: Poster,
    headers: Vec<(String, String)>,
}

impl std::fmt::Debug for GeminiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeminiModel")
            .field("config", &self.config)
            .finish()
    }
}

impl GeminiModel {
    /// A client for this configuration.
    pub fn new(config: GeminiConfig) -> Result<Self, ModelError> {
        if config.model.trim().is_empty() {
            return Err(ModelError::Config(
                "the model name is empty: set GEMINI_MODEL or GeminiConfig::new(model)".into(),
            ));
        }
        if config.thinking_budget.is_some() && config.thinking_level.is_some() {
            return Err(ModelError::Config(
                "set a thinking budget (Gemini 2.5) or a thinking level (Gemini 3), not both"
                    .into(),
            ));
        }
        let mut headers = Vec::with_capacity(config.headers.len() + 1);
        if let Some(key) = &config.api_key {
            headers.push(("x-goog-api-key".to_owned(), key.clone()));
        }
        for (k, v) in &config.headers {
            reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| ModelError::Config(format!("header name {k:?}: {e}")))?;
            reqwest::header::HeaderValue::from_str(v)
                .map_err(|e| ModelError::Config(format!("header {k:?}: {e}")))?;
            headers.push((k.clone(), v.clone()));
        }
        let poster = Poster::new(config.retry.clone(), config.timeout, config.deadline)?;
        Ok(Self {
            config,
            poster,
            headers,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &GeminiConfig {
        &self.config
    }

    fn url(&self, request: &ChatRequest, stream: bool) -> String {
        let model = request.model.as_deref().unwrap_or(&self.config.model);
        let model = model.strip_prefix("models/").unwrap_or(model);
        let base = self.config.base_url.trim_end_matches('/');
        if stream {
            format!("{base}/models/{model}:streamGenerateContent?alt=sse")
        } else {
            format!("{base}/models/{model}:generateContent")
        }
    }

    fn body(&self, request: &ChatRequest) -> Result<Value, ModelError> {
        let extras = wire::Extras {
            thinking: self.config.thinking_config(),
        };
        wire::request_body(request, &extras)
    }
}

#[async_trait::async_trait]
impl ChatModel for GeminiModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new(self.config.model.clone(), true).with_provider("gcp.gemini")
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let body = self.body(&request)?;
        let r = self
            .poster
            .post(
                &self.url(&request, false),
                &self.headers,
                &body,
                wire::api_error,
            )
            .await?;
        let v = tokio::time::timeout(self.config.timeout, json_body(r))
            .await
            .map_err(|_| ModelError::Timeout(self.config.timeout))??;
        wire::parse_response(&v)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let body = self.body(&request)?;
        let r = self
            .poster
            .post(
                &self.url(&request, true),
                &self.headers,
                &body,
                wire::api_error,
            )
            .await?;
        let state = StreamState {
            events: sse(r, self.config.timeout),
            reader: Some(wire::Reader::new()),
            pending: VecDeque::new(),
        };
        Ok(Box::pin(futures::stream::unfold(state, StreamState::next)))
    }
}

/// A stream in flight: server-sent events in, the seam's events out.
struct StreamState {
    events: SseStream,
    /// `None` once the stream has ended (with `Finish` or an error).
    reader: Option<wire::Reader>,
    pending: VecDeque<Result<ChatEvent, ModelError>>,
}

impl StreamState {
    async fn next(mut self) -> Option<(Result<ChatEvent, ModelError>, Self)> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some((ev, self));
            }
            let mut reader = self.reader.take()?;
            let mut out = Vec::new();
            let end = match self.events.next().await {
                Some(Ok(event)) => match reader.push_data(&event.data, &mut out) {
                    Ok(()) => {
                        self.reader = Some(reader);
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
                Some(Err(ModelError::StreamInterrupted { detail, .. })) => {
                    Err(ModelError::StreamInterrupted {
                        detail,
                        partial_text: reader.text().to_owned(),
                    })
                }
                Some(Err(e)) => Err(e),
                None => reader.finish(true, &mut out),
            };
            self.pending.extend(out.into_iter().map(Ok));
            if let Err(e) = end {
                self.pending.push_back(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod from_env_tests {
    use super::*;
    use crate::settings::vars;

    #[test]
    fn every_variable_is_read_and_a_bad_one_is_named() {
        assert!(GeminiConfig::from_vars(&vars(&[])).unwrap().is_none());
        let cfg = GeminiConfig::from_vars(&vars(&[
            (env::API_KEY, "gemini-key"),
            (env::GOOGLE_API_KEY, "google-key"),
            (env::THINKING_BUDGET, "-1"),
            (env::THINKING_LEVEL, "low"),
            (env::INCLUDE_THOUGHTS, "yes"),
            (env::HEADERS, "X-Goog-User-Project: p"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            cfg.api_key.as_deref(),
            Some("google-key"),
            "GOOGLE_API_KEY first"
        );
        assert_eq!(cfg.model, "gemini-2.5-flash");
        assert_eq!(cfg.thinking_budget, Some(-1));
        assert_eq!(cfg.thinking_level.as_deref(), Some("low"));
        assert!(cfg.include_thoughts);
        assert_eq!(cfg.headers.len(), 1);
        for (name, bad) in [
            (env::THINKING_BUDGET, "1.5"),
            (env::INCLUDE_THOUGHTS, "perhaps"),
            (env::TIMEOUT_SECS, "-3"),
        ] {
            let e =
                GeminiConfig::from_vars(&vars(&[(env::API_KEY, "k"), (name, bad)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }
}
