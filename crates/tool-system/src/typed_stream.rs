//! A typed answer from a streamed run ([`crate::Agent::run_stream_as`]).

use std::marker::PhantomData;
use std::sync::Arc;

use futures::Stream;
use serde::de::DeserializeOwned;
use toolwright_output_control::Validator;

use crate::answer::TypedOutput;
use crate::event::{LoopError, LoopEvent, LoopOutput};
use crate::runner::LoopStream;

/// The events of a run started with [`crate::Agent::run_stream_as`]: every [`LoopEvent`] as
/// [`LoopStream`] gives it, and [`read`](Self::read) to take the answer of the last one,
/// [`LoopEvent::Finished`], as a `T`. Dropping it cancels the run.
pub struct TypedLoopStream<T> {
    events: LoopStream,
    validator: Arc<Validator>,
    answer: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for TypedLoopStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedLoopStream")
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

impl<T: DeserializeOwned> TypedLoopStream<T> {
    pub(crate) fn new(events: LoopStream, validator: Arc<Validator>) -> Self {
        Self {
            events,
            validator,
            answer: PhantomData,
        }
    }

    /// The typed output of the run's [`LoopEvent::Finished`] output, read with the schema the
    /// run checked its answer with: `value` is `None` while the run waits for approval;
    /// [`LoopError::AnswerDoesNotFit`] when the answer is not a `T`.
    ///
    /// # Errors
    /// [`LoopError::AnswerDoesNotFit`], as [`crate::Agent::run_as`] gives it.
    pub fn read(&self, output: LoopOutput) -> Result<TypedOutput<T>, LoopError> {
        TypedOutput::read(output, &self.validator)
    }
}

impl<T> Stream for TypedLoopStream<T> {
    type Item = LoopEvent;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<LoopEvent>> {
        std::pin::Pin::new(&mut self.events).poll_next(cx)
    }
}
