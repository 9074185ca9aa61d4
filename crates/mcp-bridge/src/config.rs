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
//! its token, read at each start) and `oauth` (`true`, or an object of `client_id`,
//! `client_secret_env_var`, `client_metadata_url`, `scopes`, `redirect_uri`; the sign-in itself
//! is the application's, [`crate::McpBridge::set_oauth`]). Entries we cannot run (the legacy `"type": "sse"` transport)
//! and fields we do not know are kept as they are and written back on save, so a user's file
//! loses nothing.
//!
//! Its parts: [`ServiceConfig`] and [`ServiceUpdate`] here (one service, built in code), the
//! file format in `file.rs` ([`ConfigFile`]), who approves what in `approval.rs`
//! ([`RequireApproval`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::BridgeError;

mod approval;
mod file;
mod oauth_entry;

pub use approval::{ApprovalMode, RequireApproval, ToolNames};
pub use file::ConfigFile;

/// Default time limit of one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time limit for starting a server: spawn, MCP handshake and the first tool list.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// One MCP service: how to start it and how it is offered to the model.
///
/// ```
/// use toolwright_mcp_bridge::ServiceConfig;
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
    /// OAuth for a remote server ([`Self::with_oauth`]); `None`: no OAuth.
    #[cfg(feature = "http")]
    pub oauth: Option<crate::oauth::OAuthConfig>,
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
    /// The directories the server may work in, as `file://` URIs (`roots`): answered to its
    /// `roots/list`, and declared in `initialize` only when there are any.
    pub roots: Vec<String>,
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
            #[cfg(feature = "http")]
            oauth: None,
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
            roots: Vec::new(),
            extra: Map::new(),
            spelling: Spelling::default(),
        }
    }
    /// A remote server reached over MCP's Streamable HTTP transport at `url`.
    ///
    /// ```
    /// use toolwright_mcp_bridge::ServiceConfig;
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
    /// Authorize with a remote server by OAuth 2.1 as the MCP authorization spec says
    /// ([`crate::oauth`]): the first 401 starts discovery, registration and the person's
    /// sign-in; tokens are kept and refreshed in the config's credential store.
    ///
    /// The person's sign-in happens inside a start or a call, so both timeouts are raised to at
    /// least the sign-in timeout ([`crate::oauth::OAuthConfig::with_sign_in_timeout`]).
    #[cfg(feature = "http")]
    pub fn with_oauth(mut self, oauth: crate::oauth::OAuthConfig) -> Self {
        self.startup_timeout = self.startup_timeout.max(oauth.sign_in_timeout);
        self.call_timeout = self.call_timeout.max(oauth.sign_in_timeout);
        self.oauth = Some(oauth);
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

    /// The directories the server may work in (`file://` URIs of absolute paths), offered to
    /// it as MCP roots.
    pub fn with_roots<I, S>(mut self, roots: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roots = roots.into_iter().map(Into::into).collect();
        self
    }

    /// Checks what cannot work: an empty name or command, a zero timeout, a root that is not a
    /// `file://` URI.
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
        if let Some(bad) = self.roots.iter().find(|r| !is_file_uri(r)) {
            return Err(BridgeError::InvalidConfig(format!(
                "service {}: root {bad:?} is not a file:// URI of an absolute path (e.g. file:///home/me/project)",
                self.name
            )));
        }
        if self.call_timeout.is_zero() || self.startup_timeout.is_zero() {
            return Err(BridgeError::InvalidConfig(format!(
                "service {}: timeouts must be above zero",
                self.name
            )));
        }
        match oauth_entry::oauth_entry(&self.extra) {
            Some(Err(why)) => {
                return Err(BridgeError::InvalidConfig(format!(
                    "service {}: {why}",
                    self.name
                )));
            }
            Some(Ok(_)) if self.url.is_none() => {
                return Err(BridgeError::InvalidConfig(format!(
                    "service {}: `oauth` is for remote servers (an entry with `url`)",
                    self.name
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// This service with the OAuth its config file entry asks for (`"oauth"`), made from the
    /// application's `template` ([`crate::McpBridge::set_oauth`]); unchanged when OAuth was set
    /// in code or the entry asks for none. Why not, when the entry asks and cannot have it.
    #[cfg(feature = "http")]
    pub(crate) fn with_file_oauth(
        self,
        template: Option<&crate::oauth::OAuthConfig>,
    ) -> Result<Self, String> {
        if self.oauth.is_some() {
            return Ok(self);
        }
        let entry = match oauth_entry::oauth_entry(&self.extra) {
            None => return Ok(self),
            Some(entry) => entry?,
        };
        let Some(template) = template else {
            return Err(
                "its config entry asks for OAuth (`oauth`), and the application gave the bridge no way to sign in: call McpBridge::set_oauth(Some(OAuthConfig::new(sign_in))) before starting it"
                    .into(),
            );
        };
        let oauth = entry.apply(template, &self.name)?;
        Ok(self.with_oauth(oauth))
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
/// use toolwright_mcp_bridge::ServiceUpdate;
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

/// A `file://` URI of an absolute path with nothing a server could take for something else
/// (no query, fragment or control character).
fn is_file_uri(uri: &str) -> bool {
    uri.strip_prefix("file://")
        .is_some_and(|path| path.starts_with('/'))
        && !uri.contains(['?', '#'])
        && !uri.chars().any(char::is_control)
}
