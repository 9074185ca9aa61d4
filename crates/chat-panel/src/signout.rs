//! Signing out before a session cookie expires: who signed out, and when, kept in the
//! panel's session store — the one every worker shares (PostgreSQL) or the process's own
//! (SQLite, memory) — so a copy of a signed-out cookie is refused on every worker.
//!
//! A record per principal, `not-before:PRINCIPAL` in the reserved record [`SIGN_OUTS`] (not a
//! conversation id: no endpoint and no bus message can reach it): the time, in milliseconds,
//! before which their session cookies were issued. `GET /logout` and
//! [`ChatPanel::sign_out`](crate::ChatPanel::sign_out) move it to now, which ends every session
//! of that principal — in every browser — while a sign-in after it is good. Each worker reads
//! a principal's record at most once per `recheck` ([`OidcLoginConfig::revocation_recheck`](crate::login::OidcLoginConfig::revocation_recheck)),
//! so a sign-out reaches the other workers within that time and the worker that took it at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use toolwright_context_engine::{SessionStore, StateChange, StoreError};

/// The store record that holds the sign-outs: not a conversation id (it has a `.`), so no
/// request or bus message can name it.
pub(crate) const SIGN_OUTS: &str = "chat-panel.sign-outs";

/// The most principals whose record a worker remembers between reads; past it, it forgets
/// them all and reads again (each read is one store query).
const MAX_REMEMBERED: usize = 10_000;

fn key(principal: &str) -> String {
    format!("not-before:{principal}")
}

/// The sign-outs as one worker sees them.
pub(crate) struct SignOuts {
    store: OnceLock<Arc<dyn SessionStore>>,
    /// principal → (not before, ms, `None` when they never signed out; when it was read).
    seen: Mutex<HashMap<String, (Option<u64>, Instant)>>,
    recheck: Duration,
}

impl SignOuts {
    pub(crate) fn new(recheck: Duration) -> Self {
        Self {
            store: OnceLock::new(),
            seen: Mutex::new(HashMap::new()),
            recheck,
        }
    }

    /// Where the records live: the panel's session store (set once, by `ChatPanel::new`).
    pub(crate) fn attach(&self, store: Arc<dyn SessionStore>) {
        let _ = self.store.set(store);
    }

    /// Whether a session of `principal` issued at `issued_ms` was signed out since. A login
    /// that no panel uses has no store: nothing was signed out.
    pub(crate) async fn signed_out(
        &self,
        principal: &str,
        issued_ms: u64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .not_before(principal)
            .await?
            .is_some_and(|at| issued_ms <= at))
    }

    async fn not_before(&self, principal: &str) -> Result<Option<u64>, StoreError> {
        let Some(store) = self.store.get() else {
            return Ok(None);
        };
        if let Some((at, read)) = self.lock().get(principal)
            && read.elapsed() < self.recheck
        {
            return Ok(*at);
        }
        let at = match store.get_state(SIGN_OUTS, &key(principal)).await {
            Ok(v) => v.as_deref().map(|v| parse(Some(v))),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        self.remember(principal, at);
        Ok(at)
    }

    /// Ends every session of `principal` issued until now, on every worker sharing the store.
    pub(crate) async fn sign_out(&self, principal: &str, now_ms: u64) -> Result<(), StoreError> {
        let Some(store) = self.store.get() else {
            return Ok(());
        };
        let key = key(principal);
        loop {
            let before = match store.get_state(SIGN_OUTS, &key).await {
                Ok(v) => v,
                Err(StoreError::NotFound { .. }) => match store.create(SIGN_OUTS).await {
                    Ok(()) | Err(StoreError::AlreadyExists { .. }) => continue,
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            };
            let at = parse(before.as_deref()).max(now_ms);
            let value = at.to_string();
            let change = StateChange::new(&key, before.as_deref(), Some(&value));
            // `None`: another worker moved it meanwhile; read it again
            if store
                .append_with_state(SIGN_OUTS, &[], change)
                .await?
                .is_some()
            {
                self.remember(principal, Some(at));
                return Ok(());
            }
        }
    }

    fn remember(&self, principal: &str, at: Option<u64>) {
        let mut seen = self.lock();
        if seen.len() >= MAX_REMEMBERED && !seen.contains_key(principal) {
            seen.clear();
        }
        seen.insert(principal.to_owned(), (at, Instant::now()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<u64>, Instant)>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn parse(v: Option<&str>) -> u64 {
    v.and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolwright_context_engine::MemoryStore;

    #[tokio::test]
    async fn a_sign_out_ends_the_sessions_issued_before_it_only_and_reaches_another_worker_after_recheck()
     {
        let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
        let here = SignOuts::new(Duration::from_millis(200));
        let there = SignOuts::new(Duration::from_millis(200));
        here.attach(store.clone());
        there.attach(store.clone());
        assert!(
            !here.signed_out("alice", 0).await.unwrap(),
            "nobody signed out yet"
        );
        assert!(!here.signed_out("alice", 1_000).await.unwrap());
        assert!(!there.signed_out("alice", 1_000).await.unwrap()); // read and remembered
        here.sign_out("alice", 2_000).await.unwrap();
        assert!(
            here.signed_out("alice", 1_000).await.unwrap(),
            "at once here"
        );
        assert!(here.signed_out("alice", 2_000).await.unwrap());
        assert!(
            !here.signed_out("alice", 2_001).await.unwrap(),
            "a later sign-in"
        );
        assert!(!here.signed_out("bob", 1_000).await.unwrap(), "only alice");
        assert!(
            here.signed_out("alice", 0).await.unwrap(),
            "a cookie without its time"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            there.signed_out("alice", 1_000).await.unwrap(),
            "after recheck"
        );
        // never moves back
        there.sign_out("alice", 1_500).await.unwrap();
        assert!(there.signed_out("alice", 2_000).await.unwrap());
        // a login no panel uses has nothing signed out
        assert!(
            !SignOuts::new(Duration::ZERO)
                .signed_out("alice", 0)
                .await
                .unwrap()
        );
    }
}
