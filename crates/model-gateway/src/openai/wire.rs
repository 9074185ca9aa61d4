//! The OpenAI chat-completions wire format, read leniently: real "OpenAI-compatible" servers
//! omit fields, send empty strings, add fields of their own, and number tool calls differently.

use serde_json::{Map, Value, json};

use crate::default_finish;
use crate::{
    ChatRequest, ChatResponse, FinishReason, Message, ModelError, ResponseFormat, ToolCall,
    ToolChoice, Usage,
};

/// Builds the JSON body. With no tools bound there is no `tools` field at all (G2).
pub(crate) fn request_body(
    req: &ChatRequest,
    model: &str,
    stream: bool,
    stream_usage: bool,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model.as_deref().unwrap_or(model)));
    body.insert(
        "messages".into(),
        Value::Array(req.messages.iter().map(message).collect()),
    );
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
    body.insert("stream".into(), json!(stream));
    if stream && stream_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

fn message(m: &Message) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } if tool_calls.is_empty() => {
            json!({"role": "assistant", "content": content})
        }
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function", "function": {
                        "name": c.name, "arguments": c.arguments_text()}})
                })
                .collect();
            // `""`, never `null`, for a call without text: OpenAI accepts both, but
            // llama-cpp-python's server answers `null` with HTTP 500.
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
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
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0) as u32;
    Some(Usage {
        prompt_tokens: n("prompt_tokens"),
        completion_tokens: n("completion_tokens"),
        total_tokens: n("total_tokens"),
    })
}

pub(crate) fn finish_reason(choice: &Value) -> Option<FinishReason> {
    choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .and_then(FinishReason::from_wire)
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
            .with_invalid_tool_calls(invalid),
    )
}
