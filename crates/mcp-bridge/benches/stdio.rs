//! Bounded benchmark (harness = false): tools/call round trips over stdio against our own rmcp
//! server and against server-everything (node), the bridge (called from `main` and from a spawned
//! task) against a bare JSON-RPC client on the same server (the ratio printed, with each client's
//! context switches and CPU time per call), the same calls over Streamable HTTP, and tokens
//! injected per turn with level-1 descriptions against full schemas for the same tools.
//! `cargo bench -p toolwright-mcp-bridge`.
//! Set `MCP_BENCH_CALLS` to change the number of calls (default 2000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use toolwright_mcp_bridge::level1_section;
use toolwright_mcp_bridge::{Intent, IntentChain};
use toolwright_mcp_bridge::{McpBridge, McpTool, ServiceConfig};

fn everything_entry() -> String {
    match testkit::npm_mcp_server("server-everything") {
        Ok(path) => path.to_string_lossy().into_owned(),
        Err(e) => panic!("{e}"),
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn round_trips(b: &McpBridge, tool: &str, n: usize) {
    for _ in 0..50 {
        b.call(tool, json!({"message": "warm"}))
            .await
            .map(|o| o.value)
            .unwrap();
    }
    let mut lat = Vec::with_capacity(n);
    let t0 = Instant::now();
    for i in 0..n {
        let s = Instant::now();
        let v = b
            .call(tool, json!({"message": format!("m{i}")}))
            .await
            .map(|o| o.value)
            .unwrap();
        lat.push(s.elapsed());
        assert!(v.as_str().unwrap().ends_with(&format!("m{i}")));
    }
    let total = t0.elapsed();
    lat.sort();
    println!(
        "| {tool} | {n} | {:.0} | {:.0} | {:.0} |",
        n as f64 / total.as_secs_f64(),
        pct(&lat, 0.50).as_secs_f64() * 1e6,
        pct(&lat, 0.99).as_secs_f64() * 1e6
    );
}

/// The floor: a bare JSON-RPC client with no SDK — blocking pipes to `node server-everything
/// stdio`, one line out, lines in until the answer with our id. What any MCP client must pay.
struct Bare {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Bare {
    fn start() -> Self {
        use std::process::{Command, Stdio};
        let mut child = Command::new("node")
            .args([everything_entry().as_str(), "stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut b = Self {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        b.request(
            json!({"method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "bare", "version": "0"}}}),
        );
        b.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        b
    }

    fn send(&mut self, v: &serde_json::Value) {
        use std::io::Write;
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, mut v: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead;
        self.next_id += 1;
        v["jsonrpc"] = json!("2.0");
        v["id"] = json!(self.next_id);
        self.send(&v);
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let msg: serde_json::Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == json!(self.next_id) {
                return msg;
            }
        }
    }

    fn echo(&mut self, text: &str) -> String {
        let r = self.request(json!({"method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": text}}}));
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// This process's resource use so far, every thread included (the caller, Tokio's workers, the
/// bare client's blocking thread): read around each block, it gives the context switches and
/// the CPU time a client costs per call — numbers that load on the machine barely moves, unlike
/// calls/s, so a hop removed shows even when wall-clock time is noisy.
#[derive(Clone, Copy, Default)]
struct Usage {
    voluntary: i64,
    involuntary: i64,
    cpu: Duration,
}

impl Usage {
    fn now() -> Self {
        use nix::sys::resource::{UsageWho, getrusage};
        use nix::sys::time::TimeValLike;
        let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
        let micros = u.user_time().num_microseconds() + u.system_time().num_microseconds();
        Self {
            voluntary: u.voluntary_context_switches(),
            involuntary: u.involuntary_context_switches(),
            cpu: Duration::from_micros(micros as u64),
        }
    }

    /// Adds what was used since `before`.
    fn add_since(&mut self, before: Usage) {
        let now = Usage::now();
        self.voluntary += now.voluntary - before.voluntary;
        self.involuntary += now.involuntary - before.involuntary;
        self.cpu += now.cpu - before.cpu;
    }
}

/// One client's results over all blocks.
#[derive(Default)]
struct Tally {
    lat: Vec<Duration>,
    took: Duration,
    used: Usage,
}

impl Tally {
    fn calls_per_s(&self) -> f64 {
        self.lat.len() as f64 / self.took.as_secs_f64()
    }

    fn row(&mut self, client: &str) {
        self.lat.sort();
        let n = self.lat.len() as f64;
        println!(
            "| {client} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} |",
            self.calls_per_s(),
            pct(&self.lat, 0.50).as_secs_f64() * 1e6,
            pct(&self.lat, 0.99).as_secs_f64() * 1e6,
            self.used.voluntary as f64 / n,
            self.used.involuntary as f64 / n,
            self.used.cpu.as_secs_f64() * 1e6 / n,
        );
    }
}

/// One block of `per` echo calls through the bridge, from whatever task runs it.
async fn bridge_block(b: &McpBridge, tag: &str, per: usize, into: &mut Tally) {
    let before = Usage::now();
    let t0 = Instant::now();
    for i in 0..per {
        let s = Instant::now();
        let v = b
            .call("everything__echo", json!({"message": format!("{tag}-{i}")}))
            .await
            .map(|o| o.value)
            .unwrap();
        into.lat.push(s.elapsed());
        assert!(v.as_str().unwrap().ends_with(&format!("{tag}-{i}")));
    }
    into.took += t0.elapsed();
    into.used.add_since(before);
}

/// The bridge (as a new user calls it: `McpBridge::call` from `main`, and from inside a spawned
/// task, as an agent loop or a web handler runs) against the bare client on the same kind of
/// server, alternating in blocks so that load on the machine hits all alike.
async fn bridge_vs_bare(b: &McpBridge, n: usize) {
    const BLOCKS: usize = 8;
    let per = (n / BLOCKS).max(1);
    let mut bare = tokio::task::spawn_blocking(Bare::start).await.unwrap();
    for i in 0..50 {
        b.call("everything__echo", json!({"message": format!("w{i}")}))
            .await
            .map(|o| o.value)
            .unwrap();
        bare.echo("warm");
    }
    let (mut main_t, mut task_t, mut bare_t) =
        (Tally::default(), Tally::default(), Tally::default());
    for block in 0..BLOCKS {
        bridge_block(b, &format!("b{block}"), per, &mut main_t).await;
        let spawned = b.clone();
        task_t = tokio::spawn(async move {
            bridge_block(&spawned, &format!("t{block}"), per, &mut task_t).await;
            task_t
        })
        .await
        .unwrap();
        // The bare client blocks: run its block on a blocking thread, timed inside.
        (bare, bare_t) = tokio::task::spawn_blocking(move || {
            let before = Usage::now();
            let t0 = Instant::now();
            for i in 0..per {
                let s = Instant::now();
                let text = bare.echo(&format!("r{block}-{i}"));
                bare_t.lat.push(s.elapsed());
                assert!(text.ends_with(&format!("r{block}-{i}")));
            }
            bare_t.took += t0.elapsed();
            bare_t.used.add_since(before);
            (bare, bare_t)
        })
        .await
        .unwrap();
    }
    let total = per * BLOCKS;
    println!(
        "\n## bridge vs a bare JSON-RPC client (server-everything over stdio, {total} sequential echo calls each, alternating in {BLOCKS} blocks)\n"
    );
    println!(
        "Context switches and CPU: this whole process (getrusage), per call.\n\n| client | calls/s | p50 µs | p99 µs | voluntary cs | involuntary cs | CPU µs |\n|---|---|---|---|---|---|---|"
    );
    main_t.row("mcp-bridge (`McpBridge::call` from `main`)");
    task_t.row("mcp-bridge (`McpBridge::call` in a spawned task)");
    bare_t.row("bare client (no SDK, blocking pipes)");
    let bare_rate = bare_t.calls_per_s();
    println!(
        "\nbridge / bare: {:.2}x (from main), {:.2}x (in a task)",
        main_t.calls_per_s() / bare_rate,
        task_t.calls_per_s() / bare_rate
    );
}

/// The same echo round trips to server-everything over Streamable HTTP on 127.0.0.1 (its
/// `streamableHttp` mode, pinned to loopback by the preload the tests use).
async fn over_http(n: usize) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = tokio::process::Command::new("node")
        .args([
            "--require",
            concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/loopback-only.cjs"),
            everything_entry().as_str(),
            "streamableHttp",
        ])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = McpBridge::new();
    b.register(
        ServiceConfig::remote("web", format!("http://127.0.0.1:{port}/mcp"))
            .with_startup_timeout(Duration::from_secs(30)),
    )
    .unwrap();
    b.start("web").await.unwrap();
    println!("\n## tools/call round trips over Streamable HTTP (127.0.0.1, sequential)\n");
    println!("| tool | calls | calls/s | p50 µs | p99 µs |\n|---|---|---|---|---|");
    round_trips(&b, "web__echo", n).await;
    b.stop_all().await;
}

fn tokens(bpe: &tiktoken_rs::CoreBPE, s: &str) -> usize {
    bpe.encode_with_special_tokens(s).len()
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("MCP_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let b = McpBridge::new();
    // This crate's example, built by `cargo xtask bench` (or `cargo build --release --example
    // misbehaving-mcp-server`) beside the bench binary.
    let own = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("examples/misbehaving-mcp-server")))
        .filter(|p| p.exists())
        .expect("build the MCP test server first: cargo build --release -p toolwright-mcp-bridge --example misbehaving-mcp-server");
    b.register(ServiceConfig::new("own", own.to_string_lossy()))
        .unwrap();
    b.register(
        ServiceConfig::new("everything", "node")
            .with_args([everything_entry(), "stdio".into()])
            .with_startup_timeout(Duration::from_secs(30)),
    )
    .unwrap();
    b.start("own").await.unwrap();
    b.start("everything").await.unwrap();

    println!("## tools/call round trips over stdio (sequential, one call in flight)\n");
    println!("| tool | calls | calls/s | p50 µs | p99 µs |\n|---|---|---|---|---|");
    round_trips(&b, "own__echo", n).await;
    round_trips(&b, "everything__echo", n).await;
    bridge_vs_bare(&b, n).await;
    over_http(n).await;

    let tools: Vec<McpTool> = b.tools().await;
    let bpe = tiktoken_rs::cl100k_base().unwrap();
    // No description configured: each tool's level-1 sentence is its service's name (M5).
    let descriptions: BTreeMap<String, String> = [
        ("own".to_string(), "own".to_string()),
        ("everything".to_string(), "everything".to_string()),
    ]
    .into();
    // Full schemas: what a prompt or a `tools` array carries for every tool.
    let full: String = tools
        .iter()
        .map(|t| serde_json::to_string(&json!({"name": t.exposed_name, "description": t.description, "parameters": t.input_schema})).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    // Level 1 for the same tools: one line each, plus the fixed two-line frame of the section.
    let level1_all: String = {
        let mut s =
            String::from("## MCP tools\nMCP tools for this request (name: what it does):\n");
        for t in &tools {
            s.push_str(&format!("- {}: {}\n", t.exposed_name, t.level1(&t.service)));
        }
        s
    };
    let chain = IntentChain::standard(b.recognizer().await);
    let one = level1_section(
        &chain.recognize("用 echo 工具 说你好"),
        &tools,
        &descriptions,
    )
    .unwrap_or_default();
    let kw_intent = Intent::Mcp(
        match IntentChain::standard(toolwright_mcp_bridge::McpRecognizer::new(
            &[ServiceConfig::new("everything", "node").with_trigger_keywords(["回显"])],
            &tools,
        ))
        .recognize("请回显")
        {
            Intent::Mcp(m) => m,
            other => panic!("{other:?}"),
        },
    );
    let kw = level1_section(&kw_intent, &tools, &descriptions).unwrap_or_default();
    let kw_full: String = tools
        .iter()
        .filter(|t| t.service == "everything")
        .map(|t| serde_json::to_string(&json!({"name": t.exposed_name, "description": t.description, "parameters": t.input_schema})).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let none = level1_section(&Intent::Normal, &tools, &descriptions);
    let (f, l, o) = (
        tokens(&bpe, &full),
        tokens(&bpe, &level1_all),
        tokens(&bpe, &one),
    );
    println!(
        "\n## tokens per turn (cl100k_base), {} tools from both servers\n",
        tools.len()
    );
    println!("| what is injected | tokens | vs full schemas |\n|---|---|---|");
    println!("| full schemas, all {} tools | {f} | 100% |", tools.len());
    println!(
        "| level 1, all {} tools | {l} | {:.1}% |",
        tools.len(),
        100.0 * l as f64 / f as f64
    );
    println!(
        "| level 1, explicit call (\"用 echo 工具\"): the section as injected | {o} | {:.1}% |",
        100.0 * o as f64 / f as f64
    );
    let (k, kf) = (tokens(&bpe, &kw), tokens(&bpe, &kw_full));
    println!(
        "| level 1, keyword intent for service `everything` ({} tools), as injected | {k} | {:.1}% of all; {:.1}% of that service's {kf} |",
        tools.iter().filter(|t| t.service == "everything").count(),
        100.0 * k as f64 / f as f64,
        100.0 * k as f64 / kf as f64
    );
    // On an MCP turn the request's `tools` also carries the describe tool (level 2 on demand).
    let d = tokens(
        &bpe,
        &serde_json::to_string(&toolwright_mcp_bridge::describe_tool_spec()).unwrap(),
    );
    println!(
        "| + the `{}` spec in `tools` on an MCP turn | {d} | {:.1}% |",
        toolwright_mcp_bridge::DESCRIBE_TOOL,
        100.0 * d as f64 / f as f64
    );
    println!(
        "| non-MCP intent | {} | 0% |",
        none.map_or(0, |s| tokens(&bpe, &s))
    );
    b.stop_all().await;
}
