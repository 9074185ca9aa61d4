//! faults in the middle of a turn, against a worker process. The database
//! SERVER is stopped (`pg_ctl stop -m immediate`: every PostgreSQL process killed, no shutdown
//! checkpoint) while a turn on a `chat-panel` worker process waits for the model, and started
//! again: the turn ends with a clear message, no row is half written or lost, and the next turn
//! works on the same worker, not restarted. And the broker is killed (SIGKILL) while messages
//! to the person are in flight — accepted by the broker, not yet stored by the worker — and
//! started again: every message the broker accepted is stored once and shown once. Runs on the
//! fault-test cluster and broker (`TEST_PG_FAULT_*`, `TEST_NATS_FAULT_*`, set by `cargo xtask
//! test`), so the other tests' database and broker are not disturbed.
//!
//! `harness = false`: `main` runs the tests; with `FAULTS_CHILD` set, it is a worker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;
#[path = "common/fleet.rs"]
mod fleet;

use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{Reply, ScriptedServer};

use fleet::{
    INTERRUPTED_START, Worker, fault_env, kill_broker, pg_ctl, post, runtime, start_broker,
};

fn main() {
    if std::env::var_os(fleet::CHILD).is_some() {
        return fleet::worker_child();
    }
    let tests: [(&str, fn()); 2] = [
        (
            "database_stopped_mid_turn_on_a_worker_then_started_the_worker_goes_on",
            database_stopped_mid_turn_on_a_worker_then_started_the_worker_goes_on,
        ),
        (
            "broker_killed_with_messages_in_flight_none_lost_none_shown_twice",
            broker_killed_with_messages_in_flight_none_lost_none_shown_twice,
        ),
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    common::run_tests(&tests, filter.as_deref());
}

/// A fresh database on the fault-test cluster; its URL.
async fn fresh_database(name: &str) -> String {
    fleet::fresh_database_on(&fault_env("TEST_PG_FAULT_URL"), name).await
}

/// The model: a message with "slow" is answered after 4 s (the database is stopped meanwhile);
/// every other message is echoed.
fn responder(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let content = messages
        .last()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    if content.contains("slow") {
        return Reply::text(format!("You said: {content}")).latency(Duration::from_secs(4));
    }
    Reply::text(format!("You said: {content}"))
}

/// The message rows of `sid`, in order.
async fn stored(url: &str, sid: &str) -> Vec<Value> {
    fleet::stored_texts(url, sid)
        .await
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect()
}

fn database_stopped_mid_turn_on_a_worker_then_started_the_worker_goes_on() {
    runtime().block_on(async {
        let db = fresh_database("chat_panel_mid_turn").await;
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let worker = Worker::start(&model, &db);
        let c = reqwest::Client::new();
        let sid = "mid-turn-fault";

        let (status, body) = post(&c, &worker.url(), sid, "hello").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(stored(&db, sid).await.len(), 2, "the first turn's two rows");

        // A turn starts and waits for the model; the database server dies under it.
        let turn = {
            let (c, url) = (c.clone(), worker.url());
            tokio::spawn(async move { post(&c, &url, sid, "a slow one").await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while model.requests().len() < 2 {
            assert!(Instant::now() < deadline, "the second turn never reached the model");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        pg_ctl(&["stop", "-m", "immediate", "-w"]);
        let (status, body) = turn.await.unwrap();
        eprintln!("the turn that lost its database: {status} {body}");
        // The answer streams (200 and SSE) before it is stored; what could not be stored ends
        // the stream with an error entry that tells the person to try again.
        assert_eq!(status, 200, "{body}");
        let events = common::sse_events(&body);
        let last_entry = events
            .iter()
            .rev()
            .find(|(e, _)| e == "entry")
            .map(|(_, d)| d.clone())
            .unwrap_or_default();
        assert_eq!(last_entry["kind"], "error", "the turn ends in an error: {body}");
        assert!(
            last_entry["text"].as_str().is_some_and(|t| t.contains("try again")),
            "the turn ends with a clear message: {body}"
        );
        assert_eq!(events.last().map(|(e, _)| e.as_str()), Some("done"), "{body}");

        let log = format!("{}/restart.log", fault_env("TEST_PG_FAULT_DATA"));
        pg_ctl(&["start", "-w", "-t", "60", "-l", &log]);

        // The same worker (not restarted) takes the next turn once the database is back. The
        // first attempt may meet the pool's dead connections or the lost turn's lease (1.5 s);
        // each such answer must be a clear 503 / 409, and within 20 s a turn goes through.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (status, body) = post(&c, &worker.url(), sid, "after the restart").await;
            if status == 200 {
                assert!(body.contains("You said: after the restart"), "{body}");
                break;
            }
            assert!(
                matches!(status, 503 | 409) && body.contains("error"),
                "while recovering: {status} {body}"
            );
            assert!(
                Instant::now() < deadline,
                "the worker did not take a turn within 20 s of the database's return: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        // Every row whole and once: the first turn; the lost turn's message, kept, with either
        // its answer or the note that the answer was interrupted (written by whichever turn
        // found the lost turn's lease, so the person knows to send it again); the last turn.
        let rows = stored(&db, sid).await;
        let texts: Vec<String> = rows
            .iter()
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect();
        eprintln!("rows after the fault: {texts:#?}");
        assert_eq!(rows.len(), 6, "{texts:#?}");
        for pair in rows.chunks(2) {
            assert_eq!(pair[0]["role"], "user", "{texts:#?}");
            assert_eq!(pair[1]["role"], "assistant", "{texts:#?}");
        }
        assert_eq!(texts[..2], ["hello", "You said: hello"]);
        assert_eq!(texts[2], "a slow one", "the lost turn's message is kept");
        assert!(
            texts[3] == "You said: a slow one" || texts[3].starts_with(INTERRUPTED_START),
            "the lost turn's answer, or the note that it was interrupted: {texts:#?}"
        );
        assert_eq!(texts[4..], ["after the restart", "You said: after the restart"]);
        let state = common::session_state(&worker.url(), sid).await;
        assert_eq!(state["busy"], false, "no lease left behind: {state}");
    });
}

/// Sends `note {k}` for each `k` to the person of `sid` at once; the ones the broker accepted.
async fn burst(
    bus: &toolwright_messaging::MessageBus,
    sid: &str,
    ks: std::ops::Range<usize>,
) -> Vec<usize> {
    let to = toolwright_chat_panel::user_address(sid);
    let sends = ks.map(|k| {
        let (bus, to) = (bus.clone(), to.clone());
        async move {
            bus.send(toolwright_messaging::OutgoingMessage::new(
                "ops-bot",
                to,
                format!("note {k}"),
            ))
            .await
            .ok()
            .map(|_| k)
        }
    });
    futures::future::join_all(sends)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// How often `note {k}` is among the conversation's stored rows and among the entries the
/// panel shows, for each `k < n`.
async fn notes(db: &str, base: &str, sid: &str, n: usize) -> (Vec<usize>, Vec<usize>) {
    let mut stored_texts = Vec::new();
    for row in stored(db, sid).await {
        // one entry per row: the row's strings, JSON inside strings (a call's arguments) read too
        let mut leaves = Vec::new();
        string_leaves(&row, &mut leaves);
        stored_texts.push(leaves);
    }
    let state = common::session_state(base, sid).await;
    let shown: Vec<String> = state["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["kind"] == "message" && e["from"] == "ops-bot")
        .map(|e| e["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let needle = |k: usize| format!("note {k}");
    (
        (0..n)
            .map(|k| {
                stored_texts
                    .iter()
                    .filter(|leaves| leaves.contains(&needle(k)))
                    .count()
            })
            .collect(),
        (0..n)
            .map(|k| shown.iter().filter(|t| **t == needle(k)).count())
            .collect(),
    )
}

/// Every string in `v`, and in any string of it that is JSON itself.
fn string_leaves(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            if let Ok(inner @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str(s) {
                string_leaves(&inner, out);
            }
            out.push(s.clone());
        }
        Value::Array(a) => a.iter().for_each(|x| string_leaves(x, out)),
        Value::Object(o) => o.values().for_each(|x| string_leaves(x, out)),
        _ => {}
    }
}

fn broker_killed_with_messages_in_flight_none_lost_none_shown_twice() {
    runtime().block_on(async {
        let broker = fault_env("TEST_NATS_FAULT_URL");
        let db = fresh_database("chat_panel_broker_in_flight").await;
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let worker = Worker::start_with_broker(&model, &db, Some(&broker));
        let c = reqwest::Client::new();
        // a fresh id per run: the broker keeps its streams between runs
        let sid = format!(
            "in-flight-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        let (status, body) = post(&c, &worker.url(), &sid, "hello").await;
        assert_eq!(status, 200, "{body}");

        // 30 messages at once; the broker is killed as soon as it has accepted them, while the
        // worker is still storing them.
        let bus = toolwright_messaging::MessageBus::connect_nats(&broker)
            .await
            .unwrap();
        let mut accepted = burst(&bus, &sid, 0..30).await;
        kill_broker();
        let (stored_before, _) = notes(&db, &worker.url(), &sid, 30).await;
        let in_flight = accepted.iter().filter(|k| stored_before[**k] == 0).count();
        eprintln!(
            "{} accepted, {in_flight} not yet stored when the broker died",
            accepted.len()
        );
        assert_eq!(accepted.len(), 30, "the broker was up for the burst");
        start_broker();

        // Back: the sender reconnects by itself; 10 more once it does.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut more = Vec::new();
        while more.is_empty() {
            assert!(
                Instant::now() < deadline,
                "the sender could not send for 30 s after the broker came back"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
            more = burst(&bus, &sid, 30..31).await;
        }
        accepted.extend(more);
        accepted.extend(burst(&bus, &sid, 31..40).await);

        // Every accepted message stored once and shown once; one the broker did not accept is
        // there at most once (it may have been stored before its acknowledgement was lost).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (stored, shown) = notes(&db, &worker.url(), &sid, 40).await;
            let done = accepted.iter().all(|k| stored[*k] >= 1 && shown[*k] >= 1);
            if done || Instant::now() > deadline {
                for k in 0..40 {
                    let want = if accepted.contains(&k) { "1" } else { "0 or 1" };
                    assert!(
                        stored[k] <= 1 && shown[k] <= 1,
                        "note {k} stored {} and shown {} times (want {want})",
                        stored[k],
                        shown[k]
                    );
                    if accepted.contains(&k) {
                        assert_eq!(
                            (stored[k], shown[k]),
                            (1, 1),
                            "note {k}, accepted by the broker, is lost"
                        );
                    }
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "{} messages accepted, all stored and shown once",
            accepted.len()
        );
    });
}
