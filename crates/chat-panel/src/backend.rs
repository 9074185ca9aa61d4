//! The agent side of the panel: [`ChatBackend`] and [`AgentBackend`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use toolwright_context_engine::SessionStore;
use toolwright_core::ChatModel;
use toolwright_messaging::{MessageBus, SendMessageTool};
use toolwright_tool_system::{
    Agent, AgentBuilder, ApprovalDecision, ApprovalError, LoopError, LoopEvent, PendingApproval,
};

use crate::PanelConfig;
use crate::config::PanelError;

/// The calls of a session waiting for a person's approval, looked up in the store.
pub type PendingFuture = Pin<Box<dyn Future<Output = Option<PendingApproval>> + Send>>;

/// A stream of the tool loop's [`LoopEvent`]s for one answer (the panel shows them as they
/// come; it ends with `Finished` or `Failed`).
pub type EventStream = Pin<Box<dyn Stream<Item = LoopEvent> + Send>>;

/// The agent behind the panel: answers `text` in session `session_id`, as a stream of events,
/// keeping the conversation in [`store`](Self::store). Dropping the stream may cancel the
/// answer.
///
/// `principal` is who the request is ([`Principal::id`](crate::identity::Principal::id)):
/// the approval tokens an answer hands out are bound to it, and decisions are taken and
/// recorded as its (`toolwright_tool_system::LoopOptions::principal`).
pub trait ChatBackend: Send + Sync + 'static {
    /// Answers one user message of `principal`.
    fn reply(&self, session_id: &str, principal: &str, text: &str) -> EventStream;
    /// Where the conversations live: the panel rebuilds a conversation from it (after a
    /// restart), and deletes the conversations it evicts (its `max_sessions` cap) and the oldest
    /// messages of a long one (its `max_history_messages` cap).
    fn store(&self) -> Arc<dyn SessionStore>;
    /// `principal` decides calls held for approval in session `session_id` and the answer goes
    /// on ([`Agent::resume_stream`]). A backend that holds no calls fails the stream.
    fn resume(
        &self,
        session_id: &str,
        principal: &str,
        decisions: Vec<ApprovalDecision>,
    ) -> EventStream {
        let _ = (principal, decisions);
        let session = session_id.to_owned();
        Box::pin(futures::stream::once(async move {
            LoopEvent::Failed(LoopError::Approval(ApprovalError::NothingPending {
                session,
            }))
        }))
    }
    /// The calls of session `session_id` waiting for approval, with fresh tokens for
    /// `principal` (after a reload or a restart); `None` when nothing waits (the default).
    fn pending_approval(&self, session_id: &str, principal: &str) -> PendingFuture {
        let _ = (session_id, principal);
        Box::pin(async { None })
    }
}

/// The recipient id the model uses for the person in the panel.
pub const USER_RECIPIENT: &str = "user";

/// The bus address of the person in session `session_id`: `user:SESSION`.
pub fn user_address(session_id: &str) -> String {
    format!("user:{session_id}")
}

/// The bus address of a principal: `person:PRINCIPAL`, the id their authenticator gives
/// them ([`crate::identity::Principal::id`]; `local` without authentication). A message sent
/// there is stored in that principal's inbox conversation, theirs alone, which their page
/// opens with the Inbox button (`GET /api/inbox`): address people, not conversation ids.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use toolwright_messaging::{MessageBus, OutgoingMessage};
/// let bus = MessageBus::new(); // the panel's bus (with workers, `MessageBus::connect_nats`)
/// # let mut panels = bus.subscribe_group("person").unwrap(); // what a serving panel holds
/// let to = toolwright_chat_panel::person_address("alice@example.com");
/// assert_eq!(to, "person:alice@example.com");
/// bus.send(OutgoingMessage::new("billing-bot", to, "Your invoice is ready")).await.unwrap();
/// # assert_eq!(panels.recv().await.unwrap().to, "person:alice@example.com");
/// # }
/// ```
pub fn person_address(principal: &str) -> String {
    format!("person:{principal}")
}

/// The system prompt [`AgentBackend::build`] starts from.
pub const AGENT_SYSTEM_PROMPT: &str = "You are a helpful assistant in a chat panel. \
To ask the person a question with suggested answers, call send_message with recipient \"user\", \
the question as text, and quickReplies (at most 10 short options). \
The person can click an option or type a free answer.";

/// A backend over the tool-system's streaming tool loop ([`Agent::run_stream`]): the agent
/// can call tools, among them `send_message` on the panel's bus, where recipient `"user"`
/// means the person in the calling session. A text-only panel is an agent without tools
/// ([`AgentBackend::text_only`]).
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
    /// `"user"` with [`user_address`] so its messages reach the panel, a session store, and a
    /// context budget so a long conversation keeps fitting). Its store is used as given: with
    /// several workers, [`build`](Self::build) also keeps a worker that lost a session's turn
    /// lease from storing rounds in it.
    pub fn new(agent: Agent) -> Self {
        Self { agent }
    }

    /// Builds an agent over `model` with [`AGENT_SYSTEM_PROMPT`], a `send_message` tool sending
    /// as `agent` on `bus`, the session store of `config.history` and the context budget
    /// `config.context_budget`; `configure` may add tools or change options.
    ///
    /// ```no_run
    /// # async fn demo(model: impl toolwright_core::ChatModel + 'static) -> Result<(), toolwright_chat_panel::PanelError> {
    /// use toolwright_chat_panel::{AgentBackend, PanelConfig};
    /// let config = PanelConfig::default().with_history_path("/var/lib/my-app/panel.sqlite3");
    /// let backend = AgentBackend::build(model, toolwright_messaging::MessageBus::new(), &config, |b| b).await?;
    /// # Ok(()) }
    /// ```
    pub async fn build(
        model: impl ChatModel + 'static,
        bus: MessageBus,
        config: &PanelConfig,
        configure: impl FnOnce(AgentBuilder) -> AgentBuilder,
    ) -> Result<Self, PanelError> {
        let tool = SendMessageTool::new(bus, crate::state::AGENT_SENDER).with_recipient_resolver(
            |id, ctx| match (id, &ctx.session_id) {
                (USER_RECIPIENT, Some(s)) => user_address(s),
                _ => id.to_owned(),
            },
        );
        let builder = Agent::builder(model)
            .system_prompt(AGENT_SYSTEM_PROMPT)
            .store(fenced(config.history.open().await?))
            .context_budget(config.context_budget)
            .tool(tool);
        Ok(Self::new(configure(builder).build()?))
    }

    /// A backend that only talks: the model, `system` as its system prompt, no tools, the
    /// session store of `config.history` and the budget `config.context_budget`.
    pub async fn text_only(
        model: impl ChatModel + 'static,
        system: impl Into<String>,
        config: &PanelConfig,
    ) -> Result<Self, PanelError> {
        let agent = Agent::builder(model)
            .system_prompt(system)
            .store(fenced(config.history.open().await?))
            .context_budget(config.context_budget)
            .build()?;
        Ok(Self::new(agent))
    }
}

impl ChatBackend for AgentBackend {
    fn reply(&self, session_id: &str, principal: &str, text: &str) -> EventStream {
        Box::pin(
            self.agent
                .acting_as(principal)
                .run_stream(session_id.to_owned(), text.to_owned()),
        )
    }

    fn store(&self) -> Arc<dyn SessionStore> {
        Arc::clone(self.agent.store())
    }

    fn resume(
        &self,
        session_id: &str,
        principal: &str,
        decisions: Vec<ApprovalDecision>,
    ) -> EventStream {
        Box::pin(
            self.agent
                .acting_as(principal)
                .resume_stream(session_id.to_owned(), decisions),
        )
    }

    fn pending_approval(&self, session_id: &str, principal: &str) -> PendingFuture {
        let agent = self.agent.acting_as(principal);
        let session = session_id.to_owned();
        Box::pin(async move {
            match agent.pending_approval(&session).await {
                Ok(p) => p,
                Err(e) => {
                    // Fails closed: nothing is shown as decidable.
                    tracing::warn!(session = %session, error = %e, "chat panel: could not read the pending approval");
                    None
                }
            }
        })
    }
}

/// The store as the panel's agent writes to it: an answer's rounds only while this worker holds
/// the session's turn lease (see `docs/workers.md`).
fn fenced(store: Arc<dyn SessionStore>) -> Arc<dyn SessionStore> {
    Arc::new(crate::lease::FencedStore::new(store))
}

/// The sentence the person sees when an answer failed; the detail goes to the log.
pub(crate) fn user_sentence(e: &LoopError) -> &'static str {
    match e {
        LoopError::Model(m) => m.user_message(),
        LoopError::Context(_) => {
            "Your message is too long for the assistant to read. Please send a shorter one."
        }
        LoopError::Approval(_) => {
            "That decision could not be applied: the call was decided already or no longer waits. Reload the page to see where things stand."
        }
        _ => "The assistant ran into a problem and could not answer. Please try again later.",
    }
}
