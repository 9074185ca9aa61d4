//! A conversation [`Summary`]: what a model wrote for the oldest history messages, which the
//! [`ContextBuilder`](crate::ContextBuilder) puts in a request instead of them and the
//! [`Compactor`](crate::Compactor) makes and stores.

use serde::{Deserialize, Serialize};

/// The session state slot (see [`SessionStore::get_state`](crate::SessionStore::get_state)) that holds a session's summary as
/// JSON.
pub const SUMMARY_STATE_KEY: &str = "context.summary";

/// A conversation summary: the text a model wrote for the history messages `0..covers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// How many leading history messages it covers.
    pub covers: usize,
    /// The summary text.
    pub text: String,
}

impl Summary {
    /// A summary of the history messages `0..covers`.
    pub fn new(covers: usize, text: impl Into<String>) -> Self {
        Self {
            covers,
            text: text.into(),
        }
    }
}
