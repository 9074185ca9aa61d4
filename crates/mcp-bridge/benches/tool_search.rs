//! The tool-search evaluation (#26 item 5), rerunnable: `cargo bench -p mcp-bridge --bench
//! tool_search` (or `cargo xtask bench -p mcp-bridge --bench tool_search`).
//!
//! Every recorded tool definition of crates/tool-search/fixtures/tools.json runs as a service of
//! a real bridge (this crate's test server replays each server's `tools/list`); the labelled
//! queries of fixtures/queries.json go through the bridge's own search. Prints recall@1 and
//! recall@5 (all, English, Chinese) and the tokens per turn (o200k) of (a) every full schema,
//! (b) every level-1 line, (c) search, in each call protocol (a scripted turn over real HTTP,
//! counting what the provider received) and on the embedded local model (its own tokenizer).
//! `--no-local` skips the local model; `--misses` lists the queries whose tool was not first.
//!
//! The #41 evaluation (fixtures/eval/dev.json and test.json, split before tuning): recall@1,
//! recall@5 and MRR per split and language, BM25 alone vs hybrid, and the negatives' false
//! hits. Hybrid needs an encoder: `--embedder e5` the product's (local-model's
//! multilingual-e5-small); `--embedder test-hashed` plugs the test-only lexical one
//! (tests/common/embedders.rs; its figures check the plumbing and are never the product's);
//! the real encoder plugs in through the same `Arc<dyn Embedder>` once merged. `--sweep`
//! compares fusion weightings on **dev only**; `--eval-only` skips the token measurements.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::eval::{self, Hybrid};
use common::search::{big_bridge, full_schemas, local_search_turn, search_turn, tokens};
use llm_core::Embedder;
use mcp_bridge::{Intent, McpBridge, ToolSearchConfig};
use serde_json::Value;
use tool_search::{HybridConfig, SearchIndex};
use tool_system::ProtocolKind;

const QUERIES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tool-search/fixtures/queries.json"
);

#[derive(Default)]
struct Recall {
    n: usize,
    at1: usize,
    at5: usize,
}

impl Recall {
    fn row(&self, what: &str) -> String {
        let pct = |k: usize| 100.0 * k as f64 / self.n.max(1) as f64;
        format!(
            "| {what} | {} | {:.1}% | {:.1}% |",
            self.n,
            pct(self.at1),
            pct(self.at5)
        )
    }
}

async fn recall(b: &McpBridge, show_misses: bool) -> (Recall, Recall, Recall, Recall) {
    let queries: Value =
        serde_json::from_str(&std::fs::read_to_string(QUERIES).expect("queries.json")).unwrap();
    let catalog = b.tools().await;
    let (mut all, mut en, mut zh) = (Recall::default(), Recall::default(), Recall::default());
    // Queries one tool answers: no credit for several right answers in the five.
    let mut single = Recall::default();
    for q in queries.as_array().unwrap() {
        let text = q["query"].as_str().unwrap();
        let expect: Vec<String> = q["expect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                catalog
                    .iter()
                    .find(|t| t.service == e["server"] && t.name == e["tool"])
                    .unwrap_or_else(|| panic!("{e} is not in the catalog"))
                    .exposed_name
                    .clone()
            })
            .collect();
        let hits: Vec<String> = b
            .search_tools(text, 5)
            .await
            .into_iter()
            .map(|h| h.tool.exposed_name)
            .collect();
        let at1 = hits.first().is_some_and(|h| expect.contains(h));
        let at5 = hits.iter().any(|h| expect.contains(h));
        if show_misses && !at1 {
            println!(
                "  miss{}: {text:?} wants {expect:?}, got {:?}",
                if at5 { "@1" } else { "@5" },
                &hits[..hits.len().min(3)]
            );
        }
        let lang = if q["lang"] == "zh" { &mut zh } else { &mut en };
        let mut rows = vec![&mut all, lang];
        if expect.len() == 1 {
            rows.push(&mut single);
        }
        for r in rows {
            r.n += 1;
            r.at1 += usize::from(at1);
            r.at5 += usize::from(at5);
        }
    }
    (all, en, zh, single)
}

/// The #41 evaluation: BM25 alone, and hybrid with `embedder` when one is given.
async fn evaluation(
    b: &McpBridge,
    embedder: Option<Arc<dyn Embedder>>,
    sweep: bool,
    show_misses: bool,
) {
    let catalog = b.tools().await;
    let docs = eval::docs(b, &catalog);
    let dev = eval::load(eval::DEV, &catalog);
    let test = eval::load(eval::TEST, &catalog);
    let bm25 = SearchIndex::new(docs.clone());
    println!(
        "\n#41 evaluation over {} tools: dev {} requests, test {}",
        catalog.len(),
        dev.len(),
        test.len()
    );
    println!(
        "\n| split | method | queries | n | recall@1 | recall@5 | MRR |\n|---|---|---|---|---|---|---|"
    );
    let mut negatives = Vec::new();
    for (split, queries) in [("dev", &dev), ("test", &test)] {
        let r = eval::score(queries, |q| eval::bm25(&bm25, q));
        println!("{}", eval::rows(split, "BM25", &r));
        negatives.push(eval::negatives_row(split, "BM25", &r));
        if show_misses {
            r.misses
                .iter()
                .for_each(|m| println!("  {split} BM25 miss: {m}"));
        }
    }
    let Some(e) = embedder else {
        println!("\n(no encoder given: hybrid rows need --embedder)");
        print_negatives(&negatives);
        return;
    };
    let label = format!("hybrid ({})", e.id());
    let hybrid = Hybrid::new(docs, e, &dev, &test, HybridConfig::default())
        .await
        .expect("the encoder");
    for (split, queries) in [("dev", &dev), ("test", &test)] {
        let r = eval::score(queries, |q| hybrid.search(q));
        println!("{}", eval::rows(split, &label, &r));
        negatives.push(eval::negatives_row(split, &label, &r));
        if show_misses {
            r.misses
                .iter()
                .for_each(|m| println!("  {split} hybrid miss: {m}"));
        }
    }
    print_negatives(&negatives);
    println!(
        "\n{label}: encoding the catalog {:.2?}, one request p50 {:.2?}; no-fit threshold from dev: {:?} (at most {:.0}% of dev's answerable requests turned away)",
        hybrid.build,
        hybrid.query_p50,
        hybrid.threshold,
        100.0 * eval::MAX_ANSWERABLE_LOSS
    );
    if sweep {
        println!(
            "\nfusion sweep, DEV ONLY ({label}):\n| k | BM25 weight | dense weight | recall@1 | recall@5 | MRR |\n|---|---|---|---|---|---|"
        );
        let mut h = hybrid;
        for k in [10.0, 30.0, 60.0] {
            for (wb, wd) in [(1.0, 0.5), (1.0, 1.0), (1.0, 2.0), (0.0, 1.0)] {
                h = h.with(HybridConfig::default().with_k(k).with_weights(wb, wd));
                let r = eval::score(&dev, |q| h.search(q));
                println!(
                    "| {k} | {wb} | {wd} | {:.2} | {:.2} | {:.2} |",
                    r.all.recall1(),
                    r.all.recall5(),
                    r.all.mrr()
                );
            }
        }
    }
}

fn print_negatives(rows: &[String]) {
    println!(
        "\n| split | method | negatives | false hits | answerable turned away |\n|---|---|---|---|---|"
    );
    rows.iter().for_each(|r| println!("{r}"));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let with_local = !args.iter().any(|a| a == "--no-local");
    let misses = args.iter().any(|a| a == "--misses");
    let sweep = args.iter().any(|a| a == "--sweep");
    let eval_only = args.iter().any(|a| a == "--eval-only");
    let embedder: Option<Arc<dyn Embedder>> = match args
        .iter()
        .position(|a| a == "--embedder")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        None => None,
        Some("test-hashed") => Some(Arc::new(common::embedders::HashedNgrams)),
        // The product's encoder: multilingual-e5-small at 4 bits, fetched once into the cache.
        Some("e5") => None,
        Some(other) => panic!("--embedder {other}: known: e5, test-hashed"),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let embedder = if args.iter().any(|a| a == "e5") {
        let e = rt
            .block_on(local_model::E5Embedder::fetch())
            .expect("the e5 encoder (fetched once into the toolkit cache)");
        Some(Arc::new(e) as Arc<dyn Embedder>)
    } else {
        embedder
    };
    rt.block_on(async {
        let b = big_bridge(ToolSearchConfig::default().with_every_turn(true)).await;
        let catalog = b.tools().await;
        let servers = b.services().len();
        println!("tool search over {} tools of {servers} servers", catalog.len());

        let (all, en, zh, single) = recall(&b, misses).await;
        println!("\n| queries | n | recall@1 | recall@5 |\n|---|---|---|---|");
        println!(
            "{}\n{}\n{}\n{}",
            all.row("all"),
            en.row("English"),
            zh.row("Chinese"),
            single.row("one right tool")
        );

        evaluation(&b, embedder, sweep, misses).await;
        if eval_only {
            return;
        }

        // (a) every full schema; (b) every level-1 line (+ the describe tool); o200k.
        let full = tokens(&full_schemas(&b).await);
        b.set_tool_search(ToolSearchConfig::default().with_every_turn(true).with_budget_tokens(usize::MAX));
        let level1 = b.prompt_section(&Intent::Normal).await.unwrap();
        let describe = tool_system::to_openai_tool(&mcp_bridge::inject::describe_tool_spec());
        let level1 = tokens(&level1) + tokens(&describe.to_string());
        b.set_tool_search(ToolSearchConfig::default().with_every_turn(true));
        println!("\n| tokens per turn (o200k) | tokens | of full |\n|---|---|---|");
        println!("| (a) every full schema | {full} | 100% |");
        println!("| (b) every level-1 line | {level1} | {:.1}% |", 100.0 * level1 as f64 / full as f64);
        for name in b.services().into_iter().map(|s| s.config.name) {
            b.stop(&name).await.unwrap();
        }

        // (c) search, per protocol: what the provider received in a scripted turn.
        for protocol in [ProtocolKind::Native, ProtocolKind::JsonDecision, ProtocolKind::Tag] {
            let t = search_turn(protocol.clone()).await;
            println!(
                "| (c) search, {protocol:?}: 1st request / 2nd (5 hits callable) | {} / {} | {:.1}% / {:.1}% |",
                t.first,
                t.second,
                100.0 * t.first as f64 / t.full as f64,
                100.0 * t.second as f64 / t.full as f64
            );
        }
        if with_local {
            let b = big_bridge(ToolSearchConfig::default().with_every_turn(true)).await;
            let t = local_search_turn(&b).await;
            let (first, full) = (t.first, t.full);
            println!(
                "| (c) search, local model (its tokenizer; whole prompt of the 1st request) | {first} | {:.1}% of {full} |",
                100.0 * first as f64 / full as f64
            );
            for name in b.services().into_iter().map(|s| s.config.name) {
                b.stop(&name).await.unwrap();
            }
        }
    });
}
