//! Who decided: the record of a conversation's decisions, kept in its session
//! store beside it (memory, SQLite, PostgreSQL) — the tool-system's approval decisions
//! ([`toolwright_tool_system::DecisionRecord`], its state slot `tool-system.approval.log`) and the
//! person's answers to MCP servers' questions ([`AnswerRecord`], state slot [`ANSWERS_KEY`]),
//! each with the principal, the time and what was decided on. `GET /api/sessions/{id}` shows
//! them as `decisions`, oldest first, and the page shows them in the conversation.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolwright_context_engine::{SessionStore, StateChange, StoreError};

/// The session state slot that keeps the answers to MCP servers' questions.
pub const ANSWERS_KEY: &str = "chat-panel.answers";

/// The most answers a conversation keeps; the oldest go first.
const MAX_ANSWERS: usize = 1000;

/// Compare-and-set attempts before a write gives up on a slot that keeps changing.
const CAS_ATTEMPTS: usize = 4;

/// An answer to an MCP server's question (elicitation), as the conversation keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AnswerRecord {
    /// The question's number in its turn.
    pub question: u64,
    /// The MCP server that asked.
    pub service: String,
    /// What it asked.
    pub message: String,
    /// `accept`, `decline` or `cancel`.
    pub action: String,
    /// What was given with an `accept`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// Who answered.
    pub principal: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

fn unreadable(id: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Database {
        detail: format!(
            "the record of answers of conversation `{id}` (state slot {ANSWERS_KEY}) cannot be read: {detail}; it is kept as it is"
        ),
    }
}

/// Adds `record` to conversation `id`'s answers (compare-and-set). An unreadable record is
/// never overwritten: the write fails instead.
pub(crate) async fn record_answer(
    store: &dyn SessionStore,
    id: &str,
    record: &AnswerRecord,
) -> Result<(), StoreError> {
    for _ in 0..CAS_ATTEMPTS {
        let raw = store.get_state(id, ANSWERS_KEY).await?;
        let mut list: Vec<AnswerRecord> = match raw.as_deref() {
            None => Vec::new(),
            Some(r) => serde_json::from_str(r).map_err(|e| unreadable(id, e))?,
        };
        list.push(record.clone());
        let excess = list.len().saturating_sub(MAX_ANSWERS);
        list.drain(..excess);
        let json = serde_json::to_string(&list).map_err(|e| StoreError::Encode {
            detail: e.to_string(),
        })?;
        let change = StateChange::new(ANSWERS_KEY, raw.as_deref(), Some(&json));
        if store.append_with_state(id, &[], change).await?.is_some() {
            return Ok(());
        }
    }
    Err(StoreError::Database {
        detail: format!(
            "the record of answers of conversation `{id}` kept changing under this write; try again"
        ),
    })
}

/// Conversation `id`'s decisions, oldest first: `{"kind": "approval", "principal", "atMs",
/// "callId", "tool", "arguments", "approved", "reason"?}` and `{"kind": "answer", "principal",
/// "atMs", "question", "service", "message", "action", "content"?}`.
pub(crate) async fn decisions(store: &dyn SessionStore, id: &str) -> Result<Value, StoreError> {
    let approvals = match toolwright_tool_system::DecisionRecord::log(store, id).await {
        Ok(l) => l,
        Err(toolwright_tool_system::LoopError::Store(e)) => return Err(e),
        Err(e) => return Err(unreadable(id, e)),
    };
    let answers: Vec<AnswerRecord> = match store.get_state(id, ANSWERS_KEY).await {
        Ok(Some(r)) => serde_json::from_str(&r).map_err(|e| unreadable(id, e))?,
        Ok(None) | Err(StoreError::Unsupported { .. } | StoreError::NotFound { .. }) => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut all: Vec<(u64, Value)> = approvals
        .into_iter()
        .map(|r| {
            let mut v = json!({"kind": "approval", "principal": r.principal, "atMs": r.at_ms,
                "callId": r.call_id, "tool": r.tool, "arguments": r.arguments,
                "approved": r.approved, "round": r.round});
            if let Some(reason) = r.reason {
                v["reason"] = json!(reason);
            }
            (r.at_ms, v)
        })
        .chain(answers.into_iter().map(|a| {
            let at = a.at_ms;
            let mut v = serde_json::to_value(a).unwrap_or(Value::Null);
            v["kind"] = json!("answer");
            (at, v)
        }))
        .collect();
    all.sort_by_key(|(at, _)| *at); // stable: each list keeps its own order
    Ok(Value::Array(all.into_iter().map(|(_, v)| v).collect()))
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
