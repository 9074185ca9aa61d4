//! The thin async runner: model → read → dispatch → record → model, driven by [`LoopMachine`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use context_engine::{
    ContextBuilder, ContextError, History, SessionStore, StoreError, TokenCounter,
};
use futures::{Stream, StreamExt};
use llm_core::{
    ChatEvent, ChatModel, ChatRequest, ChatStream, DEFAULT_MAX_RESULT_BYTES, Message, ModelError,
    TurnInfo, Usage, cap_result,
};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::approval::PendingApproval;
use crate::approval::{self, ApprovalDecision, ApprovalError, ApprovalPolicy, CallState, Claim};
use crate::machine::{CallFacts, CallPlan, Decision, LoopMachine, ResponseFacts};
pub use crate::options::LoopOptions;
use crate::protocol::{CallProtocol, PendingCall, Reading, Step, resolve_protocol};
use crate::{Dispatcher, ToolContext, ToolError};

/// What a UI can render while a loop runs.
#[derive(Debug)]
#[non_exhaustive]
pub enum LoopEvent {
    /// Answer text, as it arrives (for the JSON protocol: the reply, once parsed).
    TextDelta(String),
    /// A tool call is about to run.
    ToolCallStarted {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        arguments: Value,
    },
    /// A tool call finished (or failed; `is_error`).
    ToolResult {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// The result text the model gets.
        content: String,
        /// Whether it is an error result.
        is_error: bool,
    },
    /// The answer could not be read; the model was asked to fix it.
    Reprompted {
        /// The correction sent.
        correction: String,
    },
    /// The round limit was reached; the loop stops with the last response.
    IterationLimitReached {
        /// Model calls made.
        iterations: usize,
    },
    /// Calls wait for a person's approval; the run stops (a `Finished` with the same
    /// [`LoopOutput::pending_approval`] follows). Decide them with [`resume_tool_loop`].
    ApprovalRequired(PendingApproval),
    /// The loop ended with this output (last event on success).
    Finished(LoopOutput),
    /// The loop failed (last event on failure).
    Failed(LoopError),
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoopOutput {
    /// The answer for the user (the last response's text; the JSON protocol's `reply`).
    pub answer: String,
    /// Model calls made.
    pub iterations: usize,
    /// Whether the loop stopped at the round limit.
    pub hit_iteration_limit: bool,
    /// The protocol used (`native`, `json`, `tag`).
    pub protocol: &'static str,
    /// Every message this run appended to the session, in order.
    pub new_messages: Vec<Message>,
    /// Set when the run stopped before calls that need a person's approval: `answer` is then
    /// what the model said alongside them, and the run goes on after the decisions
    /// ([`resume_tool_loop`], `Agent::resume`).
    pub pending_approval: Option<PendingApproval>,
    /// Tokens of the run's model calls, added up; `None` when the model reported none.
    pub usage: Option<Usage>,
    /// Wall-clock time of the run, from the call to the answer (or to the held calls).
    pub elapsed: std::time::Duration,
}

impl LoopOutput {
    /// Whether the run waits for a person's approval ([`LoopOutput::pending_approval`]).
    pub fn is_pending(&self) -> bool {
        self.pending_approval.is_some()
    }
}

/// Why a run failed. Rounds finished before the failure are in the session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// The model call failed.
    #[error("model call failed: {0}")]
    Model(#[from] ModelError),
    /// The session store failed.
    #[error("session store failed: {0}")]
    Store(#[from] StoreError),
    /// The request does not fit the token budget.
    #[error("context does not fit: {0}")]
    Context(#[from] ContextError),
    /// The caller stopped listening.
    #[error("the loop was cancelled")]
    Cancelled,
    /// Decisions on held calls were refused (nothing changed), or a pending approval could not
    /// be read (nothing of it ran).
    #[error("{0}")]
    Approval(#[from] ApprovalError),
}

impl LoopError {
    /// `error.type` of a failed run or model call (traces): low-cardinality names, never the
    /// message.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            LoopError::Model(m) => match m {
                ModelError::Config(_) => "config",
                ModelError::Api { .. } => "api",
                ModelError::Connect(_) => "connect",
                ModelError::Timeout(_) => "timeout",
                ModelError::Inference(_) => "inference",
                ModelError::ModelLoad(_) => "model_load",
                ModelError::StreamInterrupted { .. } => "stream_interrupted",
                _ => "model",
            },
            LoopError::Store(_) => "store",
            LoopError::Context(_) => "context",
            LoopError::Cancelled => "cancelled",
            #[allow(unreachable_patterns)] // `LoopError` is non-exhaustive for other crates
            _ => "_OTHER",
        }
    }
}

pub(crate) type Sink<'a> = Option<&'a mpsc::Sender<LoopEvent>>;

/// Sends an event when someone listens; the event is only built then (a plain `run` has no
/// listener, and the events' clones of arguments and results would be wasted).
pub(crate) async fn emit(sink: Sink<'_>, ev: impl FnOnce() -> LoopEvent) -> Result<(), LoopError> {
    match sink {
        Some(tx) => tx.send(ev()).await.map_err(|_| LoopError::Cancelled),
        None => Ok(()),
    }
}

/// Runs the tool loop for one user message in session `session_id` (created if new):
/// the user message is stored first, every round is appended to the session as it finishes,
/// and the loop ends with a text answer or at `max_iterations`.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use context_engine::{MemoryStore, SessionStore};
/// use llm_core::{async_trait, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, ModelError, Message, ModelInfo, ToolCall, response_stream};
/// use tool_system::{Dispatcher, FnTool, LoopOptions, ToolRegistry, run_tool_loop};
/// use serde_json::json;
///
/// /// Calls get_weather once, then answers with the result it finds.
/// struct Demo;
/// #[async_trait]
/// impl ChatModel for Demo {
///     fn info(&self) -> ModelInfo { ModelInfo::new("demo", true) }
///     async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
///         Ok(match req.messages.last() {
///             Some(Message::Tool { content, .. }) => ChatResponse::new(format!("It is {content}"), vec![], FinishReason::Stop, None),
///             _ => ChatResponse::new("", vec![ToolCall::new("c1", "get_weather", json!({"city": "Beijing"}))], FinishReason::ToolCalls, None),
///         })
///     }
///     async fn stream(&self, req: ChatRequest) -> Result<ChatStream, ModelError> { Ok(response_stream(self.chat(req).await?)) }
/// }
///
/// let mut registry = ToolRegistry::new();
/// registry.register(FnTool::new("get_weather", "Weather for a city",
///     json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
///     |_, _| async { Ok(json!("22°C")) }))?;
/// let store = MemoryStore::new();
/// let out = run_tool_loop(&Demo, &store, &Dispatcher::from_registry(registry), "s1",
///     "Weather in Beijing?", &LoopOptions::default()).await?;
/// assert_eq!(out.answer, "It is 22°C");
/// assert_eq!(store.load("s1").await?.messages.len(), 4); // user, assistant call, tool, answer
/// # Ok(()) }
/// ```
pub async fn run_tool_loop(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    user_text: &str,
    options: &LoopOptions,
) -> Result<LoopOutput, LoopError> {
    drive(
        model,
        store,
        dispatcher,
        session_id,
        Start::User(user_text),
        options,
        None,
    )
    .await
}

/// Decides held calls of session `session_id` and, once every held call is decided, goes on
/// with the run that stopped for them: approved calls run, declined ones get a "the user
/// declined" result, the whole round is appended, and the model is called again. While some
/// calls are still undecided, returns at once with the remaining ones in
/// [`LoopOutput::pending_approval`]. Refused decisions (bad token, replay, unknown call…)
/// are [`LoopError::Approval`] and change nothing.
pub async fn resume_tool_loop(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    decisions: &[ApprovalDecision],
    options: &LoopOptions,
) -> Result<LoopOutput, LoopError> {
    resume(
        model, store, dispatcher, session_id, decisions, options, None,
    )
    .await
}

/// The calls of session `session_id` waiting for approval, with fresh tokens (for a page
/// reloaded, or a process restarted since the run stopped); `None` when nothing waits.
pub async fn pending_approval(
    store: &dyn SessionStore,
    session_id: &str,
    options: &LoopOptions,
) -> Result<Option<PendingApproval>, LoopError> {
    approval::current(store, session_id, options).await
}

/// The streaming variant of [`resume_tool_loop`] (see [`run_tool_loop_stream`]).
pub fn resume_tool_loop_stream(
    model: Arc<dyn ChatModel>,
    store: Arc<dyn SessionStore>,
    dispatcher: Arc<Dispatcher>,
    session_id: impl Into<String>,
    decisions: Vec<ApprovalDecision>,
    options: LoopOptions,
) -> LoopStream {
    let session_id = session_id.into();
    spawn_stream(move |tx| async move {
        resume(
            &*model,
            &*store,
            &dispatcher,
            &session_id,
            &decisions,
            &options,
            Some(&tx),
        )
        .await
    })
}

async fn resume(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    decisions: &[ApprovalDecision],
    options: &LoopOptions,
    sink: Sink<'_>,
) -> Result<LoopOutput, LoopError> {
    match approval::decide(store, session_id, decisions, options).await? {
        Claim::StillPending(view, progress) => {
            emit(sink, || LoopEvent::ApprovalRequired(view.clone())).await?;
            let info = model.info();
            let protocol = resolve_protocol(
                &options.protocol,
                &info.model,
                info.function_calling,
                options.tool_action_parsing,
            );
            if protocol.name() != progress.protocol {
                tracing::debug!(stored = %progress.protocol, "held round was read with another protocol");
            }
            Ok(LoopOutput {
                answer: progress.answer,
                iterations: progress.model_calls,
                hit_iteration_limit: false,
                protocol: protocol.name(),
                new_messages: Vec::new(),
                pending_approval: Some(view),
                usage: None,
                elapsed: std::time::Duration::ZERO,
            })
        }
        Claim::Run(claimed) => {
            drive(
                model,
                store,
                dispatcher,
                session_id,
                Start::Resume(Box::new(claimed)),
                options,
                sink,
            )
            .await
        }
    }
}

/// How a run starts: with the person's message, or with a held round whose decisions are in.
enum Start<'a> {
    User(&'a str),
    Resume(Box<approval::Claimed>),
}

/// The streaming variant of [`run_tool_loop`]: a `'static + Send` stream of [`LoopEvent`]s
/// ending with [`LoopEvent::Finished`] or [`LoopEvent::Failed`]. Dropping the stream cancels
/// the loop (and any running tool call). Must be called inside a tokio runtime.
pub fn run_tool_loop_stream(
    model: Arc<dyn ChatModel>,
    store: Arc<dyn SessionStore>,
    dispatcher: Arc<Dispatcher>,
    session_id: impl Into<String>,
    user_text: impl Into<String>,
    options: LoopOptions,
) -> LoopStream {
    let (session_id, user_text) = (session_id.into(), user_text.into());
    spawn_stream(move |tx| async move {
        drive(
            &*model,
            &*store,
            &dispatcher,
            &session_id,
            Start::User(&user_text),
            &options,
            Some(&tx),
        )
        .await
    })
}

fn spawn_stream<F, Fut>(run: F) -> LoopStream
where
    F: FnOnce(mpsc::Sender<LoopEvent>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<LoopOutput, LoopError>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    let task = tokio::spawn(async move {
        let r = run(tx.clone()).await;
        let last = match r {
            Ok(out) => LoopEvent::Finished(out),
            Err(LoopError::Cancelled) => return,
            Err(e) => LoopEvent::Failed(e),
        };
        let _ = tx.send(last).await;
    });
    LoopStream { rx, task }
}

/// The events of a running loop; dropping it cancels the loop.
#[derive(Debug)]
pub struct LoopStream {
    rx: mpsc::Receiver<LoopEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl Stream for LoopStream {
    type Item = LoopEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LoopEvent>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for LoopStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs the loop inside the run's `invoke_agent` span and records its outcome there.
async fn drive(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    start: Start<'_>,
    options: &LoopOptions,
    sink: Sink<'_>,
) -> Result<LoopOutput, LoopError> {
    let span = crate::trace::run_span(session_id);
    let r = crate::trace::in_span(
        &span,
        drive_traced(
            model, store, dispatcher, session_id, start, options, sink, &span,
        ),
    )
    .await;
    crate::trace::run_done(
        &span,
        r.as_ref().map(|out| out.usage).map_err(LoopError::kind),
    );
    r
}

/// The counter of runs without a budget: one for every run (it holds no state).
static ESTIMATE: std::sync::LazyLock<Arc<dyn TokenCounter>> =
    std::sync::LazyLock::new(|| Arc::new(context_engine::EstimateCounter));

/// `run` is the run's span: the parent of its model calls' spans, given rather than looked up.
#[allow(clippy::too_many_arguments)]
async fn drive_traced(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    start: Start<'_>,
    options: &LoopOptions,
    sink: Sink<'_>,
    run: &tracing::Span,
) -> Result<LoopOutput, LoopError> {
    let started = std::time::Instant::now();
    let mut usage: Option<Usage> = None;
    let user_text: std::borrow::Cow<'_, str> = match &start {
        Start::User(t) => std::borrow::Cow::Borrowed(*t),
        Start::Resume(c) => std::borrow::Cow::Owned(c.user_text().to_owned()),
    };
    let user_text = &*user_text;
    let info = model.info();
    crate::trace::run_model(run, &info);
    let protocol = resolve_protocol(
        &options.protocol,
        &info.model,
        info.function_calling,
        options.tool_action_parsing,
    );
    // Refreshes the routing table: every listed tool routes, advertised or not.
    dispatcher.refresh().await;
    let mut turn = TurnInfo::new(user_text).with_session(session_id);
    let mut tools = dispatcher.advertised(&turn).await;
    let counter: Arc<dyn TokenCounter> = match (&options.counter, options.context_budget) {
        (Some(c), _) => Arc::clone(c),
        (None, Some(_)) => context_engine::counter_for_model(&info.model),
        (None, None) => Arc::clone(&ESTIMATE),
    };
    let mut builder =
        ContextBuilder::new(options.system_prompt.clone()).with_counter(Arc::clone(&counter));
    // Native function calling has no tools section: nothing is added (and built) for it.
    if let Some(section) = protocol.prompt_section(&tools) {
        builder = builder.section("tools", section);
    }
    for (name, text) in &options.sections {
        builder = builder.section(name.clone(), text.clone());
    }
    for hook in &options.turn_sections {
        for (name, text) in hook.sections(user_text).await {
            builder = builder.section(name, text);
        }
    }
    if let Some(b) = options.context_budget {
        builder = builder.with_budget(b);
    }

    let session = store.load_or_create(session_id).await?;
    let mut history = History::from_messages(counter, session.messages);
    // This run's messages are the history's tail: handed out by moving them, never cloned.
    let stored_before = history.len();
    let mut machine =
        LoopMachine::new(options.max_iterations).with_corrections(options.corrections);
    let first = match start {
        Start::User(_) => {
            let mut round = approval::close_open(store, session_id, &*protocol, &machine).await?;
            let user = [Message::user(user_text)];
            store.append(session_id, &user).await?;
            round.extend(user);
            round
        }
        Start::Resume(claimed) => {
            let (calls, rounds) = claimed.counts();
            machine = machine.resumed(calls, rounds);
            approval::finish(
                *claimed,
                store,
                &*protocol,
                dispatcher,
                session_id,
                run,
                sink,
                &mut machine,
            )
            .await?
        }
    };
    history.extend(first);

    loop {
        // A tool of the last round gave the turn's answer: it is the reply, no model call.
        if let Some(answer) = machine.take_tool_answer() {
            tracing::info!(
                session = session_id,
                "a tool's result is the turn's answer; the model is not called again"
            );
            let reply = [Message::assistant(answer.clone())];
            store.append(session_id, &reply).await?;
            history.extend(reply);
            emit(sink, || LoopEvent::TextDelta(answer.clone())).await?;
            return Ok(LoopOutput {
                answer,
                iterations: machine.model_calls(),
                hit_iteration_limit: false,
                protocol: protocol.name(),
                new_messages: tail(history, stored_before),
                pending_approval: None,
                usage,
                elapsed: started.elapsed(),
            });
        }
        if machine.model_calls() > 0 {
            // A provider may show more tools after a round (MCP level 2: a tool whose
            // details the model asked for).
            turn.round = machine.model_calls();
            let now = dispatcher.advertised(&turn).await;
            if now != tools {
                tools = now;
                builder = match protocol.prompt_section(&tools) {
                    Some(section) => builder.section("tools", section),
                    None => builder.without_section("tools"),
                };
            }
        }
        let built = builder.build(&history)?;
        let mut request = ChatRequest::new(built.messages);
        if protocol.binds_tools() {
            request = request.with_tools(tools.clone());
        }
        if machine.wants_answer() {
            request = request.with_tool_choice(llm_core::ToolChoice::None);
        }
        let reader = protocol.reader(&tools, history.len());
        let chat = crate::trace::chat_span(run, &info, &request);
        let (read, call_usage) = crate::trace::in_span(&chat, async {
            let mut call_usage = None;
            let read = match model.stream(request).await {
                Ok(stream) => read_response(stream, reader, sink, &mut call_usage).await,
                Err(e) => Err(e.into()),
            };
            (read, call_usage)
        })
        .await;
        crate::trace::chat_done(&chat, read.as_ref().map_err(LoopError::kind), call_usage);
        let mut reading = read?;
        add_usage(&mut usage, call_usage);
        let decision = machine.after_response(ResponseFacts {
            has_calls: reading.has_calls(),
            unreadable: reading.correction.is_some(),
        });
        let round = match decision {
            Decision::RunTools => {
                let slots = run_steps(
                    &*protocol,
                    dispatcher,
                    &options.approval,
                    &mut reading,
                    session_id,
                    run,
                    sink,
                    &mut machine,
                )
                .await?;
                match approval::all_done(slots) {
                    Ok(results) => protocol.round_messages(&reading, results),
                    Err(slots) => {
                        let held = approval::hold(
                            store, session_id, &*protocol, &reading, slots, user_text, &machine,
                            options,
                        )
                        .await?;
                        match held {
                            approval::Held::Pending(view) => {
                                emit(sink, || LoopEvent::ApprovalRequired(view.clone())).await?;
                                return Ok(LoopOutput {
                                    answer: view.text.clone(),
                                    iterations: machine.model_calls(),
                                    hit_iteration_limit: false,
                                    protocol: protocol.name(),
                                    new_messages: tail(history, stored_before),
                                    pending_approval: Some(view),
                                    usage,
                                    elapsed: started.elapsed(),
                                });
                            }
                            approval::Held::Unsupported(round) => round,
                        }
                    }
                }
            }
            Decision::Reprompt => {
                let correction = reading.correction.clone().unwrap_or_default();
                emit(sink, || LoopEvent::Reprompted {
                    correction: correction.clone(),
                })
                .await?;
                vec![
                    Message::assistant(reading.content.clone()),
                    Message::user(correction),
                ]
            }
            Decision::Finish => {
                for step in &reading.steps {
                    if let Step::Text(t) = step {
                        emit(sink, || LoopEvent::TextDelta(t.clone())).await?;
                    }
                }
                vec![Message::assistant(reading.content.clone())]
            }
            Decision::StopAtLimit => {
                tracing::warn!(
                    session = session_id,
                    tool_rounds = machine.tool_rounds(),
                    max_iterations = machine.max_iterations(),
                    "tool loop reached max_iterations; stopping and returning the last model response"
                );
                let mut results = Vec::new();
                for step in &reading.steps {
                    match step {
                        Step::Text(t) => emit(sink, || LoopEvent::TextDelta(t.clone())).await?,
                        Step::Calls(calls) => {
                            for c in calls {
                                let e = ToolError::failed(format!(
                                    "Not run: the limit of {} tool rounds for this request was reached",
                                    machine.max_iterations()
                                ));
                                results.push((c.clone(), e.to_model_json().to_string()));
                            }
                        }
                    }
                }
                protocol.round_messages(&reading, results)
            }
        };
        store.append(session_id, &round).await?;
        history.extend(round);
        let done = match decision {
            Decision::RunTools | Decision::Reprompt => false,
            Decision::StopAtLimit => {
                emit(sink, || LoopEvent::IterationLimitReached {
                    iterations: machine.model_calls(),
                })
                .await?;
                true
            }
            Decision::Finish => true,
        };
        if done {
            return Ok(LoopOutput {
                answer: reading.answer,
                iterations: machine.model_calls(),
                hit_iteration_limit: decision == Decision::StopAtLimit,
                protocol: protocol.name(),
                new_messages: tail(history, stored_before),
                pending_approval: None,
                usage,
                elapsed: started.elapsed(),
            });
        }
    }
}

/// The messages after the first `from` (this run's), moved out of the history.
fn tail(history: History, from: usize) -> Vec<Message> {
    let mut all = history.into_messages();
    all.drain(..from.min(all.len()));
    all
}

/// Runs the steps of a response in order: text is emitted, each batch of calls is dispatched
/// (concurrently when the protocol allows) as the machine plans each call; results keep call
/// order. Calls held for approval (and, in protocols that run calls in order, the calls after
/// them) are not run: their slots say so. The calls move from `reading` into the slots (its
/// steps keep their order and sizes, with empty calls), uncopied.
#[allow(clippy::too_many_arguments)]
async fn run_steps(
    protocol: &dyn CallProtocol,
    dispatcher: &Dispatcher,
    policy: &ApprovalPolicy,
    reading: &mut Reading,
    session_id: &str,
    run: &tracing::Span,
    sink: Sink<'_>,
    machine: &mut LoopMachine,
) -> Result<approval::RoundSlots, LoopError> {
    let mut results = Vec::new();
    let mut held = false;
    for step in &mut reading.steps {
        let calls = match step {
            Step::Text(t) => {
                emit(sink, || LoopEvent::TextDelta(t.clone())).await?;
                continue;
            }
            Step::Calls(calls) => calls,
        };
        let mut facts: Vec<CallFacts<'_>> = calls
            .iter()
            .map(|c| call_facts(c, dispatcher, policy))
            .collect();
        let mut plans = Vec::with_capacity(calls.len());
        for (c, f) in calls.iter().zip(&mut facts) {
            f.after_held = held && !protocol.concurrent();
            let plan = machine.plan_call(*f);
            held |= plan == CallPlan::Hold;
            if !matches!(plan, CallPlan::Hold | CallPlan::Wait) {
                emit(sink, || LoopEvent::ToolCallStarted {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .await?;
            }
            plans.push(plan);
        }
        let outcomes = run_calls(
            dispatcher,
            session_id,
            run,
            protocol.concurrent(),
            calls.iter().zip(plans.iter().map(Some)),
        )
        .await;
        let first = results.len();
        for (((c, f), plan), outcome) in calls.iter().zip(&facts).zip(&plans).zip(outcomes) {
            let Some(Ran {
                content,
                is_error,
                answer,
            }) = outcome
            else {
                let state = if *plan == CallPlan::Hold {
                    CallState::Held { maybe_ran: false }
                } else {
                    CallState::Waiting
                };
                results.push((moved_out(), state));
                continue;
            };
            machine.call_done(*f, plan, &content, !is_error, answer.as_deref());
            emit(sink, || LoopEvent::ToolResult {
                id: c.id.clone(),
                name: c.name.clone(),
                content: content.clone(),
                is_error,
            })
            .await?;
            results.push((moved_out(), CallState::Done { content, is_error }));
        }
        drop(facts);
        for ((slot, _), c) in results[first..].iter_mut().zip(calls.iter_mut()) {
            std::mem::swap(slot, c);
        }
    }
    Ok(results)
}

/// What a call moved into its slot leaves in the reading: empty, allocating nothing.
fn moved_out() -> PendingCall {
    PendingCall::new(String::new(), String::new(), Value::Null)
}

/// Runs `calls` as planned — at once when the protocol runs calls concurrently (and there is
/// more than one), else in order — and gives each one's outcome ([`run_call`]; `None` for a
/// call with no plan, or one that waits).
pub(crate) async fn run_calls<'a>(
    dispatcher: &Dispatcher,
    session_id: &str,
    run: &tracing::Span,
    concurrent: bool,
    calls: impl ExactSizeIterator<Item = (&'a PendingCall, Option<&'a CallPlan>)>,
) -> Vec<Option<Ran>> {
    let one = |(c, plan): (&'a PendingCall, Option<&'a CallPlan>)| async move {
        match plan {
            Some(plan) => run_call(dispatcher, session_id, run, c, plan).await,
            None => None,
        }
    };
    if concurrent && calls.len() > 1 {
        futures::future::join_all(calls.map(one)).await
    } else {
        let mut v = Vec::with_capacity(calls.len());
        for call in calls {
            v.push(one(call).await);
        }
        v
    }
}

/// How one call that was planned ended.
pub(crate) struct Ran {
    /// The result text the model gets.
    pub content: String,
    pub is_error: bool,
    /// The turn's answer the tool gave ([`llm_core::Tool::final_answer`]).
    pub answer: Option<String>,
}

impl Ran {
    fn error(e: ToolError) -> Self {
        let (content, _) = cap_result(e.to_model_json().to_string(), DEFAULT_MAX_RESULT_BYTES);
        Self {
            content,
            is_error: true,
            answer: None,
        }
    }
}

/// One call as planned: how it ended; `None` for a call that waits (held for approval, or
/// after a held one).
pub(crate) async fn run_call(
    dispatcher: &Dispatcher,
    session_id: &str,
    run: &tracing::Span,
    c: &PendingCall,
    plan: &CallPlan,
) -> Option<Ran> {
    Some(match plan {
        CallPlan::Reuse(previous) => {
            tracing::info!(tool = %c.name, "repeated idempotent call: earlier result reused, answer requested");
            Ran {
                content: previous.clone(),
                is_error: false,
                answer: None,
            }
        }
        CallPlan::Reject(msg) => Ran::error(ToolError::invalid_arguments(msg.clone())),
        CallPlan::Decline(msg) => Ran::error(ToolError::failed(msg.clone())),
        CallPlan::Hold | CallPlan::Wait => return None,
        _ => {
            let ctx = ToolContext::new(c.id.clone()).with_session(session_id);
            let out = dispatcher
                .dispatch_under(Some(run), &c.name, c.arguments.clone(), ctx)
                .await;
            Ran {
                is_error: !out.is_ok(),
                content: out.content,
                answer: out.answer,
            }
        }
    })
}

fn call_facts<'a>(
    c: &'a PendingCall,
    dispatcher: &Dispatcher,
    policy: &ApprovalPolicy,
) -> CallFacts<'a> {
    let valid = c.invalid.is_none();
    CallFacts {
        name: &c.name,
        arguments: &c.arguments,
        invalid: c.invalid.as_deref(),
        idempotent: valid && dispatcher.is_idempotent(&c.name),
        needs_approval: valid
            && (policy.requires(&c.name, &c.arguments)
                || dispatcher.needs_approval(&c.name, &c.arguments)),
        after_held: false,
    }
}

/// Reads one streamed response: text goes to the protocol's reader (and on to the caller as
/// it allows), whole calls are collected; a call whose arguments are not JSON (G5) is a call
/// that will be answered with its error, never a failed response.
async fn read_response(
    mut stream: ChatStream,
    mut reader: Box<dyn crate::protocol::ResponseReader>,
    sink: Sink<'_>,
    usage: &mut Option<Usage>,
) -> Result<Reading, LoopError> {
    let mut text = String::new();
    let mut calls: Vec<PendingCall> = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev? {
            ChatEvent::TextDelta(t) => {
                for shown in reader.text(&t) {
                    if !shown.is_empty() {
                        emit(sink, || LoopEvent::TextDelta(shown)).await?;
                    }
                }
                if text.is_empty() {
                    text = t; // a whole answer in one delta is kept as it came, not copied
                } else {
                    text.push_str(&t);
                }
            }
            ChatEvent::ToolCall(c) => calls.push(PendingCall::new(c.id, c.name, c.arguments)),
            ChatEvent::InvalidToolCall(bad) => {
                tracing::warn!(tool = %bad.name, call = %bad.id, raw = %bad.raw, error = %bad.error,
                    "model sent tool arguments that are not valid JSON");
                calls.push(PendingCall::invalid(&bad));
            }
            ChatEvent::Finish { usage: u, .. } => {
                *usage = u;
                return Ok(reader.finish(calls, text));
            }
            _ => {}
        }
    }
    Err(ModelError::StreamInterrupted {
        detail: "the stream closed without a finish event".into(),
        partial_text: text,
    }
    .into())
}

/// Adds one model call's usage to the run's.
fn add_usage(total: &mut Option<Usage>, call: Option<Usage>) {
    if let Some(c) = call {
        let t = total.get_or_insert_with(Usage::default);
        t.prompt_tokens = t.prompt_tokens.saturating_add(c.prompt_tokens);
        t.completion_tokens = t.completion_tokens.saturating_add(c.completion_tokens);
        t.total_tokens = t.total_tokens.saturating_add(c.total_tokens);
    }
}
