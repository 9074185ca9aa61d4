//! Anthropic's Messages API (`POST {base}/v1/messages`), natively: thinking blocks replayed
//! with their signatures, tool results with images and documents, prompt caching with
//! `cache_control`, and the streamed events as they come.
//!
//! A thin wire of our own on `reqwest` and `serde_json` (see `docs/backends-anthropic.md`
//! for why not a crate), sharing the gateway's POST-with-retries and SSE reader.

mod request;
mod response;

use std::time::Duration;

use futures::StreamExt;

use crate::http::{Poster, SseStream, json_body, sse};
use crate::settings::{self, Vars, connection_setters};
use crate::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError, ModelInfo, RetryPolicy,
};
use toolwright_core::CacheTtl;

/// The `anthropic-version` header this wire speaks.
const API_VERSION: &str = "2023-06-01";

/// Configuration of the Anthropic backend.
///
/// ```
/// use toolwright_model_gateway::anthropic::AnthropicConfig;
/// let cfg = AnthropicConfig::new("claude-sonnet-4-5")
///     .with_api_key("sk-ant-...")
///     .with_thinking(2048)
///     .with_beta("interleaved-thinking-2025-05-14");
/// assert!(!format!("{cfg:?}").contains("sk-ant"));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct AnthropicConfig {
    /// Base URL, without `/v1` (default `https://api.anthropic.com`).
    pub base_url: String,
    /// API key, sent as `x-api-key`.
    pub api_key: Option<String>,
    /// Model name (`claude-sonnet-4-5`, …).
    pub model: String,
    /// Extra headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Per attempt: the longest wait for a response's headers, and between two stream
    /// events (default 60 s). Anthropic sends `ping` events while the model works.
    pub timeout: Duration,
    /// The whole call, every attempt and wait included (default 300 s).
    pub deadline: Duration,
    /// Retries of 429, 5xx (529 `overloaded_error` among them) and connection errors,
    /// honouring `Retry-After`.
    pub retry: RetryPolicy,
    /// Beta features, sent as one `anthropic-beta` header (comma-separated).
    pub beta: Vec<String>,
    /// Extended thinking's `budget_tokens` (at least 1024); `None` leaves thinking off.
    /// With thinking on no `temperature` is sent (the API takes only its default), and
    /// only `tool_choice` auto or none is accepted.
    pub thinking: Option<u32>,
    /// `max_tokens` for a request that sets none (the API requires it; default 4096).
    /// With thinking on it must exceed the budget; when it does not, the budget plus this
    /// is sent.
    pub max_tokens: u32,
    /// The TTL of the cache breakpoints [`CachePolicy::Auto`](toolwright_core::CachePolicy)
    /// places (default five minutes).
    pub cache_ttl: CacheTtl,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
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
            .field("beta", &self.beta)
            .field("thinking", &self.thinking)
            .field("max_tokens", &self.max_tokens)
            .field("cache_ttl", &self.cache_ttl)
            .finish()
    }
}

/// The environment variables [`AnthropicConfig::from_env`] reads.
pub mod env {
    /// API key (`x-api-key`).
    pub const API_KEY: &str = "ANTHROPIC_API_KEY";
    /// Base URL without `/v1` (default `https://api.anthropic.com`).
    pub const BASE_URL: &str = "ANTHROPIC_BASE_URL";
    /// Model name.
    pub const MODEL: &str = "ANTHROPIC_MODEL";
    /// Beta features, comma-separated (`anthropic-beta`).
    pub const BETA: &str = "ANTHROPIC_BETA";
    /// Extended thinking's budget in tokens; unset or `0` leaves thinking off.
    pub const THINKING_BUDGET: &str = "ANTHROPIC_THINKING_BUDGET";
    /// `max_tokens` for requests that set none (default 4096).
    pub const MAX_TOKENS: &str = "ANTHROPIC_MAX_TOKENS";
    /// Per-attempt timeout in seconds (default 60).
    pub const TIMEOUT_SECS: &str = "ANTHROPIC_TIMEOUT_SECS";
    /// Deadline of a whole call, retries included, in seconds (default 300).
    pub const DEADLINE_SECS: &str = "ANTHROPIC_DEADLINE_SECS";
    /// Extra headers: `Name: value` pairs separated by newlines or `;`.
    pub const HEADERS: &str = "ANTHROPIC_HEADERS";
}

/// The default model of [`AnthropicConfig::from_env`] when `ANTHROPIC_MODEL` is unset.
const DEFAULT_MODEL: &str = "claude-sonnet-4-5";

impl AnthropicConfig {
    /// A configuration for `model` at api.anthropic.com, with defaults for the rest.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: "https://api.anthropic.com".into(),
            api_key: None,
            model: model.into(),
            headers: Vec::new(),
            timeout: Duration::from_secs(60),
            deadline: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            beta: Vec::new(),
            thinking: None,
            max_tokens: 4096,
            cache_ttl: CacheTtl::Short,
        }
    }

    /// Reads the configuration from the environment (see [`env`](mod@env)); `None` when neither
    /// `ANTHROPIC_API_KEY` nor `ANTHROPIC_BASE_URL` is set.
    pub fn from_env() -> Result<Option<Self>, ModelError> {
        Self::from_vars(&settings::process_env)
    }

    fn from_vars(var: Vars<'_>) -> Result<Option<Self>, ModelError> {
        let key = var(env::API_KEY);
        let base = var(env::BASE_URL);
        if key.is_none() && base.is_none() {
            return Ok(None);
        }
        let mut cfg = Self::new(var(env::MODEL).unwrap_or_else(|| DEFAULT_MODEL.into()));
        cfg.api_key = key;
        if let Some(base) = base {
            cfg.base_url = base;
        }
        if let Some(b) = var(env::BETA) {
            cfg.beta = b
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
        }
        if let Some(t) = var(env::THINKING_BUDGET) {
            let budget: u32 = settings::tokens(env::THINKING_BUDGET, &t, " (0 turns it off)")?;
            cfg.thinking = (budget > 0).then_some(budget);
        }
        if let Some(t) = var(env::MAX_TOKENS) {
            cfg.max_tokens = settings::tokens(env::MAX_TOKENS, &t, "")?;
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

    /// Turn on a beta feature (`anthropic-beta`).
    pub fn with_beta(mut self, feature: impl Into<String>) -> Self {
        self.beta.push(feature.into());
        self
    }
    /// Turn on extended thinking with this budget ([`AnthropicConfig::thinking`]).
    pub fn with_thinking(mut self, budget_tokens: u32) -> Self {
        self.thinking = Some(budget_tokens);
        self
    }
    /// Set `max_tokens` for requests that set none ([`AnthropicConfig::max_tokens`]).
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }
    /// Set the TTL of automatic cache breakpoints.
    pub fn with_cache_ttl(mut self, ttl: CacheTtl) -> Self {
        self.cache_ttl = ttl;
        self
    }
}

connection_setters!(AnthropicConfig, "Set the base URL (without `/v1`).");

/// A [`ChatModel`] talking to Anthropic's Messages API.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolwright_core::ModelError> {
/// use toolwright_model_gateway::anthropic::{AnthropicConfig, AnthropicModel};
/// use toolwright_core::{ChatModel, ChatRequest, Message};
/// let cfg = AnthropicConfig::from_env()?.unwrap_or_else(|| AnthropicConfig::new("claude-sonnet-4-5"));
/// let model = AnthropicModel::new(cfg)?;
/// let answer = model.chat(ChatRequest::new(vec![Message::user("Say hi")])).await?;
/// println!("{}", answer.content);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AnthropicModel {
    config: AnthropicConfig,
    poster: Poster,
    url: String,
    headers: Vec<(String, String)>,
}

impl std::fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("config", &self.config)
            .finish()
    }
}

impl AnthropicModel {
    /// A client for this configuration.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        if config.model.trim().is_empty() {
            return Err(ModelError::Config(format!(
                "the model name is empty: set {} or AnthropicConfig::new(model)",
                env::MODEL
            )));
        }
        if let Some(budget) = config.thinking
            && budget < 1024
        {
            return Err(ModelError::Config(format!(
                "the thinking budget is {budget} tokens; Anthropic takes at least 1024"
            )));
        }
        let mut headers = Vec::with_capacity(config.headers.len() + 3);
        if let Some(key) = &config.api_key {
            headers.push(("x-api-key".to_owned(), key.clone()));
        }
        headers.push(("anthropic-version".to_owned(), API_VERSION.to_owned()));
        if !config.beta.is_empty() {
            headers.push(("anthropic-beta".to_owned(), config.beta.join(",")));
        }
        for (k, v) in &config.headers {
            reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| ModelError::Config(format!("header name {k:?}: {e}")))?;
            reqwest::header::HeaderValue::from_str(v)
                .map_err(|e| ModelError::Config(format!("header {k:?}: {e}")))?;
            headers.push((k.clone(), v.clone()));
        }
        let poster = Poster::new(config.retry.clone(), config.timeout, config.deadline)?;
        let url = format!("{}/v1/messages", config.base_url.trim_end_matches('/'));
        Ok(Self {
            config,
            poster,
            url,
            headers,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    fn options(&self) -> request::Options<'_> {
        request::Options {
            model: &self.config.model,
            max_tokens: self.config.max_tokens,
            thinking: self.config.thinking,
            cache_ttl: self.config.cache_ttl,
        }
    }

    async fn post(&self, body: &serde_json::Value) -> Result<reqwest::Response, ModelError> {
        self.poster
            .post(&self.url, &self.headers, body, response::api_error)
            .await
            .map_err(|e| match e {
                ModelError::Connect(m) => {
                    ModelError::Connect(format!("{m} [the base URL comes from {}]", env::BASE_URL))
                }
                other => other,
            })
    }
}

#[async_trait::async_trait]
impl ChatModel for AnthropicModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new(self.config.model.clone(), true).with_provider("anthropic")
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let body = request::request_body(&request, &self.options(), false)?;
        let deadline = self.config.deadline;
        let value = tokio::time::timeout(deadline, async {
            let r = self.post(&body).await?;
            json_body(r).await
        })
        .await
        .map_err(|_| ModelError::Timeout(deadline))??;
        response::parse_response(&value)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let body = request::request_body(&request, &self.options(), true)?;
        let deadline = self.config.deadline;
        let r = tokio::time::timeout(deadline, self.post(&body))
            .await
            .map_err(|_| ModelError::Timeout(deadline))??;
        Ok(events(sse(r, self.config.timeout)))
    }
}

/// The [`ChatEvent`]s of a stream of SSE events.
fn events(inner: SseStream) -> ChatStream {
    let state = (inner, response::StreamParser::default(), false);
    Box::pin(futures::stream::unfold(
        state,
        |(mut inner, mut parser, mut done)| async move {
            loop {
                if let Some(ev) = parser.pending.pop_front() {
                    return Some((ev, (inner, parser, done)));
                }
                if done {
                    return None;
                }
                match inner.next().await {
                    Some(Ok(e)) => {
                        if let Err(err) = parser.on_event(&e.event, &e.data) {
                            done = true;
                            return Some((Err(err), (inner, parser, done)));
                        }
                        // After message_stop nothing more is read: the answer is whole.
                        done = parser.is_done();
                    }
                    Some(Err(err)) => {
                        done = true;
                        let err = match err {
                            ModelError::StreamInterrupted { detail, .. } => {
                                ModelError::StreamInterrupted {
                                    detail,
                                    partial_text: parser.take_text(),
                                }
                            }
                            other => other,
                        };
                        return Some((Err(err), (inner, parser, done)));
                    }
                    None => {
                        done = true;
                        parser.on_end();
                    }
                }
            }
        },
    ))
}

/// Runs the stream parser over `(event, data)` pairs, as a stream would give them, and
/// returns what it gives. For this crate's fuzz target and benchmarks; not part of the API.
#[doc(hidden)]
pub fn parse_sse_events<'a>(
    events: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Result<ChatEvent, ModelError>> {
    let mut parser = response::StreamParser::default();
    let mut out = Vec::new();
    for (event, data) in events {
        let r = parser.on_event(event, data);
        out.extend(parser.pending.drain(..));
        if let Err(e) = r {
            out.push(Err(e));
            return out;
        }
        if parser.is_done() {
            return out;
        }
    }
    parser.on_end();
    out.extend(parser.pending.drain(..));
    out
}

#[cfg(test)]
mod from_env_tests {
    use super::*;
    use crate::settings::vars;

    #[test]
    fn every_variable_is_read_and_a_bad_one_is_named() {
        assert!(AnthropicConfig::from_vars(&vars(&[])).unwrap().is_none());
        let cfg = AnthropicConfig::from_vars(&vars(&[
            (env::API_KEY, "sk-ant-x"),
            (env::BETA, "a-1, ,b-2"),
            (env::THINKING_BUDGET, "2048"),
            (env::MAX_TOKENS, "8192"),
            (env::TIMEOUT_SECS, "1.5"),
            (env::HEADERS, "X-A: 1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(cfg.model, DEFAULT_MODEL);
        assert_eq!(cfg.beta, ["a-1", "b-2"]);
        assert_eq!((cfg.thinking, cfg.max_tokens), (Some(2048), 8192));
        assert_eq!(cfg.timeout, Duration::from_millis(1500));
        assert_eq!(cfg.headers, [("X-A".to_owned(), "1".to_owned())]);
        let off =
            AnthropicConfig::from_vars(&vars(&[(env::API_KEY, "k"), (env::THINKING_BUDGET, "0")]))
                .unwrap()
                .unwrap();
        assert_eq!(off.thinking, None);
        for (name, bad) in [
            (env::THINKING_BUDGET, "lots"),
            (env::MAX_TOKENS, "-1"),
            (env::DEADLINE_SECS, "never"),
            (env::HEADERS, "no colon here"),
        ] {
            let e =
                AnthropicConfig::from_vars(&vars(&[(env::API_KEY, "k"), (name, bad)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }
}
