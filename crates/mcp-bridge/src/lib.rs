//! # mcp-bridge — Stage 4
//!
//! MCP services over stdio, built on `rmcp` (the official Rust MCP SDK):
//!
//! - **Registry and configuration** (M5): [`McpBridge::register`], [`McpBridge::update`],
//!   [`McpBridge::remove`], [`McpBridge::services`]; persisted in the `mcpServers` JSON format
//!   that Claude Desktop and Cursor use ([`ConfigFile`]).
//! - **Lifecycle and status**: [`McpBridge::start`], [`McpBridge::stop`], [`McpBridge::restart`];
//!   [`ServiceStatus`] `running`, `stopped` or `error` with the last error. Each server runs in
//!   its own process group with a cleared environment, its stderr goes to `tracing`, its stdout
//!   is checked line by line, and stopping ends the whole group ([`process`]).
//! - **Discovery** (M1): [`McpBridge::tools`] lists running services' tools only, cached and
//!   refreshed on `notifications/tools/list_changed`; names are namespaced `service__tool`
//!   ([`names`]); schemas are normalised.
//! - **Intent recognition, layer 1** (M2): [`intent`].
//! - **Tiered descriptions** (M3): [`inject`], [`McpBridge::prompt_section`].
//! - **Execution** (M4, M6): [`McpBridge`] implements [`tool_system::ToolProvider`]; every
//!   failure is a [`tool_system::ToolError`] the model can act on, so the conversation goes on.

mod bridge;
pub mod config;
mod error;
pub mod inject;
pub mod intent;
pub mod names;
pub mod process;
pub mod protocol;

pub use bridge::{
    DEFAULT_MAX_RESULT_BYTES, DESCRIBE_TOOL, McpBridge, McpTool, ServiceInfo, ServiceStatus,
};
pub use config::{ConfigFile, ServiceConfig, ServiceUpdate};
pub use error::BridgeError;
pub use inject::SECTION_NAME;
pub use intent::{Intent, IntentChain, IntentRecognizer, McpIntent, McpTrigger};
pub use protocol::ToolCallProtocol;
