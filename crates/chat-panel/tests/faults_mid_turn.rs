//! Issue 42, item 7: faults in the middle of a turn, against a worker process. The database
//! SERVER is stopped (`pg_ctl stop -m immediate`: every PostgreSQL process killed, no shutdown
//! checkpoint) while a turn on a `chat-panel` worker process waits for the model, and started
//! again: the turn ends with a clear message, no row is half written or lost, and the next turn
//! works on the same worker, not restarted. Runs on the fault-test cluster (`TEST_PG_FAULT_*`,
//! set by `cargo xtask test`), so the other tests' database is not disturbed.
//!
//! `harness = false`: `main` runs the tests; with `FAULTS_CHILD` set, it is a worker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use chat_panel::PanelConfig;
use serde_json::Value;
use testkit::{Reply, ScriptedServer};

const CHILD: &str = "FAULTS_CHILD";
/// What the panel stores when a turn's answer was lost (kept in step with the panel).
const INTERRUPTED_START: &str = "The answer to your last message was interrupted";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return worker_child();
    }
    let tests: [(&str, fn()); 1] = [(
        "i42_7_database_stopped_mid_turn_on_a_worker_then_started_the_worker_goes_on",
        i42_7_database_stopped_mid_turn_on_a_worker_then_started_the_worker_goes_on,
    )];
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A worker: configuration from the environment (`DATABASE_URL`), a short turn lease; prints
/// `listening ADDR`, serves until its stdin closes or it is killed.
fn worker_child() {
    runtime().block_on(async {
        let config = PanelConfig::from_env().with_turn_lease(Duration::from_millis(1500));
        assert!(config.history.is_shared(), "DATABASE_URL was not read");
        let server = common::serve_child_panel(config).await;
        println!("listening {}", server.addr());
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        })
        .await;
        server.shutdown().await;
    });
}

fn fault_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run `cargo xtask test` (it starts a fault-test PostgreSQL cluster \
             on 127.0.0.1 and sets TEST_PG_FAULT_*), or `cargo xtask with-services cargo test -p \
             chat-panel --test faults_mid_turn`"
        )
    })
}

/// `pg_ctl ARGS` on the fault-test cluster (as the user xtask names, when it names one).
fn pg_ctl(args: &[&str]) {
    let data = fault_env("TEST_PG_FAULT_DATA");
    let ctl = fault_env("TEST_PG_FAULT_PG_CTL");
    let run_as = fault_env("TEST_PG_FAULT_RUN_AS");
    let mut cmd = if run_as.is_empty() {
        Command::new(&ctl)
    } else {
        let mut c = Command::new("runuser");
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

/// `url` with its database replaced by `db`.
fn with_db(url: &str, db: &str) -> String {
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{base}/{db}{query}")
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// A fresh database on the fault-test cluster; its URL.
async fn fresh_database(name: &str) -> String {
    let base = fault_env("TEST_PG_FAULT_URL");
    let admin = connect(&base).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    with_db(&base, name)
}

/// A worker process on `database_url`, killed when dropped.
struct Worker {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Worker {
    fn start(model: &ScriptedServer, database_url: &str) -> Self {
        let (child, addr) = common::spawn_panel(
            Command::new(std::env::current_exe().unwrap())
                .env(CHILD, "1")
                .env_remove("NATS_URL")
                .env("DATABASE_URL", database_url)
                .env("CHAT_PANEL_MODEL_URL", model.base_url()),
        );
        Self { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

async fn post(c: &reqwest::Client, base: &str, sid: &str, text: &str) -> (u16, String) {
    let r = c
        .post(format!("{base}api/sessions/{sid}/messages"))
        .json(&serde_json::json!({ "text": text }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// The message rows of `sid`, in order.
async fn stored(url: &str, sid: &str) -> Vec<Value> {
    connect(url)
        .await
        .query(
            "SELECT message FROM ce_messages WHERE session_id = $1 ORDER BY seq",
            &[&sid],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(&r.get::<_, String>(0)).unwrap())
        .collect()
}

fn i42_7_database_stopped_mid_turn_on_a_worker_then_started_the_worker_goes_on() {
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
