//! # chat-panel — Stage 5
//!
//! A web chat panel: an axum server on 127.0.0.1 serving one self-contained page where a
//! person chats with an agent. Answers stream as they arrive (SSE); tool activity is shown;
//! messages the agent sends with `send_message` appear with their quick replies as buttons
//! (Q10–Q15); the conversation lives on the server per session id, so a reload keeps it.
//!
//! The agent sits behind [`ChatBackend`]: [`ModelBackend`] over a plain
//! [`model_gateway::ChatModel`] (text only), and [`AgentBackend`] over the tool-system's
//! streaming tool loop ([`tool_system::Agent`]), which can call `send_message`.
//!
//! ```no_run
//! # async fn demo(model: impl model_gateway::ChatModel + 'static) -> Result<(), Box<dyn std::error::Error>> {
//! use chat_panel::{AgentBackend, ChatPanel, PanelConfig};
//! use messaging::MessageBus;
//! let bus = MessageBus::new();
//! let backend = AgentBackend::build(model, bus.clone(), |b| b)?;
//! let panel = ChatPanel::new(backend, bus, PanelConfig::default());
//! let server = panel.serve("127.0.0.1:0").await?;
//! println!("open http://{}/", server.addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod backend;
mod server;
mod state;

pub use backend::{
    AGENT_SYSTEM_PROMPT, AgentBackend, ChatBackend, EventStream, ModelBackend, PanelEvent,
    USER_RECIPIENT, user_address,
};
pub use server::{ChatPanel, PanelConfig, PanelServer};
pub use state::{Entry, EntryKind, ToolActivity};
