//! Call protocols: how tools are shown to the model and how its answer is read.
//!
//! * [`NativeProtocol`] (T5, 001): tools in the request's `tools` field, calls from the
//!   response's `tool_calls`, results as tool messages.
//! * [`JsonDecisionProtocol`] (T6, 002): tools described in the system prompt, the answer is a
//!   JSON decision, the result goes back as the user message `[Tool result for NAME]\n…`.
//! * [`TagProtocol`] (T7, 000): tools described in the system prompt with
//!   [`generate_tool_prompt`](crate::generate_tool_prompt), `<tool_action>` tags read while
//!   streaming, results as tool messages; native calls in the same response win.

use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value};
use toolwright_core::{InvalidToolCall, Message, Part, ToolCall, ToolSpec};
use toolwright_output_control::{
    DecisionError, JsonError, StreamParser, TagEvent, TagOptions, ToolAction, ToolDecision,
    parse_tool_decision,
};

use crate::prompt::{generate_tool_prompt, json_decision_prompt};

/// Which protocol a loop uses.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum ProtocolKind {
    /// Native function calling when the model supports it, else the JSON decision protocol
    /// (with a deprecation warning, T9). The default.
    #[default]
    Auto,
    /// Native function calling; switched to [`ProtocolKind::JsonDecision`] (with a warning)
    /// for a model whose `function_calling` is false.
    Native,
    /// 002's JSON decision in the system prompt.
    JsonDecision,
    /// 000's `<tool_action>` tags (ReAct). Tools are also bound natively when the model supports it.
    Tag,
    /// Your own protocol.
    Custom(Arc<dyn CallProtocol>),
}

impl std::fmt::Debug for ProtocolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("Auto"),
            Self::Native => f.write_str("Native"),
            Self::JsonDecision => f.write_str("JsonDecision"),
            Self::Tag => f.write_str("Tag"),
            Self::Custom(p) => write!(f, "Custom({})", p.name()),
        }
    }
}

/// Picks the protocol for a model (T9): a model without native function calling gets a
/// prompt-based protocol, with a deprecation warning in the log.
pub fn resolve_protocol(
    kind: &ProtocolKind,
    model: &str,
    function_calling: bool,
    tag_parsing: bool,
) -> Arc<dyn CallProtocol> {
    // The stateless protocols are shared: a run asks for its protocol once, and an `Arc` of
    // its own would be an allocation per run.
    static NATIVE: LazyLock<Arc<dyn CallProtocol>> = LazyLock::new(|| Arc::new(NativeProtocol));
    static JSON: LazyLock<Arc<dyn CallProtocol>> = LazyLock::new(|| Arc::new(JsonDecisionProtocol));
    match kind {
        ProtocolKind::Auto | ProtocolKind::Native if function_calling => Arc::clone(&NATIVE),
        ProtocolKind::Auto | ProtocolKind::Native => {
            tracing::warn!(
                model,
                "model does not support native function calling (function_calling = false): \
                falling back to the deprecated prompt-based JSON decision protocol (tools in the system prompt, answers parsed as JSON)"
            );
            Arc::clone(&JSON)
        }
        ProtocolKind::JsonDecision => Arc::clone(&JSON),
        ProtocolKind::Tag => Arc::new(TagProtocol {
            parsing: tag_parsing,
            bind_native: function_calling,
        }),
        ProtocolKind::Custom(p) => Arc::clone(p),
    }
}

/// One tool call read from a response, ready to dispatch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PendingCall {
    /// The call id (the provider's, or synthesised for prompt-based protocols).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments (for arguments that were not valid JSON: the raw text as a JSON string).
    pub arguments: Value,
    /// Set when the call cannot run as written (e.g. arguments that are not JSON, G5): the
    /// text the model gets as this call's error result.
    pub invalid: Option<String>,
}

impl PendingCall {
    /// A call that can run.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            invalid: None,
        }
    }
    /// A call whose arguments are not JSON (G5): recorded with its raw text, answered with
    /// [`InvalidToolCall::model_message`], never run.
    pub fn invalid(bad: &InvalidToolCall) -> Self {
        let mut c = Self::new(
            bad.id.clone(),
            bad.name.clone(),
            Value::String(bad.raw.clone()),
        );
        c.invalid = Some(bad.model_message());
        c
    }
    /// As a [`ToolCall`] for the history.
    pub fn to_tool_call(&self) -> ToolCall {
        ToolCall::new(self.id.clone(), self.name.clone(), self.arguments.clone())
    }
}

/// What to do after the live text, in order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// Text to show (held back until the calls before it ran).
    Text(String),
    /// Calls to run together; results keep this order.
    Calls(Vec<PendingCall>),
}

/// A whole response as read by a protocol.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Reading {
    /// The raw text of the response (the assistant message's content).
    pub content: String,
    /// Held-back text and calls, in order.
    pub steps: Vec<Step>,
    /// The answer for the user if the loop ends here.
    pub answer: String,
    /// The answer could not be read; this text asks the model to fix it (JSON protocol).
    pub correction: Option<String>,
    /// The calls came from the response's native `tool_calls`.
    pub native: bool,
    /// The response's reasoning and other parts, kept with the assistant message it records.
    pub parts: Vec<Part>,
}

impl Reading {
    /// Every call, in order.
    pub fn calls(&self) -> impl Iterator<Item = &PendingCall> {
        self.steps.iter().flat_map(|s| match s {
            Step::Calls(c) => c.as_slice(),
            Step::Text(_) => &[],
        })
    }
    /// Whether the response asks for any call.
    pub fn has_calls(&self) -> bool {
        self.calls().next().is_some()
    }
}

/// What of a text delta the caller is shown now ([`ResponseReader::text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// The delta itself, as it came (nothing is copied when no one listens).
    Delta,
    /// These texts, in order; none while the reader holds the text back.
    Texts(Vec<String>),
}

/// Reads one streamed response.
pub trait ResponseReader: Send {
    /// A text delta arrived: what to show the caller now.
    fn text(&mut self, delta: &str) -> Shown;
    /// The response ended. `native` are its native tool calls; `content` its whole text.
    fn finish(self: Box<Self>, native: Vec<PendingCall>, content: String) -> Reading;
}

/// How tools are shown to the model and how its answer is read (one per loop).
pub trait CallProtocol: Send + Sync {
    /// A short name for logs and results (`native`, `json`, `tag`).
    fn name(&self) -> &'static str;
    /// Whether the request's `tools` field carries the tools.
    fn binds_tools(&self) -> bool;
    /// The system-prompt section describing the tools, if any.
    fn prompt_section(&self, tools: &[ToolSpec]) -> Option<String>;
    /// A reader for the next response. `seq` is unique within the session (for call ids).
    fn reader(&self, tools: &[ToolSpec], seq: usize) -> Box<dyn ResponseReader>;
    /// Whether the calls of one step run concurrently.
    fn concurrent(&self) -> bool {
        true
    }
    /// The messages recording a round: the response and one result per call, in call order.
    /// The results are handed over, so the calls move into the messages uncopied; the calls
    /// are in `results` only (those in `reading`'s steps may have been moved out already).
    fn round_messages(
        &self,
        reading: &Reading,
        results: Vec<(PendingCall, CallResult)>,
    ) -> Vec<Message> {
        tool_message_round(reading, results)
    }
    /// The system-prompt section of a typed run ([`crate::Agent::run_as`]): tools stay in use,
    /// and the final answer is a JSON object matching `schema`, written where this protocol
    /// reads the answer from. The default asks for the JSON as the whole final text answer
    /// (right for protocols whose answer is the response's text).
    fn answer_section(&self, schema: &Value) -> String {
        crate::prompt::typed_answer_prompt(schema)
    }
    /// The `response_format` JSON schema of a typed run's requests, sent only to a model whose
    /// schema leaves its tools callable ([`ModelInfo::answer_schema_with_tools`]): the schema of
    /// a whole response that either calls a tool or gives the final answer, as this protocol
    /// reads it; `None` when no schema can say that (the default: the answer's shape is then in
    /// the system prompt only). `tools` are the tools that may be called now (none once the
    /// run wants its answer).
    ///
    /// [`ModelInfo::answer_schema_with_tools`]: toolwright_core::ModelInfo::answer_schema_with_tools
    fn answer_format(&self, tools: &[ToolSpec], schema: &Value) -> Option<Value> {
        let _ = (tools, schema);
        None
    }
}

/// What a call gave the model: its text, and the images or files after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallResult {
    /// The result text (capped).
    pub content: String,
    /// Media the tool returned ([`toolwright_core::ToolOutput::parts`]).
    pub parts: Vec<Part>,
}

impl CallResult {
    /// A result with text and parts.
    pub fn new(content: impl Into<String>, parts: Vec<Part>) -> Self {
        Self {
            content: content.into(),
            parts,
        }
    }
}

impl From<String> for CallResult {
    fn from(content: String) -> Self {
        Self::new(content, Vec::new())
    }
}

/// The native/tag round: an assistant message with the calls, then one tool message per call.
pub fn tool_message_round(
    reading: &Reading,
    results: Vec<(PendingCall, CallResult)>,
) -> Vec<Message> {
    let mut out = Vec::with_capacity(results.len() + 1);
    out.push(assistant_message(reading));
    let mut calls = Vec::with_capacity(results.len());
    for (call, result) in results {
        out.push(Message::tool_with_parts(
            call.id.clone(),
            call.name.clone(),
            result.content,
            result.parts,
        ));
        calls.push(ToolCall::new(call.id, call.name, call.arguments));
    }
    if let Some(Message::Assistant { tool_calls, .. }) = out.first_mut() {
        *tool_calls = calls;
    }
    out
}

/// The assistant message of a response: its text and its parts (reasoning kept for the
/// provider that made it).
fn assistant_message(reading: &Reading) -> Message {
    Message::assistant(reading.content.clone()).with_parts(reading.parts.clone())
}

/// Native function calling (T5).
#[derive(Debug, Clone, Copy, Default)]
pub struct NativeProtocol;

struct PassThrough;

impl ResponseReader for PassThrough {
    fn text(&mut self, _delta: &str) -> Shown {
        Shown::Delta
    }
    fn finish(self: Box<Self>, native: Vec<PendingCall>, content: String) -> Reading {
        Reading {
            answer: content.clone(),
            content,
            native: !native.is_empty(),
            steps: if native.is_empty() {
                vec![]
            } else {
                vec![Step::Calls(native)]
            },
            correction: None,
            parts: Vec::new(),
        }
    }
}

impl CallProtocol for NativeProtocol {
    fn name(&self) -> &'static str {
        "native"
    }
    fn binds_tools(&self) -> bool {
        true
    }
    fn prompt_section(&self, _tools: &[ToolSpec]) -> Option<String> {
        None
    }
    fn reader(&self, _tools: &[ToolSpec], _seq: usize) -> Box<dyn ResponseReader> {
        Box::new(PassThrough)
    }
    /// Calls are native, so the response's text is the answer: the answer's own schema.
    fn answer_format(&self, _tools: &[ToolSpec], schema: &Value) -> Option<Value> {
        Some(schema.clone())
    }
}

/// 002's JSON decision protocol (T6); also the T9 fallback.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonDecisionProtocol;

struct JsonReader {
    seq: usize,
}

impl ResponseReader for JsonReader {
    fn text(&mut self, _delta: &str) -> Shown {
        Shown::Texts(Vec::new()) // the JSON is not for the user; the reply is shown at the end
    }
    fn finish(self: Box<Self>, native: Vec<PendingCall>, content: String) -> Reading {
        if !native.is_empty() {
            return PassThrough.finish_boxed(native, content);
        }
        match parse_tool_decision(&content) {
            Ok(ToolDecision::Call { name, arguments }) => Reading {
                steps: vec![Step::Calls(vec![PendingCall::new(
                    format!("json_{}", self.seq),
                    name,
                    arguments,
                )])],
                // Only read when the round limit ends the run here: then the caller gets the
                // last model response as it is (001).
                answer: content.clone(),
                content,
                correction: None,
                native: false,
                parts: Vec::new(),
            },
            Ok(ToolDecision::Reply { text }) => Reading {
                steps: vec![Step::Text(text.clone())],
                answer: text,
                content,
                correction: None,
                native: false,
                parts: Vec::new(),
            },
            // A reply that is an object or array (a typed answer's JSON): its JSON text.
            Err(DecisionError::MissingReply { .. }) if structured_reply(&content).is_some() => {
                let text = structured_reply(&content).unwrap_or_default();
                Reading {
                    steps: vec![Step::Text(text.clone())],
                    answer: text,
                    content,
                    correction: None,
                    native: false,
                    parts: Vec::new(),
                }
            }
            // Plain prose: the model answered the user directly (T9: not an error).
            Err(DecisionError::Json(JsonError::NotFound)) | Ok(_) => Reading {
                steps: vec![Step::Text(content.clone())],
                answer: content.clone(),
                content,
                correction: None,
                native: false,
                parts: Vec::new(),
            },
            Err(e) => Reading {
                steps: vec![Step::Text(content.clone())],
                answer: content.clone(),
                content,
                correction: Some(e.for_model()),
                native: false,
                parts: Vec::new(),
            },
        }
    }
}

/// The JSON Schema of a decision of a typed run: `{"tool": NAME, "arguments": {...}}` for each
/// tool (its arguments per its parameters), or `{"tool": null, "reply": <the answer>}`.
fn decision_schema(tools: &[ToolSpec], answer: &Value) -> Value {
    let mut choices: Vec<Value> = tools
        .iter()
        .map(|t| {
            serde_json::json!({
                "type": "object",
                "properties": {"tool": {"const": &*t.name}, "arguments": &*t.parameters},
                "required": ["tool", "arguments"],
            })
        })
        .collect();
    choices.push(serde_json::json!({
        "type": "object",
        "properties": {"tool": {"type": "null"}, "reply": answer},
        "required": ["tool", "reply"],
    }));
    serde_json::json!({ "anyOf": choices })
}

/// The `reply` of a JSON decision when it is an object or an array, as compact JSON text.
fn structured_reply(content: &str) -> Option<String> {
    let value = toolwright_output_control::extract_json(content).ok()?;
    match value.get("reply")? {
        r @ (Value::Object(_) | Value::Array(_)) => Some(r.to_string()),
        _ => None,
    }
}

impl PassThrough {
    fn finish_boxed(self, native: Vec<PendingCall>, content: String) -> Reading {
        Box::new(self).finish(native, content)
    }
}

impl CallProtocol for JsonDecisionProtocol {
    fn name(&self) -> &'static str {
        "json"
    }
    fn binds_tools(&self) -> bool {
        false
    }
    fn prompt_section(&self, tools: &[ToolSpec]) -> Option<String> {
        Some(json_decision_prompt(tools))
    }
    fn reader(&self, _tools: &[ToolSpec], seq: usize) -> Box<dyn ResponseReader> {
        Box::new(JsonReader { seq })
    }
    fn concurrent(&self) -> bool {
        false
    }
    /// The decision itself: a call of one of `tools` with its arguments, or the reply as the
    /// answer's JSON.
    fn answer_format(&self, tools: &[ToolSpec], schema: &Value) -> Option<Value> {
        Some(decision_schema(tools, schema))
    }
    fn answer_section(&self, schema: &Value) -> String {
        format!(
            "Call tools as usual while you work. Your reply to the user is the final answer: \
             put it in \"reply\" as a JSON object (not a string) that matches this JSON Schema: \
             {{\"tool\": null, \"reply\": {{...}}}}. Schema:\n{schema}"
        )
    }
    fn round_messages(
        &self,
        reading: &Reading,
        results: Vec<(PendingCall, CallResult)>,
    ) -> Vec<Message> {
        if reading.native {
            return tool_message_round(reading, results);
        }
        let mut out = vec![assistant_message(reading)];
        for (call, result) in results {
            // A prompt protocol gives results as the person's turn: media ride along there.
            out.push(Message::user_with_parts(
                format!("[Tool result for {}]\n{}", call.name, result.content),
                result.parts,
            ));
        }
        out
    }
}

/// 000's `<tool_action>` tag protocol (T7, T8) for the ReAct loop.
#[derive(Debug, Clone, Copy)]
pub struct TagProtocol {
    /// `enableToolActionParsing`: when false, tags are plain text (default true).
    pub parsing: bool,
    /// Also bind the tools natively (models with function calling); native calls win.
    pub bind_native: bool,
}

impl Default for TagProtocol {
    fn default() -> Self {
        Self {
            parsing: true,
            bind_native: false,
        }
    }
}

struct TagReader {
    parser: StreamParser,
    live: bool,
    shown: usize,
    steps: Vec<Step>,
    /// Every text the person sees (live or held back), without the tags.
    visible: String,
    seq: usize,
    n: usize,
    tools: Vec<ToolSpec>,
}

impl TagReader {
    fn on_events(&mut self, events: Vec<TagEvent>, now: &mut Vec<String>) {
        for ev in events {
            let text = match ev {
                TagEvent::Action(a) => {
                    self.live = false;
                    let call = self.action_call(a);
                    self.steps.push(Step::Calls(vec![call]));
                    continue;
                }
                TagEvent::Text(t) => t,
                TagEvent::Unclosed { text } | TagEvent::Oversized { text } => text,
                _ => continue,
            };
            self.visible.push_str(&text);
            if self.live {
                self.shown += text.len();
                now.push(text);
            } else {
                match self.steps.last_mut() {
                    Some(Step::Text(t)) => t.push_str(&text),
                    _ => self.steps.push(Step::Text(text)),
                }
            }
        }
    }

    fn action_call(&mut self, a: ToolAction) -> PendingCall {
        let id = format!("tag_{}_{}", self.seq, self.n);
        self.n += 1;
        let schema = self
            .tools
            .iter()
            .find(|t| *t.name == *a.name)
            .map(|t| &*t.parameters);
        let arguments = Value::Object(coerce_to_schema(a.arguments, schema));
        PendingCall::new(id, a.name, arguments)
    }
}

impl ResponseReader for TagReader {
    fn text(&mut self, delta: &str) -> Shown {
        let mut now = Vec::new();
        let events = self.parser.push(delta);
        self.on_events(events, &mut now);
        Shown::Texts(now)
    }
    fn finish(mut self: Box<Self>, native: Vec<PendingCall>, content: String) -> Reading {
        let mut tail = Vec::new();
        let events = self.parser.finish();
        self.on_events(events, &mut tail);
        let mut steps: Vec<Step> = tail.into_iter().map(Step::Text).collect();
        if !native.is_empty() {
            // Native calls win; the tags are plain text (000).
            let rest = content.get(self.shown..).unwrap_or(content.as_str());
            let mut steps = Vec::new();
            if !rest.is_empty() {
                steps.push(Step::Text(rest.to_owned()));
            }
            steps.push(Step::Calls(native));
            return Reading {
                answer: content.clone(),
                content,
                steps,
                correction: None,
                native: true,
                parts: Vec::new(),
            };
        }
        steps.splice(0..0, std::mem::take(&mut self.steps));
        Reading {
            // What the person sees: the text around the tags, never the tags themselves.
            answer: self.visible,
            content,
            steps,
            correction: None,
            native: false,
            parts: Vec::new(),
        }
    }
}

impl CallProtocol for TagProtocol {
    fn name(&self) -> &'static str {
        "tag"
    }
    fn binds_tools(&self) -> bool {
        self.bind_native
    }
    fn prompt_section(&self, tools: &[ToolSpec]) -> Option<String> {
        self.parsing.then(|| generate_tool_prompt(tools))
    }
    fn reader(&self, tools: &[ToolSpec], seq: usize) -> Box<dyn ResponseReader> {
        Box::new(TagReader {
            parser: StreamParser::with_options(TagOptions {
                enabled: self.parsing,
                ..TagOptions::default()
            }),
            live: true,
            shown: 0,
            visible: String::new(),
            steps: Vec::new(),
            seq,
            n: 0,
            tools: tools.to_vec(),
        })
    }
    fn concurrent(&self) -> bool {
        false // 000: tags run in order
    }
    /// With the tools bound natively, the answer's own schema: the model then calls natively
    /// (a response held to the schema has no room for tags), and native calls are read as
    /// always. Without native tools a call is text in the answer, which no schema of the
    /// answer allows: `None`.
    fn answer_format(&self, _tools: &[ToolSpec], schema: &Value) -> Option<Value> {
        self.bind_native.then(|| schema.clone())
    }
}

/// Tag arguments are strings; convert those whose schema type says otherwise (`"5"` → 5 for
/// an integer). Values that do not convert stay strings, and validation reports them.
pub fn coerce_to_schema(args: Map<String, Value>, schema: Option<&Value>) -> Map<String, Value> {
    let Some(props) = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    else {
        return args;
    };
    args.into_iter()
        .map(|(k, v)| {
            let ty = props
                .get(&k)
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str);
            let v = match (ty, v) {
                (Some("integer"), Value::String(s)) => s
                    .trim()
                    .parse::<i64>()
                    .map(Value::from)
                    .unwrap_or(Value::String(s)),
                (Some("number"), Value::String(s)) => match s
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                {
                    Some(n) => Value::Number(n),
                    None => Value::String(s),
                },
                (Some("boolean"), Value::String(s)) => match s.trim() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    _ => Value::String(s),
                },
                (Some("array" | "object"), Value::String(s)) => {
                    serde_json::from_str(&s).unwrap_or(Value::String(s))
                }
                (_, v) => v,
            };
            (k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(
        p: &dyn CallProtocol,
        chunks: &[&str],
        native: Vec<PendingCall>,
    ) -> (Vec<String>, Reading) {
        let mut r = p.reader(&[], 7);
        let mut shown = Vec::new();
        for c in chunks {
            match r.text(c) {
                Shown::Delta => shown.push((*c).to_owned()),
                Shown::Texts(now) => shown.extend(now),
            }
        }
        (shown, r.finish(native, chunks.concat()))
    }

    #[test]
    fn o6_tag_reader_shows_text_before_tag_and_holds_the_rest() {
        let p = TagProtocol::default();
        let (shown, reading) = read(
            &p,
            &[
                "思考: 我需要搜索...<tool_action name=\"",
                "vector-search\"><query value=\"test\"",
                "\" /></tool_action>接下来...",
            ],
            vec![],
        );
        assert_eq!(shown.concat(), "思考: 我需要搜索...");
        assert_eq!(reading.steps.len(), 2);
        let Step::Calls(calls) = &reading.steps[0] else {
            panic!("{reading:?}")
        };
        assert_eq!(calls[0].name, "vector-search");
        assert_eq!(calls[0].arguments, json!({"query": "test"}));
        assert_eq!(calls[0].id, "tag_7_0");
        assert_eq!(reading.steps[1], Step::Text("接下来...".into()));
    }

    #[test]
    fn t7_native_calls_make_tags_plain_text_in_reader() {
        let p = TagProtocol {
            parsing: true,
            bind_native: true,
        };
        let native = vec![PendingCall::new("call_1", "get_weather", json!({}))];
        let (shown, reading) = read(&p, &["a <tool_action name=\"x\"></tool_action> b"], native);
        assert_eq!(shown.concat(), "a ");
        assert!(reading.native);
        assert_eq!(
            reading.steps[0],
            Step::Text("<tool_action name=\"x\"></tool_action> b".into())
        );
        let calls: Vec<_> = reading.calls().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "call_1");
    }

    #[test]
    fn o7_parsing_disabled_leaves_tags_as_text() {
        let p = TagProtocol {
            parsing: false,
            bind_native: false,
        };
        let text = "<tool_action name=\"x\"><a value=\"1\" /></tool_action>";
        let (shown, reading) = read(&p, &[text], vec![]);
        assert_eq!(shown.concat(), text);
        assert!(!reading.has_calls());
        assert!(p.prompt_section(&[]).is_none());
    }

    #[test]
    fn t6_json_reader_reads_calls_replies_prose_and_errors() {
        let p = JsonDecisionProtocol;
        let (_, r) = read(
            &p,
            &[r#"{"tool": "get_weather", "arguments": {"city": "Beijing"}}"#],
            vec![],
        );
        assert_eq!(r.calls().next().map(|c| &*c.name), Some("get_weather"));
        let (shown, r) = read(&p, &[r#"{"tool": null, "reply": "Sunny"}"#], vec![]);
        assert!(shown.is_empty());
        assert_eq!(r.answer, "Sunny");
        let (_, r) = read(&p, &["Just prose."], vec![]);
        assert_eq!(r.answer, "Just prose.");
        assert!(r.correction.is_none());
        let (_, r) = read(&p, &[r#"{"tool": "x", "arguments": [1]}"#], vec![]);
        assert!(r.correction.is_some());
        assert!(!r.has_calls());
    }

    #[test]
    fn t6_json_round_injects_tool_result_as_user_message() {
        let p = JsonDecisionProtocol;
        let (_, r) = read(
            &p,
            &[r#"{"tool": "get_weather", "arguments": {"city": "Beijing"}}"#],
            vec![],
        );
        let call = r.calls().next().cloned().unwrap();
        let msgs = p.round_messages(&r, vec![(call, String::from(r#"{"temp":22}"#).into())]);
        assert_eq!(
            msgs[1],
            Message::user("[Tool result for get_weather]\n{\"temp\":22}")
        );
    }

    #[test]
    fn o3_tag_arguments_are_coerced_to_schema_types() {
        let schema = json!({"properties": {"limit": {"type": "integer"}, "q": {"type": "string"}, "on": {"type": "boolean"}}});
        let mut m = Map::new();
        m.insert("limit".into(), json!("5"));
        m.insert("q".into(), json!("5"));
        m.insert("on".into(), json!("maybe"));
        let out = coerce_to_schema(m, Some(&schema));
        assert_eq!(out["limit"], json!(5));
        assert_eq!(out["q"], json!("5"));
        assert_eq!(out["on"], json!("maybe"));
    }

    #[test]
    fn t9_model_without_function_calling_gets_json_protocol() {
        assert_eq!(
            resolve_protocol(&ProtocolKind::Auto, "m", false, true).name(),
            "json"
        );
        assert_eq!(
            resolve_protocol(&ProtocolKind::Native, "m", false, true).name(),
            "json"
        );
        assert_eq!(
            resolve_protocol(&ProtocolKind::Auto, "m", true, true).name(),
            "native"
        );
        assert!(!resolve_protocol(&ProtocolKind::Tag, "m", false, true).binds_tools());
    }
}
