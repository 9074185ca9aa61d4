//! Sessions (plain data) and [`History`], messages with their token counts cached.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use toolwright_core::{Message, TokenCounter};

/// A conversation by id: its messages in order (C1).
///
/// Messages are the gateway's own types: system, user (including the
/// `[Tool result for NAME]\n…` user messages of the JSON-decision loop), assistant (optionally
/// with tool calls) and tool results (`tool_call_id`, `name`, `content`).
///
/// ```
/// use toolwright_context_engine::Session;
/// use toolwright_core::{Message, ToolCall};
/// let mut s = Session::new("chat-42");
/// s.messages.push(Message::user("Weather in Paris?"));
/// s.messages.push(Message::assistant_with_tool_calls(
///     "",
///     vec![ToolCall::new("call_1", "weather", serde_json::json!({"city": "Paris"}))],
/// ));
/// s.messages.push(Message::tool("call_1", "weather", "18°C"));
/// assert_eq!(s.messages.len(), 3);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The session's id.
    pub id: String,
    /// Its messages, oldest first.
    pub messages: Vec<Message>,
}

impl Session {
    /// An empty session.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            messages: Vec::new(),
        }
    }
}

/// Messages with their token counts, computed once when each message is added, so that
/// building a context from a long history costs no tokenisation (C3).
///
/// The counts belong to one [`TokenCounter`]; [`crate::ContextBuilder::build`] reuses them only
/// when the builder's counter has the same [`id`](TokenCounter::id), and recounts otherwise.
///
/// ```
/// use std::sync::Arc;
/// use toolwright_context_engine::{History};
/// use toolwright_core::{EstimateCounter};
/// use toolwright_core::Message;
/// let mut h = History::new(Arc::new(EstimateCounter));
/// h.push(Message::user("hi"));
/// assert_eq!(h.token_counts(), &[5]); // 3 framing + 1 role + 1 text
/// ```
#[derive(Clone)]
pub struct History {
    messages: Vec<Message>,
    counts: Vec<usize>,
    counter: Arc<dyn TokenCounter>,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("counter", &self.counter.id())
            .field("messages", &self.messages)
            .field("counts", &self.counts)
            .finish()
    }
}

impl History {
    /// An empty history counted with `counter`.
    pub fn new(counter: Arc<dyn TokenCounter>) -> Self {
        Self {
            messages: Vec::new(),
            counts: Vec::new(),
            counter,
        }
    }

    /// A history of these messages (for example a loaded [`Session`]'s), counting each once.
    pub fn from_messages(counter: Arc<dyn TokenCounter>, messages: Vec<Message>) -> Self {
        let counts = messages.iter().map(|m| counter.count_message(m)).collect();
        Self {
            messages,
            counts,
            counter,
        }
    }

    /// Appends a message, counting its tokens.
    pub fn push(&mut self, message: Message) {
        self.counts.push(self.counter.count_message(&message));
        self.messages.push(message);
    }

    /// Appends messages in order, counting each.
    pub fn extend(&mut self, messages: impl IntoIterator<Item = Message>) {
        for m in messages {
            self.push(m);
        }
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The token count of each message, aligned with [`messages`](Self::messages).
    pub fn token_counts(&self) -> &[usize] {
        &self.counts
    }

    /// The counter the counts were made with.
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are no messages.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages, dropping the counts.
    pub fn into_messages(self) -> Vec<Message> {
        self.messages
    }
}
