//! A person in the loop: tool calls held for approval.
//!
//! When the model's round has calls that need approval ([`toolwright_core::Tool::needs_approval`],
//! [`toolwright_core::ToolProvider::needs_approval`], or the agent's [`ApprovalPolicy`]), the calls that
//! need none run at once and the run stops with a [`PendingApproval`]. The round — the
//! assistant message, the results obtained, the held calls — is kept in the session store's
//! state slot (compare-and-set) as the run itself ([`crate::run::AgentRun`]), never as half
//! a round in the history, so a restart loses nothing. Each held call is decided on its own with an [`ApprovalDecision`]; once all are
//! decided, the approved ones run, the rejected ones get a "the user declined" result, the
//! whole round is appended and the loop continues.
//!
//! A decision carries a token: HMAC-SHA256, under the agent's [`ApprovalKey`], over the
//! session id, the call id, the tool name, the canonical JSON of the exact arguments, a
//! fresh random nonce of this pending state and a keyed tag of the principal it was shown to
//! ([`LoopOptions::principal`](crate::LoopOptions::principal), an opaque string: this module
//! knows nothing of HTTP or of how a principal was authenticated). A token that does not
//! verify, is for another session, call or arguments, or for an older pending state is
//! refused with an [`ApprovalError`] and changes nothing; a genuine token presented by another
//! principal is [`ApprovalError::OtherPrincipal`].
//!
//! Each decision is recorded with who made it and when ([`DecisionRecord`], in the state slot
//! [`APPROVAL_LOG_KEY`] of the session), and stays after the round is recorded.
//!
//! The files, each named for what it holds:
//! * `token` — the HMAC tokens and the [`ApprovalKey`] (no I/O);
//! * `policy` — the agent's own rules, [`ApprovalPolicy`] (no I/O);
//! * `pending` — what a person sees and sends back ([`PendingApproval`], [`ApprovalDecision`]);
//! * `error` — [`ApprovalError`], and what a step that uses the store fails with;
//! * `stored` — the held run in its envelope (status, nonce, lease) and the compare-and-set
//!   writes of the state slot;
//! * `migrate` — the first stored format, read as this one;
//! * `resume` — checking and applying decisions, claiming the run;
//! * `record` — the record of who decided ([`DecisionRecord`]).
//!
//! Nothing here runs a tool or sends an event: this module decides and keeps the state, and
//! hands the runner the calls to run (and the calls to hold); the runner is the only executor.

mod error;
mod migrate;
mod pending;
mod policy;
mod record;
mod resume;
mod stored;
mod token;

pub use error::ApprovalError;
pub use pending::{ApprovalDecision, HeldCall, PendingApproval};
pub use policy::ApprovalPolicy;
pub use record::DecisionRecord;
pub use token::ApprovalKey;

pub(crate) use error::Failed;
pub(crate) use record::log;
pub(crate) use resume::{Claim, Claimed, current, decide, hold, record};
pub(crate) use stored::{Held, close_open, unsigned_view};
