//! The only place calls run: a run's context ([`Run`]) and the one announce → run → record loop
//! of a step of calls ([`run_step`]), used alike for a response's calls and for a held round's
//! calls once decided. What each call gets is planned before (the machine, or the approval
//! module for a held round), with no I/O.

use serde_json::Value;
use toolwright_context_engine::SessionStore;
use toolwright_core::{ChatModel, DEFAULT_MAX_RESULT_BYTES, ToolContext, ToolError, cap_result};
use tracing::Span;

use crate::dispatch::Dispatcher;
use crate::event::{LoopError, LoopEvent, Sink, emit};
use crate::hooks::{self, CallVerdict, HookContext};
use crate::machine::{CallPlan, LoopMachine, Planned};
use crate::nesting::Exchange;
use crate::options::{LoopOptions, MAX_HANDOFFS};
use crate::protocols::{CallProtocol, PendingCall};
use crate::run::RoundCall;

/// One run as each of its parts sees it, given once instead of a list of parameters.
pub(crate) struct Run<'a> {
    pub(crate) model: &'a dyn ChatModel,
    pub(crate) store: &'a dyn SessionStore,
    pub(crate) dispatcher: &'a Dispatcher,
    pub(crate) session_id: &'a str,
    pub(crate) options: &'a LoopOptions,
    /// Where the run's events go (`None`: nobody listens).
    pub(crate) sink: Sink<'a>,
    /// The run's span (`invoke_agent`): the parent of its model and tool calls' spans, given
    /// rather than looked up. [`Span::none`] until the run starts (deciding held calls that
    /// leave some undecided makes no run, and no span).
    pub(crate) span: Span,
    /// How many handoffs this turn went through before this run.
    pub(crate) hops: usize,
    /// The options of the agent the person talks to (the first of a turn handed off): its
    /// approval key signs the tokens of calls held in this run.
    pub(crate) top: &'a LoopOptions,
    /// The handoffs this turn took to reach this run's agent, in order.
    pub(crate) via: Vec<String>,
    /// A sub-agent's run ([`crate::AgentTool`]) under a run that can hold for it: where it puts
    /// itself when it holds, instead of keeping itself in its session.
    pub(crate) held_up: Option<&'a std::sync::Mutex<Option<crate::run::AgentRun>>>,
}

/// How one call that was planned ended.
pub(crate) struct Ran {
    /// The result text the model gets.
    pub(crate) content: String,
    pub(crate) is_error: bool,
    /// The turn's answer the tool gave ([`toolwright_core::Tool::final_answer`]).
    pub(crate) answer: Option<String>,
    /// Media the tool returned after its text.
    pub(crate) parts: Vec<toolwright_core::Part>,
}

impl Ran {
    fn error(e: ToolError) -> Self {
        let (content, _) = cap_result(e.to_model_json().to_string(), DEFAULT_MAX_RESULT_BYTES);
        Self {
            content,
            is_error: true,
            answer: None,
            parts: Vec::new(),
        }
    }
}

/// Runs one step of calls as planned: the calls to announce are announced, the calls run
/// (at once when the protocol allows, else in order), and each one that ran is told to the
/// machine and reported, in call order. Gives each call's plan back with how it ended (`None`:
/// it did not run — held, waiting, or it has its result already).
pub(crate) async fn run_step(
    run: &Run<'_>,
    protocol: &dyn CallProtocol,
    machine: &mut LoopMachine,
    calls: &[RoundCall],
    planned: Vec<Planned<'_>>,
    exchange: &Exchange,
) -> Result<Vec<(Option<CallPlan>, Option<Ran>)>, LoopError> {
    for (c, p) in calls.iter().map(|c| &c.call).zip(&planned) {
        if p.announce {
            emit(run.sink, || LoopEvent::ToolCallStarted {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .await?;
        }
    }
    let outcomes = run_calls(
        run,
        protocol.concurrent(),
        exchange,
        calls
            .iter()
            .map(|c| &c.call)
            .zip(planned.iter().map(|p| p.plan.as_ref())),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>, LoopError>>()?;
    let mut out = Vec::with_capacity(calls.len());
    for ((c, p), outcome) in calls.iter().map(|c| &c.call).zip(planned).zip(outcomes) {
        if outcome.is_some() && exchange.is_held(&c.id) {
            // a sub-agent's run held calls for a person: this call holds for them too
            out.push((Some(CallPlan::Hold), None));
            continue;
        }
        if outcome.is_none() && p.plan == Some(CallPlan::Run) {
            // in order after a sub-agent that held ([`run_calls`]): it waits, as after any
            // held call
            out.push((Some(CallPlan::Wait), None));
            continue;
        }
        if let (Some(plan), Some(ran)) = (&p.plan, &outcome) {
            machine.call_done(
                p.facts,
                plan,
                &ran.content,
                !ran.is_error,
                ran.answer.as_deref(),
            );
            if *plan == CallPlan::Run && !ran.is_error && is_handoff(run, &c.name) {
                machine.hand_off(&c.name);
            }
            emit(run.sink, || LoopEvent::ToolResult {
                id: c.id.clone(),
                name: c.name.clone(),
                content: ran.content.clone(),
                is_error: ran.is_error,
            })
            .await?;
        }
        out.push((p.plan, outcome));
    }
    Ok(out)
}

/// Runs `calls` as planned — at once when `concurrent` (and there is more than one), else in
/// order — and gives each one's outcome ([`run_call`]; `None` for a call with no plan, or one
/// that waits). In order, a call that would run after a sub-agent's call that held (its run
/// put in `exchange`) does not run: it waits for the person's decision too.
async fn run_calls<'a>(
    run: &Run<'_>,
    concurrent: bool,
    exchange: &Exchange,
    calls: impl ExactSizeIterator<Item = (&'a PendingCall, Option<&'a CallPlan>)>,
) -> Vec<Result<Option<Ran>, LoopError>> {
    let one = |(c, plan): (&'a PendingCall, Option<&'a CallPlan>)| async move {
        match plan {
            Some(plan) => run_call(run, c, plan).await,
            None => Ok(None),
        }
    };
    if concurrent && calls.len() > 1 {
        futures::future::join_all(calls.map(one)).await
    } else {
        let mut v = Vec::with_capacity(calls.len());
        let mut held = false;
        for call in calls {
            if held && call.1 == Some(&CallPlan::Run) {
                v.push(Ok(None));
                continue;
            }
            let id = &call.0.id;
            let r = one(call).await;
            held |= matches!(r, Ok(Some(_))) && exchange.is_held(id);
            v.push(r);
        }
        v
    }
}

/// One call as planned: how it ended; `None` for a call that waits (held for approval, or
/// after a held one). A call that runs goes through the agent's hooks before and after; a
/// hook that stops the run (or fails) is the error.
async fn run_call(
    run: &Run<'_>,
    c: &PendingCall,
    plan: &CallPlan,
) -> Result<Option<Ran>, LoopError> {
    Ok(Some(match plan {
        CallPlan::Reuse(previous) => {
            tracing::info!(tool = %c.name, "repeated idempotent call: earlier result reused, answer requested");
            Ran {
                content: previous.clone(),
                is_error: false,
                answer: None,
                parts: Vec::new(),
            }
        }
        CallPlan::Reject(msg) => Ran::error(ToolError::invalid_arguments(msg.clone())),
        CallPlan::Decline(msg) => Ran::error(ToolError::failed(msg.clone())),
        CallPlan::Hold | CallPlan::Wait => return Ok(None),
        _ if run.hops >= MAX_HANDOFFS && is_handoff(run, &c.name) => {
            Ran::error(ToolError::failed(format!(
                "Refused: this conversation was already handed off {MAX_HANDOFFS} times in this turn. Answer the user yourself."
            )))
        }
        _ if run.options.hooks.is_empty() => dispatch(run, c, c.arguments.clone()).await,
        _ => {
            let ctx = HookContext::new(run.session_id);
            let timeout = run.options.hook_timeout;
            let mut arguments = None;
            for hook in &run.options.hooks {
                let rewritten;
                let call = match &arguments {
                    Some(a) => {
                        rewritten = PendingCall::new(c.id.clone(), c.name.clone(), Value::clone(a));
                        &rewritten
                    }
                    None => c,
                };
                match hooks::bounded(hook.name(), timeout, hook.before_tool(ctx, call)).await? {
                    CallVerdict::Continue => {}
                    CallVerdict::Rewrite(a) => arguments = Some(a),
                    CallVerdict::Refuse(why) => {
                        tracing::info!(tool = %c.name, hook = hook.name(), "a hook refused a call");
                        return Ok(Some(Ran::error(ToolError::failed(why))));
                    }
                    CallVerdict::Stop(reason) => {
                        return Err(LoopError::Stopped {
                            by: hook.name().to_owned(),
                            reason,
                        });
                    }
                }
            }
            let ran = dispatch(run, c, arguments.unwrap_or_else(|| c.arguments.clone())).await;
            for hook in &run.options.hooks {
                let after = hook.after_tool(ctx, c, &ran.content, ran.is_error);
                hooks::stop_on(&**hook, hooks::bounded(hook.name(), timeout, after).await?)?;
            }
            ran
        }
    }))
}

/// Whether `name` is one of the run's handoff tools.
fn is_handoff(run: &Run<'_>, name: &str) -> bool {
    run.options.handoffs.iter().any(|h| h.name == name)
}

/// Runs a call through the dispatcher, in the run's span, with `arguments`.
async fn dispatch(run: &Run<'_>, c: &PendingCall, arguments: Value) -> Ran {
    let mut ctx = ToolContext::new(c.id.clone()).with_session(run.session_id);
    // The person the top run acts for (a sub-agent's calls are made for them too); nothing
    // to copy for a program with none.
    if !run.top.principal.is_empty() {
        ctx = ctx.with_principal(run.top.principal.as_str());
    }
    let out = run
        .dispatcher
        .dispatch_under(Some(&run.span), &c.name, arguments, ctx)
        .await;
    Ran {
        is_error: !out.is_ok(),
        content: out.content,
        answer: out.answer,
        parts: out.parts,
    }
}
