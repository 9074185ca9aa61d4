//! A person in the loop: tool calls held for approval (issue 27, item 1).
//!
//! When the model's round has calls that need approval ([`llm_core::Tool::needs_approval`],
//! [`llm_core::ToolProvider::needs_approval`], or the agent's [`ApprovalPolicy`]), the calls that
//! need none run at once and the run stops with a [`PendingApproval`]. The round — the
//! assistant message, the results obtained, the held calls — is kept in the session store's
//! state slot (compare-and-set), never as half a round in the history, so a restart loses
//! nothing. Each held call is decided on its own with an [`ApprovalDecision`]; once all are
//! decided, the approved ones run, the rejected ones get a "the user declined" result, the
//! whole round is appended and the loop continues.
//!
//! A decision carries a token: HMAC-SHA256, under the agent's [`ApprovalKey`], over the
//! session id, the call id, the tool name, the canonical JSON of the exact arguments and a
//! fresh random nonce of this pending state. A token that does not verify, is for another
//! session, call or arguments, or for an older pending state is refused with an
//! [`ApprovalError`] and changes nothing.

use std::sync::{Arc, OnceLock};

use context_engine::{SessionStore, StateChange, StoreError};
use hmac::{Hmac, KeyInit, Mac};
use llm_core::{DEFAULT_MAX_RESULT_BYTES, Message, ToolError, cap_result};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use crate::machine::{CallFacts, CallPlan, LoopMachine};
use crate::protocol::{CallProtocol, PendingCall, Reading, Step, tool_message_round};
use crate::runner::{LoopError, LoopEvent, Ran, Sink, emit, run_calls};
use crate::{Dispatcher, LoopOptions};

/// The environment variable [`ApprovalKey::from_env`] reads: at least 32 bytes of secret
/// (e.g. the 64 hex digits of `openssl rand -hex 32`).
pub const APPROVAL_KEY_ENV: &str = "TOOL_APPROVAL_KEY";

/// The session state slot ([`context_engine::SessionStore::get_state`]) that keeps a
/// session's pending approval.
pub const APPROVAL_STATE_KEY: &str = "tool-system.approval";

/// Longest reason of a rejection passed on to the model, in characters.
const MAX_REASON_CHARS: usize = 500;

/// CAS attempts before a decision gives up on a slot that keeps changing under it.
const CAS_ATTEMPTS: usize = 4;

/// The secret that signs decision tokens. Give every process that serves a session the same
/// key (from a secret store or [`APPROVAL_KEY_ENV`]): a token signed before a restart, or by
/// another worker, verifies only under the same key.
///
/// ```
/// use tool_system::ApprovalKey;
/// assert!(ApprovalKey::new("too short").is_err());
/// let key = ApprovalKey::new([7u8; 32])?;
/// assert_eq!(format!("{key:?}"), "ApprovalKey(..)"); // never printed
/// # Ok::<(), tool_system::ApprovalError>(())
/// ```
#[derive(Clone)]
pub struct ApprovalKey(Arc<[u8]>);

impl std::fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalKey(..)")
    }
}

impl ApprovalKey {
    /// The fewest bytes a key may have: 32 (SHA-256's output size).
    pub const MIN_LEN: usize = 32;

    /// A key from secret bytes (at least [`MIN_LEN`](Self::MIN_LEN)).
    pub fn new(secret: impl AsRef<[u8]>) -> Result<Self, ApprovalError> {
        let secret = secret.as_ref();
        if secret.len() < Self::MIN_LEN {
            return Err(ApprovalError::KeyTooShort { len: secret.len() });
        }
        Ok(Self(Arc::from(secret)))
    }

    /// The key in the environment variable [`APPROVAL_KEY_ENV`] (its bytes, as written).
    pub fn from_env() -> Result<Self, ApprovalError> {
        match std::env::var(APPROVAL_KEY_ENV) {
            Ok(v) if !v.trim().is_empty() => Self::new(v.trim()),
            _ => Err(ApprovalError::KeyMissing),
        }
    }

    /// A random key for this process only. Tokens signed with it stop verifying when the
    /// process ends (the pending approval itself is kept: fetch it again for fresh tokens).
    pub fn random() -> Self {
        let mut k = [0u8; 32];
        rand::rng().fill_bytes(&mut k);
        Self(Arc::from(&k[..]))
    }

    fn mac(&self, session: &str, call: &StoredCall, nonce: &str) -> Option<Hmac<Sha256>> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).ok()?;
        let args = canonical_json(&call.arguments);
        let fields: [&[u8]; 6] = [
            b"tool-system approval v1",
            session.as_bytes(),
            call.id.as_bytes(),
            call.name.as_bytes(),
            args.as_bytes(),
            nonce.as_bytes(),
        ];
        for f in fields {
            // Length-prefixed, so no two different field lists give the same bytes.
            mac.update(&(f.len() as u64).to_be_bytes());
            mac.update(f);
        }
        Some(mac)
    }

    fn token(&self, session: &str, call: &StoredCall, nonce: &str) -> String {
        match self.mac(session, call, nonce) {
            Some(m) => format!("{nonce}.{}", hex(&m.finalize().into_bytes())),
            None => String::new(), // HMAC takes keys of any length; never reached
        }
    }

    fn verify(&self, session: &str, call: &StoredCall, nonce: &str, mac_hex: &str) -> bool {
        match (self.mac(session, call, nonce), unhex(mac_hex)) {
            // Constant-time comparison.
            (Some(m), Some(tag)) => m.verify_slice(&tag).is_ok(),
            _ => false,
        }
    }
}

/// The key used when an agent was given none: random, for this process. A sound default
/// rather than an error because gates can come from providers at run time (an MCP tool
/// configured for approval) in an agent whose author set no key: holding the call and keeping
/// the pending state durable is safe; only tokens handed out before a restart stop verifying,
/// and [`pending_approval`](crate::pending_approval) hands out fresh ones. A warning says so once.
fn process_key() -> &'static ApprovalKey {
    static KEY: OnceLock<ApprovalKey> = OnceLock::new();
    KEY.get_or_init(|| {
        tracing::warn!(
            "a tool call is held for approval but no approval key was set: using a random key for \
             this process, so decision tokens will not verify after a restart or in another \
             worker; set one with AgentBuilder::approval_key (e.g. ApprovalKey::from_env, {APPROVAL_KEY_ENV})"
        );
        ApprovalKey::random()
    })
}

pub(crate) fn key_of(options: &LoopOptions) -> &ApprovalKey {
    options
        .approval_key
        .as_ref()
        .unwrap_or_else(|| process_key())
}

/// Whether a call to a tool needs approval, by predicate on its arguments.
pub type ApprovalPredicate = Arc<dyn Fn(&serde_json::Value) -> bool + Send + Sync>;

/// The agent's own approval rules: gate any tool by name — including tools of providers you
/// did not write — always or by a predicate on the arguments. A call needs approval when the
/// policy, the tool or its provider says so.
///
/// ```
/// use tool_system::ApprovalPolicy;
/// use serde_json::json;
/// let policy = ApprovalPolicy::new()
///     .always("delete_file")
///     .when("transfer", |args| args["amount"].as_f64().unwrap_or(f64::INFINITY) > 100.0);
/// assert!(policy.requires("delete_file", &json!({"path": "a"})));
/// assert!(policy.requires("transfer", &json!({"amount": 500})));
/// assert!(!policy.requires("transfer", &json!({"amount": 5})));
/// assert!(!policy.requires("get_weather", &json!({})));
/// ```
#[derive(Clone, Default)]
pub struct ApprovalPolicy {
    rules: Vec<(String, ApprovalPredicate)>,
}

impl std::fmt::Debug for ApprovalPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|(n, _)| n))
            .finish()
    }
}

impl ApprovalPolicy {
    /// No rules: only tools and providers decide.
    pub fn new() -> Self {
        Self::default()
    }
    /// Every call to `tool` needs approval.
    pub fn always(self, tool: impl Into<String>) -> Self {
        self.when(tool, |_| true)
    }
    /// Calls to `tool` need approval when `predicate` holds for their arguments.
    pub fn when(
        mut self,
        tool: impl Into<String>,
        predicate: impl Fn(&serde_json::Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.rules.push((tool.into(), Arc::new(predicate)));
        self
    }
    /// Whether a call to `tool` with `args` needs approval by these rules.
    pub fn requires(&self, tool: &str, args: &serde_json::Value) -> bool {
        self.rules.iter().any(|(n, p)| n == tool && p(args))
    }
    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// A run stopped before calls that need a person's approval: show [`calls`](Self::calls)
/// (tool, arguments — as text, never as HTML) and send back one [`ApprovalDecision`] per
/// call. Serializable, so a UI can carry it as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingApproval {
    /// The session.
    pub session_id: String,
    /// What the model said alongside the calls.
    pub text: String,
    /// The calls still waiting for a decision, in the model's order.
    pub calls: Vec<HeldCall>,
}

/// One call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HeldCall {
    /// The model's call id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The exact arguments the call will run with.
    pub arguments: Value,
    /// Binds a decision to this session, call, arguments and pending state.
    pub token: String,
    /// The call was approved before, but the run that went on with it stopped while it ran
    /// (a crash, a dropped request): it may have taken effect already. Say so to the person.
    pub maybe_ran: bool,
}

impl HeldCall {
    /// A decision approving this call.
    pub fn approve(&self) -> ApprovalDecision {
        ApprovalDecision::approve(self.id.clone(), self.token.clone())
    }
    /// A decision rejecting this call; `reason` (may be empty) is passed on to the model.
    pub fn reject(&self, reason: impl Into<String>) -> ApprovalDecision {
        ApprovalDecision::reject(self.id.clone(), self.token.clone(), reason)
    }
}

/// A person's decision on one held call, as a UI sends it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalDecision {
    /// The call id.
    pub call_id: String,
    /// The call's [`HeldCall::token`].
    pub token: String,
    /// Run it (`true`) or decline it.
    pub approved: bool,
    /// Why it was declined (passed on to the model; at most 500 characters are kept).
    #[serde(default)]
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// Approve call `call_id`.
    pub fn approve(call_id: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            token: token.into(),
            approved: true,
            reason: None,
        }
    }
    /// Decline call `call_id`, saying why (an empty reason is none).
    pub fn reject(
        call_id: impl Into<String>,
        token: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        let reason: String = reason.into();
        Self {
            call_id: call_id.into(),
            token: token.into(),
            approved: false,
            reason: (!reason.trim().is_empty()).then_some(reason),
        }
    }
}

/// Why decisions were refused, or a pending approval could not be read. A refused batch of
/// decisions changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// Nothing waits for a decision in this session.
    #[error(
        "session `{session}` has no tool call waiting for approval (it was decided already, or a new message closed it); load the session to see what happened"
    )]
    NothingPending {
        /// The session.
        session: String,
    },
    /// No decision was given.
    #[error("no decisions were given; send one decision per waiting call")]
    NoDecisions,
    /// The call is not one that waits for a decision.
    #[error(
        "call `{call_id}` is not waiting for approval in this session; fetch the pending approval again and decide the calls it lists"
    )]
    UnknownCall {
        /// The call id given.
        call_id: String,
    },
    /// The same call twice in one batch.
    #[error("call `{call_id}` appears twice in one batch of decisions; send one decision per call")]
    DuplicateDecision {
        /// The call id.
        call_id: String,
    },
    /// The call was decided already.
    #[error("call `{call_id}` was decided already; a decision cannot be changed")]
    AlreadyDecided {
        /// The call id.
        call_id: String,
    },
    /// The token was made for an earlier pending approval (a replayed decision).
    #[error(
        "the decision for call `{call_id}` was made for an earlier pending approval (a replay); fetch the pending approval again and decide it anew"
    )]
    Stale {
        /// The call id.
        call_id: String,
    },
    /// The token does not verify.
    #[error(
        "the token of the decision for call `{call_id}` does not verify (forged, or made for another session, call or arguments); nothing was decided"
    )]
    BadToken {
        /// The call id.
        call_id: String,
    },
    /// The approved calls are running in another request.
    #[error(
        "the decided calls of session `{session}` are running in another request; wait for its result"
    )]
    Running {
        /// The session.
        session: String,
    },
    /// The pending approval kept in the store changed under this request again and again.
    #[error(
        "the pending approval of session `{session}` was changed by another request meanwhile; fetch it again and retry"
    )]
    Conflict {
        /// The session.
        session: String,
    },
    /// The stored pending approval cannot be read; nothing of it runs.
    #[error(
        "the pending approval stored for session `{session}` cannot be read ({detail}); none of its calls will run — a new message in the session closes it"
    )]
    Unreadable {
        /// The session.
        session: String,
        /// What is wrong.
        detail: String,
    },
    /// An approval key shorter than [`ApprovalKey::MIN_LEN`].
    #[error(
        "an approval key must have at least 32 bytes, this one has {len}; generate one with `openssl rand -hex 32`"
    )]
    KeyTooShort {
        /// Its length.
        len: usize,
    },
    /// [`APPROVAL_KEY_ENV`] is not set.
    #[error(
        "the environment variable TOOL_APPROVAL_KEY is not set; set it to a secret of at least 32 bytes (e.g. `openssl rand -hex 32`), the same in every process serving these sessions"
    )]
    KeyMissing,
}

// ---------------------------------------------------------------------------------------
// The stored state. Versioned; anything that does not parse as exactly this is unreadable and
// fails closed (nothing runs).

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    v: u32,
    status: Status,
    nonce: String,
    protocol: String,
    user_text: String,
    model_calls: usize,
    tool_rounds: usize,
    content: String,
    answer: String,
    /// What the person saw of the response (see [`shown_text`]).
    text: String,
    native: bool,
    steps: Vec<StoredStep>,
    /// While `running`: until when (Unix ms) the claiming request may take; past it the round
    /// is asked again.
    #[serde(default)]
    lease_until_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    /// Waiting for decisions.
    Pending,
    /// All decided; a request is running the approved calls.
    Running,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum StoredStep {
    Text { text: String },
    Calls { calls: Vec<StoredCall> },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredCall {
    id: String,
    name: String,
    arguments: Value,
    state: CallState,
}

/// Where one call of a held round stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum CallState {
    /// It has its result (it ran, or was answered without running).
    Done { content: String, is_error: bool },
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

const VERSION: u32 = 1;

impl Stored {
    fn parse(session: &str, raw: &str) -> Result<Self, ApprovalError> {
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

    fn lease_expired(&self) -> bool {
        self.lease_until_ms.is_none_or(|until| now_ms() >= until)
    }

    fn calls(&self) -> impl Iterator<Item = &StoredCall> {
        self.steps.iter().flat_map(|s| match s {
            StoredStep::Calls { calls } => calls.as_slice(),
            StoredStep::Text { .. } => &[],
        })
    }

    fn calls_mut(&mut self) -> impl Iterator<Item = &mut StoredCall> {
        self.steps.iter_mut().flat_map(|s| match s {
            StoredStep::Calls { calls } => calls.as_mut_slice(),
            StoredStep::Text { .. } => &mut [],
        })
    }

    fn to_json(&self) -> Result<String, LoopError> {
        serde_json::to_string(self).map_err(|e| {
            LoopError::Store(StoreError::Encode {
                detail: e.to_string(),
            })
        })
    }

    fn reading(&self) -> Reading {
        Reading {
            content: self.content.clone(),
            answer: self.answer.clone(),
            correction: None,
            native: self.native,
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

    fn view(&self, session: &str, key: &ApprovalKey) -> PendingApproval {
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
                        token: key.token(session, c, &self.nonce),
                        maybe_ran,
                    }),
                    _ => None,
                })
                .collect(),
        }
    }
}

impl StoredCall {
    fn pending(&self) -> PendingCall {
        PendingCall::new(self.id.clone(), self.name.clone(), self.arguments.clone())
    }
}

fn nonce() -> String {
    let mut n = [0u8; 16];
    rand::rng().fill_bytes(&mut n);
    hex(&n)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// JSON with every object's keys sorted (serde_json keeps insertion order here), so equal
/// arguments sign equally however they were written.
fn canonical_json(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(x) = m.get(k) {
                        write(x, out);
                    }
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

// ---------------------------------------------------------------------------------------
// The loop's side.

/// How one call of a round stands after the round's first pass.
pub(crate) type RoundSlots = Vec<(PendingCall, CallState)>;

/// The round's results in call order when every call has one; else the slots back.
pub(crate) fn all_done(slots: RoundSlots) -> Result<Vec<(PendingCall, String)>, RoundSlots> {
    if !slots
        .iter()
        .all(|(_, s)| matches!(s, CallState::Done { .. }))
    {
        return Err(slots);
    }
    Ok(slots
        .into_iter()
        .filter_map(|(c, s)| match s {
            CallState::Done { content, .. } => Some((c, content)),
            _ => None,
        })
        .collect())
}

/// What [`hold`] did.
pub(crate) enum Held {
    /// The round is stored in the state slot; the run stops here.
    Pending(PendingApproval),
    /// The store keeps no state: the held calls were answered "not run" in this round.
    Unsupported(Vec<Message>),
}

/// Stores a round with held calls as the session's pending approval.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn hold(
    store: &dyn SessionStore,
    session_id: &str,
    protocol: &dyn CallProtocol,
    reading: &Reading,
    slots: RoundSlots,
    user_text: &str,
    machine: &LoopMachine,
    options: &LoopOptions,
) -> Result<Held, LoopError> {
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
            let view = stored.view(session_id, key_of(options));
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
                    let content = match &c.state {
                        CallState::Done { content, .. } => content.clone(),
                        _ => model_error(text),
                    };
                    (c.pending(), content)
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
pub(crate) fn shown_text(protocol: &dyn CallProtocol, reading: &Reading) -> String {
    if protocol.name() == "json" && !reading.native {
        String::new()
    } else {
        reading.answer.clone()
    }
}

fn model_error(text: &str) -> String {
    let (content, _) = cap_result(
        ToolError::failed(text).to_model_json().to_string(),
        DEFAULT_MAX_RESULT_BYTES,
    );
    content
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
) -> Result<Vec<Message>, LoopError> {
    for _ in 0..CAS_ATTEMPTS {
        let raw = match store.get_state(session_id, APPROVAL_STATE_KEY).await {
            Ok(Some(raw)) => raw,
            Ok(None) | Err(StoreError::Unsupported { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let round = match Stored::parse(session_id, &raw) {
            Ok(stored) => {
                let running = stored.status == Status::Running;
                let results: Vec<(PendingCall, String)> = stored
                    .calls()
                    .map(|c| {
                        let plan = match &c.state {
                            CallState::Done { content, .. } => {
                                return (c.pending(), content.clone());
                            }
                            CallState::Rejected { reason } => {
                                machine.plan_decided(false, reason.as_deref())
                            }
                            CallState::Approved | CallState::Waiting => {
                                machine.plan_abandoned(running)
                            }
                            CallState::Held { maybe_ran } => machine.plan_abandoned(*maybe_ran),
                        };
                        let text = match plan {
                            CallPlan::Decline(t) => t,
                            _ => String::new(),
                        };
                        (c.pending(), model_error(&text))
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

/// The pending approval of a session, with fresh tokens; `None` when nothing waits.
pub(crate) async fn current(
    store: &dyn SessionStore,
    session_id: &str,
    options: &LoopOptions,
) -> Result<Option<PendingApproval>, LoopError> {
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
        return Ok(asked.map(|s| s.view(session_id, key_of(options))));
    }
    Ok(Some(stored.view(session_id, key_of(options))))
}

/// A round whose claimer stopped while running it (its lease ran out) goes back to the person:
/// every call without a result that was not declined is held again, marked as possibly run,
/// under a fresh nonce (older tokens are stale). `None` when the slot changed meanwhile.
async fn reask(
    store: &dyn SessionStore,
    session_id: &str,
    raw: &str,
    mut stored: Stored,
) -> Result<Option<Stored>, LoopError> {
    for c in stored.calls_mut() {
        if matches!(c.state, CallState::Approved | CallState::Waiting) {
            c.state = CallState::Held { maybe_ran: true };
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

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis)
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What applying decisions led to.
pub(crate) enum Claim {
    /// Some calls still wait; this is what they are.
    StillPending(PendingApproval, Progress),
    /// All decided; this request claimed the round and runs it.
    Run(Claimed),
}

/// Counters for a [`crate::LoopOutput`] of a run that is still pending.
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
}

/// Checks a batch of decisions against the stored pending approval and applies them
/// (compare-and-set): all or nothing.
pub(crate) async fn decide(
    store: &dyn SessionStore,
    session_id: &str,
    decisions: &[ApprovalDecision],
    options: &LoopOptions,
) -> Result<Claim, LoopError> {
    if decisions.is_empty() {
        return Err(ApprovalError::NoDecisions.into());
    }
    let key = key_of(options);
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
        apply(&mut stored, session_id, decisions, key)?;
        let still = stored
            .calls()
            .any(|c| matches!(c.state, CallState::Held { .. }));
        if !still {
            stored.status = Status::Running;
            stored.lease_until_ms = Some(now_ms().saturating_add(millis(options.approval_lease)));
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
        return Ok(if still {
            Claim::StillPending(
                stored.view(session_id, key),
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
        if !key.verify(session_id, call, &nonce, mac) {
            return Err(ApprovalError::BadToken { call_id: call_id() });
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
    for d in decisions {
        if let Some(c) = stored.calls_mut().find(|c| c.id == d.call_id) {
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

/// Runs a claimed round: approved and waiting calls run, declined ones get their result, the
/// whole round is appended and the slot cleared in one compare-and-set. Returns the round.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn finish(
    claimed: Claimed,
    store: &dyn SessionStore,
    protocol: &dyn CallProtocol,
    dispatcher: &Dispatcher,
    session_id: &str,
    run: &tracing::Span,
    sink: Sink<'_>,
    machine: &mut LoopMachine,
) -> Result<Vec<Message>, LoopError> {
    let Claimed { raw, stored } = claimed;
    if stored.protocol != protocol.name() {
        tracing::warn!(session = session_id, stored = %stored.protocol, now = protocol.name(),
            "the held round was read with another call protocol; its round is recorded with the current one");
    }
    let mut results = Vec::new();
    for step in &stored.steps {
        let StoredStep::Calls { calls } = step else {
            continue;
        };
        let mut plans = Vec::with_capacity(calls.len());
        for c in calls {
            let plan = match &c.state {
                CallState::Done { .. } => None,
                CallState::Approved => Some(machine.plan_decided(true, None)),
                CallState::Rejected { reason } => {
                    Some(machine.plan_decided(false, reason.as_deref()))
                }
                CallState::Waiting => Some(machine.plan_call(facts(c, dispatcher, false))),
                // Parse refuses a running state with undecided calls; never run one anyway.
                CallState::Held { .. } => Some(machine.plan_abandoned(false)),
            };
            if matches!(plan, Some(CallPlan::Run)) {
                emit(sink, || LoopEvent::ToolCallStarted {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .await?;
            }
            plans.push(plan);
        }
        let pending: Vec<PendingCall> = calls.iter().map(StoredCall::pending).collect();
        let outcomes = run_calls(
            dispatcher,
            session_id,
            run,
            protocol.concurrent(),
            pending.iter().zip(plans.iter().map(Option::as_ref)),
        )
        .await;
        for (((c, p), plan), outcome) in calls.iter().zip(pending).zip(&plans).zip(outcomes) {
            let content = match (&c.state, plan, outcome) {
                (CallState::Done { content, .. }, _, _) => content.clone(),
                (
                    _,
                    Some(plan),
                    Some(Ran {
                        content,
                        is_error,
                        answer,
                    }),
                ) => {
                    let f = facts(c, dispatcher, false);
                    machine.call_done(f, plan, &content, !is_error, answer.as_deref());
                    emit(sink, || LoopEvent::ToolResult {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        content: content.clone(),
                        is_error,
                    })
                    .await?;
                    content
                }
                // A plan that does not run (never reached): fail closed with an error result.
                _ => model_error("Not run."),
            };
            results.push((p, content));
        }
    }
    let round = protocol.round_messages(&stored.reading(), results);
    let change = StateChange::new(APPROVAL_STATE_KEY, Some(&raw), None);
    match store.append_with_state(session_id, &round, change).await? {
        Some(_) => Ok(round),
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

fn facts<'a>(c: &'a StoredCall, dispatcher: &Dispatcher, needs_approval: bool) -> CallFacts<'a> {
    CallFacts {
        name: &c.name,
        arguments: &c.arguments,
        invalid: None,
        idempotent: dispatcher.is_idempotent(&c.name),
        needs_approval,
        after_held: false,
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
        }
    }

    #[test]
    fn approval_token_binds_session_call_name_arguments_and_nonce() {
        let key = ApprovalKey::new([1u8; 32]).unwrap();
        let c = call("c1", json!({"path": "/tmp/a", "force": true}));
        let t = key.token("s1", &c, "00ff");
        let (n, mac) = t.split_once('.').unwrap();
        assert_eq!(n, "00ff");
        assert!(key.verify("s1", &c, "00ff", mac));
        assert!(!key.verify("s2", &c, "00ff", mac), "other session");
        assert!(
            !key.verify("s1", &call("c2", c.arguments.clone()), "00ff", mac),
            "other call"
        );
        assert!(!key.verify(
            "s1",
            &call("c1", json!({"path": "/etc", "force": true})),
            "00ff",
            mac
        ));
        assert!(!key.verify("s1", &c, "00fe", mac), "other pending state");
        let mut renamed = call("c1", c.arguments.clone());
        renamed.name = "read_file".into();
        assert!(!key.verify("s1", &renamed, "00ff", mac), "other tool");
        let other_key = ApprovalKey::new([2u8; 32]).unwrap();
        assert!(!other_key.verify("s1", &c, "00ff", mac), "other key");
        assert!(!key.verify("s1", &c, "00ff", "zz"), "not hex");
        assert!(!key.verify("s1", &c, "00ff", ""), "empty");
        // the same arguments written in another key order sign the same
        let reordered = call("c1", json!({"force": true, "path": "/tmp/a"}));
        assert!(key.verify("s1", &reordered, "00ff", mac));
    }

    #[test]
    fn approval_canonical_json_sorts_keys_at_every_depth() {
        let v = json!({"b": [{"y": 1, "x": "é\"q"}], "a": null});
        assert_eq!(canonical_json(&v), r#"{"a":null,"b":[{"x":"é\"q","y":1}]}"#);
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

    #[test]
    fn approval_key_rules() {
        assert_eq!(
            ApprovalKey::new([0u8; 31]).unwrap_err(),
            ApprovalError::KeyTooShort { len: 31 }
        );
        assert!(ApprovalKey::new([0u8; 32]).is_ok());
        assert_eq!(unhex("0aff"), Some(vec![10, 255]));
        assert_eq!(unhex("0af"), None);
        assert_eq!(hex(&[10, 255]), "0aff");
    }
}
