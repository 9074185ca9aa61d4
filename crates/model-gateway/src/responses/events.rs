//! The answer side of the Responses wire: output items, usage, finish reasons, errors, and the
//! state machine of a streamed answer.
//!
//! This file needs nothing but `serde_json` and `toolwright-core`, so the fuzz target and the
//! stream bench include it as it is (`#[path]`) and exercise exactly this code.

use serde_json::Value;
use toolwright_core::{
    ChatEvent, FinishReason, InvalidToolCall, ModelError, Part, Reasoning, ReasoningKind, ToolCall,
    Usage,
};

/// The tag of the reasoning this wire makes and replays.
pub(crate) const PROVIDER: &str = "openai-responses";

/// The normalized usage of a `usage` object: `input_tokens` already counts the cached ones and
/// `output_tokens` the reasoning ones, as [`Usage`] wants.
pub(crate) fn usage(u: &Value) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    let n = |path: &[&str]| {
        path.iter()
            .try_fold(u, |v, k| v.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(u32::MAX as u64) as u32
    };
    let prompt = n(&["input_tokens"]);
    let completion = n(&["output_tokens"]);
    let total = match u.get("total_tokens").and_then(Value::as_u64) {
        Some(t) => t.min(u32::MAX as u64) as u32,
        None => prompt.saturating_add(completion),
    };
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
        cache_read_tokens: n(&["input_tokens_details", "cached_tokens"]),
        cache_write_tokens: n(&["input_tokens_details", "cache_write_tokens"]),
        reasoning_tokens: n(&["output_tokens_details", "reasoning_tokens"]),
    })
}

/// Why a response ended: tool calls win; otherwise its `status` and `incomplete_details`.
pub(crate) fn finish_reason(response: &Value, has_calls: bool) -> FinishReason {
    if has_calls {
        return FinishReason::ToolCalls;
    }
    match response.get("status").and_then(Value::as_str) {
        Some("incomplete") => {
            let reason = response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match reason {
                // `max_output_tokens` in the SDK's types, `max_tokens` in one reference example.
                "max_output_tokens" | "max_tokens" => FinishReason::Length,
                "content_filter" => FinishReason::ContentFilter,
                "" => FinishReason::Other("incomplete".into()),
                other => FinishReason::Other(other.to_owned()),
            }
        }
        _ => FinishReason::Stop,
    }
}

/// The HTTP status an error code of a failed response stands for: rate limits are 429, the
/// server's own failures 5xx (both transient), the rest a problem with the request (400).
fn status_of(code: Option<&str>) -> u16 {
    match code {
        Some("rate_limit_exceeded") => 429,
        None | Some("server_error") | Some("vector_store_timeout") => 500,
        Some(_) => 400,
    }
}

/// A typed error from an `error` object (`{code, message}`) of a failed response or of an
/// `error` event; the code is also read from a nested `error` object or its `type`.
pub(crate) fn api_error(v: &Value) -> ModelError {
    let err = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
    let text = |k: &str| {
        err.get(k)
            .filter(|c| !c.is_null())
            .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned))
    };
    let code = text("code").or_else(|| text("type"));
    let message = text("message").unwrap_or_else(|| {
        "the response failed without a message; retry, or check the request".into()
    });
    ModelError::Api {
        status: status_of(code.as_deref()),
        message,
        code,
    }
}

/// The reasoning parts of a `reasoning` output item: one per summary part (so that they go back
/// as the same summary parts), one per `reasoning_text` content part, or one `Redacted` part
/// when the item holds only `encrypted_content`. The first carries the encrypted content; all
/// carry the item's id, which groups them again on the way back.
pub(crate) fn reasoning_parts(item: &Value) -> Result<Vec<Part>, ModelError> {
    let Some(id) = item.get("id").and_then(Value::as_str) else {
        return Err(ModelError::malformed(
            "response",
            "a reasoning item without its id cannot be sent back",
            &item.to_string(),
        ));
    };
    let texts = |key: &str| -> Vec<String> {
        item.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|s| {
                        s.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut parts: Vec<Reasoning> = texts("summary")
        .into_iter()
        .map(|t| Reasoning::new(PROVIDER, ReasoningKind::Summary, t))
        .chain(
            texts("content")
                .into_iter()
                .map(|t| Reasoning::new(PROVIDER, ReasoningKind::Full, t)),
        )
        .collect();
    if parts.is_empty() {
        parts.push(Reasoning::new(PROVIDER, ReasoningKind::Redacted, ""));
    }
    let encrypted = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty());
    Ok(parts
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let r = r.with_id(id);
            Part::Reasoning(match (i, encrypted) {
                (0, Some(e)) => r.with_encrypted(e),
                _ => r,
            })
        })
        .collect())
}

/// Ties each reasoning item to the function call right after it (`Reasoning::call_id`), so
/// that the items go back in the order the model made them.
fn tie_to_next_call(parts: &mut [Part], next_call: Option<&str>) {
    if let Some(call_id) = next_call {
        for p in parts {
            if let Part::Reasoning(r) = p {
                r.call_id = Some(call_id.to_owned());
            }
        }
    }
}

/// The text of a `message` output item: its `output_text` parts and any `refusal`.
fn message_text(item: &Value, out: &mut String) {
    for c in item
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = match c.get("type").and_then(Value::as_str) {
            Some("refusal") => c.get("refusal"),
            _ => c.get("text"),
        };
        if let Some(t) = text.and_then(Value::as_str) {
            out.push_str(t);
        }
    }
}

/// A call's id: its `call_id`, or the item's id, or its position.
fn call_id(item: &Value, index: usize) -> String {
    ["call_id", "id"]
        .iter()
        .find_map(|k| {
            item.get(*k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
        .map_or_else(|| format!("call_{index}"), str::to_owned)
}

/// What the `output` array of a response holds, in the seam's terms.
#[derive(Debug, Default)]
pub(crate) struct Output {
    pub(crate) content: String,
    pub(crate) parts: Vec<Part>,
    pub(crate) calls: Vec<ToolCall>,
    pub(crate) invalid: Vec<InvalidToolCall>,
}

/// Reads the `output` items of a whole response. Items of built-in tools (never bound here)
/// are skipped.
pub(crate) fn read_output(output: &[Value]) -> Result<Output, ModelError> {
    let mut out = Output::default();
    let kind = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_owned);
    for (i, item) in output.iter().enumerate() {
        match kind(item).as_deref() {
            Some("reasoning") => {
                let mut parts = reasoning_parts(item)?;
                let next = output.get(i + 1);
                if let Some(next) = next.filter(|n| kind(n).as_deref() == Some("function_call")) {
                    let n = out.calls.len() + out.invalid.len();
                    tie_to_next_call(&mut parts, Some(&call_id(next, n)));
                }
                out.parts.extend(parts);
            }
            Some("message") => message_text(item, &mut out.content),
            Some("function_call") => {
                let id = call_id(item, out.calls.len() + out.invalid.len());
                let name = item.get("name").and_then(Value::as_str).unwrap_or_default();
                let args = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match ToolCall::parse(id, name, args) {
                    Ok(c) => out.calls.push(c),
                    Err(bad) => out.invalid.push(bad),
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// One function call being streamed.
#[derive(Debug)]
struct StreamedCall {
    output_index: Option<u64>,
    item_id: Option<String>,
    call_id: String,
    name: String,
    arguments: String,
}

/// The state of one streamed answer: feed it each event's JSON with [`StreamParser::on_event`]
/// and tell it the stream ended with [`StreamParser::on_end`].
///
/// Text, reasoning and argument deltas are passed on as they come. The whole reasoning parts
/// (with their encrypted content), the calls and `Finish` follow only on `response.completed`
/// or `response.incomplete`: a stream that stops before either is
/// [`ModelError::StreamInterrupted`], never a shorter answer presented as whole.
#[derive(Debug, Default)]
pub(crate) struct StreamParser {
    text: String,
    calls: Vec<StreamedCall>,
    /// Reasoning parts of each finished reasoning item, by output index.
    reasoning: Vec<(Option<u64>, Vec<Part>)>,
    /// The call id of each function-call item, by output index.
    call_at: Vec<(u64, String)>,
    /// Output items added and not yet done: (output index, type).
    open: Vec<(Option<u64>, String)>,
    finished: bool,
}

impl StreamParser {
    /// A parser for a new stream.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether the stream's final event came.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// The text streamed so far (for an interrupted stream's error).
    pub(crate) fn take_text(&mut self) -> String {
        std::mem::take(&mut self.text)
    }

    fn call_for(&mut self, v: &Value) -> Option<usize> {
        let item_id = v.get("item_id").and_then(Value::as_str);
        let index = v.get("output_index").and_then(Value::as_u64);
        self.calls
            .iter()
            .position(|c| item_id.is_some() && c.item_id.as_deref() == item_id)
            .or_else(|| {
                index.and_then(|i| self.calls.iter().position(|c| c.output_index == Some(i)))
            })
    }

    fn close(&mut self, index: Option<u64>) {
        if let Some(at) = self.open.iter().position(|(i, _)| *i == index) {
            self.open.remove(at);
        }
    }

    /// Handles one event, appending what it means to `out`.
    pub(crate) fn on_event(
        &mut self,
        v: &Value,
        out: &mut Vec<ChatEvent>,
    ) -> Result<(), ModelError> {
        if self.finished {
            return Ok(());
        }
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let delta = || {
            v.get("delta")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
        };
        let output_index = v.get("output_index").and_then(Value::as_u64);
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(d) = delta() {
                    self.text.push_str(d);
                    out.push(ChatEvent::TextDelta(d.to_owned()));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(d) = delta() {
                    out.push(ChatEvent::ReasoningDelta(d.to_owned()));
                }
            }
            // Readers of the deltas see the summary's parts apart, as the parts keep them.
            "response.reasoning_summary_part.added"
                if v.get("summary_index").and_then(Value::as_u64).unwrap_or(0) > 0 =>
            {
                out.push(ChatEvent::ReasoningDelta("\n\n".into()));
            }
            "response.output_item.added" => {
                let item = v.get("item").unwrap_or(&Value::Null);
                let item_kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
                self.open.push((output_index, item_kind.to_owned()));
                if item_kind == "function_call" {
                    let index = self.calls.len();
                    let call = StreamedCall {
                        output_index,
                        item_id: item.get("id").and_then(Value::as_str).map(str::to_owned),
                        call_id: call_id(item, index),
                        name: item
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        arguments: item
                            .get("arguments")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    };
                    out.push(ChatEvent::ToolCallDelta {
                        index,
                        id: Some(call.call_id.clone()),
                        name: Some(call.name.clone()),
                        arguments: call.arguments.clone(),
                    });
                    self.calls.push(call);
                }
            }
            "response.function_call_arguments.delta" => {
                if let (Some(i), Some(d)) = (self.call_for(v), delta()) {
                    self.calls[i].arguments.push_str(d);
                    out.push(ChatEvent::ToolCallDelta {
                        index: i,
                        id: None,
                        name: None,
                        arguments: d.to_owned(),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(i), Some(a)) =
                    (self.call_for(v), v.get("arguments").and_then(Value::as_str))
                {
                    self.calls[i].arguments = a.to_owned();
                }
            }
            "response.output_item.done" => {
                self.close(output_index);
                let item = v.get("item").unwrap_or(&Value::Null);
                match item.get("type").and_then(Value::as_str) {
                    Some("reasoning") => {
                        let parts = reasoning_parts(item)?;
                        self.reasoning.push((output_index, parts));
                    }
                    Some("function_call") => {
                        let by_item = serde_json::json!({
                            "item_id": item.get("id"), "output_index": output_index});
                        let i = match self.call_for(&by_item) {
                            Some(i) => i,
                            None => {
                                // Done without having been added: take it whole.
                                let index = self.calls.len();
                                self.calls.push(StreamedCall {
                                    output_index,
                                    item_id: item
                                        .get("id")
                                        .and_then(Value::as_str)
                                        .map(str::to_owned),
                                    call_id: call_id(item, index),
                                    name: String::new(),
                                    arguments: String::new(),
                                });
                                index
                            }
                        };
                        let call = &mut self.calls[i];
                        if let Some(id) = item.get("call_id").and_then(Value::as_str) {
                            call.call_id = id.to_owned();
                        }
                        if let Some(name) = item.get("name").and_then(Value::as_str) {
                            call.name = name.to_owned();
                        }
                        if let Some(a) = item.get("arguments").and_then(Value::as_str) {
                            call.arguments = a.to_owned();
                        }
                        if let Some(i) = output_index {
                            self.call_at.push((i, call.call_id.clone()));
                        }
                    }
                    _ => {}
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = v.get("response").unwrap_or(&Value::Null);
                self.finish(response, out)?;
            }
            "response.failed" => {
                self.finished = true;
                let response = v.get("response").unwrap_or(&Value::Null);
                return Err(api_error(response.get("error").unwrap_or(response)));
            }
            "error" => {
                self.finished = true;
                return Err(api_error(v));
            }
            // response.created, response.in_progress, response.queued, content_part.*,
            // *.done of texts and summaries (their deltas carried them), annotations, and
            // the events of built-in tools, which are never bound here.
            _ => {}
        }
        Ok(())
    }

    /// The end of the answer: its parts, its calls, `Finish`.
    fn finish(&mut self, response: &Value, out: &mut Vec<ChatEvent>) -> Result<(), ModelError> {
        self.finished = true;
        let streamed_nothing =
            self.text.is_empty() && self.calls.is_empty() && self.reasoning.is_empty();
        let usage = response.get("usage").and_then(usage);
        if let (true, Some(items)) = (
            streamed_nothing,
            response
                .get("output")
                .and_then(Value::as_array)
                .filter(|o| !o.is_empty()),
        ) {
            // A server (or proxy) that sent the answer only whole, in the final event.
            let whole = read_output(items)?;
            let has_calls = !whole.calls.is_empty() || !whole.invalid.is_empty();
            if !whole.content.is_empty() {
                out.push(ChatEvent::TextDelta(whole.content));
            }
            out.extend(whole.parts.into_iter().map(ChatEvent::Part));
            out.extend(whole.calls.into_iter().map(ChatEvent::ToolCall));
            out.extend(whole.invalid.into_iter().map(ChatEvent::InvalidToolCall));
            out.push(ChatEvent::Finish {
                reason: finish_reason(response, has_calls),
                usage,
            });
            return Ok(());
        }
        let call_at = std::mem::take(&mut self.call_at);
        for (index, mut parts) in std::mem::take(&mut self.reasoning) {
            let next = index.and_then(|i| {
                call_at
                    .iter()
                    .find(|(at, _)| *at == i + 1)
                    .map(|(_, id)| id.as_str())
            });
            tie_to_next_call(&mut parts, next);
            out.extend(parts.into_iter().map(ChatEvent::Part));
        }
        let has_calls = !self.calls.is_empty();
        for c in std::mem::take(&mut self.calls) {
            out.push(match ToolCall::parse(c.call_id, c.name, &c.arguments) {
                Ok(call) => ChatEvent::ToolCall(call),
                Err(bad) => ChatEvent::InvalidToolCall(bad),
            });
        }
        out.push(ChatEvent::Finish {
            reason: finish_reason(response, has_calls),
            usage,
        });
        Ok(())
    }

    /// The stream closed: an error unless its final event came.
    pub(crate) fn on_end(&mut self) -> Result<(), ModelError> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let detail = match self.open.last() {
            Some((index, kind)) => format!(
                "the stream closed inside output item {} ({kind}), before response.completed",
                index.map_or_else(|| "?".into(), |i| i.to_string())
            ),
            None => "the stream closed before response.completed".into(),
        };
        Err(ModelError::StreamInterrupted {
            detail,
            partial_text: self.take_text(),
        })
    }
}
