//! The axum server: the page, the state endpoint and the streaming message endpoint, behind
//! the request checks (who may call) and the panel's own accept loop (timeouts, connection cap).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use context_engine::StoreChange;
use futures::StreamExt;
use llm_core::Message;
use messaging::MessageBus;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tool_system::LoopEvent;

use crate::backend::user_sentence;
use crate::lease::{self, Acquired};
use crate::state::{
    Entry, EntryKind, Sessions, ToolActivity, entries_from_history, live_id, rows_from_history,
};
use crate::{ChatBackend, PanelConfig};

const PAGE: &str = include_str!("page.html");

struct App {
    backend: Arc<dyn ChatBackend>,
    sessions: Sessions,
    config: PanelConfig,
    permits: Arc<Semaphore>,
    /// MCP servers' questions for the person (elicitation).
    asks: Arc<crate::elicit::Asks>,
    /// This worker's id in the turn leases.
    worker: String,
    /// The store's change feed, forwarded to the streams that follow a conversation (started
    /// by the first stream; `false` when the store has none and streams read on a timer).
    feed: tokio::sync::OnceCell<bool>,
    watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for App {
    fn drop(&mut self) {
        let watcher = self.watcher.get_mut();
        if let Some(t) = watcher
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            t.abort();
        }
    }
}

impl App {
    /// Whether a change feed wakes the streams; starts forwarding it the first time.
    async fn feed(self: &Arc<Self>) -> bool {
        *self
            .feed
            .get_or_init(|| async {
                let mut feed = match self.sessions.store().watch().await {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::info!(error = %e, poll_ms = self.config.follow_poll.as_millis() as u64,
                            "chat panel: the session store has no change feed; event streams read it on a timer");
                        return false;
                    }
                };
                let app = Arc::downgrade(self);
                let task = tokio::spawn(async move {
                    while let Some(change) = feed.next().await {
                        let Some(app) = app.upgrade() else { return };
                        match change {
                            StoreChange::Session(id) => app.sessions.touch(&id),
                            _ => app.sessions.touch_all(),
                        }
                    }
                });
                *self
                    .watcher
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
                true
            })
            .await
    }
}

/// The chat panel: a backend, a bus and the per-session conversation state.
///
/// HTTP API (every error is JSON `{"error": "..."}`):
/// * `GET /` — the page.
/// * `GET /api/sessions/{id}` — `{"sessionId", "busy", "entries": [Entry...], "pending",
///   "lastEventId"}`; an unknown session has no entries (a `GET` never creates one).
///   `lastEventId` is the number of the last stored row (see the events stream).
/// * `GET /api/sessions/{id}/events` — an SSE stream of the conversation as it is stored, from
///   any worker sharing the store: one `row` event per stored message that shows something,
///   `{"row", "events": [{"event": "entry" | "update", "entry": Entry}]}`, with the SSE id
///   `row`; it starts after the `Last-Event-ID` header's row, else after `?after=N`, else at the
///   beginning — a stream that reconnects to another worker with `Last-Event-ID` misses and
///   repeats nothing. A `turn` event `{"busy"}` (no id) says whether an answer runs.
/// * `POST /api/sessions/{id}/messages` with `Content-Type: application/json` and the object
///   `{"text": "...", "inReplyTo": ENTRY_ID?}` — an SSE stream of `entry` (a new [`Entry`]),
///   `update` (a changed one), `delta` (`{"id", "text"}`: text appended to an assistant entry)
///   and finally `done`. `400` malformed (an array too), `408` body not received in time,
///   `409` an answer is already running in this session, `413` too large, `415` not JSON,
///   `503` no slot free within the queue timeout.
/// * `GET /healthz` — `ok`.
/// * `403` for a request from elsewhere: a `Host` that is not the panel's (loopback, or
///   [`PanelConfig::allowed_hosts`]) — DNS rebinding; an `Origin` that is not the panel's own
///   (or in [`PanelConfig::allowed_origins`]) on a `POST`, or `Sec-Fetch-Site` other than
///   `same-origin`/`none` — cross-site requests. `404` unknown path, `405` wrong method, `414`
///   request target over [`PanelConfig::max_uri_bytes`].
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
        let store = backend.store();
        Self {
            app: Arc::new(App {
                backend: Arc::new(backend),
                sessions: Sessions::new(
                    bus,
                    store,
                    config.history.is_shared(),
                    config.max_sessions,
                )
                .with_bus_memory(crate::state::BusMemory {
                    max_age: config.bus_memory_max_age,
                    max_ids: config.bus_memory_max_ids,
                }),
                config,
                permits,
                asks: Arc::default(),
                worker: lease::worker_id(),
                feed: tokio::sync::OnceCell::new(),
                watcher: std::sync::Mutex::new(None),
            }),
        }
    }

    /// The [`mcp_bridge::elicitation::Elicitor`] that shows MCP servers' questions in this
    /// panel: `bridge.set_elicitor(Arc::new(panel.elicitor()), limit)`.
    pub fn elicitor(&self) -> crate::elicit::PanelElicitor {
        crate::elicit::PanelElicitor {
            asks: self.app.asks.clone(),
        }
    }

    /// The axum router, with the request checks (to mount it in your own server; the
    /// connection timeouts and cap are [`serve`](Self::serve)'s).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/healthz", get(|| async { "ok" }))
            .route("/api/sessions/{id}", get(get_session))
            .route("/api/sessions/{id}/events", get(get_events))
            .route(
                "/api/sessions/{id}/messages",
                axum::routing::post(post_message),
            )
            .route(
                "/api/sessions/{id}/approvals",
                axum::routing::post(post_approvals),
            )
            .route(
                "/api/sessions/{id}/elicitations/{n}",
                axum::routing::post(post_elicitation),
            )
            .fallback(|| async { error(StatusCode::NOT_FOUND, "no such endpoint") })
            .method_not_allowed_fallback(|| async {
                error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method not allowed on this endpoint",
                )
            })
            .layer(axum::middleware::from_fn_with_state(
                self.app.clone(),
                check_request,
            ))
            .with_state(self.app.clone())
    }

    /// Serves on `addr`, which must be a loopback address (`127.0.0.1:0` picks a free port),
    /// with the connection limits of the [`PanelConfig`]: header-read, idle and write-stall
    /// timeouts and at most `max_connections` open connections.
    pub async fn serve(&self, addr: &str) -> std::io::Result<PanelServer> {
        // the persons' bus messages are taken from the start, not from the first conversation
        self.app.sessions.start_inbox();
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
        let (tx, rx) = watch::channel(false);
        let c = &self.app.config;
        let limits = crate::net::Limits {
            max_connections: c.max_connections,
            header_read_timeout: c.header_read_timeout,
            idle_timeout: c.idle_timeout,
            write_stall_timeout: c.write_stall_timeout,
            max_head_bytes: c.max_uri_bytes + 8 * 1024,
        };
        let task = tokio::spawn(crate::net::serve(listener, self.router(), limits, rx));
        Ok(PanelServer {
            addr,
            stop: tx,
            task,
        })
    }
}

/// A running panel server.
#[derive(Debug)]
pub struct PanelServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
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
        let _ = self.stop.send(true);
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
        let _ = self.stop.send(true);
        self.task.abort();
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into()}))).into_response()
}

/// `host[:port]` → host, lower case (`[::1]:80` → `[::1]`).
fn host_name(host: &str) -> String {
    let h = host.trim().to_ascii_lowercase();
    if h.starts_with('[') {
        return h.split_inclusive(']').next().unwrap_or_default().to_owned();
    }
    h.split(':').next().unwrap_or_default().to_owned()
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"))
}

/// Who may call: see [`ChatPanel`]'s API notes. Runs before every handler.
async fn check_request(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let c = &app.config;
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > c.max_uri_bytes {
        return error(
            StatusCode::URI_TOO_LONG,
            format!("request target is longer than {} bytes", c.max_uri_bytes),
        );
    }
    let h = req.headers();
    let Some(host) =
        header_str(h, header::HOST).or_else(|| req.uri().authority().map(|a| a.as_str()))
    else {
        return error(StatusCode::BAD_REQUEST, "the request has no Host header");
    };
    let host_ok = matches!(
        host_name(host).as_str(),
        "127.0.0.1" | "localhost" | "[::1]"
    ) || c.allowed_hosts.iter().any(|a| a.eq_ignore_ascii_case(host));
    if !host_ok {
        tracing::warn!(host = %host, "chat panel: refused a request for a foreign Host (DNS rebinding?)");
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "Host `{host}` is not this panel's address; behind a proxy, add it with PanelConfig::with_allowed_host"
            ),
        );
    }
    let fetch_site = header_str(h, header::HeaderName::from_static("sec-fetch-site"));
    if let Some(site) = fetch_site
        && !matches!(site, "same-origin" | "none")
    {
        tracing::warn!(sec_fetch_site = %site, "chat panel: refused a cross-site request");
        return error(
            StatusCode::FORBIDDEN,
            "cross-site requests are not accepted: use the panel's own page",
        );
    }
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && let Some(origin) = header_str(h, header::ORIGIN) {
        let o = origin.to_ascii_lowercase();
        let own = o == format!("http://{}", host.to_ascii_lowercase())
            || o == format!("https://{}", host.to_ascii_lowercase());
        if !own
            && !c
                .allowed_origins
                .iter()
                .any(|a| a.eq_ignore_ascii_case(origin))
        {
            tracing::warn!(origin = %origin, "chat panel: refused a request from another origin");
            return error(
                StatusCode::FORBIDDEN,
                format!(
                    "requests from origin `{origin}` are not accepted; add it with PanelConfig::with_allowed_origin if it is yours"
                ),
            );
        }
    }
    next.run(req).await
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
    if crate::state::is_session_id(&id) {
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
    match app.sessions.find(&id).await {
        Ok(true) => {}
        Ok(false) => {
            return axum::Json(json!({"sessionId": id, "busy": false, "entries": [],
                "pending": null, "lastEventId": 0}))
            .into_response();
        }
        Err(e) => return store_failed(&e),
    }
    let store = app.sessions.store();
    let (mut base, mut messages, turn) = match app.sessions.rows_and_turn(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => (0, Vec::new(), None),
        Err(e) => return store_failed(&e),
    };
    // whether an answer runs on any worker (an expired lease is closed here, and what that
    // stored is read again)
    let stale = turn.as_deref().is_some_and(lease::expired);
    let busy = match lease::running_from(store, &id, turn).await {
        Ok(b) => b,
        Err(e) => return store_failed(&e),
    };
    if stale {
        (base, messages) = match app.sessions.rows(&id).await {
            Ok(Some(r)) => r,
            Ok(None) => (0, Vec::new()),
            Err(e) => return store_failed(&e),
        };
    }
    let mut entries = entries_from_history(&id, base, &messages);
    let excess = entries.len().saturating_sub(app.config.max_entries.max(10));
    entries.drain(..excess);
    // Calls waiting for the person's approval, from the store: a reload or a restart shows
    // the same ones (with fresh tokens).
    let pending = app.backend.pending_approval(&id).await;
    let last = base + messages.len() as u64;
    axum::Json(
        json!({"sessionId": id, "busy": busy, "entries": entries, "pending": pending,
        "lastEventId": last}),
    )
    .into_response()
}

/// `GET /api/sessions/{id}/events`: see [`ChatPanel`]. `400` for a `Last-Event-ID` or `after`
/// that is not a row number.
async fn get_events(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    query: axum::extract::RawQuery,
) -> Response {
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let from_query = query.0.as_deref().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("after="))
            .map(str::to_owned)
    });
    let after = match header_str(&headers, header::HeaderName::from_static("last-event-id"))
        .map(str::to_owned)
        .or(from_query)
    {
        None => 0,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => n,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID (or after=) must be a row number from this stream",
                );
            }
        },
    };
    Sse::new(follow(app, id, after).map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Follows a conversation's stored rows after `after` until the client goes: woken by the
/// store's change feed (every worker's changes), else every `follow_poll`. While an answer runs
/// it also reads every `follow_poll`, to notice a lease that expired (a dead worker's answer is
/// then closed as interrupted). An idle stream with a feed costs no reads at all.
///
/// It is the response body itself — no task, no channel: an idle stream is this state and the
/// connection. A page that stops reading stops being polled, and the connection's write-stall
/// timeout (`net.rs`) closes it; a page that goes drops it.
fn follow(app: Arc<App>, id: String, after: u64) -> impl futures::Stream<Item = Event> + Send {
    let state = Follow {
        app,
        id,
        rows: Rows::new(after, false),
        busy: None,
        out: Out::queue(),
        live: None,
        woken: None,
        again: true,
    };
    futures::stream::unfold(state, |mut f| async move {
        loop {
            if let Some(e) = f.out.pop() {
                return Some((e, f));
            }
            if !f.again {
                f.wait().await;
            }
            f.again = f.read().await;
        }
    })
}

/// An events stream between reads.
struct Follow {
    app: Arc<App>,
    id: String,
    rows: Rows,
    /// Whether an answer runs, as last sent.
    busy: Option<bool>,
    /// Events read and not yet sent.
    out: Out,
    /// Whether the store has a change feed (asked on the first read).
    live: Option<bool>,
    /// Registered before the last read: a change committed during the read still wakes us.
    woken: Option<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
    /// Read again without waiting.
    again: bool,
}

impl Follow {
    /// Reads what is new; true when it should read again at once (the conversation was just
    /// opened on this worker: listen, then read again).
    async fn read(&mut self) -> bool {
        let app = &self.app;
        if self.live.is_none() {
            self.live = Some(app.feed().await);
        }
        let wake = app.sessions.changed(&self.id);
        self.woken = wake.map(|n| {
            let mut n = Box::pin(n.notified_owned());
            n.as_mut().enable();
            n
        });
        match app.sessions.find(&self.id).await {
            Ok(true) => {
                // the rows and the lease in one read
                let (base, messages, turn) = match app.sessions.rows_and_turn(&self.id).await {
                    Ok(Some(r)) => r,
                    Ok(None) => return false,
                    Err(e) => {
                        tracing::warn!(session = %self.id, error = %e, "chat panel: the events stream could not read the conversation");
                        return false;
                    }
                };
                let stale = turn.as_deref().is_some_and(lease::expired);
                match lease::running_from(app.sessions.store(), &self.id, turn).await {
                    Ok(b) if self.busy != Some(b) => {
                        self.busy = Some(b);
                        self.out.send(ev("turn", &json!({"busy": b}))).await;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(session = %self.id, error = %e, "chat panel: could not read whether an answer runs")
                    }
                }
                if stale {
                    // closing the expired answer may have stored a row: read it too
                    self.rows.flush(app, &self.id, &mut self.out).await;
                } else {
                    self.rows
                        .send(&self.id, base, &messages, &mut self.out)
                        .await;
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(session = %self.id, error = %e, "chat panel: the events stream could not read the conversation")
            }
        }
        self.woken.is_none() && app.sessions.changed(&self.id).is_some()
    }

    /// Waits for a change, or for the timer when the stream needs one.
    async fn wait(&mut self) {
        let timer = self.live != Some(true) || self.woken.is_none() || self.busy != Some(false);
        let poll = self.app.config.follow_poll;
        tokio::select! {
            () = async {
                match self.woken.as_mut() {
                    Some(n) => n.as_mut().await,
                    None => std::future::pending().await,
                }
            } => {
                // An answer's changes come in bursts (its lease and the person's message, its
                // round and the lease's release): one read after a short pause sees the burst.
                tokio::time::sleep(COALESCE).await;
            }
            () = tokio::time::sleep(poll), if timer => {}
        }
    }
}

/// How long a woken events stream waits before it reads, so that changes committed together
/// are read once (measured: a turn wakes a following stream 4 times).
const COALESCE: Duration = Duration::from_millis(15);

/// Sends a conversation's stored rows after the last one sent.
struct Rows {
    after: u64,
    /// `entry`/`update` events one by one (the answer's own stream) or one `row` event per row
    /// (the events stream).
    split: bool,
    /// The assistant entry whose text is streaming (shown until its stored row replaces it).
    provisional: Option<u64>,
    /// Running tools shown before their round is stored, by call id.
    live_tools: HashMap<String, Entry>,
    /// Calls already shown from the store. The loop's events can trail the store (a round is
    /// stored before the panel reads its last events): such a call's late live events are not
    /// shown again.
    stored_calls: std::collections::HashSet<String>,
    /// An answer's text was shown from the store before any of it streamed live: its late
    /// deltas are not shown (they would make a second copy). Cleared by the next live call.
    text_ahead: bool,
}

impl Rows {
    fn new(after: u64, split: bool) -> Self {
        Self {
            after,
            split,
            provisional: None,
            live_tools: HashMap::new(),
            stored_calls: std::collections::HashSet::new(),
            text_ahead: false,
        }
    }

    async fn flush(&mut self, app: &App, id: &str, out: &mut Out) {
        match app.sessions.rows(id).await {
            Ok(Some((base, messages))) => self.send(id, base, &messages, out).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "chat panel: could not read the stored conversation");
            }
        }
    }

    /// Sends the rows of `messages` (the first is row `base + 1`) after the last one sent.
    async fn send(&mut self, id: &str, base: u64, messages: &[Message], out: &mut Out) {
        let rows = rows_from_history(id, base, messages);
        let after = self.after;
        for r in rows.into_iter().filter(|r| r.row > after) {
            let mut events = r.events;
            for (name, e) in &mut events {
                if let Some(t) = &e.tool {
                    self.stored_calls.insert(t.call_id.clone());
                }
                if *name != "entry" {
                    continue;
                }
                match e.kind {
                    EntryKind::Assistant => {
                        e.replaces = self.provisional.take();
                        self.text_ahead = e.replaces.is_none();
                    }
                    EntryKind::Tool => {
                        e.replaces = e
                            .tool
                            .as_ref()
                            .and_then(|t| self.live_tools.remove(&t.call_id))
                            .map(|l| l.id);
                    }
                    _ => {}
                }
            }
            let id_of_row = r.row.to_string();
            if self.split {
                let n = events.len();
                for (i, (name, e)) in events.iter().enumerate() {
                    let event = ev(name, e);
                    out.send(if i + 1 == n {
                        event.map(|x| x.id(id_of_row.clone()))
                    } else {
                        event
                    })
                    .await;
                }
            } else {
                let list: Vec<Value> = events
                    .iter()
                    .map(|(name, e)| json!({"event": name, "entry": e}))
                    .collect();
                out.send(
                    ev("row", &json!({"row": r.row, "events": list}))
                        .map(|x| x.id(id_of_row.clone())),
                )
                .await;
            }
            self.after = r.row;
        }
    }
}

/// Whether reading the body stopped at the size limit (`to_bytes` reports that as an error
/// whose source chain holds http-body-util's `LengthLimitError`).
fn length_limit_hit(e: &axum::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.to_string().contains("length limit exceeded") {
            return true;
        }
        cur = err.source();
    }
    false
}

fn store_failed(e: &context_engine::StoreError) -> Response {
    tracing::error!(error = %e, "chat panel: the session store failed");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the conversation could not be loaded or saved just now; try again shortly",
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PostBody {
    text: String,
    #[serde(default)]
    in_reply_to: Option<u64>,
}

const MALFORMED: &str =
    "malformed request: expected the JSON object {\"text\": \"...\", \"inReplyTo\": N?}";

/// `POST /api/sessions/{id}/approvals` with `{"decisions": [{"call_id", "token", "approved",
/// "reason"?}]}`: the person's decisions on calls held for approval (the tokens are those of
/// the pending state the page was shown). Answers like a message: an SSE stream of the rest of
/// the turn. A decision that does not verify, or a call decided already (a second click, a
/// second tab), ends the stream with an error entry and changes nothing.
async fn post_approvals(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Decisions {
        decisions: Vec<tool_system::ApprovalDecision>,
    }
    const MAX_DECISIONS: usize = 64;
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let body = match read_json_body(&app, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let decisions = match serde_json::from_slice::<Decisions>(&body) {
        Ok(d) if !d.decisions.is_empty() && d.decisions.len() <= MAX_DECISIONS => d.decisions,
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("send between 1 and {MAX_DECISIONS} decisions"),
            );
        }
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "malformed request: expected {{\"decisions\": [{{\"call_id\", \"token\", \"approved\", \"reason\"?}}]}}: {e}"
                ),
            );
        }
    };
    let permit = match answer_slot(&app).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    match app.sessions.find(&id).await {
        Ok(true) => {}
        Ok(false) => return error(StatusCode::NOT_FOUND, "no such conversation"),
        Err(e) => return store_failed(&e),
    }
    let (lease, before) = match take_turn(&app, &id).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let events = app.backend.resume(&id, decisions);
    start_turn(app, id, lease, before, events, permit)
}

/// Takes the session's turn lease for this worker: `(lease, the last stored row before)`;
/// `409` when an answer runs (on any worker), `503` when the store fails.
#[allow(clippy::result_large_err)] // built once per request and returned straight away
async fn take_turn(app: &App, id: &str) -> Result<(String, u64), Response> {
    let store = app.sessions.store();
    let (before, turn) = match app.sessions.rows_and_turn(id).await {
        Ok(Some((base, messages, turn))) => (base + messages.len() as u64, turn),
        Ok(None) => (0, None),
        Err(e) => return Err(store_failed(&e)),
    };
    match lease::acquire_from(store, id, &app.worker, app.config.turn_lease, turn).await {
        Ok(Acquired::Held(lease)) => Ok((lease, before)),
        Ok(Acquired::Busy) => Err(still_running()),
        Err(e) => Err(store_failed(&e)),
    }
}

/// A JSON request body within the panel's size and time limits.
async fn read_json_body(
    app: &App,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, Response> {
    let json_type = header_str(headers, header::CONTENT_TYPE)
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the request as Content-Type: application/json",
        ));
    }
    let limit = app.config.max_body_bytes;
    let body = match tokio::time::timeout(
        app.config.body_read_timeout,
        axum::body::to_bytes(body, limit),
    )
    .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let too_big = length_limit_hit(&e);
            return Err(if too_big {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body is larger than {limit} bytes"),
                )
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("could not read the request body: {e}"),
                )
            });
        }
        Err(_) => {
            tracing::info!(
                timeout_ms = app.config.body_read_timeout.as_millis() as u64,
                "chat panel: a request body did not arrive in time"
            );
            return Err(error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    app.config.body_read_timeout.as_secs()
                ),
            ));
        }
    };
    Ok(body)
}

async fn post_message(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let body = match read_json_body(&app, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let req: PostBody = match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => match serde_json::from_value(v) {
            Ok(r) => r,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("{MALFORMED}: {e}")),
        },
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{MALFORMED}: not an object"),
            );
        }
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("{MALFORMED}: {e}")),
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
    let permit = match answer_slot(&app).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(e) = app.sessions.find_or_create(&id).await {
        return store_failed(&e);
    }
    // The quick reply a message answers is recorded from the stored text (the latest open set
    // offering it), the same on every worker and after a reload.
    let _ = req.in_reply_to;
    let (lease, before) = match take_turn(&app, &id).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let events = app.backend.reply(&id, &text);
    start_turn(app, id, lease, before, events, permit)
}

/// A free answer slot within the queue timeout, or `503`.
async fn answer_slot(app: &Arc<App>) -> Result<OwnedSemaphorePermit, Response> {
    match tokio::time::timeout(
        app.config.queue_timeout,
        app.permits.clone().acquire_owned(),
    )
    .await
    {
        Ok(Ok(p)) => Ok(p),
        _ => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the panel is busy; try again shortly",
        )),
    }
}

/// `409`: the session's answer is still running.
fn still_running() -> Response {
    error(
        StatusCode::CONFLICT,
        "an answer is still running in this session; wait for it to finish",
    )
}

/// Runs `events` as the session's answer (this worker holds its `lease`) and streams it as SSE:
/// the stored rows after `before` as they are stored, and what streams live.
fn start_turn(
    app: Arc<App>,
    id: String,
    lease: String,
    before: u64,
    events: crate::backend::EventStream,
    permit: OwnedSemaphorePermit,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(256);
    app.sessions.set_running(&id, true);
    tokio::spawn(run_turn(app, id, lease, before, events, tx, permit));
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
    to: To,
    gone: bool,
    stall: Duration,
}

/// Where [`Out`] sends.
enum To {
    /// An answer's own stream: the answer runs in its own task and goes on into the session
    /// after the page stops listening.
    Channel(mpsc::Sender<Event>),
    /// An events stream, which is the response body: events wait here until it is polled.
    Queue(std::collections::VecDeque<Event>),
}

impl Out {
    fn channel(tx: mpsc::Sender<Event>, stall: Duration) -> Self {
        Self {
            to: To::Channel(tx),
            gone: false,
            stall,
        }
    }

    fn queue() -> Self {
        Self {
            to: To::Queue(std::collections::VecDeque::new()),
            gone: false,
            stall: Duration::ZERO,
        }
    }

    /// The next queued event.
    fn pop(&mut self) -> Option<Event> {
        match &mut self.to {
            To::Queue(q) => q.pop_front(),
            To::Channel(_) => None,
        }
    }

    async fn send(&mut self, e: Option<Event>) {
        let (false, Some(e)) = (self.gone, e) else {
            return;
        };
        let tx = match &mut self.to {
            To::Queue(q) => return q.push_back(e),
            To::Channel(tx) => tx,
        };
        match tx.send_timeout(e, self.stall).await {
            Ok(()) => {}
            Err(mpsc::error::SendTimeoutError::Closed(_)) => {
                tracing::debug!("the page stopped listening; the answer goes on into the session");
                self.gone = true;
            }
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                tracing::warn!(
                    write_stall_timeout_ms = self.stall.as_millis() as u64,
                    "chat panel: the page stopped reading the answer; it goes on into the session"
                );
                self.gone = true;
            }
        }
    }
}

/// Ends a turn's questions however the turn ends (the ones still waiting are cancelled).
struct AsksGuard(Arc<crate::elicit::Asks>, String);

impl Drop for AsksGuard {
    fn drop(&mut self) {
        self.0.turn_ended(&self.1);
    }
}

/// `POST /api/sessions/{id}/elicitations/{n}` with `{"action": "accept" | "decline" |
/// "cancel", "content"?}`: the person's answer to an MCP server's question; `404` when it is not
/// waiting (answered already — a second click or tab —, or its turn ended).
async fn post_elicitation(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, u64)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        action: String,
        #[serde(default)]
        content: Option<Value>,
    }
    let Ok(Path((id, n))) = path else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected /api/sessions/{id}/elicitations/{number}",
        );
    };
    if let Err(why) = check_session_id(Ok(Path(id.clone()))) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let body = match read_json_body(&app, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let answer = match serde_json::from_slice::<Answer>(&body) {
        Ok(a) => match (a.action.as_str(), a.content) {
            ("accept", Some(c @ Value::Object(_))) => {
                mcp_bridge::elicitation::ElicitationAnswer::Accept(c)
            }
            ("accept", None) => mcp_bridge::elicitation::ElicitationAnswer::Accept(json!({})),
            ("decline", _) => mcp_bridge::elicitation::ElicitationAnswer::Decline,
            ("cancel", _) => mcp_bridge::elicitation::ElicitationAnswer::Cancel,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "action must be accept (with an object as content), decline or cancel",
                );
            }
        },
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("malformed request: expected {{\"action\", \"content\"?}}: {e}"),
            );
        }
    };
    if app.asks.answer(&id, n, answer) {
        axum::Json(json!({"ok": true})).into_response()
    } else {
        error(
            StatusCode::NOT_FOUND,
            "no such question is waiting (it was answered already, or its answer ended)",
        )
    }
}

/// Clears the lease however the turn ends (a panic, a dropped task): the next answer may start.
struct TurnGuard {
    app: Arc<App>,
    id: String,
    lease: Option<String>,
}

impl TurnGuard {
    async fn end(mut self) {
        if let Some(l) = self.lease.take() {
            lease::release(self.app.sessions.store(), &self.id, &l).await;
        }
        self.app.sessions.set_running(&self.id, false);
        self.app.sessions.touch(&self.id);
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.app.sessions.set_running(&self.id, false);
        if let Some(l) = self.lease.take() {
            let app = self.app.clone();
            let id = self.id.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { lease::release(app.sessions.store(), &id, &l).await });
            }
        }
    }
}

fn live_entry(kind: EntryKind, text: impl Into<String>) -> Entry {
    Entry::new(live_id(), kind, text)
}

#[allow(clippy::too_many_lines)] // one match over the loop's events
async fn run_turn(
    app: Arc<App>,
    session_id: String,
    held: String,
    before: u64,
    mut events: crate::backend::EventStream,
    tx: mpsc::Sender<Event>,
    permit: OwnedSemaphorePermit,
) {
    let mut guard = TurnGuard {
        app: app.clone(),
        id: session_id.clone(),
        lease: Some(held),
    };
    let mut out = Out::channel(tx, app.config.write_stall_timeout);
    let mut rows = Rows::new(before, true);
    let deadline = tokio::time::Instant::now() + app.config.turn_timeout;
    let ttl = app.config.turn_lease;
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + ttl / 3, ttl / 3);
    // the person's message is shown once stored, even while the model has not answered yet
    let poll = app.config.follow_poll;
    let mut look = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // MCP servers' questions during this turn come in here (elicitation).
    let (ask_tx, mut asks) = mpsc::unbounded_channel();
    app.asks.turn_started(&session_id, ask_tx);
    let _asks = AsksGuard(app.asks.clone(), session_id.clone());
    let mut ended = false;
    // The error entry shown live when the answer failed: kept in the store too (below), so a
    // reload or another worker shows it instead of the person's message with no reply.
    let mut failed: Option<Entry> = None;
    let mut streaming = false; // the previous event was text
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout_at(deadline, events.next()) => n,
            Some(ask) = asks.recv() => {
                out.send(ev("elicitation", &ask)).await;
                continue;
            }
            _ = look.tick(), if !streaming => {
                rows.flush(&app, &session_id, &mut out).await;
                continue;
            }
            _ = renew.tick() => {
                let Some(current) = guard.lease.clone() else { continue };
                match lease::renew(app.sessions.store(), &session_id, &current, ttl).await {
                    Ok(Some(v)) => guard.lease = Some(v),
                    Ok(None) => {
                        // It expired and another worker closed the answer: stop writing.
                        tracing::warn!(session = %session_id, "chat panel: this worker's lease on the answer was lost; stopping it");
                        guard.lease = None;
                        let e = live_entry(EntryKind::Error, "This answer was stopped: the server running it was too slow to keep it and another one closed it.");
                        out.send(ev("entry", &e)).await;
                        ended = true;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(session = %session_id, error = %e, "chat panel: could not renew the answer's lease; retrying");
                    }
                }
                continue;
            }
        };
        let next = match next {
            Ok(n) => n,
            Err(_) => {
                let secs = app.config.turn_timeout.as_secs();
                let e = live_entry(
                    EntryKind::Error,
                    format!("The answer took longer than {secs} s and was stopped."),
                );
                out.send(ev("entry", &e)).await;
                failed = Some(e);
                ended = true;
                break;
            }
        };
        let Some(event) = next else { break };
        let text = matches!(event, LoopEvent::TextDelta(_));
        if !(text && streaming) {
            // what was stored since (the person's message, a finished round) goes first
            rows.flush(&app, &session_id, &mut out).await;
            app.sessions.touch(&session_id);
        }
        streaming = text;
        let mut emit: Vec<Option<Event>> = Vec::new();
        match event {
            LoopEvent::TextDelta(t) if t.is_empty() || rows.text_ahead => {}
            LoopEvent::TextDelta(t) => {
                let id = match rows.provisional {
                    Some(id) => id,
                    None => {
                        let e = live_entry(EntryKind::Assistant, "");
                        emit.push(ev("entry", &e));
                        rows.provisional = Some(e.id);
                        e.id
                    }
                };
                emit.push(ev("delta", &json!({"id": id, "text": t})));
            }
            // the round's text is behind it: the next round's text streams again
            LoopEvent::ToolCallStarted { id, .. } if rows.stored_calls.contains(&id) => {
                rows.text_ahead = false;
            }
            LoopEvent::ToolResult { id, .. } if rows.stored_calls.contains(&id) => {}
            LoopEvent::ToolCallStarted {
                id,
                name,
                arguments,
            } => {
                rows.text_ahead = false;
                let mut e = live_entry(EntryKind::Tool, name.clone());
                e.tool = Some(ToolActivity {
                    call_id: id.clone(),
                    name,
                    arguments,
                    result: None,
                    is_error: false,
                });
                emit.push(ev("entry", &e));
                rows.live_tools.insert(id, e);
            }
            LoopEvent::ToolResult {
                id,
                name,
                content,
                is_error,
            } => {
                let e = rows.live_tools.entry(id.clone()).or_insert_with(|| {
                    let mut e = live_entry(EntryKind::Tool, name.clone());
                    e.tool = Some(ToolActivity {
                        call_id: id,
                        name,
                        arguments: Value::Null,
                        result: None,
                        is_error,
                    });
                    e
                });
                if let Some(t) = &mut e.tool {
                    t.result = Some(content);
                    t.is_error = is_error;
                }
                emit.push(ev("update", &*e));
            }
            LoopEvent::Finished(_) => ended = true,
            LoopEvent::ApprovalRequired(pending) => {
                // Shown from the event as it comes, and from the store on a reload
                // (`GET /api/sessions/{id}`'s `pending`).
                emit.push(ev("approval", &pending));
            }
            LoopEvent::IterationLimitReached { iterations: n } => {
                let e = live_entry(
                    EntryKind::Notice,
                    format!("The agent stopped after {n} model calls (its round limit)."),
                );
                emit.push(ev("entry", &e));
            }
            LoopEvent::Failed(err) => {
                ended = true;
                tracing::warn!(session = %session_id, error = %err, "chat panel: the answer failed");
                let e = live_entry(EntryKind::Error, user_sentence(&err));
                emit.push(ev("entry", &e));
                failed = Some(e);
            }
            _ => {}
        }
        for e in emit {
            out.send(e).await;
        }
    }
    drop(events);
    if !ended {
        let e = live_entry(EntryKind::Error, "The answer ended unexpectedly.");
        out.send(ev("entry", &e)).await;
        failed = Some(e);
    }
    if let Some(e) = failed
        && guard.lease.is_some()
    {
        match lease::close_failed(app.sessions.store(), &session_id, &e.text).await {
            // the stored row takes the live entry's place on this page
            Ok(true) => rows.provisional = Some(e.id),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(session = %session_id, error = %err, "chat panel: could not store that the answer failed");
            }
        }
    }
    rows.flush(&app, &session_id, &mut out).await;
    if let Err(e) = app
        .sessions
        .trim_history(&session_id, app.config.max_history_messages)
        .await
    {
        tracing::warn!(session = %session_id, error = %e, "chat panel: could not trim a long conversation");
    }
    // the session takes a new message from here on, even if this page is slow to read the tail
    guard.end().await;
    drop(permit);
    out.send(ev("done", &json!({}))).await;
}
