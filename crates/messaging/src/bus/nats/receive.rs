//! The receiving side of the NATS backend: what a subscription and its pump share (one slot
//! holding the message handed out), settling a message handed out, the subscription's end
//! ([`NatsInbox`]) and the pump that pulls from its JetStream consumer, one unacknowledged
//! message at a time, and keeps telling the broker a message is in hand until it is settled.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::pull::MessagesErrorKind;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::Context;
use async_nats::jetstream::stream::{self, ConsumerErrorKind};
use async_nats::jetstream::{AckKind, ErrorCode, Message};
use futures::StreamExt;
use tokio::sync::{Notify, broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{
    BusError, BusMessage, Groups, Inbox, Nats, PULL_EXPIRES, PULL_HEARTBEAT, Poll, RETRY_CONFLICT,
    RETRY_MAX, RETRY_MIN, Settle, Subscribed, decode, family_of, family_token, lock,
};

impl Nats {
    pub(super) fn new_shared() -> Arc<Shared> {
        Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            arrived: Notify::new(),
            closed: CancellationToken::new(),
        })
    }

    /// Starts the task that moves messages for `target` from consumer `durable` (filtered to
    /// `filter`) into `shared`.
    pub(super) fn start_pump(
        &self,
        shared: Arc<Shared>,
        target: Target,
        durable: String,
        filter: String,
    ) {
        let pump = Pump {
            shared,
            js: self.js.clone(),
            url: self.url.clone(),
            stream: self.stream.clone(),
            target,
            consumer: pull::Config {
                durable_name: Some(durable),
                filter_subject: filter,
                ack_policy: AckPolicy::Explicit,
                deliver_policy: DeliverPolicy::All,
                ack_wait: self.ack_wait,
                max_ack_pending: 1,
                ..Default::default()
            },
            ack_wait: self.ack_wait,
            connected: self.connected.clone(),
            violations: self.violations.clone(),
        };
        self.runtime.spawn(pump.run());
    }
}

/// What a subscription and its pump share.
pub(super) struct Shared {
    slot: Mutex<Slot>,
    /// The pump put a message in the slot (or the subscription closed).
    arrived: Notify,
    closed: CancellationToken,
}

#[derive(Default)]
struct Slot {
    /// A message not handed out yet, with the way to tell the pump what became of it.
    held: Option<(BusMessage, oneshot::Sender<Verdict>)>,
    problem: Option<BusError>,
}

/// What became of a message handed out (a dropped sender: given back).
enum Verdict {
    /// Dealt with: acknowledge it, and say how that went if someone waits.
    Confirm(Option<oneshot::Sender<Result<(), BusError>>>),
    GiveBack,
}

/// Settles one message handed out by a NATS subscription through its pump.
struct NatsSettle {
    verdict: oneshot::Sender<Verdict>,
    url: String,
    msg_id: String,
}

#[async_trait::async_trait]
impl Settle for NatsSettle {
    async fn confirm(self: Box<Self>) -> Result<(), BusError> {
        let lost = |reason: &str| BusError::ConfirmationLost {
            url: self.url.clone(),
            msg_id: self.msg_id.clone(),
            reason: reason.to_owned(),
        };
        let (tx, rx) = oneshot::channel();
        if self.verdict.send(Verdict::Confirm(Some(tx))).is_err() {
            return Err(lost(
                "the subscription lost the broker before the confirmation",
            ));
        }
        rx.await
            .unwrap_or_else(|_| Err(lost("the subscription ended before the broker answered")))
    }

    fn confirm_later(self: Box<Self>) {
        let _ = self.verdict.send(Verdict::Confirm(None));
    }

    fn give_back(self: Box<Self>, _message: BusMessage) {
        let _ = self.verdict.send(Verdict::GiveBack);
    }
}

impl Shared {
    pub(super) fn close(&self) {
        self.closed.cancel();
        self.arrived.notify_one();
    }
    fn set_problem(&self, e: Option<BusError>) {
        lock(&self.slot).problem = e;
    }
    fn put(&self, m: BusMessage, verdict: oneshot::Sender<Verdict>) {
        lock(&self.slot).held = Some((m, verdict));
        self.arrived.notify_one();
    }
    /// Takes the held message back (the subscription is gone); false when it was taken.
    fn take_back(&self) -> bool {
        lock(&self.slot).held.take().is_some()
    }
}

/// The durable consumer a family's group subscriptions share.
pub(super) fn group_consumer(family: &str) -> String {
    format!("group-{family}")
}

/// Whom a subscription receives for.
#[derive(Debug, Clone)]
pub(super) enum Target {
    Recipient(String),
    Family(String),
}

impl Target {
    fn accepts(&self, to: &str) -> bool {
        match self {
            Target::Recipient(r) => r == to,
            Target::Family(f) => family_of(to) == Some(f.as_str()),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Recipient(r) => write!(f, "{r}"),
            Target::Family(fam) => write!(f, "{fam}:* (group)"),
        }
    }
}

/// How a subscription is known to this process, to forget it when it ends.
pub(super) enum Registration {
    Recipient {
        local: Subscribed,
        recipient: String,
        generation: u64,
    },
    Group {
        groups: Groups,
        family: String,
    },
}

pub(super) struct NatsInbox {
    pub(super) shared: Arc<Shared>,
    pub(super) registration: Registration,
    pub(super) url: String,
}

#[async_trait::async_trait]
impl Inbox for NatsInbox {
    fn poll(&mut self) -> Poll {
        if self.shared.closed.is_cancelled() {
            return Poll::Closed;
        }
        let taken = lock(&self.shared.slot).held.take();
        match taken {
            Some((m, verdict)) => {
                let settle = NatsSettle {
                    verdict,
                    url: self.url.clone(),
                    msg_id: m.msg_id.clone(),
                };
                Poll::Message(m, Box::new(settle))
            }
            None => Poll::Empty,
        }
    }

    async fn changed(&mut self) {
        self.shared.arrived.notified().await;
    }

    fn dropped(&self) -> u64 {
        0
    }

    fn problem(&self) -> Option<BusError> {
        lock(&self.shared.slot).problem.clone()
    }
}

impl Drop for NatsInbox {
    fn drop(&mut self) {
        match &self.registration {
            Registration::Recipient {
                local,
                recipient,
                generation,
            } => {
                let mut local = lock(local);
                if local.get(recipient).is_some_and(|(g, _)| g == generation) {
                    local.remove(recipient);
                }
            }
            Registration::Group { groups, family } => {
                let mut groups = lock(groups);
                if let Some(n) = groups.get_mut(family) {
                    *n -= 1;
                    if *n == 0 {
                        groups.remove(family);
                    }
                }
            }
        }
        self.shared.close();
    }
}

/// The task that moves one recipient's (or family's) messages from the broker into its
/// subscription.
struct Pump {
    shared: Arc<Shared>,
    js: Context,
    url: String,
    stream: String,
    target: Target,
    consumer: pull::Config,
    ack_wait: Duration,
    connected: watch::Receiver<u64>,
    /// The broker's refusals of this user's subjects (see `Nats::violations`).
    violations: broadcast::Sender<String>,
}

impl Pump {
    /// `PermissionDenied` when the broker refused this user a subject since `refusals` was
    /// made (a refused JetStream request is otherwise only a timeout), else [`Pump::trouble`].
    fn refused_or_trouble(
        &self,
        refusals: &mut broadcast::Receiver<String>,
        what: &str,
        e: impl std::fmt::Display,
    ) -> BusError {
        match refusals.try_recv() {
            Ok(v) => BusError::PermissionDenied {
                url: self.url.clone(),
                reason: format!("{v} (subscription {}: {what}: {e})", self.target),
            },
            Err(_) => self.trouble(what, e),
        }
    }

    fn trouble(&self, what: &str, e: impl std::fmt::Display) -> BusError {
        BusError::BrokerUnavailable {
            url: self.url.clone(),
            reason: format!("{what}: {e}"),
        }
    }

    async fn run(mut self) {
        let mut pause = RETRY_MIN;
        let mut said_conflict = false;
        let mut said_refused = false;
        while !self.shared.closed.is_cancelled() {
            let wait = match self.pump().await {
                Ok(()) => return,
                Err(e @ BusError::SubscriptionConflict { .. }) => {
                    // said once (it is retried every few seconds until the other one is gone)
                    if !said_conflict {
                        tracing::error!(subscription = %self.target, error = %e, "bus subscription refused: it overlaps another consumer; retrying every 5 s");
                        said_conflict = true;
                    }
                    self.shared.set_problem(Some(e));
                    RETRY_CONFLICT
                }
                Err(e @ BusError::PermissionDenied { .. }) => {
                    // an operator has to grant it: said once, retried every few seconds
                    if !said_refused {
                        tracing::error!(subscription = %self.target, error = %e, "bus subscription refused by the broker's permissions; retrying every 5 s");
                        said_refused = true;
                    }
                    self.shared.set_problem(Some(e));
                    RETRY_CONFLICT
                }
                Err(e) => {
                    tracing::warn!(subscription = %self.target, error = %e, "bus subscription: broker trouble, retrying");
                    self.shared.set_problem(Some(e));
                    pause = (pause * 2).min(RETRY_MAX);
                    pause / 2
                }
            };
            tokio::select! {
                () = self.shared.closed.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// The consumer filter subject's family token (`_`: recipients without a family).
    fn family(&self) -> &str {
        match &self.target {
            Target::Recipient(r) => family_token(r),
            Target::Family(f) => f,
        }
    }

    /// The broker refused our consumer because another one on the work-queue stream takes some
    /// of the same subjects: find them and say what to do.
    async fn conflict(&self, stream: &stream::Stream, e: impl std::fmt::Display) -> BusError {
        let family = self.family().to_owned();
        let prefix = format!("{}.to.{family}.", self.stream);
        let mine = self.consumer.durable_name.clone().unwrap_or_default();
        let mut others = Vec::new();
        let mut consumers = stream.consumers();
        while let Some(Ok(info)) = consumers.next().await {
            let f = &info.config.filter_subject;
            let overlaps = f.is_empty()
                || f.starts_with(&prefix)
                || f.ends_with('>')
                || *f == format!("{}.to.*.*", self.stream);
            if overlaps && info.name != mine {
                others.push(info.name.clone());
            }
        }
        let shown = if others.len() > 5 {
            format!("{}, … ({} in all)", others[..5].join(", "), others.len())
        } else {
            others.join(", ")
        };
        let reason = match &self.target {
            Target::Recipient(r) => format!(
                "recipient {r:?} is taken by the group subscriptions of family {family:?} \
                 (consumer {shown}; broker: {e}): a family is received either by its recipients' \
                 own subscriptions or by group subscriptions, not both. Take this recipient's \
                 messages from a group subscription (BusMessage::to says the recipient), or drop \
                 every group subscription of {family:?} and delete its consumer (`nats consumer \
                 rm {} {}`); this subscription retries every 5 s",
                self.stream,
                group_consumer(&family),
            ),
            Target::Family(_) => format!(
                "family {family:?} has per-recipient consumers on the broker ({shown}; broker: \
                 {e}): a family is received either by its recipients' own subscriptions or by \
                 group subscriptions, not both. Drop those subscriptions and delete their \
                 consumers (`nats consumer rm {} NAME`; messages waiting for them stay in the \
                 stream and come to the group); this subscription retries every 5 s",
                self.stream
            ),
        };
        BusError::SubscriptionConflict {
            url: self.url.clone(),
            reason,
        }
    }

    /// Pumps until the subscription closes (`Ok`) or the broker fails (`Err`).
    async fn pump(&mut self) -> Result<(), BusError> {
        self.connected.mark_unchanged();
        let mut refusals = self.violations.subscribe();
        let stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(|e| self.refused_or_trouble(&mut refusals, "stream", e))?;
        let mut consumer: PullConsumer = match stream
            .get_or_create_consumer(
                self.consumer.durable_name.as_deref().unwrap_or_default(),
                self.consumer.clone(),
            )
            .await
        {
            Ok(c) => c,
            Err(e) => {
                let overlap = matches!(e.kind(), ConsumerErrorKind::JetStream(j) if [
                    ErrorCode::CONSUMER_WQ_CONSUMER_NOT_UNIQUE,
                    ErrorCode::CONSUMER_WQ_MULTIPLE_UNFILTERED,
                    ErrorCode::CONSUMER_OVERLAPPING_SUBJECT_FILTERS,
                ]
                .contains(&j.error_code()));
                return Err(if overlap {
                    self.conflict(&stream, e).await
                } else {
                    self.refused_or_trouble(&mut refusals, "consumer", e)
                });
            }
        };
        // A consumer left by an earlier process keeps its `ack_wait` unless told: this
        // process's setting applies (the broker updates a durable consumer in place when it is
        // created again with only that changed).
        let found = consumer.cached_info().config.ack_wait;
        if found != self.ack_wait {
            match stream.create_consumer(self.consumer.clone()).await {
                Ok(c) => {
                    tracing::info!(subscription = %self.target, from_ms = found.as_millis() as u64,
                        to_ms = self.ack_wait.as_millis() as u64, "bus subscription: the consumer's ack_wait updated");
                    consumer = c;
                }
                Err(e) => {
                    tracing::warn!(subscription = %self.target, error = %e, kept_ms = found.as_millis() as u64,
                        "bus subscription: could not update the consumer's ack_wait; it keeps the old one");
                }
            }
        }
        // async-nats keeps pull requests going on this stream (and asks again after a
        // reconnect). One message per request: while this task holds a message it has no request
        // open, so a message it gives back cannot be handed to a request of its own that nobody
        // reads any more (the broker would keep it there until `ack_wait`): asking for more per
        // request breaks that (tried: `bus_a_dropped_subscription_gives_back_the_message_it_held`
        // then fails on nats-server 2.9).
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(1)
            .expires(PULL_EXPIRES)
            .heartbeat(PULL_HEARTBEAT)
            .messages()
            .await
            .map_err(|e| self.refused_or_trouble(&mut refusals, "pull", e))?;
        self.shared.set_problem(None);
        loop {
            let next = tokio::select! {
                () = self.shared.closed.cancelled() => return Ok(()),
                _ = self.connected.changed() => {
                    self.shared.set_problem(None);
                    continue;
                }
                next = messages.next() => next,
            };
            match next {
                None => return Err(self.trouble("pull", "the message stream ended")),
                Some(Err(e)) if e.kind() == MessagesErrorKind::MissingHeartbeat => {
                    // the broker is silent: say so, and keep the stream (it pulls again)
                    self.shared.set_problem(Some(self.trouble("pull", e)));
                }
                Some(Err(e)) => return Err(self.trouble("pull", e)),
                Some(Ok(m)) => {
                    self.shared.set_problem(None);
                    if let Some(back) = self.deliver(m).await? {
                        // Unsubscribe this stream's pull request first (the broker would hand
                        // the message straight back to it), then give the message back.
                        drop(messages);
                        let _ = back.ack_with(AckKind::Nak(None)).await;
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Hands one message to the subscription and acknowledges it once confirmed (keeping it in
    /// hand with the broker until then), or gives it back. `Ok(Some(m))`: the subscription
    /// closed first (or it was given back after); the caller gives `m` back to the broker for
    /// the next one.
    async fn deliver(&self, m: Message) -> Result<Option<Message>, BusError> {
        let seq = match m.info() {
            Ok(info) => info.stream_sequence,
            Err(e) => return Err(self.trouble("message without JetStream info", e)),
        };
        let message = decode(seq, &m.payload).and_then(|b| {
            if self.target.accepts(&b.to) {
                Ok(b)
            } else {
                Err(BusError::BadPayload(format!("addressed to {:?}", b.to)))
            }
        });
        let message = match message {
            Ok(b) => b,
            Err(e) => {
                // a message no sender of this bus wrote: never retry it, never block the rest
                tracing::warn!(subscription = %self.target, seq, error = %e, "bus: dropped a message that is not a bus message");
                let _ = m.ack_with(AckKind::Term).await;
                return Ok(None);
            }
        };
        let msg_id = message.msg_id.clone();
        let (tx, mut verdict) = oneshot::channel();
        self.shared.put(message, tx);
        let mut handed_out = false;
        let verdict = loop {
            tokio::select! {
                v = &mut verdict => break v.unwrap_or(Verdict::GiveBack),
                () = self.shared.closed.cancelled(), if !handed_out => {
                    if self.shared.take_back() {
                        return Ok(Some(m));
                    }
                    // handed out: its holder still confirms it or gives it back
                    handed_out = true;
                }
                // not confirmed yet: tell the broker this process still holds it
                () = tokio::time::sleep(self.ack_wait / 3) => {
                    let _ = m.ack_with(AckKind::Progress).await;
                }
            }
        };
        let reply = match verdict {
            Verdict::GiveBack if self.shared.closed.is_cancelled() => return Ok(Some(m)),
            Verdict::GiveBack => {
                // handed out again at once (to this subscription or another of the group); if
                // the Nak is lost, the broker does so after `ack_wait`
                tracing::debug!(subscription = %self.target, seq, %msg_id, "bus: a message given back unconfirmed goes out again");
                let _ = m.ack_with(AckKind::Nak(None)).await;
                return Ok(None);
            }
            Verdict::Confirm(reply) => reply,
        };
        // Confirmed: acknowledge, confirmed by the broker. If that fails the broker sends it
        // again after `ack_wait`, and the subscription drops the repeat by its id.
        let mut last = None;
        for _ in 0..3 {
            match m.double_ack().await {
                Ok(()) => {
                    if let Some(r) = reply {
                        let _ = r.send(Ok(()));
                    }
                    return Ok(None);
                }
                Err(e) => last = Some(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let last = last.unwrap_or_default();
        if let Some(r) = reply {
            let _ = r.send(Err(BusError::ConfirmationLost {
                url: self.url.clone(),
                msg_id,
                reason: last.clone(),
            }));
        }
        Err(self.trouble("acknowledging", last))
    }
}
