//! Conversation state: what the page shows, derived from the session store's rows, so every
//! worker sharing the store shows the same conversation with the same ids.
//!
//! Stored message `i` of a conversation (counting from 1 over its whole life: the messages
//! trimmed off its front count too, see [`BASE_KEY`]) is *row* `i`. The entries it makes or
//! changes are one SSE "row" of events whose id is `i`; an entry made by row `i` has the id
//! `i * 256 + k` (`k`: its place among the row's entries). Entries shown only while an answer
//! streams on one worker (text still arriving, a running tool, an error) have ids from
//! [`LIVE_IDS`] up and are replaced by the stored ones (`replaces`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde_json::json;
use tokio::sync::Notify;
use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_core::{Message, ToolCall};
use toolwright_messaging::{BusMessage, MessageBus};

mod entries;
mod inbox;
mod runs;

pub use entries::{Entry, EntryImage, EntryKind, ToolActivity};
pub(crate) use entries::{entries_from_history, rows_from_history};
pub use runs::RunSummary;
pub(crate) use runs::{RUNS_KEY, attach_runs, read_runs, record_run};

pub(crate) use inbox::BusMemory;
use inbox::inbox_task;
#[cfg(test)]
use inbox::{BUS_SEEN_KEY, store_person_message};
pub(crate) use inbox::{INBOX_PREFIX, inbox_id};

/// The state slot holding how many messages were trimmed off the conversation's front.
pub(crate) const BASE_KEY: &str = "chat-panel.base";
/// The state slot naming the principal a conversation belongs to: set once, when the
/// conversation is created, in the store itself, so every worker agrees without shared memory.
pub(crate) const OWNER_KEY: &str = "chat-panel.owner";
/// Entry ids per row.
pub(crate) const ROW_SLOTS: u64 = 256;
/// The first id of entries that are not (yet) stored.
pub(crate) const LIVE_IDS: u64 = 1 << 52;
/// The sender id of the panel's own agent on the bus: its messages are shown from the stored
/// `send_message` call, not from the bus.
pub(crate) const AGENT_SENDER: &str = "agent";

/// A stored conversation as rows: `(base, messages)`, `None` when it does not exist.
pub(crate) async fn load_rows(
    store: &dyn SessionStore,
    id: &str,
) -> Result<Option<(u64, Vec<Message>)>, StoreError> {
    let messages = match store.load(id).await {
        Ok(s) => s.messages,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let base = match store.get_state(id, BASE_KEY).await {
        Ok(v) => v.and_then(|v| v.parse().ok()).unwrap_or(0),
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some((base, messages)))
}

/// The stored round that shows a bus message from another sender (not the panel's own agent)
/// to the person: a `send_message` call naming its sender, and its result.
pub(super) fn foreign_message_round(m: &BusMessage) -> Vec<Message> {
    let call_id = format!("bus-{}", m.msg_id);
    let mut args = json!({"recipient": crate::USER_RECIPIENT, "text": m.text, "from": m.from});
    if !m.quick_replies.is_empty() {
        args["quickReplies"] = json!(m.quick_replies);
    }
    vec![
        Message::assistant_with_tool_calls(
            "",
            vec![ToolCall::new(call_id.clone(), "send_message", args)],
        ),
        Message::tool(
            call_id,
            "send_message",
            json!({"success": true, "deliveredFrom": m.from}).to_string(),
        ),
    ]
}

/// A conversation open in this worker: who waits for its new rows.
struct Slot {
    changed: Arc<Notify>,
    last_used: Instant,
}

/// The bus family of the persons' addresses (`user:ID`): one group subscription per worker
/// takes every message to any person, whichever worker holds their connection.
const PERSONS: &str = "user";

/// The bus family of the principals' addresses (`person:PRINCIPAL`): a message to a
/// principal is stored in their inbox conversation ([`inbox_id`]), whichever worker takes it.
const PRINCIPALS: &str = "person";

/// The conversations this worker has open, at most `max_sessions`. Nothing here is conversation
/// state: the messages, the entries' ids and whether an answer runs are in the store (any worker
/// rebuilds them); this holds the process's own resources — a wake-up for the streams following
/// each open conversation, and ONE bus subscription for the whole worker (the group `user:*`,
/// shared by every worker: a message from another sender to any person is stored as a row by
/// whichever worker takes it, and the store's change feed wakes the streams on every worker).
///
/// With a store of the process's own (SQLite, memory), the least recently used conversation is
/// deleted from the store when a new one starts beyond `max_sessions`; with a shared store
/// (PostgreSQL) other workers may be serving it, so it is only closed here.
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Slot>>,
    running: Mutex<HashSet<String>>,
    bus: MessageBus,
    store: Arc<dyn SessionStore>,
    shared: bool,
    max_sessions: usize,
    /// The group subscriptions' tasks, `user:*` and `person:*` (started with the first
    /// conversation opened here).
    inbox: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// How many conversations a store of this process's own holds (known after the first
    /// listing, then counted), so a new conversation lists the store only near the limit.
    stored: Mutex<Option<usize>>,
    /// How long and how many stored bus messages each conversation remembers.
    bus_memory: BusMemory,
}

static LIVE: AtomicU64 = AtomicU64::new(LIVE_IDS);

/// A fresh id for an entry that is not stored (yet).
pub(crate) fn live_id() -> u64 {
    LIVE.fetch_add(1, Ordering::Relaxed)
}

impl Sessions {
    pub fn new(
        bus: MessageBus,
        store: Arc<dyn SessionStore>,
        shared: bool,
        max_sessions: usize,
    ) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            running: Mutex::new(HashSet::new()),
            bus,
            store,
            shared,
            max_sessions: max_sessions.max(1),
            stored: Mutex::new(None),
            inbox: Mutex::new(Vec::new()),
            bus_memory: BusMemory {
                max_age: std::time::Duration::from_secs(7 * 24 * 3600),
                max_ids: 1000,
            },
        }
    }

    /// Sets how long and how many stored bus messages each conversation remembers (before
    /// [`start_inbox`](Self::start_inbox)).
    pub fn with_bus_memory(mut self, memory: BusMemory) -> Self {
        self.bus_memory = memory;
        self
    }

    /// Starts taking the persons' and the principals' bus messages (once; needs a Tokio
    /// runtime). A family name the bus refuses cannot happen (`user` and `person` are valid); a
    /// broker that cannot be reached is retried by the subscription itself.
    pub fn start_inbox(&self) {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        if !inbox.is_empty() {
            return;
        }
        for family in [PERSONS, PRINCIPALS] {
            match self.bus.subscribe_group(family) {
                Ok(sub) => {
                    inbox.push(tokio::spawn(inbox_task(
                        sub,
                        self.store.clone(),
                        self.bus_memory,
                    )));
                }
                Err(e) => {
                    tracing::error!(error = %e, family, "chat panel: could not subscribe to the persons' messages")
                }
            }
        }
    }

    pub fn store(&self) -> &dyn SessionStore {
        &*self.store
    }

    /// The conversation's stored messages and the row number before the first (see
    /// [`load_rows`]). A shared store is never trimmed (`trim_history`), so its rows start at 1
    /// and the base slot is not read: one query fewer for every read of an events stream.
    pub async fn rows(&self, id: &str) -> Result<Option<(u64, Vec<Message>)>, StoreError> {
        if !self.shared {
            return load_rows(&*self.store, id).await;
        }
        match self.store.load(id).await {
            Ok(s) => Ok(Some((0, s.messages))),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`rows`](Self::rows) and the turn lease's slot ([`crate::lease`]) read together: one
    /// query with a shared store ([`SessionStore::load_with_state`]); two with a store of this
    /// process's own (its trimmed conversations start at the base slot).
    pub async fn rows_and_turn(
        &self,
        id: &str,
    ) -> Result<Option<(u64, Vec<Message>, Option<String>)>, StoreError> {
        let (session, turn) = match self.store.load_with_state(id, crate::lease::TURN_KEY).await {
            Ok(r) => r,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let base = if self.shared {
            0
        } else {
            match self.store.get_state(id, BASE_KEY).await {
                Ok(v) => v.and_then(|v| v.parse().ok()).unwrap_or(0),
                Err(StoreError::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            }
        };
        Ok(Some((base, session.messages, turn)))
    }

    /// The wake-up of the streams following `id` (created with the slot).
    pub fn changed(&self, id: &str) -> Option<Arc<Notify>> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = map.get_mut(id)?;
        slot.last_used = Instant::now();
        Some(slot.changed.clone())
    }

    /// Wakes the streams following `id` on this worker.
    pub fn touch(&self, id: &str) {
        if let Some(n) = self.changed(id) {
            n.notify_waiters();
        }
    }

    /// Wakes the streams of every conversation open on this worker (a change feed that may
    /// have missed changes).
    pub fn touch_all(&self) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in map.values() {
            slot.changed.notify_waiters();
        }
    }

    /// Marks an answer of `id` running on this worker (never evicted meanwhile).
    pub fn set_running(&self, id: &str, on: bool) {
        let mut r = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if on {
            r.insert(id.to_owned());
        } else {
            r.remove(id);
        }
    }

    /// Whether the conversation exists; opens it here (subscribes its inbox) when it does. Never
    /// creates one (a `GET` must not).
    pub async fn find(&self, id: &str) -> Result<bool, StoreError> {
        if self.changed(id).is_some() {
            return Ok(true);
        }
        match self.store.load(id).await {
            Ok(_) => {
                self.open(id).await;
                Ok(true)
            }
            Err(StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Opens the conversation, creating it in the store when new, owned by `owner`. `false`
    /// when it existed already (its owner is then whoever created it).
    pub async fn find_or_create(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        if self.find(id).await? {
            return Ok(false);
        }
        self.make_room().await;
        match self.store.create(id).await {
            Ok(()) => self.count_stored(1),
            Err(StoreError::AlreadyExists { .. }) => {
                self.open(id).await;
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        self.store
            .append_with_state(id, &[], StateChange::new(OWNER_KEY, None, Some(owner)))
            .await?;
        self.open(id).await;
        Ok(true)
    }

    /// `principal`'s inbox conversation ([`inbox_id`]), created as theirs when new and
    /// opened here; `None` when the store holds it as someone else's (a collision of 160 bits
    /// of SHA-256, or a store edited by hand).
    pub async fn open_inbox(&self, principal: &str) -> Result<Option<String>, StoreError> {
        let id = inbox_id(principal);
        if !inbox::own_inbox(&*self.store, &id, principal).await? {
            return Ok(None);
        }
        self.open(&id).await;
        Ok(Some(id))
    }

    /// Whom the conversation belongs to: `None` when it does not exist, `Some(None)` when it
    /// has no owner recorded (created before owners were recorded, or by a bus message to a person).
    pub async fn owner(&self, id: &str) -> Result<Option<Option<String>>, StoreError> {
        match self.store.get_state(id, OWNER_KEY).await {
            Ok(o) => Ok(Some(o)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn open(&self, id: &str) {
        self.start_inbox();
        let changed = Arc::new(Notify::new());
        let victim = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            if map.contains_key(id) {
                return;
            }
            let victim = if map.len() >= self.max_sessions {
                self.victim(&map)
            } else {
                None
            };
            if let Some(v) = &victim {
                map.remove(v);
            }
            map.insert(
                id.to_owned(),
                Slot {
                    changed,
                    last_used: Instant::now(),
                },
            );
            victim
        };
        if let Some(v) = victim {
            self.forget(&v).await;
        }
    }

    fn victim(&self, map: &HashMap<String, Slot>) -> Option<String> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .filter(|(k, _)| !running.contains(*k))
            .min_by_key(|(_, s)| s.last_used)
            .map(|(k, _)| k.clone())
    }

    /// A conversation closed here to make room: deleted from a store of this process's own
    /// (its history is freed); left in a shared one.
    async fn forget(&self, id: &str) {
        if self.shared {
            tracing::debug!(session = %id, "session limit reached: closed the least recently used conversation here");
            return;
        }
        tracing::info!(session = %id, "session limit reached: deleting the least recently used conversation");
        match self.store.delete(id).await {
            Ok(()) => self.count_stored(-1),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "could not delete an evicted conversation")
            }
        }
    }
    /// Before a new conversation: keeps the store within `max_sessions` too (it may hold
    /// conversations from before a restart that are not in memory).
    async fn make_room(&self) {
        if self.shared {
            return;
        }
        let known = *self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        if known.is_some_and(|n| n + 1 < self.max_sessions) {
            return; // far from the limit: no need to list 10,000 ids for every new conversation
        }
        let Ok(ids) = self.store.list().await else {
            return;
        };
        *self.stored.lock().unwrap_or_else(PoisonError::into_inner) = Some(ids.len());
        if ids.len() < self.max_sessions {
            return;
        }
        let cached: Vec<String> = {
            let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.keys().cloned().collect()
        };
        let excess = ids.len() + 1 - self.max_sessions;
        let mut gone = 0;
        for id in ids.iter().filter(|i| !cached.contains(i)) {
            if gone == excess {
                return;
            }
            self.forget(id).await;
            gone += 1;
        }
        while gone < excess {
            let victim = {
                let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
                let v = self.victim(&map);
                if let Some(v) = &v {
                    map.remove(v);
                }
                v
            };
            let Some(v) = victim else { return };
            self.forget(&v).await;
            gone += 1;
        }
    }

    fn count_stored(&self, change: isize) {
        if let Some(n) = self
            .stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            *n = n.saturating_add_signed(change);
        }
    }

    /// After a turn: keeps the stored conversation within `max` messages by deleting its
    /// oldest turns (the kept part starts at a user message, so no tool result loses its
    /// call). The store has no "truncate", so this rewrites the session: delete, create,
    /// append the kept tail — with the number of messages dropped so far (row numbers go on).
    /// Not with a shared store: another worker could write between the delete and the create.
    pub async fn trim_history(&self, id: &str, max: usize) -> Result<(), StoreError> {
        if self.shared {
            return Ok(());
        }
        let Some((base, messages)) = load_rows(&*self.store, id).await? else {
            return Ok(());
        };
        let n = messages.len();
        if n <= max.max(2) {
            return Ok(());
        }
        let from = n - max.max(2);
        let Some(start) = (from..n).find(|i| matches!(messages[*i], Message::User { .. })) else {
            return Ok(());
        };
        let tail = &messages[start..];
        let new_base = (base + start as u64).to_string();
        let owner = self.store.get_state(id, OWNER_KEY).await?;
        let runs = self.store.get_state(id, RUNS_KEY).await?;
        self.store.delete(id).await?;
        self.store.create(id).await?;
        if let Some(r) = runs.as_deref() {
            // the kept answers keep their run summaries
            self.store
                .append_with_state(id, &[], StateChange::new(RUNS_KEY, None, Some(r)))
                .await?;
        }
        if let Some(o) = owner.as_deref() {
            // the conversation stays its owner's
            self.store
                .append_with_state(id, &[], StateChange::new(OWNER_KEY, None, Some(o)))
                .await?;
        }
        self.store
            .append_with_state(id, tail, StateChange::new(BASE_KEY, None, Some(&new_base)))
            .await?;
        Ok(())
    }
}

/// A conversation id the panel accepts: 8 to 64 of `A-Z a-z 0-9 - _`.
pub(crate) fn is_session_id(id: &str) -> bool {
    (8..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests;
