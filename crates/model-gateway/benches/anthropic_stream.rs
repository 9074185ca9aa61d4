//! The Anthropic backend's stream cost: a 100-event text stream through `AnthropicModel` over
//! HTTP (next to benches/gateway.rs's 100-chunk chat-completions stream, same shape), and the
//! stream parser alone on a long recorded stream (throughput in bytes of SSE).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use serde_json::json;
use toolwright_core::{ChatEvent, ChatModel, ChatRequest, Message, collect_stream};
use toolwright_model_gateway::anthropic::{AnthropicConfig, AnthropicModel, parse_sse_events};

const TEXT_100: &str = "0123456789";

fn event(name: &str, data: &serde_json::Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A text answer streamed one character per `text_delta`, as the API frames it.
fn text_stream(text: &str) -> String {
    let mut s = event(
        "message_start",
        &json!({"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":1}}}),
    );
    s += &event(
        "content_block_start",
        &json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    );
    for c in text.chars() {
        s += &event(
            "content_block_delta",
            &json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":c.to_string()}}),
        );
    }
    s += &event(
        "content_block_stop",
        &json!({"type":"content_block_stop","index":0}),
    );
    s += &event(
        "message_delta",
        &json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":100}}),
    );
    s += &event("message_stop", &json!({"type":"message_stop"}));
    s
}

/// The recorded thinking + tool-use stream, its thinking, text and argument deltas each
/// repeated `times` times: a long answer with every kind of block.
fn long_stream(times: usize) -> String {
    let path = format!(
        "{}/tests/fixtures/anthropic/rec_thinking_tool_stream.0.response.sse",
        env!("CARGO_MANIFEST_DIR")
    );
    let recorded = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for e in recorded.split_inclusive("\n\n") {
        let repeated = e.contains("thinking_delta")
            || (e.contains("input_json_delta") && !e.contains(r#""partial_json":"""#));
        let n = if repeated { times } else { 1 };
        // The repeated argument fragments no longer make one JSON text (the call comes out
        // invalid); the parser's cost per event does not depend on it.
        for _ in 0..n {
            out.push_str(e);
        }
    }
    out
}

/// `(event, data)` pairs of an SSE text (the shape `eventsource-stream` gives).
fn split(sse: &str) -> Vec<(String, String)> {
    sse.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = String::new();
            for line in e.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = v.to_owned();
                }
            }
            (name, data)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = text_stream(&TEXT_100.repeat(10));
    // The workspace's replaying server, answering every request with the stream.
    let server = rt.block_on(testkit::WireServer::start());
    server.set_recording(false);
    server.always(testkit::WireReply::sse(body));
    let url = server.url();
    let model = AnthropicModel::new(AnthropicConfig::new("bench").with_base_url(&url)).unwrap();
    toolwright_model_gateway::ensure_crypto_provider();
    let http = reqwest_ring::Client::new();
    let req = ChatRequest::new(vec![
        Message::system("You are terse."),
        Message::user("hello"),
    ]);
    let raw_body = json!({"model": "bench", "system": [{"type": "text", "text": "You are terse."}], "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}], "max_tokens": 4096, "stream": true});
    let messages_url = format!("{url}/v1/messages");

    let mut g = c.benchmark_group("anthropic_stream_100_events");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("raw_http_stream", |b| {
        b.to_async(&rt).iter(|| async {
            let r = http
                .post(&messages_url)
                .json(&raw_body)
                .send()
                .await
                .unwrap();
            let mut s = r.bytes_stream();
            let mut n = 0;
            while let Some(chunk) = s.next().await {
                n += chunk.unwrap().len();
            }
            assert!(n > 0);
        })
    });
    g.bench_function("gateway_stream", |b| {
        b.to_async(&rt).iter(|| async {
            let r = collect_stream(model.stream(req.clone()).await.unwrap())
                .await
                .unwrap();
            assert_eq!(r.content.len(), 100);
        })
    });
    g.finish();

    let long = long_stream(200);
    let events = split(&long);
    let mut g = c.benchmark_group("anthropic_parse_long_stream");
    g.throughput(Throughput::Bytes(long.len() as u64));
    g.bench_function("parser", |b| {
        b.iter(|| {
            let out = parse_sse_events(events.iter().map(|(e, d)| (e.as_str(), d.as_str())));
            assert!(matches!(out.last(), Some(Ok(ChatEvent::Finish { .. }))));
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
