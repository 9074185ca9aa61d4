//! The Gemini `generateContent` wire: the request body, and the reading of answers (a whole
//! `GenerateContentResponse`, or the ones a stream sends one per event).
//!
//! Self-contained on purpose (serde_json and `toolwright_core` only): the fuzz target under
//! `fuzz/` compiles this file as it is.

use serde_json::{Map, Value, json};
use toolwright_core::{
    ChatEvent, ChatRequest, ChatResponse, FinishReason, InvalidToolCall, Media, MediaSource,
    Message, ModelError, Part, Reasoning, ReasoningKind, ResponseFormat, ToolCall, ToolChoice,
    Usage, lower_tool_parts,
};

/// The tag of the reasoning this wire makes and replays.
pub(crate) const PROVIDER: &str = "gemini";

/// The start of the ids this backend gives calls Gemini sent without one. Such an id is
/// never sent back to Gemini (it did not make it).
pub(crate) const ASSIGNED_ID_PREFIX: &str = "toolwright-gemini-";

/// The key a tool's result goes under when it is not a JSON object
/// (`FunctionResponse.response`: "Use 'output' key to specify function output").
pub(crate) const OUTPUT_KEY: &str = "output";

/// The key a recorded call's unparsable argument text goes under when it is sent back
/// (`functionCall.args` must be an object).
pub(crate) const RAW_ARGUMENTS_KEY: &str = "raw_arguments";

/// What the backend adds to every request besides the conversation.
#[derive(Debug, Clone, Default)]
pub(crate) struct Extras {
    /// `generationConfig.thinkingConfig`, when configured.
    pub(crate) thinking: Option<Value>,
}

/// What a function response can hold besides its JSON: inline media (`FunctionResponsePart`
/// has `inlineData`; its `fileData` is "not supported in Gemini API") and the text that joins
/// the output. Media by URL follows the results in a user message ([`lower_tool_parts`]).
pub(crate) fn tool_message_carries(part: &Part) -> bool {
    match part {
        Part::Image(m) | Part::Audio(m) | Part::File(m) => {
            matches!(m.source, MediaSource::Base64 { .. })
        }
        Part::Text { .. } | Part::Resource(_) | Part::Reasoning(_) | Part::CacheBreakpoint(_) => {
            true
        }
    }
}

/// The JSON body of a `generateContent` / `streamGenerateContent` request.
///
/// Keys go in a fixed order, the parts every round repeats first (system, tools, then the
/// contents in order), so round N+1's body starts with round N's up to its last content.
pub(crate) fn request_body(req: &ChatRequest, extras: &Extras) -> Result<Value, ModelError> {
    let lowered;
    let messages = if req.messages.iter().any(|m| {
        matches!(m, Message::Tool { parts, .. } if parts.iter().any(|p| !tool_message_carries(p)))
    }) {
        lowered = lower_tool_parts(&req.messages, tool_message_carries);
        &lowered
    } else {
        &req.messages
    };

    let mut system = Vec::new();
    let mut contents: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        match m {
            Message::System { content } => system.push(json!({"text": content})),
            Message::User { content, parts } => {
                let mut out = Vec::with_capacity(parts.len() + 1);
                if !content.is_empty() {
                    out.push(json!({"text": content}));
                }
                for p in parts {
                    match p {
                        Part::Text { text } => out.push(json!({"text": text})),
                        Part::Resource(_) => out.push(json!({"text": p.placeholder()})),
                        Part::Image(m) | Part::Audio(m) | Part::File(m) => out.push(media(m)),
                        // A person's message carries no reasoning; Gemini caches implicitly,
                        // so a breakpoint has no wire form here.
                        Part::Reasoning(_) | Part::CacheBreakpoint(_) => {}
                    }
                }
                push_content(&mut contents, "user", out);
            }
            Message::Assistant {
                content,
                tool_calls,
                parts,
            } => push_content(
                &mut contents,
                "model",
                model_parts(content, tool_calls, parts),
            ),
            Message::Tool {
                tool_call_id,
                name,
                content,
                parts,
            } => {
                let part = function_response(tool_call_id, name, content, parts);
                push_content(&mut contents, "user", vec![part]);
            }
        }
    }

    let mut body = Map::new();
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": system}));
    }
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": &*t.name,
                    "description": &*t.description,
                    "parametersJsonSchema": &*t.parameters,
                })
            })
            .collect();
        body.insert("tools".into(), json!([{"functionDeclarations": decls}]));
    }
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|(role, mut parts)| {
            if parts.is_empty() {
                // A Content must have at least one Part.
                parts.push(json!({"text": ""}));
            }
            json!({"role": role, "parts": parts})
        })
        .collect();
    body.insert("contents".into(), Value::Array(contents));
    if !req.tools.is_empty()
        && let Some(choice) = &req.tool_choice
    {
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": function_calling_config(choice)}),
        );
    }
    let mut generation = Map::new();
    if let Some(t) = req.temperature {
        generation.insert("temperature".into(), json!(t));
    }
    if let Some(n) = req.max_tokens {
        generation.insert("maxOutputTokens".into(), json!(n));
    }
    match &req.response_format {
        None => {}
        Some(ResponseFormat::Text) => {
            generation.insert("responseMimeType".into(), json!("text/plain"));
        }
        Some(ResponseFormat::JsonObject) => {
            generation.insert("responseMimeType".into(), json!("application/json"));
        }
        // Gemini always holds to the schema it is given: `strict` has nothing to add, and the
        // schema's name has no field.
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            generation.insert("responseMimeType".into(), json!("application/json"));
            generation.insert("responseJsonSchema".into(), schema.clone());
        }
    }
    if let Some(thinking) = &extras.thinking {
        generation.insert("thinkingConfig".into(), thinking.clone());
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    // `req.cache`, breakpoints and `req.cache_key` have no wire form: Gemini caches a
    // repeated prefix by itself, and explicit `cachedContents` are a resource of their own.
    Ok(Value::Object(body))
}

/// Appends `parts` as a content of `role`; consecutive user contents (tool results of one
/// round, and what follows them) become one, as Gemini asks for the results of a step.
fn push_content(
    contents: &mut Vec<(&'static str, Vec<Value>)>,
    role: &'static str,
    parts: Vec<Value>,
) {
    match contents.last_mut() {
        Some((last, existing)) if *last == "user" && role == "user" => existing.extend(parts),
        _ => contents.push((role, parts)),
    }
}

/// Inline media as `inlineData`, media at a URL as `fileData`.
fn media(m: &Media) -> Value {
    match &m.source {
        MediaSource::Base64 { data } => {
            json!({"inlineData": {"mimeType": m.media_type, "data": data}})
        }
        MediaSource::Url { url } => {
            json!({"fileData": {"mimeType": m.media_type, "fileUri": url}})
        }
    }
}

/// Whether Gemini made this call id (and so expects it back).
fn is_gemini_id(id: &str) -> bool {
    !id.is_empty() && !id.starts_with(ASSIGNED_ID_PREFIX)
}

/// A model turn's parts, each signature on the part it came with: thought summaries first
/// (in their order), then other parts, the answer text (with the signature a text part
/// carried), then the calls, each with the signature its `call_id` names.
fn model_parts(content: &str, tool_calls: &[ToolCall], parts: &[Part]) -> Vec<Value> {
    let mut out = Vec::with_capacity(parts.len() + tool_calls.len() + 1);
    let mut call_signatures: Vec<(&str, &str)> = Vec::new();
    let mut text_signatures: Vec<&str> = Vec::new();
    for p in parts {
        match p {
            // Nothing to send back: no text, no signature.
            Part::Reasoning(r)
                if r.provider == PROVIDER && r.text.is_empty() && r.signature.is_none() => {}
            Part::Reasoning(r) if r.provider == PROVIDER => match (&r.call_id, &r.signature) {
                (Some(call), Some(sig)) => call_signatures.push((call, sig)),
                (None, Some(sig)) if r.kind == ReasoningKind::Redacted && r.text.is_empty() => {
                    text_signatures.push(sig)
                }
                (_, sig) => {
                    let mut part = Map::new();
                    part.insert("text".into(), json!(r.text));
                    part.insert("thought".into(), json!(true));
                    if let Some(sig) = sig {
                        part.insert("thoughtSignature".into(), json!(sig));
                    }
                    out.push(Value::Object(part));
                }
            },
            // Another provider's reasoning means nothing to Gemini and is never sent.
            Part::Reasoning(_) | Part::CacheBreakpoint(_) => {}
            Part::Text { text } => out.push(json!({"text": text})),
            Part::Resource(_) => out.push(json!({"text": p.placeholder()})),
            Part::Image(m) | Part::Audio(m) | Part::File(m) => out.push(media(m)),
        }
    }
    if !content.is_empty() || !text_signatures.is_empty() {
        // The answer is one text part here; a signature that rode on a text part goes back on
        // it (on an empty one when the turn had no text, as a stream sends it).
        let mut sigs = text_signatures.into_iter();
        let mut part = Map::new();
        part.insert("text".into(), json!(content));
        if let Some(sig) = sigs.next() {
            part.insert("thoughtSignature".into(), json!(sig));
        }
        out.push(Value::Object(part));
        for sig in sigs {
            out.push(json!({"text": "", "thoughtSignature": sig}));
        }
    }
    for c in tool_calls {
        let mut call = Map::new();
        if is_gemini_id(&c.id) {
            call.insert("id".into(), json!(c.id));
        }
        call.insert("name".into(), json!(c.name));
        call.insert("args".into(), call_args(&c.arguments));
        let mut part = Map::new();
        part.insert("functionCall".into(), Value::Object(call));
        if let Some((_, sig)) = call_signatures.iter().find(|(id, _)| *id == c.id) {
            part.insert("thoughtSignature".into(), json!(sig));
        }
        out.push(Value::Object(part));
    }
    out
}

/// `functionCall.args`, which must be an object: a recorded call's unparsable text goes back
/// under [`RAW_ARGUMENTS_KEY`], so the model sees what it wrote.
fn call_args(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::Null => json!({}),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({ RAW_ARGUMENTS_KEY: raw }),
        },
        other => json!({ RAW_ARGUMENTS_KEY: other.to_string() }),
    }
}

/// One `functionResponse` part: the result as a JSON object (a JSON object as it is, anything
/// else under [`OUTPUT_KEY`]), inline media in its `parts`.
fn function_response(tool_call_id: &str, name: &str, content: &str, parts: &[Part]) -> Value {
    let mut text = content.to_owned();
    let mut media_parts = Vec::new();
    for p in parts {
        match p {
            Part::Text { text: t } => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            }
            Part::Resource(_) => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&p.placeholder());
            }
            Part::Image(m) | Part::Audio(m) | Part::File(m) => {
                if let MediaSource::Base64 { data } = &m.source {
                    media_parts
                        .push(json!({"inlineData": {"mimeType": m.media_type, "data": data}}));
                }
            }
            // A tool's result carries no reasoning; caching needs no marker here.
            Part::Reasoning(_) | Part::CacheBreakpoint(_) => {}
        }
    }
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(v @ Value::Object(_))
            if parts
                .iter()
                .all(|p| !matches!(p, Part::Text { .. } | Part::Resource(_))) =>
        {
            v
        }
        _ => json!({ OUTPUT_KEY: text }),
    };
    let mut fr = Map::new();
    if is_gemini_id(tool_call_id) {
        fr.insert("id".into(), json!(tool_call_id));
    }
    fr.insert("name".into(), json!(name));
    fr.insert("response".into(), response);
    if !media_parts.is_empty() {
        fr.insert("parts".into(), Value::Array(media_parts));
    }
    json!({"functionResponse": fr})
}

/// `toolConfig.functionCallingConfig` for a tool choice.
fn function_calling_config(c: &ToolChoice) -> Value {
    match c {
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Function(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    }
}

/// Gemini's `finishReason` as the seam's.
pub(crate) fn finish_reason(s: &str) -> Option<FinishReason> {
    Some(match s {
        "" | "FINISH_REASON_UNSPECIFIED" => return None,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_ascii_lowercase()),
    })
}

/// `usageMetadata` as the seam's counts: the prompt with its cached part (and the prompt of
/// built-in tools, when any ran); the output with the thoughts, which Gemini's
/// `candidatesTokenCount` leaves out.
pub(crate) fn usage(v: &Value) -> Option<Usage> {
    let u = v.get("usageMetadata").filter(|u| u.is_object())?;
    let n = |k: &str| {
        u.get(k)
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(u32::MAX as u64) as u32
    };
    let prompt = n("promptTokenCount").saturating_add(n("toolUsePromptTokenCount"));
    let thoughts = n("thoughtsTokenCount");
    let completion = n("candidatesTokenCount").saturating_add(thoughts);
    let total = match n("totalTokenCount") {
        0 => prompt.saturating_add(completion),
        t => t,
    };
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
        cache_read_tokens: n("cachedContentTokenCount"),
        cache_write_tokens: 0,
        reasoning_tokens: thoughts,
    })
}

/// An `{"error": {code, message, status}}` object (a whole error body, or one event of a
/// stream): [`ModelError::Api`] with the `status` (`RESOURCE_EXHAUSTED`, …) as its code.
pub(crate) fn error_object(v: &Value, http_status: u16) -> Option<ModelError> {
    let err = v.get("error").filter(|e| e.is_object())?;
    let status = err
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(http_status);
    let mut message = err
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| err.to_string(), str::to_owned);
    if matches!(status, 400 | 401 | 403) && message.contains("API key") {
        message.push_str(" [the key comes from GEMINI_API_KEY or GOOGLE_API_KEY]");
    }
    Some(ModelError::Api {
        status,
        message,
        code: err.get("status").and_then(Value::as_str).map(str::to_owned),
    })
}

/// The error of a non-2xx answer with this body.
pub(crate) fn api_error(status: u16, body: &str) -> ModelError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    // Some front ends wrap the error object in an array.
    let obj = match parsed {
        Some(Value::Array(mut a)) if !a.is_empty() => Some(a.swap_remove(0)),
        other => other,
    };
    obj.and_then(|v| error_object(&v, status))
        .unwrap_or_else(|| ModelError::Api {
            status,
            message: body.chars().take(2_000).collect(),
            code: None,
        })
}

/// Reads `GenerateContentResponse`s (one for a whole answer, one per event for a stream)
/// into the seam's events, in the chat backend's order: deltas as they come, then the whole
/// parts (reasoning with its signature), the calls, and `Finish`.
///
/// Every signature is kept where it came: on a thought summary (a [`Reasoning`] of kind
/// `Summary`), on a call (kind `Redacted`, `call_id` = the call's id), or on a text part or
/// a part of its own (kind `Redacted`, no `call_id`); [`request_body`] puts each back there.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    text: String,
    thought: Option<(String, Option<String>)>,
    parts: Vec<Part>,
    calls: Vec<Result<ToolCall, InvalidToolCall>>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    response_id: Option<String>,
}

impl Reader {
    /// A reader for one answer.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The answer text so far (what a cut stream had said).
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Reads one event's data; its deltas go to `out`.
    pub(crate) fn push_data(
        &mut self,
        data: &str,
        out: &mut Vec<ChatEvent>,
    ) -> Result<(), ModelError> {
        if data.trim().is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| ModelError::malformed("stream chunk", e, data))?;
        self.push(&v, out)
    }

    /// Reads one `GenerateContentResponse`; its deltas go to `out`.
    pub(crate) fn push(&mut self, v: &Value, out: &mut Vec<ChatEvent>) -> Result<(), ModelError> {
        if let Some(err) = error_object(v, 200) {
            return Err(err);
        }
        if !v.is_object() {
            return Err(ModelError::malformed(
                "stream chunk",
                "not a GenerateContentResponse object",
                &v.to_string(),
            ));
        }
        if let Some(u) = usage(v) {
            self.usage = Some(u);
        }
        if self.response_id.is_none() {
            self.response_id = v
                .get("responseId")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        let candidate = v
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        let Some(candidate) = candidate else {
            // No candidate: a blocked prompt says why; anything else is a usage-only chunk.
            if v.pointer("/promptFeedback/blockReason").is_some() {
                self.finish = Some(FinishReason::ContentFilter);
            }
            return Ok(());
        };
        let parts = candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for p in parts {
            self.part(p, out);
        }
        if let Some(reason) = candidate
            .get("finishReason")
            .and_then(Value::as_str)
            .and_then(finish_reason)
        {
            self.finish = Some(reason);
        }
        Ok(())
    }

    fn close_thought(&mut self) {
        if let Some((text, sig)) = self.thought.take() {
            let mut r = Reasoning::new(PROVIDER, ReasoningKind::Summary, text);
            r.signature = sig;
            self.parts.push(Part::Reasoning(r));
        }
    }

    fn part(&mut self, p: &Value, out: &mut Vec<ChatEvent>) {
        let signature = p
            .get("thoughtSignature")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let text = p.get("text").and_then(Value::as_str);
        if p.get("thought").and_then(Value::as_bool) == Some(true) {
            let t = text.unwrap_or_default();
            if !t.is_empty() {
                out.push(ChatEvent::ReasoningDelta(t.to_owned()));
            }
            let run = self.thought.get_or_insert_with(Default::default);
            run.0.push_str(t);
            if signature.is_some() {
                // A signature closes the thought it signs.
                run.1 = signature;
                self.close_thought();
            }
            return;
        }
        self.close_thought();
        if let Some(call) = p.get("functionCall").filter(|c| c.is_object()) {
            self.call(call, signature, out);
            return;
        }
        if let Some(m) = p.get("inlineData").and_then(inline_media) {
            self.parts.push(m);
        }
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            self.text.push_str(t);
            out.push(ChatEvent::TextDelta(t.to_owned()));
        }
        if let Some(sig) = signature {
            // A signature on a text part, or on a part of its own: kept, to go back on the
            // answer's text part.
            self.parts.push(Part::Reasoning(
                Reasoning::new(PROVIDER, ReasoningKind::Redacted, "").with_signature(sig),
            ));
        }
    }

    fn call(&mut self, call: &Value, signature: Option<String>, out: &mut Vec<ChatEvent>) {
        let index = self.calls.len();
        let name = call
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map_or_else(
                || match &self.response_id {
                    Some(r) => format!("{ASSIGNED_ID_PREFIX}{r}-{index}"),
                    None => format!("{ASSIGNED_ID_PREFIX}{index}"),
                },
                str::to_owned,
            );
        let (raw, parsed) = match call.get("args") {
            None | Some(Value::Null) => ("{}".to_owned(), Ok(json!({}))),
            Some(v @ Value::Object(_)) => (v.to_string(), Ok(v.clone())),
            // Not Gemini's shape (args is a Struct), but seen behind proxies: text to parse.
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => (s.clone(), Ok(v)),
                Ok(_) => (
                    s.clone(),
                    Err("the arguments are not a JSON object".to_owned()),
                ),
                Err(e) => (s.clone(), Err(e.to_string())),
            },
            Some(other) => (
                other.to_string(),
                Err("the arguments are not a JSON object".to_owned()),
            ),
        };
        out.push(ChatEvent::ToolCallDelta {
            index,
            id: Some(id.clone()),
            name: Some(name.clone()),
            arguments: raw.clone(),
        });
        if let Some(sig) = signature {
            self.parts.push(Part::Reasoning(
                Reasoning::new(PROVIDER, ReasoningKind::Redacted, "")
                    .with_signature(sig)
                    .with_call_id(id.clone()),
            ));
        }
        self.calls.push(match parsed {
            Ok(args) => Ok(ToolCall::new(id, name, args)),
            Err(e) => Err(InvalidToolCall::new(id, name, raw, e)),
        });
    }

    /// The events that end the answer. `streamed`: an answer without a `finishReason` was
    /// cut, and is an error rather than a truncated answer presented as whole.
    pub(crate) fn finish(
        mut self,
        streamed: bool,
        out: &mut Vec<ChatEvent>,
    ) -> Result<(), ModelError> {
        self.close_thought();
        let has_calls = !self.calls.is_empty();
        let reason = match self.finish.take() {
            Some(FinishReason::Stop) if has_calls => FinishReason::ToolCalls,
            Some(r) => r,
            None if streamed => {
                return Err(ModelError::StreamInterrupted {
                    detail: "the stream closed without a finishReason".into(),
                    partial_text: self.text,
                });
            }
            None if has_calls => FinishReason::ToolCalls,
            None => FinishReason::Stop,
        };
        out.extend(self.parts.into_iter().map(ChatEvent::Part));
        for call in self.calls {
            out.push(match call {
                Ok(c) => ChatEvent::ToolCall(c),
                Err(bad) => ChatEvent::InvalidToolCall(bad),
            });
        }
        out.push(ChatEvent::Finish {
            reason,
            usage: self.usage,
        });
        Ok(())
    }
}

/// A part's `inlineData` (an image the model made, …) as a part of the answer.
fn inline_media(d: &Value) -> Option<Part> {
    let mime = d.get("mimeType")?.as_str()?;
    let data = d.get("data")?.as_str()?;
    let mut media = Media::url(mime, "");
    media.source = MediaSource::Base64 {
        data: data.to_owned(),
    };
    Some(match mime.split('/').next() {
        Some("image") => Part::Image(media),
        Some("audio") => Part::Audio(media),
        _ => Part::File(media),
    })
}

/// Reads a whole (non-streamed) answer.
pub(crate) fn parse_response(v: &Value) -> Result<ChatResponse, ModelError> {
    let mut reader = Reader::new();
    let mut events = Vec::new();
    reader.push(v, &mut events)?;
    reader.finish(false, &mut events)?;
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut invalid = Vec::new();
    let mut parts = Vec::new();
    let mut end = (FinishReason::Stop, None);
    for e in events {
        match e {
            ChatEvent::TextDelta(t) => content.push_str(&t),
            ChatEvent::Part(p) => parts.push(p),
            ChatEvent::ToolCall(c) => calls.push(c),
            ChatEvent::InvalidToolCall(c) => invalid.push(c),
            ChatEvent::Finish { reason, usage } => end = (reason, usage),
            _ => {}
        }
    }
    Ok(ChatResponse::new(content, calls, end.0, end.1)
        .with_invalid_tool_calls(invalid)
        .with_parts(parts))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn read_all(events: &[Value], streamed: bool) -> Result<Vec<ChatEvent>, ModelError> {
        let mut r = Reader::new();
        let mut out = Vec::new();
        for e in events {
            r.push(e, &mut out)?;
        }
        r.finish(streamed, &mut out)?;
        Ok(out)
    }

    #[test]
    fn finish_reasons_map_to_the_seams() {
        assert_eq!(finish_reason("STOP"), Some(FinishReason::Stop));
        assert_eq!(finish_reason("MAX_TOKENS"), Some(FinishReason::Length));
        for s in [
            "SAFETY",
            "RECITATION",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
        ] {
            assert_eq!(finish_reason(s), Some(FinishReason::ContentFilter), "{s}");
        }
        assert_eq!(
            finish_reason("MALFORMED_FUNCTION_CALL"),
            Some(FinishReason::Other("malformed_function_call".into()))
        );
        assert_eq!(finish_reason(""), None);
        assert_eq!(finish_reason("FINISH_REASON_UNSPECIFIED"), None);
    }

    #[test]
    fn usage_counts_thoughts_as_output_and_the_cache_as_part_of_the_prompt() {
        let v = json!({"usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10,
            "thoughtsTokenCount": 30, "cachedContentTokenCount": 64, "totalTokenCount": 140}});
        let u = usage(&v).unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (100, 40, 140)
        );
        assert_eq!(
            (
                u.cache_read_tokens,
                u.cache_write_tokens,
                u.reasoning_tokens
            ),
            (64, 0, 30)
        );
    }

    #[test]
    fn a_signature_on_a_part_of_its_own_is_kept_as_redacted_reasoning() {
        let out = read_all(
            &[
                json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": "hi"}, {"thoughtSignature": "c2ln"}]}, "finishReason": "STOP"}]}),
            ],
            true,
        )
        .unwrap();
        assert_eq!(
            out[1],
            ChatEvent::Part(Part::Reasoning(
                Reasoning::new(PROVIDER, ReasoningKind::Redacted, "").with_signature("c2ln")
            ))
        );
    }

    #[test]
    fn a_blocked_prompt_ends_with_the_content_filter() {
        let v = json!({"promptFeedback": {"blockReason": "SAFETY"},
            "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8}});
        let r = parse_response(&v).unwrap();
        assert_eq!(r.finish_reason, FinishReason::ContentFilter);
        assert!(r.content.is_empty());
    }

    #[test]
    fn an_empty_thought_part_with_the_signature_closes_the_thought_it_follows() {
        let chunk = |parts: Value| json!({"candidates": [{"content": {"parts": parts}}]});
        let out = read_all(
            &[
                chunk(json!([{"text": "Let me", "thought": true}])),
                chunk(json!([{"text": " think.", "thought": true}])),
                chunk(json!([{"text": "", "thought": true, "thoughtSignature": "c2ln"}])),
                json!({"candidates": [{"content": {"parts": [{"text": "4"}]}, "finishReason": "STOP"}]}),
            ],
            true,
        )
        .unwrap();
        assert!(
            out.contains(&ChatEvent::Part(Part::Reasoning(
                Reasoning::new(PROVIDER, ReasoningKind::Summary, "Let me think.")
                    .with_signature("c2ln")
            )))
        );
        let body = request_body(
            &ChatRequest::new(vec![Message::assistant("4").with_parts(
                vec![Part::Reasoning(
                Reasoning::new(PROVIDER, ReasoningKind::Summary, "Let me think.")
                    .with_signature("c2ln"),
            )],
            )]),
            &Extras::default(),
        )
        .unwrap();
        assert_eq!(
            body["contents"][0]["parts"],
            json!([{"text": "Let me think.", "thought": true, "thoughtSignature": "c2ln"}, {"text": "4"}])
        );
    }

    /// A JSON value built from Gemini's own keys and a few others.
    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|n| json!(n)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            let key = prop_oneof![
                Just("candidates".to_owned()),
                Just("content".to_owned()),
                Just("parts".to_owned()),
                Just("text".to_owned()),
                Just("thought".to_owned()),
                Just("thoughtSignature".to_owned()),
                Just("functionCall".to_owned()),
                Just("args".to_owned()),
                Just("name".to_owned()),
                Just("id".to_owned()),
                Just("finishReason".to_owned()),
                Just("usageMetadata".to_owned()),
                Just("error".to_owned()),
                Just("inlineData".to_owned()),
                Just("promptFeedback".to_owned()),
                "[a-zA-Z]{1,8}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key, inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// A chunk of Gemini's shape with arbitrary values in its fields.
    fn arb_chunk() -> impl Strategy<Value = Value> {
        let part = prop_oneof![
            (".{0,8}", any::<bool>(), prop::option::of("[A-Za-z0-9+/=]{0,8}")).prop_map(
                |(t, thought, sig)| json!({"text": t, "thought": thought, "thoughtSignature": sig})
            ),
            (".{0,8}", arb_json(), prop::option::of(".{0,6}"), prop::option::of(".{0,4}"))
                .prop_map(|(name, args, id, sig)| json!({
                    "functionCall": {"name": name, "args": args, "id": id},
                    "thoughtSignature": sig})),
            arb_json(),
        ];
        let reason = prop_oneof![
            Just(Value::Null),
            Just(json!("STOP")),
            Just(json!("MAX_TOKENS")),
            Just(json!("SAFETY")),
            Just(json!("MALFORMED_FUNCTION_CALL")),
            ".{0,10}".prop_map(Value::String),
        ];
        (
            prop::collection::vec(part, 0..4),
            reason,
            prop::option::of(prop::collection::vec(any::<u64>(), 5)),
            prop::option::of(".{0,6}"),
        )
            .prop_map(|(parts, reason, counts, rid)| {
                let mut v = json!({"candidates": [{"content": {"role": "model", "parts": parts},
                    "finishReason": reason}], "responseId": rid});
                if let Some(c) = counts {
                    v["usageMetadata"] = json!({"promptTokenCount": c[0], "candidatesTokenCount": c[1],
                        "thoughtsTokenCount": c[2], "cachedContentTokenCount": c[3], "totalTokenCount": c[4]});
                }
                v
            })
    }

    proptest! {
        #[test]
        fn the_stream_reader_never_panics_on_any_event_sequence(
            events in prop::collection::vec(prop_oneof![
                any::<String>(),
                arb_json().prop_map(|v| v.to_string()),
                arb_chunk().prop_map(|v| v.to_string()),
            ], 0..12),
        ) {
            let mut r = Reader::new();
            let mut out = Vec::new();
            let mut failed = false;
            for e in &events {
                if r.push_data(e, &mut out).is_err() {
                    failed = true;
                    break;
                }
            }
            if !failed {
                let has_finish = r.finish.is_some();
                let end = r.finish(true, &mut out);
                // A stream ends with Finish exactly when a finishReason (or a blocked prompt)
                // came; otherwise it is interrupted, never presented as whole.
                prop_assert_eq!(end.is_ok(), has_finish);
                prop_assert_eq!(
                    matches!(out.last(), Some(ChatEvent::Finish { .. })),
                    has_finish
                );
            }
        }

        #[test]
        fn a_read_answer_sent_back_and_read_again_keeps_its_calls_and_signatures(
            chunks in prop::collection::vec(arb_chunk(), 1..4),
        ) {
            // Whatever came back, the next request can be built from it.
            let mut r = Reader::new();
            let mut out = Vec::new();
            for c in &chunks {
                if r.push(c, &mut out).is_err() {
                    return Ok(());
                }
            }
            if r.finish(false, &mut out).is_err() {
                return Ok(());
            }
            let mut content = String::new();
            let mut calls = Vec::new();
            let mut parts = Vec::new();
            for e in out {
                match e {
                    ChatEvent::TextDelta(t) => content.push_str(&t),
                    ChatEvent::ToolCall(c) => calls.push(c),
                    ChatEvent::InvalidToolCall(c) => calls.push(c.as_recorded_call()),
                    ChatEvent::Part(p) => parts.push(p),
                    _ => {}
                }
            }
            let sigs: Vec<String> = parts
                .iter()
                .filter_map(|p| match p {
                    Part::Reasoning(r) => match &r.call_id {
                        None => r.signature.clone(),
                        // Gemini's call ids are unique in a turn; a repeated one is not
                        // Gemini's shape and its signatures are not followed here.
                        Some(id) => (calls.iter().filter(|c| &c.id == id).count() == 1)
                            .then(|| r.signature.clone())
                            .flatten(),
                    },
                    _ => None,
                })
                .collect();
            let msg = Message::assistant_with_tool_calls(content, calls).with_parts(parts);
            let body = request_body(&ChatRequest::new(vec![msg]), &Extras::default()).unwrap();
            let sent = body.to_string();
            for s in sigs {
                let needle = format!("\"thoughtSignature\":{}", Value::String(s));
                prop_assert!(sent.contains(&needle));
            }
        }
    }
}
