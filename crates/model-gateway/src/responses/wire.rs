//! The request side of the Responses wire (`POST {base}/responses`), and whole answers.
//!
//! Keys are written in one fixed order, the parts that stay the same from round to round
//! first (model, settings, tools) and `input` after them, so that a conversation's next
//! request repeats the previous one's bytes up to its new items.

use serde_json::{Map, Value, json};

use super::ResponsesOptions;
use super::events::{PROVIDER, finish_reason, read_output, usage};
use crate::{ChatRequest, ChatResponse, Message, ModelError, ResponseFormat, ToolChoice};
use toolwright_core::{CachePolicy, Media, MediaSource, Part, Reasoning, lower_tool_parts};

/// The backend's name in [`ModelError::Unsupported`].
const BACKEND: &str = "OpenAI Responses";

fn unsupported(part: &Part) -> ModelError {
    ModelError::Unsupported {
        part: part.kind(),
        backend: BACKEND.into(),
    }
}

/// What a `function_call_output` can hold: text, images and files (its array form); audio
/// is lowered into a user message, which refuses it.
fn tool_output_carries(part: &Part) -> bool {
    !matches!(part, Part::Audio(_))
}

/// Builds the JSON body.
pub(crate) fn request_body(
    req: &ChatRequest,
    model: &str,
    options: &ResponsesOptions,
    stream: bool,
) -> Result<Value, ModelError> {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model.as_deref().unwrap_or(model)));
    body.insert("store".into(), json!(options.store));
    // Stateless: the reasoning goes back as its encrypted content.
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    if options.reasoning_effort.is_some() || options.reasoning_summary.is_some() {
        let mut r = Map::new();
        if let Some(e) = &options.reasoning_effort {
            r.insert("effort".into(), json!(e));
        }
        if let Some(s) = &options.reasoning_summary {
            r.insert("summary".into(), json!(s));
        }
        body.insert("reasoning".into(), Value::Object(r));
    }
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": false})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &req.tool_choice {
            body.insert("tool_choice".into(), tool_choice(choice));
        }
    }
    if let Some(f) = &req.response_format {
        body.insert("text".into(), json!({"format": text_format(f)}));
    }
    let lowered;
    let messages = if req.messages.iter().any(|m| {
        matches!(m, Message::Tool { parts, .. } if parts.iter().any(|p| !tool_output_carries(p)))
    }) {
        lowered = lower_tool_parts(&req.messages, tool_output_carries);
        &lowered
    } else {
        &req.messages
    };
    let mut input = Vec::with_capacity(messages.len() + 1);
    for m in messages {
        items(m, &options.image_detail, &mut input)?;
    }
    body.insert("input".into(), Value::Array(input));
    if let (Some(key), false) = (&req.cache_key, req.cache == CachePolicy::Off) {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    if let Some(n) = req.max_tokens {
        body.insert("max_output_tokens".into(), json!(n));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(stream));
    Ok(Value::Object(body))
}

/// A `data:` URL of inline media, or its URL.
fn media_url(m: &Media) -> String {
    match &m.source {
        MediaSource::Base64 { data } => format!("data:{};base64,{data}", m.media_type),
        MediaSource::Url { url } => url.clone(),
    }
}

/// An input content part for `part`, `None` for parts that add nothing to the wire
/// (reasoning in a person's or a tool's message, cache breakpoints).
fn input_content(part: &Part, detail: &str) -> Result<Option<Value>, ModelError> {
    Ok(Some(match part {
        Part::Text { text } => json!({"type": "input_text", "text": text}),
        Part::Resource(_) => json!({"type": "input_text", "text": part.placeholder()}),
        Part::Image(m) => {
            json!({"type": "input_image", "image_url": media_url(m), "detail": detail})
        }
        Part::File(m) => {
            let mut f = Map::new();
            f.insert("type".into(), json!("input_file"));
            match &m.source {
                MediaSource::Base64 { .. } => {
                    f.insert("file_data".into(), json!(media_url(m)));
                }
                MediaSource::Url { url } => {
                    f.insert("file_url".into(), json!(url));
                }
            }
            if let Some(name) = &m.name {
                f.insert("filename".into(), json!(name));
            }
            Value::Object(f)
        }
        // The Responses reference has no audio input content (only Chat Completions does).
        Part::Audio(_) => return Err(unsupported(part)),
        // OpenAI caches prefixes by itself; a reasoning part means nothing in these roles.
        Part::Reasoning(_) | Part::CacheBreakpoint(_) => return Ok(None),
    }))
}

/// Whether a part adds nothing to a person's or a tool's message on this wire.
fn adds_nothing(part: &Part) -> bool {
    matches!(part, Part::Reasoning(_) | Part::CacheBreakpoint(_))
}

/// The content list of a message: its text, then its parts.
fn content_list(content: &str, parts: &[Part], detail: &str) -> Result<Vec<Value>, ModelError> {
    let mut out = Vec::with_capacity(parts.len() + 1);
    if !content.is_empty() {
        out.push(json!({"type": "input_text", "text": content}));
    }
    for p in parts {
        if let Some(c) = input_content(p, detail)? {
            out.push(c);
        }
    }
    Ok(out)
}

/// Appends the input items of one message.
fn items(m: &Message, detail: &str, out: &mut Vec<Value>) -> Result<(), ModelError> {
    match m {
        Message::System { content } => {
            out.push(json!({"type": "message", "role": "system", "content": content}))
        }
        Message::User { content, parts } => {
            let content = if parts.iter().all(adds_nothing) {
                json!(content)
            } else {
                Value::Array(content_list(content, parts, detail)?)
            };
            out.push(json!({"type": "message", "role": "user", "content": content}));
        }
        Message::Assistant {
            content,
            tool_calls,
            parts,
        } => assistant(content, tool_calls, parts, out)?,
        Message::Tool {
            tool_call_id,
            content,
            parts,
            ..
        } => {
            let output = if parts.iter().all(adds_nothing) {
                json!(content)
            } else {
                Value::Array(content_list(content, parts, detail)?)
            };
            out.push(
                json!({"type": "function_call_output", "call_id": tool_call_id, "output": output}),
            );
        }
    }
    Ok(())
}

/// One reasoning item to send back, gathered from its parts.
struct ReasoningItem<'a> {
    id: &'a str,
    call_id: Option<&'a str>,
    summary: Vec<&'a str>,
    content: Vec<&'a str>,
    encrypted: Option<&'a str>,
}

impl ReasoningItem<'_> {
    fn to_json(&self) -> Value {
        let mut item = Map::new();
        item.insert("type".into(), json!("reasoning"));
        item.insert("id".into(), json!(self.id));
        let summary: Vec<Value> = self
            .summary
            .iter()
            .map(|t| json!({"type": "summary_text", "text": t}))
            .collect();
        item.insert("summary".into(), Value::Array(summary));
        if !self.content.is_empty() {
            let content: Vec<Value> = self
                .content
                .iter()
                .map(|t| json!({"type": "reasoning_text", "text": t}))
                .collect();
            item.insert("content".into(), Value::Array(content));
        }
        if let Some(e) = self.encrypted {
            item.insert("encrypted_content".into(), json!(e));
        }
        Value::Object(item)
    }
}

/// An assistant turn as output items: its reasoning items first (each one tied to a call goes
/// right before that call, as the model made them), then its text, then its calls. Reasoning
/// of another provider is never sent.
fn assistant(
    content: &str,
    tool_calls: &[toolwright_core::ToolCall],
    parts: &[Part],
    out: &mut Vec<Value>,
) -> Result<(), ModelError> {
    let mut text = content.to_owned();
    let mut reasoning: Vec<ReasoningItem<'_>> = Vec::new();
    for p in parts {
        match p {
            Part::Text { text: t } => text.push_str(t),
            Part::Resource(_) => text.push_str(&p.placeholder()),
            Part::Reasoning(r) if r.provider == PROVIDER => add_reasoning(r, &mut reasoning)?,
            // Another provider's reasoning is never sent; caching is automatic here.
            Part::Reasoning(_) | Part::CacheBreakpoint(_) => {}
            Part::Image(_) | Part::Audio(_) | Part::File(_) => return Err(unsupported(p)),
        }
    }
    let tied = |r: &ReasoningItem<'_>| {
        r.call_id
            .is_some_and(|id| tool_calls.iter().any(|c| c.id == id))
    };
    for r in reasoning.iter().filter(|r| !tied(r)) {
        out.push(r.to_json());
    }
    if !text.is_empty() {
        out.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}));
    }
    for c in tool_calls {
        for r in reasoning
            .iter()
            .filter(|r| r.call_id == Some(c.id.as_str()))
        {
            out.push(r.to_json());
        }
        out.push(
            json!({"type": "function_call", "call_id": c.id, "name": c.name,
                        "arguments": c.arguments_text()}),
        );
    }
    Ok(())
}

/// Adds one reasoning part to the items: parts with the id of the item before it continue it.
fn add_reasoning<'a>(
    r: &'a Reasoning,
    items: &mut Vec<ReasoningItem<'a>>,
) -> Result<(), ModelError> {
    let Some(id) = r.id.as_deref() else {
        return Err(ModelError::Config(format!(
            "a reasoning part tagged {PROVIDER:?} has no id, so the Responses API cannot take it \
             back; keep reasoning parts as this backend returned them"
        )));
    };
    let item = match items.last_mut().filter(|last| last.id == id) {
        Some(item) => item,
        None => {
            items.push(ReasoningItem {
                id,
                call_id: None,
                summary: Vec::new(),
                content: Vec::new(),
                encrypted: None,
            });
            let at = items.len() - 1;
            &mut items[at]
        }
    };
    if item.call_id.is_none() {
        item.call_id = r.call_id.as_deref();
    }
    if item.encrypted.is_none() {
        item.encrypted = r.encrypted.as_deref();
    }
    match r.kind {
        toolwright_core::ReasoningKind::Summary => item.summary.push(&r.text),
        toolwright_core::ReasoningKind::Full => item.content.push(&r.text),
        toolwright_core::ReasoningKind::Redacted => {}
    }
    Ok(())
}

fn tool_choice(c: &ToolChoice) -> Value {
    match c {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "name": name}),
    }
}

fn text_format(f: &ResponseFormat) -> Value {
    match f {
        ResponseFormat::Text => json!({"type": "text"}),
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => json!({"type": "json_schema", "name": name, "schema": schema, "strict": strict}),
    }
}

/// Reads a whole (non-streamed) response.
pub(crate) fn parse_response(v: &Value) -> Result<ChatResponse, ModelError> {
    match v.get("status").and_then(Value::as_str) {
        Some("failed") => {
            return Err(super::events::api_error(v.get("error").unwrap_or(v)));
        }
        Some("completed" | "incomplete") | None => {}
        Some(other) => {
            return Err(ModelError::malformed(
                "response",
                format!("status {other:?} is not a finished response (is `background` set?)"),
                &v.to_string(),
            ));
        }
    }
    let output = v
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::malformed("response", "no output array", &v.to_string()))?;
    let out = read_output(output)?;
    let has_calls = !out.calls.is_empty() || !out.invalid.is_empty();
    Ok(ChatResponse::new(
        out.content,
        out.calls,
        finish_reason(v, has_calls),
        v.get("usage").and_then(usage),
    )
    .with_invalid_tool_calls(out.invalid)
    .with_parts(out.parts))
}
