//! The hand-written grammar against llguidance (the constraint engine of llama.cpp, vLLM and
//! SGLang), on the same runs:
//! `cargo run --release --manifest-path crates/local-model/engine-bench/Cargo.toml`.
//!
//! 1. Which schemas each engine can enforce: the tool schemas of this repository's tests and
//!    the tools of `@modelcontextprotocol/server-everything` (its `tools/list`, captured in
//!    `fixtures/server_everything_tools.json`).
//! 2. Per-token mask time on the same token sequences: SmolLM2-135M writes a value under the
//!    hand-written grammar (seeded, `response_format` = the schema); the sequence is replayed
//!    through the hand-written engine (uncached trie walk, and the per-state cache the engine
//!    uses) and through llguidance's `Matcher::compute_mask`. Mean and p99 per token.
//! 3. Constrained tokens/s: measured for the hand-written engine (the real generation), and for
//!    llguidance the same run's time per token with the hand-written mask time replaced by
//!    llguidance's (forward pass + sampling are the same for both).
//!
//! Prints Markdown for docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use toolwright_core::{ChatRequest, Message, ResponseFormat, ToolSpec};
use toolwright_local_model::{Grammar, LocalModel, MaskCache, ModelSource, TokenTrie, default_cache_dir};
use serde_json::{Value, json};

/// The tool schemas of this repository's tests (local-model, tool-system, messaging).
fn repo_schemas() -> Vec<(String, Value)> {
    vec![
        (
            "get_weather (local-model tests)".into(),
            json!({"type": "object", "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            }, "required": ["city"]}),
        ),
        (
            "get_time (local-model tests)".into(),
            json!({"type": "object", "properties": {
                "timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Paris"}
            }, "required": ["timezone"]}),
        ),
        (
            "calculator (local-model tests)".into(),
            json!({"type": "object", "properties": {
                "a": {"type": "number"}, "b": {"type": "number"},
                "op": {"type": "string", "enum": ["add", "sub", "mul", "div"]},
                "round": {"type": "boolean"}, "digits": {"type": "integer"}
            }, "required": ["a", "b", "op"]}),
        ),
        (
            "send_message (messaging, Q16-Q19)".into(),
            json!({"type": "object", "properties": {
                "recipient": {"type": "string", "minLength": 1},
                "text": {"type": "string", "minLength": 1},
                "quickReplies": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 10}
            }, "required": ["recipient", "text"]}),
        ),
        (
            "mixed (grammar property test)".into(),
            json!({"type":"object","properties":{"n":{"type":"integer"},"x":{"type":["number","null"]},"e":{"enum":["a","b",1,true]},"ok":{"type":"boolean"},"o":{"type":"object","properties":{"k":{"type":"string","minLength":3,"maxLength":5}},"required":["k"]}},"required":["n","o"]}),
        ),
    ]
}

fn everything_schemas() -> Vec<(String, Value)> {
    let fixture: Value =
        serde_json::from_str(include_str!("../fixtures/server_everything_tools.json")).unwrap();
    fixture["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                format!("everything__{}", t["name"].as_str().unwrap()),
                t["inputSchema"].clone(),
            )
        })
        .collect()
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort();
    let mean = v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len() as f64;
    let p99 = v[((v.len() * 99).div_ceil(100)).min(v.len()) - 1].as_secs_f64();
    (mean * 1e6, p99 * 1e6)
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let path = match std::env::var_os("LOCAL_MODEL_PATH") {
        Some(p) => p.into(),
        None => rt
            .block_on(toolwright_local_model::ensure_model(
                &ModelSource::smollm2_135m_instruct(),
                &default_cache_dir().unwrap(),
            ))
            .unwrap_or_else(|e| panic!("cannot fetch the model: {e}")),
    };
    let model = LocalModel::from_file(&path).unwrap();
    let tok = model.tokenizer().clone();
    let vocab = tok.vocab_size() as u32;

    // Both engines over the same vocabulary: every token's bytes; control tokens are marked as
    // special for llguidance (never allowed inside a value) and left out of our trie.
    let words: Vec<Vec<u8>> = (0..vocab)
        .map(|i| match tok.token_bytes(i) {
            Some(b) => b.to_vec(),
            None => {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(format!("<|special_{i}|>").as_bytes());
                w
            }
        })
        .collect();
    let t = Instant::now();
    let env: TokEnv = Arc::new(ApproximateTokEnv::new(TokTrie::from(
        &TokRxInfo::new(vocab, tok.im_end()),
        &words,
    )));
    let factory = ParserFactory::new_simple(&env).unwrap();
    let llg_setup = t.elapsed();
    let t = Instant::now();
    let own_trie = TokenTrie::new((0..vocab).filter_map(|i| tok.token_bytes(i).map(|b| (i, b))));
    let own_setup = t.elapsed();

    let llg_parser = |schema: &Value| {
        factory
            .create_parser(TopLevelGrammar::from_json_schema(schema.clone()))
            .map_err(|e| e.to_string())
    };

    // 1. Coverage.
    let mut schemas = repo_schemas();
    schemas.extend(everything_schemas());
    println!("### Which schemas each engine enforces\n");
    println!("| schema | hand-written | llguidance |");
    println!("|---|---|---|");
    let mut both = Vec::new();
    let (mut own_n, mut llg_n) = (0, 0);
    for (name, schema) in &schemas {
        let spec = ToolSpec::new("t", "", schema.clone());
        let own = Grammar::tool_call(&[spec], toolwright_local_model::AnswerChoice::CallOnly)
            .map(|_| ())
            .map_err(|e| e.to_string());
        let llg = llg_parser(schema).map(|_| ());
        own_n += usize::from(own.is_ok());
        llg_n += usize::from(llg.is_ok());
        let show = |r: &Result<(), String>| match r {
            Ok(()) => "yes".to_owned(),
            Err(e) => format!("no: {}", e.replace('|', "/").replace('\n', " ")),
        };
        println!("| {name} | {} | {} |", show(&own), show(&llg));
        if own.is_ok() && llg.is_ok() {
            both.push((name.clone(), schema.clone()));
        }
    }
    println!(
        "| **total** | **{own_n} of {}** | **{llg_n} of {}** |\n",
        schemas.len(),
        schemas.len()
    );

    // 2 and 3. Same runs.
    let runs_per_schema = 3u64;
    let (mut own_walk, mut own_cached, mut llg_mask) = (Vec::new(), Vec::new(), Vec::new());
    let (mut tokens, mut gen_secs) = (0u64, 0f64);
    let mut llg_rejected = Vec::new();
    for (name, schema) in &both {
        let grammar = Grammar::from_schema(schema).unwrap();
        for seed in 0..runs_per_schema {
            let req = ChatRequest::new(vec![Message::user(format!(
                "Write example arguments for the tool `{name}` as JSON."
            ))])
            .with_response_format(ResponseFormat::JsonSchema {
                name: "args".into(),
                schema: schema.clone(),
                strict: true,
            })
            .with_temperature(0.8)
            .with_max_tokens(96);
            let (resp, st) = rt
                .block_on(model.clone().with_seed(seed).chat_with_stats(req))
                .unwrap();
            tokens += u64::from(st.generated_tokens.saturating_sub(1));
            gen_secs += st.generation_time.as_secs_f64();
            let ids = tok.encode(&resp.content).unwrap();
            // Replay: our engine.
            let mut state = grammar.start();
            let mut cache = MaskCache::default();
            let budget = 96u32;
            for (k, &id) in ids.iter().enumerate() {
                let left = budget.saturating_sub(k as u32).max(1) - 1;
                let mut out = Vec::new();
                let t = Instant::now();
                own_trie.allowed(&grammar, &state, left.max(64), &mut out);
                own_walk.push(t.elapsed());
                out.clear();
                let t = Instant::now();
                cache.allowed(&own_trie, &grammar, &state, left.max(64), &mut out);
                own_cached.push(t.elapsed());
                state = grammar.feed_bytes(&state, tok.token_bytes(id).unwrap_or_default());
            }
            // Replay: llguidance.
            let mut m = Matcher::new(
                factory.create_parser(TopLevelGrammar::from_json_schema(schema.clone())),
            );
            for (k, &id) in ids.iter().enumerate() {
                let t = Instant::now();
                let mask = m.compute_mask();
                llg_mask.push(t.elapsed());
                let ok = mask.map(|v| v.is_allowed(id)).unwrap_or(false);
                if !ok || m.consume_token(id).is_err() {
                    llg_rejected.push(format!(
                        "{name}: token {k} of {:?} ({})",
                        resp.content,
                        m.get_error().unwrap_or_default()
                    ));
                    break;
                }
            }
        }
    }
    let (walk_mean, walk_p99) = stats(own_walk.clone());
    let (cached_mean, cached_p99) = stats(own_cached);
    let (llg_mean, llg_p99) = stats(llg_mask);
    // Time per generated token of the real (hand-written, cached) runs, and the same with the
    // cached mask time swapped for llguidance's.
    let per_token = gen_secs / tokens.max(1) as f64 * 1e6;
    let own_tps = 1e6 / per_token;
    let llg_tps = 1e6 / (per_token - cached_mean + llg_mean);
    println!(
        "### Mask time per token, same {} runs ({} values over {} schemas both enforce, {} tokens)\n",
        both.len() as u64 * runs_per_schema,
        both.len() as u64 * runs_per_schema,
        both.len(),
        own_walk.len()
    );
    println!("| engine | setup (vocabulary {vocab}) | mask mean | mask p99 | constrained tok/s |");
    println!("|---|---|---|---|---|");
    println!(
        "| hand-written, per-state cache (what the engine runs) | {:.0} ms | {cached_mean:.1} µs | {cached_p99:.1} µs | {own_tps:.1} (measured) |",
        own_setup.as_secs_f64() * 1e3
    );
    println!(
        "| hand-written, trie walk every token (no cache) | — | {walk_mean:.1} µs | {walk_p99:.1} µs | — |"
    );
    println!(
        "| llguidance 1.9.1 `Matcher::compute_mask` | {:.0} ms | {llg_mean:.1} µs | {llg_p99:.1} µs | {llg_tps:.1} (same run, its mask time) |",
        llg_setup.as_secs_f64() * 1e3
    );
    if !llg_rejected.is_empty() {
        println!("\nllguidance rejected a replayed sequence (its timing stops there):");
        for r in &llg_rejected {
            println!("- {r}");
        }
    }
}
