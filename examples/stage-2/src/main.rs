//! Stage 2 demo: output control.
//!
//! 1. Spec 000's three-chunk stream fed to the streaming `<tool_action>` parser, printing each
//!    text and each tool action the moment the parser emits it.
//! 2. Spec 002's JSON tool decision read from a chatty, fenced model reply, and a broken
//!    answer turned into the re-prompt text a loop would send back.
//! 3. A real model (the configured provider, else the embedded local model) writing 002's
//!    decision for the weather question, streamed, then read and checked by the same parsers.
//!
//! Sections 1 and 2 are fixed texts, so they are deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use serde_json::json;
use toolwright_core::{ChatEvent, ChatRequest, Message, ResponseFormat, ToolSpec};
use toolwright_output_control::{
    StreamParser, TagEvent, ToolDecision, parse_tool_decision, validate,
};

fn show(after: &str, events: Vec<TagEvent>) {
    if events.is_empty() {
        if after == "end of stream" {
            println!("  [{after}] (nothing left over)");
        } else {
            println!("  [{after}] (nothing yet: a possible tag is held back)");
        }
    }
    for event in events {
        match event {
            TagEvent::Text(t) => println!("  [{after}] text   {t:?}"),
            TagEvent::Action(a) => println!(
                "  [{after}] ACTION {} {}  -> the loop runs the tool now",
                a.name,
                serde_json::Value::Object(a.arguments)
            ),
            TagEvent::Unclosed { text } => {
                println!("  [{after}] unclosed call, shown as text, not run: {text:?}")
            }
            TagEvent::Oversized { text } => {
                println!(
                    "  [{after}] oversized tag released as text ({} bytes)",
                    text.len()
                )
            }
            other => println!("  [{after}] {other:?}"),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (model, which) = demo_support::demo_model().await?;
    println!("Stage 2 demo: {which} (for section 3; sections 1 and 2 parse fixed texts)");
    println!();
    println!("== Stage 2: streaming <tool_action> parsing (spec 000) ==");
    let chunks = [
        "思考: 我需要搜索...<tool_action name=\"",
        "vector-search\"><query value=\"test\"",
        "\" /></tool_action>接下来...",
    ];
    let mut parser = StreamParser::new();
    for (i, chunk) in chunks.iter().enumerate() {
        println!("chunk {} arrives: {chunk:?}", i + 1);
        show(&format!("after chunk {}", i + 1), parser.push(chunk));
    }
    show("end of stream", parser.finish());

    println!();
    println!("== A call cut off by the end of the stream is never run ==");
    let mut parser = StreamParser::new();
    show(
        "chunk",
        parser.push("好的，<tool_action name=\"delete\"><path value=\"/tmp"),
    );
    show("end of stream", parser.finish());

    println!();
    println!("== Stage 2: JSON tool decision (spec 002) from a chatty, fenced reply ==");
    let reply = "Sure — I'll look up the weather first.\n\n```json\n{\n  \"tool\": \"get_weather\",\n  \"arguments\": {\"city\": \"北京\"}\n}\n```\n\nI'll tell you as soon as I have it.";
    println!("model reply:\n{reply}\n");
    match parse_tool_decision(reply) {
        Ok(ToolDecision::Call { name, arguments }) => {
            println!("decision: call {name} with {arguments}");
            let schema = json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": false
            });
            match validate(&arguments, &schema) {
                Ok(()) => println!("arguments match the tool's schema"),
                Err(e) => println!("arguments rejected:\n{}", e.for_model()),
            }
        }
        Ok(ToolDecision::Reply { text }) => println!("decision: reply {text:?}"),
        Ok(other) => println!("decision: {other:?}"),
        Err(e) => println!("unusable answer: {e}"),
    }

    println!();
    println!("== A final answer, and two broken ones with the text sent back to the model ==");
    for answer in [
        "{\"tool\": null, \"reply\": \"北京今天晴，25°C。\"}",
        "{\"tool\": \"get_weather\", \"arguments\": [\"北京\"]}",
        "```json\n{\"tool\": \"get_weather\", \"arguments\": {\"city\": \"北京\",}}\n```",
    ] {
        println!("answer: {answer}");
        match parse_tool_decision(answer) {
            Ok(d) => println!("  -> {d:?}"),
            Err(e) => println!("  -> re-prompt: {}", e.for_model()),
        }
    }
    let err = validate(
        &json!({"city": 5, "days": 0}),
        &json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city", "days", "unit"]
        }),
    )
    .unwrap_err();
    println!("\nschema violations as a re-prompt:\n{}", err.for_model());

    println!();
    println!("== A real model writes the decision of 002, read by the same parsers ==");
    let tool_schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
        "additionalProperties": false
    });
    // The decision as a JSON schema: providers that support structured output follow it, and
    // the local model's decoding is constrained by it.
    let decision = json!({
        "type": "object",
        "properties": {"tool": {"const": "get_weather"}, "arguments": tool_schema},
        "required": ["tool", "arguments"],
        "additionalProperties": false
    });
    let request = ChatRequest::new(vec![
        // The system prompt the tool loop's JSON-decision protocol writes (Stage 3).
        Message::system(format!(
            "You are a helpful assistant. Use tools when they help.\n\n{}",
            toolwright_tool_system::protocol::json_decision_prompt(&[ToolSpec::new(
                "get_weather",
                "Get current weather for a city",
                tool_schema.clone()
            )])
        )),
        Message::user("What's the weather in Paris?"),
    ])
    .with_response_format(ResponseFormat::JsonSchema {
        name: "tool_decision".into(),
        schema: decision,
        strict: true,
    });
    println!("user: What's the weather in Paris?");
    let mut stream = model.stream(request).await?;
    let mut text = String::new();
    let mut chunks = 0;
    while let Some(event) = stream.next().await {
        if let ChatEvent::TextDelta(t) = event? {
            chunks += 1;
            text.push_str(&t);
        }
    }
    println!("streamed in {chunks} chunks: {text}");
    match parse_tool_decision(&text) {
        Ok(ToolDecision::Call { name, arguments }) => {
            println!("decision: call {name} with {arguments}");
            match validate(&arguments, &tool_schema) {
                Ok(()) => println!("arguments match the tool's schema"),
                Err(e) => println!("arguments rejected:\n{}", e.for_model()),
            }
        }
        Ok(other) => println!("decision: {other:?}"),
        Err(e) => println!("unusable answer, re-prompt: {}", e.for_model()),
    }
    Ok(())
}
