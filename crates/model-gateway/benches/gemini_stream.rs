//! The Gemini backend's cost on a long stream: 100 events of the recorded shape
//! (`tests/fixtures/gemini/text.sse`, 10 characters of text each, usage in every event, the
//! signature on the last) through `GeminiModel::stream`, from a server on 127.0.0.1, next to
//! the raw HTTP read of the same bytes. Comparable to `gateway`'s `stage0_stream_100_chunks`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use serde_json::{Value, json};
use toolwright_core::{ChatModel, ChatRequest, Message, collect_stream};
use toolwright_model_gateway::gemini::{GeminiConfig, GeminiModel};

/// The recorded stream stretched to 100 events: the first event's JSON with 10 characters of
/// text each, and the recorded last event (empty text, signature, `STOP`).
fn long_stream() -> String {
    let recorded = include_str!("../tests/fixtures/gemini/text.sse");
    let events: Vec<Value> = recorded
        .split("\r\n\r\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let mut out = String::new();
    for i in 0..99 {
        let mut e = events[0].clone();
        e["candidates"][0]["content"]["parts"] = json!([{"text": format!("{:010}", i)}]);
        out.push_str(&format!(
            "data: {}\r\n\r\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    out.push_str(&format!(
        "data: {}\r\n\r\n",
        serde_json::to_string(events.last().unwrap()).unwrap()
    ));
    out
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = long_stream();
    let bytes = body.len() as u64;
    // The workspace's replaying server, answering every request with the stream.
    let server = rt.block_on(testkit::WireServer::start());
    server.set_recording(false);
    server.always(testkit::WireReply::sse(body));
    let addr = server.url().trim_start_matches("http://").to_owned();
    let model = GeminiModel::new(
        GeminiConfig::new("gemini-3-pro-preview")
            .with_base_url(format!("http://{addr}/v1beta"))
            .with_api_key("bench"),
    )
    .unwrap();
    let url =
        format!("http://{addr}/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse");
    let http = reqwest_ring::Client::new();
    let req = ChatRequest::new(vec![
        Message::system("You are terse."),
        Message::user("hello"),
    ]);
    let raw_body = json!({"systemInstruction": {"parts": [{"text": "You are terse."}]},
        "contents": [{"role": "user", "parts": [{"text": "hello"}]}]});

    let mut g = c.benchmark_group("gemini_stream_100_events");
    g.throughput(Throughput::Bytes(bytes))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("raw_http_stream", |b| {
        b.to_async(&rt).iter(|| async {
            let r = http.post(&url).json(&raw_body).send().await.unwrap();
            let mut s = r.bytes_stream();
            let mut n = 0;
            while let Some(chunk) = s.next().await {
                n += chunk.unwrap().len();
            }
            assert!(n > 0);
        })
    });
    g.bench_function("gemini_stream", |b| {
        b.to_async(&rt).iter(|| async {
            let r = collect_stream(model.stream(req.clone()).await.unwrap())
                .await
                .unwrap();
            assert_eq!(r.content.len(), 990);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
