//! What a run reports and returns: its events ([`LoopEvent`]), its output ([`LoopOutput`]), its
//! error ([`LoopError`]), and where the events go ([`Sink`], [`emit`]). Below both the runner
//! and the step executor, so they speak of these without importing one another.

use serde_json::Value;
use tokio::sync::mpsc;
use toolwright_context_engine::{ContextError, StoreError};
use toolwright_core::{Message, ModelError, Usage};

use crate::approval::{self, ApprovalError, PendingApproval};

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
    /// [`LoopOutput::pending_approval`] follows). Decide them with `resume_tool_loop`.
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
    /// (`resume_tool_loop`, `Agent::resume`).
    pub pending_approval: Option<PendingApproval>,
    /// Tokens of the run's model calls, added up; `None` when the model reported none.
    pub usage: Option<Usage>,
    /// What those tokens cost in US dollars, at the agent's prices
    /// ([`AgentBuilder::prices`](crate::AgentBuilder::prices), else the built-in table);
    /// `None` when there was no usage or the table has no price for the model.
    pub cost: Option<f64>,
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
    /// The held run being resumed belongs to an agent the turn was handed to by handoff
    /// `name`, which this agent (or the one before it) no longer has: the run is kept as it is.
    #[error(
        "the held run belongs to the agent reached by handoff `{name}`, which this agent no longer has; resume it with an agent built with that handoff (the run is kept)"
    )]
    HandoffGone {
        /// The handoff's name.
        name: String,
    },
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
    /// The final answer of a typed run ([`crate::Agent::run_as`]) does not fit the type, after
    /// one correction round (or the run stopped at its round limit without a fitting answer).
    /// The answer is recorded in the session as the model wrote it.
    #[error(
        "the model's final answer does not fit the requested type: {problem}; it is kept in the session — ask again, allow more rounds, or loosen the type"
    )]
    AnswerDoesNotFit {
        /// The answer as the model wrote it.
        answer: String,
        /// What is wrong with it (output-control's reading).
        problem: toolwright_output_control::ParseError,
    },
    /// The JSON Schema derived for a typed run's answer type does not compile (no model call
    /// was made): fix the type's `JsonSchema` derive or attributes.
    #[error("the answer type's JSON Schema does not compile: {0}")]
    AnswerType(toolwright_output_control::InvalidSchema),
    /// A hook ([`crate::Hook`]) stopped the run. The rounds recorded before stay; the round
    /// in flight is not recorded.
    #[error("the run was stopped by hook {by}: {reason}")]
    Stopped {
        /// The hook's name.
        by: String,
        /// Its reason.
        reason: String,
    },
    /// A guardrail ([`crate::Guardrail`]) tripped: the person's message (nothing of it was
    /// stored or sent) or the final answer (not recorded, not returned).
    #[error("guardrail {guardrail} tripped: {reason}")]
    GuardrailTripped {
        /// The guardrail's name.
        guardrail: String,
        /// Its reason.
        reason: String,
    },
    /// A hook or guardrail panicked or did not answer within the hook timeout
    /// ([`crate::AgentBuilder::hook_timeout`]); the run stops rather than go on unchecked.
    #[error(
        "hook {hook} failed, so the run stopped: {problem}; fix the hook or raise the hook timeout"
    )]
    HookFailed {
        /// The hook's or guardrail's name.
        hook: String,
        /// What happened.
        problem: String,
    },
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
            LoopError::AnswerDoesNotFit { .. } => "answer_does_not_fit",
            LoopError::AnswerType(_) => "answer_type",
            LoopError::Stopped { .. } => "stopped",
            LoopError::GuardrailTripped { .. } => "guardrail",
            LoopError::HookFailed { .. } => "hook",
            LoopError::HandoffGone { .. } => "handoff_gone",
            #[allow(unreachable_patterns)] // `LoopError` is non-exhaustive for other crates
            _ => "_OTHER",
        }
    }
}

/// Where a run's events go: `None` when nobody listens.
pub(crate) type Sink<'a> = Option<&'a mpsc::Sender<LoopEvent>>;

/// Sends an event when someone listens; the event is only built then (a plain `run` has no
/// listener, and the events' clones of arguments and results would be wasted).
pub(crate) async fn emit(sink: Sink<'_>, ev: impl FnOnce() -> LoopEvent) -> Result<(), LoopError> {
    match sink {
        Some(tx) => tx.send(ev()).await.map_err(|_| LoopError::Cancelled),
        None => Ok(()),
    }
}

impl From<approval::Failed> for LoopError {
    fn from(f: approval::Failed) -> Self {
        match f {
            approval::Failed::Store(e) => Self::Store(e),
            approval::Failed::Refused(e) => Self::Approval(e),
        }
    }
}
