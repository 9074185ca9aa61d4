//! [`Agent`]: the simple way to run the tool loop.

use std::sync::Arc;
use std::time::Duration;

use toolwright_context_engine::{MemoryStore, SessionStore, TokenCounter};
use toolwright_core::ChatModel;

use crate::approval::{ApprovalDecision, ApprovalKey, PendingApproval};
use crate::protocol::ProtocolKind;
use crate::runner::{
    LoopError, LoopOptions, LoopOutput, LoopStream, pending_approval, resume_tool_loop,
    resume_tool_loop_stream, run_tool_loop, run_tool_loop_stream,
};
use crate::turn::TurnSections;
use crate::{Dispatcher, RegistryError, Tool, ToolProvider, ToolRegistry};

/// A model, its tools, a session store and loop options, ready to answer.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, ModelError, Message, ModelInfo, ToolCall, response_stream};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use toolwright_tool_system::{Agent, FnTool, ToolContext};
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
        run_tool_loop(
            &*self.model,
            &*self.store,
            &self.dispatcher,
            session_id,
            text,
            &self.options,
        )
        .await
    }

    /// Like [`run`](Self::run), as a stream of events for a UI; dropping it cancels the run.
    pub fn run_stream(&self, session_id: impl Into<String>, text: impl Into<String>) -> LoopStream {
        run_tool_loop_stream(
            Arc::clone(&self.model),
            Arc::clone(&self.store),
            Arc::clone(&self.dispatcher),
            session_id,
            text,
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

    /// Who decided the held calls of session `session_id` (see [`crate::approval_log`]).
    pub async fn approval_log(
        &self,
        session_id: &str,
    ) -> Result<Vec<crate::DecisionRecord>, LoopError> {
        crate::runner::approval_log(&*self.store, session_id).await
    }

    /// This agent acting for `principal` ([`LoopOptions::principal`]): the approval tokens its
    /// runs hand out are bound to `principal`, and its decisions are taken and recorded as
    /// `principal`'s. Cheap (the model, tools and store are shared); make one per request.
    pub fn acting_as(&self, principal: impl Into<String>) -> Self {
        let mut agent = self.clone();
        agent.options.principal = principal.into();
        agent
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
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// A builder over a shared model.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        Self {
            model,
            registry: ToolRegistry::new(),
            error: None,
            providers: Vec::new(),
            store: None,
            options: LoopOptions::default(),
            tool_timeout: None,
            max_result_bytes: None,
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
    pub(crate) fn options_mut(&mut self) -> &mut LoopOptions {
        &mut self.options
    }
    /// Replace every loop option at once.
    pub fn options(mut self, options: LoopOptions) -> Self {
        self.options = options;
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

/// `AgentBuilder::$name` for each entry of the loop settings' list ([`LoopOptions`]' setters).
macro_rules! agent_builder_setters {
    ($( $(#[$doc:meta])* $name:ident / $with:ident ($($arg:ident : $ty:ty),*) => |$o:ident| $body:expr; )*) => {
        impl AgentBuilder {
            $( $(#[$doc])* pub fn $name(mut self, $($arg: $ty),*) -> Self {
                let $o = self.options_mut();
                $body;
                self
            } )*
        }
    };
}

crate::options::loop_settings!(agent_builder_setters);
