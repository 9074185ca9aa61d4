//! Learning from use: when the model calls a tool that a search of the same turn found, the
//! search's words and the tool are kept ([`toolwright_tool_search::UseMemory`], bounded), and
//! become words the tool is found by next time (its keywords in the search index). Off by
//! default; per deployment (one bridge, optionally one file); an operator lists, exports and
//! deletes what was learned. A call made for a principal (the agent's, in the tool's context)
//! is learned only with that person's consent ([`McpBridge::set_learning_consent`]), and
//! withdrawing it deletes their pairs.
//!
//! ```
//! use toolwright_mcp_bridge::{LearnFromUse, McpBridge};
//! let bridge = McpBridge::new();
//! let file = std::env::temp_dir().join(format!("learned-{}.json", std::process::id()));
//! bridge.set_learn_from_use(Some(LearnFromUse::new(500).with_file(Some(file.clone())))).unwrap();
//! assert!(bridge.learned().is_empty());
//! // An operator's export, and a deletion (all pairs of one tool, or everything).
//! assert_eq!(bridge.export_learned()["pairs"], serde_json::json!([]));
//! assert_eq!(bridge.forget_learned(Some("maps__elevation")), 0);
//! # let _ = std::fs::remove_file(file);
//! ```

use std::path::PathBuf;

use serde_json::Value;
use toolwright_tool_search::{LearnedPair, ToolDoc, UseMemory};

use crate::McpBridge;
use crate::connection::lock;
use crate::error::BridgeError;

/// Whether and where the bridge learns from use ([`McpBridge::set_learn_from_use`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LearnFromUse {
    /// The most (request, tool) pairs kept (1 to [`toolwright_tool_search::MAX_CAPACITY`]);
    /// the oldest go first, and one tool keeps at most
    /// [`toolwright_tool_search::MAX_PAIRS_PER_TOOL`].
    pub capacity: usize,
    /// The JSON file the pairs are kept in between runs (the deployment's store; written after
    /// every pair learned or deleted), or `None`: in memory only.
    pub file: Option<PathBuf>,
}

impl LearnFromUse {
    /// Learning with at most `capacity` pairs, in memory only.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.clamp(1, toolwright_tool_search::MAX_CAPACITY),
            file: None,
        }
    }
    /// Sets the file the pairs are kept in ([`LearnFromUse::file`]).
    pub fn with_file(mut self, file: Option<PathBuf>) -> Self {
        self.file = file;
        self
    }
}

/// The bridge's learned pairs and where they are saved.
#[derive(Debug)]
pub(crate) struct Learning {
    pub(crate) memory: UseMemory,
    file: Option<PathBuf>,
}

impl Learning {
    fn save(&self) {
        let Some(path) = &self.file else { return };
        let text = self.memory.to_json().to_string();
        let tmp = path.with_extension("json.tmp");
        let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            tracing::warn!(
                file = %path.display(),
                "the learned search pairs could not be saved ({e}); they are kept in memory"
            );
        }
    }
}

impl McpBridge {
    /// Turns learning from use on (`Some`, reading the pairs already in its file, if any) or
    /// off (`None`: nothing more is learned and learned words stop counting; the file stays).
    /// A file that is there but is not an export ([`McpBridge::export_learned`]) is an error,
    /// and learning stays as it was.
    pub fn set_learn_from_use(&self, config: Option<LearnFromUse>) -> Result<(), BridgeError> {
        let learning = match config {
            None => None,
            Some(c) => {
                let memory = match &c.file {
                    Some(path) if path.exists() => {
                        let read = std::fs::read_to_string(path)
                            .map_err(|e| e.to_string())
                            .and_then(|t| {
                                serde_json::from_str::<Value>(&t).map_err(|e| e.to_string())
                            })
                            .and_then(|v| {
                                UseMemory::from_json(&v, c.capacity).map_err(|e| e.to_string())
                            });
                        read.map_err(|why| {
                            BridgeError::Io(format!(
                                "learned search pairs in {}: {why}; fix the file or delete it to start afresh",
                                path.display()
                            ))
                        })?
                    }
                    _ => UseMemory::new(c.capacity),
                };
                Some(Learning {
                    memory,
                    file: c.file,
                })
            }
        };
        *lock(&self.inner.learning) = learning;
        *lock(&self.inner.search_index) = None;
        Ok(())
    }

    /// Every learned pair, oldest first (empty when learning is off).
    pub fn learned(&self) -> Vec<LearnedPair> {
        lock(&self.inner.learning)
            .as_ref()
            .map_or_else(Vec::new, |l| l.memory.pairs())
    }

    /// The learned pairs as JSON (`{"pairs": [{"request": ..., "tool": ...}, ...]}`), what the
    /// file holds and an operator exports.
    pub fn export_learned(&self) -> Value {
        lock(&self.inner.learning)
            .as_ref()
            .map_or_else(|| UseMemory::new(1).to_json(), |l| l.memory.to_json())
    }

    /// Deletes what was learned for `tool` (an exposed name), or everything with `None`; how
    /// many pairs went. The file is rewritten and the search index rebuilt.
    pub fn forget_learned(&self, tool: Option<&str>) -> usize {
        let gone = {
            let mut learning = lock(&self.inner.learning);
            let Some(l) = learning.as_mut() else { return 0 };
            let gone = match tool {
                Some(t) => l.memory.forget_tool(t),
                None => {
                    let n = l.memory.len();
                    l.memory.clear();
                    n
                }
            };
            if gone > 0 {
                l.save();
            }
            gone
        };
        if gone > 0 {
            *lock(&self.inner.search_index) = None;
        }
        gone
    }

    /// Sets whether `principal` (a [`ToolContext::principal`](toolwright_core::ToolContext),
    /// the agent's) lets the requests they search with be learned, as the person said in the
    /// application (the panel's consent). Withdrawing deletes every pair of theirs at once;
    /// how many went. Nothing happens while learning is off.
    pub fn set_learning_consent(&self, principal: &str, consents: bool) -> usize {
        let gone = {
            let mut learning = lock(&self.inner.learning);
            let Some(l) = learning.as_mut() else { return 0 };
            let before = l.memory.consenting();
            let gone = l.memory.set_consent(principal, consents);
            if gone > 0 || l.memory.consenting() != before {
                l.save();
            }
            gone
        };
        if gone > 0 {
            *lock(&self.inner.search_index) = None;
        }
        gone
    }

    /// After a successful call of `tool` (exposed name) in `session`: when a search of the
    /// session's current turn returned it, keeps (that search's words, `tool`). A call made for
    /// a principal is kept as theirs, and only when they consent
    /// ([`McpBridge::set_learning_consent`]); a call with none (a program with one user) is
    /// the deployment's own, under its operator's choice to learn at all.
    pub(crate) fn learn_from_call(
        &self,
        session: Option<&str>,
        principal: Option<&str>,
        tool: &str,
    ) {
        if lock(&self.inner.learning).is_none() {
            return;
        }
        let Some(query) = lock(&self.inner.described).found_by(session, tool) else {
            return;
        };
        let learned = {
            let mut learning = lock(&self.inner.learning);
            let Some(l) = learning.as_mut() else { return };
            let kept = match principal {
                Some(p) => l.memory.record_for(p, &query, tool),
                None => l.memory.record(&query, tool),
            };
            if kept {
                l.save();
            }
            kept
        };
        if learned {
            *lock(&self.inner.search_index) = None;
        }
    }

    /// `doc` with the requests learned for it added to its keywords.
    pub(crate) fn with_learned_words(&self, doc: ToolDoc) -> ToolDoc {
        let learning = lock(&self.inner.learning);
        let Some(l) = learning.as_ref() else {
            return doc;
        };
        let learned = l.memory.keywords_for(&doc.name);
        if learned.is_empty() {
            return doc;
        }
        let keywords: Vec<String> = doc.keywords.iter().cloned().chain(learned).collect();
        doc.with_keywords(keywords)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(file: &std::path::Path) -> Option<LearnFromUse> {
        Some(LearnFromUse::new(10).with_file(Some(file.to_path_buf())))
    }

    #[test]
    fn a_call_of_a_tool_a_search_found_is_learned_saved_and_deletable() {
        let dir = std::env::temp_dir().join(format!("learned-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("learned.json");
        let _ = std::fs::remove_file(&file);
        let bridge = McpBridge::new();
        bridge.set_learn_from_use(config(&file)).unwrap();
        lock(&bridge.inner.described).enter(Some("s"), "how high is Denver", 0);
        lock(&bridge.inner.described).record_found(
            Some("s"),
            "maps__elevation",
            "altitude of a city",
        );
        bridge.learn_from_call(Some("s"), None, "maps__elevation");
        // Not found by a search, or found in another session: nothing is learned.
        bridge.learn_from_call(Some("s"), None, "fs__read");
        bridge.learn_from_call(Some("other"), None, "maps__elevation");
        assert_eq!(bridge.learned().len(), 1);
        let doc = bridge.with_learned_words(ToolDoc::new("maps__elevation", "Get elevation"));
        assert_eq!(doc.keywords, ["altitude of a city"]);
        // A pair whose tool is gone from the catalog counts for no other tool.
        let other = bridge.with_learned_words(ToolDoc::new("fs__read", "Read a file"));
        assert!(other.keywords.is_empty());
        // Kept in the file: a new bridge of the same deployment reads it back.
        let again = McpBridge::new();
        again.set_learn_from_use(config(&file)).unwrap();
        assert_eq!(again.learned(), bridge.learned());
        // A file that is not an export is an error that says what to do.
        std::fs::write(&file, "not json").unwrap();
        let err = McpBridge::new()
            .set_learn_from_use(config(&file))
            .unwrap_err();
        assert!(err.to_string().contains("delete it"), "{err}");
        // The operator deletes; the export is then empty.
        assert_eq!(bridge.forget_learned(Some("maps__elevation")), 1);
        assert!(bridge.learned().is_empty());
        assert_eq!(bridge.export_learned(), serde_json::json!({"pairs": []}));
        // Off: nothing is learned, and the words stop counting.
        bridge.set_learn_from_use(None).unwrap();
        bridge.learn_from_call(Some("s"), None, "maps__elevation");
        assert!(bridge.learned().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_principals_calls_are_learned_only_with_their_consent_and_withdrawing_deletes_them() {
        let bridge = McpBridge::new();
        bridge
            .set_learn_from_use(Some(LearnFromUse::new(10)))
            .unwrap();
        let found = |session: &str| {
            lock(&bridge.inner.described).enter(Some(session), "how high is Denver", 0);
            lock(&bridge.inner.described).record_found(
                Some(session),
                "maps__elevation",
                "altitude of a city",
            );
        };
        // alice has not said yes: her call teaches nothing
        found("a1");
        bridge.learn_from_call(Some("a1"), Some("alice"), "maps__elevation");
        assert!(bridge.learned().is_empty());
        // she says yes: her next one is kept as hers, and the export carries her consent
        assert_eq!(bridge.set_learning_consent("alice", true), 0);
        found("a2");
        bridge.learn_from_call(Some("a2"), Some("alice"), "maps__elevation");
        let learned = bridge.learned();
        assert_eq!(learned.len(), 1);
        assert_eq!(learned[0].principal.as_deref(), Some("alice"));
        assert!(
            bridge.export_learned().to_string().contains("alice"),
            "{}",
            bridge.export_learned()
        );
        let doc = bridge.with_learned_words(ToolDoc::new("maps__elevation", "Get elevation"));
        assert_eq!(doc.keywords, ["altitude of a city"]);
        // bob never consented
        found("b1");
        bridge.learn_from_call(Some("b1"), Some("bob"), "maps__elevation");
        assert_eq!(bridge.learned().len(), 1);
        // alice withdraws: her pair goes, and its words stop counting
        assert_eq!(bridge.set_learning_consent("alice", false), 1);
        assert!(bridge.learned().is_empty());
        let doc = bridge.with_learned_words(ToolDoc::new("maps__elevation", "Get elevation"));
        assert!(doc.keywords.is_empty());
    }
}
