//! The loop's decisions as a plain state machine with no I/O (like rig's `AgentRun`): the
//! runner asks it what to do next and does the I/O.

/// Default round limit (001): 5 model calls.
pub const DEFAULT_MAX_ITERATIONS: usize = 5;

/// What the runner does after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Run the calls, record the round, call the model again.
    RunTools,
    /// The answer could not be read: record it with the correction, call the model again.
    Reprompt,
    /// The response is the answer: record it and stop.
    Finish,
    /// The response asks for tools but the limit is reached: record the calls with "not run"
    /// results, stop, return this response, warn.
    StopAtLimit,
}

/// What the machine needs to know about a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseFacts {
    /// The response asks for at least one call.
    pub has_calls: bool,
    /// The response could not be read and a correction is available.
    pub needs_correction: bool,
}

/// The loop's state: how many model calls were made and whether a correction was just sent.
///
/// ```
/// use tool_system::{Decision, LoopMachine, ResponseFacts};
/// let mut m = LoopMachine::new(2);
/// m.model_called();
/// assert_eq!(m.after_response(ResponseFacts { has_calls: true, ..Default::default() }), Decision::RunTools);
/// m.model_called();
/// assert_eq!(m.after_response(ResponseFacts { has_calls: true, ..Default::default() }), Decision::StopAtLimit);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopMachine {
    max_iterations: usize,
    iterations: usize,
    corrected: bool,
}

impl LoopMachine {
    /// A machine allowing `max_iterations` model calls (at least 1).
    pub fn new(max_iterations: usize) -> Self {
        Self {
            max_iterations: max_iterations.max(1),
            iterations: 0,
            corrected: false,
        }
    }

    /// Records a model call.
    pub fn model_called(&mut self) {
        self.iterations += 1;
    }

    /// Model calls so far.
    pub fn iterations(&self) -> usize {
        self.iterations
    }

    /// The limit.
    pub fn max_iterations(&self) -> usize {
        self.max_iterations
    }

    /// Decides what follows a response.
    ///
    /// * calls, under the limit → [`Decision::RunTools`]; at the limit → [`Decision::StopAtLimit`];
    /// * no calls and an unreadable answer → one [`Decision::Reprompt`] (if a model call is
    ///   left), and a second unreadable answer in a row is taken as the plain answer (T9);
    /// * otherwise → [`Decision::Finish`].
    pub fn after_response(&mut self, facts: ResponseFacts) -> Decision {
        if facts.has_calls {
            self.corrected = false;
            return if self.iterations >= self.max_iterations {
                Decision::StopAtLimit
            } else {
                Decision::RunTools
            };
        }
        if facts.needs_correction && !self.corrected && self.iterations < self.max_iterations {
            self.corrected = true;
            return Decision::Reprompt;
        }
        Decision::Finish
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALLS: ResponseFacts = ResponseFacts {
        has_calls: true,
        needs_correction: false,
    };
    const TEXT: ResponseFacts = ResponseFacts {
        has_calls: false,
        needs_correction: false,
    };
    const BAD: ResponseFacts = ResponseFacts {
        has_calls: false,
        needs_correction: true,
    };

    #[test]
    fn t5_default_max_iterations_is_5_and_limit_stops() {
        assert_eq!(DEFAULT_MAX_ITERATIONS, 5);
        let mut m = LoopMachine::new(DEFAULT_MAX_ITERATIONS);
        for _ in 0..4 {
            m.model_called();
            assert_eq!(m.after_response(CALLS), Decision::RunTools);
        }
        m.model_called();
        assert_eq!(m.after_response(CALLS), Decision::StopAtLimit);
        assert_eq!(m.iterations(), 5);
    }

    #[test]
    fn t5_text_answer_finishes() {
        let mut m = LoopMachine::new(5);
        m.model_called();
        assert_eq!(m.after_response(TEXT), Decision::Finish);
    }

    #[test]
    fn t6_unreadable_answer_reprompts_once_then_is_plain_answer() {
        let mut m = LoopMachine::new(5);
        m.model_called();
        assert_eq!(m.after_response(BAD), Decision::Reprompt);
        m.model_called();
        assert_eq!(m.after_response(BAD), Decision::Finish);
    }

    #[test]
    fn t6_correction_allowed_again_after_a_good_round() {
        let mut m = LoopMachine::new(5);
        m.model_called();
        assert_eq!(m.after_response(BAD), Decision::Reprompt);
        m.model_called();
        assert_eq!(m.after_response(CALLS), Decision::RunTools);
        m.model_called();
        assert_eq!(m.after_response(BAD), Decision::Reprompt);
    }

    #[test]
    fn t6_no_reprompt_when_no_model_call_is_left() {
        let mut m = LoopMachine::new(1);
        m.model_called();
        assert_eq!(m.after_response(BAD), Decision::Finish);
        assert_eq!(LoopMachine::new(0).max_iterations(), 1);
    }
}
