//! Approvals for MCP tools: a service's `require_approval` config holds its tools' calls for a
//! person (tool-system's approval flow through `ToolProvider::needs_approval`). A real MCP
//! server process, the OpenAI-compatible backend over real HTTP, the config read from an
//! `mcpServers` file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{SERVER, init_tracing};
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_mcp_bridge::McpBridge;
use toolwright_tool_system::{Agent, ApprovalKey};

#[tokio::test]
async fn mcp_tool_needs_approval_by_config_then_runs_or_is_declined() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    std::fs::write(
        &path,
        json!({"mcpServers": {"misb": {"command": SERVER.as_str(), "require_approval": {"always": ["echo"], "never": ["add"]}}}})
            .to_string(),
    )
    .unwrap();
    let bridge = McpBridge::with_config_file(&path).unwrap();
    bridge.start("misb").await.unwrap();
    let server = ScriptedServer::start().await;
    let model = toolwright_model_gateway::OpenAiModel::new(
        toolwright_model_gateway::OpenAiConfig::new("gpt-4o").with_base_url(server.base_url()),
    )
    .unwrap();
    let agent = Agent::builder(model)
        .provider(Arc::new(bridge.clone()))
        .turn_sections(Arc::new(bridge.clone()))
        .approval_key(ApprovalKey::new([7u8; 32]).unwrap())
        .build()
        .unwrap();

    // Two calls in one round: echo needs approval by config, add does not.
    server.push(Reply::tool_calls(&[
        ("c1", "misb__echo", r#"{"message": "approved words"}"#),
        ("c2", "misb__add", r#"{"a": 2, "b": 3}"#),
    ]));
    let out = agent.run("s", "调用 echo 和 add").await.unwrap();
    let pending = out.pending_approval.expect("echo is held for approval");
    assert_eq!(pending.calls.len(), 1, "{pending:?}");
    assert_eq!(pending.calls[0].name, "misb__echo");
    assert_eq!(
        pending.calls[0].arguments,
        json!({"message": "approved words"})
    );
    assert_eq!(
        server.requests().len(),
        1,
        "no model call while a call waits"
    );

    // Approved: echo runs on the real server; the next request carries both results.
    server.push(Reply::text("Both done."));
    let out = agent
        .resume("s", &[pending.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "Both done.");
    let messages = server.requests()[1].body["messages"].to_string();
    assert!(messages.contains("Echo: approved words"), "{messages}");
    assert!(messages.contains('5'), "{messages}");

    // A second turn: rejected, the model is told and the tool never ran.
    server.push(Reply::tool_call(
        "c3",
        "misb__echo",
        r#"{"message": "never"}"#,
    ));
    let out = agent.run("s", "调用 echo").await.unwrap();
    let pending = out.pending_approval.expect("held again");
    server.push(Reply::text("OK, I will not."));
    let out = agent
        .resume("s", &[pending.calls[0].reject("not now")])
        .await
        .unwrap();
    assert_eq!(out.answer, "OK, I will not.");
    let messages = server.requests()[3].body["messages"].to_string();
    assert!(
        messages.contains("The user declined this call: not now"),
        "{messages}"
    );
    assert!(!messages.contains("Echo: never"), "{messages}");

    // The config is written back as spelled.
    bridge
        .update("misb", toolwright_mcp_bridge::ServiceUpdate::default())
        .await
        .unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        saved["mcpServers"]["misb"]["require_approval"],
        json!({"always": ["echo"], "never": ["add"]})
    );
    bridge.stop("misb").await.unwrap();
}
