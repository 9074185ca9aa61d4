//! [`McpHttpServer`]: a real MCP server over Streamable HTTP on 127.0.0.1, built on rmcp's
//! server, that speaks both revisions servers run today: the session-based 2025-11-25 one
//! (after `initialize`, an `Mcp-Session-Id`) and the stateless 2026-07-28 one (`server/discover`,
//! no session), whichever the client asks for. It records the `MCP-Protocol-Version` header of
//! every request, so a test can tell which revision a client spoke.
//!
//! Tools: `echo` (`{"message"}` → `Echo: …`), `add_tool` (`{"name"}`: adds a tool that answers
//! `NAME ran`, and in a session sends `notifications/tools/list_changed`), `ask` (the
//! 2026-07-28 way of asking the person mid-call: an `input_required` result with one form
//! elicitation, `"who"`; called again with `inputResponses`, it answers `answered: <the
//! response as JSON>`), `ask_now` (the 2025-11-25 way, in a session only: the server sends
//! `elicitation/create` during the call, which rmcp delivers on the SSE stream of the call's
//! POST, and answers `answered: <the client's result as JSON>`). Tool lists carry the
//! cache hint `ttlMs` (1,500 ms), which the stateless revision relies on instead of
//! notifications.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, Implementation, InputRequest, InputRequiredResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, ServerRequest, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// The `ttlMs` of the tool lists this server gives.
pub const TOOLS_TTL_MS: u64 = 1_500;

#[derive(Clone, Default)]
struct Handler {
    added: Arc<Mutex<Vec<String>>>,
    versions: Arc<Mutex<Vec<String>>>,
    /// Speaks only the session-based revisions, and its lists carry no `ttlMs`: tool-list
    /// changes reach a client only as `notifications/tools/list_changed`.
    session_only: bool,
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

impl Handler {
    fn record(&self, context: &RequestContext<RoleServer>) {
        let version = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-protocol-version"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        self.versions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(version);
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echoes the message back.",
                object(
                    json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
                ),
            ),
            Tool::new(
                "ask",
                "Asks the person their name (input_required) and answers with it.",
                object(json!({"type": "object"})),
            ),
            Tool::new(
                "ask_now",
                "Asks the person their name with elicitation/create mid-call (session revisions only) and answers with it.",
                object(json!({"type": "object"})),
            ),
            Tool::new(
                "add_tool",
                "Adds a tool named `name` to this server's list.",
                object(
                    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                ),
            ),
        ];
        for name in self
            .added
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            tools.push(Tool::new(
                name.clone(),
                "A tool added at run time.",
                object(json!({"type": "object"})),
            ));
        }
        tools
    }
}

impl ServerHandler for Handler {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.session_only {
            const SESSION_REVISIONS: &[ProtocolVersion] = &[
                ProtocolVersion::V_2024_11_05,
                ProtocolVersion::V_2025_03_26,
                ProtocolVersion::V_2025_06_18,
                ProtocolVersion::V_2025_11_25,
            ];
            std::borrow::Cow::Borrowed(SESSION_REVISIONS)
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("testkit-mcp-http", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.record(&context);
        let list = ListToolsResult::with_all_items(self.tools());
        Ok(if self.session_only {
            list
        } else {
            list.with_ttl_ms(TOOLS_TTL_MS)
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.record(&context);
        let args = request.arguments.clone().unwrap_or_default();
        let text = |s: String| Ok(CallToolResult::success(vec![ContentBlock::text(s)]).into());
        match request.name.as_ref() {
            "echo" => match args.get("message").and_then(Value::as_str) {
                Some(m) => text(format!("Echo: {m}")),
                None => Err(ErrorData::invalid_params("message must be a string", None)),
            },
            "ask" => match &request.input_responses {
                None => {
                    let asked: InputRequest = serde_json::from_value(json!({
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "What is your name?",
                            "requestedSchema": {"type": "object",
                                "properties": {"name": {"type": "string"}}, "required": ["name"]}}
                    }))
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                    let requests = BTreeMap::from([("who".to_owned(), asked)]);
                    Ok(InputRequiredResult::new(Some(requests), Some("asked-once".into())).into())
                }
                Some(responses) => text(format!(
                    "answered: {}",
                    responses.get("who").cloned().unwrap_or(Value::Null)
                )),
            },
            "ask_now" => {
                let params: ElicitRequestParams = serde_json::from_value(json!({
                    "mode": "form", "message": "What is your name?",
                    "requestedSchema": {"type": "object",
                        "properties": {"name": {"type": "string"}}, "required": ["name"]}
                }))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                // The request itself (rmcp's `create_elicitation` needs its `elicitation`
                // feature, which would rebuild rmcp for every test build that has testkit).
                let answer = context
                    .peer
                    .send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params)))
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                text(format!(
                    "answered: {}",
                    serde_json::to_value(answer).unwrap_or(Value::Null)
                ))
            }
            "add_tool" => {
                let name = args
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("added")
                    .to_owned();
                self.added
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(name.clone());
                // In a session this reaches the client; statelessly there is no stream for it
                // (the list's ttlMs is what tells the client to look again).
                let _ = context.peer.notify_tool_list_changed().await;
                text(format!("added {name}"))
            }
            other
                if self
                    .added
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .any(|n| n == other) =>
            {
                text(format!("{other} ran"))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

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
        Self::serve(addr, Handler::default()).await
    }

    /// Starts a server that speaks only the session-based revisions (up to 2025-11-25) and
    /// whose tool lists carry no `ttlMs`: a client learns of a new tool only from
    /// `notifications/tools/list_changed` on its session's stream.
    pub async fn start_session_only() -> Self {
        let handler = Handler {
            session_only: true,
            ..Handler::default()
        };
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
        self.handler
            .versions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
