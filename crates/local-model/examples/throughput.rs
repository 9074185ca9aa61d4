//! Load time (the first start in a fresh directory, then later starts) and aggregate decode tokens/s
//! at 1, 2 and 4 concurrent sessions of the embedded model.
//!
//! `cargo run --release -p toolwright-local-model --example throughput`. The model file is copied to a
//! temporary directory, as a first start sees it (a file that needs converting, such as a Q5_1
//! one, is converted and cached there); nothing in the user's cache is touched. Prints Markdown rows for docs/local-model.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use futures::StreamExt;
use toolwright_core::{ChatEvent, ChatModel, ChatRequest, Message};
use toolwright_local_model::{LocalModel, ModelSource, default_cache_dir, ensure_model};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let src = match std::env::var_os("LOCAL_MODEL_PATH") {
        Some(p) => p.into(),
        None => rt
            .block_on(ensure_model(
                &ModelSource::smollm2_135m_instruct(),
                &default_cache_dir().unwrap(),
            ))
            .unwrap(),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::copy(&src, &path).unwrap();

    let t = Instant::now();
    let model = LocalModel::from_file(&path).unwrap();
    let first = t.elapsed().as_secs_f64() * 1e3;
    let mut cached = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let m = LocalModel::from_file(&path).unwrap();
        cached.push(t.elapsed().as_secs_f64() * 1e3);
        drop(m);
    }
    println!("| load, first start | {first:.0} ms |");
    println!(
        "| load, later starts (median of 5) | {:.0} ms (min {:.0}, max {:.0}) |",
        median(cached.clone()),
        cached.iter().copied().fold(f64::MAX, f64::min),
        cached.iter().copied().fold(0.0, f64::max)
    );

    model.set_prefix_cache_bytes(0);
    let tokens = 64u32;
    let topics = [
        "the sea",
        "compilers",
        "red fruits",
        "cats",
        "mountains",
        "bread",
    ];
    for n in [1usize, 2, 4] {
        let mut rates = Vec::new();
        for round in 0..3 {
            let t = Instant::now();
            let total: u32 = rt.block_on(async {
                let mut tasks = Vec::new();
                for i in 0..n {
                    let m = model.clone();
                    let q = format!(
                        "Write a long story about {}.",
                        topics[(i + round) % topics.len()]
                    );
                    tasks.push(tokio::spawn(async move {
                        let req = ChatRequest::new(vec![Message::user(q)])
                            .with_max_tokens(tokens)
                            .with_temperature(0.0);
                        let mut s = m.stream(req).await.unwrap();
                        let mut generated = 0;
                        while let Some(ev) = s.next().await {
                            if let ChatEvent::Finish { usage, .. } = ev.unwrap() {
                                generated = usage.map_or(0, |u| u.completion_tokens);
                            }
                        }
                        generated
                    }));
                }
                let mut total = 0;
                for t in tasks {
                    total += t.await.unwrap();
                }
                total
            });
            rates.push(f64::from(total) / t.elapsed().as_secs_f64());
        }
        println!(
            "| {n} concurrent session(s), {tokens} tokens each, prompt included | {:.1} tok/s aggregate (median of 3) |",
            median(rates)
        );
    }
}
