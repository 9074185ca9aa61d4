//! Server-side conversation state, per session: what the page shows and reloads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use context_engine::{SessionStore, StoreError};
use llm_core::Message;
use messaging::{BusMessage, MessageBus, Subscription};
use serde::Serialize;
use serde_json::Value;

use crate::user_address;

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
        }
    }
}

/// One session: its entries, its bus inbox and whether a turn runs.
pub(crate) struct Session {
    pub entries: Vec<Entry>,
    next_id: u64,
    inbox: Option<Subscription>,
    pub busy: bool,
    pub last_used: Instant,
    max_entries: usize,
}

impl Session {
    fn new(inbox: Subscription, max_entries: usize) -> Self {
        Self {
            entries: Vec::new(),
            next_id: 1,
            inbox: Some(inbox),
            busy: false,
            last_used: Instant::now(),
            max_entries,
        }
    }

    /// A session with no bus inbox (for rebuilding entries).
    fn detached(max_entries: usize) -> Self {
        Self {
            entries: Vec::new(),
            next_id: 1,
            inbox: None,
            busy: false,
            last_used: Instant::now(),
            max_entries,
        }
    }

    /// Appends an entry; the oldest entries go once the session holds `max_entries`.
    pub fn push(&mut self, mut e: Entry) -> Entry {
        e.id = self.next_id;
        self.next_id += 1;
        self.entries.push(e.clone());
        let excess = self.entries.len().saturating_sub(self.max_entries);
        self.entries.drain(..excess);
        e
    }

    pub fn next_entry(&mut self, kind: EntryKind, text: impl Into<String>) -> Entry {
        self.push(Entry::new(0, kind, text))
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        self.entries.iter_mut().rev().find(|e| e.id == id)
    }

    /// Moves every waiting bus message into the conversation; returns the new entries.
    pub fn drain_inbox(&mut self) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Some(m) = self.inbox.as_mut().and_then(Subscription::try_recv) {
            out.push(self.push(message_entry(m)));
        }
        out
    }

    /// A reply answers every quick-reply set still open; `in_reply_to` names the one a click
    /// answered, which records the choice. Returns the changed entries.
    pub fn answer_open(&mut self, text: &str, in_reply_to: Option<u64>) -> Vec<Entry> {
        let mut changed = Vec::new();
        for e in &mut self.entries {
            if e.kind == EntryKind::Message && !e.quick_replies.is_empty() && !e.answered {
                e.answered = true;
                if Some(e.id) == in_reply_to && e.quick_replies.iter().any(|q| q == text) {
                    e.chosen = Some(text.to_owned());
                }
                changed.push(e.clone());
            }
        }
        changed
    }
}

fn message_entry(m: BusMessage) -> Entry {
    let mut e = Entry::new(0, EntryKind::Message, m.text);
    e.from = Some(m.from);
    e.quick_replies = m.quick_replies;
    e
}

pub(crate) type SessionRef = Arc<Mutex<Session>>;

pub(crate) fn lock(s: &SessionRef) -> MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Rebuilds what the page shows from a stored conversation (after a restart, or when the
/// session had left the panel's memory): user and assistant texts, tool calls with their
/// results, and the messages `send_message` delivered to the person with their quick replies.
/// A set of quick replies counts as answered once a user message follows it; the choice is
/// recorded when that message is one of its options.
pub(crate) fn entries_from_history(session_id: &str, messages: &[Message]) -> Vec<Entry> {
    let me = user_address(session_id);
    let mut out = Session::detached(usize::MAX);
    let mut calls: HashMap<String, (u64, Value)> = HashMap::new();
    for m in messages {
        match m {
            Message::System { .. } => {}
            Message::User { content } => {
                let open: Vec<(u64, bool)> = out
                    .entries
                    .iter()
                    .filter(|e| e.kind == EntryKind::Message && !e.answered)
                    .map(|e| (e.id, e.quick_replies.iter().any(|q| q == content)))
                    .collect();
                let clicked = open.iter().rev().find(|(_, hit)| *hit).map(|(id, _)| *id);
                out.answer_open(content, clicked);
                out.next_entry(EntryKind::User, content.clone());
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                for c in tool_calls {
                    let mut e = Entry::new(0, EntryKind::Tool, c.name.clone());
                    e.tool = Some(ToolActivity {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                        result: None,
                        is_error: false,
                    });
                    let e = out.push(e);
                    calls.insert(c.id.clone(), (e.id, c.arguments.clone()));
                }
                if !content.trim().is_empty() {
                    out.next_entry(EntryKind::Assistant, content.clone());
                }
            }
            Message::Tool {
                tool_call_id,
                name,
                content,
            } => {
                let ok = serde_json::from_str::<Value>(content)
                    .map_or(true, |v| v.get("success") != Some(&Value::Bool(false)));
                let Some((id, args)) = calls.get(tool_call_id).cloned() else {
                    continue;
                };
                if let Some(t) = out.get_mut(id).and_then(|e| e.tool.as_mut()) {
                    t.result = Some(content.clone());
                    t.is_error = !ok;
                }
                let to_me = matches!(
                    args.get("recipient").and_then(Value::as_str),
                    Some(r) if r == crate::USER_RECIPIENT || r == me
                );
                if name == "send_message" && ok && to_me {
                    let mut e = Entry::new(
                        0,
                        EntryKind::Message,
                        args.get("text").and_then(Value::as_str).unwrap_or_default(),
                    );
                    e.from = Some("agent".to_owned());
                    e.quick_replies = args
                        .get("quickReplies")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    out.push(e);
                }
            }
        }
    }
    out.entries
}

/// A conversation held in memory.
struct Slot {
    session: SessionRef,
}

/// The conversations the panel holds in memory, at most `max_sessions`, over the backend's
/// store, which holds the same conversations' messages. A session missing here (a restart, an
/// eviction) is rebuilt from the store; one the panel evicts is deleted from the store too.
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Slot>>,
    bus: MessageBus,
    store: Arc<dyn SessionStore>,
    max_sessions: usize,
    max_entries: usize,
}

impl Sessions {
    pub fn new(
        bus: MessageBus,
        store: Arc<dyn SessionStore>,
        max_sessions: usize,
        max_entries: usize,
    ) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            bus,
            store,
            max_sessions: max_sessions.max(1),
            max_entries: max_entries.max(10),
        }
    }

    fn cached(&self, id: &str) -> Option<SessionRef> {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let s = map.get(id)?.session.clone();
        lock(&s).last_used = Instant::now();
        Some(s)
    }

    /// The session if the panel or its store knows it; never creates one (a `GET` must not).
    pub async fn find(&self, id: &str) -> Result<Option<SessionRef>, StoreError> {
        if let Some(s) = self.cached(id) {
            return Ok(Some(s));
        }
        match self.store.load(id).await {
            Ok(stored) => Ok(Some(self.insert(id, &stored.messages).await)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The session, created (in the store, and subscribed to the bus as `user:ID`) when new.
    pub async fn find_or_create(&self, id: &str) -> Result<SessionRef, StoreError> {
        if let Some(s) = self.find(id).await? {
            return Ok(s);
        }
        self.make_room().await;
        match self.store.create(id).await {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(self.insert(id, &[]).await)
    }

    async fn insert(&self, id: &str, messages: &[Message]) -> SessionRef {
        let mut session = Session::new(self.bus.subscribe(user_address(id)), self.max_entries);
        for e in entries_from_history(id, messages) {
            session.push(e);
        }
        let evicted = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(s) = map.get(id) {
                // another request rebuilt it meanwhile
                return s.session.clone();
            }
            let victim = if map.len() >= self.max_sessions {
                self.victim(&map)
            } else {
                None
            };
            if let Some(v) = &victim {
                map.remove(v);
            }
            let s = Arc::new(Mutex::new(session));
            map.insert(id.to_owned(), Slot { session: s.clone() });
            (victim, s)
        };
        let (victim, s) = evicted;
        if let Some(v) = victim {
            self.forget(&v).await;
        }
        s
    }

    fn victim(&self, map: &HashMap<String, Slot>) -> Option<String> {
        map.iter()
            .filter(|(_, s)| !lock(&s.session).busy)
            .min_by_key(|(_, s)| lock(&s.session).last_used)
            .map(|(k, _)| k.clone())
    }

    /// Deletes a conversation the panel evicted, so its history is freed.
    async fn forget(&self, id: &str) {
        tracing::info!(session = %id, "session limit reached: deleting the least recently used conversation");
        match self.store.delete(id).await {
            Ok(()) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "could not delete an evicted conversation")
            }
        }
    }

    /// Before a new conversation: keeps the store within `max_sessions` too (it may hold
    /// conversations from before a restart that are not in memory).
    async fn make_room(&self) {
        let Ok(ids) = self.store.list().await else {
            return;
        };
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

    /// After a turn: keeps the stored conversation within `max` messages by deleting its
    /// oldest turns (the kept part starts at a user message, so no tool result loses its
    /// call). The store has no "truncate", so this rewrites the session: delete, create,
    /// append the kept tail.
    pub async fn trim_history(&self, id: &str, max: usize) -> Result<(), StoreError> {
        let stored = self.store.load(id).await?;
        let n = stored.messages.len();
        if n <= max.max(2) {
            return Ok(());
        }
        let from = n - max.max(2);
        let Some(start) = (from..n).find(|i| matches!(stored.messages[*i], Message::User { .. }))
        else {
            return Ok(());
        };
        let tail = &stored.messages[start..];
        self.store.delete(id).await?;
        self.store.create(id).await?;
        self.store.append(id, tail).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use messaging::{OutgoingMessage, QuickReplies};

    async fn session_with_question(bus: &MessageBus, sid: &str) -> Session {
        let s = Session::new(bus.subscribe(user_address(sid)), 100);
        let q = QuickReplies::new(vec!["A".into(), "B".into()]).unwrap();
        bus.send(OutgoingMessage::new("agent", user_address(sid), "pick").with_quick_replies(q))
            .await
            .unwrap();
        s
    }

    #[tokio::test]
    async fn q10_bus_message_becomes_an_entry_with_its_quick_replies_in_order() {
        let bus = MessageBus::new();
        let mut s = session_with_question(&bus, "sid-0001").await;
        let new = s.drain_inbox();
        assert_eq!(new.len(), 1);
        assert_eq!(
            (new[0].kind, new[0].quick_replies.clone()),
            (EntryKind::Message, vec!["A".to_owned(), "B".to_owned()])
        );
        assert_eq!(new[0].from.as_deref(), Some("agent"));
        assert!(!new[0].answered);
        assert!(s.drain_inbox().is_empty());
    }

    #[tokio::test]
    async fn q13_click_answers_the_message_and_records_the_choice() {
        let bus = MessageBus::new();
        let mut s = session_with_question(&bus, "sid-0002").await;
        let id = s.drain_inbox()[0].id;
        let changed = s.answer_open("B", Some(id));
        assert_eq!(changed.len(), 1);
        assert!(changed[0].answered);
        assert_eq!(changed[0].chosen.as_deref(), Some("B"));
        assert!(
            s.answer_open("A", Some(id)).is_empty(),
            "answered once only"
        );
    }

    #[tokio::test]
    async fn q15_typed_reply_answers_open_sets_without_a_choice() {
        let bus = MessageBus::new();
        let mut s = session_with_question(&bus, "sid-0003").await;
        s.drain_inbox();
        let changed = s.answer_open("something else", None);
        assert_eq!(changed.len(), 1);
        assert!(changed[0].answered && changed[0].chosen.is_none());
        // text equal to an option but not a click of that message: no choice recorded
        let q = QuickReplies::new(vec!["A".into()]).unwrap();
        bus.send(
            OutgoingMessage::new("agent", user_address("sid-0003"), "again").with_quick_replies(q),
        )
        .await
        .unwrap();
        s.drain_inbox();
        assert!(s.answer_open("A", None)[0].chosen.is_none());
    }

    #[test]
    fn entries_are_capped_oldest_first() {
        let bus = MessageBus::new();
        let mut s = Session::new(bus.subscribe("x"), 10);
        for i in 0..25 {
            s.next_entry(EntryKind::User, i.to_string());
        }
        assert_eq!(s.entries.len(), 10);
        assert_eq!(s.entries[0].text, "15");
        assert_eq!(s.entries[9].id, 25);
    }

    #[tokio::test]
    async fn sessions_are_capped_evicted_history_is_freed_and_get_never_creates() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        let sessions = Sessions::new(bus.clone(), store.clone(), 2, 100);
        assert!(sessions.find("aaaaaaaa").await.unwrap().is_none());
        assert!(
            store.list().await.unwrap().is_empty(),
            "a lookup created nothing"
        );
        let _a = sessions.find_or_create("aaaaaaaa").await.unwrap();
        assert!(bus.is_subscribed("user:aaaaaaaa"));
        store
            .append("aaaaaaaa", &[Message::user("hello")])
            .await
            .unwrap();
        let _b = sessions.find_or_create("bbbbbbbb").await.unwrap();
        let _c = sessions.find_or_create("cccccccc").await.unwrap();
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
    async fn c4_a_conversation_is_rebuilt_from_the_store() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        store.create("restored1").await.unwrap();
        let call = llm_core::ToolCall {
            id: "c1".into(),
            name: "send_message".into(),
            arguments: serde_json::json!({"recipient": "user", "text": "pick", "quickReplies": ["A", "B"]}),
        };
        store
            .append(
                "restored1",
                &[
                    Message::user("hello"),
                    Message::Assistant {
                        content: String::new(),
                        tool_calls: vec![call],
                    },
                    Message::Tool {
                        tool_call_id: "c1".into(),
                        name: "send_message".into(),
                        content: r#"{"success":true}"#.into(),
                    },
                    Message::assistant("I asked you above."),
                    Message::user("B"),
                    Message::assistant("You chose B."),
                ],
            )
            .await
            .unwrap();
        let sessions = Sessions::new(bus, store, 10, 100);
        let s = sessions.find("restored1").await.unwrap().unwrap();
        let s = lock(&s);
        let kinds: Vec<EntryKind> = s.entries.iter().map(|e| e.kind).collect();
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
        let m = &s.entries[2];
        assert_eq!(m.quick_replies, ["A", "B"]);
        assert!(m.answered);
        assert_eq!(m.chosen.as_deref(), Some("B"));
        assert_eq!(
            s.entries[1].tool.as_ref().unwrap().result.as_deref(),
            Some(r#"{"success":true}"#)
        );
    }

    #[tokio::test]
    async fn finding3_stored_history_is_trimmed_to_whole_turns() {
        let bus = MessageBus::new();
        let store: Arc<dyn SessionStore> = Arc::new(context_engine::MemoryStore::new());
        let sessions = Sessions::new(bus, store.clone(), 10, 100);
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
        let left = store.load("long-one").await.unwrap().messages;
        assert_eq!(left.len(), 8, "whole turns, starting at a user message");
        assert_eq!(left[0], Message::user("q46"));
        assert_eq!(left[7], Message::assistant("a49"));
    }
}
