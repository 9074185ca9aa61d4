//! The Responses backend's stream: the parser alone on a long recorded stream (throughput), and
//! a 100-delta answer through `OpenAiResponsesModel` over local HTTP, next to which
//! `benches/gateway.rs`'s `stage0_stream_100_chunks/gateway_stream` measures the chat backend.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, dead_code)]

#[path = "../src/responses/events.rs"]
mod events;

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use toolwright_core::{ChatModel, ChatRequest, Message, collect_stream};
use toolwright_model_gateway::{OpenAiConfig, OpenAiResponsesModel};

const TEXT_SSE: &str = include_str!("../tests/fixtures/openai-responses/stream_text.sse");
const REASONING_SSE: &str =
    include_str!("../tests/fixtures/openai-responses/stream_reasoning_tool.sse");

/// The documented text stream with its deltas replaced by `n` copies of its first one (the bytes of each event
/// as recorded, one character of text each), after a recorded reasoning-and-call stream's items.
fn long_stream(n: usize) -> String {
    let blocks: Vec<&str> = TEXT_SSE.split_inclusive("\n\n").collect();
    let delta = blocks
        .iter()
        .find(|b| b.contains("\"response.output_text.delta\""))
        .unwrap();
    let one: Value =
        serde_json::from_str(delta.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap();
    let mut event = one.clone();
    event["delta"] = json!("x");
    let delta = format!("event: response.output_text.delta\ndata: {event}\n\n");
    let mut out = String::new();
    // The reasoning item and the call, without their response's end.
    for b in REASONING_SSE.split_inclusive("\n\n") {
        if !b.contains("response.completed") {
            out.push_str(b);
        }
    }
    let mut expanded = false;
    for b in &blocks {
        if !b.contains("\"response.output_text.delta\"") {
            out.push_str(b);
        } else if !expanded {
            expanded = true;
            for _ in 0..n {
                out.push_str(&delta);
            }
        }
    }
    out
}

/// Splits the SSE text into its `data:` payloads and runs the parser over them.
fn parse(sse: &str) -> usize {
    let mut p = events::StreamParser::new();
    let mut out = Vec::new();
    for block in sse.split("\n\n") {
        for line in block.lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                let v: Value = serde_json::from_str(data).unwrap();
                p.on_event(&v, &mut out).unwrap();
            }
        }
    }
    p.on_end().unwrap();
    out.len()
}

fn bench(c: &mut Criterion) {
    let long = long_stream(2_000);
    assert!(parse(&long) > 2_000);
    let mut g = c.benchmark_group("responses_stream_parse");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes(long.len() as u64));
    g.bench_function("2000_deltas", |b| b.iter(|| parse(&long)));
    g.finish();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(testkit::WireServer::start());
    server.set_recording(false);
    // 100 text deltas of one character each, like the chat bench's 100 chunks.
    server.always(testkit::WireReply::SseEvents({
        let mut s = String::new();
        for b in TEXT_SSE.split_inclusive("\n\n") {
            if b.contains("\"response.output_text.delta\"") {
                if s.contains("\"response.output_text.delta\"") {
                    continue;
                }
                let line = b.lines().nth(1).unwrap().trim_start_matches("data: ");
                let mut v: Value = serde_json::from_str(line).unwrap();
                for d in "0123456789".repeat(10).chars() {
                    v["delta"] = json!(d.to_string());
                    s.push_str(&format!("event: response.output_text.delta\ndata: {v}\n\n"));
                }
            } else {
                s.push_str(b);
            }
        }
        s
    }));
    let model =
        OpenAiResponsesModel::new(OpenAiConfig::new("bench").with_base_url(server.base_url()))
            .unwrap();
    let req = ChatRequest::new(vec![
        Message::system("You are terse."),
        Message::user("hello"),
    ]);
    let mut g = c.benchmark_group("responses_stream_100_deltas");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("gateway_stream", |b| {
        b.to_async(&rt).iter(|| async {
            let r = collect_stream(model.stream(req.clone()).await.unwrap())
                .await
                .unwrap();
            assert_eq!(r.content.len(), 100);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
