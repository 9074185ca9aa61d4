//! The persons' bus inbox: messages to `user:ID` from other senders, stored once as rows of
//! conversation `ID`, and messages to `person:PRINCIPAL`, stored once in that principal's
//! inbox conversation ([`inbox_id`]), owned by them — by whichever worker takes them.

use toolwright_context_engine::{SessionStore, StateChange, StoreError};
use toolwright_messaging::{BusMessage, Subscription};

use std::sync::Arc;

use super::{AGENT_SENDER, OWNER_KEY, PERSONS, PRINCIPALS, foreign_message_round, is_session_id};

/// How the id of a principal's inbox conversation starts ([`inbox_id`]).
pub(crate) const INBOX_PREFIX: &str = "inbox-";

/// The id of `principal`'s inbox conversation: `inbox-` and 40 hex digits of the SHA-256
/// of the principal's id. Any worker finds it from the principal alone, with no table to share;
/// the conversation is the principal's (its owner is recorded when it is created, by whichever
/// comes first: the principal's `GET /api/inbox` or a message), so knowing the id shows nothing.
pub(crate) fn inbox_id(principal: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(principal.as_bytes());
    let hex: String = digest[..20].iter().map(|b| format!("{b:02x}")).collect();
    format!("{INBOX_PREFIX}{hex}")
}

/// Where a bus message to a person goes: the conversation, and the owner it must have (a
/// message to a principal goes to their inbox, which must be theirs).
struct Destination {
    id: String,
    owner: Option<String>,
}

fn destination(to: &str) -> Option<Destination> {
    let (family, rest) = to.split_once(':')?;
    match family {
        PERSONS => Some(Destination {
            id: rest.to_owned(),
            owner: None,
        }),
        PRINCIPALS if crate::identity::Principal::new(rest).is_ok() => Some(Destination {
            id: inbox_id(rest),
            owner: Some(rest.to_owned()),
        }),
        _ => None,
    }
}

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
/// creating it when it is new, and what arrives for a principal (`person:PRINCIPAL`), from
/// anyone, into their inbox; the store's change feed wakes the streams of every worker.
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
        if m.from != AGENT_SENDER || !m.to.starts_with(&format!("{PERSONS}:")) {
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
    let Some(Destination { id, owner }) = destination(&m.to) else {
        tracing::warn!(to = %m.to, msg_id = %m.msg_id, from = %m.from,
            "chat panel: a message for a principal whose id is empty, longer than 256 bytes or has control characters was dropped");
        return;
    };
    let id = id.as_str();
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
        let attempt = match owner.as_deref() {
            None => store_once(store, id, m, &round, memory).await,
            Some(owner) => match own_inbox(store, id, owner).await {
                Ok(true) => store_once(store, id, m, &round, memory).await,
                Ok(false) => {
                    tracing::error!(session = %id, msg_id = %m.msg_id, from = %m.from,
                        "chat panel: a principal's inbox is recorded as someone else's; the message was dropped");
                    return;
                }
                Err(e) => Err(e),
            },
        };
        match attempt {
            Ok(Stored::Now | Stored::Before) => return,
            // another worker changed the memory meanwhile: read it again
            Ok(Stored::Raced) => continue,
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

enum Stored {
    Now,
    /// A repeat: stored before.
    Before,
    /// Another worker changed the conversation's memory of bus messages meanwhile.
    Raced,
}

/// Appends `round` unless the conversation remembers `m`'s id, in one compare-and-set with
/// the memory.
async fn store_once(
    store: &dyn SessionStore,
    id: &str,
    m: &BusMessage,
    round: &[toolwright_core::Message],
    memory: BusMemory,
) -> Result<Stored, StoreError> {
    let before = store.get_state(id, BUS_SEEN_KEY).await?;
    let Some(after) = remember(before.as_deref(), &m.msg_id, now_ms(), memory) else {
        tracing::debug!(session = %id, msg_id = %m.msg_id, "chat panel: a bus message stored already was dropped");
        return Ok(Stored::Before);
    };
    let change = StateChange::new(BUS_SEEN_KEY, before.as_deref(), Some(&after));
    Ok(match store.append_with_state(id, round, change).await? {
        Some(_) => Stored::Now,
        None => Stored::Raced,
    })
}

/// Whether inbox `id` is `owner`'s, creating it as theirs when it does not exist and
/// recording them as its owner when nobody is.
pub(super) async fn own_inbox(
    store: &dyn SessionStore,
    id: &str,
    owner: &str,
) -> Result<bool, StoreError> {
    loop {
        match store.get_state(id, OWNER_KEY).await {
            Ok(Some(o)) => return Ok(o == owner),
            // set now, or by another worker meanwhile: read again
            Ok(None) => {
                store
                    .append_with_state(id, &[], StateChange::new(OWNER_KEY, None, Some(owner)))
                    .await?;
            }
            Err(StoreError::NotFound { .. }) => match store.create(id).await {
                Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_principal_addresses_go_nowhere_and_good_ones_to_their_own_inbox() {
        let long = format!("{PRINCIPALS}:{}", "a".repeat(257));
        for to in [
            format!("{PRINCIPALS}:"),
            format!("{PRINCIPALS}:alice\u{0}"),
            format!("{PRINCIPALS}:bob\nX-Injected: 1"),
            long,
            "nobody:alice".to_owned(),
            "alice".to_owned(),
            String::new(),
        ] {
            assert!(destination(&to).is_none(), "{to:?}");
        }
        let d = destination(&format!("{PRINCIPALS}:alice@example.com")).unwrap();
        assert_eq!(d.owner.as_deref(), Some("alice@example.com"));
        assert_eq!(d.id, inbox_id("alice@example.com"));
        assert!(d.id.starts_with(INBOX_PREFIX) && d.id.len() == INBOX_PREFIX.len() + 40);
        // A principal whose name is another's inbox id still gets an inbox of its own.
        let other = destination(&format!("{PRINCIPALS}:{}", d.id)).unwrap();
        assert_ne!(other.id, d.id);
        // `user:ID` is the conversation ID itself, with no owner to check.
        let d = destination(&format!("{PERSONS}:conv-1234")).unwrap();
        assert_eq!((d.id.as_str(), d.owner), ("conv-1234", None));
    }
}
