//! Anthropic's Messages API wire format, inbound: a whole response, the error body, and the
//! state machine of a streamed answer.

use std::collections::VecDeque;

use serde_json::{Map, Value, json};

use super::request::PROVIDER;
use crate::default_finish;
use crate::{ChatEvent, ChatResponse, FinishReason, ModelError, ToolCall, Usage};
use toolwright_core::{Part, Reasoning, ReasoningKind};

/// The HTTP status Anthropic documents for an error type (an error event mid-stream comes
/// with HTTP 200; its type says what it would have been).
fn error_status(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// The `{"type":"error","error":{"type":…,"message":…}}` object as a typed error.
fn error_object(status: Option<u16>, v: &Value) -> Option<ModelError> {
    let err = v.get("error").filter(|e| e.is_object())?;
    let kind = err.get("type").and_then(Value::as_str);
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| err.to_string(), str::to_owned);
    Some(ModelError::Api {
        status: status.unwrap_or_else(|| error_status(kind.unwrap_or_default())),
        message,
        code: kind.map(str::to_owned),
    })
}

/// A non-2xx answer as a typed error: the error body's type is the code.
pub(crate) fn api_error(status: u16, text: &str) -> ModelError {
    let parsed = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| error_object(Some(status), &v));
    let mut err = parsed.unwrap_or_else(|| ModelError::Api {
        status,
        message: text.trim().to_owned(),
        code: None,
    });
    if let ModelError::Api { message, .. } = &mut err
        && matches!(status, 401 | 403)
    {
        message.push_str(&format!(" [the key comes from {}]", super::env::API_KEY));
    }
    err
}

fn count(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .map(|n| n.min(u64::from(u32::MAX)) as u32)
}

/// Anthropic's usage as it accumulates over a stream: `message_start` gives the input side,
/// `message_delta` the output (and again the input, on newer models).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UsageAcc {
    input: u32,
    cache_write: u32,
    cache_read: u32,
    output: u32,
    thinking: u32,
    seen: bool,
}

impl UsageAcc {
    /// Takes in the counts an object carries; absent ones keep their value.
    pub(crate) fn update(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        self.seen = true;
        let set = |slot: &mut u32, v: Option<&Value>| {
            if let Some(n) = count(v) {
                *slot = n;
            }
        };
        set(&mut self.input, u.get("input_tokens"));
        set(&mut self.cache_write, u.get("cache_creation_input_tokens"));
        set(&mut self.cache_read, u.get("cache_read_input_tokens"));
        set(&mut self.output, u.get("output_tokens"));
        set(
            &mut self.thinking,
            u.get("output_tokens_details")
                .and_then(|d| d.get("thinking_tokens")),
        );
    }

    /// The normalized usage: every input token in `prompt_tokens`.
    pub(crate) fn usage(&self) -> Option<Usage> {
        if !self.seen {
            return None;
        }
        let prompt = self
            .input
            .saturating_add(self.cache_write)
            .saturating_add(self.cache_read);
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: self.output,
            total_tokens: prompt.saturating_add(self.output),
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
            reasoning_tokens: self.thinking,
        })
    }
}

/// A `stop_reason` as the seam's finish reason.
pub(crate) fn finish_reason(s: &str) -> Option<FinishReason> {
    Some(match s {
        "" => return None,
        "refusal" => FinishReason::ContentFilter,
        "model_context_window_exceeded" => FinishReason::Length,
        other => FinishReason::from_wire(other)?,
    })
}

fn thinking_part(text: String, signature: Option<String>) -> Part {
    let r = Reasoning::new(PROVIDER, ReasoningKind::Full, text);
    Part::Reasoning(match signature {
        Some(s) if !s.is_empty() => r.with_signature(s),
        _ => r,
    })
}

fn redacted_part(data: String) -> Part {
    Part::Reasoning(Reasoning::new(PROVIDER, ReasoningKind::Redacted, "").with_encrypted(data))
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Reads a whole (non-streamed) message.
pub(crate) fn parse_response(v: &Value) -> Result<ChatResponse, ModelError> {
    if let Some(err) = error_object(None, v).filter(|_| v.get("type") == Some(&json!("error"))) {
        return Err(err);
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::malformed("response", "no content array", &v.to_string()))?;
    let mut content = String::new();
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "text" => content.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            "thinking" => parts.push(thinking_part(
                str_field(block, "thinking"),
                block
                    .get("signature")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )),
            "redacted_thinking" => parts.push(redacted_part(str_field(block, "data"))),
            "tool_use" => {
                let id = block
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map_or_else(|| format!("call_{i}"), str::to_owned);
                let input = block
                    .get("input")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                calls.push(ToolCall::new(id, str_field(block, "name"), input));
            }
            other => tracing::debug!(block = other, "content block of a type not read"),
        }
    }
    let mut usage = UsageAcc::default();
    if let Some(u) = v.get("usage") {
        usage.update(u);
    }
    let reason = v
        .get("stop_reason")
        .and_then(Value::as_str)
        .and_then(finish_reason)
        .unwrap_or_else(|| default_finish(!calls.is_empty()));
    Ok(ChatResponse::new(content, calls, reason, usage.usage()).with_parts(parts))
}

/// One content block of a streamed message as it forms.
#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Redacted {
        data: String,
    },
    ToolUse {
        call: usize,
        id: String,
        name: String,
        json: String,
    },
    /// A block of a type this wire does not read (a server tool's, …).
    Other,
}

/// The state machine of a streamed message: takes SSE events, gives [`ChatEvent`]s.
///
/// Order of what it gives: text, reasoning and tool-call deltas as they come; at
/// `message_stop` the whole reasoning parts (with their signatures) in block order, then
/// the tool calls (or invalid ones) in block order, then `Finish`. Nothing whole is given
/// before `message_stop`: a stream cut anywhere before it is an error, never an answer.
#[derive(Debug, Default)]
pub(crate) struct StreamParser {
    /// Blocks by their `index`, with whether each is still open.
    blocks: Vec<Option<(Block, bool)>>,
    calls: usize,
    text: String,
    stop_reason: Option<String>,
    usage: UsageAcc,
    started: bool,
    stopped: bool,
    /// Events ready to give.
    pub(crate) pending: VecDeque<Result<ChatEvent, ModelError>>,
}

/// Blocks beyond this index are refused (the API numbers them from 0, one per block).
const MAX_BLOCK_INDEX: usize = 4096;

impl StreamParser {
    /// Whether `message_stop` was seen (the stream is whole).
    pub(crate) fn is_done(&self) -> bool {
        self.stopped
    }

    fn malformed(detail: impl ToString, data: &str) -> ModelError {
        ModelError::malformed("stream chunk", detail, data)
    }

    fn block(&mut self, v: &Value, data: &str) -> Result<(usize, &mut Block), ModelError> {
        let index = count(v.get("index")).map(|i| i as usize);
        let Some(i) = index else {
            return Err(Self::malformed("no block index", data));
        };
        match self.blocks.get_mut(i) {
            Some(Some((block, true))) => Ok((i, block)),
            Some(Some((_, false))) => Err(Self::malformed(
                format!("an event for block {i}, which was already stopped"),
                data,
            )),
            _ => Err(Self::malformed(
                format!("an event for block {i}, which was never started"),
                data,
            )),
        }
    }

    /// Takes one SSE event (its `event:` name and `data:` text).
    pub(crate) fn on_event(&mut self, event: &str, data: &str) -> Result<(), ModelError> {
        if self.stopped {
            return Ok(());
        }
        if data.trim().is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| Self::malformed(e, data))?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event)
            .to_owned();
        match kind.as_str() {
            "message_start" => {
                self.started = true;
                if let Some(u) = v.get("message").and_then(|m| m.get("usage")) {
                    self.usage.update(u);
                }
            }
            "content_block_start" => {
                let i = count(v.get("index"))
                    .map(|i| i as usize)
                    .filter(|&i| i <= MAX_BLOCK_INDEX)
                    .ok_or_else(|| Self::malformed("no usable block index", data))?;
                if self.blocks.get(i).is_some_and(Option::is_some) {
                    return Err(Self::malformed(format!("block {i} started twice"), data));
                }
                let cb = v.get("content_block").unwrap_or(&Value::Null);
                let block = match cb.get("type").and_then(Value::as_str).unwrap_or_default() {
                    "text" => {
                        let t = str_field(cb, "text");
                        if !t.is_empty() {
                            self.text.push_str(&t);
                            self.pending.push_back(Ok(ChatEvent::TextDelta(t)));
                        }
                        Block::Text
                    }
                    "thinking" => {
                        let t = str_field(cb, "thinking");
                        if !t.is_empty() {
                            self.pending
                                .push_back(Ok(ChatEvent::ReasoningDelta(t.clone())));
                        }
                        Block::Thinking {
                            text: t,
                            signature: cb
                                .get("signature")
                                .and_then(Value::as_str)
                                .filter(|s| !s.is_empty())
                                .map(str::to_owned),
                        }
                    }
                    "redacted_thinking" => Block::Redacted {
                        data: str_field(cb, "data"),
                    },
                    "tool_use" => {
                        let call = self.calls;
                        self.calls += 1;
                        let id = cb
                            .get("id")
                            .and_then(Value::as_str)
                            .filter(|s| !s.is_empty())
                            .map_or_else(|| format!("call_{call}"), str::to_owned);
                        let name = str_field(cb, "name");
                        self.pending.push_back(Ok(ChatEvent::ToolCallDelta {
                            index: call,
                            id: Some(id.clone()),
                            name: Some(name.clone()),
                            arguments: String::new(),
                        }));
                        Block::ToolUse {
                            call,
                            id,
                            name,
                            json: String::new(),
                        }
                    }
                    _ => Block::Other,
                };
                if self.blocks.len() <= i {
                    self.blocks.resize_with(i + 1, || None);
                }
                self.blocks[i] = Some((block, true));
            }
            "content_block_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                let dkind = delta
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let field = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default();
                let (i, block) = self.block(&v, data)?;
                let event = match (dkind.as_str(), block) {
                    ("text_delta", Block::Text) => {
                        let t = field("text").to_owned();
                        self.text.push_str(&t);
                        (!t.is_empty()).then_some(ChatEvent::TextDelta(t))
                    }
                    ("input_json_delta", Block::ToolUse { call, json, .. }) => {
                        let t = field("partial_json");
                        json.push_str(t);
                        (!t.is_empty()).then(|| ChatEvent::ToolCallDelta {
                            index: *call,
                            id: None,
                            name: None,
                            arguments: t.to_owned(),
                        })
                    }
                    ("thinking_delta", Block::Thinking { text, .. }) => {
                        let t = field("thinking");
                        text.push_str(t);
                        (!t.is_empty()).then(|| ChatEvent::ReasoningDelta(t.to_owned()))
                    }
                    ("signature_delta", Block::Thinking { signature, .. }) => {
                        // The signature comes whole, once, just before the block stops.
                        *signature = Some(field("signature").to_owned());
                        None
                    }
                    ("signature_delta", _) => {
                        return Err(Self::malformed(
                            format!("a signature for block {i}, which is not a thinking block"),
                            data,
                        ));
                    }
                    ("text_delta" | "input_json_delta" | "thinking_delta", _) => {
                        return Err(Self::malformed(
                            format!("a {dkind} for block {i} of another type"),
                            data,
                        ));
                    }
                    // Citations and deltas of blocks not read here.
                    _ => None,
                };
                if let Some(e) = event {
                    self.pending.push_back(Ok(e));
                }
            }
            "content_block_stop" => {
                let (i, _) = self.block(&v, data)?;
                if let Some(Some((_, open))) = self.blocks.get_mut(i) {
                    *open = false;
                }
            }
            "message_delta" => {
                if let Some(r) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    self.usage.update(u);
                }
            }
            "message_stop" => {
                if !self.started {
                    return Err(Self::malformed("message_stop before message_start", data));
                }
                self.finish();
            }
            "error" => {
                return Err(error_object(None, &v)
                    .unwrap_or_else(|| Self::malformed("an error event without an error", data)));
            }
            // `ping`, and event types added later (the API's versioning allows them).
            _ => {}
        }
        Ok(())
    }

    /// `message_stop`: the whole parts, calls and the finish, in that order. A block left
    /// open is one the model was cut off in (`max_tokens`): its text stands, and a cut
    /// tool call's arguments do not parse.
    fn finish(&mut self) {
        self.stopped = true;
        let mut calls = Vec::new();
        for (block, _) in self.blocks.drain(..).flatten() {
            match block {
                Block::Thinking { text, signature } => self
                    .pending
                    .push_back(Ok(ChatEvent::Part(thinking_part(text, signature)))),
                Block::Redacted { data } => self
                    .pending
                    .push_back(Ok(ChatEvent::Part(redacted_part(data)))),
                Block::ToolUse { id, name, json, .. } => {
                    calls.push(ToolCall::parse(id, name, &json))
                }
                Block::Text | Block::Other => {}
            }
        }
        let has_calls = !calls.is_empty();
        for call in calls {
            self.pending.push_back(Ok(match call {
                Ok(c) => ChatEvent::ToolCall(c),
                Err(bad) => ChatEvent::InvalidToolCall(bad),
            }));
        }
        let reason = self
            .stop_reason
            .as_deref()
            .and_then(finish_reason)
            .unwrap_or_else(|| default_finish(has_calls));
        self.pending.push_back(Ok(ChatEvent::Finish {
            reason,
            usage: self.usage.usage(),
        }));
    }

    /// The end of the SSE stream: whole after `message_stop`, else an interruption.
    pub(crate) fn on_end(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let open = self
            .blocks
            .iter()
            .enumerate()
            .find_map(|(i, b)| matches!(b, Some((_, true))).then_some(i));
        let detail = match open {
            Some(i) => format!("the stream closed inside content block {i}"),
            None => "the stream closed before message_stop".to_owned(),
        };
        self.pending.push_back(Err(ModelError::StreamInterrupted {
            detail,
            partial_text: std::mem::take(&mut self.text),
        }));
    }

    /// The text received so far (for an interruption's `partial_text`).
    pub(crate) fn take_text(&mut self) -> String {
        std::mem::take(&mut self.text)
    }
}
