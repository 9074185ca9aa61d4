//! C4, PostgreSQL's own failure modes: migrations (concurrent first connects, a newer schema),
//! an unreachable server, a bad URL, and the database going away mid-conversation and coming
//! back. Needs `TEST_DATABASE_URL` (set by `cargo xtask test`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use toolwright_context_engine::{
    POSTGRES_SCHEMA_VERSION, PostgresStore, SessionStore, StoreChange, StoreError,
};
use toolwright_core::{Message, ToolCall};

/// Eight processes' worth of stores connecting to a fresh database at once: the schema is
/// created exactly once (advisory lock), every connect succeeds, and they share sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c4_postgres_concurrent_first_connects_do_not_race() {
    let url = common::pg_database("first_connect").await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let url = url.clone();
        tasks.push(tokio::spawn(
            async move { PostgresStore::connect(&url).await },
        ));
    }
    let mut stores = Vec::new();
    for t in tasks {
        stores.push(t.await.unwrap().unwrap());
    }
    stores[0].create("s").await.unwrap();
    stores[7].append("s", &[Message::user("hi")]).await.unwrap();
    assert_eq!(stores[3].load("s").await.unwrap().messages.len(), 1);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let rows = client
        .query("SELECT version FROM ce_schema_version", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), POSTGRES_SCHEMA_VERSION);
}

/// A database migrated by a newer build is refused with a typed error saying what to do, and
/// left as it was.
#[tokio::test]
async fn c4_postgres_newer_schema_is_refused() {
    let url = common::pg_database("newer").await;
    {
        let store = PostgresStore::connect(&url).await.unwrap();
        store.create("kept").await.unwrap();
    }
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("UPDATE ce_schema_version SET version = 99")
        .await
        .unwrap();
    let e = PostgresStore::connect(&url).await.unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::NewerDatabaseSchema {
                found: 99,
                supported,
                ..
            } if supported == i64::from(POSTGRES_SCHEMA_VERSION)
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("upgrade context-engine"), "{e}");
    let v: i32 = client
        .query_one("SELECT version FROM ce_schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, 99);
    let n: i64 = client
        .query_one("SELECT count(*) FROM ce_sessions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

/// A database written by the first schema (no change-feed trigger) is migrated when a newer
/// build connects: its sessions kept, the version bumped, and the feed reports changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_postgres_version_1_database_is_upgraded() {
    let url = common::pg_database("v1").await;
    {
        let store = PostgresStore::connect(&url).await.unwrap();
        store.create("kept").await.unwrap();
        store.append("kept", &round(0)).await.unwrap();
    }
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    // Back to version 1 as it was shipped: the three tables, no trigger.
    client
        .batch_execute(
            "DROP TRIGGER ce_sessions_changed ON ce_sessions; DROP FUNCTION ce_notify_change();
             UPDATE ce_schema_version SET version = 1",
        )
        .await
        .unwrap();
    let store = PostgresStore::connect(&url).await.unwrap();
    let v: i32 = client
        .query_one("SELECT version FROM ce_schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, POSTGRES_SCHEMA_VERSION);
    assert_eq!(store.load("kept").await.unwrap().messages, round(0));
    let mut feed = store.watch().await.unwrap();
    assert_eq!(next(&mut feed).await, StoreChange::Missed);
    store.append("kept", &round(1)).await.unwrap();
    assert_eq!(next(&mut feed).await, StoreChange::Session("kept".into()));
}

/// Nothing listens there: a typed error naming the server (never the password) and what to do.
#[tokio::test]
async fn c4_postgres_unreachable_server_is_a_typed_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: connections are refused
    let url = format!("postgres://someone:secret@127.0.0.1:{port}/app");
    let e = PostgresStore::connect(&url).await.unwrap_err();
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}/app")), "{text}");
    assert!(text.contains("DATABASE_URL"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

#[tokio::test]
async fn c4_postgres_bad_url_is_a_typed_error() {
    let e = PostgresStore::connect("postgres://127.0.0.1:notaport/x")
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidUrl { .. }), "{e:?}");
    assert!(e.to_string().contains("postgres://USER"), "{e}");
}

fn round(k: usize) -> Vec<Message> {
    let id = format!("call-{k}");
    vec![
        Message::user(format!("question {k}")),
        Message::assistant_with_tool_calls("", vec![ToolCall::new(&id, "search", json!({"k": k}))]),
        Message::tool(&id, "search", format!("result {k}")),
        Message::assistant(format!("answer {k}")),
    ]
}

/// Appends round `k`, retrying (bounded) while the store answers `Unreachable`; panics on any
/// other error. Returns whether it was acknowledged.
async fn append_eventually(store: &PostgresStore, k: usize) {
    for _ in 0..100 {
        match store.append("conv", &round(k)).await {
            Ok(_) => return,
            Err(StoreError::Unreachable { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("round {k}: {e:?}"),
        }
    }
    panic!("round {k}: the store did not reconnect");
}

/// The database goes away mid-conversation — its server ends our connections
/// (`pg_terminate_backend`, three times, while another conversation is being written), then the
/// network path to it is cut and connects are refused (a loopback proxy stops) — and comes
/// back: typed errors while down, every acknowledged round kept whole, none twice, and appends
/// work again once it is back (the pool reconnects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_postgres_database_goes_away_and_comes_back() {
    let url = common::pg_database("fault").await;
    let mut proxy = common::Proxy::start(common::pg_addr(&url)).await;
    let via_proxy = url.replacen(
        &common::pg_addr(&url).to_string(),
        &proxy.addr.to_string(),
        1,
    );
    assert_ne!(via_proxy, url, "the URL must name 127.0.0.1:PORT: {url}");
    let store = PostgresStore::connect_with_pool_size(&via_proxy, 4)
        .await
        .unwrap();
    store.create("conv").await.unwrap();
    let mut acked = 0;
    for _ in 0..3 {
        store.append("conv", &round(acked)).await.unwrap();
        acked += 1;
    }

    // 1. The server terminates every connection to this database, three times, while another
    //    conversation ("bg") is being written without pause: connections die in the middle of
    //    its transactions.
    let stop = Arc::new(AtomicBool::new(false));
    let bg = {
        let store = store.clone();
        let stop = stop.clone();
        store.create("bg").await.unwrap();
        tokio::spawn(async move {
            let mut acked_bg = Vec::new();
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                match store.append("bg", &round(k)).await {
                    Ok(_) => acked_bg.push(k),
                    Err(StoreError::Unreachable { .. }) => {}
                    Err(e) => panic!("bg round {k}: {e:?}"),
                }
                k += 1;
            }
            acked_bg
        })
    };
    let admin = common::pg_admin().await;
    let db = url.rsplit('/').next().unwrap().to_owned();
    for _ in 0..3 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let killed: i64 = admin
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
                 WHERE datname = $1 AND pid <> pg_backend_pid()) t",
                &[&db],
            )
            .await
            .unwrap()
            .get(0);
        assert!(killed >= 1, "no connection was terminated");
        append_eventually(&store, acked).await;
        acked += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let acked_bg = bg.await.unwrap();
    // Every acknowledged bg round is there, whole; an unacknowledged one may be (a connection
    // cut during COMMIT) but never in part; none twice.
    let stored = store.load("bg").await.unwrap().messages;
    assert_eq!(stored.len() % 4, 0, "partial round in bg");
    let stored_ks: Vec<usize> = stored
        .chunks(4)
        .map(|c| {
            let k: usize = c[0].content()["question ".len()..].parse().unwrap();
            assert_eq!(c, round(k).as_slice());
            k
        })
        .collect();
    assert!(stored_ks.windows(2).all(|w| w[0] < w[1]), "{stored_ks:?}");
    for k in &acked_bg {
        assert!(stored_ks.contains(k), "acknowledged bg round {k} lost");
    }
    assert!(!acked_bg.is_empty());

    // 2. The database is unreachable: every operation is a typed error.
    proxy.down().await;
    for k in 0..3 {
        let e = store.append("conv", &round(100 + k)).await.unwrap_err();
        assert!(matches!(e, StoreError::Unreachable { .. }), "{e:?}");
        assert!(e.to_string().contains("DATABASE_URL"), "{e}");
    }
    let e = store.load("conv").await.unwrap_err();
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e:?}");

    // 3. Back: appends work again and nothing acknowledged was lost or doubled.
    proxy.up().await;
    append_eventually(&store, acked).await;
    acked += 1;
    let msgs = store.load("conv").await.unwrap().messages;
    let expected: Vec<Message> = (0..acked).flat_map(round).collect();
    assert_eq!(msgs, expected);
}

/// The change feed across an outage: its `LISTEN` connection goes through a proxy that is cut
/// and comes back. Changes committed meanwhile (by another store on the direct path) cannot be
/// delivered, so the feed says `Missed` once it listens again — nothing is lost silently — and
/// then reports changes as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_postgres_change_feed_says_missed_after_an_outage_then_goes_on() {
    let url = common::pg_database("feed_fault").await;
    let mut proxy = common::Proxy::start(common::pg_addr(&url)).await;
    let via_proxy = url.replacen(
        &common::pg_addr(&url).to_string(),
        &proxy.addr.to_string(),
        1,
    );
    let watched = PostgresStore::connect_with_pool_size(&via_proxy, 1)
        .await
        .unwrap();
    let writer = PostgresStore::connect(&url).await.unwrap();
    let mut feed = watched.watch().await.unwrap();
    // Listening: the first thing a new feed says (it listens after it was opened).
    assert_eq!(next(&mut feed).await, StoreChange::Missed);
    writer.create("conv").await.unwrap();
    assert_eq!(next(&mut feed).await, StoreChange::Session("conv".into()));

    proxy.down().await;
    writer.append("conv", &round(0)).await.unwrap(); // committed while the feed is cut off
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    proxy.up().await;
    assert_eq!(next(&mut feed).await, StoreChange::Missed);
    writer.append("conv", &round(1)).await.unwrap();
    assert_eq!(next(&mut feed).await, StoreChange::Session("conv".into()));
}

/// The feed's next change, within 15 s.
async fn next(feed: &mut toolwright_context_engine::ChangeFeed) -> StoreChange {
    tokio::time::timeout(std::time::Duration::from_secs(15), feed.next())
        .await
        .expect("the feed reported nothing within 15 s")
        .expect("the feed ended")
}

/// `pg_ctl ARGS` on the fault-test cluster (as the user xtask names, when it names one).
fn pg_ctl(args: &[&str]) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: run `cargo xtask test` (it starts a private PostgreSQL cluster \
                 for this test and sets TEST_PG_FAULT_*), or `cargo xtask with-services cargo test -p toolwright-context-engine`"
            )
        })
    };
    let data = var("TEST_PG_FAULT_DATA");
    let ctl = var("TEST_PG_FAULT_PG_CTL");
    let run_as = var("TEST_PG_FAULT_RUN_AS");
    let mut cmd = if run_as.is_empty() {
        std::process::Command::new(&ctl)
    } else {
        let mut c = std::process::Command::new("runuser");
        c.args(["-u", &run_as, "--", &ctl]);
        c
    };
    let out = cmd.args(args).arg("-D").arg(&data).output().unwrap();
    assert!(
        out.status.success(),
        "pg_ctl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits (bounded: 60 s) until session `id` holds `n` messages; fails if the writer stopped.
async fn wait_for_len<T>(
    store: &PostgresStore,
    id: &str,
    n: usize,
    writer: &tokio::task::JoinHandle<T>,
) {
    for _ in 0..3000 {
        if store.load(id).await.unwrap().messages.len() >= n {
            return;
        }
        assert!(!writer.is_finished(), "the writer stopped early");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("session {id} did not reach {n} messages in 60 s");
}

/// The database SERVER crashes (`pg_ctl stop -m immediate`: every PostgreSQL process is killed
/// with no shutdown checkpoint; it recovers from its WAL on restart) while a conversation is being
/// written, and is started again: typed errors while it is down, every acknowledged round is
/// there after recovery, whole and once, and the same store (pool) goes on appending. Runs on a
/// cluster of its own (`TEST_PG_FAULT_URL`), so the other tests are not disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_postgres_server_crash_and_restart() {
    let base = std::env::var("TEST_PG_FAULT_URL").unwrap_or_else(|_| {
        panic!(
            "TEST_PG_FAULT_URL is not set: run `cargo xtask test`, or `cargo xtask with-services \
             cargo test -p toolwright-context-engine`"
        )
    });
    let store = PostgresStore::connect_with_pool_size(&base, 4)
        .await
        .unwrap();
    let id = format!("crash-{}", std::process::id());
    store.create(&id).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let store = store.clone();
        let stop = stop.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut errors = 0usize;
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                match store.append(&id, &round(k)).await {
                    Ok(_) => acked.push(k),
                    Err(StoreError::Unreachable { .. }) => {
                        errors += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("round {k}: {e:?}"),
                }
                k += 1;
            }
            (acked, errors)
        })
    };
    // Let some rounds through, then crash the server.
    wait_for_len(&store, &id, 5 * 4, &writer).await;
    pg_ctl(&["stop", "-m", "immediate", "-w"]);
    let e = store.load(&id).await.unwrap_err();
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e:?}");
    let log = format!(
        "{}/restart.log",
        std::env::var("TEST_PG_FAULT_DATA").unwrap()
    );
    pg_ctl(&["start", "-w", "-t", "60", "-l", &log]);
    // Back: the writer's appends succeed again; let it write a few more, then stop it.
    let before = store.load(&id).await.unwrap().messages.len();
    wait_for_len(&store, &id, before + 3 * 4, &writer).await;
    stop.store(true, Ordering::Relaxed);
    let (acked, errors) = writer.await.unwrap();
    assert!(errors >= 1, "the writer never saw the server down");
    let stored = store.load(&id).await.unwrap().messages;
    assert_eq!(stored.len() % 4, 0, "partial round");
    let ks: Vec<usize> = stored
        .chunks(4)
        .map(|c| {
            let k: usize = c[0].content()["question ".len()..].parse().unwrap();
            assert_eq!(c, round(k).as_slice());
            k
        })
        .collect();
    assert!(ks.windows(2).all(|w| w[0] < w[1]), "{ks:?}");
    for k in &acked {
        assert!(ks.contains(k), "acknowledged round {k} lost in the crash");
    }
}
