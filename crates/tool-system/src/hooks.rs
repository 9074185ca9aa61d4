//! Hooks and guardrails: code of one's own at fixed points of a run ([`Hook`]), and checks of
//! the person's text and of the final answer that can trip the run ([`Guardrail`]).
//!
//! Rules (also in `docs/stage-3-tool-system.md`, "Hooks and guardrails"):
//! * hooks run in the order they were added, one after another, at each point; at a `before`
//!   point each hook sees what the hooks before it left (a rewritten argument list), and the
//!   first verdict other than "continue" wins — the hooks after it are not asked;
//! * every call of a hook or guardrail is bounded: one that panics, or does not answer within
//!   the agent's hook timeout (default 10 s), fails the run with [`LoopError::HookFailed`] —
//!   it fails closed, as a check that could not decide must not let the run go on;
//! * a run stopped by a hook ([`LoopError::Stopped`]) or tripped by a guardrail
//!   ([`LoopError::GuardrailTripped`]) keeps the rounds already recorded; the round in flight
//!   is not recorded (so no call is ever stored without its result). An input guardrail runs
//!   before anything is stored: the tripped message is not in the session.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;
use toolwright_core::ChatRequest;

use crate::event::LoopError;
use crate::protocols::{PendingCall, Reading};

/// Default time a hook or guardrail may take for one call: 10 s.
pub(crate) const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// What a hook is told about the run it is called in.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct HookContext<'a> {
    /// The run's session.
    pub session_id: &'a str,
}

impl<'a> HookContext<'a> {
    pub(crate) fn new(session_id: &'a str) -> Self {
        Self { session_id }
    }
}

/// What a hook at a model call, or after a tool call, decides.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop the run with [`LoopError::Stopped`] carrying this reason.
    Stop(String),
}

/// What a hook before a tool call decides.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CallVerdict {
    /// Run the call as it is.
    Continue,
    /// Run the call with these arguments instead (checked against the tool's schema like any
    /// call; the history keeps the call as the model wrote it).
    Rewrite(Value),
    /// Do not run the call: the model gets this text as the call's error result and goes on.
    Refuse(String),
    /// Do not run the call and stop the run with [`LoopError::Stopped`].
    Stop(String),
}

/// Code called at fixed points of every run of an agent ([`crate::AgentBuilder::hook`]); each
/// method defaults to "continue", so a hook implements only the points it needs.
///
/// ```
/// use toolwright_core::async_trait;
/// use toolwright_tool_system::{CallVerdict, Hook, HookContext, protocol::PendingCall};
/// struct NoDeletes;
/// #[async_trait]
/// impl Hook for NoDeletes {
///     fn name(&self) -> &str { "no-deletes" }
///     async fn before_tool(&self, _: HookContext<'_>, call: &PendingCall) -> CallVerdict {
///         if call.name.starts_with("delete") {
///             CallVerdict::Refuse("Deleting is not allowed here; tell the user.".into())
///         } else {
///             CallVerdict::Continue
///         }
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Hook: Send + Sync {
    /// A name for errors and logs.
    fn name(&self) -> &str;
    /// Before each model call, with the request about to be sent.
    async fn before_model(&self, _ctx: HookContext<'_>, _request: &ChatRequest) -> Flow {
        Flow::Continue
    }
    /// After each model call, with the response as the protocol read it (its calls, its answer).
    async fn after_model(&self, _ctx: HookContext<'_>, _response: &Reading) -> Flow {
        Flow::Continue
    }
    /// Before a tool call runs (only calls that would run: not one held for approval, reused
    /// or rejected; a held call once approved, yes).
    async fn before_tool(&self, _ctx: HookContext<'_>, _call: &PendingCall) -> CallVerdict {
        CallVerdict::Continue
    }
    /// After a tool call ran, with the result the model will read.
    async fn after_tool(
        &self,
        _ctx: HookContext<'_>,
        _call: &PendingCall,
        _result: &str,
        _is_error: bool,
    ) -> Flow {
        Flow::Continue
    }
}

/// A check of a text that can trip the run: the person's message
/// ([`crate::AgentBuilder::input_guardrail`], before anything is stored or sent) or the final
/// answer ([`crate::AgentBuilder::output_guardrail`], before it is recorded or returned).
///
/// ```
/// use toolwright_core::async_trait;
/// use toolwright_tool_system::Guardrail;
/// struct NoCardNumbers;
/// #[async_trait]
/// impl Guardrail for NoCardNumbers {
///     fn name(&self) -> &str { "no-card-numbers" }
///     async fn check(&self, text: &str) -> Result<(), String> {
///         let digits = text.chars().filter(char::is_ascii_digit).count();
///         if digits >= 16 { Err("looks like a card number".into()) } else { Ok(()) }
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Guardrail: Send + Sync {
    /// A name for errors and logs.
    fn name(&self) -> &str;
    /// `Err(reason)` trips the run with [`LoopError::GuardrailTripped`].
    async fn check(&self, text: &str) -> Result<(), String>;
}

/// `fut` (a call of the hook or guardrail `name`), bounded: a panic or a time-out is
/// [`LoopError::HookFailed`].
pub(crate) async fn bounded<T>(
    name: &str,
    timeout: Duration,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, LoopError> {
    match tokio::time::timeout(timeout, AssertUnwindSafe(fut).catch_unwind()).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(panic)) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            tracing::error!(hook = name, %message, "a hook panicked; the run stops");
            Err(LoopError::HookFailed {
                hook: name.to_owned(),
                problem: format!("it panicked: {message}"),
            })
        }
        Err(_) => {
            tracing::error!(
                hook = name,
                ?timeout,
                "a hook did not answer in time; the run stops"
            );
            Err(LoopError::HookFailed {
                hook: name.to_owned(),
                problem: format!("it did not answer within {timeout:?}"),
            })
        }
    }
}

/// Runs `guardrails` on `text` in order; the first that trips (or fails) ends the check.
pub(crate) async fn guard(
    guardrails: &[std::sync::Arc<dyn Guardrail>],
    timeout: Duration,
    text: &str,
) -> Result<(), LoopError> {
    for g in guardrails {
        if let Err(reason) = bounded(g.name(), timeout, g.check(text)).await? {
            tracing::warn!(guardrail = g.name(), %reason, "a guardrail tripped the run");
            return Err(LoopError::GuardrailTripped {
                guardrail: g.name().to_owned(),
                reason,
            });
        }
    }
    Ok(())
}

/// Stops the run when `flow` says so.
pub(crate) fn stop_on(hook: &dyn Hook, flow: Flow) -> Result<(), LoopError> {
    match flow {
        Flow::Continue => Ok(()),
        Flow::Stop(reason) => Err(LoopError::Stopped {
            by: hook.name().to_owned(),
            reason,
        }),
    }
}

impl std::fmt::Debug for dyn Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hook({})", self.name())
    }
}

impl std::fmt::Debug for dyn Guardrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Guardrail({})", self.name())
    }
}
