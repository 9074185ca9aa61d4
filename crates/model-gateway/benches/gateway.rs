//! The gateway's own cost: a whole request and a 100-chunk stream through `OpenAiModel`, next to
//! the raw HTTP round trip of the same scripted server with plain reqwest.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_core::{ChatModel, ChatRequest, Message, collect_stream};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

const TEXT_100: &str = "0123456789";

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(ScriptedServer::start());
    server.set_recording(false);
    // 100 text chunks of 1 character each when streamed.
    let text: String = TEXT_100.repeat(10);
    server.respond_with(move |_| {
        Reply::text(text.clone()).shape(|s| {
            s.text_chunk = 1;
            s.usage = false;
        })
    });
    let url = format!("{}/chat/completions", server.base_url());
    let model =
        OpenAiModel::new(OpenAiConfig::new("bench").with_base_url(server.base_url())).unwrap();
    toolwright_model_gateway::ensure_crypto_provider();
    let http = reqwest_ring::Client::new();
    let req = ChatRequest::new(vec![
        Message::system("You are terse."),
        Message::user("hello"),
    ]);
    let body = json!({"model": "bench", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello"}], "stream": false});
    let body_stream = json!({"model": "bench", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello"}], "stream": true});

    let mut g = c.benchmark_group("stage0_request");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("raw_http_roundtrip", |b| {
        b.to_async(&rt).iter(|| async {
            let r = http.post(&url).json(&body).send().await.unwrap();
            let v: serde_json::Value = r.json().await.unwrap();
            assert!(v["choices"][0]["message"]["content"].is_string());
        })
    });
    g.bench_function("gateway_chat", |b| {
        b.to_async(&rt)
            .iter(|| async { model.chat(req.clone()).await.unwrap() })
    });
    g.finish();

    let mut g = c.benchmark_group("stage0_stream_100_chunks");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("raw_http_stream", |b| {
        b.to_async(&rt).iter(|| async {
            let r = http.post(&url).json(&body_stream).send().await.unwrap();
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
