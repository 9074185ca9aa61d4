//! What one connection of the server keeps between its requests: the log level its client
//! asked for, and its key among the resource watchers (forgotten when the connection ends).

// Logging is deprecated from the 2026-07-28 revision on (SEP-2577); clients of the revisions
// before it still set a level.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rmcp::model::LoggingLevel;

use crate::offers::Subscriptions;

fn rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// What one connection (a stdio client, an HTTP session, a stateless request) keeps: the
/// log level its client asked for and its key among the resource watchers.
pub(crate) struct SessionState {
    pub(crate) key: u64,
    min_level: AtomicU8,
    subscriptions: Arc<Subscriptions>,
}

impl SessionState {
    pub(crate) fn new(subscriptions: Arc<Subscriptions>) -> Self {
        Self {
            key: subscriptions.session_key(),
            // until the client sets a level: info and above
            min_level: AtomicU8::new(rank(LoggingLevel::Info)),
            subscriptions,
        }
    }

    /// The client asked for log lines of level `l` and above.
    pub(crate) fn set_level(&self, l: LoggingLevel) {
        self.min_level.store(rank(l), Ordering::Relaxed);
    }

    /// Whether a log line of level `l` goes to the client.
    pub(crate) fn logs(&self, l: LoggingLevel) -> bool {
        rank(l) >= self.min_level.load(Ordering::Relaxed)
    }
}

/// The session ended: it watches nothing any more.
impl Drop for SessionState {
    fn drop(&mut self) {
        self.subscriptions.forget(self.key);
    }
}
