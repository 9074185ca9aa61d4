//! The message bus: asynchronous delivery by recipient id (Q7–Q9), in one process or across
//! processes over a broker.
//!
//! [`MessageBus`] is the one face of the bus; a narrow backend trait sits behind it:
//!
//! * **in-process** ([`MessageBus::new`], the default): each recipient has one mailbox, a
//!   bounded FIFO queue. `send` never waits: it appends to the recipient's queue under a short
//!   lock and wakes the subscriber. A slow recipient therefore never blocks a sender or the
//!   other recipients. When a mailbox is full, the **oldest** message is dropped to make room and
//!   counted ([`Subscription::dropped`]); the sender learns it from [`Delivery::dropped_oldest`].
//!   A recipient that is not subscribed (never was, or its [`Subscription`] was dropped) is an
//!   error to the sender ([`BusError::NotSubscribed`]), so a gone recipient neither holds memory
//!   nor silently swallows messages.
//! * **NATS JetStream** (cargo feature `nats`, `MessageBus::connect_nats`): messages are
//!   stored by the broker until their recipient, in any process, takes them; see `docs/bus.md`.
//!
//! Rules every backend shares, kept here once: every message carries a sender-chosen
//! [`msg_id`](OutgoingMessage::msg_id) (random unless set), and a [`Subscription`] hands out a
//! message id at most once among the last [`DEDUP_WINDOW`] it handed out, so a message sent
//! again after an error (same `msg_id`) reaches its recipient once.
//!
//! Where things are: this file holds the front ([`MessageBus`], [`Subscription`],
//! [`Received`]), the message types, [`BusError`] and the backend traits; `local` the in-process
//! backend; `dedup` the filter of repeated message ids; `validate` the rules for message ids and
//! recipient families; `nats` (cargo feature `nats`) the NATS JetStream backend.

mod dedup;
mod local;
#[cfg(feature = "nats")]
mod nats;
mod validate;

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{QuickReplies, QuickRepliesError, validate_quick_replies};
use dedup::{Seen, lock_seen};
use local::Local;
#[cfg(feature = "nats")]
pub use nats::NatsConfig;
use validate::{check_family, check_msg_id, family_of};

/// Messages a mailbox holds before the oldest is dropped.
pub const DEFAULT_MAILBOX_CAPACITY: usize = 256;

/// How many of the message ids it last handed out a [`Subscription`] remembers to drop a
/// repeat of one.
pub const DEDUP_WINDOW: usize = 64;

/// Longest [`OutgoingMessage::msg_id`], in bytes.
pub const MAX_MSG_ID_LEN: usize = 128;

/// Longest recipient family ([`MessageBus::subscribe_group`]), in bytes.
pub const MAX_FAMILY_LEN: usize = 64;

/// A message to send: sender, recipient, text and optional quick replies.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutgoingMessage {
    /// The sender's id for this message: 32 random hex digits unless set with
    /// [`OutgoingMessage::with_msg_id`]. Sending the same message again (a clone, or the same
    /// `msg_id`) after an error delivers it once.
    pub msg_id: String,
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
    /// A plain text message with a fresh random [`msg_id`](Self::msg_id).
    pub fn new(from: impl Into<String>, to: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            msg_id: format!("{:032x}", rand::random::<u128>()),
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
    /// Sets the message's id (1 to [`MAX_MSG_ID_LEN`] bytes of printable ASCII, no spaces;
    /// checked by `send`), e.g. one derived from the work that produced the message, so that
    /// doing that work again does not deliver the message twice.
    pub fn with_msg_id(mut self, msg_id: impl Into<String>) -> Self {
        self.msg_id = msg_id.into();
        self
    }
}

/// A delivered message. Its JSON payload ([`BusMessage::to_payload`]) is
/// `{"id", "msgId", "from", "to", "text", "quickReplies"?, "inReplyTo"?}`; `quickReplies` is
/// present only when there are some, in the order sent (Q7–Q9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct BusMessage {
    /// Bus-wide sequence number, increasing in the order the bus accepted the messages (with a
    /// broker: its stream sequence).
    pub id: u64,
    /// The sender's id for the message ([`OutgoingMessage::msg_id`]).
    #[serde(default)]
    pub msg_id: String,
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
    /// The message as `send` will deliver it, numbered `id`.
    pub(crate) fn from_outgoing(id: u64, m: OutgoingMessage) -> Self {
        Self {
            id,
            msg_id: m.msg_id,
            from: m.from,
            to: m.to,
            text: m.text,
            quick_replies: m
                .quick_replies
                .map(QuickReplies::into_vec)
                .unwrap_or_default(),
            in_reply_to: m.in_reply_to,
        }
    }
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
    /// True when the recipient's mailbox was full and its oldest message was dropped
    /// (in-process bus only; a broker refuses instead of dropping).
    pub dropped_oldest: bool,
    /// True when the broker already held a message with this `msg_id` (sent again within its
    /// de-duplication window): it was not stored twice, and `id` is the first one's.
    pub duplicate: bool,
}

/// Why a message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BusError {
    /// Nobody is subscribed under that id (in-process bus: it keeps no message for a recipient
    /// that is not there).
    #[error("recipient {0:?} is not connected")]
    NotSubscribed(String),
    /// A payload's `quickReplies` broke a rule.
    #[error(transparent)]
    QuickReplies(#[from] QuickRepliesError),
    /// A payload is not a message.
    #[error("not a bus message: {0}")]
    BadPayload(String),
    /// A message id breaks the rules of [`OutgoingMessage::with_msg_id`].
    #[error(
        "message id {0:?} is not allowed: use 1 to 128 bytes of printable ASCII without spaces"
    )]
    BadMessageId(String),
    /// A recipient family breaks the rules of [`MessageBus::subscribe_group`].
    #[error(
        "recipient family {0:?} is not allowed: use 1 to 64 bytes of A-Z a-z 0-9 _ - (not \"_\" \
         alone, which stands for recipients without a family), the part of the recipient ids \
         before their first ':' (\"user\" for \"user:42\")"
    )]
    BadFamily(String),
    /// The broker refused a subscription because another one already receives the same
    /// recipients: a recipient `FAMILY:…` is received either by its own subscriptions or by the
    /// family's group subscriptions, not both. The subscription retries by itself and starts
    /// once the other consumer is gone; `reason` names it and says how to remove it.
    #[error("the message broker at {url} refused this subscription: {reason}")]
    SubscriptionConflict {
        /// The broker's address.
        url: String,
        /// What overlaps and what to do.
        reason: String,
    },
    /// The broker cannot be reached: the message was **not** stored.
    #[error(
        "the message broker at {url} cannot be reached ({reason}); the message was not sent: \
         start the broker (nats-server -js) or correct the broker URL, then send the same message again"
    )]
    BrokerUnavailable {
        /// The broker's address.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The broker did not confirm the message in time: it may or may not be stored. Sending
    /// the same message again (same `msg_id`) is safe: it is delivered once.
    #[error(
        "the message broker at {url} did not confirm the message ({reason}); it may or may not \
         have been stored: send the same message again (same msg_id), it will be delivered once"
    )]
    NotConfirmed {
        /// The broker's address.
        url: String,
        /// What failed.
        reason: String,
    },
    /// A message was dealt with but the broker did not record its confirmation
    /// ([`Received::confirm`]): it may hand the message out again once its `ack_wait` runs out.
    #[error(
        "the message broker at {url} did not record the confirmation of message {msg_id:?} \
         ({reason}); it may hand the message out again after its ack wait: nothing to do if the \
         work is idempotent by msg_id (a repeat can be recognised by it)"
    )]
    ConfirmationLost {
        /// The broker's address.
        url: String,
        /// The message's [`BusMessage::msg_id`].
        msg_id: String,
        /// What failed.
        reason: String,
    },
    /// The broker refused to let this client in: wrong user, password, token or credentials
    /// (reported at once, not retried). `url` is shown without its password or token.
    #[error(
        "the message broker at {url} refused this client's credentials ({reason}): check the user \
         and password or token in the broker URL (nats://USER:PASSWORD@HOST:PORT or \
         nats://TOKEN@HOST:PORT; percent-encode @ : / in them) and the credentials file \
         (NATS_CREDS) against the broker's `authorization` settings"
    )]
    Unauthorized {
        /// The broker's address, without secrets.
        url: String,
        /// The broker's or client's words.
        reason: String,
    },
    /// The broker let this client in but its user may not use a subject the bus needs
    /// (publish to a recipient's subject, or a JetStream API subject): the message or setup was
    /// refused, nothing was stored.
    #[error(
        "the message broker at {url} does not permit this user that: {reason}; a sender needs \
         publish permission on the recipient's subject, a worker the permissions listed in \
         docs/bus.md (\"Broker users and permissions\")"
    )]
    PermissionDenied {
        /// The broker's address, without secrets.
        url: String,
        /// The broker's words, naming the subject.
        reason: String,
    },
    /// The file of broker credentials (`NATS_CREDS`, `NatsConfig::credentials`) cannot be
    /// read or is not credentials.
    #[error(
        "the broker credentials file {path} cannot be used ({reason}): give a `.creds` file as \
         `nsc` writes it (user JWT and NKey seed) or a file holding a user NKey seed (SU…)"
    )]
    Credentials {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The broker refused the message or the bus's setup (e.g. storage full, a stream of the
    /// same name with other subjects); the message was not stored.
    #[error("the message broker at {url} refused: {reason}")]
    Broker {
        /// The broker's address.
        url: String,
        /// The broker's answer.
        reason: String,
    },
}

/// One step of reading an inbox.
pub(crate) enum Poll {
    /// A message, and how to settle it with whoever handed it out.
    Message(BusMessage, Box<dyn Settle>),
    Empty,
    Closed,
}

/// How a backend learns what became of a message it handed out: confirmed (its work is done,
/// forget it) or given back (hand it out again). Dropping it unsettled gives the message back
/// where the backend can (a broker: once `ack_wait` runs out, or at once when it notices).
#[async_trait::async_trait]
pub(crate) trait Settle: Send + Sync {
    /// Confirms and waits until the backend has recorded it.
    async fn confirm(self: Box<Self>) -> Result<(), BusError>;
    /// Confirms without waiting for the outcome (a repeat dropped by id, or `recv`).
    fn confirm_later(self: Box<Self>);
    /// Gives `message` back, to be handed out again.
    fn give_back(self: Box<Self>, message: BusMessage);
}

/// What carries messages: the in-process mailboxes or a broker. Every backend promises: a
/// message `send` returned `Ok` for reaches a subscription of its recipient (the in-process
/// backend: one subscribed at that time), in the order the backend accepted the messages.
#[async_trait::async_trait]
pub(crate) trait Backend: Send + Sync + 'static {
    /// Stores `message` for its recipient, or says why not.
    async fn send(&self, message: OutgoingMessage) -> Result<Delivery, BusError>;
    /// Starts receiving for `recipient`; an earlier subscription of this process under the same
    /// id ends.
    fn subscribe(&self, recipient: &str) -> Box<dyn Inbox>;
    /// Starts receiving for every recipient of `family` (valid), shared with the family's other
    /// group subscriptions: each message goes to one of them.
    fn subscribe_group(&self, family: &str) -> Box<dyn Inbox>;
    /// Whether this process has a subscription under `recipient` (its own, or its family's group).
    fn is_subscribed(&self, recipient: &str) -> bool;
    /// For `Debug`.
    fn describe(&self) -> String;
    /// The in-process mailbox capacity, when there is one.
    fn capacity(&self) -> usize;
}

/// One recipient's end of a backend.
#[async_trait::async_trait]
pub(crate) trait Inbox: Send + Sync {
    /// Takes the next message if one is here.
    fn poll(&mut self) -> Poll;
    /// Waits until `poll` may have something new (no wake-up is lost between a `poll` and this).
    async fn changed(&mut self);
    /// Messages dropped because a mailbox was full.
    fn dropped(&self) -> u64;
    /// Why messages cannot arrive now (a broker that cannot be reached), if so.
    fn problem(&self) -> Option<BusError>;
}

/// The bus. Cheap to clone; clones share the mailboxes (or the broker connection).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use toolwright_messaging::{MessageBus, OutgoingMessage};
/// let bus = MessageBus::with_capacity(2);
/// let mut inbox = bus.subscribe("alice");
/// for t in ["1", "2", "3"] {
///     bus.send(OutgoingMessage::new("bob", "alice", t)).await.unwrap();
/// }
/// // the mailbox holds 2: the oldest was dropped and counted
/// assert_eq!(inbox.recv().await.unwrap().text, "2");
/// assert_eq!(inbox.dropped(), 1);
/// assert!(bus.send(OutgoingMessage::new("bob", "carol", "hi")).await.is_err()); // not subscribed
/// # }
/// ```
#[derive(Clone)]
pub struct MessageBus {
    backend: Arc<dyn Backend>,
}

impl Default for MessageBus {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MessageBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBus")
            .field("backend", &self.backend.describe())
            .finish()
    }
}

impl MessageBus {
    /// An in-process bus with mailboxes of [`DEFAULT_MAILBOX_CAPACITY`].
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_MAILBOX_CAPACITY)
    }

    /// An in-process bus whose mailboxes hold `capacity` messages (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self::from_backend(Arc::new(Local::new(capacity)))
    }

    pub(crate) fn from_backend(backend: Arc<dyn Backend>) -> Self {
        Self { backend }
    }

    /// The in-process mailbox capacity (with a broker: 1, the one message a subscription holds
    /// before its recipient takes it).
    pub fn capacity(&self) -> usize {
        self.backend.capacity()
    }

    /// Subscribes under `recipient`. A later subscription under the same id in this process
    /// replaces this one (this one's `recv` then returns `None`); messages not yet taken go to
    /// the new one.
    pub fn subscribe(&self, recipient: impl Into<String>) -> Subscription {
        let recipient = recipient.into();
        Subscription {
            inbox: self.backend.subscribe(&recipient),
            recipient,
            seen: Arc::default(),
        }
    }

    /// Subscribes to a whole **family** of recipients, `FAMILY:…` (the part of a recipient id
    /// before its first ':'), as a work queue: the family's group subscriptions — in this
    /// process and, with a broker, in every process — share its messages, each message handed
    /// to **one** of them, in the order the bus accepted them, at least once, repeats dropped by
    /// `msg_id` ([`BusMessage::to`] tells the recipient). One subscription per worker replaces
    /// one per recipient.
    ///
    /// In process, a recipient's own subscription ([`MessageBus::subscribe`]) takes its
    /// messages before the group does; the family's group subscriptions share one mailbox of
    /// [`MessageBus::capacity`] (full: the oldest is dropped, as for a recipient). With a
    /// broker, a family is received either by per-recipient subscriptions or by group ones, not
    /// both: the later one reports [`BusError::SubscriptionConflict`] in
    /// [`Subscription::problem`] (see `docs/bus.md`).
    ///
    /// Fails with [`BusError::BadFamily`] unless `family` is 1 to [`MAX_FAMILY_LEN`] bytes of
    /// `A-Z a-z 0-9 _ -` (and not `_` alone).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use toolwright_messaging::{BusError, MessageBus, OutgoingMessage};
    /// let bus = MessageBus::new();
    /// let mut users = bus.subscribe_group("user").unwrap();
    /// let mut carol = bus.subscribe("user:carol"); // her own subscription comes first
    /// for to in ["user:alice", "user:bob", "user:carol", "user:alice"] {
    ///     bus.send(OutgoingMessage::new("agent", to, "hi")).await.unwrap();
    /// }
    /// assert!(bus.is_subscribed("user:dave")); // the group takes any user:…
    /// let got: Vec<String> = std::iter::from_fn(|| users.try_recv().map(|m| m.to)).collect();
    /// assert_eq!(got, ["user:alice", "user:bob", "user:alice"]); // in send order
    /// assert_eq!(carol.try_recv().unwrap().to, "user:carol");
    /// assert!(matches!(bus.subscribe_group("user:*"), Err(BusError::BadFamily(_))));
    /// # }
    /// ```
    pub fn subscribe_group(&self, family: &str) -> Result<Subscription, BusError> {
        check_family(family)?;
        Ok(Subscription {
            inbox: self.backend.subscribe_group(family),
            recipient: format!("{family}:*"),
            seen: Arc::default(),
        })
    }

    /// Whether someone in this process is subscribed under `recipient`: its own subscription,
    /// or a group subscription of its family.
    pub fn is_subscribed(&self, recipient: &str) -> bool {
        self.backend.is_subscribed(recipient)
    }

    /// Delivers a message. In process it never waits and errors only when the recipient is not
    /// subscribed; with a broker it returns once the broker has stored the message, and errors
    /// (typed, saying what to do) when it did not — a message is never silently lost.
    pub async fn send(&self, message: OutgoingMessage) -> Result<Delivery, BusError> {
        check_msg_id(&message.msg_id)?;
        self.backend.send(message).await
    }
}

/// A recipient's end: receives its messages in order. Dropping it unsubscribes.
///
/// Two ways to take a message:
/// * [`Subscription::recv`] / [`Subscription::try_recv`] confirm it as they hand it out (at
///   most once from there on: a process that dies before it has dealt with the message loses
///   it). For notifications shown and forgotten.
/// * [`Subscription::recv_unconfirmed`] hands out a [`Received`]: do the work (store the
///   message, …), then [`Received::confirm`]. Until then the message is the holder's: the bus
///   hands out nothing else of this subscription's consumer, and with a broker it keeps telling
///   the broker the message is in hand, however long the work takes. Dropped unconfirmed (an
///   error, a cancelled task) it is given back and handed out again; if the process dies, the
///   broker hands it to the next subscriber after `ack_wait`. So the message is dealt with at
///   least once: make the work idempotent by [`BusMessage::msg_id`].
pub struct Subscription {
    inbox: Box<dyn Inbox>,
    recipient: String,
    seen: Arc<Mutex<Seen>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("recipient", &self.recipient)
            .finish()
    }
}

impl Subscription {
    /// The recipient id (a group subscription: `FAMILY:*`).
    pub fn recipient(&self) -> &str {
        &self.recipient
    }

    fn next_new(&mut self) -> Poll {
        loop {
            match self.inbox.poll() {
                Poll::Message(m, settle) if !lock_seen(&self.seen).first_time(&m.msg_id) => {
                    tracing::debug!(recipient = %self.recipient, msg_id = %m.msg_id, "dropped a repeated message id");
                    settle.confirm_later();
                }
                other => return other,
            }
        }
    }

    async fn next_message(&mut self) -> Option<(BusMessage, Box<dyn Settle>)> {
        loop {
            match self.next_new() {
                Poll::Message(m, settle) => return Some((m, settle)),
                Poll::Closed => return None,
                Poll::Empty => self.inbox.changed().await,
            }
        }
    }

    /// The next message, waiting for one, confirmed as it is handed out; `None` once this
    /// subscription was replaced. With a broker it goes on waiting while the broker is away
    /// ([`Subscription::problem`] says so). To confirm only once the message is dealt with, use
    /// [`Subscription::recv_unconfirmed`].
    pub async fn recv(&mut self) -> Option<BusMessage> {
        let (m, settle) = self.next_message().await?;
        settle.confirm_later();
        Some(m)
    }

    /// The next message, waiting for one, **not yet confirmed**: call [`Received::confirm`]
    /// once it is dealt with; dropped unconfirmed, it is handed out again. `None` once this
    /// subscription was replaced.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), toolwright_messaging::BusError> {
    /// use toolwright_messaging::{MessageBus, OutgoingMessage};
    /// let bus = MessageBus::new();
    /// let mut inbox = bus.subscribe_group("user")?;
    /// bus.send(OutgoingMessage::new("agent", "user:alice", "hi")).await?;
    /// let got = inbox.recv_unconfirmed().await.unwrap();
    /// drop(got); // the work failed before it was done: the message is given back
    /// let again = inbox.recv_unconfirmed().await.unwrap();
    /// assert_eq!((again.message().to.as_str(), again.message().text.as_str()), ("user:alice", "hi"));
    /// // … store it, then:
    /// again.confirm().await?;
    /// assert!(inbox.try_recv().is_none());
    /// # Ok(()) }
    /// ```
    pub async fn recv_unconfirmed(&mut self) -> Option<Received> {
        let (message, settle) = self.next_message().await?;
        Some(Received {
            message,
            settle: Some(settle),
            seen: self.seen.clone(),
        })
    }

    /// The next message if one is waiting (with a broker: already arrived in this process),
    /// confirmed as it is handed out.
    pub fn try_recv(&mut self) -> Option<BusMessage> {
        match self.next_new() {
            Poll::Message(m, settle) => {
                settle.confirm_later();
                Some(m)
            }
            _ => None,
        }
    }

    /// How many messages were dropped from this mailbox because it was full (in-process bus).
    pub fn dropped(&self) -> u64 {
        self.inbox.dropped()
    }

    /// Why messages cannot arrive right now (the broker cannot be reached), if so; `None` when
    /// all is well.
    pub fn problem(&self) -> Option<BusError> {
        self.inbox.problem()
    }
}

/// A message handed out by [`Subscription::recv_unconfirmed`] and not confirmed yet: read it
/// with [`Received::message`], deal with it, then [`Received::confirm`]. Dropped unconfirmed it
/// is given back and handed out again (to this subscription or, for a group, to any member). Hold
/// it only while dealing with the message: the subscription's consumer hands out nothing else
/// meanwhile.
pub struct Received {
    message: BusMessage,
    /// `None` once confirmed.
    settle: Option<Box<dyn Settle>>,
    seen: Arc<Mutex<Seen>>,
}

impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("message", &self.message)
            .finish()
    }
}

impl Received {
    /// The message.
    pub fn message(&self) -> &BusMessage {
        &self.message
    }

    /// Confirms the message: it is dealt with and is not handed out again. Returns once the bus
    /// has recorded it (with a broker: the broker acknowledged the acknowledgement). On
    /// [`BusError::ConfirmationLost`] the broker may hand the message out again after its
    /// `ack_wait`; work made idempotent by [`BusMessage::msg_id`] then does nothing twice.
    pub async fn confirm(mut self) -> Result<(), BusError> {
        match self.settle.take() {
            Some(settle) => settle.confirm().await,
            None => Ok(()),
        }
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        if let Some(settle) = self.settle.take() {
            let m = &self.message;
            tracing::debug!(to = %m.to, msg_id = %m.msg_id, "bus: a message dropped unconfirmed is given back");
            lock_seen(&self.seen).forget(&m.msg_id);
            settle.give_back(m.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Quick replies from string literals (also used by the other modules' tests).
    pub(super) fn qr(items: &[&str]) -> Option<QuickReplies> {
        QuickReplies::new(items.iter().map(|s| (*s).to_owned()).collect()).unwrap()
    }

    #[tokio::test]
    async fn q7_bus_carries_quick_replies_in_payload() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("user");
        bus.send(
            OutgoingMessage::new("agent", "user", "Pick one").with_quick_replies(qr(&["A", "B"])),
        )
        .await
        .unwrap();
        let m = inbox.recv().await.unwrap();
        assert_eq!(m.quick_replies, vec!["A", "B"]);
        let p = m.to_payload();
        assert_eq!(p["quickReplies"], json!(["A", "B"]));
        assert_eq!(p["text"], "Pick one");
        assert_eq!(p["from"], "agent");
        // no quick replies: no key in the payload at all
        bus.send(OutgoingMessage::new("agent", "user", "plain"))
            .await
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
            .await
            .unwrap();
        for i in 0..50 {
            bus.send(OutgoingMessage::new("x", "u", i.to_string()))
                .await
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
        .await
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
}
