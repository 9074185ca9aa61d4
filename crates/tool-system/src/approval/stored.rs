//! The pending approval as the session store keeps it: the versioned format ([`Stored`], which
//! fails closed: anything that does not parse as exactly this is unreadable and nothing of it
//! runs) and the compare-and-set writes of its state slot — holding a round, closing one a new
//! message overtook, showing it again, asking again after a cut-off run.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_core::{DEFAULT_MAX_RESULT_BYTES, Message, Part, ToolError, cap_result};

use super::error::{ApprovalError, Failed};
use super::pending::{HeldCall, PendingApproval};
use super::token::{ApprovalKey, Binding, key_or_process, nonce};
use crate::machine::{CallPlan, LoopMachine};
use crate::protocols::{CallProtocol, CallResult, PendingCall, Reading, Step, tool_message_round};

/// The session state slot ([`toolwright_context_engine::SessionStore::get_state`]) that keeps a
/// session's pending approval.
pub const APPROVAL_STATE_KEY: &str = "tool-system.approval";

/// CAS attempts before a decision gives up on a slot that keeps changing under it.
pub(super) const CAS_ATTEMPTS: usize = 4;

const VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Stored {
    pub(super) v: u32,
    pub(super) status: Status,
    pub(super) nonce: String,
    pub(super) protocol: String,
    pub(super) user_text: String,
    pub(super) model_calls: usize,
    pub(super) tool_rounds: usize,
    pub(super) content: String,
    pub(super) answer: String,
    /// What the person saw of the response (see [`shown_text`]).
    pub(super) text: String,
    pub(super) native: bool,
    /// The response's reasoning and other parts: a held round resumed on another worker
    /// replays them to the provider that made them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) parts: Vec<Part>,
    pub(super) steps: Vec<StoredStep>,
    /// While `running`: until when (Unix ms) the claiming request may take; past it the round
    /// is asked again.
    #[serde(default)]
    pub(super) lease_until_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Status {
    /// Waiting for decisions.
    Pending,
    /// All decided; a request is running the approved calls.
    Running,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum StoredStep {
    Text { text: String },
    Calls { calls: Vec<StoredCall> },
}

/// One call of a held round, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoredCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: Value,
    pub(crate) state: CallState,
    /// Who decided it and when (set with an approval or a rejection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) decided: Option<Decided>,
}

/// Who decided a call, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Decided {
    /// The principal (opaque; empty when the program names none).
    pub(super) by: String,
    /// Unix time, ms.
    pub(super) at_ms: u64,
}

/// Where one call of a held round stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum CallState {
    /// It has its result (it ran, or was answered without running).
    Done {
        content: String,
        is_error: bool,
        /// Media the tool returned (kept so a resumed round gives the model what it gave).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<Part>,
    },
    /// Waiting for a person. `maybe_ran`: it was approved before, and the run that claimed it
    /// stopped while it ran (its lease ran out), so it may have taken effect.
    Held {
        #[serde(default)]
        maybe_ran: bool,
    },
    /// Waiting for an earlier held call (protocols that run calls in order).
    Waiting,
    /// The person approved it.
    Approved,
    /// The person declined it.
    Rejected { reason: Option<String> },
}

impl Stored {
    pub(super) fn parse(session: &str, raw: &str) -> Result<Self, ApprovalError> {
        let unreadable = |detail: String| ApprovalError::Unreadable {
            session: session.to_owned(),
            detail,
        };
        let s: Stored = serde_json::from_str(raw).map_err(|e| unreadable(e.to_string()))?;
        if s.v != VERSION {
            return Err(unreadable(format!("unknown version {}", s.v)));
        }
        let mut ids = std::collections::HashSet::new();
        let mut undecided = 0;
        for c in s.calls() {
            if !ids.insert(c.id.as_str()) {
                return Err(unreadable(format!("call id `{}` appears twice", c.id)));
            }
            if matches!(c.state, CallState::Held { .. }) {
                undecided += 1;
            }
        }
        if ids.is_empty() {
            return Err(unreadable("it holds no calls".into()));
        }
        if s.status == Status::Running && undecided > 0 {
            return Err(unreadable("running with undecided calls".into()));
        }
        Ok(s)
    }

    pub(super) fn lease_expired(&self) -> bool {
        self.lease_until_ms.is_none_or(|until| now_ms() >= until)
    }

    pub(super) fn calls(&self) -> impl Iterator<Item = &StoredCall> {
        self.steps.iter().flat_map(|s| match s {
            StoredStep::Calls { calls } => calls.as_slice(),
            StoredStep::Text { .. } => &[],
        })
    }

    pub(super) fn calls_mut(&mut self) -> impl Iterator<Item = &mut StoredCall> {
        self.steps.iter_mut().flat_map(|s| match s {
            StoredStep::Calls { calls } => calls.as_mut_slice(),
            StoredStep::Text { .. } => &mut [],
        })
    }

    pub(super) fn to_json(&self) -> Result<String, StoreError> {
        serde_json::to_string(self).map_err(|e| StoreError::Encode {
            detail: e.to_string(),
        })
    }

    pub(super) fn reading(&self) -> Reading {
        Reading {
            content: self.content.clone(),
            answer: self.answer.clone(),
            correction: None,
            native: self.native,
            parts: self.parts.clone(),
            steps: self
                .steps
                .iter()
                .map(|s| match s {
                    StoredStep::Text { text } => Step::Text(text.clone()),
                    StoredStep::Calls { calls } => {
                        Step::Calls(calls.iter().map(StoredCall::pending).collect())
                    }
                })
                .collect(),
        }
    }

    /// What `principal` is shown: the held calls, with tokens bound to them.
    pub(super) fn view(
        &self,
        session: &str,
        key: &ApprovalKey,
        principal: &str,
    ) -> PendingApproval {
        PendingApproval {
            session_id: session.to_owned(),
            text: self.text.clone(),
            calls: self
                .calls()
                .filter_map(|c| match c.state {
                    CallState::Held { maybe_ran } => Some(HeldCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                        token: key.token(&c.binding(session, &self.nonce), principal),
                        maybe_ran,
                    }),
                    _ => None,
                })
                .collect(),
        }
    }
}

impl StoredCall {
    /// The call, to run (or to record) again.
    pub(crate) fn pending(&self) -> PendingCall {
        PendingCall::new(self.id.clone(), self.name.clone(), self.arguments.clone())
    }

    /// What this call's token binds under `nonce`.
    pub(super) fn binding<'a>(&'a self, session: &'a str, nonce: &'a str) -> Binding<'a> {
        Binding {
            session,
            id: &self.id,
            name: &self.name,
            arguments: &self.arguments,
            nonce,
        }
    }
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis)
}

pub(super) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A tool error result with `text`, as the model gets it.
pub(super) fn model_error(text: &str) -> String {
    let (content, _) = cap_result(
        ToolError::failed(text).to_model_json().to_string(),
        DEFAULT_MAX_RESULT_BYTES,
    );
    content
}

/// How one call of a round stands after the round's first pass.
pub(crate) type RoundSlots = Vec<(PendingCall, CallState)>;

/// The round's results in call order when every call has one; else the slots back.
pub(crate) fn all_done(slots: RoundSlots) -> Result<Vec<(PendingCall, CallResult)>, RoundSlots> {
    if !slots
        .iter()
        .all(|(_, s)| matches!(s, CallState::Done { .. }))
    {
        return Err(slots);
    }
    Ok(slots
        .into_iter()
        .filter_map(|(c, s)| match s {
            CallState::Done { content, parts, .. } => Some((c, CallResult::new(content, parts))),
            _ => None,
        })
        .collect())
}

/// A round with held calls, as the loop has it when the calls that could run have run.
pub(crate) struct HeldRound<'a> {
    pub(crate) protocol: &'a dyn CallProtocol,
    pub(crate) reading: &'a Reading,
    pub(crate) slots: RoundSlots,
    /// The person's message the run answers.
    pub(crate) user_text: &'a str,
    pub(crate) machine: &'a LoopMachine,
}

/// What [`hold`] did.
pub(crate) enum Held {
    /// The round is stored in the state slot; the run stops here.
    Pending(PendingApproval),
    /// The store keeps no state: the held calls were answered "not run" in this round.
    Unsupported(Vec<Message>),
}

/// Stores a round with held calls as the session's pending approval.
pub(crate) async fn hold(
    store: &dyn SessionStore,
    session_id: &str,
    round: HeldRound<'_>,
    key: Option<&ApprovalKey>,
    principal: &str,
) -> Result<Held, Failed> {
    let HeldRound {
        protocol,
        reading,
        slots,
        user_text,
        machine,
    } = round;
    let mut slots = slots.into_iter();
    let steps = reading
        .steps
        .iter()
        .map(|s| match s {
            Step::Text(t) => StoredStep::Text { text: t.clone() },
            Step::Calls(calls) => StoredStep::Calls {
                calls: slots
                    .by_ref()
                    .take(calls.len())
                    .map(|(c, state)| StoredCall {
                        id: c.id,
                        name: c.name,
                        arguments: c.arguments,
                        state,
                        decided: None,
                    })
                    .collect(),
            },
        })
        .collect();
    let stored = Stored {
        v: VERSION,
        status: Status::Pending,
        nonce: nonce(),
        protocol: protocol.name().to_owned(),
        user_text: user_text.to_owned(),
        model_calls: machine.model_calls(),
        tool_rounds: machine.tool_rounds(),
        content: reading.content.clone(),
        answer: reading.answer.clone(),
        text: shown_text(protocol, reading),
        native: reading.native,
        parts: reading.parts.clone(),
        steps,
        lease_until_ms: None,
    };
    let json = stored.to_json()?;
    let ids: Vec<&str> = stored.calls().map(|c| c.id.as_str()).collect();
    let unique = ids.len() == ids.iter().collect::<std::collections::HashSet<_>>().len();
    let written = if unique {
        store
            .append_with_state(
                session_id,
                &[],
                StateChange::new(APPROVAL_STATE_KEY, None, Some(&json)),
            )
            .await
    } else {
        // A decision names its call by id: with two calls of one id it could not say which.
        Err(StoreError::Unsupported {
            what: "two calls with one id",
        })
    };
    match written {
        Ok(Some(_)) => {
            let view = stored.view(session_id, key_or_process(key), principal);
            tracing::info!(
                session = session_id,
                held = view.calls.len(),
                "tool calls held for approval; the run stops until they are decided"
            );
            Ok(Held::Pending(view))
        }
        Ok(None) => Err(ApprovalError::Conflict {
            session: session_id.to_owned(),
        }
        .into()),
        Err(StoreError::Unsupported { what }) => {
            tracing::error!(
                session = session_id,
                reason = what,
                "tool calls need approval but a pending approval cannot be kept; they were answered as not run"
            );
            let text = "Not run: this call needs the user's approval, which cannot be asked for here. Tell the user.";
            let results = stored
                .calls()
                .map(|c| {
                    let result = match &c.state {
                        CallState::Done { content, parts, .. } => {
                            CallResult::new(content.clone(), parts.clone())
                        }
                        _ => model_error(text).into(),
                    };
                    (c.pending(), result)
                })
                .collect::<Vec<_>>();
            Ok(Held::Unsupported(
                protocol.round_messages(&stored.reading(), results),
            ))
        }
        Err(e) => Err(e.into()),
    }
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

/// At the start of a new user message: a round still held (or cut off while running) is
/// closed first — every call without a result gets one saying it did not run (or that whether
/// it ran is unknown) — so the history stays whole rounds. An unreadable state is dropped
/// (nothing of it runs). Returns the closing round appended, if any.
pub(crate) async fn close_open(
    store: &dyn SessionStore,
    session_id: &str,
    protocol: &dyn CallProtocol,
    machine: &LoopMachine,
) -> Result<Vec<Message>, Failed> {
    for _ in 0..CAS_ATTEMPTS {
        let raw = match store.get_state(session_id, APPROVAL_STATE_KEY).await {
            Ok(Some(raw)) => raw,
            Ok(None) | Err(StoreError::Unsupported { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let round = match Stored::parse(session_id, &raw) {
            Ok(stored) => closing_round(session_id, &stored, protocol, machine),
            Err(e) => {
                tracing::error!(session = session_id, error = %e, "dropping an unreadable pending approval; none of its calls run");
                Vec::new()
            }
        };
        let change = StateChange::new(APPROVAL_STATE_KEY, Some(&raw), None);
        if store
            .append_with_state(session_id, &round, change)
            .await?
            .is_some()
        {
            return Ok(round);
        }
    }
    Err(ApprovalError::Conflict {
        session: session_id.to_owned(),
    }
    .into())
}

/// The round that closes a held round a new message overtook: every call without a result
/// gets one saying it did not run, or that whether it ran is unknown.
fn closing_round(
    session_id: &str,
    stored: &Stored,
    protocol: &dyn CallProtocol,
    machine: &LoopMachine,
) -> Vec<Message> {
    let running = stored.status == Status::Running;
    let results: Vec<(PendingCall, CallResult)> = stored
        .calls()
        .map(|c| {
            let plan = match &c.state {
                CallState::Done { content, parts, .. } => {
                    return (c.pending(), CallResult::new(content.clone(), parts.clone()));
                }
                CallState::Rejected { reason } => machine.plan_decided(false, reason.as_deref()),
                CallState::Approved | CallState::Waiting => machine.plan_abandoned(running),
                CallState::Held { maybe_ran } => machine.plan_abandoned(*maybe_ran),
            };
            let text = match plan {
                CallPlan::Decline(t) => t,
                _ => String::new(),
            };
            (c.pending(), model_error(&text).into())
        })
        .collect();
    tracing::warn!(
        session = session_id,
        running,
        "a new message arrived while tool calls waited for approval; they are closed as not run"
    );
    if stored.protocol == protocol.name() {
        protocol.round_messages(&stored.reading(), results)
    } else {
        tool_message_round(&stored.reading(), results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str, args: Value) -> StoredCall {
        StoredCall {
            id: id.into(),
            name: "delete_file".into(),
            arguments: args,
            state: CallState::Held { maybe_ran: false },
            decided: None,
        }
    }

    #[test]
    fn approval_unreadable_states_fail_closed() {
        let good = Stored {
            v: VERSION,
            status: Status::Pending,
            nonce: "ab".into(),
            protocol: "native".into(),
            user_text: "u".into(),
            model_calls: 1,
            tool_rounds: 1,
            content: String::new(),
            answer: String::new(),
            text: String::new(),
            parts: Vec::new(),
            lease_until_ms: None,
            native: true,
            steps: vec![StoredStep::Calls {
                calls: vec![call("c1", json!({}))],
            }],
        };
        assert!(Stored::parse("s", &serde_json::to_string(&good).unwrap()).is_ok());
        let mut dup = good.clone();
        dup.steps = vec![StoredStep::Calls {
            calls: vec![call("c1", json!({})), call("c1", json!({}))],
        }];
        let mut newer = good.clone();
        newer.v = 2;
        let mut running = good.clone();
        running.status = Status::Running;
        let mut empty = good.clone();
        empty.steps.clear();
        let mut extra = serde_json::to_value(&good).unwrap();
        extra["surprise"] = json!(1);
        for raw in [
            "".to_owned(),
            "{".to_owned(),
            "null".to_owned(),
            serde_json::to_string(&dup).unwrap(),
            serde_json::to_string(&newer).unwrap(),
            serde_json::to_string(&running).unwrap(),
            serde_json::to_string(&empty).unwrap(),
            extra.to_string(),
        ] {
            assert!(
                matches!(
                    Stored::parse("s", &raw),
                    Err(ApprovalError::Unreadable { .. })
                ),
                "{raw}"
            );
        }
    }
}
