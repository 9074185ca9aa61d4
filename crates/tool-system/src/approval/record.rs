//! Who decided: every decision on a held call — the principal, the time, the tool and the
//! exact arguments it was shown with, approved or declined and why — is kept in the session's
//! state slot [`APPROVAL_LOG_KEY`], beside the conversation in the same store (memory, SQLite,
//! PostgreSQL), after the pending approval itself is gone. Read it with
//! [`DecisionRecord::log`].
//!
//! The decision itself is applied in the pending approval's slot (compare-and-set); the record
//! is added to the log right after, and again — idempotently, by round and call — before the
//! round is recorded and before a cut-off round is asked again, so a process stopping between
//! the two writes loses no record of a decision whose calls ran.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolwright_context_engine::{SessionStore, StateChange, StoreError};

use super::error::{ApprovalError, Failed};
use super::stored::{Stored, retrying, swap};
use crate::run::CallState;

/// The session state slot that keeps the record of decisions ([`DecisionRecord`]).
pub const APPROVAL_LOG_KEY: &str = "tool-system.approval.log";

/// The most records a session keeps; the oldest go first.
pub const MAX_DECISION_RECORDS: usize = 1000;

const LOG_VERSION: u32 = 1;

/// One decision on a held call, as the session keeps it: who, when, on what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DecisionRecord {
    /// The model's call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The exact arguments the decision was made on (and an approved call ran with).
    pub arguments: Value,
    /// Approved (`true`) or declined.
    pub approved: bool,
    /// Why it was declined, if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who decided: the principal the runner was given
    /// (`LoopOptions::principal`); empty when none.
    pub principal: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The pending state the decision was made in: a call asked again after a cut-off run is
    /// decided again, in a new round.
    pub round: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Log {
    v: u32,
    records: Vec<DecisionRecord>,
}

/// The records of the decisions in `stored`.
pub(super) fn records(stored: &Stored) -> Vec<DecisionRecord> {
    stored
        .calls()
        .into_iter()
        .filter_map(|(path, c)| {
            let d = c.decided.as_ref()?;
            let (approved, reason) = match &c.state {
                CallState::Approved => (true, None),
                CallState::Rejected { reason } => (false, reason.clone()),
                // a call that ran after its approval is Done: its record was taken before
                _ => return None,
            };
            Some(DecisionRecord {
                call_id: path,
                tool: c.call.name.clone(),
                arguments: c.call.arguments.clone(),
                approved,
                reason,
                principal: d.by.clone(),
                at_ms: d.at_ms,
                round: stored.nonce.clone(),
            })
        })
        .collect()
}

fn parse(session_id: &str, raw: &str) -> Result<Log, ApprovalError> {
    let unreadable = |detail: String| ApprovalError::LogUnreadable {
        session: session_id.to_owned(),
        detail,
    };
    let log: Log = serde_json::from_str(raw).map_err(|e| unreadable(e.to_string()))?;
    if log.v != LOG_VERSION {
        return Err(unreadable(format!("unknown version {}", log.v)));
    }
    Ok(log)
}

/// Adds the decision records `new` to the session's log (those not there yet).
pub(super) async fn remember(
    store: &dyn SessionStore,
    session_id: &str,
    new: &[DecisionRecord],
) -> Result<(), Failed> {
    if new.is_empty() {
        return Ok(());
    }
    retrying(session_id, move || async move {
        let raw = store.get_state(session_id, APPROVAL_LOG_KEY).await?;
        let mut log = match raw.as_deref() {
            None => Log {
                v: LOG_VERSION,
                records: Vec::new(),
            },
            // never overwritten: what is there may be someone's only record
            Some(r) => parse(session_id, r)?,
        };
        let before = log.records.len();
        for r in new {
            if !log
                .records
                .iter()
                .any(|x| x.round == r.round && x.call_id == r.call_id)
            {
                log.records.push(r.clone());
            }
        }
        if log.records.len() == before {
            return Ok(Some(()));
        }
        let excess = log.records.len().saturating_sub(MAX_DECISION_RECORDS);
        log.records.drain(..excess);
        let json = serde_json::to_string(&log).map_err(|e| StoreError::Encode {
            detail: e.to_string(),
        })?;
        let change = StateChange::new(APPROVAL_LOG_KEY, raw.as_deref(), Some(&json));
        Ok(swap(store, session_id, &[], change).await?.then_some(()))
    })
    .await
}

/// [`remember`], where the decision itself stands already: a failure is logged (the next step
/// of the round tries again).
pub(super) async fn remember_or_warn(
    store: &dyn SessionStore,
    session_id: &str,
    new: &[DecisionRecord],
) {
    if let Err(e) = remember(store, session_id, new).await {
        let detail = match e {
            Failed::Store(e) => e.to_string(),
            Failed::Refused(e) => e.to_string(),
        };
        tracing::error!(
            session = session_id,
            error = %detail,
            "could not add the approval decisions to the session's record of who decided; it is tried again when the round is recorded"
        );
    }
}

/// The session's record of decisions, oldest first; empty when there is none (or the store
/// keeps no state slots).
/// The decisions of session `session_id`, read from `store` (see [`DecisionRecord::log`]).
pub(crate) async fn log(
    store: &dyn SessionStore,
    session_id: &str,
) -> Result<Vec<DecisionRecord>, Failed> {
    match store.get_state(session_id, APPROVAL_LOG_KEY).await {
        Ok(Some(raw)) => Ok(parse(session_id, &raw)?.records),
        Ok(None) | Err(StoreError::Unsupported { .. } | StoreError::NotFound { .. }) => {
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
    }
}
