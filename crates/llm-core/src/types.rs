//! Provider-neutral data: messages, tool calls, tool specs, requests and responses.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use serde_json::Value;

use crate::{CachePolicy, Part};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The person (or the program acting for them).
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering an assistant's tool call.
    Tool,
}

/// A tool call made by the model: `arguments` is already parsed JSON (G3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id; the tool message answering this call carries it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as a JSON value (normally an object). A JSON *string* here is the raw
    /// text of a call whose arguments were not valid JSON, as the history records it
    /// ([`InvalidToolCall::as_recorded_call`]); backends send it back verbatim.
    pub arguments: Value,
}

impl ToolCall {
    /// A tool call with the given id, name and arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }

    /// Parses the argument text a model wrote: an empty text means no arguments (`{}`);
    /// text that is not JSON gives an [`InvalidToolCall`] (G5) that keeps it.
    ///
    /// ```
    /// use toolwright_core::ToolCall;
    /// assert_eq!(ToolCall::parse("c1", "f", " ").unwrap().arguments, serde_json::json!({}));
    /// let bad = ToolCall::parse("c2", "get_weather", "{city:").unwrap_err();
    /// assert_eq!((bad.name.as_str(), bad.raw.as_str()), ("get_weather", "{city:"));
    /// ```
    pub fn parse(
        id: impl Into<String>,
        name: impl Into<String>,
        raw: &str,
    ) -> Result<Self, InvalidToolCall> {
        if raw.trim().is_empty() {
            return Ok(Self::new(id, name, Value::Object(Default::default())));
        }
        match serde_json::from_str(raw) {
            Ok(arguments) => Ok(Self::new(id, name, arguments)),
            Err(e) => Err(InvalidToolCall::new(id, name, raw, e.to_string())),
        }
    }

    /// The argument text to send back to a provider: the JSON text of `arguments`, or the
    /// raw text verbatim when the call was recorded invalid.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(raw) => raw.clone(),
            v => v.to_string(),
        }
    }
}

/// A call whose arguments are not valid JSON (G5): what the model wrote, kept as it was.
///
/// ```
/// let bad = toolwright_core::InvalidToolCall::new("call_2", "get_weather", "{city:", "key must be a string");
/// assert!(bad.model_message().contains("get_weather"));
/// assert!(bad.model_message().contains("{city:"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InvalidToolCall {
    /// Provider-assigned id (or `call_N` when the provider sent none).
    pub id: String,
    /// The tool's name, as the model wrote it.
    pub name: String,
    /// The raw argument text.
    pub raw: String,
    /// What the JSON parser said.
    pub error: String,
}

impl InvalidToolCall {
    /// An invalid call.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        raw: impl Into<String>,
        error: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            raw: raw.into(),
            error: error.into(),
        }
    }
    /// The G5 text the model is answered with: names the tool and quotes the raw text.
    pub fn model_message(&self) -> String {
        const SHOWN: usize = 2_000;
        let raw = crate::cap::cut_at(&self.raw, SHOWN);
        let more = if raw.len() < self.raw.len() {
            " …(cut)"
        } else {
            ""
        };
        format!(
            "Invalid JSON arguments for tool `{}`: {}. You wrote: {raw}{more}. Call the tool again with a valid JSON object.",
            self.name, self.error
        )
    }
    /// The call as the history records it: the raw text kept as a JSON string in
    /// `arguments`, which backends send back verbatim.
    pub fn as_recorded_call(&self) -> ToolCall {
        ToolCall::new(
            self.id.clone(),
            self.name.clone(),
            Value::String(self.raw.clone()),
        )
    }
}

/// One message of a conversation.
///
/// ```
/// use toolwright_core::{Message, Role, ToolCall};
/// let call = ToolCall::new("call_1", "get_weather", serde_json::json!({"city": "Beijing"}));
/// let history = vec![
///     Message::system("You are helpful."),
///     Message::user("Weather in Beijing?"),
///     Message::assistant_with_tool_calls("", vec![call]),
///     Message::tool("call_1", "get_weather", r#"{"temp":22}"#),
/// ];
/// assert_eq!(history[3].role(), Role::Tool);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
// Exhaustive on purpose: every backend must translate every case; a new one must fail
// to compile in each backend rather than be dropped silently.
pub enum Message {
    /// System instructions.
    System {
        /// The text.
        content: String,
    },
    /// A user turn.
    User {
        /// The text.
        content: String,
        /// What follows the text: images, audio, files, cache breakpoints.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<Part>,
    },
    /// A model turn: text, tool calls, or both.
    Assistant {
        /// The text (may be empty when the model only called tools).
        #[serde(default)]
        content: String,
        /// Tool calls, in the order the model made them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The model's reasoning and any other parts of its turn, in the order it made them;
        /// on the wire they come before the text and the calls.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<Part>,
    },
    /// The result of one tool call.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// The result text given to the model.
        content: String,
        /// What follows the text: images, audio, files the tool returned.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<Part>,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::user_with_parts(content, Vec::new())
    }
    /// A user message with parts after its text (images, files, …).
    pub fn user_with_parts(content: impl Into<String>, parts: Vec<Part>) -> Self {
        Self::User {
            content: content.into(),
            parts,
        }
    }
    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::assistant_with_tool_calls(content, Vec::new())
    }
    /// An assistant message that calls tools.
    pub fn assistant_with_tool_calls(
        content: impl Into<String>,
        tool_calls: Vec<ToolCall>,
    ) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls,
            parts: Vec::new(),
        }
    }
    /// A tool result answering the call `tool_call_id`.
    pub fn tool(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self::tool_with_parts(tool_call_id, name, content, Vec::new())
    }
    /// A tool result with parts after its text (a screenshot, a file, …).
    pub fn tool_with_parts(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
        parts: Vec<Part>,
    ) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            name: name.into(),
            content: content.into(),
            parts,
        }
    }
    /// The same message with `parts` added after its own; a system message, which holds
    /// text only, is returned unchanged.
    pub fn with_parts(mut self, more: Vec<Part>) -> Self {
        match &mut self {
            Self::System { .. } => {}
            Self::User { parts, .. } | Self::Assistant { parts, .. } | Self::Tool { parts, .. } => {
                parts.extend(more)
            }
        }
        self
    }
    /// The message's role.
    pub fn role(&self) -> Role {
        match self {
            Self::System { .. } => Role::System,
            Self::User { .. } => Role::User,
            Self::Assistant { .. } => Role::Assistant,
            Self::Tool { .. } => Role::Tool,
        }
    }
    /// The message's text (its leading text; [`Part::Text`] parts may add more).
    pub fn content(&self) -> &str {
        match self {
            Self::System { content }
            | Self::User { content, .. }
            | Self::Assistant { content, .. }
            | Self::Tool { content, .. } => content,
        }
    }
    /// The parts after the text (empty for a system message).
    pub fn parts(&self) -> &[Part] {
        match self {
            Self::System { .. } => &[],
            Self::User { parts, .. } | Self::Assistant { parts, .. } | Self::Tool { parts, .. } => {
                parts
            }
        }
    }
    /// The tool calls of an assistant message (empty for every other role).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// A tool as the model sees it: name, description and a JSON Schema for its arguments.
///
/// Cloning one is cheap (three reference counts, no copy): a tool list is handed to every
/// request of every round, and a provider lists its tools again each time it is asked. Two
/// clones of one spec compare equal without walking the schema.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$` for most providers).
    pub name: Arc<str>,
    /// What it does, for the model.
    pub description: Arc<str>,
    /// JSON Schema of the arguments object. Shared, not copied: a spec is cloned into every
    /// request of every round, and a schema is the largest part of it.
    pub parameters: Arc<Value>,
}

impl PartialEq for ToolSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && (Arc::ptr_eq(&self.parameters, &other.parameters)
                || self.parameters == other.parameters)
    }
}

impl ToolSpec {
    /// A tool spec.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: Arc::from(name.into()),
            description: Arc::from(description.into()),
            parameters: Arc::new(parameters),
        }
    }
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// Exhaustive on purpose: every backend must translate every case; a new one must fail
// to compile in each backend rather than be dropped silently.
pub enum ToolChoice {
    /// The model decides (the provider default when tools are bound).
    Auto,
    /// The model must not call a tool.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Function(String),
}

/// The shape the model's answer must take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Exhaustive on purpose: every backend must translate every case; a new one must fail
// to compile in each backend rather than be dropped silently.
pub enum ResponseFormat {
    /// Free text.
    Text,
    /// Any JSON object (`{"type":"json_object"}`).
    JsonObject,
    /// JSON valid against a schema (`{"type":"json_schema", ...}`).
    JsonSchema {
        /// A name for the schema.
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// Ask the provider for strict adherence.
        strict: bool,
    },
}

/// One chat completion request.
///
/// ```
/// use toolwright_core::{ChatRequest, Message, ToolSpec};
/// let req = ChatRequest::new(vec![Message::user("hi")])
///     .with_tools(vec![ToolSpec::new("noop", "does nothing", serde_json::json!({"type":"object","properties":{}}))])
///     .with_temperature(0.2);
/// assert_eq!(req.tools.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Bound tools. Empty means the request carries no `tools` field at all (G2).
    pub tools: Vec<ToolSpec>,
    /// Tool choice; `None` leaves it to the provider.
    pub tool_choice: Option<ToolChoice>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Maximum tokens to generate.
    pub max_tokens: Option<u32>,
    /// Required answer shape.
    pub response_format: Option<ResponseFormat>,
    /// Overrides the backend's configured model for this request.
    pub model: Option<String>,
    /// Where cache breakpoints go ([`CachePolicy::Auto`] by default).
    #[serde(default)]
    pub cache: CachePolicy,
    /// How many leading messages the next request of this conversation repeats unchanged
    /// (the context builder knows: system, earlier rounds). [`CachePolicy::Auto`] places a
    /// breakpoint at their end; `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_prefix: Option<usize>,
    /// A key that groups the requests of one conversation for the provider's prompt cache
    /// (OpenAI's `prompt_cache_key`); never sent under [`CachePolicy::Off`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
}

impl ChatRequest {
    /// A request with these messages and nothing else set.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }
    /// Bind tools.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }
    /// Set the tool choice.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }
    /// Set the temperature.
    pub fn with_temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }
    /// Set the maximum number of generated tokens.
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }
    /// Set the response format.
    pub fn with_response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }
    /// Use another model than the backend's default for this request.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
    /// Set where cache breakpoints go.
    pub fn with_cache(mut self, policy: CachePolicy) -> Self {
        self.cache = policy;
        self
    }
    /// Say how many leading messages the next request repeats unchanged.
    pub fn with_stable_prefix(mut self, messages: usize) -> Self {
        self.stable_prefix = Some(messages);
        self
    }
    /// Group this conversation's requests in the provider's prompt cache.
    pub fn with_cache_key(mut self, key: impl Into<String>) -> Self {
        self.cache_key = Some(key.into());
        self
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end of the answer.
    Stop,
    /// The model called tools.
    ToolCalls,
    /// The token limit was reached: the answer is cut off.
    Length,
    /// The provider's content filter stopped it.
    ContentFilter,
    /// Anything else the provider said.
    Other(String),
}

impl FinishReason {
    /// Maps a provider's string; `None` for a missing or empty value.
    pub fn from_wire(s: &str) -> Option<Self> {
        Some(match s {
            "" => return None,
            "stop" | "eos" | "end_turn" | "stop_sequence" => Self::Stop,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolCalls,
            "length" | "max_tokens" => Self::Length,
            "content_filter" => Self::ContentFilter,
            other => Self::Other(other.to_owned()),
        })
    }
}

/// Token counts reported by the provider, the same on every backend.
///
/// `prompt_tokens` counts every input token, those read from or written to the cache
/// included (Anthropic reports them apart; they are added back here);
/// `completion_tokens` counts every output token, reasoning included.
///
/// ```
/// use toolwright_core::Usage;
/// let mut run = Usage::default();
/// run += Usage { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120, cache_read_tokens: 80, ..Usage::default() };
/// run += Usage { prompt_tokens: 150, completion_tokens: 10, total_tokens: 160, ..Usage::default() };
/// assert_eq!((run.prompt_tokens, run.cache_read_tokens, run.total_tokens), (250, 80, 280));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt, cached ones included.
    pub prompt_tokens: u32,
    /// Tokens generated, reasoning included.
    pub completion_tokens: u32,
    /// Their sum.
    pub total_tokens: u32,
    /// Prompt tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u32,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: u32,
    /// Generated tokens the model spent reasoning.
    #[serde(default)]
    pub reasoning_tokens: u32,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Self) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(o.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(o.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(o.total_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(o.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(o.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(o.reasoning_tokens);
    }
}

impl std::ops::Add for Usage {
    type Output = Self;
    fn add(mut self, o: Self) -> Self {
        self += o;
        self
    }
}

/// A whole response: the assistant's message, why it stopped, and usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatResponse {
    /// The answer text (empty when the model only called tools).
    pub content: String,
    /// Tool calls, in order; empty when the model answered in text (G4).
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Token usage, when the provider reports it.
    pub usage: Option<Usage>,
    /// Calls the model made whose arguments are not valid JSON (G5), in order. They are not
    /// errors of the response: the other calls stand, and the tool loop answers each of
    /// these with a message the model can act on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_tool_calls: Vec<InvalidToolCall>,
    /// The model's reasoning and other parts of its turn, in order
    /// ([`Message::Assistant`]'s `parts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
}

impl ChatResponse {
    /// A response.
    pub fn new(
        content: impl Into<String>,
        tool_calls: Vec<ToolCall>,
        finish_reason: FinishReason,
        usage: Option<Usage>,
    ) -> Self {
        Self {
            content: content.into(),
            tool_calls,
            finish_reason,
            usage,
            invalid_tool_calls: Vec::new(),
            parts: Vec::new(),
        }
    }
    /// The same response with these parts (reasoning, …) attached.
    pub fn with_parts(mut self, parts: Vec<Part>) -> Self {
        self.parts = parts;
        self
    }
    /// The same response with these invalid calls attached.
    pub fn with_invalid_tool_calls(mut self, calls: Vec<InvalidToolCall>) -> Self {
        self.invalid_tool_calls = calls;
        self
    }
    /// The response as an assistant message for the history: valid calls as they are,
    /// invalid ones as [`InvalidToolCall::as_recorded_call`] so the tool message answering
    /// each one has the call it answers.
    pub fn to_message(&self) -> Message {
        let mut calls = self.tool_calls.clone();
        calls.extend(
            self.invalid_tool_calls
                .iter()
                .map(InvalidToolCall::as_recorded_call),
        );
        Message::assistant_with_tool_calls(self.content.clone(), calls)
            .with_parts(self.parts.clone())
    }
}

/// One event of a streamed response (G6).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ChatEvent {
    /// Answer text, delivered as it arrives.
    TextDelta(String),
    /// A piece of a tool call, for UIs that show calls forming. `index` orders the calls.
    ToolCallDelta {
        /// Position of the call in the response.
        index: usize,
        /// The call id, when this piece carries it.
        id: Option<String>,
        /// The tool name, when this piece carries it.
        name: Option<String>,
        /// A fragment of the JSON arguments text.
        arguments: String,
    },
    /// A whole tool call, reassembled from its deltas and parsed; sent before `Finish`.
    ToolCall(ToolCall),
    /// A whole tool call whose arguments are not valid JSON (G5). The stream goes on: the
    /// other calls stand, and the loop answers this one with [`InvalidToolCall::model_message`].
    InvalidToolCall(InvalidToolCall),
    /// Reasoning text, delivered as it arrives (for UIs; the whole reasoning, with its
    /// signature, follows as a [`ChatEvent::Part`]).
    ReasoningDelta(String),
    /// A whole part of the model's turn (reasoning with its signature, …), sent before
    /// `Finish` in the order the model made them.
    Part(Part),
    /// The end of the response.
    Finish {
        /// Why the model stopped.
        reason: FinishReason,
        /// Usage, when the provider reports it.
        usage: Option<Usage>,
    },
}
