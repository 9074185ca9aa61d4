//! The server's `tools/call` round trip side by side with the official SDKs' servers, on the
//! same machine at the same time, driven by the same client (rmcp's, `initialize` on protocol
//! 2025-11-25, which all three speak):
//!
//! - ours: the `toolwright-mcp` binary (`serve --config` with the demo tools), its `echo`;
//! - Python: the official MCP Python SDK's `MCPServer` (`benches/python/echo_server.py`, the same
//!   `echo`; over HTTP stateless with JSON responses, as the SDK advises for throughput);
//! - TypeScript: `@modelcontextprotocol/server-everything`'s `echo` (the TypeScript SDK; its HTTP
//!   mode keeps a session per client, its own choice).
//!
//! Every server is a separate process: over Streamable HTTP one process on 127.0.0.1 (a Node
//! preload pins server-everything's `listen` there), over stdio one child process per client.
//! Each cell is one client calling in sequence, or 16 clients calling at once, for a fixed
//! window; the three servers take turns, round after round, so a machine that gets busier or
//! quieter during the run does not favour one of them, and each cell reports the median of its
//! rounds. Bounded: every call has a time limit, every window a length, and the run stops by
//! itself (about 2 minutes with the defaults).
//!
//! `cargo xtask bench mcp-server` installs the Python SDK and server-everything first.
//! Knobs: `MCP_VERSUS_WINDOW_MS` (default 2000), `MCP_VERSUS_ROUNDS` (default 3).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest_ring as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

type Client = RunningService<RoleClient, ()>;

/// Clients at once in the concurrent cells.
const CONCURRENT: usize = 16;
/// The longest one call may take before the run fails.
const CALL_LIMIT: Duration = Duration::from_secs(10);
/// The longest a server may take to start.
const START_LIMIT: Duration = Duration::from_secs(60);
/// The preload that pins a Node process's every `listen` to 127.0.0.1.
const LOOPBACK_ONLY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../mcp-bridge/scripts/loopback-only.cjs"
);
const PYTHON_SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/python/echo_server.py");

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Server {
    Ours,
    Python,
    TypeScript,
}

impl Server {
    const ALL: [Self; 3] = [Self::Ours, Self::Python, Self::TypeScript];

    fn label(self) -> &'static str {
        match self {
            Self::Ours => "toolwright-mcp (ours)",
            Self::Python => "Python SDK `MCPServer`",
            Self::TypeScript => "TypeScript SDK (server-everything)",
        }
    }

    /// The `echo` call: server-everything's takes `message`, the other two `text`.
    fn echo(self) -> CallToolRequestParams {
        let args = match self {
            Self::TypeScript => json!({"message": "hi"}),
            _ => json!({"text": "hi"}),
        };
        CallToolRequestParams::new("echo").with_arguments(args.as_object().unwrap().clone())
    }

    /// The command that serves it over stdio.
    fn stdio_command(self, tools: &Tools) -> tokio::process::Command {
        match self {
            Self::Ours => {
                let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwright-mcp"));
                c.arg("serve")
                    .arg("--config")
                    .arg(&tools.config)
                    .arg("--stdio");
                c
            }
            Self::Python => {
                let mut c = tokio::process::Command::new(&tools.python);
                c.args([PYTHON_SERVER, "stdio"]);
                c
            }
            Self::TypeScript => {
                let mut c = tokio::process::Command::new("node");
                c.arg(&tools.everything).arg("stdio");
                c
            }
        }
    }

    /// Starts it over Streamable HTTP on a free port of 127.0.0.1; the process and its URL.
    async fn start_http(self, tools: &Tools) -> (tokio::process::Child, String) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = match self {
            Self::Ours => {
                let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwright-mcp"));
                c.arg("serve")
                    .arg("--config")
                    .arg(&tools.config)
                    .args(["--listen", &format!("127.0.0.1:{port}")]);
                c
            }
            Self::Python => {
                let mut c = tokio::process::Command::new(&tools.python);
                c.args([PYTHON_SERVER, "http", &port.to_string()]);
                c
            }
            Self::TypeScript => {
                let mut c = tokio::process::Command::new("node");
                c.args(["--require", LOOPBACK_ONLY])
                    .arg(&tools.everything)
                    .arg("streamableHttp")
                    .env("PORT", port.to_string());
                c
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{} did not start: {e}", self.label()));
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                started.elapsed() < START_LIMIT,
                "{} did not listen on 127.0.0.1:{port} within {START_LIMIT:?}",
                self.label()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (child, format!("http://127.0.0.1:{port}/mcp"))
    }
}

/// What the servers need: our config file, the Python SDK's Python, server-everything's entry.
struct Tools {
    config: PathBuf,
    python: PathBuf,
    everything: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tools {
    fn find() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("serve.json");
        std::fs::write(&config, r#"{"tools": ["demo"]}"#).unwrap();
        let python = testkit::python_mcp_sdk().unwrap_or_else(|e| panic!("{e}"));
        let everything =
            testkit::npm_mcp_server("server-everything").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            Path::new(LOOPBACK_ONLY).is_file(),
            "the loopback preload is not at {LOOPBACK_ONLY}"
        );
        Self {
            config,
            python,
            everything,
            _dir: dir,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transport {
    Http,
    Stdio,
}

/// One server's clients over one transport (and the HTTP server's process).
struct Connected {
    clients: Vec<Client>,
    _http: Option<tokio::process::Child>,
}

async fn connect(server: Server, transport: Transport, n: usize, tools: &Tools) -> Connected {
    let mut clients = Vec::with_capacity(n);
    let http = match transport {
        Transport::Http => {
            let (child, url) = server.start_http(tools).await;
            for _ in 0..n {
                let t = StreamableHttpClientTransport::from_uri(url.clone());
                clients.push(within(START_LIMIT, server, ().serve(t)).await.unwrap());
            }
            Some(child)
        }
        Transport::Stdio => {
            for _ in 0..n {
                let (t, _) = TokioChildProcess::builder(server.stdio_command(tools))
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                clients.push(within(START_LIMIT, server, ().serve(t)).await.unwrap());
            }
            None
        }
    };
    // A check that the echo answers what was sent, then a warm-up.
    let r = within(CALL_LIMIT, server, clients[0].call_tool(server.echo()))
        .await
        .unwrap();
    let text = r
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default();
    assert!(
        r.is_error != Some(true) && text.ends_with("hi"),
        "{}: echo answered {r:?}",
        server.label()
    );
    for c in &clients {
        for _ in 0..20 {
            within(CALL_LIMIT, server, c.call_tool(server.echo()))
                .await
                .unwrap();
        }
    }
    Connected {
        clients,
        _http: http,
    }
}

async fn within<T>(limit: Duration, server: Server, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{}: no answer within {limit:?}", server.label()))
}

/// Calls of every client in a loop until `window` is over; calls per second (all clients).
async fn measure(server: Server, clients: &[Client], window: Duration) -> f64 {
    let start = Instant::now();
    let end = start + window;
    let counts = futures::future::join_all(clients.iter().map(|c| async move {
        let mut n = 0u64;
        while Instant::now() < end {
            let r = within(CALL_LIMIT, server, c.call_tool(server.echo()))
                .await
                .unwrap();
            assert!(r.is_error != Some(true), "{}: {r:?}", server.label());
            n += 1;
        }
        n
    }))
    .await;
    counts.iter().sum::<u64>() as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported (the table is one run).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let window = Duration::from_millis(env_or("MCP_VERSUS_WINDOW_MS", 2000).clamp(200, 30_000));
    let rounds = env_or("MCP_VERSUS_ROUNDS", 3).clamp(1, 9) as usize;
    let tools = Tools::find();
    let load_before = load();

    // (transport, clients) → per server, the rate of each round.
    let cells = [
        (Transport::Http, 1),
        (Transport::Http, CONCURRENT),
        (Transport::Stdio, 1),
        (Transport::Stdio, CONCURRENT),
    ];
    let mut rates: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); Server::ALL.len()]; cells.len()];
    for (ci, &(transport, n)) in cells.iter().enumerate() {
        let mut connected = Vec::new();
        for s in Server::ALL {
            connected.push(connect(s, transport, n, &tools).await);
        }
        for round in 0..rounds {
            // The order turns every round: each server is first, middle and last in turn.
            for k in 0..Server::ALL.len() {
                let si = (k + round) % Server::ALL.len();
                let rate = measure(Server::ALL[si], &connected[si].clients, window).await;
                rates[ci][si].push(rate);
            }
        }
        for c in connected {
            for client in c.clients {
                let _ = client.cancel().await;
            }
        }
    }

    println!(
        "\n## tools/call round trips: ours against the official SDKs' servers (same rmcp client, 127.0.0.1)\n"
    );
    println!(
        "{rounds} rounds of {} ms per cell, median calls/s; load average before {load_before}, after {}.\n",
        window.as_millis(),
        load()
    );
    println!(
        "| transport | clients | ours | Python SDK | TypeScript SDK | ours / Python (goal ≥ 2) | ours / TypeScript (goal ≥ 1) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut all_met = true;
    for (ci, &(transport, n)) in cells.iter().enumerate() {
        let m: Vec<f64> = rates[ci].iter().map(|r| median(r.clone())).collect();
        let (py, ts) = (m[0] / m[1], m[0] / m[2]);
        let mark = |ok: bool| if ok { "✔" } else { "✘" };
        all_met &= py >= 2.0 && ts >= 1.0;
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.2} {} | {:.2} {} |",
            match transport {
                Transport::Http => "Streamable HTTP",
                Transport::Stdio => "stdio",
            },
            if n == 1 {
                "1 (sequential)".to_owned()
            } else {
                format!("{n} at once")
            },
            m[0],
            m[1],
            m[2],
            py,
            mark(py >= 2.0),
            ts,
            mark(ts >= 1.0),
        );
    }
    println!("\nevery round (calls/s):");
    for (ci, &(transport, n)) in cells.iter().enumerate() {
        for (si, s) in Server::ALL.iter().enumerate() {
            let r: Vec<String> = rates[ci][si].iter().map(|x| format!("{x:.0}")).collect();
            println!("  {transport:?} ×{n} {}: {}", s.label(), r.join(", "));
        }
    }
    println!(
        "\ngoals {}",
        if all_met {
            "met in every cell"
        } else {
            "missed in a cell marked ✘"
        }
    );
}
