//! Learning from use: the requests after which the model called a tool that a search found,
//! kept per deployment, become text that tool is found by next time.
//!
//! [`UseMemory`] is bounded (at most [`UseMemory::capacity`] pairs, at most
//! [`MAX_PAIRS_PER_TOOL`] per tool, each request cut to [`crate::MAX_QUERY_CHARS`]), oldest out
//! first; an operator lists ([`UseMemory::pairs`], [`UseMemory::pairs_of`]), exports
//! ([`UseMemory::to_json`]), imports ([`UseMemory::from_json`]) and deletes
//! ([`UseMemory::forget_tool`], [`UseMemory::forget`], [`UseMemory::forget_principal`],
//! [`UseMemory::clear`]) what was learned.
//!
//! Consent, per principal: a request a person typed is kept only when that person said yes
//! ([`UseMemory::set_consent`]; nobody has by default), through [`UseMemory::record_for`]; a
//! person who withdraws consent has every pair of theirs deleted at once. [`UseMemory::record`]
//! keeps a pair that belongs to no person (the deployment's own, e.g. an operator's replay).
//! Pure like the rest of the crate: where the pairs are kept between runs is the caller's.
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

use crate::{MAX_QUERY_CHARS, SearchIndex, vector::VectorError};

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
    /// Whose request it was ([`UseMemory::record_for`]); `None` for the deployment's own
    /// ([`UseMemory::record`]).
    pub principal: Option<String>,
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
    /// The principals who said yes to keeping their requests, sorted.
    consents: Vec<String>,
}

impl UseMemory {
    /// An empty memory of at most `capacity` pairs (1 to [`MAX_CAPACITY`]).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.clamp(1, MAX_CAPACITY),
            pairs: VecDeque::new(),
            consents: Vec::new(),
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
        self.keep(None, request, tool)
    }

    /// Keeps that the model called `tool` after `principal` searched for `request`, only when
    /// `principal` consents ([`UseMemory::set_consent`]); otherwise nothing is kept (`false`).
    /// Bounded like [`UseMemory::record`]; the pair remembers whose it is.
    pub fn record_for(&mut self, principal: &str, request: &str, tool: &str) -> bool {
        let principal = principal.trim();
        if !self.consents(principal) {
            return false;
        }
        self.keep(Some(principal), request, tool)
    }

    /// Sets whether `principal` lets their requests be learned. Withdrawing deletes every pair
    /// of theirs; how many went. An empty principal cannot consent.
    pub fn set_consent(&mut self, principal: &str, consents: bool) -> usize {
        let principal = principal.trim();
        let at = self
            .consents
            .binary_search_by(|p| p.as_str().cmp(principal));
        match (consents, at) {
            (true, Err(i)) if !principal.is_empty() => {
                self.consents.insert(i, principal.to_owned());
                0
            }
            (false, found) => {
                if let Ok(i) = found {
                    self.consents.remove(i);
                }
                self.forget_principal(principal)
            }
            _ => 0,
        }
    }

    /// Whether `principal` lets their requests be learned.
    pub fn consents(&self, principal: &str) -> bool {
        self.consents
            .binary_search_by(|p| p.as_str().cmp(principal.trim()))
            .is_ok()
    }

    /// The principals who consent, sorted.
    pub fn consenting(&self) -> Vec<String> {
        self.consents.clone()
    }

    /// `principal`'s pairs, oldest first.
    pub fn pairs_of(&self, principal: &str) -> Vec<LearnedPair> {
        let principal = principal.trim();
        self.pairs
            .iter()
            .filter(|p| p.principal.as_deref() == Some(principal))
            .cloned()
            .collect()
    }

    /// Deletes every pair of `principal`; how many went (their consent stays as it was).
    pub fn forget_principal(&mut self, principal: &str) -> usize {
        let principal = principal.trim();
        let before = self.pairs.len();
        self.pairs
            .retain(|p| p.principal.as_deref() != Some(principal));
        before - self.pairs.len()
    }

    fn keep(&mut self, principal: Option<&str>, request: &str, tool: &str) -> bool {
        let request: String = request.chars().take(MAX_QUERY_CHARS).collect();
        let request = request.trim();
        let tool = tool.trim();
        if request.is_empty() || tool.is_empty() || !request.chars().any(char::is_alphanumeric) {
            return false;
        }
        self.pairs.retain(|p| {
            !(p.request == request && p.tool == tool && p.principal.as_deref() == principal)
        });
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
            principal: principal.map(str::to_owned),
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

    /// Deletes everything learned (consents stay).
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

    /// The pairs and consents as JSON, `{"pairs": [{"request": ..., "tool": ..., "principal":
    /// ...}, ...], "consents": [...]}` (pairs oldest first; `principal` only on a person's
    /// pair; `consents` only when someone consents): what an operator exports, and what
    /// [`UseMemory::from_json`] reads.
    pub fn to_json(&self) -> Value {
        let mut export = json!({
            "pairs": self
                .pairs
                .iter()
                .map(|p| match &p.principal {
                    Some(who) => json!({"request": p.request, "tool": p.tool, "principal": who}),
                    None => json!({"request": p.request, "tool": p.tool}),
                })
                .collect::<Vec<_>>(),
        });
        // Only when someone consents: an export without people reads as before.
        if !self.consents.is_empty() {
            export["consents"] = json!(self.consents);
        }
        export
    }

    /// A memory of at most `capacity` pairs from an export ([`UseMemory::to_json`]), each
    /// recorded in order (so the same bounds hold: the newest `capacity` are kept). A person's
    /// pair is kept only when the export lists them among the consents (an export without
    /// `"consents"`, as written before consent was kept, has no person's pairs).
    pub fn from_json(export: &Value, capacity: usize) -> Result<Self, LearnError> {
        let pairs = export
            .get("pairs")
            .and_then(Value::as_array)
            .ok_or_else(|| LearnError::Shape("no \"pairs\" array".to_owned()))?;
        let mut memory = Self::new(capacity);
        if let Some(consents) = export.get("consents") {
            let consents = consents.as_array().ok_or_else(|| {
                LearnError::Shape("\"consents\" is not an array of principals".to_owned())
            })?;
            for (i, who) in consents.iter().enumerate() {
                let who = who
                    .as_str()
                    .ok_or_else(|| LearnError::Shape(format!("consent {i} is not a string")))?;
                memory.set_consent(who, true);
            }
        }
        for (i, p) in pairs.iter().enumerate() {
            let field = |name: &str| {
                p.get(name)
                    .and_then(Value::as_str)
                    .ok_or_else(|| LearnError::Shape(format!("pair {i} has no string \"{name}\"")))
            };
            match p.get("principal") {
                None | Some(Value::Null) => {
                    memory.record(field("request")?, field("tool")?);
                }
                Some(_) => {
                    memory.record_for(field("principal")?, field("request")?, field("tool")?);
                }
            }
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
    fn a_persons_request_is_kept_only_with_their_consent_and_withdrawing_deletes_it() {
        let mut m = UseMemory::new(10);
        // Nobody consents by default.
        assert!(!m.consents("ana"));
        assert!(!m.record_for("ana", "read a file", "fs__read"));
        assert!(m.is_empty());
        assert_eq!(m.set_consent("ana", true), 0);
        assert!(!m.record_for("bo", "open the file", "fs__read"));
        assert!(m.record_for(" ana ", "read a file", "fs__read"));
        assert!(m.record("deployment's own", "fs__read"));
        assert_eq!(m.consenting(), ["ana"]);
        assert_eq!(m.pairs_of("ana").len(), 1);
        assert_eq!(m.pairs_of("ana")[0].principal.as_deref(), Some("ana"));
        assert_eq!(m.keywords_for("fs__read").len(), 2);
        // An export carries whose each pair is and who consents; it reads back the same.
        let export = m.to_json();
        assert_eq!(export["consents"], serde_json::json!(["ana"]));
        assert_eq!(UseMemory::from_json(&export, 10).unwrap(), m);
        // A person's pair in an export that does not list their consent is not kept.
        let mut stale = export.clone();
        stale["consents"] = serde_json::json!([]);
        let back = UseMemory::from_json(&stale, 10).unwrap();
        assert!(back.pairs_of("ana").is_empty());
        assert_eq!(back.len(), 1);
        assert_eq!(
            UseMemory::new(3).to_json(),
            serde_json::json!({"pairs": []})
        );
        let bad = serde_json::json!({"pairs": [], "consents": [1]});
        assert!(UseMemory::from_json(&bad, 10).is_err());
        // Withdrawing consent deletes that person's pairs at once, and nothing else.
        assert_eq!(m.set_consent("ana", false), 1);
        assert!(!m.consents("ana"));
        assert_eq!(m.keywords_for("fs__read"), ["deployment's own"]);
        assert!(!m.record_for("ana", "read a file", "fs__read"));
        // An operator deletes one person's pairs and keeps their consent.
        m.set_consent("bo", true);
        m.record_for("bo", "list the folder", "fs__list");
        assert_eq!(m.forget_principal("bo"), 1);
        assert!(m.consents("bo"));
        assert_eq!(m.set_consent("  ", true), 0);
        assert!(!m.consents("  "));
        assert!(!m.record_for("", "read a file", "fs__read"));
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
            principal: None,
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
