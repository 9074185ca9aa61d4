//! a model call's span is the child of its run's span, given directly rather
//! than looked up; when a filter leaves the run's span out, the model call's span falls back to
//! the current span (here the application's own request span), as any span would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use toolwright_telemetry::Telemetry;
use tracing::Instrument;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "current_thread")]
async fn a_model_calls_span_falls_back_to_the_current_span_when_the_runs_span_is_filtered_out() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), "filter-test");
    let no_runs = tracing_subscriber::filter::filter_fn(|m| m.name() != "invoke_agent");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer().with_filter(no_runs));
    let _scoped = tracing::subscriber::set_default(subscriber);

    let out = common::run_agent()
        .instrument(tracing::info_span!("handle_request"))
        .await;
    assert_eq!(out.answer, common::SECRET_ANSWER);

    telemetry.flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert!(!names.contains(&"invoke_agent"), "{names:?}");
    let request = spans
        .iter()
        .find(|s| s.name == "handle_request")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(request.parent_span_id, SpanId::INVALID);
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "chat scripted-model")
        .collect();
    assert_eq!(chats.len(), 2, "{names:?}");
    for chat in chats {
        assert_eq!(
            chat.parent_span_id,
            request.span_context.span_id(),
            "a model call under a request whose run span was filtered out"
        );
    }
}
