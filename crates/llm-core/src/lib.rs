//! # llm-core — the shared vocabulary and the seams
//!
//! What every layer and every backend of the toolkit agrees on, and nothing more: no HTTP
//! client, no async runtime (only `futures`' traits), no model weights.
//!
//! * Data: [`Message`], [`ToolCall`], [`InvalidToolCall`], [`ToolSpec`], [`ChatRequest`],
//!   [`ChatResponse`], [`ChatEvent`], [`FinishReason`], [`Usage`].
//! * The model seam: [`ChatModel`] (`chat`, and `stream`, which defaults to the whole response
//!   as one stream), [`ModelInfo`], [`ModelError`]. Backends implement it: `model-gateway`
//!   (OpenAI-compatible HTTP), `local-model` (an embedded model), or your own.
//! * The tool seam: [`Tool`], [`ToolProvider`], [`ToolError`], [`ToolContext`]. Built-in tools,
//!   skills and MCP services all reach the dispatcher through it.
//! * The blob seam: [`BlobStore`] (bytes → a [`ResourceRef`] and back, bounded), where a
//!   tool result's media too large to send inline is kept; the model sees a [`Part::Resource`].
//! * The embedding seam: [`Embedder`] (texts → vectors, [`EmbedKind`] query or document), for
//!   tool search by meaning.
//! * Rules shared by every source: [`ToolCallAssembler`] (streamed deltas → calls),
//!   [`normalize_schema`], [`is_valid_tool_name`], [`cap_result`].
//! * Token counts: [`TokenCounter`] (plug in a tokenizer) and [`EstimateCounter`] (an honest
//!   estimate for any model, no tables); `context-engine` adds tiktoken's exact counts.
//!
//! A backend of your own is one `impl`:
//!
//! ```
//! use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, FinishReason, ModelError, ModelInfo, Message};
//! struct Echo;
//! #[async_trait]
//! impl ChatModel for Echo {
//!     fn info(&self) -> ModelInfo { ModelInfo::new("echo", true) }
//!     async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
//!         let last = req.messages.last().map(|m| m.content().to_owned()).unwrap_or_default();
//!         Ok(ChatResponse::new(last, vec![], FinishReason::Stop, None))
//!     }
//! }
//! # futures::executor::block_on(async {
//! let r = Echo.chat(ChatRequest::new(vec![Message::user("hi")])).await.unwrap();
//! assert_eq!(r.content, "hi");
//! # });
//! ```

mod assemble;
mod blob;
mod cap;
mod content;
mod embed;
mod error;
mod model;
mod pricing;
mod schema;
pub mod telemetry;
mod tokens;
mod tool;
mod types;

pub use assemble::ToolCallAssembler;
pub use async_trait::async_trait;
pub use blob::{BLOB_URI_PREFIX, Blob, BlobError, BlobStore, ResourceRef};
pub use cap::{DEFAULT_MAX_RESULT_BYTES, cap_result};
pub use content::{
    CachePolicy, CacheTtl, ContentError, MAX_INLINE_MEDIA_BYTES, Media, MediaSource, Part,
    Reasoning, ReasoningKind, lower_tool_parts,
};
pub use embed::{EmbedKind, Embedder};
pub use error::ModelError;
pub use model::{ChatModel, ChatStream, ModelInfo, collect_stream, response_stream};
pub use pricing::{Price, PriceError, PriceTable};
pub use schema::{MAX_TOOL_NAME, is_valid_tool_name, normalize_schema};
pub use tokens::{
    EstimateCounter, REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE, TOOL_CALL_OVERHEAD, TokenCounter,
    media_tokens,
};
pub use tool::{
    ApprovalGate, Caller, CallerHandle, Elicited, LogLevel, Tool, ToolContext, ToolError,
    ToolErrorKind, ToolOutput, ToolProvider, TurnInfo, first_sentence,
};
pub use types::{
    ChatEvent, ChatRequest, ChatResponse, FinishReason, InvalidToolCall, Message, ResponseFormat,
    Role, ToolCall, ToolChoice, ToolSpec, Usage,
};
