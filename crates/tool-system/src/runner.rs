//! The thin async runner: model → read → dispatch → record → model, driven by the run as one
//! value ([`AgentRun`]) and its [`AgentRun::next_step`]. One loop for every run: a new one, and
//! one resumed after approval (the held run as stored, its decisions applied). It is the only
//! executor: the approval module decides and keeps the held run; the calls run here, through
//! the step loop of [`crate::execute`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use toolwright_context_engine::{BuiltContext, ContextBuilder, History, SessionStore};
use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, ChatStream, Message, ModelError, ModelInfo, Part, ToolError,
    TurnInfo, Usage,
};
use toolwright_core::{PriceTable, TokenCounter};
use tracing::Span;

use crate::approval::{
    self, ApprovalDecision, ApprovalPolicy, Claim, Claimed, DecisionRecord, Held, PendingApproval,
};
use crate::dispatch::Dispatcher;
pub use crate::event::{LoopError, LoopEvent, LoopOutput};
use crate::event::{Sink, emit};
use crate::execute::{Run, run_step};
use crate::hooks::{self, HookContext};
use crate::machine::{CallPlan, Decision, LoopMachine, Planned, ResponseFacts};
use crate::nesting::Exchange;
use crate::options::Handoff;
pub(crate) use crate::options::LoopOptions;
use crate::protocols::{
    CallProtocol, PendingCall, Reading, ResponseReader, Shown, Step, resolve_protocol,
};
use crate::run::{AgentRun, CallState, NextStep, Outcome, ProtocolId, RoundStep, ToolFacts};

/// Runs one turn of the loop for `user_text` and the `parts` after it (what
/// [`crate::Agent::run`] and [`crate::Agent::run_with_parts`] do).
pub(crate) async fn run_tool_loop(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    user_text: &str,
    parts: Vec<Part>,
    options: &LoopOptions,
) -> Result<LoopOutput, LoopError> {
    let run = inputs(model, store, dispatcher, session_id, options, None);
    drive(run, Start::User(user_text, parts)).await
}

/// Decides held calls of session `session_id` and, once every held call is decided, goes on
/// with the run that stopped for them: approved calls run, declined ones get a "the user
/// declined" result, the whole round is appended, and the model is called again. While some
/// calls are still undecided, returns at once with the remaining ones in
/// [`LoopOutput::pending_approval`]. Refused decisions (bad token, replay, unknown call…)
/// are [`LoopError::Approval`] and change nothing.
pub(crate) async fn resume_tool_loop(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    decisions: &[ApprovalDecision],
    options: &LoopOptions,
) -> Result<LoopOutput, LoopError> {
    let run = inputs(model, store, dispatcher, session_id, options, None);
    resume(run, decisions).await
}

/// The calls of session `session_id` waiting for approval, with fresh tokens for
/// [`LoopOptions::principal`] (for a page reloaded, or a process restarted since the run
/// stopped); `None` when nothing waits.
pub(crate) async fn pending_approval(
    store: &dyn SessionStore,
    session_id: &str,
    options: &LoopOptions,
) -> Result<Option<PendingApproval>, LoopError> {
    let key = options.approval_key.as_ref();
    Ok(approval::current(store, session_id, key, &options.principal).await?)
}

/// The streaming variant of [`resume_tool_loop`] (see [`run_tool_loop_stream`]).
pub(crate) fn resume_tool_loop_stream(
    model: Arc<dyn ChatModel>,
    store: Arc<dyn SessionStore>,
    dispatcher: Arc<Dispatcher>,
    session_id: impl Into<String>,
    decisions: Vec<ApprovalDecision>,
    options: LoopOptions,
) -> LoopStream {
    let session_id = session_id.into();
    spawn_stream(move |tx| async move {
        let run = inputs(
            &*model,
            &*store,
            &dispatcher,
            &session_id,
            &options,
            Some(&tx),
        );
        resume(run, &decisions).await
    })
}

/// The streaming variant of [`run_tool_loop`]: a `'static + Send` stream of [`LoopEvent`]s
/// ending with [`LoopEvent::Finished`] or [`LoopEvent::Failed`]. Dropping the stream cancels
/// the loop (and any running tool call). Must be called inside a tokio runtime.
pub(crate) fn run_tool_loop_stream(
    model: Arc<dyn ChatModel>,
    store: Arc<dyn SessionStore>,
    dispatcher: Arc<Dispatcher>,
    session_id: impl Into<String>,
    user_text: impl Into<String>,
    parts: Vec<Part>,
    options: LoopOptions,
) -> LoopStream {
    let (session_id, user_text) = (session_id.into(), user_text.into());
    spawn_stream(move |tx| async move {
        let run = inputs(
            &*model,
            &*store,
            &dispatcher,
            &session_id,
            &options,
            Some(&tx),
        );
        drive(run, Start::User(&user_text, parts)).await
    })
}

/// A run's context from the entry points' parameters (its span is made when it starts).
fn inputs<'a>(
    model: &'a dyn ChatModel,
    store: &'a dyn SessionStore,
    dispatcher: &'a Dispatcher,
    session_id: &'a str,
    options: &'a LoopOptions,
    sink: Sink<'a>,
) -> Run<'a> {
    Run {
        model,
        store,
        dispatcher,
        session_id,
        options,
        sink,
        span: Span::none(),
        hops: 0,
        top: options,
        via: Vec::new(),
        held_up: None,
    }
}

async fn resume(run: Run<'_>, decisions: &[ApprovalDecision]) -> Result<LoopOutput, LoopError> {
    let (key, lease) = (
        run.options.approval_key.as_ref(),
        run.options.approval_lease,
    );
    let who = &run.options.principal;
    match approval::decide(run.store, run.session_id, decisions, key, lease, who).await? {
        Claim::StillPending(view, held) => {
            emit(run.sink, || LoopEvent::ApprovalRequired(view.clone())).await?;
            let protocol = protocol_of(run.options, &run.model.info());
            if protocol.name() != held.protocol.name() {
                tracing::debug!(stored = %held.protocol.name(), "held round was read with another protocol");
            }
            Ok(LoopOutput {
                answer: view.text.clone(),
                iterations: held.machine.model_calls(),
                hit_iteration_limit: false,
                protocol: protocol.name(),
                new_messages: Vec::new(),
                pending_approval: Some(view),
                usage: held.usage,
                cost: None,
                elapsed: std::time::Duration::ZERO,
            })
        }
        Claim::Run(held, claimed) => {
            let run = reached(run, &held.via)?;
            drive(run, Start::Resume(held, Some(claimed))).await
        }
    }
}

/// The run of the agent a held run belongs to: this one, or the one the turn was handed to
/// through `via` (each name a handoff of the agent before it).
fn reached<'a>(mut run: Run<'a>, via: &[String]) -> Result<Run<'a>, LoopError> {
    for name in via {
        let Some(to) = run.options.handoffs.iter().find(|h| h.name == *name) else {
            return Err(LoopError::HandoffGone { name: name.clone() });
        };
        run = Run {
            model: &*to.model,
            dispatcher: &to.dispatcher,
            options: &to.options,
            hops: run.hops + 1,
            ..run
        };
        run.via.push(name.clone());
    }
    Ok(run)
}

/// A sub-agent's run under a run that holds for it ([`crate::AgentTool`]): a new one for
/// `user_text`, or `resumed` (its calls decided through the top run) going on. When it holds
/// calls for a person it is put in `held_up`, for the run above to keep, instead of in its
/// session.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_nested(
    model: &dyn ChatModel,
    store: &dyn SessionStore,
    dispatcher: &Dispatcher,
    session_id: &str,
    user_text: &str,
    resumed: Option<AgentRun>,
    held_up: &std::sync::Mutex<Option<AgentRun>>,
    options: &LoopOptions,
) -> Result<LoopOutput, LoopError> {
    let mut run = inputs(model, store, dispatcher, session_id, options, None);
    run.held_up = Some(held_up);
    match resumed {
        None => drive(run, Start::User(user_text, Vec::new())).await,
        Some(held) => {
            let run = reached(run, &held.via)?;
            drive(run, Start::Resume(Box::new(held), None)).await
        }
    }
}

/// How a run starts: with the person's message (its text and the parts after it), or with a
/// held run whose decisions are in (claimed by this request).
enum Start<'a> {
    User(&'a str, Vec<Part>),
    Resume(Box<AgentRun>, Option<Claimed>),
    /// The conversation was handed to this run's agent: it answers the turn opened by this
    /// text, from the session as it stands (nothing is added first).
    HandedOff(&'a str),
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
async fn drive(run: Run<'_>, start: Start<'_>) -> Result<LoopOutput, LoopError> {
    let run = Run {
        span: crate::trace::run_span(run.session_id),
        ..run
    };
    let r = crate::trace::in_span(&run.span, drive_traced(&run, start)).await;
    crate::trace::run_done(
        &run.span,
        r.as_ref().map(|out| out.usage).map_err(LoopError::kind),
    );
    r
}

/// The counter of runs without a budget: one for every run (it holds no state).
static ESTIMATE: std::sync::LazyLock<Arc<dyn TokenCounter>> =
    std::sync::LazyLock::new(|| Arc::new(toolwright_core::EstimateCounter));

fn protocol_of(options: &LoopOptions, info: &ModelInfo) -> Arc<dyn CallProtocol> {
    resolve_protocol(
        &options.protocol,
        &info.model,
        info.function_calling,
        options.tool_action_parsing,
    )
}

/// What every output of one run shares: when it started, its protocol, where its messages
/// begin in the history, and the tokens of its model calls so far.
struct Tally<'a> {
    started: Instant,
    protocol: &'static str,
    stored_before: usize,
    /// The model's name, for its price.
    model: &'a str,
    prices: Option<&'a PriceTable>,
    /// The session's prompt-cache key, made once per run ([`cache_key`]).
    cache_key: String,
}

impl Tally<'_> {
    fn output(
        &self,
        answer: String,
        state: &AgentRun,
        history: History,
        hit_iteration_limit: bool,
        pending_approval: Option<PendingApproval>,
    ) -> LoopOutput {
        let usage = state.usage;
        LoopOutput {
            answer,
            iterations: state.machine.model_calls(),
            hit_iteration_limit,
            protocol: self.protocol,
            new_messages: tail(history, self.stored_before),
            pending_approval,
            usage,
            cost: usage.and_then(|u| {
                let table = self.prices.unwrap_or(PriceTable::builtin());
                table.cost(self.model, &u)
            }),
            elapsed: self.started.elapsed(),
        }
    }
}

/// The loop itself, inside the run's span: whatever the run's [`AgentRun::next_step`] says,
/// until it is over or held.
async fn drive_traced(run: &Run<'_>, start: Start<'_>) -> Result<LoopOutput, LoopError> {
    let started = Instant::now();
    let info = run.model.info();
    crate::trace::run_model(&run.span, &info);
    let protocol = protocol_of(run.options, &info);
    let protocol = &*protocol;
    let fresh = |text: &str| {
        let machine =
            LoopMachine::new(run.options.max_iterations).with_corrections(run.options.corrections);
        AgentRun::new(ProtocolId::of(protocol.name()), text.to_owned(), machine)
    };
    // `given`: the person's message as the caller gave it (a resumed run has it in the run)
    let (mut state, mut claimed, parts, given) = match start {
        Start::User(text, parts) => (fresh(text), None, Some(parts), Some(text)),
        Start::Resume(held, claimed) => {
            let mut held = *held;
            if held.protocol.name() != protocol.name() {
                tracing::warn!(session = run.session_id, stored = %held.protocol.name(), now = protocol.name(),
                    "the held round was read with another call protocol; its round is recorded with the current one");
            }
            held.machine = held
                .machine
                .with_limits(run.options.max_iterations, run.options.corrections);
            (held, claimed, None, None)
        }
        Start::HandedOff(text) => (fresh(text), None, None, Some(text)),
    };
    state.via.clone_from(&run.via);
    // Between this run and the sub-agents its calls run (made once, used by every round).
    let exchange = Arc::new(Exchange::default());
    let resumed_text;
    let user_text = match given {
        Some(text) => text,
        None => {
            resumed_text = state.user_text.clone();
            resumed_text.as_str()
        }
    };
    // Refreshes the routing table: every listed tool routes, advertised or not.
    run.dispatcher.refresh().await;
    let mut turn = TurnInfo::new(user_text).with_session(run.session_id);
    let mut tools = run.dispatcher.advertised(&turn).await;
    let counter = counter_of(run.options, &info);
    let mut builder = context_builder(
        run.options,
        protocol,
        &tools,
        user_text,
        Arc::clone(&counter),
    )
    .await;

    let session = run.store.load_or_create(run.session_id).await?;
    let mut history = History::from_messages(counter, session.messages);
    // This run's messages are the history's tail: handed out by moving them, never cloned.
    let tally = Tally {
        started,
        protocol: protocol.name(),
        stored_before: history.len(),
        model: &info.model,
        prices: run.options.prices.as_deref(),
        cache_key: cache_key(run.session_id),
    };
    if let Some(parts) = parts {
        let timeout = run.options.hook_timeout;
        hooks::guard(&run.options.input_guardrails, timeout, user_text).await?;
        let key = run.top.approval_key.as_ref();
        let mut first = approval::close_open(run.store, run.session_id, protocol, key).await?;
        let user = [Message::user_with_parts(user_text, parts)];
        run.store.append(run.session_id, &user).await?;
        first.extend(user);
        history.extend(first);
    }

    loop {
        match state.next_step() {
            NextStep::Done { hit_limit, .. } => {
                let answer = state.done.take().map(|d| d.answer).unwrap_or_default();
                return Ok(tally.output(answer, &state, history, hit_limit, None));
            }
            NextStep::CallTools => {
                run_round(run, protocol, &mut state, &exchange).await?;
                if !state.is_held() {
                    record_round(run, protocol, &mut state, &mut claimed, &mut history).await?;
                }
            }
            // A sub-agent's run under a run that holds for it: it goes up to that run.
            NextStep::Hold if run.held_up.is_some() => {
                let view = approval::unsigned_view(run.session_id, &state);
                let out = tally.output(view.text.clone(), &state, history, false, Some(view));
                if let Some(slot) = run.held_up {
                    *slot
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(state);
                }
                return Ok(out);
            }
            NextStep::Hold => {
                // the agent the person talks to signs the tokens (and checks them)
                let key = run.top.approval_key.as_ref();
                let principal = &run.top.principal;
                let claim = claimed.take();
                match approval::hold(run.store, run.session_id, &mut state, key, principal, claim)
                    .await?
                {
                    Held::Pending(view) => {
                        emit(run.sink, || LoopEvent::ApprovalRequired(view.clone())).await?;
                        let answer = view.text.clone();
                        return Ok(tally.output(answer, &state, history, false, Some(view)));
                    }
                    // the held calls were answered "not run": the round is whole
                    Held::Unsupported => {
                        record_round(run, protocol, &mut state, &mut claimed, &mut history).await?;
                    }
                }
            }
            // A handoff call of the last round ran: the other agent answers the turn.
            NextStep::HandOff(_) => {
                let to = state.machine.take_handoff().unwrap_or_default();
                if let Some(target) = run.options.handoffs.iter().find(|h| h.name == to) {
                    let before = tally.output(String::new(), &state, history, false, None);
                    let after = hand_off(run, target, user_text).await?;
                    return Ok(joined(before, after));
                }
            }
            // A tool of the last round gave the turn's answer: it is the reply, no model call.
            NextStep::ToolAnswer(_) => {
                let answer = state.machine.take_tool_answer().unwrap_or_default();
                tracing::info!(
                    session = run.session_id,
                    "a tool's result is the turn's answer; the model is not called again"
                );
                check_output(run, &answer).await?;
                let reply = [Message::assistant(answer.clone())];
                run.store.append(run.session_id, &reply).await?;
                history.extend(reply);
                emit(run.sink, || LoopEvent::TextDelta(answer.clone())).await?;
                state.finish(answer, false);
            }
            NextStep::CallModel => {
                call_model(
                    run,
                    &info,
                    protocol,
                    &mut state,
                    (&mut turn, &mut tools, &mut builder),
                    &mut history,
                    &tally,
                )
                .await?;
            }
        }
    }
}

/// What a run's requests are built from, kept across its model calls: the turn, the tools
/// advertised, the context builder.
type Requests<'a> = (
    &'a mut TurnInfo,
    &'a mut Vec<toolwright_core::ToolSpec>,
    &'a mut ContextBuilder,
);

/// One model call and what the machine decides on its response: a response with calls becomes
/// the round in flight; a correction, an answer or a stop at the limit is recorded at once.
async fn call_model(
    run: &Run<'_>,
    info: &ModelInfo,
    protocol: &dyn CallProtocol,
    state: &mut AgentRun,
    (turn, tools, builder): Requests<'_>,
    history: &mut History,
    tally: &Tally<'_>,
) -> Result<(), LoopError> {
    if state.machine.model_calls() > 0 && !run.dispatcher.advertises_the_same_every_round() {
        // A provider may show more tools after a round (MCP level 2: a tool whose
        // details the model asked for).
        turn.round = state.machine.model_calls();
        let now = run.dispatcher.advertised(turn).await;
        if now != *tools {
            *tools = now;
            *builder = match protocol.prompt_section(tools) {
                Some(section) => builder.clone().section("tools", section),
                None => builder.clone().without_section("tools"),
            };
        }
    }
    let built = match &run.options.compaction {
        None => builder.build(history)?,
        Some(compactor) => {
            let compacted = compactor
                .build(builder, history, run.store, run.session_id)
                .await?;
            if let Some(reason) = &compacted.fallback {
                tracing::warn!(
                    session = run.session_id,
                    %reason,
                    "compaction fell back to dropping the oldest rounds"
                );
            }
            compacted.context
        }
    };
    // Set in place: each `with_` would move the whole request once more.
    let stable = stable_prefix(&built, tally.stored_before);
    let mut request = ChatRequest::new(built.messages);
    request.stable_prefix = stable;
    request.cache_key = Some(tally.cache_key.clone());
    if protocol.binds_tools() {
        request.tools.clone_from(tools);
    }
    // A typed run on a model that keeps its tools under a schema: the schema goes on the wire
    // (with no tools to call once the machine wants the answer).
    let callable: &[toolwright_core::ToolSpec] = if state.machine.wants_answer() {
        &[]
    } else {
        tools
    };
    if let Some(shape) = &run.options.answer
        && info.answer_schema_with_tools
        && let Some(schema) = protocol.answer_format(callable, &shape.schema)
    {
        request = request.with_response_format(toolwright_core::ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema,
            strict: true,
        });
    }
    if state.machine.wants_answer() {
        request.tool_choice = Some(toolwright_core::ToolChoice::None);
    }
    let ctx = HookContext::new(run.session_id);
    for hook in &run.options.hooks {
        let flow = hooks::bounded(
            hook.name(),
            run.options.hook_timeout,
            hook.before_model(ctx, &request),
        )
        .await?;
        hooks::stop_on(&**hook, flow)?;
    }
    let reader = protocol.reader(tools, history.len());
    let (mut reading, call_usage) = ask_model(run, info, request, reader).await?;
    add_usage(&mut state.usage, call_usage);
    for hook in &run.options.hooks {
        let flow = hooks::bounded(
            hook.name(),
            run.options.hook_timeout,
            hook.after_model(ctx, &reading),
        )
        .await?;
        hooks::stop_on(&**hook, flow)?;
    }
    let off_schema = check_answer(run.options, &mut reading);
    let decision = state.after_response(ResponseFacts {
        has_calls: reading.has_calls(),
        unreadable: reading.correction.is_some(),
        off_schema,
    });
    let round = match decision {
        Decision::RunTools => {
            let text = shown_text(protocol, &reading);
            state.start_round(reading, text);
            return Ok(());
        }
        Decision::Reprompt => {
            let correction = reading.correction.clone().unwrap_or_default();
            emit(run.sink, || LoopEvent::Reprompted {
                correction: correction.clone(),
            })
            .await?;
            vec![
                Message::assistant(reading.content.clone()),
                Message::user(correction),
            ]
        }
        Decision::Finish => {
            check_output(run, &reading.answer).await?;
            for step in &reading.steps {
                if let Step::Text(t) = step {
                    emit(run.sink, || LoopEvent::TextDelta(t.clone())).await?;
                }
            }
            // the answer keeps the model's reasoning, as a round of calls does
            let content = std::mem::take(&mut reading.content);
            vec![Message::assistant(content).with_parts(std::mem::take(&mut reading.parts))]
        }
        Decision::StopAtLimit => {
            check_output(run, &reading.answer).await?;
            limit_round(run, protocol, &reading, &state.machine).await?
        }
    };
    run.store.append(run.session_id, &round).await?;
    history.extend(round);
    match decision {
        Decision::StopAtLimit => {
            emit(run.sink, || LoopEvent::IterationLimitReached {
                iterations: state.machine.model_calls(),
            })
            .await?;
            state.finish(reading.answer, true);
        }
        Decision::Finish => state.finish(reading.answer, false),
        Decision::RunTools | Decision::Reprompt => {}
    }
    Ok(())
}

/// The text of a response the person saw: the JSON decision protocol's `answer` of a call is
/// the raw decision (kept for the round limit's "last response as it is"), which was never
/// shown; every other protocol's `answer` is what was shown.
fn shown_text(protocol: &dyn CallProtocol, reading: &Reading) -> String {
    if protocol.name() == "json" && !reading.native {
        String::new()
    } else {
        reading.answer.clone()
    }
}

/// Records the round in flight once every call has its result: appended to the session — for
/// a resumed run's held round, with its state slot cleared in the same compare-and-set.
async fn record_round(
    run: &Run<'_>,
    protocol: &dyn CallProtocol,
    state: &mut AgentRun,
    claimed: &mut Option<Claimed>,
    history: &mut History,
) -> Result<(), LoopError> {
    let Some((reading, results)) = state.take_round() else {
        return Ok(());
    };
    let round = protocol.round_messages(&reading, results);
    match claimed.take() {
        Some(slot) => approval::record(run.store, run.session_id, slot, &round).await?,
        None => {
            run.store.append(run.session_id, &round).await?;
        }
    }
    history.extend(round);
    Ok(())
}

/// The agent `to` answers the turn in this session (its model, tools and options; this run's
/// store and listener), one hop further; its run nests in this run's span.
fn hand_off<'a>(
    run: &'a Run<'_>,
    to: &'a Handoff,
    user_text: &'a str,
) -> Pin<Box<dyn std::future::Future<Output = Result<LoopOutput, LoopError>> + Send + 'a>> {
    tracing::info!(session = run.session_id, to = %to.name, "the conversation is handed off");
    let next = Run {
        model: &*to.model,
        store: run.store,
        dispatcher: &to.dispatcher,
        session_id: run.session_id,
        options: &to.options,
        sink: run.sink,
        span: Span::none(),
        hops: run.hops + 1,
        top: run.top,
        via: [run.via.as_slice(), std::slice::from_ref(&to.name)].concat(),
        held_up: run.held_up,
    };
    Box::pin(drive(next, Start::HandedOff(user_text)))
}

/// One output of a turn handed off: the agent's that answered, with the messages, model calls
/// and tokens of the run that handed off before it.
fn joined(before: LoopOutput, mut after: LoopOutput) -> LoopOutput {
    let mut messages = before.new_messages;
    messages.append(&mut after.new_messages);
    after.new_messages = messages;
    after.iterations += before.iterations;
    add_usage(&mut after.usage, before.usage);
    after.cost = match (before.cost, after.cost) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    after.elapsed += before.elapsed;
    after
}

/// The output guardrails on the run's final answer, before it is recorded or shown.
async fn check_output(run: &Run<'_>, answer: &str) -> Result<(), LoopError> {
    let timeout = run.options.hook_timeout;
    hooks::guard(&run.options.output_guardrails, timeout, answer).await
}

/// In a typed run, checks an answer (a response without calls) against the run's type: one
/// that fits is the answer, whatever the protocol made of it (a bare JSON object is no JSON
/// decision, yet it is the answer asked for); one that does not gets the correction saying
/// what is wrong. Whether it does not fit.
fn check_answer(options: &LoopOptions, reading: &mut Reading) -> bool {
    let Some(shape) = &options.answer else {
        return false;
    };
    if reading.has_calls() {
        return false;
    }
    match shape.check(&reading.answer) {
        Ok(()) => {
            reading.correction = None;
            false
        }
        Err(correction) => {
            reading.correction = Some(match reading.correction.take() {
                // the protocol could not read it either: say both, the model may have meant a call
                Some(protocol) => format!("{correction}\nIf you meant to call a tool: {protocol}"),
                None => correction,
            });
            true
        }
    }
}

/// The token counter of the run: the one given, else the model's when there is a budget, else
/// an estimate.
fn counter_of(options: &LoopOptions, info: &ModelInfo) -> Arc<dyn TokenCounter> {
    match (&options.counter, options.context_budget) {
        (Some(c), _) => Arc::clone(c),
        (None, Some(_)) => toolwright_context_engine::counter_for_model(&info.model),
        (None, None) => Arc::clone(&ESTIMATE),
    }
}

/// The request's context: the system prompt, the protocol's tools section, the fixed sections
/// and those the turn's hooks give for `user_text`, within the budget.
async fn context_builder(
    options: &LoopOptions,
    protocol: &dyn CallProtocol,
    tools: &[toolwright_core::ToolSpec],
    user_text: &str,
    counter: Arc<dyn TokenCounter>,
) -> ContextBuilder {
    let mut builder = ContextBuilder::new(options.system_prompt.clone()).with_counter(counter);
    // Native function calling has no tools section: nothing is added (and built) for it.
    if let Some(section) = protocol.prompt_section(tools) {
        builder = builder.section("tools", section);
    }
    if let Some(shape) = &options.answer {
        builder = builder.section("answer", protocol.answer_section(&shape.schema));
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
    builder
}

/// One model call in its `chat` span (a child of the run's): the response as read while it
/// streams, and the call's token usage.
async fn ask_model(
    run: &Run<'_>,
    info: &ModelInfo,
    request: ChatRequest,
    reader: Box<dyn ResponseReader>,
) -> Result<(Reading, Option<Usage>), LoopError> {
    let chat = crate::trace::chat_span(&run.span, info, &request);
    let (read, call_usage) = crate::trace::in_span(&chat, async {
        let mut call_usage = None;
        let read = match run.model.stream(request).await {
            Ok(stream) => read_response(stream, reader, run.sink, &mut call_usage).await,
            Err(e) => Err(e.into()),
        };
        (read, call_usage)
    })
    .await;
    crate::trace::chat_done(&chat, read.as_ref().map_err(LoopError::kind), call_usage);
    Ok((read?, call_usage))
}

/// The round of a response that asks for tools past the limit: its text is shown, its calls
/// are recorded with "not run" results.
async fn limit_round(
    run: &Run<'_>,
    protocol: &dyn CallProtocol,
    reading: &Reading,
    machine: &LoopMachine,
) -> Result<Vec<Message>, LoopError> {
    tracing::warn!(
        session = run.session_id,
        tool_rounds = machine.tool_rounds(),
        max_iterations = machine.max_iterations(),
        "tool loop reached max_iterations; stopping and returning the last model response"
    );
    let mut results = Vec::new();
    for step in &reading.steps {
        match step {
            Step::Text(t) => emit(run.sink, || LoopEvent::TextDelta(t.clone())).await?,
            Step::Calls(calls) => {
                for c in calls {
                    let e = ToolError::failed(format!(
                        "Not run: the limit of {} tool rounds for this request was reached",
                        machine.max_iterations()
                    ));
                    results.push((c.clone(), e.to_model_json().to_string().into()));
                }
            }
        }
    }
    Ok(protocol.round_messages(reading, results))
}

/// The messages after the first `from` (this run's), moved out of the history.
fn tail(history: History, from: usize) -> Vec<Message> {
    let mut all = history.into_messages();
    all.drain(..from.min(all.len()));
    all
}

/// Runs the round in flight, each call as it stands ([`crate::run::RoundCall::plan`]): a new
/// response's text is emitted and its calls planned by the machine — calls held for approval
/// (and, in protocols that run calls in order, the calls after them) wait; a decided round's
/// calls run as decided. Each step of calls goes through the one step loop ([`run_step`]),
/// and each call's outcome is kept in the round.
async fn run_round(
    run: &Run<'_>,
    protocol: &dyn CallProtocol,
    state: &mut AgentRun,
    exchange: &Arc<Exchange>,
) -> Result<(), LoopError> {
    let AgentRun { machine, round, .. } = state;
    let Some(round) = round.as_mut() else {
        return Ok(());
    };
    let new = round.is_new();
    let policy = &run.options.approval;
    let in_order = !protocol.concurrent();
    let mut held = false;
    for step in &mut round.steps {
        let calls = match step {
            RoundStep::Text { text } => {
                if new {
                    emit(run.sink, || LoopEvent::TextDelta(text.clone())).await?;
                }
                continue;
            }
            RoundStep::Calls { calls } => calls,
        };
        // A sub-agent's run whose calls are all decided goes down to it, and the call runs
        // again as approved: the sub-agent goes on with that run.
        for c in calls.iter_mut() {
            if matches!(c.state, CallState::Nested { .. })
                && let CallState::Nested { run: sub } =
                    std::mem::replace(&mut c.state, CallState::Approved)
            {
                exchange.put_resume(&c.call.id, *sub);
            }
        }
        let planned: Vec<Planned<'_>> = calls
            .iter()
            .map(|c| {
                let tool = tool_facts(&c.call, run.dispatcher, policy);
                let p = c.plan(machine, tool, held && in_order);
                held |= p.plan == Some(CallPlan::Hold);
                p
            })
            .collect();
        exchange.serve(calls.iter().map(|c| c.call.id.as_str()));
        let step = run_step(run, protocol, machine, calls, planned, exchange);
        let outcomes = crate::nesting::serving(exchange, step).await?;
        for (c, (plan, ran)) in calls.iter_mut().zip(outcomes) {
            let ran = ran.map(|r| Outcome {
                content: r.content,
                is_error: r.is_error,
                parts: r.parts,
            });
            c.settle(plan.as_ref(), ran);
            if let Some(sub) = exchange.take_held(&c.call.id) {
                c.state = CallState::Nested { run: Box::new(sub) };
                held = true;
            }
        }
    }
    Ok(())
}

/// What the loop knows of a call's tool: whether a repeat gives the same result, and whether
/// it needs a person's approval (the tool's, the provider's, or the agent's policy).
fn tool_facts(c: &PendingCall, dispatcher: &Dispatcher, policy: &ApprovalPolicy) -> ToolFacts {
    ToolFacts {
        idempotent: dispatcher.is_idempotent(&c.name),
        needs_approval: policy.requires(&c.name, &c.arguments)
            || dispatcher.needs_approval(&c.name, &c.arguments),
    }
}

/// Reads one streamed response: text goes to the protocol's reader (and on to the caller as
/// it allows), whole calls are collected; a call whose arguments are not JSON (G5) is a call
/// that will be answered with its error, never a failed response.
async fn read_response(
    mut stream: ChatStream,
    mut reader: Box<dyn ResponseReader>,
    sink: Sink<'_>,
    usage: &mut Option<Usage>,
) -> Result<Reading, LoopError> {
    let mut text = String::new();
    let mut calls: Vec<PendingCall> = Vec::new();
    let mut parts = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev? {
            ChatEvent::TextDelta(t) => {
                match reader.text(&t) {
                    Shown::Delta if !t.is_empty() => {
                        emit(sink, || LoopEvent::TextDelta(t.clone())).await?;
                    }
                    Shown::Delta => {}
                    Shown::Texts(now) => {
                        for shown in now.into_iter().filter(|s| !s.is_empty()) {
                            emit(sink, || LoopEvent::TextDelta(shown)).await?;
                        }
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
            ChatEvent::Part(p) => parts.push(p),
            ChatEvent::Finish { usage: u, .. } => {
                *usage = u;
                let mut reading = reader.finish(calls, text);
                reading.parts = parts;
                return Ok(reading);
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

/// How many leading messages of a request the next turn's requests repeat: the system message
/// and the rounds before this run. `None` when the budget left some history out or a summary
/// stands for it (the kept part shifts as the conversation grows, so no prefix is stable).
fn stable_prefix(built: &BuiltContext, run_starts: usize) -> Option<usize> {
    if !built.dropped.is_empty() {
        return None;
    }
    let system = built.messages.len() - built.kept.len();
    Some(system + built.kept.iter().take_while(|&&i| i < run_starts).count())
}

/// The key grouping a session's requests in a provider's prompt cache: a hash of the session
/// id (FNV-1a, stable across processes and versions), so the id itself never leaves.
fn cache_key(session_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // By hand, as bytes: `format!` (or pushing `char`s) cost more than the hashing.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut key = *b"tw-0000000000000000";
    for (i, digit) in key[3..].iter_mut().enumerate() {
        *digit = HEX[((h >> ((15 - i) * 4)) & 0xf) as usize];
    }
    String::from_utf8_lossy(&key).into_owned()
}

/// Adds one model call's usage to the run's.
fn add_usage(total: &mut Option<Usage>, call: Option<Usage>) {
    if let Some(c) = call {
        *total.get_or_insert_with(Usage::default) += c;
    }
}

impl DecisionRecord {
    /// Who decided the held calls of session `session_id`, oldest first, as kept in `store`:
    /// each decision's principal, time, tool and arguments. Empty when none was made (or the
    /// store keeps no state slots). A front end that shows a conversation's record reads it
    /// here, from the store it shares with the agent.
    pub async fn log(
        store: &dyn SessionStore,
        session_id: &str,
    ) -> Result<Vec<DecisionRecord>, crate::LoopError> {
        Ok(approval::log(store, session_id).await?)
    }
}

#[cfg(test)]
mod tests {
    /// The key is the session id's FNV-1a as 16 hex digits: the same bytes on every process and
    /// version (a provider's cache groups by it), written by hand as `format!` would.
    #[test]
    fn the_cache_key_is_the_sessions_fnv1a_in_sixteen_hex_digits() {
        assert_eq!(super::cache_key(""), "tw-cbf29ce484222325");
        assert_eq!(super::cache_key("a"), "tw-af63dc4c8601ec8c");
        for id in ["s1", "会话", "user/42/thread-7"] {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in id.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            assert_eq!(super::cache_key(id), format!("tw-{h:016x}"));
        }
    }
}
