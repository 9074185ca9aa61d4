//! The first stored format of a held run (version 1: a snapshot of the round built by hand —
//! the protocol's name, the person's message, two counters, the response, the calls) read into
//! this version's [`Stored`]. What version 1 did not keep starts afresh: the machine's flags
//! and the results kept for idempotent repeats (a repeat runs again, as it did then), and its
//! limits, which the agent that goes on with the run sets anyway.

use serde::Deserialize;
use toolwright_core::Part;

use super::stored::{Status, Stored};
use crate::machine::{DEFAULT_MAX_ITERATIONS, LoopMachine};
use crate::run::{AgentRun, ProtocolId, RUN_VERSION, Round, RoundStep};

/// Version 1, field for field (the calls' form is this version's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V1 {
    #[allow(dead_code)]
    v: u32,
    status: Status,
    nonce: String,
    protocol: String,
    user_text: String,
    model_calls: usize,
    tool_rounds: usize,
    content: String,
    answer: String,
    text: String,
    native: bool,
    #[serde(default)]
    parts: Vec<Part>,
    steps: Vec<RoundStep>,
    #[serde(default)]
    lease_until_ms: Option<u64>,
}

/// Reads a version 1 snapshot as this version's stored run.
pub(super) fn from_v1(raw: &str) -> Result<Stored, serde_json::Error> {
    let old: V1 = serde_json::from_str(raw)?;
    let machine =
        LoopMachine::new(DEFAULT_MAX_ITERATIONS).with_counts(old.model_calls, old.tool_rounds);
    let mut run = AgentRun::new(ProtocolId::of(&old.protocol), old.user_text, machine);
    run.round = Some(Round {
        content: old.content,
        answer: old.answer,
        text: old.text,
        native: old.native,
        parts: old.parts,
        steps: old.steps,
    });
    Ok(Stored {
        v: RUN_VERSION,
        status: old.status,
        nonce: old.nonce,
        lease_until_ms: old.lease_until_ms,
        run,
    })
}
