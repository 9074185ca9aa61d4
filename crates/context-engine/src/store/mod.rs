//! Session stores (C4): the [`SessionStore`] trait, [`MemoryStore`], `SqliteStore` (cargo feature `sqlite`, on by default) and (cargo
//! feature `postgres`) `PostgresStore`.

mod changes;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use changes::{ChangeFeed, ChangeSender, StoreChange};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{POSTGRES_SCHEMA_VERSION, PostgresStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{Durability, SqliteStore};

use std::path::PathBuf;

use async_trait::async_trait;
use toolwright_core::Message;

use crate::history::Session;

/// What went wrong in a store, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No session with this id.
    #[error(
        "session `{id}` does not exist; create it first with `SessionStore::create` (or use `load_or_create`)"
    )]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// `create` was called for an id that exists.
    #[error("session `{id}` already exists; load it, or delete it first")]
    AlreadyExists {
        /// The id.
        id: String,
    },
    /// The id is not acceptable (empty, or over 512 bytes).
    #[error("invalid session id {id:?}: {reason}; use a non-empty id of at most 512 bytes")]
    InvalidId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The file is a valid SQLite database that this crate did not create.
    #[error(
        "`{path}` is an SQLite database that context-engine did not create (application_id \
         {application_id:#x}); it was left untouched — choose another path for the session store"
    )]
    Foreign {
        /// The database file.
        path: PathBuf,
        /// The `PRAGMA application_id` found.
        application_id: i64,
    },
    /// The file is not an SQLite database, or is damaged.
    #[error(
        "`{path}` is not a readable SQLite database ({detail}); move it aside (restore it from \
         a backup if it held sessions) or choose another path"
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// The file was written by a newer version of this crate.
    #[error(
        "`{path}` has session-store schema version {found} but this build supports up to \
         {supported}; upgrade context-engine, or choose another path"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest version this build reads.
        supported: i64,
    },
    /// The file could not be opened or created.
    #[error(
        "cannot open session store `{path}`: {detail}; check that the directory exists and is writable"
    )]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// A stored message could not be decoded.
    #[error(
        "message {seq} of session `{id}` cannot be decoded ({detail}); it was written by an \
         incompatible version — delete the session or restore the file from a backup"
    )]
    Decode {
        /// The session.
        id: String,
        /// The message's sequence number.
        seq: i64,
        /// The decoder's message.
        detail: String,
    },
    /// A message could not be encoded for storage.
    #[error("a message could not be encoded for storage ({detail}); nothing was written")]
    Encode {
        /// The encoder's message.
        detail: String,
    },
    /// Any other database failure (disk full, I/O error, lock timeout…). The operation did not
    /// take effect.
    #[error(
        "session store failure: {detail}; nothing was written — check disk space and permissions, then retry"
    )]
    Database {
        /// The database's message.
        detail: String,
    },
    /// The store's worker thread is gone (it stopped after a fatal error or at shutdown).
    #[error("the session store is closed; open it again")]
    Closed,
    /// The database server cannot be reached, or the connection broke (PostgreSQL store). The
    /// operation did not take effect — except when the connection broke during its commit, when
    /// it may have: reload before retrying.
    #[error(
        "cannot reach the session database at {target} ({detail}); check that the server is \
         running and that DATABASE_URL points at it, then retry (the store reconnects by itself)"
    )]
    Unreachable {
        /// `host:port/database`, without user or password.
        target: String,
        /// The driver's message.
        detail: String,
    },
    /// The database was migrated by a newer version of this crate (PostgreSQL store).
    #[error(
        "the session database at {target} has schema version {found} but this build supports up \
         to {supported}; upgrade context-engine (every process sharing the database), or use \
         another database"
    )]
    NewerDatabaseSchema {
        /// `host:port/database`.
        target: String,
        /// Its schema version (table `ce_schema_version`).
        found: i64,
        /// The newest version this build reads.
        supported: i64,
    },
    /// The connection string cannot be used (PostgreSQL store).
    #[error(
        "invalid database URL ({detail}); use `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` \
         or a libpq `key=value` string"
    )]
    InvalidUrl {
        /// The parser's message.
        detail: String,
    },
    /// The store does not implement an optional part of the trait.
    #[error(
        "this session store does not offer {what}; use MemoryStore, SqliteStore, PostgresStore or \
         a store of your own that implements it"
    )]
    Unsupported {
        /// What it does not keep.
        what: &'static str,
    },
}

/// A compare-and-set change of one of a session's state slots, applied by
/// [`SessionStore::append_with_state`] together with a round.
///
/// A state slot is a small durable value kept beside a session's messages under a key — a run
/// held for a person's approval, for example. `expected` is what the slot must hold for the change
/// to apply (`None`: the slot must be unset); `new` is what it holds afterwards (`None` clears it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateChange<'a> {
    /// The slot's key.
    pub key: &'a str,
    /// What the slot must hold now (`None`: unset).
    pub expected: Option<&'a str>,
    /// What it holds afterwards (`None`: cleared).
    pub new: Option<&'a str>,
}

impl<'a> StateChange<'a> {
    /// Sets `key` from `expected` to `new`.
    pub fn new(key: &'a str, expected: Option<&'a str>, new: Option<&'a str>) -> Self {
        Self { key, expected, new }
    }
}

/// Message `seq` of session `id` from the JSON text a store kept ([`encode`]'s inverse).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn decode(id: &str, seq: i64, text: &str) -> Result<Message, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Decode {
        id: id.to_owned(),
        seq,
        detail: e.to_string(),
    })
}

/// A round's messages as the JSON text each store keeps (serde_json escapes a NUL inside strings
/// as `\u0000`, so the text never holds one: PostgreSQL's `text` could not).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn encode(round: &[Message]) -> Result<Vec<String>, StoreError> {
    round
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Encode {
            detail: e.to_string(),
        })
}

pub(crate) fn check_id(id: &str) -> Result<(), StoreError> {
    let reason = if id.is_empty() {
        "it is empty"
    } else if id.len() > 512 {
        "it is longer than 512 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidId {
        id: id.chars().take(64).collect(),
        reason,
    })
}

/// Where sessions live (C4). Dyn-compatible: share one as `Arc<dyn SessionStore>`.
///
/// * `append` writes a finished round (a user message; or an assistant message with its tool
///   results; or any batch) atomically: after a crash every acknowledged round is there and no
///   part of an unacknowledged one.
/// * Appends to one session keep their order: each message gets the next sequence number; rounds
///   from concurrent callers never interleave.
/// * An unknown id is [`StoreError::NotFound`] for `load`, `append` and `delete` (no implicit
///   creation; use [`load_or_create`](Self::load_or_create)).
/// * Optionally, small durable state slots beside the messages, changed by compare-and-set
///   together with a round ([`get_state`](Self::get_state),
///   [`append_with_state`](Self::append_with_state)); `delete` removes them with the session.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), toolwright_context_engine::StoreError> {
/// use std::sync::Arc;
/// use toolwright_context_engine::{MemoryStore, SessionStore};
/// use toolwright_core::Message;
/// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
/// store.create("s1").await?;
/// store.append("s1", &[Message::user("hi")]).await?;
/// let len = store.append("s1", &[Message::assistant("hello!")]).await?;
/// assert_eq!(len, 2);
/// assert_eq!(store.load("s1").await?.messages.len(), 2);
/// assert_eq!(store.list().await?, vec!["s1".to_string()]);
/// assert!(store.load("nope").await.is_err());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Creates an empty session. [`StoreError::AlreadyExists`] if it exists.
    async fn create(&self, id: &str) -> Result<(), StoreError>;

    /// The session's messages in order. [`StoreError::NotFound`] if it does not exist.
    async fn load(&self, id: &str) -> Result<Session, StoreError>;

    /// Appends one round atomically and returns the session's message count afterwards.
    /// An empty round changes nothing. [`StoreError::NotFound`] if the session does not exist.
    async fn append(&self, id: &str, round: &[Message]) -> Result<u64, StoreError>;

    /// The ids of all sessions, sorted.
    async fn list(&self) -> Result<Vec<String>, StoreError>;

    /// Deletes a session and its messages. [`StoreError::NotFound`] if it does not exist.
    async fn delete(&self, id: &str) -> Result<(), StoreError>;

    /// The value of the session's state slot `key`, `None` when unset (see [`StateChange`]).
    /// [`StoreError::NotFound`] if the session does not exist.
    ///
    /// Optional: the default answers [`StoreError::Unsupported`]. [`MemoryStore`],
    /// `SqliteStore` and `PostgresStore` implement it.
    async fn get_state(&self, id: &str, key: &str) -> Result<Option<String>, StoreError> {
        let _ = (id, key);
        Err(StoreError::Unsupported {
            what: "state slots (`SessionStore::get_state` and `append_with_state`)",
        })
    }

    /// Atomically: if the slot `change.key` holds `change.expected`, appends `round` (which may
    /// be empty) and sets the slot to `change.new`, returning `Some(message count)`; otherwise
    /// writes nothing and returns `None`. Two callers racing on the same expected value: exactly
    /// one wins. [`StoreError::NotFound`] if the session does not exist.
    ///
    /// Optional: the default answers [`StoreError::Unsupported`].
    async fn append_with_state(
        &self,
        id: &str,
        round: &[Message],
        change: StateChange<'_>,
    ) -> Result<Option<u64>, StoreError> {
        let _ = (id, round, change);
        Err(StoreError::Unsupported {
            what: "state slots (`SessionStore::get_state` and `append_with_state`)",
        })
    }

    /// The session's messages and the value of its state slot `key`, read together: what a
    /// follower of a conversation needs after each change (its rows, and whether an answer
    /// runs). [`StoreError::NotFound`] if the session does not exist.
    ///
    /// The default calls [`load`](Self::load) then [`get_state`](Self::get_state) (so a store
    /// without state slots answers [`StoreError::Unsupported`]), and a change committed between
    /// the two may show in the slot and not in the messages. [`MemoryStore`] and
    /// `SqliteStore` read both in one snapshot; `PostgresStore` in one statement (one round
    /// trip instead of two).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), toolwright_context_engine::StoreError> {
    /// use toolwright_context_engine::{MemoryStore, SessionStore, StateChange};
    /// use toolwright_core::Message;
    /// let store = MemoryStore::new();
    /// store.create("s1").await?;
    /// store.append_with_state("s1", &[Message::user("hi")], StateChange::new("turn", None, Some("w1"))).await?;
    /// let (session, turn) = store.load_with_state("s1", "turn").await?;
    /// assert_eq!((session.messages.len(), turn.as_deref()), (1, Some("w1")));
    /// # Ok(()) }
    /// ```
    async fn load_with_state(
        &self,
        id: &str,
        key: &str,
    ) -> Result<(Session, Option<String>), StoreError> {
        let session = self.load(id).await?;
        let value = self.get_state(id, key).await?;
        Ok((session, value))
    }

    /// A feed of the changes committed to this store from now on — by this process and, for a
    /// shared store (PostgreSQL: `LISTEN`/`NOTIFY`), by every other process — so a follower
    /// waits for a change instead of reading the session again and again.
    ///
    /// Optional: the default answers [`StoreError::Unsupported`] (then read again on a timer).
    /// [`MemoryStore`] and `SqliteStore` report this process's changes; `PostgresStore`
    /// every process's.
    async fn watch(&self) -> Result<ChangeFeed, StoreError> {
        Err(StoreError::Unsupported {
            what: "a change feed (`SessionStore::watch`)",
        })
    }

    /// Loads the session, creating it empty if it does not exist.
    async fn load_or_create(&self, id: &str) -> Result<Session, StoreError> {
        match self.load(id).await {
            Err(StoreError::NotFound { .. }) => match self.create(id).await {
                Ok(()) | Err(StoreError::AlreadyExists { .. }) => self.load(id).await,
                Err(e) => Err(e),
            },
            other => other,
        }
    }
}
