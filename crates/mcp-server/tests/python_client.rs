//! The official MCP Python SDK's client (`mcp`, pinned in crates/mcp-bridge/tests/python)
//! drives the server over Streamable HTTP: list, call, and a held call turned into an
//! elicitation the person accepts or declines. A missing SDK is a failure that says how to
//! install it, never a skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use serde_json::Value;

async fn drive(url: &str, mode: &str, answer: &str) -> Value {
    let python = testkit::python_mcp_sdk().unwrap_or_else(|e| panic!("{e}"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client.py");
    let out = tokio::process::Command::new(python)
        .args([script, url, mode, answer])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python client failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test]
async fn the_python_sdk_lists_calls_and_answers_an_approval() {
    let url = common::http_server().await;
    let got = drive(&url, "auto", "accept").await;
    assert_eq!(got["protocol"], "2026-07-28", "{got}");
    let tools: Vec<&str> = got["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        tools.contains(&"echo") && tools.contains(&"transfer"),
        "{got}"
    );
    assert_eq!(got["echo"], "from python");
    assert_eq!(got["held_error"], false, "{got}");
    assert!(got["held"].as_str().unwrap().contains("demo-0001"), "{got}");
    assert_eq!(got["questions"].as_array().unwrap().len(), 1, "{got}");

    let got = drive(&url, "auto", "decline").await;
    assert_eq!(got["held_error"], true, "{got}");
    assert!(got["held"].as_str().unwrap().contains("declined"), "{got}");
}

#[tokio::test]
async fn the_python_sdk_on_the_older_protocol_is_refused_a_held_call_with_a_reason() {
    let url = common::http_server().await;
    let got = drive(&url, "legacy", "accept").await;
    assert_eq!(got["protocol"], "2025-11-25", "{got}");
    assert_eq!(got["echo"], "from python");
    assert_eq!(got["held_error"], true, "{got}");
    assert!(
        got["held"].as_str().unwrap().contains("2026-07-28"),
        "{got}"
    );
    assert!(got["questions"].as_array().unwrap().is_empty());
}
