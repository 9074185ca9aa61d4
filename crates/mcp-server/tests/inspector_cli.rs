//! The MCP Inspector's CLI (npm `@modelcontextprotocol/inspector`, pinned in
//! `crates/mcp-server/install-test-deps.sh`) drives the `toolwright-mcp` binary over stdio and
//! over Streamable HTTP: it lists the tools, calls `echo`, and calls `transfer`, which needs
//! the person's approval. The Inspector's CLI declares no elicitation capability (it has no
//! one to ask), so the held call comes back as the server's refusal for such clients — an
//! error result that says why and that the tool was not run — never a hang and never a run.
//! A missing Inspector is a failure that says how to install it, never a skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

/// The longest one Inspector run may take (it starts Node and, over stdio, our server).
const LIMIT: Duration = Duration::from_secs(90);

/// A config file serving the demo tools with `transfer` held for approval.
fn config() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.json");
    std::fs::write(
        &path,
        r#"{"tools": ["demo"], "requireApproval": ["transfer"], "approvalTimeoutMs": 10000}"#,
    )
    .unwrap();
    (dir, path)
}

/// `mcp-inspector --cli --format json OPTIONS -- TARGET…`: its exit success and the JSON it
/// printed on stdout.
async fn inspector(options: &[&str], target: &[&str]) -> (bool, Value) {
    let launcher = testkit::mcp_inspector().unwrap_or_else(|e| panic!("{e}"));
    let home = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new("node")
        .arg(launcher)
        .args(["--cli", "--format", "json", "--quiet"])
        .args(options)
        .arg("--")
        .args(target)
        // Its catalog and client config stay out of the real home.
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("the Inspector CLI did not finish within {LIMIT:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "the Inspector CLI printed no JSON ({e}): {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), json)
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn text(called: &Value) -> String {
    called["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {called}"))
        .to_owned()
}

/// Lists, calls `echo`, and calls the held `transfer` through `target`; the held call's result.
async fn list_call_and_hold(options: &[&str], target: &[&str]) -> Value {
    let mut list = vec!["--method", "tools/list"];
    list.extend_from_slice(options);
    let (ok, listed) = inspector(&list, target).await;
    assert!(ok, "{listed}");
    let names = tool_names(&listed);
    assert!(
        names.iter().any(|n| n == "echo") && names.iter().any(|n| n == "transfer"),
        "{names:?}"
    );

    let mut call = vec![
        "--method",
        "tools/call",
        "--tool-name",
        "echo",
        "--tool-arg",
        "text=hi from the inspector",
    ];
    call.extend_from_slice(options);
    let (ok, called) = inspector(&call, target).await;
    assert!(ok, "{called}");
    assert_eq!(text(&called), "hi from the inspector", "{called}");
    assert_ne!(called["result"]["isError"], true, "{called}");

    let mut held = vec![
        "--method",
        "tools/call",
        "--tool-name",
        "transfer",
        "--tool-args-json",
        r#"{"to": "ann", "amount": 5}"#,
    ];
    held.extend_from_slice(options);
    let (_, held) = inspector(&held, target).await;
    assert_eq!(held["result"]["isError"], true, "{held}");
    let said = text(&held);
    assert!(said.contains("needs the person's approval"), "{said}");
    assert!(said.contains("it was not run"), "{said}");
    held
}

#[tokio::test]
async fn the_inspector_cli_lists_calls_and_is_refused_a_held_call_over_stdio() {
    let (_dir, config) = config();
    let target = [
        env!("CARGO_BIN_EXE_toolwright-mcp"),
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--stdio",
    ];
    let held = list_call_and_hold(&[], &target).await;
    assert!(
        text(&held).contains("did not declare the elicitation capability"),
        "{held}"
    );
}

/// The binary serving HTTP on a free port of 127.0.0.1 (killed when dropped) and its URL.
async fn http_server(config: &std::path::Path) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwright-mcp"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the server said where it listens within 30 s")
        .unwrap()
        .expect("a line on stdout");
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (child, url)
}

#[tokio::test]
async fn the_inspector_cli_lists_calls_and_is_refused_a_held_call_over_http() {
    let (_dir, config) = config();
    let (_server, url) = http_server(&config).await;

    // The CLI's default era for a URL: `initialize` on the session revision, which over this
    // stateless endpoint cannot carry a question; the refusal says what would.
    let held = list_call_and_hold(&["--transport", "http"], &[&url]).await;
    assert!(text(&held).contains("2026-07-28"), "{held}");

    // On the stateless revision (2026-07-28) the server would ask in the result, but the CLI
    // declared no elicitation capability, so it is refused as such a client.
    let held = list_call_and_hold(
        &["--transport", "http", "--protocol-era", "modern"],
        &[&url],
    )
    .await;
    assert!(
        text(&held).contains("did not declare the elicitation capability"),
        "{held}"
    );
}
