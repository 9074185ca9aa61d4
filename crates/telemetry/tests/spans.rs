//! the spans of a run, as an OpenTelemetry exporter receives them — the tree
//! (run → model calls and tool call), the GenAI semantic-convention attributes, usage and
//! elapsed time in the run's result, and no message text (content capture is off by default).
//! The agent talks to a real HTTP server; the exporter is the SDK's in-memory one (the OTLP
//! path to a real receiver is tests/phoenix.rs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{Key, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use toolwright_telemetry::Telemetry;

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == Key::from(key.to_owned()))
        .map(|kv| &kv.value)
}

fn string(span: &SpanData, key: &str) -> String {
    attr(span, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_else(|| panic!("{} has no {key}: {:?}", span.name, span.attributes))
}

fn int(span: &SpanData, key: &str) -> i64 {
    match attr(span, key) {
        Some(Value::I64(n)) => *n,
        other => panic!("{} {key}: {other:?}", span.name),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_run_model_and_tool_spans_with_genai_attributes_and_no_content() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), "trace-test");
    telemetry.init().unwrap();

    let out = common::run_agent().await;
    assert_eq!(out.answer, common::SECRET_ANSWER);
    let usage = out.usage.expect("the scripted server reports usage");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (20, 10));
    assert!(out.elapsed > std::time::Duration::ZERO);

    telemetry.flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    let find = |name: &str| -> Vec<&SpanData> { spans.iter().filter(|s| s.name == name).collect() };

    let runs = find("invoke_agent");
    assert_eq!(runs.len(), 1, "{names:?}");
    let run = runs[0];
    assert_eq!(run.parent_span_id, SpanId::INVALID, "the run is the root");
    assert_eq!(string(run, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(string(run, "gen_ai.provider.name"), "openai");
    assert_eq!(string(run, "gen_ai.request.model"), "scripted-model");
    assert_eq!(string(run, "gen_ai.conversation.id"), "session-1");
    assert_eq!(int(run, "gen_ai.usage.input_tokens"), 20);
    assert_eq!(int(run, "gen_ai.usage.output_tokens"), 10);

    let chats = find("chat scripted-model");
    assert_eq!(chats.len(), 2, "{names:?}");
    for chat in &chats {
        assert_eq!(chat.parent_span_id, run.span_context.span_id());
        assert_eq!(chat.span_context.trace_id(), run.span_context.trace_id());
        assert_eq!(chat.span_kind, SpanKind::Client);
        assert_eq!(string(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(string(chat, "gen_ai.provider.name"), "openai");
        assert_eq!(int(chat, "gen_ai.usage.input_tokens"), 10);
        assert_eq!(int(chat, "gen_ai.usage.output_tokens"), 5);
    }
    let reasons: Vec<String> = chats
        .iter()
        .map(|c| string(c, "gen_ai.response.finish_reasons"))
        .collect();
    assert!(
        reasons.contains(&r#"["tool_calls"]"#.to_owned()),
        "{reasons:?}"
    );
    assert!(reasons.contains(&r#"["stop"]"#.to_owned()), "{reasons:?}");

    let tools = find("execute_tool get_weather");
    assert_eq!(tools.len(), 1, "{names:?}");
    let tool = tools[0];
    assert_eq!(tool.parent_span_id, run.span_context.span_id());
    assert_eq!(string(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(string(tool, "gen_ai.tool.name"), "get_weather");
    assert_eq!(string(tool, "gen_ai.tool.call.id"), "call_1");
    assert!(attr(tool, "error.type").is_none());
    assert!(!matches!(tool.status, Status::Error { .. }));

    // Content capture is off: nothing of the conversation is on any span.
    for span in &spans {
        let dump = format!("{:?} {:?} {:?}", span.name, span.attributes, span.events);
        for secret in [common::SECRET_ARG, "oracle-5512", "clear-8842"] {
            assert!(!dump.contains(secret), "{secret} leaked into {dump}");
        }
        assert!(attr(span, "gen_ai.input.messages").is_none());
        assert!(attr(span, "gen_ai.tool.call.arguments").is_none());
    }
}
