//! The axum server: the page, the state endpoint and the streaming message endpoint, behind
//! the request checks (who may call) and the panel's own accept loop (timeouts, connection cap).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::sync::{Semaphore, watch};
use toolwright_context_engine::StoreChange;
use toolwright_messaging::MessageBus;

use crate::lease::{self};
use crate::state::Sessions;
use crate::{ChatBackend, PanelConfig};

mod attachments;
mod blob;
mod events;
mod guard;
mod handlers;
mod live;
mod offers;
mod signin;
mod template;
mod translate;
mod turn;

use guard::check_request;
use handlers::{
    api_headers, app_css, app_js, get_events, get_inbox, get_session, page, post_approvals,
    post_elicitation, post_message, post_session, signed_in_js,
};

const PAGE: &str = include_str!("../page.html");
/// The page's script and style, served as files: its Content-Security-Policy allows nothing
/// inline.
const APP_JS: &str = include_str!("../app.js");
const APP_CSS: &str = include_str!("../app.css");

struct App {
    backend: Arc<dyn ChatBackend>,
    sessions: Sessions,
    config: PanelConfig,
    permits: Arc<Semaphore>,
    /// MCP servers' questions for the person (elicitation).
    asks: Arc<crate::elicit::Asks>,
    /// Sign-ins to OAuth-protected MCP servers waiting for their callback.
    sign_ins: Arc<crate::mcp_sign_in::SignIns>,
    /// This worker's id in the turn leases.
    worker: String,
    /// The store's change feed, forwarded to the streams that follow a conversation (started
    /// by the first stream; `false` when the store has none and streams read on a timer).
    feed: tokio::sync::OnceCell<bool>,
    watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The MCP bridge whose servers' resources and prompts are offered to the person
    /// ([`ChatPanel::offer_mcp`]).
    mcp: std::sync::OnceLock<toolwright_mcp_bridge::McpBridge>,
    /// The side list's changes, gathered from the bridge's notices (with [`ChatPanel::offer_mcp`]).
    live: std::sync::OnceLock<watch::Receiver<live::Changed>>,
    /// The servers' offers as last listed.
    listing: tokio::sync::Mutex<Option<offers::Listed>>,
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
/// * `GET /` — the page, with a Content-Security-Policy that allows no inline script or style
///   (`script-src 'self'; style-src 'self'`) and images and sounds from the panel only
///   (`img-src 'self'; media-src 'self'`);
///   its script and style are `GET /app.js` and `GET /app.css` (`/signed-in.js` is the sign-in
///   callback page's).
/// * Every `/api/` answer carries `Cache-Control: no-store` and
///   `X-Content-Type-Options: nosniff`.
/// * `POST /api/sessions` — `{"sessionId"}`: a new conversation owned by the caller, with an
///   id the server mints (128 random bits). With an authenticator other than
///   [`NoAuth`](crate::identity::NoAuth) this is the only way to start one: every endpoint
///   answers an id that does not exist `404`.
/// * `GET /api/inbox` — `{"sessionId"}`: the caller's inbox conversation, where bus messages
///   addressed to them (`person:PRINCIPAL`, [`crate::person_address`]) are stored; created as
///   theirs when new, read and answered like any conversation of theirs.
/// * Every `/api/` request is authenticated ([`PanelConfig::authenticator`]): `401` with
///   `WWW-Authenticate: Bearer` when refused. A conversation is its creator's: any endpoint
///   answers another principal `404` — with authentication, the very bytes it answers for one
///   that does not exist.
/// * `GET /api/sessions/{id}` — `{"sessionId", "busy", "entries": [Entry...], "pending",
///   "decisions", "lastEventId"}`; without authentication an unknown session has no entries (a
///   `GET` never creates one).
///   `lastEventId` is the number of the last stored row (see the events stream);
///   `maxImageBytes` the largest attachment a message may carry ([`PanelConfig::max_image_bytes`]),
///   `attachTypes` the media types a person may attach (pictures, sounds, files).
///   An entry may carry `images` ([`EntryImage`](crate::EntryImage): the person's pictures,
///   sounds and files, a tool's; each with its `kind`), `reasoning` (the model's, shown folded) and `run` ([`RunSummary`](crate::RunSummary):
///   what the answer ending there cost). `pending`'s
///   tokens are bound to the caller (a token copied to another account is refused);
///   `decisions` is who decided what, oldest first — approvals (`kind: "approval"`, with the
///   principal, `atMs`, the tool and the exact arguments) and answers to MCP servers' questions
///   (`kind: "answer"`).
/// * `GET /api/sessions/{id}/events` — an SSE stream of the conversation as it is stored, from
///   any worker sharing the store: one `row` event per stored message that shows something,
///   `{"row", "events": [{"event": "entry" | "update", "entry": Entry}]}`, with the SSE id
///   `row`; it starts after the `Last-Event-ID` header's row, else after `?after=N`, else at the
///   beginning — a stream that reconnects to another worker with `Last-Event-ID` misses and
///   repeats nothing. A `turn` event `{"busy"}` (no id) says whether an answer runs.
/// * `GET /api/sessions/{id}/media/{row}-{part}` — a picture, sound or file of the
///   conversation (an [`EntryImage`](crate::EntryImage)'s `src`): its bytes, to the
///   conversation's owner only, with a `sandbox` policy and `nosniff`. A picture only when it is
///   a PNG, JPEG, GIF or WebP whose bytes are that type (never SVG or HTML), `inline`; a sound of
///   a type the panel plays whose bytes are that type, `inline`; anything else
///   `Content-Disposition: attachment`, as its own type only when it is one a person may attach
///   and its bytes agree, else `application/octet-stream`; `404` otherwise.
///   A file a tool gave by reference (a [`Part::Resource`](toolwright_core::Part::Resource)
///   whose URI is the backend's blob store's, [`ChatBackend::blob_store`]) is served from that
///   store the same way, to the owner only; `404` for an unknown reference.
/// * `POST /api/sessions/{id}/messages` with `Content-Type: application/json` and the object
///   `{"text": "...", "inReplyTo": ENTRY_ID?, "attachments": [{"mediaType", "data", "name"?}]?}`
///   (`data`: the bytes in standard base64; at most one attachment, of a type in `attachTypes`
///   whose bytes are that type — a picture checked as
///   [`Media::image_bytes`](toolwright_core::Media::image_bytes) does — and within
///   [`PanelConfig::max_image_bytes`]: `413` too large, `415` a type the panel does not take or
///   not the type it claims to be, each with a sentence the page shows; a picture reaches the
///   model as a `Part::Image`, a sound as a `Part::Audio`, anything else as a `Part::File`) — an
///   SSE stream of `entry` (a new `Entry`),
///   `update` (a changed one), `delta` (`{"id", "text"}`: text appended to an assistant entry)
///   and finally `done`. `400` malformed (an array too), `408` body not received in time,
///   `409` an answer is already running in this session, `413` too large, `415` not JSON,
///   `503` no slot free within the queue timeout.
/// * `GET /healthz` — `ok`.
/// * `GET /login`, `GET /callback`, `GET /logout` — the browser login, with
///   [`PanelConfig::with_oidc_login`] ([`crate::login`]); `404` without it. `/login` and
///   `/callback` are top-level navigations from the provider, so they are exempt from the
///   `Sec-Fetch-Site` check below.
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
    /// A panel whose person in session `S` receives bus messages sent to `user:S`, and whose
    /// principal `P` receives those sent to `person:P` ([`crate::person_address`]) in their inbox
    /// conversation (`GET /api/inbox`).
    pub fn new(backend: impl ChatBackend, bus: MessageBus, config: PanelConfig) -> Self {
        let permits = Arc::new(Semaphore::new(config.max_concurrent_turns.max(1)));
        let store = backend.store();
        if let Some(login) = &config.login {
            // sign-outs live beside the conversations: every worker of the store sees them
            login.sign_outs.attach(store.clone());
        }
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
                sign_ins: Arc::default(),
                worker: lease::worker_id(),
                feed: tokio::sync::OnceCell::new(),
                watcher: std::sync::Mutex::new(None),
                mcp: std::sync::OnceLock::new(),
                live: std::sync::OnceLock::new(),
                listing: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// Signs `principal` out of every browser (with [`crate::PanelConfig::with_oidc_login`]): their
    /// session cookies issued until now are refused — on this worker at once, on the others
    /// sharing the session store within [`OidcLoginConfig::revocation_recheck`](crate::login::OidcLoginConfig::revocation_recheck);
    /// they may sign in again. What a person's `GET /logout` does for themselves. Bearer
    /// tokens are the identity provider's to revoke (keep them short-lived). Without a browser
    /// login there are no sessions: nothing to do.
    pub async fn sign_out(&self, principal: &str) -> Result<(), crate::PanelError> {
        match &self.app.config.login {
            Some(login) => Ok(login
                .sign_outs
                .sign_out(principal, crate::login::now_ms())
                .await?),
            None => Ok(()),
        }
    }

    /// The [`toolwright_mcp_bridge::elicitation::Elicitor`] that shows MCP servers' questions in this
    /// panel: `bridge.set_elicitor(Arc::new(panel.elicitor()), limit)`.
    pub fn elicitor(&self) -> crate::elicit::PanelElicitor {
        crate::elicit::PanelElicitor {
            asks: self.app.asks.clone(),
        }
    }

    /// The sign-in to OAuth-protected MCP servers through this panel, for every person it
    /// serves, whose address the person's browser reaches it at is `panel_url` (the
    /// authorization server redirects to `{panel_url}/oauth/callback`; register that redirect
    /// URI with it when you pre-register a client). `store` is the credential store the
    /// bridge's OAuth keeps tokens and waiting sign-ins in: give every worker the same shared one
    /// (`SessionCredentialStore` on the panel's PostgreSQL store), and the callback may land on
    /// any of them:
    /// `bridge.set_oauth(Some(OAuthConfig::with_redirect_sign_in(Arc::new(panel.mcp_sign_in(url, store.clone()))).with_store(store, owner)))`.
    /// A tool call made for a person who has not signed in shows a sign-in link in the running
    /// turn of their latest conversation, and goes on once they signed in
    /// ([`PanelSignIn`](crate::PanelSignIn)).
    pub fn mcp_sign_in(
        &self,
        panel_url: &str,
        store: Arc<dyn toolwright_mcp_bridge::oauth::CredentialStore>,
    ) -> crate::PanelSignIn {
        self.app.sign_ins.keep_in(store);
        crate::PanelSignIn {
            asks: self.app.asks.clone(),
            redirect_uri: format!(
                "{}{}",
                panel_url.trim_end_matches('/'),
                crate::mcp_sign_in::CALLBACK_PATH
            ),
        }
    }

    /// Shows the progress `bridge`'s MCP tools report (`notifications/progress`) under the
    /// answer of the turn whose tool call it is, as a `progress` event of that turn's stream:
    /// the tool, how far along and what it is doing. At most ten updates a second per turn
    /// (a call's last step always). Call once per bridge; the forwarding ends with the bridge.
    pub fn show_progress(&self, bridge: &toolwright_mcp_bridge::McpBridge) {
        let mut notices = bridge.notices();
        let asks = self.app.asks.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            use toolwright_mcp_bridge::McpNotice;
            loop {
                match notices.recv().await {
                    Ok(McpNotice::Progress {
                        service,
                        session: Some(session),
                        tool,
                        progress,
                        total,
                        message,
                    }) => {
                        let last_step = total.is_some_and(|t| progress >= t);
                        let data = json!({"service": service, "tool": tool, "progress": progress,
                                          "total": total, "message": message});
                        asks.progress(&session, data, last_step);
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                }
            }
        });
    }

    /// Offers the person the resources and prompts of `bridge`'s MCP servers: a side list in the
    /// page. Choosing a resource reads it into the next message (its text, and its pictures,
    /// sounds and files checked and bounded as an attachment is — at most three resources a
    /// message); choosing a prompt asks for its arguments, suggesting values as they are typed
    /// (the server's completions), and puts the prompt's messages in the input to edit and
    /// send; choosing a resource template asks for its variables the same way and reads the
    /// resource it makes into the next message. Only a principal the panel's authenticator lets in may list, read or get them
    /// (every `/api/` request is authenticated; without an authenticator the panel listens on
    /// loopback only). Endpoints: `GET /api/mcp` (`{"resources", "templates", "prompts"}`, at
    /// most 100 of each per server, 16 servers), `POST /api/mcp/prompt` (`{"service", "name",
    /// "arguments"}` → `{"text"}`), `POST /api/mcp/complete` (`{"service", "prompt" |
    /// "uriTemplate", "argument", "value"}` → `{"values"}`), `POST /api/mcp/template`
    /// (`{"service", "uriTemplate", "arguments"}` → `{"uri", "preview"}`: a resource template
    /// filled in, read and checked as a message would carry it), `POST /api/mcp/watch`
    /// (`{"service", "uri", "watch"}` → `{"watched"}`: the signed-in person watches a resource
    /// or stops, their own subscription, at most
    /// [`MAX_PERSON_SUBSCRIPTIONS`](toolwright_mcp_bridge::MAX_PERSON_SUBSCRIPTIONS) each; `GET
    /// /api/mcp` says what they watch in `"watched"`), and a message's
    /// `"resources": [{"service", "uri"}]`.
    ///
    /// The list is live: `GET /api/mcp/events` is an SSE stream of `changed` events
    /// (`{"generation", "lists": [{"service", "list"}], "updated": [{"service", "uri"}],
    /// "missed"}`) sent when a server says a list changed or a subscribed resource (watched by a
    /// person, or [`McpBridge::subscribe`](toolwright_mcp_bridge::McpBridge::subscribe)d by the
    /// application) changed — at most
    /// one a second, whatever the servers send; the page lists again without a reload.
    ///
    /// Without this call they answer `404` and the page shows no list. One bridge per panel: a
    /// second call is ignored. Call it inside the Tokio runtime.
    pub fn offer_mcp(&self, bridge: &toolwright_mcp_bridge::McpBridge) {
        if self.app.mcp.set(bridge.clone()).is_err() {
            tracing::warn!("chat panel: offer_mcp was called twice; the first bridge stays");
            return;
        }
        let (out, changes) = watch::channel(live::Changed::default());
        tokio::spawn(live::coalesce(bridge.notices(), out, live::MIN_GAP));
        let _ = self.app.live.set(changes);
    }

    /// The axum router, with the request checks (to mount it in your own server; the
    /// connection timeouts and cap are [`serve`](Self::serve)'s).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/app.js", get(app_js))
            .route("/app.css", get(app_css))
            .route("/signed-in.js", get(signed_in_js))
            .route("/healthz", get(|| async { "ok" }))
            .route("/login", get(signin::get_login))
            .route("/callback", get(signin::get_callback))
            .route("/logout", get(signin::get_logout))
            .route(
                crate::mcp_sign_in::CALLBACK_PATH,
                get(signin::get_mcp_callback),
            )
            .route("/api/inbox", get(get_inbox))
            .route("/api/mcp", get(offers::get_offers))
            .route("/api/mcp/prompt", axum::routing::post(offers::post_prompt))
            .route("/api/mcp/events", get(live::get_events))
            .route(
                "/api/mcp/template",
                axum::routing::post(offers::post_template),
            )
            .route("/api/mcp/watch", axum::routing::post(offers::post_watch))
            .route(
                "/api/mcp/learning",
                axum::routing::post(offers::post_learning),
            )
            .route(
                "/api/mcp/complete",
                axum::routing::post(offers::post_complete),
            )
            .route("/api/sessions", axum::routing::post(post_session))
            .route("/api/sessions/{id}", get(get_session))
            .route("/api/sessions/{id}/events", get(get_events))
            .route(
                "/api/sessions/{id}/media/{which}",
                get(attachments::get_media),
            )
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
            // outside the request checks: their refusals of /api/ requests get the headers too
            .layer(axum::middleware::from_fn(api_headers))
            .with_state(self.app.clone())
    }

    /// Serves on `addr` (`127.0.0.1:0` picks a free port), which must be a loopback address
    /// unless an authenticator other than [`NoAuth`](crate::identity::NoAuth) is configured
    /// (the error's inner error is then [`IdentityError::NoAuthOffLoopback`](crate::identity::IdentityError)),
    /// with the connection limits of the [`PanelConfig`]: header-read, idle and write-stall
    /// timeouts and at most `max_connections` open connections.
    pub async fn serve(&self, addr: &str) -> std::io::Result<PanelServer> {
        // the persons' bus messages are taken from the start, not from the first conversation
        self.app.sessions.start_inbox();
        let addr: SocketAddr = addr.parse().map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
        })?;
        if !addr.ip().is_loopback() && self.app.config.authenticator.loopback_only() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                crate::identity::IdentityError::NoAuthOffLoopback { addr },
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
