//! De-duplication by message id, shared by every backend: a [`Subscription`](super::Subscription)
//! hands out a message id at most once among the last [`DEDUP_WINDOW`] it handed out.

use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::DEDUP_WINDOW;

/// The message ids a subscription handed out last, to drop a repeat (hashed: 8 bytes each).
#[derive(Default)]
pub(super) struct Seen {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

fn seen_key(msg_id: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    msg_id.hash(&mut h);
    h.finish()
}

impl Seen {
    /// True the first time `msg_id` is seen within the window; messages without an id (from
    /// an older sender) always pass.
    pub(super) fn first_time(&mut self, msg_id: &str) -> bool {
        if msg_id.is_empty() {
            return true;
        }
        let key = seen_key(msg_id);
        if !self.set.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > DEDUP_WINDOW
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }

    /// Forgets `msg_id` (a message given back unconfirmed: when it comes again it is new).
    pub(super) fn forget(&mut self, msg_id: &str) {
        let key = seen_key(msg_id);
        if self.set.remove(&key)
            && let Some(at) = self.order.iter().rposition(|k| *k == key)
        {
            self.order.remove(at);
        }
    }
}

pub(super) fn lock_seen(seen: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::DEDUP_WINDOW;
    use crate::bus::tests::qr;
    use crate::{MessageBus, OutgoingMessage};

    #[tokio::test]
    async fn a_message_sent_again_with_its_id_is_handed_out_once() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("r");
        let m = OutgoingMessage::new("s", "r", "once").with_quick_replies(qr(&["a"]));
        let first = bus.send(m.clone()).await.unwrap();
        let again = bus.send(m.clone()).await.unwrap(); // e.g. after an error it could not judge
        assert!(
            !again.duplicate,
            "in process there is no broker to recognise it"
        );
        bus.send(OutgoingMessage::new("s", "r", "next"))
            .await
            .unwrap();
        let got = inbox.recv().await.unwrap();
        assert_eq!((got.id, got.msg_id.as_str()), (first.id, m.msg_id.as_str()));
        assert_eq!(inbox.recv().await.unwrap().text, "next");
        assert!(inbox.try_recv().is_none());
        // fresh messages get fresh ids
        assert_ne!(
            OutgoingMessage::new("s", "r", "x").msg_id,
            OutgoingMessage::new("s", "r", "x").msg_id
        );
    }

    #[tokio::test]
    async fn the_dedup_window_is_bounded() {
        let bus = MessageBus::with_capacity(1000);
        let mut inbox = bus.subscribe("r");
        let first = OutgoingMessage::new("s", "r", "first");
        bus.send(first.clone()).await.unwrap();
        for i in 0..DEDUP_WINDOW {
            bus.send(OutgoingMessage::new("s", "r", i.to_string()))
                .await
                .unwrap();
        }
        // older than the window: handed out again (the broker's own window covers that case)
        bus.send(first).await.unwrap();
        let n = std::iter::from_fn(|| inbox.try_recv()).count();
        assert_eq!(n, DEDUP_WINDOW + 2);
    }
}
