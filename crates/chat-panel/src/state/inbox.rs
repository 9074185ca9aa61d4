//! The persons' bus inbox: messages to `user:ID` from other senders, stored once as rows of
//! conversation `ID` by whichever worker takes them.

use context_engine::{SessionStore, StateChange, StoreError};
use messaging::{BusMessage, Subscription};

use std::sync::Arc;

use super::{AGENT_SENDER, PERSONS, foreign_message_round, is_session_id};

/// The state slot of a conversation that remembers the bus messages stored into it, so that a
/// message the broker hands out again (to this worker or another) is stored once: a JSON array
/// of `[msg_id, stored at (ms since the Unix epoch)]`, oldest first, bounded by [`BusMemory`].
/// One slot per conversation — the previous version kept a slot per message
/// (`chat-panel.bus.MSGID`) and never deleted it.
pub(crate) const BUS_SEEN_KEY: &str = "chat-panel.bus";

/// How long and how many of the bus messages stored into a conversation are remembered to
/// store a repeat once ([`PanelConfig::bus_memory_max_age`](crate::PanelConfig::bus_memory_max_age),
/// [`bus_memory_max_ids`](crate::PanelConfig::bus_memory_max_ids)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BusMemory {
    pub max_age: std::time::Duration,
    pub max_ids: usize,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The slot's value with `msg_id` added at `now` and what is too old or too many left out;
/// `None` when `msg_id` is remembered already (a repeat).
fn remember(value: Option<&str>, msg_id: &str, now: u64, memory: BusMemory) -> Option<String> {
    let mut seen: Vec<(String, u64)> = match value.map(serde_json::from_str) {
        None => Vec::new(),
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "chat panel: the conversation's memory of bus messages does not parse; starting it again");
            Vec::new()
        }
    };
    if seen.iter().any(|(id, _)| id == msg_id) {
        return None;
    }
    let max_age = u64::try_from(memory.max_age.as_millis()).unwrap_or(u64::MAX);
    seen.retain(|(_, at)| now.saturating_sub(*at) < max_age);
    seen.push((msg_id.to_owned(), now));
    let extra = seen.len().saturating_sub(memory.max_ids.max(1));
    seen.drain(..extra);
    Some(serde_json::to_string(&seen).unwrap_or_else(|_| "[]".into()))
}

/// Stores what arrives for the persons (`user:ID`) from senders other than the panel's own
/// agent (whose messages are stored as its `send_message` calls) into the conversation `ID`,
/// creating it when it is new; the store's change feed wakes the streams of every worker.
/// A store that cannot be reached is retried (backoff to 5 s) until the message is stored: the
/// group's next message waits meanwhile, so the order holds and nothing taken is dropped.
/// A message is confirmed to the bus only once it is stored (or deliberately dropped, with a
/// log line): a worker that dies before that leaves it to the broker, which hands it to another
/// worker (after `ack_wait`), and the conversation's memory of message ids ([`BUS_SEEN_KEY`])
/// stores it once however often it comes.
pub(super) async fn inbox_task(
    mut inbox: Subscription,
    store: Arc<dyn SessionStore>,
    memory: BusMemory,
) {
    while let Some(received) = inbox.recv_unconfirmed().await {
        let m = received.message();
        if m.from != AGENT_SENDER {
            store_person_message(&*store, m, memory).await;
        }
        let msg_id = m.msg_id.clone();
        if let Err(e) = received.confirm().await {
            // stored: a repeat the broker may hand out is recognised by its id
            tracing::warn!(%msg_id, error = %e, "chat panel: a stored bus message was not confirmed to the broker; a repeat will be dropped");
        }
    }
}

/// Stores `m` in conversation ID (created if new) once, retrying while the database is away.
/// Returns once it is stored, was stored before, or cannot be (logged: not a conversation id, or
/// refused by the store for good).
pub(super) async fn store_person_message(
    store: &dyn SessionStore,
    m: &BusMessage,
    memory: BusMemory,
) {
    let id =
        m.to.strip_prefix(PERSONS)
            .and_then(|r| r.strip_prefix(':'))
            .unwrap_or_default();
    if !is_session_id(id) {
        tracing::warn!(to = %m.to, msg_id = %m.msg_id, from = %m.from,
            "chat panel: a message for a person whose address is not a conversation id was dropped (8 to 64 of A-Z a-z 0-9 - _)");
        return;
    }
    // Stored once whichever worker (or how often) the broker hands it to: the conversation's
    // memory of message ids, changed in the same compare-and-set as the round.
    let round = foreign_message_round(m);
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        let attempt = match store.get_state(id, BUS_SEEN_KEY).await {
            Ok(before) => match remember(before.as_deref(), &m.msg_id, now_ms(), memory) {
                None => {
                    tracing::debug!(session = %id, msg_id = %m.msg_id, "chat panel: a bus message stored already was dropped");
                    return;
                }
                Some(after) => {
                    let change = StateChange::new(BUS_SEEN_KEY, before.as_deref(), Some(&after));
                    store.append_with_state(id, &round, change).await
                }
            },
            Err(e) => Err(e),
        };
        match attempt {
            Ok(Some(_)) => return,
            // another worker changed the memory meanwhile: read it again
            Ok(None) => continue,
            Err(StoreError::NotFound { .. }) => match store.create(id).await {
                Ok(()) | Err(StoreError::AlreadyExists { .. }) => continue,
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "chat panel: could not start a conversation for a message; retrying");
                }
            },
            Err(e @ (StoreError::Unreachable { .. } | StoreError::Database { .. })) => {
                tracing::warn!(session = %id, from = %m.from, error = %e, retry_in_ms = wait.as_millis() as u64,
                    "chat panel: could not store a message for the person; retrying");
            }
            Err(e) => {
                tracing::error!(session = %id, from = %m.from, msg_id = %m.msg_id, error = %e,
                    "chat panel: a message for the person could not be stored and was dropped");
                return;
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(std::time::Duration::from_secs(5));
    }
}
