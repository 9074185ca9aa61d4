//! [`McpBridge`]: the service registry, lifecycle and status, discovery, and calls.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use model_gateway::ToolSpec;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value};
use tokio::sync::{oneshot, watch};
use tool_system::{ToolContext, ToolError, ToolErrorKind, ToolProvider};

use crate::config::{ConfigFile, ServiceConfig, ServiceUpdate};
use crate::error::BridgeError;
use crate::names;
use crate::process::{self, MAX_MESSAGE_BYTES};

/// Default cap on the result text that reaches the model (bytes of UTF-8).
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;
/// The bridge's own tool that returns another tool's full parameter schema (level 2).
pub const DESCRIBE_TOOL: &str = "mcp_describe_tool";
/// How long a stopping server gets after its stdin closes and after SIGTERM.
const STOP_GRACE: Duration = Duration::from_millis(1500);
/// Upper bound on the follow-up request that checks a server after a call timed out.
const HEALTH_CHECK: Duration = Duration::from_secs(2);
/// Length of a level-1 description sentence.
const LEVEL1_CHARS: usize = 120;

/// The status of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceStatus {
    /// Not started, or stopped.
    Stopped,
    /// Being started (spawn, handshake, first tool list).
    Starting,
    /// Up: its tools are offered.
    Running,
    /// It failed to start, exited, broke the protocol or stopped answering; the last error.
    Error(String),
}

impl ServiceStatus {
    /// `running`, `stopped`, `starting` or `error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Error(_) => "error",
        }
    }
}

/// A registered service and its status.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServiceInfo {
    /// Its configuration.
    pub config: ServiceConfig,
    /// Its status.
    pub status: ServiceStatus,
    /// The server's process id (also its process group id) while it runs.
    pub pid: Option<i32>,
}

/// One tool of a running service, as discovered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct McpTool {
    /// The service it belongs to.
    pub service: String,
    /// Its name on the server.
    pub name: String,
    /// The name the model calls it by (`service__tool`, see [`crate::names`]).
    pub exposed_name: String,
    /// The server's full description.
    pub description: String,
    /// The input schema, normalised ([`names::normalize_schema`]).
    pub input_schema: Value,
}

impl McpTool {
    /// The level-1 description: one sentence (from the tool's description, else the service's).
    pub fn level1(&self, service_description: &str) -> String {
        let s = names::first_sentence(&self.description, LEVEL1_CHARS);
        if s.is_empty() {
            names::first_sentence(service_description, LEVEL1_CHARS)
        } else {
            s
        }
    }
    /// The full spec (level 2): name, description and schema.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            self.exposed_name.clone(),
            self.description.clone(),
            self.input_schema.clone(),
        )
    }
}

/// Manages MCP services and offers their tools through [`ToolProvider`].
///
/// Cloning is cheap; clones share the services. Dropping the last clone kills every server's
/// process group.
///
/// ```no_run
/// # async fn demo() -> Result<(), mcp_bridge::BridgeError> {
/// use mcp_bridge::{McpBridge, ServiceConfig};
/// let bridge = McpBridge::new();
/// bridge.register(ServiceConfig::new("everything", "npx")
///     .with_args(["-y", "@modelcontextprotocol/server-everything"])
///     .with_trigger_keywords(["echo", "回显"]))?;
/// bridge.start("everything").await?;
/// for t in bridge.tools().await { println!("{} — {}", t.exposed_name, t.description); }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpBridge {
    inner: Arc<Inner>,
}

struct Inner {
    services: Mutex<BTreeMap<String, Service>>,
    config_path: Option<PathBuf>,
    /// What the loaded file held besides runnable services, kept for saving.
    file_rest: Mutex<ConfigFile>,
    max_result_bytes: AtomicUsize,
}

struct Service {
    config: ServiceConfig,
    state: State,
    generation: u64,
}

enum State {
    Stopped,
    Starting,
    Running(Arc<Instance>),
    Error(String),
}

/// A running server.
struct Instance {
    service: String,
    generation: u64,
    pid: i32,
    peer: Peer<RoleClient>,
    tools: Mutex<Vec<rmcp::model::Tool>>,
    stale: Arc<AtomicBool>,
    /// Tells the monitor to end the server; `Some(reason)` puts the service in `error`.
    shutdown: Mutex<Option<oneshot::Sender<Option<String>>>>,
    finished: watch::Receiver<bool>,
}

impl Instance {
    fn end(&self, reason: Option<String>) {
        if let Some(tx) = lock(&self.shutdown).take() {
            let _ = tx.send(reason);
        }
    }
    async fn wait_finished(&self, within: Duration) {
        let mut rx = self.finished.clone();
        let _ = tokio::time::timeout(within, rx.wait_for(|done| *done)).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Our side of the MCP connection: marks the tool cache stale on `tools/list_changed`.
struct ClientSide {
    service: String,
    stale: Arc<AtomicBool>,
}

impl ClientHandler for ClientSide {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(service = %self.service, "MCP server says its tool list changed");
        self.stale.store(true, Ordering::SeqCst);
    }
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("llm-toolkit-mcp-bridge", env!("CARGO_PKG_VERSION")),
        )
    }
}

impl Default for McpBridge {
    fn default() -> Self {
        Self::new()
    }
}

impl McpBridge {
    /// A bridge with no services and no config file.
    pub fn new() -> Self {
        Self::build(None, ConfigFile::default(), DEFAULT_MAX_RESULT_BYTES)
    }

    /// A bridge whose services are read from `path` (`mcpServers` format; a missing file is an
    /// empty list) and saved back to it on every register, update and remove.
    pub fn with_config_file(path: impl Into<PathBuf>) -> Result<Self, BridgeError> {
        let path = path.into();
        let file = ConfigFile::load(&path)?;
        for (name, _, why) in &file.skipped {
            tracing::warn!(service = %name, "MCP config entry kept but not used: {why}");
        }
        Ok(Self::build(Some(path), file, DEFAULT_MAX_RESULT_BYTES))
    }

    /// Sets the cap on result text that reaches the model (default 64 KiB, at least 256 bytes).
    pub fn set_max_result_bytes(&self, max: usize) {
        self.inner
            .max_result_bytes
            .store(max.max(256), Ordering::Relaxed);
    }

    fn build(config_path: Option<PathBuf>, mut file: ConfigFile, max: usize) -> Self {
        let services = std::mem::take(&mut file.services)
            .into_iter()
            .map(|c| {
                (
                    c.name.clone(),
                    Service {
                        config: c,
                        state: State::Stopped,
                        generation: 0,
                    },
                )
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                services: Mutex::new(services),
                config_path,
                file_rest: Mutex::new(file),
                max_result_bytes: AtomicUsize::new(max),
            }),
        }
    }

    fn persist(&self) -> Result<(), BridgeError> {
        let Some(path) = &self.inner.config_path else {
            return Ok(());
        };
        let mut file = lock(&self.inner.file_rest).clone();
        file.services = lock(&self.inner.services)
            .values()
            .map(|s| s.config.clone())
            .collect();
        file.save(path)
    }

    // ---- registry (M5) ----

    /// Adds a service (stopped). Saved to the config file when there is one.
    pub fn register(&self, config: ServiceConfig) -> Result<(), BridgeError> {
        config.validate()?;
        {
            let mut map = lock(&self.inner.services);
            if map.contains_key(&config.name) {
                return Err(BridgeError::AlreadyRegistered(config.name));
            }
            map.insert(
                config.name.clone(),
                Service {
                    config,
                    state: State::Stopped,
                    generation: 0,
                },
            );
        }
        self.persist()
    }

    /// Changes a service. Description and keywords apply at once; a running service whose
    /// command, arguments, environment or directory changed is restarted.
    pub async fn update(&self, name: &str, update: ServiceUpdate) -> Result<(), BridgeError> {
        let process_changed = update.command.is_some()
            || update.args.is_some()
            || update.env.is_some()
            || update.cwd.is_some();
        let running = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            let mut next = svc.config.clone();
            next.apply(update);
            next.validate()?;
            svc.config = next;
            matches!(svc.state, State::Running(_) | State::Starting)
        };
        self.persist()?;
        if running && process_changed {
            self.restart(name).await?;
        }
        Ok(())
    }

    /// Stops and removes a service.
    pub async fn remove(&self, name: &str) -> Result<(), BridgeError> {
        self.stop(name).await?;
        lock(&self.inner.services).remove(name);
        self.persist()
    }

    /// Every registered service with its status, in name order.
    pub fn services(&self) -> Vec<ServiceInfo> {
        lock(&self.inner.services)
            .values()
            .map(|s| ServiceInfo {
                config: s.config.clone(),
                status: status_of(&s.state),
                pid: match &s.state {
                    State::Running(i) => Some(i.pid),
                    _ => None,
                },
            })
            .collect()
    }

    /// One service's status.
    pub fn status(&self, name: &str) -> Result<ServiceStatus, BridgeError> {
        lock(&self.inner.services)
            .get(name)
            .map(|s| status_of(&s.state))
            .ok_or_else(|| BridgeError::UnknownService(name.into()))
    }

    /// The server's pid (= its process group id) while it runs.
    pub fn pid(&self, name: &str) -> Option<i32> {
        match lock(&self.inner.services).get(name).map(|s| &s.state) {
            Some(State::Running(i)) => Some(i.pid),
            _ => None,
        }
    }

    // ---- lifecycle ----

    /// Starts a service: spawn, MCP handshake and first tool list, all within its startup
    /// timeout. On failure the service is in `error` with the reason and nothing is left running.
    /// Starting a running service does nothing.
    pub async fn start(&self, name: &str) -> Result<(), BridgeError> {
        let (config, generation) = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            if matches!(svc.state, State::Running(_) | State::Starting) {
                return Ok(());
            }
            svc.generation += 1;
            svc.state = State::Starting;
            (svc.config.clone(), svc.generation)
        };
        match self.launch(&config, generation).await {
            Ok(instance) => {
                let mut map = lock(&self.inner.services);
                match map.get_mut(name) {
                    Some(svc) if svc.generation == generation => {
                        svc.state = State::Running(instance);
                        Ok(())
                    }
                    _ => {
                        // Stopped or removed while starting.
                        instance.end(None);
                        Err(BridgeError::StartFailed {
                            service: name.into(),
                            reason: "stopped while starting".into(),
                        })
                    }
                }
            }
            Err(reason) => {
                tracing::warn!(service = %name, "MCP service failed to start: {reason}");
                self.set_error_if(name, generation, reason.clone());
                Err(BridgeError::StartFailed {
                    service: name.into(),
                    reason,
                })
            }
        }
    }

    /// Starts every stopped or failed service; returns the ones that failed.
    pub async fn start_all(&self) -> Vec<(String, BridgeError)> {
        let names: Vec<String> = lock(&self.inner.services).keys().cloned().collect();
        let mut failed = Vec::new();
        for n in names {
            if let Err(e) = self.start(&n).await {
                failed.push((n, e));
            }
        }
        failed
    }

    /// Stops a service and waits until its whole process group is gone.
    pub async fn stop(&self, name: &str) -> Result<(), BridgeError> {
        let previous = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            svc.generation += 1;
            std::mem::replace(&mut svc.state, State::Stopped)
        };
        if let State::Running(instance) = previous {
            instance.end(None);
            instance.wait_finished(STOP_GRACE * 4).await;
        }
        Ok(())
    }

    /// Stops then starts a service.
    pub async fn restart(&self, name: &str) -> Result<(), BridgeError> {
        self.stop(name).await?;
        self.start(name).await
    }

    /// Stops every service.
    pub async fn stop_all(&self) {
        let names: Vec<String> = lock(&self.inner.services).keys().cloned().collect();
        for n in names {
            let _ = self.stop(&n).await;
        }
    }

    fn set_error_if(&self, name: &str, generation: u64, reason: String) {
        if let Some(svc) = lock(&self.inner.services).get_mut(name)
            && svc.generation == generation
        {
            svc.state = State::Error(reason);
        }
    }

    async fn launch(
        &self,
        config: &ServiceConfig,
        generation: u64,
    ) -> Result<Arc<Instance>, String> {
        let spawned =
            process::spawn(config).map_err(|e| format!("cannot run `{}`: {e}", config.command))?;
        let process::Spawned {
            mut child,
            group,
            reader,
            writer,
            mut violation,
        } = spawned;
        let pid = group.pgid();
        let stale = Arc::new(AtomicBool::new(false));
        let handler = ClientSide {
            service: config.name.clone(),
            stale: stale.clone(),
        };
        let transport =
            AsyncRwTransport::new_client(reader, writer).with_max_line_length(MAX_MESSAGE_BYTES);
        let deadline = tokio::time::Instant::now() + config.startup_timeout;
        let started = tokio::time::timeout_at(deadline, async {
            let client = handler
                .serve(transport)
                .await
                .map_err(|e| format!("MCP handshake failed: {e}"))?;
            let tools = client
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| format!("tools/list failed: {e}"))?;
            Ok::<_, String>((client, tools))
        })
        .await;
        let (client, tools) = match started {
            Ok(Ok(v)) => v,
            failed => {
                let mut reason = match failed {
                    Ok(Err(e)) => e,
                    _ => format!(
                        "no MCP handshake and tool list within {} ms",
                        config.startup_timeout.as_millis()
                    ),
                };
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
        let peer = client.peer().clone();
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let (finished_tx, finished) = watch::channel(false);
        let instance = Arc::new(Instance {
            service: config.name.clone(),
            generation,
            pid,
            peer,
            tools: Mutex::new(tools),
            stale,
            shutdown: Mutex::new(Some(shutdown_tx)),
            finished,
        });
        let bridge = Arc::downgrade(&self.inner);
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
            if let (Some(reason), Some(inner)) = (reason, bridge.upgrade()) {
                let mut map = lock(&inner.services);
                if let Some(svc) = map.get_mut(&name)
                    && svc.generation == generation
                    && matches!(svc.state, State::Running(_))
                {
                    svc.state = State::Error(reason);
                }
            }
            let _ = finished_tx.send(true);
        });
        Ok(instance)
    }

    // ---- discovery (M1) ----

    fn running(&self) -> Vec<(ServiceConfig, Arc<Instance>)> {
        lock(&self.inner.services)
            .values()
            .filter_map(|s| match &s.state {
                State::Running(i) => Some((s.config.clone(), i.clone())),
                _ => None,
            })
            .collect()
    }

    /// The tools of running services only (stopped and failed services contribute none),
    /// from the cache; a cache marked stale by `notifications/tools/list_changed` is fetched
    /// again first.
    pub async fn tools(&self) -> Vec<McpTool> {
        let running = self.running();
        let mut out = Vec::new();
        let mut used = HashSet::new();
        for (config, inst) in running {
            if inst.stale.swap(false, Ordering::SeqCst) {
                match tokio::time::timeout(config.startup_timeout, inst.peer.list_all_tools()).await
                {
                    Ok(Ok(tools)) => *lock(&inst.tools) = tools,
                    Ok(Err(e)) => {
                        tracing::warn!(service = %config.name, "refreshing tools failed: {e}")
                    }
                    Err(_) => tracing::warn!(service = %config.name, "refreshing tools timed out"),
                }
            }
            let tools = lock(&inst.tools).clone();
            for t in tools {
                let mut exposed = names::exposed_name(&config.name, &t.name);
                if used.contains(&exposed) {
                    exposed = names::hashed(&exposed, &config.name, &t.name);
                }
                if !used.insert(exposed.clone()) {
                    tracing::warn!(service = %config.name, tool = %t.name, "tool name clash; tool skipped");
                    continue;
                }
                out.push(McpTool {
                    service: config.name.clone(),
                    name: t.name.to_string(),
                    exposed_name: exposed,
                    description: t.description.as_deref().unwrap_or_default().to_string(),
                    input_schema: names::normalize_schema(&t.input_schema),
                });
            }
        }
        out
    }

    /// The full spec of one tool (exposed or original name), or `None`.
    pub async fn describe_tool(&self, name: &str) -> Option<ToolSpec> {
        let tools = self.tools().await;
        resolve(&tools, name).map(McpTool::spec)
    }

    // ---- tiered descriptions (M3) ----

    /// The prompt section for `intent` (see [`crate::inject`]).
    pub async fn prompt_section(&self, intent: &crate::intent::Intent) -> Option<String> {
        let tools = self.tools().await;
        let descriptions: BTreeMap<String, String> = lock(&self.inner.services)
            .values()
            .map(|s| (s.config.name.clone(), s.config.description().to_string()))
            .collect();
        crate::inject::level1_section(intent, &tools, &descriptions)
    }

    /// A layer-1 recognizer for the services and running tools as they are now.
    pub async fn recognizer(&self) -> crate::intent::McpRecognizer {
        let tools = self.tools().await;
        let configs: Vec<ServiceConfig> = lock(&self.inner.services)
            .values()
            .map(|s| s.config.clone())
            .collect();
        crate::intent::McpRecognizer::new(&configs, &tools)
    }

    // ---- execution (M4) ----

    /// Calls a tool by its exposed name (or its original name when only one running service has
    /// it). Every failure is a [`ToolError`] whose message the model can act on.
    pub async fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        if name == DESCRIBE_TOOL {
            return self.describe_call(&args).await;
        }
        let tools = self.tools().await;
        let Some(tool) = resolve(&tools, name).cloned() else {
            return Err(self.missing(name));
        };
        let Some((config, inst)) = self
            .running()
            .into_iter()
            .find(|(c, _)| c.name == tool.service)
        else {
            return Err(self.missing(name));
        };
        let args = match args {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            other => {
                return Err(invalid_args(
                    &tool,
                    &format!("arguments must be a JSON object, not {other}"),
                ));
            }
        };
        if let Some(missing) = missing_required(&tool.input_schema, &args) {
            return Err(invalid_args(
                &tool,
                &format!("missing required argument `{missing}`"),
            ));
        }
        let params = CallToolRequestParams::new(tool.name.clone()).with_arguments(args);
        let timeout = config.call_timeout;
        // Dropping the call on timeout makes rmcp send notifications/cancelled for it.
        match tokio::time::timeout(timeout, inst.peer.call_tool(params)).await {
            Ok(Ok(result)) => self.convert(&tool, result),
            Ok(Err(ServiceError::McpError(e))) if e.code.0 == -32602 => {
                Err(invalid_args(&tool, &e.message))
            }
            Ok(Err(ServiceError::McpError(e))) => Err(ToolError::failed(format!(
                "Tool {} failed: {}",
                tool.exposed_name, e.message
            ))
            .with_detail(format!("{e:?}"))),
            Ok(Err(e)) => {
                // The connection ended under the call: wait for the monitor to record why.
                inst.wait_finished(STOP_GRACE * 4).await;
                let why = match self.status(&tool.service) {
                    Ok(ServiceStatus::Error(r)) => r,
                    _ => e.to_string(),
                };
                Err(ToolError::new(
                    ToolErrorKind::Crashed,
                    format!(
                        "The MCP service {} stopped while running {}: {why}. Its tools are unavailable until it is restarted; tell the user, and do not call them again now.",
                        tool.service, tool.exposed_name
                    ),
                )
                .with_detail(format!("{e:?}")))
            }
            Err(_) => {
                let check = HEALTH_CHECK.min(timeout);
                let alive = matches!(
                    tokio::time::timeout(check, inst.peer.list_tools(None)).await,
                    Ok(Ok(_))
                );
                let mut err = ToolError::timeout(&tool.exposed_name, timeout);
                if alive {
                    err.message.push_str(
                        ". The server is still up: try again with a smaller request, or go on without this result.",
                    );
                } else {
                    inst.end(Some(format!(
                        "did not answer tools/call {} within {} ms nor a follow-up request within {} ms; it was stopped",
                        tool.name,
                        timeout.as_millis(),
                        check.as_millis()
                    )));
                    inst.wait_finished(STOP_GRACE * 4).await;
                    err.message.push_str(&format!(
                        ". The MCP service {} stopped answering and was stopped; its tools are unavailable until it is restarted.",
                        tool.service
                    ));
                }
                Err(err.with_detail(format!(
                    "service {} pid {} generation {}",
                    inst.service, inst.pid, inst.generation
                )))
            }
        }
    }

    async fn describe_call(&self, args: &Value) -> Result<Value, ToolError> {
        let Some(name) = args.get("name").and_then(Value::as_str) else {
            return Err(ToolError::invalid_arguments(format!(
                "{DESCRIBE_TOOL} needs {{\"name\": \"<tool name>\"}}"
            )));
        };
        match self.describe_tool(name).await {
            Some(spec) => Ok(serde_json::json!({
                "name": spec.name, "description": spec.description, "parameters": spec.parameters
            })),
            None => Err(self.missing(name)),
        }
    }

    /// Why `name` cannot be called: its service is not running, or there is no such tool.
    fn missing(&self, name: &str) -> ToolError {
        let map = lock(&self.inner.services);
        for s in map.values() {
            let prefix = format!("{}{}", names::sanitize(&s.config.name), names::SEPARATOR);
            if name.starts_with(&prefix) || name == s.config.name {
                let state = match &s.state {
                    State::Running(_) => break,
                    State::Stopped => "stopped".to_string(),
                    State::Starting => "still starting".to_string(),
                    State::Error(e) => format!("in error ({e})"),
                };
                return ToolError::unavailable(format!(
                    "The tool {name} belongs to the MCP service {}, which is not running (it is {state}). Tell the user it is unavailable right now and go on without it.",
                    s.config.name
                ));
            }
        }
        ToolError::not_found(name)
    }

    fn convert(&self, tool: &McpTool, result: CallToolResult) -> Result<Value, ToolError> {
        let text = content_text(&result.content);
        if result.is_error == Some(true) {
            let msg = if text.trim().is_empty() {
                "the tool reported an error without a message".to_string()
            } else {
                cap(&text, self.inner.max_result_bytes.load(Ordering::Relaxed))
            };
            return Err(ToolError::failed(format!(
                "Tool {} failed: {msg}",
                tool.exposed_name
            )));
        }
        let max = self.inner.max_result_bytes.load(Ordering::Relaxed);
        match result.structured_content {
            Some(v) => {
                let size = serde_json::to_string(&v).map(|s| s.len()).unwrap_or(0);
                if size <= max {
                    Ok(v)
                } else {
                    let full = serde_json::to_string(&v).unwrap_or_default();
                    Ok(Value::String(cap(&full, max)))
                }
            }
            None => Ok(Value::String(cap(&text, max))),
        }
    }
}

fn status_of(state: &State) -> ServiceStatus {
    match state {
        State::Stopped => ServiceStatus::Stopped,
        State::Starting => ServiceStatus::Starting,
        State::Running(_) => ServiceStatus::Running,
        State::Error(e) => ServiceStatus::Error(e.clone()),
    }
}

/// Exposed name first; then an original name that only one running service has.
fn resolve<'a>(tools: &'a [McpTool], name: &str) -> Option<&'a McpTool> {
    if let Some(t) = tools.iter().find(|t| t.exposed_name == name) {
        return Some(t);
    }
    let mut by_original = tools.iter().filter(|t| t.name == name);
    match (by_original.next(), by_original.next()) {
        (Some(t), None) => Some(t),
        _ => None,
    }
}

fn invalid_args(tool: &McpTool, why: &str) -> ToolError {
    ToolError::invalid_arguments(format!(
        "Invalid arguments for {}: {why}. Its full parameter schema is {}. Call it again with arguments that fit.",
        tool.exposed_name, tool.input_schema
    ))
}

fn missing_required(schema: &Value, args: &Map<String, Value>) -> Option<String> {
    schema
        .get("required")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(Value::as_str)
        .find(|k| !args.contains_key(*k))
        .map(str::to_string)
}

/// Text parts joined by newlines; other parts named in brackets.
fn content_text(content: &[ContentBlock]) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|c| match c {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!("[image {} omitted]", i.mime_type),
            ContentBlock::Audio(a) => format!("[audio {} omitted]", a.mime_type),
            ContentBlock::Resource(r) => serde_json::to_value(r)
                .ok()
                .and_then(|v| {
                    v.pointer("/resource/text")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "[embedded resource omitted]".into()),
            ContentBlock::ResourceLink(l) => format!("[resource {}]", l.uri),
            _ => "[content omitted]".into(),
        })
        .collect();
    parts.join("\n")
}

/// At most `max` bytes, cut on a character boundary, with a note saying how much was cut.
pub(crate) fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[result truncated: the tool returned {} bytes; only the first {} are shown]",
        &text[..end],
        text.len(),
        end
    )
}

#[async_trait::async_trait]
impl ToolProvider for McpBridge {
    fn provider_name(&self) -> &str {
        "mcp"
    }

    /// Full specs of running services' tools, plus [`DESCRIBE_TOOL`] when there are any.
    async fn list(&self) -> Vec<ToolSpec> {
        let tools = self.tools().await;
        if tools.is_empty() {
            return Vec::new();
        }
        let mut specs: Vec<ToolSpec> = tools.iter().map(McpTool::spec).collect();
        specs.push(ToolSpec::new(
            DESCRIBE_TOOL,
            "Returns the full parameter schema of an MCP tool before you call it.",
            serde_json::json!({"type": "object", "properties": {"name": {"type": "string", "description": "The tool's name"}}, "required": ["name"]}),
        ));
        specs
    }

    async fn call(&self, name: &str, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        McpBridge::call(self, name, args).await
    }

    /// The service's call timeout plus room for the health check and stop, so that the bridge's
    /// own timeout (which cancels the request and checks the server) fires first.
    fn timeout(&self, name: &str) -> Option<Duration> {
        let map = lock(&self.inner.services);
        map.values()
            .find(|s| {
                name.starts_with(&format!(
                    "{}{}",
                    names::sanitize(&s.config.name),
                    names::SEPARATOR
                ))
            })
            .map(|s| s.config.call_timeout + HEALTH_CHECK + STOP_GRACE * 5)
    }
}

/// M3 in the loop: for each turn, the standard intent chain (MCP, Memory, HITL, Normal) reads the
/// user's message; an MCP intent adds the level-1 section (`mcp`) to that request's system
/// prompt, any other intent adds nothing. Plug it in with
/// `Agent::builder(model).provider(Arc::new(bridge.clone())).turn_sections(Arc::new(bridge))`.
#[async_trait::async_trait]
impl tool_system::TurnSections for McpBridge {
    async fn sections(&self, user_text: &str) -> Vec<(String, String)> {
        let chain = crate::intent::IntentChain::standard(self.recognizer().await);
        let intent = chain.recognize(user_text);
        match self.prompt_section(&intent).await {
            Some(text) => vec![(crate::inject::SECTION_NAME.to_owned(), text)],
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m4_cap_keeps_char_boundaries_and_notes_the_cut() {
        let s = "é".repeat(100);
        let c = cap(&s, 11);
        assert!(c.starts_with(&"é".repeat(5)));
        assert!(c.contains("200 bytes"));
        assert_eq!(cap("short", 100), "short");
    }
}
