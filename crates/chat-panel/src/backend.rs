//! The agent side of the panel: [`ChatBackend`] and two implementations.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use messaging::{MessageBus, SendMessageTool};
use model_gateway::{ChatEvent, ChatModel, ChatRequest, Message};
use serde_json::Value;
use tool_system::{Agent, AgentBuilder, LoopEvent, RegistryError};

/// What a backend reports while it answers one user message.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PanelEvent {
    /// Answer text, as it arrives.
    TextDelta(String),
    /// A tool call is about to run.
    ToolStarted {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// A tool call finished; `is_error` when it failed.
    ToolResult {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// The result text.
        content: String,
        /// Whether it failed.
        is_error: bool,
    },
    /// The final answer (its text may already have arrived as deltas).
    Final(String),
    /// The round limit was reached.
    IterationLimit(usize),
    /// The answer failed; the text is for the person.
    Error(String),
}

/// A stream of [`PanelEvent`]s for one answer.
pub type EventStream = Pin<Box<dyn Stream<Item = PanelEvent> + Send>>;

/// The agent behind the panel: answers `text` in session `session_id`, as a stream of events.
/// Dropping the stream may cancel the answer.
pub trait ChatBackend: Send + Sync + 'static {
    /// Answers one user message.
    fn reply(&self, session_id: &str, text: &str) -> EventStream;
}

/// The recipient id the model uses for the person in the panel.
pub const USER_RECIPIENT: &str = "user";

/// The bus address of the person in session `session_id`: `user:SESSION`.
pub fn user_address(session_id: &str) -> String {
    format!("user:{session_id}")
}

/// A backend over a plain [`ChatModel`] stream: text only, no tools. It keeps each session's
/// history (user and assistant turns, at most `max_history` messages, oldest dropped first).
pub struct ModelBackend {
    model: Arc<dyn ChatModel>,
    system: Option<String>,
    history: Arc<Mutex<HashMap<String, Vec<Message>>>>,
    max_history: usize,
}

impl std::fmt::Debug for ModelBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelBackend")
            .field("model", &self.model.info().model)
            .finish_non_exhaustive()
    }
}

impl ModelBackend {
    /// A backend over `model`.
    pub fn new(model: impl ChatModel + 'static) -> Self {
        Self {
            model: Arc::new(model),
            system: None,
            history: Arc::default(),
            max_history: 40,
        }
    }
    /// Sets the system prompt.
    pub fn with_system_prompt(mut self, s: impl Into<String>) -> Self {
        self.system = Some(s.into());
        self
    }
}

impl ChatBackend for ModelBackend {
    fn reply(&self, session_id: &str, text: &str) -> EventStream {
        let model = self.model.clone();
        let history = self.history.clone();
        let max = self.max_history.max(2);
        let session = session_id.to_owned();
        let mut messages: Vec<Message> = self.system.iter().map(Message::system).collect();
        {
            let mut h = history.lock().unwrap_or_else(PoisonError::into_inner);
            let past = h.entry(session.clone()).or_default();
            past.push(Message::user(text));
            let excess = past.len().saturating_sub(max);
            past.drain(..excess);
            messages.extend(past.iter().cloned());
        }
        Box::pin(async_stream(move |tx| async move {
            let mut stream = match model.stream(ChatRequest::new(messages)).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "model call failed");
                    let _ = tx
                        .send(PanelEvent::Error(format!("The model call failed: {e}")))
                        .await;
                    return;
                }
            };
            let mut answer = String::new();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ChatEvent::TextDelta(t)) => {
                        answer.push_str(&t);
                        if tx.send(PanelEvent::TextDelta(t)).await.is_err() {
                            return;
                        }
                    }
                    Ok(ChatEvent::Finish { .. }) => break,
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx
                            .send(PanelEvent::Error(format!("The answer was cut off: {e}")))
                            .await;
                        return;
                    }
                }
            }
            history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(session)
                .or_default()
                .push(Message::assistant(answer.clone()));
            let _ = tx.send(PanelEvent::Final(answer)).await;
        }))
    }
}

/// A stream fed by a spawned task through a bounded channel; the task stops when the receiver
/// is dropped (its sends fail).
fn async_stream<F, Fut>(f: F) -> impl Stream<Item = PanelEvent> + Send
where
    F: FnOnce(tokio::sync::mpsc::Sender<PanelEvent>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The system prompt [`AgentBackend::build`] starts from.
pub const AGENT_SYSTEM_PROMPT: &str = "You are a helpful assistant in a chat panel. \
To ask the person a question with suggested answers, call send_message with recipient \"user\", \
the question as text, and quickReplies (at most 10 short options). \
The person can click an option or type a free answer.";

/// A backend over the tool-system's streaming tool loop ([`Agent::run_stream`]): the agent
/// can call tools, among them `send_message` on the panel's bus, where recipient `"user"`
/// means the person in the calling session.
#[derive(Clone)]
pub struct AgentBackend {
    agent: Agent,
}

impl std::fmt::Debug for AgentBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBackend")
            .field("agent", &self.agent)
            .finish()
    }
}

impl AgentBackend {
    /// Wraps an agent you built yourself (give it a `send_message` tool that resolves
    /// `"user"` with [`user_address`] so its messages reach the panel).
    pub fn new(agent: Agent) -> Self {
        Self { agent }
    }

    /// Builds an agent over `model` with [`AGENT_SYSTEM_PROMPT`] and a `send_message` tool
    /// sending as `agent` on `bus`; `configure` may add tools or change options.
    pub fn build(
        model: impl ChatModel + 'static,
        bus: MessageBus,
        configure: impl FnOnce(AgentBuilder) -> AgentBuilder,
    ) -> Result<Self, RegistryError> {
        let tool = SendMessageTool::new(bus, "agent").with_recipient_resolver(|id, ctx| {
            match (id, &ctx.session_id) {
                (USER_RECIPIENT, Some(s)) => user_address(s),
                _ => id.to_owned(),
            }
        });
        let builder = Agent::builder(model)
            .system_prompt(AGENT_SYSTEM_PROMPT)
            .tool(tool);
        Ok(Self::new(configure(builder).build()?))
    }
}

impl ChatBackend for AgentBackend {
    fn reply(&self, session_id: &str, text: &str) -> EventStream {
        let events = self
            .agent
            .run_stream(session_id.to_owned(), text.to_owned());
        Box::pin(events.filter_map(|ev| async move {
            Some(match ev {
                LoopEvent::TextDelta(t) => PanelEvent::TextDelta(t),
                LoopEvent::ToolCallStarted {
                    id,
                    name,
                    arguments,
                } => PanelEvent::ToolStarted {
                    id,
                    name,
                    arguments,
                },
                LoopEvent::ToolResult {
                    id,
                    name,
                    content,
                    is_error,
                } => PanelEvent::ToolResult {
                    id,
                    name,
                    content,
                    is_error,
                },
                LoopEvent::IterationLimitReached { iterations } => {
                    PanelEvent::IterationLimit(iterations)
                }
                LoopEvent::Finished(out) => PanelEvent::Final(out.answer),
                LoopEvent::Failed(e) => {
                    tracing::warn!(error = %e, "agent run failed");
                    PanelEvent::Error(format!("The agent failed: {e}"))
                }
                _ => return None,
            })
        }))
    }
}
