//! A hand-written MCP server with no SDK under it, written the way the official conformance
//! suite writes its test servers: [`PlainMcpHttpServer`] over Streamable HTTP on 127.0.0.1
//! (feature `mcp-http`) and [`run_plain_mcp_stdio_server`] over stdio (feature `mcp-stdio`,
//! mcp-bridge's `misbehaving-mcp-server --plain`).
//!
//! It answers `initialize` with the revision the client asked for when it is one it knows that
//! has `initialize` (2024-11-05 to 2025-11-25), else with 2025-11-25, as the specification
//! says a server answers a revision it does not support; `tools/list` with one tool,
//! `handshake`; a call of `handshake` with what it saw of the handshake as JSON:
//! `{"initialize": [the protocolVersion each initialize asked for], "methods": [every method
//! it received, in order]}`. Notifications get nothing (HTTP 202), and every other request
//! — `server/discover` included, unless [`DiscoverAnswer`] says otherwise — the empty result
//! `{}`, as the suite's servers answer a method they do not know.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

/// The revisions with an `initialize` handshake, oldest first.
const REVISIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// What the server saw.
#[derive(Default)]
struct Seen {
    initialize: Vec<String>,
    methods: Vec<String>,
}

/// The server's state: what it saw of its clients.
#[derive(Clone, Default)]
struct Plain {
    seen: Arc<Mutex<Seen>>,
}

impl Plain {
    fn seen<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> T {
        f(&mut self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Records `message`'s method and, for a request, returns its response.
    fn answer(&self, message: &Value) -> Option<Value> {
        let method = message.get("method")?.as_str()?;
        self.seen(|s| s.methods.push(method.to_owned()));
        let id = message.get("id")?.clone();
        let result = match method {
            "initialize" => {
                let asked = message["params"]["protocolVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let answered = if REVISIONS.contains(&asked.as_str()) {
                    asked.clone()
                } else {
                    "2025-11-25".to_owned()
                };
                self.seen(|s| s.initialize.push(asked));
                json!({"protocolVersion": answered, "capabilities": {"tools": {}},
                    "serverInfo": {"name": "testkit-plain-mcp-server", "version": "0.1.0"}})
            }
            "tools/list" => json!({"tools": [{"name": "handshake",
                "description": "What the server saw of the handshake.",
                "inputSchema": {"type": "object", "properties": {}}}]}),
            "tools/call" if message["params"]["name"] == "handshake" => {
                let seen = self.seen(|s| json!({"initialize": s.initialize, "methods": s.methods}));
                json!({"content": [{"type": "text", "text": seen.to_string()}]})
            }
            "tools/call" => {
                return Some(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32602, "message": "no such tool"}}));
            }
            _ => json!({}),
        };
        Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

/// How [`PlainMcpHttpServer`] answers `server/discover`.
#[cfg(feature = "mcp-http")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscoverAnswer {
    /// As any method it does not know: the empty result `{}`, HTTP 200.
    EmptyResult,
    /// A JSON-RPC error, "Method not found" (-32601), HTTP 200.
    MethodNotFound,
    /// This HTTP status: 400 with the JSON-RPC error and no id that a session-based server of
    /// the TypeScript SDK gives a request with no session; any other with a plain-text body
    /// (404 "Not Found", 405 "Method Not Allowed").
    HttpStatus(u16),
}

/// The hand-written server (see the module docs) over Streamable HTTP on 127.0.0.1, at
/// `/mcp`, with no sessions; `GET` (the server's own stream) is 405. Stopped on drop.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use testkit::{DiscoverAnswer, PlainMcpHttpServer};
/// let server = PlainMcpHttpServer::start(DiscoverAnswer::EmptyResult).await;
/// assert!(server.url().starts_with("http://127.0.0.1:"));
/// assert!(server.initialize_versions().is_empty());
/// # }
/// ```
#[cfg(feature = "mcp-http")]
pub struct PlainMcpHttpServer {
    url: String,
    plain: Plain,
    task: tokio::task::JoinHandle<()>,
}

#[cfg(feature = "mcp-http")]
impl PlainMcpHttpServer {
    /// Starts on a free port of 127.0.0.1, answering `server/discover` as `discover` says.
    /// Panics when it cannot bind: a test double.
    pub async fn start(discover: DiscoverAnswer) -> Self {
        use axum::http::StatusCode;
        use axum::response::{IntoResponse, Response};
        let plain = Plain::default();
        let state = plain.clone();
        let post = move |body: axum::body::Bytes| {
            let plain = state.clone();
            async move {
                let Ok(message) = serde_json::from_slice::<Value>(&body) else {
                    let parse_error = json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32700, "message": "Parse error"}});
                    return (StatusCode::BAD_REQUEST, axum::Json(parse_error)).into_response();
                };
                if message["method"] == "server/discover" && discover != DiscoverAnswer::EmptyResult
                {
                    plain.seen(|s| s.methods.push("server/discover".to_owned()));
                    return discover_rejected(discover, &message["id"]);
                }
                match plain.answer(&message) {
                    Some(reply) => axum::Json(reply).into_response(),
                    None => StatusCode::ACCEPTED.into_response(),
                }
            }
        };
        fn discover_rejected(answer: DiscoverAnswer, id: &Value) -> Response {
            match answer {
                DiscoverAnswer::HttpStatus(400) => (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"jsonrpc": "2.0", "id": null, "error":
                        {"code": -32000, "message": "Bad Request: No valid session ID provided"}})),
                )
                    .into_response(),
                DiscoverAnswer::HttpStatus(code) => {
                    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
                    let reason = status.canonical_reason().unwrap_or("Rejected");
                    (status, reason.to_owned()).into_response()
                }
                DiscoverAnswer::MethodNotFound | DiscoverAnswer::EmptyResult => {
                    axum::Json(json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": "Method not found"}}))
                    .into_response()
                }
            }
        }
        let router = axum::Router::new().route(
            "/mcp",
            axum::routing::post(post)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        );
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the plain MCP test server on 127.0.0.1");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            url: format!("http://{addr}/mcp"),
            plain,
            task,
        }
    }

    /// The endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `protocolVersion` each `initialize` it received asked for, in order.
    pub fn initialize_versions(&self) -> Vec<String> {
        self.plain.seen(|s| s.initialize.clone())
    }

    /// Every method it received (requests and notifications), in order.
    pub fn methods(&self) -> Vec<String> {
        self.plain.seen(|s| s.methods.clone())
    }
}

#[cfg(feature = "mcp-http")]
impl Drop for PlainMcpHttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the hand-written server (see the module docs) on stdin/stdout, one JSON-RPC message
/// a line, until stdin ends. A line that is not JSON is answered with a parse error.
#[cfg(feature = "mcp-stdio")]
pub fn run_plain_mcp_stdio_server() {
    use std::io::{BufRead, Write};
    let plain = Plain::default();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(message) => plain.answer(&message),
            Err(_) => Some(
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}),
            ),
        };
        if let Some(reply) = reply
            && (writeln!(out, "{reply}").is_err() || out.flush().is_err())
        {
            break;
        }
    }
}
