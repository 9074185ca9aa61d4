//! One running MCP server: [`Connection::launch`] spawns it ([`crate::process`]), does the MCP
//! handshake and reads the first tool list within the startup timeout, then a monitor task
//! watches it until it exits, breaks the protocol or is told to end. The connection keeps the
//! server's tool list, marked stale on `notifications/tools/list_changed`.
//!
//! It knows nothing of the bridge: how a failure is recorded is the caller's `on_failure`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

use tokio::time::Instant;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest,
    ElicitRequestParams, ElicitResult, ElicitationCapability, FormElicitationCapability,
    Implementation, ProtocolVersion, RequestId, ServerResult, UrlElicitationCapability,
};
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, PeerRequestOptions, RequestContext, RunningService,
};
use rmcp::{ClientHandler, ClientServiceExt, Peer, RoleClient, ServiceError};
use tokio::sync::{oneshot, watch};

use crate::config::ServiceConfig;
use crate::elicitation::{CallEntry, ElicitationHub};
use crate::notices::{McpNotice, Notices};
use crate::process;

/// How long a stopping server gets after its stdin closes and after SIGTERM.
pub(crate) const STOP_GRACE: Duration = Duration::from_millis(1500);

pub(crate) use crate::sync::lock;

/// A running server.
/// A server's tool list and until when it may be used without asking again.
pub(crate) struct Listed {
    tools: Vec<rmcp::model::Tool>,
    /// From the list's cache hint (`ttlMs`, 2026-07-28); `None`: until the server says its list
    /// changed.
    fresh_until: Option<Instant>,
}

/// The shortest a listed `ttlMs` is taken to be: a server answering `0` ("do not cache") would
/// otherwise cost a `tools/list` round trip on every call.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(1);

impl Listed {
    fn new(list: rmcp::service::MergedList<rmcp::model::Tool>) -> Self {
        Self {
            tools: list.items,
            fresh_until: list
                .ttl_ms
                .map(|ms| Instant::now() + Duration::from_millis(ms).max(MIN_TTL)),
        }
    }
}

pub(crate) struct Connection {
    pub(crate) service: String,
    pub(crate) generation: u64,
    /// The server's pid (= its process group) for a stdio server; `None` for a remote one.
    pub(crate) pid: Option<i32>,
    pub(crate) peer: Peer<RoleClient>,
    /// `tools/call` beside rmcp's service task, for a stdio server on the session revision.
    direct: Option<Arc<process::Direct>>,
    tools: Mutex<Listed>,
    stale: Arc<AtomicBool>,
    /// Tells the monitor to end the server; `Some(reason)` means it failed.
    shutdown: Mutex<Option<oneshot::Sender<Option<String>>>>,
    finished: watch::Receiver<bool>,
    /// Whose OAuth credential its requests carry (an OAuth-protected remote server).
    #[cfg(feature = "http")]
    pub(crate) oauth_principal: Option<String>,
}

impl Connection {
    /// Spawns the server of `config`, shakes hands and lists its tools, all within its startup
    /// timeout. On failure nothing is left running and the reason is returned. Once running, a
    /// monitor task ends the server's process group when it exits, breaks the protocol, or
    /// [`Connection::end`] is called (or the connection is dropped); `on_failure` gets the
    /// reason when that was a failure.
    ///
    /// `hooks` are the bridge's catalog epoch, bumped when the server says its tool list
    /// changed, and where the server's questions for the person go.
    pub(crate) async fn launch(
        config: &ServiceConfig,
        generation: u64,
        hooks: Hooks,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<Arc<Self>, String> {
        let notices = hooks.notices.clone();
        let connection = match &config.url {
            Some(url) => Self::launch_remote(config, url, generation, hooks, on_failure).await,
            None => Self::launch_stdio(config, generation, hooks, on_failure).await,
        }?;
        connection.subscribe_again(&notices, config.call_timeout);
        Ok(connection)
    }

    /// Makes the service's resource subscriptions again on a new connection (a restarted
    /// server knows none of them), in the background; one that fails is logged and dropped.
    fn subscribe_again(&self, notices: &Notices, timeout: Duration) {
        let uris = notices.subscriptions_of(&self.service);
        if uris.is_empty() {
            return;
        }
        let offers = self.peer.peer_info().is_some_and(|info| {
            info.protocol_version < ProtocolVersion::V_2026_07_28
                && info
                    .capabilities
                    .resources
                    .as_ref()
                    .and_then(|r| r.subscribe)
                    == Some(true)
        });
        let service = self.service.clone();
        if !offers {
            tracing::warn!(service = %service, "the restarted server offers no resource subscriptions; {} dropped", uris.len());
            notices.forget_all(&service);
            return;
        }
        let peer = self.peer.clone();
        tokio::spawn(async move {
            for uri in uris {
                #[allow(deprecated)] // the session revisions' way, which this server speaks
                let asked = peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone()));
                match tokio::time::timeout(timeout, asked).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(service = %service, uri = %uri, "subscribing again failed: {e}")
                    }
                    Err(_) => {
                        tracing::warn!(service = %service, uri = %uri, "subscribing again timed out")
                    }
                }
            }
        });
    }

    /// A remote server over MCP's Streamable HTTP transport (rmcp's client on reqwest): the
    /// stateless revision when `server/discover` offers it, else the session revision (an
    /// expired session, HTTP 404 on `Mcp-Session-Id`, is initialised again once and the request
    /// retried). The connection ends when the transport closes; the bridge then treats it like
    /// a crashed server ([`crate::recovery`]).
    #[cfg(feature = "http")]
    async fn launch_remote(
        config: &ServiceConfig,
        url: &str,
        generation: u64,
        hooks: Hooks,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<Arc<Self>, String> {
        // The stateless revision (2026-07-28, `server/discover`) when the server speaks it,
        // else the session revision's `initialize` handshake, asking for the newest revision
        // that has one. rmcp's `Auto` falls back on the same connection when the server rejects
        // `server/discover` with a JSON-RPC error or an HTTP 4xx, or does not answer it within
        // 10 s. Every other answer that is no usable discovery result is an error to `Auto`: a
        // server that answers methods it does not know with an empty result (as the official
        // conformance suite's servers do), one that offers only session revisions (an rmcp 3
        // server kept in session mode), an answer of another shape. Those are asked again with
        // `initialize` on a new connection, within the same startup timeout.
        let discover_first = rmcp::ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        let deadline = Instant::now() + config.startup_timeout;
        let mut attempt =
            handshake_remote(config, url, hooks.clone(), discover_first, deadline).await;
        if let Err(Handshake::NoUsableDiscovery(why)) = &attempt {
            tracing::info!(
                service = %config.name,
                "server/discover gave no usable answer ({why}); shaking hands with initialize"
            );
            let why = why.clone();
            attempt = handshake_remote(
                config,
                url,
                hooks,
                rmcp::ClientLifecycleMode::Initialize,
                deadline,
            )
            .await
            .map_err(|e| Handshake::Failed(format!("{e}; server/discover before it: {why}")));
        }
        let (mut client, listed, stale) = attempt.map_err(|e| format!("{e} (server {url})"))?;
        let (connection, mut shutdown_rx, finished_tx) = Self::up(
            config,
            generation,
            None,
            client.peer().clone(),
            None,
            listed,
            stale,
        );
        let name = config.name.clone();
        tokio::spawn(async move {
            let reason: Option<String> = loop {
                tokio::select! {
                    r = &mut shutdown_rx => break r.ok().flatten(),
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {
                        if client.is_closed() || client.peer().is_transport_closed() {
                            break Some("the connection to the remote server closed".to_owned());
                        }
                    }
                }
            };
            if let Some(r) = &reason {
                tracing::warn!(service = %name, "MCP service failed: {r}");
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), client.close()).await;
            if let Some(reason) = reason {
                on_failure(reason);
            }
            let _ = finished_tx.send(true);
        });
        Ok(connection)
    }

    #[cfg(not(feature = "http"))]
    async fn launch_remote(
        config: &ServiceConfig,
        url: &str,
        _generation: u64,
        _hooks: Hooks,
        _on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<Arc<Self>, String> {
        Err(format!(
            "service {} is a remote server ({url}), and this build of mcp-bridge has no HTTP \
             transport: enable its `http` feature",
            config.name
        ))
    }

    async fn launch_stdio(
        config: &ServiceConfig,
        generation: u64,
        hooks: Hooks,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<Arc<Self>, String> {
        let spawned =
            process::spawn(config).map_err(|e| format!("cannot run `{}`: {e}", config.command))?;
        let process::Spawned {
            mut child,
            group,
            transport,
            direct,
            mut violation,
        } = spawned;
        let pid = group.pgid();
        let (handler, stale) = ClientSide::new(config, hooks);
        // Over stdio `initialize` only, never `server/discover`: a server on the session
        // revision is what lets calls go straight to the pipe (`process::Direct`).
        let (client, listed) = match handshake(
            handler,
            transport,
            rmcp::ClientLifecycleMode::Initialize,
            config,
            Instant::now() + config.startup_timeout,
        )
        .await
        {
            Ok(v) => v,
            Err(e) => {
                let mut reason = e.to_string();
                if let Ok(v) = violation.try_recv() {
                    reason = format!("the server {v}");
                } else if let Ok(Some(status)) = child.try_wait() {
                    reason = format!("{reason}; the server process exited ({status})");
                }
                group
                    .terminate(&mut child, Duration::from_millis(300))
                    .await;
                return Err(reason);
            }
        };
        // The stateless revision ties the server's requests to the client's pending ones, which
        // only rmcp knows of: calls go through rmcp there (see `process::Direct`).
        let session_revision = client
            .peer()
            .peer_info()
            .is_some_and(|info| info.protocol_version < rmcp::model::ProtocolVersion::V_2026_07_28);
        let (connection, shutdown_rx, finished_tx) = Self::up(
            config,
            generation,
            Some(pid),
            client.peer().clone(),
            session_revision.then_some(direct),
            listed,
            stale,
        );
        let name = config.name.clone();
        tokio::spawn(async move {
            let reason: Option<String> = tokio::select! {
                status = child.wait() => Some(match status {
                    Ok(s) => format!("the server process exited ({s})"),
                    Err(e) => format!("lost the server process: {e}"),
                }),
                v = async { match (&mut violation).await { Ok(m) => m, Err(_) => std::future::pending().await } } => {
                    Some(format!("the server {v}; it was stopped"))
                }
                r = shutdown_rx => r.ok().flatten(),
            };
            if let Some(r) = &reason {
                tracing::warn!(service = %name, "MCP service failed: {r}");
            }
            // Closing the transport closes the server's stdin: the polite way to end it.
            let mut client: RunningService<RoleClient, ClientSide> = client;
            let _ = tokio::time::timeout(Duration::from_millis(500), client.close()).await;
            let _ = tokio::time::timeout(STOP_GRACE, child.wait()).await;
            group.terminate(&mut child, STOP_GRACE).await;
            if let Some(reason) = reason {
                on_failure(reason);
            }
            let _ = finished_tx.send(true);
        });
        Ok(connection)
    }

    /// A connection that is up, with the ends its monitor keeps: the shutdown request it waits
    /// for, and the flag it sets when the server is gone.
    fn up(
        config: &ServiceConfig,
        generation: u64,
        pid: Option<i32>,
        peer: Peer<RoleClient>,
        direct: Option<Arc<process::Direct>>,
        listed: Listed,
        stale: Arc<AtomicBool>,
    ) -> (
        Arc<Self>,
        oneshot::Receiver<Option<String>>,
        watch::Sender<bool>,
    ) {
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let (finished_tx, finished) = watch::channel(false);
        let connection = Arc::new(Self {
            service: config.name.clone(),
            generation,
            pid,
            peer,
            direct,
            tools: Mutex::new(listed),
            stale,
            shutdown: Mutex::new(Some(shutdown_tx)),
            finished,
            #[cfg(feature = "http")]
            oauth_principal: config.oauth.as_ref().map(|o| o.principal.clone()),
        });
        (connection, shutdown_rx, finished_tx)
    }

    /// One `tools/call` round (no `input_required` follow-up) of `call`: written by the caller
    /// itself where it can ([`process::Direct`]), else through rmcp ([`call_through_rmcp`]).
    /// Dropped before the answer, the server is told the call was cancelled either way.
    pub(crate) async fn call_tool_once(
        &self,
        params: CallToolRequestParams,
        call: &CallEntry,
    ) -> Result<CallToolResponse, ServiceError> {
        match &self.direct {
            Some(direct) => direct.call_tool(params).await,
            None => call_through_rmcp(&self.peer, params, call).await,
        }
    }

    /// Tells the monitor to end the server; `Some(reason)` records a failure.
    pub(crate) fn end(&self, reason: Option<String>) {
        if let Some(tx) = lock(&self.shutdown).take() {
            let _ = tx.send(reason);
        }
    }

    /// Waits until the server's process group is gone, at most `within`.
    /// Whether the connection has ended.
    #[cfg(feature = "http")]
    pub(crate) fn is_finished(&self) -> bool {
        *self.finished.borrow()
    }

    pub(crate) async fn wait_finished(&self, within: Duration) {
        let mut rx = self.finished.clone();
        let _ = tokio::time::timeout(within, rx.wait_for(|done| *done)).await;
    }

    /// Until when the tool list may be used without asking again (its `ttlMs`), if it said.
    pub(crate) fn fresh_until(&self) -> Option<Instant> {
        lock(&self.tools).fresh_until
    }

    /// The server's tool list, fetched again first (within `refresh_within`) when the server
    /// said it changed or its cache hint (`ttlMs`) ran out. A failed refresh keeps the previous
    /// list (logged).
    pub(crate) async fn tools(&self, refresh_within: Duration) -> Vec<rmcp::model::Tool> {
        let expired = self.fresh_until().is_some_and(|t| Instant::now() >= t);
        if self.stale.swap(false, Ordering::SeqCst) || expired {
            let list = self
                .peer
                .list_all_tools_with_cache_hint()
                .instrument(crate::trace::request_span("tools/list", &self.service));
            match tokio::time::timeout(refresh_within, list).await {
                Ok(Ok(list)) => *lock(&self.tools) = Listed::new(list),
                Ok(Err(e)) => {
                    tracing::warn!(service = %self.service, "refreshing tools failed: {e}")
                }
                Err(_) => tracing::warn!(service = %self.service, "refreshing tools timed out"),
            }
        }
        lock(&self.tools).tools.clone()
    }
}

/// One `tools/call` through rmcp, as rmcp's `Peer::call_tool_once` makes it, except that the
/// request's id is kept in `call` while it is pending: a server-initiated question that arrives
/// under that request belongs to this call. Dropped before the answer, it tells
/// the server with `notifications/cancelled`, as rmcp's does.
async fn call_through_rmcp(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    call: &CallEntry,
) -> Result<CallToolResponse, ServiceError> {
    let handle = peer
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await?;
    let mut pending = PendingCall {
        peer,
        call,
        id: Some(handle.id.clone()),
    };
    call.set_request(Some(handle.id.clone()));
    let answer = handle.await_response().await;
    pending.id = None;
    drop(pending);
    match answer? {
        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
        ServerResult::InputRequiredResult(asked) => Ok(CallToolResponse::InputRequired(asked)),
        ServerResult::CreateTaskResult(task) => Ok(CallToolResponse::Task(task)),
        // An empty result is a call that returned nothing (rmcp reads it so too).
        ServerResult::EmptyResult(_) => Ok(CallToolResponse::Complete(CallToolResult::default())),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// A `tools/call` request pending through rmcp: on drop, its id leaves the call, and when it
/// was not answered (`id` still set) the server is told it was cancelled.
struct PendingCall<'a> {
    peer: &'a Peer<RoleClient>,
    call: &'a CallEntry,
    id: Option<RequestId>,
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        self.call.set_request(None);
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let reason = Some("request abandoned by the caller".to_owned());
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), reason))
                    .await;
            });
        }
    }
}

/// The answer to a server request the server itself cancelled (it reads none).
fn withdrawn() -> rmcp::ErrorData {
    rmcp::ErrorData::new(
        rmcp::model::ErrorCode::INTERNAL_ERROR,
        "the server cancelled the request",
        None,
    )
}

/// Why a handshake failed: a message, or `server/discover` gave no usable answer (an empty or
/// unexpected result, a rejection `Auto` does not fall back on, no revision in common), which
/// `initialize` is tried after.
enum Handshake {
    Failed(String),
    NoUsableDiscovery(String),
}

impl std::fmt::Display for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed(m) | Self::NoUsableDiscovery(m) => f.write_str(m),
        }
    }
}

/// One handshake with a remote server over a new transport.
#[cfg(feature = "http")]
async fn handshake_remote(
    config: &ServiceConfig,
    url: &str,
    hooks: Hooks,
    lifecycle: rmcp::ClientLifecycleMode,
    deadline: Instant,
) -> Result<
    (
        RunningService<RoleClient, ClientSide>,
        Listed,
        Arc<AtomicBool>,
    ),
    Handshake,
> {
    let transport = crate::http::transport(config, url).map_err(Handshake::Failed)?;
    let (handler, stale) = ClientSide::new(config, hooks);
    let (client, listed) = handshake(handler, transport, lifecycle, config, deadline).await?;
    Ok((client, listed, stale))
}

/// The MCP handshake and the first tool list over `transport`, by `deadline` (the service's
/// startup timeout, shared by every attempt); the reason when they fail.
async fn handshake<T, E, A>(
    handler: ClientSide,
    transport: T,
    lifecycle: rmcp::ClientLifecycleMode,
    config: &ServiceConfig,
    deadline: Instant,
) -> Result<(RunningService<RoleClient, ClientSide>, Listed), Handshake>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let discovers = !matches!(lifecycle, rmcp::ClientLifecycleMode::Initialize);
    let started = tokio::time::timeout_at(deadline, async {
        // No span around the handshake: rmcp's service task, spawned inside it, would keep it
        // open for the connection's whole life.
        let client = handler
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .map_err(|e| {
                // rmcp's own fallback to `initialize` says only that both failed: the last
                // one's reason (a sign-in the person declined, say) is what to show.
                let message = match &e {
                    rmcp::service::ClientInitializeError::LegacyFallbackFailed {
                        fallback, ..
                    } => format!("MCP handshake failed: {e}: {fallback}"),
                    _ => format!("MCP handshake failed: {e}"),
                };
                if discovers && discovery_was_unusable(&e) {
                    Handshake::NoUsableDiscovery(message)
                } else {
                    Handshake::Failed(message)
                }
            })?;
        let list = client
            .peer()
            .list_all_tools_with_cache_hint()
            .instrument(crate::trace::request_span("tools/list", &config.name))
            .await
            .map_err(|e| Handshake::Failed(format!("tools/list failed: {e}")))?;
        Ok::<_, Handshake>((client, Listed::new(list)))
    })
    .await;
    match started {
        Ok(result) => result,
        Err(_) => Err(Handshake::Failed(format!(
            "no MCP handshake and tool list within {} ms",
            config.startup_timeout.as_millis()
        ))),
    }
}

/// Whether a handshake that began with `server/discover` failed for want of a usable discovery
/// answer, so that `initialize` is worth a try: not when `initialize` already failed after it
/// (rmcp's own fallback), was cancelled, or the server asks for authorisation (`initialize`
/// would meet the same challenge).
fn discovery_was_unusable(error: &rmcp::service::ClientInitializeError) -> bool {
    use rmcp::service::ClientInitializeError as E;
    #[cfg(feature = "http")]
    if error.auth_challenge().is_some() {
        return false;
    }
    !matches!(error, E::LegacyFallbackFailed { .. } | E::Cancelled)
}

impl ClientSide {
    /// The handler for `config`'s server, and the flag it sets when the tool list changed.
    fn new(config: &ServiceConfig, hooks: Hooks) -> (Self, Arc<AtomicBool>) {
        let stale = Arc::new(AtomicBool::new(false));
        let handler = Self {
            service: config.name.clone(),
            stale: stale.clone(),
            epoch: hooks.epoch,
            elicitation: hooks.elicitation,
            notices: hooks.notices,
            roots: config.roots.clone(),
        };
        (handler, stale)
    }
}

/// What a connection reports to the bridge: the catalog epoch (bumped on `list_changed`), the
/// elicitation hub (the server's questions for the person) and the notice channel (progress,
/// logs, changes).
#[derive(Clone)]
pub(crate) struct Hooks {
    pub(crate) epoch: Arc<AtomicU64>,
    pub(crate) elicitation: Arc<ElicitationHub>,
    pub(crate) notices: Arc<Notices>,
}

/// Our side of the MCP connection: marks the tool list stale on `tools/list_changed`, and the
/// bridge's catalog with it; passes the server's questions (`elicitation/create`) to the
/// bridge's elicitor.
struct ClientSide {
    service: String,
    stale: Arc<AtomicBool>,
    epoch: Arc<AtomicU64>,
    elicitation: Arc<ElicitationHub>,
    notices: Arc<Notices>,
    /// The configured roots (`file://` URIs), for `roots/list`.
    roots: Vec<String>,
}

impl ClientHandler for ClientSide {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(service = %self.service, "MCP server says its tool list changed");
        self.stale.store(true, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.notices.send(McpNotice::ListChanged {
            service: self.service.clone(),
            list: "tools",
        });
    }
    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.send(McpNotice::ListChanged {
            service: self.service.clone(),
            list: "resources",
        });
    }
    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.send(McpNotice::ListChanged {
            service: self.service.clone(),
            list: "prompts",
        });
    }
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notices.resource_updated(&self.service, params.uri);
    }
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notices.progress(&self.service, params);
    }
    #[allow(deprecated)] // SEP-2577: deprecated from 2026-07-28 on, sent by the servers before it
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notices.log(&self.service, params);
    }
    /// A server-initiated question: the call it belongs to is the one whose request it arrived
    /// under, when the transport says (Streamable HTTP: the SSE stream of that POST).
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let origin = match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
            _ => None,
        };
        // A server that stops waiting (`notifications/cancelled`) withdraws the question:
        // dropping the ask is what tells the elicitor (the panel closes its window).
        let ask = self
            .elicitation
            .ask_from_server(&self.service, origin, request);
        tokio::select! {
            answer = ask => Ok(answer),
            () = context.ct.cancelled() => Err(withdrawn()),
        }
    }
    /// A server asks the client's model to answer: through the bridge's [`Sampling`], when
    /// one is set (else the capability was never declared, and this is refused).
    ///
    /// [`Sampling`]: crate::Sampling
    #[allow(deprecated)] // SEP-2577: deprecated from 2026-07-28 on, asked by the servers before it
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        let Some(sampling) = lock(&self.elicitation.sampling).clone() else {
            return Err(rmcp::ErrorData::method_not_found::<
                rmcp::model::CreateMessageRequestMethod,
            >());
        };
        let origin = match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
            _ => None,
        };
        let ask = |question| {
            self.elicitation
                .ask_from_server(&self.service, origin, question)
        };
        tokio::select! {
            answer = crate::sampling::answer(&sampling, ask, &self.service, params) => answer,
            () = context.ct.cancelled() => Err(withdrawn()),
        }
    }
    /// The configured roots, each named by its last path segment.
    #[allow(deprecated)] // SEP-2577: deprecated from 2026-07-28 on, asked by the servers before it
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        let roots = self
            .roots
            .iter()
            .map(|uri| {
                let name = uri.trim_end_matches('/').rsplit('/').next().unwrap_or(uri);
                rmcp::model::Root::new(uri.clone()).with_name(name)
            })
            .collect();
        Ok(rmcp::model::ListRootsResult::new(roots))
    }
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if !self.roots.is_empty() {
            #[allow(deprecated)]
            let roots = rmcp::model::RootsCapabilities::default();
            capabilities.roots = Some(roots);
        }
        if lock(&self.elicitation.sampling).is_some() {
            capabilities.sampling = Some(rmcp::model::SamplingCapability::default());
        }
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::new())
                .with_url(UrlElicitationCapability::new()),
        );
        // `initialize` asks for the newest revision that has it: from 2026-07-28 on the
        // lifecycle lives in each request's `_meta`, which `server/discover` negotiates.
        ClientConfig::new(
            capabilities,
            Implementation::new("llm-toolkit-mcp-bridge", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}
