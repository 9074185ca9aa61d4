//! C4, the killed-writer part of the store suite (for each durable store: SQLite, PostgreSQL):
//! a writer killed with SIGKILL in the middle of appending loses no acknowledged round and
//! leaves no partial one.
//!
//! The test re-executes its own test binary, running only `crash_child_writer` with
//! `CE_CRASH_CHILD_DB` set (`sqlite:PATH` or `postgres:URL`); that child appends rounds to several
//! sessions concurrently and prints `ack SESSION ROUND` after each append returns. The parent
//! kills it after a number of acks, reopens the store and checks every session. Three kills in a
//! row, each child continuing the sessions the previous one left.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolwright_context_engine::{
    ContextBuilder, History, PostgresStore, SessionStore, SqliteStore,
};
use toolwright_core::{EstimateCounter, Message, ToolCall};

const ENV: &str = "CE_CRASH_CHILD_DB";
const SESSIONS: usize = 4;
const ROUND_LEN: usize = 5;

fn round(session: usize, r: usize) -> Vec<Message> {
    let a = format!("s{session}-r{r}-a");
    let b = format!("s{session}-r{r}-b");
    vec![
        Message::user(format!("s{session} question {r}")),
        Message::assistant_with_tool_calls(
            "",
            vec![
                ToolCall::new(&a, "search", json!({"q": r})),
                ToolCall::new(&b, "fetch", json!({"url": format!("https://x/{r}")})),
            ],
        ),
        // Big results make each transaction take a while, so the kill lands inside one.
        Message::tool(&a, "search", format!("result {r} ").repeat(2_000)),
        Message::tool(&b, "fetch", format!("page {r} ").repeat(2_000)),
        Message::assistant(format!("s{session} answer {r}")),
    ]
}

/// Opens the store a `CE_CRASH_CHILD_DB` value names.
async fn open(target: &str) -> Arc<dyn SessionStore> {
    match target.split_once(':') {
        Some(("sqlite", path)) => Arc::new(SqliteStore::open(path).unwrap()),
        Some(("postgres", url)) => Arc::new(PostgresStore::connect(url).await.unwrap()),
        _ => panic!("bad {ENV} value {target:?}"),
    }
}

/// The child: not a test on its own (returns at once without the variable).
#[test]
fn crash_child_writer() {
    let Ok(target) = std::env::var(ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = open(&target).await;
        let mut tasks = Vec::new();
        for s in 0..SESSIONS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let id = format!("s{s}");
                let start = store.load_or_create(&id).await.unwrap().messages.len() / ROUND_LEN;
                for r in start.. {
                    store.append(&id, &round(s, r)).await.unwrap();
                    println!("ack {s} {r}");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[tokio::test]
async fn c4_killed_writer_loses_no_completed_round_and_leaves_no_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    killed_writer(&format!("sqlite:{}", path.display())).await;
}

#[tokio::test]
async fn c4_postgres_killed_writer_loses_no_completed_round_and_leaves_no_partial_one() {
    let url = common::pg_database("crash").await;
    killed_writer(&format!("postgres:{url}")).await;
}

async fn killed_writer(target: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut acked: HashMap<usize, usize> = HashMap::new(); // session -> rounds acknowledged

    for (attempt, kill_after) in [25usize, 41, 67].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV, target)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        for line in stdout.lines() {
            let line = line.unwrap();
            let mut parts = line.split_whitespace();
            if parts.next() != Some("ack") {
                continue;
            }
            let s: usize = parts.next().unwrap().parse().unwrap();
            let r: usize = parts.next().unwrap().parse().unwrap();
            let e = acked.entry(s).or_default();
            *e = (*e).max(r + 1);
            seen += 1;
            if seen >= kill_after {
                break;
            }
            assert!(Instant::now() < deadline, "child too slow");
        }
        assert!(seen >= kill_after, "child exited early (attempt {attempt})");
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success());

        // Reopen and check every session.
        let store = open(target).await;
        assert_eq!(store.list().await.unwrap().len(), SESSIONS);
        let mut total_rounds = 0;
        for s in 0..SESSIONS {
            let msgs = store.load(&format!("s{s}")).await.unwrap().messages;
            assert_eq!(
                msgs.len() % ROUND_LEN,
                0,
                "partial round in s{s} (attempt {attempt})"
            );
            let rounds = msgs.len() / ROUND_LEN;
            let need = acked.get(&s).copied().unwrap_or(0);
            assert!(
                rounds >= need,
                "s{s}: {rounds} rounds stored, {need} acknowledged"
            );
            for (r, chunk) in msgs.chunks(ROUND_LEN).enumerate() {
                assert_eq!(chunk, round(s, r).as_slice(), "s{s} round {r}");
            }
            // The history builds into a valid request with nothing dropped as invalid.
            let h = History::from_messages(std::sync::Arc::new(EstimateCounter), msgs);
            let ctx = ContextBuilder::new("sys").build(&h).unwrap();
            assert!(ctx.dropped.is_empty());
            total_rounds += rounds;
        }
        assert!(total_rounds >= acked.values().sum::<usize>());
    }
}
