//! The tool-search evaluation over crates/tool-search/fixtures/eval/{dev,test}.json: recall@1,
//! recall@5 and MRR (of the first right tool in the top 10), all / English / Chinese / the
//! requests one tool answers, and the negatives' false hits; BM25 alone, and hybrid with any
//! [`Embedder`] (its "no tool fits" threshold derived on dev only, then applied to both).
//! Shared by benches/tool_search.rs and tests/tool_search.rs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolwright_core::{EmbedKind, Embedder, ModelError};
use toolwright_mcp_bridge::{McpBridge, McpTool, tool_doc};
use toolwright_tool_search::{
    HybridConfig, SearchIndex, ToolDoc, calibrate_no_fit, embedding_text,
};

pub const DEV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tool-search/fixtures/eval/dev.json"
);
pub const TEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tool-search/fixtures/eval/test.json"
);

/// The mixed-language requests (crates/tool-search/fixtures/README.md).
#[allow(dead_code)]
pub const MIXED_DEV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tool-search/fixtures/eval/mixed-dev.json"
);
#[allow(dead_code)]
pub const MIXED_TEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tool-search/fixtures/eval/mixed-test.json"
);

/// The share of dev's answerable requests the "no tool fits" threshold may turn away.
pub const MAX_ANSWERABLE_LOSS: f32 = 0.05;

/// One labelled request: the exposed names of the tools that answer it (none: a negative).
#[derive(Debug, Clone)]
pub struct Labelled {
    pub query: String,
    pub zh: bool,
    pub expect: Vec<String>,
    /// The same need in other words (mixed-language requests only).
    pub paraphrase: Option<String>,
    /// Whether the first expected tool is described in Chinese (set by [`mark_described`]).
    pub zh_described: bool,
}

/// Sets each request's [`Labelled::zh_described`] from the script of its first expected
/// tool's embedding text.
#[allow(dead_code)]
pub fn mark_described(queries: &mut [Labelled], catalog: &[McpTool], docs: &[ToolDoc]) {
    for q in queries {
        q.zh_described = q.expect.first().is_some_and(|name| {
            catalog
                .iter()
                .position(|t| &t.exposed_name == name)
                .is_some_and(|i| {
                    toolwright_tool_search::Script::of(&embedding_text(&docs[i]))
                        == toolwright_tool_search::Script::Cjk
                })
        });
    }
}

/// The labelled requests of `path`, their tools named as `catalog` exposes them.
pub fn load(path: &str, catalog: &[McpTool]) -> Vec<Labelled> {
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).expect(path)).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .map(|q| Labelled {
            query: q["query"].as_str().unwrap().to_owned(),
            paraphrase: q["paraphrase"].as_str().map(str::to_owned),
            zh_described: false,
            zh: q["lang"] == "zh",
            expect: q["expect"]
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
                .collect(),
        })
        .collect()
}

/// The search documents of `catalog`, as the bridge builds them.
pub fn docs(b: &McpBridge, catalog: &[McpTool]) -> Vec<ToolDoc> {
    let services = b.services();
    catalog
        .iter()
        .map(|t| {
            let config = services
                .iter()
                .find(|s| s.config.name == t.service)
                .map(|s| &s.config);
            tool_doc(t, config)
        })
        .collect()
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Row {
    pub n: usize,
    pub at1: usize,
    pub at5: usize,
    pub rr: f64,
}

impl Row {
    fn add(&mut self, rank: Option<usize>) {
        self.n += 1;
        if let Some(r) = rank {
            self.at1 += usize::from(r == 1);
            self.at5 += usize::from(r <= 5);
            self.rr += 1.0 / r as f64;
        }
    }
    pub fn recall1(&self) -> f64 {
        self.at1 as f64 / self.n.max(1) as f64
    }
    pub fn recall5(&self) -> f64 {
        self.at5 as f64 / self.n.max(1) as f64
    }
    pub fn mrr(&self) -> f64 {
        self.rr / self.n.max(1) as f64
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub all: Row,
    pub en: Row,
    pub zh: Row,
    /// Requests one tool answers: no credit for several right answers in the five.
    pub single: Row,
    /// By request language and the first expected tool's description language.
    pub en_en: Row,
    pub en_zh: Row,
    pub zh_en: Row,
    pub zh_zh: Row,
    pub negatives: usize,
    /// Negatives that got any tool back.
    pub false_hits: usize,
    /// Answerable requests that got nothing back.
    pub turned_away: usize,
    /// `query → (wanted, got top 3)` for answerable requests whose tool was not first.
    pub misses: Vec<String>,
}

/// Scores `search` (a request → the names it returns, best first, at most 10) on `queries`.
pub fn score(queries: &[Labelled], mut search: impl FnMut(&Labelled) -> Vec<String>) -> Report {
    let mut r = Report::default();
    for q in queries {
        let hits = search(q);
        if q.expect.is_empty() {
            r.negatives += 1;
            r.false_hits += usize::from(!hits.is_empty());
            continue;
        }
        r.turned_away += usize::from(hits.is_empty());
        let rank = hits
            .iter()
            .take(10)
            .position(|h| q.expect.contains(h))
            .map(|p| p + 1);
        if rank != Some(1) {
            r.misses.push(format!(
                "{:?} wants {:?}, got {:?}",
                q.query,
                q.expect,
                &hits[..hits.len().min(3)]
            ));
        }
        let lang = if q.zh { &mut r.zh } else { &mut r.en };
        let described = match (q.zh, q.zh_described) {
            (false, false) => &mut r.en_en,
            (false, true) => &mut r.en_zh,
            (true, false) => &mut r.zh_en,
            (true, true) => &mut r.zh_zh,
        };
        let mut rows = vec![&mut r.all, lang, described];
        if q.expect.len() == 1 {
            rows.push(&mut r.single);
        }
        for row in rows {
            row.add(rank);
        }
    }
    r
}

/// `texts` through `e` in batches of 32.
pub async fn embed(
    e: &dyn Embedder,
    texts: &[String],
    kind: EmbedKind,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(32) {
        out.extend(e.embed(chunk, kind).await?);
    }
    Ok(out)
}

/// A hybrid index over the catalog with `e`, and every request's vector.
pub struct Hybrid {
    pub index: SearchIndex,
    /// The "no tool fits" threshold derived on dev (see [`MAX_ANSWERABLE_LOSS`]).
    pub threshold: Option<f32>,
    /// Encoding the whole catalog.
    pub build: Duration,
    /// Encoding one request, p50 over dev and test.
    pub query_p50: Duration,
    pub vectors: HashMap<String, Vec<f32>>,
    /// The tools' vectors, in catalog order.
    pub tool_vectors: Vec<Vec<f32>>,
}

impl Hybrid {
    /// Encodes the catalog and every request, derives the threshold on `dev` only.
    pub async fn new(
        docs: Vec<ToolDoc>,
        e: Arc<dyn Embedder>,
        dev: &[Labelled],
        test: &[Labelled],
        config: HybridConfig,
    ) -> Result<Self, ModelError> {
        let texts: Vec<String> = docs.iter().map(embedding_text).collect();
        Self::with_texts(docs, &texts, e, dev, test, config).await
    }

    /// [`Hybrid::new`] with the tools' texts given (one per doc): to compare text recipes.
    pub async fn with_texts(
        docs: Vec<ToolDoc>,
        texts: &[String],
        e: Arc<dyn Embedder>,
        dev: &[Labelled],
        test: &[Labelled],
        config: HybridConfig,
    ) -> Result<Self, ModelError> {
        let start = Instant::now();
        let tool_vectors = embed(e.as_ref(), texts, EmbedKind::Document).await?;
        let build = start.elapsed();
        // The encoder's own judge (its fit model and bank; the gate itself is applied in
        // `search`, with `threshold`).
        let judge = HybridConfig::for_encoder(e.id(), docs.len());
        let config = config
            .with_fit_model(judge.fit_model)
            .with_unserved(judge.unserved);
        let index = SearchIndex::new(docs)
            .with_vectors(tool_vectors.clone())
            .expect("one vector per tool, one width")
            .with_hybrid(config);
        let mut vectors = HashMap::new();
        let mut times = Vec::new();
        for q in dev.iter().chain(test) {
            let start = Instant::now();
            let v = e
                .embed(std::slice::from_ref(&q.query), EmbedKind::Query)
                .await?;
            times.push(start.elapsed());
            vectors.insert(q.query.clone(), v.into_iter().next().unwrap());
        }
        times.sort();
        let query_p50 = times.get(times.len() / 2).copied().unwrap_or_default();
        let fit = |q: &Labelled| index.fit(&q.query, &vectors[&q.query]).unwrap();
        let yes: Vec<f32> = dev
            .iter()
            .filter(|q| !q.expect.is_empty())
            .map(fit)
            .collect();
        let no: Vec<f32> = dev
            .iter()
            .filter(|q| q.expect.is_empty())
            .map(fit)
            .collect();
        // The shipped judge when the encoder has one (the embedded multilingual-e5-small: the
        // bank judge; other weights of it: by catalog size; both derived on dev), else one
        // derived here on dev.
        let threshold = HybridConfig::for_encoder(e.id(), index.len())
            .no_fit_below
            .or_else(|| calibrate_no_fit(&yes, &no, MAX_ANSWERABLE_LOSS));
        Ok(Self {
            index,
            threshold,
            build,
            query_p50,
            vectors,
            tool_vectors,
        })
    }

    /// The names `q` finds, best first, at most 10; none when its fit is under the threshold
    /// (what `HybridConfig::no_fit_below` does inside the index).
    pub fn search(&self, q: &Labelled) -> Vec<String> {
        if let Some(t) = self.threshold
            && self.index.fit(&q.query, &self.vectors[&q.query]).unwrap() < t
        {
            return Vec::new();
        }
        self.index
            .search_hybrid(&q.query, &self.vectors[&q.query], 10)
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect()
    }

    /// [`Hybrid::search`] without the "no tool fits" gate.
    #[allow(dead_code)]
    pub fn search_ungated(&self, q: &Labelled) -> Vec<String> {
        self.index
            .search_hybrid(&q.query, &self.vectors[&q.query], 10)
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect()
    }

    /// The cosine of `q`'s vector with every tool's (both normalised first).
    pub fn cosines(&self, q: &Labelled) -> Vec<f32> {
        let unit = |v: &[f32]| {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            v.iter().map(|x| x / n).collect::<Vec<f32>>()
        };
        let qv = unit(&self.vectors[&q.query]);
        self.tool_vectors
            .iter()
            .map(|t| unit(t).iter().zip(&qv).map(|(a, b)| a * b).sum())
            .collect()
    }

    /// The same index with another fusion (the threshold kept).
    pub fn with(self, config: HybridConfig) -> Self {
        Self {
            index: self.index.with_hybrid(config),
            ..self
        }
    }
}

/// BM25 alone: the names `q` finds, best first, at most 10.
pub fn bm25(index: &SearchIndex, q: &Labelled) -> Vec<String> {
    index
        .search(&q.query, 10)
        .into_iter()
        .map(|h| h.name)
        .collect()
}

/// Markdown rows for one split and method.
pub fn rows(split: &str, method: &str, r: &Report) -> String {
    let row = |what: &str, x: &Row| {
        format!(
            "| {split} | {method} | {what} | {} | {:.2} | {:.2} | {:.2} |",
            x.n,
            x.recall1(),
            x.recall5(),
            x.mrr()
        )
    };
    [
        row("all", &r.all),
        row("English", &r.en),
        row("Chinese", &r.zh),
        row("one right tool", &r.single),
    ]
    .join("\n")
}

/// Markdown rows for one split and method, by request language × description language.
#[allow(dead_code)]
pub fn described_rows(split: &str, method: &str, r: &Report) -> String {
    let row = |what: &str, x: &Row| {
        format!(
            "| {split} | {method} | {what} | {} | {:.2} | {:.2} | {:.2} |",
            x.n,
            x.recall1(),
            x.recall5(),
            x.mrr()
        )
    };
    [
        row("all", &r.all),
        row("English", &r.en),
        row("Chinese", &r.zh),
        row("en → en-described", &r.en_en),
        row("en → zh-described", &r.en_zh),
        row("zh → en-described", &r.zh_en),
        row("zh → zh-described", &r.zh_zh),
    ]
    .join("\n")
}

/// One markdown row of the negatives' false hits for a split and method.
pub fn negatives_row(split: &str, method: &str, r: &Report) -> String {
    format!(
        "| {split} | {method} | {} | {} ({:.0}%) | {} of {} |",
        r.negatives,
        r.false_hits,
        100.0 * r.false_hits as f64 / r.negatives.max(1) as f64,
        r.turned_away,
        r.all.n
    )
}
