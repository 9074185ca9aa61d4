//! # mcp-bridge — Stage 4
//!
//! MCP services over stdio, built on `rmcp` (the official Rust MCP SDK). One file per concern:
//!
//! - **Registry and configuration** (M5, `registry.rs`, `config`): [`McpBridge::register`],
//!   [`McpBridge::update`], [`McpBridge::remove`], [`McpBridge::services`]; persisted in the
//!   `mcpServers` JSON format that Claude Desktop and Cursor use ([`ConfigFile`]).
//! - **Lifecycle and status** (`lifecycle.rs`, `connection.rs`, `recovery`): [`McpBridge::start`],
//!   [`McpBridge::start_in_background`] (off the critical path: a turn that needs no MCP tool
//!   never waits, one that needs a starting service waits at most its startup timeout),
//!   [`McpBridge::stop`], [`McpBridge::restart`]; a crashed server restarts on the next call
//!   that needs it, with backoff and a bounded number of attempts; [`ServiceStatus`] `starting`,
//!   `running`, `stopped` or `error` with the last error. Each server runs in its own process group with a cleared
//!   environment, its stderr goes to `tracing`, its stdout is checked line by line, and
//!   stopping ends the whole group (`process`).
//! - **Discovery** (M1, `discovery.rs`, `catalog.rs`): [`McpBridge::tools`] lists running
//!   services' tools only, cached and refreshed on `notifications/tools/list_changed`; names
//!   are namespaced `service__tool` (`names`); schemas are normalised
//!   ([`toolwright_core::normalize_schema`]).
//! - **Intent recognition, layer 1** (M2): `intent`.
//! - **Tiered descriptions** (M3, `inject`, `descriptions.rs`): [`McpBridge::prompt_section`]
//!   (level 1), [`DESCRIBE_TOOL`] (level 2), [`McpBridge::advertised_tools`] (what a request
//!   shows).
//! - **Tool search** (`search`): past a token budget a turn shows [`SEARCH_TOOL`] instead of
//!   the level-1 list; the model finds tools by words (English or Chinese, BM25 from the
//!   `tool-search` crate), and the hits become callable ([`McpBridge::set_tool_search`]). With
//!   an encoder ([`McpBridge::set_semantic_search`]) it finds them by meaning too: BM25 fused
//!   with the tools' vectors, cached per tool text and saved between runs (`vectors.rs`).
//! - **Elicitation** ([`elicitation`]): a server's questions for the person go to the
//!   application's [`elicitation::Elicitor`] (both protocol revisions), declined when none is
//!   attached, cancelled past a time limit.
//! - **Execution** (M4, M6, `execution.rs`, `provider.rs`, `protocol`): [`McpBridge`]
//!   implements [`toolwright_core::ToolProvider`]; every failure is a [`toolwright_core::ToolError`] the
//!   model can act on, so the conversation goes on.
//!
//! Module dependencies go one way: `names`, `config`, `error`, `process` → `catalog`,
//! `connection`, `turns` → `intent` → `inject`, `search` → `bridge` (the shared state) → `registry`,
//! `lifecycle`, `discovery` → `descriptions` → `execution` → `provider`.

mod bridge;
mod catalog;
mod config;
mod connection;
mod descriptions;
mod discovery;
pub mod elicitation;
mod error;
mod execution;
#[cfg(feature = "http")]
mod http;
mod inject;
mod intent;
mod learning;
mod lifecycle;
mod names;
mod notices;
#[cfg(feature = "http")]
pub mod oauth;
mod offers;
#[cfg(feature = "http")]
mod principals;
mod process;
mod protocol;
mod provider;
mod recovery;
mod registry;
mod sampling;
mod search;
mod slot;
mod subscriptions;
mod sync;
#[cfg(feature = "http")]
mod tls;
mod trace;
mod turns;
mod vectors;

pub use bridge::McpBridge;
pub use catalog::McpTool;
pub use config::{
    ApprovalMode, ConfigFile, DEFAULT_CALL_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, RequireApproval,
    ServiceConfig, ServiceUpdate, ToolNames,
};
pub use error::BridgeError;
pub use inject::{DESCRIBE_TOOL, SECTION_NAME};
pub use intent::{
    Intent, IntentChain, IntentRecognizer, KeywordRecognizer, McpIntent, McpRecognizer, McpTrigger,
};
pub use learning::LearnFromUse;
pub use notices::{MAX_NOTICE_TEXT, McpNotice, NOTICE_BUFFER};
pub use offers::{
    CompletionOf, MAX_LISTED, MAX_PAGES, McpPrompt, McpPromptArgument, McpResource,
    McpResourceTemplate,
};
pub use process::INHERITED_ENV;
pub use protocol::ToolCallProtocol;
pub use registry::{ServiceInfo, ServiceStatus};
pub use sampling::Sampling;
pub use search::{
    SEARCH_TOOL, SearchJudge, SearchResult, SemanticSearch, ToolSearchConfig, tool_doc,
};
pub use subscriptions::{MAX_PERSON_SUBSCRIPTIONS, MAX_SUBSCRIPTIONS, Subscriber};
// For this crate's benchmarks (what a turn's MCP section and the describe tool cost in
// tokens); not part of the API.
#[doc(hidden)]
pub use inject::{describe_tool_spec, level1_section};
