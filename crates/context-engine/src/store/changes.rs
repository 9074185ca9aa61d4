//! A store's change feed: who follows a conversation learns that it changed from the store
//! itself — across every process that shares it — instead of reading it again and again.

use std::sync::Arc;

use tokio::sync::broadcast;

/// How many changes a slow follower may fall behind before it is told [`StoreChange::Missed`].
const FEED_CAPACITY: usize = 4096;

/// One change reported by a [`ChangeFeed`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreChange {
    /// A session's messages or state slots changed, or it was created or deleted.
    Session(Arc<str>),
    /// Changes may have been missed — the follower fell behind, or the feed's connection to the
    /// database was lost and is back: read again every session you follow.
    Missed,
}

/// The changes committed to a store after the feed was opened
/// ([`SessionStore::watch`](super::SessionStore::watch)), in commit order per session.
///
/// A change is reported after it is committed, so a follower that is told
/// [`StoreChange::Session`] and then reads the session sees it. Nothing is lost silently: a
/// follower that fell behind, or a feed whose database connection came back, gets
/// [`StoreChange::Missed`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), toolwright_context_engine::StoreError> {
/// use toolwright_context_engine::{MemoryStore, SessionStore, StoreChange};
/// let store = MemoryStore::new();
/// let mut feed = store.watch().await?;
/// store.create("s1").await?;
/// assert_eq!(feed.next().await, Some(StoreChange::Session("s1".into())));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ChangeFeed {
    rx: broadcast::Receiver<StoreChange>,
}

impl ChangeFeed {
    /// The next change; `None` once the store is gone.
    pub async fn next(&mut self) -> Option<StoreChange> {
        match self.rx.recv().await {
            Ok(c) => Some(c),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(StoreChange::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// The sending side of [`ChangeFeed`]s, for a store's implementation (a store of your own can
/// offer `watch` with it too).
#[derive(Debug, Clone)]
pub struct ChangeSender {
    tx: broadcast::Sender<StoreChange>,
}

impl Default for ChangeSender {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangeSender {
    /// A sender with no feed yet.
    pub fn new() -> Self {
        Self {
            tx: broadcast::channel(FEED_CAPACITY).0,
        }
    }

    /// A new feed: every change sent from now on.
    pub fn subscribe(&self) -> ChangeFeed {
        ChangeFeed {
            rx: self.tx.subscribe(),
        }
    }

    /// Reports that session `id` changed (call it after the change is committed).
    pub fn session(&self, id: &str) {
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(StoreChange::Session(id.into()));
        }
    }

    /// Reports that changes may have been missed.
    pub fn missed(&self) {
        let _ = self.tx.send(StoreChange::Missed);
    }
}
