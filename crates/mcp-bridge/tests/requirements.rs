//! Every scenario of spec 004 (M1–M6), against our own rmcp test server over stdio, plus the
//! misbehaving-server cases. Each test ends with no process left behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{SERVER, assert_group_gone, init_tracing, live_in_group, own};
use serde_json::{Value, json};
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, Message, ModelError, ModelInfo,
    async_trait, response_stream,
};
use toolwright_core::{ToolContext, ToolErrorKind, ToolProvider, ToolSpec, TurnInfo};
use toolwright_mcp_bridge::{
    BridgeError, DESCRIBE_TOOL, Intent, McpBridge, McpTrigger, ServiceConfig, ServiceStatus,
    ServiceUpdate, ToolCallProtocol,
};
use toolwright_mcp_bridge::{IntentChain, KeywordRecognizer, McpRecognizer};
use toolwright_tool_system::{Agent, ProtocolKind};

async fn started(cfgs: Vec<ServiceConfig>) -> McpBridge {
    init_tracing();
    let b = McpBridge::new();
    for c in cfgs {
        let name = c.name.clone();
        b.register(c).unwrap();
        b.start(&name).await.unwrap();
    }
    b
}

async fn stop_and_check(b: &McpBridge, name: &str) {
    let pid = b.pid(name);
    b.stop(name).await.unwrap();
    assert_eq!(b.status(name).unwrap(), ServiceStatus::Stopped);
    if let Some(pid) = pid {
        assert_group_gone(pid).await;
    }
}

// ---------------------------------------------------------------- M1 discovery

#[tokio::test]
async fn m1_running_service_tools_listed() {
    let b = started(vec![own("misb", &[])]).await;
    let tools = b.tools().await;
    let names: Vec<_> = tools.iter().map(|t| t.exposed_name.as_str()).collect();
    assert!(names.contains(&"misb__echo"), "{names:?}");
    assert!(names.contains(&"misb__add"));
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert!(echo.description.starts_with("Echoes the message back"));
    // The provider view (what the tool loop sees) has the same tools plus the describe step.
    let specs = ToolProvider::list(&b).await;
    assert!(specs.iter().any(|s| &*s.name == "misb__echo"));
    assert!(specs.iter().any(|s| *s.name == *DESCRIBE_TOOL));
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m1_stopped_service_tools_not_listed() {
    let b = started(vec![own("up", &[]), own("down", &[])]).await;
    stop_and_check(&b, "down").await;
    let tools = b.tools().await;
    assert!(!tools.is_empty());
    assert!(tools.iter().all(|t| t.service == "up"));
    b.stop("up").await.unwrap();
    assert!(b.tools().await.is_empty());
    assert!(ToolProvider::list(&b).await.is_empty());
}

#[tokio::test]
async fn m1_error_service_tools_not_listed() {
    let b = started(vec![own("up", &[]), own("bad", &[])]).await;
    let pid = b.pid("bad").unwrap();
    let _ = b.call("bad__crash", json!({})).await.map(|o| o.value);
    assert!(matches!(b.status("bad").unwrap(), ServiceStatus::Error(_)));
    assert!(b.tools().await.iter().all(|t| t.service == "up"));
    assert_group_gone(pid).await;
    stop_and_check(&b, "up").await;
}

#[tokio::test]
async fn m1_schema_without_parameters_is_normalised() {
    let b = started(vec![own("misb", &[])]).await;
    let tools = b.tools().await;
    for name in ["ping", "fail"] {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        assert_eq!(t.input_schema, json!({"type": "object", "properties": {}}));
    }
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m1_same_tool_name_in_two_services_does_not_collide() {
    let b = started(vec![own("alpha", &[]), own("beta", &[])]).await;
    let tools = b.tools().await;
    let echoes: Vec<_> = tools.iter().filter(|t| t.name == "echo").collect();
    assert_eq!(echoes.len(), 2);
    assert_ne!(echoes[0].exposed_name, echoes[1].exposed_name);
    let mut all: Vec<_> = tools.iter().map(|t| t.exposed_name.clone()).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), tools.len());
    for n in &all {
        assert!(toolwright_core::is_valid_tool_name(n), "{n}");
    }
    // Each exposed name reaches its own service.
    let a = b
        .call("alpha__echo", json!({"message": "a"}))
        .await
        .map(|o| o.value)
        .unwrap();
    let z = b
        .call("beta__echo", json!({"message": "b"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!((a, z), (json!("Echo: a"), json!("Echo: b")));
    // The bare name is ambiguous with two services: not found rather than a guess.
    let e = b
        .call("echo", json!({"message": "x"}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::NotFound);
    stop_and_check(&b, "alpha").await;
    stop_and_check(&b, "beta").await;
}

/// A list's cache hint (`ttlMs`, 2026-07-28) is honoured: a tool the server adds without
/// saying so shows up once the list it gave has expired, not before; a list without a hint is
/// kept until the server says it changed.
#[tokio::test]
async fn m1_tool_list_cache_hint_ttl_is_honoured() {
    let b = started(vec![
        own("ttl", &["--tools-ttl-ms", "1500"]),
        own("nottl", &[]),
    ])
    .await;
    for service in ["ttl", "nottl"] {
        b.call(
            &format!("{service}__add_tool"),
            json!({"name": "quiet", "silent": true}),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    }
    let listed = |tools: &[toolwright_mcp_bridge::McpTool], name: &str| {
        tools.iter().any(|t| t.exposed_name == name)
    };
    // Within the hint's time the cached list stands (the hint is 1.5 s: a loaded machine has
    // the time to look before it ends; looking later only makes this step pass vacuously
    // false, so it is checked against the clock).
    let asked = Instant::now();
    let tools = b.tools().await;
    if asked.elapsed() < Duration::from_millis(1000) {
        assert!(
            !listed(&tools, "ttl__quiet"),
            "the list was fetched before its ttlMs ran out"
        );
    }
    // Once it ran out, the next look fetches the list again; the other server's is kept.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let tools = b.tools().await;
    assert!(
        listed(&tools, "ttl__quiet"),
        "ttlMs ran out but the list was not fetched again"
    );
    assert!(
        !listed(&tools, "nottl__quiet"),
        "a list without a cache hint is kept"
    );
    assert_eq!(
        b.call("ttl__quiet", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("quiet ran")
    );
    stop_and_check(&b, "ttl").await;
    stop_and_check(&b, "nottl").await;
}

#[tokio::test]
async fn m1_tool_list_changed_refreshes_the_cache() {
    let b = started(vec![own("misb", &[])]).await;
    assert!(!b.tools().await.iter().any(|t| t.name == "weather"));
    b.call("misb__add_tool", json!({"name": "weather"}))
        .await
        .map(|o| o.value)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if b.tools()
            .await
            .iter()
            .any(|t| t.exposed_name == "misb__weather")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tools/list_changed not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        b.call("misb__weather", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("weather ran")
    );
    stop_and_check(&b, "misb").await;
}

// ---------------------------------------------------------------- M2 intent

fn weather_and_files() -> Vec<ServiceConfig> {
    vec![
        ServiceConfig::new("weather", "x").with_trigger_keywords(["天气", "Weather", "forecast"]),
        ServiceConfig::new("files", "x").with_trigger_keywords(["文件", "file", "目录"]),
        ServiceConfig::new("plain", "x"),
    ]
}

fn chain_with(b_tools: &[toolwright_mcp_bridge::McpTool]) -> IntentChain {
    IntentChain::standard(McpRecognizer::new(&weather_and_files(), b_tools))
}

#[test]
fn m2_explicit_chinese_call_detected() {
    let chain = chain_with(&[]);
    for (msg, tool) in [
        ("用 echo 工具 回显一下你好", "echo"),
        ("请用get_sum工具算一下", "get_sum"),
        ("调用 search 查一下北京", "search"),
        ("帮我调用一下 translate", "translate"),
        ("使用 echo 工具", "echo"),
        ("用 回显 工具", "回显"),
    ] {
        match chain.recognize(msg) {
            Intent::Mcp(m) => {
                assert_eq!(m.tool.as_deref(), Some(tool), "{msg}");
                assert!(matches!(m.trigger, McpTrigger::Explicit(_)));
            }
            other => panic!("{msg}: {other:?}"),
        }
    }
}

#[test]
fn m2_explicit_english_call_detected() {
    let chain = chain_with(&[]);
    for (msg, tool) in [
        ("Please use the echo tool to repeat this", "echo"),
        ("use get-sum tool with 1 and 2", "get-sum"),
        ("Could you call the Echo tool?", "Echo"),
    ] {
        match chain.recognize(msg) {
            Intent::Mcp(m) => assert_eq!(m.tool.as_deref(), Some(tool), "{msg}"),
            other => panic!("{msg}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn m2_call_names_a_known_tool() {
    let b = started(vec![own("misb", &[])]).await;
    let chain = IntentChain::standard(b.recognizer().await);
    match chain.recognize("call echo with hello") {
        Intent::Mcp(m) => {
            assert_eq!(m.tool.as_deref(), Some("echo"));
            assert_eq!(m.service.as_deref(), Some("misb"));
        }
        other => panic!("{other:?}"),
    }
    match chain.recognize("使用 misb__add 算 1+2") {
        Intent::Mcp(m) => assert_eq!(m.tool.as_deref(), Some("misb__add")),
        other => panic!("{other:?}"),
    }
    // "call" + an unknown word is ordinary English, not a tool call.
    assert_eq!(chain.recognize("call me later"), Intent::Normal);
    stop_and_check(&b, "misb").await;
}

#[test]
fn m2_trigger_keyword_maps_to_service() {
    let chain = chain_with(&[]);
    for (msg, svc) in [
        ("明天北京天气怎么样", "weather"),
        ("What's the WEATHER like?", "weather"),
        ("列出这个目录", "files"),
        ("open the FILE please", "files"),
    ] {
        match chain.recognize(msg) {
            Intent::Mcp(m) => {
                assert_eq!(m.service.as_deref(), Some(svc), "{msg}");
                assert!(m.tool.is_none());
                assert!(matches!(m.trigger, McpTrigger::Keyword(_)));
            }
            other => panic!("{msg}: {other:?}"),
        }
    }
}

#[test]
fn m2_many_keywords_matched_in_one_pass() {
    // 2,000 services with 5 keywords each: one automaton, one pass over the message.
    let services: Vec<ServiceConfig> = (0..2000)
        .map(|i| {
            ServiceConfig::new(format!("svc{i}"), "x")
                .with_trigger_keywords((0..5).map(|k| format!("kw{i}x{k}")))
        })
        .collect();
    let r = McpRecognizer::new(&services, &[]);
    let chain = IntentChain::new().with(r);
    match chain.recognize("please handle KW1999X4 today") {
        Intent::Mcp(m) => assert_eq!(m.service.as_deref(), Some("svc1999")),
        other => panic!("{other:?}"),
    }
    assert_eq!(chain.recognize("nothing here"), Intent::Normal);
}

#[test]
fn m2_no_match_falls_through_to_memory_hitl_normal() {
    let chain = chain_with(&[]);
    assert_eq!(chain.recognize("请记住我喜欢喝茶"), Intent::Memory);
    assert_eq!(chain.recognize("Remember that I like tea"), Intent::Memory);
    assert_eq!(chain.recognize("我要转人工"), Intent::Hitl);
    assert_eq!(chain.recognize("let me talk to a human"), Intent::Hitl);
    assert_eq!(chain.recognize("你好，今天过得怎么样"), Intent::Normal);
    // Words that contain a verb are not calls: 用户 (user), because, 使用说明.
    assert_eq!(chain.recognize("用户说明书在哪里"), Intent::Normal);
    assert_eq!(chain.recognize("because it rains"), Intent::Normal);
    assert_eq!(chain.recognize("查看使用说明"), Intent::Normal);
    // A custom recogniser plugs into the chain.
    let custom = IntentChain::new()
        .with(KeywordRecognizer::new(["紧急"], Intent::Hitl))
        .with(KeywordRecognizer::memory());
    assert_eq!(custom.recognize("紧急情况"), Intent::Hitl);
}

// ---------------------------------------------------------------- M3 injection

/// The description configured for the test service: its first sentence is each tool's level-1
/// line (M5); the servers' own texts are level 2.
const MISB_DESCRIPTION: &str = "Echo and arithmetic for tests. Misbehaves on request.";

#[tokio::test]
async fn m3_mcp_intent_injects_level1_only() {
    let b = started(vec![
        own("misb", &[])
            .with_description(MISB_DESCRIPTION)
            .with_trigger_keywords(["回显"]),
    ])
    .await;
    let chain = IntentChain::standard(b.recognizer().await);
    let intent = chain.recognize("用 echo 工具 说你好");
    let section = b.prompt_section(&intent).await.unwrap();
    assert!(
        section.contains("- misb__echo: Echo and arithmetic for tests.\n"),
        "{section}"
    );
    assert!(
        !section.contains("Misbehaves"),
        "only one sentence: {section}"
    );
    assert!(
        !section.contains("misb__add"),
        "only the matching tool: {section}"
    );
    for schema_word in ["\"properties\"", "\"required\"", "\"type\""] {
        assert!(!section.contains(schema_word), "no schema: {section}");
    }
    // A keyword intent gets every tool of that service, still level 1.
    let by_kw = b
        .prompt_section(&chain.recognize("帮我回显"))
        .await
        .unwrap();
    assert!(by_kw.contains("- misb__add: Echo and arithmetic for tests.\n"));
    assert!(!by_kw.contains("\"properties\""));
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m3_non_mcp_intent_injects_nothing() {
    let b = started(vec![own("misb", &[])]).await;
    for intent in [Intent::Normal, Intent::Memory, Intent::Hitl] {
        assert_eq!(b.prompt_section(&intent).await, None);
    }
    let chain = IntentChain::standard(b.recognizer().await);
    assert_eq!(b.prompt_section(&chain.recognize("你好")).await, None);
    stop_and_check(&b, "misb").await;
}

// ------------------------------------------------ M3 in the request: the MCP tools a request shows

fn turn(session: &str, text: &str, round: usize) -> TurnInfo {
    TurnInfo::new(text).with_session(session).with_round(round)
}

fn spec_names(specs: &[ToolSpec]) -> Vec<&str> {
    specs.iter().map(|s| &*s.name).collect()
}

/// What the dispatcher does when the model calls the describe tool in `session`.
async fn describe_in(
    b: &McpBridge,
    session: &str,
    tool: &str,
) -> Result<Value, toolwright_core::ToolError> {
    ToolProvider::call(
        b,
        DESCRIBE_TOOL,
        json!({"name": tool}),
        ToolContext::new("d1").with_session(session),
    )
    .await
    .map(|o| o.value)
}

#[tokio::test]
async fn m3_advertised_has_no_mcp_tool_without_an_mcp_intent() {
    let b = started(vec![own("misb", &[]).with_trigger_keywords(["回显"])]).await;
    assert!(!ToolProvider::list(&b).await.is_empty(), "the tools route");
    for text in ["你好", "请记住我喜欢喝茶", "我要转人工", "call me later"] {
        for round in [0, 1] {
            assert_eq!(
                ToolProvider::advertised(&b, &turn("s", text, round)).await,
                vec![],
                "{text}"
            );
        }
    }
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m3_advertised_has_only_the_describe_tool_for_an_mcp_intent() {
    let b = started(vec![own("misb", &[]).with_trigger_keywords(["回显"])]).await;
    for text in ["用 echo 工具 说你好", "帮我回显", "call the add tool"] {
        let shown = ToolProvider::advertised(&b, &turn("s", text, 0)).await;
        assert_eq!(spec_names(&shown), [DESCRIBE_TOOL], "{text}");
        assert_eq!(shown[0].parameters["required"], json!(["name"]));
    }
    // No running service: no MCP tool at all, even for an MCP intent.
    b.stop("misb").await.unwrap();
    assert_eq!(
        ToolProvider::advertised(&b, &turn("s", "用 echo 工具 说你好", 0)).await,
        vec![]
    );
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m3_described_tool_is_advertised_for_the_rest_of_the_turn() {
    let b = started(vec![own("misb", &[])]).await;
    let ask = "用 echo 工具 说你好";
    let shown = |session: &'static str, text: &'static str, round: usize| {
        let b = b.clone();
        async move {
            let specs = ToolProvider::advertised(&b, &turn(session, text, round)).await;
            specs
                .into_iter()
                .map(|s| s.name.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(shown("s1", ask, 0).await, [DESCRIBE_TOOL]);
    // The model asks for echo's details (by its bare name): level 2, the server's own text.
    let d = describe_in(&b, "s1", "echo").await.unwrap();
    assert_eq!(
        d["description"],
        "Echoes the message back. Useful to test a round trip."
    );
    // The next requests of this turn carry exactly that tool's full spec.
    let next = ToolProvider::advertised(&b, &turn("s1", ask, 1)).await;
    assert_eq!(spec_names(&next), [DESCRIBE_TOOL, "misb__echo"]);
    assert_eq!(next[1].parameters["required"], json!(["message"]));
    assert_eq!(shown("s1", ask, 2).await, [DESCRIBE_TOOL, "misb__echo"]);
    // Another session's turn is not affected.
    assert_eq!(shown("s2", ask, 1).await, [DESCRIBE_TOOL]);
    // A describe that fails (no such tool) adds nothing.
    assert!(describe_in(&b, "s2", "nope").await.is_err());
    assert_eq!(shown("s2", ask, 1).await, [DESCRIBE_TOOL]);
    // A new turn starts without it: round 0 again, or another text.
    assert_eq!(shown("s1", ask, 0).await, [DESCRIBE_TOOL]);
    describe_in(&b, "s1", "misb__echo").await.unwrap();
    assert_eq!(shown("s1", ask, 1).await, [DESCRIBE_TOOL, "misb__echo"]);
    assert_eq!(shown("s1", "调用 add", 1).await, [DESCRIBE_TOOL]);
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m3_full_schema_reachable_when_calling() {
    let b = started(vec![own("misb", &[])]).await;
    // Level 2 on demand: the describe step.
    let d = b
        .call(DESCRIBE_TOOL, json!({"name": "misb__add"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(d["parameters"]["required"], json!(["a", "b"]));
    // A call with missing arguments answers with the schema.
    let e = b
        .call("misb__add", json!({"a": 1}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::InvalidArguments);
    assert!(
        e.message.contains("`b`") && e.message.contains("\"required\""),
        "{}",
        e.message
    );
    stop_and_check(&b, "misb").await;
}

// ---------------------------------------------------------------- M4 execution

#[tokio::test]
async fn m4_call_runs_over_stdio_and_result_is_injected() {
    let b = started(vec![own("misb", &[])]).await;
    let v = b
        .call("misb__echo", json!({"message": "你好"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(v, json!("Echo: 你好"));
    // Structured content comes back as JSON.
    let s = b
        .call("misb__add", json!({"a": 2, "b": 3.5}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(s, json!({"sum": 5.5}));
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_service_not_running_gives_friendly_message() {
    let b = started(vec![own("misb", &[])]).await;
    stop_and_check(&b, "misb").await;
    let e = b
        .call("misb__echo", json!({"message": "x"}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::Unavailable);
    assert!(
        e.message.contains("not running") && e.message.contains("misb"),
        "{}",
        e.message
    );
    // Start again: the conversation goes on.
    b.start("misb").await.unwrap();
    assert_eq!(
        b.call("misb__echo", json!({"message": "y"}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("Echo: y")
    );
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_timeout_ends_the_call_and_the_server_stays_up() {
    let cfg = own("misb", &[]).with_call_timeout(Duration::from_millis(400));
    let b = started(vec![cfg]).await;
    let e = b
        .call("misb__sleep", json!({"ms": 5000}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::Timeout);
    assert!(e.message.contains("timed out"), "{}", e.message);
    // A slow tool on a responsive server: the server stays running, the next call works.
    assert_eq!(b.status("misb").unwrap(), ServiceStatus::Running);
    assert_eq!(
        b.call("misb__ping", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("pong")
    );
    stop_and_check(&b, "misb").await;
}

/// Speed at the floor: a stdio call is written by the caller itself, beside rmcp's
/// service task — the server receives the bridge's own request id — and a call dropped at its
/// timeout still reaches the server as `notifications/cancelled` for that id (the server's
/// handler sees its cancellation token fire).
#[tokio::test]
async fn m4_stdio_calls_go_straight_to_the_pipe_and_a_timed_out_one_is_cancelled_at_the_server() {
    let cfg = own("misb", &[]).with_call_timeout(Duration::from_millis(400));
    let b = started(vec![cfg]).await;
    let id = b
        .call("misb__request_id", json!({}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(
        id.as_str().is_some_and(|s| s.starts_with("mcp-bridge-")),
        "the server saw request id {id}"
    );
    assert_eq!(
        b.call("misb__cancelled", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("0")
    );
    let e = b
        .call("misb__sleep", json!({"ms": 5000}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::Timeout);
    let mut cancelled = json!("0");
    for _ in 0..100 {
        cancelled = b
            .call("misb__cancelled", json!({}))
            .await
            .map(|o| o.value)
            .unwrap();
        if cancelled == json!("1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        cancelled,
        json!("1"),
        "the server never saw the cancellation"
    );
    assert_eq!(b.status("misb").unwrap(), ServiceStatus::Running);
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_hung_server_is_killed_and_marked_error() {
    let cfg = own("misb", &[]).with_call_timeout(Duration::from_millis(500));
    let b = started(vec![cfg]).await;
    let pid = b.pid("misb").unwrap();
    let e = b
        .call("misb__freeze", json!({}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::Timeout);
    assert!(e.message.contains("stopped answering"), "{}", e.message);
    match b.status("misb").unwrap() {
        ServiceStatus::Error(why) => assert!(why.contains("did not answer"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_group_gone(pid).await;
    // Recovery: the next call that needs it restarts it, as a new process group.
    let next = b
        .call("misb__echo", json!({"message": "x"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(next, json!("Echo: x"));
    assert_ne!(b.pid("misb").unwrap(), pid);
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_crash_mid_call_is_reported_and_status_is_error() {
    let b = started(vec![own("misb", &[])]).await;
    let pid = b.pid("misb").unwrap();
    let e = b
        .call("misb__crash", json!({}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::Crashed);
    assert!(e.message.contains("exited"), "{}", e.message);
    match b.status("misb").unwrap() {
        ServiceStatus::Error(why) => assert!(why.contains("exit status: 3"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_group_gone(pid).await;
    // Restart brings it back.
    b.restart("misb").await.unwrap();
    assert_eq!(
        b.call("misb__ping", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("pong")
    );
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_garbage_on_stdout_breaks_the_protocol_clearly() {
    let b = started(vec![own("misb", &[])]).await;
    let pid = b.pid("misb").unwrap();
    let e = b
        .call("misb__garbage", json!({}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    // Crashed, not Timeout: the violation ended the call, not its 10 s limit.
    assert_eq!(e.kind, ToolErrorKind::Crashed);
    assert!(
        e.message.contains("not a JSON-RPC message"),
        "{}",
        e.message
    );
    assert!(matches!(b.status("misb").unwrap(), ServiceStatus::Error(_)));
    assert_group_gone(pid).await;
}

#[tokio::test]
async fn m4_garbage_during_startup_fails_the_start() {
    init_tracing();
    let b = McpBridge::new();
    b.register(own("misb", &["--garbage-at-start"])).unwrap();
    let e = b.start("misb").await.unwrap_err();
    assert!(matches!(e, BridgeError::StartFailed { .. }));
    match b.status("misb").unwrap() {
        ServiceStatus::Error(why) => assert!(why.contains("not a JSON-RPC message"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(b.pid("misb").is_none());
}

/// A huge result reaches the model cut once, by the dispatcher — the one cap every tool source
/// shares (`toolwright_core::cap_result`), with its one note; the bridge returns the result whole.
#[tokio::test]
async fn m4_huge_result_is_capped_once_by_the_dispatcher() {
    let b = started(vec![own("misb", &[])]).await;
    let ten_mib = 10 * 1024 * 1024;
    let whole = b
        .call("misb__huge", json!({"bytes": ten_mib}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(whole.as_str().unwrap().len(), ten_mib);
    let d = toolwright_tool_system::Dispatcher::new().with_provider(Arc::new(b.clone()));
    let out = d
        .dispatch(
            "misb__huge",
            json!({"bytes": ten_mib}),
            toolwright_core::ToolContext::new("c1"),
        )
        .await;
    assert!(out.is_ok() && out.truncated);
    assert!(out.content.len() <= toolwright_core::DEFAULT_MAX_RESULT_BYTES);
    let tail = &out.content[out.content.len() - 160..];
    assert_eq!(
        out.content.matches("truncated").count(),
        1,
        "one note: {tail}"
    );
    assert!(out.content.contains("10485760 bytes"), "{tail}");
    assert_eq!(b.status("misb").unwrap(), ServiceStatus::Running);
    assert_eq!(
        b.call("misb__ping", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("pong")
    );
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_slow_start_within_the_limit_runs() {
    let b = started(vec![own("slow", &["--startup-delay-ms", "1200"])]).await;
    assert_eq!(b.status("slow").unwrap(), ServiceStatus::Running);
    assert_eq!(
        b.call("slow__ping", json!({}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("pong")
    );
    stop_and_check(&b, "slow").await;
}

/// Pids whose command line contains `needle` (NUL-separated arguments).
fn pids_with_cmdline(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(c) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&c).contains(needle)
        {
            out.push(pid);
        }
    }
    out
}

#[tokio::test]
async fn m4_slow_start_past_the_limit_is_an_error_and_leaves_nothing() {
    init_tracing();
    let b = McpBridge::new();
    b.register(
        own(
            "slow",
            &["--spawn-grandchild", "--startup-delay-ms", "30007"],
        )
        .with_startup_timeout(Duration::from_millis(800)),
    )
    .unwrap();
    let watcher = tokio::spawn(async {
        for _ in 0..100 {
            if let Some(pid) = pids_with_cmdline("30007").first() {
                return Some(*pid);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    });
    let e = b.start("slow").await.unwrap_err();
    assert!(e.to_string().contains("800 ms"), "{e}");
    assert!(matches!(b.status("slow").unwrap(), ServiceStatus::Error(_)));
    let pid = watcher.await.unwrap().expect("the server was seen running");
    assert_group_gone(pid).await;
    assert!(
        pids_with_cmdline("30007")
            .iter()
            .all(|p| live_in_group(*p).is_empty())
    );
}

#[tokio::test]
async fn m4_stop_leaves_no_process_behind_including_grandchildren() {
    let b = started(vec![own("npx-like", &["--spawn-grandchild"])]).await;
    let pid = b.pid("npx-like").unwrap();
    // The server and its `sleep 600` child share the group.
    let deadline = Instant::now() + Duration::from_secs(3);
    while live_in_group(pid).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "grandchild not seen: {:?}",
            live_in_group(pid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_and_check(&b, "npx-like").await;
    assert!(live_in_group(pid).is_empty());
}

#[tokio::test]
async fn m4_dropping_the_bridge_kills_the_group() {
    let b = started(vec![own("dropped", &["--spawn-grandchild"])]).await;
    let pid = b.pid("dropped").unwrap();
    drop(b);
    assert_group_gone(pid).await;
}

#[tokio::test]
async fn m4_is_error_result_becomes_failed_with_server_text() {
    let b = started(vec![own("misb", &[])]).await;
    let e = b
        .call("misb__fail", json!({}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::Failed);
    assert!(e.message.contains("the widget is broken"), "{}", e.message);
    assert_eq!(e.to_model_json()["success"], false);
    assert_eq!(b.status("misb").unwrap(), ServiceStatus::Running);
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_child_gets_only_its_configured_environment() {
    // SAFETY-free: set_var is unsafe in edition 2024, so the secret is passed via a var that the
    // test runner already has: HOME is inherited on purpose, CARGO_* are not.
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok() || std::env::var("CARGO").is_ok());
    let cfg = own("misb", &[]).with_env("MY_SETTING", "42");
    let b = started(vec![cfg]).await;
    let get = |n: &'static str| {
        let b = b.clone();
        async move {
            b.call("misb__env", json!({"name": n}))
                .await
                .map(|o| o.value)
                .unwrap()
        }
    };
    assert_eq!(get("MY_SETTING").await, json!("42"));
    assert_ne!(get("PATH").await, json!("<unset>"));
    assert_eq!(get("CARGO").await, json!("<unset>"));
    assert_eq!(get("CARGO_MANIFEST_DIR").await, json!("<unset>"));
    assert_eq!(get("RUST_TEST_THREADS").await, json!("<unset>"));
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m4_unknown_command_is_a_start_error_not_a_panic() {
    init_tracing();
    let b = McpBridge::new();
    b.register(ServiceConfig::new("nope", "/nonexistent/mcp-server"))
        .unwrap();
    let e = b.start("nope").await.unwrap_err();
    assert!(e.to_string().contains("cannot run"), "{e}");
    assert!(matches!(b.status("nope").unwrap(), ServiceStatus::Error(_)));
    let c = b
        .call("nope__echo", json!({}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(c.kind, ToolErrorKind::Unavailable);
}

// ---------------------------------------------------------------- M5 configuration

#[tokio::test]
async fn m5_register_update_remove_persist_with_defaults() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    let b = McpBridge::with_config_file(&path).unwrap();
    b.register(own("misb", &[])).unwrap();
    assert!(matches!(
        b.register(own("misb", &[])),
        Err(BridgeError::AlreadyRegistered(_))
    ));
    let info = &b.services()[0];
    assert_eq!(info.config.description(), "misb");
    assert!(info.config.trigger_keywords.is_empty());
    assert_eq!(info.status, ServiceStatus::Stopped);

    b.update(
        "misb",
        ServiceUpdate::default()
            .description("Echo and maths")
            .trigger_keywords(["回显"]),
    )
    .await
    .unwrap();
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["mcpServers"]["misb"]["command"], SERVER.as_str());
    assert_eq!(saved["mcpServers"]["misb"]["description"], "Echo and maths");
    assert_eq!(
        saved["mcpServers"]["misb"]["trigger_keywords"],
        json!(["回显"])
    );

    // A new bridge on the same file sees the same services; the keyword works at once.
    let again = McpBridge::with_config_file(&path).unwrap();
    assert_eq!(again.services()[0].config.description(), "Echo and maths");
    again.start("misb").await.unwrap();
    let intent = IntentChain::standard(again.recognizer().await).recognize("请回显");
    assert!(matches!(&intent, Intent::Mcp(m) if m.service.as_deref() == Some("misb")));
    // The updated description is what level 1 shows for the service's tools.
    assert!(
        again
            .prompt_section(&intent)
            .await
            .unwrap()
            .contains("- misb__echo: Echo and maths\n")
    );
    let pid = again.pid("misb").unwrap();
    again.remove("misb").await.unwrap();
    assert_group_gone(pid).await;
    assert!(again.services().is_empty());
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["mcpServers"], json!({}));
    assert!(matches!(
        again.status("misb"),
        Err(BridgeError::UnknownService(_))
    ));
}

/// M5: the configured description is what level 1 shows for every tool of the service; the
/// server's own text stays at level 2; with none configured, the service name (004's default).
#[tokio::test]
async fn m5_configured_description_is_what_level1_shows() {
    let b = started(vec![
        own("misb", &[])
            .with_description("Echo and maths. Second sentence.")
            .with_trigger_keywords(["回显"]),
        own("plain", &[]).with_trigger_keywords(["朴素"]),
    ])
    .await;
    let chain = IntentChain::standard(b.recognizer().await);
    let section = b
        .prompt_section(&chain.recognize("帮我回显"))
        .await
        .unwrap();
    let misb: Vec<_> = b
        .tools()
        .await
        .into_iter()
        .filter(|t| t.service == "misb")
        .collect();
    assert!(misb.len() > 5);
    for t in &misb {
        let line = format!("- {}: Echo and maths.\n", t.exposed_name);
        assert!(section.contains(&line), "{line} in {section}");
    }
    assert!(!section.contains("Second sentence"), "{section}");
    assert!(!section.contains("Echoes the message back"), "{section}");
    // The server's own text is level 2.
    let d = b
        .call(DESCRIBE_TOOL, json!({"name": "misb__echo"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(
        d["description"],
        "Echoes the message back. Useful to test a round trip."
    );
    // None configured: the service name.
    let plain = b
        .prompt_section(&chain.recognize("朴素一点"))
        .await
        .unwrap();
    assert!(plain.contains("- plain__echo: plain\n"), "{plain}");
    // An update applies at once.
    b.update(
        "plain",
        ServiceUpdate::default().description("Plain tools, configured later."),
    )
    .await
    .unwrap();
    let plain = b
        .prompt_section(&chain.recognize("朴素一点"))
        .await
        .unwrap();
    assert!(
        plain.contains("- plain__echo: Plain tools, configured later.\n"),
        "{plain}"
    );
    stop_and_check(&b, "misb").await;
    stop_and_check(&b, "plain").await;
}

#[tokio::test]
async fn m5_update_of_a_running_service_restarts_it() {
    let b = started(vec![own("misb", &[])]).await;
    let old = b.pid("misb").unwrap();
    b.update("misb", ServiceUpdate::default().env([("MY_SETTING", "7")]))
        .await
        .unwrap();
    assert_group_gone(old).await;
    assert_eq!(
        b.call("misb__env", json!({"name": "MY_SETTING"}))
            .await
            .map(|o| o.value)
            .unwrap(),
        json!("7")
    );
    stop_and_check(&b, "misb").await;
}

// ---------------------------------------------------------------- M6 wire format, through the tool loop

/// Stands in for a model: answers with 004's `tool_call` JSON for each of `calls` in turn (one
/// per round), then replies with every `tool` message it got.
struct Scripted {
    calls: Vec<Value>,
}

#[async_trait]
impl ChatModel for Scripted {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("scripted", false)
    }
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let results: Vec<String> = req
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { name, content, .. } => Some(format!("{name} said: {content}")),
                _ => None,
            })
            .collect();
        let text = match self.calls.get(results.len()) {
            Some(call) => json!({"tool_call": call}).to_string(),
            None => json!({"tool_call": null, "reply": results.join("\n")}).to_string(),
        };
        Ok(ChatResponse::new(text, vec![], FinishReason::Stop, None))
    }
    async fn stream(&self, req: ChatRequest) -> Result<ChatStream, ModelError> {
        Ok(response_stream(self.chat(req).await?))
    }
}

async fn run_turn(
    b: &McpBridge,
    calls: Vec<Value>,
    user: &str,
) -> toolwright_tool_system::LoopOutput {
    let agent = Agent::builder(Scripted { calls })
        .provider(Arc::new(b.clone()))
        .turn_sections(Arc::new(b.clone()))
        .protocol(ProtocolKind::Custom(Arc::new(ToolCallProtocol)))
        .system_prompt("You are helpful.")
        .build()
        .unwrap();
    agent.run("s1", user).await.unwrap()
}

#[tokio::test]
async fn m6_tool_call_answer_runs_and_result_is_a_tool_message() {
    let b = started(vec![own("misb", &[])]).await;
    let out = run_turn(
        &b,
        vec![json!({"name": "misb__echo", "arguments": {"message": "hi"}})],
        "用 echo 工具 说 hi",
    )
    .await;
    let tool_msg = out
        .new_messages
        .iter()
        .find(|m| matches!(m, Message::Tool { .. }))
        .expect("a tool message");
    match tool_msg {
        Message::Tool { name, content, .. } => {
            assert_eq!(name, "misb__echo");
            assert_eq!(content, "Echo: hi");
        }
        _ => unreachable!(),
    }
    assert_eq!(out.answer, "misb__echo said: Echo: hi");
    stop_and_check(&b, "misb").await;
}

#[tokio::test]
async fn m6_failures_become_tool_messages_and_the_conversation_goes_on() {
    let b = started(vec![
        own("misb", &[]).with_call_timeout(Duration::from_millis(400)),
    ])
    .await;
    let pid = b.pid("misb").unwrap();
    // Round 1: a slow tool times out (server stays up). Round 2: the server hangs and is
    // stopped. Round 3: the call that needs it again restarts it (recovery). Then the
    // model answers.
    let out = run_turn(
        &b,
        vec![
            json!({"name": "misb__sleep", "arguments": {"ms": 3000}}),
            json!({"name": "misb__freeze", "arguments": {}}),
            json!({"name": "misb__echo", "arguments": {"message": "x"}}),
        ],
        "调用 sleep",
    )
    .await;
    let tool_msgs: Vec<&Message> = out
        .new_messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .collect();
    assert_eq!(tool_msgs.len(), 3, "{:?}", out.new_messages);
    let lines: Vec<&str> = out.answer.lines().collect();
    assert!(
        lines[0].starts_with("misb__sleep said:") && lines[0].contains("timed out"),
        "{}",
        out.answer
    );
    assert!(lines[1].contains("stopped answering"), "{}", out.answer);
    assert!(
        lines[2].starts_with("misb__echo said:") && lines[2].contains("Echo: x"),
        "{}",
        out.answer
    );
    assert_group_gone(pid).await;
    stop_and_check(&b, "misb").await;
}

/// M3 through the loop over real HTTP: the bridge, plugged in as the agent's turn-sections hook,
/// puts the level-1 section in the system message of a turn with an MCP intent, and nothing in
/// a turn without one.
#[tokio::test]
async fn m3_level1_section_reaches_the_request_only_for_an_mcp_intent() {
    let b = started(vec![own("misb", &[]).with_description(MISB_DESCRIPTION)]).await;
    let server = testkit::ScriptedServer::start().await;
    server.push(testkit::Reply::text("I could use misb__echo."));
    server.push(testkit::Reply::text("Hello!"));
    let agent = common::agent_over_http(&server, &b);
    agent.run("s", "用 echo 工具 说你好").await.unwrap();
    agent.run("s", "你好").await.unwrap();
    let system = |i: usize| {
        server.requests()[i].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let with = system(0);
    assert!(
        with.contains("- misb__echo: Echo and arithmetic for tests."),
        "{with}"
    );
    assert!(!with.contains("\"properties\""), "level 1 only: {with}");
    let without = system(1);
    assert!(
        !without.contains("misb__echo"),
        "no MCP section for a normal turn: {without}"
    );
    stop_and_check(&b, "misb").await;
}

/// M4 through the dispatcher: a service that was already stopped when the turn began still
/// answers its tools' calls with the friendly "not running" message, not "Tool not found".
#[tokio::test]
async fn m4_stopped_service_gives_friendly_message_through_the_dispatcher() {
    let b = started(vec![own("misb", &[])]).await;
    b.stop("misb").await.unwrap();
    let d = toolwright_tool_system::Dispatcher::new().with_provider(Arc::new(b.clone()));
    let out = d
        .dispatch(
            "misb__echo",
            json!({"message": "hi"}),
            toolwright_core::ToolContext::new("c1"),
        )
        .await;
    assert_eq!(
        out.error,
        Some(ToolErrorKind::Unavailable),
        "{}",
        out.content
    );
    assert!(!out.content.contains("Tool not found"), "{}", out.content);
    stop_and_check(&b, "misb").await;
}

/// The dispatcher validates a call's arguments before the bridge sees it; the bridge words the
/// error (`ToolProvider::invalid_arguments`) with the tool's full schema, which the model may
/// never have seen under level-1 descriptions. Through a real run: the scripted OpenAI server,
/// the `Agent` loop, our MCP server over stdio.
#[tokio::test]
async fn m4_invalid_arguments_under_the_agent_carry_the_full_schema() {
    let b = started(vec![own("misb", &[])]).await;
    let server = testkit::ScriptedServer::start().await;
    server.push(testkit::Reply::tool_calls(&[
        ("call_1", "misb__add", r#"{"a": "one", "b": 2}"#),
        ("call_2", DESCRIBE_TOOL, "{}"),
    ]));
    server.push(testkit::Reply::text("I need numbers."));
    let agent = common::agent_over_http(&server, &b);
    let out = agent.run("s", "调用 add 算 one 加 2").await.unwrap();
    let results: Vec<(String, Value)> = out
        .new_messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { name, content, .. } => {
                Some((name.clone(), serde_json::from_str(content).unwrap()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{:?}", out.new_messages);
    let (name, add) = &results[0];
    assert_eq!(name, "misb__add");
    assert_eq!(add["success"], false);
    let e = add["error"].as_str().unwrap();
    assert!(
        e.starts_with("Invalid arguments for misb__add: ") && e.contains("/a"),
        "the validator's finding: {e}"
    );
    assert!(e.contains("The tool was not run"), "{e}");
    assert!(
        e.contains(r#""properties":{"a":{"type":"number"},"b":{"type":"number"}}"#)
            && e.contains(r#""required":["a","b"]"#),
        "the full schema: {e}"
    );
    let (name, describe) = &results[1];
    assert_eq!(name, DESCRIBE_TOOL);
    let e = describe["error"].as_str().unwrap();
    assert!(e.contains(r#""required":["name"]"#), "{e}");
    // That is what reached the provider in the next request.
    assert_eq!(
        common::tool_results_sent(&server, 1),
        [add.clone(), describe.clone()]
    );
    stop_and_check(&b, "misb").await;
}
