//! [`McpHttpServer`]: a real MCP server over Streamable HTTP on 127.0.0.1, built on rmcp's
//! server, that speaks both revisions servers run today: the session-based 2025-11-25 one
//! (after `initialize`, an `Mcp-Session-Id`) and the stateless 2026-07-28 one (`server/discover`,
//! no session), whichever the client asks for. It records the `MCP-Protocol-Version` header of
//! every request, so a test can tell which revision a client spoke.
//!
//! It is the workspace's one MCP test server (`mcp_server.rs`) with the tools a test's own
//! process can hold: `echo`, `add_tool` (in a session it sends
//! `notifications/tools/list_changed`; `ask_now`'s `elicitation/create` reaches the client on
//! the SSE stream of the call's POST), `ask`, `ask_now`. Tool lists carry the cache hint `ttlMs`
//! (1,500 ms), which the stateless revision relies on instead of notifications.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::mcp_server::{Handler, Options, ToolSet};

/// The `ttlMs` of the tool lists this server gives.
pub const TOOLS_TTL_MS: u64 = 1_500;

/// A running MCP server over Streamable HTTP on 127.0.0.1 (see the module docs). Stopped on
/// [`McpHttpServer::stop`] or drop.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let server = testkit::McpHttpServer::start().await;
/// assert!(server.url().starts_with("http://127.0.0.1:"));
/// server.stop();
/// # }
/// ```
pub struct McpHttpServer {
    addr: SocketAddr,
    url: String,
    handler: Handler,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl McpHttpServer {
    /// Starts on a free port of 127.0.0.1.
    pub async fn start() -> Self {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts on `addr` (e.g. the address of a stopped one, to restart it: the new server
    /// knows none of the old one's sessions). Panics when it cannot bind: a test double.
    pub async fn start_on(addr: SocketAddr) -> Self {
        let handler = Handler::new(Options {
            tools: ToolSet::InProcess,
            ttl_ms: Some(TOOLS_TTL_MS),
            ..Options::default()
        });
        Self::serve(addr, handler).await
    }

    /// Starts a server that speaks only the session-based revisions (up to 2025-11-25) and
    /// whose tool lists carry no `ttlMs`: a client learns of a new tool only from
    /// `notifications/tools/list_changed` on its session's stream.
    pub async fn start_session_only() -> Self {
        let handler = Handler::new(Options {
            tools: ToolSet::InProcess,
            session_only: true,
            ..Options::default()
        });
        Self::serve(SocketAddr::from(([127, 0, 0, 1], 0)), handler).await
    }

    async fn serve(addr: SocketAddr, handler: Handler) -> Self {
        let stop = CancellationToken::new();
        let factory = handler.clone();
        let service = StreamableHttpService::new(
            move || Ok(factory.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        // A just-stopped server's listener closes once its aborted task is dropped: retry a
        // moment.
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if tries < 250 && e.kind() == std::io::ErrorKind::AddrInUse => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                #[allow(clippy::panic)]
                Err(e) => panic!("bind the MCP HTTP test server on {addr}: {e}"),
            }
        };
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            addr,
            url: format!("http://{addr}/mcp"),
            handler,
            stop,
            task,
        }
    }

    /// The endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `MCP-Protocol-Version` header of each `tools/list` and `tools/call` it answered, in
    /// order (empty when a request had none).
    pub fn protocol_versions(&self) -> Vec<String> {
        self.handler.protocol_versions()
    }

    /// Stops it at once, as a killed process would: the port closes (it can be bound again
    /// right away) and every session ends.
    pub fn stop(&self) {
        self.stop.cancel();
        self.task.abort();
    }
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}
