//! Stage 2 demo: output control, offline and deterministic.
//!
//! 1. Spec 000's three-chunk stream fed to the streaming `<tool_action>` parser, printing each
//!    text and each tool action the moment the parser emits it.
//! 2. Spec 002's JSON tool decision read from a chatty, fenced model reply, and a broken
//!    answer turned into the re-prompt text a loop would send back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use output_control::{StreamParser, TagEvent, ToolDecision, parse_tool_decision, validate};
use serde_json::json;

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

fn main() {
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
}
