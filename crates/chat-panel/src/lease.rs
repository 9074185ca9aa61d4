//! The cross-worker turn lease: which worker runs a session's answer, kept in the session
//! store's state slot [`TURN_KEY`] so every worker sharing the store sees it.
//!
//! The slot holds `WORKER TOKEN EXPIRES_MS` (milliseconds since the Unix epoch). A worker takes
//! it by compare-and-set when it is unset or expired, renews it every third of its time to live
//! while the answer runs, and clears it when the answer ends. A worker that dies (SIGKILL) stops
//! renewing: once the lease expires, the next worker that touches the session stores a plain
//! message saying the answer was interrupted — in the same compare-and-set that clears or takes
//! the lease, so exactly one worker writes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_core::Message;

/// The state slot holding the lease.
pub(crate) const TURN_KEY: &str = "chat-panel.turn";

/// What the person reads when their answer's lease expired before the answer finished: the
/// worker running it died, or it lost the database and could not save it. The
/// text names both, since the worker that stores it cannot tell which happened.
pub(crate) const INTERRUPTED: &str = "The answer to your last message was interrupted: the server \
handling it stopped, or could not save it, before it finished. Your message is kept; please send \
it again.";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This process's id among workers: its pid and start time.
pub(crate) fn worker_id() -> String {
    format!("{}-{:x}", std::process::id(), now_ms())
}

fn expires(value: &str) -> u64 {
    value
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn expired(value: &str) -> bool {
    expires(value) <= now_ms()
}

fn new_value(worker: &str, token: &str, ttl: Duration) -> String {
    let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    format!("{worker} {token} {}", now_ms().saturating_add(ttl))
}

/// The stored conversation ends in the middle of an answer: its last message is the person's,
/// or a tool result the model has not answered yet.
async fn unfinished(store: &dyn SessionStore, id: &str) -> Result<bool, StoreError> {
    let s = store.load(id).await?;
    Ok(matches!(
        s.messages.last(),
        Some(Message::User { .. } | Message::Tool { .. })
    ) || matches!(s.messages.last(), Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty()))
}

/// Stores `text` as the answer when the conversation ends waiting for one (its last message is
/// the person's or a tool result): a failed answer is then in the store like any other, for a
/// reload and for every worker. Nothing is stored after unanswered tool calls (a call held for
/// approval), so no call loses its result. Returns whether it stored.
pub(crate) async fn close_failed(
    store: &dyn SessionStore,
    id: &str,
    text: &str,
) -> Result<bool, StoreError> {
    let s = store.load(id).await?;
    if !matches!(
        s.messages.last(),
        Some(Message::User { .. } | Message::Tool { .. })
    ) {
        return Ok(false);
    }
    store.append(id, &[Message::assistant(text)]).await?;
    Ok(true)
}

/// The round a worker stores when it finds `stale` (an expired lease): the interrupted message
/// if the answer did not finish, else nothing.
async fn recovery_round(store: &dyn SessionStore, id: &str) -> Result<Vec<Message>, StoreError> {
    Ok(if unfinished(store, id).await? {
        vec![Message::assistant(INTERRUPTED)]
    } else {
        Vec::new()
    })
}

/// The outcome of [`acquire`].
pub(crate) enum Acquired {
    /// This worker holds the lease (its value).
    Held(String),
    /// Another worker's answer is running.
    Busy,
}

static TOKENS: AtomicU64 = AtomicU64::new(1);

/// Takes the session's lease for `worker` when nobody holds it (or the holder's expired: the
/// interrupted answer is closed with [`INTERRUPTED`] first, in the same compare-and-set).
#[cfg(test)]
pub(crate) async fn acquire(
    store: &dyn SessionStore,
    id: &str,
    worker: &str,
    ttl: Duration,
) -> Result<Acquired, StoreError> {
    let current = store.get_state(id, TURN_KEY).await?;
    acquire_from(store, id, worker, ttl, current).await
}

/// [`acquire`], when the caller has just read the slot (`current`): one read fewer.
pub(crate) async fn acquire_from(
    store: &dyn SessionStore,
    id: &str,
    worker: &str,
    ttl: Duration,
    mut current: Option<String>,
) -> Result<Acquired, StoreError> {
    for attempt in 0..4 {
        if attempt > 0 {
            current = store.get_state(id, TURN_KEY).await?;
        }
        let round = match &current {
            Some(v) if !expired(v) => return Ok(Acquired::Busy),
            Some(_) => recovery_round(store, id).await?,
            None => Vec::new(),
        };
        let token = TOKENS.fetch_add(1, Ordering::Relaxed).to_string();
        let value = new_value(worker, &token, ttl);
        let change = StateChange::new(TURN_KEY, current.as_deref(), Some(&value));
        if store.append_with_state(id, &round, change).await?.is_some() {
            if !round.is_empty() {
                tracing::warn!(session = %id, "chat panel: an answer's worker stopped mid-turn; stored that it was interrupted");
            }
            return Ok(Acquired::Held(value));
        }
        // another worker changed the slot meanwhile: look again
    }
    Ok(Acquired::Busy)
}

/// Extends the lease held as `held`; `None` when it is no longer this worker's (it expired and
/// another worker took it or closed the answer).
pub(crate) async fn renew(
    store: &dyn SessionStore,
    id: &str,
    held: &str,
    ttl: Duration,
) -> Result<Option<String>, StoreError> {
    let mut parts = held.splitn(3, ' ');
    let (worker, token) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let value = new_value(worker, token, ttl);
    let change = StateChange::new(TURN_KEY, Some(held), Some(&value));
    Ok(store
        .append_with_state(id, &[], change)
        .await?
        .map(|_| value))
}

/// Clears the lease if it is still `held`.
pub(crate) async fn release(store: &dyn SessionStore, id: &str, held: &str) {
    let change = StateChange::new(TURN_KEY, Some(held), None);
    match store.append_with_state(id, &[], change).await {
        Ok(_) | Err(StoreError::NotFound { .. }) => {}
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "chat panel: could not release the answer's lease; it expires by itself")
        }
    }
}

/// Whether an answer runs in the session (on any worker). An expired lease is closed here
/// ([`INTERRUPTED`] stored when the answer had not finished) and counts as not running.
#[cfg(test)]
pub(crate) async fn running(store: &dyn SessionStore, id: &str) -> Result<bool, StoreError> {
    let current = store.get_state(id, TURN_KEY).await?;
    running_from(store, id, current).await
}

/// [`running`], when the caller has just read the slot (`current`, e.g. with the rows in
/// [`SessionStore::load_with_state`]): no read unless the lease expired.
pub(crate) async fn running_from(
    store: &dyn SessionStore,
    id: &str,
    current: Option<String>,
) -> Result<bool, StoreError> {
    let Some(current) = current else {
        return Ok(false);
    };
    if !expired(&current) {
        return Ok(true);
    }
    let round = recovery_round(store, id).await?;
    let change = StateChange::new(TURN_KEY, Some(&current), None);
    if store.append_with_state(id, &round, change).await?.is_some() && !round.is_empty() {
        tracing::warn!(session = %id, "chat panel: an answer's worker stopped mid-turn; stored that it was interrupted");
    }
    Ok(false)
}

/// The session store as the agent of a panel worker writes to it: an answer's rounds are
/// stored only while this worker still holds the session's lease, so a worker that lost it
/// (too slow to renew; another worker closed its answer) cannot add to the conversation. It
/// notes the lease values this process writes through it, and stores each round of a session it
/// holds together with a compare-and-set that the lease is unchanged. Everything else passes
/// through.
pub(crate) struct FencedStore {
    inner: std::sync::Arc<dyn SessionStore>,
    held: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<Option<String>>>>,
    >,
}

impl FencedStore {
    pub(crate) fn new(inner: std::sync::Arc<dyn SessionStore>) -> Self {
        Self {
            inner,
            held: std::sync::Mutex::default(),
        }
    }

    fn slot(&self, id: &str) -> std::sync::Arc<tokio::sync::Mutex<Option<String>>> {
        let mut map = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(id.to_owned()).or_default().clone()
    }

    fn forget(&self, id: &str) {
        let mut map = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let unused = map.get(id).is_some_and(|s| {
            std::sync::Arc::strong_count(s) == 1 && s.try_lock().is_ok_and(|held| held.is_none())
        });
        if unused {
            map.remove(id);
        }
    }
}

fn lease_lost(id: &str) -> StoreError {
    StoreError::Database {
        detail: format!(
            "this worker no longer holds the lease on session `{id}`'s answer (it expired and \
             another worker closed or took the answer), so the round was not stored; the person \
             sees the answer as interrupted and may send again"
        ),
    }
}

#[async_trait::async_trait]
impl SessionStore for FencedStore {
    async fn create(&self, id: &str) -> Result<(), StoreError> {
        self.inner.create(id).await
    }

    async fn load(&self, id: &str) -> Result<toolwright_context_engine::Session, StoreError> {
        self.inner.load(id).await
    }

    async fn append(&self, id: &str, round: &[Message]) -> Result<u64, StoreError> {
        let slot = self.slot(id);
        let held = slot.lock().await;
        let result = match held.as_deref() {
            None => self.inner.append(id, round).await,
            Some(v) => {
                let change = StateChange::new(TURN_KEY, Some(v), Some(v));
                self.inner
                    .append_with_state(id, round, change)
                    .await?
                    .ok_or_else(|| lease_lost(id))
            }
        };
        drop(held);
        drop(slot);
        self.forget(id);
        result
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.inner.list().await
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.inner.delete(id).await
    }

    async fn get_state(&self, id: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.inner.get_state(id, key).await
    }

    async fn load_with_state(
        &self,
        id: &str,
        key: &str,
    ) -> Result<(toolwright_context_engine::Session, Option<String>), StoreError> {
        self.inner.load_with_state(id, key).await
    }

    async fn watch(&self) -> Result<toolwright_context_engine::ChangeFeed, StoreError> {
        self.inner.watch().await
    }

    async fn append_with_state(
        &self,
        id: &str,
        round: &[Message],
        change: StateChange<'_>,
    ) -> Result<Option<u64>, StoreError> {
        if change.key != TURN_KEY {
            return self.inner.append_with_state(id, round, change).await;
        }
        let slot = self.slot(id);
        let mut held = slot.lock().await;
        let result = self.inner.append_with_state(id, round, change).await;
        if let Ok(Some(_)) = result {
            // this process's lease from now on (or none)
            *held = change.new.map(str::to_owned);
        }
        drop(held);
        drop(slot);
        self.forget(id);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolwright_context_engine::MemoryStore;

    #[tokio::test]
    async fn workers_a_worker_that_lost_its_lease_cannot_store_a_round() {
        let shared: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(MemoryStore::new());
        let (a, b) = (
            FencedStore::new(shared.clone()),
            FencedStore::new(shared.clone()),
        );
        a.create("s1").await.unwrap();
        let ttl = Duration::from_millis(100);
        let Acquired::Held(_) = acquire(&a, "s1", "A", ttl).await.unwrap() else {
            panic!("free lease not taken")
        };
        a.append("s1", &[Message::user("hi")]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        // B closes A's expired answer and takes the session
        let Acquired::Held(lb) = acquire(&b, "s1", "B", ttl).await.unwrap() else {
            panic!("expired lease not taken")
        };
        // A, still running, tries to store its round: refused, nothing written
        let late = a.append("s1", &[Message::assistant("late answer")]).await;
        assert!(matches!(late, Err(StoreError::Database { .. })), "{late:?}");
        b.append("s1", &[Message::user("again")]).await.unwrap();
        release(&b, "s1", &lb).await;
        // without a lease held, appends pass through (the panel's other writers)
        b.append("s1", &[Message::assistant("ok")]).await.unwrap();
        let msgs = shared.load("s1").await.unwrap().messages;
        assert_eq!(
            msgs,
            [
                Message::user("hi"),
                Message::assistant(INTERRUPTED),
                Message::user("again"),
                Message::assistant("ok")
            ]
        );
    }

    #[tokio::test]
    async fn workers_one_lease_holder_and_an_expired_one_is_closed_once() {
        let store = MemoryStore::new();
        store.create("s1").await.unwrap();
        store.append("s1", &[Message::user("hi")]).await.unwrap();
        let ttl = Duration::from_millis(100);
        let Acquired::Held(a) = acquire(&store, "s1", "A", ttl).await.unwrap() else {
            panic!("free lease not taken")
        };
        assert!(matches!(
            acquire(&store, "s1", "B", ttl).await.unwrap(),
            Acquired::Busy
        ));
        assert!(running(&store, "s1").await.unwrap());
        tokio::time::sleep(Duration::from_millis(5)).await; // a later expiry: a new value
        let a2 = renew(&store, "s1", &a, ttl).await.unwrap().unwrap();
        assert!(
            renew(&store, "s1", &a, ttl).await.unwrap().is_none(),
            "stale value"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        // A died: B finds it expired, closes the answer and takes the lease in one step
        let Acquired::Held(_) = acquire(&store, "s1", "B", ttl).await.unwrap() else {
            panic!("expired lease not taken")
        };
        assert!(renew(&store, "s1", &a2, ttl).await.unwrap().is_none());
        let msgs = store.load("s1").await.unwrap().messages;
        assert_eq!(msgs, [Message::user("hi"), Message::assistant(INTERRUPTED)]);
        tokio::time::sleep(Duration::from_millis(150)).await;
        // a finished conversation whose lease expired gets no message
        assert!(!running(&store, "s1").await.unwrap());
        assert!(!running(&store, "s1").await.unwrap());
        assert_eq!(store.load("s1").await.unwrap().messages.len(), 2);
    }
}
