//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use toolwright_mcp_bridge::ServiceConfig;

pub mod embedders;
pub mod eval;
pub mod search;

/// Our own misbehaving rmcp server: this crate's example `misbehaving-mcp-server`, which
/// `cargo test` builds beside the test binaries (`target/<profile>/examples/`).
pub static SERVER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>/deps/<test>");
    let server = profile_dir.join("examples/misbehaving-mcp-server");
    assert!(
        server.exists(),
        "{} is missing: `cargo test -p toolwright-mcp-bridge` builds it, or `cargo build -p toolwright-mcp-bridge --example misbehaving-mcp-server`",
        server.display()
    );
    server.to_string_lossy().into_owned()
});

/// A service running our test server with `args`.
pub fn own(name: &str, args: &[&str]) -> ServiceConfig {
    ServiceConfig::new(name, SERVER.as_str())
        .with_args(args.iter().copied())
        .with_call_timeout(Duration::from_secs(10))
        .with_startup_timeout(Duration::from_secs(10))
}

/// The JS entry of @modelcontextprotocol/server-everything: `MCP_SERVER_EVERYTHING`, else the
/// install location of `crates/mcp-bridge/install-test-deps.sh`. Fails when missing.
pub fn everything_entry() -> String {
    match testkit::npm_mcp_server("server-everything") {
        Ok(path) => path.to_string_lossy().into_owned(),
        Err(e) => panic!("{e}"),
    }
}

/// A service running server-everything over stdio with node.
pub fn everything(name: &str) -> ServiceConfig {
    ServiceConfig::new(name, "node")
        .with_args([everything_entry(), "stdio".to_string()])
        .with_call_timeout(Duration::from_secs(20))
        .with_startup_timeout(Duration::from_secs(30))
}

/// Live (non-zombie) processes in process group `pgid`, from /proc.
pub fn live_in_group(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<i32>() == Ok(pgid) {
            out.push(pid);
        }
    }
    out
}

/// Waits up to 5 s for the group to be empty; panics with what is left.
pub async fn assert_group_gone(pgid: i32) {
    for _ in 0..50 {
        if live_in_group(pgid).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "process group {pgid} still has live processes: {:?}",
        live_in_group(pgid)
    );
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "toolwright_mcp_bridge=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A user's composition over real HTTP: an `Agent` whose model is the OpenAI-compatible backend
/// pointed at the scripted `server`, with `bridge` as tool provider and turn-sections hook.
pub fn agent_over_http(
    server: &testkit::ScriptedServer,
    bridge: &toolwright_mcp_bridge::McpBridge,
) -> toolwright_tool_system::Agent {
    let model = toolwright_model_gateway::OpenAiModel::new(
        toolwright_model_gateway::OpenAiConfig::new("m").with_base_url(server.base_url()),
    )
    .unwrap();
    toolwright_tool_system::Agent::builder(model)
        .provider(std::sync::Arc::new(bridge.clone()))
        .turn_sections(std::sync::Arc::new(bridge.clone()))
        .system_prompt("You are helpful.")
        .build()
        .unwrap()
}

/// The `tool` messages of the scripted server's request `i`, their content parsed as JSON.
pub fn tool_results_sent(server: &testkit::ScriptedServer, i: usize) -> Vec<serde_json::Value> {
    server.requests()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

/// The preload that pins every `listen` of a Node process to 127.0.0.1.
pub const LOOPBACK_ONLY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/loopback-only.cjs");

/// server-everything in its `streamableHttp` mode on 127.0.0.1 (pinned there by
/// [`LOOPBACK_ONLY`]), as a child process that is killed when dropped.
pub struct HttpEverything {
    pub child: std::process::Child,
    pub port: u16,
}

impl HttpEverything {
    /// Starts it on a free port and waits until it accepts connections.
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_on(port)
    }

    /// Starts it on `port` (e.g. again after a kill) and waits until it accepts connections.
    pub fn start_on(port: u16) -> Self {
        let mut child = std::process::Command::new("node")
            .args([
                "--require",
                LOOPBACK_ONLY,
                &everything_entry(),
                "streamableHttp",
            ])
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self { child, port };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("server-everything (streamableHttp) did not listen on 127.0.0.1:{port}");
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The local addresses its process listens on, from `ss -ltnp`.
    pub fn listening_addresses(&self) -> Vec<String> {
        let out = std::process::Command::new("ss")
            .args(["-ltnpH"])
            .output()
            .expect("ss (iproute2) runs");
        let pid = format!("pid={},", self.child.id());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&pid))
            .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
            .collect()
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        self.kill();
    }
}
