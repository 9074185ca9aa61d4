//! The config file: the `mcpServers` JSON format (see the parent module's docs), read into
//! [`ServiceConfig`]s and written back as the user spelled it, unknown fields and entries we
//! cannot run included.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{DEFAULT_CALL_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, RequireApproval, ServiceConfig};
use crate::error::BridgeError;

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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    roots: Vec<String>,
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
    /// let f = toolwright_mcp_bridge::ConfigFile::parse(r#"{"mcpServers": {
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
    cfg.roots = e.roots;
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
        roots: s.roots.clone(),
        extra: s.extra.clone(),
    };
    serde_json::to_value(e).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_read_and_written_back() {
        let text = r#"{"mcpServers":{"fs":{"command":"x","roots":["file:///work/project"]}}}"#;
        let f = ConfigFile::parse(text).unwrap();
        assert_eq!(f.services[0].roots, ["file:///work/project"]);
        let json = config_to_json(&f.services[0]);
        assert_eq!(json["roots"], serde_json::json!(["file:///work/project"]));
        let none = ConfigFile::parse(r#"{"mcpServers":{"fs":{"command":"x"}}}"#).unwrap();
        assert!(config_to_json(&none.services[0]).get("roots").is_none());
    }

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
