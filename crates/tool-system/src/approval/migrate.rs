//! The first stored format of a held run (version 1: a snapshot of the round built by hand —
//! the protocol's name, the person's message, two counters, the response, the calls) read into
//! this version's run and envelope fields, which the stored format puts together. What version 1 did not keep starts afresh: the machine's flags
//! and the results kept for idempotent repeats (a repeat runs again, as it did then), and its
//! limits, which the agent that goes on with the run sets anyway.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toolwright_core::Part;

use crate::machine::{DEFAULT_MAX_ITERATIONS, LoopMachine};
use crate::run::{AgentRun, ProtocolId, Round, RoundStep};

/// Version 1, field for field (the calls' form is this version's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(bound = "S: DeserializeOwned")]
struct V1<S> {
    #[allow(dead_code)]
    v: u32,
    status: S,
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
pub(super) fn from_v1<S: DeserializeOwned>(raw: &str) -> Result<FirstFormat<S>, serde_json::Error> {
    let old: V1<S> = serde_json::from_str(raw)?;
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
    Ok(FirstFormat {
        status: old.status,
        nonce: old.nonce,
        lease_until_ms: old.lease_until_ms,
        run,
    })
}

/// A first-format snapshot read: the held run, and the envelope's fields as it kept them (its
/// status is the stored format's own type, `S`).
pub(super) struct FirstFormat<S> {
    pub(super) status: S,
    pub(super) nonce: String,
    pub(super) lease_until_ms: Option<u64>,
    pub(super) run: AgentRun,
}
