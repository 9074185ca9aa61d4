//! Learning from use: the requests after which the model called a tool that a search found,
//! kept per deployment, become text that tool is found by next time.
//!
//! [`UseMemory`] is bounded (at most [`UseMemory::capacity`] pairs, at most
//! [`MAX_PAIRS_PER_TOOL`] per tool, each request cut to [`crate::MAX_QUERY_CHARS`]), oldest out
//! first; an operator lists ([`UseMemory::pairs`]), exports ([`UseMemory::to_json`]), imports
//! ([`UseMemory::from_json`]) and deletes ([`UseMemory::forget_tool`], [`UseMemory::forget`],
//! [`UseMemory::clear`]) what was learned. Pure like the rest of the crate: where the pairs are
//! kept between runs, and whose consent allows keeping them, is the caller's.
//!
//! How it is used: [`UseMemory::keywords_for`] gives a tool's learned requests as keywords for
//! its [`ToolDoc`] (BM25 finds the tool by their words), and [`SearchIndex::with_learned`]
//! takes their vectors (the caller encodes each request as a query) so a request near a
//! learned one finds its tool by meaning. A pair for a tool the catalog no longer has is
//! skipped, not an error.
//!
//! ```
//! use toolwright_tool_search::{SearchIndex, ToolDoc, UseMemory};
//! let mut memory = UseMemory::new(100);
//! memory.record("把这张表发给财务", "lark__im_v1_message_create");
//! let docs: Vec<ToolDoc> = vec![
//!     ToolDoc::new("lark__im_v1_message_create", "Send a message to a chat"),
//!     ToolDoc::new("fs__read_file", "Read a file"),
//! ]
//! .into_iter()
//! .map(|d| {
//!     let learned = memory.keywords_for(&d.name);
//!     let keywords: Vec<String> = d.keywords.iter().cloned().chain(learned).collect();
//!     d.with_keywords(keywords)
//! })
//! .collect();
//! let index = SearchIndex::new(docs);
//! assert_eq!(index.search("把表发给财务", 1)[0].name, "lark__im_v1_message_create");
//! let exported = memory.to_json();
//! assert_eq!(UseMemory::from_json(&exported, 100).unwrap().pairs(), memory.pairs());
//! ```

use std::collections::VecDeque;

use serde_json::{Value, json};

use crate::{MAX_QUERY_CHARS, SearchIndex, dense::VectorError};

/// The most learned requests kept for one tool: a tool the model calls all day does not push
/// every other tool's out.
pub const MAX_PAIRS_PER_TOOL: usize = 16;

/// The most pairs any [`UseMemory`] holds, whatever capacity it is given.
pub const MAX_CAPACITY: usize = 100_000;

/// One learned pair: a request, and the tool the model called after a search for it found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LearnedPair {
    /// The request (the search's query), at most [`crate::MAX_QUERY_CHARS`] characters.
    pub request: String,
    /// The tool's name as the model called it.
    pub tool: String,
}

/// Why an export could not be read back. Each says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LearnError {
    /// Not the shape [`UseMemory::to_json`] writes.
    #[error(
        "not a learned-pairs export: expected {{\"pairs\": [{{\"request\": ..., \"tool\": ...}}, ...]}} as UseMemory::to_json writes it ({0})"
    )]
    Shape(String),
}

/// The bounded, per-deployment memory of learned pairs (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UseMemory {
    capacity: usize,
    pairs: VecDeque<LearnedPair>,
}

impl UseMemory {
    /// An empty memory of at most `capacity` pairs (1 to [`MAX_CAPACITY`]).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.clamp(1, MAX_CAPACITY),
            pairs: VecDeque::new(),
        }
    }

    /// The most pairs it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keeps that the model called `tool` after searching for `request`. The request is cut to
    /// [`crate::MAX_QUERY_CHARS`] characters and trimmed; an empty one, or an empty tool name,
    /// is not kept (`false`). A pair already kept moves to the newest place. When full (or the
    /// tool has [`MAX_PAIRS_PER_TOOL`]), the oldest pair (of that tool) goes.
    pub fn record(&mut self, request: &str, tool: &str) -> bool {
        let request: String = request.chars().take(MAX_QUERY_CHARS).collect();
        let request = request.trim();
        let tool = tool.trim();
        if request.is_empty() || tool.is_empty() || !request.chars().any(char::is_alphanumeric) {
            return false;
        }
        self.pairs
            .retain(|p| !(p.request == request && p.tool == tool));
        if self.pairs.iter().filter(|p| p.tool == tool).count() >= MAX_PAIRS_PER_TOOL
            && let Some(oldest) = self.pairs.iter().position(|p| p.tool == tool)
        {
            self.pairs.remove(oldest);
        }
        while self.pairs.len() >= self.capacity {
            self.pairs.pop_front();
        }
        self.pairs.push_back(LearnedPair {
            request: request.to_owned(),
            tool: tool.to_owned(),
        });
        true
    }

    /// Every pair, oldest first.
    pub fn pairs(&self) -> Vec<LearnedPair> {
        self.pairs.iter().cloned().collect()
    }

    /// How many pairs it holds.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The requests learned for `tool`, oldest first: keywords for its [`crate::ToolDoc`].
    pub fn keywords_for(&self, tool: &str) -> Vec<String> {
        self.pairs
            .iter()
            .filter(|p| p.tool == tool)
            .map(|p| p.request.clone())
            .collect()
    }

    /// Deletes every pair of `tool`; how many went.
    pub fn forget_tool(&mut self, tool: &str) -> usize {
        let before = self.pairs.len();
        self.pairs.retain(|p| p.tool != tool);
        before - self.pairs.len()
    }

    /// Deletes one pair; whether it was there.
    pub fn forget(&mut self, request: &str, tool: &str) -> bool {
        let before = self.pairs.len();
        self.pairs
            .retain(|p| !(p.request == request.trim() && p.tool == tool.trim()));
        before != self.pairs.len()
    }

    /// Deletes everything learned.
    pub fn clear(&mut self) {
        self.pairs.clear();
    }

    /// Deletes the pairs whose tool `exists` says is gone (a server removed or renamed it);
    /// how many went.
    pub fn retain_tools(&mut self, exists: impl Fn(&str) -> bool) -> usize {
        let before = self.pairs.len();
        self.pairs.retain(|p| exists(&p.tool));
        before - self.pairs.len()
    }

    /// The pairs as JSON, `{"pairs": [{"request": ..., "tool": ...}, ...]}`, oldest first: what
    /// an operator exports, and what [`UseMemory::from_json`] reads.
    pub fn to_json(&self) -> Value {
        json!({
            "pairs": self
                .pairs
                .iter()
                .map(|p| json!({"request": p.request, "tool": p.tool}))
                .collect::<Vec<_>>()
        })
    }

    /// A memory of at most `capacity` pairs from an export ([`UseMemory::to_json`]), each
    /// recorded in order (so the same bounds hold: the newest `capacity` are kept).
    pub fn from_json(export: &Value, capacity: usize) -> Result<Self, LearnError> {
        let pairs = export
            .get("pairs")
            .and_then(Value::as_array)
            .ok_or_else(|| LearnError::Shape("no \"pairs\" array".to_owned()))?;
        let mut memory = Self::new(capacity);
        for (i, p) in pairs.iter().enumerate() {
            let field = |name: &str| {
                p.get(name)
                    .and_then(Value::as_str)
                    .ok_or_else(|| LearnError::Shape(format!("pair {i} has no string \"{name}\"")))
            };
            memory.record(field("request")?, field("tool")?);
        }
        Ok(memory)
    }
}

impl SearchIndex {
    /// This index with learned pairs and each request's vector, encoded as a query by the same
    /// encoder as the tools. In [`SearchIndex::search_hybrid`] a tool's cosine becomes the
    /// larger of its own and its learned requests' (language-neutral like the rest; "no tool
    /// fits" still reads the tools' own). Pairs for a tool the index does not hold are skipped;
    /// the number kept is returned with the index. Replaces any learned vectors given before.
    pub fn with_learned(
        mut self,
        learned: Vec<(LearnedPair, Vec<f32>)>,
    ) -> Result<(Self, usize), VectorError> {
        let Some(vectors) = self.vectors.as_mut() else {
            return Err(VectorError::NoVectors);
        };
        let mut kept = Vec::new();
        for (pair, v) in learned {
            if let Some(i) = self.names.iter().position(|n| *n == pair.tool) {
                kept.push((i, crate::Script::of(&pair.request), v));
            }
        }
        let n = kept.len();
        vectors.set_learned(kept)?;
        Ok((self, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HybridConfig, ToolDoc};

    #[test]
    fn memory_is_bounded_oldest_out_and_per_tool() {
        let mut m = UseMemory::new(3);
        for i in 0..5 {
            assert!(m.record(&format!("request {i}"), &format!("tool{i}")));
        }
        assert_eq!(m.len(), 3);
        assert_eq!(m.pairs()[0].request, "request 2");
        let mut m = UseMemory::new(1000);
        for i in 0..40 {
            m.record(&format!("ask {i}"), "busy");
        }
        m.record("other", "quiet");
        assert_eq!(m.keywords_for("busy").len(), MAX_PAIRS_PER_TOOL);
        assert_eq!(m.keywords_for("busy")[0], "ask 24");
        assert_eq!(m.keywords_for("quiet"), ["other"]);
        assert_eq!(UseMemory::new(0).capacity(), 1);
        assert_eq!(UseMemory::new(usize::MAX).capacity(), MAX_CAPACITY);
    }

    #[test]
    fn a_pair_twice_is_kept_once_and_bad_requests_not_at_all() {
        let mut m = UseMemory::new(10);
        assert!(m.record("read a file", "fs__read"));
        assert!(m.record("  read a file ", "fs__read"));
        assert_eq!(m.len(), 1);
        assert!(!m.record("", "fs__read"));
        assert!(!m.record("read", " "));
        assert!(!m.record("🙂🙂🙂", "fs__read"));
        assert!(m.record(&"x".repeat(10_000), "fs__read"));
        assert_eq!(
            m.keywords_for("fs__read")[1].chars().count(),
            crate::MAX_QUERY_CHARS
        );
    }

    #[test]
    fn an_operator_lists_exports_imports_and_deletes() {
        let mut m = UseMemory::new(10);
        m.record("把表发给财务", "lark__send");
        m.record("read a file", "fs__read");
        m.record("open the file", "fs__read");
        let back = UseMemory::from_json(&m.to_json(), 10).unwrap();
        assert_eq!(back, m);
        // A smaller memory keeps the newest.
        assert_eq!(
            UseMemory::from_json(&m.to_json(), 1).unwrap().pairs()[0].request,
            "open the file"
        );
        assert_eq!(m.forget_tool("fs__read"), 2);
        assert!(m.forget("把表发给财务", "lark__send"));
        assert!(!m.forget("把表发给财务", "lark__send"));
        assert!(m.is_empty());
        m.record("a", "gone__tool");
        m.record("b", "kept");
        assert_eq!(m.retain_tools(|t| t == "kept"), 1);
        m.clear();
        assert!(m.is_empty());
        for bad in [
            serde_json::json!([]),
            serde_json::json!({"pairs": [{"request": 1, "tool": "t"}]}),
            serde_json::json!({"pairs": [{"request": "r"}]}),
        ] {
            let e = UseMemory::from_json(&bad, 10).unwrap_err();
            assert!(e.to_string().contains("UseMemory::to_json"), "{e}");
        }
    }

    #[test]
    fn a_learned_request_finds_its_tool_by_meaning_and_a_gone_tool_is_skipped() {
        let docs = vec![
            ToolDoc::new("a", "first tool"),
            ToolDoc::new("b", "second tool"),
            ToolDoc::new("c", "third tool"),
        ];
        let index = SearchIndex::new(docs)
            .with_vectors(vec![
                vec![1.0, 0.0, 0.0],
                vec![0.0, 1.0, 0.0],
                vec![0.0, 0.0, 1.0],
            ])
            .unwrap()
            .with_hybrid(
                HybridConfig::default()
                    .with_weights(0.0, 1.0)
                    .with_language_neutral(false),
            );
        // A request whose vector is nearest tool a, but whose past use called c.
        let q = [0.7, 0.1, 0.2, 0.0];
        let q = &q[..3];
        assert_eq!(index.search_hybrid("zzz", q, 1).unwrap()[0].name, "a");
        let pair = |r: &str, t: &str| LearnedPair {
            request: r.into(),
            tool: t.into(),
        };
        let (index, kept) = index
            .with_learned(vec![
                (pair("zzz before", "c"), vec![0.71, 0.1, 0.2]),
                (pair("old", "removed__tool"), vec![1.0, 0.0, 0.0]),
            ])
            .unwrap();
        assert_eq!(kept, 1);
        assert_eq!(index.search_hybrid("zzz", q, 1).unwrap()[0].name, "c");
        // Learned vectors are checked like the tools'.
        let err = index
            .with_learned(vec![(pair("x", "a"), vec![1.0])])
            .unwrap_err();
        assert_eq!(
            err,
            VectorError::Dimensions {
                expected: 3,
                got: 1
            }
        );
        let plain = SearchIndex::new(vec![ToolDoc::new("a", "b")]);
        assert_eq!(
            plain.with_learned(Vec::new()).unwrap_err(),
            VectorError::NoVectors
        );
    }
}
