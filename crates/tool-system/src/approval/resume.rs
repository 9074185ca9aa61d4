//! Going on after the decisions: a batch of decisions is checked and applied all or nothing
//! ([`decide`], compare-and-set), and once every held call is decided the run is claimed
//! ([`Claimed`]): the runner goes on with it in the same loop as any run, and hands the
//! finished round back to [`record`].

use std::time::Duration;

use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_core::Message;

use super::error::{ApprovalError, Failed};
use super::pending::{ApprovalDecision, PendingApproval};
use super::record::{DecisionRecord, records, remember_or_warn};
use super::stored::{
    APPROVAL_STATE_KEY, Held, Status, Stored, binding, conflict, millis, now_ms, retrying, sealed,
    swap,
};
use super::token::{ApprovalKey, Verdict, key_or_process, nonce, unhex};
use crate::run::{AgentRun, CallState, Decided};

/// Longest reason of a rejection passed on to the model, in characters.
const MAX_REASON_CHARS: usize = 500;

/// Stores a run whose round in flight has held calls as the session's pending approval. A
/// resumed run that holds again before its round is recorded (a sub-agent's next held call)
/// replaces its claimed value: the record of who decided that value's calls is kept first.
pub(crate) async fn hold(
    store: &dyn SessionStore,
    session_id: &str,
    run: &mut AgentRun,
    key: Option<&ApprovalKey>,
    principal: &str,
    claimed: Option<Claimed>,
) -> Result<Held, Failed> {
    if let Some(c) = &claimed {
        remember_or_warn(store, session_id, &c.records).await;
    }
    super::stored::hold(store, session_id, run, key, principal, claimed).await
}

/// What applying decisions led to.
pub(crate) enum Claim {
    /// Some calls still wait; this is what they are, and the run that waits.
    StillPending(PendingApproval, Box<AgentRun>),
    /// All decided; this request claimed the run and goes on with it.
    Run(Box<AgentRun>, Claimed),
}

/// The state slot of a run whose decisions are all in, claimed by this request (status
/// `running`): cleared when the round is recorded.
pub(crate) struct Claimed {
    pub(super) raw: String,
    /// Who decided the round's calls (kept before the calls run and change state).
    pub(super) records: Vec<DecisionRecord>,
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
    let given = key;
    let key = key_or_process(key);
    retrying(session_id, move || async move {
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
        let mut stored = Stored::open(session_id, &raw, given)?;
        if stored.status == Status::Running {
            if !stored.lease_expired() {
                return Err(ApprovalError::Running {
                    session: session_id.to_owned(),
                }
                .into());
            }
            // The request that claimed the round stopped: ask again (the decisions given
            // were made for the old state and are refused as stale).
            reask(store, session_id, &raw, stored, key).await?;
            return Ok(None);
        }
        apply(&mut stored, session_id, decisions, key, principal)?;
        let still = stored.run.is_held();
        if !still {
            stored.status = Status::Running;
            stored.lease_until_ms = Some(now_ms().saturating_add(millis(lease)));
        }
        let json = sealed(key, session_id, &stored.to_json()?);
        let change = StateChange::new(APPROVAL_STATE_KEY, Some(&raw), Some(&json));
        if !swap(store, session_id, &[], change).await? {
            return Ok(None); // changed meanwhile: check the decisions again against what is there now
        }
        let records = records(&stored);
        remember_or_warn(store, session_id, &records).await;
        Ok(Some(if still {
            Claim::StillPending(
                stored.view(session_id, key, principal),
                Box::new(stored.run),
            )
        } else {
            Claim::Run(Box::new(stored.run), Claimed { raw: json, records })
        }))
    })
    .await
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
        let calls = stored.calls();
        let Some((path, call)) = calls.iter().find(|(path, _)| *path == d.call_id) else {
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
        match key.verify(
            &binding(path, &call.call, session_id, &nonce),
            mac,
            principal,
        ) {
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
            CallState::Done { .. }
            | CallState::Waiting
            | CallState::New
            | CallState::Nested { .. } => {
                return Err(ApprovalError::UnknownCall { call_id: call_id() });
            }
        }
    }
    let at_ms = now_ms();
    let mut calls = stored.calls_mut();
    for d in decisions {
        if let Some((_, c)) = calls.iter_mut().find(|(path, _)| *path == d.call_id) {
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

/// Records the claimed round once its calls ran: `round` is appended and the slot cleared in
/// one compare-and-set.
pub(crate) async fn record(
    store: &dyn SessionStore,
    session_id: &str,
    claimed: Claimed,
    round: &[Message],
) -> Result<(), Failed> {
    // the record of who decided is complete before the slot that also holds it is cleared
    remember_or_warn(store, session_id, &claimed.records).await;
    let change = StateChange::new(APPROVAL_STATE_KEY, Some(&claimed.raw), None);
    if swap(store, session_id, round, change).await? {
        return Ok(());
    }
    tracing::error!(
        session = session_id,
        "the held round was closed by a new message while its approved calls ran; their results are not recorded"
    );
    Err(conflict(session_id))
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
    let stored = Stored::open(session_id, &raw, key)?;
    let key = key_or_process(key);
    if stored.status == Status::Running {
        if !stored.lease_expired() {
            return Ok(None); // being run now
        }
        let asked = reask(store, session_id, &raw, stored, key).await?;
        return Ok(asked.map(|s| s.view(session_id, key, principal)));
    }
    Ok(Some(stored.view(session_id, key, principal)))
}

/// A round whose claimer stopped while running it (its lease ran out) goes back to the person:
/// every call without a result that was not declined is held again, marked as possibly run,
/// under a fresh nonce (older tokens are stale). `None` when the slot changed meanwhile.
async fn reask(
    store: &dyn SessionStore,
    session_id: &str,
    raw: &str,
    mut stored: Stored,
    key: &ApprovalKey,
) -> Result<Option<Stored>, Failed> {
    // who approved the calls the cut-off run took stays on record
    remember_or_warn(store, session_id, &records(&stored)).await;
    for (_, c) in stored.calls_mut() {
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
    let json = sealed(key, session_id, &stored.to_json()?);
    let change = StateChange::new(APPROVAL_STATE_KEY, Some(raw), Some(&json));
    Ok(swap(store, session_id, &[], change)
        .await?
        .then_some(stored))
}
