//! The run as one value: [`AgentRun`] holds everything the loop knows between two steps — the
//! machine's counters and flags ([`LoopMachine`], nothing left out), the protocol as a typed id,
//! the person's message the run answers, the round in flight and, once over, its answer — and
//! says what to do next ([`AgentRun::next_step`]) with no I/O. It is serializable and
//! versioned: holding calls for approval writes it, resuming reads it and goes on with the
//! same loop, on this worker or another.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolwright_core::{DEFAULT_MAX_RESULT_BYTES, Part, ToolError, Usage, cap_result};

use crate::machine::{CallFacts, CallPlan, Decision, LoopMachine, Planned, ResponseFacts};
use crate::protocols::{CallResult, PendingCall, Reading, Step};

/// The version of [`AgentRun`] this build writes and reads. Version 1 was the approval
/// snapshot of a held round before the run was one value (migrated on read).
pub(crate) const RUN_VERSION: u32 = 2;

/// Which call protocol read the run's responses: a typed id, written as its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub(crate) enum ProtocolId {
    /// Native function calling.
    Native,
    /// The JSON decision in the system prompt.
    Json,
    /// `<tool_action>` tags.
    Tag,
    /// A protocol of the program's own, by its name.
    Custom(String),
}

impl ProtocolId {
    pub(crate) fn of(name: &str) -> Self {
        match name {
            "native" => Self::Native,
            "json" => Self::Json,
            "tag" => Self::Tag,
            other => Self::Custom(other.to_owned()),
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Native => "native",
            Self::Json => "json",
            Self::Tag => "tag",
            Self::Custom(n) => n,
        }
    }
}

impl From<String> for ProtocolId {
    fn from(s: String) -> Self {
        Self::of(&s)
    }
}

impl From<ProtocolId> for String {
    fn from(p: ProtocolId) -> Self {
        match p {
            ProtocolId::Custom(n) => n,
            known => known.name().to_owned(),
        }
    }
}

/// What the runner does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextStep<'a> {
    /// Ask the model (the last round, if any, is recorded).
    CallModel,
    /// Run the round in flight: the calls of a new response, or a held round's calls once
    /// every one of them is decided.
    CallTools,
    /// The round in flight has calls waiting for a person: keep the run and stop.
    Hold,
    /// A handoff call of the last round ran: this agent hands the conversation to that one.
    HandOff(&'a str),
    /// A tool of the last round gave the turn's answer: record it as the reply, then done.
    ToolAnswer(&'a str),
    /// The run is over with this answer (`hit_limit`: stopped at the round limit).
    Done { answer: &'a str, hit_limit: bool },
}

/// One run of the loop, as a value (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentRun {
    /// [`RUN_VERSION`].
    pub(crate) v: u32,
    pub(crate) protocol: ProtocolId,
    /// The person's message this run answers.
    pub(crate) user_text: String,
    pub(crate) machine: LoopMachine,
    /// The round in flight: a response's calls between its reading and its record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) round: Option<Round>,
    /// The run's answer, once it is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) done: Option<Done>,
    /// The handoffs this turn took before the agent of this run, in order: a held run is
    /// resumed by that agent, reached through the first one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) via: Vec<String>,
    /// The tokens of the run's model calls so far (a resumed run's output counts them too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Done {
    pub(crate) answer: String,
    pub(crate) hit_limit: bool,
}

/// A response whose calls are being run (or wait for a person), as the run keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Round {
    /// The raw text of the response.
    pub(crate) content: String,
    /// The answer if the loop ended here.
    pub(crate) answer: String,
    /// What the person saw of the response.
    pub(crate) text: String,
    /// The calls came as native `tool_calls`.
    pub(crate) native: bool,
    /// The response's reasoning and other parts: a round resumed on another worker replays
    /// them to the provider that made them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) parts: Vec<Part>,
    pub(crate) steps: Vec<RoundStep>,
}

/// One step of a round: text, or a batch of calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum RoundStep {
    Text { text: String },
    Calls { calls: Vec<RoundCall> },
}

/// One call of the round in flight and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RoundCall {
    pub(crate) call: PendingCall,
    pub(crate) state: CallState,
    /// Who decided it and when (set with an approval or a rejection).
    pub(crate) decided: Option<Decided>,
}

/// Who decided a call, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Decided {
    /// The principal (opaque; empty when the program names none).
    pub(crate) by: String,
    /// Unix time, ms.
    pub(crate) at_ms: u64,
}

/// Where one call of the round in flight stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum CallState {
    /// Read from the response, not planned yet.
    New,
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
    /// A sub-agent's call ([`crate::AgentTool`]) whose own run holds calls for a person: that
    /// run, kept here. Its calls are decided through this run (by their path,
    /// `{tool}/{call id}`); once all are, the call runs again and the sub-agent goes on.
    Nested { run: Box<AgentRun> },
}

/// What the loop knows of a call's tool (from the dispatcher and the approval policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ToolFacts {
    pub(crate) idempotent: bool,
    pub(crate) needs_approval: bool,
}

/// How a planned call ended, as the round keeps it.
pub(crate) struct Outcome {
    pub(crate) content: String,
    pub(crate) is_error: bool,
    pub(crate) parts: Vec<Part>,
}

impl AgentRun {
    /// A run of `user_text` under `protocol`, with the machine's limits.
    pub(crate) fn new(protocol: ProtocolId, user_text: String, machine: LoopMachine) -> Self {
        Self {
            v: RUN_VERSION,
            protocol,
            user_text,
            machine,
            round: None,
            done: None,
            via: Vec::new(),
            usage: None,
        }
    }

    /// What to do next; no I/O, nothing changes.
    pub(crate) fn next_step(&self) -> NextStep<'_> {
        if let Some(d) = &self.done {
            return NextStep::Done {
                answer: &d.answer,
                hit_limit: d.hit_limit,
            };
        }
        if let Some(round) = &self.round {
            return if round.is_held() {
                NextStep::Hold
            } else {
                NextStep::CallTools
            };
        }
        if let Some(to) = self.machine.handoff() {
            return NextStep::HandOff(to);
        }
        if let Some(answer) = self.machine.tool_answer() {
            return NextStep::ToolAnswer(answer);
        }
        NextStep::CallModel
    }

    /// A response arrived: the machine decides what follows it.
    pub(crate) fn after_response(&mut self, facts: ResponseFacts) -> Decision {
        self.machine.after_response(facts)
    }

    /// The response of a [`Decision::RunTools`] becomes the round in flight (its calls moved,
    /// uncopied); `text` is what the person saw of it.
    pub(crate) fn start_round(&mut self, reading: Reading, text: String) {
        let Reading {
            content,
            steps,
            answer,
            native,
            parts,
            ..
        } = reading;
        let steps = steps
            .into_iter()
            .map(|s| match s {
                Step::Text(text) => RoundStep::Text { text },
                Step::Calls(calls) => RoundStep::Calls {
                    calls: calls
                        .into_iter()
                        .map(|call| RoundCall {
                            call,
                            state: CallState::New,
                            decided: None,
                        })
                        .collect(),
                },
            })
            .collect();
        self.round = Some(Round {
            content,
            answer,
            text,
            native,
            parts,
            steps,
        });
    }

    /// The round in flight is over (every call has its result): it leaves the run, as the
    /// response to record and each call's result in call order. A call without a result —
    /// never the case in a finished round — is recorded as not run (fail closed).
    pub(crate) fn take_round(&mut self) -> Option<(Reading, Vec<(PendingCall, CallResult)>)> {
        let round = self.round.take()?;
        let mut results = Vec::new();
        for step in round.steps {
            if let RoundStep::Calls { calls } = step {
                for c in calls {
                    let result = match c.state {
                        CallState::Done { content, parts, .. } => CallResult::new(content, parts),
                        _ => model_error("Not run.").into(),
                    };
                    results.push((c.call, result));
                }
            }
        }
        let reading = Reading {
            content: round.content,
            steps: Vec::new(),
            answer: round.answer,
            correction: None,
            native: round.native,
            parts: round.parts,
        };
        Some((reading, results))
    }

    /// The run is over with `answer`.
    pub(crate) fn finish(&mut self, answer: String, hit_limit: bool) {
        self.done = Some(Done { answer, hit_limit });
    }

    /// Every call a person may decide, with its path: the calls of the round in flight by
    /// their id and, in place of a sub-agent's call whose run holds, that run's calls as
    /// `{tool}/{their path}` (e.g. `researcher/call_2`), in order.
    pub(crate) fn decidable(&self) -> Vec<(String, &RoundCall)> {
        let mut out = Vec::new();
        self.collect("", &mut out);
        out
    }

    fn collect<'a>(&'a self, prefix: &str, out: &mut Vec<(String, &'a RoundCall)>) {
        for c in self.round.iter().flat_map(Round::calls) {
            match &c.state {
                CallState::Nested { run } => run.collect(&format!("{prefix}{}/", c.call.name), out),
                _ => out.push((format!("{prefix}{}", c.call.id), c)),
            }
        }
    }

    /// [`decidable`](Self::decidable), to change.
    pub(crate) fn decidable_mut(&mut self) -> Vec<(String, &mut RoundCall)> {
        let mut out = Vec::new();
        self.collect_mut("", &mut out);
        out
    }

    fn collect_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut RoundCall)>) {
        for c in self.round.iter_mut().flat_map(Round::calls_mut) {
            if matches!(c.state, CallState::Nested { .. }) {
                let inner = format!("{prefix}{}/", c.call.name);
                if let CallState::Nested { run } = &mut c.state {
                    run.collect_mut(&inner, out);
                }
            } else {
                out.push((format!("{prefix}{}", c.call.id), c));
            }
        }
    }

    /// Whether the round in flight waits for a person (a call held, here or in a sub-agent's
    /// run it holds).
    pub(crate) fn is_held(&self) -> bool {
        self.round.as_ref().is_some_and(Round::is_held)
    }
}

impl Round {
    /// Every call, in order.
    pub(crate) fn calls(&self) -> impl Iterator<Item = &RoundCall> {
        self.steps.iter().flat_map(|s| match s {
            RoundStep::Calls { calls } => calls.as_slice(),
            RoundStep::Text { .. } => &[],
        })
    }

    /// Every call, in order, to change.
    pub(crate) fn calls_mut(&mut self) -> impl Iterator<Item = &mut RoundCall> {
        self.steps.iter_mut().flat_map(|s| match s {
            RoundStep::Calls { calls } => calls.as_mut_slice(),
            RoundStep::Text { .. } => &mut [],
        })
    }

    /// Whether a call waits for a person (here, or in a sub-agent's run held in it).
    pub(crate) fn is_held(&self) -> bool {
        self.calls().any(|c| match &c.state {
            CallState::Held { .. } => true,
            CallState::Nested { run } => run.is_held(),
            _ => false,
        })
    }

    /// Whether no call of it was planned yet (a response's round before its first pass).
    pub(crate) fn is_new(&self) -> bool {
        self.calls().any(|c| c.state == CallState::New)
    }
}

impl RoundCall {
    /// What to do with this call, by where it stands: a new call as the machine plans it
    /// (`after_held`: an earlier call of the round is held and the protocol runs calls in
    /// order); a decided one as the person decided; a waiting one as a call needing no
    /// approval; one that has its result, nothing. Calls shown as started: a new call that is
    /// not held or waiting, and a call of a decided round that runs.
    pub(crate) fn plan(
        &self,
        machine: &LoopMachine,
        tool: ToolFacts,
        after_held: bool,
    ) -> Planned<'_> {
        let c = &self.call;
        let valid = c.invalid.is_none();
        let mut facts = CallFacts {
            name: &c.name,
            arguments: &c.arguments,
            invalid: None,
            idempotent: valid && tool.idempotent,
            needs_approval: false,
            after_held: false,
        };
        let plan = match &self.state {
            CallState::New => {
                facts.invalid = c.invalid.as_deref();
                facts.needs_approval = valid && tool.needs_approval;
                facts.after_held = after_held;
                let plan = machine.plan_call(facts);
                let announce = !matches!(plan, CallPlan::Hold | CallPlan::Wait);
                return Planned {
                    facts,
                    plan: Some(plan),
                    announce,
                };
            }
            CallState::Done { .. } => None,
            CallState::Approved => Some(machine.plan_decided(true, None)),
            CallState::Rejected { reason } => Some(machine.plan_decided(false, reason.as_deref())),
            // every call of the sub-agent's run is decided: the call runs again, and the
            // sub-agent goes on with its run
            CallState::Nested { .. } => Some(machine.plan_decided(true, None)),
            CallState::Waiting => Some(machine.plan_call(facts)),
            // A round with an undecided call is held, never run; never run one anyway.
            CallState::Held { .. } => Some(machine.plan_abandoned(false)),
        };
        Planned {
            announce: matches!(plan, Some(CallPlan::Run)),
            facts,
            plan,
        }
    }

    /// Where the call stands after its plan: with its result when it ran (or was answered),
    /// held or waiting when its plan says so.
    pub(crate) fn settle(&mut self, plan: Option<&CallPlan>, ran: Option<Outcome>) {
        self.state = match (plan, ran) {
            (_, Some(o)) => CallState::Done {
                content: o.content,
                is_error: o.is_error,
                parts: o.parts,
            },
            (Some(CallPlan::Hold), None) => CallState::Held { maybe_ran: false },
            (Some(CallPlan::Wait), None) => CallState::Waiting,
            _ => return,
        };
    }
}

/// A tool error result with `text`, as the model gets it.
pub(crate) fn model_error(text: &str) -> String {
    let (content, _) = cap_result(
        ToolError::failed(text).to_model_json().to_string(),
        DEFAULT_MAX_RESULT_BYTES,
    );
    content
}

/// A call as stored: `{id, name, arguments, state, decided}` (`invalid` only for a call that
/// cannot run as written).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredCall {
    id: String,
    name: String,
    arguments: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invalid: Option<String>,
    state: CallState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decided: Option<Decided>,
}

impl Serialize for RoundCall {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Ref<'a> {
            id: &'a str,
            name: &'a str,
            arguments: &'a Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            invalid: &'a Option<String>,
            state: &'a CallState,
            #[serde(skip_serializing_if = "Option::is_none")]
            decided: &'a Option<Decided>,
        }
        Ref {
            id: &self.call.id,
            name: &self.call.name,
            arguments: &self.call.arguments,
            invalid: &self.call.invalid,
            state: &self.state,
            decided: &self.decided,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for RoundCall {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = StoredCall::deserialize(d)?;
        let mut call = PendingCall::new(s.id, s.name, s.arguments);
        call.invalid = s.invalid;
        Ok(Self {
            call,
            state: s.state,
            decided: s.decided,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reading(calls: Vec<PendingCall>) -> Reading {
        Reading {
            content: "Deleting it.".into(),
            steps: vec![Step::Text("Deleting it.".into()), Step::Calls(calls)],
            answer: "Deleting it.".into(),
            correction: None,
            native: true,
            parts: Vec::new(),
        }
    }

    fn run() -> AgentRun {
        AgentRun::new(
            ProtocolId::Native,
            "delete /tmp/a".into(),
            LoopMachine::new(5),
        )
    }

    fn ran(content: &str) -> Outcome {
        Outcome {
            content: content.into(),
            is_error: false,
            parts: Vec::new(),
        }
    }

    const CALLS: ResponseFacts = ResponseFacts {
        has_calls: true,
        unreadable: false,
        off_schema: false,
    };

    /// Where the run stands → what the runner does next.
    #[test]
    fn the_next_step_follows_where_the_run_stands() {
        let call = || PendingCall::new("c1", "delete_file", json!({"path": "/tmp/a"}));
        let fresh = run();
        let mut in_flight = run();
        in_flight.start_round(reading(vec![call()]), "Deleting it.".into());
        let mut held = in_flight.clone();
        for c in held.round.as_mut().unwrap().calls_mut() {
            c.state = CallState::Held { maybe_ran: false };
        }
        let mut decided = held.clone();
        for c in decided.round.as_mut().unwrap().calls_mut() {
            c.state = CallState::Approved;
        }
        let mut answered = run();
        let args = json!({});
        let facts = CallFacts {
            name: "lookup",
            arguments: &args,
            invalid: None,
            idempotent: false,
            needs_approval: false,
            after_held: false,
        };
        answered
            .machine
            .call_done(facts, &CallPlan::Run, "r", true, Some("It is 4."));
        let mut handed = answered.clone();
        handed.machine.hand_off("billing");
        let mut over = in_flight.clone();
        over.finish("Deleted.".into(), true);
        let rows: [(&AgentRun, NextStep<'_>); 7] = [
            (&fresh, NextStep::CallModel),
            (&in_flight, NextStep::CallTools),
            (&held, NextStep::Hold),
            (&decided, NextStep::CallTools),
            (&answered, NextStep::ToolAnswer("It is 4.")),
            (&handed, NextStep::HandOff("billing")),
            (
                &over,
                NextStep::Done {
                    answer: "Deleted.",
                    hit_limit: true,
                },
            ),
        ];
        for (i, (r, want)) in rows.into_iter().enumerate() {
            assert_eq!(r.next_step(), want, "row {i}");
        }
    }

    /// What each call of the round in flight gets, by where it stands: the plan (none for a
    /// call that has its result), whether it is shown as started, and where it stands after.
    #[test]
    fn round_calls_are_planned_and_settled_by_their_state() {
        let machine = LoopMachine::new(5);
        let call = PendingCall::new("c1", "delete_file", json!({"path": "/tmp/a"}));
        let at = |state: CallState| RoundCall {
            call: call.clone(),
            state,
            decided: None,
        };
        let done = CallState::Done {
            content: "earlier".into(),
            is_error: false,
            parts: Vec::new(),
        };
        let ran_state = CallState::Done {
            content: "ran".into(),
            is_error: false,
            parts: Vec::new(),
        };
        let approval = ToolFacts {
            idempotent: false,
            needs_approval: true,
        };
        let plain = ToolFacts::default();
        let rejected = CallState::Rejected {
            reason: Some("not that file".into()),
        };
        let declined = machine.plan_decided(false, Some("not that file"));
        // (state, tool, after_held) -> (plan, announce, state after when it did not run)
        type Row = (
            CallState,
            ToolFacts,
            bool,
            Option<CallPlan>,
            bool,
            CallState,
        );
        let rows: Vec<Row> = vec![
            (
                CallState::New,
                plain,
                false,
                Some(CallPlan::Run),
                true,
                CallState::New,
            ),
            (
                CallState::New,
                approval,
                false,
                Some(CallPlan::Hold),
                false,
                CallState::Held { maybe_ran: false },
            ),
            (
                CallState::New,
                plain,
                true,
                Some(CallPlan::Wait),
                false,
                CallState::Waiting,
            ),
            (done.clone(), approval, false, None, false, done.clone()),
            (
                CallState::Approved,
                approval,
                false,
                Some(CallPlan::Run),
                true,
                CallState::Approved,
            ),
            (
                rejected.clone(),
                approval,
                false,
                Some(declined),
                false,
                rejected.clone(),
            ),
            // a waiting call runs once the held one before it is decided, without approval
            (
                CallState::Waiting,
                approval,
                true,
                Some(CallPlan::Run),
                true,
                CallState::Waiting,
            ),
            (
                CallState::Held { maybe_ran: true },
                approval,
                false,
                Some(machine.plan_abandoned(false)),
                false,
                CallState::Held { maybe_ran: true },
            ),
        ];
        for (i, (state, tool, after_held, plan, announce, unran)) in rows.into_iter().enumerate() {
            let mut c = at(state);
            let p = c.plan(&machine, tool, after_held);
            assert_eq!(p.plan, plan, "row {i}");
            assert_eq!(p.announce, announce, "row {i}");
            let plan = p.plan.clone();
            let mut ran_one = c.clone();
            c.settle(plan.as_ref(), None);
            assert_eq!(c.state, unran, "row {i}");
            if plan.is_some() {
                ran_one.settle(plan.as_ref(), Some(ran("ran")));
                assert_eq!(ran_one.state, ran_state, "row {i}");
            }
        }
    }

    /// A waiting repeat of an idempotent call that ran earlier in the run is answered from
    /// that result, and is not shown as started.
    #[test]
    fn a_waiting_repeat_is_reused_and_not_announced() {
        let mut machine = LoopMachine::new(5);
        let c = RoundCall {
            call: PendingCall::new("c2", "read", json!({"p": 1})),
            state: CallState::Waiting,
            decided: None,
        };
        let tool = ToolFacts {
            idempotent: true,
            needs_approval: false,
        };
        let first = c.plan(&machine, tool, false);
        let plan = first.plan.clone().unwrap();
        machine.call_done(first.facts, &plan, "42", true, None);
        let again = c.plan(&machine, tool, false);
        assert_eq!(again.plan, Some(CallPlan::Reuse("42".into())));
        assert!(!again.announce);
    }

    /// Everything the machine learned — counters, flags, kept results of idempotent calls, a
    /// tool's answer — and the round in flight survive a write and a read.
    #[test]
    fn a_run_survives_serialization_whole() {
        let mut r = AgentRun::new(
            ProtocolId::Custom("mine".into()),
            "delete /tmp/a".into(),
            LoopMachine::new(3).with_corrections(true),
        );
        assert_eq!(r.after_response(CALLS), Decision::RunTools);
        let args = json!({"city": "Paris", "days": [1, 2]});
        let facts = CallFacts {
            name: "weather",
            arguments: &args,
            invalid: None,
            idempotent: true,
            needs_approval: false,
            after_held: false,
        };
        r.machine
            .call_done(facts, &CallPlan::Run, "sunny", true, Some("Sunny."));
        let mut bad = PendingCall::new("c2", "delete_file", json!("{path:"));
        bad.invalid = Some("Invalid JSON arguments for tool `delete_file`".into());
        r.start_round(
            reading(vec![PendingCall::new("c1", "delete_file", json!({})), bad]),
            String::new(),
        );
        let json = serde_json::to_string(&r).unwrap();
        let back: AgentRun = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.protocol.name(), "mine");
        assert_eq!(
            back.machine.plan_call(facts),
            CallPlan::Reuse("sunny".into())
        );
        assert_eq!(serde_json::to_string(&back).unwrap(), json, "stable text");
        for (name, id) in [
            ("native", ProtocolId::Native),
            ("json", ProtocolId::Json),
            ("tag", ProtocolId::Tag),
        ] {
            assert_eq!(ProtocolId::of(name), id);
            assert_eq!(serde_json::to_value(&id).unwrap(), json!(name));
        }
    }

    /// A finished round leaves the run as the response and its results, in call order.
    #[test]
    fn a_finished_round_is_taken_whole() {
        let mut r = run();
        r.start_round(
            reading(vec![
                PendingCall::new("c1", "a", json!({})),
                PendingCall::new("c2", "b", json!({})),
            ]),
            String::new(),
        );
        for (i, c) in r.round.as_mut().unwrap().calls_mut().enumerate() {
            if i == 0 {
                c.settle(Some(&CallPlan::Run), Some(ran("one")));
            }
        }
        let (reading, results) = r.take_round().unwrap();
        assert_eq!(reading.content, "Deleting it.");
        assert_eq!(results[0].1.content, "one");
        assert!(results[1].1.content.contains("Not run"), "fail closed");
        assert_eq!(r.next_step(), NextStep::CallModel);
    }
}

/// A scripted run driven step by step with the runner's rules (plan each call as it stands,
/// run it, settle it; record a finished round; decide held calls), once straight through and
/// once written and read back before every step: both go the same way.
#[cfg(test)]
mod stop_anywhere {
    use super::*;
    use proptest::prelude::*;

    /// A scripted response: an answer, an unreadable one, or calls of
    /// `(tool, arguments, needs approval, arguments broken)`.
    #[derive(Debug, Clone)]
    enum Response {
        Answer,
        Unreadable,
        Calls(Vec<(u8, u8, bool, bool)>),
    }

    fn response() -> impl Strategy<Value = Response> {
        prop_oneof![
            1 => Just(Response::Answer),
            1 => Just(Response::Unreadable),
            5 => proptest::collection::vec((0u8..5, 0u8..2, any::<bool>(), proptest::bool::weighted(0.1)), 1..4)
                .prop_map(Response::Calls),
        ]
    }

    /// Tool 0 is idempotent; tool 1 plain; tool 2 fails; tool 3 gives the turn's answer; tool
    /// 4 is a sub-agent whose own call needs approval ([`sub_agent`]).
    fn tool(name: &str) -> ToolFacts {
        ToolFacts {
            idempotent: name == "t0",
            needs_approval: false,
        }
    }

    fn reading(n: usize, response: &Response) -> Reading {
        let (steps, correction) = match response {
            Response::Answer => (vec![Step::Text(format!("answer {n}"))], None),
            Response::Unreadable => (Vec::new(), Some("fix it".to_owned())),
            Response::Calls(calls) => (
                vec![
                    Step::Text(format!("calling {n}")),
                    Step::Calls(
                        calls
                            .iter()
                            .enumerate()
                            .map(|(i, &(t, a, _, broken))| {
                                let mut c = PendingCall::new(
                                    format!("c{n}.{i}"),
                                    format!("t{t}"),
                                    serde_json::json!({ "a": a }),
                                );
                                if broken {
                                    c.invalid = Some("broken arguments".into());
                                }
                                c
                            })
                            .collect(),
                    ),
                ],
                None,
            ),
        };
        Reading {
            content: format!("response {n}"),
            steps,
            answer: format!("answer {n}"),
            correction,
            native: true,
            parts: Vec::new(),
        }
    }

    /// Sub-agent `id` runs as the runner runs one under a run that holds for it: a new run
    /// asks for one call that needs approval and holds (its run goes up, `Err`); a run handed
    /// back decided goes on — its call runs or is declined, its round is taken — and answers.
    fn sub_agent(id: &str, resumed: Option<AgentRun>) -> Result<String, Box<AgentRun>> {
        let Some(mut sub) = resumed else {
            let mut sub = AgentRun::new(ProtocolId::Native, "sub".into(), LoopMachine::new(3));
            sub.after_response(ResponseFacts {
                has_calls: true,
                ..ResponseFacts::default()
            });
            let call = PendingCall::new(format!("{id}.s"), "t1", serde_json::json!({}));
            sub.start_round(reading_of(vec![call]), String::new());
            let AgentRun { machine, round, .. } = &mut sub;
            for c in round.iter_mut().flat_map(Round::calls_mut) {
                let facts = ToolFacts {
                    needs_approval: true,
                    idempotent: false,
                };
                let plan = c.plan(machine, facts, false).plan;
                c.settle(plan.as_ref(), None);
            }
            return Err(Box::new(sub));
        };
        let AgentRun { machine, round, .. } = &mut sub;
        for c in round.iter_mut().flat_map(Round::calls_mut) {
            let plan = c.plan(machine, ToolFacts::default(), false).plan;
            let content = match &plan {
                Some(CallPlan::Decline(t)) => t.clone(),
                _ => "sub ran".to_owned(),
            };
            let ran = Outcome {
                content,
                is_error: false,
                parts: Vec::new(),
            };
            c.settle(plan.as_ref(), Some(ran));
        }
        let (_, results) = sub.take_round().unwrap_or_else(|| unreachable!());
        Ok(format!("sub answered after {results:?}"))
    }

    fn reading_of(calls: Vec<PendingCall>) -> Reading {
        Reading {
            content: String::new(),
            steps: vec![Step::Calls(calls)],
            answer: String::new(),
            correction: None,
            native: true,
            parts: Vec::new(),
        }
    }

    /// What happened, step by step, and how the run ended.
    fn drive(
        script: &[Response],
        max: usize,
        corrections: bool,
        in_order: bool,
        approve: &[bool],
        stop_everywhere: bool,
    ) -> (Vec<String>, AgentRun) {
        let machine = LoopMachine::new(max).with_corrections(corrections);
        let mut run = AgentRun::new(ProtocolId::Tag, "u".into(), machine);
        let mut trace = Vec::new();
        let mut responses = script.iter().enumerate();
        let mut needs_approval = std::collections::HashSet::new();
        let mut decisions = approve.iter().cycle();
        for _ in 0..200 {
            if stop_everywhere {
                let json = serde_json::to_string(&run).unwrap_or_default();
                match serde_json::from_str::<AgentRun>(&json) {
                    Ok(back) => run = back,
                    Err(e) => {
                        trace.push(format!("unreadable: {e}"));
                        break;
                    }
                }
            }
            match run.next_step() {
                NextStep::Done { answer, hit_limit } => {
                    trace.push(format!("done {answer} {hit_limit}"));
                    break;
                }
                NextStep::CallModel => {
                    let (n, response) = responses
                        .next()
                        .map_or((script.len(), Response::Answer), |(n, r)| (n, r.clone()));
                    let reading = reading(n, &response);
                    if let Response::Calls(calls) = &response {
                        for (i, c) in calls.iter().enumerate() {
                            if c.2 {
                                needs_approval.insert(format!("c{n}.{i}"));
                            }
                        }
                    }
                    let decision = run.after_response(ResponseFacts {
                        has_calls: reading.has_calls(),
                        unreadable: reading.correction.is_some(),
                        off_schema: false,
                    });
                    trace.push(format!(
                        "{decision:?} wants_answer={}",
                        run.machine.wants_answer()
                    ));
                    match decision {
                        Decision::RunTools => run.start_round(reading, String::new()),
                        Decision::Reprompt => {}
                        Decision::Finish => run.finish(reading.answer, false),
                        Decision::StopAtLimit => run.finish(reading.answer, true),
                    }
                }
                NextStep::CallTools => {
                    let AgentRun { machine, round, .. } = &mut run;
                    let Some(round) = round.as_mut() else { break };
                    let mut held = false;
                    for step in &mut round.steps {
                        let RoundStep::Calls { calls } = step else {
                            continue;
                        };
                        // a sub-agent's run whose calls are decided goes back down to it
                        let mut subs = std::collections::HashMap::new();
                        for c in calls.iter_mut() {
                            if matches!(c.state, CallState::Nested { .. })
                                && let CallState::Nested { run } =
                                    std::mem::replace(&mut c.state, CallState::Approved)
                            {
                                subs.insert(c.call.id.clone(), *run);
                            }
                        }
                        let mut outcomes = Vec::new();
                        let mut went_up = Vec::new();
                        for c in calls.iter() {
                            let facts = ToolFacts {
                                needs_approval: needs_approval.contains(&c.call.id),
                                ..tool(&c.call.name)
                            };
                            let p = c.plan(machine, facts, held && in_order);
                            held |= p.plan == Some(CallPlan::Hold);
                            let ran = p.plan.as_ref().and_then(|plan| {
                                let (content, ok, answer) = match plan {
                                    CallPlan::Run if c.call.name == "t4" => {
                                        match sub_agent(&c.call.id, subs.remove(&c.call.id)) {
                                            Ok(answer) => (answer, true, None),
                                            Err(sub) => {
                                                went_up.push((c.call.id.clone(), sub));
                                                return None;
                                            }
                                        }
                                    }
                                    CallPlan::Run => match c.call.name.as_str() {
                                        "t2" => ("failed".to_owned(), false, None),
                                        "t3" => ("ok".to_owned(), true, Some("from t3")),
                                        name => {
                                            (format!("{name} {}", c.call.arguments), true, None)
                                        }
                                    },
                                    CallPlan::Reuse(r) => (r.clone(), true, None),
                                    CallPlan::Reject(t) | CallPlan::Decline(t) => {
                                        (t.clone(), false, None)
                                    }
                                    _ => return None,
                                };
                                machine.call_done(p.facts, plan, &content, ok, answer);
                                Some(Outcome {
                                    content,
                                    is_error: !ok,
                                    parts: Vec::new(),
                                })
                            });
                            trace.push(format!(
                                "{} {:?} {} {:?}",
                                c.call.id,
                                p.plan,
                                p.announce,
                                ran.as_ref().map(|o| &o.content)
                            ));
                            let up = went_up.last().is_some_and(|(id, _)| *id == c.call.id);
                            held |= up;
                            outcomes.push((if up { Some(CallPlan::Hold) } else { p.plan }, ran));
                        }
                        for (c, (plan, ran)) in calls.iter_mut().zip(outcomes) {
                            c.settle(plan.as_ref(), ran);
                            if let Some(i) = went_up.iter().position(|(id, _)| *id == c.call.id) {
                                let (_, sub) = went_up.swap_remove(i);
                                c.state = CallState::Nested { run: sub };
                            }
                        }
                    }
                    if !round.is_held() {
                        let (reading, results) = run.take_round().unwrap_or_else(|| unreachable!());
                        trace.push(format!("recorded {} {results:?}", reading.content));
                    }
                }
                NextStep::Hold => {
                    for (path, c) in run.decidable_mut() {
                        if matches!(c.state, CallState::Held { .. }) {
                            let yes = *decisions.next().unwrap_or(&true);
                            trace.push(format!("{path} decided {yes}"));
                            c.state = if yes {
                                CallState::Approved
                            } else {
                                CallState::Rejected {
                                    reason: Some("no".into()),
                                }
                            };
                        }
                    }
                }
                NextStep::ToolAnswer(answer) => {
                    trace.push(format!("tool answer {answer}"));
                    let answer = run.machine.take_tool_answer().unwrap_or_default();
                    run.finish(answer, false);
                }
                NextStep::HandOff(to) => {
                    trace.push(format!("hand off to {to}"));
                    break;
                }
            }
        }
        (trace, run)
    }

    proptest! {
        #[test]
        fn a_run_stopped_and_resumed_at_every_step_goes_as_one_never_stopped(
            script in proptest::collection::vec(response(), 0..8),
            max in 1usize..5,
            corrections in any::<bool>(),
            in_order in any::<bool>(),
            approve in proptest::collection::vec(any::<bool>(), 1..4),
        ) {
            let straight = drive(&script, max, corrections, in_order, &approve, false);
            let stopped = drive(&script, max, corrections, in_order, &approve, true);
            prop_assert_eq!(&straight.0, &stopped.0);
            prop_assert_eq!(straight.1, stopped.1);
            prop_assert!(straight.0.last().is_some_and(|l| l.starts_with("done")), "{:?}", straight.0);
        }
    }
}
