//! The durable default: one SQLite file, WAL, a dedicated worker thread with group commit.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::oneshot;
use toolwright_core::Message;

use super::{ChangeFeed, ChangeSender, SessionStore, StateChange, StoreError, check_id};
use crate::history::Session;

/// `PRAGMA application_id` of our files: ASCII "LTCE" (llm-toolkit context-engine).
const APPLICATION_ID: i64 = 0x4C54_4345;
/// `PRAGMA user_version`: the schema version this build writes and reads.
/// Version 2 added `ce_state` (state slots); a version-1 file is upgraded in place when opened.
const SCHEMA_VERSION: i64 = 2;
/// Most rounds committed in one transaction (group commit).
const MAX_GROUP: usize = 256;

const SCHEMA: &str = "
CREATE TABLE ce_sessions (
    id         TEXT    NOT NULL PRIMARY KEY,
    next_seq   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL DEFAULT (unixepoch())
) STRICT;
CREATE TABLE ce_messages (
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    round      INTEGER NOT NULL,
    message    TEXT    NOT NULL,
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;
";

/// Version 2's addition, also the upgrade from version 1: the state slots.
const STATE_TABLE: &str = "
CREATE TABLE ce_state (
    session_id TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    PRIMARY KEY (session_id, key)
) STRICT, WITHOUT ROWID;
";

/// How hard a commit works to survive a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous=FULL` (default): the WAL is fsynced at every commit, so an acknowledged round
    /// survives a process crash *and* a power loss or OS crash. Costs one fsync per commit;
    /// concurrent appends share it (group commit).
    #[default]
    Full,
    /// `synchronous=NORMAL`: no fsync per commit. An acknowledged round survives a crash or kill
    /// of the process, but the last rounds before a power loss or OS crash may be lost (the file
    /// stays consistent, and no round is ever half there).
    Normal,
}

/// Sessions in one SQLite file: the durable default (C4).
///
/// * **Format.** Tables `ce_sessions`, `ce_messages` (one row per message, JSON of
///   [`Message`], with a per-session sequence number) and `ce_state` (state slots, see
///   [`StateChange`]). The file is marked with
///   `PRAGMA application_id` and `user_version`; a foreign or newer file is refused
///   ([`StoreError::Foreign`], [`StoreError::NewerSchema`]), a non-database file is
///   [`StoreError::Corrupt`]. A file is never modified before it is recognised.
/// * **Durability.** WAL journal; `synchronous=FULL` by default (see [`Durability`] for why and
///   for the faster `NORMAL`). A round is one transaction: after a crash every acknowledged
///   round is there and no part of any other.
/// * **Concurrency.** One connection owned by a worker thread (rusqlite is blocking, so async
///   callers never block a runtime thread). Appends that arrive together, from any number of
///   sessions, are committed in one transaction with a savepoint per round (group commit), so
///   many concurrent sessions share each fsync; a failing round (unknown session) rolls back
///   alone. Cloning the store is cheap and shares the worker; it stops when the last clone is
///   dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use toolwright_context_engine::{SessionStore, SqliteStore};
/// use toolwright_core::Message;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("sessions.db");
/// {
///     let store = SqliteStore::open(&path)?;
///     store.create("s1").await?;
///     store.append("s1", &[Message::user("hi"), Message::assistant("hello")]).await?;
/// }
/// let store = SqliteStore::open(&path)?; // reopened: the round is there
/// assert_eq!(store.load("s1").await?.messages.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    tx: mpsc::Sender<Op>,
    path: PathBuf,
    /// This process's changes (a database file is one process's; see `watch`).
    changes: ChangeSender,
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

enum Op {
    Create(String, Reply<()>),
    Load(String, Reply<Session>),
    Append(String, Vec<String>, Reply<u64>),
    List(Reply<Vec<String>>),
    Delete(String, Reply<()>),
    GetState(String, String, Reply<Option<String>>),
    LoadWithState(String, String, Reply<(Session, Option<String>)>),
    AppendWithState(String, Vec<String>, OwnedChange, Reply<Option<u64>>),
}

/// A [`StateChange`] moved to the worker thread.
struct OwnedChange {
    key: String,
    expected: Option<String>,
    new: Option<String>,
}

fn db_err(e: rusqlite::Error) -> StoreError {
    StoreError::Database {
        detail: e.to_string(),
    }
}

fn sqlite_code(e: &rusqlite::Error) -> Option<ErrorCode> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.code),
        _ => None,
    }
}

impl SqliteStore {
    /// Opens (or creates) the store at `path` with [`Durability::Full`].
    ///
    /// Does blocking file I/O: call it at start-up (or inside `spawn_blocking`).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`], [`StoreError::Foreign`], [`StoreError::NewerSchema`],
    /// [`StoreError::Open`] — each says what to do.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::Full)
    }

    /// Opens (or creates) the store at `path` with the given durability.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = open_connection(&path, durability)?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("context-engine-sqlite".into())
            .spawn(move || worker(conn, rx))
            .map_err(|e| StoreError::Open {
                path: path.clone(),
                detail: format!("cannot start the worker thread: {e}"),
            })?;
        Ok(Self {
            tx,
            path,
            changes: ChangeSender::new(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn call<T>(&self, op: impl FnOnce(Reply<T>) -> Op) -> Result<T, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(op(reply)).map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

fn open_connection(path: &Path, durability: Durability) -> Result<Connection, StoreError> {
    let open_err = |e: rusqlite::Error| StoreError::Open {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let check_err = |e: rusqlite::Error| match sqlite_code(&e) {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        _ => open_err(e),
    };
    precheck_header(path)?;
    let conn = Connection::open(path).map_err(open_err)?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(open_err)?;

    // Recognise the file before touching it.
    let app_id: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(check_err)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(check_err)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
        .map_err(check_err)?;
    let fresh = app_id == 0 && version == 0 && objects == 0;
    if !fresh && app_id != APPLICATION_ID {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
            application_id: app_id,
        });
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }

    let journal: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(check_err)?;
    if !journal.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Open {
            path: path.to_path_buf(),
            detail: format!("the file system does not support WAL (journal_mode is {journal})"),
        });
    }
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(check_err)?;

    if fresh {
        let init = format!(
            "BEGIN IMMEDIATE;
             {SCHEMA}
             {STATE_TABLE}
             PRAGMA application_id = {APPLICATION_ID};
             PRAGMA user_version = {SCHEMA_VERSION};
             COMMIT;"
        );
        conn.execute_batch(&init).map_err(check_err)?;
    } else if version == 1 {
        let upgrade = format!(
            "BEGIN IMMEDIATE;
             {STATE_TABLE}
             PRAGMA user_version = {SCHEMA_VERSION};
             COMMIT;"
        );
        conn.execute_batch(&upgrade).map_err(check_err)?;
    } else if version < SCHEMA_VERSION {
        // Marked as ours but without a schema: an interrupted or damaged file.
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("schema version {version} is marked but no schema is present"),
        });
    }
    // Verify the tables are what we expect (catches a damaged schema early).
    conn.prepare("SELECT session_id, seq, round, message FROM ce_messages LIMIT 0")
        .and_then(|_| conn.prepare("SELECT id, next_seq FROM ce_sessions LIMIT 0"))
        .and_then(|_| conn.prepare("SELECT session_id, key, value FROM ce_state LIMIT 0"))
        .map_err(|e| StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("the schema is damaged: {e}"),
        })?;
    Ok(conn)
}

/// Refuses a non-empty file that does not start like an SQLite database, or is shorter than the
/// smallest page (SQLite itself would treat such a file as empty and overwrite it).
fn precheck_header(path: &Path) -> Result<(), StoreError> {
    use std::io::Read;
    let corrupt = |detail: &str| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail: detail.to_owned(),
    };
    let Ok(mut file) = std::fs::File::open(path) else {
        return Ok(()); // missing (created below) or unreadable (reported by SQLite)
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        return Ok(());
    }
    let mut magic = [0u8; 16];
    if file.read_exact(&mut magic).is_err() || &magic != b"SQLite format 3\0" {
        return Err(corrupt(
            "file is not a database: the SQLite header is missing",
        ));
    }
    if len < 512 {
        return Err(corrupt("the file is truncated (shorter than one page)"));
    }
    Ok(())
}

/// The worker: runs operations in arrival order; consecutive appends share one transaction.
fn worker(mut conn: Connection, rx: mpsc::Receiver<Op>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let mut appends = Vec::new();
        for op in batch {
            match op {
                Op::Append(id, msgs, reply) => appends.push((id, msgs, reply)),
                other => {
                    commit_appends(&mut conn, std::mem::take(&mut appends));
                    run_single(&mut conn, other);
                }
            }
        }
        commit_appends(&mut conn, appends);
    }
}

fn run_single(conn: &mut Connection, op: Op) {
    // A send error means the caller stopped waiting; nothing to do.
    match op {
        Op::Create(id, reply) => {
            let _ = reply.send(create(conn, &id));
        }
        Op::Load(id, reply) => {
            let _ = reply.send(load(conn, &id));
        }
        Op::List(reply) => {
            let _ = reply.send(list(conn));
        }
        Op::Delete(id, reply) => {
            let _ = reply.send(delete(conn, &id));
        }
        Op::Append(id, msgs, reply) => commit_appends(conn, vec![(id, msgs, reply)]),
        Op::GetState(id, key, reply) => {
            let _ = reply.send(get_state(conn, &id, &key));
        }
        Op::LoadWithState(id, key, reply) => {
            let _ = reply.send(load_with_state(conn, &id, &key));
        }
        Op::AppendWithState(id, msgs, change, reply) => {
            let _ = reply.send(append_with_state(conn, &id, &msgs, &change));
        }
    }
}

/// [`StoreError::NotFound`] unless session `id` exists.
fn check_exists(conn: &Connection, id: &str) -> Result<(), StoreError> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM ce_sessions WHERE id = ?1")
        .and_then(|mut s| s.exists([id]))
        .map_err(db_err)?;
    if exists {
        Ok(())
    } else {
        Err(StoreError::NotFound { id: id.to_owned() })
    }
}

fn get_state(conn: &mut Connection, id: &str, key: &str) -> Result<Option<String>, StoreError> {
    let txn = conn.transaction().map_err(db_err)?;
    check_exists(&txn, id)?;
    let value = txn
        .prepare_cached("SELECT value FROM ce_state WHERE session_id = ?1 AND key = ?2")
        .and_then(|mut s| s.query_row([id, key], |r| r.get(0)).optional())
        .map_err(db_err)?;
    txn.finish().map_err(db_err)?;
    Ok(value)
}

/// Compare, append and set in one immediate transaction (the worker is the only writer of this
/// connection; `BEGIN IMMEDIATE` also excludes other processes on the same file).
fn append_with_state(
    conn: &mut Connection,
    id: &str,
    msgs: &[String],
    change: &OwnedChange,
) -> Result<Option<u64>, StoreError> {
    let txn = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db_err)?;
    let current: Option<String> = txn
        .prepare_cached("SELECT value FROM ce_state WHERE session_id = ?1 AND key = ?2")
        .and_then(|mut s| s.query_row([id, &change.key], |r| r.get(0)).optional())
        .map_err(db_err)?;
    let len = append_round(&txn, id, msgs)?; // NotFound for an unknown session
    if current != change.expected {
        return Ok(None); // dropping the transaction rolls the round back
    }
    match &change.new {
        Some(v) => txn
            .prepare_cached(
                "INSERT INTO ce_state (session_id, key, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value",
            )
            .and_then(|mut s| s.execute(params![id, change.key, v])),
        None => txn
            .prepare_cached("DELETE FROM ce_state WHERE session_id = ?1 AND key = ?2")
            .and_then(|mut s| s.execute(params![id, change.key])),
    }
    .map_err(db_err)?;
    txn.commit().map_err(db_err)?;
    Ok(Some(len))
}

/// Commits a group of rounds in one transaction, one savepoint per round; replies only after
/// the commit returned (so an acknowledged round is durable).
fn commit_appends(conn: &mut Connection, appends: Vec<(String, Vec<String>, Reply<u64>)>) {
    if appends.is_empty() {
        return;
    }
    let mut results: Vec<Result<u64, StoreError>> = Vec::with_capacity(appends.len());
    let outcome = (|| -> Result<(), rusqlite::Error> {
        let mut txn = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        for (id, msgs, _) in &appends {
            let mut sp = txn.savepoint()?;
            match append_round(&sp, id, msgs) {
                Ok(n) => {
                    sp.commit()?;
                    results.push(Ok(n));
                }
                Err(e) => {
                    sp.rollback()?;
                    results.push(Err(e));
                }
            }
        }
        txn.commit()
    })();
    match outcome {
        Ok(()) => {
            for ((_, _, reply), result) in appends.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        Err(e) => {
            // Nothing of this group was committed.
            let err = db_err(e);
            for (_, _, reply) in appends {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }
}

fn append_round(conn: &Connection, id: &str, msgs: &[String]) -> Result<u64, StoreError> {
    let next: i64 = conn
        .prepare_cached("SELECT next_seq FROM ce_sessions WHERE id = ?1")
        .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
        .map_err(db_err)?
        .ok_or_else(|| StoreError::NotFound { id: id.to_owned() })?;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO ce_messages (session_id, seq, round, message) VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(db_err)?;
    let mut seq = next;
    for m in msgs {
        insert.execute(params![id, seq, next, m]).map_err(db_err)?;
        seq += 1;
    }
    conn.prepare_cached("UPDATE ce_sessions SET next_seq = ?2 WHERE id = ?1")
        .and_then(|mut s| s.execute(params![id, seq]))
        .map_err(db_err)?;
    Ok(u64::try_from(seq).unwrap_or(0))
}

fn create(conn: &Connection, id: &str) -> Result<(), StoreError> {
    match conn.execute("INSERT INTO ce_sessions (id) VALUES (?1)", [id]) {
        Ok(_) => Ok(()),
        Err(e) if sqlite_code(&e) == Some(ErrorCode::ConstraintViolation) => {
            Err(StoreError::AlreadyExists { id: id.to_owned() })
        }
        Err(e) => Err(db_err(e)),
    }
}

fn load(conn: &mut Connection, id: &str) -> Result<Session, StoreError> {
    // One read transaction: a consistent snapshot of the session row and its messages.
    let txn = conn.transaction().map_err(db_err)?;
    let session = load_in(&txn, id)?;
    txn.finish().map_err(db_err)?;
    Ok(session)
}

/// The session's messages and one state slot, in one read transaction.
fn load_with_state(
    conn: &mut Connection,
    id: &str,
    key: &str,
) -> Result<(Session, Option<String>), StoreError> {
    let txn = conn.transaction().map_err(db_err)?;
    let session = load_in(&txn, id)?;
    let value = txn
        .prepare_cached("SELECT value FROM ce_state WHERE session_id = ?1 AND key = ?2")
        .and_then(|mut s| s.query_row([id, key], |r| r.get(0)).optional())
        .map_err(db_err)?;
    txn.finish().map_err(db_err)?;
    Ok((session, value))
}

/// The session's messages, inside the caller's transaction.
fn load_in(txn: &Connection, id: &str) -> Result<Session, StoreError> {
    check_exists(txn, id)?;
    let mut messages = Vec::new();
    {
        let mut stmt = txn
            .prepare_cached(
                "SELECT seq, message FROM ce_messages WHERE session_id = ?1 ORDER BY seq",
            )
            .map_err(db_err)?;
        let mut rows = stmt.query([id]).map_err(db_err)?;
        while let Some(row) = rows.next().map_err(db_err)? {
            let seq: i64 = row.get(0).map_err(db_err)?;
            let text: String = row.get(1).map_err(db_err)?;
            messages.push(super::decode(id, seq, &text)?);
        }
    }
    Ok(Session {
        id: id.to_owned(),
        messages,
    })
}

fn list(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT id FROM ce_sessions ORDER BY id")
        .map_err(db_err)?;
    let ids = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
        .map_err(db_err)?;
    Ok(ids)
}

fn delete(conn: &mut Connection, id: &str) -> Result<(), StoreError> {
    let txn = conn.transaction().map_err(db_err)?;
    txn.execute("DELETE FROM ce_messages WHERE session_id = ?1", [id])
        .map_err(db_err)?;
    txn.execute("DELETE FROM ce_state WHERE session_id = ?1", [id])
        .map_err(db_err)?;
    let n = txn
        .execute("DELETE FROM ce_sessions WHERE id = ?1", [id])
        .map_err(db_err)?;
    if n == 0 {
        return Err(StoreError::NotFound { id: id.to_owned() });
    }
    txn.commit().map_err(db_err)
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn create(&self, id: &str) -> Result<(), StoreError> {
        check_id(id)?;
        self.call(|r| Op::Create(id.to_owned(), r)).await?;
        self.changes.session(id);
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Session, StoreError> {
        self.call(|r| Op::Load(id.to_owned(), r)).await
    }

    async fn append(&self, id: &str, round: &[Message]) -> Result<u64, StoreError> {
        let msgs = super::encode(round)?;
        let len = self.call(|r| Op::Append(id.to_owned(), msgs, r)).await?;
        self.changes.session(id);
        Ok(len)
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.call(Op::List).await
    }

    async fn get_state(&self, id: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.call(|r| Op::GetState(id.to_owned(), key.to_owned(), r))
            .await
    }

    /// One read transaction on the store's thread.
    async fn load_with_state(
        &self,
        id: &str,
        key: &str,
    ) -> Result<(Session, Option<String>), StoreError> {
        self.call(|r| Op::LoadWithState(id.to_owned(), key.to_owned(), r))
            .await
    }

    async fn append_with_state(
        &self,
        id: &str,
        round: &[Message],
        change: StateChange<'_>,
    ) -> Result<Option<u64>, StoreError> {
        let msgs = super::encode(round)?;
        let change = OwnedChange {
            key: change.key.to_owned(),
            expected: change.expected.map(str::to_owned),
            new: change.new.map(str::to_owned),
        };
        let done = self
            .call(|r| Op::AppendWithState(id.to_owned(), msgs, change, r))
            .await?;
        if done.is_some() {
            self.changes.session(id);
        }
        Ok(done)
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.call(|r| Op::Delete(id.to_owned(), r)).await?;
        self.changes.session(id);
        Ok(())
    }

    /// This process's changes: another process writing the same file is not seen (one
    /// process per database file; several processes share conversations through PostgreSQL).
    async fn watch(&self) -> Result<ChangeFeed, StoreError> {
        Ok(self.changes.subscribe())
    }
}
