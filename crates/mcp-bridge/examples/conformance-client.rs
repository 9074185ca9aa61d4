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
//! - `auth/*`: the service is configured with OAuth (`toolwright_mcp_bridge::oauth`) and calls
//!   `test-tool`: from an `mcpServers` file with an `"oauth"` entry and `McpBridge::set_oauth`,
//!   as a user configures it, except when the scenario gives a client secret (then in code).
//!   The scenario's context (`MCP_CONFORMANCE_CONTEXT`, JSON) may hold a
//!   pre-registered `client_id` and `client_secret`; the client's ID metadata document is
//!   `https://conformance-test.local/client-metadata.json`, the URL the suite expects. The
//!   person's sign-in is played by an HTTP GET of the authorization URL that follows the
//!   suite's redirect to the bridge's loopback listener. In `auth/scope-retry-limit` the
//!   server never grants the scope: the scenario passes when the bridge gives up with its
//!   step-up limit error.
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
use toolwright_mcp_bridge::oauth::{OAuthConfig, SignIn};
use toolwright_mcp_bridge::{McpBridge, ServiceConfig, ServiceStatus};

/// The service's name in the bridge.
const SERVICE: &str = "server";

/// The tool a scenario calls, with its arguments; `None`: the handshake is all it checks.
fn call_of(scenario: &str) -> Result<Option<(&'static str, Value)>, String> {
    Ok(match scenario {
        s if s.starts_with("auth/") => Some(("test-tool", json!({}))),
        "initialize" => None,
        "tools_call" => Some(("add_numbers", json!({"a": 2, "b": 40}))),
        "elicitation-sep1034-client-defaults" => {
            Some(("test_client_elicitation_defaults", json!({})))
        }
        "sse-retry" => Some(("test_reconnection", json!({}))),
        other => {
            return Err(format!(
                "no steps for scenario {other:?}: this client knows initialize, tools_call, \
                 elicitation-sep1034-client-defaults, sse-retry and auth/*"
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

/// The URL of this client's ID metadata document, as the suite expects it.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The person, played by an HTTP client: it opens the authorization URL and follows the
/// authorization server's redirect back to the bridge's loopback listener.
struct FollowRedirects;

#[async_trait::async_trait]
impl SignIn for FollowRedirects {
    async fn sign_in(&self, authorization_url: &str) -> Result<(), String> {
        println!("sign in at: {authorization_url}");
        let url = authorization_url.to_owned();
        // Answered by the listener only after this returns, so the GET runs on its own.
        tokio::spawn(async move {
            match reqwest_ring::get(&url).await {
                Ok(r) => println!("the browser ended at {} ({})", r.url(), r.status()),
                Err(e) => eprintln!("the browser failed: {e}"),
            }
        });
        Ok(())
    }
}

/// OAuth as a scenario's context sets it up, as a user would: the application's part in code
/// (how the person signs in: `set_oauth`), the service's part in the `mcpServers` file
/// (`"oauth"`: the client ID metadata document, a pre-registered client). A client secret
/// lives in an environment variable in a real file (`client_secret_env_var`); this program
/// cannot set one for itself, so a scenario that gives a secret has OAuth set in code
/// (`ServiceConfig::with_oauth`) instead.
fn oauth_of(scenario: &str) -> Result<(OAuthConfig, Value, bool), String> {
    let mut oauth = OAuthConfig::new(Arc::new(FollowRedirects))
        .with_client_name("toolwright conformance client");
    let mut entry = json!({"client_metadata_url": CLIENT_METADATA_URL});
    let mut in_code = false;
    if let Ok(text) = std::env::var("MCP_CONFORMANCE_CONTEXT") {
        let context: Value = serde_json::from_str(&text)
            .map_err(|e| format!("MCP_CONFORMANCE_CONTEXT is not JSON: {e}"))?;
        if let Some(id) = context.get("client_id").and_then(Value::as_str) {
            match context.get("client_secret").and_then(Value::as_str) {
                Some(secret) => {
                    oauth = oauth
                        .with_client_metadata_url(CLIENT_METADATA_URL)
                        .with_client(id, Some(secret.to_owned()));
                    in_code = true;
                }
                None => entry["client_id"] = json!(id),
            }
        }
    }
    println!("{scenario}: OAuth {oauth:?}, file entry {entry}, in code: {in_code}");
    Ok((oauth, entry, in_code))
}

/// Whether `scenario` passes by the bridge refusing to go on (the suite's server never grants
/// what it asks for), and that refusal is `error`.
fn expected_refusal(scenario: &str, error: &str) -> bool {
    scenario == "auth/scope-retry-limit" && error.contains("authorizations (insufficient scope")
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
    match run_steps(scenario, url).await {
        Err(e) if expected_refusal(scenario, &e) => {
            println!("{scenario}: refused as expected: {e}");
            Ok(())
        }
        Ok(()) if scenario == "auth/scope-retry-limit" => {
            Err("the call succeeded although the server never grants the scope".into())
        }
        other => other,
    }
}

/// The suite's server as a remote service, with the timeouts the scenarios need.
fn remote(url: &str) -> ServiceConfig {
    ServiceConfig::remote(SERVICE, url)
        .with_startup_timeout(Duration::from_secs(20))
        .with_call_timeout(Duration::from_secs(20))
}

async fn run_steps(scenario: &str, url: &str) -> Result<(), String> {
    let call = call_of(scenario)?;
    let bridge = if scenario.starts_with("auth/") {
        let (oauth, entry, in_code) = oauth_of(scenario)?;
        if in_code {
            let bridge = McpBridge::new();
            bridge
                .register(remote(url).with_oauth(oauth))
                .map_err(|e| e.to_string())?;
            bridge
        } else {
            // The service as a user's config file has it, OAuth included.
            let file = std::env::temp_dir().join(format!(
                "toolwright-conformance-{}-{}.json",
                std::process::id(),
                scenario.replace('/', "-")
            ));
            let text = json!({"mcpServers": {SERVICE: {"url": url, "tool_timeout_sec": 20,
                "startup_timeout_sec": 20, "oauth": entry}}});
            std::fs::write(&file, text.to_string())
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            let bridge = McpBridge::with_config_file(&file).map_err(|e| e.to_string());
            let _ = std::fs::remove_file(&file);
            let bridge = bridge?;
            bridge.set_oauth(Some(oauth));
            bridge
        }
    } else {
        let bridge = McpBridge::new();
        bridge.register(remote(url)).map_err(|e| e.to_string())?;
        bridge
    };
    bridge.set_elicitor(Arc::new(AcceptAsShown), Duration::from_secs(30));
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
