//! [`Agent`]: the simple way to run the tool loop.

use std::sync::Arc;
use std::time::Duration;

use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_core::{ChatModel, Part, TokenCounter};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use toolwright_output_control::Validator;

use crate::answer::{AnswerShape, TypedOutput};
use crate::approval::{ApprovalDecision, ApprovalKey, PendingApproval};
use crate::protocols::ProtocolKind;
use crate::runner::{
    LoopError, LoopOptions, LoopOutput, LoopStream, pending_approval, resume_tool_loop,
    resume_tool_loop_stream, run_tool_loop, run_tool_loop_stream,
};
use crate::turn::TurnSections;
use crate::typed_stream::TypedLoopStream;
use crate::{Dispatcher, RegistryError, Tool, ToolProvider, ToolRegistry};

/// A model, its tools, a session store and loop options, ready to answer.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, ModelError, Message, ModelInfo, ToolCall, response_stream};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use toolwright_tool_system::{Agent, FnTool};
/// use toolwright_core::{ToolContext};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Args { city: String }
/// let weather = FnTool::typed("get_weather", "Get current weather for a city",
///     |a: Args, _: ToolContext| async move { Ok(format!("22°C in {}", a.city)) });
///
/// # struct Demo;
/// # #[async_trait]
/// # impl ChatModel for Demo {
/// #     fn info(&self) -> ModelInfo { ModelInfo::new("demo", true) }
/// #     async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
/// #         Ok(match req.messages.last() {
/// #             Some(Message::Tool { content, .. }) => ChatResponse::new(content.clone(), vec![], FinishReason::Stop, None),
/// #             _ => ChatResponse::new("", vec![ToolCall::new("c1", "get_weather", serde_json::json!({"city": "Beijing"}))], FinishReason::ToolCalls, None),
/// #         })
/// #     }
/// #     async fn stream(&self, req: ChatRequest) -> Result<ChatStream, ModelError> { Ok(response_stream(self.chat(req).await?)) }
/// # }
/// let agent = Agent::builder(Demo).tool(weather).build()?;
/// let out = agent.run("session-1", "What's the weather in Beijing?").await?;
/// assert_eq!(out.answer, "22°C in Beijing");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    model: Arc<dyn ChatModel>,
    store: Arc<dyn SessionStore>,
    dispatcher: Arc<Dispatcher>,
    options: LoopOptions,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model.info().model)
            .field("dispatcher", &self.dispatcher)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts building an agent over `model`.
    pub fn builder(model: impl ChatModel + 'static) -> AgentBuilder {
        AgentBuilder::new(Arc::new(model))
    }

    /// Answers `text` in session `session_id` (created if new), running tools as the model asks.
    pub async fn run(&self, session_id: &str, text: &str) -> Result<LoopOutput, LoopError> {
        self.run_with_parts(session_id, text, Vec::new()).await
    }

    /// Like [`run`](Self::run), for a message with parts after its text (a person's picture,
    /// a file): it is stored and sent as `Message::user_with_parts(text, parts)`. A model that
    /// cannot take a part fails the run with [`ModelError::Unsupported`](toolwright_core::ModelError::Unsupported)
    /// before it generates; the message stays in the session.
    pub async fn run_with_parts(
        &self,
        session_id: &str,
        text: &str,
        parts: Vec<Part>,
    ) -> Result<LoopOutput, LoopError> {
        run_tool_loop(
            &*self.model,
            &*self.store,
            &self.dispatcher,
            session_id,
            text,
            parts,
            &self.options,
        )
        .await
    }

    /// This agent's run as a sub-agent under a run that holds for it (see
    /// [`crate::runner::run_nested`]).
    pub(crate) async fn run_nested(
        &self,
        session_id: &str,
        text: &str,
        resumed: Option<crate::run::AgentRun>,
        held_up: &std::sync::Mutex<Option<crate::run::AgentRun>>,
    ) -> Result<LoopOutput, LoopError> {
        crate::runner::run_nested(
            &*self.model,
            &*self.store,
            &self.dispatcher,
            session_id,
            text,
            resumed,
            held_up,
            &self.options,
        )
        .await
    }

    /// Answers `text` like [`run`](Self::run), with the answer as a `T`: tools stay available
    /// while the model works, and its final answer must be JSON that fits `T`'s schema
    /// (`schemars`). The schema goes to the model in the system prompt, in the form the call
    /// protocol reads answers in — not as a `response_format` on every turn, which stops most
    /// models calling tools; a model whose schema leaves its tools callable
    /// ([`ModelInfo::answer_schema_with_tools`](toolwright_core::ModelInfo::answer_schema_with_tools),
    /// the embedded local model) gets it as the `response_format` too
    /// ([`CallProtocol::answer_format`](crate::protocol::CallProtocol::answer_format)). An answer that does not fit is sent back once, saying what is
    /// wrong; one that still does not fit is [`LoopError::AnswerDoesNotFit`] (the answer stays
    /// in the session). A run held for approval gives `value: None`; go on with
    /// [`resume_as`](Self::resume_as).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ModelError, ModelInfo, ToolCall};
    /// use toolwright_tool_system::{Agent, FnTool};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Forecast { city: String, celsius: i32 }
    /// # struct Demo;
    /// # #[async_trait]
    /// # impl ChatModel for Demo {
    /// #     fn info(&self) -> ModelInfo { ModelInfo::new("demo", true) }
    /// #     async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
    /// #         Ok(match req.messages.last() {
    /// #             Some(Message::Tool { .. }) => ChatResponse::new(r#"{"city": "Oslo", "celsius": 4}"#, vec![], FinishReason::Stop, None),
    /// #             _ => ChatResponse::new("", vec![ToolCall::new("c1", "temperature", serde_json::json!({}))], FinishReason::ToolCalls, None),
    /// #         })
    /// #     }
    /// # }
    /// let agent = Agent::builder(Demo)
    ///     .tool(FnTool::new("temperature", "Oslo's temperature now", serde_json::json!({"type": "object"}),
    ///         |_, _| async { Ok(serde_json::json!(4)) }))
    ///     .build()?;
    /// let out = agent.run_as::<Forecast>("s1", "How warm is Oslo?").await?;
    /// let forecast = out.value.expect("not held for approval");
    /// assert_eq!((forecast.city.as_str(), forecast.celsius), ("Oslo", 4));
    /// # Ok(()) }
    /// ```
    pub async fn run_as<T: DeserializeOwned + JsonSchema + 'static>(
        &self,
        session_id: &str,
        text: &str,
    ) -> Result<TypedOutput<T>, LoopError> {
        let (options, validator) = self.typed::<T>()?;
        let out = run_tool_loop(
            &*self.model,
            &*self.store,
            &self.dispatcher,
            session_id,
            text,
            Vec::new(),
            &options,
        )
        .await?;
        TypedOutput::read(out, &validator)
    }

    /// [`resume`](Self::resume) of a run started with [`run_as`](Self::run_as): the same
    /// decisions, and the answer as a `T` once the run ends.
    pub async fn resume_as<T: DeserializeOwned + JsonSchema + 'static>(
        &self,
        session_id: &str,
        decisions: &[ApprovalDecision],
    ) -> Result<TypedOutput<T>, LoopError> {
        let (options, validator) = self.typed::<T>()?;
        let out = resume_tool_loop(
            &*self.model,
            &*self.store,
            &self.dispatcher,
            session_id,
            decisions,
            &options,
        )
        .await?;
        TypedOutput::read(out, &validator)
    }

    /// [`run_as`](Self::run_as) as a stream of events for a UI: the answer's text streams as
    /// [`LoopEvent::TextDelta`](crate::LoopEvent::TextDelta)s like any answer, and
    /// [`TypedLoopStream::read`] takes the last event's output as a `T`. Dropping the stream
    /// cancels the run.
    ///
    /// ```
    /// # use futures::StreamExt;
    /// # use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, FinishReason, ModelError, ModelInfo};
    /// # use toolwright_tool_system::{Agent, LoopEvent};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Verdict { ok: bool }
    /// # struct Demo;
    /// # #[async_trait]
    /// # impl ChatModel for Demo {
    /// #     fn info(&self) -> ModelInfo { ModelInfo::new("demo", true) }
    /// #     async fn chat(&self, _: ChatRequest) -> Result<ChatResponse, ModelError> {
    /// #         Ok(ChatResponse::new(r#"{"ok": true}"#, vec![], FinishReason::Stop, None))
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder(Demo).build()?;
    /// let mut events = agent.run_stream_as::<Verdict>("s1", "Is it fine?")?;
    /// while let Some(event) = events.next().await {
    ///     match event {
    ///         LoopEvent::TextDelta(text) => print!("{text}"),
    ///         LoopEvent::Finished(out) => assert!(events.read(out)?.value.unwrap().ok),
    ///         LoopEvent::Failed(e) => return Err(e.into()),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LoopError`] when `T`'s schema cannot be compiled. The run's own failures arrive as
    /// [`LoopEvent::Failed`](crate::LoopEvent::Failed); an answer that still does not fit
    /// after its correction round is [`LoopError::AnswerDoesNotFit`] from
    /// [`TypedLoopStream::read`], as from [`run_as`](Self::run_as).
    pub fn run_stream_as<T: DeserializeOwned + JsonSchema + 'static>(
        &self,
        session_id: impl Into<String>,
        text: impl Into<String>,
    ) -> Result<TypedLoopStream<T>, LoopError> {
        let (options, validator) = self.typed::<T>()?;
        let events = run_tool_loop_stream(
            Arc::clone(&self.model),
            Arc::clone(&self.store),
            Arc::clone(&self.dispatcher),
            session_id,
            text,
            Vec::new(),
            options,
        );
        Ok(TypedLoopStream::new(events, validator))
    }

    /// [`resume_stream`](Self::resume_stream) of a run started with
    /// [`run_stream_as`](Self::run_stream_as) or [`run_as`](Self::run_as).
    ///
    /// # Errors
    /// As [`run_stream_as`](Self::run_stream_as).
    pub fn resume_stream_as<T: DeserializeOwned + JsonSchema + 'static>(
        &self,
        session_id: impl Into<String>,
        decisions: Vec<ApprovalDecision>,
    ) -> Result<TypedLoopStream<T>, LoopError> {
        let (options, validator) = self.typed::<T>()?;
        let events = resume_tool_loop_stream(
            Arc::clone(&self.model),
            Arc::clone(&self.store),
            Arc::clone(&self.dispatcher),
            session_id,
            decisions,
            options,
        );
        Ok(TypedLoopStream::new(events, validator))
    }

    /// This agent's options with the answer shape of `T`, and its compiled validator.
    fn typed<T: DeserializeOwned + JsonSchema + 'static>(
        &self,
    ) -> Result<(LoopOptions, Arc<Validator>), LoopError> {
        let (shape, validator) = AnswerShape::of::<T>()?;
        let mut options = self.options.clone();
        options.answer = Some(shape);
        Ok((options, validator))
    }

    /// Like [`run`](Self::run), as a stream of events for a UI; dropping it cancels the run.
    pub fn run_stream(&self, session_id: impl Into<String>, text: impl Into<String>) -> LoopStream {
        self.run_stream_with_parts(session_id, text, Vec::new())
    }

    /// Like [`run_with_parts`](Self::run_with_parts), as a stream of events for a UI;
    /// dropping it cancels the run.
    pub fn run_stream_with_parts(
        &self,
        session_id: impl Into<String>,
        text: impl Into<String>,
        parts: Vec<Part>,
    ) -> LoopStream {
        run_tool_loop_stream(
            Arc::clone(&self.model),
            Arc::clone(&self.store),
            Arc::clone(&self.dispatcher),
            session_id,
            text,
            parts,
            self.options.clone(),
        )
    }

    /// Decides calls held for approval in session `session_id` (see [`PendingApproval`]) and,
    /// once all are decided, goes on with the run: approved calls run, declined ones get a
    /// "the user declined" result, the round is recorded, the model answers. With calls still
    /// undecided it returns at once, still pending. Refused decisions are
    /// [`LoopError::Approval`] and change nothing.
    pub async fn resume(
        &self,
        session_id: &str,
        decisions: &[ApprovalDecision],
    ) -> Result<LoopOutput, LoopError> {
        resume_tool_loop(
            &*self.model,
            &*self.store,
            &self.dispatcher,
            session_id,
            decisions,
            &self.options,
        )
        .await
    }

    /// Like [`resume`](Self::resume), as a stream of events for a UI.
    pub fn resume_stream(
        &self,
        session_id: impl Into<String>,
        decisions: Vec<ApprovalDecision>,
    ) -> LoopStream {
        resume_tool_loop_stream(
            Arc::clone(&self.model),
            Arc::clone(&self.store),
            Arc::clone(&self.dispatcher),
            session_id,
            decisions,
            self.options.clone(),
        )
    }

    /// The calls of session `session_id` waiting for approval, with fresh tokens (after a page
    /// reload or a restart); `None` when nothing waits.
    pub async fn pending_approval(
        &self,
        session_id: &str,
    ) -> Result<Option<PendingApproval>, LoopError> {
        pending_approval(&*self.store, session_id, &self.options).await
    }

    /// This agent acting for `principal` (`LoopOptions::principal`): the approval tokens its
    /// runs hand out are bound to `principal`, and its decisions are taken and recorded as
    /// `principal`'s. Cheap (the model, tools and store are shared); make one per request.
    pub fn acting_as(&self, principal: impl Into<String>) -> Self {
        let mut agent = self.clone();
        agent.options.principal = principal.into();
        agent
    }

    /// Who this agent acts for ([`Agent::acting_as`]); empty when nobody is named.
    pub(crate) fn principal(&self) -> &str {
        &self.options.principal
    }

    /// The session store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The dispatcher.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }
}

/// Builds an [`Agent`]; see [`Agent::builder`].
pub struct AgentBuilder {
    model: Arc<dyn ChatModel>,
    registry: ToolRegistry,
    error: Option<RegistryError>,
    providers: Vec<Arc<dyn ToolProvider>>,
    store: Option<Arc<dyn SessionStore>>,
    options: LoopOptions,
    tool_timeout: Option<Duration>,
    max_result_bytes: Option<usize>,
    blob_store: Option<Arc<dyn toolwright_core::BlobStore>>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// A builder over a shared model (what [`Agent::builder`] makes; an `Arc` of a model is a
    /// model too).
    pub(crate) fn new(model: Arc<dyn ChatModel>) -> Self {
        Self {
            model,
            registry: ToolRegistry::new(),
            error: None,
            providers: Vec::new(),
            store: None,
            options: LoopOptions::default(),
            tool_timeout: None,
            max_result_bytes: None,
            blob_store: None,
        }
    }
    /// Adds a built-in tool (a bad or duplicate name is reported by [`build`](Self::build)).
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        if let Err(e) = self.registry.register(tool)
            && self.error.is_none()
        {
            self.error = Some(e);
        }
        self
    }
    /// Adds another source of tools (skills, MCP), after the built-ins.
    pub fn provider(mut self, provider: Arc<dyn ToolProvider>) -> Self {
        self.providers.push(provider);
        self
    }
    /// The session store (default: a new [`MemoryStore`]).
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }
    /// Default time limit of a tool call (default 30 s).
    pub fn tool_timeout(mut self, t: Duration) -> Self {
        self.tool_timeout = Some(t);
        self
    }
    /// Cap on a result's size given to the model (default 64 KiB).
    pub fn max_result_bytes(mut self, n: usize) -> Self {
        self.max_result_bytes = Some(n);
        self
    }
    /// Where a tool result's media past the inline limit (20 MiB in all) is kept, e.g. an
    /// [`FsBlobStore`](crate::FsBlobStore): the model is given a
    /// [`Part::Resource`](toolwright_core::Part::Resource) (URI, media type, size) in its
    /// place. Without one such media is named in a text part and its bytes dropped.
    pub fn blob_store(mut self, store: Arc<dyn toolwright_core::BlobStore>) -> Self {
        self.blob_store = Some(store);
        self
    }
    /// The base system prompt; the tool descriptions of prompt-based protocols follow it as a
    /// section.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.options.system_prompt = prompt.into();
        self
    }
    /// The call protocol (default [`ProtocolKind::Auto`]: native function calling when the
    /// model has it, the JSON decision otherwise).
    pub fn protocol(mut self, protocol: ProtocolKind) -> Self {
        self.options.protocol = protocol;
        self
    }
    /// Adds a fixed section to the system prompt, after the tool section.
    pub fn section(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        self.options.sections.push((name.into(), text.into()));
        self
    }
    /// Adds a hook that computes sections from each turn's user message (the MCP bridge's
    /// tiered descriptions are one); they are never stored as history (C2).
    pub fn turn_sections(mut self, hook: Arc<dyn TurnSections>) -> Self {
        self.options.turn_sections.push(hook);
        self
    }
    /// The most rounds of tool calls in one run (default 5): the response after the last round
    /// that still asks for tools ends the run with its text and a warning (T5).
    pub fn max_iterations(mut self, rounds: usize) -> Self {
        self.options.max_iterations = rounds;
        self
    }
    /// Whether an unreadable answer (a broken JSON decision) is sent back once with a request
    /// to fix it (default off: it is taken as the plain answer, T9).
    pub fn corrections(mut self, on: bool) -> Self {
        self.options.corrections = on;
        self
    }
    /// Whether the tag protocol reads `<tool_action>` tags (default on; off: tags are text, O7).
    pub fn tool_action_parsing(mut self, on: bool) -> Self {
        self.options.tool_action_parsing = on;
        self
    }
    /// The token budget of each request (default unlimited); the oldest history goes first,
    /// never separating a call from its result (C3).
    pub fn context_budget(mut self, tokens: usize) -> Self {
        self.options.context_budget = Some(tokens);
        self
    }
    /// The token counter for the budget (default: the model's tokenizer where one is known).
    pub fn counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.options.counter = Some(counter);
        self
    }
    /// Every call to tool `name`, from any provider, needs a person's approval.
    pub fn require_approval(mut self, name: impl Into<String>) -> Self {
        self.options.approval = std::mem::take(&mut self.options.approval).always(name);
        self
    }
    /// Calls to tool `name` need a person's approval when `predicate` holds for their arguments.
    pub fn require_approval_when(
        mut self,
        name: impl Into<String>,
        predicate: impl Fn(&serde_json::Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.options.approval = std::mem::take(&mut self.options.approval).when(name, predicate);
        self
    }
    /// The key that signs approval decisions ([`ApprovalKey`]): the same in every process that
    /// serves these sessions (default: a random key for this process, with a warning).
    pub fn approval_key(mut self, key: ApprovalKey) -> Self {
        self.options.approval_key = Some(key);
        self
    }
    /// How long a request that went on with approved calls may take to record their round
    /// (default 10 minutes). A round found still running past it (the process stopped, the
    /// request was dropped) is put to the person again, each call marked as possibly run. Set
    /// it above your slowest round of approved calls.
    pub fn approval_lease(mut self, lease: Duration) -> Self {
        self.options.approval_lease = lease;
        self
    }
    /// Who acts: an opaque id (a login's subject, a user name), empty by default for a program
    /// with one person. Approval tokens are bound to it, decisions accepted only from it and
    /// recorded under it. Per request, [`Agent::acting_as`] sets it on a built agent.
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.options.principal = principal.into();
        self
    }
    /// Count each run's cost ([`LoopOutput::cost`](crate::LoopOutput::cost)) at these prices
    /// instead of the built-in table's ([`toolwright_core::PriceTable::builtin`]).
    pub fn prices(mut self, prices: toolwright_core::PriceTable) -> Self {
        self.options.prices = Some(std::sync::Arc::new(prices));
        self
    }
    /// Lets this agent hand the conversation to `to`: its model sees a tool `name` described
    /// by `description` (no arguments); when it calls it, the round is recorded and `to`
    /// answers the person in the same session — `to`'s model, instructions, tools and options,
    /// this agent's session store — and the run's output is `to`'s answer. `to` can hand off
    /// further; past 4 handoffs in one turn the handoff call is refused and the model answers.
    pub fn handoff(
        mut self,
        to: &Agent,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        let name = name.into();
        let result = serde_json::json!(format!("Handed off to {name}: it answers the user now."));
        self = self.tool(crate::FnTool::new(
            name.clone(),
            description,
            serde_json::json!({"type": "object", "properties": {}}),
            move |_, _| {
                let result = result.clone();
                async move { Ok(result) }
            },
        ));
        self.options
            .handoffs
            .push(Arc::new(crate::options::Handoff {
                name,
                model: Arc::clone(&to.model),
                dispatcher: Arc::clone(&to.dispatcher),
                options: to.options.clone(),
            }));
        self
    }
    /// Adds a hook called before and after each model call and each tool call of every run
    /// ([`Hook`](crate::Hook)); hooks run in the order added.
    pub fn hook(mut self, hook: impl crate::Hook + 'static) -> Self {
        self.options.hooks.push(Arc::new(hook));
        self
    }
    /// Adds a check of the person's message, run before anything is stored or sent; one that
    /// trips fails the run with [`LoopError::GuardrailTripped`]. Checks run in the order added.
    pub fn input_guardrail(mut self, guardrail: impl crate::Guardrail + 'static) -> Self {
        self.options.input_guardrails.push(Arc::new(guardrail));
        self
    }
    /// Adds a check of the final answer, run before it is recorded or returned; one that trips
    /// fails the run with [`LoopError::GuardrailTripped`]. Checks run in the order added.
    pub fn output_guardrail(mut self, guardrail: impl crate::Guardrail + 'static) -> Self {
        self.options.output_guardrails.push(Arc::new(guardrail));
        self
    }
    /// Summarise older rounds with a model once a request would pass the compactor's mark,
    /// instead of only dropping them: the summary (stored beside the session, the rounds
    /// themselves kept) goes in the system message of later requests, and a tool call is never
    /// separated from its result. A summariser that fails, hangs or overruns its budget is
    /// logged and the request is trimmed as without compaction. Set
    /// [`context_budget`](Self::context_budget) above the mark.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use toolwright_core::{ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, ModelError, ModelInfo, response_stream};
    /// # struct M;
    /// # #[toolwright_core::async_trait]
    /// # impl ChatModel for M {
    /// #     fn info(&self) -> ModelInfo { ModelInfo::new("m", true) }
    /// #     async fn chat(&self, _: ChatRequest) -> Result<ChatResponse, ModelError> { Ok(ChatResponse::new("hi", vec![], FinishReason::Stop, None)) }
    /// #     async fn stream(&self, r: ChatRequest) -> Result<ChatStream, ModelError> { Ok(response_stream(self.chat(r).await?)) }
    /// # }
    /// use toolwright_context_engine::Compactor;
    /// use toolwright_tool_system::Agent;
    /// let summariser: Arc<dyn ChatModel> = Arc::new(M);
    /// let agent = Agent::builder(M)
    ///     .context_budget(16_000)
    ///     .compaction(Compactor::new(summariser, 12_000))
    ///     .build()
    ///     .unwrap();
    /// # let _ = agent;
    /// ```
    pub fn compaction(mut self, compactor: toolwright_context_engine::Compactor) -> Self {
        self.options.compaction = Some(compactor);
        self
    }
    /// How long one call of a hook or guardrail may take (default 10 s); one that takes longer,
    /// or panics, fails the run with [`LoopError::HookFailed`].
    pub fn hook_timeout(mut self, t: Duration) -> Self {
        self.options.hook_timeout = t;
        self
    }
    /// The agent, or the first tool registration error.
    pub fn build(self) -> Result<Agent, RegistryError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut d = Dispatcher::new().with_provider(Arc::new(self.registry));
        for p in self.providers {
            d = d.with_provider(p);
        }
        if let Some(t) = self.tool_timeout {
            d = d.with_default_timeout(t);
        }
        if let Some(n) = self.max_result_bytes {
            d = d.with_max_result_bytes(n);
        }
        if let Some(store) = self.blob_store {
            d = d.with_blob_store(store);
        }
        // What this agent holds for approval, handed to every call it makes: a tool that calls
        // other tools (code mode) refuses those calls without being told the policy.
        let policy = self.options.approval.clone();
        let providers = d.providers_need_approval();
        d = d.with_approval_gate(toolwright_core::ApprovalGate::new(move |name, args| {
            policy.requires(name, args) || providers(name, args)
        }));
        Ok(Agent {
            model: self.model,
            store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
            dispatcher: Arc::new(d),
            options: self.options,
        })
    }
}
