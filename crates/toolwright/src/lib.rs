//! # toolwright — LLM tool calling in Rust, one layer at a time
//!
//! This crate is the front door: each layer of the toolkit is a module behind a feature, and
//! [`prelude`] holds the dozen names an agent needs. Every layer is also a crate of its own
//! (`toolwright-tool-system`, `toolwright-mcp-bridge`, …) for a project that wants just one.
//!
//! | module | feature | crate | what it gives you |
//! |---|---|---|---|
//! | [`core`] | always | `toolwright-core` | messages, tool calls, requests, stream events; the `ChatModel`, `Tool` and `ToolProvider` seams |
//! | `gateway` | `gateway` (default) | `toolwright-model-gateway` | OpenAI-compatible servers: OpenAI, vLLM, llama.cpp, Ollama, DeepSeek, Qwen |
//! | `context` | `context` (default) | `toolwright-context-engine` | sessions, prompt sections, the token budget; `sqlite`, `postgres` stores |
//! | `output` | `output` (default) | `toolwright-output-control` | JSON extraction and validation, tool decisions, the `<tool_action>` parser |
//! | `tools` | `tools` (default) | `toolwright-tool-system` | tools, registry, dispatcher, call protocols, approvals, the `Agent` |
//! | `mcp`, `search` | `mcp` (default) | `toolwright-mcp-bridge`, `toolwright-tool-search` | MCP servers (stdio, Streamable HTTP) as tools; tool search |
//! | `skills`, `sandbox` | `skills` | `toolwright-skills`, `toolwright-sandbox` | SKILL.md tools in a sandbox |
//! | `code_mode` | `code-mode` | `toolwright-code-mode` | the model's scripts call tools as functions |
//! | `messaging` | `messaging` | `toolwright-messaging` | `send_message` with quick replies, the message bus |
//! | `panel` | `panel` | `toolwright-chat-panel` | the web chat panel |
//! | `local_model` | `local-model` | `toolwright-local-model` | the embedded CPU model and sentence encoder |
//! | `telemetry` | `telemetry` | `toolwright-telemetry` | OpenTelemetry export of every layer's spans |
//!
//! The default features make an agent against an OpenAI-compatible server, with MCP servers;
//! they build no database driver, browser driver or sandbox.
//!
//! ```no_run
//! use toolwright::prelude::*;
//!
//! /// The arguments of get_weather.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct City {
//!     /// The city, e.g. "Paris".
//!     city: String,
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_MODEL, or OpenAI's gpt-4o-mini.
//! let config = OpenAiConfig::from_env()?.unwrap_or_else(|| OpenAiConfig::new("gpt-4o-mini"));
//! let weather = FnTool::typed("get_weather", "Current weather for a city", |args: City, _| async move {
//!     Ok(serde_json::json!({"city": args.city, "sky": "clear", "celsius": 21}))
//! });
//! let agent = Agent::builder(OpenAiModel::new(config)?).tool(weather).build()?;
//! let out = agent.run("session-1", "What is the weather in Paris?").await?;
//! println!("{}", out.answer);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

/// The shared vocabulary and the seams every layer meets at (`toolwright-core`).
pub use toolwright_core as core;

/// Models behind OpenAI-compatible servers (`toolwright-model-gateway`).
#[cfg(feature = "gateway")]
pub use toolwright_model_gateway as gateway;

/// Sessions, prompt sections, the token budget and the session stores (`toolwright-context-engine`).
#[cfg(feature = "context")]
pub use toolwright_context_engine as context;

/// Reading model output: JSON, tool decisions, `<tool_action>` tags (`toolwright-output-control`).
#[cfg(feature = "output")]
pub use toolwright_output_control as output;

/// Tools, the registry, the dispatcher, the call protocols and the `Agent` (`toolwright-tool-system`).
#[cfg(feature = "tools")]
pub use toolwright_tool_system as tools;

/// MCP servers as tools (`toolwright-mcp-bridge`).
#[cfg(feature = "mcp")]
pub use toolwright_mcp_bridge as mcp;

/// Search over tool descriptions (`toolwright-tool-search`).
#[cfg(feature = "mcp")]
pub use toolwright_tool_search as search;

/// Skills: SKILL.md tools run in the sandbox (`toolwright-skills`).
#[cfg(feature = "skills")]
pub use toolwright_skills as skills;

/// One untrusted program per call, under grants (`toolwright-sandbox`).
#[cfg(feature = "skills")]
pub use toolwright_sandbox as sandbox;

/// Code mode: the model's scripts call tools as functions (`toolwright-code-mode`).
#[cfg(feature = "code-mode")]
pub use toolwright_code_mode as code_mode;

/// `send_message` with quick replies, and the message bus (`toolwright-messaging`).
#[cfg(feature = "messaging")]
pub use toolwright_messaging as messaging;

/// The web chat panel (`toolwright-chat-panel`).
#[cfg(feature = "panel")]
pub use toolwright_chat_panel as panel;

/// The embedded CPU model and sentence encoder (`toolwright-local-model`).
#[cfg(feature = "local-model")]
pub use toolwright_local_model as local_model;

/// OpenTelemetry export of every layer's spans (`toolwright-telemetry`).
#[cfg(feature = "telemetry")]
pub use toolwright_telemetry as telemetry;

/// The names an agent needs, for `use toolwright::prelude::*;`.
///
/// The only place a type is reachable under a second name: everything here is also in its
/// layer's module.
pub mod prelude {
    pub use toolwright_core::{
        ChatEvent, ChatModel, ChatRequest, ChatResponse, Message, ModelError, Tool, ToolCall,
        ToolContext, ToolError, ToolProvider, ToolSpec, async_trait,
    };

    #[cfg(feature = "gateway")]
    pub use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

    #[cfg(feature = "tools")]
    pub use toolwright_tool_system::{Agent, FnTool, LoopEvent, LoopOutput};

    #[cfg(feature = "mcp")]
    pub use toolwright_mcp_bridge::McpBridge;
}
