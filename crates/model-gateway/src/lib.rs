//! # model-gateway — Stage 0
//!
//! Provider-neutral chat data ([`Message`], [`ToolCall`], [`ToolSpec`], [`ChatRequest`],
//! [`ChatResponse`], [`ChatEvent`]), one narrow trait ([`ChatModel`]) and an OpenAI-compatible
//! backend ([`OpenAiModel`], on `async-openai`) with streaming, tool calls and retries.
//! Nothing above this crate needs to know `async-openai`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), model_gateway::GatewayError> {
//! use futures::StreamExt;
//! use model_gateway::{ChatEvent, ChatModel, ChatRequest, Message, OpenAiConfig, OpenAiModel};
//! let cfg = OpenAiConfig::from_env()?.unwrap_or_else(|| OpenAiConfig::new("gpt-4o-mini"));
//! let model = OpenAiModel::new(cfg)?;
//! let mut stream = model.stream(ChatRequest::new(vec![Message::user("Count to 3")])).await?;
//! while let Some(event) = stream.next().await {
//!     if let ChatEvent::TextDelta(t) = event? { print!("{t}"); }
//! }
//! # Ok(()) }
//! ```

mod assemble;
mod error;
#[cfg(feature = "local")]
pub mod local;
mod model;
mod openai;
mod types;

pub use assemble::{ToolCallAssembler, parse_arguments};
pub use async_trait::async_trait;
pub use error::GatewayError;
pub use model::{ChatModel, ChatStream, ModelInfo, collect_stream, response_stream};
pub use openai::{OpenAiConfig, OpenAiModel, RetryPolicy, env};
pub use types::{
    ChatEvent, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role, ToolCall,
    ToolChoice, ToolSpec, Usage,
};
