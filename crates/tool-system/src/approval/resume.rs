//! Going on after the decisions: a batch of decisions is checked and applied all or nothing
//! ([`decide`], compare-and-set), and once every held call is decided the round is claimed
//! ([`Claimed`]). What each claimed call gets is decided here with no I/O ([`plan`],
//! [`content`]); the runner — the only executor — runs the calls and hands the finished round
//! back to [`record`].

use std::time::Duration;

use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_core::Message;

use super::error::{ApprovalError, Failed};
use super::pending::{ApprovalDecision, PendingApproval};
use super::record::remember_or_warn;
use super::stored::{
    APPROVAL_STATE_KEY, CAS_ATTEMPTS, CallState, Decided, Status, Stored, StoredCall, StoredStep,
    millis, model_error, now_ms,
};
use super::token::{ApprovalKey, Verdict, key_or_process, nonce, unhex};
use crate::machine::{CallFacts, CallPlan, LoopMachine, Planned};
use crate::protocols::{CallResult, PendingCall, Reading};

/// Longest reason of a rejection passed on to the model, in characters.
const MAX_REASON_CHARS: usize = 500;

/// What applying decisions led to.
pub(crate) enum Claim {
    /// Some calls still wait; this is what they are.
    StillPending(PendingApproval, Progress),
    /// All decided; this request claimed the round and runs it.
    Run(Claimed),
}

/// Counters for a `LoopOutput` of a run that is still pending.
pub(crate) struct Progress {
    pub(crate) model_calls: usize,
    pub(crate) answer: String,
    pub(crate) protocol: String,
}

/// A round whose decisions are all in, claimed by this request (status `running`).
pub(crate) struct Claimed {
    raw: String,
    stored: Stored,
}

impl Claimed {
    pub(crate) fn user_text(&self) -> &str {
        &self.stored.user_text
    }
    /// Model calls and tool rounds made before the run stopped.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.stored.model_calls, self.stored.tool_rounds)
    }
    /// The protocol the held round was read with.
    pub(crate) fn protocol(&self) -> &str {
        &self.stored.protocol
    }
    /// The round's steps of calls, in order (text steps left out).
    pub(crate) fn call_steps(&self) -> impl Iterator<Item = &[StoredCall]> {
        self.stored.steps.iter().filter_map(|s| match s {
            StoredStep::Calls { calls } => Some(calls.as_slice()),
            StoredStep::Text { .. } => None,
        })
    }
    /// The held response, to record the round with.
    pub(crate) fn reading(&self) -> Reading {
        self.stored.reading()
    }
}

/// Checks a batch of decisions by `principal` against the stored pending approval and applies
/// them (compare-and-set): all or nothing; each decided call records who and when. `lease`: how
/// long the request that claims the round may take to record it.
pub(crate) async fn decide(
    store: &dyn SessionStore,
    session_id: &str,
    decisions: &[ApprovalDecision],
    key: Option<&ApprovalKey>,
    lease: Duration,
    principal: &str,
) -> Result<Claim, Failed> {
    if decisions.is_empty() {
        return Err(ApprovalError::NoDecisions.into());
    }
    let key = key_or_process(key);
    for _ in 0..CAS_ATTEMPTS {
        let raw = match store.get_state(session_id, APPROVAL_STATE_KEY).await {
            Ok(Some(raw)) => raw,
            Ok(None) | Err(StoreError::NotFound { .. }) => {
                return Err(ApprovalError::NothingPending {
                    session: session_id.to_owned(),
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        };
        let mut stored = Stored::parse(session_id, &raw)?;
        if stored.status == Status::Running {
            if !stored.lease_expired() {
                return Err(ApprovalError::Running {
                    session: session_id.to_owned(),
                }
                .into());
            }
            // The request that claimed the round stopped: ask again (the decisions given
            // were made for the old state and are refused as stale).
            reask(store, session_id, &raw, stored).await?;
            continue;
        }
        apply(&mut stored, session_id, decisions, key, principal)?;
        let still = stored
            .calls()
            .any(|c| matches!(c.state, CallState::Held { .. }));
        if !still {
            stored.status = Status::Running;
            stored.lease_until_ms = Some(now_ms().saturating_add(millis(lease)));
        }
        let json = stored.to_json()?;
        let change = StateChange::new(APPROVAL_STATE_KEY, Some(&raw), Some(&json));
        if store
            .append_with_state(session_id, &[], change)
            .await?
            .is_none()
        {
            continue; // changed meanwhile: check the decisions again against what is there now
        }
        remember_or_warn(store, session_id, &stored).await;
        return Ok(if still {
            Claim::StillPending(
                stored.view(session_id, key, principal),
                Progress {
                    model_calls: stored.model_calls,
                    answer: stored.text.clone(),
                    protocol: stored.protocol.clone(),
                },
            )
        } else {
            Claim::Run(Claimed { raw: json, stored })
        });
    }
    Err(ApprovalError::Conflict {
        session: session_id.to_owned(),
    }
    .into())
}

fn apply(
    stored: &mut Stored,
    session_id: &str,
    decisions: &[ApprovalDecision],
    key: &ApprovalKey,
    principal: &str,
) -> Result<(), ApprovalError> {
    let nonce = stored.nonce.clone();
    let mut seen = std::collections::HashSet::new();
    // Check every decision before changing anything.
    for d in decisions {
        let call_id = || d.call_id.clone();
        if !seen.insert(d.call_id.as_str()) {
            return Err(ApprovalError::DuplicateDecision { call_id: call_id() });
        }
        let Some(call) = stored.calls().find(|c| c.id == d.call_id) else {
            return Err(ApprovalError::UnknownCall { call_id: call_id() });
        };
        let (token_nonce, mac) = d.token.split_once('.').unwrap_or(("", ""));
        if token_nonce != nonce {
            // A well-formed token of another pending state is a replay; anything else is forged.
            return Err(
                if token_nonce.len() == nonce.len() && unhex(token_nonce).is_some() {
                    ApprovalError::Stale { call_id: call_id() }
                } else {
                    ApprovalError::BadToken { call_id: call_id() }
                },
            );
        }
        match key.verify(&call.binding(session_id, &nonce), mac, principal) {
            Verdict::Valid => {}
            Verdict::OtherPrincipal => {
                return Err(ApprovalError::OtherPrincipal { call_id: call_id() });
            }
            Verdict::Invalid => return Err(ApprovalError::BadToken { call_id: call_id() }),
        }
        match call.state {
            CallState::Held { .. } => {}
            CallState::Approved | CallState::Rejected { .. } => {
                return Err(ApprovalError::AlreadyDecided { call_id: call_id() });
            }
            CallState::Done { .. } | CallState::Waiting => {
                return Err(ApprovalError::UnknownCall { call_id: call_id() });
            }
        }
    }
    let at_ms = now_ms();
    for d in decisions {
        if let Some(c) = stored.calls_mut().find(|c| c.id == d.call_id) {
            c.decided = Some(Decided {
                by: principal.to_owned(),
                at_ms,
            });
            c.state = if d.approved {
                CallState::Approved
            } else {
                CallState::Rejected {
                    reason: d
                        .reason
                        .as_ref()
                        .map(|r| r.chars().take(MAX_REASON_CHARS).collect()),
                }
            };
        }
    }
    Ok(())
}

/// What one call of a claimed round gets: approved and waiting calls run, declined ones get
/// their result, calls that have one keep it (no plan). `call` is the stored call as a call
/// to run; `idempotent`, whether its tool says so. Only calls that run are announced.
pub(crate) fn plan<'a>(
    state: &CallState,
    call: &'a PendingCall,
    idempotent: bool,
    machine: &LoopMachine,
) -> Planned<'a> {
    let facts = CallFacts {
        name: &call.name,
        arguments: &call.arguments,
        invalid: None,
        idempotent,
        needs_approval: false,
        after_held: false,
    };
    let plan = match state {
        CallState::Done { .. } => None,
        CallState::Approved => Some(machine.plan_decided(true, None)),
        CallState::Rejected { reason } => Some(machine.plan_decided(false, reason.as_deref())),
        CallState::Waiting => Some(machine.plan_call(facts)),
        // Parse refuses a running state with undecided calls; never run one anyway.
        CallState::Held { .. } => Some(machine.plan_abandoned(false)),
    };
    Planned {
        announce: matches!(plan, Some(CallPlan::Run)),
        facts,
        plan,
    }
}

/// The result a claimed call is recorded with: the one it had, else what its run gave
/// (`ran`), else — a plan that did not run, never reached — an error result (fail closed).
pub(crate) fn content(state: &CallState, ran: Option<CallResult>) -> CallResult {
    match (state, ran) {
        (CallState::Done { content, parts, .. }, _) => {
            CallResult::new(content.clone(), parts.clone())
        }
        (_, Some(ran)) => ran,
        _ => model_error("Not run.").into(),
    }
}

/// Records the claimed round once its calls ran: `round` is appended and the slot cleared in
/// one compare-and-set.
pub(crate) async fn record(
    store: &dyn SessionStore,
    session_id: &str,
    claimed: Claimed,
    round: &[Message],
) -> Result<(), Failed> {
    // the record of who decided is complete before the slot that also holds it is cleared
    remember_or_warn(store, session_id, &claimed.stored).await;
    let change = StateChange::new(APPROVAL_STATE_KEY, Some(&claimed.raw), None);
    match store.append_with_state(session_id, round, change).await? {
        Some(_) => Ok(()),
        None => {
            tracing::error!(
                session = session_id,
                "the held round was closed by a new message while its approved calls ran; their results are not recorded"
            );
            Err(ApprovalError::Conflict {
                session: session_id.to_owned(),
            }
            .into())
        }
    }
}

/// The pending approval of a session, with fresh tokens for `principal`; `None` when nothing
/// waits.
pub(crate) async fn current(
    store: &dyn SessionStore,
    session_id: &str,
    key: Option<&ApprovalKey>,
    principal: &str,
) -> Result<Option<PendingApproval>, Failed> {
    let raw = match store.get_state(session_id, APPROVAL_STATE_KEY).await {
        Ok(Some(raw)) => raw,
        Ok(None) | Err(StoreError::Unsupported { .. } | StoreError::NotFound { .. }) => {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let stored = Stored::parse(session_id, &raw)?;
    if stored.status == Status::Running {
        if !stored.lease_expired() {
            return Ok(None); // being run now
        }
        let asked = reask(store, session_id, &raw, stored).await?;
        return Ok(asked.map(|s| s.view(session_id, key_or_process(key), principal)));
    }
    Ok(Some(stored.view(
        session_id,
        key_or_process(key),
        principal,
    )))
}

/// A round whose claimer stopped while running it (its lease ran out) goes back to the person:
/// every call without a result that was not declined is held again, marked as possibly run,
/// under a fresh nonce (older tokens are stale). `None` when the slot changed meanwhile.
async fn reask(
    store: &dyn SessionStore,
    session_id: &str,
    raw: &str,
    mut stored: Stored,
) -> Result<Option<Stored>, Failed> {
    // who approved the calls the cut-off run took stays on record
    remember_or_warn(store, session_id, &stored).await;
    for c in stored.calls_mut() {
        if matches!(c.state, CallState::Approved | CallState::Waiting) {
            c.state = CallState::Held { maybe_ran: true };
            c.decided = None;
        }
    }
    stored.status = Status::Pending;
    stored.lease_until_ms = None;
    stored.nonce = nonce();
    tracing::warn!(
        session = session_id,
        "a round of approved tool calls was cut off while running (its lease ran out); asking the person again"
    );
    let json = stored.to_json()?;
    let change = StateChange::new(APPROVAL_STATE_KEY, Some(raw), Some(&json));
    Ok(store
        .append_with_state(session_id, &[], change)
        .await?
        .map(|_| stored))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What each call of a claimed round gets, by its stored state: the plan (none for a call
    /// that has its result), whether it is shown as started, and what it is recorded with
    /// when it did not run.
    #[test]
    fn approval_claimed_calls_are_planned_by_their_state() {
        let machine = LoopMachine::new(5);
        let call = PendingCall::new("c1", "delete_file", json!({"path": "/tmp/a"}));
        let declined = machine.plan_decided(false, Some("not that file"));
        let not_run = model_error("Not run.");
        let done = CallState::Done {
            content: "earlier".into(),
            is_error: false,
            parts: Vec::new(),
        };
        let rejected = CallState::Rejected {
            reason: Some("not that file".into()),
        };
        let held = CallState::Held { maybe_ran: true };
        let table: [(&CallState, Option<CallPlan>, bool, &str); 5] = [
            (&done, None, false, "earlier"),
            (&CallState::Approved, Some(CallPlan::Run), true, &not_run),
            (&rejected, Some(declined), false, &not_run),
            (&CallState::Waiting, Some(CallPlan::Run), true, &not_run),
            (&held, Some(machine.plan_abandoned(false)), false, &not_run),
        ];
        for (state, want_plan, want_announce, unran) in table {
            let p = plan(state, &call, false, &machine);
            assert_eq!(p.plan, want_plan, "{state:?}");
            assert_eq!(p.announce, want_announce, "{state:?}");
            assert!(!p.facts.needs_approval && !p.facts.after_held, "{state:?}");
            assert_eq!(content(state, None).content, unran, "{state:?}");
            let ran = content(state, Some(String::from("ran").into()));
            let want = if *state == done { "earlier" } else { "ran" };
            assert_eq!(ran.content, want, "{state:?}");
        }
    }

    /// A waiting call that repeats an idempotent call which ran earlier in the run is answered
    /// from that result, and is not shown as started (as before the loops were merged).
    #[test]
    fn approval_a_waiting_repeat_is_reused_and_not_announced() {
        let mut machine = LoopMachine::new(5);
        let call = PendingCall::new("c2", "read", json!({"p": 1}));
        let first = plan(&CallState::Waiting, &call, true, &machine);
        let ran = first.plan.clone().unwrap();
        machine.call_done(first.facts, &ran, "42", true, None);
        let again = plan(&CallState::Waiting, &call, true, &machine);
        assert_eq!(again.plan, Some(CallPlan::Reuse("42".into())));
        assert!(!again.announce);
    }
}
