//! What the page shows of a conversation: its entries, folded from the stored messages row by
//! row (see the module above for the rows and the entry ids).

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use toolwright_core::{Media, MediaSource, Message, Part};

use super::{AGENT_SENDER, ROW_SLOTS, RunSummary};
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
