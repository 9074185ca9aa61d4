//! Sessions in PostgreSQL: a pool of `tokio-postgres` connections (deadpool), one transaction
//! per round, schema migrations under an advisory lock.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
};
use tokio_postgres::config::Host;
use tokio_postgres::{AsyncMessage, NoTls};
use toolwright_core::Message;

use super::{ChangeFeed, ChangeSender, SessionStore, StateChange, StoreError, check_id};
use crate::history::Session;

/// The newest schema version this build reads and writes (table `ce_schema_version`).
pub const POSTGRES_SCHEMA_VERSION: i32 = 2;

/// `pg_advisory_xact_lock` key that serialises migrations across processes: ASCII "LTCE".
const MIGRATION_LOCK: i64 = 0x4C54_4345;

/// Migration `i` brings the schema from version `i` to `i + 1`; each runs in the migrating
/// transaction, under the advisory lock.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE ce_sessions (
    id         text        NOT NULL PRIMARY KEY,
    next_seq   bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE ce_messages (
    session_id text   NOT NULL REFERENCES ce_sessions (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    round      bigint NOT NULL,
    message    text   NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE ce_state (
    session_id text NOT NULL REFERENCES ce_sessions (id) ON DELETE CASCADE,
    key        text NOT NULL,
    value      text NOT NULL,
    PRIMARY KEY (session_id, key)
);
",
    "
CREATE FUNCTION ce_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ce_changes', CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);
    RETURN NULL;
END
$$;
CREATE TRIGGER ce_sessions_changed AFTER INSERT OR UPDATE OR DELETE ON ce_sessions
    FOR EACH ROW EXECUTE FUNCTION ce_notify_change();
",
];

/// The `NOTIFY` channel of the change feed: every change of a session touches its
/// `ce_sessions` row (an append bumps `next_seq`, under the row lock), whose trigger notifies
/// the session's id when the transaction commits (a rolled-back one notifies nothing).
const CHANGES_CHANNEL: &str = "ce_changes";

/// Connections kept by the pool unless the URL's options say otherwise.
const DEFAULT_POOL_SIZE: usize = 16;
/// Connect timeout when the URL sets none.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an operation waits for a free connection when all are busy.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Sessions in a PostgreSQL database (C4), for several processes sharing conversations
/// (cargo feature `postgres`).
///
/// * **Contract.** The same as [`MemoryStore`](super::MemoryStore) and
///   `SqliteStore`, state slots included; the shared store test suite
///   runs against all three.
/// * **Durability.** A round is one transaction; `append` returns after PostgreSQL's `COMMIT`
///   returned, so with the server's default `synchronous_commit = on` an acknowledged round is
///   on disk (in the WAL) and survives a crash of the client, of the server, or of the machine.
///   A killed client leaves no part of an unacknowledged round.
/// * **Concurrency.** Appends to one session lock its row (`UPDATE … RETURNING`), so rounds
///   from any number of processes get consecutive sequence numbers and never interleave;
///   different sessions do not wait for each other. A compare-and-set of a state slot runs
///   under the same lock: exactly one of several racing callers wins.
/// * **Schema.** Tables `ce_sessions`, `ce_messages` (one row per message, the [`Message`]'s
///   JSON as text, exactly as written), `ce_state` and `ce_schema_version`, in the connection's
///   default schema. Created on first connect; newer versions are migrated in one transaction
///   under an advisory lock, so processes starting together do not race. A database written
///   by a newer build is refused ([`StoreError::NewerDatabaseSchema`]).
/// * **Failures.** A server that cannot be reached, or goes away, is
///   [`StoreError::Unreachable`]; the pool reconnects by itself once it is back. If the
///   connection breaks *during* `COMMIT`, the round may or may not have been committed (as with
///   any client/server database): reload the session before retrying.
/// * **Change feed.** [`watch`](SessionStore::watch) reports every process's committed changes
///   through one `LISTEN` connection per store (opened at the first `watch`), fed by a trigger
///   on `ce_sessions` (`NOTIFY ce_changes, 'ID'` at commit). When that connection breaks it is
///   opened again (backoff up to 5 s) and every feed gets [`StoreChange::Missed`](super::StoreChange::Missed).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), toolwright_context_engine::StoreError> {
/// use toolwright_context_engine::{PostgresStore, SessionStore};
/// use toolwright_core::Message;
/// let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://app@127.0.0.1/app".into());
/// let store = PostgresStore::connect(&url).await?;
/// store.load_or_create("s1").await?;
/// store.append("s1", &[Message::user("hi"), Message::assistant("hello")]).await?;
/// assert_eq!(store.load("s1").await?.messages.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    target: String,
    feed: Arc<Feed>,
}

/// The change feed's sender and its `LISTEN` task (started by the first `watch`, stopped when
/// the last clone of the store is dropped).
struct Feed {
    config: tokio_postgres::Config,
    changes: ChangeSender,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Some(t) = self
            .task
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            t.abort();
        }
    }
}

/// Keeps a `LISTEN` connection open and hands its notifications to `changes`; after every
/// (re)connection, once listening, reports [`StoreChange::Missed`](super::StoreChange::Missed)
/// (whatever was committed while not listening is read again by the followers).
async fn listen(config: tokio_postgres::Config, changes: ChangeSender, target: String) {
    const FIRST: Duration = Duration::from_millis(100);
    let mut backoff = FIRST;
    loop {
        let why = match config.connect(NoTls).await {
            Err(e) => e.to_string(),
            Ok((client, mut conn)) => {
                let notes = changes.clone();
                let mut drive = std::pin::pin!(async move {
                    loop {
                        match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                            Some(Ok(AsyncMessage::Notification(n))) => notes.session(n.payload()),
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return e.to_string(),
                            None => return "the server closed the connection".to_owned(),
                        }
                    }
                });
                let sql = format!("LISTEN {CHANGES_CHANNEL}");
                let listening = tokio::select! {
                    r = client.batch_execute(&sql) => r.map_err(|e| e.to_string()),
                    why = &mut drive => Err(why),
                };
                match listening {
                    Err(why) => why,
                    Ok(()) => {
                        changes.missed();
                        backoff = FIRST;
                        let why = drive.await;
                        drop(client);
                        why
                    }
                }
            }
        };
        tracing::warn!(target = %target, error = %why, retry_in_ms = backoff.as_millis() as u64,
            "session store: the change feed's connection is down; followers re-read when it is back");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (a libpq connection string or URL,
    /// `postgres://user@host:port/db`; TLS is not supported — use a local or tunnelled server),
    /// creates or migrates the schema, and keeps a pool of up to 16 connections.
    ///
    /// # Errors
    /// [`StoreError::InvalidUrl`], [`StoreError::Unreachable`],
    /// [`StoreError::NewerDatabaseSchema`], [`StoreError::Database`] — each says what to do.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with_pool_size(url, DEFAULT_POOL_SIZE).await
    }

    /// As [`connect`](Self::connect), with at most `max_connections` (at least 1) connections.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with_pool_size(
        url: &str,
        max_connections: usize,
    ) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| StoreError::InvalidUrl {
                    detail: e.to_string(),
                })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        // A server that vanishes without closing the connection (host down, network cut) is
        // noticed within about half a minute instead of the system's two hours — unless the URL
        // sets its own keepalive or TCP user timeout.
        if config.get_keepalives_interval().is_none() && config.get_keepalives_retries().is_none() {
            config
                .keepalives(true)
                .keepalives_idle(Duration::from_secs(15))
                .keepalives_interval(Duration::from_secs(5))
                .keepalives_retries(3);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(30));
        }
        let target = describe(&config);
        let feed = Arc::new(Feed {
            config: config.clone(),
            changes: ChangeSender::new(),
            task: Mutex::new(None),
        });
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(WAIT_TIMEOUT))
            .create_timeout(Some(DEFAULT_CONNECT_TIMEOUT * 2))
            .recycle_timeout(Some(DEFAULT_CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::InvalidUrl {
                detail: e.to_string(),
            })?;
        let store = Self { pool, target, feed };
        store.migrate().await?;
        Ok(store)
    }

    /// Where the store connects, without the password: `host:port/database`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Creates or migrates the schema, serialised across processes by an advisory lock.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(|e| self.err(e))?;
        txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(|e| self.err(e))?;
        txn.batch_execute(
            "CREATE TABLE IF NOT EXISTS ce_schema_version (
                 one     boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one),
                 version integer NOT NULL
             )",
        )
        .await
        .map_err(|e| self.err(e))?;
        let found: i32 = txn
            .query_opt("SELECT version FROM ce_schema_version", &[])
            .await
            .map_err(|e| self.err(e))?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| self.err(e))?
            .unwrap_or(0);
        if found > POSTGRES_SCHEMA_VERSION {
            return Err(StoreError::NewerDatabaseSchema {
                target: self.target.clone(),
                found: i64::from(found),
                supported: i64::from(POSTGRES_SCHEMA_VERSION),
            });
        }
        if found < POSTGRES_SCHEMA_VERSION {
            for migration in MIGRATIONS.iter().skip(usize::try_from(found).unwrap_or(0)) {
                txn.batch_execute(migration)
                    .await
                    .map_err(|e| self.err(e))?;
            }
            txn.execute(
                "INSERT INTO ce_schema_version (one, version) VALUES (true, $1)
                 ON CONFLICT (one) DO UPDATE SET version = excluded.version",
                &[&POSTGRES_SCHEMA_VERSION],
            )
            .await
            .map_err(|e| self.err(e))?;
        }
        txn.commit().await.map_err(|e| self.err(e))
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => self.err(e),
            PoolError::Timeout(TimeoutType::Wait) => StoreError::Database {
                detail: format!(
                    "all connections to {} stayed busy for {} s",
                    self.target,
                    WAIT_TIMEOUT.as_secs()
                ),
            },
            PoolError::Timeout(_) => StoreError::Unreachable {
                target: self.target.clone(),
                detail: "timed out connecting".into(),
            },
            PoolError::Closed => StoreError::Closed,
            other => StoreError::Database {
                detail: other.to_string(),
            },
        })
    }

    /// A driver error as a [`StoreError`]: connection-level failures (no server answer, SQLSTATE
    /// class 08 or 57P, "operator intervention") are [`StoreError::Unreachable`].
    fn err(&self, e: tokio_postgres::Error) -> StoreError {
        match e.as_db_error() {
            Some(db) => {
                let code = db.code().code();
                if code.starts_with("08") || code.starts_with("57P") {
                    StoreError::Unreachable {
                        target: self.target.clone(),
                        detail: db.to_string(),
                    }
                } else {
                    StoreError::Database {
                        detail: db.to_string(),
                    }
                }
            }
            None => StoreError::Unreachable {
                target: self.target.clone(),
                detail: e.to_string(),
            },
        }
    }

    /// Appends `msgs` (already encoded) inside `txn` after locking the session's row; returns the
    /// message count afterwards. `NotFound` if the session does not exist.
    async fn append_in(
        &self,
        txn: &deadpool_postgres::Transaction<'_>,
        id: &str,
        msgs: &[String],
    ) -> Result<u64, StoreError> {
        let n = i64::try_from(msgs.len()).unwrap_or(i64::MAX);
        let bump = txn
            .prepare_cached(
                "UPDATE ce_sessions SET next_seq = next_seq + $2 WHERE id = $1 RETURNING next_seq",
            )
            .await
            .map_err(|e| self.err(e))?;
        let end: i64 = txn
            .query_opt(&bump, &[&id, &n])
            .await
            .map_err(|e| self.err(e))?
            .ok_or_else(|| not_found(id))?
            .try_get(0)
            .map_err(|e| self.err(e))?;
        if !msgs.is_empty() {
            let start = end - n;
            let insert = txn
                .prepare_cached(
                    "INSERT INTO ce_messages (session_id, seq, round, message)
                     SELECT $1, $2 + t.ord - 1, $2, t.m
                     FROM unnest($3::text[]) WITH ORDINALITY AS t(m, ord)",
                )
                .await
                .map_err(|e| self.err(e))?;
            txn.execute(&insert, &[&id, &start, &msgs])
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(u64::try_from(end).unwrap_or(0))
    }

    /// The messages of a `LEFT JOIN ce_messages` result whose columns `at` and `at + 1` are
    /// `seq` and `message` (a session without messages has one row of NULLs).
    fn messages(
        &self,
        id: &str,
        rows: &[tokio_postgres::Row],
        at: usize,
    ) -> Result<Vec<Message>, StoreError> {
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: Option<i64> = row.try_get(at).map_err(|e| self.err(e))?;
            let text: Option<String> = row.try_get(at + 1).map_err(|e| self.err(e))?;
            let (Some(seq), Some(text)) = (seq, text) else {
                continue; // the LEFT JOIN's row for a session without messages
            };
            messages.push(super::decode(id, seq, &text)?);
        }
        Ok(messages)
    }
}

/// `host:port/database` of a connection config (no user, no password).
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

fn not_found(id: &str) -> StoreError {
    StoreError::NotFound { id: id.to_owned() }
}

/// PostgreSQL's `text` cannot hold a NUL character; such an id cannot name a stored session.
fn has_nul(s: &str) -> bool {
    s.contains('\0')
}

fn check_text(what: &str, s: &str) -> Result<(), StoreError> {
    if has_nul(s) {
        return Err(StoreError::Encode {
            detail: format!(
                "the state slot's {what} contains a NUL character, which PostgreSQL cannot store"
            ),
        });
    }
    Ok(())
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn create(&self, id: &str) -> Result<(), StoreError> {
        check_id(id)?;
        if has_nul(id) {
            return Err(StoreError::InvalidId {
                id: id.chars().take(64).collect(),
                reason: "it contains a NUL character",
            });
        }
        let client = self.client().await?;
        let insert = client
            .prepare_cached("INSERT INTO ce_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING")
            .await
            .map_err(|e| self.err(e))?;
        let n = client
            .execute(&insert, &[&id])
            .await
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::AlreadyExists { id: id.to_owned() });
        }
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Session, StoreError> {
        if has_nul(id) {
            return Err(not_found(id));
        }
        let client = self.client().await?;
        // One statement: one snapshot of the session row and its messages.
        let stmt = client
            .prepare_cached(
                "SELECT m.seq, m.message FROM ce_sessions s
                 LEFT JOIN ce_messages m ON m.session_id = s.id
                 WHERE s.id = $1 ORDER BY m.seq",
            )
            .await
            .map_err(|e| self.err(e))?;
        let rows = client.query(&stmt, &[&id]).await.map_err(|e| self.err(e))?;
        if rows.is_empty() {
            return Err(not_found(id));
        }
        let messages = self.messages(id, &rows, 0)?;
        Ok(Session {
            id: id.to_owned(),
            messages,
        })
    }

    /// One statement: the session row, the slot and the messages in one snapshot and one
    /// round trip (the slot's value repeats on every message's row).
    async fn load_with_state(
        &self,
        id: &str,
        key: &str,
    ) -> Result<(Session, Option<String>), StoreError> {
        if has_nul(id) {
            return Err(not_found(id));
        }
        check_text("key", key)?;
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT m.seq, m.message, st.value FROM ce_sessions s
                 LEFT JOIN ce_state st ON st.session_id = s.id AND st.key = $2
                 LEFT JOIN ce_messages m ON m.session_id = s.id
                 WHERE s.id = $1 ORDER BY m.seq",
            )
            .await
            .map_err(|e| self.err(e))?;
        let rows = client
            .query(&stmt, &[&id, &key])
            .await
            .map_err(|e| self.err(e))?;
        let Some(first) = rows.first() else {
            return Err(not_found(id));
        };
        let value: Option<String> = first.try_get(2).map_err(|e| self.err(e))?;
        let messages = self.messages(id, &rows, 0)?;
        Ok((
            Session {
                id: id.to_owned(),
                messages,
            },
            value,
        ))
    }

    async fn append(&self, id: &str, round: &[Message]) -> Result<u64, StoreError> {
        let msgs = super::encode(round)?;
        if has_nul(id) {
            return Err(not_found(id));
        }
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(|e| self.err(e))?;
        let len = self.append_in(&txn, id, &msgs).await?;
        txn.commit().await.map_err(|e| self.err(e))?;
        Ok(len)
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        // Byte order (COLLATE "C"), as the other stores sort.
        let rows = client
            .query("SELECT id FROM ce_sessions ORDER BY id COLLATE \"C\"", &[])
            .await
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(|e| self.err(e)))
            .collect()
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        if has_nul(id) {
            return Err(not_found(id));
        }
        let client = self.client().await?;
        // Messages and state slots go with it (ON DELETE CASCADE), in the same statement.
        let n = client
            .execute("DELETE FROM ce_sessions WHERE id = $1", &[&id])
            .await
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(not_found(id));
        }
        Ok(())
    }

    async fn get_state(&self, id: &str, key: &str) -> Result<Option<String>, StoreError> {
        if has_nul(id) {
            return Err(not_found(id));
        }
        check_text("key", key)?;
        let client = self.client().await?;
        // Prepared once per connection (as every hot statement here): one round trip a call.
        let stmt = client
            .prepare_cached(
                "SELECT st.value FROM ce_sessions s
                 LEFT JOIN ce_state st ON st.session_id = s.id AND st.key = $2
                 WHERE s.id = $1",
            )
            .await
            .map_err(|e| self.err(e))?;
        let row = client
            .query_opt(&stmt, &[&id, &key])
            .await
            .map_err(|e| self.err(e))?
            .ok_or_else(|| not_found(id))?;
        row.try_get(0).map_err(|e| self.err(e))
    }

    async fn append_with_state(
        &self,
        id: &str,
        round: &[Message],
        change: StateChange<'_>,
    ) -> Result<Option<u64>, StoreError> {
        let msgs = super::encode(round)?;
        if has_nul(id) {
            return Err(not_found(id));
        }
        check_text("key", change.key)?;
        if let Some(v) = change.new {
            check_text("value", v)?;
        }
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(|e| self.err(e))?;
        // Appending first locks the session row: racing compare-and-sets on this session
        // queue here and each sees the slot as the previous one left it.
        let len = self.append_in(&txn, id, &msgs).await?;
        let select = txn
            .prepare_cached("SELECT value FROM ce_state WHERE session_id = $1 AND key = $2")
            .await
            .map_err(|e| self.err(e))?;
        let current: Option<String> = txn
            .query_opt(&select, &[&id, &change.key])
            .await
            .map_err(|e| self.err(e))?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| self.err(e))?;
        if current.as_deref() != change.expected {
            txn.rollback().await.map_err(|e| self.err(e))?;
            return Ok(None);
        }
        match change.new {
            Some(v) => {
                let upsert = txn
                    .prepare_cached(
                        "INSERT INTO ce_state (session_id, key, value) VALUES ($1, $2, $3)
                         ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value",
                    )
                    .await
                    .map_err(|e| self.err(e))?;
                txn.execute(&upsert, &[&id, &change.key, &v]).await
            }
            None => {
                let clear = txn
                    .prepare_cached("DELETE FROM ce_state WHERE session_id = $1 AND key = $2")
                    .await
                    .map_err(|e| self.err(e))?;
                txn.execute(&clear, &[&id, &change.key]).await
            }
        }
        .map_err(|e| self.err(e))?;
        txn.commit().await.map_err(|e| self.err(e))?;
        Ok(Some(len))
    }

    async fn watch(&self) -> Result<ChangeFeed, StoreError> {
        let feed = self.feed.changes.subscribe();
        let mut task = self
            .feed
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            *task = Some(tokio::spawn(listen(
                self.feed.config.clone(),
                self.feed.changes.clone(),
                self.target.clone(),
            )));
        }
        Ok(feed)
    }

    /// One insert-if-missing and one load (the trait's default may take three round trips).
    async fn load_or_create(&self, id: &str) -> Result<Session, StoreError> {
        check_id(id)?;
        if has_nul(id) {
            return Err(StoreError::InvalidId {
                id: id.chars().take(64).collect(),
                reason: "it contains a NUL character",
            });
        }
        {
            let client = self.client().await?;
            let insert = client
                .prepare_cached(
                    "INSERT INTO ce_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
                )
                .await
                .map_err(|e| self.err(e))?;
            client
                .execute(&insert, &[&id])
                .await
                .map_err(|e| self.err(e))?;
        }
        self.load(id).await
    }
}
