//! The OpenAI chat-completions wire format, read leniently: real "OpenAI-compatible" servers
//! omit fields, send empty strings, add fields of their own, and number tool calls differently.

use serde_json::{Map, Value, json};

use crate::default_finish;
use crate::{
    ChatRequest, ChatResponse, FinishReason, Message, ModelError, ResponseFormat, ToolCall,
    ToolChoice, Usage,
};
use toolwright_core::{
    CachePolicy, Media, MediaSource, Part, Reasoning, ReasoningKind, lower_tool_parts,
};

/// The tag of the reasoning this wire reads (a compatible server's `reasoning_content`).
pub(crate) const PROVIDER: &str = "openai-chat";

/// What a Chat Completions tool message can hold besides its text: nothing (its content is
/// text), so a tool's image follows as a user message ([`lower_tool_parts`]).
fn tool_message_carries(part: &Part) -> bool {
    matches!(
        part,
        Part::Text { .. } | Part::Resource(_) | Part::Reasoning(_) | Part::CacheBreakpoint(_)
    )
}

/// Builds the JSON body. With no tools bound there is no `tools` field at all (G2).
pub(crate) fn request_body(
    req: &ChatRequest,
    model: &str,
    stream: bool,
    stream_usage: bool,
    replay_reasoning: bool,
) -> Result<Value, ModelError> {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model.as_deref().unwrap_or(model)));
    let lowered;
    let messages = if req.messages.iter().any(|m| {
        matches!(m, Message::Tool { parts, .. } if parts.iter().any(|p| !tool_message_carries(p)))
    }) {
        lowered = lower_tool_parts(&req.messages, tool_message_carries);
        &lowered
    } else {
        &req.messages
    };
    // Reasoning goes back only within the turn in flight (after the person's last message):
    // DeepSeek asks for it there during tool calls, and for no earlier turn.
    let turn_starts = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        out.push(message(m, replay_reasoning && i > turn_starts)?);
    }
    body.insert("messages".into(), Value::Array(out));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &req.tool_choice {
            body.insert("tool_choice".into(), tool_choice(choice));
        }
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(n) = req.max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    if let Some(f) = &req.response_format {
        body.insert("response_format".into(), response_format(f));
    }
    if let (Some(key), false) = (&req.cache_key, req.cache == CachePolicy::Off) {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    body.insert("stream".into(), json!(stream));
    if stream && stream_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(body))
}

fn unsupported(part: &Part) -> ModelError {
    ModelError::Unsupported {
        part: part.kind(),
        backend: "OpenAI Chat Completions".into(),
    }
}

/// A `data:` URL of inline media, or its URL.
fn media_url(m: &Media) -> String {
    match &m.source {
        MediaSource::Base64 { data } => format!("data:{};base64,{data}", m.media_type),
        MediaSource::Url { url } => url.clone(),
    }
}

/// A user message's content: its text alone, or an array of content parts.
fn user_content(content: &str, parts: &[Part]) -> Result<Value, ModelError> {
    if parts.iter().all(|p| matches!(p, Part::CacheBreakpoint(_))) {
        return Ok(json!(content));
    }
    let mut out = Vec::with_capacity(parts.len() + 1);
    if !content.is_empty() {
        out.push(json!({"type": "text", "text": content}));
    }
    for p in parts {
        match p {
            Part::Text { text } => out.push(json!({"type": "text", "text": text})),
            Part::Resource(_) => out.push(json!({"type": "text", "text": p.placeholder()})),
            Part::Image(m) => {
                out.push(json!({"type": "image_url", "image_url": {"url": media_url(m)}}))
            }
            Part::Audio(m) => {
                let format = m.media_type.rsplit('/').next().unwrap_or_default();
                let format = match format {
                    "mpeg" | "mp3" => "mp3",
                    "wav" | "x-wav" | "wave" => "wav",
                    _ => return Err(unsupported(p)),
                };
                let MediaSource::Base64 { data } = &m.source else {
                    return Err(unsupported(p));
                };
                out.push(
                    json!({"type": "input_audio", "input_audio": {"data": data, "format": format}}),
                )
            }
            Part::File(m) => {
                let MediaSource::Base64 { .. } = &m.source else {
                    return Err(unsupported(p));
                };
                let mut file = Map::new();
                file.insert("file_data".into(), json!(media_url(m)));
                if let Some(name) = &m.name {
                    file.insert("filename".into(), json!(name));
                }
                out.push(json!({"type": "file", "file": file}))
            }
            // A person's message carries no reasoning; caching is the provider's own here.
            Part::Reasoning(_) | Part::CacheBreakpoint(_) => {}
        }
    }
    Ok(Value::Array(out))
}

fn message(m: &Message, replay_reasoning: bool) -> Result<Value, ModelError> {
    Ok(match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content, parts } => {
            json!({"role": "user", "content": user_content(content, parts)?})
        }
        Message::Assistant {
            content,
            tool_calls,
            parts,
        } => {
            let mut text = content.clone();
            let mut reasoning = String::new();
            for p in parts {
                match p {
                    Part::Text { text: t } => text.push_str(t),
                    Part::Resource(_) => text.push_str(&p.placeholder()),
                    Part::Reasoning(r) if r.provider == PROVIDER => reasoning.push_str(&r.text),
                    // Another provider's reasoning is never sent here.
                    Part::Reasoning(_) | Part::CacheBreakpoint(_) => {}
                    Part::Image(_) | Part::Audio(_) | Part::File(_) => return Err(unsupported(p)),
                }
            }
            let mut msg = Map::new();
            msg.insert("role".into(), json!("assistant"));
            // `""`, never `null`, for a call without text: OpenAI accepts both, but
            // llama-cpp-python's server answers `null` with HTTP 500.
            msg.insert("content".into(), json!(text));
            if replay_reasoning && !reasoning.is_empty() {
                msg.insert("reasoning_content".into(), json!(reasoning));
            }
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.name, "arguments": c.arguments_text()}})
                    })
                    .collect();
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(msg)
        }
        Message::Tool {
            tool_call_id,
            content,
            parts,
            ..
        } => {
            // Only text is left here (the rest was lowered); extra text parts join the text.
            let mut text = content.clone();
            for p in parts {
                match p {
                    Part::Text { text: t } => {
                        text.push('\n');
                        text.push_str(t);
                    }
                    Part::Resource(_) => {
                        text.push('\n');
                        text.push_str(&p.placeholder());
                    }
                    _ => {}
                }
            }
            json!({"role": "tool", "tool_call_id": tool_call_id, "content": text})
        }
    })
}

fn tool_choice(c: &ToolChoice) -> Value {
    match c {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

fn response_format(f: &ResponseFormat) -> Value {
    match f {
        ResponseFormat::Text => json!({"type": "text"}),
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => {
            json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}})
        }
    }
}

pub(crate) fn usage(v: &Value) -> Option<Usage> {
    let u = v.get("usage")?;
    if !u.is_object() {
        return None;
    }
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0).min(u32::MAX as u64) as u32;
    let at = |path: &[&str]| n(path.iter().try_fold(u, |v, k| v.get(k)));
    // OpenAI reports cache reads under `prompt_tokens_details`; DeepSeek as its own field.
    let cached =
        at(&["prompt_tokens_details", "cached_tokens"]).max(at(&["prompt_cache_hit_tokens"]));
    Some(Usage {
        prompt_tokens: at(&["prompt_tokens"]),
        completion_tokens: at(&["completion_tokens"]),
        total_tokens: at(&["total_tokens"]),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: at(&["completion_tokens_details", "reasoning_tokens"]),
    })
}

pub(crate) fn finish_reason(choice: &Value) -> Option<FinishReason> {
    choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .and_then(FinishReason::from_wire)
}

/// A compatible server's reasoning text: `reasoning_content` (DeepSeek, vLLM, Qwen) or
/// `reasoning` (Ollama, newer vLLM).
pub(crate) fn reasoning_text(msg: &Value) -> Option<&str> {
    msg.get("reasoning_content")
        .and_then(Value::as_str)
        .or_else(|| msg.get("reasoning").and_then(Value::as_str))
}

/// Text of an `arguments` field, which some servers send as an object instead of a string.
pub(crate) fn arguments_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// An `{"error": {...}}` object sent with status 200 (some servers do, in bodies and in streams).
pub(crate) fn error_in_body(v: &Value) -> Option<ModelError> {
    let err = v.get("error").filter(|e| !e.is_null())?;
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| err.to_string(), str::to_owned);
    Some(ModelError::Api {
        status: 200,
        message,
        code: err
            .get("code")
            .filter(|c| !c.is_null())
            .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned)),
    })
}

/// Reads a whole (non-streamed) response (G3, G4, G5).
pub(crate) fn parse_response(v: &Value) -> Result<ChatResponse, ModelError> {
    if let Some(err) = error_in_body(v) {
        return Err(err);
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| ModelError::malformed("response", "no choices[0]", &v.to_string()))?;
    let msg = choice.get("message").unwrap_or(&Value::Null);
    let content = msg
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let parts: Vec<Part> = reasoning_text(msg)
        .filter(|t| !t.is_empty())
        .map(|t| Part::Reasoning(Reasoning::new(PROVIDER, ReasoningKind::Full, t)))
        .into_iter()
        .collect();
    let mut tool_calls = Vec::new();
    let mut invalid = Vec::new();
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let f = c.get("function").unwrap_or(&Value::Null);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let raw = arguments_text(f.get("arguments")).unwrap_or_default();
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("call_{i}"), str::to_owned);
            match ToolCall::parse(id, name, &raw) {
                Ok(call) => tool_calls.push(call),
                Err(bad) => invalid.push(bad),
            }
        }
    }
    let has_calls = !tool_calls.is_empty() || !invalid.is_empty();
    let finish_reason = finish_reason(choice).unwrap_or_else(|| default_finish(has_calls));
    Ok(
        ChatResponse::new(content, tool_calls, finish_reason, usage(v))
            .with_invalid_tool_calls(invalid)
            .with_parts(parts),
    )
}
