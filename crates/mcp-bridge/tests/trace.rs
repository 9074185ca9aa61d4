//! Traces for MCP: each MCP request has its client span (`tools/call {tool}`, a child of
//! the tool call's `execute_tool` span) and carries that span's W3C `traceparent` in its
//! `_meta`, so the server's own trace joins the agent's. Tool lists (`tools/list`) have
//! client spans too. A real MCP server process reports the
//! `traceparent` it received; the spans come from the OpenTelemetry SDK's in-memory exporter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{SERVER, agent_over_http};
use opentelemetry::trace::SpanKind;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_core::Message;
use toolwright_mcp_bridge::McpBridge;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_request_span_and_its_traceparent_reach_the_server() {
    let exporter = InMemorySpanExporter::default();
    let telemetry =
        toolwright_telemetry::Telemetry::with_exporter(exporter.clone(), "mcp-trace-test");
    telemetry.init().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    std::fs::write(
        &path,
        json!({"mcpServers": {"misb": {"command": SERVER.as_str()}}}).to_string(),
    )
    .unwrap();
    let bridge = McpBridge::with_config_file(&path).unwrap();
    bridge.start("misb").await.unwrap();
    let server = ScriptedServer::start().await;
    let agent = agent_over_http(&server, &bridge);
    server.push(Reply::tool_call("c1", "misb__traceparent", "{}"));
    server.push(Reply::text("done"));
    let out = agent.run("s", "调用 traceparent 工具").await.unwrap();
    let received = out
        .new_messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .expect("the tool's result");

    telemetry.flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool misb__traceparent")
        .unwrap_or_else(|| panic!("{names:?}"));
    let mcp = spans
        .iter()
        .find(|s| s.name == "tools/call traceparent")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(mcp.parent_span_id, tool.span_context.span_id());
    assert_eq!(mcp.span_context.trace_id(), tool.span_context.trace_id());
    assert_eq!(mcp.span_kind, SpanKind::Client);
    let attr = |key: &str| {
        mcp.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.as_str().into_owned())
    };
    assert_eq!(attr("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attr("gen_ai.tool.name").as_deref(), Some("traceparent"));

    // The start-up's tool list has its span too.
    let list = spans
        .iter()
        .find(|s| s.name == "tools/list")
        .unwrap_or_else(|| panic!("no tools/list span: {names:?}"));
    assert_eq!(list.span_kind, SpanKind::Client);
    assert!(
        list.attributes
            .iter()
            .any(|kv| kv.key.as_str() == "mcp.service.name" && kv.value.as_str() == "misb")
    );

    // What the server received is the MCP span's own context: the server's spans become its
    // children in the same trace.
    let expected = format!(
        "00-{}-{}-01",
        mcp.span_context.trace_id(),
        mcp.span_context.span_id()
    );
    assert!(
        received.contains(&expected),
        "server got {received}, expected {expected}"
    );
    bridge.stop_all().await;
}
