//! # testkit — test doubles for the workspace (dev-only)
//!
//! [`ScriptedServer`] is a real HTTP server on 127.0.0.1 that speaks the OpenAI
//! chat-completions API (and `/v1/embeddings`, with [`scripted_embedding`]'s vectors) from a script: each request takes the next [`Reply`] (or asks a
//! [`Responder`] closure). It answers as JSON, or as SSE when the request says `"stream": true`,
//! with controllable chunking and delays, records every request, and injects faults
//! (error statuses with `Retry-After`, a stream cut mid-way, a malformed SSE line, a hang).
//!
//! [`LiteLlmProxy`] runs LiteLLM's proxy, pinned, on 127.0.0.1 in front of a scripted server:
//! an independent implementation of Anthropic's, OpenAI Responses' and Gemini's wires, which
//! translates each to the scripted server's Chat Completions and back.
//!
//! The workspace's one MCP test server is here too, written once (`mcp_server.rs`) and served
//! two ways: over Streamable HTTP in the test's process (`McpHttpServer`, feature `mcp-http`)
//! and over stdio as a process of its own that misbehaves on request (`run_mcp_stdio_server`,
//! feature `mcp-stdio`, the `main` of mcp-bridge's `misbehaving-mcp-server`). Beside it, a
//! hand-written MCP server with no SDK, as the official conformance suite writes its own
//! (`PlainMcpHttpServer`, `run_plain_mcp_stdio_server`): what a client's handshake meets
//! outside the SDKs.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use testkit::{Reply, ScriptedServer};
//! let server = ScriptedServer::start().await;
//! server.push(Reply::text("hello"));
//! let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
//! // any OpenAI-compatible client pointed at server.base_url() now gets "hello"
//! # let _ = body;
//! assert!(server.base_url().starts_with("http://127.0.0.1:"));
//! # }
//! ```

mod litellm;
#[cfg(feature = "mcp-http")]
mod mcp_http;
#[cfg(any(feature = "mcp-http", feature = "mcp-stdio"))]
mod mcp_plain;
#[cfg(any(feature = "mcp-http", feature = "mcp-stdio"))]
mod mcp_server;
#[cfg(feature = "mcp-stdio")]
mod mcp_stdio;
mod npm;
mod wire;

pub use litellm::{LiteLlmProxy, litellm_python, litellm_version};
#[cfg(feature = "mcp-http")]
pub use mcp_http::{McpHttpServer, TOOLS_TTL_MS};
#[cfg(feature = "mcp-stdio")]
pub use mcp_plain::run_plain_mcp_stdio_server;
#[cfg(feature = "mcp-http")]
pub use mcp_plain::{DiscoverAnswer, PlainMcpHttpServer};
#[cfg(feature = "mcp-stdio")]
pub use mcp_stdio::run_mcp_stdio_server;
pub use npm::{mcp_inspector, npm_mcp_server, python_mcp_sdk, toolkit_cache_dir};
pub use wire::{WireReply, WireRequest, WireServer};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};

/// A scripted tool call: id, name and the raw arguments text (sent as the model would).
#[derive(Debug, Clone)]
pub struct ScriptedCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments text, sent verbatim (it may be invalid JSON on purpose).
    pub arguments: String,
}

/// How a scripted message is streamed.
#[derive(Debug, Clone)]
pub struct StreamShape {
    /// Characters of text per chunk (at least 1).
    pub text_chunk: usize,
    /// Characters of tool-call arguments per chunk (at least 1).
    pub args_chunk: usize,
    /// Pause before each chunk.
    pub delay: Duration,
    /// Omit `index` on tool-call deltas (as some servers do).
    pub omit_index: bool,
    /// Send `"finish_reason": ""` on intermediate chunks (as some servers do).
    pub empty_finish_reason: bool,
    /// Cut the connection after this many chunks, with no `[DONE]` and no finish.
    pub cut_after: Option<usize>,
    /// Send this raw (invalid) `data:` line after this many chunks.
    pub malformed_after: Option<(usize, String)>,
    /// Explicit text chunks, instead of cutting every `text_chunk` characters.
    pub text_chunks: Option<Vec<String>>,
    /// Add a usage chunk at the end.
    pub usage: bool,
}

impl Default for StreamShape {
    fn default() -> Self {
        Self {
            text_chunk: 4,
            args_chunk: 5,
            delay: Duration::ZERO,
            omit_index: false,
            empty_finish_reason: false,
            cut_after: None,
            malformed_after: None,
            text_chunks: None,
            usage: true,
        }
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An assistant message: text and/or tool calls. Served as JSON or SSE as the request asks.
    Message {
        /// Text content.
        content: String,
        /// Tool calls.
        tool_calls: Vec<ScriptedCall>,
        /// `finish_reason` to report (`None`: "tool_calls" when there are calls, else "stop").
        finish_reason: Option<String>,
        /// Streaming shape.
        shape: StreamShape,
        /// Wait this long before answering at all.
        latency: Duration,
    },
    /// An error status with an OpenAI-style error body and optional `Retry-After` seconds.
    Status {
        /// HTTP status.
        status: u16,
        /// Error message.
        message: String,
        /// `Retry-After` header value, in seconds.
        retry_after: Option<String>,
    },
    /// A raw body with the given status and content type, sent as is.
    Raw {
        /// HTTP status.
        status: u16,
        /// Content type.
        content_type: String,
        /// Body.
        body: String,
    },
    /// Never answer (until the client gives up).
    Hang,
}

impl Reply {
    /// A plain text answer.
    pub fn text(content: impl Into<String>) -> Self {
        Self::Message {
            content: content.into(),
            tool_calls: vec![],
            finish_reason: None,
            shape: StreamShape::default(),
            latency: Duration::ZERO,
        }
    }
    /// An answer that calls one tool; `arguments` is sent verbatim.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Self {
        Self::tool_calls(&[(id, name, arguments)])
    }
    /// An answer that calls several tools.
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Self {
        Self::Message {
            content: String::new(),
            tool_calls: calls
                .iter()
                .map(|(id, name, args)| ScriptedCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    arguments: (*args).into(),
                })
                .collect(),
            finish_reason: None,
            shape: StreamShape::default(),
            latency: Duration::ZERO,
        }
    }
    /// An error status.
    pub fn status(status: u16, message: &str) -> Self {
        Self::Status {
            status,
            message: message.into(),
            retry_after: None,
        }
    }
    /// Add text content to a message reply.
    pub fn with_content(mut self, text: &str) -> Self {
        if let Self::Message { content, .. } = &mut self {
            *content = text.into();
        }
        self
    }
    /// Set `Retry-After` (seconds) on a status reply.
    pub fn retry_after(mut self, secs: &str) -> Self {
        if let Self::Status { retry_after, .. } = &mut self {
            *retry_after = Some(secs.into());
        }
        self
    }
    /// Set the finish reason of a message reply.
    pub fn finish_reason(mut self, reason: &str) -> Self {
        if let Self::Message { finish_reason, .. } = &mut self {
            *finish_reason = Some(reason.into());
        }
        self
    }
    /// Change the streaming shape of a message reply.
    pub fn shape(mut self, f: impl FnOnce(&mut StreamShape)) -> Self {
        if let Self::Message { shape, .. } = &mut self {
            f(shape);
        }
        self
    }
    /// Wait before answering.
    pub fn latency(mut self, d: Duration) -> Self {
        if let Self::Message { latency, .. } = &mut self {
            *latency = d;
        }
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The JSON body.
    pub body: Value,
    /// The headers.
    pub headers: HeaderMap,
}

/// Computes a reply from the request body (for scripts that depend on what was sent).
pub type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    responder: Option<Responder>,
    requests: Vec<Recorded>,
    record: bool,
}

type Shared = Arc<Mutex<Inner>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The scripted OpenAI-compatible server. Stops when dropped.
pub struct ScriptedServer {
    addr: SocketAddr,
    state: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedServer {
    /// Binds 127.0.0.1 on a free port and serves until dropped.
    ///
    /// # Panics
    /// If no port on 127.0.0.1 can be bound (a test environment failure).
    #[allow(clippy::expect_used)]
    pub async fn start() -> Self {
        let state: Shared = Arc::new(Mutex::new(Inner {
            record: true,
            ..Inner::default()
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/v1/embeddings", post(embeddings))
            .route("/chat/completions", post(handle))
            .route(
                "/v1/models",
                get(|| async { axum::Json(json!({"data": [{"id": "scripted"}]})) }),
            )
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        // No Nagle delay: each SSE chunk leaves as soon as it is written, like a real server.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state, task }
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL for an OpenAI-compatible client.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a reply to the script.
    pub fn push(&self, reply: Reply) {
        lock(&self.state).script.push_back(reply);
    }

    /// Answers every request the script does not cover with this closure.
    pub fn respond_with(&self, f: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        lock(&self.state).responder = Some(Arc::new(f));
    }

    /// Stop (or resume) recording requests, e.g. for load tests.
    pub fn set_recording(&self, on: bool) {
        lock(&self.state).record = on;
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).requests.clone()
    }

    /// Forgets the requests received so far (the next one is `requests()[0]`).
    pub fn clear_requests(&self) {
        lock(&self.state).requests.clear();
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        lock(&self.state).requests.len()
    }

    /// Replies still waiting in the script.
    pub fn remaining(&self) -> usize {
        lock(&self.state).script.len()
    }
}

/// A request's JSON body, recorded (when recording is on); a body that is not JSON is an
/// error for a 400.
fn receive(state: &Shared, headers: HeaderMap, body: &Bytes) -> Result<Value, String> {
    let body: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let mut s = lock(state);
    if s.record {
        s.requests.push(Recorded {
            body: body.clone(),
            headers,
        });
    }
    Ok(body)
}

fn raw_response(status: u16, content_type: String, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Body::from(body))
        .unwrap_or_default()
}

async fn handle(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response<Body> {
    let body = match receive(&state, headers, &body) {
        Ok(v) => v,
        Err(e) => return error_response(400, &e, None),
    };
    let reply = {
        let mut s = lock(&state);
        match s.script.pop_front() {
            Some(r) => r,
            None => match &s.responder {
                Some(f) => f(&body),
                None => Reply::status(500, "scripted server: the script is exhausted"),
            },
        }
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_owned();
    match reply {
        Reply::Hang => {
            std::future::pending::<()>().await;
            error_response(500, "unreachable", None)
        }
        Reply::Status {
            status,
            message,
            retry_after,
        } => error_response(status, &message, retry_after.as_deref()),
        Reply::Raw {
            status,
            content_type,
            body,
        } => raw_response(status, content_type, body),
        Reply::Message {
            content,
            tool_calls,
            finish_reason,
            shape,
            latency,
        } => {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let finish = finish_reason.unwrap_or_else(|| {
                if tool_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                }
                .to_owned()
            });
            if stream {
                sse(&model, &content, &tool_calls, &finish, shape)
            } else {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
                let mut message = json!({"role": "assistant", "content": if content.is_empty() && !calls.is_empty() { Value::Null } else { json!(content) }});
                if !calls.is_empty() {
                    message["tool_calls"] = json!(calls);
                }
                let v = json!({
                    "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    "system_fingerprint": "scripted-extra-field"
                });
                Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from(v.to_string()))
                    .unwrap_or_default()
            }
        }
    }
}

/// The width of the scripted server's embeddings.
pub const EMBEDDING_WIDTH: usize = 8;

/// The scripted server's embedding of `text`: its bytes counted by value modulo
/// [`EMBEDDING_WIDTH`] (deterministic, and different texts mostly differ).
pub fn scripted_embedding(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; EMBEDDING_WIDTH];
    for b in text.bytes() {
        v[usize::from(b) % EMBEDDING_WIDTH] += 1.0;
    }
    v
}

/// `POST /v1/embeddings`: recorded like a chat request; an error status, raw body or hang at
/// the head of the script is served (and taken), else each input's [`scripted_embedding`],
/// listed last to first with its `index` (a client must order by it).
async fn embeddings(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let body = match receive(&state, headers, &body) {
        Ok(v) => v,
        Err(e) => return error_response(400, &e, None),
    };
    let scripted = {
        let mut s = lock(&state);
        match s.script.front() {
            Some(Reply::Status { .. } | Reply::Raw { .. } | Reply::Hang) => s.script.pop_front(),
            _ => None,
        }
    };
    match scripted {
        Some(Reply::Status {
            status,
            message,
            retry_after,
        }) => return error_response(status, &message, retry_after.as_deref()),
        Some(Reply::Raw {
            status,
            content_type,
            body,
        }) => return raw_response(status, content_type, body),
        Some(_) => {
            std::future::pending::<()>().await;
        }
        None => {}
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => return error_response(400, "`input` must be a string or an array of strings", None),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(
            |(i, t)| json!({"object": "embedding", "index": i, "embedding": scripted_embedding(t)}),
        )
        .collect();
    let v = json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}});
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap_or_default()
}

fn error_response(status: u16, message: &str, retry_after: Option<&str>) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json");
    if let Some(r) = retry_after {
        b = b.header("retry-after", r);
    }
    let body = json!({"error": {"message": message, "type": "scripted_error", "param": null, "code": status.to_string()}});
    b.body(Body::from(body.to_string())).unwrap_or_default()
}

fn chunks_of(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

enum Frame {
    Data(String),
    Cut,
}

fn sse(
    model: &str,
    content: &str,
    calls: &[ScriptedCall],
    finish: &str,
    shape: StreamShape,
) -> Response<Body> {
    let base = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mid_finish = if shape.empty_finish_reason {
        json!("")
    } else {
        Value::Null
    };
    let mut events: Vec<Value> = vec![base(
        json!({"role": "assistant", "content": ""}),
        mid_finish.clone(),
    )];
    let texts = shape.text_chunks.clone().unwrap_or_else(|| {
        if content.is_empty() {
            vec![]
        } else {
            chunks_of(content, shape.text_chunk)
        }
    });
    for t in texts {
        events.push(base(json!({"content": t}), mid_finish.clone()));
    }
    for (i, c) in calls.iter().enumerate() {
        let mut head =
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}});
        if !shape.omit_index {
            head["index"] = json!(i);
        }
        events.push(base(json!({"tool_calls": [head]}), mid_finish.clone()));
        for piece in chunks_of(&c.arguments, shape.args_chunk) {
            let mut d = json!({"function": {"arguments": piece}});
            if !shape.omit_index {
                d["index"] = json!(i);
            }
            events.push(base(json!({"tool_calls": [d]}), mid_finish.clone()));
        }
    }
    events.push(base(json!({}), json!(finish)));
    let mut frames: Vec<Frame> = events
        .into_iter()
        .map(|e| Frame::Data(e.to_string()))
        .collect();
    if shape.usage {
        frames.push(Frame::Data(
            json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": model,
                   "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
            .to_string(),
        ));
    }
    frames.push(Frame::Data("[DONE]".into()));
    if let Some((after, raw)) = &shape.malformed_after {
        let at = (*after).min(frames.len());
        frames.insert(at, Frame::Data(raw.clone()));
    }
    if let Some(after) = shape.cut_after {
        frames.truncate(after);
        frames.push(Frame::Cut);
    }
    let delay = shape.delay;
    let stream = futures::stream::unfold(frames.into_iter(), move |mut it| async move {
        let frame = it.next()?;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let item: Result<Bytes, std::io::Error> = match frame {
            Frame::Data(d) => Ok(Bytes::from(format!("data: {d}\n\n"))),
            Frame::Cut => Err(std::io::Error::other("scripted cut")),
        };
        Some((item, it))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}
