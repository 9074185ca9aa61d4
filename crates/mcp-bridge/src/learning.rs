//! Learning from use: when the model calls a tool that a search of the same turn found, the
//! search's words and the tool are kept ([`toolwright_tool_search::UseMemory`], bounded), and
//! become words the tool is found by next time (its keywords in the search index). Off by
//! default; per deployment (one bridge, optionally one file); an operator lists, exports and
//! deletes what was learned.
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

    /// After a successful call of `tool` (exposed name) in `session`: when a search of the
    /// session's current turn returned it, keeps (that search's words, `tool`).
    pub(crate) fn learn_from_call(&self, session: Option<&str>, tool: &str) {
        if lock(&self.inner.learning).is_none() {
            return;
        }
        let Some(query) = lock(&self.inner.described).found_by(session, tool) else {
            return;
        };
        let learned = {
            let mut learning = lock(&self.inner.learning);
            let Some(l) = learning.as_mut() else { return };
            let kept = l.memory.record(&query, tool);
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
        bridge.learn_from_call(Some("s"), "maps__elevation");
        // Not found by a search, or found in another session: nothing is learned.
        bridge.learn_from_call(Some("s"), "fs__read");
        bridge.learn_from_call(Some("other"), "maps__elevation");
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
        bridge.learn_from_call(Some("s"), "maps__elevation");
        assert!(bridge.learned().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
