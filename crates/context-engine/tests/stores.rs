//! C4: ONE store test suite that every session store passes (memory, SQLite, PostgreSQL), and
//! the SQLite file's own failure modes. (The killed-writer part of the suite is in
//! `c4_crash.rs`, PostgreSQL's connection and migration failures in `c4_postgres.rs`.)
//!
//! The suite is a set of async fns over `Arc<dyn SessionStore>`; `store_suite!` instantiates
//! each one as a test per store, in a module named after the store (`postgres::c4_contract`…).
//! The PostgreSQL instance needs `TEST_DATABASE_URL` (set by `cargo xtask test`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use serde_json::json;
use toolwright_context_engine::{
    ChangeFeed, ContextBuilder, Durability, History, MemoryStore, PostgresStore, SessionStore,
    SqliteStore, StateChange, StoreChange, StoreError,
};
use toolwright_core::{EstimateCounter, Message, ToolCall};

/// A store under test, with whatever must live as long as it (a temporary directory).
struct Fixture {
    store: Arc<dyn SessionStore>,
    /// The same store as another process sees it (PostgreSQL: a second store on the same
    /// database; the in-process stores: the same handle).
    twin: Arc<dyn SessionStore>,
    _keep: Option<tempfile::TempDir>,
}

async fn memory(_name: &str) -> Fixture {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    Fixture {
        twin: store.clone(),
        store,
        _keep: None,
    }
}

async fn sqlite(_name: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    // NORMAL: the suite checks the contract, not fsync (c4_crash.rs kills writers on FULL).
    let store: Arc<dyn SessionStore> =
        Arc::new(SqliteStore::open_with(dir.path().join("s.db"), Durability::Normal).unwrap());
    Fixture {
        twin: store.clone(),
        store,
        _keep: Some(dir),
    }
}

async fn postgres(name: &str) -> Fixture {
    let url = common::pg_database(&format!("suite_{name}")).await;
    Fixture {
        store: Arc::new(PostgresStore::connect(&url).await.unwrap()),
        twin: Arc::new(PostgresStore::connect(&url).await.unwrap()),
        _keep: None,
    }
}

/// Instantiates every suite fn as a `#[tokio::test]` for one store.
macro_rules! store_suite {
    ($store:ident) => {
        mod $store {
            use super::*;

            async fn fixture(name: &str) -> Fixture {
                super::$store(name).await
            }

            #[tokio::test]
            async fn c4_contract() {
                let f = fixture("contract").await;
                contract(f.store.clone()).await;
            }

            #[tokio::test]
            async fn c4_unknown_session_id_is_a_typed_error() {
                let f = fixture("unknown").await;
                unknown_session(f.store.clone()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn c4_many_sessions_concurrently_keep_their_order() {
                let f = fixture("many").await;
                many_sessions(f.store.clone()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn c4_concurrent_appends_to_one_session_never_interleave() {
                let f = fixture("one_session").await;
                concurrent_one_session(f.store.clone()).await;
            }

            #[tokio::test]
            async fn c4_tool_call_pairs_and_content_round_trip_exactly() {
                let f = fixture("pairs").await;
                tool_call_pairs(f.store.clone()).await;
            }

            #[tokio::test]
            async fn c4_change_feed_reports_each_committed_change_once() {
                let f = fixture("feed").await;
                change_feed(f.store.clone(), f.twin.clone()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn c4_state_slots_compare_and_set() {
                let f = fixture("state").await;
                state_contract(f.store.clone()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn c4_load_with_state_reads_messages_and_slot_in_one_snapshot() {
                let f = fixture("load_with_state").await;
                load_with_state_contract(f.store.clone(), f.twin.clone()).await;
            }
        }
    };
}

store_suite!(memory);
store_suite!(sqlite);
store_suite!(postgres);

/// The next change other than [`StoreChange::Missed`] (a feed may report that at any time, e.g.
/// once it starts listening), within 10 s.
async fn next_session_change(feed: &mut ChangeFeed) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, feed.next()).await {
            Ok(Some(StoreChange::Session(id))) => return id.to_string(),
            Ok(Some(_)) => {}
            Ok(None) => panic!("the feed ended"),
            Err(_) => panic!("no change reported within 10 s"),
        }
    }
}

/// A feed opened on one handle reports what the other handle commits, in order, once each: a
/// create, an append, a compare-and-set that won, a delete — and nothing for a compare-and-set
/// that lost (nothing was written).
async fn change_feed(store: Arc<dyn SessionStore>, writer: Arc<dyn SessionStore>) {
    let mut feed = store.watch().await.unwrap();
    // The feed may take a moment to listen (PostgreSQL): a change committed before is reported
    // as Missed, so write "probe" until the feed sees a write.
    writer.create("probe").await.unwrap();
    let mut k = 0;
    loop {
        match tokio::time::timeout(std::time::Duration::from_millis(200), feed.next()).await {
            Ok(Some(StoreChange::Session(id))) if &*id == "probe" => break,
            Ok(Some(_)) | Err(_) => {
                writer
                    .append("probe", &[Message::user(format!("p{k}"))])
                    .await
                    .unwrap();
                k += 1;
                assert!(k < 100, "the feed never reported a change");
            }
            Ok(None) => panic!("the feed ended"),
        }
    }
    // Drain what the probe left (its further appends may still be reported).
    while let Ok(Some(_)) =
        tokio::time::timeout(std::time::Duration::from_millis(300), feed.next()).await
    {}

    writer.create("a").await.unwrap();
    writer.append("a", &[Message::user("hi")]).await.unwrap();
    let lost = StateChange::new("k", Some("not this"), Some("v"));
    assert_eq!(
        writer
            .append_with_state("a", &[Message::user("x")], lost)
            .await
            .unwrap(),
        None
    );
    writer.create("b").await.unwrap();
    let won = StateChange::new("k", None, Some("v"));
    assert!(
        writer
            .append_with_state("a", &[], won)
            .await
            .unwrap()
            .is_some()
    );
    writer.delete("a").await.unwrap();
    let seen = [
        next_session_change(&mut feed).await,
        next_session_change(&mut feed).await,
        next_session_change(&mut feed).await,
        next_session_change(&mut feed).await,
        next_session_change(&mut feed).await,
    ];
    assert_eq!(seen, ["a", "a", "b", "a", "a"].map(String::from));
    while let Ok(c) = tokio::time::timeout(std::time::Duration::from_millis(300), feed.next()).await
    {
        assert_eq!(
            c,
            Some(StoreChange::Missed),
            "a change reported that did not happen"
        );
    }
}

async fn contract(store: Arc<dyn SessionStore>) {
    assert_eq!(store.list().await.unwrap(), Vec::<String>::new());
    store.create("b").await.unwrap();
    store.create("a").await.unwrap();
    assert_eq!(store.list().await.unwrap(), vec!["a", "b"]);
    assert!(matches!(
        store.create("a").await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert!(matches!(
        store.create("").await,
        Err(StoreError::InvalidId { .. })
    ));
    assert_eq!(store.append("a", &[]).await.unwrap(), 0);
    assert_eq!(store.append("a", &[Message::user("1")]).await.unwrap(), 1);
    assert_eq!(
        store
            .append("a", &[Message::assistant("2"), Message::user("3")])
            .await
            .unwrap(),
        3
    );
    assert_eq!(store.load("a").await.unwrap().messages.len(), 3);
    assert!(store.load("b").await.unwrap().messages.is_empty());
    store.delete("a").await.unwrap();
    assert_eq!(store.list().await.unwrap(), vec!["b"]);
    assert!(matches!(
        store.load("a").await,
        Err(StoreError::NotFound { .. })
    ));
    let s = store.load_or_create("c").await.unwrap();
    assert!(s.messages.is_empty());
    assert_eq!(store.list().await.unwrap(), vec!["b", "c"]);
}

#[tokio::test]
async fn c4_sqlite_round_survives_reopen_with_both_durabilities() {
    for durability in [Durability::Full, Durability::Normal] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let store = SqliteStore::open_with(&path, durability).unwrap();
            store.create("s").await.unwrap();
            store
                .append("s", &[Message::user("q"), Message::assistant("a")])
                .await
                .unwrap();
        } // dropped: worker stops, connection closes
        let store = SqliteStore::open(&path).unwrap();
        let msgs = store.load("s").await.unwrap().messages;
        assert_eq!(msgs, vec![Message::user("q"), Message::assistant("a")]);
        assert_eq!(
            store.append("s", &[Message::user("next")]).await.unwrap(),
            3
        );
    }
}

#[test]
fn c4_corrupt_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(
        &path,
        b"this is not an SQLite database, just some text. ".repeat(200),
    )
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    let e = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
    assert!(e.to_string().contains("move it aside"), "{e}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was modified"
    );

    // A database of ours, truncated, or with its schema page overwritten.
    let ours = dir.path().join("ours.db");
    {
        let _store = SqliteStore::open(&ours).unwrap();
    }
    let bytes = std::fs::read(&ours).unwrap();
    assert!(bytes.len() >= 4096, "{}", bytes.len());
    let truncated = dir.path().join("truncated.db");
    std::fs::write(&truncated, &bytes[..100]).unwrap();
    let e = SqliteStore::open(&truncated).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
    assert_eq!(std::fs::read(&truncated).unwrap(), &bytes[..100]);

    let mangled = dir.path().join("mangled.db");
    let mut m = bytes.clone();
    for b in &mut m[100..4096] {
        *b = 0xA5;
    }
    std::fs::write(&mangled, &m).unwrap();
    let e = SqliteStore::open(&mangled).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
}

#[test]
fn c4_foreign_sqlite_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other-app.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let e = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Foreign {
                application_id: 0,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("choose another path"));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(
        !dir.path().join("other-app.db-wal").exists(),
        "journal mode was changed"
    );

    // Another application's marker.
    let path = dir.path().join("marked.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA application_id = 1234;").unwrap();
    }
    let e = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Foreign {
                application_id: 1234,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn c4_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let _store = SqliteStore::open(&path).unwrap();
    }
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA user_version = 99;").unwrap();
    }
    let e = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::NewerSchema {
                found: 99,
                supported: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("upgrade context-engine"));
}

#[test]
fn c4_unwritable_location_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = SqliteStore::open(dir.path().join("missing-dir").join("s.db")).unwrap_err();
    assert!(matches!(e, StoreError::Open { .. }), "{e:?}");
}

async fn unknown_session(store: Arc<dyn SessionStore>) {
    let e = store
        .append("nope", &[Message::user("x")])
        .await
        .unwrap_err();
    assert_eq!(e, StoreError::NotFound { id: "nope".into() });
    assert!(e.to_string().contains("create it first"));
    assert!(matches!(
        store.load("nope").await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete("nope").await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.get_state("nope", "k").await,
        Err(StoreError::NotFound { .. })
    ));
    // Nothing was created by the failed append.
    assert!(store.list().await.unwrap().is_empty());
}

/// 16 sessions written at once, and two writers on one shared session.
async fn many_sessions(store: Arc<dyn SessionStore>) {
    let mut tasks = Vec::new();
    for s in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("s{s}");
            store.create(&id).await.unwrap();
            for r in 0..25 {
                let round = [
                    Message::user(format!("{id} r{r} q")),
                    Message::assistant(format!("{id} r{r} a")),
                ];
                store.append(&id, &round).await.unwrap();
            }
        }));
    }
    // Two writers on one shared session: rounds never interleave.
    store.create("shared").await.unwrap();
    for w in 0..2 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for r in 0..25 {
                let round = [
                    Message::user(format!("w{w} r{r} q")),
                    Message::assistant(format!("w{w} r{r} a")),
                ];
                store.append("shared", &round).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(store.list().await.unwrap().len(), 17);
    for s in 0..16 {
        let id = format!("s{s}");
        let msgs = store.load(&id).await.unwrap().messages;
        let expected: Vec<Message> = (0..25)
            .flat_map(|r| {
                [
                    Message::user(format!("{id} r{r} q")),
                    Message::assistant(format!("{id} r{r} a")),
                ]
            })
            .collect();
        assert_eq!(msgs, expected);
    }
    let shared = store.load("shared").await.unwrap().messages;
    assert_eq!(shared.len(), 100);
    let mut next = [0usize; 2];
    for pair in shared.chunks(2) {
        let q = pair[0].content();
        let w: usize = q[1..2].parse().unwrap();
        assert_eq!(q, format!("w{w} r{} q", next[w]));
        assert_eq!(pair[1].content(), format!("w{w} r{} a", next[w]));
        next[w] += 1;
    }
}

/// State slots: compare-and-set together with a round; a lost race writes nothing.
async fn state_contract(store: Arc<dyn SessionStore>) {
    store.create("s").await.unwrap();
    assert_eq!(store.get_state("s", "k").await.unwrap(), None);
    assert!(matches!(
        store.get_state("nope", "k").await,
        Err(StoreError::NotFound { .. })
    ));
    // Set from unset, with a round.
    let set = StateChange::new("k", None, Some("v1"));
    let n = store
        .append_with_state("s", &[Message::user("q")], set)
        .await
        .unwrap();
    assert_eq!(n, Some(1));
    assert_eq!(
        store.get_state("s", "k").await.unwrap().as_deref(),
        Some("v1")
    );
    // The same change again finds the slot set: nothing is written, the round neither.
    let again = store
        .append_with_state("s", &[Message::assistant("x")], set)
        .await
        .unwrap();
    assert_eq!(again, None);
    assert_eq!(store.load("s").await.unwrap().messages.len(), 1);
    // Clear, with an empty round.
    let clear = StateChange::new("k", Some("v1"), None);
    assert_eq!(
        store.append_with_state("s", &[], clear).await.unwrap(),
        Some(1)
    );
    assert_eq!(store.get_state("s", "k").await.unwrap(), None);
    // Racing callers with the same expectation: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let v = format!("w{i}");
            store
                .append_with_state(
                    "s",
                    &[Message::user(v.clone())],
                    StateChange::new("race", None, Some(&v)),
                )
                .await
                .unwrap()
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap().is_some());
    }
    assert_eq!(wins, 1);
    assert_eq!(store.load("s").await.unwrap().messages.len(), 2);
    // Unknown session: NotFound, not a silent None.
    assert!(matches!(
        store
            .append_with_state("nope", &[], StateChange::new("k", None, Some("v")))
            .await,
        Err(StoreError::NotFound { .. })
    ));
    // Delete removes the slots with the session.
    store.delete("s").await.unwrap();
    store.create("s").await.unwrap();
    assert_eq!(store.get_state("s", "race").await.unwrap(), None);
}

/// `load_with_state`: the messages and one slot, as `load` and `get_state` give them, from one
/// snapshot — a reader racing a writer that appends and sets the slot to the new count
/// together never sees one without the other.
async fn load_with_state_contract(store: Arc<dyn SessionStore>, twin: Arc<dyn SessionStore>) {
    assert!(matches!(
        store.load_with_state("nope", "k").await,
        Err(StoreError::NotFound { .. })
    ));
    store.create("s").await.unwrap();
    let (s, v) = store.load_with_state("s", "k").await.unwrap();
    assert_eq!((s.id.as_str(), s.messages.len(), v), ("s", 0, None));
    // a slot on a session without messages
    let set = StateChange::new("k", None, Some("v0"));
    store.append_with_state("s", &[], set).await.unwrap();
    let (s, v) = store.load_with_state("s", "k").await.unwrap();
    assert_eq!((s.messages.len(), v.as_deref()), (0, Some("v0")));
    // messages, and only the slot asked for
    let other = StateChange::new("other", None, Some("x"));
    store
        .append_with_state("s", &tool_round(0, 0), other)
        .await
        .unwrap();
    let (s, v) = store.load_with_state("s", "k").await.unwrap();
    assert_eq!(s.messages, store.load("s").await.unwrap().messages);
    assert_eq!(s.messages, tool_round(0, 0));
    assert_eq!(v.as_deref(), Some("v0"));
    let (_, v) = store.load_with_state("s", "missing").await.unwrap();
    assert_eq!(v, None);
    // one snapshot: the slot always holds the message count it was written with
    twin.create("race").await.unwrap();
    let writer = tokio::spawn(async move {
        for i in 0..60u32 {
            let (before, after) = (i.to_string(), (i + 1).to_string());
            let expected = (i > 0).then_some(before.as_str());
            let change = StateChange::new("count", expected, Some(&after));
            let n = twin
                .append_with_state("race", &[Message::user(after.clone())], change)
                .await
                .unwrap();
            assert_eq!(n, Some(u64::from(i) + 1));
        }
    });
    let mut reads = 0;
    while !writer.is_finished() || reads == 0 {
        let (s, v) = store.load_with_state("race", "count").await.unwrap();
        let count: usize = v.map_or(0, |v| v.parse().unwrap());
        assert_eq!(
            s.messages.len(),
            count,
            "messages and slot from two moments"
        );
        reads += 1;
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    let (s, v) = store.load_with_state("race", "count").await.unwrap();
    assert_eq!((s.messages.len(), v.as_deref()), (60, Some("60")));
}

#[tokio::test]
async fn c4_sqlite_state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.create("s").await.unwrap();
        store
            .append_with_state(
                "s",
                &[Message::user("q")],
                StateChange::new("pending", None, Some("{\"call\":1}")),
            )
            .await
            .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.get_state("s", "pending").await.unwrap().as_deref(),
        Some("{\"call\":1}")
    );
    assert_eq!(store.load("s").await.unwrap().messages.len(), 1);
}

/// A file written by the previous schema (version 1, no state table) is upgraded in place and
/// keeps its sessions.
#[tokio::test]
async fn c4_sqlite_version_1_file_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.create("old").await.unwrap();
        store.append("old", &[Message::user("kept")]).await.unwrap();
    }
    {
        // Make it a version-1 file as an earlier build wrote it.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("DROP TABLE ce_state; PRAGMA user_version = 1;")
            .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.load("old").await.unwrap().messages.len(), 1);
    assert_eq!(
        store
            .append_with_state("old", &[], StateChange::new("k", None, Some("v")))
            .await
            .unwrap(),
        Some(1)
    );
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, 2);
}

/// A store that implements only the required methods answers the optional ones with a typed
/// error that says what to use instead.
#[tokio::test]
async fn c4_store_without_state_slots_says_so() {
    struct Plain(MemoryStore);
    #[async_trait::async_trait]
    impl SessionStore for Plain {
        async fn create(&self, id: &str) -> Result<(), StoreError> {
            self.0.create(id).await
        }
        async fn load(&self, id: &str) -> Result<toolwright_context_engine::Session, StoreError> {
            self.0.load(id).await
        }
        async fn append(&self, id: &str, round: &[Message]) -> Result<u64, StoreError> {
            self.0.append(id, round).await
        }
        async fn list(&self) -> Result<Vec<String>, StoreError> {
            self.0.list().await
        }
        async fn delete(&self, id: &str) -> Result<(), StoreError> {
            self.0.delete(id).await
        }
    }
    let e = Plain(MemoryStore::new())
        .get_state("s", "k")
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Unsupported { .. }));
    assert!(e.to_string().contains("get_state"));
    // load_with_state's default reads through load and get_state: the same answer
    let plain = Plain(MemoryStore::new());
    plain.create("s").await.unwrap();
    let e = plain.load_with_state("s", "k").await.unwrap_err();
    assert!(matches!(e, StoreError::Unsupported { .. }));
    assert!(matches!(
        plain.load_with_state("nope", "k").await,
        Err(StoreError::NotFound { .. })
    ));
}

/// One round of writer `w`: a question, an assistant turn with two tool calls, both results.
fn tool_round(w: usize, r: usize) -> Vec<Message> {
    let a = format!("w{w}-r{r}-a");
    let b = format!("w{w}-r{r}-b");
    vec![
        Message::user(format!("w{w} r{r} q")),
        Message::assistant_with_tool_calls(
            "",
            vec![
                ToolCall::new(
                    &a,
                    "search",
                    json!({"z": r, "a": [w, r], "m": {"y": 1, "b": 2}}),
                ),
                ToolCall::new(&b, "fetch", json!({"url": format!("https://x/{w}/{r}")})),
            ],
        ),
        Message::tool(&a, "search", format!("found {w}/{r}")),
        Message::tool(&b, "fetch", format!("page {w}/{r}")),
    ]
}

/// Eight writers append 20 rounds each to ONE session at once: no round is lost, none is split
/// or interleaved with another, each writer's rounds keep their order, and the counts `append`
/// returned are exactly the round boundaries.
async fn concurrent_one_session(store: Arc<dyn SessionStore>) {
    const WRITERS: usize = 8;
    const ROUNDS: usize = 20;
    store.create("one").await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut lens = Vec::new();
            for r in 0..ROUNDS {
                lens.push(store.append("one", &tool_round(w, r)).await.unwrap());
            }
            lens
        }));
    }
    let mut lens = Vec::new();
    for t in tasks {
        lens.extend(t.await.unwrap());
    }
    lens.sort_unstable();
    let expected: Vec<u64> = (1..=(WRITERS * ROUNDS) as u64).map(|k| k * 4).collect();
    assert_eq!(
        lens, expected,
        "append returned overlapping or missing counts"
    );
    let msgs = store.load("one").await.unwrap().messages;
    assert_eq!(msgs.len(), WRITERS * ROUNDS * 4);
    let mut next = [0usize; WRITERS];
    for chunk in msgs.chunks(4) {
        let q = chunk[0].content();
        let w: usize = q[1..q.find(' ').unwrap()].parse().unwrap();
        assert_eq!(chunk, tool_round(w, next[w]).as_slice());
        next[w] += 1;
    }
    assert_eq!(next, [ROUNDS; WRITERS]);
}

/// Tool-call rounds come back exactly as written (argument key order, Unicode, a NUL inside a
/// string, a large result) and build into a valid request with nothing dropped.
async fn tool_call_pairs(store: Arc<dyn SessionStore>) {
    store.create("pairs").await.unwrap();
    let mut written = Vec::new();
    for r in 0..5 {
        let round = tool_round(0, r);
        store.append("pairs", &round).await.unwrap();
        written.extend(round);
    }
    let odd = vec![
        Message::user("ünïcødé ✓ 🦀 and a NUL: \u{0} end"),
        Message::assistant_with_tool_calls(
            "let me look",
            vec![ToolCall::new("big", "read", json!({"path": "/a\u{0}b"}))],
        ),
        Message::tool("big", "read", "x".repeat(300_000)),
        Message::assistant("done"),
    ];
    store.append("pairs", &odd).await.unwrap();
    written.extend(odd);
    let loaded = store.load("pairs").await.unwrap().messages;
    assert_eq!(loaded, written);
    // Key order of the arguments is kept (serde_json's preserve_order compares in order-free
    // fashion, so compare the JSON text).
    assert_eq!(
        serde_json::to_string(&loaded).unwrap(),
        serde_json::to_string(&written).unwrap()
    );
    let h = History::from_messages(Arc::new(EstimateCounter), loaded);
    let ctx = ContextBuilder::new("sys").build(&h).unwrap();
    assert!(ctx.dropped.is_empty(), "{:?}", ctx.dropped);
}
