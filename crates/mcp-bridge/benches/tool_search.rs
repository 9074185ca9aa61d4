//! The tool-search evaluation, rerunnable: `cargo bench -p toolwright-mcp-bridge --bench
//! tool_search` (or `cargo xtask bench -p toolwright-mcp-bridge --bench tool_search`).
//!
//! Every recorded tool definition of crates/tool-search/fixtures/tools.json runs as a service of
//! a real bridge (this crate's test server replays each server's `tools/list`); the labelled
//! queries of fixtures/queries.json go through the bridge's own search. Prints recall@1 and
//! recall@5 (all, English, Chinese) and the tokens per turn (o200k) of (a) every full schema,
//! (b) every level-1 line, (c) search, in each call protocol (a scripted turn over real HTTP,
//! counting what the provider received) and on the embedded local model (its own tokenizer).
//! `--no-local` skips the local model; `--misses` lists the queries whose tool was not first.
//!
//! The tool-search evaluation (fixtures/eval/dev.json and test.json, split before tuning): recall@1,
//! recall@5 and MRR per split and language, BM25 alone vs hybrid, and the negatives' false
//! hits. Hybrid needs an encoder: `--embedder e5` the product's (local-model's
//! multilingual-e5-small); `--embedder test-hashed` plugs the test-only lexical one
//! (tests/common/embedders.rs; its figures check the plumbing and are never the product's);
//! the real encoder plugs in through the same `Arc<dyn Embedder>` once merged. `--sweep`
//! compares fusion weightings on **dev only**; `--eval-only` skips the token measurements.
//! `--judge local` adds the bridge's own search with and without a `SearchJudge` on the
//! embedded local model (the only chat model reachable here); `--judge MODEL@BASE_URL` on any
//! OpenAI-compatible endpoint instead (key from `OPENAI_API_KEY`, none when unset), e.g.
//! `--judge qwen2.5-7b-instruct@http://127.0.0.1:8000/v1`; `--cached-build` times a bridge's
//! index build from the vectors' cache file (≤ 100 ms).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::eval::{self, Hybrid};
use common::search::{big_bridge, full_schemas, local_search_turn, search_turn, tokens};
use serde_json::Value;
use toolwright_core::Embedder;
use toolwright_mcp_bridge::{Intent, McpBridge, SearchJudge, SemanticSearch, ToolSearchConfig};
use toolwright_tool_search::{HybridConfig, SearchIndex};
use toolwright_tool_system::ProtocolKind;

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

/// The first cut's text (before 2026-11-27 evening): the name with its group, the first 600
/// characters of the description, up to 12 parameters with 80 characters of each description.
fn legacy_text(d: &toolwright_tool_search::ToolDoc) -> String {
    let collapse = |s: &str, max: usize| -> String {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(max)
            .collect()
    };
    let name = collapse(&d.name.replace(['_', '-'], " "), 200);
    let mut out = name.clone();
    let group = collapse(&d.group, 200);
    if !group.is_empty() && !name.to_lowercase().contains(&group.to_lowercase()) {
        out = format!("{group}: {out}");
    }
    let description = collapse(&d.description, 600);
    let description = description.trim_end_matches(['.', '。']);
    if !description.is_empty() {
        out.push_str(". ");
        out.push_str(description);
    }
    let parameters: Vec<String> = d
        .parameters
        .iter()
        .take(12)
        .filter_map(|(n, desc)| {
            let (n, desc) = (collapse(n, 64), collapse(desc, 80));
            match (n.is_empty(), desc.is_empty()) {
                (true, _) => None,
                (false, true) => Some(n),
                (false, false) => Some(format!("{n} ({desc})")),
            }
        })
        .collect();
    if !parameters.is_empty() {
        out.push_str(". Parameters: ");
        out.push_str(&parameters.join(", "));
    }
    out
}

/// The recipes of what the encoder reads compared on dev: the first cut's and
/// the one in use ([`toolwright_tool_search::embedding_text`]: the name's words and the first sentence),
/// and three variants of it that were measured and not taken (docs/benchmarks-archive.md).
fn recipe(which: &str, d: &toolwright_tool_search::ToolDoc) -> String {
    let current = toolwright_tool_search::embedding_text(d);
    let (words, first) = current.split_once(": ").unwrap_or((&current, ""));
    let params: Vec<String> = d
        .parameters
        .iter()
        .take(8)
        .map(|(n, _)| {
            toolwright_tool_search::embedding_text(&toolwright_tool_search::ToolDoc::new(
                n.clone(),
                "",
            ))
        })
        .collect();
    match which {
        "legacy" => legacy_text(d),
        "name+first (in use)" => current,
        "group+name+first" => format!("{} {current}", d.group.replace(['_', '-'], " ")),
        "name+first+params" if params.is_empty() => current,
        "name+first+params" => format!("{current} ({})", params.join(", ")),
        "first+name" if first.is_empty() => current,
        "first+name" => format!("{first} ({words})"),
        other => panic!("recipe {other}"),
    }
}

/// The tool-search evaluation: BM25 alone, and hybrid with `embedder` when one is given. With
/// `dev_only`, the test split is neither scored nor printed (tuning runs).
async fn evaluation(
    b: &McpBridge,
    embedder: Option<Arc<dyn Embedder>>,
    sweep: bool,
    show_misses: bool,
    dev_only: bool,
    recipes: bool,
) {
    let catalog = b.tools().await;
    let docs = eval::docs(b, &catalog);
    let dev = eval::load(eval::DEV, &catalog);
    let test = if dev_only {
        Vec::new()
    } else {
        eval::load(eval::TEST, &catalog)
    };
    let splits: Vec<(&str, &Vec<eval::Labelled>)> = if dev_only {
        vec![("dev", &dev)]
    } else {
        vec![("dev", &dev), ("test", &test)]
    };
    let bm25 = SearchIndex::new(docs.clone());
    println!(
        "\ntool-search evaluation over {} tools: dev {} requests, test {}{}",
        catalog.len(),
        dev.len(),
        test.len(),
        if dev_only {
            " (--dev-only: test not scored)"
        } else {
            ""
        }
    );
    println!(
        "\n| split | method | queries | n | recall@1 | recall@5 | MRR |\n|---|---|---|---|---|---|---|"
    );
    let mut negatives = Vec::new();
    for &(split, queries) in &splits {
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
    if recipes {
        println!("\ntext recipes, DEV ONLY (dense alone / hybrid with the default fusion):");
        println!(
            "| recipe | tokens (sum, median, max) | encoding | dense r@1 | dense r@5 | dense MRR | hybrid r@1 | hybrid r@5 | hybrid MRR | example |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        let e5 = toolwright_local_model::E5Embedder::fetch().await.ok();
        for which in [
            "legacy",
            "name+first (in use)",
            "group+name+first",
            "name+first+params",
            "first+name",
        ] {
            let texts: Vec<String> = docs.iter().map(|d| recipe(which, d)).collect();
            let tokens = e5.as_ref().map(|m| {
                let mut n: Vec<usize> = texts
                    .iter()
                    .map(|t| m.token_ids(t, toolwright_core::EmbedKind::Document).len())
                    .collect();
                n.sort();
                (n.iter().sum::<usize>(), n[n.len() / 2], n[n.len() - 1])
            });
            let h = Hybrid::with_texts(
                docs.clone(),
                &texts,
                e.clone(),
                &dev,
                &[],
                HybridConfig::default(),
            )
            .await
            .expect("the encoder");
            let hyb = eval::score(&dev, |q| h.search(q));
            let build = h.build;
            let h = h.with(HybridConfig::default().with_weights(0.0, 1.0));
            let dense = eval::score(&dev, |q| h.search(q));
            println!(
                "| {which} | {tokens:?} | {build:.2?} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:?} |",
                dense.all.recall1(),
                dense.all.recall5(),
                dense.all.mrr(),
                hyb.all.recall1(),
                hyb.all.recall5(),
                hyb.all.mrr(),
                texts
                    .get(7)
                    .map(|t| t.chars().take(90).collect::<String>())
                    .unwrap_or_default()
            );
        }
    }
    let label = format!("hybrid ({})", e.id());
    let hybrid = Hybrid::new(docs, e, &dev, &test, HybridConfig::default())
        .await
        .expect("the encoder");
    for &(split, queries) in &splits {
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
            "\nfusion sweep, DEV ONLY ({label}):\n| fusion | k | BM25 weight | dense weight | recall@1 | recall@5 | MRR | en @5 | zh @5 |\n|---|---|---|---|---|---|---|---|---|"
        );
        let mut h = hybrid;
        let mut configs = Vec::new();
        for k in [5.0, 10.0, 20.0, 30.0, 60.0] {
            for (wb, wd) in [
                (1.0, 0.5),
                (1.0, 1.0),
                (1.0, 1.5),
                (1.0, 2.0),
                (1.0, 3.0),
                (0.0, 1.0),
            ] {
                configs.push(HybridConfig::default().with_k(k).with_weights(wb, wd));
            }
        }
        for (wb, wd) in [
            (1.0, 0.5),
            (1.0, 1.0),
            (1.0, 1.5),
            (1.0, 2.0),
            (1.0, 3.0),
            (1.0, 4.0),
            (0.0, 1.0),
        ] {
            configs.push(
                HybridConfig::default()
                    .with_fusion(toolwright_tool_search::Fusion::Score)
                    .with_weights(wb, wd),
            );
        }
        for c in configs {
            h = h.with(c);
            let r = eval::score(&dev, |q| h.search(q));
            println!(
                "| {:?} | {} | {} | {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} |",
                c.fusion,
                c.k,
                c.bm25_weight,
                c.dense_weight,
                r.all.recall1(),
                r.all.recall5(),
                r.all.mrr(),
                r.en.recall5(),
                r.zh.recall5()
            );
        }
        // "No tool fits" measures on dev: each calibrated to turn away at most
        // MAX_ANSWERABLE_LOSS of dev's answerable requests; how many dev negatives it stops.
        println!(
            "\nno-fit measures, DEV ONLY:\n| measure | threshold | dev negatives stopped | dev answerable turned away |\n|---|---|---|---|"
        );
        type Measure = fn(&[f32], f32) -> f32;
        let measures: [(&str, Measure); 4] = [
            ("z-score of the top cosine (fit)", |_, z| z),
            ("top cosine", |c, _| {
                c.iter().copied().fold(f32::MIN, f32::max)
            }),
            ("top cosine − mean", |c, _| {
                c.iter().copied().fold(f32::MIN, f32::max) - c.iter().sum::<f32>() / c.len() as f32
            }),
            ("top cosine − 10th", |c, _| {
                let mut s = c.to_vec();
                s.sort_by(|a, b| b.total_cmp(a));
                s[0] - s[9.min(s.len() - 1)]
            }),
        ];
        for (name, m) in measures {
            let of = |q: &eval::Labelled| {
                let c = h.cosines(q);
                m(&c, h.index.fit(&q.query, &h.vectors[&q.query]).unwrap())
            };
            let yes: Vec<f32> = dev
                .iter()
                .filter(|q| !q.expect.is_empty())
                .map(of)
                .collect();
            let no: Vec<f32> = dev.iter().filter(|q| q.expect.is_empty()).map(of).collect();
            let t = toolwright_tool_search::calibrate_no_fit(&yes, &no, eval::MAX_ANSWERABLE_LOSS)
                .unwrap();
            println!(
                "| {name} | {t:.4} | {} of {} | {} of {} |",
                no.iter().filter(|&&x| x < t).count(),
                no.len(),
                yes.iter().filter(|&&x| x < t).count(),
                yes.len()
            );
            if show_misses {
                let mut sy = yes.clone();
                sy.sort_by(f32::total_cmp);
                let mut sn = no.clone();
                sn.sort_by(f32::total_cmp);
                println!(
                    "  answerable lowest 10: {:?}\n  negatives: {sn:?}",
                    &sy[..10.min(sy.len())]
                );
            }
        }
    }
}

/// The bridge's own search (`McpBridge::search_tools`: hybrid with `embedder` when given, else
/// BM25) with and without a [`SearchJudge`] on `judge` (`local`: the embedded local model, else
/// `MODEL@BASE_URL` of an OpenAI-compatible endpoint), on dev (and test unless `dev_only`). The
/// local model is the only chat model this machine reaches: its rows say what a 135M-parameter
/// judge does, not what a user's model would.
async fn judged_evaluation(
    b: &McpBridge,
    judge: &str,
    embedder: Option<Arc<dyn Embedder>>,
    dev_only: bool,
    show_misses: bool,
) {
    let catalog = b.tools().await;
    let mut splits = vec![("dev", eval::load(eval::DEV, &catalog))];
    if !dev_only {
        splits.push(("test", eval::load(eval::TEST, &catalog)));
    }
    b.set_semantic_search(embedder.map(|e| SemanticSearch::new(e).with_cache_dir(None)));
    let model: Arc<dyn toolwright_core::ChatModel> = match judge {
        "local" => toolwright_local_model::default_model()
            .await
            .expect("the local model (fetched once into the toolkit cache)"),
        endpoint => {
            let (name, url) = endpoint
                .split_once('@')
                .expect("--judge local, or --judge MODEL@BASE_URL");
            let mut config = toolwright_model_gateway::OpenAiConfig::new(name).with_base_url(url);
            if let Ok(key) = std::env::var("OPENAI_API_KEY") {
                config = config.with_api_key(key);
            }
            Arc::new(
                toolwright_model_gateway::OpenAiModel::new(config).expect("the judge's endpoint"),
            )
        }
    };
    let label = model.info().model;
    println!(
        "\ntool search through the bridge's search, with and without a judge ({label}):\n| split | method | queries | n | recall@1 | recall@5 | MRR |\n|---|---|---|---|---|---|---|"
    );
    let mut negatives = Vec::new();
    for judge in [
        None,
        Some(SearchJudge::new(model.clone()).with_timeout(std::time::Duration::from_secs(120))),
    ] {
        let method = if judge.is_some() {
            format!("bridge + judge ({label})")
        } else {
            "bridge".to_owned()
        };
        b.set_search_judge(judge);
        for (split, queries) in &splits {
            let mut found = std::collections::HashMap::new();
            let start = std::time::Instant::now();
            for q in queries {
                let hits: Vec<String> = b
                    .search_tools(&q.query, 10)
                    .await
                    .into_iter()
                    .map(|r| r.tool.exposed_name)
                    .collect();
                found.insert(q.query.clone(), hits);
                if found.len() % 10 == 1 {
                    eprintln!(
                        "  {method} {split}: {} of {} requests, {:.1?}",
                        found.len(),
                        queries.len(),
                        start.elapsed()
                    );
                }
            }
            let per = start.elapsed() / queries.len().max(1) as u32;
            let r = eval::score(queries, |q| found[&q.query].clone());
            println!("{}", eval::rows(split, &method, &r));
            println!("|  | ({per:.2?} per request) | | | | | |");
            negatives.push(eval::negatives_row(split, &method, &r));
            if show_misses {
                r.misses
                    .iter()
                    .for_each(|m| println!("  {split} {method} miss: {m}"));
            }
        }
    }
    b.set_search_judge(None);
    print_negatives(&negatives);
}

/// The target "a cached index build ≤ 100 ms": what a bridge started again pays for its search index
/// when the tools' vectors are in the cache file — each round a new bridge over the 360 fixture
/// tools (their server processes started and the catalog listed first, not timed), then its
/// first search (the index built from the file's vectors, plus the request's encoding) and a
/// second one (the request's encoding and the search alone). Round 0 starts with an empty cache
/// directory (every tool encoded).
async fn index_from_cache(e: Arc<dyn Embedder>) {
    let dir = tempfile::tempdir().unwrap();
    println!(
        "\nindex build from the vectors' cache file ({}):\n| round | cache | first search (index build + 1 search) | second search | difference |\n|---|---|---|---|---|",
        e.id()
    );
    for round in 0..6 {
        let b = big_bridge(ToolSearchConfig::default().with_every_turn(true)).await;
        b.set_semantic_search(Some(
            SemanticSearch::new(e.clone()).with_cache_dir(Some(dir.path().to_path_buf())),
        ));
        assert_eq!(b.tools().await.len(), 360);
        let start = std::time::Instant::now();
        let first = b.search_tools("read a file", 5).await;
        let first_t = start.elapsed();
        let start = std::time::Instant::now();
        let second = b.search_tools("read a file", 5).await;
        let second_t = start.elapsed();
        assert_eq!(first.len(), second.len());
        println!(
            "| {round} | {} | {first_t:.2?} | {second_t:.2?} | {:.2?} |",
            if round == 0 { "empty" } else { "from the file" },
            first_t.saturating_sub(second_t)
        );
        for name in b.services().into_iter().map(|s| s.config.name) {
            b.stop(&name).await.unwrap();
        }
    }
}

/// The mixed-language evaluation: the 360 English-described tools with the Chinese vendors'
/// servers beside them (634 tools); dev = dev.json + mixed-dev.json, test = test.json +
/// mixed-test.json. BM25 alone, hybrid with raw cosines, hybrid language-neutral; by request
/// language × description language; the negatives with the "no tool fits" threshold derived on
/// dev. With `dev_only`, test is neither scored nor printed.
async fn mixed_evaluation(
    e: Option<Arc<dyn Embedder>>,
    dev_only: bool,
    show_misses: bool,
    sweep: bool,
    dump: Option<String>,
) {
    let b = common::search::mixed_bridge(ToolSearchConfig::default().with_every_turn(true)).await;
    let catalog = b.tools().await;
    let docs = eval::docs(&b, &catalog);
    let load = |paths: [&str; 2]| {
        let mut all = eval::load(paths[0], &catalog);
        all.extend(eval::load(paths[1], &catalog));
        eval::mark_described(&mut all, &catalog, &docs);
        all
    };
    let dev = load([eval::DEV, eval::MIXED_DEV]);
    let test = if dev_only {
        Vec::new()
    } else {
        load([eval::TEST, eval::MIXED_TEST])
    };
    let described = docs
        .iter()
        .filter(|d| {
            toolwright_tool_search::Script::of(&toolwright_tool_search::embedding_text(d))
                == toolwright_tool_search::Script::Cjk
        })
        .count();
    println!(
        "\nmixed-language evaluation over {} tools ({described} described in Chinese): dev {} requests, test {}{}",
        catalog.len(),
        dev.len(),
        test.len(),
        if dev_only {
            " (--dev-only: test not scored)"
        } else {
            ""
        }
    );
    let mut splits = vec![("dev", &dev)];
    if !dev_only {
        splits.push(("test", &test));
    }
    println!(
        "\n| split | method | queries | n | recall@1 | recall@5 | MRR |\n|---|---|---|---|---|---|---|"
    );
    let mut negatives = Vec::new();
    let bm25 = SearchIndex::new(docs.clone());
    for &(split, queries) in &splits {
        let r = eval::score(queries, |q| eval::bm25(&bm25, q));
        println!("{}", eval::described_rows(split, "BM25", &r));
        negatives.push(eval::negatives_row(split, "BM25", &r));
    }
    let Some(e) = e else {
        println!("\n(no encoder given: hybrid rows need --embedder)");
        print_negatives(&negatives);
        return;
    };
    // Paraphrases are encoded too (for the learning measure), as extra requests.
    let paraphrases: Vec<eval::Labelled> = dev
        .iter()
        .chain(&test)
        .filter_map(|q| {
            q.paraphrase.as_ref().map(|p| eval::Labelled {
                query: p.clone(),
                paraphrase: None,
                ..q.clone()
            })
        })
        .collect();
    let mut encoded: Vec<eval::Labelled> = test.clone();
    encoded.extend(paraphrases);
    for (label, config) in [
        (
            "hybrid, raw cosines",
            HybridConfig::default().with_language_neutral(false),
        ),
        ("hybrid, language-neutral", HybridConfig::default()),
    ] {
        let h = Hybrid::new(docs.clone(), e.clone(), &dev, &encoded, config)
            .await
            .expect("the encoder");
        for &(split, queries) in &splits {
            // Ranking without the no-fit gate; the negatives with it.
            let open = eval::score(queries, |q| h.search_ungated(q));
            println!("{}", eval::described_rows(split, label, &open));
            let gated = eval::score(queries, |q| h.search(q));
            negatives.push(eval::negatives_row(
                split,
                &format!("{label}, no-fit on"),
                &gated,
            ));
            if show_misses {
                open.misses
                    .iter()
                    .for_each(|m| println!("  {split} {label} miss: {m}"));
            }
        }
        println!(
            "|  | ({label}: threshold {:?}; encoding the catalog {:.2?}; a request p50 {:.2?}) | | | | | |",
            h.threshold, h.build, h.query_p50
        );
        if config.language_neutral {
            learning(&h, &docs, &catalog, &splits, h.index.hybrid());
            if let Some(path) = &dump {
                dump_features(&h, &docs, &splits, path);
            }
        }
        if sweep && config.language_neutral {
            println!(
                "\nfusion sweep, language-neutral, DEV ONLY:\n| fusion | BM25 weight | dense weight | r@1 | r@5 | en @1 | en @5 | zh @1 | zh @5 | zh→en @5 | zh→zh @5 |\n|---|---|---|---|---|---|---|---|---|---|---|"
            );
            let mut h = h;
            for (fusion, wb, wd) in [
                (toolwright_tool_search::Fusion::Score, 1.0, 1.0),
                (toolwright_tool_search::Fusion::Score, 1.0, 1.5),
                (toolwright_tool_search::Fusion::Score, 1.0, 2.0),
                (toolwright_tool_search::Fusion::Score, 1.0, 3.0),
                (toolwright_tool_search::Fusion::Score, 1.0, 4.0),
                (toolwright_tool_search::Fusion::Score, 0.0, 1.0),
                (toolwright_tool_search::Fusion::Rank, 1.0, 1.0),
                (toolwright_tool_search::Fusion::Rank, 1.0, 2.0),
            ] {
                h = h.with(config.with_fusion(fusion).with_weights(wb, wd));
                let r = eval::score(&dev, |q| h.search_ungated(q));
                println!(
                    "| {fusion:?} | {wb} | {wd} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    r.all.recall1(),
                    r.all.recall5(),
                    r.en.recall1(),
                    r.en.recall5(),
                    r.zh.recall1(),
                    r.zh.recall5(),
                    r.zh_en.recall5(),
                    r.zh_zh.recall5()
                );
            }
            // "No tool fits" from both channels: for each weight of the lexical half, the
            // threshold turning away at most MAX_ANSWERABLE_LOSS of dev's answerable requests,
            // and how many dev negatives it stops.
            println!(
                "\nno-fit from both channels, DEV ONLY (fit = nearest raw cosine + w × lexical):\n| w | threshold | dev negatives stopped | dev answerable turned away |\n|---|---|---|---|"
            );
            let parts: Vec<(bool, toolwright_tool_search::Fit)> = dev
                .iter()
                .map(|q| {
                    (
                        q.expect.is_empty(),
                        h.index.fit_parts(&q.query, &h.vectors[&q.query]).unwrap(),
                    )
                })
                .collect();
            if show_misses {
                for q in &dev {
                    let c = h.index.cosines(&q.query, &h.vectors[&q.query]).unwrap();
                    let mut s = c.clone();
                    s.sort_by(|a, b| b.total_cmp(a));
                    let p = h.index.fit_parts(&q.query, &h.vectors[&q.query]).unwrap();
                    let fused = h
                        .index
                        .search_hybrid(&q.query, &h.vectors[&q.query], 5)
                        .unwrap();
                    let bm = h.index.search(&q.query, 5);
                    let dtop = (0..c.len()).max_by(|&a, &b| c[a].total_cmp(&c[b])).unwrap();
                    let bm_in_dense = bm
                        .first()
                        .map(|b| c.iter().filter(|&&x| x > c[b.index]).count());
                    println!(
                        "FEAT {} top {:.3} z {:.4} lex {:.2} fused {:.2} agree {} bmrank_in_dense {:?} {:?}",
                        if q.expect.is_empty() { "NEG" } else { "ANS" },
                        s[0],
                        h.cosines(q).into_iter().fold(f32::MIN, f32::max),
                        p.lexical,
                        fused.first().map_or(0.0, |f| f.score),
                        bm.first().is_some_and(|b| b.index == dtop),
                        bm_in_dense,
                        q.query
                    );
                }
            }
            for w in [0.0f32, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0] {
                let yes: Vec<f32> = parts
                    .iter()
                    .filter(|p| !p.0)
                    .map(|p| {
                        p.1.score(&toolwright_tool_search::FitModel::linear(w), h.index.len())
                    })
                    .collect();
                let no: Vec<f32> = parts
                    .iter()
                    .filter(|p| p.0)
                    .map(|p| {
                        p.1.score(&toolwright_tool_search::FitModel::linear(w), h.index.len())
                    })
                    .collect();
                let t =
                    toolwright_tool_search::calibrate_no_fit(&yes, &no, eval::MAX_ANSWERABLE_LOSS)
                        .unwrap();
                println!(
                    "| {w} | {t:.3} | {} of {} | {} of {} |",
                    no.iter().filter(|&&x| x < t).count(),
                    no.len(),
                    yes.iter().filter(|&&x| x < t).count(),
                    yes.len()
                );
            }
            break;
        }
    }
    print_negatives(&negatives);
}

/// Learning from use, per split: the mixed-language answerable requests at even positions are
/// replayed as past use (request → its first expected tool, into a `UseMemory`); then the
/// paraphrases of the replayed ones and of the others (the control) are scored without and
/// with what was learned (the learned requests as the tools' keywords for BM25, their vectors
/// for the cosine side).
fn learning(
    h: &Hybrid,
    docs: &[toolwright_tool_search::ToolDoc],
    catalog: &[toolwright_mcp_bridge::McpTool],
    splits: &[(&str, &Vec<eval::Labelled>)],
    config: HybridConfig,
) {
    println!(
        "\nlearning from use (half the mixed requests replayed as past use; their paraphrases scored):\n| split | paraphrases of | n | before r@1 | before r@5 | after r@1 | after r@5 |\n|---|---|---|---|---|---|---|"
    );
    for &(split, queries) in splits {
        let mixed: Vec<&eval::Labelled> = queries
            .iter()
            .filter(|q| q.paraphrase.is_some() && !q.expect.is_empty())
            .collect();
        let mut memory = toolwright_tool_search::UseMemory::new(1000);
        for q in mixed.iter().step_by(2) {
            memory.record(&q.query, &q.expect[0]);
        }
        let learned_docs: Vec<toolwright_tool_search::ToolDoc> = docs
            .iter()
            .map(|d| {
                let keywords: Vec<String> = d
                    .keywords
                    .iter()
                    .cloned()
                    .chain(memory.keywords_for(&d.name))
                    .collect();
                d.clone().with_keywords(keywords)
            })
            .collect();
        let learned: Vec<(toolwright_tool_search::LearnedPair, Vec<f32>)> = memory
            .pairs()
            .into_iter()
            .map(|p| {
                let v = h.vectors[&p.request].clone();
                (p, v)
            })
            .collect();
        assert_eq!(catalog.len(), docs.len());
        // Three ways to use what was learned: the requests as keywords (BM25), their vectors
        // (the cosine side), both.
        let keywords_only = SearchIndex::new(learned_docs.clone())
            .with_vectors(h.tool_vectors.clone())
            .unwrap()
            .with_hybrid(config);
        let (vectors_only, kept) = SearchIndex::new(docs.to_vec())
            .with_vectors(h.tool_vectors.clone())
            .unwrap()
            .with_hybrid(config)
            .with_learned(learned.clone())
            .unwrap();
        assert_eq!(kept, memory.len(), "every learned tool is in the catalog");
        let (both, _) = SearchIndex::new(learned_docs)
            .with_vectors(h.tool_vectors.clone())
            .unwrap()
            .with_hybrid(config)
            .with_learned(learned)
            .unwrap();
        for (which, offset) in [("replayed requests", 0), ("the others (control)", 1)] {
            let paraphrased: Vec<eval::Labelled> = mixed
                .iter()
                .skip(offset)
                .step_by(2)
                .map(|q| eval::Labelled {
                    query: q.paraphrase.clone().unwrap(),
                    paraphrase: None,
                    ..(*q).clone()
                })
                .collect();
            let before = eval::score(&paraphrased, |q| h.search_ungated(q));
            let after = |index: &SearchIndex| {
                eval::score(&paraphrased, |q| {
                    index
                        .search_hybrid(&q.query, &h.vectors[&q.query], 10)
                        .unwrap()
                        .into_iter()
                        .map(|x| x.name)
                        .collect()
                })
            };
            for (how, index) in [
                ("keywords", &keywords_only),
                ("vectors", &vectors_only),
                ("both", &both),
            ] {
                let with = after(index);
                println!(
                    "| {split} | {which}, learned as {how} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    before.all.n,
                    before.all.recall1(),
                    before.all.recall5(),
                    with.all.recall1(),
                    with.all.recall5()
                );
            }
        }
    }
}

/// Writes what a fusion or "no tool fits" rule is computed from (each tool's script and vector;
/// each request's split, labels, vector, BM25's top 50 and lexical fit) as JSON to `path`, so
/// rules can be compared offline without re-encoding.
fn dump_features(
    h: &Hybrid,
    docs: &[toolwright_tool_search::ToolDoc],
    splits: &[(&str, &Vec<eval::Labelled>)],
    path: &str,
) {
    use serde_json::json;
    let tools: Vec<Value> = docs
        .iter()
        .zip(&h.tool_vectors)
        .map(|(d, v)| {
            let text = toolwright_tool_search::embedding_text(d);
            let zh =
                toolwright_tool_search::Script::of(&text) == toolwright_tool_search::Script::Cjk;
            json!({"name": d.name, "zh": zh, "text": text, "vector": v})
        })
        .collect();
    let mut requests = Vec::new();
    for &(split, queries) in splits {
        for q in queries.iter() {
            let mut texts = vec![(q.query.clone(), false)];
            if let Some(p) = &q.paraphrase {
                texts.push((p.clone(), true));
            }
            for (text, paraphrase) in texts {
                let bm25: Vec<Value> = h
                    .index
                    .search(&text, 50)
                    .into_iter()
                    .map(|x| json!([x.index, x.score]))
                    .collect();
                let fit = h.index.fit_parts(&text, &h.vectors[&text]).unwrap();
                requests.push(json!({
                    "split": split, "query": text, "paraphrase": paraphrase, "zh": q.zh,
                    "zh_described": q.zh_described, "expect": q.expect, "vector": h.vectors[&text],
                    "bm25": bm25, "lexical": fit.lexical,
                }));
            }
        }
    }
    std::fs::write(
        path,
        json!({"tools": tools, "requests": requests}).to_string(),
    )
    .unwrap();
    println!("features written to {path}");
}

/// `--probe FILE`: a small catalog and requests (`{"tools": [{"name", "description"}],
/// "queries": [...]}`) searched with the encoder: each request's fit (both channels) and best
/// three tools. How "no tool fits" behaves on a catalog other than the fixture's.
async fn probe(e: Arc<dyn Embedder>, path: &str) {
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let docs: Vec<toolwright_tool_search::ToolDoc> = spec["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            toolwright_tool_search::ToolDoc::new(
                t["name"].as_str().unwrap(),
                t["description"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let texts: Vec<String> = docs
        .iter()
        .map(toolwright_tool_search::embedding_text)
        .collect();
    let vectors = eval::embed(e.as_ref(), &texts, toolwright_core::EmbedKind::Document)
        .await
        .unwrap();
    let vectors_out = vectors.clone();
    let index = SearchIndex::new(docs)
        .with_vectors(vectors)
        .unwrap()
        .with_hybrid(HybridConfig::default());
    let mut dumped = Vec::new();
    for q in spec["queries"].as_array().unwrap() {
        let q = q.as_str().unwrap();
        let v = e
            .embed(&[q.to_owned()], toolwright_core::EmbedKind::Query)
            .await
            .unwrap()
            .remove(0);
        let bm25: Vec<Value> = index
            .search(q, 50)
            .into_iter()
            .map(|x| serde_json::json!([x.index, x.score]))
            .collect();
        dumped.push(
            serde_json::json!({"split": "probe", "query": q, "paraphrase": false, "zh": false,
            "zh_described": false, "expect": [], "vector": v, "bm25": bm25,
            "lexical": index.fit_parts(q, &v).unwrap().lexical}),
        );
        let fit = index.fit_parts(q, &v).unwrap();
        let hits: Vec<String> = index
            .search_hybrid(q, &v, 3)
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect();
        println!(
            "PROBE dense {:.4} lexical {:.3} {q:?} -> {hits:?}",
            fit.dense, fit.lexical
        );
    }
    let tools: Vec<Value> = texts
        .iter()
        .zip(&vectors_out)
        .zip(spec["tools"].as_array().unwrap())
        .map(|((text, v), t)| {
            let zh =
                toolwright_tool_search::Script::of(text) == toolwright_tool_search::Script::Cjk;
            serde_json::json!({"name": t["name"], "zh": zh, "text": text, "vector": v})
        })
        .collect();
    let out = format!("{path}.features.json");
    std::fs::write(
        &out,
        serde_json::json!({"tools": tools, "requests": dumped}).to_string(),
    )
    .unwrap();
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
    let dev_only = args.iter().any(|a| a == "--dev-only");
    let recipes = args.iter().any(|a| a == "--recipes");
    let judge = args.iter().position(|a| a == "--judge").map(|i| {
        args.get(i + 1)
            .expect("--judge local, or --judge MODEL@BASE_URL")
            .clone()
    });
    let cached_build = args.iter().any(|a| a == "--cached-build");
    let mixed = args.iter().any(|a| a == "--mixed");
    let dump = args
        .iter()
        .position(|a| a == "--dump")
        .and_then(|i| args.get(i + 1))
        .cloned();
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
            .block_on(toolwright_local_model::E5Embedder::fetch())
            .expect("the e5 encoder (fetched once into the toolkit cache)");
        Some(Arc::new(e) as Arc<dyn Embedder>)
    } else {
        embedder
    };
    if let Some(path) = args
        .iter()
        .position(|a| a == "--probe")
        .and_then(|i| args.get(i + 1))
    {
        rt.block_on(probe(
            embedder.clone().expect("--probe needs --embedder"),
            path,
        ));
        return;
    }
    if mixed {
        rt.block_on(mixed_evaluation(embedder, dev_only, misses, sweep, dump));
        return;
    }
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

        evaluation(&b, embedder.clone(), sweep, misses, dev_only, recipes).await;
        if cached_build {
            let e = embedder.clone().expect("--cached-build needs --embedder");
            for name in b.services().into_iter().map(|s| s.config.name) {
                b.stop(&name).await.unwrap();
            }
            index_from_cache(e).await;
            return;
        }
        if let Some(judge) = &judge {
            judged_evaluation(&b, judge, embedder, dev_only, misses).await;
        }
        if eval_only {
            return;
        }

        // (a) every full schema; (b) every level-1 line (+ the describe tool); o200k.
        let full = tokens(&full_schemas(&b).await);
        b.set_tool_search(ToolSearchConfig::default().with_every_turn(true).with_budget_tokens(usize::MAX));
        let level1 = b.prompt_section(&Intent::Normal).await.unwrap();
        let describe = toolwright_tool_system::to_openai_tool(&toolwright_mcp_bridge::describe_tool_spec());
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
