//! The workspace's one MCP test server (rmcp): a single [`Handler`] that
//! [`crate::McpHttpServer`] serves over Streamable HTTP in the test's process and
//! [`crate::run_mcp_stdio_server`] serves over stdio as a process of its own (mcp-bridge's
//! `misbehaving-mcp-server`). The tools are written once; each transport lists its own set
//! ([`ToolSet`]): a tool that needs a process of its own (`crash`, `freeze`, `garbage`) is never
//! offered in the test's process, and a tool another set lists is "no tool" here, as if the
//! server did not have it.
//!
//! The tools (see each set for which it lists): `echo` (`{"message"}` → `Echo: …`), `add`
//! (structured result), `ping` (no parameters), `fail` (`isError`), `sleep` (slow but
//! responsive; a cancelled one is counted), `freeze` (blocks the whole server: never answers
//! anything again), `crash` (exits mid-call), `garbage` (writes non-JSON to stdout mid-call),
//! `huge` (a result of N bytes), `add_tool` (adds a tool that answers `NAME ran` and sends
//! `notifications/tools/list_changed`, unless `"silent": true`), `env` (one environment
//! variable of the server), `traceparent` (the W3C `traceparent` the call carried in its
//! `_meta`), `request_id` (the JSON-RPC id of the call as the server received it), `cancelled`
//! (how many `sleep` calls the client cancelled with `notifications/cancelled`), `ask` (the
//! 2026-07-28 way of asking the person mid-call: an `input_required` result with one form
//! elicitation, `"who"`; called again with `inputResponses`, it answers `answered: <the
//! response as JSON>`), `ask_now` (the 2025-11-25 way, in a session only: the server sends
//! `elicitation/create` during the call and answers `answered: <the client's result as
//! JSON>`), `ask_defaults` (as `ask_now`, with a form whose fields have defaults, as the
//! official conformance suite asks: `name` "John Doe", `age` 30, `score` 95.5, `status`
//! "active" of an enum, `verified` true, and `nickname` with none), `ask_then_give_up` (as
//! `ask_now`, but the server stops waiting after 300 ms, tells the client with
//! `notifications/cancelled`, and answers `gave up: …`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, Implementation, InputRequest, InputRequiredResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, RequestParamsMeta, ServerCapabilities, ServerConfig,
    ServerRequest, Tool,
};
use rmcp::service::{PeerRequestOptions, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

/// Which tools a server lists (and answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum ToolSet {
    /// Over stdio, a process of its own: `echo`, `add`, `ping`, `fail`, `sleep`, `freeze`,
    /// `crash`, `garbage`, `huge`, `add_tool`, `env`, `traceparent`, `request_id`, `cancelled`.
    #[cfg_attr(not(feature = "mcp-stdio"), allow(dead_code))]
    Process,
    /// Over HTTP, in the test's process: `echo`, `ask`, `ask_now`, `ask_defaults`,
    /// `ask_then_give_up`, `add_tool`.
    #[default]
    InProcess,
}

const PROCESS_TOOLS: &[&str] = &[
    "echo",
    "add",
    "ping",
    "fail",
    "sleep",
    "freeze",
    "crash",
    "garbage",
    "huge",
    "add_tool",
    "env",
    "traceparent",
    "request_id",
    "cancelled",
];
const IN_PROCESS_TOOLS: &[&str] = &[
    "echo",
    "ask",
    "ask_now",
    "ask_defaults",
    "ask_then_give_up",
    "add_tool",
];

impl ToolSet {
    fn names(self) -> &'static [&'static str] {
        match self {
            Self::Process => PROCESS_TOOLS,
            Self::InProcess => IN_PROCESS_TOOLS,
        }
    }
}

/// How one server behaves.
#[derive(Default)]
pub(crate) struct Options {
    /// The tools it lists.
    pub tools: ToolSet,
    /// The `ttlMs` cache hint of its tool lists (2026-07-28); `None`: no hint.
    pub ttl_ms: Option<u64>,
    /// Speaks only the session-based revisions (up to 2025-11-25).
    pub session_only: bool,
    /// Recorded tools served instead of [`Options::tools`]: a call of one answers
    /// `NAME ran with ARGS`.
    pub replay: Option<Vec<Tool>>,
}

/// What every session of one server shares.
#[derive(Default)]
struct State {
    added: Mutex<Vec<String>>,
    versions: Mutex<Vec<String>>,
    cancelled: AtomicU64,
}

/// The server (see the module docs). Cloning shares its state: HTTP makes one per session.
#[derive(Clone, Default)]
pub(crate) struct Handler {
    options: Arc<Options>,
    state: Arc<State>,
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn text(s: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(s)]).into())
}

/// The definition of one of the tools (the module docs say what each does).
fn definition(name: &str) -> Option<Tool> {
    let empty = || object(json!({}));
    let with = |properties: Value, required: &[&str]| {
        object(json!({"type": "object", "properties": properties, "required": required}))
    };
    let (description, schema) = match name {
        "echo" => (
            "Echoes the message back. Useful to test a round trip.",
            with(
                json!({"message": {"type": "string", "description": "Text to echo"}}),
                &["message"],
            ),
        ),
        "add" => (
            "Adds two numbers and returns the sum as structured content.",
            with(
                json!({"a": {"type": "number"}, "b": {"type": "number"}}),
                &["a", "b"],
            ),
        ),
        // No `properties`: the bridge must normalise this schema.
        "ping" => ("Answers pong.", object(json!({"type": "object"}))),
        "fail" => ("Always reports a failure.", empty()),
        "sleep" => (
            "Sleeps for ms milliseconds, then answers.",
            with(json!({"ms": {"type": "integer"}}), &["ms"]),
        ),
        "freeze" => ("Blocks the whole server forever.", empty()),
        "crash" => ("Exits the server process mid-call.", empty()),
        "garbage" => ("Writes non-JSON to stdout mid-call.", empty()),
        "huge" => (
            "Returns a text of the given number of bytes.",
            with(json!({"bytes": {"type": "integer"}}), &["bytes"]),
        ),
        "add_tool" => (
            "Adds a tool named name and notifies the client.",
            with(json!({"name": {"type": "string"}}), &["name"]),
        ),
        "env" => (
            "Returns one environment variable of the server.",
            with(json!({"name": {"type": "string"}}), &["name"]),
        ),
        "traceparent" => (
            "Returns the W3C traceparent the call carried in its _meta.",
            object(json!({"type": "object", "properties": {}})),
        ),
        "request_id" => (
            "Returns the JSON-RPC id of this call as the server received it.",
            object(json!({"type": "object", "properties": {}})),
        ),
        "cancelled" => (
            "Returns how many sleep calls the client cancelled.",
            object(json!({"type": "object", "properties": {}})),
        ),
        "ask" => (
            "Asks the person their name (input_required) and answers with it.",
            object(json!({"type": "object"})),
        ),
        "ask_now" => (
            "Asks the person their name with elicitation/create mid-call (session revisions only) and answers with it.",
            object(json!({"type": "object"})),
        ),
        "ask_then_give_up" => (
            "Asks the person their name with elicitation/create mid-call (session revisions only), gives up after 300 ms (notifications/cancelled) and answers that it gave up.",
            object(json!({"type": "object"})),
        ),
        "ask_defaults" => (
            "Asks the person a form whose fields have defaults with elicitation/create mid-call (session revisions only) and answers with what came back.",
            object(json!({"type": "object"})),
        ),
        _ => return None,
    };
    Some(Tool::new(name.to_owned(), description, schema))
}

/// The form every `ask` tool asks for: the person's name.
fn name_form() -> Value {
    json!({"mode": "form", "message": "What is your name?",
        "requestedSchema": {"type": "object",
            "properties": {"name": {"type": "string"}}, "required": ["name"]}})
}

/// The form `ask_defaults` asks for: every field has a default but `nickname`, none is
/// required (the official conformance suite's form, plus one field without a default).
fn defaults_form() -> Value {
    json!({"mode": "form", "message": "Accept with the defaults",
        "requestedSchema": {"type": "object", "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"],
                "default": "active"},
            "verified": {"type": "boolean", "default": true},
            "nickname": {"type": "string"}},
        "required": []}})
}

impl Handler {
    pub(crate) fn new(options: Options) -> Self {
        Self {
            options: Arc::new(options),
            state: Arc::default(),
        }
    }

    /// The `MCP-Protocol-Version` header of each HTTP `tools/list` and `tools/call`, in order
    /// (empty when a request had none).
    #[cfg_attr(not(feature = "mcp-http"), allow(dead_code))]
    pub(crate) fn protocol_versions(&self) -> Vec<String> {
        lock(&self.state.versions).clone()
    }

    /// Records the version header of a request that came over HTTP.
    fn record(&self, context: &RequestContext<RoleServer>) {
        #[cfg(not(feature = "mcp-http"))]
        let _ = context;
        #[cfg(feature = "mcp-http")]
        if let Some(parts) = context.extensions.get::<http::request::Parts>() {
            let version = parts
                .headers
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            lock(&self.state.versions).push(version);
        }
    }

    fn added(&self) -> Vec<String> {
        lock(&self.state.added).clone()
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = self
            .options
            .tools
            .names()
            .iter()
            .filter_map(|n| definition(n))
            .collect();
        for name in self.added() {
            tools.push(Tool::new(
                name,
                "A tool added at run time.",
                object(json!({"type": "object"})),
            ));
        }
        tools
    }

    /// A recorded tool's call (`Options::replay`).
    fn replayed(
        &self,
        replay: &[Tool],
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        match replay.iter().find(|t| t.name == request.name) {
            Some(t) => text(format!("{} ran with {}", t.name, Value::Object(args))),
            None => Err(ErrorData::invalid_params(
                format!("no tool {}", request.name),
                None,
            )),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ServerHandler for Handler {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        if self.options.session_only {
            const SESSION_REVISIONS: &[ProtocolVersion] = &[
                ProtocolVersion::V_2024_11_05,
                ProtocolVersion::V_2025_03_26,
                ProtocolVersion::V_2025_06_18,
                ProtocolVersion::V_2025_11_25,
            ];
            Cow::Borrowed(SESSION_REVISIONS)
        } else {
            Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("testkit-mcp-server", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.record(&context);
        if let Some(replay) = &self.options.replay {
            return Ok(ListToolsResult::with_all_items(replay.clone()));
        }
        let list = ListToolsResult::with_all_items(self.tools());
        Ok(match self.options.ttl_ms {
            Some(ms) => list.with_ttl_ms(ms),
            None => list,
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.record(&context);
        if let Some(replay) = &self.options.replay {
            return self.replayed(replay, &request);
        }
        let args = request.arguments.clone().unwrap_or_default();
        let num = |k: &str| args.get(k).and_then(Value::as_f64);
        let string = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let name = request.name.as_ref();
        if !self.options.tools.names().contains(&name) {
            return if self.added().iter().any(|n| n == name) {
                text(format!("{name} ran"))
            } else {
                Err(ErrorData::invalid_params(format!("no tool {name}"), None))
            };
        }
        match name {
            "echo" => match string("message") {
                Some(m) => text(format!("Echo: {m}")),
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
            "ping" => text("pong"),
            "fail" => {
                Ok(CallToolResult::error(vec![ContentBlock::text("the widget is broken")]).into())
            }
            "sleep" => {
                let ms = num("ms").unwrap_or(0.0).max(0.0) as u64;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = context.ct.cancelled() => {
                        self.state.cancelled.fetch_add(1, Ordering::SeqCst);
                        return Err(ErrorData::internal_error("cancelled", None));
                    }
                }
                text(format!("slept {ms} ms"))
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
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(b"this is not json {{{\n");
                    let _ = out.flush();
                }
                std::future::pending::<()>().await;
                Err(ErrorData::internal_error("unreachable", None))
            }
            "huge" => {
                let n = num("bytes").unwrap_or(0.0).max(0.0) as usize;
                text("x".repeat(n))
            }
            "add_tool" => {
                let name = string("name").unwrap_or_else(|| "added".into());
                lock(&self.state.added).push(name.clone());
                // In a session (or over stdio) this reaches the client; statelessly there is
                // no stream for it (the list's ttlMs is what tells the client to look again).
                if args.get("silent") != Some(&Value::Bool(true)) {
                    let _ = context.peer.notify_tool_list_changed().await;
                }
                text(format!("added {name}"))
            }
            "env" => {
                let name = string("name").unwrap_or_default();
                text(std::env::var(&name).unwrap_or_else(|_| "<unset>".into()))
            }
            "request_id" => text(context.id.to_string()),
            "cancelled" => text(self.state.cancelled.load(Ordering::SeqCst).to_string()),
            // rmcp moves the request's `_meta` into the context.
            "traceparent" => text(
                context
                    .meta
                    .get_traceparent()
                    .or(request.traceparent())
                    .unwrap_or("<none>"),
            ),
            "ask" => match &request.input_responses {
                None => {
                    let asked: InputRequest = serde_json::from_value(
                        json!({"method": "elicitation/create", "params": name_form()}),
                    )
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                    let requests = BTreeMap::from([("who".to_owned(), asked)]);
                    Ok(InputRequiredResult::new(Some(requests), Some("asked-once".into())).into())
                }
                Some(responses) => text(format!(
                    "answered: {}",
                    responses.get("who").cloned().unwrap_or(Value::Null)
                )),
            },
            "ask_now" | "ask_defaults" => {
                let form = if name == "ask_now" {
                    name_form()
                } else {
                    defaults_form()
                };
                let params: ElicitRequestParams = serde_json::from_value(form)
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
            "ask_then_give_up" => {
                let params: ElicitRequestParams = serde_json::from_value(name_form())
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                // Past its timeout rmcp tells the client with `notifications/cancelled`.
                let mut options = PeerRequestOptions::no_options();
                options.timeout = Some(Duration::from_millis(300));
                let asked = context
                    .peer
                    .send_request_with_option(
                        ServerRequest::ElicitRequest(ElicitRequest::new(params)),
                        options,
                    )
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                match asked.await_response().await {
                    Ok(_) => text("answered in time"),
                    Err(e) => text(format!("gave up: {e}")),
                }
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}
