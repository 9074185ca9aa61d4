//! The agent side of the panel: [`ChatBackend`] and [`AgentBackend`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use toolwright_context_engine::SessionStore;
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, Message, ModelError, ModelInfo, Part,
};
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
    /// Answers one user message of `principal` with parts after its text (what the person
    /// attached, checked by the panel: a picture, sound or file of a type it takes whose bytes
    /// are what their type says, within [`PanelConfig::max_image_bytes`]); the message is
    /// `Message::user_with_parts(text, parts)`. A model that cannot take a part fails the
    /// answer with [`ModelError::Unsupported`](toolwright_core::ModelError::Unsupported), and
    /// the person is told so in plain words.
    ///
    /// By default, a message without parts is [`reply`](Self::reply)'s, and one with parts
    /// fails with `Unsupported` before anything is stored: a backend written for text only
    /// never drops a picture silently. [`AgentBackend`] stores and sends them.
    fn reply_with_parts(
        &self,
        session_id: &str,
        principal: &str,
        text: &str,
        parts: Vec<Part>,
    ) -> EventStream {
        let Some(first) = parts.first() else {
            return self.reply(session_id, principal, text);
        };
        let part = first.kind();
        Box::pin(futures::stream::once(async move {
            LoopEvent::Failed(LoopError::Model(ModelError::Unsupported {
                part,
                backend: "this chat panel's backend (ChatBackend::reply_with_parts)".into(),
            }))
        }))
    }
    /// Where the conversations live: the panel rebuilds a conversation from it (after a
    /// restart), and deletes the conversations it evicts (its `max_sessions` cap) and the oldest
    /// messages of a long one (its `max_history_messages` cap).
    fn store(&self) -> Arc<dyn SessionStore>;
    /// Where the media this backend's tools gave by reference is kept ([`Part::Resource`]s
    /// with a `toolwright-blob:` URI): the panel serves it from there to the conversation's
    /// owner. Default: none, and such media is shown as the line naming it.
    fn blob_store(&self) -> Option<Arc<dyn toolwright_core::BlobStore>> {
        None
    }
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
///
/// The person's pictures go to the model with their message
/// ([`Agent::run_stream_with_parts`]). A model that cannot read pictures refuses the message
/// that carries one ([`ModelError::Unsupported`]: the person is told); with the agents
/// [`build`](Self::build) and [`text_only`](Self::text_only) make, the conversation goes on —
/// a later message is answered with each earlier picture named in a line of text (its
/// placeholder) instead of refused again.
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
        let builder = Agent::builder(EarlierMediaAsText(model))
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
        let agent = Agent::builder(EarlierMediaAsText(model))
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

    fn reply_with_parts(
        &self,
        session_id: &str,
        principal: &str,
        text: &str,
        parts: Vec<Part>,
    ) -> EventStream {
        Box::pin(self.agent.acting_as(principal).run_stream_with_parts(
            session_id.to_owned(),
            text.to_owned(),
            parts,
        ))
    }

    fn store(&self) -> Arc<dyn SessionStore> {
        Arc::clone(self.agent.store())
    }

    fn blob_store(&self) -> Option<Arc<dyn toolwright_core::BlobStore>> {
        self.agent.dispatcher().blob_store().cloned()
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

/// The model of the panel's own agents: a model that refuses a part
/// ([`ModelError::Unsupported`]) in a message before the latest user message — a picture the
/// person sent earlier, which it refused then — is asked again with every such part of the
/// earlier messages replaced by its placeholder line ([`Part::placeholder`]), so one refused
/// picture does not end the conversation. A refused part in the latest user message is the
/// error, as the model gave it.
struct EarlierMediaAsText<M>(M);

impl<M> EarlierMediaAsText<M> {
    /// The request with the parts of kind `kind` before its latest user message as text;
    /// `None` when that message holds one itself, or there is none to replace.
    fn lowered(request: &ChatRequest, kind: &str) -> Option<ChatRequest> {
        let latest = request
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))?;
        if request.messages[latest]
            .parts()
            .iter()
            .any(|p| p.kind() == kind)
        {
            return None;
        }
        let mut replaced = false;
        let mut out = request.clone();
        for m in &mut out.messages[..latest] {
            let parts = match m {
                Message::User { parts, .. }
                | Message::Assistant { parts, .. }
                | Message::Tool { parts, .. } => parts,
                Message::System { .. } => continue,
            };
            for p in parts.iter_mut().filter(|p| p.kind() == kind) {
                *p = Part::text(p.placeholder());
                replaced = true;
            }
        }
        replaced.then_some(out)
    }

    fn has_media(request: &ChatRequest) -> bool {
        request.messages.iter().any(|m| {
            m.parts()
                .iter()
                .any(|p| matches!(p, Part::Image(_) | Part::Audio(_) | Part::File(_)))
        })
    }
}

#[async_trait::async_trait]
impl<M: ChatModel> ChatModel for EarlierMediaAsText<M> {
    fn info(&self) -> ModelInfo {
        self.0.info()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        if !Self::has_media(&request) {
            return self.0.chat(request).await;
        }
        match self.0.chat(request.clone()).await {
            Err(ModelError::Unsupported { part, backend }) => match Self::lowered(&request, part) {
                Some(lowered) => self.0.chat(lowered).await,
                None => Err(ModelError::Unsupported { part, backend }),
            },
            other => other,
        }
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        use futures::StreamExt;
        if !Self::has_media(&request) {
            return self.0.stream(request).await;
        }
        let refused = match self.0.stream(request.clone()).await {
            Err(ModelError::Unsupported { part, backend }) => (part, backend),
            Err(e) => return Err(e),
            Ok(mut s) => match s.next().await {
                // refused as the stream's first event rather than before it
                Some(Err(ModelError::Unsupported { part, backend })) => (part, backend),
                first => return Ok(Box::pin(futures::stream::iter(first).chain(s))),
            },
        };
        match Self::lowered(&request, refused.0) {
            Some(lowered) => self.0.stream(lowered).await,
            None => Err(ModelError::Unsupported {
                part: refused.0,
                backend: refused.1,
            }),
        }
    }
}

/// The sentence the person sees when an answer failed; the detail goes to the log.
pub(crate) fn user_sentence(e: &LoopError) -> &'static str {
    match e {
        LoopError::Model(ModelError::Unsupported { part, .. }) => match *part {
            "image" => {
                "The assistant cannot look at pictures. Your message is kept, but it was not answered: describe the picture in words, or ask without it."
            }
            _ => {
                "The assistant cannot read this kind of attachment. Your message is kept, but it was not answered: ask without the attachment."
            }
        },
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
