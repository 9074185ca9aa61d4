//! The message bus: asynchronous delivery by recipient id (Q7–Q9).
//!
//! Each recipient has one mailbox, a bounded FIFO queue. `send` never waits: it appends to the
//! recipient's queue under a short lock and wakes the subscriber. A slow recipient therefore
//! never blocks a sender or the other recipients. When a mailbox is full, the **oldest**
//! message is dropped to make room and counted ([`Subscription::dropped`]); the sender learns
//! it from [`Delivery::dropped_oldest`]. A recipient that is not subscribed (never was, or its
//! [`Subscription`] was dropped) is an error to the sender ([`BusError::NotSubscribed`]), so a
//! gone recipient neither holds memory nor silently swallows messages.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

use crate::{QuickReplies, QuickRepliesError, validate_quick_replies};

/// Messages a mailbox holds before the oldest is dropped.
pub const DEFAULT_MAILBOX_CAPACITY: usize = 256;

/// A message to send: sender, recipient, text and optional quick replies.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutgoingMessage {
    /// Sender id.
    pub from: String,
    /// Recipient id.
    pub to: String,
    /// The text.
    pub text: String,
    /// Validated quick replies; `None` for none.
    pub quick_replies: Option<QuickReplies>,
    /// The id of the message this one answers, if any.
    pub in_reply_to: Option<u64>,
}

impl OutgoingMessage {
    /// A plain text message.
    pub fn new(from: impl Into<String>, to: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            from: from.into(),
            to: to.into(),
            text: text.into(),
            quick_replies: None,
            in_reply_to: None,
        }
    }
    /// Attach quick replies.
    pub fn with_quick_replies(mut self, q: Option<QuickReplies>) -> Self {
        self.quick_replies = q;
        self
    }
    /// Mark it as the answer to message `id`.
    pub fn in_reply_to(mut self, id: u64) -> Self {
        self.in_reply_to = Some(id);
        self
    }
}

/// A delivered message. Its JSON payload ([`BusMessage::to_payload`]) is
/// `{"id", "from", "to", "text", "quickReplies"?, "inReplyTo"?}`; `quickReplies` is present
/// only when there are some, in the order sent (Q7–Q9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct BusMessage {
    /// Bus-wide sequence number, increasing in send order.
    pub id: u64,
    /// Sender id.
    pub from: String,
    /// Recipient id.
    pub to: String,
    /// The text.
    pub text: String,
    /// Quick replies, in order; empty for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quick_replies: Vec<String>,
    /// The id of the message this one answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<u64>,
}

impl BusMessage {
    /// The JSON payload.
    pub fn to_payload(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    /// Reads a payload back, checking `quickReplies` by the rules of Q2–Q6 (Q9).
    pub fn from_payload(payload: &Value) -> Result<Self, BusError> {
        validate_quick_replies(payload.get("quickReplies"))?;
        serde_json::from_value(payload.clone()).map_err(|e| BusError::BadPayload(e.to_string()))
    }
}

/// What `send` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The id given to the message.
    pub id: u64,
    /// True when the recipient's mailbox was full and its oldest message was dropped.
    pub dropped_oldest: bool,
}

/// Why a message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BusError {
    /// Nobody is subscribed under that id.
    #[error("recipient {0:?} is not connected")]
    NotSubscribed(String),
    /// A payload's `quickReplies` broke a rule.
    #[error(transparent)]
    QuickReplies(#[from] QuickRepliesError),
    /// A payload is not a message.
    #[error("not a bus message: {0}")]
    BadPayload(String),
}

struct Mailbox {
    queue: VecDeque<BusMessage>,
    dropped: u64,
    generation: u64,
    notify: Arc<Notify>,
}

struct State {
    next_id: u64,
    next_generation: u64,
    boxes: HashMap<String, Mailbox>,
}

struct Inner {
    state: Mutex<State>,
    capacity: usize,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The bus. Cheap to clone; clones share the mailboxes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use messaging::{MessageBus, OutgoingMessage};
/// let bus = MessageBus::with_capacity(2);
/// let mut inbox = bus.subscribe("alice");
/// for t in ["1", "2", "3"] {
///     bus.send(OutgoingMessage::new("bob", "alice", t)).unwrap();
/// }
/// // the mailbox holds 2: the oldest was dropped and counted
/// assert_eq!(inbox.recv().await.unwrap().text, "2");
/// assert_eq!(inbox.dropped(), 1);
/// assert!(bus.send(OutgoingMessage::new("bob", "carol", "hi")).is_err()); // not subscribed
/// # }
/// ```
#[derive(Clone)]
pub struct MessageBus {
    inner: Arc<Inner>,
}

impl Default for MessageBus {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MessageBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("MessageBus")
            .field("capacity", &self.inner.capacity)
            .field("recipients", &s.boxes.len())
            .finish()
    }
}

impl MessageBus {
    /// A bus with mailboxes of [`DEFAULT_MAILBOX_CAPACITY`].
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_MAILBOX_CAPACITY)
    }

    /// A bus whose mailboxes hold `capacity` messages (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    next_id: 1,
                    next_generation: 1,
                    boxes: HashMap::new(),
                }),
                capacity: capacity.max(1),
            }),
        }
    }

    /// The mailbox capacity.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Subscribes under `recipient`. A later subscription under the same id replaces this one
    /// (this one's `recv` then returns `None`); messages already queued go to the new one.
    pub fn subscribe(&self, recipient: impl Into<String>) -> Subscription {
        let recipient = recipient.into();
        let notify = Arc::new(Notify::new());
        let mut s = self.inner.lock();
        let generation = s.next_generation;
        s.next_generation += 1;
        match s.boxes.get_mut(&recipient) {
            Some(b) => {
                b.notify.notify_one(); // wake the replaced subscriber so it sees it is closed
                b.generation = generation;
                b.notify = notify.clone();
            }
            None => {
                s.boxes.insert(
                    recipient.clone(),
                    Mailbox {
                        queue: VecDeque::new(),
                        dropped: 0,
                        generation,
                        notify: notify.clone(),
                    },
                );
            }
        }
        Subscription {
            bus: self.inner.clone(),
            recipient,
            generation,
            notify,
        }
    }

    /// Whether someone is subscribed under `recipient`.
    pub fn is_subscribed(&self, recipient: &str) -> bool {
        self.inner.lock().boxes.contains_key(recipient)
    }

    /// Delivers a message without waiting. Errors only when the recipient is not subscribed.
    pub fn send(&self, message: OutgoingMessage) -> Result<Delivery, BusError> {
        let mut s = self.inner.lock();
        let id = s.next_id;
        let capacity = self.inner.capacity;
        let Some(b) = s.boxes.get_mut(&message.to) else {
            return Err(BusError::NotSubscribed(message.to));
        };
        let mut dropped_oldest = false;
        if b.queue.len() >= capacity {
            b.queue.pop_front();
            b.dropped += 1;
            dropped_oldest = true;
            tracing::warn!(recipient = %message.to, dropped = b.dropped, "mailbox full: dropped its oldest message");
        }
        b.queue.push_back(BusMessage {
            id,
            from: message.from,
            to: message.to,
            text: message.text,
            quick_replies: message
                .quick_replies
                .map(QuickReplies::into_vec)
                .unwrap_or_default(),
            in_reply_to: message.in_reply_to,
        });
        b.notify.notify_one();
        s.next_id += 1;
        Ok(Delivery { id, dropped_oldest })
    }
}

/// A recipient's end: receives its messages in send order. Dropping it unsubscribes.
pub struct Subscription {
    bus: Arc<Inner>,
    recipient: String,
    generation: u64,
    notify: Arc<Notify>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("recipient", &self.recipient)
            .finish()
    }
}

enum Poll {
    Message(BusMessage),
    Empty,
    Closed,
}

impl Subscription {
    /// The recipient id.
    pub fn recipient(&self) -> &str {
        &self.recipient
    }

    fn poll(&self) -> Poll {
        let mut s = self.bus.lock();
        match s.boxes.get_mut(&self.recipient) {
            Some(b) if b.generation == self.generation => match b.queue.pop_front() {
                Some(m) => Poll::Message(m),
                None => Poll::Empty,
            },
            _ => Poll::Closed,
        }
    }

    /// The next message, waiting for one; `None` once this subscription was replaced.
    pub async fn recv(&mut self) -> Option<BusMessage> {
        loop {
            match self.poll() {
                Poll::Message(m) => return Some(m),
                Poll::Closed => return None,
                // `notify_one` stores a permit when nobody waits, so no wake-up is lost.
                Poll::Empty => self.notify.notified().await,
            }
        }
    }

    /// The next message if one is waiting.
    pub fn try_recv(&mut self) -> Option<BusMessage> {
        match self.poll() {
            Poll::Message(m) => Some(m),
            _ => None,
        }
    }

    /// How many messages were dropped from this mailbox because it was full.
    pub fn dropped(&self) -> u64 {
        let s = self.bus.lock();
        s.boxes
            .get(&self.recipient)
            .filter(|b| b.generation == self.generation)
            .map_or(0, |b| b.dropped)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut s = self.bus.lock();
        if s.boxes
            .get(&self.recipient)
            .is_some_and(|b| b.generation == self.generation)
        {
            s.boxes.remove(&self.recipient);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn qr(items: &[&str]) -> Option<QuickReplies> {
        QuickReplies::new(items.iter().map(|s| (*s).to_owned()).collect()).unwrap()
    }

    #[tokio::test]
    async fn q7_bus_carries_quick_replies_in_payload() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("user");
        bus.send(
            OutgoingMessage::new("agent", "user", "Pick one").with_quick_replies(qr(&["A", "B"])),
        )
        .unwrap();
        let m = inbox.recv().await.unwrap();
        assert_eq!(m.quick_replies, vec!["A", "B"]);
        let p = m.to_payload();
        assert_eq!(p["quickReplies"], json!(["A", "B"]));
        assert_eq!(p["text"], "Pick one");
        assert_eq!(p["from"], "agent");
        // no quick replies: no key in the payload at all
        bus.send(OutgoingMessage::new("agent", "user", "plain"))
            .unwrap();
        let p = inbox.recv().await.unwrap().to_payload();
        assert!(p.get("quickReplies").is_none(), "{p}");
    }

    #[tokio::test]
    async fn q8_bus_keeps_quick_reply_order_and_message_order() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("u");
        let order = [
            "zeta", "alpha", "mu", "beta", "omega", "a", "b", "c", "d", "e",
        ];
        bus.send(OutgoingMessage::new("x", "u", "q").with_quick_replies(qr(&order)))
            .unwrap();
        for i in 0..50 {
            bus.send(OutgoingMessage::new("x", "u", i.to_string()))
                .unwrap();
        }
        assert_eq!(inbox.recv().await.unwrap().quick_replies, order);
        for i in 0..50 {
            assert_eq!(inbox.recv().await.unwrap().text, i.to_string());
        }
    }

    #[tokio::test]
    async fn q9_recipient_reads_quick_replies_from_payload() {
        // an agent recipient gets the message in another task and reads the payload
        let bus = MessageBus::new();
        let mut agent_inbox = bus.subscribe("agent-b");
        let reader = tokio::spawn(async move {
            let m = agent_inbox.recv().await.unwrap();
            let payload = m.to_payload();
            let back = BusMessage::from_payload(&payload).unwrap();
            back.quick_replies
        });
        bus.send(
            OutgoingMessage::new("agent-a", "agent-b", "Proceed?")
                .with_quick_replies(qr(&["Go", "Stop"])),
        )
        .unwrap();
        assert_eq!(reader.await.unwrap(), vec!["Go", "Stop"]);
        // a payload that breaks a rule is refused when read
        let bad = json!({"id": 1, "from": "a", "to": "b", "text": "t", "quickReplies": ["", "x"]});
        assert_eq!(
            BusMessage::from_payload(&bad).unwrap_err().to_string(),
            "quickReplies[0] is empty"
        );
        assert!(BusMessage::from_payload(&json!({"text": 1})).is_err());
    }

    #[tokio::test]
    async fn q7_slow_recipient_never_blocks_others_and_overflow_drops_oldest() {
        let bus = MessageBus::with_capacity(4);
        let slow = bus.subscribe("slow"); // never reads
        let mut fast = bus.subscribe("fast");
        for i in 0..1000u32 {
            let d = bus
                .send(OutgoingMessage::new("s", "slow", i.to_string()))
                .unwrap();
            assert_eq!(d.dropped_oldest, i >= 4);
            bus.send(OutgoingMessage::new("s", "fast", i.to_string()))
                .unwrap();
            assert_eq!(fast.recv().await.unwrap().text, i.to_string());
        }
        assert_eq!(slow.dropped(), 996);
        let mut slow = slow;
        let kept: Vec<String> = std::iter::from_fn(|| slow.try_recv().map(|m| m.text)).collect();
        assert_eq!(kept, ["996", "997", "998", "999"]);
    }

    #[tokio::test]
    async fn q7_gone_recipient_is_an_error_to_the_sender() {
        let bus = MessageBus::new();
        let inbox = bus.subscribe("gone");
        drop(inbox);
        let e = bus
            .send(OutgoingMessage::new("a", "gone", "hi"))
            .unwrap_err();
        assert_eq!(e, BusError::NotSubscribed("gone".into()));
        assert_eq!(e.to_string(), "recipient \"gone\" is not connected");
        assert!(!bus.is_subscribed("gone"));
    }

    #[tokio::test]
    async fn q7_recv_waits_for_a_later_send_and_resubscribe_closes_the_old_one() {
        let bus = MessageBus::new();
        let mut first = bus.subscribe("r");
        let b2 = bus.clone();
        let waiter = tokio::spawn(async move { first.recv().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut second = bus.subscribe("r");
        // the replaced subscription ends
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .unwrap()
                .unwrap(),
            None
        );
        let w2 = tokio::spawn(async move { second.recv().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        b2.send(OutgoingMessage::new("a", "r", "late").in_reply_to(7))
            .unwrap();
        let m = tokio::time::timeout(Duration::from_secs(5), w2)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!((m.text.as_str(), m.in_reply_to), ("late", Some(7)));
    }

    #[tokio::test]
    async fn q7_ids_increase_in_send_order() {
        let bus = MessageBus::new();
        let mut a = bus.subscribe("a");
        let mut b = bus.subscribe("b");
        let d1 = bus.send(OutgoingMessage::new("x", "a", "1")).unwrap();
        let d2 = bus.send(OutgoingMessage::new("x", "b", "2")).unwrap();
        assert!(d2.id > d1.id);
        assert_eq!(a.try_recv().unwrap().id, d1.id);
        assert_eq!(b.try_recv().unwrap().id, d2.id);
        assert!(a.try_recv().is_none());
    }
}
