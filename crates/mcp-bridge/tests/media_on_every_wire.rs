//! A real MCP server's picture on every provider wire: server-everything's `get-tiny-image`
//! (npm, over stdio) called by an agent on each native backend, whose next request is read
//! off a 127.0.0.1 server replaying that provider's documented event sequence. The image
//! goes inside the tool result where the wire carries one (Anthropic's `tool_result`,
//! Gemini's `functionResponse.parts`, Responses' `function_call_output` list); Chat
//! Completions lowers it (`server_everything.rs`). Fails, never skips, when server-everything
//! is not installed: `cargo xtask test` installs it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use serde_json::Value;
use testkit::{WireReply, WireServer};
use toolwright_core::ChatModel;
use toolwright_mcp_bridge::McpBridge;
use toolwright_model_gateway::anthropic::{AnthropicConfig, AnthropicModel};
use toolwright_model_gateway::gemini::{GeminiConfig, GeminiModel};
use toolwright_model_gateway::{OpenAiConfig, OpenAiResponsesModel};

const TOOL: &str = "everything__get-tiny-image";
/// The first bytes of a PNG, base64.
const PNG_BASE64: &str = "iVBORw0KGgo";

async fn bridge() -> McpBridge {
    common::init_tracing();
    let b = McpBridge::new();
    b.register(common::everything("everything")).unwrap();
    b.start("everything").await.unwrap();
    b
}

/// One run: the model asks for the picture, then answers; returns the second request's body.
async fn second_request(
    model: impl ChatModel + 'static,
    server: &WireServer,
    bridge: &McpBridge,
) -> Value {
    let agent = toolwright_tool_system::Agent::builder(model)
        .provider(Arc::new(bridge.clone()))
        .system_prompt("You are helpful.")
        .build()
        .unwrap();
    let out = agent.run("s", "show me the tiny image").await.unwrap();
    assert_eq!(out.answer, "It is the MCP logo.");
    assert_eq!(server.requests().len(), 2);
    server.body(1)
}

fn sse(events: &[(&str, String)]) -> WireReply {
    let mut body = String::new();
    for (name, data) in events {
        if !name.is_empty() {
            body.push_str(&format!("event: {name}\n"));
        }
        body.push_str(&format!("data: {data}\n\n"));
    }
    WireReply::sse(body)
}

// ---------------------------------------------------------------- Anthropic Messages

fn anthropic_turn(blocks: &[(&str, &str)], stop_reason: &str) -> WireReply {
    let mut events = vec![(
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#.to_owned(),
    )];
    for (i, (start, delta)) in blocks.iter().enumerate() {
        events.push((
            "content_block_start",
            format!(r#"{{"type":"content_block_start","index":{i},"content_block":{start}}}"#),
        ));
        events.push((
            "content_block_delta",
            format!(r#"{{"type":"content_block_delta","index":{i},"delta":{delta}}}"#),
        ));
        events.push((
            "content_block_stop",
            format!(r#"{{"type":"content_block_stop","index":{i}}}"#),
        ));
    }
    events.push((
        "message_delta",
        format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{{"output_tokens":6}}}}"#
        ),
    ));
    events.push(("message_stop", r#"{"type":"message_stop"}"#.to_owned()));
    sse(&events)
}

#[tokio::test]
async fn the_picture_goes_back_to_anthropic_inside_the_tool_result() {
    let b = bridge().await;
    let server = WireServer::start().await;
    server.push(anthropic_turn(
        &[(
            &format!(r#"{{"type":"tool_use","id":"toolu_01","name":"{TOOL}","input":{{}}}}"#),
            r#"{"type":"input_json_delta","partial_json":"{}"}"#,
        )],
        "tool_use",
    ));
    server.push(anthropic_turn(
        &[(
            r#"{"type":"text","text":""}"#,
            r#"{"type":"text_delta","text":"It is the MCP logo."}"#,
        )],
        "end_turn",
    ));
    let model = AnthropicModel::new(
        AnthropicConfig::new("claude-sonnet-4-5")
            .with_base_url(server.url())
            .with_api_key("sk-ant-test"),
    )
    .unwrap();
    let body = second_request(model, &server, &b).await;
    let result = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|c| c["type"] == "tool_result")
        .expect("a tool_result block");
    assert_eq!(result["tool_use_id"], "toolu_01");
    let image = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap_or_else(|| panic!("an image in the tool result: {result}"));
    assert_eq!(image["source"]["type"], "base64");
    assert_eq!(image["source"]["media_type"], "image/png");
    assert!(
        image["source"]["data"]
            .as_str()
            .unwrap()
            .starts_with(PNG_BASE64)
    );
    b.stop("everything").await.unwrap();
}

// ---------------------------------------------------------------- Gemini

#[tokio::test]
async fn the_picture_goes_back_to_gemini_inside_the_function_response() {
    let b = bridge().await;
    let server = WireServer::start().await;
    let usage =
        r#""usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":5,"totalTokenCount":17}"#;
    server.push(sse(&[(
        "",
        format!(
            r#"{{"candidates":[{{"content":{{"parts":[{{"functionCall":{{"name":"{TOOL}","args":{{}}}}}}],"role":"model"}},"finishReason":"STOP","index":0}}],{usage}}}"#
        ),
    )]));
    server.push(sse(&[(
        "",
        format!(
            r#"{{"candidates":[{{"content":{{"parts":[{{"text":"It is the MCP logo."}}],"role":"model"}},"finishReason":"STOP","index":0}}],{usage}}}"#
        ),
    )]));
    let model = GeminiModel::new(
        GeminiConfig::new("gemini-2.5-flash")
            .with_base_url(format!("{}/v1beta", server.url()))
            .with_api_key("test-key"),
    )
    .unwrap();
    let body = second_request(model, &server, &b).await;
    let response = body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .find_map(|p| p.get("functionResponse").cloned())
        .expect("a functionResponse part");
    assert_eq!(response["name"], TOOL);
    let inline = &response["parts"][0]["inlineData"];
    assert_eq!(inline["mimeType"], "image/png", "{response}");
    assert!(inline["data"].as_str().unwrap().starts_with(PNG_BASE64));
    b.stop("everything").await.unwrap();
}

// ---------------------------------------------------------------- OpenAI Responses

fn responses_turn(item: &str, output_text: Option<&str>) -> WireReply {
    let response = |status: &str, output: &str| {
        format!(
            r#"{{"id":"resp_1","object":"response","created_at":1741290958,"status":"{status}","error":null,"incomplete_details":null,"model":"gpt-5.4","output":[{output}],"parallel_tool_calls":true,"store":false,"tool_choice":"auto","tools":[],"usage":{{"input_tokens":12,"input_tokens_details":{{"cached_tokens":0}},"output_tokens":6,"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":18}}}}"#
        )
    };
    let mut events = vec![
        (
            "response.created",
            format!(
                r#"{{"type":"response.created","response":{},"sequence_number":0}}"#,
                response("in_progress", "")
            ),
        ),
        (
            "response.output_item.added",
            format!(
                r#"{{"type":"response.output_item.added","output_index":0,"item":{item},"sequence_number":1}}"#
            ),
        ),
    ];
    if let Some(text) = output_text {
        events.push((
            "response.output_text.delta",
            format!(
                r#"{{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"{text}","sequence_number":2}}"#
            ),
        ));
    }
    events.push((
        "response.output_item.done",
        format!(
            r#"{{"type":"response.output_item.done","output_index":0,"item":{item},"sequence_number":3}}"#
        ),
    ));
    events.push((
        "response.completed",
        format!(
            r#"{{"type":"response.completed","response":{},"sequence_number":4}}"#,
            response("completed", item)
        ),
    ));
    sse(&events)
}

#[tokio::test]
async fn the_picture_goes_back_to_responses_inside_the_function_call_output() {
    let b = bridge().await;
    let server = WireServer::start().await;
    server.push(responses_turn(
        &format!(
            r#"{{"id":"fc_1","type":"function_call","status":"completed","arguments":"{{}}","call_id":"call_img1","name":"{TOOL}"}}"#
        ),
        None,
    ));
    server.push(responses_turn(
        r#"{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"It is the MCP logo.","annotations":[]}]}"#,
        Some("It is the MCP logo."),
    ));
    let model =
        OpenAiResponsesModel::new(OpenAiConfig::new("gpt-5.4").with_base_url(server.base_url()))
            .unwrap();
    let body = second_request(model, &server, &b).await;
    let output = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("a function_call_output item");
    assert_eq!(output["call_id"], "call_img1");
    let image = output["output"]
        .as_array()
        .unwrap_or_else(|| panic!("the output as a list: {output}"))
        .iter()
        .find(|c| c["type"] == "input_image")
        .unwrap_or_else(|| panic!("an input_image: {output}"));
    assert!(
        image["image_url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("data:image/png;base64,{PNG_BASE64}"))
    );
    b.stop("everything").await.unwrap();
}
