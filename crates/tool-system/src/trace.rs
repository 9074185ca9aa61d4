//! Trace spans for a run, a model call and a tool call, named and attributed as OpenTelemetry's
//! GenAI semantic conventions say (`invoke_agent`, `chat {model}`, `execute_tool {tool}`).
//!
//! Plain `tracing` spans: this crate knows nothing of OpenTelemetry; an exporter (the
//! `telemetry` crate) turns them into OTLP. With no subscriber, or one that does not want them,
//! each span costs one callsite check: every field value below is computed only for an
//! enabled span (`tracing`'s macros evaluate values only then, and the `record` calls are
//! behind [`Span::is_disabled`]).
//!
//! Message text, tool arguments and results go on spans only when
//! [`toolwright_core::telemetry::capture_message_content`] is on (the `telemetry` crate turns it on
//! for `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).

use serde_json::{Value, json};
use std::pin::Pin;
use toolwright_core::{ChatRequest, MediaSource, Message, ModelInfo, Part, ToolErrorKind, Usage};

use tracing::Span;
use tracing::field::Empty;

use crate::protocols::{Reading, Step};

pin_project_lite::pin_project! {
    /// A future polled inside a span: what [`tracing::Instrument`] does (the span is entered
    /// for each poll, and for dropping a future that did not finish, so that what a cancelled
    /// tool logs then stays in its span), without cloning the span and without entering it
    /// once more to drop a future that did finish (two registry calls each way, per span).
    pub(crate) struct InSpan<'a, F> {
        span: &'a Span,
        #[pin]
        fut: Option<F>,
    }
    impl<'a, F> PinnedDrop for InSpan<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.fut.is_some() {
                let _entered = this.span.enter();
                this.fut.set(None);
            }
        }
    }
}

impl<F: std::future::Future> std::future::Future for InSpan<'_, F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let mut this = self.project();
        let _entered = this.span.enter();
        let Some(fut) = this.fut.as_mut().as_pin_mut() else {
            // Polled after it finished: a caller's bug; never ready again.
            return std::task::Poll::Pending;
        };
        let out = fut.poll(cx);
        if out.is_ready() {
            this.fut.set(None);
        }
        out
    }
}

/// `fut`, polled inside `span` ([`InSpan`]).
pub(crate) fn in_span<F: std::future::Future>(span: &Span, fut: F) -> InSpan<'_, F> {
    InSpan {
        span,
        fut: Some(fut),
    }
}

/// The span of one run (`invoke_agent`); the model and tool calls of the run are its children.
/// The model's name and provider are recorded by [`run_model`] once the run has asked.
pub(crate) fn run_span(session_id: &str) -> Span {
    tracing::info_span!(
        "invoke_agent",
        "otel.name" = "invoke_agent",
        "gen_ai.operation.name" = "invoke_agent",
        "gen_ai.provider.name" = Empty,
        "gen_ai.request.model" = Empty,
        "gen_ai.conversation.id" = session_id,
        "gen_ai.usage.input_tokens" = Empty,
        "gen_ai.usage.output_tokens" = Empty,
        "gen_ai.usage.cache_read.input_tokens" = Empty,
        "gen_ai.usage.cache_creation.input_tokens" = Empty,
        "gen_ai.usage.reasoning.output_tokens" = Empty,
        "error.type" = Empty,
        "otel.status_code" = Empty,
    )
}

/// Records the run's model on its span (the run asks the model for its info once, for both).
pub(crate) fn run_model(span: &Span, info: &ModelInfo) {
    if !span.is_disabled() {
        record_model(span, info);
    }
}

/// Records the run's outcome: its token usage, or why it failed (`error.type`: a
/// low-cardinality name, never the message).
pub(crate) fn run_done(span: &Span, result: Result<Option<Usage>, &str>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(usage) => record_usage(span, usage),
        Err(error_type) => record_error(span, error_type),
    }
}

/// The span of one model call (`chat {model}`, kind client), a child of the run's span: given,
/// not looked up (the registry's lookup of the current span is a tenth of a span's cost). When
/// a filter left the run's span out, the current span is the parent, as for any span.
pub(crate) fn chat_span(run: &Span, info: &ModelInfo, request: &ChatRequest) -> Span {
    macro_rules! chat_span {
        ($($parent:tt)*) => {
            tracing::info_span!(
                $($parent)*
                "chat",
                "otel.name" = %format_args!("chat {}", info.model),
                "otel.kind" = "client",
                "gen_ai.operation.name" = "chat",
                "gen_ai.provider.name" = info.provider.as_deref(),
                "gen_ai.request.model" = info.model.as_str(),
                "gen_ai.usage.input_tokens" = Empty,
                "gen_ai.usage.output_tokens" = Empty,
                "gen_ai.usage.cache_read.input_tokens" = Empty,
                "gen_ai.usage.cache_creation.input_tokens" = Empty,
                "gen_ai.usage.reasoning.output_tokens" = Empty,
                "gen_ai.response.finish_reasons" = Empty,
                "gen_ai.input.messages" = Empty,
                "gen_ai.output.messages" = Empty,
                "error.type" = Empty,
                "otel.status_code" = Empty,
            )
        };
    }
    let span = if run.is_disabled() {
        chat_span!()
    } else {
        chat_span!(parent: run,)
    };
    if !span.is_disabled() && toolwright_core::telemetry::capture_message_content() {
        let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
        span.record(
            "gen_ai.input.messages",
            Value::Array(messages).to_string().as_str(),
        );
    }
    span
}

/// Records a model call's outcome: usage and what it answered, or why it failed.
/// `result` is what was read, or the failure's `error.type`.
pub(crate) fn chat_done(span: &Span, result: Result<&Reading, &str>, usage: Option<Usage>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(reading) => {
            record_usage(span, usage);
            let reason = if reading.calls().next().is_some() {
                r#"["tool_calls"]"#
            } else {
                r#"["stop"]"#
            };
            span.record("gen_ai.response.finish_reasons", reason);
            if toolwright_core::telemetry::capture_message_content() {
                span.record(
                    "gen_ai.output.messages",
                    json!([output_json(reading)]).to_string().as_str(),
                );
            }
        }
        Err(error_type) => record_error(span, error_type),
    }
}

/// The span of one tool call (`execute_tool {tool}`): a child of `parent` when given and
/// enabled (the run's span, given by the loop rather than looked up), else of the current span.
pub(crate) fn tool_span(
    parent: Option<&Span>,
    name: &str,
    call_id: &str,
    arguments: &Value,
) -> Span {
    macro_rules! tool_span {
        ($($parent:tt)*) => {
            tracing::info_span!(
                $($parent)*
                "execute_tool",
                "otel.name" = %format_args!("execute_tool {name}"),
                "gen_ai.operation.name" = "execute_tool",
                "gen_ai.tool.name" = name,
                "gen_ai.tool.call.id" = call_id,
                "gen_ai.tool.type" = "function",
                "gen_ai.tool.call.arguments" = Empty,
                "gen_ai.tool.call.result" = Empty,
                "error.type" = Empty,
                "otel.status_code" = Empty,
            )
        };
    }
    let span = match parent {
        Some(run) if !run.is_disabled() => tool_span!(parent: run,),
        _ => tool_span!(),
    };
    if !span.is_disabled() && toolwright_core::telemetry::capture_message_content() {
        span.record("gen_ai.tool.call.arguments", arguments.to_string().as_str());
    }
    span
}

/// Records a tool call's outcome: its result (when content is captured) or its error kind.
pub(crate) fn tool_done(span: &Span, error: Option<ToolErrorKind>, content: &str) {
    if span.is_disabled() {
        return;
    }
    if let Some(kind) = error {
        record_error(span, snake(&format!("{kind:?}")).as_str());
    }
    if toolwright_core::telemetry::capture_message_content() {
        span.record("gen_ai.tool.call.result", content);
    }
}

fn record_model(span: &Span, info: &ModelInfo) {
    span.record("gen_ai.request.model", info.model.as_str());
    if let Some(p) = &info.provider {
        span.record("gen_ai.provider.name", p.as_str());
    }
}

fn record_usage(span: &Span, usage: Option<Usage>) {
    if let Some(u) = usage {
        // As i64: OpenTelemetry has no unsigned integers (a u64 would arrive as a string).
        span.record("gen_ai.usage.input_tokens", i64::from(u.prompt_tokens));
        span.record("gen_ai.usage.output_tokens", i64::from(u.completion_tokens));
        // The cache and reasoning counts (OpenTelemetry's GenAI conventions' cache and
        // reasoning token attributes), when the provider reported any.
        for (name, n) in [
            ("gen_ai.usage.cache_read.input_tokens", u.cache_read_tokens),
            (
                "gen_ai.usage.cache_creation.input_tokens",
                u.cache_write_tokens,
            ),
            ("gen_ai.usage.reasoning.output_tokens", u.reasoning_tokens),
        ] {
            if n > 0 {
                span.record(name, i64::from(n));
            }
        }
    }
}

fn record_error(span: &Span, error_type: &str) {
    span.record("error.type", error_type);
    span.record("otel.status_code", "error");
}

/// `InvalidArguments` → `invalid_arguments`.
fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// One message in the GenAI conventions' shape: `{"role", "parts": [...]}`. Media are
/// named (modality, media type, URL), never copied into the trace.
fn message_json(m: &Message) -> Value {
    let mut parts = Vec::with_capacity(m.parts().len() + m.tool_calls().len() + 1);
    let role = match m {
        Message::System { .. } => "system",
        Message::User { .. } => "user",
        Message::Assistant { .. } => "assistant",
        Message::Tool { .. } => "tool",
    };
    // Reasoning comes first in a turn, as the model made it.
    parts.extend(m.parts().iter().filter_map(|p| match p {
        Part::Reasoning(r) => Some(json!({"type": "reasoning", "content": r.text})),
        _ => None,
    }));
    match m {
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => parts
            .push(json!({"type": "tool_call_response", "id": tool_call_id, "response": content})),
        _ if !m.content().is_empty() || m.parts().is_empty() && m.tool_calls().is_empty() => {
            parts.push(json!({"type": "text", "content": m.content()}))
        }
        _ => {}
    }
    parts.extend(m.parts().iter().filter_map(part_json));
    for c in m.tool_calls() {
        parts.push(
            json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}),
        );
    }
    json!({"role": role, "parts": parts})
}

/// A content part in the GenAI conventions' shape (`uri` or `blob` without its bytes).
fn part_json(p: &Part) -> Option<Value> {
    let (modality, media) = match p {
        Part::Text { text } => return Some(json!({"type": "text", "content": text})),
        Part::Image(m) => ("image", m),
        Part::Audio(m) => ("audio", m),
        Part::File(m) => ("file", m),
        Part::Resource(r) => {
            let modality = match r.media_type.split('/').next() {
                Some("image") => "image",
                Some("audio") => "audio",
                _ => "file",
            };
            return Some(
                json!({"type": "uri", "modality": modality, "mime_type": r.media_type, "uri": r.uri}),
            );
        }
        Part::Reasoning(_) | Part::CacheBreakpoint(_) => return None,
    };
    Some(match &media.source {
        MediaSource::Url { url } => {
            json!({"type": "uri", "modality": modality, "mime_type": media.media_type, "uri": url})
        }
        MediaSource::Base64 { .. } => {
            json!({"type": "blob", "modality": modality, "mime_type": media.media_type, "size": media.size()})
        }
    })
}

fn output_json(reading: &Reading) -> Value {
    let mut parts = Vec::new();
    if !reading.content.is_empty() {
        parts.push(json!({"type": "text", "content": reading.content}));
    }
    for step in &reading.steps {
        if let Step::Calls(calls) = step {
            for c in calls {
                parts.push(json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}));
            }
        }
    }
    let finish = if reading.calls().next().is_some() {
        "tool_call"
    } else {
        "stop"
    };
    json!({"role": "assistant", "parts": parts, "finish_reason": finish})
}

#[cfg(test)]
mod tests {
    use super::snake;

    #[test]
    fn error_kinds_become_snake_case() {
        assert_eq!(snake("InvalidArguments"), "invalid_arguments");
        assert_eq!(snake("Timeout"), "timeout");
        assert_eq!(snake("NotFound"), "not_found");
    }
}
