//! Anthropic's Messages API wire format, outbound: the request body.
//!
//! Everything here is plain `serde_json`: the body is built key by key in a fixed order
//! (the workspace's `serde_json` keeps insertion order), so that a conversation's next
//! request starts with the same bytes as this one for its tools, system and earlier messages.

use serde_json::{Map, Value, json};

use crate::{ChatRequest, Message, ModelError, ResponseFormat, ToolCall, ToolChoice};
use toolwright_core::{CachePolicy, CacheTtl, Media, MediaSource, Part, Reasoning};

/// The tag of the reasoning this wire makes and replays.
pub(crate) const PROVIDER: &str = "anthropic";

/// The backend's name in [`ModelError::Unsupported`].
const BACKEND: &str = "Anthropic Messages";

/// The most cache breakpoints one request may hold (the API refuses a fifth).
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// The request options that come from the backend's configuration, not from the request.
#[derive(Debug, Clone)]
pub(crate) struct Options<'a> {
    /// The configured model, unless the request names another.
    pub(crate) model: &'a str,
    /// `max_tokens` when the request sets none (the API requires the field).
    pub(crate) max_tokens: u32,
    /// Extended thinking's `budget_tokens`, when on.
    pub(crate) thinking: Option<u32>,
    /// The TTL of the breakpoints [`CachePolicy::Auto`] places.
    pub(crate) cache_ttl: CacheTtl,
}

fn unsupported(part: &Part) -> ModelError {
    ModelError::Unsupported {
        part: part.kind(),
        backend: BACKEND.into(),
    }
}

/// Where a cache breakpoint goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Spot {
    /// The tool definition at this index.
    Tool(usize),
    /// The system block at this index.
    System(usize),
    /// Block `.1` of wire message `.0`.
    Block(usize, usize),
    /// The request's top-level `cache_control`: the API puts it on the last cacheable block,
    /// so no message's bytes change when the conversation grows.
    End,
}

/// The request under construction: wire messages as lists of blocks, and where each
/// request message's last block ended up.
#[derive(Default)]
struct Builder {
    system: Vec<Map<String, Value>>,
    /// `(role, blocks)`.
    messages: Vec<(&'static str, Vec<Map<String, Value>>)>,
    /// Hand-placed breakpoints, in request order.
    hand: Vec<(Spot, CacheTtl)>,
    /// Whether the conversation has begun (a system message after it is not hoisted).
    begun: bool,
}

impl Builder {
    /// The spot of the last block built so far, if any.
    fn last_spot(&self) -> Option<Spot> {
        for (i, (_, blocks)) in self.messages.iter().enumerate().rev() {
            if !blocks.is_empty() {
                return Some(Spot::Block(i, blocks.len() - 1));
            }
        }
        (!self.system.is_empty()).then(|| Spot::System(self.system.len() - 1))
    }

    /// The blocks of a new wire message of `role`, or the open one when it has that role
    /// and `merge` says so.
    fn open(&mut self, role: &'static str, merge: bool) -> &mut Vec<Map<String, Value>> {
        let reuse = merge && self.messages.last().is_some_and(|(r, _)| *r == role);
        if !reuse {
            self.messages.push((role, Vec::new()));
        }
        let last = self.messages.len() - 1;
        &mut self.messages[last].1
    }
}

fn text_block(text: &str) -> Map<String, Value> {
    let mut b = Map::new();
    b.insert("type".into(), json!("text"));
    b.insert("text".into(), json!(text));
    b
}

/// An image block: base64 or URL source.
fn image_block(part: &Part, m: &Media) -> Result<Map<String, Value>, ModelError> {
    const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
    let media_type = m.media_type.to_ascii_lowercase();
    let source = match &m.source {
        MediaSource::Base64 { data } => {
            if !IMAGE_TYPES.contains(&media_type.as_str()) {
                return Err(unsupported(part));
            }
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
        MediaSource::Url { url } => json!({"type": "url", "url": url}),
    };
    let mut b = Map::new();
    b.insert("type".into(), json!("image"));
    b.insert("source".into(), source);
    Ok(b)
}

/// A document block: a PDF (base64 or URL) or plain text (sent as text, decoded).
fn document_block(part: &Part, m: &Media) -> Result<Map<String, Value>, ModelError> {
    let media_type = m.media_type.to_ascii_lowercase();
    let source = match (&m.source, media_type.as_str()) {
        (MediaSource::Base64 { data }, "application/pdf") => {
            json!({"type": "base64", "media_type": "application/pdf", "data": data})
        }
        (MediaSource::Url { url }, "application/pdf") => json!({"type": "url", "url": url}),
        (MediaSource::Base64 { .. }, t) if t.starts_with("text/") => {
            let text = m
                .decoded()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| unsupported(part))?;
            json!({"type": "text", "media_type": "text/plain", "data": text})
        }
        _ => return Err(unsupported(part)),
    };
    let mut b = Map::new();
    b.insert("type".into(), json!("document"));
    b.insert("source".into(), source);
    if let Some(name) = &m.name {
        b.insert("title".into(), json!(name));
    }
    Ok(b)
}

/// The thinking block of our own reasoning, replayed unchanged; `None` for reasoning this
/// wire does not send (another provider's, or ours without a signature or data).
fn reasoning_block(r: &Reasoning) -> Option<Map<String, Value>> {
    if r.provider != PROVIDER {
        return None;
    }
    let mut b = Map::new();
    if let Some(data) = &r.encrypted {
        b.insert("type".into(), json!("redacted_thinking"));
        b.insert("data".into(), json!(data));
    } else if let Some(signature) = &r.signature {
        b.insert("type".into(), json!("thinking"));
        b.insert("thinking".into(), json!(r.text));
        b.insert("signature".into(), json!(signature));
    } else {
        // Unsigned thinking cannot be verified by the API, which refuses it: not sent.
        tracing::debug!("anthropic reasoning without a signature is not replayed");
        return None;
    }
    Some(b)
}

/// A user message's (or a tool result's) text, media and breakpoints, appended to `blocks`.
/// Breakpoints are returned as the index of the block before them.
fn content_blocks(
    content: &str,
    parts: &[Part],
    blocks: &mut Vec<Map<String, Value>>,
) -> Result<Vec<(Option<usize>, CacheTtl)>, ModelError> {
    let mut breakpoints = Vec::new();
    if !content.is_empty() {
        blocks.push(text_block(content));
    }
    for p in parts {
        match p {
            Part::Text { text } if text.is_empty() => {}
            Part::Text { text } => blocks.push(text_block(text)),
            Part::Resource(_) => blocks.push(text_block(&p.placeholder())),
            Part::Image(m) => blocks.push(image_block(p, m)?),
            Part::File(m) => blocks.push(document_block(p, m)?),
            Part::Audio(_) => return Err(unsupported(p)),
            // A person's message or a tool's result carries no reasoning of the model.
            Part::Reasoning(_) => {}
            Part::CacheBreakpoint(ttl) => breakpoints.push((blocks.len().checked_sub(1), *ttl)),
        }
    }
    Ok(breakpoints)
}

/// The `input` of a recorded call: its arguments object. A call recorded invalid (its
/// arguments a JSON string of raw text) is sent with its raw text when that text is a JSON
/// object after all, else as `{}`: the API takes only an object, and the tool result that
/// answers the call quotes the raw text to the model.
fn tool_input(call: &ToolCall) -> Value {
    match &call.arguments {
        Value::Object(_) => call.arguments.clone(),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::Object(Map::new()),
        },
        _ => Value::Object(Map::new()),
    }
}

/// Whether a tool result's text is the dispatcher's JSON saying the call failed.
fn is_error_result(content: &str) -> bool {
    let t = content.trim_start();
    t.starts_with('{')
        && serde_json::from_str::<Value>(t)
            .ok()
            .is_some_and(|v| v.get("success") == Some(&Value::Bool(false)))
}

fn cache_control(ttl: CacheTtl) -> Value {
    match ttl {
        CacheTtl::Short => json!({"type": "ephemeral"}),
        CacheTtl::Long => json!({"type": "ephemeral", "ttl": "1h"}),
    }
}

/// Builds the JSON body of `POST /v1/messages`.
pub(crate) fn request_body(
    req: &ChatRequest,
    opts: &Options<'_>,
    stream: bool,
) -> Result<Value, ModelError> {
    let mut b = Builder::default();
    // The last block each request message ended with, for `stable_prefix`.
    let mut ends: Vec<Option<Spot>> = Vec::with_capacity(req.messages.len());
    for m in &req.messages {
        match m {
            Message::System { content } if !b.begun => {
                if !content.is_empty() {
                    b.system.push(text_block(content));
                }
            }
            // The API has no system role among the messages: a later instruction is
            // given as the user's text where it stands (the system prompt stays the same,
            // and so does the cached prefix).
            Message::System { content } => {
                if !content.is_empty() {
                    b.open("user", true).push(text_block(content));
                }
            }
            Message::User { content, parts } => {
                b.begun = true;
                let blocks = b.open("user", false);
                let marks = content_blocks(content, parts, blocks)?;
                place(&mut b, marks);
            }
            Message::Assistant {
                content,
                tool_calls,
                parts,
            } => {
                b.begun = true;
                let mut blocks = Vec::new();
                let mut marks = Vec::new();
                // Reasoning first, as the model made it; then the text; then the calls.
                for p in parts {
                    match p {
                        Part::Reasoning(r) => blocks.extend(reasoning_block(r)),
                        Part::CacheBreakpoint(ttl) => {
                            marks.push((blocks.len().checked_sub(1), *ttl))
                        }
                        Part::Text { .. } | Part::Resource(_) => {}
                        Part::Image(_) | Part::Audio(_) | Part::File(_) => {
                            return Err(unsupported(p));
                        }
                    }
                }
                if !content.is_empty() {
                    blocks.push(text_block(content));
                }
                for p in parts {
                    match p {
                        Part::Text { text } if !text.is_empty() => blocks.push(text_block(text)),
                        Part::Resource(_) => blocks.push(text_block(&p.placeholder())),
                        _ => {}
                    }
                }
                for c in tool_calls {
                    let mut t = Map::new();
                    t.insert("type".into(), json!("tool_use"));
                    t.insert("id".into(), json!(c.id));
                    t.insert("name".into(), json!(c.name));
                    t.insert("input".into(), tool_input(c));
                    blocks.push(t);
                }
                if blocks.is_empty() {
                    // Nothing this wire can send (only another provider's reasoning): the
                    // API refuses an empty message, and the turns around it merge.
                    ends.push(b.last_spot());
                    continue;
                }
                b.messages.push(("assistant", blocks));
                place(&mut b, marks);
            }
            Message::Tool {
                tool_call_id,
                content,
                parts,
                ..
            } => {
                b.begun = true;
                // Every result of a round in one user message, as the API asks.
                let merge = matches!(b.messages.last(), Some(("user", blocks))
                    if blocks.last().and_then(|x| x.get("type")) == Some(&json!("tool_result")));
                let mut inner = Vec::new();
                let marks = content_blocks(content, parts, &mut inner)?;
                let mut t = Map::new();
                t.insert("type".into(), json!("tool_result"));
                t.insert("tool_use_id".into(), json!(tool_call_id));
                if !inner.is_empty() {
                    t.insert(
                        "content".into(),
                        Value::Array(inner.into_iter().map(Value::Object).collect()),
                    );
                }
                if is_error_result(content) {
                    t.insert("is_error".into(), json!(true));
                }
                b.open("user", merge).push(t);
                // A breakpoint among a result's parts marks the whole result.
                if let (Some((_, ttl)), Some(spot)) = (marks.last(), b.last_spot()) {
                    b.hand.push((spot, *ttl));
                }
            }
        }
        ends.push(b.last_spot());
    }

    let mut body = Map::new();
    body.insert(
        "model".into(),
        json!(req.model.as_deref().unwrap_or(opts.model)),
    );
    let mut tools: Vec<Map<String, Value>> = req
        .tools
        .iter()
        .map(|t| {
            let mut m = Map::new();
            m.insert("name".into(), json!(t.name));
            m.insert("description".into(), json!(t.description));
            m.insert("input_schema".into(), (*t.parameters).clone());
            m
        })
        .collect();

    // Cache breakpoints: hand-placed first, then the automatic ones from the last.
    let mut marks: Vec<(Spot, CacheTtl)> = Vec::new();
    if req.cache != CachePolicy::Off {
        // Two breakpoints on one block are one (the longer TTL).
        b.hand.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same && later.1 == CacheTtl::Long {
                earlier.1 = CacheTtl::Long;
            }
            same
        });
        let hand = &b.hand[b.hand.len().saturating_sub(MAX_BREAKPOINTS)..];
        marks.extend_from_slice(hand);
    }
    if req.cache == CachePolicy::Auto {
        let ttl = opts.cache_ttl;
        let last = b.last_spot();
        let mut auto = Vec::new();
        if !tools.is_empty() {
            auto.push(Spot::Tool(tools.len() - 1));
        }
        if !b.system.is_empty() {
            auto.push(Spot::System(b.system.len() - 1));
        }
        if let Some(k) = req.stable_prefix.filter(|&k| k > 0)
            && let Some(Some(spot @ Spot::Block(..))) = ends.get(k - 1)
            && Some(*spot) != last
        {
            auto.push(*spot);
        }
        if last.is_some() && !marks.iter().any(|(s, _)| Some(*s) == last) {
            auto.push(Spot::End);
        }
        auto.retain(|s| !marks.iter().any(|(h, _)| h == s));
        let room = MAX_BREAKPOINTS.saturating_sub(marks.len());
        let skip = auto.len().saturating_sub(room);
        marks.extend(auto.into_iter().skip(skip).map(|s| (s, ttl)));
    }
    // A longer TTL may not follow a shorter one: an earlier breakpoint lives at least as
    // long as any after it.
    marks.sort_by_key(|(s, _)| *s);
    marks.dedup_by_key(|(s, _)| *s);
    let mut longest = CacheTtl::Short;
    for (_, ttl) in marks.iter_mut().rev() {
        if longest == CacheTtl::Long {
            *ttl = CacheTtl::Long;
        }
        if *ttl == CacheTtl::Long {
            longest = CacheTtl::Long;
        }
    }
    let mut top_level = None;
    for (spot, ttl) in marks {
        let target = match spot {
            Spot::Tool(i) => tools.get_mut(i),
            Spot::System(i) => b.system.get_mut(i),
            Spot::Block(m, i) => b.messages.get_mut(m).and_then(|(_, bl)| bl.get_mut(i)),
            Spot::End => {
                top_level = Some(ttl);
                None
            }
        };
        if let Some(block) = target {
            block.insert("cache_control".into(), cache_control(ttl));
        }
    }

    if !tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(tools.drain(..).map(Value::Object).collect()),
        );
    }
    if !b.system.is_empty() {
        body.insert(
            "system".into(),
            Value::Array(b.system.drain(..).map(Value::Object).collect()),
        );
    }
    let messages = b
        .messages
        .drain(..)
        .map(|(role, blocks)| {
            json!({"role": role, "content": Value::Array(blocks.into_iter().map(Value::Object).collect())})
        })
        .collect();
    body.insert("messages".into(), Value::Array(messages));

    // Everything after the messages may change from one round to the next.
    let max_tokens = match (req.max_tokens, opts.thinking) {
        (Some(n), Some(budget)) if n <= budget => {
            return Err(ModelError::Config(format!(
                "max_tokens ({n}) must exceed the thinking budget ({budget}): raise the request's max_tokens or lower AnthropicConfig::thinking"
            )));
        }
        (Some(n), _) => n,
        (None, Some(budget)) if opts.max_tokens <= budget => budget.saturating_add(opts.max_tokens),
        (None, _) => opts.max_tokens,
    };
    body.insert("max_tokens".into(), json!(max_tokens));
    if let Some(budget) = opts.thinking {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    if !req.tools.is_empty()
        && let Some(choice) = &req.tool_choice
    {
        let choice = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required | ToolChoice::Function(_) if opts.thinking.is_some() => {
                return Err(ModelError::Config(
                    "with extended thinking on, Anthropic takes only tool_choice auto or none: drop the forced tool choice or turn thinking off".into(),
                ));
            }
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    // With thinking on the API takes no temperature but its default.
    if let (Some(t), None) = (req.temperature, opts.thinking) {
        body.insert("temperature".into(), json!(t));
    }
    match &req.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            body.insert(
                "output_config".into(),
                json!({"format": {"type": "json_schema", "schema": schema}}),
            );
        }
        Some(ResponseFormat::JsonObject) => {
            return Err(ModelError::Config(
                "Anthropic has no free-form JSON mode: use ResponseFormat::JsonSchema with the object's schema".into(),
            ));
        }
    }
    if let Some(ttl) = top_level {
        body.insert("cache_control".into(), cache_control(ttl));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(body))
}

/// Puts a user or assistant message's breakpoints (block indexes within the message just
/// added) on their blocks; one before any block of its message goes on the block before.
fn place(b: &mut Builder, marks: Vec<(Option<usize>, CacheTtl)>) {
    let msg = b.messages.len().saturating_sub(1);
    for (at, ttl) in marks {
        match at {
            Some(i) => b.hand.push((Spot::Block(msg, i), ttl)),
            None => {
                // The block before this message's first one.
                let before = b.messages[..msg]
                    .iter()
                    .enumerate()
                    .rev()
                    .find(|(_, (_, bl))| !bl.is_empty())
                    .map(|(i, (_, bl))| Spot::Block(i, bl.len() - 1))
                    .or_else(|| (!b.system.is_empty()).then(|| Spot::System(b.system.len() - 1)));
                match before {
                    Some(spot) => b.hand.push((spot, ttl)),
                    None => tracing::debug!("a cache breakpoint before any content is ignored"),
                }
            }
        }
    }
}
