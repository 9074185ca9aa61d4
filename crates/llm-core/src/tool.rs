//! The seam every tool source plugs into: [`Tool`] for one tool, [`ToolProvider`] for a source
//! of tools (built-ins, skills, MCP services).

use std::sync::Arc;
use std::time::Duration;

use crate::ToolSpec;
use serde_json::Value;

/// What a call is about: which session and which call id, and the approval rules of the agent
/// that made it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolContext {
    /// The session the call belongs to, when there is one.
    pub session_id: Option<String>,
    /// The id of the model's tool call.
    pub call_id: String,
    /// Which calls the agent that made this one holds for a person's approval (its policy and
    /// its tools' own say), when an agent made it. A tool that calls other tools for the model
    /// (code mode's scripts) must refuse a call this gate holds: it cannot wait for a person,
    /// and running it would open the agent's gate. The agent's dispatcher sets it.
    pub approval_gate: Option<ApprovalGate>,
    /// The client that made the call, when it can be talked to while the tool runs (an MCP
    /// client calling the toolkit's MCP server): log lines, progress, a question to its model
    /// or to its person. `None` elsewhere; a tool must work without it.
    pub caller: Option<CallerHandle>,
    /// Who the call is made for (the agent's principal: a login's subject, a user name), when
    /// the agent has one. A tool that keeps anything about the person (a bridge learning from
    /// use) keys it by this and follows that person's consent. The agent's loop sets it.
    pub principal: Option<String>,
}

/// How urgent a log line to the caller is ([`Caller::log`]), as MCP's logging levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LogLevel {
    /// Detail for debugging.
    Debug,
    /// What happens normally.
    Info,
    /// Normal but worth noticing.
    Notice,
    /// Something may be wrong.
    Warning,
    /// Something failed.
    Error,
}

/// The person's answer to [`Caller::elicit`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Elicited {
    /// The person answered: the values, which fit the schema asked with.
    Accept(Value),
    /// The person said no.
    Decline,
    /// The person closed the question without choosing.
    Cancel,
}

/// The client that made a call, as a tool sees it while it runs ([`ToolContext::caller`]).
/// The MCP server sets one for the calls it serves; what a client does not support fails with
/// a [`ToolError`] the tool can pass on.
///
/// ```
/// use toolwright_core::{LogLevel, ToolContext, ToolError};
/// async fn index(ctx: &ToolContext, files: &[&str]) -> Result<usize, ToolError> {
///     for (i, _file) in files.iter().enumerate() {
///         if let Some(caller) = &ctx.caller {
///             caller.progress(i as f64, Some(files.len() as f64)).await;
///             caller.log(LogLevel::Debug, "indexing").await;
///         }
///     }
///     Ok(files.len())
/// }
/// ```
#[async_trait::async_trait]
pub trait Caller: Send + Sync {
    /// Send the caller a log line (dropped when below the level the caller asked for).
    async fn log(&self, level: LogLevel, message: &str);
    /// Tell the caller how far the call is: `done` of `total` (when known). Sent only when
    /// the caller asked for progress.
    async fn progress(&self, done: f64, total: Option<f64>);
    /// Ask the caller's model: `prompt` as one user message, at most `max_tokens` in the
    /// answer; its text.
    async fn sample(&self, prompt: &str, max_tokens: u32) -> Result<String, ToolError>;
    /// Ask the caller's person `message`, with a form described by `schema` (a JSON Schema
    /// object of flat properties).
    async fn elicit(&self, message: &str, schema: Value) -> Result<Elicited, ToolError>;
}

/// A [`Caller`] as a [`ToolContext`] holds it. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct CallerHandle(Arc<dyn Caller>);

impl CallerHandle {
    /// Hold `caller`.
    pub fn new(caller: impl Caller + 'static) -> Self {
        Self(Arc::new(caller))
    }
}

impl std::ops::Deref for CallerHandle {
    type Target = dyn Caller;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for CallerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallerHandle")
    }
}

/// Two handles are equal when they hold the same caller.
impl PartialEq for CallerHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CallerHandle {}

/// The approval rules of the agent that made a call ([`ToolContext::approval_gate`]): whether
/// a call of `tool` with `args` needs a person's approval there. Cheap to clone (an `Arc`).
///
/// ```
/// use toolwright_core::ApprovalGate;
/// use serde_json::json;
/// let gate = ApprovalGate::new(|tool, _args| tool == "delete_file");
/// assert!(gate.requires("delete_file", &json!({})));
/// assert!(!gate.requires("get_weather", &json!({})));
/// ```
#[derive(Clone)]
pub struct ApprovalGate(Arc<GateRule>);

/// What an [`ApprovalGate`] asks: whether a call of this tool with these arguments is held.
type GateRule = dyn Fn(&str, &Value) -> bool + Send + Sync;

impl ApprovalGate {
    /// A gate that holds the calls `rule` says need approval.
    pub fn new(rule: impl Fn(&str, &Value) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(rule))
    }
    /// Whether a call of `tool` with `args` needs a person's approval.
    pub fn requires(&self, tool: &str, args: &Value) -> bool {
        (self.0)(tool, args)
    }
}

impl std::fmt::Debug for ApprovalGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalGate")
    }
}

/// Two gates are equal when they are the same rules (clones of one gate).
impl PartialEq for ApprovalGate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ApprovalGate {}

impl ToolContext {
    /// A context for call `call_id`.
    pub fn new(call_id: impl Into<String>) -> Self {
        Self {
            session_id: None,
            call_id: call_id.into(),
            approval_gate: None,
            caller: None,
            principal: None,
        }
    }
    /// Attach the session id.
    pub fn with_session(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }
    /// Attach the approval rules of the agent that makes the call.
    pub fn with_approval_gate(mut self, gate: ApprovalGate) -> Self {
        self.approval_gate = Some(gate);
        self
    }
    /// Attach the client that made the call.
    pub fn with_caller(mut self, caller: CallerHandle) -> Self {
        self.caller = Some(caller);
        self
    }
    /// Attach who the call is made for ([`ToolContext::principal`]); an empty one is none.
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        let principal = principal.into();
        self.principal = (!principal.trim().is_empty()).then_some(principal);
        self
    }
}

/// The turn a request belongs to, as tool providers see it when they choose what to show
/// the model ([`ToolProvider::advertised`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnInfo {
    /// The session, when there is one.
    pub session_id: Option<String>,
    /// The person's text that opened this turn.
    pub user_text: String,
    /// Which request of the turn this is: 0 for the first, 1 after the first tool round, …
    pub round: usize,
}

impl TurnInfo {
    /// A turn opened by `user_text`.
    pub fn new(user_text: impl Into<String>) -> Self {
        Self {
            user_text: user_text.into(),
            ..Self::default()
        }
    }
    /// Attach the session id.
    pub fn with_session(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }
    /// Set the round.
    pub fn with_round(mut self, round: usize) -> Self {
        self.round = round;
        self
    }
}

/// Why a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// No tool by that name.
    NotFound,
    /// The arguments do not fit the tool's schema.
    InvalidArguments,
    /// The call ran past its time limit and was stopped.
    Timeout,
    /// The tool ran and reported a failure.
    Failed,
    /// The tool panicked or its process crashed.
    Crashed,
    /// The tool's service is not running or not reachable.
    Unavailable,
}

/// A failed call. Two texts are kept apart: a short, actionable one for the model
/// (no secrets, no stack traces) and the full one for the operator's log.
///
/// ```
/// use toolwright_core::{ToolError, ToolErrorKind};
/// let e = ToolError::failed("city not found: Atlantis").with_detail("GET /weather?q=Atlantis -> 404");
/// assert_eq!(e.kind, ToolErrorKind::Failed);
/// assert_eq!(e.to_model_json()["success"], false);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ToolError {
    /// What kind of failure.
    pub kind: ToolErrorKind,
    /// What the model is told.
    pub message: String,
    /// What the operator's log gets (may be longer; never sent to the model).
    pub detail: Option<String>,
}

impl ToolError {
    /// An error of this kind with this message for the model.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            detail: None,
        }
    }
    /// `Tool not found: NAME` (000).
    pub fn not_found(name: &str) -> Self {
        Self::new(ToolErrorKind::NotFound, format!("Tool not found: {name}"))
    }
    /// Arguments that do not fit the schema.
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::InvalidArguments, message)
    }
    /// A call stopped after `after`.
    pub fn timeout(name: &str, after: Duration) -> Self {
        Self::new(
            ToolErrorKind::Timeout,
            format!(
                "Tool {name} timed out after {} and was stopped",
                human(after)
            ),
        )
    }
    /// The tool reported a failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Failed, message)
    }
    /// The tool's service cannot take calls now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Unavailable, message)
    }
    /// Attach the operator-only detail.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
    /// The result the model sees: `{"success": false, "error": MESSAGE}`.
    pub fn to_model_json(&self) -> Value {
        serde_json::json!({"success": false, "error": self.message})
    }
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// What a tool call returns: a JSON value (the text the model reads) and any parts after it
/// (a screenshot, a file).
///
/// ```
/// use toolwright_core::{Media, Part, ToolOutput};
/// let plain: ToolOutput = serde_json::json!({"temp": 22}).into();
/// assert!(plain.parts.is_empty());
/// let shot = ToolOutput::new(serde_json::json!("the page"))
///     .with_part(Part::Image(Media::url("image/png", "https://example.com/shot.png")));
/// assert_eq!(shot.parts.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ToolOutput {
    /// The result as JSON; the model reads its text (a string as it is).
    pub value: Value,
    /// Images, audio or files that follow the text.
    pub parts: Vec<crate::Part>,
}

impl ToolOutput {
    /// A result of `value` with no parts.
    pub fn new(value: Value) -> Self {
        Self {
            value,
            parts: Vec::new(),
        }
    }
    /// The same result with one more part.
    pub fn with_part(mut self, part: crate::Part) -> Self {
        self.parts.push(part);
        self
    }
}

impl From<Value> for ToolOutput {
    fn from(value: Value) -> Self {
        Self::new(value)
    }
}

/// One tool: its spec for the model and an async call.
///
/// ```
/// use toolwright_core::{async_trait, Tool, ToolContext, ToolError, ToolOutput};
/// use toolwright_core::ToolSpec;
/// use serde_json::{json, Value};
/// struct Weather;
/// #[async_trait]
/// impl Tool for Weather {
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::new("get_weather", "Get current weather for a city",
///             json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}))
///     }
///     async fn call(&self, args: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok(json!({"temp": 22, "city": args["city"]}).into())
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and parameter schema.
    fn spec(&self) -> ToolSpec;
    /// Runs the tool. The arguments were already checked against the schema. A JSON result
    /// converts with `.into()`; [`ToolOutput::with_part`] adds an image or a file.
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;
    /// This tool's own time limit; `None` takes the dispatcher's default (30 s).
    fn timeout(&self) -> Option<Duration> {
        None
    }
    /// Whether a second call with the same arguments gives the same result and changes
    /// nothing (a lookup, a read). Default `false`: every call runs, as a `send_message` or an
    /// "append row" must. When `true`, the loop answers a repeat within one run from the
    /// earlier result and then asks the model for its answer.
    fn idempotent(&self) -> bool {
        false
    }
    /// Whether this call needs a person's approval before it runs (a payment, a deletion, a
    /// message sent on someone's behalf). `args` are the call's arguments, already checked
    /// against nothing but JSON syntax, so a predicate can gate only some calls (`amount > 100`).
    /// Default `false`. The tool loop holds such a call and returns a pending approval instead
    /// of running it (tool-system's `Agent::resume` decides it).
    fn needs_approval(&self, _args: &Value) -> bool {
        false
    }
    /// Whether this successful `result` is the turn's answer. `Some(text)` ends the turn: the
    /// loop records `text` as the assistant's reply and returns it, without calling the model
    /// again (the OpenAI Agents SDK's `StopAtTools`, smolagents' `final_answer`). Default `None`:
    /// the model reads the result and answers itself. A round with a call held for approval is
    /// not ended this way; the model answers after the decision.
    fn final_answer(&self, _result: &Value) -> Option<String> {
        None
    }
}

/// A source of tools the dispatcher routes calls to: the built-in registry, the skills
/// sandbox, MCP services. The one seam through which every tool reaches the model.
#[async_trait::async_trait]
pub trait ToolProvider: Send + Sync {
    /// A short name for logs (`builtin`, `skills`, `mcp`).
    fn provider_name(&self) -> &str;
    /// The tools available now: every tool the provider can run, with its full schema. The
    /// dispatcher routes and validates calls with these.
    async fn list(&self) -> Vec<ToolSpec>;
    /// A number that changes whenever [`list`](ToolProvider::list) would answer differently;
    /// a provider whose tools never change returns a constant. `None` (the default): it cannot
    /// tell, and the dispatcher lists its tools again before every run. With `Some`, a run
    /// whose providers all kept their revision skips listing and comparing every tool.
    fn list_revision(&self) -> Option<u64> {
        None
    }
    /// The tools to show the model in this request (the request's `tools` field, or the
    /// prompt's tool list). Defaults to all of [`ToolProvider::list`]. A provider with many
    /// tools shows fewer — MCP services show short level-1 lines in the prompt and a tool's
    /// full schema only once the model asked for it — while calls to any listed tool still
    /// route.
    async fn advertised(&self, _turn: &TurnInfo) -> Vec<ToolSpec> {
        self.list().await
    }
    /// Whether [`advertised`](ToolProvider::advertised) answers the same in every round of a
    /// turn. `false` (the default): the dispatcher asks again after each round, since a
    /// provider may show more once the model asked for it. A provider that shows a fixed set
    /// returns `true`, and a run asks it once.
    fn advertises_the_same_every_round(&self) -> bool {
        false
    }
    /// Calls tool `name`. Providers return [`ToolErrorKind::NotFound`] for names they lack.
    async fn call(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError>;
    /// The time limit for tool `name`; `None` takes the dispatcher's default.
    fn timeout(&self, _name: &str) -> Option<Duration> {
        None
    }
    /// Whether tool `name` is idempotent ([`Tool::idempotent`]); default `false`.
    fn idempotent(&self, _name: &str) -> bool {
        false
    }
    /// Whether a call to tool `name` with `args` needs a person's approval before it runs
    /// ([`Tool::needs_approval`]); default `false`. An MCP service gates tools by its config here.
    fn needs_approval(&self, _name: &str, _args: &Value) -> bool {
        false
    }
    /// Whether the successful `result` of a call to tool `name` is the turn's answer
    /// ([`Tool::final_answer`]); default `None`. Code mode answers here for a script that
    /// called `final_answer(...)`.
    fn final_answer(&self, _name: &str, _result: &Value) -> Option<String> {
        None
    }
    /// The error the model gets when the arguments of a call to `name` do not fit its
    /// schema; `problems` is what the validator found (`"/city: 3 is not of type string"`).
    /// The call did not run. Override to add what helps the model fix the call — MCP services
    /// add the tool's full schema, which the model may never have seen (level-1 descriptions).
    fn invalid_arguments(&self, name: &str, problems: &str) -> ToolError {
        ToolError::invalid_arguments(format!(
            "Invalid arguments for tool {name}: {problems}. The tool was not run; call it again with arguments that match its parameters schema."
        ))
    }
}

/// The first sentence of `text`, at most `max_chars` characters (cut on a character boundary,
/// with `…`): 004's level-1 line of a tool (the MCP bridge's tiers, code mode's function docs).
///
/// ```
/// use toolwright_core::first_sentence;
/// assert_eq!(first_sentence("Adds two numbers. Returns the sum.", 100), "Adds two numbers.");
/// assert_eq!(first_sentence("查询天气。返回温度", 100), "查询天气。");
/// ```
pub fn first_sentence(text: &str, max_chars: usize) -> String {
    let text = text.trim();
    let mut end = text.len();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_break = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        let stop = match c {
            '\n' => Some(i),
            '。' | '！' | '？' => Some(i + c.len_utf8()),
            '.' | '!' | '?' if next_is_break => Some(i + 1),
            _ => None,
        };
        if let Some(e) = stop {
            end = e;
            break;
        }
    }
    let sentence = text[..end].trim();
    if sentence.chars().count() <= max_chars {
        return sentence.to_string();
    }
    let mut cut: String = sentence.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod caller_tests {
    use super::*;

    /// Keeps the log lines it is sent.
    #[derive(Default)]
    struct Lines(std::sync::Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl Caller for Lines {
        async fn log(&self, _level: LogLevel, message: &str) {
            if let Ok(mut l) = self.0.lock() {
                l.push(message.to_owned());
            }
        }
        async fn progress(&self, _done: f64, _total: Option<f64>) {}
        async fn sample(&self, _prompt: &str, _max_tokens: u32) -> Result<String, ToolError> {
            Err(ToolError::unavailable("no model here"))
        }
        async fn elicit(&self, _message: &str, _schema: Value) -> Result<Elicited, ToolError> {
            Ok(Elicited::Decline)
        }
    }

    #[tokio::test]
    async fn a_tool_reaches_the_caller_its_context_holds() {
        let lines = Arc::new(Lines::default());
        struct Shared(Arc<Lines>);
        #[async_trait::async_trait]
        impl Caller for Shared {
            async fn log(&self, level: LogLevel, message: &str) {
                self.0.log(level, message).await;
            }
            async fn progress(&self, done: f64, total: Option<f64>) {
                self.0.progress(done, total).await;
            }
            async fn sample(&self, prompt: &str, max: u32) -> Result<String, ToolError> {
                self.0.sample(prompt, max).await
            }
            async fn elicit(&self, message: &str, schema: Value) -> Result<Elicited, ToolError> {
                self.0.elicit(message, schema).await
            }
        }
        let handle = CallerHandle::new(Shared(Arc::clone(&lines)));
        let ctx = ToolContext::new("c1").with_caller(handle.clone());
        let caller = ctx.caller.as_deref().expect("a caller");
        caller.log(LogLevel::Info, "started").await;
        assert_eq!(*lines.0.lock().expect("lock"), ["started"]);
        assert_eq!(
            caller.sample("hi", 10).await.map_err(|e| e.kind),
            Err(ToolErrorKind::Unavailable)
        );
        // Contexts compare by the caller they hold, as by their gate.
        assert_eq!(ctx, ToolContext::new("c1").with_caller(handle));
        assert_ne!(
            ctx,
            ToolContext::new("c1").with_caller(CallerHandle::new(Lines::default()))
        );
        assert_eq!(ToolContext::new("c2").caller, None);
    }
}
