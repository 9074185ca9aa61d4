//! Server-side conversation state, per session: what the page shows and reloads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

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
    inbox: Subscription,
    pub busy: bool,
    pub last_used: Instant,
    max_entries: usize,
}

impl Session {
    fn new(inbox: Subscription, max_entries: usize) -> Self {
        Self {
            entries: Vec::new(),
            next_id: 1,
            inbox,
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
        while let Some(m) = self.inbox.try_recv() {
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

/// All sessions, at most `max_sessions`; the least recently used idle one goes first.
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, SessionRef>>,
    bus: MessageBus,
    max_sessions: usize,
    max_entries: usize,
}

impl Sessions {
    pub fn new(bus: MessageBus, max_sessions: usize, max_entries: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            bus,
            max_sessions: max_sessions.max(1),
            max_entries: max_entries.max(10),
        }
    }

    /// The session, created (and subscribed to the bus as `user:ID`) when new.
    pub fn get_or_create(&self, id: &str) -> SessionRef {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = map.get(id) {
            lock(s).last_used = Instant::now();
            return s.clone();
        }
        if map.len() >= self.max_sessions {
            let victim = map
                .iter()
                .filter(|(_, s)| !lock(s).busy)
                .min_by_key(|(_, s)| lock(s).last_used)
                .map(|(k, _)| k.clone());
            if let Some(k) = victim {
                tracing::info!(session = %k, "session limit reached: dropping the least recently used session");
                map.remove(&k);
            }
        }
        let s = Arc::new(Mutex::new(Session::new(
            self.bus.subscribe(user_address(id)),
            self.max_entries,
        )));
        map.insert(id.to_owned(), s.clone());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use messaging::{OutgoingMessage, QuickReplies};

    fn session_with_question(bus: &MessageBus, sid: &str) -> Session {
        let s = Session::new(bus.subscribe(user_address(sid)), 100);
        let q = QuickReplies::new(vec!["A".into(), "B".into()]).unwrap();
        bus.send(OutgoingMessage::new("agent", user_address(sid), "pick").with_quick_replies(q))
            .unwrap();
        s
    }

    #[test]
    fn q10_bus_message_becomes_an_entry_with_its_quick_replies_in_order() {
        let bus = MessageBus::new();
        let mut s = session_with_question(&bus, "sid-0001");
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

    #[test]
    fn q13_click_answers_the_message_and_records_the_choice() {
        let bus = MessageBus::new();
        let mut s = session_with_question(&bus, "sid-0002");
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

    #[test]
    fn q15_typed_reply_answers_open_sets_without_a_choice() {
        let bus = MessageBus::new();
        let mut s = session_with_question(&bus, "sid-0003");
        s.drain_inbox();
        let changed = s.answer_open("something else", None);
        assert_eq!(changed.len(), 1);
        assert!(changed[0].answered && changed[0].chosen.is_none());
        // text equal to an option but not a click of that message: no choice recorded
        let q = QuickReplies::new(vec!["A".into()]).unwrap();
        bus.send(
            OutgoingMessage::new("agent", user_address("sid-0003"), "again").with_quick_replies(q),
        )
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

    #[test]
    fn sessions_are_capped_and_subscribed_as_user_session() {
        let bus = MessageBus::new();
        let sessions = Sessions::new(bus.clone(), 2, 100);
        let _a = sessions.get_or_create("aaaaaaaa");
        assert!(bus.is_subscribed("user:aaaaaaaa"));
        let _b = sessions.get_or_create("bbbbbbbb");
        let _c = sessions.get_or_create("cccccccc");
        let map = sessions.map.lock().unwrap();
        assert_eq!(map.len(), 2);
        assert!(
            !map.contains_key("aaaaaaaa"),
            "least recently used went first"
        );
    }
}
