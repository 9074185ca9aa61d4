//! LiteLLM's proxy, pinned, as a child process on 127.0.0.1: an implementation of Anthropic's
//! Messages (`/v1/messages`), OpenAI's Responses (`/v1/responses`), Gemini's
//! `generateContent` / `streamGenerateContent` (`/v1beta/models/…`) and Chat Completions
//! (`/v1/chat/completions`) written by others, in front of an OpenAI-compatible upstream (a
//! [`crate::ScriptedServer`]). A backend's request goes through the proxy's own parser and its
//! translation to Chat Completions, and the upstream's answer comes back through its own
//! encoder of that wire: a check of our wires against one we did not write.
//!
//! Installed from PyPI with every dependency pinned (`litellm/requirements.txt` beside this
//! crate's sources) into the toolkit cache by `litellm/install.sh`, which `cargo xtask stage 0`
//! and `cargo xtask test` run and [`LiteLlmProxy::start`] runs too when the proxy is missing.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The pins, compiled in: the version is read from them.
const REQUIREMENTS: &str = include_str!("../litellm/requirements.txt");

/// The install script, run from this crate's folder.
const INSTALL_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/litellm/install.sh");

/// How long the proxy may take to answer its liveness check after it is started. It imports
/// some 3,000 modules: about 10 s on an idle machine of 2 cores, 35 s measured with two
/// cargo builds beside it.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// The version of LiteLLM the tests run against (`litellm==` in `litellm/requirements.txt`).
pub fn litellm_version() -> &'static str {
    REQUIREMENTS
        .lines()
        .find_map(|l| l.trim().strip_prefix("litellm=="))
        .unwrap_or("unknown")
}

/// The Python of the virtualenv holding LiteLLM's proxy: `LITELLM_PROXY_PYTHON` when set, else
/// what `litellm/install.sh` prints, having installed the pinned proxy into the toolkit cache
/// when it was missing (a few minutes on a cold cache). One install at a time per process;
/// the script's lock orders concurrent processes.
///
/// # Errors
/// The script's output and what to run, when the proxy cannot be installed.
pub fn litellm_python() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("LITELLM_PROXY_PYTHON") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "LITELLM_PROXY_PYTHON={} is not a file",
                p.display()
            ))
        };
    }
    static INSTALLED: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(p) = installed.as_ref() {
        return Ok(p.clone());
    }
    let out = Command::new("bash")
        .arg(INSTALL_SCRIPT)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("bash {INSTALL_SCRIPT}: could not start: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let python = stdout.lines().last().map(str::trim).unwrap_or_default();
    if !out.status.success() || python.is_empty() || !Path::new(python).is_file() {
        return Err(format!(
            "LiteLLM's proxy {} could not be installed ({}): run `bash {INSTALL_SCRIPT}` (it needs python3 with venv and pip, and PyPI) — {}{}",
            litellm_version(),
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let python = PathBuf::from(python);
    *installed = Some(python.clone());
    Ok(python)
}

/// LiteLLM's proxy, a child process listening on 127.0.0.1 in front of one OpenAI-compatible
/// upstream: every model name `NAME` is routed to `openai/NAME` there, through Chat Completions
/// (the Messages and Responses endpoints are told to bridge to it, not to forward to the
/// upstream's own `/v1/messages` or `/v1/responses`). Requests must carry
/// [`LiteLlmProxy::api_key`] (the proxy's master key) in their provider's header.
///
/// Killed (its whole process group) when dropped, and by the kernel if the test's thread dies
/// first (`setpriv --pdeathsig KILL`).
pub struct LiteLlmProxy {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl std::fmt::Debug for LiteLlmProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiteLlmProxy")
            .field("pid", &self.child.id())
            .field("port", &self.port)
            .finish()
    }
}

impl LiteLlmProxy {
    /// The proxy's master key: the API key every request to it must carry.
    pub const API_KEY: &'static str =
        "sk-testkit-3f1c9a7e52b84d06a9e1c7f3b2d5e8a4c6b0f9d1e3a5c7b9d2f4e6a8c0b1d3e5";

    /// The key the proxy sends to the upstream (`Authorization: Bearer …`).
    pub const UPSTREAM_KEY: &'static str = "sk-upstream-from-litellm";

    /// Installs the pinned proxy when missing ([`litellm_python`]), starts it on a free port of
    /// 127.0.0.1 in front of `upstream` (an OpenAI-compatible base URL ending in `/v1`, as
    /// [`crate::ScriptedServer::base_url`]), and waits until it answers its liveness check.
    ///
    /// # Errors
    /// Why it could not be installed or started, with the proxy's output when it ran.
    pub async fn start(upstream: &str) -> Result<Self, String> {
        let python = tokio::task::spawn_blocking(litellm_python)
            .await
            .map_err(|e| format!("installing LiteLLM's proxy: {e}"))??;
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "testkit-litellm-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let config = dir.join("config.yaml");
        std::fs::write(&config, config_yaml(upstream))
            .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let log = File::create(dir.join("proxy.log"))
            .map_err(|e| format!("cannot create the proxy's log in {}: {e}", dir.display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("cannot share the proxy's log: {e}"))?;
        let port = free_port()?;
        let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", "--"]).arg(&python);
            c
        } else {
            Command::new(&python)
        };
        cmd.args(["-m", "litellm.proxy.proxy_cli", "--config"])
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--num_workers", "1"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            // Offline: the cost map bundled with the package, not the one on GitHub; no
            // tokenizer from the model hub; the upstream on 127.0.0.1 reached directly.
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("HF_HUB_OFFLINE", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            .env("PYTHONUNBUFFERED", "1");
        for var in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "LITELLM_MASTER_KEY",
            "DATABASE_URL",
            "REDIS_HOST",
            "REDIS_URL",
        ] {
            cmd.env_remove(var);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("{}: could not start: {e}", python.display()))?;
        let mut proxy = Self { child, port, dir };
        proxy.wait_ready().await?;
        Ok(proxy)
    }

    /// `http://127.0.0.1:PORT`: a backend appends its own paths (`/v1/messages`,
    /// `/v1/responses`, `/v1beta/models/…`, `/v1/chat/completions`).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The proxy's process id (the leader of its process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The key requests to the proxy must carry ([`LiteLlmProxy::API_KEY`]).
    pub fn api_key(&self) -> &'static str {
        Self::API_KEY
    }

    /// What the proxy printed so far (stdout and stderr): its tracebacks when it refused a
    /// request or failed upstream.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("proxy.log")).unwrap_or_default()
    }

    /// The last `lines` lines of [`LiteLlmProxy::log`], for a failure message.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "LiteLLM's proxy {} exited before it was ready ({status}); its output:\n{}",
                    litellm_version(),
                    self.log_tail(60)
                ));
            }
            if self.alive().await {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "LiteLLM's proxy {} did not answer /health/liveliness on 127.0.0.1:{} within {READY_TIMEOUT:?}; its output:\n{}",
                    litellm_version(),
                    self.port,
                    self.log_tail(60)
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether `GET /health/liveliness` answers 200.
    async fn alive(&self) -> bool {
        let check = async {
            let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .ok()?;
            tcp.write_all(b"GET /health/liveliness HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                .await
                .ok()?;
            let mut head = Vec::new();
            tcp.read_to_end(&mut head).await.ok()?;
            let head = String::from_utf8_lossy(&head);
            Some(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"))
        };
        tokio::time::timeout(Duration::from_secs(5), check)
            .await
            .ok()
            .flatten()
            .unwrap_or(false)
    }
}

impl Drop for LiteLlmProxy {
    fn drop(&mut self) {
        // Its process group: the proxy and anything it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port of 127.0.0.1 free a moment ago.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// The proxy's configuration: every model name to `openai/NAME` at `upstream`, through Chat
/// Completions for every endpoint; a master key; no telemetry.
fn config_yaml(upstream: &str) -> String {
    format!(
        r#"model_list:
  - model_name: "*"
    litellm_params:
      model: "openai/*"
      api_base: "{upstream}"
      api_key: "{upstream_key}"
      # /v1/responses: bridge to the upstream's chat completions, not its /responses
      use_chat_completions_api: true
litellm_settings:
  telemetry: false
  # /v1/messages: the same, not the upstream's /responses
  use_chat_completions_url_for_anthropic_messages: true
general_settings:
  master_key: "{key}"
"#,
        upstream_key = LiteLlmProxy::UPSTREAM_KEY,
        key = LiteLlmProxy::API_KEY,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pinned_version_is_read_from_the_requirements() {
        let v = super::litellm_version();
        assert!(
            v.split('.').count() == 3 && v.split('.').all(|p| p.parse::<u32>().is_ok()),
            "{v}"
        );
    }

    #[test]
    fn the_config_routes_every_model_to_the_upstream_through_chat_completions() {
        let c = super::config_yaml("http://127.0.0.1:9/v1");
        assert!(c.contains("api_base: \"http://127.0.0.1:9/v1\""));
        assert!(c.contains("model: \"openai/*\""));
        assert!(c.contains("use_chat_completions_api: true"));
        assert!(c.contains("use_chat_completions_url_for_anthropic_messages: true"));
        assert!(c.contains(super::LiteLlmProxy::API_KEY));
    }
}
