//! Typed answers of a run that also calls tools ([`crate::Agent::run_as`]).
//!
//! How the answer's shape reaches the model: as a section of the system prompt (the schema and
//! the rule "tools first, then the final answer as this JSON"), and not as the request's
//! `response_format`: a schema-constrained response on every turn is what stops most models
//! calling tools (a provider's structured output turns the answer into the JSON at once). The
//! prompt section works the same in all three protocols, because each ends a run with a text
//! answer. A model whose schema leaves its tools callable
//! ([`ModelInfo::answer_schema_with_tools`](toolwright_core::ModelInfo::answer_schema_with_tools),
//! the embedded local model under its grammar) also gets the protocol's
//! [`answer_format`](crate::protocol::CallProtocol::answer_format) as the `response_format` of each
//! request, and is held to it while it decodes. That answer is
//! then read with output-control's [`Validator`] (JSON taken from prose or a code fence,
//! checked against the schema, deserialized); an answer that does not fit is sent back once
//! with what was wrong, and the run's answer after that correction either fits or fails the
//! run with [`LoopError::AnswerDoesNotFit`](crate::LoopError::AnswerDoesNotFit).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use toolwright_output_control::{ParseError, Validator};

use crate::event::{LoopError, LoopOutput};

/// The shape a run's answer must take: its JSON Schema (for the prompt) and the check of an
/// answer (schema and deserialization both, so a value that passes is one `T` accepts).
#[derive(Clone)]
pub(crate) struct AnswerShape {
    pub(crate) schema: Arc<Value>,
    check: Arc<Check>,
}

/// Whether an answer's text reads as the run's type.
type Check = dyn Fn(&str) -> Result<(), ParseError> + Send + Sync;

impl std::fmt::Debug for AnswerShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerShape")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl AnswerShape {
    /// The shape of `T`, with the validator compiled once (shared by the check in the loop
    /// and the final parse). A schema that does not compile is `T`'s fault, reported as such.
    pub(crate) fn of<T: DeserializeOwned + JsonSchema + 'static>()
    -> Result<(Self, Arc<Validator>), LoopError> {
        let schema = schemars::schema_for!(T).to_value();
        let validator = Arc::new(Validator::new(&schema).map_err(LoopError::AnswerType)?);
        let v = Arc::clone(&validator);
        let shape = Self {
            schema: Arc::new(schema),
            check: Arc::new(move |text| v.parse::<T>(text).map(drop)),
        };
        Ok((shape, validator))
    }

    /// Whether `answer` fits; else the correction the model gets.
    pub(crate) fn check(&self, answer: &str) -> Result<(), String> {
        (self.check)(answer).map_err(|e| {
            format!(
                "Your final answer does not have the required form. {} Answer again, as the system prompt says for the final answer.",
                e.for_model()
            )
        })
    }
}

/// The typed answer of a run ([`crate::Agent::run_as`]) and the run's output.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TypedOutput<T> {
    /// The answer as `T`; `None` exactly when the run stopped for approval
    /// ([`LoopOutput::pending_approval`]) — [`crate::Agent::resume_as`] goes on with it.
    pub value: Option<T>,
    /// The run's output: `answer` is the answer's text as the model wrote it.
    pub output: LoopOutput,
}

impl<T: DeserializeOwned> TypedOutput<T> {
    /// The typed output of a run's `output`: its answer read with `validator` (the one the run
    /// checked with), `None` while the run waits for approval.
    pub(crate) fn read(output: LoopOutput, validator: &Validator) -> Result<Self, LoopError> {
        if output.pending_approval.is_some() {
            return Ok(Self {
                value: None,
                output,
            });
        }
        match validator.parse::<T>(&output.answer) {
            Ok(value) => Ok(Self {
                value: Some(value),
                output,
            }),
            Err(problem) => Err(LoopError::AnswerDoesNotFit {
                answer: output.answer,
                problem,
            }),
        }
    }
}
