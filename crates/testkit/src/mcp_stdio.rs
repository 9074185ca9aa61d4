//! [`run_mcp_stdio_server`]: the workspace's MCP test server (`mcp_server.rs`) over stdio, as a
//! process of its own that behaves well or badly on request. A binary's `main` calls it
//! (mcp-bridge's `misbehaving-mcp-server`, which its tests and benches start).
//!
//! Startup modes (arguments):
//! - `--startup-delay-ms N`: sleep N ms before answering anything (a slow start).
//! - `--spawn-grandchild`: start `sleep 600` as a child first (what `npx` does with `node`), to
//!   prove that stopping the service ends the whole process group.
//! - `--garbage-at-start`: write a non-JSON line to stdout before serving.
//! - `--tools-ttl-ms N`: tool lists carry the cache hint `ttlMs: N` (2026-07-28).
//! - `--plain`: instead of all this, the hand-written server with no SDK
//!   ([`crate::run_plain_mcp_stdio_server`]).
//! - `--tools-file PATH --tools-of NAME`: serve, instead of its own tools, the tools another
//!   server listed: PATH holds recorded `tools/list` results (`{"servers": [{"name": NAME,
//!   "tools": [...]}]}`, crates/tool-search/fixtures/tools.json); a call of one answers
//!   `NAME ran with` its arguments. For the tool-search tests (hundreds of real definitions).
//!
//! Tools: `echo`, `add`, `ping`, `fail`, `sleep`, `freeze`, `crash`, `garbage`, `huge`,
//! `add_tool`, `env`, `traceparent`, `request_id`, `cancelled` (what each does: the module docs
//! of `mcp_server.rs`).

// A test double: a bad argument or an unreadable file stops it loudly, which the test sees.
#![allow(clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::Tool;
use serde_json::Value;

use crate::mcp_server::{Handler, Options, ToolSet};

/// The tools server `name` listed, from a file of recorded `tools/list` results.
fn recorded_tools(path: &str, name: &str) -> Vec<Tool> {
    let text = std::fs::read_to_string(path).expect("read --tools-file");
    let file: Value = serde_json::from_str(&text).expect("--tools-file is JSON");
    let server = file["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no server {name} in {path}"));
    serde_json::from_value(server["tools"].clone()).expect("recorded tools")
}

/// Serves the MCP test server on stdin/stdout until the client goes away, after the startup
/// modes this process's arguments ask for (see the module docs). On one thread: `freeze`
/// blocks it, and with it the whole server.
pub fn run_mcp_stdio_server() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--plain") {
        crate::run_plain_mcp_stdio_server();
        return;
    }
    let mut grandchild = None;
    let (mut tools_file, mut tools_of, mut ttl_ms) = (None, None, None);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--startup-delay-ms" => {
                i += 1;
                let ms: u64 = args.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
                std::thread::sleep(Duration::from_millis(ms));
            }
            "--spawn-grandchild" => {
                let child = std::process::Command::new("sleep")
                    .arg("600")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("spawn sleep");
                eprintln!("grandchild pid {}", child.id());
                grandchild = Some(child);
            }
            "--garbage-at-start" => {
                let mut out = std::io::stdout().lock();
                out.write_all(b"Server starting... (not JSON)\n")
                    .expect("write stdout");
                out.flush().expect("flush stdout");
            }
            "--tools-file" => {
                i += 1;
                tools_file = args.get(i).cloned();
            }
            "--tools-ttl-ms" => {
                i += 1;
                ttl_ms = args.get(i).and_then(|v| v.parse().ok());
            }
            "--tools-of" => {
                i += 1;
                tools_of = args.get(i).cloned();
            }
            other => eprintln!("unknown argument {other}"),
        }
        i += 1;
    }
    eprintln!("misbehaving-mcp-server ready");
    let replay = match (tools_file, tools_of) {
        (Some(path), Some(name)) => Some(recorded_tools(&path, &name)),
        _ => None,
    };
    let handler = Handler::new(Options {
        tools: ToolSet::Process,
        ttl_ms,
        replay,
        ..Options::default()
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let service = handler
            .serve(rmcp::transport::stdio())
            .await
            .expect("serve");
        let _ = service.waiting().await;
    });
    drop(grandchild);
}
