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

use context_engine::{SessionStore, StateChange, StoreError};
use llm_core::{Message, ToolCall};
use messaging::{BusMessage, MessageBus, Subscription};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::user_address;

/// The state slot holding how many messages were trimmed off the conversation's front.
pub(crate) const BASE_KEY: &str = "chat-panel.base";
/// Entry ids per row.
const ROW_SLOTS: u64 = 256;
/// The first id of entries that are not (yet) stored.
pub(crate) const LIVE_IDS: u64 = 1 << 52;
/// The sender id of the panel's own agent on the bus: its messages are shown from the stored
/// `send_message` call, not from the bus.
pub(crate) const AGENT_SENDER: &str = "agent";

/// What kind of entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EntryKind {
    /// What the person wrote (typed or a quick reply).
    User,
    /// The agent's answer text.
    Assistant,
    /// A message delivered on the bus (from `send_message`), maybe with quick replies.
    Message,
    /// A tool call and its result.
    Tool,
    /// A notice (round limit reached).
    Notice,
    /// An error the person should see.
    Error,
}

/// A tool call as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolActivity {
    /// Call id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub arguments: Value,
    /// The result text, once finished.
    pub result: Option<String>,
    /// Whether it failed.
    pub is_error: bool,
}

/// One entry of a conversation, as sent to the page (JSON, camelCase).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Entry {
    /// Id, increasing within the session.
    pub id: u64,
    /// Kind.
    pub kind: EntryKind,
    /// Text (always rendered as text, never as HTML).
    pub text: String,
    /// Sender, for bus messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Quick replies of a bus message, in order (Q10, Q11).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quick_replies: Vec<String>,
    /// Whether the quick replies were answered (their buttons are disabled; Q13, Q15).
    pub answered: bool,
    /// The quick reply clicked, when the answer was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen: Option<String>,
    /// Tool call details, for tool entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolActivity>,
    /// The id of an entry shown while the answer streamed that this stored one replaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<u64>,
}

impl Entry {
    pub(crate) fn new(id: u64, kind: EntryKind, text: impl Into<String>) -> Self {
        Self {
            id,
            kind,
            text: text.into(),
            from: None,
            quick_replies: Vec::new(),
            answered: false,
            chosen: None,
            tool: None,
            replaces: None,
        }
    }
}

/// The events of one stored row: `("entry" | "update", entry)`.
pub(crate) struct Row {
    /// Its number (the SSE event id).
    pub row: u64,
    pub events: Vec<(&'static str, Entry)>,
}

/// Folds stored messages into entries, row by row.
struct Fold {
    me: String,
    entries: Vec<Entry>,
    index: HashMap<u64, usize>,
    calls: HashMap<String, (u64, Value)>,
}

impl Fold {
    fn new(session_id: &str) -> Self {
        Self {
            me: user_address(session_id),
            entries: Vec::new(),
            index: HashMap::new(),
            calls: HashMap::new(),
        }
    }

    fn push(&mut self, e: Entry, out: &mut Vec<(&'static str, Entry)>) {
        self.index.insert(e.id, self.entries.len());
        self.entries.push(e.clone());
        out.push(("entry", e));
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        let i = *self.index.get(&id)?;
        self.entries.get_mut(i)
    }

    fn row(&mut self, row: u64, m: &Message) -> Vec<(&'static str, Entry)> {
        let mut out = Vec::new();
        let id = |k: u64| row * ROW_SLOTS + k;
        match m {
            Message::System { .. } => {}
            Message::User { content } => {
                // A reply answers every quick-reply set still open; it is the choice of the
                // latest one whose options include it.
                let clicked = self
                    .entries
                    .iter()
                    .rev()
                    .find(|e| open_question(e) && e.quick_replies.iter().any(|q| q == content))
                    .map(|e| e.id);
                for e in self.entries.iter_mut().filter(|e| open_question(e)) {
                    e.answered = true;
                    if Some(e.id) == clicked {
                        e.chosen = Some(content.clone());
                    }
                    out.push(("update", e.clone()));
                }
                self.push(
                    Entry::new(id(0), EntryKind::User, content.clone()),
                    &mut out,
                );
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut k = 0;
                for c in tool_calls.iter().take((ROW_SLOTS - 1) as usize) {
                    let mut e = Entry::new(id(k), EntryKind::Tool, c.name.clone());
                    e.tool = Some(ToolActivity {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                        result: None,
                        is_error: false,
                    });
                    self.calls.insert(c.id.clone(), (e.id, c.arguments.clone()));
                    self.push(e, &mut out);
                    k += 1;
                }
                if !content.trim().is_empty() {
                    self.push(
                        Entry::new(id(k), EntryKind::Assistant, content.clone()),
                        &mut out,
                    );
                }
            }
            Message::Tool {
                tool_call_id,
                name,
                content,
            } => {
                let ok = serde_json::from_str::<Value>(content)
                    .map_or(true, |v| v.get("success") != Some(&Value::Bool(false)));
                let Some((eid, args)) = self.calls.get(tool_call_id).cloned() else {
                    return out;
                };
                if let Some(e) = self.get_mut(eid) {
                    if let Some(t) = e.tool.as_mut() {
                        t.result = Some(content.clone());
                        t.is_error = !ok;
                    }
                    let e = e.clone();
                    out.push(("update", e));
                }
                let to_me = matches!(
                    args.get("recipient").and_then(Value::as_str),
                    Some(r) if r == crate::USER_RECIPIENT || r == self.me
                );
                if name == "send_message" && ok && to_me {
                    let mut e = Entry::new(
                        id(0),
                        EntryKind::Message,
                        args.get("text").and_then(Value::as_str).unwrap_or_default(),
                    );
                    e.from = Some(
                        args.get("from")
                            .and_then(Value::as_str)
                            .unwrap_or(AGENT_SENDER)
                            .to_owned(),
                    );
                    e.quick_replies = args
                        .get("quickReplies")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    self.push(e, &mut out);
                }
            }
        }
        out
    }
}

fn open_question(e: &Entry) -> bool {
    e.kind == EntryKind::Message && !e.quick_replies.is_empty() && !e.answered
}

/// The rows of a stored conversation whose first message is row `base + 1`, each with the
/// entries it makes and changes (rows that show nothing are left out).
pub(crate) fn rows_from_history(session_id: &str, base: u64, messages: &[Message]) -> Vec<Row> {
    let mut fold = Fold::new(session_id);
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let row = base + i as u64 + 1;
        let events = fold.row(row, m);
        if !events.is_empty() {
            out.push(Row { row, events });
        }
    }
    out
}

/// What the page shows for a stored conversation (after a reload, or on another worker): user
/// and assistant texts, tool calls with their results, and the messages `send_message`
/// delivered to the person with their quick replies. A set of quick replies counts as answered
/// once a user message follows it; the choice is recorded when that message is one of its
/// options.
pub(crate) fn entries_from_history(
    session_id: &str,
    base: u64,
    messages: &[Message],
) -> Vec<Entry> {
    let mut fold = Fold::new(session_id);
    for (i, m) in messages.iter().enumerate() {
        fold.row(base + i as u64 + 1, m);
    }
    fold.entries
}

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
fn foreign_message_round(m: &BusMessage) -> Vec<Message> {
    let call_id = format!("bus-{}", m.msg_id);
    let mut args = json!({"recipient": crate::USER_RECIPIENT, "text": m.text, "from": m.from});
    if !m.quick_replies.is_empty() {
        args["quickReplies"] = json!(m.quick_replies);
    }
    vec![
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: call_id.clone(),
                name: "send_message".into(),
                arguments: args,
            }],
        },
        Message::Tool {
            tool_call_id: call_id,
            name: "send_message".into(),
            content: json!({"success": true, "deliveredFrom": m.from}).to_string(),
        },
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
    /// The group subscription's task (started with the first conversation opened here).
    inbox: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
            inbox: Mutex::new(None),
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

    /// Starts taking the persons' bus messages (once; needs a Tokio runtime). A family name the
    /// bus refuses cannot happen (`user` is valid); a broker that cannot be reached is retried
    /// by the subscription itself.
    pub fn start_inbox(&self) {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        if inbox.is_some() {
            return;
        }
        match self.bus.subscribe_group(PERSONS) {
            Ok(sub) => {
                *inbox = Some(tokio::spawn(inbox_task(
                    sub,
                    self.store.clone(),
                    self.bus_memory,
                )));
            }
            Err(e) => {
                tracing::error!(error = %e, "chat panel: could not subscribe to the persons' messages")
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

    /// Opens the conversation, creating it in the store when new.
    pub async fn find_or_create(&self, id: &str) -> Result<(), StoreError> {
        if self.find(id).await? {
            return Ok(());
        }
        self.make_room().await;
        match self.store.create(id).await {
            Ok(()) => self.count_stored(1),
            Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
        self.open(id).await;
        Ok(())
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
        self.store.delete(id).await?;
        self.store.create(id).await?;
        self.store
            .append_with_state(id, tail, StateChange::new(BASE_KEY, None, Some(&new_base)))
            .await?;
        Ok(())
    }
}

/// The state slot of a conversation that remembers the bus messages stored into it, so that a
/// message the broker hands out again (to this worker or another) is stored once: a JSON array
/// of `[msg_id, stored at (ms since the Unix epoch)]`, oldest first, bounded by [`BusMemory`].
/// One slot per conversation — the previous version kept a slot per message
/// (`chat-panel.bus.MSGID`) and never deleted it.
pub(crate) const BUS_SEEN_KEY: &str = "chat-panel.bus";

/// How long and how many of the bus messages stored into a conversation are remembered to
/// store a repeat once ([`PanelConfig::bus_memory_max_age`](crate::PanelConfig::bus_memory_max_age),
/// [`bus_memory_max_ids`](crate::PanelConfig::bus_memory_max_ids)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BusMemory {
    pub max_age: std::time::Duration,
    pub max_ids: usize,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The slot's value with `msg_id` added at `now` and what is too old or too many left out;
/// `None` when `msg_id` is remembered already (a repeat).
fn remember(value: Option<&str>, msg_id: &str, now: u64, memory: BusMemory) -> Option<String> {
    let mut seen: Vec<(String, u64)> = match value.map(serde_json::from_str) {
        None => Vec::new(),
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "chat panel: the conversation's memory of bus messages does not parse; starting it again");
            Vec::new()
        }
    };
    if seen.iter().any(|(id, _)| id == msg_id) {
        return None;
    }
    let max_age = u64::try_from(memory.max_age.as_millis()).unwrap_or(u64::MAX);
    seen.retain(|(_, at)| now.saturating_sub(*at) < max_age);
    seen.push((msg_id.to_owned(), now));
    let extra = seen.len().saturating_sub(memory.max_ids.max(1));
    seen.drain(..extra);
    Some(serde_json::to_string(&seen).unwrap_or_else(|_| "[]".into()))
}

/// Stores what arrives for the persons (`user:ID`) from senders other than the panel's own
/// agent (whose messages are stored as its `send_message` calls) into the conversation `ID`,
/// creating it when it is new; the store's change feed wakes the streams of every worker.
/// A store that cannot be reached is retried (backoff to 5 s) until the message is stored: the
/// group's next message waits meanwhile, so the order holds and nothing taken is dropped.
/// A message is confirmed to the bus only once it is stored (or deliberately dropped, with a
/// log line): a worker that dies before that leaves it to the broker, which hands it to another
/// worker (after `ack_wait`), and the conversation's memory of message ids ([`BUS_SEEN_KEY`])
/// stores it once however often it comes.
async fn inbox_task(mut inbox: Subscription, store: Arc<dyn SessionStore>, memory: BusMemory) {
    while let Some(received) = inbox.recv_unconfirmed().await {
        let m = received.message();
        if m.from != AGENT_SENDER {
            store_person_message(&*store, m, memory).await;
        }
        let msg_id = m.msg_id.clone();
        if let Err(e) = received.confirm().await {
            // stored: a repeat the broker may hand out is recognised by its id
            tracing::warn!(%msg_id, error = %e, "chat panel: a stored bus message was not confirmed to the broker; a repeat will be dropped");
        }
    }
}

/// Stores `m` in conversation ID (created if new) once, retrying while the database is away.
/// Returns once it is stored, was stored before, or cannot be (logged: not a conversation id, or
/// refused by the store for good).
async fn store_person_message(store: &dyn SessionStore, m: &BusMessage, memory: BusMemory) {
    let id =
        m.to.strip_prefix(PERSONS)
            .and_then(|r| r.strip_prefix(':'))
            .unwrap_or_default();
    if !is_session_id(id) {
        tracing::warn!(to = %m.to, msg_id = %m.msg_id, from = %m.from,
            "chat panel: a message for a person whose address is not a conversation id was dropped (8 to 64 of A-Z a-z 0-9 - _)");
        return;
    }
    // Stored once whichever worker (or how often) the broker hands it to: the conversation's
    // memory of message ids, changed in the same compare-and-set as the round.
    let round = foreign_message_round(m);
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        let attempt = match store.get_state(id, BUS_SEEN_KEY).await {
            Ok(before) => match remember(before.as_deref(), &m.msg_id, now_ms(), memory) {
                None => {
                    tracing::debug!(session = %id, msg_id = %m.msg_id, "chat panel: a bus message stored already was dropped");
                    return;
                }
                Some(after) => {
                    let change = StateChange::new(BUS_SEEN_KEY, before.as_deref(), Some(&after));
                    store.append_with_state(id, &round, change).await
                }
            },
            Err(e) => Err(e),
        };
        match attempt {
            Ok(Some(_)) => return,
            // another worker changed the memory meanwhile: read it again
            Ok(None) => continue,
            Err(StoreError::NotFound { .. }) => match store.create(id).await {
                Ok(()) | Err(StoreError::AlreadyExists { .. }) => continue,
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "chat panel: could not start a conversation for a message; retrying");
                }
            },
            Err(e @ (StoreError::Unreachable { .. } | StoreError::Database { .. })) => {
                tracing::warn!(session = %id, from = %m.from, error = %e, retry_in_ms = wait.as_millis() as u64,
                    "chat panel: could not store a message for the person; retrying");
            }
            Err(e) => {
                tracing::error!(session = %id, from = %m.from, msg_id = %m.msg_id, error = %e,
                    "chat panel: a message for the person could not be stored and was dropped");
                return;
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(std::time::Duration::from_secs(5));
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
mod tests {
    use super::*;
    use messaging::{OutgoingMessage, QuickReplies};

    fn ask(call: &str, text: &str, replies: &[&str]) -> [Message; 2] {
        [
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: call.into(),
                    name: "send_message".into(),
                    arguments: json!({"recipient": "user", "text": text, "quickReplies": replies}),
                }],
            },
            Message::Tool {
                tool_call_id: call.into(),
                name: "send_message".into(),
                content: r#"{"success":true}"#.into(),
            },
        ]
    }

    async fn wait_rows(store: &dyn SessionStore, id: &str, n: usize) -> Vec<Message> {
        for _ in 0..200 {
            let m = store.load(id).await.unwrap().messages;
            if m.len() >= n {
                return m;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("{id} never reached {n} stored messages");
    }

    #[tokio::test]
    async fn i42_6_bus_rows_are_kept_for_their_retention_then_go() {
        let store = context_engine::MemoryStore::new();
        let memory = BusMemory {
            max_age: std::time::Duration::from_millis(800),
            max_ids: 2,
        };
        let msg = |id: &str| {
            let m = OutgoingMessage::new("ops-bot", "user:conv-0001", id).with_msg_id(id);
            BusMessage::from_payload(&json!({
                "id": 1, "msgId": m.msg_id, "from": m.from, "to": m.to, "text": m.text
            }))
            .unwrap()
        };
        let remembered = || async {
            let v = store.get_state("conv-0001", BUS_SEEN_KEY).await.unwrap();
            let seen: Vec<(String, u64)> = serde_json::from_str(&v.unwrap()).unwrap();
            seen.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
        };
        let count = || async { store.load("conv-0001").await.unwrap().messages.len() };

        store_person_message(&store, &msg("m-1"), memory).await;
        assert_eq!(
            (count().await, remembered().await),
            (2, vec!["m-1".to_owned()])
        );
        // a repeat within the retention is stored once
        store_person_message(&store, &msg("m-1"), memory).await;
        assert_eq!(count().await, 2);
        // past the retention the next message stored takes the old id away
        tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
        store_person_message(&store, &msg("m-2"), memory).await;
        assert_eq!(
            (count().await, remembered().await),
            (4, vec!["m-2".to_owned()])
        );
        // and beyond max_ids the oldest go
        store_person_message(&store, &msg("m-3"), memory).await;
        store_person_message(&store, &msg("m-4"), memory).await;
        assert_eq!(remembered().await, ["m-3", "m-4"]);
        assert_eq!(count().await, 8);
        // one slot per conversation, none per message (the previous version's)
        assert_eq!(
            store
                .get_state("conv-0001", "chat-panel.bus.m-4")
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn q10_a_bus_message_from_another_sender_is_stored_and_shown_with_its_quick_replies() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        let sessions = Sessions::new(bus.clone(), store.clone(), false, 10);
        sessions.find_or_create("sid-0001").await.unwrap();
        let q = QuickReplies::new(vec!["A".into(), "B".into()]).unwrap();
        bus.send(
            OutgoingMessage::new("ops-bot", user_address("sid-0001"), "pick").with_quick_replies(q),
        )
        .await
        .unwrap();
        // the panel's own agent's messages are shown from its stored call, not stored again
        bus.send(OutgoingMessage::new(
            AGENT_SENDER,
            user_address("sid-0001"),
            "own",
        ))
        .await
        .unwrap();
        let msgs = wait_rows(&*store, "sid-0001", 2).await;
        let entries = entries_from_history("sid-0001", 0, &msgs);
        let shown: Vec<_> = entries
            .iter()
            .filter(|e| e.kind == EntryKind::Message)
            .collect();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].quick_replies, ["A", "B"]);
        assert_eq!(shown[0].from.as_deref(), Some("ops-bot"));
        assert!(!shown[0].answered);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(store.load("sid-0001").await.unwrap().messages.len(), 2);
    }

    #[test]
    fn q13_q15_a_reply_answers_open_sets_and_records_a_choice_only_when_it_is_an_option() {
        let mut msgs: Vec<Message> = ask("c1", "pick", &["A", "B"]).into();
        msgs.push(Message::user("B"));
        msgs.extend(ask("c2", "again", &["A"]));
        msgs.push(Message::user("something else"));
        let e = entries_from_history("s", 0, &msgs);
        let asked: Vec<&Entry> = e.iter().filter(|e| e.kind == EntryKind::Message).collect();
        assert!(asked[0].answered && asked[0].chosen.as_deref() == Some("B"));
        assert!(asked[1].answered && asked[1].chosen.is_none());
        // the update of the answered set is in the user's row
        let rows = rows_from_history("s", 0, &msgs);
        let user_row = rows.iter().find(|r| r.row == 3).unwrap();
        assert_eq!(user_row.events[0].0, "update");
        assert_eq!(user_row.events[1].1.kind, EntryKind::User);
    }

    #[test]
    fn workers_entry_ids_and_rows_come_from_stored_positions() {
        let mut msgs = vec![Message::user("hi")];
        msgs.extend(ask("c1", "pick", &["A"]));
        msgs.push(Message::assistant("done"));
        let rows = rows_from_history("s", 10, &msgs);
        let numbers: Vec<u64> = rows.iter().map(|r| r.row).collect();
        assert_eq!(numbers, [11, 12, 13, 14]);
        assert_eq!(rows[0].events[0].1.id, 11 * ROW_SLOTS);
        assert_eq!(rows[1].events[0].1.kind, EntryKind::Tool);
        // the tool result row updates the call's entry and shows the message
        assert_eq!(rows[2].events[0].0, "update");
        assert_eq!(rows[2].events[0].1.id, 12 * ROW_SLOTS);
        assert_eq!(rows[2].events[1].1.id, 13 * ROW_SLOTS);
        // the same rows on another worker give the same entries
        assert_eq!(
            entries_from_history("s", 10, &msgs),
            entries_from_history("s", 10, &msgs.clone())
        );
        assert!(live_id() >= LIVE_IDS);
    }

    #[tokio::test]
    async fn sessions_are_capped_evicted_history_is_freed_and_get_never_creates() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        let sessions = Sessions::new(bus.clone(), store.clone(), false, 2);
        assert!(!sessions.find("aaaaaaaa").await.unwrap());
        assert!(
            store.list().await.unwrap().is_empty(),
            "a lookup created nothing"
        );
        sessions.find_or_create("aaaaaaaa").await.unwrap();
        assert!(bus.is_subscribed("user:aaaaaaaa"));
        store
            .append("aaaaaaaa", &[Message::user("hello")])
            .await
            .unwrap();
        sessions.find_or_create("bbbbbbbb").await.unwrap();
        sessions.find_or_create("cccccccc").await.unwrap();
        {
            let map = sessions.map.lock().unwrap();
            assert_eq!(map.len(), 2);
            assert!(
                !map.contains_key("aaaaaaaa"),
                "least recently used went first"
            );
        }
        assert_eq!(
            store.list().await.unwrap(),
            ["bbbbbbbb", "cccccccc"],
            "its history was deleted from the store"
        );
    }

    #[tokio::test]
    async fn workers_a_shared_store_is_never_trimmed_or_evicted_from() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        let sessions = Sessions::new(bus, store.clone(), true, 1);
        sessions.find_or_create("aaaaaaaa").await.unwrap();
        sessions.find_or_create("bbbbbbbb").await.unwrap();
        assert_eq!(store.list().await.unwrap(), ["aaaaaaaa", "bbbbbbbb"]);
        for i in 0..10 {
            store
                .append(
                    "bbbbbbbb",
                    &[Message::user(format!("q{i}")), Message::assistant("a")],
                )
                .await
                .unwrap();
        }
        sessions.trim_history("bbbbbbbb", 4).await.unwrap();
        assert_eq!(store.load("bbbbbbbb").await.unwrap().messages.len(), 20);
    }

    #[tokio::test]
    async fn c4_a_conversation_is_rebuilt_from_the_store() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        store.create("restored1").await.unwrap();
        let mut round = vec![Message::user("hello")];
        round.extend(ask("c1", "pick", &["A", "B"]));
        round.extend([
            Message::assistant("I asked you above."),
            Message::user("B"),
            Message::assistant("You chose B."),
        ]);
        store.append("restored1", &round).await.unwrap();
        let sessions = Sessions::new(bus, store.clone(), false, 10);
        assert!(sessions.find("restored1").await.unwrap());
        let (base, msgs) = load_rows(&*store, "restored1").await.unwrap().unwrap();
        let entries = entries_from_history("restored1", base, &msgs);
        let kinds: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EntryKind::User,
                EntryKind::Tool,
                EntryKind::Message,
                EntryKind::Assistant,
                EntryKind::User,
                EntryKind::Assistant
            ]
        );
        let m = &entries[2];
        assert_eq!(m.quick_replies, ["A", "B"]);
        assert!(m.answered);
        assert_eq!(m.chosen.as_deref(), Some("B"));
        assert_eq!(
            entries[1].tool.as_ref().unwrap().result.as_deref(),
            Some(r#"{"success":true}"#)
        );
    }

    #[tokio::test]
    async fn finding3_stored_history_is_trimmed_to_whole_turns_and_row_numbers_go_on() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        let sessions = Sessions::new(bus, store.clone(), false, 10);
        sessions.find_or_create("long-one").await.unwrap();
        for i in 0..50 {
            store
                .append(
                    "long-one",
                    &[
                        Message::user(format!("q{i}")),
                        Message::assistant(format!("a{i}")),
                    ],
                )
                .await
                .unwrap();
        }
        sessions.trim_history("long-one", 9).await.unwrap();
        let (base, left) = load_rows(&*store, "long-one").await.unwrap().unwrap();
        assert_eq!(left.len(), 8, "whole turns, starting at a user message");
        assert_eq!(left[0], Message::user("q46"));
        assert_eq!(left[7], Message::assistant("a49"));
        assert_eq!(base, 92, "the 93rd message keeps its row number");
        assert_eq!(rows_from_history("long-one", base, &left)[0].row, 93);
    }
}
