//! The panel in its own process (this test binary started again in "panel" mode), for what
//! needs a process: a restart that must keep the conversation (C4), a low
//! file-descriptor limit under 1,100 idle sockets, and the resident memory
//! of a 400-turn conversation of 4,000-character messages.
//!
//! `harness = false`: `main` runs the tests below one after another (a name given on the
//! command line selects those containing it); with `CHAT_PANEL_CHILD` set, it is the panel.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_chat_panel::PanelConfig;

const CHILD: &str = "CHAT_PANEL_CHILD";

fn main() {
    if let Ok(db) = std::env::var(CHILD) {
        return panel_child(&db);
    }
    let tests: [(&str, fn()); 3] = [
        (
            "c4_panel_restart_reloads_the_conversation_from_sqlite",
            c4_panel_restart_reloads_the_conversation_from_sqlite,
        ),
        (
            "eleven_hundred_idle_sockets_under_a_low_fd_limit_leave_healthz_answering",
            eleven_hundred_idle_sockets_under_a_low_fd_limit_leave_healthz_answering,
        ),
        (
            "four_hundred_long_turns_keep_answering_with_bounded_rss",
            four_hundred_long_turns_keep_answering_with_bounded_rss,
        ),
    ];
    // libtest's options that take a value; the first other bare word is a name filter
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut filter: Option<&str> = None;
    let mut skip_value = false;
    for a in &args {
        if skip_value {
            skip_value = false;
        } else if matches!(
            a.as_str(),
            "--test-threads" | "--skip" | "--format" | "--color" | "--logfile" | "-Z"
        ) {
            skip_value = true;
        } else if !a.starts_with('-') && filter.is_none() {
            filter = Some(a);
        }
    }
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    common::run_tests(&tests, filter);
}

/// The panel process: the agent over the scripted model at `CHAT_PANEL_MODEL_URL`, its
/// conversations in the SQLite file `db`, the default configuration otherwise; prints
/// `listening ADDR` and serves until its stdin closes.
fn panel_child(db: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = common::serve_child_panel(PanelConfig::default().with_history_path(db)).await;
        println!("listening {}", server.addr());
        // until the parent closes our stdin (or kills us)
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        })
        .await;
        server.shutdown().await;
    });
}

/// A running panel process.
struct Panel {
    child: Child,
    addr: SocketAddr,
}

impl Panel {
    /// Starts the panel under `ulimit -n {fd_limit}`.
    fn start(model: &ScriptedServer, db: &Path, fd_limit: u32) -> Self {
        let exe = std::env::current_exe().unwrap();
        let (child, addr) = common::spawn_panel(
            Command::new("sh")
                .arg("-c")
                .arg(format!("ulimit -n {fd_limit} && exec \"$0\""))
                .arg(&exe)
                .env(CHILD, db)
                .env("CHAT_PANEL_MODEL_URL", model.base_url()),
        );
        Self { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it hard (no shutdown): a finished round must survive even that.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Panel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn post(c: &reqwest::Client, base: &str, sid: &str, body: Value) -> (u16, String) {
    let r = c
        .post(format!("{base}api/sessions/{sid}/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

fn c4_panel_restart_reloads_the_conversation_from_sqlite() {
    runtime().block_on(async {
        let model = ScriptedServer::start().await;
        model.respond_with(common::demo_responder);
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("panel.sqlite3");
        let sid = "restart-session-1";
        let c = reqwest::Client::new();

        let panel = Panel::start(&model, &db, 1024);
        let (status, body) = post(&c, &panel.url(), sid, json!({"text": "hello"})).await;
        assert_eq!(status, 200, "{body}");
        let before = common::session_state(&panel.url(), sid).await;
        let question = before["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "message")
            .cloned()
            .expect("a question with quick replies");
        let (status, _) = post(
            &c,
            &panel.url(),
            sid,
            json!({"text": common::OPTIONS[1], "inReplyTo": question["id"]}),
        )
        .await;
        assert_eq!(status, 200);
        let before = common::session_state(&panel.url(), sid).await;
        panel.kill();

        let panel = Panel::start(&model, &db, 1024);
        let after = common::session_state(&panel.url(), sid).await;
        let shown = |v: &Value| -> Vec<(String, String)> {
            v["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["kind"].as_str().unwrap().to_owned(),
                        e["text"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        };
        assert_eq!(
            shown(&after),
            shown(&before),
            "the same conversation after a restart"
        );
        let q = after["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "message")
            .unwrap();
        assert_eq!(q["quickReplies"], json!(common::OPTIONS));
        assert_eq!(q["answered"], true);
        assert_eq!(q["chosen"], common::OPTIONS[1]);
        // and the agent remembers it: the next request carries the earlier turns
        let (status, _) = post(&c, &panel.url(), sid, json!({"text": "and now?"})).await;
        assert_eq!(status, 200);
        let sent = model.requests().last().unwrap().body.to_string();
        assert!(
            sent.contains("hello") && sent.contains(common::OPTIONS[1]),
            "{sent}"
        );
    });
}

fn raise_own_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard.min(65_536), hard).unwrap();
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn eleven_hundred_idle_sockets_under_a_low_fd_limit_leave_healthz_answering() {
    raise_own_fd_limit();
    runtime().block_on(async {
        let model = ScriptedServer::start().await;
        model.respond_with(common::demo_responder);
        let dir = tempfile::tempdir().unwrap();
        let panel = Panel::start(&model, &dir.path().join("panel.sqlite3"), 1024);
        // the report's attack: 1,030 idle sockets against `ulimit -n 1024`; here 1,100
        let mut idle = Vec::new();
        for _ in 0..1100 {
            let s = tokio::time::timeout(
                Duration::from_secs(10),
                tokio::net::TcpStream::connect(panel.addr),
            )
            .await
            .expect("connect hung")
            .unwrap();
            idle.push(s);
        }
        let c = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let health = tokio::time::timeout(
            Duration::from_secs(20),
            c.get(format!("{}healthz", panel.url())).send(),
        )
        .await
        .expect("/healthz did not answer within 20 s while 1,100 sockets were open")
        .unwrap();
        assert_eq!(health.text().await.unwrap(), "ok");
        let (status, body) = tokio::time::timeout(
            Duration::from_secs(60),
            post(&c, &panel.url(), "under-siege-01", json!({"text": "hello"})),
        )
        .await
        .expect("a turn did not finish within 60 s while 1,100 sockets were open");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("event: done"), "{body}");
        let fds = open_fds(panel.pid());
        assert!(
            fds < 1024,
            "the panel holds {fds} descriptors: under its limit"
        );
        assert!(fds <= PanelConfig::default().max_connections + 64, "{fds}");
        drop(idle);
    });
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn four_hundred_long_turns_keep_answering_with_bounded_rss() {
    runtime().block_on(async {
        let model = ScriptedServer::start().await;
        model.set_recording(false);
        let biggest = Arc::new(AtomicUsize::new(0));
        let seen = biggest.clone();
        model.respond_with(move |body: &Value| {
            seen.fetch_max(body.to_string().len(), Ordering::Relaxed);
            let n = body["messages"].as_array().map_or(0, Vec::len);
            Reply::text(format!("Noted ({n} messages in this request)."))
        });
        let dir = tempfile::tempdir().unwrap();
        let panel = Panel::start(&model, &dir.path().join("panel.sqlite3"), 1024);
        let c = reqwest::Client::new();
        let sid = "a-very-long-chat";
        let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"];
        let mut rss = Vec::new();
        for turn in 0..400 {
            let mut text = format!("turn {turn}:");
            let mut i = turn;
            while text.len() < 4000 - 8 {
                text.push(' ');
                text.push_str(words[i % words.len()]);
                i += 3;
            }
            let text: String = text.chars().take(4000).collect();
            let (status, body) = post(&c, &panel.url(), sid, json!({"text": text})).await;
            assert_eq!(status, 200, "turn {turn}: {body}");
            let events = common::sse_events(&body);
            // the stored answer (its text may also have streamed live before it, or not: the
            // loop can store it before the panel reads its deltas)
            let answer = events
                .iter()
                .rev()
                .find(|(e, d)| e == "entry" && d["kind"] == "assistant")
                .and_then(|(_, d)| d["text"].as_str())
                .unwrap_or("");
            assert!(
                answer.starts_with("Noted (") && events.last().is_some_and(|(e, _)| e == "done"),
                "turn {turn} got no answer: {body}"
            );
            assert!(!body.contains("\"kind\":\"error\""), "turn {turn}: {body}");
            if turn == 99 || turn == 399 {
                rss.push(rss_kib(panel.pid()));
            }
        }
        let biggest = biggest.load(Ordering::Relaxed);
        eprintln!(
            "400 turns: largest request {biggest} bytes; panel RSS after 100 turns {} KiB, after 400 turns {} KiB",
            rss[0], rss[1]
        );
        // the budget (8000 tokens) bounds every request; before the fix it grew with each turn
        // until the provider's body limit refused every turn of the session
        assert!(biggest < 80_000, "largest request {biggest} bytes");
        assert!(
            rss[1] < rss[0] + 16 * 1024,
            "RSS grew from {} KiB to {} KiB between turns 100 and 400",
            rss[0],
            rss[1]
        );
        let s = common::session_state(&panel.url(), sid).await;
        assert!(s["entries"].as_array().unwrap().len() <= PanelConfig::default().max_entries);
    });
}
