//! Why decisions were refused ([`ApprovalError`]), and what an approval step that reads or
//! writes the session store fails with ([`Failed`]): the runner turns the latter into its
//! `LoopError`, so this module needs no type of the runner's.

use toolwright_context_engine::StoreError;

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
    /// The token is genuine, and was issued to another principal: a decision is taken only
    /// from the person the call was shown to (a token copied into another account).
    #[error(
        "the decision for call `{call_id}` carries a token issued to someone else; only the person the call was shown to can decide it — fetch the pending approval as yourself"
    )]
    OtherPrincipal {
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
    /// The run stored for the session does not carry a seal of this agent's approval key: it
    /// was changed outside toolwright, cut short, or sealed under another key. None of it
    /// runs; it is kept as it is (a new message in the session sets it aside, in the state
    /// slot `tool-system.approval.set-aside`).
    #[error(
        "the run stored for session `{session}` does not carry this agent's seal (changed outside toolwright, cut short, or sealed under another approval key); none of it runs — give every worker the same approval key, or send a new message, which sets it aside"
    )]
    SealBroken {
        /// The session.
        session: String,
    },
    /// The run stored for the session was written by a newer version of this crate, in a
    /// format this one does not know; it is kept as it is (never run, never dropped).
    #[error(
        "the run stored for session `{session}` was written by a newer version of toolwright (format {found}; this version reads up to {supported}); decide it, or send the next message, with that newer version — it is kept as it is"
    )]
    NewerVersion {
        /// The session.
        session: String,
        /// The stored format's version.
        found: u64,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The session's record of decisions (its state slot `tool-system.approval.log`) cannot
    /// be read; it is left as it is (never overwritten).
    #[error(
        "the record of approval decisions stored for session `{session}` cannot be read ({detail}); it is kept as it is — inspect the state slot `tool-system.approval.log`"
    )]
    LogUnreadable {
        /// The session.
        session: String,
        /// What is wrong.
        detail: String,
    },
    /// An approval key shorter than [`ApprovalKey::MIN_LEN`](crate::ApprovalKey::MIN_LEN).
    #[error(
        "an approval key must have at least 32 bytes, this one has {len}; generate one with `openssl rand -hex 32`"
    )]
    KeyTooShort {
        /// Its length.
        len: usize,
    },
    /// `TOOL_APPROVAL_KEY` is not set.
    #[error(
        "the environment variable TOOL_APPROVAL_KEY is not set; set it to a secret of at least 32 bytes (e.g. `openssl rand -hex 32`), the same in every process serving these sessions"
    )]
    KeyMissing,
}

/// An approval step that reads or writes the session store failed: the store, or a refusal.
#[derive(Debug)]
pub(crate) enum Failed {
    /// The session store failed.
    Store(StoreError),
    /// The decisions were refused, or the pending approval could not be read.
    Refused(ApprovalError),
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<ApprovalError> for Failed {
    fn from(e: ApprovalError) -> Self {
        Self::Refused(e)
    }
}
