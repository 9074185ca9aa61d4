//! Learning from use: when the model calls a tool that a search of the same turn found, the
//! search's words and the tool are kept ([`toolwright_tool_search::UseMemory`], bounded), and
//! become words the tool is found by next time (its keywords in the search index). Off by
//! default; per deployment, in a session store every worker of the deployment shares
//! (PostgreSQL, SQLite, or memory), written with compare-and-set so two workers learning at
//! once both keep their pair; an operator lists, exports and deletes what was learned. A call
//! made for a principal (the agent's, in the tool's context) is learned only with that
//! person's consent ([`McpBridge::set_learning_consent`]), and withdrawing it deletes their
//! pairs.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use toolwright_context_engine::MemoryStore; // PostgresStore for many workers
//! use toolwright_mcp_bridge::{LearnFromUse, McpBridge};
//! let bridge = McpBridge::new();
//! let store = Arc::new(MemoryStore::new());
//! bridge.set_learn_from_use(Some(LearnFromUse::new(500).kept_in(store, "support-desk"))).await?;
//! assert!(bridge.learned().await?.is_empty());
//! // An operator's export, and a deletion (all pairs of one tool, or everything).
//! assert_eq!(bridge.export_learned().await?["pairs"], serde_json::json!([]));
//! assert_eq!(bridge.forget_learned(Some("maps__elevation")).await?, 0);
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_tool_search::{LearnedPair, ToolDoc, UseMemory};

use crate::McpBridge;
use crate::connection::lock;
use crate::error::BridgeError;

/// The state slot that holds a deployment's learned pairs.
const SLOT: &str = "mcp-bridge.learned";
/// How long a worker searches with the pairs it last read before reading them again (what
/// another worker learned counts here after at most this long).
const REFRESH: Duration = Duration::from_secs(5);
/// Compare-and-set attempts for one change before giving up (each lost attempt means another
/// worker changed the pairs in between).
const ATTEMPTS: usize = 16;

/// Whether and where the bridge learns from use ([`McpBridge::set_learn_from_use`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct LearnFromUse {
    /// The most (request, tool) pairs kept (1 to [`toolwright_tool_search::MAX_CAPACITY`]);
    /// the oldest go first, and one tool keeps at most
    /// [`toolwright_tool_search::MAX_PAIRS_PER_TOOL`].
    pub capacity: usize,
    store: Option<(Arc<dyn SessionStore>, String)>,
}

impl std::fmt::Debug for LearnFromUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LearnFromUse")
            .field("capacity", &self.capacity)
            .field("deployment", &self.store.as_ref().map(|(_, d)| d))
            .finish()
    }
}

impl LearnFromUse {
    /// Learning with at most `capacity` pairs, in this process's memory only.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.clamp(1, toolwright_tool_search::MAX_CAPACITY),
            store: None,
        }
    }
    /// Keeps the pairs in `store` (which must have state slots: `MemoryStore`, `SqliteStore`
    /// and `PostgresStore` do) under the name `deployment`: every bridge given the same store
    /// and name learns into, and searches with, the same pairs.
    pub fn kept_in(mut self, store: Arc<dyn SessionStore>, deployment: &str) -> Self {
        self.store = Some((store, deployment.to_owned()));
        self
    }
}

/// The bridge's learned pairs: where they are kept, and what this worker last read.
pub(crate) struct Learning {
    /// The pairs as last read or written by this worker.
    pub(crate) memory: UseMemory,
    /// The version `memory` is of (0: nothing stored yet).
    version: u64,
    read_at: Instant,
    capacity: usize,
    store: Arc<dyn SessionStore>,
    session: String,
}

impl std::fmt::Debug for Learning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learning")
            .field("pairs", &self.memory.len())
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Where a deployment's pairs are, to read or change them without holding the bridge's lock.
#[derive(Clone)]
struct Place {
    store: Arc<dyn SessionStore>,
    session: String,
    capacity: usize,
}

impl Place {
    /// The slot's text and what it holds (version 0 and no pairs when nothing is stored).
    async fn read(&self) -> Result<(Option<String>, u64, UseMemory), BridgeError> {
        let text = crate::slot::read(self.store.as_ref(), &self.session, SLOT)
            .await
            .map_err(|e| self.store_error(&e.to_string()))?;
        let Some(text) = text else {
            return Ok((None, 0, UseMemory::new(self.capacity)));
        };
        let (version, memory) = self.parse(&text)?;
        Ok((Some(text), version, memory))
    }

    fn parse(&self, text: &str) -> Result<(u64, UseMemory), BridgeError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| self.store_error(&e.to_string()))?;
        let version = value["version"]
            .as_u64()
            .ok_or_else(|| self.store_error("no version"))?;
        let memory = UseMemory::from_json(&value["learned"], self.capacity)
            .map_err(|e| self.store_error(&e.to_string()))?;
        Ok((version, memory))
    }

    fn store_error(&self, why: &str) -> BridgeError {
        BridgeError::Store(format!(
            "the learned search pairs in session {} (slot {SLOT}) could not be read or written \
             ({why}); check the store, or delete that session to start learning afresh",
            self.session
        ))
    }

    /// Applies `change` to the stored pairs and writes them back only if no other worker
    /// wrote in between (else reads again and applies it again); the new version and pairs,
    /// and what `change` answered. Nothing is written when `change` changed nothing.
    async fn change<T>(
        &self,
        mut change: impl FnMut(&mut UseMemory) -> T,
    ) -> Result<(u64, UseMemory, T), BridgeError> {
        for _ in 0..ATTEMPTS {
            let (text, version, mut memory) = self.read().await?;
            let before = memory.to_json();
            let answer = change(&mut memory);
            let after = memory.to_json();
            if after == before {
                return Ok((version, memory, answer));
            }
            let new = json!({"version": version + 1, "learned": after}).to_string();
            let written = crate::slot::swap(
                self.store.as_ref(),
                &self.session,
                SLOT,
                text.as_deref(),
                &new,
            )
            .await
            .map_err(|e| self.store_error(&e.to_string()))?;
            if written {
                return Ok((version + 1, memory, answer));
            }
        }
        Err(self.store_error(&format!(
            "other workers changed them {ATTEMPTS} times in a row; try again"
        )))
    }
}

impl McpBridge {
    /// Turns learning from use on (`Some`, reading the pairs already stored for the
    /// deployment, if any) or off (`None`: nothing more is learned and learned words stop
    /// counting; what is stored stays). A store that cannot be read, or whose slot does not
    /// hold learned pairs, is an error, and learning stays as it was.
    pub async fn set_learn_from_use(
        &self,
        config: Option<LearnFromUse>,
    ) -> Result<(), BridgeError> {
        let learning = match config {
            None => None,
            Some(c) => {
                let (store, deployment) = c.store.unwrap_or_else(|| {
                    (
                        Arc::new(MemoryStore::new()) as Arc<dyn SessionStore>,
                        String::new(),
                    )
                });
                let place = Place {
                    session: crate::slot::hashed_session_id("mcp-learned-", &[&deployment]),
                    store,
                    capacity: c.capacity,
                };
                let (_, version, memory) = place.read().await?;
                Some(Learning {
                    memory,
                    version,
                    read_at: Instant::now(),
                    capacity: place.capacity,
                    store: place.store,
                    session: place.session,
                })
            }
        };
        *lock(&self.inner.learning) = learning;
        *lock(&self.inner.search_index) = None;
        Ok(())
    }

    fn learning_place(&self) -> Option<Place> {
        lock(&self.inner.learning).as_ref().map(|l| Place {
            store: Arc::clone(&l.store),
            session: l.session.clone(),
            capacity: l.capacity,
        })
    }

    /// Keeps `memory` (of `version`) as this worker's copy unless a newer one is kept already;
    /// a changed copy rebuilds the search index.
    fn keep_learned(&self, place: &Place, version: u64, memory: UseMemory) {
        let changed = {
            let mut learning = lock(&self.inner.learning);
            let Some(l) = learning.as_mut() else { return };
            if l.session != place.session {
                // learning was set again meanwhile, for another deployment
                return;
            }
            l.read_at = Instant::now();
            if version < l.version {
                false
            } else {
                let changed = l.memory != memory;
                l.memory = memory;
                l.version = version;
                changed
            }
        };
        if changed {
            *lock(&self.inner.search_index) = None;
        }
    }

    /// Reads the deployment's pairs afresh (empty when learning is off).
    async fn read_learned(&self) -> Result<UseMemory, BridgeError> {
        let Some(place) = self.learning_place() else {
            return Ok(UseMemory::new(1));
        };
        let (_, version, memory) = place.read().await?;
        self.keep_learned(&place, version, memory.clone());
        Ok(memory)
    }

    /// Every learned pair of the deployment, oldest first, as stored now (empty when learning
    /// is off).
    pub async fn learned(&self) -> Result<Vec<LearnedPair>, BridgeError> {
        Ok(self.read_learned().await?.pairs())
    }

    /// The learned pairs as JSON (`{"pairs": [{"request": ..., "tool": ...}, ...]}`, and the
    /// principals' `"consents"`), what an operator exports.
    pub async fn export_learned(&self) -> Result<Value, BridgeError> {
        Ok(self.read_learned().await?.to_json())
    }

    /// Deletes what was learned for `tool` (an exposed name), or everything with `None`, for
    /// every worker of the deployment; how many pairs went. The search index is rebuilt.
    pub async fn forget_learned(&self, tool: Option<&str>) -> Result<usize, BridgeError> {
        let Some(place) = self.learning_place() else {
            return Ok(0);
        };
        let (version, memory, gone) = place
            .change(|m| match tool {
                Some(t) => m.forget_tool(t),
                None => {
                    let n = m.len();
                    m.clear();
                    n
                }
            })
            .await?;
        self.keep_learned(&place, version, memory);
        Ok(gone)
    }

    /// Whether `principal` lets their requests be learned, as stored now; `None` while
    /// learning is off (what an application shows beside its consent switch).
    pub async fn learning_consent(&self, principal: &str) -> Result<Option<bool>, BridgeError> {
        if self.learning_place().is_none() {
            return Ok(None);
        }
        Ok(Some(self.read_learned().await?.consents(principal)))
    }

    /// Sets whether `principal` (a [`ToolContext::principal`](toolwright_core::ToolContext),
    /// the agent's) lets the requests they search with be learned, as the person said in the
    /// application (the panel's consent). Withdrawing deletes every pair of theirs at once, for
    /// every worker of the deployment; how many went. Nothing happens while learning is off.
    pub async fn set_learning_consent(
        &self,
        principal: &str,
        consents: bool,
    ) -> Result<usize, BridgeError> {
        let Some(place) = self.learning_place() else {
            return Ok(0);
        };
        let (version, memory, gone) = place.change(|m| m.set_consent(principal, consents)).await?;
        self.keep_learned(&place, version, memory);
        Ok(gone)
    }

    /// After a successful call of `tool` (exposed name) in `session`: when a search of the
    /// session's current turn returned it, keeps (that search's words, `tool`). A call made for
    /// a principal is kept as theirs, and only when they consent
    /// ([`McpBridge::set_learning_consent`]); a call with none (a program with one user) is
    /// the deployment's own, under its operator's choice to learn at all. A store that fails
    /// loses this pair only (logged); the call's result stands.
    pub(crate) async fn learn_from_call(
        &self,
        session: Option<&str>,
        principal: Option<&str>,
        tool: &str,
    ) {
        let Some(place) = self.learning_place() else {
            return;
        };
        let Some(query) = lock(&self.inner.described).found_by(session, tool) else {
            return;
        };
        let kept = place
            .change(|m| match principal {
                Some(p) => m.record_for(p, &query, tool),
                None => m.record(&query, tool),
            })
            .await;
        match kept {
            Ok((version, memory, _)) => self.keep_learned(&place, version, memory),
            Err(e) => tracing::warn!(tool, "a pair learned from use was not kept: {e}"),
        }
    }

    /// Before a search: reads the deployment's pairs again when this worker's copy is older
    /// than a few seconds, so what other workers learned counts here too. A store that fails
    /// leaves the copy as it was (logged).
    pub(crate) async fn refresh_learned(&self) {
        let due = lock(&self.inner.learning)
            .as_ref()
            .is_some_and(|l| l.read_at.elapsed() >= REFRESH);
        if !due {
            return;
        }
        if let Err(e) = self.read_learned().await {
            tracing::warn!("searching with the learned pairs read before: {e}");
            if let Some(l) = lock(&self.inner.learning).as_mut() {
                l.read_at = Instant::now();
            }
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
    use toolwright_context_engine::StateChange;

    use super::*;

    fn kept_in(store: &Arc<MemoryStore>) -> Option<LearnFromUse> {
        let store: Arc<dyn SessionStore> = store.clone();
        Some(LearnFromUse::new(10).kept_in(store, "desk"))
    }

    /// A search of `session`'s turn found `tool` for `query`.
    fn found(bridge: &McpBridge, session: &str, query: &str, tool: &str) {
        lock(&bridge.inner.described).enter(Some(session), "the person's words", 0);
        lock(&bridge.inner.described).record_found(Some(session), tool, query);
    }

    #[tokio::test]
    async fn a_call_of_a_tool_a_search_found_is_learned_stored_and_deletable() {
        let store = Arc::new(MemoryStore::new());
        let bridge = McpBridge::new();
        bridge.set_learn_from_use(kept_in(&store)).await.unwrap();
        found(&bridge, "s", "altitude of a city", "maps__elevation");
        bridge
            .learn_from_call(Some("s"), None, "maps__elevation")
            .await;
        // Not found by a search, or found in another session: nothing is learned.
        bridge.learn_from_call(Some("s"), None, "fs__read").await;
        bridge
            .learn_from_call(Some("other"), None, "maps__elevation")
            .await;
        assert_eq!(bridge.learned().await.unwrap().len(), 1);
        let doc = bridge.with_learned_words(ToolDoc::new("maps__elevation", "Get elevation"));
        assert_eq!(doc.keywords, ["altitude of a city"]);
        // A pair whose tool is gone from the catalog counts for no other tool.
        let other = bridge.with_learned_words(ToolDoc::new("fs__read", "Read a file"));
        assert!(other.keywords.is_empty());
        // Kept in the store: a new bridge of the same deployment reads it back; another
        // deployment in the same store has nothing.
        let again = McpBridge::new();
        again.set_learn_from_use(kept_in(&store)).await.unwrap();
        assert_eq!(
            again.learned().await.unwrap(),
            bridge.learned().await.unwrap()
        );
        let elsewhere = McpBridge::new();
        let shared: Arc<dyn SessionStore> = store.clone();
        elsewhere
            .set_learn_from_use(Some(LearnFromUse::new(10).kept_in(shared, "other desk")))
            .await
            .unwrap();
        assert!(elsewhere.learned().await.unwrap().is_empty());
        // The operator deletes; the export is then empty.
        assert_eq!(
            bridge
                .forget_learned(Some("maps__elevation"))
                .await
                .unwrap(),
            1
        );
        assert!(bridge.learned().await.unwrap().is_empty());
        assert_eq!(
            bridge.export_learned().await.unwrap(),
            serde_json::json!({"pairs": []})
        );
        // Off: nothing is learned, and the words stop counting.
        bridge.set_learn_from_use(None).await.unwrap();
        assert_eq!(bridge.learning_consent("alice").await.unwrap(), None);
        found(&bridge, "s", "altitude of a city", "maps__elevation");
        bridge
            .learn_from_call(Some("s"), None, "maps__elevation")
            .await;
        assert!(bridge.learned().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_slot_that_holds_no_learned_pairs_is_an_error_that_says_what_to_do() {
        let store = Arc::new(MemoryStore::new());
        let session = crate::slot::hashed_session_id("mcp-learned-", &["desk"]);
        store.create(&session).await.unwrap();
        store
            .append_with_state(
                &session,
                &[],
                StateChange::new(SLOT, None, Some("not json")),
            )
            .await
            .unwrap();
        let bridge = McpBridge::new();
        let err = bridge
            .set_learn_from_use(kept_in(&store))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, BridgeError::Store(why) if why.contains("delete that session")),
            "{err}"
        );
        // learning stayed off
        assert!(lock(&bridge.inner.learning).is_none());
    }

    #[tokio::test]
    async fn workers_learning_at_once_keep_every_pair_and_see_each_others() {
        let store = Arc::new(MemoryStore::new());
        let workers: Vec<McpBridge> = (0..4).map(|_| McpBridge::new()).collect();
        for w in &workers {
            w.set_learn_from_use(kept_in(&store)).await.unwrap();
        }
        for (i, w) in workers.iter().enumerate() {
            found(w, "s", &format!("request {i}"), &format!("t{i}"));
        }
        let calls = workers.iter().enumerate().map(|(i, w)| async move {
            w.learn_from_call(Some("s"), None, &format!("t{i}")).await
        });
        futures::future::join_all(calls).await;
        // no write lost another's pair
        assert_eq!(workers[0].learned().await.unwrap().len(), 4);
        // a worker's searches count another's pairs once its copy is read again
        let last = &workers[3];
        lock(&last.inner.learning).as_mut().unwrap().read_at -= REFRESH;
        last.refresh_learned().await;
        let doc = last.with_learned_words(ToolDoc::new("t0", "first"));
        assert_eq!(doc.keywords, ["request 0"]);
        // an operator on one worker deletes for all
        assert_eq!(workers[1].forget_learned(None).await.unwrap(), 4);
        assert!(workers[2].learned().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_principals_calls_are_learned_only_with_their_consent_and_withdrawing_deletes_them() {
        let bridge = McpBridge::new();
        bridge
            .set_learn_from_use(Some(LearnFromUse::new(10)))
            .await
            .unwrap();
        let call = |session: &'static str, who: &'static str| {
            found(&bridge, session, "altitude of a city", "maps__elevation");
            bridge.learn_from_call(Some(session), Some(who), "maps__elevation")
        };
        // alice has not said yes: her call teaches nothing
        call("a1", "alice").await;
        assert!(bridge.learned().await.unwrap().is_empty());
        // she says yes: her next one is kept as hers, and the export carries her consent
        assert_eq!(bridge.learning_consent("alice").await.unwrap(), Some(false));
        assert_eq!(bridge.set_learning_consent("alice", true).await.unwrap(), 0);
        assert_eq!(bridge.learning_consent("alice").await.unwrap(), Some(true));
        call("a2", "alice").await;
        let learned = bridge.learned().await.unwrap();
        assert_eq!(learned.len(), 1);
        assert_eq!(learned[0].principal.as_deref(), Some("alice"));
        let export = bridge.export_learned().await.unwrap();
        assert!(export.to_string().contains("alice"), "{export}");
        let doc = bridge.with_learned_words(ToolDoc::new("maps__elevation", "Get elevation"));
        assert_eq!(doc.keywords, ["altitude of a city"]);
        // bob never consented
        call("b1", "bob").await;
        assert_eq!(bridge.learned().await.unwrap().len(), 1);
        // alice withdraws: her pair goes, and its words stop counting
        assert_eq!(
            bridge.set_learning_consent("alice", false).await.unwrap(),
            1
        );
        assert!(bridge.learned().await.unwrap().is_empty());
        let doc = bridge.with_learned_words(ToolDoc::new("maps__elevation", "Get elevation"));
        assert!(doc.keywords.is_empty());
    }

    /// Workers, each with its own connection to one PostgreSQL database (`TEST_DATABASE_URL`,
    /// set by `cargo xtask test`), learn into one set of pairs: none lost when they learn at
    /// once, each sees the others', and a consent withdrawn on one deletes on all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn workers_on_one_postgresql_database_learn_into_one_set_of_pairs() {
        use toolwright_context_engine::PostgresStore;
        let url = std::env::var("TEST_DATABASE_URL")
            .expect("TEST_DATABASE_URL: run `cargo xtask test`, which starts PostgreSQL");
        // A deployment of this run's own: the database outlives the test.
        let deployment = format!("desk-{}-{:?}", std::process::id(), Instant::now());
        let mut workers = Vec::new();
        for _ in 0..3 {
            let store: Arc<dyn SessionStore> =
                Arc::new(PostgresStore::connect(&url).await.unwrap());
            let w = McpBridge::new();
            w.set_learn_from_use(Some(LearnFromUse::new(50).kept_in(store, &deployment)))
                .await
                .unwrap();
            workers.push(w);
        }
        assert_eq!(
            workers[0]
                .set_learning_consent("alice", true)
                .await
                .unwrap(),
            0
        );
        for (i, w) in workers.iter().enumerate() {
            found(w, "s", &format!("request {i}"), &format!("t{i}"));
        }
        let calls = workers.iter().enumerate().map(|(i, w)| async move {
            w.learn_from_call(Some("s"), Some("alice"), &format!("t{i}"))
                .await
        });
        futures::future::join_all(calls).await;
        let learned = workers[2].learned().await.unwrap();
        assert_eq!(learned.len(), 3, "{learned:?}");
        assert!(
            learned
                .iter()
                .all(|p| p.principal.as_deref() == Some("alice"))
        );
        assert_eq!(
            workers[1]
                .set_learning_consent("alice", false)
                .await
                .unwrap(),
            3
        );
        assert!(workers[0].learned().await.unwrap().is_empty());
    }
}
