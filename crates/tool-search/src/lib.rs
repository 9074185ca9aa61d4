//! # tool-search — find the few tools a request needs among hundreds
//!
//! When an agent has more tools than a prompt should carry (MCP servers add dozens each), the
//! model gets one search tool instead of the list and looks up what it needs by words, in
//! English or Chinese. This crate is that search, and nothing else: pure, no I/O, no async.
//!
//! - [`SearchIndex`] ranks [`ToolDoc`]s with **BM25** (the `bm25` crate's embedder and scorer)
//!   over each tool's name (weighted ×3), description, group (its MCP service), group
//!   description, keywords (×2) and its parameters' names.
//! - [`Analyzer`] turns text into terms: English words split at code-identifier boundaries and
//!   stemmed (Snowball, `rust-stemmers`); Chinese as character bigrams plus dictionary words
//!   from a shipped glossary that also adds their English, so `读取文件内容` finds `read_file`.
//!
//! ```
//! use toolwright_tool_search::{SearchIndex, ToolDoc};
//! let index = SearchIndex::new(vec![
//!     ToolDoc::new("fs__read_file", "Read the complete contents of a file from the file system."),
//!     ToolDoc::new("fs__list_directory", "Get a detailed listing of all files and directories in a specified path."),
//!     ToolDoc::new("time__get_current_time", "Get current time in a specific timezone"),
//! ]);
//! assert_eq!(index.search("what's inside this folder", 1)[0].name, "fs__list_directory");
//! assert_eq!(index.search("读取文件内容", 1)[0].name, "fs__read_file");
//! assert_eq!(index.search("现在几点", 1)[0].name, "time__get_current_time");
//! ```
//!
//! ## Search by meaning (the dense half)
//!
//! BM25 finds a tool only by shared words. A sentence encoder (an
//! [`toolwright_core::Embedder`](https://docs.rs/toolwright-core), run by the caller: this crate does no I/O)
//! gives each tool a vector of [`embedding_text`] and the query a vector; the index then fuses
//! BM25's ranking with the cosine ranking by **reciprocal rank** ([`HybridConfig`]), so a
//! request that shares no word with its tool still finds it. Cosines of small encoders sit in a
//! narrow band (0.75–0.9 for multilingual-e5-small), and a small multilingual encoder puts a
//! Chinese request nearer any Chinese description than the English description of the tool it
//! means; so each language's vectors are centred on that language's mean
//! ([`HybridConfig::language_neutral`], on by default), which leaves the meaning. "No tool fits"
//! is decided on [`SearchIndex::fit`], from both channels ([`Fit`]: the nearest cosine and the
//! share of the request's words the best BM25 tool holds), against a threshold
//! derived on labelled requests with [`calibrate_no_fit`].
//!
//! ```
//! use toolwright_tool_search::{HybridConfig, SearchIndex, ToolDoc, embedding_text, text_hash};
//! let docs = vec![
//!     ToolDoc::new("maps__elevation", "Get elevation data for locations on the earth"),
//!     ToolDoc::new("git__stash", "Save local changes away and restore them later"),
//!     ToolDoc::new("time__now", "Get current time in a specific timezone"),
//! ];
//! // What the encoder reads for each tool, and the key its vector is cached under.
//! let text = embedding_text(&docs[0]);
//! assert_eq!(text, "elevation: Get elevation data for locations on the earth");
//! assert_eq!(text_hash(&text), text_hash(&embedding_text(&docs[0])));
//! // Vectors from the caller's encoder (toy 3-d ones here), one per tool, in order.
//! let index = SearchIndex::new(docs)
//!     .with_vectors(vec![vec![1.0, 0.1, 0.0], vec![0.0, 1.0, 0.1], vec![0.1, 0.0, 1.0]])
//!     .unwrap()
//!     .with_hybrid(HybridConfig::default());
//! // "how high is Everest" shares no word with any tool; its vector is near the first one.
//! let hits = index.search_hybrid("how high is Everest", &[0.9, 0.2, 0.1], 2).unwrap();
//! assert_eq!(hits[0].name, "maps__elevation");
//! ```
//!
//! ## A chat model's second look (the judge)
//!
//! [`judge`] holds what a caller needs to let a chat model reorder the best candidates and turn
//! them all down when none fits: the prompt, the answer's JSON Schema (only the candidates'
//! names allowed) and [`judge::read`], which reads the answer as models write it.

mod analyzer;
mod config;
mod dense;
mod fit;
mod fusion;
pub mod judge;
mod learn;
mod script;
mod text;
mod unserved;
mod vector;

pub use analyzer::{Analyzer, CHINESE_STOP_WORDS, MAX_INPUT_CHARS};
pub use config::{Fusion, HybridConfig};
pub use dense::MIN_SCRIPT_TOOLS;
pub use fit::{
    DEFAULT_LEXICAL_FIT_WEIGHT, E5_SMALL_FIT_BELOW, E5_SMALL_FIT_MODEL, E5_SMALL_NO_FIT, Fit,
    FitModel, calibrate_no_fit, no_fit_for_size,
};
pub use fusion::BM25_FIRST_WITHIN;
pub use learn::{LearnError, LearnedPair, MAX_CAPACITY, MAX_PAIRS_PER_TOOL, UseMemory};
pub use script::Script;
pub use text::{EMBED_SENTENCE_CHARS, embedding_text, text_hash};
pub use unserved::{E5_SMALL_ID, UnservedIntents};
pub use vector::{MAX_DIMENSIONS, VectorError};

const _: () = assert!(
    (NAME_WEIGHT + 3 + KEYWORD_WEIGHT) * (MAX_FIELD_CHARS + 3) + MAX_PARAMETER_NAMES_CHARS + 4
        <= MAX_INPUT_CHARS
);

use bm25::{Embedder, EmbedderBuilder, Embedding, Scorer};

/// The most results one search returns.
pub const MAX_LIMIT: usize = 50;

/// One tool as the index sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolDoc {
    /// The name the model calls it by.
    pub name: String,
    /// What it does (the server's description).
    pub description: String,
    /// The group it belongs to (an MCP service), when any.
    pub group: String,
    /// The group's description (the operator's words for the service).
    pub group_description: String,
    /// Extra words it should be found by (a service's trigger keywords).
    pub keywords: Vec<String>,
    /// Its parameters' names and descriptions, in schema order. BM25 indexes the names (the first
    /// 300 characters of them), not the descriptions: on the
    /// mixed-language dev split the names lifted BM25's recall@5 from 0.68 to 0.71 and the
    /// hybrid's recall@1 from 0.61 to 0.63, while the descriptions (Chinese ones pulling Chinese
    /// requests to Chinese-described tools) lost Chinese requests' recall@5 (0.85 to 0.82).
    pub parameters: Vec<(String, String)>,
}

impl ToolDoc {
    /// A tool with a name and a description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            ..Self::default()
        }
    }
    /// Sets the group and its description.
    pub fn with_group(mut self, group: impl Into<String>, description: impl Into<String>) -> Self {
        self.group = group.into();
        self.group_description = description.into();
        self
    }
    /// Sets the keywords.
    pub fn with_keywords<I, S>(mut self, keywords: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keywords = keywords.into_iter().map(Into::into).collect();
        self
    }
    /// Sets the parameters (name, description), e.g. from a JSON schema's `properties`.
    pub fn with_parameters<I, N, D>(mut self, parameters: I) -> Self
    where
        I: IntoIterator<Item = (N, D)>,
        N: Into<String>,
        D: Into<String>,
    {
        self.parameters = parameters
            .into_iter()
            .map(|(n, d)| (n.into(), d.into()))
            .collect();
        self
    }
}

/// One result: the tool's position in the list the index was built from, its name and score.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Index into the documents the index was built from.
    pub index: usize,
    /// The tool's name.
    pub name: String,
    /// The score: BM25's from [`SearchIndex::search`], the fused reciprocal-rank score from
    /// [`SearchIndex::search_hybrid`] (higher is better; only comparable within one search).
    pub score: f32,
}

/// How many characters of a query are read (a model's query is a few words).
pub const MAX_QUERY_CHARS: usize = 1000;

/// How many characters of one field of a tool are indexed.
const MAX_FIELD_CHARS: usize = 2000;

/// How a tool's fields count: each field's terms repeated this many times.
const NAME_WEIGHT: usize = 3;
const KEYWORD_WEIGHT: usize = 2;

/// How many characters of a tool's parameter names (joined by spaces) BM25 indexes: room for
/// a few dozen names, and with every other field at its bound the whole tool still fits the
/// analyzer's input limit ([`MAX_INPUT_CHARS`]).
const MAX_PARAMETER_NAMES_CHARS: usize = 300;

/// A BM25 index over a fixed list of tools, with each tool's vector when the caller gives them
/// ([`SearchIndex::with_vectors`]). Build it once per catalog; searching is cheap.
pub struct SearchIndex {
    names: Vec<String>,
    /// The script of each tool's [`embedding_text`] (what its vector was made from).
    scripts: Vec<Script>,
    /// Each tool's distinct terms (sorted), and in how many tools each term is: the lexical
    /// half of [`SearchIndex::fit`].
    doc_terms: Vec<Vec<u32>>,
    df: std::collections::HashMap<u32, u32>,
    embedder: Embedder<u32, TermSource>,
    scorer: Scorer<usize, u32>,
    vectors: Option<dense::Vectors>,
    hybrid: HybridConfig,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("tools", &self.names.len())
            .field(
                "dimensions",
                &self.vectors.as_ref().map(dense::Vectors::dimensions),
            )
            .field("hybrid", &self.hybrid)
            .finish()
    }
}

/// The tokenizer the `bm25` crate calls: our [`Analyzer`].
struct TermSource(Analyzer);

impl bm25::Tokenizer for TermSource {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        self.0.terms(input_text)
    }
}

impl SearchIndex {
    /// An index over `docs` with the default [`Analyzer`].
    pub fn new(docs: Vec<ToolDoc>) -> Self {
        Self::with_analyzer(docs, Analyzer::default())
    }

    /// An index over `docs` analysed by `analyzer` (e.g. one with a deployment's own glossary,
    /// [`Analyzer::with_glossary`]).
    pub fn with_analyzer(docs: Vec<ToolDoc>, analyzer: Analyzer) -> Self {
        let texts: Vec<String> = docs.iter().map(document_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let embedder = EmbedderBuilder::<u32, TermSource>::with_tokenizer_and_fit_to_corpus(
            TermSource(analyzer),
            &refs,
        )
        .build();
        let mut scorer = Scorer::new();
        let mut doc_terms = Vec::with_capacity(texts.len());
        let mut df: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for (i, text) in texts.iter().enumerate() {
            let embedding = embedder.embed(text);
            let mut terms: Vec<u32> = embedding.0.iter().map(|t| t.index).collect();
            terms.sort_unstable();
            terms.dedup();
            for t in &terms {
                *df.entry(*t).or_default() += 1;
            }
            doc_terms.push(terms);
            scorer.upsert(&i, embedding);
        }
        Self {
            doc_terms,
            df,
            scripts: docs
                .iter()
                .map(|d| Script::of(&embedding_text(d)))
                .collect(),
            names: docs.into_iter().map(|d| d.name).collect(),
            embedder,
            scorer,
            vectors: None,
            hybrid: HybridConfig::default(),
        }
    }

    /// How many tools the index holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the index holds no tool.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The best `limit` tools for `query` (at most [`MAX_LIMIT`]), best first; ties in index
    /// order, so a search always gives the same answer. Tools that share no term with the query
    /// are not returned: an empty list means nothing matched.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let limit = limit.min(MAX_LIMIT);
        if limit == 0 {
            return Vec::new();
        }
        self.hits(self.bm25_ranked(query).into_iter().take(limit))
    }

    /// Every tool sharing a term with `query`, with its BM25 score, best first (ties in index
    /// order).
    fn bm25_ranked(&self, query: &str) -> Vec<(usize, f32)> {
        let query: String = query.chars().take(MAX_QUERY_CHARS).collect();
        let mut query: Embedding<u32> = self.embedder.embed(&query);
        // A term the query repeats counts once: "file file file" is not a stronger query.
        let mut seen = std::collections::HashSet::new();
        query.0.retain(|t| seen.insert(t.index));
        let mut scored: Vec<(usize, f32)> = self
            .scorer
            .matches(&query)
            .into_iter()
            .filter(|d| d.score.is_finite() && d.score > 0.0)
            .map(|d| (d.id, d.score))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored
    }

    /// The share of `query`'s distinct terms, each weighted by its rarity in the catalog (BM25's
    /// IDF; a term no tool has weighs most), that BM25's best tool holds: 1 when the best tool
    /// has every word of the request, 0 when no tool shares one.
    pub(crate) fn lexical_fit(&self, query: &str) -> f32 {
        let Some(&(top, _)) = self.bm25_ranked(query).first() else {
            return 0.0;
        };
        let query: String = query.chars().take(MAX_QUERY_CHARS).collect();
        let mut terms: Vec<u32> = self
            .embedder
            .embed(&query)
            .0
            .iter()
            .map(|t| t.index)
            .collect();
        terms.sort_unstable();
        terms.dedup();
        let n = self.names.len() as f64;
        let idf = |t: &u32| {
            let df = f64::from(self.df.get(t).copied().unwrap_or(0));
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        };
        let total: f64 = terms.iter().map(idf).sum();
        let held: f64 = terms
            .iter()
            .filter(|t| self.doc_terms[top].binary_search(t).is_ok())
            .map(idf)
            .sum();
        if total <= 0.0 {
            return 0.0;
        }
        (held / total) as f32
    }

    /// The hits for ranked `(index, score)` pairs.
    fn hits(&self, ranked: impl IntoIterator<Item = (usize, f32)>) -> Vec<Hit> {
        ranked
            .into_iter()
            .filter_map(|(index, score)| {
                self.names.get(index).map(|name| Hit {
                    index,
                    name: name.clone(),
                    score,
                })
            })
            .collect()
    }
}

/// The text indexed for one tool: its fields, weighted by repetition, each bounded to
/// `MAX_FIELD_CHARS` (the whole stays under the analyzer's input limit).
fn document_text(d: &ToolDoc) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for _ in 0..NAME_WEIGHT {
        parts.push(&d.name);
    }
    parts.push(&d.description);
    parts.push(&d.group);
    parts.push(&d.group_description);
    let keywords = d.keywords.join(" ");
    for _ in 0..KEYWORD_WEIGHT {
        parts.push(&keywords);
    }
    let mut bounded: Vec<String> = parts
        .into_iter()
        .map(|p| p.chars().take(MAX_FIELD_CHARS).collect())
        .collect();
    bounded.push(parameter_names(d));
    bounded.join(" \n ")
}

/// A tool's parameter names, space-separated, at most [`MAX_PARAMETER_NAMES_CHARS`] characters.
fn parameter_names(d: &ToolDoc) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for (name, _) in &d.parameters {
        let n = name.chars().count() + 1;
        if chars + n > MAX_PARAMETER_NAMES_CHARS + 1 {
            break;
        }
        out.push_str(name);
        out.push(' ');
        chars += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_found_by_its_parameters_names_but_not_their_descriptions() {
        let index = SearchIndex::new(vec![
            ToolDoc::new("maps__geocode", "Turn an address into a position")
                .with_parameters([("latitude", "north or south"), ("longitude", "")]),
            ToolDoc::new("fs__read_file", "Read a file"),
        ]);
        assert_eq!(index.search("latitude", 5)[0].name, "maps__geocode");
        assert!(index.search("south", 5).is_empty());
    }

    #[test]
    fn a_tool_with_thousands_of_parameters_indexes_a_bounded_few() {
        let many = (0..10_000).map(|i| (format!("param{i}"), "x".repeat(100)));
        let doc = ToolDoc::new("t", "d".repeat(100_000))
            .with_group("g".repeat(100_000), "h".repeat(100_000))
            .with_keywords(["k".repeat(100_000)])
            .with_parameters(many);
        let names = parameter_names(&doc);
        assert!(names.chars().count() <= MAX_PARAMETER_NAMES_CHARS + 1);
        assert!(names.starts_with("param0 param1 "));
        // Every field at its bound: the whole still fits the analyzer's input, names included.
        let text = document_text(&doc.clone().with_parameters([("zebra", "")]));
        assert!(
            text.chars().count() <= MAX_INPUT_CHARS,
            "{}",
            text.chars().count()
        );
        let index = SearchIndex::new(vec![doc, ToolDoc::new("u", "other")]);
        assert_eq!(index.search("param3", 5)[0].name, "t");
        assert!(index.search("param9999", 5).is_empty());
    }
}
