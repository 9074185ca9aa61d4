//! A small MCP server (rmcp, stdio) for mcp-bridge's tests and benchmarks. It behaves well or
//! badly on request.
//!
//! Startup modes (arguments):
//! - `--startup-delay-ms N`: sleep N ms before answering anything (a slow start).
//! - `--spawn-grandchild`: start `sleep 600` as a child first (what `npx` does with `node`), to
//!   prove that stopping the service ends the whole process group.
//! - `--garbage-at-start`: write a non-JSON line to stdout before serving.
//! - `--tools-ttl-ms N`: tool lists carry the cache hint `ttlMs: N` (2026-07-28).
//! - `--tools-file PATH --tools-of NAME`: serve, instead of the tools below, the tools another
//!   server listed: PATH holds recorded `tools/list` results (`{"servers": [{"name": NAME,
//!   "tools": [...]}]}`, crates/tool-search/fixtures/tools.json); a call of one answers
//!   `NAME ran` with its arguments. For the tool-search tests (hundreds of real definitions).
//!
//! Tools: `echo`, `add` (structured result), `ping` (no parameters), `fail` (`isError`), `sleep`
//! (slow but responsive), `freeze` (blocks the whole server: never answers anything again),
//! `crash` (exits mid-call), `garbage` (writes non-JSON to stdout mid-call), `huge` (a result of
//! N bytes), `add_tool` (adds a tool and sends `notifications/tools/list_changed`, unless
//! `"silent": true`), `env` (one
//! environment variable of the server, to check what it was given), `traceparent` (the W3C
//! `traceparent` the call carried in its `_meta`, to check that the server's trace joins),
//! `request_id` (the JSON-RPC id of the call as the server received it), `cancelled` (how many
//! `sleep` calls the client cancelled with `notifications/cancelled`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, RequestParamsMeta, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

#[derive(Clone, Default)]
struct Server {
    added: Arc<Mutex<Vec<String>>>,
    /// Recorded tools served instead of the built-in ones (`--tools-file`).
    replay: Option<Arc<Vec<Tool>>>,
    /// The `ttlMs` of tool lists (`--tools-ttl-ms`).
    ttl_ms: Option<u64>,
    /// `sleep` calls ended by the client's `notifications/cancelled`.
    cancelled: Arc<std::sync::atomic::AtomicU64>,
}

/// The tools server `name` listed, from a file of recorded `tools/list` results.
fn recorded_tools(path: &str, name: &str) -> Vec<Tool> {
    let text = std::fs::read_to_string(path).expect("read --tools-file");
    let file: Value = serde_json::from_str(&text).expect("--tools-file is JSON");
    let server = file["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no server {name} in {path}"));
    serde_json::from_value(server["tools"].clone()).expect("recorded tools")
}

fn schema(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn tools(added: &[String]) -> Vec<Tool> {
    let mut t = vec![
        Tool::new(
            "echo",
            "Echoes the message back. Useful to test a round trip.",
            schema(
                json!({"type": "object", "properties": {"message": {"type": "string", "description": "Text to echo"}}, "required": ["message"]}),
            ),
        ),
        Tool::new(
            "add",
            "Adds two numbers and returns the sum as structured content.",
            schema(
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
            ),
        ),
        // No `properties`: the bridge must normalise this schema.
        Tool::new("ping", "Answers pong.", schema(json!({"type": "object"}))),
        Tool::new("fail", "Always reports a failure.", schema(json!({}))),
        Tool::new(
            "sleep",
            "Sleeps for ms milliseconds, then answers.",
            schema(
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
            ),
        ),
        Tool::new(
            "freeze",
            "Blocks the whole server forever.",
            schema(json!({})),
        ),
        Tool::new(
            "crash",
            "Exits the server process mid-call.",
            schema(json!({})),
        ),
        Tool::new(
            "garbage",
            "Writes non-JSON to stdout mid-call.",
            schema(json!({})),
        ),
        Tool::new(
            "huge",
            "Returns a text of the given number of bytes.",
            schema(
                json!({"type": "object", "properties": {"bytes": {"type": "integer"}}, "required": ["bytes"]}),
            ),
        ),
        Tool::new(
            "add_tool",
            "Adds a tool named name and notifies the client.",
            schema(
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
        ),
        Tool::new(
            "env",
            "Returns one environment variable of the server.",
            schema(
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
        ),
        Tool::new(
            "traceparent",
            "Returns the W3C traceparent the call carried in its _meta.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "request_id",
            "Returns the JSON-RPC id of this call as the server received it.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "cancelled",
            "Returns how many sleep calls the client cancelled.",
            schema(json!({"type": "object", "properties": {}})),
        ),
    ];
    for name in added {
        t.push(Tool::new(
            name.clone(),
            "A tool added at run time.",
            schema(json!({})),
        ));
    }
    t
}

fn text(s: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(s)]).into()
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("misbehaving-mcp-server", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if let Some(replay) = &self.replay {
            return Ok(ListToolsResult::with_all_items(replay.as_ref().clone()));
        }
        let added = self.added.lock().unwrap().clone();
        let mut list = ListToolsResult::with_all_items(tools(&added));
        if let Some(ms) = self.ttl_ms {
            list = list.with_ttl_ms(ms);
        }
        Ok(list)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let num = |k: &str| args.get(k).and_then(Value::as_f64);
        let string = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        if let Some(replay) = &self.replay {
            return match replay.iter().find(|t| t.name == request.name) {
                Some(t) => Ok(text(format!("{} ran with {}", t.name, Value::Object(args)))),
                None => Err(ErrorData::invalid_params(
                    format!("no tool {}", request.name),
                    None,
                )),
            };
        }
        match request.name.as_ref() {
            "echo" => match string("message") {
                Some(m) => Ok(text(format!("Echo: {m}"))),
                None => Err(ErrorData::invalid_params("message must be a string", None)),
            },
            "add" => match (num("a"), num("b")) {
                (Some(a), Some(b)) => {
                    let mut r = CallToolResult::structured(json!({"sum": a + b}));
                    r.content = vec![ContentBlock::text(format!("{}", a + b))];
                    Ok(r.into())
                }
                _ => Err(ErrorData::invalid_params("a and b must be numbers", None)),
            },
            "ping" => Ok(text("pong")),
            "fail" => {
                Ok(CallToolResult::error(vec![ContentBlock::text("the widget is broken")]).into())
            }
            "sleep" => {
                let ms = num("ms").unwrap_or(0.0).max(0.0) as u64;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = context.ct.cancelled() => {
                        self.cancelled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        return Err(ErrorData::internal_error("cancelled", None));
                    }
                }
                Ok(text(format!("slept {ms} ms")))
            }
            "freeze" => {
                // Blocks the only runtime thread: no request is ever answered again.
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            "crash" => {
                eprintln!("crashing on purpose");
                std::process::exit(3);
            }
            "garbage" => {
                {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(b"this is not json {{{\n");
                    let _ = out.flush();
                }
                std::future::pending::<()>().await;
                unreachable!()
            }
            "huge" => {
                let n = num("bytes").unwrap_or(0.0).max(0.0) as usize;
                Ok(text("x".repeat(n)))
            }
            "add_tool" => {
                let name = string("name").unwrap_or_else(|| "added".into());
                self.added.lock().unwrap().push(name.clone());
                if args.get("silent") != Some(&Value::Bool(true)) {
                    let _ = context.peer.notify_tool_list_changed().await;
                }
                Ok(text(format!("added {name}")))
            }
            "env" => {
                let name = string("name").unwrap_or_default();
                Ok(text(
                    std::env::var(&name).unwrap_or_else(|_| "<unset>".into()),
                ))
            }
            "request_id" => Ok(text(context.id.to_string())),
            "cancelled" => Ok(text(
                self.cancelled
                    .load(std::sync::atomic::Ordering::SeqCst)
                    .to_string(),
            )),
            // rmcp moves the request's `_meta` into the context.
            "traceparent" => Ok(text(
                context
                    .meta
                    .get_traceparent()
                    .or(request.traceparent())
                    .unwrap_or("<none>"),
            )),
            other => {
                if self.added.lock().unwrap().iter().any(|n| n == other) {
                    Ok(text(format!("{other} ran")))
                } else {
                    Err(ErrorData::invalid_params(format!("no tool {other}"), None))
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut grandchild = None;
    let (mut tools_file, mut tools_of, mut ttl_ms) = (None, None, None);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--startup-delay-ms" => {
                i += 1;
                let ms: u64 = args.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
                std::thread::sleep(Duration::from_millis(ms));
            }
            "--spawn-grandchild" => {
                let child = std::process::Command::new("sleep")
                    .arg("600")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("spawn sleep");
                eprintln!("grandchild pid {}", child.id());
                grandchild = Some(child);
            }
            "--garbage-at-start" => {
                let mut out = std::io::stdout().lock();
                out.write_all(b"Server starting... (not JSON)\n").unwrap();
                out.flush().unwrap();
            }
            "--tools-file" => {
                i += 1;
                tools_file = args.get(i).cloned();
            }
            "--tools-ttl-ms" => {
                i += 1;
                ttl_ms = args.get(i).and_then(|v| v.parse().ok());
            }
            "--tools-of" => {
                i += 1;
                tools_of = args.get(i).cloned();
            }
            other => eprintln!("unknown argument {other}"),
        }
        i += 1;
    }
    eprintln!("misbehaving-mcp-server ready");
    let replay = match (tools_file, tools_of) {
        (Some(path), Some(name)) => Some(Arc::new(recorded_tools(&path, &name))),
        _ => None,
    };
    let service = Server {
        replay,
        ttl_ms,
        ..Server::default()
    }
    .serve(rmcp::transport::stdio())
    .await
    .expect("serve");
    let _ = service.waiting().await;
    drop(grandchild);
}
