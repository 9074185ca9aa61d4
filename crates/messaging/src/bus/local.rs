//! The in-process backend ([`MessageBus::new`](super::MessageBus::new)): one bounded mailbox
//! per recipient, one shared by a family's group subscriptions; `send` never waits, and a full
//! mailbox drops its oldest message and counts it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::{
    Backend, BusError, BusMessage, Delivery, Inbox, OutgoingMessage, Poll, Settle, family_of,
};

struct Mailbox {
    queue: VecDeque<BusMessage>,
    dropped: u64,
    generation: u64,
    notify: Arc<Notify>,
}

/// The mailbox a family's group subscriptions in this process share.
struct GroupBox {
    queue: VecDeque<BusMessage>,
    dropped: u64,
    /// Group subscriptions of the family alive in this process.
    members: usize,
    notify: Arc<Notify>,
}

struct State {
    next_id: u64,
    next_generation: u64,
    boxes: HashMap<String, Mailbox>,
    groups: HashMap<String, GroupBox>,
}

/// Appends `m` to a bounded queue, dropping (and counting) the oldest when full; true if so.
fn push_bounded(
    queue: &mut VecDeque<BusMessage>,
    dropped: &mut u64,
    capacity: usize,
    m: BusMessage,
) -> bool {
    let mut dropped_oldest = false;
    if queue.len() >= capacity {
        queue.pop_front();
        *dropped += 1;
        dropped_oldest = true;
        tracing::warn!(recipient = %m.to, dropped = *dropped, "mailbox full: dropped its oldest message");
    }
    queue.push_back(m);
    dropped_oldest
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

/// Mailboxes in this process.
pub(super) struct Local {
    inner: Arc<Inner>,
}

impl Local {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    next_id: 1,
                    next_generation: 1,
                    boxes: HashMap::new(),
                    groups: HashMap::new(),
                }),
                capacity: capacity.max(1),
            }),
        }
    }
}

#[async_trait::async_trait]
impl Backend for Local {
    async fn send(&self, message: OutgoingMessage) -> Result<Delivery, BusError> {
        let mut guard = self.inner.lock();
        let s = &mut *guard;
        let id = s.next_id;
        let capacity = self.inner.capacity;
        // the recipient's own subscription first, else its family's group in this process
        let (queue, dropped, notify) = if let Some(b) = s.boxes.get_mut(&message.to) {
            (&mut b.queue, &mut b.dropped, &b.notify)
        } else if let Some(g) = family_of(&message.to).and_then(|f| s.groups.get_mut(f)) {
            (&mut g.queue, &mut g.dropped, &g.notify)
        } else {
            return Err(BusError::NotSubscribed(message.to));
        };
        let dropped_oldest = push_bounded(
            queue,
            dropped,
            capacity,
            BusMessage::from_outgoing(id, message),
        );
        notify.notify_one();
        s.next_id += 1;
        Ok(Delivery {
            id,
            dropped_oldest,
            duplicate: false,
        })
    }

    fn subscribe(&self, recipient: &str) -> Box<dyn Inbox> {
        let notify = Arc::new(Notify::new());
        let mut s = self.inner.lock();
        let generation = s.next_generation;
        s.next_generation += 1;
        match s.boxes.get_mut(recipient) {
            Some(b) => {
                b.notify.notify_one(); // wake the replaced subscriber so it sees it is closed
                b.generation = generation;
                b.notify = notify.clone();
            }
            None => {
                s.boxes.insert(
                    recipient.to_owned(),
                    Mailbox {
                        queue: VecDeque::new(),
                        dropped: 0,
                        generation,
                        notify: notify.clone(),
                    },
                );
            }
        }
        Box::new(LocalInbox {
            bus: self.inner.clone(),
            recipient: recipient.into(),
            generation,
            notify,
        })
    }

    fn subscribe_group(&self, family: &str) -> Box<dyn Inbox> {
        let mut s = self.inner.lock();
        let g = s
            .groups
            .entry(family.to_owned())
            .or_insert_with(|| GroupBox {
                queue: VecDeque::new(),
                dropped: 0,
                members: 0,
                notify: Arc::new(Notify::new()),
            });
        g.members += 1;
        Box::new(LocalGroupInbox {
            bus: self.inner.clone(),
            family: family.into(),
            notify: g.notify.clone(),
        })
    }

    fn is_subscribed(&self, recipient: &str) -> bool {
        let s = self.inner.lock();
        s.boxes.contains_key(recipient)
            || family_of(recipient).is_some_and(|f| s.groups.contains_key(f))
    }

    fn describe(&self) -> String {
        let recipients = self.inner.lock().boxes.len();
        format!(
            "in-process (capacity {}, {recipients} recipients)",
            self.inner.capacity
        )
    }

    fn capacity(&self) -> usize {
        self.inner.capacity
    }
}

struct LocalInbox {
    bus: Arc<Inner>,
    recipient: Arc<str>,
    generation: u64,
    notify: Arc<Notify>,
}

#[async_trait::async_trait]
impl Inbox for LocalInbox {
    fn poll(&mut self) -> Poll {
        let mut s = self.bus.lock();
        match s.boxes.get_mut(&*self.recipient) {
            Some(b) if b.generation == self.generation => match b.queue.pop_front() {
                Some(m) => Poll::Message(
                    m,
                    Box::new(LocalSettle {
                        bus: self.bus.clone(),
                        from: HandedFrom::Recipient(self.recipient.clone()),
                    }),
                ),
                None => Poll::Empty,
            },
            _ => Poll::Closed,
        }
    }

    async fn changed(&mut self) {
        // `notify_one` stores a permit when nobody waits, so no wake-up is lost.
        self.notify.notified().await;
    }

    fn dropped(&self) -> u64 {
        let s = self.bus.lock();
        s.boxes
            .get(&*self.recipient)
            .filter(|b| b.generation == self.generation)
            .map_or(0, |b| b.dropped)
    }

    fn problem(&self) -> Option<BusError> {
        None
    }
}

impl Drop for LocalInbox {
    fn drop(&mut self) {
        let mut s = self.bus.lock();
        if s.boxes
            .get(&*self.recipient)
            .is_some_and(|b| b.generation == self.generation)
        {
            s.boxes.remove(&*self.recipient);
        }
    }
}

/// One of the group subscriptions of a family in this process; they share one queue.
struct LocalGroupInbox {
    bus: Arc<Inner>,
    family: Arc<str>,
    notify: Arc<Notify>,
}

#[async_trait::async_trait]
impl Inbox for LocalGroupInbox {
    fn poll(&mut self) -> Poll {
        let mut s = self.bus.lock();
        match s.groups.get_mut(&*self.family) {
            Some(g) => match g.queue.pop_front() {
                Some(m) => Poll::Message(
                    m,
                    Box::new(LocalSettle {
                        bus: self.bus.clone(),
                        from: HandedFrom::Group(self.family.clone()),
                    }),
                ),
                None => Poll::Empty,
            },
            None => Poll::Closed,
        }
    }

    async fn changed(&mut self) {
        self.notify.notified().await;
    }

    fn dropped(&self) -> u64 {
        self.bus
            .lock()
            .groups
            .get(&*self.family)
            .map_or(0, |g| g.dropped)
    }

    fn problem(&self) -> Option<BusError> {
        None
    }
}

impl Drop for LocalGroupInbox {
    fn drop(&mut self) {
        let mut s = self.bus.lock();
        if let Some(g) = s.groups.get_mut(&*self.family) {
            g.members -= 1;
            if g.members == 0 {
                s.groups.remove(&*self.family);
            } else {
                // a wake-up meant for this one goes to another member
                g.notify.notify_one();
            }
        }
    }
}

/// Where an in-process message was handed out from.
enum HandedFrom {
    Recipient(Arc<str>),
    Group(Arc<str>),
}

/// Settles a message handed out in process: confirming has nothing to record; a message given
/// back goes to the front of the queue it came from (if the recipient's own subscription is
/// gone, to its family's group, as `send` would route it), so it is handed out next. With no
/// subscription left for it, it is dropped like every message of a gone recipient.
struct LocalSettle {
    bus: Arc<Inner>,
    from: HandedFrom,
}

#[async_trait::async_trait]
impl Settle for LocalSettle {
    async fn confirm(self: Box<Self>) -> Result<(), BusError> {
        Ok(())
    }

    fn confirm_later(self: Box<Self>) {}

    fn give_back(self: Box<Self>, message: BusMessage) {
        let mut guard = self.bus.lock();
        let s = &mut *guard;
        let own = match &self.from {
            HandedFrom::Recipient(r) => s.boxes.get_mut(&**r).map(|b| (&mut b.queue, &b.notify)),
            HandedFrom::Group(_) => None,
        };
        let family = match &self.from {
            HandedFrom::Recipient(r) => family_of(r),
            HandedFrom::Group(f) => Some(&**f),
        };
        let target = match own {
            Some(t) => Some(t),
            None => family
                .and_then(|f| s.groups.get_mut(f))
                .map(|g| (&mut g.queue, &g.notify)),
        };
        match target {
            Some((queue, notify)) => {
                queue.push_front(message);
                notify.notify_one();
            }
            None => {
                tracing::warn!(to = %message.to, msg_id = %message.msg_id,
                    "bus: a message given back unconfirmed was dropped: nobody in this process is subscribed for it any more");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{BusError, MessageBus, OutgoingMessage, Received, Subscription};
    use std::time::Duration;

    #[tokio::test]
    async fn q7_slow_recipient_never_blocks_others_and_overflow_drops_oldest() {
        let bus = MessageBus::with_capacity(4);
        let slow = bus.subscribe("slow"); // never reads
        let mut fast = bus.subscribe("fast");
        for i in 0..1000u32 {
            let d = bus
                .send(OutgoingMessage::new("s", "slow", i.to_string()))
                .await
                .unwrap();
            assert_eq!(d.dropped_oldest, i >= 4);
            bus.send(OutgoingMessage::new("s", "fast", i.to_string()))
                .await
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
            .await
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
            .await
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
        let d1 = bus.send(OutgoingMessage::new("x", "a", "1")).await.unwrap();
        let d2 = bus.send(OutgoingMessage::new("x", "b", "2")).await.unwrap();
        assert!(d2.id > d1.id);
        assert_eq!(a.try_recv().unwrap().id, d1.id);
        assert_eq!(b.try_recv().unwrap().id, d2.id);
        assert!(a.try_recv().is_none());
    }

    #[tokio::test]
    async fn q7_q8_group_receives_every_recipient_of_its_family_in_send_order() {
        let bus = MessageBus::with_capacity(1000);
        let mut users = bus.subscribe_group("user").unwrap();
        assert_eq!(users.recipient(), "user:*");
        let mut agents = bus.subscribe_group("agent").unwrap();
        let mut sent = Vec::new();
        for i in 0..300u32 {
            let to = format!("user:{}", i % 50);
            let d = bus
                .send(OutgoingMessage::new("bot", &to, i.to_string()))
                .await
                .unwrap();
            sent.push((d.id, to, i.to_string()));
            bus.send(OutgoingMessage::new("bot", format!("agent:{i}"), "x"))
                .await
                .unwrap();
        }
        let got: Vec<(u64, String, String)> =
            std::iter::from_fn(|| users.try_recv().map(|m| (m.id, m.to, m.text))).collect();
        assert_eq!(
            got, sent,
            "every message of the family, in send order, to says who"
        );
        assert_eq!(std::iter::from_fn(|| agents.try_recv()).count(), 300);
        // not in a family, or another family: not subscribed
        for to in ["user", "users:1", "agent", ":user", "nobody:1"] {
            let e = bus
                .send(OutgoingMessage::new("bot", to, "x"))
                .await
                .unwrap_err();
            assert_eq!(e, BusError::NotSubscribed(to.into()));
        }
    }

    #[tokio::test]
    async fn q7_group_a_recipients_own_subscription_comes_first_and_is_subscribed() {
        let bus = MessageBus::new();
        assert!(!bus.is_subscribed("user:a"));
        let mut group = bus.subscribe_group("user").unwrap();
        assert!(bus.is_subscribed("user:a"));
        assert!(bus.is_subscribed("user:"));
        assert!(!bus.is_subscribed("user"));
        assert!(!bus.is_subscribed("agent:a"));
        let mut own = bus.subscribe("user:a");
        for to in ["user:a", "user:b", "user:a"] {
            bus.send(OutgoingMessage::new("s", to, to)).await.unwrap();
        }
        assert_eq!(own.try_recv().unwrap().to, "user:a");
        assert_eq!(own.try_recv().unwrap().to, "user:a");
        assert!(own.try_recv().is_none());
        assert_eq!(group.try_recv().unwrap().to, "user:b");
        assert!(group.try_recv().is_none());
        // the own subscription gone: the group takes that recipient again
        drop(own);
        assert!(bus.is_subscribed("user:a"));
        bus.send(OutgoingMessage::new("s", "user:a", "back"))
            .await
            .unwrap();
        assert_eq!(group.recv().await.unwrap().text, "back");
        // the group gone too: nobody
        drop(group);
        assert!(!bus.is_subscribed("user:a"));
        assert!(
            bus.send(OutgoingMessage::new("s", "user:a", "x"))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn q7_group_subscriptions_share_one_mailbox_each_message_once() {
        let bus = MessageBus::with_capacity(3);
        let mut a = bus.subscribe_group("user").unwrap();
        let mut b = bus.subscribe_group("user").unwrap();
        // a waiting member is woken by a send, and a message goes to one member only
        let waiter = tokio::spawn(async move {
            let m = b.recv().await.unwrap();
            (b, m.text)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        bus.send(OutgoingMessage::new("s", "user:1", "one"))
            .await
            .unwrap();
        let (mut b, text) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(text, "one");
        assert!(a.try_recv().is_none());
        // capacity and dropped-oldest as for a recipient's mailbox, counted for the family
        for i in 0..5 {
            let d = bus
                .send(OutgoingMessage::new(
                    "s",
                    format!("user:{i}"),
                    i.to_string(),
                ))
                .await
                .unwrap();
            assert_eq!(d.dropped_oldest, i >= 3);
        }
        assert_eq!((a.dropped(), b.dropped()), (2, 2));
        assert_eq!(a.try_recv().unwrap().text, "2");
        assert_eq!(b.try_recv().unwrap().text, "3");
        assert_eq!(a.try_recv().unwrap().text, "4");
        assert!(b.try_recv().is_none());
        // one member gone, the other goes on; repeats dropped by id
        drop(a);
        let m = OutgoingMessage::new("s", "user:9", "again");
        bus.send(m.clone()).await.unwrap();
        bus.send(m).await.unwrap();
        assert_eq!(b.try_recv().unwrap().text, "again");
        assert!(b.try_recv().is_none());
    }

    /// The next message, unconfirmed (in process it is there already: 5 s is a hang guard).
    async fn next(sub: &mut Subscription) -> Received {
        tokio::time::timeout(Duration::from_secs(5), sub.recv_unconfirmed())
            .await
            .expect("a message is waiting")
            .unwrap()
    }

    #[tokio::test]
    async fn q7_in_process_a_message_dropped_unconfirmed_is_handed_out_again_first() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("r");
        for t in ["a", "b"] {
            bus.send(OutgoingMessage::new("s", "r", t)).await.unwrap();
        }
        let a = next(&mut inbox).await;
        assert_eq!(a.message().text, "a");
        drop(a); // not confirmed: back to the front, not taken for a repeat of its id
        let a = next(&mut inbox).await;
        assert_eq!(a.message().text, "a");
        a.confirm().await.unwrap();
        assert_eq!(inbox.try_recv().unwrap().text, "b");
        assert!(
            inbox.try_recv().is_none(),
            "a confirmed message never comes again"
        );
        // a repeat of a confirmed id is still dropped
        let m = OutgoingMessage::new("s", "r", "once");
        bus.send(m.clone()).await.unwrap();
        bus.send(m).await.unwrap();
        inbox
            .recv_unconfirmed()
            .await
            .unwrap()
            .confirm()
            .await
            .unwrap();
        assert!(inbox.try_recv().is_none());
    }

    #[tokio::test]
    async fn q7_in_process_group_an_unconfirmed_message_of_a_dropped_member_goes_to_another() {
        let bus = MessageBus::new();
        let mut a = bus.subscribe_group("user").unwrap();
        let mut b = bus.subscribe_group("user").unwrap();
        bus.send(OutgoingMessage::new("s", "user:1", "one"))
            .await
            .unwrap();
        let held = next(&mut a).await;
        assert!(b.try_recv().is_none(), "handed to one member");
        drop(a); // the member ends, its work unfinished
        drop(held);
        let got = next(&mut b).await;
        assert_eq!(
            (got.message().to.as_str(), got.message().text.as_str()),
            ("user:1", "one")
        );
        got.confirm().await.unwrap();
        // a recipient's own subscription gone: what it gives back goes to its family's group
        let mut own = bus.subscribe("user:2");
        bus.send(OutgoingMessage::new("s", "user:2", "two"))
            .await
            .unwrap();
        let held = next(&mut own).await;
        drop(own);
        drop(held);
        assert_eq!(b.try_recv().unwrap().text, "two");
        // nobody left for it: dropped (as any message of a gone recipient), no panic
        let mut last = bus.subscribe("solo");
        bus.send(OutgoingMessage::new("s", "solo", "x"))
            .await
            .unwrap();
        let held = next(&mut last).await;
        drop(last);
        drop(held);
        assert!(!bus.is_subscribed("solo"));
    }
}
