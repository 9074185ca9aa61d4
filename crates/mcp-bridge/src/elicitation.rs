//! MCP elicitation: a server asks the person a question in the middle of a tool call. The
//! bridge declares the capability (form and URL modes) and hands every question to the
//! [`Elicitor`] the application attached — the chat panel shows a form or buttons — then sends
//! the person's accept / decline / cancel back. Both ways servers ask arrive here: the
//! server-initiated `elicitation/create` request of the 2025-11-25 revision, and the
//! `input_required` result of a `tools/call` in the 2026-07-28 revision, which the bridge answers
//! by calling again with `inputResponses` (`execution.rs`).
//!
//! Never a hang: with no elicitor attached the bridge declines (and logs why); an answer that
//! takes longer than the limit ([`McpBridge::set_elicitor`](crate::McpBridge::set_elicitor)) is a cancel. URL mode hands the URL
//! over as text: the bridge never opens it; the UI may show it as a link the person opens, and
//! must show anything but an `https:` (or loopback `http:`) URL as plain text, since the server
//! chooses it (the chat panel does).
//!
//! Whose question: an `input_required` result belongs to the call that got it, so
//! the question goes to that call's session. A server-initiated request belongs to the call it
//! arrived under when the transport says so (Streamable HTTP delivers it on the SSE stream of
//! that call's POST); over stdio nothing on the wire says, and the bridge guesses: the session
//! of the service's running calls when they are all of one session, else none
//! ([`ElicitationRequest::session`] is `None`).
//!
//! Whose time: the service's call timeout counts the server's time only. While a
//! question of a call waits for the person, that call's clock stands; the person's time is
//! bounded by the elicitation limit instead, per question and for the whole call
//! (`CallClock`). A server-initiated question the bridge cannot tie to one call stops the
//! clocks of all the service's running calls.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use toolwright_mcp_bridge::elicitation::{ElicitationAnswer, ElicitationRequest, Elicitor};
//! struct AlwaysDecline;
//! #[async_trait::async_trait]
//! impl Elicitor for AlwaysDecline {
//!     async fn elicit(&self, _request: ElicitationRequest) -> ElicitationAnswer {
//!         ElicitationAnswer::Decline
//!     }
//! }
//! let bridge = toolwright_mcp_bridge::McpBridge::new();
//! bridge.set_elicitor(Arc::new(AlwaysDecline), Duration::from_secs(300));
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, RequestId};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::sync::lock;

/// How long a question waits for the person by default.
pub const DEFAULT_ELICITATION_TIMEOUT: Duration = Duration::from_secs(600);

/// A server's question for the person.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ElicitationRequest {
    /// The MCP service that asks.
    pub service: String,
    /// The session whose tool call the question belongs to, when the bridge can tell (the
    /// call that got an `input_required` result; the call whose request a server-initiated
    /// question arrived under; else the one session with calls running on that service);
    /// `None` otherwise.
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
    /// Accepted, with the form's values (an object; `{}` for URL mode). A field left out gets
    /// the `default` the form's schema gives it before the answer reaches the server.
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

impl ElicitationRequest {
    /// A question of `service` for the person of `session` (`None`: the asker cannot tell
    /// whose). The bridge builds these itself; an application that asks through an
    /// [`Elicitor`] of its own (or a test of one) builds them with this.
    pub fn new(
        service: impl Into<String>,
        session: Option<String>,
        message: impl Into<String>,
        mode: ElicitationMode,
    ) -> Self {
        Self {
            service: service.into(),
            session,
            message: message.into(),
            mode,
        }
    }
}

/// The time of one tool call, split between the server and the person. The
/// service's call timeout counts only the server's time: the clock stands while a question of
/// the call waits for the person. The person's time for the whole call is bounded apart, by
/// the elicitation limit the call started with (its budget): every question may wait the
/// limit, but no longer than what is left of the budget. A call therefore ends within its
/// call timeout plus the elicitation limit, which is what the dispatcher's own bound allows
/// ([`toolwright_core::ToolProvider::timeout`] of the bridge).
///
/// Pure: every method takes the moment it is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallClock {
    started: Instant,
    /// The server's time: the service's call timeout.
    timeout: Duration,
    /// The person's time for the whole call.
    budget: Duration,
    /// Questions of the call waiting for the person now.
    open: usize,
    /// Since when the clock stands (`Some` exactly while `open > 0`).
    stopped_since: Option<Instant>,
    /// The person's time of the pauses that ended.
    waited: Duration,
}

/// When the server's time of a call runs out ([`CallClock::server_time`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerTime {
    /// Not while this lasts: a question of the call waits for the person.
    Stopped,
    /// At this moment, unless a question stops the clock first.
    Until(Instant),
    /// Never: a call timeout beyond what the clock can count.
    Unlimited,
}

impl CallClock {
    /// A call that started at `started` with the service's call `timeout` and the person's
    /// `budget`.
    pub(crate) fn new(started: Instant, timeout: Duration, budget: Duration) -> Self {
        Self {
            started,
            timeout,
            budget,
            open: 0,
            stopped_since: None,
            waited: Duration::ZERO,
        }
    }

    /// The time the call has spent waiting for the person, up to `now`.
    pub(crate) fn person_time(&self, now: Instant) -> Duration {
        let current = self
            .stopped_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        self.waited.saturating_add(current)
    }

    /// When the server's time runs out: the call timeout after the start, moved on by every
    /// pause so far; not at all while a question is open.
    pub(crate) fn server_time(&self) -> ServerTime {
        if self.open > 0 {
            return ServerTime::Stopped;
        }
        match self
            .timeout
            .checked_add(self.waited)
            .and_then(|d| self.started.checked_add(d))
        {
            Some(at) => ServerTime::Until(at),
            None => ServerTime::Unlimited,
        }
    }

    /// How long a question asked at `now` may wait: the elicitation `limit`, within what is
    /// left of the call's budget.
    pub(crate) fn question_limit(&self, now: Instant, limit: Duration) -> Duration {
        limit.min(self.budget.saturating_sub(self.person_time(now)))
    }

    /// A question of the call opened at `now`: the clock stands.
    pub(crate) fn opened(&mut self, now: Instant) {
        if self.open == 0 {
            self.stopped_since = Some(now);
        }
        self.open += 1;
    }

    /// A question of the call closed at `now` (answered, timed out, dropped): with none left
    /// open, the clock runs again.
    pub(crate) fn closed(&mut self, now: Instant) {
        match self.open {
            0 => {}
            1 => {
                self.open = 0;
                self.waited = self.person_time(now);
                self.stopped_since = None;
            }
            _ => self.open -= 1,
        }
    }
}

/// The server's time of a call ran out ([`InFlight::within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallTimedOut;

/// One tool call running on a service: the session it belongs to, its clock, and the id of
/// its `tools/call` request while that is pending through rmcp.
pub(crate) struct CallEntry {
    session: Option<String>,
    clock: watch::Sender<CallClock>,
    request: Mutex<Option<RequestId>>,
}

impl CallEntry {
    /// The call's `tools/call` request now pending through rmcp is `id` (`None`: none is).
    /// A server-initiated question that arrives under that request (Streamable HTTP: on the
    /// SSE stream of its POST) belongs to this call.
    pub(crate) fn set_request(&self, id: Option<RequestId>) {
        *lock(&self.request) = id;
    }

    fn is_request(&self, id: &RequestId) -> bool {
        lock(&self.request).as_ref() == Some(id)
    }
}

/// A question's hold on a call's clock: stands from creation until dropped.
struct Held(Arc<CallEntry>);

impl Held {
    fn new(call: Arc<CallEntry>, now: Instant) -> Self {
        call.clock.send_modify(|c| c.opened(now));
        Self(call)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let now = Instant::now();
        self.0.clock.send_modify(|c| c.closed(now));
    }
}

/// How long a server-initiated question waits, at most, for the id of the call it arrived
/// under to be recorded: the request is sent before its id is kept
/// ([`crate::connection::Connection::call_tool_once`]), so the first question can win that
/// race by a hair.
const ORIGIN_GRACE: Duration = Duration::from_millis(200);

/// The bridge-wide state of elicitation: the attached elicitor and its time limit, and the
/// calls running on each service.
pub(crate) struct ElicitationHub {
    elicitor: Mutex<Option<(Arc<dyn Elicitor>, Duration)>>,
    in_flight: Mutex<HashMap<String, Vec<Arc<CallEntry>>>>,
    /// The model servers may sample, put to the person through the elicitor.
    pub(crate) sampling: Mutex<Option<Arc<crate::sampling::Sampling>>>,
}

impl ElicitationHub {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            elicitor: Mutex::new(None),
            in_flight: Mutex::new(HashMap::new()),
            sampling: Mutex::new(None),
        })
    }

    /// The person's time a call starting now may take: the attached elicitor's limit, zero
    /// without one (its questions are declined at once).
    pub(crate) fn person_budget(&self) -> Duration {
        lock(&self.elicitor)
            .as_ref()
            .map_or(Duration::ZERO, |(_, limit)| *limit)
    }

    /// Marks a call of `session` running on `service`, with the service's call `timeout`,
    /// until the guard is dropped.
    pub(crate) fn enter(
        self: &Arc<Self>,
        service: &str,
        session: Option<&str>,
        timeout: Duration,
    ) -> InFlight {
        let call = Arc::new(CallEntry {
            session: session.map(str::to_owned),
            clock: watch::Sender::new(CallClock::new(
                Instant::now(),
                timeout,
                self.person_budget(),
            )),
            request: Mutex::new(None),
        });
        lock(&self.in_flight)
            .entry(service.to_owned())
            .or_default()
            .push(call.clone());
        InFlight {
            hub: self.clone(),
            service: service.to_owned(),
            call,
        }
    }

    /// The session a question of `service` belongs to when nothing ties it to one call: the
    /// one session with calls running there, else `None`.
    fn session_of(&self, service: &str) -> Option<String> {
        let map = lock(&self.in_flight);
        let calls = map.get(service)?;
        let first = calls.first()?.session.clone()?;
        calls
            .iter()
            .all(|c| c.session.as_deref() == Some(first.as_str()))
            .then_some(first)
    }

    /// The calls running on `service` now.
    fn calls_on(&self, service: &str) -> Vec<Arc<CallEntry>> {
        lock(&self.in_flight)
            .get(service)
            .cloned()
            .unwrap_or_default()
    }

    /// The call of `service` whose pending `tools/call` request is `id`.
    fn call_of_request(&self, service: &str, id: &RequestId) -> Option<Arc<CallEntry>> {
        lock(&self.in_flight)
            .get(service)?
            .iter()
            .find(|c| c.is_request(id))
            .cloned()
    }

    /// A question the server of `service` put in the result of one of its calls
    /// (`input_required`, 2026-07-28): it goes to that call's session, and stops that call's
    /// clock while it waits.
    pub(crate) async fn ask_for_call(
        &self,
        service: &str,
        call: &Arc<CallEntry>,
        params: ElicitRequestParams,
    ) -> ElicitResult {
        self.ask(service, call.session.clone(), vec![call.clone()], params)
            .await
    }

    /// A question the server of `service` sent on its own (`elicitation/create`, 2025-11-25).
    /// `origin` is the id of our request it arrived under, when the transport tells
    /// (Streamable HTTP: the SSE stream of a POST); when that is a running call, the question
    /// is that call's. Otherwise (stdio tells nothing) the best guess: the session of the
    /// service's running calls when they are all of one session, and the clocks of all of
    /// them stand while it waits.
    pub(crate) async fn ask_from_server(
        &self,
        service: &str,
        origin: Option<RequestId>,
        params: ElicitRequestParams,
    ) -> ElicitResult {
        let mut call = None;
        if let Some(id) = origin {
            let give_up = Instant::now() + ORIGIN_GRACE;
            loop {
                call = self.call_of_request(service, &id);
                if call.is_some() || Instant::now() >= give_up {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let (session, calls) = match call {
            Some(call) => (call.session.clone(), vec![call]),
            None => (self.session_of(service), self.calls_on(service)),
        };
        self.ask(service, session, calls, params).await
    }

    /// Asks the attached elicitor on behalf of `calls` (their clocks stand meanwhile), within
    /// its time limit and the calls' budgets; declines when none is attached.
    async fn ask(
        &self,
        service: &str,
        session: Option<String>,
        calls: Vec<Arc<CallEntry>>,
        params: ElicitRequestParams,
    ) -> ElicitResult {
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
            session,
            message,
            mode,
        };
        let now = Instant::now();
        let limit = calls.iter().fold(limit, |limit, call| {
            call.clock.borrow().question_limit(now, limit)
        });
        // The calls' timeouts stand while the person is asked.
        let _held: Vec<Held> = calls.into_iter().map(|c| Held::new(c, now)).collect();
        let schema = match &request.mode {
            ElicitationMode::Form { schema } => Some(schema.clone()),
            ElicitationMode::Url { .. } => None,
        };
        match tokio::time::timeout(limit, elicitor.elicit(request)).await {
            Ok(ElicitationAnswer::Accept(content)) => {
                let content = match &schema {
                    Some(schema) => with_defaults(content, schema),
                    None => content,
                };
                ElicitResult::new(ElicitationAction::Accept).with_content(content)
            }
            Ok(ElicitationAnswer::Decline) => ElicitResult::new(ElicitationAction::Decline),
            Ok(ElicitationAnswer::Cancel) => ElicitResult::new(ElicitationAction::Cancel),
            Err(_) => {
                tracing::warn!(service = %service, "MCP elicitation cancelled: no answer within {} ms", limit.as_millis());
                ElicitResult::new(ElicitationAction::Cancel)
            }
        }
    }
}

/// Accepted form `content` with every field it leaves out that `schema` gives a `default`
/// set to that default, as MCP 2025-11-25 asks of a client: a person who accepts without
/// typing answers with what the form showed. A value the person gave (`null` included) is
/// never replaced; content that is not an object (or `null`, taken as no fields) is left as
/// it is, and so is content the schema adds nothing to.
pub(crate) fn with_defaults(content: Value, schema: &Value) -> Value {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return content;
    };
    let given = match &content {
        Value::Object(fields) => Some(fields),
        Value::Null => None,
        _ => return content,
    };
    let missing: Vec<(&String, &Value)> = properties
        .iter()
        .filter_map(|(name, property)| Some((name, property.get("default")?)))
        .filter(|(name, _)| given.is_none_or(|fields| !fields.contains_key(*name)))
        .collect();
    if missing.is_empty() {
        return content;
    }
    let mut fields = match content {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    for (name, default) in missing {
        fields.insert(name.clone(), default.clone());
    }
    Value::Object(fields)
}

/// A call running on a service ([`ElicitationHub::enter`]): the questions asked meanwhile find
/// it, and its call timeout runs on its clock ([`InFlight::within`]).
pub(crate) struct InFlight {
    hub: Arc<ElicitationHub>,
    service: String,
    call: Arc<CallEntry>,
}

impl InFlight {
    /// The call, to ask its questions and keep its request id.
    pub(crate) fn call(&self) -> &Arc<CallEntry> {
        &self.call
    }

    /// Runs `work` within the call timeout, counting only the time no question of the call
    /// waits for the person ([`CallClock`]). Past it, `work` is dropped (which cancels the
    /// request) and [`CallTimedOut`] returned.
    pub(crate) async fn within<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, CallTimedOut> {
        let mut clock = self.call.clock.subscribe();
        let mut work = std::pin::pin!(work);
        loop {
            let time = clock.borrow_and_update().server_time();
            let runs_out = async move {
                match time {
                    ServerTime::Until(at) => tokio::time::sleep_until(at).await,
                    ServerTime::Stopped | ServerTime::Unlimited => {
                        std::future::pending::<()>().await
                    }
                }
            };
            tokio::select! {
                biased;
                out = &mut work => return Ok(out),
                // The sender lives in `self.call`, borrowed for as long as this runs: this
                // never fails, it only says that the clock changed.
                _ = clock.changed() => {}
                () = runs_out => return Err(CallTimedOut),
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut map = lock(&self.hub.in_flight);
        if let Some(calls) = map.get_mut(&self.service) {
            if let Some(i) = calls.iter().position(|c| Arc::ptr_eq(c, &self.call)) {
                calls.swap_remove(i);
            }
            if calls.is_empty() {
                map.remove(&self.service);
            }
        }
    }
}

impl ElicitationHub {
    /// Attaches (or, with `None`, detaches) the elicitor and its time limit.
    pub(crate) fn set_elicitor(&self, elicitor: Option<(Arc<dyn Elicitor>, Duration)>) {
        *lock(&self.elicitor) = elicitor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    #[test]
    fn a_question_belongs_to_the_one_session_with_calls_on_its_service() {
        let hub = ElicitationHub::new();
        assert_eq!(hub.session_of("fs"), None);
        let a = hub.enter("fs", Some("s1"), T);
        let b = hub.enter("fs", Some("s1"), T);
        assert_eq!(hub.session_of("fs").as_deref(), Some("s1"));
        let c = hub.enter("fs", Some("s2"), T);
        assert_eq!(hub.session_of("fs"), None, "two sessions: ambiguous");
        drop(c);
        assert_eq!(hub.session_of("fs").as_deref(), Some("s1"));
        drop((a, b));
        assert_eq!(hub.session_of("fs"), None);
        assert!(lock(&hub.in_flight).is_empty());
        let _d = hub.enter("fs", None, T);
        assert_eq!(hub.session_of("fs"), None);
    }

    #[test]
    fn a_server_initiated_question_finds_its_call_by_the_pending_request_id() {
        let hub = ElicitationHub::new();
        let a = hub.enter("fs", Some("s1"), T);
        let b = hub.enter("fs", Some("s2"), T);
        a.call().set_request(Some(RequestId::Number(7)));
        b.call().set_request(Some(RequestId::Number(8)));
        let of = |id| {
            hub.call_of_request("fs", &RequestId::Number(id))
                .and_then(|c| c.session.clone())
        };
        assert_eq!(of(7).as_deref(), Some("s1"));
        assert_eq!(of(8).as_deref(), Some("s2"));
        assert_eq!(of(9), None, "no call has that request pending");
        assert!(
            hub.call_of_request("other", &RequestId::Number(7))
                .is_none()
        );
        b.call().set_request(None);
        assert_eq!(of(8), None, "the round ended");
    }

    #[test]
    fn omitted_fields_get_the_schemas_defaults_and_given_ones_stay() {
        use serde_json::json;
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "verified": {"type": "boolean", "default": true},
            "nickname": {"type": "string"}}});
        let cases = [
            (
                json!({}),
                json!({"name": "John Doe", "age": 30, "verified": true}),
            ),
            (
                Value::Null,
                json!({"name": "John Doe", "age": 30, "verified": true}),
            ),
            (
                json!({"name": "Ada", "verified": false, "nickname": null}),
                json!({"name": "Ada", "verified": false, "nickname": null, "age": 30}),
            ),
            (json!("not an object"), json!("not an object")),
        ];
        for (given, want) in cases {
            assert_eq!(with_defaults(given.clone(), &schema), want, "{given}");
        }
        let no_defaults = json!({"type": "object", "properties": {"x": {"type": "string"}}});
        assert_eq!(with_defaults(Value::Null, &no_defaults), Value::Null);
        assert_eq!(with_defaults(json!({}), &json!({})), json!({}));
    }

    #[derive(Debug, Clone, Copy)]
    enum Step {
        Open,
        Close,
    }

    /// the pure part: the server's deadline moves on by the time questions were
    /// open (overlapping ones counted once), stands while one is open, and a question's limit
    /// is what is left of the call's budget for the person.
    #[test]
    fn call_clock_counts_only_the_servers_time_and_bounds_the_persons() {
        struct Case {
            name: &'static str,
            /// (ms after the start, step)
            steps: &'static [(u64, Step)],
            /// When it is looked at, ms after the start.
            at: u64,
            /// The server's deadline, ms after the start; `None`: the clock stands.
            deadline: Option<u64>,
            /// The limit of a question asked then (elicitation limit 600 s).
            question: u64,
        }
        use Step::{Close, Open};
        // Call timeout 2 s, the person's budget 10 s.
        let cases = [
            Case {
                name: "no question: the call timeout after the start",
                steps: &[],
                at: 1_000,
                deadline: Some(2_000),
                question: 10_000,
            },
            Case {
                name: "a question open 0.5-4.5 s moves the deadline by 4 s",
                steps: &[(500, Open), (4_500, Close)],
                at: 5_000,
                deadline: Some(6_000),
                question: 6_000,
            },
            Case {
                name: "a question open now: the clock stands, past the call timeout too",
                steps: &[(500, Open)],
                at: 3_000,
                deadline: None,
                question: 7_500,
            },
            Case {
                name: "overlapping questions count once (0.5-4 s)",
                steps: &[(500, Open), (1_000, Open), (3_000, Close), (4_000, Close)],
                at: 4_000,
                deadline: Some(5_500),
                question: 6_500,
            },
            Case {
                name: "one of two overlapping questions closed: still standing",
                steps: &[(500, Open), (1_000, Open), (3_000, Close)],
                at: 3_500,
                deadline: None,
                question: 7_000,
            },
            Case {
                name: "two questions one after the other add up",
                steps: &[(100, Open), (1_100, Close), (1_500, Open), (3_500, Close)],
                at: 4_000,
                deadline: Some(5_000),
                question: 7_000,
            },
            Case {
                name: "a close with nothing open changes nothing",
                steps: &[(500, Close)],
                at: 1_000,
                deadline: Some(2_000),
                question: 10_000,
            },
            Case {
                name: "the budget spent: a new question gets no time",
                steps: &[(0, Open), (12_000, Close)],
                at: 12_500,
                deadline: Some(14_000),
                question: 0,
            },
        ];
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        for case in cases {
            let mut clock = CallClock::new(start, Duration::from_secs(2), Duration::from_secs(10));
            for &(t, step) in case.steps {
                match step {
                    Step::Open => clock.opened(ms(t)),
                    Step::Close => clock.closed(ms(t)),
                }
            }
            let want = match case.deadline {
                Some(d) => ServerTime::Until(ms(d)),
                None => ServerTime::Stopped,
            };
            assert_eq!(clock.server_time(), want, "{}", case.name);
            assert_eq!(
                clock.question_limit(ms(case.at), Duration::from_secs(600)),
                Duration::from_millis(case.question),
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn call_clock_takes_the_smaller_of_the_limit_and_the_budget_left_and_never_overflows() {
        let start = Instant::now();
        let clock = CallClock::new(start, Duration::from_secs(2), Duration::from_secs(600));
        assert_eq!(
            clock.question_limit(start, Duration::from_secs(1)),
            Duration::from_secs(1)
        );
        let endless = CallClock::new(start, Duration::MAX, Duration::MAX);
        assert_eq!(endless.server_time(), ServerTime::Unlimited);
        assert_eq!(
            endless.question_limit(start, Duration::from_secs(5)),
            Duration::from_secs(5)
        );
    }

    /// The clock in use (real time, short): a call whose work outlasts its timeout only
    /// while a question is open finishes; one that outlasts it without a question times out.
    #[tokio::test]
    async fn a_call_timeout_stands_while_its_question_is_open() {
        let hub = ElicitationHub::new();
        let call = hub.enter("fs", Some("s1"), Duration::from_millis(300));
        let entry = call.call().clone();
        let work = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let held = Held::new(entry.clone(), Instant::now());
            tokio::time::sleep(Duration::from_millis(600)).await;
            drop(held);
            tokio::time::sleep(Duration::from_millis(100)).await;
            "done"
        };
        assert_eq!(
            call.within(work).await,
            Ok("done"),
            "800 ms of which 600 ms asking"
        );
        let other = hub.enter("fs", Some("s1"), Duration::from_millis(300));
        let slow = tokio::time::sleep(Duration::from_millis(600));
        assert_eq!(other.within(slow).await, Err(CallTimedOut));
    }
}
