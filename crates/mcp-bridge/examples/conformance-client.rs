//! A client of the official MCP conformance suite (`@modelcontextprotocol/conformance`) built on
//! the bridge; `cargo xtask test` runs the suite's client scenarios against it
//! (`xtask/src/conformance.rs`, docs/stage-4-mcp-bridge.md).
//!
//! For each scenario the suite starts a server, runs this program with the server's URL as its
//! last argument and the scenario's name in `MCP_CONFORMANCE_SCENARIO`, and then checks what
//! its server saw. The program registers the URL as a remote service of an `McpBridge`, starts
//! it (the handshake and the tool list), and does what the scenario expects:
//!
//! - `initialize`: nothing more.
//! - `tools_call`: calls `add_numbers` with 2 and 40.
//! - `elicitation-sep1034-client-defaults`: calls `test_client_elicitation_defaults`; the
//!   application here accepts every form without typing anything (`{}`), and the bridge fills
//!   the omitted fields from the form's defaults.
//! - `sse-retry`: calls `test_reconnection`, whose answer arrives only after the server closed
//!   the call's stream and the client came back (after the `retry` the server gave, with
//!   `Last-Event-ID`).
//!
//! `--loopback-only` (before the URL) first checks that whatever listens on the URL's port
//! listens on 127.0.0.1 alone. Exit status 0 when every step worked, else 1 with the reason
//! on stderr.
//!
//! ```sh
//! cargo build -p toolwright-mcp-bridge --example conformance-client
//! MCP_CONFORMANCE_SCENARIO=tools_call target/debug/examples/conformance-client http://127.0.0.1:PORT/mcp
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolwright_mcp_bridge::elicitation::{ElicitationAnswer, ElicitationRequest, Elicitor};
use toolwright_mcp_bridge::{McpBridge, ServiceConfig, ServiceStatus};

/// The service's name in the bridge.
const SERVICE: &str = "server";

/// The tool a scenario calls, with its arguments; `None`: the handshake is all it checks.
fn call_of(scenario: &str) -> Result<Option<(&'static str, Value)>, String> {
    Ok(match scenario {
        "initialize" => None,
        "tools_call" => Some(("add_numbers", json!({"a": 2, "b": 40}))),
        "elicitation-sep1034-client-defaults" => {
            Some(("test_client_elicitation_defaults", json!({})))
        }
        "sse-retry" => Some(("test_reconnection", json!({}))),
        other => {
            return Err(format!(
                "no steps for scenario {other:?}: this client knows initialize, tools_call, \
                 elicitation-sep1034-client-defaults and sse-retry"
            ));
        }
    })
}

/// An application whose person accepts every form as shown, typing nothing.
struct AcceptAsShown;

#[async_trait::async_trait]
impl Elicitor for AcceptAsShown {
    async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer {
        println!("asked: {}; accepted without typing", request.message);
        ElicitationAnswer::Accept(json!({}))
    }
}

/// The port of an `http://host:port/...` URL.
fn port_of(url: &str) -> Option<u16> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    authority.rsplit_once(':')?.1.parse().ok()
}

/// The local addresses (as /proc/net/tcp{,6} write them) of the sockets listening on `port`.
fn listeners_on(port: u16) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).map_err(|e| format!("read {table}: {e}"))?;
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            let Some((address, hex_port)) = local.split_once(':') else {
                continue;
            };
            // 0A: LISTEN
            if *state == "0A" && u16::from_str_radix(hex_port, 16) == Ok(port) {
                found.push(address.to_owned());
            }
        }
    }
    Ok(found)
}

/// Whether what listens on the URL's port listens on 127.0.0.1 only (IPv4, or IPv4-mapped).
fn check_loopback_only(url: &str) -> Result<(), String> {
    let port = port_of(url).ok_or_else(|| format!("no port in {url}"))?;
    let listeners = listeners_on(port)?;
    let loopback = |a: &String| a == "0100007F" || a == "0000000000000000FFFF00000100007F";
    if listeners.is_empty() || !listeners.iter().all(loopback) {
        return Err(format!(
            "the server of {url} listens on {listeners:?} (hex, as /proc/net/tcp shows them), \
             not on 127.0.0.1 alone"
        ));
    }
    Ok(())
}

async fn run(scenario: &str, url: &str) -> Result<(), String> {
    let call = call_of(scenario)?;
    let bridge = McpBridge::new();
    bridge.set_elicitor(Arc::new(AcceptAsShown), Duration::from_secs(30));
    bridge
        .register(
            ServiceConfig::remote(SERVICE, url)
                .with_startup_timeout(Duration::from_secs(20))
                .with_call_timeout(Duration::from_secs(20)),
        )
        .map_err(|e| e.to_string())?;
    bridge
        .start(SERVICE)
        .await
        .map_err(|e| format!("start: {e}"))?;
    let status = bridge.status(SERVICE).map_err(|e| e.to_string())?;
    if status != ServiceStatus::Running {
        return Err(format!("the service is {status:?} after start"));
    }
    let tools = bridge.tools().await;
    println!(
        "{scenario}: initialised, tools {:?}",
        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>()
    );
    let outcome = match call {
        None => Ok(()),
        Some((tool, args)) => match tools.iter().find(|t| t.name == tool) {
            None => Err(format!("the server lists no tool {tool}")),
            Some(t) => match bridge.call(&t.exposed_name, args).await {
                Ok(out) => {
                    println!("{scenario}: {tool} answered {}", out.value);
                    Ok(())
                }
                Err(e) => Err(format!("{tool}: {e}")),
            },
        },
    };
    let stopped = bridge.stop(SERVICE).await.map_err(|e| format!("stop: {e}"));
    outcome.and(stopped)
}

fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let loopback_only = args.iter().any(|a| a == "--loopback-only");
    let (Some(url), Ok(scenario)) = (
        args.iter().rfind(|a| !a.starts_with("--")),
        std::env::var("MCP_CONFORMANCE_SCENARIO"),
    ) else {
        eprintln!(
            "usage: MCP_CONFORMANCE_SCENARIO=NAME conformance-client [--loopback-only] SERVER_URL"
        );
        return ExitCode::from(2);
    };
    if loopback_only && let Err(e) = check_loopback_only(url) {
        eprintln!("conformance-client: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("conformance-client: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&scenario, url)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conformance-client: {scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}
