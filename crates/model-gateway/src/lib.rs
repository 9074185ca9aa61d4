//! # model-gateway — Stage 0
//!
//! The OpenAI-compatible backend ([`OpenAiModel`], on `async-openai`) with streaming, tool
//! calls, retries and timeouts. The provider-neutral data ([`Message`], [`ToolCall`],
//! `ToolSpec`, [`ChatRequest`], [`ChatResponse`], [`ChatEvent`]) and the one narrow trait
//! ([`ChatModel`]) live in `llm-core` and are re-exported here. Nothing above the backends
//! needs to know `async-openai`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolwright_core::ModelError> {
//! use futures::StreamExt;
//! use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};
//! use toolwright_core::{ChatEvent, ChatModel, ChatRequest, Message};
//! let cfg = OpenAiConfig::from_env()?.unwrap_or_else(|| OpenAiConfig::new("gpt-4o-mini"));
//! let model = OpenAiModel::new(cfg)?;
//! let mut stream = model.stream(ChatRequest::new(vec![Message::user("Count to 3")])).await?;
//! while let Some(event) = stream.next().await {
//!     if let ChatEvent::TextDelta(t) = event? { print!("{t}"); }
//! }
//! # Ok(()) }
//! ```

// The native backends' POST-with-retries and SSE; the OpenAI backends share its retry rule.
#[cfg_attr(not(any(feature = "anthropic", feature = "gemini")), allow(dead_code))]
mod http;
mod openai;
#[cfg(feature = "openai-responses")]
mod responses;
mod retry;
mod settings;

// Anthropic's Messages API, natively.
#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub mod anthropic;

// Google Gemini's generateContent API, natively.
#[cfg(feature = "gemini")]
#[cfg_attr(docsrs, doc(cfg(feature = "gemini")))]
pub mod gemini;

// reqwest on rustls without a built-in provider (the workspace's `reqwest-ring`): no aws-lc C
// in the build. Named `reqwest` here, as everywhere else.
extern crate reqwest_ring as reqwest;

/// Installs rustls' *ring* provider as the process's default when none is installed yet.
///
/// reqwest (built without its aws-lc provider) panics in `Client::build` when the process
/// has no provider; [`OpenAiModel::new`] and [`OpenAiEmbedder::new`] call this first, so a
/// program needs it only to build its own reqwest client before either. A provider the program
/// installed itself is kept.
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one in between, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

// The shared vocabulary lives in `llm-core`; it is re-exported here so code written against
// `toolwright_core::Message` and friends keeps compiling.
pub use openai::{OpenAiConfig, OpenAiEmbedder, OpenAiModel, RetryPolicy, env};
#[cfg(feature = "openai-responses")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai-responses")))]
pub use responses::{OpenAiResponsesModel, ResponsesOptions, env as responses_env};
pub(crate) use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, Message, ModelError,
    ModelInfo, ResponseFormat, ToolCall, ToolChoice, Usage,
};

/// `FinishReason` to report when a provider sent none: tool calls win.
pub(crate) fn default_finish(has_tool_calls: bool) -> FinishReason {
    if has_tool_calls {
        FinishReason::ToolCalls
    } else {
        FinishReason::Stop
    }
}
