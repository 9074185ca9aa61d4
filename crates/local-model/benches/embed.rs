//! The sentence encoder of tool search (#41): `cargo bench -p local-model --bench embed`.
//!
//! * `embed/query` — one short query (`切换到分支 main`, 12 tokens with `query: `), encoded.
//! * `embed/index_360_tools` — the 360 tools of `crates/tool-search/fixtures/tools.json`, each
//!   `name: description` as a passage, in one call (what a first index build costs).
//! * `embed/load` — `E5Embedder::load` of the cached file (read, SHA-256 for the id, parse,
//!   Q4_0 → Q4_1, the vocabulary index).
//!
//! The model is fetched into the user's cache on first use (`LOCAL_EMBEDDER_PATH` names a copy).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use llm_core::EmbedKind;
use local_model::{E5Embedder, ModelSource, default_cache_dir, ensure_model};

fn model_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("LOCAL_EMBEDDER_PATH").filter(|p| !p.is_empty()) {
        return p.into();
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(ensure_model(
            &ModelSource::multilingual_e5_small(),
            &default_cache_dir().unwrap(),
        ))
        .unwrap()
}

/// `name: description` of every tool in tool-search's fixture catalog.
fn tool_texts() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tool-search/fixtures/tools.json"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap())
        .map(|t| {
            format!(
                "{}: {}",
                t["name"].as_str().unwrap_or_default(),
                t["description"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let path = model_path();
    let e5 = E5Embedder::load(&path).unwrap();
    let tools = tool_texts();
    let mut lens: Vec<usize> = tools
        .iter()
        .map(|t| e5.token_ids(t, EmbedKind::Document).len())
        .collect();
    lens.sort_unstable();
    eprintln!(
        "{} tools, tokens per passage: min {} median {} p90 {} max {}, {} in all; the query: {} tokens; load {:?}",
        tools.len(),
        lens[0],
        lens[lens.len() / 2],
        lens[lens.len() * 9 / 10],
        lens[lens.len() - 1],
        lens.iter().sum::<usize>(),
        e5.token_ids("切换到分支 main", EmbedKind::Query).len(),
        e5.load_time(),
    );

    let mut g = c.benchmark_group("embed");
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("query", |b| {
        b.iter(|| e5.embed_blocking(black_box(&["切换到分支 main"]), EmbedKind::Query))
    });
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("index_360_tools", |b| {
        b.iter(|| e5.embed_blocking(black_box(&tools), EmbedKind::Document))
    });
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("load", |b| {
        b.iter(|| E5Embedder::load(black_box(&path)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
