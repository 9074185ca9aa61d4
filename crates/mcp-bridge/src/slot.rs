//! A value the bridge keeps for every worker of a deployment in one state slot of a session
//! store (PostgreSQL, SQLite, memory): read it, and replace it only if it still holds what was
//! read (compare-and-set), making the session on the first write. OAuth credentials and the
//! pairs learned from use are kept this way.

use toolwright_context_engine::{SessionStore, StateChange, StoreError};

/// A session id of `prefix` and a SHA-256 of `parts` (each length-prefixed), so neither a
/// person's name nor a server's address appears in the store's ids.
pub(crate) fn hashed_session_id(prefix: &str, parts: &[&str]) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    let mut hash = sha2::Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let mut id = String::with_capacity(prefix.len() + 64);
    id.push_str(prefix);
    for b in hash.finalize() {
        let _ = write!(id, "{b:02x}");
    }
    id
}

/// The slot's text, `None` when the session or the slot is not there yet.
pub(crate) async fn read(
    store: &dyn SessionStore,
    session: &str,
    slot: &str,
) -> Result<Option<String>, StoreError> {
    match store.get_state(session, slot).await {
        Ok(text) => Ok(text),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sets the slot to `new` if it still holds `expected` (`None`: nothing yet); whether it was
/// written. Exactly one of two writers expecting the same text wins, the first write of a
/// session included.
pub(crate) async fn swap(
    store: &dyn SessionStore,
    session: &str,
    slot: &str,
    expected: Option<&str>,
    new: &str,
) -> Result<bool, StoreError> {
    let change = StateChange::new(slot, expected, Some(new));
    match store.append_with_state(session, &[], change).await {
        Ok(written) => Ok(written.is_some()),
        Err(StoreError::NotFound { .. }) => {
            // The first value of this slot: make its session (a racing worker may make it
            // first), then write as the one that expects nothing.
            match store.create(session).await {
                Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
            store
                .append_with_state(session, &[], change)
                .await
                .map(|w| w.is_some())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use toolwright_context_engine::MemoryStore;

    use super::*;

    #[test]
    fn the_id_hides_its_parts_and_keeps_them_apart() {
        let id = hashed_session_id("p-", &["alice", "https://a.example"]);
        assert!(id.starts_with("p-") && id.len() == 2 + 64, "{id}");
        assert!(!id.contains("alice"));
        // the length prefix keeps ("ab", "c") apart from ("a", "bc")
        assert_ne!(
            hashed_session_id("p-", &["ab", "c"]),
            hashed_session_id("p-", &["a", "bc"])
        );
    }

    #[tokio::test]
    async fn a_write_needs_what_was_read_and_the_first_makes_the_session() {
        let store = MemoryStore::new();
        assert_eq!(read(&store, "s", "k").await.unwrap(), None);
        assert!(swap(&store, "s", "k", None, "one").await.unwrap());
        assert!(!swap(&store, "s", "k", None, "again").await.unwrap());
        assert!(!swap(&store, "s", "k", Some("other"), "two").await.unwrap());
        assert!(swap(&store, "s", "k", Some("one"), "two").await.unwrap());
        assert_eq!(
            read(&store, "s", "k").await.unwrap().as_deref(),
            Some("two")
        );
    }
}
