//! [`McpServer`]: the rmcp server handler over a [`Dispatcher`].

// MCP logging and `resources/subscribe` are deprecated from protocol 2026-07-28 on (rmcp marks
// them), and still what every client of the earlier revisions uses.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Reference, RequestStateCodec, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use toolwright_core::{CallerHandle, ToolContext};
use toolwright_tool_system::{ApprovalPolicy, Dispatcher};

use crate::approval::{Asker, Gate, gate};
use crate::caller::McpCaller;
use crate::content::to_call_result;
use crate::error::ServeError;
use crate::offers::{
    MAX_COMPLETIONS, OfferError, Prompts, Resources, Subscriptions, contents_size,
    match_uri_template,
};
use crate::session::SessionState;

/// The most bytes one `resources/read` answer carries by default: 16 MiB.
pub const DEFAULT_MAX_RESOURCE_BYTES: usize = 16 << 20;

/// The most resources one session may watch by default.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 100;

/// How long a question to the person waits by default: 5 minutes.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

pub(crate) struct Inner {
    pub(crate) dispatcher: Arc<Dispatcher>,
    pub(crate) policy: ApprovalPolicy,
    pub(crate) codec: RequestStateCodec,
    pub(crate) approval_timeout: Duration,
    name: String,
    version: String,
    instructions: Option<String>,
    calls: AtomicU64,
    resources: Option<Arc<dyn Resources>>,
    prompts: Option<Arc<dyn Prompts>>,
    max_resource_bytes: usize,
    max_subscriptions: usize,
    subscriptions: Arc<Subscriptions>,
}

/// An MCP server over a [`Dispatcher`]'s tools (see the crate docs). Cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) inner: Arc<Inner>,
    /// Whether this connection keeps a session, so that the server may send the client a
    /// request (an `elicitation/create`) and read its answer: stdio and stateful HTTP yes,
    /// stateless HTTP no.
    pub(crate) session: bool,
    pub(crate) state: Arc<SessionState>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.inner.name)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// Sets an [`McpServer`] up: [`McpServer::builder`].
pub struct McpServerBuilder {
    dispatcher: Arc<Dispatcher>,
    policy: ApprovalPolicy,
    key: Option<Vec<u8>>,
    approval_timeout: Duration,
    name: String,
    version: String,
    instructions: Option<String>,
    resources: Option<Arc<dyn Resources>>,
    prompts: Option<Arc<dyn Prompts>>,
    max_resource_bytes: usize,
    max_subscriptions: usize,
}

impl std::fmt::Debug for McpServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerBuilder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server for `dispatcher`'s tools.
    pub fn builder(dispatcher: Arc<Dispatcher>) -> McpServerBuilder {
        McpServerBuilder {
            dispatcher,
            policy: ApprovalPolicy::new(),
            key: None,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            name: "toolwright".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instructions: None,
            resources: None,
            prompts: None,
            max_resource_bytes: DEFAULT_MAX_RESOURCE_BYTES,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
        }
    }

    /// The server for one new connection: its own log level and subscriptions.
    pub(crate) fn for_connection(&self, session: bool) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            session,
            state: Arc::new(SessionState::new(Arc::clone(&self.inner.subscriptions))),
        }
    }

    /// Tells every session that watches `uri` (`resources/subscribe`) that it changed
    /// (`notifications/resources/updated`); how many were told. A session that has gone is
    /// forgotten.
    pub async fn notify_resource_updated(&self, uri: &str) -> usize {
        let mut told = 0;
        for (key, peer) in self.inner.subscriptions.watchers(uri) {
            let sent = peer
                .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri))
                .await;
            match sent {
                Ok(()) => told += 1,
                Err(e) => {
                    tracing::debug!(%uri, "resource watcher gone: {e}");
                    self.inner.subscriptions.forget(key);
                }
            }
        }
        told
    }

    /// Serves one client on this process's stdin and stdout until it closes them.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        let server = self.for_connection(true);
        #[cfg(unix)]
        if let Some(pipes) = stdio_pipes() {
            return serve_until_closed(server, pipes).await;
        }
        serve_until_closed(server, rmcp::transport::stdio()).await
    }

    fn needs_approval(&self, name: &str, args: &Value) -> bool {
        self.inner.policy.requires(name, args) || self.inner.dispatcher.needs_approval(name, args)
    }
}

impl McpServerBuilder {
    /// Calls these rules hold for the person's approval, besides those the tools and their
    /// providers hold themselves.
    pub fn approval_policy(mut self, policy: ApprovalPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The key (at least 32 bytes) that seals the state of a call waiting for approval over
    /// protocol 2026-07-28. Give every worker behind one load balancer the same key, so that
    /// the client's retry may land on any of them. Without one, each process draws its own.
    pub fn state_key(mut self, key: impl Into<Vec<u8>>) -> Result<Self, ServeError> {
        let key = key.into();
        if key.len() < RequestStateCodec::MIN_KEY_LENGTH {
            return Err(ServeError::StateKey(key.len()));
        }
        self.key = Some(key);
        Ok(self)
    }

    /// How long a question to the person may wait for an answer (default 5 minutes); then
    /// the call is refused.
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// The name and version the server gives in `initialize` (default `toolwright` and this
    /// crate's version).
    pub fn implementation(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// Instructions for the client's model, sent in `initialize`.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Offer these resources (`resources/list`, `read`, `templates/list`, `subscribe`) and
    /// complete their templates' arguments.
    pub fn resources(mut self, resources: impl Resources + 'static) -> Self {
        self.resources = Some(Arc::new(resources));
        self
    }

    /// Offer these prompts (`prompts/list`, `get`) and complete their arguments.
    pub fn prompts(mut self, prompts: impl Prompts + 'static) -> Self {
        self.prompts = Some(Arc::new(prompts));
        self
    }

    /// The most bytes one `resources/read` answer may carry (default 16 MiB); a larger
    /// resource is refused with an error that says so.
    pub fn max_resource_bytes(mut self, bytes: usize) -> Self {
        self.max_resource_bytes = bytes;
        self
    }

    /// The most resources one session may watch (default 100); one more is refused until it
    /// unsubscribes from another.
    pub fn max_subscriptions(mut self, n: usize) -> Self {
        self.max_subscriptions = n;
        self
    }

    /// The server.
    pub fn build(self) -> McpServer {
        let key = self.key.unwrap_or_else(|| {
            let mut k = vec![0u8; 32];
            rand::fill(&mut k[..]);
            k
        });
        let subscriptions = Arc::new(Subscriptions::default());
        McpServer {
            state: Arc::new(SessionState::new(Arc::clone(&subscriptions))),
            inner: Arc::new(Inner {
                dispatcher: self.dispatcher,
                policy: self.policy,
                codec: RequestStateCodec::new_unchecked(key),
                approval_timeout: self.approval_timeout,
                name: self.name,
                version: self.version,
                instructions: self.instructions,
                calls: AtomicU64::new(0),
                resources: self.resources,
                prompts: self.prompts,
                max_resource_bytes: self.max_resource_bytes,
                max_subscriptions: self.max_subscriptions,
                subscriptions,
            }),
            session: false,
        }
    }
}

fn to_tool(spec: &toolwright_core::ToolSpec) -> Tool {
    let schema = match &*spec.parameters {
        Value::Object(map) => map.clone(),
        _ => {
            let mut m = serde_json::Map::new();
            m.insert("type".into(), Value::String("object".into()));
            m
        }
    };
    Tool::new(
        spec.name.to_string(),
        spec.description.to_string(),
        Arc::new(schema),
    )
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .build();
        let (resources, prompts) = (self.inner.resources.is_some(), self.inner.prompts.is_some());
        if !resources {
            caps.resources = None;
        }
        if !prompts {
            caps.prompts = None;
        }
        if !resources && !prompts {
            caps.completions = None;
        }
        let mut info = ServerConfig::new(caps).with_server_info(Implementation::new(
            self.inner.name.clone(),
            self.inner.version.clone(),
        ));
        if let Some(i) = &self.inner.instructions {
            info = info.with_instructions(i.clone());
        }
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let specs = self.inner.dispatcher.specs().await;
        Ok(ListToolsResult::with_all_items(
            specs.iter().map(to_tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let name = request.name.to_string();
        if self.needs_approval(&name, &args) {
            let asker = Asker {
                codec: &self.inner.codec,
                timeout: self.inner.approval_timeout,
                session: self.session,
            };
            match gate(asker, &name, &args, &request, &context).await {
                Gate::Run => {}
                Gate::Ask(input) => return Ok(input.into()),
                Gate::Refused(why) => {
                    tracing::info!(tool = %name, %why, "MCP call refused for want of approval");
                    return Ok(CallToolResult::error(vec![ContentBlock::text(
                        serde_json::json!({"success": false, "error": why}).to_string(),
                    )])
                    .into());
                }
            }
        }
        let n = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let caller = McpCaller {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            state: Arc::clone(&self.state),
            session: self.session,
            timeout: self.inner.approval_timeout,
        };
        let ctx = ToolContext::new(format!("mcp-{}-{n}", context.id))
            .with_caller(CallerHandle::new(caller));
        let outcome = tokio::select! {
            o = self.inner.dispatcher.dispatch(&name, args, ctx) => o,
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("the call was cancelled by the client", None));
            }
        };
        Ok(to_call_result(outcome).into())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.state.set_level(request.level);
        Ok(())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let r = self.resources()?;
        Ok(ListResourcesResult::with_all_items(r.list().await))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let r = self.resources()?;
        Ok(ListResourceTemplatesResult::with_all_items(
            r.templates().await,
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let r = self.resources()?;
        let limit = self.inner.max_resource_bytes;
        let contents = r.read(&request.uri, limit).await?;
        let size = contents_size(&contents);
        if size > limit as u64 {
            tracing::warn!(uri = %request.uri, size, limit, "resource refused: larger than the limit");
            return Err(OfferError::TooLarge {
                uri: request.uri,
                size,
                limit,
            }
            .into());
        }
        Ok(ReadResourceResult::new(contents).into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let r = self.resources()?;
        if !self.session {
            return Err(ErrorData::invalid_request(
                "this connection keeps no session to send updates to: serve over stdio or stateful HTTP (`\"stateful\": true`) to subscribe",
                None,
            ));
        }
        if !self.offers_uri(r.as_ref(), &request.uri).await {
            return Err(OfferError::UnknownResource(request.uri).into());
        }
        self.inner.subscriptions.add(
            self.state.key,
            &request.uri,
            context.peer,
            self.inner.max_subscriptions,
        )
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.resources()?;
        self.inner
            .subscriptions
            .remove(self.state.key, &request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let p = self.prompts()?;
        Ok(ListPromptsResult::with_all_items(p.list().await))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let p = self.prompts()?;
        let args = request.arguments.unwrap_or_default();
        Ok(p.get(&request.name, &args).await?.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let arg = &request.argument;
        let values = match &request.r#ref {
            Reference::Prompt(p) => {
                self.prompts()?
                    .complete(&p.name, &arg.name, &arg.value)
                    .await?
            }
            Reference::Resource(t) => {
                self.resources()?
                    .complete(&t.uri, &arg.name, &arg.value)
                    .await?
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "completions are for ref/prompt and ref/resource, not {}",
                        other.reference_type()
                    ),
                    None,
                ));
            }
        };
        let total = values.len();
        let values: Vec<String> = values.into_iter().take(MAX_COMPLETIONS).collect();
        let info = CompletionInfo::with_pagination(
            values,
            u32::try_from(total).ok(),
            total > MAX_COMPLETIONS,
        )
        .map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }
}

impl McpServer {
    fn resources(&self) -> Result<Arc<dyn Resources>, ErrorData> {
        self.inner
            .resources
            .clone()
            .ok_or_else(ErrorData::method_not_found::<rmcp::model::ListResourcesRequestMethod>)
    }

    fn prompts(&self) -> Result<Arc<dyn Prompts>, ErrorData> {
        self.inner
            .prompts
            .clone()
            .ok_or_else(ErrorData::method_not_found::<rmcp::model::ListPromptsRequestMethod>)
    }

    /// Whether `uri` is a listed resource or one a template names.
    async fn offers_uri(&self, r: &dyn Resources, uri: &str) -> bool {
        r.list().await.iter().any(|x| x.uri == uri)
            || r.templates()
                .await
                .iter()
                .any(|t| match_uri_template(&t.uri_template, uri).is_some())
    }
}

/// Serves one client on `transport` until it closes.
async fn serve_until_closed<T, E, A>(server: McpServer, transport: T) -> Result<(), ServeError>
where
    T: rmcp::transport::IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let running = server
        .serve(transport)
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    Ok(())
}

/// This process's stdin and stdout as tokio pipes, when both are pipes (as for a server started
/// as a child process): read and written on the runtime's reactor. tokio's `stdin()` and
/// `stdout()` hand every read and write to a blocking thread, a thread hop each way per
/// message, which on a small call is most of the round trip. `None` (a terminal, a file, a
/// socket) serves on tokio's instead. Nothing else in a stdio server may write to stdout (it is
/// the protocol's), so the descriptors being non-blocking from here on changes no other writer.
#[cfg(unix)]
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    let input = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    let input = tokio::net::unix::pipe::Receiver::from_owned_fd(input).ok()?;
    let output = tokio::net::unix::pipe::Sender::from_owned_fd(output).ok()?;
    Some((input, output))
}
