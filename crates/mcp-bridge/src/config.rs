//! Service configuration (M5) and the config file: the `mcpServers` JSON format that Claude
//! Desktop and Cursor use, extended with our optional fields.
//!
//! ```json
//! {
//!   "mcpServers": {
//!     "filesystem": {
//!       "command": "npx",
//!       "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
//!       "env": {"LOG_LEVEL": "info"},
//!       "cwd": "/tmp",
//!       "tool_timeout_sec": 30,
//!       "startup_timeout_sec": 20,
//!       "description": "Read and write files under /tmp",
//!       "trigger_keywords": ["文件", "file"],
//!       "disabled_tools": ["write_file"]
//!     }
//!   }
//! }
//! ```
//!
//! Every field but `command` is optional. The keys users know from Codex's and Claude Desktop's
//! configs work as they do there: `startup_timeout_sec` and `tool_timeout_sec` (seconds; our
//! older `startup_timeout_ms` and `timeout_ms` still read), `enabled_tools` (only these tools of
//! the server are offered) and `disabled_tools` (these are not), `disabled: true` (kept in the
//! file, never started). Ours: `autostart: false` starts the server on first use instead of when
//! the bridge starts ([`crate::McpBridge::start_in_background`]); `require_approval`
//! (`"always"`, or `{"always": ["write_file"]}`, as OpenAI's hosted MCP tool spells it) makes
//! calls wait for a person's approval ([`RequireApproval`]).
//!
//! A remote server has `url` (MCP's Streamable HTTP transport) instead of `command`, with
//! optional `headers` (alias `http_headers`) and `bearer_token_env_var` (the variable that holds
//! its token, read at each start). Entries we cannot run (the legacy `"type": "sse"` transport)
//! and fields we do not know are kept as they are and written back on save, so a user's file
//! loses nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::BridgeError;

/// Default time limit of one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time limit for starting a server: spawn, MCP handshake and the first tool list.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// One MCP service: how to start it and how it is offered to the model.
///
/// ```
/// use mcp_bridge::ServiceConfig;
/// let cfg = ServiceConfig::new("weather", "weather-mcp").with_args(["--stdio"]);
/// assert_eq!(cfg.description(), "weather"); // the default description is the name (M5)
/// assert!(cfg.trigger_keywords.is_empty()); // default: explicit calls only
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServiceConfig {
    /// Unique name; also the prefix of its tools' names (`name__tool`).
    pub name: String,
    /// Program to run (looked up on `PATH`); empty for a remote server ([`Self::url`]).
    pub command: String,
    /// A remote server's MCP endpoint (Streamable HTTP), instead of a program to run.
    pub url: Option<String>,
    /// Extra HTTP headers sent to a remote server (`headers`, alias `http_headers`).
    pub headers: BTreeMap<String, String>,
    /// The environment variable that holds a remote server's bearer token
    /// (`bearer_token_env_var`, as Codex spells it); read at each start, never stored.
    pub bearer_token_env_var: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// The child's environment on top of the few variables it needs to start (see
    /// [`crate::process::INHERITED_ENV`]); nothing else of the agent's environment is passed.
    pub env: BTreeMap<String, String>,
    /// Working directory; `None` keeps the agent's.
    pub cwd: Option<PathBuf>,
    /// Time limit of one tool call.
    pub call_timeout: Duration,
    /// Time limit to start: spawn, handshake, first tool list.
    pub startup_timeout: Duration,
    /// What the service is for; `None` means the name is used (M5).
    pub description: Option<String>,
    /// Words in a user message that call for this service (M2); empty means explicit calls only.
    pub trigger_keywords: Vec<String>,
    /// Kept in the config but never started (`"disabled": true`).
    pub disabled: bool,
    /// Started when the bridge starts ([`crate::McpBridge::start_in_background`]); `false`
    /// (`"autostart": false`) starts it on the first turn or call that needs it.
    pub autostart: bool,
    /// When set, only these tools of the server (its own names) are offered (`enabled_tools`).
    pub enabled_tools: Option<Vec<String>>,
    /// Tools of the server (its own names) that are never offered (`disabled_tools`).
    pub disabled_tools: Vec<String>,
    /// Which of its tools' calls wait for a person's approval (`require_approval`); `None`:
    /// none.
    pub require_approval: Option<RequireApproval>,
    /// Fields of the config file entry we do not use, kept for saving.
    pub extra: Map<String, Value>,
    /// How the file spelled what we write back.
    pub(crate) spelling: Spelling,
}

/// How a config entry spelled keys that have more than one spelling, so that saving writes them
/// back as the user wrote them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Spelling {
    /// Timeouts in seconds (`*_timeout_sec`, Codex) rather than milliseconds.
    seconds: bool,
    /// `disabled` was present (written back even when `false`).
    disabled_key: bool,
}

impl ServiceConfig {
    /// A service running `command`, with every optional field at its default.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            url: None,
            headers: BTreeMap::new(),
            bearer_token_env_var: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            description: None,
            trigger_keywords: Vec::new(),
            disabled: false,
            autostart: true,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            require_approval: None,
            extra: Map::new(),
            spelling: Spelling::default(),
        }
    }
    /// A remote server reached over MCP's Streamable HTTP transport at `url`.
    ///
    /// ```
    /// use mcp_bridge::ServiceConfig;
    /// let cfg = ServiceConfig::remote("docs", "https://mcp.example.invalid/mcp")
    ///     .with_bearer_token_env_var("DOCS_MCP_TOKEN");
    /// assert!(cfg.validate().is_ok());
    /// ```
    pub fn remote(name: impl Into<String>, url: impl Into<String>) -> Self {
        let mut cfg = Self::new(name, "");
        cfg.url = Some(url.into());
        cfg
    }
    /// Add an HTTP header sent to a remote server.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
    /// Read a remote server's bearer token from this environment variable at each start.
    pub fn with_bearer_token_env_var(mut self, var: impl Into<String>) -> Self {
        self.bearer_token_env_var = Some(var.into());
        self
    }
    /// Whether the server's tool `tool` (its own name) is offered: not in `disabled_tools`, and
    /// in `enabled_tools` when that is set.
    pub fn offers(&self, tool: &str) -> bool {
        !self.disabled_tools.iter().any(|t| t == tool)
            && self
                .enabled_tools
                .as_ref()
                .is_none_or(|on| on.iter().any(|t| t == tool))
    }
    /// Kept but never started (`"disabled": true`).
    pub fn with_disabled(mut self, disabled: bool) -> Self {
        self.disabled = disabled;
        self
    }
    /// Started on first use instead of when the bridge starts (`"autostart": false`).
    pub fn with_autostart(mut self, autostart: bool) -> Self {
        self.autostart = autostart;
        self
    }
    /// Whether a call of the server's tool `tool` (its own name) waits for a person's
    /// approval ([`RequireApproval`]).
    pub fn requires_approval(&self, tool: &str) -> bool {
        self.require_approval
            .as_ref()
            .is_some_and(|r| r.applies_to(tool))
    }

    /// Calls of the tools `require` names wait for a person's approval (`require_approval`).
    pub fn with_require_approval(mut self, require: RequireApproval) -> Self {
        self.require_approval = Some(require);
        self
    }

    /// Offer only these tools of the server (`enabled_tools`).
    pub fn with_enabled_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.enabled_tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }
    /// Never offer these tools of the server (`disabled_tools`).
    pub fn with_disabled_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.disabled_tools = tools.into_iter().map(Into::into).collect();
        self
    }
    /// Set the arguments.
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }
    /// Add one environment variable for the child.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }
    /// Set the working directory.
    pub fn with_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
    /// Set the call time limit.
    pub fn with_call_timeout(mut self, t: Duration) -> Self {
        self.call_timeout = t;
        self
    }
    /// Set the startup time limit.
    pub fn with_startup_timeout(mut self, t: Duration) -> Self {
        self.startup_timeout = t;
        self
    }
    /// Set the description.
    pub fn with_description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }
    /// Set the trigger keywords.
    pub fn with_trigger_keywords<I, S>(mut self, kws: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.trigger_keywords = kws.into_iter().map(Into::into).collect();
        self
    }
    /// The description, or the name when none was given (M5).
    pub fn description(&self) -> &str {
        match &self.description {
            Some(d) if !d.trim().is_empty() => d,
            _ => &self.name,
        }
    }

    /// Checks what cannot work: an empty name or command, a zero timeout.
    pub fn validate(&self) -> Result<(), BridgeError> {
        if self.name.trim().is_empty() {
            return Err(BridgeError::InvalidConfig("service name is empty".into()));
        }
        match &self.url {
            None if self.command.trim().is_empty() => {
                return Err(BridgeError::InvalidConfig(format!(
                    "service {}: command is empty (give a `command` to run, or a `url`)",
                    self.name
                )));
            }
            Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Err(BridgeError::InvalidConfig(format!(
                    "service {}: url {url:?} is not an http:// or https:// URL",
                    self.name
                )));
            }
            _ => {}
        }
        if self.call_timeout.is_zero() || self.startup_timeout.is_zero() {
            return Err(BridgeError::InvalidConfig(format!(
                "service {}: timeouts must be above zero",
                self.name
            )));
        }
        Ok(())
    }

    /// Applies an update; fields left `None` in it keep their value.
    pub fn apply(&mut self, u: ServiceUpdate) {
        if let Some(v) = u.command {
            self.command = v;
        }
        if let Some(v) = u.args {
            self.args = v;
        }
        if let Some(v) = u.env {
            self.env = v;
        }
        if let Some(v) = u.cwd {
            self.cwd = v;
        }
        if let Some(v) = u.call_timeout {
            self.call_timeout = v;
        }
        if let Some(v) = u.startup_timeout {
            self.startup_timeout = v;
        }
        if let Some(v) = u.description {
            self.description = v;
        }
        if let Some(v) = u.trigger_keywords {
            self.trigger_keywords = v;
        }
    }
}

/// A change to a registered service; `None` leaves a field as it is.
///
/// ```
/// use mcp_bridge::ServiceUpdate;
/// let u = ServiceUpdate::default().description("Weather by city").trigger_keywords(["天气", "weather"]);
/// assert!(u.command.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ServiceUpdate {
    /// New command.
    pub command: Option<String>,
    /// New arguments.
    pub args: Option<Vec<String>>,
    /// New environment (replaces the old one).
    pub env: Option<BTreeMap<String, String>>,
    /// New working directory (`Some(None)` clears it).
    pub cwd: Option<Option<PathBuf>>,
    /// New call time limit.
    pub call_timeout: Option<Duration>,
    /// New startup time limit.
    pub startup_timeout: Option<Duration>,
    /// New description (`Some(None)` goes back to the default, the name).
    pub description: Option<Option<String>>,
    /// New trigger keywords.
    pub trigger_keywords: Option<Vec<String>>,
}

impl ServiceUpdate {
    /// Set the description.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(Some(d.into()));
        self
    }
    /// Set the trigger keywords.
    pub fn trigger_keywords<I, S>(mut self, kws: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.trigger_keywords = Some(kws.into_iter().map(Into::into).collect());
        self
    }
    /// Set the call time limit.
    pub fn call_timeout(mut self, t: Duration) -> Self {
        self.call_timeout = Some(t);
        self
    }
    /// Set the command.
    pub fn command(mut self, c: impl Into<String>) -> Self {
        self.command = Some(c.into());
        self
    }
    /// Replace the environment.
    pub fn env<I, K, V>(mut self, env: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env = Some(env.into_iter().map(|(k, v)| (k.into(), v.into())).collect());
        self
    }
    /// Set the arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = Some(args.into_iter().map(Into::into).collect());
        self
    }
}

/// One entry of `mcpServers` as it is on disk.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Entry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(
        default,
        alias = "http_headers",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bearer_token_env_var: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cwd: Option<PathBuf>,
    #[serde(default, alias = "timeoutMs", skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    #[serde(
        default,
        alias = "startupTimeoutMs",
        skip_serializing_if = "Option::is_none"
    )]
    startup_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(
        default,
        alias = "triggerKeywords",
        skip_serializing_if = "Vec::is_empty"
    )]
    trigger_keywords: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_timeout_sec: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    startup_timeout_sec: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    autostart: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled_tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    disabled_tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    require_approval: Option<RequireApproval>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// Seconds as a duration; `None` for a value that is not a positive finite number of seconds
/// (a zero timeout is refused by [`ServiceConfig::validate`]).
fn seconds(v: &serde_json::Number) -> Option<Duration> {
    Duration::try_from_secs_f64(v.as_f64()?).ok()
}

/// A duration as a JSON number of seconds: whole seconds as an integer (`30`, not `30.0`).
fn seconds_number(d: Duration) -> serde_json::Number {
    if d.subsec_nanos() == 0 {
        serde_json::Number::from(d.as_secs())
    } else {
        serde_json::Number::from_f64(d.as_secs_f64()).unwrap_or_else(|| serde_json::Number::from(0))
    }
}

/// Which calls of a service's tools wait for a person's approval (tool-system's approval flow,
/// through [`llm_core::ToolProvider::needs_approval`]): the `require_approval` key, spelled as
/// OpenAI's hosted MCP tool spells it — `"always"`, `"never"`, or per tool
/// `{"always": ["delete_file"], "never": ["read_file"]}` (each list may also be written
/// `{"tool_names": [...]}`); with the object form, a tool in neither list needs none. Tool
/// names are the server's own. Written back as spelled. A value of another shape makes the
/// entry malformed (kept in the file, not run): never silently ungated.
///
/// ```
/// let f = mcp_bridge::ConfigFile::parse(r#"{"mcpServers": {
///   "fs": {"command": "x", "require_approval": {"always": ["write_file"]}},
///   "shell": {"command": "y", "require_approval": "always"}}}"#).unwrap();
/// assert!(f.services[0].requires_approval("write_file"));
/// assert!(!f.services[0].requires_approval("read_file"));
/// assert!(f.services[1].requires_approval("anything"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum RequireApproval {
    /// Every tool (`"always"`) or none (`"never"`).
    All(ApprovalMode),
    /// Per tool.
    Tools {
        /// These tools' calls need approval.
        #[serde(default, skip_serializing_if = "ToolNames::is_empty")]
        always: ToolNames,
        /// These never do (listed for the reader; a tool in neither list needs none).
        #[serde(default, skip_serializing_if = "ToolNames::is_empty")]
        never: ToolNames,
    },
}

/// `"always"` or `"never"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Every call waits for approval.
    Always,
    /// No call does.
    Never,
}

/// A list of tool names: `["a", "b"]` or `{"tool_names": ["a", "b"]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolNames {
    /// `["a", "b"]`.
    List(Vec<String>),
    /// `{"tool_names": ["a", "b"]}`.
    Named {
        /// The names.
        tool_names: Vec<String>,
    },
}

impl Default for ToolNames {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl ToolNames {
    fn names(&self) -> &[String] {
        match self {
            Self::List(n) | Self::Named { tool_names: n } => n,
        }
    }
    fn is_empty(&self) -> bool {
        self.names().is_empty()
    }
}

impl RequireApproval {
    /// Calls of these tools need approval (`{"always": [...]}`).
    pub fn tools<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::Tools {
            always: ToolNames::List(tools.into_iter().map(Into::into).collect()),
            never: ToolNames::default(),
        }
    }

    /// Whether a call of `tool` (the server's name) needs approval. A tool in both lists
    /// needs it (the safe side).
    pub fn applies_to(&self, tool: &str) -> bool {
        match self {
            Self::All(mode) => *mode == ApprovalMode::Always,
            Self::Tools { always, .. } => always.names().iter().any(|t| t == tool),
        }
    }
}

/// What a config file held: the services we can run, and entries we keep but cannot run.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ConfigFile {
    /// Runnable services (stdio `command` or Streamable HTTP `url`), in file order.
    pub services: Vec<ServiceConfig>,
    /// Entries we cannot run (the legacy `"type": "sse"` transport) or that are malformed, kept verbatim
    /// with the reason they are skipped; written back unchanged on save.
    pub skipped: Vec<(String, Value, String)>,
    /// Top-level keys other than `mcpServers`, kept for saving.
    pub other: Map<String, Value>,
}

impl ConfigFile {
    /// Parses the `mcpServers` JSON format.
    ///
    /// ```
    /// let f = mcp_bridge::ConfigFile::parse(r#"{"mcpServers": {
    ///     "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]},
    ///     "remote": {"url": "https://example.invalid/mcp", "bearer_token_env_var": "TOKEN"},
    ///     "old": {"url": "https://example.invalid/sse", "type": "sse"}}}"#).unwrap();
    /// assert_eq!(f.services[0].name, "everything");
    /// assert_eq!(f.services[1].url.as_deref(), Some("https://example.invalid/mcp"));
    /// assert_eq!(f.skipped[0].0, "old");
    /// ```
    pub fn parse(text: &str) -> Result<Self, BridgeError> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| BridgeError::InvalidConfig(format!("config is not valid JSON: {e}")))?;
        let Value::Object(mut root) = root else {
            return Err(BridgeError::InvalidConfig(
                "config must be a JSON object with an `mcpServers` object".into(),
            ));
        };
        let servers = match root.remove("mcpServers") {
            None => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(BridgeError::InvalidConfig(
                    "`mcpServers` must be an object of name → server".into(),
                ));
            }
        };
        let mut out = ConfigFile {
            other: root,
            ..Default::default()
        };
        for (name, raw) in servers {
            let legacy_sse = raw
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.eq_ignore_ascii_case("sse"));
            match serde_json::from_value::<Entry>(raw.clone()) {
                Ok(_) if legacy_sse => out.skipped.push((
                    name,
                    raw,
                    "the legacy HTTP+SSE transport is not supported; point `url` at the server's Streamable HTTP endpoint".into(),
                )),
                Ok(e)
                    if e.command.as_deref().is_some_and(|c| !c.trim().is_empty())
                        || e.url.is_some() =>
                {
                    let cfg = entry_to_config(&name, e);
                    match cfg.validate() {
                        Ok(()) => out.services.push(cfg),
                        Err(err) => out.skipped.push((name, raw, err.to_string())),
                    }
                }
                Ok(_) => out.skipped.push((
                    name,
                    raw,
                    "neither `command` (a stdio server) nor `url` (a Streamable HTTP server)".into(),
                )),
                Err(e) => out
                    .skipped
                    .push((name, raw, format!("malformed entry: {e}"))),
            }
        }
        Ok(out)
    }

    /// Reads and parses a file; a missing file is an empty config.
    pub fn load(path: &Path) -> Result<Self, BridgeError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(BridgeError::Io(format!("reading {}: {e}", path.display()))),
        }
    }

    /// The JSON text of this config (`mcpServers` format, pretty-printed).
    pub fn to_json(&self) -> Value {
        let mut servers = Map::new();
        for (name, raw, _) in &self.skipped {
            servers.insert(name.clone(), raw.clone());
        }
        for s in &self.services {
            servers.insert(s.name.clone(), config_to_json(s));
        }
        let mut root = self.other.clone();
        root.insert("mcpServers".into(), Value::Object(servers));
        Value::Object(root)
    }

    /// Writes the file atomically (temporary file in the same directory, then rename), so a
    /// crash mid-write never leaves a half-written config.
    pub fn save(&self, path: &Path) -> Result<(), BridgeError> {
        let text = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| BridgeError::Io(format!("serialising config: {e}")))?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|e| BridgeError::Io(format!("creating {}: {e}", dir.display())))?;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "mcp.json".into());
        let tmp = dir.join(format!(".{file_name}.tmp{}", std::process::id()));
        std::fs::write(&tmp, text.as_bytes())
            .map_err(|e| BridgeError::Io(format!("writing {}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            BridgeError::Io(format!("renaming onto {}: {e}", path.display()))
        })
    }
}

fn entry_to_config(name: &str, e: Entry) -> ServiceConfig {
    let mut cfg = ServiceConfig::new(name, e.command.unwrap_or_default());
    cfg.url = e.url;
    cfg.headers = e.headers;
    cfg.bearer_token_env_var = e.bearer_token_env_var;
    cfg.args = e.args;
    cfg.env = e.env;
    cfg.cwd = e.cwd;
    if let Some(ms) = e.timeout_ms {
        cfg.call_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = e.startup_timeout_ms {
        cfg.startup_timeout = Duration::from_millis(ms);
    }
    // Codex's keys win over ours when both are given. A negative or non-finite number is a zero
    // timeout, which `validate` refuses with the service's name.
    if let Some(s) = &e.tool_timeout_sec {
        cfg.call_timeout = seconds(s).unwrap_or(Duration::ZERO);
        cfg.spelling.seconds = true;
    }
    if let Some(s) = &e.startup_timeout_sec {
        cfg.startup_timeout = seconds(s).unwrap_or(Duration::ZERO);
        cfg.spelling.seconds = true;
    }
    cfg.description = e.description.filter(|d| !d.trim().is_empty());
    cfg.trigger_keywords = e.trigger_keywords;
    cfg.disabled = e.disabled.unwrap_or(false);
    cfg.spelling.disabled_key = e.disabled.is_some();
    cfg.autostart = e.autostart.unwrap_or(true);
    cfg.enabled_tools = e.enabled_tools;
    cfg.disabled_tools = e.disabled_tools;
    cfg.require_approval = e.require_approval;
    cfg.extra = e.extra;
    cfg
}

fn config_to_json(s: &ServiceConfig) -> Value {
    let ms = |d: Duration, default: Duration| {
        (d != default).then(|| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    let secs = |d: Duration, default: Duration| (d != default).then(|| seconds_number(d));
    let sec = s.spelling.seconds;
    let e = Entry {
        command: (s.url.is_none() || !s.command.is_empty()).then(|| s.command.clone()),
        url: s.url.clone(),
        headers: s.headers.clone(),
        bearer_token_env_var: s.bearer_token_env_var.clone(),
        args: s.args.clone(),
        env: s.env.clone(),
        cwd: s.cwd.clone(),
        timeout_ms: ms(s.call_timeout, DEFAULT_CALL_TIMEOUT).filter(|_| !sec),
        startup_timeout_ms: ms(s.startup_timeout, DEFAULT_STARTUP_TIMEOUT).filter(|_| !sec),
        tool_timeout_sec: secs(s.call_timeout, DEFAULT_CALL_TIMEOUT).filter(|_| sec),
        startup_timeout_sec: secs(s.startup_timeout, DEFAULT_STARTUP_TIMEOUT).filter(|_| sec),
        description: s.description.clone(),
        trigger_keywords: s.trigger_keywords.clone(),
        disabled: (s.disabled || s.spelling.disabled_key).then_some(s.disabled),
        autostart: (!s.autostart).then_some(false),
        enabled_tools: s.enabled_tools.clone(),
        disabled_tools: s.disabled_tools.clone(),
        require_approval: s.require_approval.clone(),
        extra: s.extra.clone(),
    };
    serde_json::to_value(e).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m5_defaults_when_description_and_keywords_absent() {
        let f = ConfigFile::parse(r#"{"mcpServers":{"svc":{"command":"x"}}}"#).unwrap();
        let s = &f.services[0];
        assert_eq!(s.description(), "svc");
        assert!(s.trigger_keywords.is_empty());
        assert_eq!(s.call_timeout, DEFAULT_CALL_TIMEOUT);
    }

    #[test]
    fn m5_claude_desktop_file_round_trips_without_loss() {
        let text = r#"{
          "globalShortcut": "Ctrl+Space",
          "mcpServers": {
            "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                           "env": {"A": "1"}, "disabled": false},
            "remote": {"url": "https://example.invalid/sse", "type": "sse"},
            "broken": {"command": 42},
            "kw": {"command": "x", "description": "Weather", "triggerKeywords": ["天气"], "timeoutMs": 5000}
          }
        }"#;
        let f = ConfigFile::parse(text).unwrap();
        let names: Vec<_> = f.services.iter().map(|s| &*s.name).collect();
        assert_eq!(names, ["filesystem", "kw"]);
        assert_eq!(f.services[1].trigger_keywords, ["天气"]);
        assert_eq!(f.services[1].call_timeout, Duration::from_millis(5000));
        assert_eq!(f.skipped.len(), 2);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mcp.json");
        f.save(&p).unwrap();
        let again: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(again["globalShortcut"], "Ctrl+Space");
        assert_eq!(
            again["mcpServers"]["remote"]["url"],
            "https://example.invalid/sse"
        );
        assert_eq!(again["mcpServers"]["broken"]["command"], 42);
        assert_eq!(again["mcpServers"]["filesystem"]["disabled"], false);
        assert_eq!(again["mcpServers"]["kw"]["trigger_keywords"][0], "天气");
        let f2 = ConfigFile::parse(&again.to_string()).unwrap();
        assert_eq!(f2.services, f.services);
    }

    /// Codex's keys (`startup_timeout_sec`, `tool_timeout_sec`, `enabled_tools`,
    /// `disabled_tools`) and `disabled` / `autostart` are read, and written back as spelled.
    #[test]
    fn m5_codex_keys_are_read_and_written_back_as_spelled() {
        let text = r#"{"mcpServers": {
            "fs": {"command": "npx", "args": ["x"], "startup_timeout_sec": 2.5, "tool_timeout_sec": 60,
                   "enabled_tools": ["read_file"], "disabled_tools": ["write_file"], "unknown_key": {"a": 1}},
            "off": {"command": "x", "disabled": true},
            "lazy": {"command": "x", "autostart": false, "disabled": false}
        }}"#;
        let f = ConfigFile::parse(text).unwrap();
        let by = |n: &str| f.services.iter().find(|s| s.name == n).unwrap();
        let fs = by("fs");
        assert_eq!(fs.startup_timeout, Duration::from_millis(2500));
        assert_eq!(fs.call_timeout, Duration::from_secs(60));
        assert!(fs.offers("read_file"));
        assert!(!fs.offers("write_file"));
        assert!(!fs.offers("list_directory"));
        assert!(by("off").disabled);
        assert!(!by("lazy").autostart && !by("lazy").disabled);
        let back = f.to_json();
        let fs_json = &back["mcpServers"]["fs"];
        assert_eq!(fs_json["startup_timeout_sec"], 2.5);
        assert_eq!(fs_json["tool_timeout_sec"], 60);
        assert!(fs_json.get("timeout_ms").is_none());
        assert_eq!(fs_json["unknown_key"]["a"], 1);
        assert_eq!(fs_json["enabled_tools"][0], "read_file");
        assert_eq!(back["mcpServers"]["off"]["disabled"], true);
        assert_eq!(back["mcpServers"]["lazy"]["disabled"], false);
        assert_eq!(back["mcpServers"]["lazy"]["autostart"], false);
        assert_eq!(ConfigFile::parse(&back.to_string()).unwrap(), f);
        // A negative timeout is refused with the service named, the entry kept.
        let bad =
            ConfigFile::parse(r#"{"mcpServers": {"b": {"command": "x", "tool_timeout_sec": -1}}}"#)
                .unwrap();
        assert!(bad.services.is_empty());
        assert!(
            bad.skipped[0].2.contains("timeouts must be above zero"),
            "{:?}",
            bad.skipped
        );
    }

    #[test]
    fn garbage_config_is_an_error_not_a_panic() {
        assert!(ConfigFile::parse("not json").is_err());
        assert!(ConfigFile::parse("[1]").is_err());
        assert!(ConfigFile::parse(r#"{"mcpServers": 3}"#).is_err());
        assert!(ConfigFile::parse("{}").unwrap().services.is_empty());
    }

    #[test]
    fn require_approval_of_an_unknown_shape_keeps_the_entry_out_of_service() {
        let f = ConfigFile::parse(
            r#"{"mcpServers": {"a": {"command": "x", "require_approval": "sometimes"},
                              "b": {"command": "y", "require_approval": {"always": {"tool_names": ["t"]}}}}}"#,
        )
        .unwrap();
        assert_eq!(f.skipped.len(), 1, "{:?}", f.skipped);
        assert_eq!(f.skipped[0].0, "a");
        assert!(f.services[0].requires_approval("t"));
        assert!(!f.services[0].requires_approval("u"));
        assert_eq!(
            config_to_json(&f.services[0])["require_approval"],
            serde_json::json!({"always": {"tool_names": ["t"]}})
        );
    }
}
