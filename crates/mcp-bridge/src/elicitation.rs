//! MCP elicitation (#27): a server asks the person a question in the middle of a tool call. The
//! bridge declares the capability (form and URL modes) and hands every question to the
//! [`Elicitor`] the application attached — the chat panel shows a form or buttons — then sends
//! the person's accept / decline / cancel back. Both ways servers ask arrive here: the
//! server-initiated `elicitation/create` request of the 2025-11-25 revision, and the
//! `input_required` result of a `tools/call` in the 2026-07-28 revision, which the bridge answers
//! by calling again with `inputResponses` (`execution.rs`).
//!
//! Never a hang: with no elicitor attached the bridge declines (and logs why); an answer that
//! takes longer than the limit ([`McpBridge::set_elicitor`]) is a cancel. URL mode hands the URL
//! over as text: the bridge never opens it, and the UI must show it as a link the person opens.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use mcp_bridge::elicitation::{ElicitationAnswer, ElicitationRequest, Elicitor};
//! struct AlwaysDecline;
//! #[async_trait::async_trait]
//! impl Elicitor for AlwaysDecline {
//!     async fn elicit(&self, _request: ElicitationRequest) -> ElicitationAnswer {
//!         ElicitationAnswer::Decline
//!     }
//! }
//! let bridge = mcp_bridge::McpBridge::new();
//! bridge.set_elicitor(Arc::new(AlwaysDecline), Duration::from_secs(300));
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::Value;

use crate::bridge::McpBridge;
use crate::connection::lock;

/// How long a question waits for the person by default.
pub const DEFAULT_ELICITATION_TIMEOUT: Duration = Duration::from_secs(600);

/// A server's question for the person.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ElicitationRequest {
    /// The MCP service that asks.
    pub service: String,
    /// The session whose tool call the question belongs to, when the bridge can tell (one
    /// session has calls running on that service); `None` otherwise.
    pub session: Option<String>,
    /// The server's message to the person (show it as text, never as HTML).
    pub message: String,
    /// What is asked.
    pub mode: ElicitationMode,
}

/// What a question asks for.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ElicitationMode {
    /// A form: a JSON Schema object of primitive fields (strings, numbers, booleans, enums).
    Form {
        /// The requested schema.
        schema: Value,
    },
    /// A page the person opens themselves (never opened for them).
    Url {
        /// The page.
        url: String,
    },
}

/// The person's answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ElicitationAnswer {
    /// Accepted, with the form's values (an object; `{}` for URL mode).
    Accept(Value),
    /// Said no.
    Decline,
    /// Dismissed without choosing.
    Cancel,
}

/// Where questions go: the application's UI (the chat panel), or anything else that can ask a
/// person.
#[async_trait::async_trait]
pub trait Elicitor: Send + Sync {
    /// Asks the person; the bridge cancels the question after its time limit.
    async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer;
}

/// The bridge-wide state of elicitation: the attached elicitor and its time limit, and which
/// sessions have calls running on each service.
pub(crate) struct ElicitationHub {
    elicitor: Mutex<Option<(Arc<dyn Elicitor>, Duration)>>,
    in_flight: Mutex<HashMap<String, Vec<Option<String>>>>,
}

impl ElicitationHub {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            elicitor: Mutex::new(None),
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// Marks a call of `session` running on `service` until the guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>, service: &str, session: Option<&str>) -> InFlight {
        lock(&self.in_flight)
            .entry(service.to_owned())
            .or_default()
            .push(session.map(str::to_owned));
        InFlight {
            hub: self.clone(),
            service: service.to_owned(),
            session: session.map(str::to_owned),
        }
    }

    /// The session a question of `service` belongs to: the one session with calls running
    /// there, else `None`.
    fn session_of(&self, service: &str) -> Option<String> {
        let map = lock(&self.in_flight);
        let calls = map.get(service)?;
        let first = calls.first()?.clone()?;
        calls
            .iter()
            .all(|s| s.as_deref() == Some(first.as_str()))
            .then_some(first)
    }

    /// Asks the attached elicitor, within its time limit; declines when none is attached.
    pub(crate) async fn ask(&self, service: &str, params: ElicitRequestParams) -> ElicitResult {
        let Some((elicitor, limit)) = lock(&self.elicitor).clone() else {
            tracing::warn!(service = %service, "MCP elicitation declined: no UI is attached to answer it (McpBridge::set_elicitor)");
            return ElicitResult::new(ElicitationAction::Decline);
        };
        let (message, mode) = match params {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => (
                message,
                ElicitationMode::Form {
                    schema: serde_json::to_value(requested_schema).unwrap_or(Value::Null),
                },
            ),
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                (message, ElicitationMode::Url { url })
            }
            other => {
                tracing::warn!(service = %service, "MCP elicitation of an unknown kind declined: {other:?}");
                return ElicitResult::new(ElicitationAction::Decline);
            }
        };
        let request = ElicitationRequest {
            service: service.to_owned(),
            session: self.session_of(service),
            message,
            mode,
        };
        match tokio::time::timeout(limit, elicitor.elicit(request)).await {
            Ok(ElicitationAnswer::Accept(content)) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(content)
            }
            Ok(ElicitationAnswer::Decline) => ElicitResult::new(ElicitationAction::Decline),
            Ok(ElicitationAnswer::Cancel) => ElicitResult::new(ElicitationAction::Cancel),
            Err(_) => {
                tracing::warn!(service = %service, "MCP elicitation cancelled: no answer within {} s", limit.as_secs());
                ElicitResult::new(ElicitationAction::Cancel)
            }
        }
    }
}

/// A call running on a service, for [`ElicitationHub::session_of`].
pub(crate) struct InFlight {
    hub: Arc<ElicitationHub>,
    service: String,
    session: Option<String>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut map = lock(&self.hub.in_flight);
        if let Some(calls) = map.get_mut(&self.service) {
            if let Some(i) = calls.iter().position(|s| *s == self.session) {
                calls.swap_remove(i);
            }
            if calls.is_empty() {
                map.remove(&self.service);
            }
        }
    }
}

impl McpBridge {
    /// Attaches the [`Elicitor`] that asks the person when a server elicits, with the time a
    /// question may wait (then it is cancelled). Without one, every question is declined.
    pub fn set_elicitor(&self, elicitor: Arc<dyn Elicitor>, limit: Duration) {
        *lock(&self.inner.elicitation.elicitor) = Some((elicitor, limit));
    }

    /// Detaches the elicitor: questions are declined again.
    pub fn clear_elicitor(&self) {
        *lock(&self.inner.elicitation.elicitor) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_belongs_to_the_one_session_with_calls_on_its_service() {
        let hub = ElicitationHub::new();
        assert_eq!(hub.session_of("fs"), None);
        let a = hub.enter("fs", Some("s1"));
        let b = hub.enter("fs", Some("s1"));
        assert_eq!(hub.session_of("fs").as_deref(), Some("s1"));
        let c = hub.enter("fs", Some("s2"));
        assert_eq!(hub.session_of("fs"), None, "two sessions: ambiguous");
        drop(c);
        assert_eq!(hub.session_of("fs").as_deref(), Some("s1"));
        drop((a, b));
        assert_eq!(hub.session_of("fs"), None);
        assert!(lock(&hub.in_flight).is_empty());
        let _d = hub.enter("fs", None);
        assert_eq!(hub.session_of("fs"), None);
    }
}
