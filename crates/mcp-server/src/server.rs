//! [`McpServer`]: the rmcp server handler over a [`Dispatcher`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, RequestStateCodec, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use toolwright_core::ToolContext;
use toolwright_tool_system::{ApprovalPolicy, Dispatcher};

use crate::approval::{Asker, Gate, gate};
use crate::content::to_call_result;
use crate::error::ServeError;

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
}

/// An MCP server over a [`Dispatcher`]'s tools (see the crate docs). Cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) inner: Arc<Inner>,
    /// Whether this connection keeps a session, so that the server may send the client a
    /// request (an `elicitation/create`) and read its answer: stdio yes, stateless HTTP no.
    pub(crate) session: bool,
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
        }
    }

    /// Serves one client on this process's stdin and stdout until it closes them.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        let server = Self {
            session: true,
            ..self
        };
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ServeError::Session(e.to_string()))?;
        running
            .waiting()
            .await
            .map_err(|e| ServeError::Session(e.to_string()))?;
        Ok(())
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

    /// The server.
    pub fn build(self) -> McpServer {
        let key = self.key.unwrap_or_else(|| {
            let mut k = vec![0u8; 32];
            rand::fill(&mut k[..]);
            k
        });
        McpServer {
            inner: Arc::new(Inner {
                dispatcher: self.dispatcher,
                policy: self.policy,
                codec: RequestStateCodec::new_unchecked(key),
                approval_timeout: self.approval_timeout,
                name: self.name,
                version: self.version,
                instructions: self.instructions,
                calls: AtomicU64::new(0),
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
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
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
        let ctx = ToolContext::new(format!("mcp-{}-{n}", context.id));
        let outcome = tokio::select! {
            o = self.inner.dispatcher.dispatch(&name, args, ctx) => o,
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("the call was cancelled by the client", None));
            }
        };
        Ok(to_call_result(outcome).into())
    }
}
