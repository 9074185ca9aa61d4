//! # chat-panel — Stage 5
//!
//! A web chat panel: a server on 127.0.0.1 serving one self-contained page where a person
//! chats with an agent. Answers stream as they arrive (SSE); tool activity is shown;
//! messages the agent sends with `send_message` appear with their quick replies as buttons
//! (Q10–Q15); conversations are kept in a session store — SQLite by default — so a reload or a
//! restart keeps them (C4). Pictures, sounds and files show in the conversation — a tool's, and
//! the person's, attached in the composer and sent to the model with their text
//! ([`ChatBackend::reply_with_parts`]) — served by the panel to the conversation's owner only
//! (a picture or sound in place, anything else as a download, never run by the browser);
//! an MCP bridge's resources and prompts can be offered to the person ([`ChatPanel::offer_mcp`]);
//! the model's reasoning shows folded above its answer, and under each answer what it cost
//! ([`RunSummary`]).
//!
//! The agent sits behind [`ChatBackend`]; [`AgentBackend`] runs the tool-system's streaming
//! tool loop ([`toolwright_tool_system::Agent`]), which can call `send_message`, with a context budget
//! so a conversation of any length keeps fitting the model.
//!
//! Hardened for a browser on the same machine: only its own page may post to it
//! (`Host`, `Origin`, `Sec-Fetch-Site`, `application/json`), every connection has timeouts and
//! the number of connections is capped. Details: [`ChatPanel`] and [`PanelConfig`].
//!
//! Reached by other people (behind a reverse proxy, several workers), it knows who calls:
//! an [`identity::Authenticator`] — OIDC/JWT bearer tokens checked against the
//! provider's JWKS, or a trusted proxy's header — authenticates every API request, and each
//! conversation belongs to the principal that created it (another gets `404`). Without one the
//! panel listens on loopback only. Example: [`identity`]; deployment: `docs/deploy.md`.
//!
//! Features: `sqlite` (default) keeps conversations in an SQLite file; `postgres` and `nats`
//! compile the PostgreSQL store and the NATS bus that several workers share
//! (`chat-panel = { version = "…", features = ["postgres", "nats"] }`). A `DATABASE_URL` or
//! `NATS_URL` that names a left-out one is [`PanelError::FeatureOff`] at start, never a silent
//! fallback to one process.
//!
//! ```no_run
//! # async fn demo(model: impl toolwright_core::ChatModel + 'static) -> Result<(), Box<dyn std::error::Error>> {
//! use toolwright_chat_panel::{AgentBackend, ChatPanel, PanelConfig};
//! use toolwright_messaging::MessageBus;
//! // SQLite in ~/.local/share/llm-toolkit/ and the in-process bus, unless DATABASE_URL
//! // (PostgreSQL) or NATS_URL (NATS JetStream) say otherwise
//! let config = PanelConfig::from_env();
//! let bus = config.bus().await?;
//! let backend = AgentBackend::build(model, bus.clone(), &config, |b| b).await?;
//! let panel = ChatPanel::new(backend, bus, config);
//! let server = panel.serve("127.0.0.1:0").await?;
//! println!("open http://{}/", server.addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod backend;
mod config;
mod decisions;
mod elicit;
pub mod identity;
mod lease;
pub mod login;
mod mcp_sign_in;
mod media;
mod net;
mod server;
mod signout;
mod state;

pub use backend::{
    AGENT_SYSTEM_PROMPT, AgentBackend, ChatBackend, EventStream, USER_RECIPIENT, person_address,
    user_address,
};
pub use config::{
    DATABASE_URL, HistoryStore, NATS_CREDS, NATS_INBOX_PREFIX, NATS_TLS_CA, NATS_TLS_CERT,
    NATS_TLS_KEY, NATS_URL, PanelConfig, PanelError,
};
pub use elicit::PanelElicitor;
pub use mcp_sign_in::PanelSignIn;
pub use media::MediaKind;
pub use server::{ChatPanel, PanelServer};
pub use state::{Entry, EntryImage, EntryKind, RunSummary, ToolActivity};
