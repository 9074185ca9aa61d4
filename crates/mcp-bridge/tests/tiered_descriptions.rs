//! M3 as a user composes it: an `Agent` with a built-in tool and an `McpBridge` over two
//! real MCP processes (server-everything from npm and this crate's own server), talking to the
//! OpenAI-compatible backend over real HTTP. Three turns in each call protocol — an MCP-intent
//! turn, a turn that asks for one tool's details and calls it, a normal turn — and for every
//! request the test reads the body the provider received: which tool names and which full
//! schemas it carries, and how many tokens (o200k) its tool part takes, against "every full
//! schema every turn".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::search::{answer, call, request_parts, tokens};
use common::{everything, init_tracing, own};
use serde_json::{Value, json};
use testkit::ScriptedServer;
use toolwright_core::ToolProvider;
use toolwright_mcp_bridge::{DESCRIBE_TOOL, McpBridge};
use toolwright_tool_system::{Agent, FnTool, ProtocolKind};

const EVERYTHING_DESCRIPTION: &str = "The MCP reference test server: echo, sums, samples.";
const MISB_DESCRIPTION: &str = "Echo and arithmetic for tests.";
const ECHO: &str = "everything__echo";

async fn bridge() -> McpBridge {
    init_tracing();
    let b = McpBridge::new();
    b.register(everything("everything").with_description(EVERYTHING_DESCRIPTION))
        .unwrap();
    b.register(own("misb", &[]).with_description(MISB_DESCRIPTION))
        .unwrap();
    b.start("everything").await.unwrap();
    b.start("misb").await.unwrap();
    b
}

fn clock() -> FnTool {
    FnTool::new(
        "get_time",
        "The current time",
        json!({"type": "object", "properties": {"zone": {"type": "string"}}}),
        |_, _| async { Ok(json!("12:00")) },
    )
}

/// One request as the provider received it.
struct Sent {
    /// Names in the request's `tools` field.
    bound: Vec<String>,
    /// The system message.
    system: String,
    /// The tool part: the `tools` field and the system message's tool and MCP sections.
    tool_text: String,
}

fn sent(server: &ScriptedServer) -> Vec<Sent> {
    server
        .requests()
        .iter()
        .map(|r| {
            // Everything after the base prompt is tool description (the protocol's section
            // and the bridge's level-1 section).
            let (bound, system, tool_text) = request_parts(&r.body);
            Sent {
                bound,
                system,
                tool_text,
            }
        })
        .collect()
}

/// Runs the three turns in `protocol` and checks each request; returns the tool-part tokens
/// of each request and of "every full schema every turn".
async fn three_turns(protocol: ProtocolKind) -> (Vec<usize>, usize) {
    let b = bridge().await;
    let server = ScriptedServer::start().await;
    let model = toolwright_model_gateway::OpenAiModel::new(
        toolwright_model_gateway::OpenAiConfig::new("gpt-4o").with_base_url(server.base_url()),
    )
    .unwrap();
    let agent = Agent::builder(model)
        .tool(clock())
        .provider(Arc::new(b.clone()))
        .turn_sections(Arc::new(b.clone()))
        .system_prompt("You are helpful.")
        .protocol(protocol.clone())
        .build()
        .unwrap();
    let p = &protocol;

    // Turn 1: an MCP intent; the model answers without a call.
    server.push(answer(p, "I can echo with everything__echo."));
    agent
        .run("s", "Can you use the echo tool to repeat a word?")
        .await
        .unwrap();
    // Turn 2: the model asks for echo's details (level 2), then calls it, then answers.
    server.push(call(p, "c1", DESCRIBE_TOOL, &json!({"name": ECHO})));
    server.push(call(p, "c2", ECHO, &json!({"message": "hello"})));
    server.push(answer(p, "It said: hello."));
    let out = agent
        .run("s", "Use the echo tool to say hello")
        .await
        .unwrap();
    assert_eq!(out.answer, "It said: hello.");
    // Turn 3: a normal turn.
    server.push(answer(p, "You're welcome!"));
    agent.run("s", "Thanks, that is all.").await.unwrap();

    let reqs = sent(&server);
    assert_eq!(reqs.len(), 5, "{protocol:?}: 1 + 3 + 1 requests");
    let native = matches!(protocol, ProtocolKind::Native);
    let tag = matches!(protocol, ProtocolKind::Tag);
    let echo_schema_marker = "Message to echo"; // echo's parameter description: level 2 only
    for (i, r) in reqs.iter().enumerate() {
        let turn_of_mcp = i < 4;
        let described = i == 2 || i == 3;
        // Built-in tools are unaffected: shown in every request.
        if native || tag {
            assert!(
                r.bound.contains(&"get_time".to_string()),
                "{protocol:?} #{i}"
            );
        }
        assert!(r.tool_text.contains("get_time"), "{protocol:?} #{i}");
        // Level-1 lines in the prompt for an MCP intent, nothing of MCP otherwise.
        assert_eq!(
            r.system
                .contains(&format!("- {ECHO}: {EVERYTHING_DESCRIPTION}")),
            turn_of_mcp,
            "{protocol:?} #{i} level-1 line (M5: the configured description): {}",
            r.system
        );
        assert_eq!(
            r.tool_text.contains(DESCRIBE_TOOL),
            turn_of_mcp,
            "{protocol:?} #{i}"
        );
        // No full MCP schema until the model asked; then exactly that one.
        assert_eq!(
            r.tool_text.contains(echo_schema_marker),
            described,
            "{protocol:?} #{i} echo's full schema: {}",
            r.tool_text
        );
        assert!(
            !r.tool_text.contains("everything__get-sum\""),
            "{protocol:?} #{i}: no other MCP tool is bound or described in full"
        );
        if native || tag {
            let mcp_bound: Vec<&String> = r.bound.iter().filter(|n| n.contains("__")).collect();
            if described {
                assert_eq!(mcp_bound, vec![ECHO], "{protocol:?} #{i}");
            } else {
                assert!(mcp_bound.is_empty(), "{protocol:?} #{i}: {mcp_bound:?}");
            }
        } else {
            assert!(
                r.bound.is_empty(),
                "{protocol:?} #{i}: the JSON protocol binds nothing"
            );
        }
    }
    // The echo call ran on the real server and its result reached the model.
    let last_of_turn_2 = &server.requests()[3].body["messages"];
    assert!(
        last_of_turn_2.to_string().contains("hello"),
        "{protocol:?}: {last_of_turn_2}"
    );

    // "Every full schema every turn": all tools' full specs in each request.
    let mut all = vec![toolwright_tool_system::to_openai_tool(&clock_spec())];
    all.extend(
        b.list()
            .await
            .iter()
            .map(toolwright_tool_system::to_openai_tool),
    );
    let everything_every_turn = tokens(&Value::Array(all).to_string());
    let counts = reqs.iter().map(|r| tokens(&r.tool_text)).collect();
    for name in ["everything", "misb"] {
        b.stop(name).await.unwrap();
    }
    (counts, everything_every_turn)
}

fn clock_spec() -> toolwright_core::ToolSpec {
    use toolwright_core::Tool;
    clock().spec()
}

#[tokio::test]
async fn m3_three_turns_native_carry_level1_then_one_full_schema_then_no_mcp_tool() {
    let (counts, full) = three_turns(ProtocolKind::Native).await;
    println!("M3 tokens native: per request {counts:?}; every full schema every turn {full}");
    assert!(counts.iter().all(|&c| c < full), "{counts:?} vs {full}");
}

#[tokio::test]
async fn m3_three_turns_json_decision_carry_level1_then_one_full_schema_then_no_mcp_tool() {
    let (counts, full) = three_turns(ProtocolKind::JsonDecision).await;
    println!("M3 tokens json: per request {counts:?}; every full schema every turn {full}");
    assert!(counts.iter().all(|&c| c < full), "{counts:?} vs {full}");
}

#[tokio::test]
async fn m3_three_turns_tag_carry_level1_then_one_full_schema_then_no_mcp_tool() {
    let (counts, full) = three_turns(ProtocolKind::Tag).await;
    println!("M3 tokens tag: per request {counts:?}; every full schema every turn {full}");
    assert!(counts.iter().all(|&c| c < full), "{counts:?} vs {full}");
}
