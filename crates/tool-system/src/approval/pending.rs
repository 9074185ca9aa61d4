//! What a person sees of held calls ([`PendingApproval`], [`HeldCall`]) and what a UI sends
//! back ([`ApprovalDecision`]): plain serializable data.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
