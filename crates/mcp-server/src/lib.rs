//! An agent's tools offered to other MCP clients (an IDE, another agent): a tool-system
//! [`Dispatcher`](toolwright_tool_system::Dispatcher) — built-in tools, bridged MCP servers,
//! skills, code mode, tool search, whatever providers it holds — served as an MCP server on
//! [rmcp](https://docs.rs/rmcp).
//!
//! - **Transports.** [`McpServer::serve_stdio`] (one client on stdin/stdout) and
//!   [`McpServer::router`] (Streamable HTTP on axum, stateless by default: no session lives in a
//!   worker, so any number of workers can stand behind one load balancer; with
//!   [`HttpOptions::stateful`], a session per client in this process, needed for requests to the
//!   client mid-call and for subscriptions, at the price of sticky routing).
//! - **Resources, prompts, completions.** [`McpServerBuilder::resources`] and
//!   [`McpServerBuilder::prompts`] take a [`Resources`] and a [`Prompts`] source: list, read,
//!   templates, subscribe ([`McpServer::notify_resource_updated`]), get, and completion of their
//!   arguments; bounded by [`McpServerBuilder::max_resource_bytes`] and
//!   [`McpServerBuilder::max_subscriptions`], refused with [`OfferError`]s.
//! - **Tools that talk to the client.** A tool's
//!   [`ToolContext::caller`](toolwright_core::ToolContext::caller) is the calling client: log
//!   lines (at the level the client set), progress (on its progress token), sampling and
//!   elicitation (over a session, on protocols before 2026-07-28).
//! - **Approvals.** A call that the [`ApprovalPolicy`](toolwright_tool_system::ApprovalPolicy)
//!   or its provider holds is asked of the calling client's person by elicitation. Over protocol
//!   2026-07-28 that is a multi round-trip `input_required` result whose state is sealed with
//!   the server's key (HMAC; every worker with the same key can take the retry), bound to the
//!   tool and its arguments; over older protocols, on a connection that keeps a session (stdio),
//!   an `elicitation/create` request. A client without the elicitation capability, a person who
//!   declines, or a stateless connection on an older protocol gets a refusal the model can read;
//!   the tool does not run.
//! - **Bounds.** Every call runs under the dispatcher's time limit (30 s unless configured) and
//!   result cap; a client that disconnects cancels its call; a question to the person waits at
//!   most [`McpServerBuilder::approval_timeout`].
//! - **DNS-rebinding protection.** [`HttpOptions`]: only the listed `Host` names (loopback by
//!   default) and `Origin`s are served; a foreign `Origin` gets `403`.
//! - **Authorization.** [`ProtectedResource`]: the server's OAuth protected-resource metadata at
//!   `/.well-known/oauth-protected-resource` and bearer tokens checked by a
//!   [`TokenVerifier`] (a `401` with `WWW-Authenticate` pointing at the metadata otherwise).
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolwright_mcp_server::{HttpOptions, McpServer};
//! use toolwright_tool_system::{ApprovalPolicy, Dispatcher};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let dispatcher = Dispatcher::from_registry(toolwright_mcp_server::demo::tools()?);
//! let server = McpServer::builder(Arc::new(dispatcher))
//!     .approval_policy(ApprovalPolicy::new().always("transfer"))
//!     .build();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8808").await?;
//! axum::serve(listener, server.router(HttpOptions::default())?).await?;
//! # Ok(()) }
//! ```

mod approval;
mod auth;
mod caller;
pub mod config;
mod content;
pub mod demo;
mod error;
mod http;
mod offers;
mod server;
mod session;

pub use auth::{ProtectedResource, TokenVerifier, VerifiedToken};
pub use caller::MAX_SAMPLE_TOKENS;
pub use error::ServeError;
pub use http::HttpOptions;
pub use offers::{MAX_COMPLETIONS, OfferError, Prompts, Resources, match_uri_template};
pub use server::{
    DEFAULT_MAX_RESOURCE_BYTES, DEFAULT_MAX_SUBSCRIPTIONS, McpServer, McpServerBuilder,
};

/// The rmcp model types the [`Resources`] and [`Prompts`] traits speak (rmcp's `model`
/// module, re-exported so an implementation needs no rmcp dependency of its own).
pub use rmcp::model as rmcp_model;
