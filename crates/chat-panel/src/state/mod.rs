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

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Notify;
use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_core::{Media, MediaSource, Message, Part, ToolCall};
use toolwright_messaging::{BusMessage, MessageBus};

use crate::user_address;

mod inbox;

pub(crate) use inbox::BusMemory;
use inbox::inbox_task;
#[cfg(test)]
use inbox::{BUS_SEEN_KEY, store_person_message};
pub(crate) use inbox::{INBOX_PREFIX, inbox_id};

/// The state slot holding how many messages were trimmed off the conversation's front.
pub(crate) const BASE_KEY: &str = "chat-panel.base";
/// The state slot holding the run summaries of the conversation's answers ([`RunSummary`] with
/// the row each ended at, JSON, the latest [`MAX_RUNS`]).
pub(crate) const RUNS_KEY: &str = "chat-panel.runs";
/// How many answers' run summaries a conversation keeps.
const MAX_RUNS: usize = 200;
/// The state slot naming the principal a conversation belongs to: set once, when the
/// conversation is created, in the store itself, so every worker agrees without shared memory.
pub(crate) const OWNER_KEY: &str = "chat-panel.owner";
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
    /// The model's reasoning in a round where it wrote no text, only tool calls (shown
    /// folded, before the calls).
    Reasoning,
}

/// A picture, a sound or a file in a conversation entry: the person's, or one a tool returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EntryImage {
    /// How the page shows it: a picture in place, a sound to play, or a file to download.
    /// A picture or sound whose type is not one the panel shows, or whose bytes are not what
    /// its type says (an SVG or a web page calling itself a picture), is a file.
    pub kind: crate::MediaKind,
    /// Where the page loads it: the panel's own media endpoint
    /// (`/api/sessions/{id}/media/{row}-{part}`), which serves it to the conversation's owner
    /// only. `None` when the panel does not serve it (a picture that is not an inline PNG, JPEG,
    /// GIF or WebP, or media held at a URL of its own, which the page does not fetch):
    /// [`text`](Self::text) is shown instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    /// Its media type, as stored.
    pub media_type: String,
    /// Its file name, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its size in bytes, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Width and height in pixels, read from its header, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// See [`width`](Self::width).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// A line naming it (kind, type, file name, size): the image's alternative text.
    pub text: String,
    /// A file to open rather than media to show (`kind` is [`MediaKind::File`](crate::MediaKind)
    /// and the panel serves it): the page links [`src`](Self::src) with the file's name, type
    /// and size as the link's words.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub link: bool,
}

/// What one answer cost: the tokens of its model calls and their price, as the tool loop
/// reported them ([`LoopOutput::usage`](toolwright_tool_system::LoopOutput) and `cost`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunSummary {
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u32,
    /// Generated tokens, reasoning included.
    pub completion_tokens: u32,
    /// Prompt tokens read from the provider's cache.
    pub cache_read_tokens: u32,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: u32,
    /// Generated tokens spent reasoning.
    pub reasoning_tokens: u32,
    /// Their price in US dollars, when the model's price is known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cost_usd: Option<f64>,
}

impl RunSummary {
    /// The summary of a run's usage and cost; `None` when the model reported no usage.
    pub fn of(usage: Option<toolwright_core::Usage>, cost: Option<f64>) -> Option<Self> {
        let u = usage?;
        Some(Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            reasoning_tokens: u.reasoning_tokens,
            cost_usd: cost.filter(|c| c.is_finite() && *c >= 0.0),
        })
    }
}

/// A run summary and the stored row its answer ended at (the slot [`RUNS_KEY`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredRun {
    pub row: u64,
    #[serde(flatten)]
    pub run: RunSummary,
}

/// Records that the answer ending at `row` of conversation `id` cost `run` (the latest
/// [`MAX_RUNS`] are kept), with a compare-and-set so answers on several workers never lose
/// each other's.
pub(crate) async fn record_run(
    store: &dyn SessionStore,
    id: &str,
    row: u64,
    run: RunSummary,
) -> Result<(), StoreError> {
    for _ in 0..4 {
        let old = store.get_state(id, RUNS_KEY).await?;
        let mut runs = read_runs(old.as_deref());
        runs.retain(|r| r.row != row);
        runs.push(StoredRun { row, run });
        let excess = runs.len().saturating_sub(MAX_RUNS);
        runs.drain(..excess);
        let new = serde_json::to_string(&runs).unwrap_or_else(|_| "[]".into());
        let change = StateChange::new(RUNS_KEY, old.as_deref(), Some(&new));
        if store.append_with_state(id, &[], change).await?.is_some() {
            return Ok(());
        }
    }
    Err(StoreError::Database {
        detail: format!(
            "the run summaries of session `{id}` kept changing under this worker; the summary of the answer at row {row} was not recorded (the answer itself is stored)"
        ),
    })
}

/// The stored run summaries (a slot that cannot be read counts as none: they are a display).
pub(crate) fn read_runs(slot: Option<&str>) -> Vec<StoredRun> {
    slot.and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// Shows each run summary on the last entry made at or before its row (the answer's last).
pub(crate) fn attach_runs(entries: &mut [Entry], runs: &[StoredRun]) {
    for r in runs {
        let end = r.row.saturating_add(1).saturating_mul(ROW_SLOTS);
        if let Some(e) = entries.iter_mut().rev().find(|e| e.id < end) {
            e.run = Some(r.run);
        }
    }
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
    /// Pictures: the person's (a user entry) or a tool's (a tool entry), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<EntryImage>,
    /// The model's reasoning before this text (its providers' readable text or summary),
    /// shown folded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// What the answer that ends with this entry cost (tokens, price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunSummary>,
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
            images: Vec::new(),
            reasoning: None,
            run: None,
        }
    }
}

/// The first bytes of inline media (16 characters of base64: the first 12 bytes, enough for
/// each magic number); `None` for media at a URL or broken base64.
fn head(m: &Media) -> Option<Vec<u8>> {
    let MediaSource::Base64 { data } = &m.source else {
        return None;
    };
    let head = data.get(..16).unwrap_or(data);
    Media::base64(head, m.media_type.clone()).ok()?.decoded()
}

/// The pictures, sounds and files among `parts` of stored row `row`, as the page shows them:
/// inline media by the panel's media endpoint when its bytes can be read (a picture only when
/// it is one of the four types the panel shows), media a tool kept in the blob store
/// (`toolwright-blob:`) the same way; a URL of its own is only named.
fn images(session: &str, row: u64, parts: &[Part]) -> Vec<EntryImage> {
    use crate::MediaKind;
    parts
        .iter()
        .enumerate()
        .filter_map(|(k, p)| {
            let src = || format!("/api/sessions/{session}/media/{row}-{k}");
            let (kind, src, media_type, name, size, dims) = match p {
                Part::Image(m) | Part::Audio(m) | Part::File(m) => {
                    let head = head(m);
                    let shown = head.as_deref().map_or(MediaKind::File, |h| {
                        crate::media::shown_as(&m.media_type, h)
                    });
                    // a picture that is not one the panel shows is named, never linked: it may
                    // be an SVG or a page calling itself a picture
                    let served = head.is_some()
                        && !(matches!(p, Part::Image(_)) && shown != MediaKind::Image);
                    let dims = (shown == MediaKind::Image)
                        .then(|| m.dimensions())
                        .flatten();
                    let size =
                        matches!(m.source, MediaSource::Base64 { .. }).then(|| m.size() as u64);
                    (shown, served.then(src), &m.media_type, &m.name, size, dims)
                }
                Part::Resource(r) => {
                    let stored = toolwright_core::ResourceRef::blob_hash(&r.uri).is_ok();
                    let kind = match crate::media::listed(&crate::media::normalized(&r.media_type))
                    {
                        Some(k @ (MediaKind::Image | MediaKind::Audio)) => k,
                        _ => MediaKind::File,
                    };
                    (kind, stored.then(src), &r.media_type, &r.name, r.size, None)
                }
                _ => return None,
            };
            let (width, height) = dims.unzip();
            Some(EntryImage {
                link: kind == MediaKind::File && src.is_some(),
                kind,
                src,
                media_type: media_type.clone(),
                name: name.clone(),
                size,
                width,
                height,
                text: p.placeholder(),
            })
        })
        .collect()
}

/// The readable reasoning among `parts` (texts and summaries; redacted reasoning has none).
fn reasoning(parts: &[Part]) -> Option<String> {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Reasoning(r) if !r.text.trim().is_empty() => Some(r.text.trim()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// The events of one stored row: `("entry" | "update", entry)`.
pub(crate) struct Row {
    /// Its number (the SSE event id).
    pub row: u64,
    pub events: Vec<(&'static str, Entry)>,
}

/// Folds stored messages into entries, row by row.
struct Fold {
    session: String,
    me: String,
    entries: Vec<Entry>,
    index: HashMap<u64, usize>,
    calls: HashMap<String, (u64, Value)>,
}

impl Fold {
    fn new(session_id: &str) -> Self {
        Self {
            session: session_id.to_owned(),
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
            Message::User { content, parts } => {
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
                let mut e = Entry::new(id(0), EntryKind::User, content.clone());
                e.images = images(&self.session, row, parts);
                // what else the message carried as text (an MCP resource read into it): named
                // by its first line, not shown whole
                for p in parts {
                    if let Part::Text { text } = p {
                        let first: String = text
                            .lines()
                            .next()
                            .unwrap_or_default()
                            .chars()
                            .take(200)
                            .collect();
                        e.images.push(EntryImage {
                            kind: crate::MediaKind::File,
                            src: None,
                            media_type: "text/plain".into(),
                            name: None,
                            size: Some(text.len() as u64),
                            width: None,
                            height: None,
                            text: first,
                            link: false,
                        });
                    }
                }
                self.push(e, &mut out);
            }
            Message::Assistant {
                content,
                tool_calls,
                parts,
            } => {
                let mut k = 0;
                let thought = reasoning(parts);
                let text = !content.trim().is_empty();
                if let Some(r) = &thought
                    && !text
                {
                    // a round of calls only: its reasoning before them
                    let mut e = Entry::new(id(k), EntryKind::Reasoning, "");
                    e.reasoning = Some(r.clone());
                    self.push(e, &mut out);
                    k += 1;
                }
                for c in tool_calls.iter().take((ROW_SLOTS - 2) as usize) {
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
                if text {
                    let mut e = Entry::new(id(k), EntryKind::Assistant, content.clone());
                    e.reasoning = thought;
                    self.push(e, &mut out);
                }
            }
            Message::Tool {
                tool_call_id,
                name,
                content,
                parts,
            } => {
                let ok = serde_json::from_str::<Value>(content)
                    .map_or(true, |v| v.get("success") != Some(&Value::Bool(false)));
                let Some((eid, args)) = self.calls.get(tool_call_id).cloned() else {
                    return out;
                };
                let shown = images(&self.session, row, parts);
                if let Some(e) = self.get_mut(eid) {
                    if let Some(t) = e.tool.as_mut() {
                        t.result = Some(content.clone());
                        t.is_error = !ok;
                    }
                    e.images = shown;
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
