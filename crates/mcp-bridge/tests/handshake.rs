//! The handshake with servers that are not rmcp's: testkit's hand-written MCP server (no SDK,
//! written the way the official conformance suite writes its test servers) on 127.0.0.1 over
//! Streamable HTTP, answering `server/discover` in each way servers do when they do not speak
//! the stateless revision, and over stdio. Whatever discovery gives, a server that has
//! `initialize` is shaken hands with through it, asking for the newest revision that has one,
//! 2025-11-25 (2026-07-28, which the bridge prefers, has none).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use serde_json::Value;
use testkit::{DiscoverAnswer, PlainMcpHttpServer};
use toolwright_mcp_bridge::{McpBridge, ServiceConfig, ServiceStatus};

/// What the hand-written server saw of the handshake, through its `handshake` tool.
async fn seen_by_the_server(bridge: &McpBridge, service: &str) -> Value {
    let out = bridge
        .call(&format!("{service}__handshake"), serde_json::json!({}))
        .await
        .map(|o| o.value)
        .unwrap();
    let text = out.as_str().map_or_else(|| out.to_string(), str::to_owned);
    serde_json::from_str(&text).unwrap()
}

/// Starts the bridge on a hand-written HTTP server answering `server/discover` with
/// `discover`, and checks that it is running, was asked `initialize` once with 2025-11-25 after
/// `server/discover`, and answers a call.
async fn initialised_over_http(discover: DiscoverAnswer) {
    common::init_tracing();
    let server = PlainMcpHttpServer::start(discover).await;
    let bridge = McpBridge::new();
    bridge
        .register(
            ServiceConfig::remote("plain", server.url())
                .with_startup_timeout(Duration::from_secs(20)),
        )
        .unwrap();
    let started = bridge.start("plain").await;
    assert!(
        started.is_ok(),
        "{discover:?}: {started:?}; the server saw {:?}",
        server.methods()
    );
    assert_eq!(bridge.status("plain").unwrap(), ServiceStatus::Running);
    assert_eq!(
        server.initialize_versions(),
        ["2025-11-25"],
        "{discover:?}: what initialize asked for"
    );
    let methods = server.methods();
    assert_eq!(
        methods.first().map(String::as_str),
        Some("server/discover"),
        "{discover:?}: {methods:?}"
    );
    let seen = seen_by_the_server(&bridge, "plain").await;
    assert_eq!(
        seen["initialize"],
        serde_json::json!(["2025-11-25"]),
        "{seen}"
    );
    bridge.stop("plain").await.unwrap();
}

/// The official conformance suite's servers answer every method they do not know, and so
/// `server/discover`, with `{"result": {}}`. That is no discovery result: the bridge used to
/// give up there (status `error`).
#[tokio::test]
async fn a_server_that_answers_unknown_methods_with_an_empty_result_is_initialised() {
    initialised_over_http(DiscoverAnswer::EmptyResult).await;
}

/// A JSON-RPC error to `server/discover` ("Method not found"): `initialize` follows, asking
/// for 2025-11-25, not 2026-07-28 (a revision without `initialize`).
#[tokio::test]
async fn a_server_that_rejects_discovery_with_an_error_is_initialised_with_2025_11_25() {
    initialised_over_http(DiscoverAnswer::MethodNotFound).await;
}

/// HTTP 400 with an id-less JSON-RPC error, as a session-based server of the TypeScript SDK
/// answers a request without a session.
#[tokio::test]
async fn a_server_that_rejects_discovery_with_http_400_is_initialised_with_2025_11_25() {
    initialised_over_http(DiscoverAnswer::HttpStatus(400)).await;
}

/// HTTP 404 with a plain-text body.
#[tokio::test]
async fn a_server_that_rejects_discovery_with_http_404_is_initialised_with_2025_11_25() {
    initialised_over_http(DiscoverAnswer::HttpStatus(404)).await;
}

/// HTTP 405 with a plain-text body.
#[tokio::test]
async fn a_server_that_rejects_discovery_with_http_405_is_initialised_with_2025_11_25() {
    initialised_over_http(DiscoverAnswer::HttpStatus(405)).await;
}

/// Over stdio the handshake is `initialize` alone (a server on the session revision is what
/// lets calls go straight to the pipe), and it asks for 2025-11-25 too; the same hand-written
/// server, which would answer `server/discover` with an empty result, never sees one.
#[tokio::test]
async fn a_stdio_server_is_initialised_with_2025_11_25_and_never_asked_to_discover() {
    common::init_tracing();
    let bridge = McpBridge::new();
    bridge.register(common::own("plain", &["--plain"])).unwrap();
    bridge.start("plain").await.unwrap();
    assert_eq!(bridge.status("plain").unwrap(), ServiceStatus::Running);
    let seen = seen_by_the_server(&bridge, "plain").await;
    assert_eq!(
        seen["initialize"],
        serde_json::json!(["2025-11-25"]),
        "{seen}"
    );
    let methods: Vec<&str> = seen["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(methods.first().copied(), Some("initialize"), "{methods:?}");
    assert!(!methods.contains(&"server/discover"), "{methods:?}");
    bridge.stop("plain").await.unwrap();
}
