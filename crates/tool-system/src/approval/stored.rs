//! The pending approval as the session store keeps it: the held run itself ([`AgentRun`]) in
//! an envelope with what is about approvals — its status, the nonce the tokens are bound to,
//! the lease of the request running it ([`Stored`], which fails closed: anything that does not
//! parse as exactly this is unreadable and nothing of it runs; the first format, a hand-built
//! snapshot of the round, is migrated on read) — and the compare-and-set writes of its state
//! slot: holding a run, closing one a new message overtook.

use serde::{Deserialize, Serialize};
use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_core::Message;

use super::error::{ApprovalError, Failed};
use super::pending::{HeldCall, PendingApproval};
use super::token::{ApprovalKey, Binding, key_or_process, nonce};
use crate::machine::{CallPlan, LoopMachine};
use crate::protocols::{CallProtocol, CallResult, PendingCall, tool_message_round};
use crate::run::{AgentRun, CallState, RUN_VERSION, Round, RoundCall};

pub(super) use crate::run::model_error;

/// The session state slot ([`toolwright_context_engine::SessionStore::get_state`]) that keeps a
/// session's pending approval.
pub const APPROVAL_STATE_KEY: &str = "tool-system.approval";

/// CAS attempts before a decision gives up on a slot that keeps changing under it.
const CAS_ATTEMPTS: usize = 4;

/// One compare-and-set on a state slot, tried again while the slot changes under it:
/// `attempt` reads the slot and writes over what it read; `Some` is its result, `None` (the
/// slot changed meanwhile) tries again. Past [`CAS_ATTEMPTS`], a conflict.
pub(super) async fn retrying<T, F: Future<Output = Result<Option<T>, Failed>>>(
    session_id: &str,
    mut attempt: impl FnMut() -> F,
) -> Result<T, Failed> {
    for _ in 0..CAS_ATTEMPTS {
        if let Some(done) = attempt().await? {
            return Ok(done);
        }
    }
    Err(conflict(session_id))
}

/// The error of a slot another request changed meanwhile.
pub(super) fn conflict(session_id: &str) -> Failed {
    ApprovalError::Conflict {
        session: session_id.to_owned(),
    }
    .into()
}

/// Appends `round` and makes `change` in one compare-and-set: whether it was written (`false`:
/// the slot changed meanwhile).
pub(super) async fn swap(
    store: &dyn SessionStore,
    session_id: &str,
    round: &[Message],
    change: StateChange<'_>,
) -> Result<bool, StoreError> {
    Ok(store
        .append_with_state(session_id, round, change)
        .await?
        .is_some())
}

/// A held run as the state slot keeps it (version [`RUN_VERSION`], as the run's own).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Stored {
    pub(super) v: u32,
    pub(super) status: Status,
    pub(super) nonce: String,
    /// While `running`: until when (Unix ms) the claiming request may take; past it the round
    /// is asked again.
    #[serde(default)]
    pub(super) lease_until_ms: Option<u64>,
    pub(super) run: AgentRun,
}

/// [`Stored`], written from a borrowed run.
#[derive(Serialize)]
struct StoredRef<'a> {
    v: u32,
    status: Status,
    nonce: &'a str,
    lease_until_ms: Option<u64>,
    run: &'a AgentRun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Status {
    /// Waiting for decisions.
    Pending,
    /// All decided; a request is running the approved calls.
    Running,
}

/// How a sealed value starts: `{"seal":"<hex>","stored":` — then the stored run's JSON, whose
/// exact bytes the seal covers, and `}`.
const SEAL_HEAD: &str = "{\"seal\":\"";
const SEAL_MID: &str = "\",\"stored\":";

/// The state slot's text for `body` (a stored run's JSON): sealed under `key` for `session`.
pub(super) fn sealed(key: &ApprovalKey, session: &str, body: &str) -> String {
    let seal = key.seal(session, body);
    let mut s = String::with_capacity(body.len() + seal.len() + 24);
    s.push_str(SEAL_HEAD);
    s.push_str(&seal);
    s.push_str(SEAL_MID);
    s.push_str(body);
    s.push('}');
    s
}

impl Stored {
    /// Reads the state slot's text. A sealed value is read only when its seal holds under
    /// the agent's key (`key`; the process's own when none is set); a broken seal is
    /// [`ApprovalError::SealBroken`]. A value the key cannot vouch for — written before values
    /// were sealed, or sealed by another process when no key is set — is read as a pending
    /// approval only ([`Stored::untrusted`]).
    pub(super) fn open(
        session: &str,
        raw: &str,
        key: Option<&ApprovalKey>,
    ) -> Result<Self, ApprovalError> {
        let Some(rest) = raw.strip_prefix(SEAL_HEAD) else {
            tracing::warn!(
                session,
                "a held run stored before runs were sealed: read as pending, nothing of it counts as decided"
            );
            return Self::parse(session, raw).map(Self::untrusted);
        };
        let parts = rest
            .split_once(SEAL_MID)
            .and_then(|(seal, tail)| Some((seal, tail.strip_suffix('}')?)));
        match parts {
            Some((seal, body)) if key_or_process(key).seal_holds(session, body, seal) => {
                Self::parse(session, body)
            }
            Some((_, body)) if key.is_none() => {
                tracing::warn!(
                    session,
                    "a held run sealed by another process (no approval key is set): read as pending, nothing of it counts as decided"
                );
                Self::parse(session, body).map(Self::untrusted)
            }
            _ => Err(ApprovalError::SealBroken {
                session: session.to_owned(),
            }),
        }
    }

    /// A run whose seal cannot vouch for it: nothing of it counts as decided. Every call that
    /// was decided, or waited behind a held one, is held for the person again (an approved one
    /// of a run that was running marked as maybe run), and the run is pending. The worst a
    /// writer of the store can do with it is show the person a call to decide.
    fn untrusted(mut self) -> Self {
        let running = self.status == Status::Running;
        for (_, c) in self.calls_mut() {
            let maybe_ran = match c.state {
                CallState::Approved => running,
                CallState::Rejected { .. } | CallState::Waiting => false,
                _ => continue,
            };
            c.state = CallState::Held { maybe_ran };
            c.decided = None;
        }
        self.status = Status::Pending;
        self.lease_until_ms = None;
        self
    }

    /// Reads a stored run's JSON: this version's, or the first format's (migrated). A format newer
    /// than this build's is [`ApprovalError::NewerVersion`]; anything else that is not exactly
    /// a held run is [`ApprovalError::Unreadable`].
    pub(super) fn parse(session: &str, raw: &str) -> Result<Self, ApprovalError> {
        let unreadable = |detail: String| ApprovalError::Unreadable {
            session: session.to_owned(),
            detail,
        };
        // This version's format is read in one pass; only what does not read as it is looked
        // at again for its version (the first format, a newer one, or damage).
        let s = match serde_json::from_str::<Stored>(raw) {
            Ok(s) if s.v == RUN_VERSION => s,
            Ok(s) => return Err(version_error(session, u64::from(s.v))),
            Err(e) => {
                #[derive(Deserialize)]
                struct Version {
                    v: u64,
                }
                match serde_json::from_str::<Version>(raw) {
                    Ok(Version { v: 1 }) => {
                        let first = super::migrate::from_v1::<Status>(raw)
                            .map_err(|e| unreadable(e.to_string()))?;
                        Stored {
                            v: RUN_VERSION,
                            status: first.status,
                            nonce: first.nonce,
                            lease_until_ms: first.lease_until_ms,
                            run: first.run,
                        }
                    }
                    Ok(Version { v }) if v != u64::from(RUN_VERSION) => {
                        return Err(version_error(session, v));
                    }
                    // a sub-agent's run held in it may be newer than this build
                    _ => match serde_json::from_str::<serde_json::Value>(raw) {
                        Ok(value) if newest_run(&value) > u64::from(RUN_VERSION) => {
                            return Err(version_error(session, newest_run(&value)));
                        }
                        _ => return Err(unreadable(e.to_string())),
                    },
                }
            }
        };
        let undecided = check_run(session, &s.run)?;
        let mut ids = std::collections::HashSet::new();
        for (path, c) in s.calls() {
            if !ids.insert(path) {
                return Err(unreadable(format!("call id `{}` appears twice", c.call.id)));
            }
        }
        if s.status == Status::Running && undecided > 0 {
            return Err(unreadable("running with undecided calls".into()));
        }
        Ok(s)
    }

    pub(super) fn lease_expired(&self) -> bool {
        self.lease_until_ms.is_none_or(|until| now_ms() >= until)
    }

    /// Every call a person may decide, with its path ([`AgentRun::decidable`]).
    pub(super) fn calls(&self) -> Vec<(String, &RoundCall)> {
        self.run.decidable()
    }

    pub(super) fn calls_mut(&mut self) -> Vec<(String, &mut RoundCall)> {
        self.run.decidable_mut()
    }

    pub(super) fn to_json(&self) -> Result<String, StoreError> {
        encode(&StoredRef {
            v: self.v,
            status: self.status,
            nonce: &self.nonce,
            lease_until_ms: self.lease_until_ms,
            run: &self.run,
        })
    }

    /// What `principal` is shown: the held calls, with tokens bound to them.
    pub(super) fn view(
        &self,
        session: &str,
        key: &ApprovalKey,
        principal: &str,
    ) -> PendingApproval {
        view(&self.run, &self.nonce, session, key, principal)
    }
}

/// A stored run of version `v`, which is not this build's: newer is
/// [`ApprovalError::NewerVersion`], anything else unreadable.
fn version_error(session: &str, v: u64) -> ApprovalError {
    if v > u64::from(RUN_VERSION) {
        ApprovalError::NewerVersion {
            session: session.to_owned(),
            found: v,
            supported: RUN_VERSION,
        }
    } else {
        ApprovalError::Unreadable {
            session: session.to_owned(),
            detail: format!("unknown version {v}"),
        }
    }
}

/// The newest version of a sub-agent's run held anywhere in a stored value (0 if none).
fn newest_run(value: &serde_json::Value) -> u64 {
    use serde_json::Value;
    match value {
        Value::Object(o) => {
            let own = match (o.get("is"), o.get("run")) {
                (Some(Value::String(is)), Some(run)) if is == "nested" => {
                    run.get("v").and_then(Value::as_u64).unwrap_or(0)
                }
                _ => 0,
            };
            o.values().map(newest_run).fold(own, u64::max)
        }
        Value::Array(a) => a.iter().map(newest_run).max().unwrap_or(0),
        _ => 0,
    }
}

/// Whether a held run holds together — it and each sub-agent's run held in it: this version,
/// not over, no more tool rounds than model calls, every call planned, a sub-agent's run held
/// in a call with a round of its own. How many calls wait for a person.
fn check_run(session: &str, run: &AgentRun) -> Result<usize, ApprovalError> {
    let unreadable = |detail: String| ApprovalError::Unreadable {
        session: session.to_owned(),
        detail,
    };
    if run.v != RUN_VERSION {
        return Err(match version_error(session, u64::from(run.v)) {
            newer @ ApprovalError::NewerVersion { .. } => newer,
            _ => unreadable(format!("a run of version {}", run.v)),
        });
    }
    if run.done.is_some() {
        return Err(unreadable("the run is over".into()));
    }
    let machine = &run.machine;
    if machine.tool_rounds() > machine.model_calls() {
        return Err(unreadable("more tool rounds than model calls".into()));
    }
    let Some(round) = &run.round else {
        return Err(unreadable("it holds no calls".into()));
    };
    let mut undecided = 0;
    let mut any = false;
    for c in round.calls() {
        any = true;
        match &c.state {
            CallState::Held { .. } => undecided += 1,
            CallState::Nested { run } => undecided += check_run(session, run)?,
            // a held run's calls were all planned before it was kept
            CallState::New => {
                return Err(unreadable(format!(
                    "call `{}` was never planned",
                    c.call.id
                )));
            }
            _ => {}
        }
    }
    if !any {
        return Err(unreadable("it holds no calls".into()));
    }
    Ok(undecided)
}

fn encode(value: &impl Serialize) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Encode {
        detail: e.to_string(),
    })
}

fn view(
    run: &AgentRun,
    nonce: &str,
    session: &str,
    key: &ApprovalKey,
    principal: &str,
) -> PendingApproval {
    held_view(session, run, |path, c| {
        key.token(&binding(path, &c.call, session, nonce), principal)
    })
}

/// The calls of `run` waiting for a person, without tokens: what a sub-agent's held run shows
/// the run above it, which signs them.
pub(crate) fn unsigned_view(session: &str, run: &AgentRun) -> PendingApproval {
    held_view(session, run, |_, _| String::new())
}

fn held_view(
    session: &str,
    run: &AgentRun,
    token: impl Fn(&str, &RoundCall) -> String,
) -> PendingApproval {
    PendingApproval {
        session_id: session.to_owned(),
        text: run
            .round
            .as_ref()
            .map(|r| r.text.clone())
            .unwrap_or_default(),
        calls: run
            .decidable()
            .into_iter()
            .filter_map(|(path, c)| match c.state {
                CallState::Held { maybe_ran } => Some(HeldCall {
                    token: token(&path, c),
                    id: path,
                    name: c.call.name.clone(),
                    arguments: c.call.arguments.clone(),
                    maybe_ran,
                }),
                _ => None,
            })
            .collect(),
    }
}

/// What the token of call `call`, decided by its `path`, binds under `nonce`.
pub(super) fn binding<'a>(
    path: &'a str,
    call: &'a PendingCall,
    session: &'a str,
    nonce: &'a str,
) -> Binding<'a> {
    Binding {
        session,
        id: path,
        name: &call.name,
        arguments: &call.arguments,
        nonce,
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

/// What [`hold`] did.
pub(crate) enum Held {
    /// The run is stored in the state slot; it stops here.
    Pending(PendingApproval),
    /// The store keeps no state: the held calls were answered "not run" in the round, which
    /// the run records as it is.
    Unsupported,
}

/// Stores a run whose round in flight has held calls as the session's pending approval
/// (compare-and-set: only where no other is pending, or over the `claimed` value it replaces).
/// The record of who decided a claimed value's calls is kept first ([`super::resume::hold`]).
pub(super) async fn hold(
    store: &dyn SessionStore,
    session_id: &str,
    run: &mut AgentRun,
    key: Option<&ApprovalKey>,
    principal: &str,
    claimed: Option<super::Claimed>,
) -> Result<Held, Failed> {
    let expected = claimed.as_ref().map(|c| c.raw.as_str());
    let nonce = nonce();
    let ids: Vec<String> = run.decidable().into_iter().map(|(path, _)| path).collect();
    let unique = ids.len() == ids.iter().collect::<std::collections::HashSet<_>>().len();
    let written = if unique {
        let body = encode(&StoredRef {
            v: RUN_VERSION,
            status: Status::Pending,
            nonce: &nonce,
            lease_until_ms: None,
            run,
        })?;
        let json = sealed(key_or_process(key), session_id, &body);
        store
            .append_with_state(
                session_id,
                &[],
                StateChange::new(APPROVAL_STATE_KEY, expected, Some(&json)),
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
            let view = view(run, &nonce, session_id, key_or_process(key), principal);
            tracing::info!(
                session = session_id,
                held = view.calls.len(),
                "tool calls held for approval; the run stops until they are decided"
            );
            Ok(Held::Pending(view))
        }
        Ok(None) => Err(conflict(session_id)),
        Err(StoreError::Unsupported { what }) => {
            tracing::error!(
                session = session_id,
                reason = what,
                "tool calls need approval but a pending approval cannot be kept; they were answered as not run"
            );
            let text = "Not run: this call needs the user's approval, which cannot be asked for here. Tell the user.";
            for c in run.round.iter_mut().flat_map(Round::calls_mut) {
                if !matches!(c.state, CallState::Done { .. }) {
                    c.state = CallState::Done {
                        content: model_error(text),
                        is_error: true,
                        parts: Vec::new(),
                    };
                }
            }
            Ok(Held::Unsupported)
        }
        Err(e) => Err(e.into()),
    }
}

/// At the start of a new user message: a round still held (or cut off while running) is
/// closed first — every call without a result gets one saying it did not run (or that whether
/// it ran is unknown) — so the history stays whole rounds. An unreadable state is dropped
/// (nothing of it runs); one written by a newer version is kept, and is the error. Returns
/// the closing round appended, if any.
pub(crate) async fn close_open(
    store: &dyn SessionStore,
    session_id: &str,
    protocol: &dyn CallProtocol,
    key: Option<&ApprovalKey>,
) -> Result<Vec<Message>, Failed> {
    retrying(session_id, move || async move {
        let raw = match store.get_state(session_id, APPROVAL_STATE_KEY).await {
            Ok(Some(raw)) => raw,
            Ok(None) | Err(StoreError::Unsupported { .. }) => return Ok(Some(Vec::new())),
            Err(e) => return Err(e.into()),
        };
        let round = match Stored::open(session_id, &raw, key) {
            Ok(stored) => closing_round(session_id, stored, protocol),
            Err(e @ ApprovalError::NewerVersion { .. }) => return Err(e.into()),
            Err(e) => {
                tracing::error!(session = session_id, error = %e, slot = SET_ASIDE_KEY,
                    "setting an unreadable pending approval aside; none of its calls run");
                set_aside(store, session_id, &raw).await?;
                Vec::new()
            }
        };
        let change = StateChange::new(APPROVAL_STATE_KEY, Some(&raw), None);
        Ok(swap(store, session_id, &round, change)
            .await?
            .then_some(round))
    })
    .await
}

/// The state slot where a held run that could not be read (or whose seal is broken) is kept
/// when a new message closes it: nothing stored is lost, and none of it runs.
pub(super) const SET_ASIDE_KEY: &str = "tool-system.approval.set-aside";

async fn set_aside(store: &dyn SessionStore, session_id: &str, raw: &str) -> Result<(), Failed> {
    retrying(session_id, move || async move {
        let before = store.get_state(session_id, SET_ASIDE_KEY).await?;
        let change = StateChange::new(SET_ASIDE_KEY, before.as_deref(), Some(raw));
        Ok(swap(store, session_id, &[], change).await?.then_some(()))
    })
    .await
}

/// The round that closes a held round a new message overtook: every call without a result
/// gets one saying it did not run, or that whether it ran is unknown.
fn closing_round(session_id: &str, stored: Stored, protocol: &dyn CallProtocol) -> Vec<Message> {
    let running = stored.status == Status::Running;
    let machine: &LoopMachine = &stored.run.machine;
    let closed: Vec<CallState> = stored
        .run
        .round
        .iter()
        .flat_map(Round::calls)
        .map(|c| {
            let plan = match &c.state {
                CallState::Done { .. } => return c.state.clone(),
                CallState::Rejected { reason } => machine.plan_decided(false, reason.as_deref()),
                CallState::Approved
                | CallState::Waiting
                | CallState::New
                | CallState::Nested { .. } => machine.plan_abandoned(running),
                CallState::Held { maybe_ran } => machine.plan_abandoned(*maybe_ran),
            };
            let text = match plan {
                CallPlan::Decline(t) => t,
                _ => String::new(),
            };
            CallState::Done {
                content: model_error(&text),
                is_error: true,
                parts: Vec::new(),
            }
        })
        .collect();
    tracing::warn!(
        session = session_id,
        running,
        "a new message arrived while tool calls waited for approval; they are closed as not run"
    );
    let same = stored.run.protocol.name() == protocol.name();
    let mut run = stored.run;
    for (c, state) in run.round.iter_mut().flat_map(Round::calls_mut).zip(closed) {
        c.state = state;
    }
    let Some((reading, results)) = run.take_round() else {
        return Vec::new();
    };
    let results: Vec<(PendingCall, CallResult)> = results;
    if same {
        protocol.round_messages(&reading, results)
    } else {
        tool_message_round(&reading, results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::{Reading, Step};
    use serde_json::{Value, json};

    fn held_run() -> AgentRun {
        let mut run = AgentRun::new(
            crate::run::ProtocolId::Native,
            "delete /tmp/a".into(),
            LoopMachine::new(5),
        );
        run.after_response(crate::machine::ResponseFacts {
            has_calls: true,
            ..Default::default()
        });
        let reading = Reading {
            content: String::new(),
            steps: vec![Step::Calls(vec![PendingCall::new(
                "c1",
                "delete_file",
                json!({"path": "/tmp/a"}),
            )])],
            answer: String::new(),
            correction: None,
            native: true,
            parts: Vec::new(),
        };
        run.start_round(reading, String::new());
        for c in run.round.iter_mut().flat_map(Round::calls_mut) {
            c.state = CallState::Held { maybe_ran: false };
        }
        run
    }

    fn good() -> Value {
        let stored = Stored {
            v: RUN_VERSION,
            status: Status::Pending,
            nonce: "ab".into(),
            lease_until_ms: None,
            run: held_run(),
        };
        serde_json::from_str(&stored.to_json().unwrap()).unwrap()
    }

    /// Anything that is not exactly a held run — truncated, not JSON, changed so that it no
    /// longer holds together — is unreadable, and nothing of it runs; never a panic.
    #[test]
    fn approval_unreadable_or_tampered_states_fail_closed() {
        assert!(Stored::parse("s", &good().to_string()).is_ok());
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = good();
            f(&mut v);
            v.to_string()
        };
        let calls = "/run/round/steps/0/calls";
        let whole = good().to_string();
        let bad = [
            String::new(),
            "{".into(),
            "null".into(),
            "[]".into(),
            whole[..whole.len() / 2].to_owned(),
            whole[..whole.len() - 1].to_owned(),
            with(&|v| {
                let c = v.pointer(&format!("{calls}/0")).unwrap().clone();
                v.pointer_mut(calls)
                    .unwrap()
                    .as_array_mut()
                    .unwrap()
                    .push(c);
            }),
            with(&|v| v["status"] = json!("running")),
            with(&|v| v["run"]["round"]["steps"] = json!([])),
            with(&|v| v["run"]["round"] = Value::Null),
            with(&|v| v["surprise"] = json!(1)),
            with(&|v| v["run"]["surprise"] = json!(1)),
            with(&|v| v["run"]["machine"]["surprise"] = json!(1)),
            with(&|v| v["run"]["v"] = json!(1)),
            with(&|v| v["v"] = json!(0)),
            with(&|v| v["v"] = json!(-1)),
            with(&|v| v["v"] = json!("2")),
            with(&|v| v["run"]["machine"]["tool_rounds"] = json!(9)),
            with(&|v| v["run"]["machine"]["model_calls"] = json!(-1)),
            with(&|v| v["run"]["done"] = json!({"answer": "", "hit_limit": false})),
            with(&|v| *v.pointer_mut(&format!("{calls}/0/state")).unwrap() = json!({"is": "new"})),
            with(&|v| *v.pointer_mut(&format!("{calls}/0/state")).unwrap() = json!({"is": "ran"})),
            with(&|v| v["run"]["machine"]["idempotent_results"] = json!({"a": "b"})),
        ];
        for raw in bad {
            assert!(
                matches!(
                    Stored::parse("s", &raw),
                    Err(ApprovalError::Unreadable { .. })
                ),
                "{raw}"
            );
        }
    }

    /// A run written by a newer version is its own error, whatever the rest holds.
    #[test]
    fn approval_a_newer_version_is_its_own_error() {
        for raw in [
            r#"{"v":3}"#.to_owned(),
            r#"{"v":99,"run":"who knows"}"#.to_owned(),
            {
                let mut v = good();
                v["v"] = json!(3);
                v.to_string()
            },
        ] {
            assert!(
                matches!(
                    Stored::parse("s", &raw),
                    Err(ApprovalError::NewerVersion { found, supported: RUN_VERSION, .. }) if found > 2
                ),
                "{raw}"
            );
        }
    }

    /// The first format (a hand-built snapshot) reads as this version's run: the response,
    /// the calls and their states, the counts, the protocol as its typed id.
    #[test]
    fn approval_the_first_format_is_migrated() {
        let v1 = r#"{"v":1,"status":"running","nonce":"cd","protocol":"json","user_text":"u","model_calls":3,"tool_rounds":2,"content":"{\"tool\":\"delete_file\"}","answer":"raw","text":"","native":false,"parts":[],"steps":[{"kind":"calls","calls":[{"id":"c1","name":"delete_file","arguments":{"path":"/tmp/a"},"state":{"is":"approved"},"decided":{"by":"ann","at_ms":7}}]}],"lease_until_ms":12}"#;
        let s = Stored::parse("s", v1).unwrap();
        assert_eq!(
            (s.v, s.status, s.nonce.as_str()),
            (RUN_VERSION, Status::Running, "cd")
        );
        assert_eq!(s.lease_until_ms, Some(12));
        assert_eq!(s.run.protocol, crate::run::ProtocolId::Json);
        assert_eq!(s.run.user_text, "u");
        assert_eq!(
            (s.run.machine.model_calls(), s.run.machine.tool_rounds()),
            (3, 2)
        );
        let round = s.run.round.as_ref().unwrap();
        assert_eq!(
            (round.content.as_str(), round.answer.as_str()),
            ("{\"tool\":\"delete_file\"}", "raw")
        );
        let c = round.calls().next().unwrap();
        assert_eq!(c.state, CallState::Approved);
        assert_eq!(c.decided.as_ref().unwrap().by, "ann");
        // written back, it is this version's format, and reads the same
        let again = Stored::parse("s", &s.to_json().unwrap()).unwrap();
        assert_eq!(again.run, s.run);
        // the first format is strict too
        let extra = v1.replacen("\"v\":1,", "\"v\":1,\"surprise\":0,", 1);
        assert!(matches!(
            Stored::parse("s", &extra),
            Err(ApprovalError::Unreadable { .. })
        ));
    }

    /// A sealed value is read only under its key and session; changed, cut short, or sealed
    /// under another key it is its own error. One the key cannot vouch for (unsealed, or
    /// sealed by another process when no key is set) is read as pending: nothing decided.
    #[test]
    fn approval_a_stored_run_is_read_only_under_its_seal() {
        let key = ApprovalKey::new([3u8; 32]).unwrap();
        let other = ApprovalKey::new([4u8; 32]).unwrap();
        let mut decided = good();
        decided["status"] = json!("running");
        decided["lease_until_ms"] = json!(u64::MAX);
        decided["run"]["round"]["steps"][0]["calls"][0]["state"] = json!({"is": "approved"});
        let body = decided.to_string();
        let raw = sealed(&key, "s", &body);
        let read = Stored::open("s", &raw, Some(&key)).unwrap();
        assert_eq!(
            read.status,
            Status::Running,
            "a sealed value is taken as it is"
        );
        let broken = |raw: &str, key: Option<&ApprovalKey>, session: &str| {
            matches!(
                Stored::open(session, raw, key),
                Err(ApprovalError::SealBroken { .. })
            )
        };
        assert!(broken(&raw, Some(&other), "s"), "another key");
        assert!(broken(&raw, Some(&key), "t"), "another session");
        assert!(broken(&raw[..raw.len() - 1], Some(&key), "s"), "cut short");
        assert!(
            broken(&raw[..raw.len() / 2], Some(&key), "s"),
            "cut in half"
        );
        let flipped = raw.replace("running", "pending");
        assert!(broken(&flipped, Some(&key), "s"), "changed");
        // unsealed, or sealed by another process's own key: pending, the call held again
        for (raw, key) in [
            (body.clone(), Some(&key)),
            (sealed(&other, "s", &body), None),
        ] {
            let read = Stored::open("s", &raw, key).unwrap();
            assert_eq!(read.status, Status::Pending);
            assert_eq!(read.lease_until_ms, None);
            let (path, c) = &read.calls()[0];
            assert_eq!(path, "c1");
            assert_eq!(c.state, CallState::Held { maybe_ran: true });
        }
    }
}
