//! An in-memory [`SessionStore`].

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use toolwright_core::Message;

use super::{ChangeFeed, ChangeSender, SessionStore, StateChange, StoreError, check_id};
use crate::history::Session;

/// Sessions in memory: fast, shared between tasks, gone when the process ends. For tests,
/// demos and short-lived agents.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), toolwright_context_engine::StoreError> {
/// use toolwright_context_engine::{MemoryStore, SessionStore};
/// use toolwright_core::Message;
/// let store = MemoryStore::new();
/// let s = store.load_or_create("s1").await?;
/// assert!(s.messages.is_empty());
/// store.append("s1", &[Message::user("hi"), Message::assistant("hello")]).await?;
/// assert_eq!(store.load("s1").await?.messages[1], Message::assistant("hello"));
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, Stored>>,
    changes: ChangeSender,
}

/// One session: its messages and its state slots.
#[derive(Debug, Default)]
struct Stored {
    messages: Vec<Message>,
    state: HashMap<String, String>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Stored>> {
        // A panic while holding the lock cannot leave a half round: a round is pushed with one
        // `extend_from_slice`, whose clones of strings and JSON values do not panic (running
        // out of memory aborts). So a poisoned map is still consistent.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn not_found(id: &str) -> StoreError {
    StoreError::NotFound { id: id.to_owned() }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn create(&self, id: &str) -> Result<(), StoreError> {
        check_id(id)?;
        let mut map = self.lock();
        if map.contains_key(id) {
            return Err(StoreError::AlreadyExists { id: id.to_owned() });
        }
        map.insert(id.to_owned(), Stored::default());
        drop(map);
        self.changes.session(id);
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Session, StoreError> {
        let map = self.lock();
        let messages = map.get(id).ok_or_else(|| not_found(id))?.messages.clone();
        Ok(Session {
            id: id.to_owned(),
            messages,
        })
    }

    async fn append(&self, id: &str, round: &[Message]) -> Result<u64, StoreError> {
        let mut map = self.lock();
        let stored = map.get_mut(id).ok_or_else(|| not_found(id))?;
        stored.messages.extend_from_slice(round);
        let len = stored.messages.len() as u64;
        drop(map);
        self.changes.session(id);
        Ok(len)
    }

    async fn get_state(&self, id: &str, key: &str) -> Result<Option<String>, StoreError> {
        let map = self.lock();
        let stored = map.get(id).ok_or_else(|| not_found(id))?;
        Ok(stored.state.get(key).cloned())
    }

    /// Messages and slot under one lock.
    async fn load_with_state(
        &self,
        id: &str,
        key: &str,
    ) -> Result<(Session, Option<String>), StoreError> {
        let map = self.lock();
        let stored = map.get(id).ok_or_else(|| not_found(id))?;
        let session = Session {
            id: id.to_owned(),
            messages: stored.messages.clone(),
        };
        Ok((session, stored.state.get(key).cloned()))
    }

    async fn append_with_state(
        &self,
        id: &str,
        round: &[Message],
        change: StateChange<'_>,
    ) -> Result<Option<u64>, StoreError> {
        let mut map = self.lock();
        let stored = map.get_mut(id).ok_or_else(|| not_found(id))?;
        if stored.state.get(change.key).map(String::as_str) != change.expected {
            return Ok(None);
        }
        match change.new {
            Some(v) => stored.state.insert(change.key.to_owned(), v.to_owned()),
            None => stored.state.remove(change.key),
        };
        stored.messages.extend_from_slice(round);
        let len = stored.messages.len() as u64;
        drop(map);
        self.changes.session(id);
        Ok(Some(len))
    }

    /// One lookup under one lock (the trait's default takes three and builds a NotFound error).
    async fn load_or_create(&self, id: &str) -> Result<Session, StoreError> {
        let mut map = self.lock();
        let messages = match map.get(id) {
            Some(m) => m.messages.clone(),
            None => {
                check_id(id)?;
                map.insert(id.to_owned(), Stored::default());
                drop(map);
                self.changes.session(id);
                Vec::new()
            }
        };
        Ok(Session {
            id: id.to_owned(),
            messages,
        })
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        Ok(ids)
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.lock().remove(id).ok_or_else(|| not_found(id))?;
        self.changes.session(id);
        Ok(())
    }

    async fn watch(&self) -> Result<ChangeFeed, StoreError> {
        Ok(self.changes.subscribe())
    }
}
