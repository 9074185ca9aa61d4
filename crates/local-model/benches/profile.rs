//! A fixed workload for a profiler (valgrind's callgrind here: `perf` has no hardware counters
//! in this VM). `cargo bench -p toolwright-local-model --bench profile --no-run`, then run the binary as
//! `profile prefill` (a ~300-token prompt, one token) or `profile decode` (a short prompt,
//! 64 generated tokens) under `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='*forward*'`. Without an argument (as `cargo bench` runs it) it does nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use toolwright_core::{ChatRequest, Message};
use toolwright_local_model::{LocalModel, ModelSource, default_cache_dir, ensure_model};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode != "prefill" && mode != "decode" {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let path = rt
        .block_on(ensure_model(
            &ModelSource::smollm2_135m_instruct(),
            &default_cache_dir().unwrap(),
        ))
        .unwrap();
    let model = LocalModel::from_file(&path).unwrap().with_seed(7);
    let req = if mode == "prefill" {
        let long = "The quick brown fox jumps over the lazy dog while the tools report weather, time and sums. ".repeat(16);
        ChatRequest::new(vec![Message::user(long)]).with_max_tokens(1)
    } else {
        ChatRequest::new(vec![Message::user(
            "Write a long, detailed story about a lighthouse keeper.",
        )])
        .with_temperature(0.7)
        .with_max_tokens(64)
    };
    let (_, s) = rt.block_on(model.chat_with_stats(req)).unwrap();
    eprintln!(
        "{mode}: {} prompt tokens, {} generated; {:.1} prompt tok/s, {:.1} gen tok/s",
        s.prompt_tokens,
        s.generated_tokens,
        s.prompt_tokens_per_sec(),
        s.generated_tokens_per_sec()
    );
}
