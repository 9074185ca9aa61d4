//! The sentence encoder of tool search: `cargo bench -p toolwright-local-model --bench embed`.
//!
//! * `embed/query` — one short query (`切换到分支 main`, 12 tokens with `query: `), encoded.
//! * `embed/index_360_tools` — the 360 tools of `crates/tool-search/fixtures/tools.json`, each
//!   `name: description` as a passage, in one call (what a first index build costs).
//! * `embed/index_360_short_b32` — the same 360 tools as the MCP bridge encodes them for its
//!   recipe change (`toolwright_tool_search::embedding_text`: the name's words and the description's first
//!   sentence; 7,667 tokens with `passage: `), 32 texts per call as the bridge's `ENCODE_BATCH`:
//!   "first index build" target (≤ 5 s).
//! * `embed/load` — `E5Embedder::load` of the cached file (read, SHA-256 for the id, parse,
//!   Q4_0 → Q4_1, the vocabulary index).
//!
//! The model is fetched into the user's cache on first use (`LOCAL_EMBEDDER_PATH` names a copy).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use toolwright_core::EmbedKind;
use toolwright_local_model::{E5Embedder, ModelSource, default_cache_dir, ensure_model};

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

/// `(name, description)` of every tool in tool-search's fixture catalog.
fn tools() -> Vec<(String, String)> {
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
            (
                t["name"].as_str().unwrap_or_default().to_owned(),
                t["description"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `name: description` of every tool.
fn tool_texts() -> Vec<String> {
    tools()
        .into_iter()
        .map(|(n, d)| format!("{n}: {d}"))
        .collect()
}

/// What the bridge encodes per tool, as `toolwright_tool_search::embedding_text` makes it (local-model does
/// not depend on tool-search, so this mirrors it for the fixture's names: the words of the
/// name, then the first sentence of the description; the printed token total, 7,667, checks
/// the copy).
fn short_texts() -> Vec<String> {
    tools()
        .into_iter()
        .map(|(name, desc)| {
            let mut words = String::new();
            let mut prev_lower = false;
            for c in name.rsplit("__").next().unwrap_or(&name).chars() {
                if c == '_' || c == '-' || c == '.' || c.is_whitespace() {
                    if !words.is_empty() && !words.ends_with(' ') {
                        words.push(' ');
                    }
                    prev_lower = false;
                    continue;
                }
                if c.is_uppercase() && prev_lower {
                    words.push(' ');
                }
                prev_lower = c.is_lowercase() || c.is_ascii_digit();
                words.extend(c.to_lowercase());
            }
            let d = desc.trim();
            let mut end = d.len();
            for (i, c) in d.char_indices() {
                let stop = match c {
                    '。' | '！' | '？' | '\n' | '\r' => true,
                    '.' | '!' | '?' => d[i + c.len_utf8()..]
                        .chars()
                        .next()
                        .is_none_or(char::is_whitespace),
                    _ => false,
                };
                if stop {
                    end = i;
                    break;
                }
            }
            let collapse = |s: &str| {
                s.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .chars()
                    .take(200)
                    .collect::<String>()
            };
            let (words, first) = (collapse(&words), collapse(&d[..end]));
            match (words.is_empty(), first.is_empty()) {
                (_, true) => words,
                (true, false) => first,
                (false, false) => format!("{words}: {first}"),
            }
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
    let short = short_texts();
    eprintln!(
        "the bridge's short texts: {} tokens in all",
        short
            .iter()
            .map(|t| e5.token_ids(t, EmbedKind::Document).len())
            .sum::<usize>()
    );
    g.bench_function("index_360_short_b32", |b| {
        b.iter(|| {
            for batch in short.chunks(32) {
                black_box(e5.embed_blocking(black_box(batch), EmbedKind::Document));
            }
        })
    });
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("load", |b| {
        b.iter(|| E5Embedder::load(black_box(&path)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
