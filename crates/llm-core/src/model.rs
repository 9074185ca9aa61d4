//! The one seam every backend implements: [`ChatModel`].

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};

use crate::{ChatEvent, ChatRequest, ChatResponse, ModelError};

/// A stream of [`ChatEvent`]s; it ends after `Finish`, or with an error.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatEvent, ModelError>> + Send>>;

/// What a backend can do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelInfo {
    /// The model's name.
    pub model: String,
    /// Whether the model supports native function calling (G7). When false, upper layers
    /// describe tools in the prompt and parse the text instead.
    pub function_calling: bool,
    /// Who serves the model, as OpenTelemetry's `gen_ai.provider.name` names it (`openai`,
    /// `anthropic`, …); `None` when unknown. Traces only.
    pub provider: Option<String>,
    /// Whether a request's `response_format` JSON schema leaves its bound tools callable: the
    /// response is then either tool calls or an answer that is JSON of the schema (the embedded
    /// local model's grammar allows exactly that). When true, a typed run of tool-system
    /// (`Agent::run_as`) with native calls sends its schema as the `response_format` of each
    /// request; when false (the default: many providers stop calling tools under a schema) the
    /// schema is only described in the system prompt.
    pub answer_schema_with_tools: bool,
}

impl ModelInfo {
    /// Model info.
    pub fn new(model: impl Into<String>, function_calling: bool) -> Self {
        Self {
            model: model.into(),
            function_calling,
            provider: None,
            answer_schema_with_tools: false,
        }
    }

    /// Says whether a `response_format` JSON schema leaves bound tools callable (see
    /// [`ModelInfo::answer_schema_with_tools`]).
    pub fn with_answer_schema_with_tools(mut self, yes: bool) -> Self {
        self.answer_schema_with_tools = yes;
        self
    }

    /// Names who serves the model (`gen_ai.provider.name` on trace spans).
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }
}

/// A chat model: a whole-response call and a streaming call.
///
/// Implement this to plug in any backend; everything above Stage 0 talks to this trait only.
///
/// ```
/// use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, FinishReason, ModelError, ModelInfo};
/// struct Echo;
/// #[async_trait]
/// impl ChatModel for Echo {
///     fn info(&self) -> ModelInfo { ModelInfo::new("echo", true) }
///     async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
///         let last = req.messages.last().map(|m| m.content().to_owned()).unwrap_or_default();
///         Ok(ChatResponse::new(last, vec![], FinishReason::Stop, None))
///     }
/// }
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let r = Echo.chat(ChatRequest::new(vec![toolwright_core::Message::user("hi")])).await.unwrap();
/// assert_eq!(r.content, "hi");
/// # });
/// ```
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// The model's name and capabilities.
    fn info(&self) -> ModelInfo;

    /// One whole response.
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError>;

    /// A streamed response: text deltas as they arrive, tool calls reassembled, then `Finish`.
    /// By default, the whole response of [`ChatModel::chat`] as one stream.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        Ok(response_stream(self.chat(request).await?))
    }
}

#[async_trait::async_trait]
impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    fn info(&self) -> ModelInfo {
        (**self).info()
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        (**self).chat(request).await
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        (**self).stream(request).await
    }
}

/// Turns a whole response into the event stream a streaming backend would send.
/// Useful for backends that cannot stream.
pub fn response_stream(response: ChatResponse) -> ChatStream {
    let mut events = Vec::with_capacity(
        2 + response.parts.len() + response.tool_calls.len() + response.invalid_tool_calls.len(),
    );
    for part in response.parts {
        events.push(Ok(ChatEvent::Part(part)));
    }
    if !response.content.is_empty() {
        events.push(Ok(ChatEvent::TextDelta(response.content)));
    }
    for call in response.tool_calls {
        events.push(Ok(ChatEvent::ToolCall(call)));
    }
    for bad in response.invalid_tool_calls {
        events.push(Ok(ChatEvent::InvalidToolCall(bad)));
    }
    events.push(Ok(ChatEvent::Finish {
        reason: response.finish_reason,
        usage: response.usage,
    }));
    Box::pin(futures::stream::iter(events))
}

/// Drains a stream into a whole [`ChatResponse`]; fails if the stream fails or never finishes.
pub async fn collect_stream(mut stream: ChatStream) -> Result<ChatResponse, ModelError> {
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    let mut invalid = Vec::new();
    let mut parts = Vec::new();
    while let Some(event) = stream.next().await {
        match event? {
            ChatEvent::TextDelta(t) => content.push_str(&t),
            ChatEvent::ToolCall(c) => tool_calls.push(c),
            ChatEvent::InvalidToolCall(c) => invalid.push(c),
            ChatEvent::Part(p) => parts.push(p),
            ChatEvent::Finish { reason, usage } => {
                return Ok(ChatResponse::new(content, tool_calls, reason, usage)
                    .with_invalid_tool_calls(invalid)
                    .with_parts(parts));
            }
            ChatEvent::ToolCallDelta { .. } | ChatEvent::ReasoningDelta(_) => {}
        }
    }
    Err(ModelError::StreamInterrupted {
        detail: "the stream closed without a finish event".into(),
        partial_text: content,
    })
}
