//! The axum server: the page, the state endpoint and the streaming message endpoint.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use messaging::MessageBus;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::ChatBackend;
use crate::backend::PanelEvent;
use crate::state::{Entry, EntryKind, SessionRef, Sessions, ToolActivity, lock};

const PAGE: &str = include_str!("page.html");

/// Limits and timeouts of the panel.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PanelConfig {
    /// Largest request body, in bytes; larger is `413` (default 16 KiB).
    pub max_body_bytes: usize,
    /// Longest user message, in characters; longer is `413` (default 4000).
    pub max_text_chars: usize,
    /// Answers running at once; more wait for a slot (default 32).
    pub max_concurrent_turns: usize,
    /// How long a request waits for a slot before `503` (default 30 s).
    pub queue_timeout: Duration,
    /// Longest answer; then it is stopped with an error entry (default 120 s).
    pub turn_timeout: Duration,
    /// Sessions kept; the least recently used idle one goes first (default 10 000).
    pub max_sessions: usize,
    /// Entries kept per session; the oldest go first (default 500).
    pub max_entries: usize,
}

impl Default for PanelConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 * 1024,
            max_text_chars: 4000,
            max_concurrent_turns: 32,
            queue_timeout: Duration::from_secs(30),
            turn_timeout: Duration::from_secs(120),
            max_sessions: 10_000,
            max_entries: 500,
        }
    }
}

impl PanelConfig {
    /// Sets the answer time limit.
    pub fn with_turn_timeout(mut self, d: Duration) -> Self {
        self.turn_timeout = d;
        self
    }
    /// Sets how many answers run at once.
    pub fn with_max_concurrent_turns(mut self, n: usize) -> Self {
        self.max_concurrent_turns = n;
        self
    }
    /// Sets the request body limit.
    pub fn with_max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }
}

struct App {
    backend: Arc<dyn ChatBackend>,
    sessions: Sessions,
    config: PanelConfig,
    permits: Arc<Semaphore>,
}

/// The chat panel: a backend, a bus and the per-session conversation state.
///
/// HTTP API (all errors are JSON `{"error": "..."}`):
/// * `GET /` — the page.
/// * `GET /api/sessions/{id}` — `{"sessionId", "busy", "entries": [Entry...]}`.
/// * `POST /api/sessions/{id}/messages` with `{"text": "...", "inReplyTo": ENTRY_ID?}` —
///   an SSE stream of `entry` (a new [`Entry`]), `update` (a changed one), `delta`
///   (`{"id", "text"}`: text appended to an assistant entry) and finally `done`.
///   `400` malformed, `409` an answer is already running in this session, `413` too large,
///   `503` no slot free within the queue timeout.
/// * `GET /healthz` — `ok`.
///
/// Session ids are 8–64 characters of `A-Z a-z 0-9 - _`.
#[derive(Clone)]
pub struct ChatPanel {
    app: Arc<App>,
}

impl std::fmt::Debug for ChatPanel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatPanel")
            .field("config", &self.app.config)
            .finish_non_exhaustive()
    }
}

impl ChatPanel {
    /// A panel whose person in session `S` receives bus messages sent to `user:S`.
    pub fn new(backend: impl ChatBackend, bus: MessageBus, config: PanelConfig) -> Self {
        let permits = Arc::new(Semaphore::new(config.max_concurrent_turns.max(1)));
        Self {
            app: Arc::new(App {
                backend: Arc::new(backend),
                sessions: Sessions::new(bus, config.max_sessions, config.max_entries),
                config,
                permits,
            }),
        }
    }

    /// The axum router (to mount it in your own server).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/healthz", get(|| async { "ok" }))
            .route("/api/sessions/{id}", get(get_session))
            .route(
                "/api/sessions/{id}/messages",
                axum::routing::post(post_message),
            )
            .fallback(|| async { error(StatusCode::NOT_FOUND, "no such endpoint") })
            .layer(DefaultBodyLimit::max(self.app.config.max_body_bytes))
            .with_state(self.app.clone())
    }

    /// Serves on `addr`, which must be a loopback address (`127.0.0.1:0` picks a free port).
    pub async fn serve(&self, addr: &str) -> std::io::Result<PanelServer> {
        let addr: SocketAddr = addr.parse().map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
        })?;
        if !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{addr} is not a loopback address: the panel has no authentication"),
            ));
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let router = self.router();
        let task = tokio::spawn(async move {
            let r = axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "chat panel server stopped");
            }
        });
        Ok(PanelServer {
            addr,
            stop: Some(tx),
            task,
        })
    }
}

/// A running panel server.
#[derive(Debug)]
pub struct PanelServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl PanelServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
    /// Stops accepting, lets open responses finish for up to 5 s, then stops.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(Duration::from_secs(5), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

impl Drop for PanelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into()}))).into_response()
}

async fn page() -> Response {
    let mut r = axum::response::Html(PAGE).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; \
             img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[allow(clippy::result_large_err)] // built once per request and returned straight away
fn session_id(path: Result<Path<String>, PathRejection>) -> Result<String, Response> {
    check_session_id(path).map_err(|m| error(StatusCode::BAD_REQUEST, m))
}

fn check_session_id(path: Result<Path<String>, PathRejection>) -> Result<String, String> {
    let Path(id) = path.map_err(|e| format!("bad session id: {e}"))?;
    let ok = (8..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(id)
    } else {
        Err("bad session id: use 8 to 64 characters of A-Z, a-z, 0-9, '-' and '_'".into())
    }
}

async fn get_session(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let session = app.sessions.get_or_create(&id);
    let mut s = lock(&session);
    if !s.busy {
        // messages that arrived while no answer was running (a running one shows them live)
        s.drain_inbox();
    }
    axum::Json(json!({"sessionId": id, "busy": s.busy, "entries": s.entries})).into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PostBody {
    text: String,
    #[serde(default)]
    in_reply_to: Option<u64>,
}

async fn post_message(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let limit = app.config.max_body_bytes;
    let body = match body {
        Ok(b) => b,
        Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_))) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than {limit} bytes"),
            );
        }
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("could not read the request body: {e}"),
            );
        }
    };
    let req: PostBody = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "malformed request: expected JSON {{\"text\": \"...\", \"inReplyTo\": N?}}: {e}"
                ),
            );
        }
    };
    let text = req.text.trim().to_owned();
    if text.is_empty() {
        return error(StatusCode::BAD_REQUEST, "text is empty");
    }
    let chars = text.chars().count();
    if chars > app.config.max_text_chars {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "text has {chars} characters; at most {} are allowed",
                app.config.max_text_chars
            ),
        );
    }
    let permit = match tokio::time::timeout(
        app.config.queue_timeout,
        app.permits.clone().acquire_owned(),
    )
    .await
    {
        Ok(Ok(p)) => p,
        _ => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the panel is busy; try again shortly",
            );
        }
    };
    let session = app.sessions.get_or_create(&id);
    let first = {
        let mut s = lock(&session);
        if s.busy {
            return error(
                StatusCode::CONFLICT,
                "an answer is still running in this session; wait for it to finish",
            );
        }
        s.busy = true;
        let mut first: Vec<Event> = s
            .drain_inbox()
            .iter()
            .filter_map(|e| ev("entry", e))
            .collect();
        first.extend(
            s.answer_open(&text, req.in_reply_to)
                .iter()
                .filter_map(|e| ev("update", e)),
        );
        let user = s.next_entry(EntryKind::User, text.clone());
        first.extend(ev("entry", &user));
        first
    };
    let (tx, rx) = mpsc::channel::<Event>(256);
    tokio::spawn(run_turn(app.clone(), session, id, text, tx, first, permit));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn ev(name: &str, data: &impl serde::Serialize) -> Option<Event> {
    match Event::default().event(name).json_data(data) {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::error!(error = %e, "could not encode an SSE event");
            None
        }
    }
}

/// Sends to the page while it listens; after a disconnect the answer still completes into the
/// session state (a reload shows it).
struct Out {
    tx: mpsc::Sender<Event>,
    gone: bool,
}

impl Out {
    async fn send(&mut self, e: Option<Event>) {
        if let (false, Some(e)) = (self.gone, e)
            && self.tx.send(e).await.is_err()
        {
            tracing::debug!("the page stopped listening; the answer goes on into the session");
            self.gone = true;
        }
    }
}

/// Clears the session's busy flag however the turn ends.
struct BusyGuard(SessionRef);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        lock(&self.0).busy = false;
    }
}

async fn run_turn(
    app: Arc<App>,
    session: SessionRef,
    session_id: String,
    text: String,
    tx: mpsc::Sender<Event>,
    first: Vec<Event>,
    permit: OwnedSemaphorePermit,
) {
    let busy = BusyGuard(session.clone());
    let mut out = Out { tx, gone: false };
    for e in first {
        out.send(Some(e)).await;
    }
    let mut events = app.backend.reply(&session_id, &text);
    let deadline = tokio::time::Instant::now() + app.config.turn_timeout;
    let mut current: Option<u64> = None; // assistant entry receiving deltas
    let mut calls: HashMap<String, u64> = HashMap::new();
    let mut ended = false;
    loop {
        let next = match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(n) => n,
            Err(_) => {
                let secs = app.config.turn_timeout.as_secs();
                let e = lock(&session).next_entry(
                    EntryKind::Error,
                    format!("The answer took longer than {secs} s and was stopped."),
                );
                out.send(ev("entry", &e)).await;
                ended = true;
                break;
            }
        };
        let Some(event) = next else { break };
        let mut emit: Vec<Option<Event>> = Vec::new();
        {
            let mut s = lock(&session);
            match event {
                PanelEvent::TextDelta(t) if t.is_empty() => {}
                PanelEvent::TextDelta(t) => {
                    let id = match current {
                        Some(id) => id,
                        None => {
                            let e = s.next_entry(EntryKind::Assistant, "");
                            emit.push(ev("entry", &e));
                            current = Some(e.id);
                            e.id
                        }
                    };
                    if let Some(e) = s.get_mut(id) {
                        e.text.push_str(&t);
                    }
                    emit.push(ev("delta", &json!({"id": id, "text": t})));
                }
                PanelEvent::ToolStarted {
                    id,
                    name,
                    arguments,
                } => {
                    current = None;
                    let mut e = Entry::new(0, EntryKind::Tool, name.clone());
                    e.tool = Some(ToolActivity {
                        call_id: id.clone(),
                        name,
                        arguments,
                        result: None,
                        is_error: false,
                    });
                    let e = s.push(e);
                    calls.insert(id, e.id);
                    emit.push(ev("entry", &e));
                }
                PanelEvent::ToolResult {
                    id,
                    name,
                    content,
                    is_error,
                } => {
                    current = None;
                    let updated = match calls.get(&id).and_then(|eid| s.get_mut(*eid)) {
                        Some(e) => {
                            if let Some(t) = &mut e.tool {
                                t.result = Some(content);
                                t.is_error = is_error;
                            }
                            e.clone()
                        }
                        None => {
                            let mut e = Entry::new(0, EntryKind::Tool, name.clone());
                            e.tool = Some(ToolActivity {
                                call_id: id,
                                name,
                                arguments: serde_json::Value::Null,
                                result: Some(content),
                                is_error,
                            });
                            s.push(e)
                        }
                    };
                    emit.push(ev("update", &updated));
                    for m in s.drain_inbox() {
                        emit.push(ev("entry", &m));
                    }
                }
                PanelEvent::Final(answer) => {
                    ended = true;
                    let shown = current.and_then(|id| s.get_mut(id)).map(|e| e.text.clone());
                    match (current, shown) {
                        (Some(_), Some(t)) if t.trim() == answer.trim() => {}
                        (Some(id), Some(_)) if !answer.trim().is_empty() => {
                            if let Some(e) = s.get_mut(id) {
                                e.text = answer;
                                emit.push(ev("update", &e.clone()));
                            }
                        }
                        _ if !answer.trim().is_empty() => {
                            let e = s.next_entry(EntryKind::Assistant, answer);
                            emit.push(ev("entry", &e));
                        }
                        _ => {}
                    }
                }
                PanelEvent::IterationLimit(n) => {
                    let e = s.next_entry(
                        EntryKind::Notice,
                        format!("The agent stopped after {n} model calls (its round limit)."),
                    );
                    emit.push(ev("entry", &e));
                }
                PanelEvent::Error(msg) => {
                    ended = true;
                    let e = s.next_entry(EntryKind::Error, msg);
                    emit.push(ev("entry", &e));
                }
            }
        }
        for e in emit {
            out.send(e).await;
        }
    }
    drop(events);
    let mut tail: Vec<Option<Event>> = Vec::new();
    {
        let mut s = lock(&session);
        for m in s.drain_inbox() {
            tail.push(ev("entry", &m));
        }
        if !ended {
            let e = s.next_entry(EntryKind::Error, "The answer ended unexpectedly.");
            tail.push(ev("entry", &e));
        }
    }
    // the session takes a new message from here on, even if this page is slow to read the tail
    drop(busy);
    drop(permit);
    for e in tail {
        out.send(e).await;
    }
    out.send(ev("done", &json!({}))).await;
}
