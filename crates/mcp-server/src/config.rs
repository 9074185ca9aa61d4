//! The config file of `toolwright-mcp serve --config FILE`: which tools to serve, which calls
//! need approval, and how the HTTP endpoint is offered. JSON:
//!
//! ```json
//! {
//!   "tools": ["demo"],
//!   "mcpConfig": "servers.json",
//!   "requireApproval": ["transfer"],
//!   "toolTimeoutMs": 30000,
//!   "approvalTimeoutMs": 300000,
//!   "stateKeyEnv": "TOOLWRIGHT_MCP_STATE_KEY",
//!   "http": {
//!     "listen": "127.0.0.1:8808",
//!     "path": "/mcp",
//!     "allowedHosts": ["localhost", "127.0.0.1"],
//!     "allowedOrigins": [],
//!     "stateful": false
//!   }
//! }
//! ```
//!
//! `tools`: `"demo"` for the [demo tools](crate::demo), `"conformance"` for the conformance
//! suite's fixtures (its tools, resources and prompts). `mcpConfig`: an `mcpServers` file (the
//! MCP bridge's format, relative to this file) whose servers' tools are served too, with
//! their own `requireApproval` settings. `stateKeyEnv`: the environment variable holding the
//! key (at least 32 bytes) that seals approval state; give every worker the same one.
//! `http.stateful`: keep a session per client in this process
//! ([`HttpOptions::stateful`](crate::HttpOptions::stateful)) instead of serving stateless.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toolwright_mcp_bridge::McpBridge;
use toolwright_tool_system::{ApprovalPolicy, Dispatcher};

use crate::error::ServeError;
use crate::{HttpOptions, McpServer};

/// The config file, read ([`ServeConfig::load`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServeConfig {
    /// Built-in tool sets: `"demo"`, `"conformance"`.
    #[serde(default)]
    pub tools: Vec<String>,
    /// An `mcpServers` file whose servers' tools are served.
    #[serde(default)]
    pub mcp_config: Option<PathBuf>,
    /// Tools whose every call needs the person's approval.
    #[serde(default)]
    pub require_approval: Vec<String>,
    /// The time limit of a call (default 30 s).
    #[serde(default)]
    pub tool_timeout_ms: Option<u64>,
    /// How long a question to the person may wait (default 5 min).
    #[serde(default)]
    pub approval_timeout_ms: Option<u64>,
    /// The environment variable with the approval state key.
    #[serde(default)]
    pub state_key_env: Option<String>,
    /// The HTTP endpoint.
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(skip)]
    dir: PathBuf,
}

/// The `http` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpConfig {
    /// The address to listen on (default `127.0.0.1:8808`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The endpoint's path (default `/mcp`).
    #[serde(default = "default_path")]
    pub path: String,
    /// `Host` names served (default the loopback names).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Web origins whose pages may call (default the loopback origins).
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Keep a session per client instead of serving stateless (default `false`).
    #[serde(default)]
    pub stateful: bool,
}

fn default_listen() -> String {
    "127.0.0.1:8808".into()
}
fn default_path() -> String {
    "/mcp".into()
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            path: default_path(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            stateful: false,
        }
    }
}

impl ServeConfig {
    /// Reads and checks the file.
    pub fn load(path: &Path) -> Result<Self, ServeError> {
        let text = std::fs::read_to_string(path).map_err(|source| ServeError::Io {
            what: format!("read the config file {}", path.display()),
            source,
        })?;
        let mut config: Self = serde_json::from_str(&text).map_err(|e| {
            ServeError::Config(format!(
                "the config file {} is not valid: {e}",
                path.display()
            ))
        })?;
        config.dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for set in &config.tools {
            if set != "demo" && set != "conformance" {
                return Err(ServeError::Config(format!(
                    "unknown tool set {set:?} in `tools`: the built-in sets are \"demo\" and \"conformance\""
                )));
            }
        }
        if config.tools.is_empty() && config.mcp_config.is_none() {
            return Err(ServeError::Config(
                "the config serves no tools: set `tools` to [\"demo\"] or `mcpConfig` to an mcpServers file".into(),
            ));
        }
        Ok(config)
    }

    /// The server the file describes, its bridged MCP servers started (one that fails to
    /// start is logged and retried on its first call, as the bridge does).
    pub async fn server(&self) -> Result<McpServer, ServeError> {
        let mut dispatcher = Dispatcher::new();
        if self.tools.iter().any(|t| t == "demo") {
            let tools = crate::demo::tools().map_err(|e| ServeError::Config(e.to_string()))?;
            dispatcher = dispatcher.with_provider(Arc::new(tools));
        }
        if self.tools.iter().any(|t| t == "conformance") {
            let tools =
                crate::demo::conformance_tools().map_err(|e| ServeError::Config(e.to_string()))?;
            dispatcher = dispatcher.with_provider(Arc::new(tools));
        }
        if let Some(file) = &self.mcp_config {
            let bridge = McpBridge::with_config_file(self.dir.join(file))
                .map_err(|e| ServeError::Config(format!("mcpConfig: {e}")))?;
            for (name, e) in bridge.start_all().await {
                tracing::warn!(service = %name, "bridged MCP server did not start: {e}");
            }
            dispatcher = dispatcher.with_provider(Arc::new(bridge));
        }
        if let Some(ms) = self.tool_timeout_ms {
            dispatcher = dispatcher.with_default_timeout(Duration::from_millis(ms.max(1)));
        }
        let policy = self
            .require_approval
            .iter()
            .fold(ApprovalPolicy::new(), |p, t| p.always(t.clone()));
        let mut builder = McpServer::builder(Arc::new(dispatcher)).approval_policy(policy);
        if self.tools.iter().any(|t| t == "conformance") {
            builder = builder
                .resources(crate::demo::ConformanceResources)
                .prompts(crate::demo::ConformancePrompts);
        }
        if let Some(ms) = self.approval_timeout_ms {
            builder = builder.approval_timeout(Duration::from_millis(ms));
        }
        if let Some(var) = &self.state_key_env {
            let key = std::env::var(var).map_err(|_| {
                ServeError::Config(format!(
                    "stateKeyEnv names {var}, which is not set: export 32 or more random bytes there (the same on every worker)"
                ))
            })?;
            builder = builder.state_key(key.into_bytes())?;
        }
        Ok(builder.build())
    }

    /// The HTTP options the file describes.
    pub fn http_options(&self) -> HttpOptions {
        let mut o = HttpOptions::default()
            .path(self.http.path.clone())
            .stateful(self.http.stateful);
        if !self.http.allowed_origins.is_empty() {
            o = o.allowed_origins(self.http.allowed_origins.clone());
        }
        if !self.http.allowed_hosts.is_empty() {
            o = o.allowed_hosts(self.http.allowed_hosts.clone());
        }
        o
    }
}
