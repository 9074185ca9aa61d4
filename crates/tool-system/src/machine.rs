//! The loop's decisions as a plain state machine with no I/O (like rig's `AgentRun`): the
//! runner tells it what happened and asks it what to do next; every rule of the loop — run the
//! tools, answer a repeated call from its earlier result, hold a call for a person's approval,
//! ask for a correction, stop at the limit — is decided here and unit-tested here.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default limit of tool rounds in one run (001's `max_iterations`): 5.
pub const DEFAULT_MAX_ITERATIONS: usize = 5;

/// What the runner does after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Run the calls (as [`LoopMachine::plan_call`] says), record the round, call the model again.
    RunTools,
    /// The answer could not be read and corrections are on: record it with the correction,
    /// call the model again.
    Reprompt,
    /// The response is the answer: record it and stop.
    Finish,
    /// The response asks for tools but `max_iterations` rounds of tools already ran: record
    /// the calls with "not run" results, stop, return this response's text, warn (001).
    StopAtLimit,
}

/// What the machine needs to know about a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseFacts {
    /// The response asks for at least one call.
    pub has_calls: bool,
    /// The response could not be read as the protocol expects (a broken JSON decision).
    pub unreadable: bool,
    /// The run wants a typed answer and this answer (a response without calls) does not fit.
    pub off_schema: bool,
}

/// What to do with one call of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallPlan {
    /// Dispatch it.
    Run,
    /// Do not run it: the model gets this error text (arguments that are not JSON, G5).
    Reject(String),
    /// Do not run it: the tool declared itself idempotent and ran with these arguments
    /// earlier in this run; the model gets the earlier result again.
    Reuse(String),
    /// Do not run it yet: it needs a person's approval. The run stops with a pending approval
    /// once the calls that can run have run.
    Hold,
    /// Do not run it yet: an earlier call of this round is held and the protocol runs calls in
    /// order, so this one runs (without approval of its own) after the held one is decided.
    Wait,
    /// Do not run it: the person declined it, or it can no longer be decided; the model gets
    /// this text as the call's error result.
    Decline(String),
}

/// One call as the machine sees it.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// Tool name.
    pub name: &'a str,
    /// Parsed arguments.
    pub arguments: &'a Value,
    /// Why the call cannot run as written, if it cannot (G5 text).
    pub invalid: Option<&'a str>,
    /// Whether the tool declared that a repeat with the same arguments gives the same result
    /// and changes nothing ([`toolwright_core::Tool::idempotent`]).
    pub idempotent: bool,
    /// Whether the call needs a person's approval ([`toolwright_core::Tool::needs_approval`], the
    /// provider's, or the agent's approval policy).
    pub needs_approval: bool,
    /// Whether an earlier call of this round is held and the protocol runs calls in order.
    pub after_held: bool,
}

/// One call of a step as planned, handed to the runner to announce, run and record — the same
/// way for a response's calls ([`LoopMachine::plan_call`]) and for a held round's calls once
/// decided ([`LoopMachine::plan_decided`]).
#[derive(Debug, Clone)]
pub(crate) struct Planned<'a> {
    /// The call as the machine sees it (told again by [`LoopMachine::call_done`]).
    pub(crate) facts: CallFacts<'a>,
    /// What to do; `None` for a call that has its result already (nothing runs).
    pub(crate) plan: Option<CallPlan>,
    /// Whether the call is shown as started (`LoopEvent::ToolCallStarted`) before it runs.
    pub(crate) announce: bool,
}

/// The loop's state: each response's facts in, the next step out, no I/O (the table tests
/// below walk it through every case). Serializable whole, as part of [`crate::run::AgentRun`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopMachine {
    max_iterations: usize,
    corrections: bool,
    model_calls: usize,
    tool_rounds: usize,
    corrected: bool,
    /// The one correction round of a typed answer was used.
    answer_corrected: bool,
    /// Results of successful idempotent calls of this run, by name and arguments.
    #[serde(with = "reused_results")]
    idempotent_results: HashMap<(String, String), String>,
    /// A call was answered from an earlier result in the last round.
    reused: bool,
    /// The turn's answer a tool gave in the last round ([`toolwright_core::Tool::final_answer`]).
    tool_answer: Option<String>,
    /// The agent the last round handed the conversation to (its handoff tool's name).
    handoff: Option<String>,
}

impl LoopMachine {
    /// A machine allowing `max_iterations` rounds of tool calls (at least 1), without
    /// correction rounds.
    pub fn new(max_iterations: usize) -> Self {
        Self {
            max_iterations: max_iterations.max(1),
            corrections: false,
            model_calls: 0,
            tool_rounds: 0,
            corrected: false,
            answer_corrected: false,
            idempotent_results: HashMap::new(),
            reused: false,
            tool_answer: None,
            handoff: None,
        }
    }

    /// Turns the correction round on: an unreadable answer is sent back once with a request to
    /// fix it, instead of being taken as the plain answer (001's fallback default).
    pub fn with_corrections(mut self, on: bool) -> Self {
        self.corrections = on;
        self
    }

    /// The machine of a run held in the first stored format, which kept only the counts of
    /// model calls and tool rounds: everything else starts afresh (a repeat of an idempotent
    /// call runs again).
    pub(crate) fn with_counts(mut self, model_calls: usize, tool_rounds: usize) -> Self {
        self.model_calls = model_calls;
        self.tool_rounds = tool_rounds;
        self
    }

    /// The limits of the agent that goes on with the run (a run resumed by an agent built
    /// with other limits follows them); its counters and flags stay.
    pub(crate) fn with_limits(mut self, max_iterations: usize, corrections: bool) -> Self {
        self.max_iterations = max_iterations.max(1);
        self.corrections = corrections;
        self
    }

    /// The turn's answer a tool of the last round gave, not taken yet.
    pub(crate) fn tool_answer(&self) -> Option<&str> {
        self.tool_answer.as_deref()
    }

    /// The agent the last round handed the conversation to, not taken yet.
    pub(crate) fn handoff(&self) -> Option<&str> {
        self.handoff.as_deref()
    }

    /// Model calls so far.
    pub fn model_calls(&self) -> usize {
        self.model_calls
    }

    /// Tool rounds run so far.
    pub fn tool_rounds(&self) -> usize {
        self.tool_rounds
    }

    /// The limit of tool rounds.
    pub fn max_iterations(&self) -> usize {
        self.max_iterations
    }

    /// Whether the next request should ask for an answer (`tool_choice: none`): the last round
    /// repeated an idempotent call the model already had the result of, so a further call
    /// cannot bring anything new.
    pub fn wants_answer(&self) -> bool {
        self.reused
    }

    /// After a round ran: the answer a tool of that round gave with its result (the first
    /// one, in call order), which ends the turn — the runner records it as the assistant's
    /// reply and returns it without calling the model again. `None`: call the model.
    /// A call that was reused, rejected or declined gives no answer.
    pub fn take_tool_answer(&mut self) -> Option<String> {
        self.tool_answer.take()
    }

    /// A handoff call of the round ran: once the round is recorded, the conversation goes to
    /// that agent (the first handoff of a round wins; it comes before a tool's answer).
    pub fn hand_off(&mut self, to: &str) {
        if self.handoff.is_none() {
            self.handoff = Some(to.to_owned());
        }
    }

    /// After a round ran: the agent to hand the conversation to, if a handoff call ran.
    pub fn take_handoff(&mut self) -> Option<String> {
        self.handoff.take()
    }

    /// A response arrived: decides what follows it.
    ///
    /// * calls, fewer than `max_iterations` rounds run → [`Decision::RunTools`], else
    ///   [`Decision::StopAtLimit`];
    /// * no calls and an unreadable answer → with corrections on, one [`Decision::Reprompt`]
    ///   (a second unreadable answer in a row is the plain answer); with them off (the
    ///   default), the plain answer (001: no error, no extra model call);
    /// * no calls and an answer that does not fit the run's type → one [`Decision::Reprompt`]
    ///   in the whole run, whatever the corrections setting; after it, [`Decision::Finish`]
    ///   (the runner's caller then reports the answer that does not fit);
    /// * otherwise → [`Decision::Finish`].
    pub fn after_response(&mut self, facts: ResponseFacts) -> Decision {
        self.model_calls += 1;
        self.reused = false;
        if facts.has_calls {
            self.corrected = false;
            if self.tool_rounds >= self.max_iterations {
                return Decision::StopAtLimit;
            }
            self.tool_rounds += 1;
            return Decision::RunTools;
        }
        if facts.off_schema {
            if self.answer_corrected {
                return Decision::Finish;
            }
            self.answer_corrected = true;
            return Decision::Reprompt;
        }
        if facts.unreadable
            && self.corrections
            && !self.corrected
            && self.model_calls <= self.max_iterations
        {
            self.corrected = true;
            return Decision::Reprompt;
        }
        Decision::Finish
    }

    /// What to do with one call of a round being run:
    ///
    /// * arguments that are not JSON → [`CallPlan::Reject`] (such a call is never put to a
    ///   person: it cannot run as written);
    /// * a repeat of an idempotent call that ran → [`CallPlan::Reuse`] (nothing runs);
    /// * a call that needs approval → [`CallPlan::Hold`];
    /// * a call after a held one, in a protocol that runs calls in order → [`CallPlan::Wait`];
    /// * otherwise → [`CallPlan::Run`].
    pub fn plan_call(&self, call: CallFacts<'_>) -> CallPlan {
        if let Some(why) = call.invalid {
            return CallPlan::Reject(why.to_owned());
        }
        if call.idempotent
            && let Some(earlier) = self.idempotent_results.get(&key(call.name, call.arguments))
        {
            return CallPlan::Reuse(earlier.clone());
        }
        if call.needs_approval {
            return CallPlan::Hold;
        }
        if call.after_held {
            return CallPlan::Wait;
        }
        CallPlan::Run
    }

    /// What to do with a held call once the person decided: approved → [`CallPlan::Run`];
    /// rejected → [`CallPlan::Decline`] with a text telling the model not to retry, quoting
    /// the person's reason when there is one.
    pub fn plan_decided(&self, approved: bool, reason: Option<&str>) -> CallPlan {
        if approved {
            return CallPlan::Run;
        }
        let reason = reason.map(|r| r.trim().trim_end_matches('.').trim_end());
        CallPlan::Decline(match reason.filter(|r| !r.is_empty()) {
            Some(r) => {
                format!("The user declined this call: {r}. Do not retry it unless the user asks.")
            }
            None => "The user declined this call. Do not retry it unless the user asks.".into(),
        })
    }

    /// What a call of a round that was held gets when the round is closed without running it
    /// (the person sent a new message instead of deciding): it never runs now. `maybe_ran` is
    /// for an approved call whose run was cut off (the process stopped while it ran): whether
    /// it took effect is unknown, and the model is told so rather than told it did not run.
    pub fn plan_abandoned(&self, maybe_ran: bool) -> CallPlan {
        CallPlan::Decline(if maybe_ran {
            "This call was approved, but the run stopped while it ran: whether it took effect is unknown. Check before calling it again.".into()
        } else {
            "Not run: the user sent a new message instead of deciding on this call. Do not retry it unless the user asks.".into()
        })
    }

    /// Records how a planned call ended: a successful idempotent call's result is kept for
    /// repeats; a reused one makes the next request ask for an answer; `answer` is the turn's
    /// answer the tool gave with a successful result ([`toolwright_core::Tool::final_answer`]) — the
    /// first one of a round is kept for [`LoopMachine::take_tool_answer`].
    pub fn call_done(
        &mut self,
        call: CallFacts<'_>,
        plan: &CallPlan,
        content: &str,
        ok: bool,
        answer: Option<&str>,
    ) {
        if let (CallPlan::Run, true, Some(a), None) = (plan, ok, answer, &self.tool_answer) {
            self.tool_answer = Some(a.to_owned());
        }
        match plan {
            CallPlan::Reuse(_) => self.reused = true,
            CallPlan::Run if ok && call.idempotent => {
                self.idempotent_results
                    .insert(key(call.name, call.arguments), content.to_owned());
            }
            _ => {}
        }
    }
}

fn key(name: &str, arguments: &Value) -> (String, String) {
    // serde_json's maps are sorted, so equal arguments print equally.
    (name.to_owned(), arguments.to_string())
}

/// The kept results of idempotent calls as a list of `{tool, arguments, result}` (a map keyed
/// by a pair is no JSON object), sorted so that equal machines write equal text.
mod reused_results {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Kept<T> {
        tool: T,
        arguments: T,
        result: T,
    }

    pub(super) fn serialize<S: Serializer>(
        map: &HashMap<(String, String), String>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut list: Vec<Kept<&str>> = map
            .iter()
            .map(|((tool, arguments), result)| Kept {
                tool: tool.as_str(),
                arguments: arguments.as_str(),
                result: result.as_str(),
            })
            .collect();
        list.sort_by(|a, b| (a.tool, a.arguments).cmp(&(b.tool, b.arguments)));
        list.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<HashMap<(String, String), String>, D::Error> {
        let list = Vec::<Kept<String>>::deserialize(d)?;
        Ok(list
            .into_iter()
            .map(|k| ((k.tool, k.arguments), k.result))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CALLS: ResponseFacts = ResponseFacts {
        has_calls: true,
        unreadable: false,
        off_schema: false,
    };
    const TEXT: ResponseFacts = ResponseFacts {
        has_calls: false,
        unreadable: false,
        off_schema: false,
    };
    const BAD: ResponseFacts = ResponseFacts {
        has_calls: false,
        unreadable: true,
        off_schema: false,
    };
    const OFF_SCHEMA: ResponseFacts = ResponseFacts {
        has_calls: false,
        unreadable: false,
        off_schema: true,
    };

    #[test]
    fn an_answer_off_its_type_is_corrected_once_per_run_even_after_tool_rounds() {
        let mut m = LoopMachine::new(5);
        assert_eq!(m.after_response(OFF_SCHEMA), Decision::Reprompt);
        assert_eq!(m.after_response(CALLS), Decision::RunTools);
        assert_eq!(m.after_response(OFF_SCHEMA), Decision::Finish);
        // an unreadable answer that is also off the type takes the typed path
        let mut m = LoopMachine::new(5).with_corrections(true);
        let both = ResponseFacts {
            unreadable: true,
            ..OFF_SCHEMA
        };
        assert_eq!(m.after_response(both), Decision::Reprompt);
        assert_eq!(m.after_response(both), Decision::Finish);
    }

    fn call<'a>(args: &'a Value, idempotent: bool) -> CallFacts<'a> {
        CallFacts {
            name: "get_weather",
            arguments: args,
            invalid: None,
            idempotent,
            needs_approval: false,
            after_held: false,
        }
    }

    #[test]
    fn t5_five_rounds_of_tools_run_then_the_limit_stops() {
        assert_eq!(DEFAULT_MAX_ITERATIONS, 5);
        let mut m = LoopMachine::new(DEFAULT_MAX_ITERATIONS);
        for round in 1..=5 {
            assert_eq!(m.after_response(CALLS), Decision::RunTools, "round {round}");
        }
        assert_eq!(m.after_response(CALLS), Decision::StopAtLimit);
        assert_eq!((m.tool_rounds(), m.model_calls()), (5, 6));
    }

    #[test]
    fn t5_text_answer_finishes() {
        let mut m = LoopMachine::new(5);
        assert_eq!(m.after_response(TEXT), Decision::Finish);
        assert_eq!(m.model_calls(), 1);
    }

    #[test]
    fn t5_text_after_the_last_round_finishes_normally() {
        let mut m = LoopMachine::new(1);
        assert_eq!(m.after_response(CALLS), Decision::RunTools);
        assert_eq!(m.after_response(TEXT), Decision::Finish);
        assert_eq!(LoopMachine::new(0).max_iterations(), 1);
    }

    #[test]
    fn t9_unreadable_answer_is_the_plain_answer_by_default() {
        let mut m = LoopMachine::new(5);
        assert_eq!(m.after_response(BAD), Decision::Finish);
        assert_eq!(m.model_calls(), 1);
    }

    #[test]
    fn t6_with_corrections_an_unreadable_answer_reprompts_once() {
        let mut m = LoopMachine::new(5).with_corrections(true);
        assert_eq!(m.after_response(BAD), Decision::Reprompt);
        assert_eq!(m.after_response(BAD), Decision::Finish);
    }

    #[test]
    fn t6_correction_allowed_again_after_a_good_round() {
        let mut m = LoopMachine::new(5).with_corrections(true);
        assert_eq!(m.after_response(BAD), Decision::Reprompt);
        assert_eq!(m.after_response(CALLS), Decision::RunTools);
        assert_eq!(m.after_response(BAD), Decision::Reprompt);
    }

    #[test]
    fn t6_no_reprompt_past_the_limit() {
        let mut m = LoopMachine::new(1).with_corrections(true);
        assert_eq!(m.after_response(CALLS), Decision::RunTools);
        assert_eq!(m.after_response(BAD), Decision::Finish);
    }

    #[test]
    fn g5_invalid_call_is_rejected_with_its_text() {
        let m = LoopMachine::new(5);
        let args = json!("{city:");
        let facts = CallFacts {
            invalid: Some("Invalid JSON arguments for tool `get_weather`"),
            ..call(&args, false)
        };
        assert_eq!(
            m.plan_call(facts),
            CallPlan::Reject("Invalid JSON arguments for tool `get_weather`".into())
        );
    }

    #[test]
    fn t5_repeated_calls_run_again_by_default() {
        let mut m = LoopMachine::new(5);
        let args = json!({"city": "Beijing"});
        m.after_response(CALLS);
        assert_eq!(m.plan_call(call(&args, false)), CallPlan::Run);
        m.call_done(call(&args, false), &CallPlan::Run, "sunny", true, None);
        m.after_response(CALLS);
        assert_eq!(m.plan_call(call(&args, false)), CallPlan::Run);
        assert!(!m.wants_answer());
    }

    #[test]
    fn t5_a_repeated_idempotent_call_reuses_its_result_and_asks_for_an_answer() {
        let mut m = LoopMachine::new(5);
        let args = json!({"city": "Beijing"});
        m.after_response(CALLS);
        m.call_done(call(&args, true), &CallPlan::Run, "sunny", true, None);
        assert!(!m.wants_answer());
        m.after_response(CALLS);
        let plan = m.plan_call(call(&args, true));
        assert_eq!(plan, CallPlan::Reuse("sunny".into()));
        m.call_done(call(&args, true), &plan, "sunny", true, None);
        assert!(m.wants_answer());
        // other arguments run
        assert_eq!(
            m.plan_call(call(&json!({"city": "Paris"}), true)),
            CallPlan::Run
        );
        // the request after the answer-request round is normal again
        m.after_response(CALLS);
        assert!(!m.wants_answer());
    }

    #[test]
    fn t5_a_tool_answer_ends_the_turn_once_first_one_wins() {
        let args = json!({"city": "Paris"});
        let mut m = LoopMachine::new(5);
        assert_eq!(m.after_response(CALLS), Decision::RunTools);
        m.call_done(
            call(&args, false),
            &CallPlan::Run,
            "r1",
            true,
            Some("first"),
        );
        m.call_done(
            call(&args, false),
            &CallPlan::Run,
            "r2",
            true,
            Some("second"),
        );
        assert_eq!(m.take_tool_answer().as_deref(), Some("first"));
        assert_eq!(m.take_tool_answer(), None, "taken once");
    }

    #[test]
    fn t5_no_tool_answer_from_a_failed_reused_or_declined_call() {
        let args = json!({"city": "Paris"});
        let mut m = LoopMachine::new(5);
        m.call_done(call(&args, false), &CallPlan::Run, "err", false, Some("a"));
        m.call_done(
            call(&args, true),
            &CallPlan::Reuse("r".into()),
            "r",
            true,
            Some("b"),
        );
        m.call_done(
            call(&args, false),
            &CallPlan::Decline("no".into()),
            "no",
            true,
            Some("c"),
        );
        m.call_done(call(&args, false), &CallPlan::Run, "plain", true, None);
        assert_eq!(m.take_tool_answer(), None);
    }

    #[test]
    fn t5_a_failed_idempotent_call_is_not_reused() {
        let mut m = LoopMachine::new(5);
        let args = json!({"city": "Atlantis"});
        m.after_response(CALLS);
        m.call_done(call(&args, true), &CallPlan::Run, "not found", false, None);
        assert_eq!(m.plan_call(call(&args, true)), CallPlan::Run);
    }

    #[test]
    fn approval_plan_table() {
        let args = json!({"city": "Beijing"});
        let mut ran = LoopMachine::new(5);
        ran.call_done(call(&args, true), &CallPlan::Run, "sunny", true, None);
        let why = "Invalid JSON arguments for tool `get_weather`";
        let invalid = Some(why);
        // (invalid, idempotent, needs_approval, after_held) -> plan, after an idempotent call ran
        type Row<'a> = (Option<&'a str>, bool, bool, bool, CallPlan);
        let rows: Vec<Row<'_>> = vec![
            (None, false, false, false, CallPlan::Run),
            (None, false, true, false, CallPlan::Hold),
            (None, false, true, true, CallPlan::Hold),
            (None, false, false, true, CallPlan::Wait),
            // a call that cannot run is answered at once, never put to a person
            (invalid, false, true, false, CallPlan::Reject(why.into())),
            (invalid, false, false, true, CallPlan::Reject(why.into())),
            // a repeat of an approved idempotent call runs nothing: its result is reused
            (None, true, true, false, CallPlan::Reuse("sunny".into())),
            (None, true, false, true, CallPlan::Reuse("sunny".into())),
        ];
        for (i, (invalid, idempotent, needs_approval, after_held, want)) in
            rows.into_iter().enumerate()
        {
            let facts = CallFacts {
                invalid,
                needs_approval,
                after_held,
                ..call(&args, idempotent)
            };
            assert_eq!(ran.plan_call(facts), want, "row {i}");
        }
    }

    #[test]
    fn approval_decisions_table() {
        let m = LoopMachine::new(5);
        let declined = |t: &str| CallPlan::Decline(t.into());
        let rows = [
            (true, None, CallPlan::Run),
            (true, Some("ignored"), CallPlan::Run),
            (
                false,
                Some("too expensive"),
                declined(
                    "The user declined this call: too expensive. Do not retry it unless the user asks.",
                ),
            ),
            (
                false,
                None,
                declined("The user declined this call. Do not retry it unless the user asks."),
            ),
            (
                false,
                Some("Too expensive. "),
                declined(
                    "The user declined this call: Too expensive. Do not retry it unless the user asks.",
                ),
            ),
            (
                false,
                Some(" ... "),
                declined("The user declined this call. Do not retry it unless the user asks."),
            ),
            (
                false,
                Some("  "),
                declined("The user declined this call. Do not retry it unless the user asks."),
            ),
        ];
        for (approved, reason, want) in rows {
            assert_eq!(
                m.plan_decided(approved, reason),
                want,
                "{approved} {reason:?}"
            );
        }
        let CallPlan::Decline(unknown) = m.plan_abandoned(true) else {
            panic!("abandoned calls are declined")
        };
        assert!(unknown.contains("unknown"), "{unknown}");
        let CallPlan::Decline(not_run) = m.plan_abandoned(false) else {
            panic!("abandoned calls are declined")
        };
        assert!(not_run.starts_with("Not run"), "{not_run}");
    }

    #[test]
    fn approval_a_machine_migrated_from_its_counts_keeps_counting_rounds() {
        let mut m = LoopMachine::new(2).with_counts(2, 2);
        assert_eq!((m.model_calls(), m.tool_rounds()), (2, 2));
        assert_eq!(m.after_response(CALLS), Decision::StopAtLimit);
        let mut m = LoopMachine::new(2).with_counts(1, 1);
        assert_eq!(m.after_response(CALLS), Decision::RunTools);
        assert_eq!(m.model_calls(), 2);
    }
}
