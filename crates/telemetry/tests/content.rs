//! message contents go on spans only when enabled — here they are
//! (`capture_message_content(true)`, what `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`
//! does): the model call's input and output messages and the tool's arguments and result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use opentelemetry::Key;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use toolwright_telemetry::Telemetry;

fn text(span: &SpanData, key: &str) -> String {
    span.attributes
        .iter()
        .find(|kv| kv.key == Key::from(key.to_owned()))
        .map(|kv| kv.value.as_str().into_owned())
        .unwrap_or_else(|| panic!("{} has no {key}", span.name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_carry_message_content_only_when_enabled() {
    let exporter = InMemorySpanExporter::default();
    let telemetry =
        Telemetry::with_exporter(exporter.clone(), "trace-test").capture_message_content(true);
    telemetry.init().unwrap();
    common::run_agent().await;
    telemetry.flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let chats: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "chat scripted-model")
        .collect();
    assert_eq!(chats.len(), 2);
    let input = text(chats[0], "gen_ai.input.messages");
    let messages: serde_json::Value = serde_json::from_str(&input).unwrap();
    assert!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "user" && m["parts"][0]["content"] == common::SECRET_QUESTION),
        "{input}"
    );
    let outputs: Vec<String> = chats
        .iter()
        .map(|c| text(c, "gen_ai.output.messages"))
        .collect();
    assert!(
        outputs.iter().any(|o| o.contains(common::SECRET_ANSWER)),
        "{outputs:?}"
    );

    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool get_weather")
        .unwrap();
    assert!(text(tool, "gen_ai.tool.call.arguments").contains(common::SECRET_ARG));
    assert!(text(tool, "gen_ai.tool.call.result").contains("clear-8842"));
}
