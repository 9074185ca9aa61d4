//! remote MCP servers over Streamable HTTP, against server-everything in its
//! `streamableHttp` mode on 127.0.0.1 (pinned to loopback by a Node preload, checked with `ss`):
//! list, call, structured content, session expiry, a server killed and restarted mid-conversation,
//! through the bridge and through the tool loop over a real HTTP model server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{HttpEverything, everything};
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_mcp_bridge::{ConfigFile, McpBridge, ServiceConfig, ServiceStatus};
use toolwright_tool_system::Agent;

fn remote(name: &str, url: &str) -> ServiceConfig {
    ServiceConfig::remote(name, url)
        .with_call_timeout(Duration::from_secs(20))
        .with_startup_timeout(Duration::from_secs(20))
}

#[tokio::test]
async fn m1_remote_server_binds_loopback_only_and_lists_its_tools() {
    let server = HttpEverything::start();
    let addrs = server.listening_addresses();
    assert!(
        !addrs.is_empty(),
        "ss shows no listening socket of the server"
    );
    for a in &addrs {
        assert!(
            a.starts_with("127.0.0.1:"),
            "server-everything listens on {a}"
        );
    }
    let bridge = McpBridge::new();
    bridge.register(remote("web", &server.url())).unwrap();
    bridge.start("web").await.unwrap();
    assert_eq!(bridge.status("web").unwrap(), ServiceStatus::Running);
    assert_eq!(bridge.pid("web"), None);
    let names: Vec<String> = bridge
        .tools()
        .await
        .into_iter()
        .map(|t| t.exposed_name)
        .collect();
    assert!(names.contains(&"web__echo".to_string()), "{names:?}");
    assert!(
        names.contains(&"web__get-structured-content".to_string()),
        "{names:?}"
    );
    bridge.stop("web").await.unwrap();
}

#[tokio::test]
async fn m4_remote_call_and_structured_content() {
    let server = HttpEverything::start();
    let bridge = McpBridge::new();
    bridge.register(remote("web", &server.url())).unwrap();
    bridge.start("web").await.unwrap();
    let out = bridge
        .call("web__echo", json!({"message": "over http"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(out.to_string().contains("over http"), "{out}");
    let sum = bridge
        .call("web__get-sum", json!({"a": 2, "b": 40}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(sum.to_string().contains("42"), "{sum}");
    let structured = bridge
        .call(
            "web__get-structured-content",
            json!({"location": "New York"}),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(
        structured.is_object(),
        "structuredContent comes back as JSON: {structured}"
    );
    assert!(structured.get("temperature").is_some(), "{structured}");
    bridge.stop("web").await.unwrap();
}

/// The server is killed and started again on the same port mid-conversation: its sessions are
/// gone, so the session the bridge holds has expired. The next call initialises a new session,
/// is retried once and succeeds; the conversation goes on. (server-everything answers an unknown
/// session with an id-less HTTP 400 error instead of the 404 the spec asks for; the bridge takes
/// it as the expired session it is, `src/http.rs`.)
#[tokio::test]
async fn m4_remote_server_killed_and_restarted_mid_conversation() {
    let mut server = HttpEverything::start();
    let port = server.port;
    let bridge = McpBridge::new();
    bridge.register(remote("web", &server.url())).unwrap();
    bridge.start("web").await.unwrap();

    let model = ScriptedServer::start().await;
    let agent = Agent::builder(
        toolwright_model_gateway::OpenAiModel::new(
            toolwright_model_gateway::OpenAiConfig::new("gpt-4o").with_base_url(model.base_url()),
        )
        .unwrap(),
    )
    .provider(Arc::new(bridge.clone()))
    .build()
    .unwrap();
    model.push(Reply::tool_call(
        "c1",
        "web__echo",
        r#"{"message":"first"}"#,
    ));
    model.push(Reply::text("done 1"));
    assert_eq!(agent.run("s", "echo first").await.unwrap().answer, "done 1");

    server.kill();
    let _server = HttpEverything::start_on(port);

    model.push(Reply::tool_call(
        "c2",
        "web__echo",
        r#"{"message":"second"}"#,
    ));
    model.push(Reply::text("done 2"));
    assert_eq!(
        agent.run("s", "echo second").await.unwrap().answer,
        "done 2"
    );
    let reqs = model.requests();
    let last = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let tool = last.iter().rev().find(|m| m["role"] == "tool").unwrap();
    assert!(
        tool["content"].as_str().unwrap().contains("second"),
        "the call after the restart reached the new server: {tool}"
    );
    assert_eq!(bridge.status("web").unwrap(), ServiceStatus::Running);
    bridge.stop("web").await.unwrap();
}

/// A user's `mcpServers` file with stdio and url entries, unknown keys and a legacy SSE entry
/// loads as it is: both kinds run side by side; saving writes every entry back.
#[tokio::test]
async fn m5_mixed_stdio_and_url_config_loads_unchanged_and_runs_both() {
    let server = HttpEverything::start();
    let stdio = everything("local");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    let original = json!({
        "theme": "dark",
        "mcpServers": {
            "local": {"command": stdio.command, "args": stdio.args, "startup_timeout_sec": 30, "x-note": "kept"},
            "web": {"url": server.url(), "headers": {"X-Client": "llm-toolkit"}, "bearer_token_env_var": "MCP_TEST_TOKEN_UNSET_OK", "other": [1, 2]},
            "old": {"url": "http://127.0.0.1:9/sse", "type": "sse"}
        }
    });
    std::fs::write(&path, original.to_string()).unwrap();
    let parsed = ConfigFile::load(&path).unwrap();
    assert_eq!(parsed.services.len(), 2);
    assert_eq!(parsed.skipped.len(), 1);
    assert_eq!(
        parsed.to_json(),
        original,
        "saving writes the file back as it was"
    );

    let bridge = McpBridge::with_config_file(&path).unwrap();
    // The token variable is not set: a clear start error that names it.
    let e = bridge.start("web").await.unwrap_err();
    assert!(e.to_string().contains("MCP_TEST_TOKEN_UNSET_OK"), "{e}");
    // Without the token variable, both kinds run side by side behind the same API.
    let bridge = McpBridge::new();
    let mut web = parsed
        .services
        .iter()
        .find(|s| s.name == "web")
        .unwrap()
        .clone();
    web.bearer_token_env_var = None;
    bridge.register(web).unwrap();
    bridge
        .register(
            parsed
                .services
                .iter()
                .find(|s| s.name == "local")
                .unwrap()
                .clone(),
        )
        .unwrap();
    assert!(bridge.start_all().await.is_empty());
    let a = bridge
        .call("local__echo", json!({"message": "stdio"}))
        .await
        .map(|o| o.value)
        .unwrap();
    let b = bridge
        .call("web__echo", json!({"message": "http"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(a.to_string().contains("stdio") && b.to_string().contains("http"));
    bridge.stop_all().await;
}

/// The stateless 2026-07-28 revision (`server/discover`, no session) is what the bridge speaks
/// to a server that offers it; every request carries that version.
#[tokio::test]
async fn m1_remote_stateless_revision_when_the_server_speaks_it() {
    let server = testkit::McpHttpServer::start().await;
    let bridge = McpBridge::new();
    bridge.register(remote("st", server.url())).unwrap();
    bridge.start("st").await.unwrap();
    let names: Vec<String> = bridge
        .tools()
        .await
        .into_iter()
        .map(|t| t.exposed_name)
        .collect();
    assert!(names.contains(&"st__echo".to_owned()), "{names:?}");
    assert_eq!(
        bridge
            .call("st__echo", json!({"message": "stateless"}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("Echo: stateless")
    );
    let versions = server.protocol_versions();
    assert!(!versions.is_empty());
    assert!(
        versions.iter().all(|v| v == "2026-07-28"),
        "the bridge spoke {versions:?}"
    );
    bridge.stop("st").await.unwrap();
}

/// Statelessly, a server restart is survived: no session to lose, the next call just works; a
/// tool the server adds shows up once the list's `ttlMs` ran out (no notification stream in
/// this revision).
#[tokio::test]
async fn m4_remote_stateless_server_restarted_and_its_list_refreshed_by_ttl() {
    let server = testkit::McpHttpServer::start().await;
    let addr = server.addr();
    let bridge = McpBridge::new();
    bridge.register(remote("st", server.url())).unwrap();
    bridge.start("st").await.unwrap();
    assert_eq!(
        bridge
            .call("st__echo", json!({"message": "one"}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("Echo: one")
    );
    // Restarted on the same port: a new process would know nothing of the old one either.
    server.stop();
    drop(server);
    let server = testkit::McpHttpServer::start_on(addr).await;
    assert_eq!(
        bridge
            .call("st__echo", json!({"message": "two"}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("Echo: two"),
        "the call after the restart"
    );
    bridge
        .call("st__add_tool", json!({"name": "late"}))
        .await
        .map(|o| o.value)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(testkit::TOOLS_TTL_MS + 200)).await;
    assert!(
        bridge
            .tools()
            .await
            .iter()
            .any(|t| t.exposed_name == "st__late"),
        "the list was not fetched again after its ttlMs"
    );
    assert_eq!(
        bridge
            .call("st__late", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("late ran")
    );
    assert!(server.protocol_versions().iter().all(|v| v == "2026-07-28"));
    bridge.stop("st").await.unwrap();
}

/// In a session (the 2025-11-25 revision, a server that does not speak 2026-07-28 and whose
/// lists carry no `ttlMs`), a tool the server adds reaches the bridge only through
/// `notifications/tools/list_changed` on the session's stream: the bridge lists again and the
/// new tool is callable.
#[tokio::test]
async fn m1_remote_session_tool_list_changed_refreshes_the_cache() {
    let server = testkit::McpHttpServer::start_session_only().await;
    let bridge = McpBridge::new();
    bridge.register(remote("se", server.url())).unwrap();
    bridge.start("se").await.unwrap();
    assert!(
        !bridge
            .tools()
            .await
            .iter()
            .any(|t| t.exposed_name == "se__late")
    );
    bridge
        .call("se__add_tool", json!({"name": "late"}))
        .await
        .map(|o| o.value)
        .unwrap();
    // Bounded wait for the notification to be handled (no ttlMs here to refresh the list).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !bridge
        .tools()
        .await
        .iter()
        .any(|t| t.exposed_name == "se__late")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "notifications/tools/list_changed over the session was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        bridge
            .call("se__late", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("late ran")
    );
    let versions = server.protocol_versions();
    assert!(
        versions.iter().all(|v| v == "2025-11-25"),
        "the bridge spoke {versions:?}"
    );
    bridge.stop("se").await.unwrap();
}
