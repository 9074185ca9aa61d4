//! What each answer cost, kept with the conversation (a state slot of the session store) and
//! shown under the answer's last entry.

use serde::Serialize;
use toolwright_context_engine::{SessionStore, StateChange, StoreError};

use super::{Entry, ROW_SLOTS};

/// The state slot holding the run summaries of the conversation's answers ([`RunSummary`] with
/// the row each ended at, JSON, the latest [`MAX_RUNS`]).
pub(crate) const RUNS_KEY: &str = "chat-panel.runs";
/// How many answers' run summaries a conversation keeps.
const MAX_RUNS: usize = 200;

/// What one answer cost: the tokens of its model calls and their price, as the tool loop
/// reported them ([`LoopOutput::usage`](toolwright_tool_system::LoopOutput) and `cost`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunSummary {
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u32,
    /// Generated tokens, reasoning included.
    pub completion_tokens: u32,
    /// Prompt tokens read from the provider's cache.
    pub cache_read_tokens: u32,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: u32,
    /// Generated tokens spent reasoning.
    pub reasoning_tokens: u32,
    /// Their price in US dollars, when the model's price is known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cost_usd: Option<f64>,
}

impl RunSummary {
    /// The summary of a run's usage and cost; `None` when the model reported no usage.
    pub fn of(usage: Option<toolwright_core::Usage>, cost: Option<f64>) -> Option<Self> {
        let u = usage?;
        Some(Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            reasoning_tokens: u.reasoning_tokens,
            cost_usd: cost.filter(|c| c.is_finite() && *c >= 0.0),
        })
    }
}

/// A run summary and the stored row its answer ended at (the slot [`RUNS_KEY`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredRun {
    pub row: u64,
    #[serde(flatten)]
    pub run: RunSummary,
}

/// Records that the answer ending at `row` of conversation `id` cost `run` (the latest
/// [`MAX_RUNS`] are kept), with a compare-and-set so answers on several workers never lose
/// each other's.
pub(crate) async fn record_run(
    store: &dyn SessionStore,
    id: &str,
    row: u64,
    run: RunSummary,
) -> Result<(), StoreError> {
    for _ in 0..4 {
        let old = store.get_state(id, RUNS_KEY).await?;
        let mut runs = read_runs(old.as_deref());
        runs.retain(|r| r.row != row);
        runs.push(StoredRun { row, run });
        let excess = runs.len().saturating_sub(MAX_RUNS);
        runs.drain(..excess);
        let new = serde_json::to_string(&runs).unwrap_or_else(|_| "[]".into());
        let change = StateChange::new(RUNS_KEY, old.as_deref(), Some(&new));
        if store.append_with_state(id, &[], change).await?.is_some() {
            return Ok(());
        }
    }
    Err(StoreError::Database {
        detail: format!(
            "the run summaries of session `{id}` kept changing under this worker; the summary of the answer at row {row} was not recorded (the answer itself is stored)"
        ),
    })
}

/// The stored run summaries (a slot that cannot be read counts as none: they are a display).
pub(crate) fn read_runs(slot: Option<&str>) -> Vec<StoredRun> {
    slot.and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// Shows each run summary on the last entry made at or before its row (the answer's last).
pub(crate) fn attach_runs(entries: &mut [Entry], runs: &[StoredRun]) {
    for r in runs {
        let end = r.row.saturating_add(1).saturating_mul(ROW_SLOTS);
        if let Some(e) = entries.iter_mut().rev().find(|e| e.id < end) {
            e.run = Some(r.run);
        }
    }
}
