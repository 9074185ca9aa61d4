//! 10,000 sessions against two chat-panel workers backed by PostgreSQL and NATS, and the same
//! against one embedded worker (SQLite, in-process bus). The scripted model answers after 20 ms.
//!
//! Per setup, three phases:
//! 1. **turns** — one turn in each of N sessions, 64 at a time, session `i` on worker `i % W`:
//!    turns/s, p50/p99 turn latency (POST to `done`), worker CPU per turn (the workers' own
//!    `getrusage(RUSAGE_SELF)`, asked over their stdin).
//! 2. **idle** — one SSE events stream per session, on the *other* worker when there are two
//!    (every stream opens its conversation there): memory per open idle session (the workers'
//!    own `VmRSS` before and after, over the streams they hold) and their CPU per second while
//!    all streams sit idle.
//! 3. **turns with streams open** — a second turn in M sessions: the same figures, and every
//!    stream must receive the two new rows (across workers, through the store's change feed).
//!
//! 4. **bus messages, all streams open** (the setups with NATS) — another process sends one
//!    message over the broker to the person of each of those M sessions, 64 sends in flight:
//!    messages/s, p50/p99 delivery (the send to the second of its two rows on the stream
//!    following that conversation on the other worker); every message stored once and shown
//!    once.
//!
//! Then it counts the rows the store holds (PostgreSQL's tables; the SQLite file after the
//! worker stopped): every turn's two messages once, none lost, none doubled — and every stream
//! got each of its rows exactly once.
//!
//! Bounded: every phase has a time limit and the bench exits by itself. Needs `TEST_DATABASE_URL`
//! and `TEST_NATS_URL` (`cargo xtask bench` or `cargo xtask with-services` start both on
//! 127.0.0.1). Run: `cargo xtask with-services cargo bench -p toolwright-chat-panel --bench sessions_10k`;
//! `SESSIONS=2000` for a smaller run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../context-engine/tests/common/mod.rs"]
mod pg;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_chat_panel::PanelConfig;

const CHILD: &str = "SESSIONS_BENCH_WORKER";
const CHILD_SQLITE: &str = "SESSIONS_BENCH_SQLITE";
const CONCURRENCY: usize = 64;
const MODEL_LATENCY: Duration = Duration::from_millis(20);
const PHASE_LIMIT: Duration = Duration::from_secs(600);

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return worker_child();
    }
    // `cargo bench` passes `--bench`; any other argument is a filter libtest would take: ignore.
    let n: usize = std::env::var("SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let m = (n / 5).max(1);
    raise_fd_limit();
    pg::pg_base_url(); // fails loudly when not set
    let nats = std::env::var("TEST_NATS_URL").unwrap_or_else(|_| {
        panic!("TEST_NATS_URL is not set: run `cargo xtask with-services cargo bench -p toolwright-chat-panel --bench sessions_10k`")
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let model = ScriptedServer::start().await;
        model.set_recording(false);
        model.respond_with(|body: &Value| {
            let last = body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default()
                .to_owned();
            Reply::text(format!("You said: {last}")).latency(MODEL_LATENCY)
        });
        let url = pg::pg_database("chat_panel_sessions_bench").await;
        println!(
            "sessions_10k: {n} sessions, {CONCURRENCY} turns in flight, model answers after {} ms",
            MODEL_LATENCY.as_millis()
        );
        let two = run(
            "2 workers, PostgreSQL + NATS",
            vec![
                Worker::start(&model, &[("DATABASE_URL", &url), ("NATS_URL", &nats)]),
                Worker::start(&model, &[("DATABASE_URL", &url), ("NATS_URL", &nats)]),
            ],
            n,
            m,
            Some(&nats),
        )
        .await;
        let lost_pg = count_postgres(&url, n, m, BUS_ROWS).await;
        let url2 = pg::pg_database("chat_panel_sessions_bench_pg").await;
        let pg_only = run(
            "2 workers, PostgreSQL, no broker",
            vec![
                Worker::start(&model, &[("DATABASE_URL", &url2)]),
                Worker::start(&model, &[("DATABASE_URL", &url2)]),
            ],
            n,
            m,
            None,
        )
        .await;
        let lost_pg_only = count_postgres(&url2, n, m, 0).await;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sessions.db");
        let db_s = db.display().to_string();
        let one = run(
            "1 embedded worker, SQLite + in-process bus",
            vec![Worker::start(&model, &[(CHILD_SQLITE, &db_s)])],
            n,
            m,
            None,
        )
        .await;
        let lost_sqlite = count_sqlite(&db, n, m).await;
        println!();
        println!(
            "| setup | phase | turns/s | p50 | p99 | worker CPU/turn | memory/idle session | idle CPU | rows lost / doubled |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for (r, lost) in [(&two, &lost_pg), (&pg_only, &lost_pg_only), (&one, &lost_sqlite)] {
            for p in &r.phases {
                println!(
                    "| {} | {} | {:.0} | {:.1} ms | {:.1} ms | {:.2} ms | {} | {} | {} |",
                    r.setup,
                    p.name,
                    p.turns_per_s,
                    p.p50_ms,
                    p.p99_ms,
                    p.cpu_ms_per_turn,
                    r.idle_bytes
                        .map(|b| format!("{:.1} KB", b / 1024.0))
                        .unwrap_or_default(),
                    r.idle_cpu_ms_per_s
                        .map(|c| format!("{c:.1} ms/s"))
                        .unwrap_or_default(),
                    lost
                );
            }
        }
        for r in [&two, &pg_only] {
            println!(
                "worker CPU per turn, {} / embedded: {:.2}x (first turns), {:.2}x (streams open)",
                r.setup,
                r.phases[0].cpu_ms_per_turn / one.phases[0].cpu_ms_per_turn,
                r.phases[1].cpu_ms_per_turn / one.phases[1].cpu_ms_per_turn
            );
        }
        println!(
            "streams missing rows: {} / {} / {}",
            two.streams_missing, pg_only.streams_missing, one.streams_missing
        );
        if let Some(b) = &two.bus {
            println!(
                "bus messages ({}): {} sent at {:.0}/s, delivery p50 {:.1} ms, p99 {:.1} ms, {} streams missing them; stored rows lost / doubled {}",
                two.setup, b.sent, b.per_s, b.p50_ms, b.p99_ms, b.missing, lost_pg
            );
        }
    });
}

/// What one setup measured.
struct Report {
    setup: &'static str,
    phases: Vec<Phase>,
    idle_bytes: Option<f64>,
    idle_cpu_ms_per_s: Option<f64>,
    streams_missing: usize,
    bus: Option<BusPhase>,
}

/// Phase 4: messages over the broker.
struct BusPhase {
    sent: usize,
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    missing: usize,
}

/// The rows one message over the bus adds to a conversation: the `send_message` call and its
/// result.
const BUS_ROWS: i64 = 2;

/// Each stream's rows: the row id and when the stream read it.
type Rows = Arc<Mutex<HashMap<usize, Vec<(u64, Instant)>>>>;

struct Phase {
    name: &'static str,
    turns_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_ms_per_turn: f64,
}

async fn run(
    setup: &'static str,
    mut workers: Vec<Worker>,
    n: usize,
    m: usize,
    nats: Option<&str>,
) -> Report {
    println!("\n== {setup}");
    let w = workers.len();
    let ids: Vec<String> = (0..n).map(|i| format!("bench-session-{i:05}")).collect();
    let urls: Vec<String> = workers.iter().map(Worker::url).collect();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .build()
        .unwrap();

    // 1. first turns
    let first = turns(&client, &mut workers, &urls, &ids, "hello", "turns").await;

    // 2. idle streams, on the other worker
    let before: Vec<Usage> = workers.iter_mut().map(Worker::usage).collect();
    let rows: Rows = Arc::default();
    let streams_client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut streams = Vec::with_capacity(n);
    let mut per_worker = vec![0usize; w];
    let start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let k = (i + 1) % w;
        per_worker[k] += 1;
        streams.push(tokio::spawn(follow(
            streams_client.clone(),
            format!("{}api/sessions/{id}/events", urls[k]),
            i,
            rows.clone(),
        )));
        if i % 256 == 255 {
            tokio::task::yield_now().await;
        }
    }
    wait_rows(&rows, n, |_| 2, "the streams' first rows").await;
    println!(
        "   {n} streams open and caught up in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled: Vec<Usage> = workers.iter_mut().map(Worker::usage).collect();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle: Vec<Usage> = workers.iter_mut().map(Worker::usage).collect();
    let idle_bytes = (0..w)
        .map(|k| (settled[k].rss_kb as f64 - before[k].rss_kb as f64) * 1024.0)
        .sum::<f64>()
        / per_worker.iter().sum::<usize>() as f64;
    let idle_cpu = (0..w)
        .map(|k| idle[k].cpu_ms() - settled[k].cpu_ms())
        .sum::<f64>()
        / 10.0;
    println!(
        "   idle: {:.1} KB per open session (RSS {:?} KB -> {:?} KB), {idle_cpu:.1} ms CPU per second for all workers",
        idle_bytes / 1024.0,
        before.iter().map(|u| u.rss_kb).collect::<Vec<_>>(),
        settled.iter().map(|u| u.rss_kb).collect::<Vec<_>>(),
    );

    // 3. second turns with every stream open
    let second = turns(
        &client,
        &mut workers,
        &urls,
        &ids[..m],
        "again",
        "turns, all streams open",
    )
    .await;
    let missing = wait_rows(
        &rows,
        n,
        |i| if i < m { 4 } else { 2 },
        "the second turns' rows on the streams",
    )
    .await;
    // 4. messages over the broker, streams open
    let bus = match nats {
        Some(url) => Some(bus_messages(url, &ids[..m], &rows, n, m).await),
        None => None,
    };
    for s in &streams {
        s.abort();
    }
    // each stream got each row once, in order
    let doubled = rows
        .lock()
        .unwrap()
        .values()
        .filter(|v| v.windows(2).any(|p| p[0].0 >= p[1].0))
        .count();
    assert_eq!(
        doubled, 0,
        "{doubled} streams got a row twice or out of order"
    );
    for wk in &mut workers {
        wk.stop();
    }
    Report {
        setup,
        phases: vec![first, second],
        idle_bytes: Some(idle_bytes),
        idle_cpu_ms_per_s: Some(idle_cpu),
        streams_missing: missing,
        bus,
    }
}

/// Phase 4: one message over the broker to the person of each of `ids` (sessions `0..m`, whose
/// streams hold 4 rows), `CONCURRENCY` sends in flight, from a bus client of its own (another
/// process would be the same to the broker). Delivery is the send to the second of the
/// message's two rows on that conversation's stream.
async fn bus_messages(url: &str, ids: &[String], rows: &Rows, n: usize, m: usize) -> BusPhase {
    let bus = toolwright_messaging::MessageBus::connect_nats(url)
        .await
        .unwrap();
    let start = Instant::now();
    let sends = futures::stream::iter(ids.iter().enumerate())
        .map(|(i, id)| {
            let bus = bus.clone();
            let to = toolwright_chat_panel::user_address(id);
            async move {
                let t0 = Instant::now();
                bus.send(toolwright_messaging::OutgoingMessage::new(
                    "bench-bot",
                    to,
                    format!("bus note {i}"),
                ))
                .await
                .unwrap_or_else(|e| panic!("bus message {i}: {e}"));
                (i, t0)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>();
    let sent = tokio::time::timeout(PHASE_LIMIT, sends)
        .await
        .unwrap_or_else(|_| panic!("bus messages: not sent within {PHASE_LIMIT:?}"));
    let wall = start.elapsed();
    let missing = wait_rows(
        rows,
        n,
        |i| if i < m { 4 + BUS_ROWS as usize } else { 2 },
        "the bus messages' rows on the streams",
    )
    .await;
    let mut delivery: Vec<f64> = {
        let rows = rows.lock().unwrap();
        sent.iter()
            .filter_map(|(i, t0)| {
                let seen = rows.get(i)?.get(3 + BUS_ROWS as usize)?.1;
                Some(seen.saturating_duration_since(*t0).as_secs_f64() * 1000.0)
            })
            .collect()
    };
    delivery.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        delivery
            .get(((delivery.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let phase = BusPhase {
        sent: sent.len(),
        per_s: sent.len() as f64 / wall.as_secs_f64(),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        missing,
    };
    println!(
        "   bus messages: {} sent in {:.1} s = {:.0}/s, delivery p50 {:.1} ms, p99 {:.1} ms, {} streams missing them",
        phase.sent,
        wall.as_secs_f64(),
        phase.per_s,
        phase.p50_ms,
        phase.p99_ms,
        missing
    );
    phase
}

/// One turn in each session (session `i` on worker `i % W`), `CONCURRENCY` at a time.
async fn turns(
    client: &reqwest::Client,
    workers: &mut [Worker],
    urls: &[String],
    ids: &[String],
    text: &str,
    name: &'static str,
) -> Phase {
    let before: Vec<Usage> = workers.iter_mut().map(Worker::usage).collect();
    let start = Instant::now();
    let latencies = futures::stream::iter(ids.iter().enumerate())
        .map(|(i, id)| {
            let url = format!("{}api/sessions/{id}/messages", urls[i % urls.len()]);
            let text = format!("{text} {i}");
            let client = client.clone();
            async move {
                let t0 = Instant::now();
                for attempt in 0.. {
                    let r = client
                        .post(&url)
                        .json(&json!({ "text": text }))
                        .send()
                        .await
                        .unwrap();
                    let status = r.status().as_u16();
                    let body = r.text().await.unwrap_or_default();
                    if status == 200 && body.contains("event: done") {
                        assert!(body.contains(&format!("You said: {text}")), "{body}");
                        break;
                    }
                    // 503: no turn slot free in time (a full queue) — said so, sent again
                    assert!(status == 503 && attempt < 5, "turn {i}: {status} {body}");
                }
                t0.elapsed()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>();
    let mut latencies = tokio::time::timeout(PHASE_LIMIT, latencies)
        .await
        .unwrap_or_else(|_| panic!("{name}: not done within {PHASE_LIMIT:?}"));
    let wall = start.elapsed();
    let after: Vec<Usage> = workers.iter_mut().map(Worker::usage).collect();
    latencies.sort();
    let pct = |p: f64| {
        latencies[((latencies.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
    };
    let cpu: f64 = (0..workers.len())
        .map(|k| after[k].cpu_ms() - before[k].cpu_ms())
        .sum();
    let phase = Phase {
        name,
        turns_per_s: ids.len() as f64 / wall.as_secs_f64(),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        cpu_ms_per_turn: cpu / ids.len() as f64,
    };
    println!(
        "   {name}: {} turns in {:.1} s = {:.0}/s, p50 {:.1} ms, p99 {:.1} ms, worker CPU {:.2} ms/turn",
        ids.len(),
        wall.as_secs_f64(),
        phase.turns_per_s,
        phase.p50_ms,
        phase.p99_ms,
        phase.cpu_ms_per_turn
    );
    phase
}

/// A real SSE client following one conversation: records the id of every `row` event.
async fn follow(client: reqwest::Client, url: String, i: usize, rows: Rows) {
    let Ok(res) = client
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
    else {
        return;
    };
    assert_eq!(res.status(), 200, "{url}");
    let mut body = res.bytes_stream();
    let mut buf = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            if !frame.contains("event: row") {
                continue;
            }
            if let Some(id) = frame
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .and_then(|v| v.trim().parse().ok())
            {
                rows.lock()
                    .unwrap()
                    .entry(i)
                    .or_default()
                    .push((id, Instant::now()));
            }
        }
    }
}

/// Waits (bounded) until stream `i` holds `expected(i)` rows, for every `i < n`; returns how
/// many streams still miss rows at the limit.
async fn wait_rows(
    rows: &Mutex<HashMap<usize, Vec<(u64, Instant)>>>,
    n: usize,
    expected: impl Fn(usize) -> usize,
    what: &str,
) -> usize {
    let limit = Instant::now() + Duration::from_secs(120);
    loop {
        let missing = {
            let rows = rows.lock().unwrap();
            (0..n)
                .filter(|i| rows.get(i).map_or(0, Vec::len) < expected(*i))
                .count()
        };
        if missing == 0 {
            return 0;
        }
        if Instant::now() > limit {
            println!("   {what}: {missing} streams still miss rows after 120 s");
            return missing;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rows every session should hold after the bench: 2 per turn (the person's message and
/// the answer), and `bus` more in the sessions that got a message over the broker. Returns
/// "lost / doubled" as counted in the store.
async fn count_postgres(url: &str, n: usize, m: usize, bus: i64) -> String {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT s.id, count(m.seq) FROM ce_sessions s LEFT JOIN ce_messages m ON m.session_id = s.id GROUP BY s.id",
            &[],
        )
        .await
        .unwrap();
    let counts: HashMap<String, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    compare(&counts, n, m, bus)
}

async fn count_sqlite(path: &std::path::Path, n: usize, m: usize) -> String {
    use toolwright_context_engine::SessionStore;
    let store = toolwright_context_engine::SqliteStore::open(path).unwrap();
    let mut counts = HashMap::new();
    for id in store.list().await.unwrap() {
        let len = store.load(&id).await.unwrap().messages.len() as i64;
        counts.insert(id, len);
    }
    compare(&counts, n, m, 0)
}

fn compare(counts: &HashMap<String, i64>, n: usize, m: usize, bus: i64) -> String {
    let (mut lost, mut doubled) = (0i64, 0i64);
    for i in 0..n {
        let expected = if i < m { 4 + bus } else { 2 };
        let got = counts
            .get(&format!("bench-session-{i:05}"))
            .copied()
            .unwrap_or(0);
        lost += (expected - got).max(0);
        doubled += (got - expected).max(0);
    }
    format!("{lost} / {doubled}")
}

/// A worker's own figures: `getrusage(RUSAGE_SELF)` and `VmRSS`.
#[derive(Debug, Clone, Copy)]
struct Usage {
    user_us: u64,
    sys_us: u64,
    rss_kb: u64,
}

impl Usage {
    fn cpu_ms(&self) -> f64 {
        (self.user_us + self.sys_us) as f64 / 1000.0
    }
}

/// A worker process: this binary again, as a panel on 127.0.0.1:0.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
}

impl Worker {
    fn start(model: &ScriptedServer, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env(CHILD, "1")
            .env("CHAT_PANEL_MODEL_URL", model.base_url())
            .env_remove("DATABASE_URL")
            .env_remove("NATS_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the worker did not start: {line:?}"))
            .parse()
            .unwrap();
        Self {
            child,
            stdin,
            stdout,
            addr,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Asks the worker for its own usage (a line on its stdin, the answer on its stdout).
    fn usage(&mut self) -> Usage {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "usage").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        Usage {
            user_us: v[0],
            sys_us: v[1],
            rss_kb: v[2],
        }
    }

    /// Closes its stdin: it shuts down and exits.
    fn stop(&mut self) {
        self.stdin = None;
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

/// The worker: a chat panel over the scripted model, with room for every session and stream;
/// answers `usage` lines on stdin with `usage USER_US SYS_US RSS_KB`; stops when stdin closes.
fn worker_child() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut config = PanelConfig::from_env()
                .with_max_sessions(40_000)
                .with_max_connections(15_000)
                .with_max_concurrent_turns(CONCURRENCY)
                .with_idle_timeout(Duration::from_secs(600));
            if let Ok(path) = std::env::var(CHILD_SQLITE) {
                config = config.with_history_path(path);
            }
            let server = common::serve_child_panel(config).await;
            println!("listening {}", server.addr());
            let _ = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line.trim() == "usage" {
                        let u = nix::sys::resource::getrusage(
                            nix::sys::resource::UsageWho::RUSAGE_SELF,
                        )
                        .unwrap();
                        let us = |t: nix::sys::time::TimeVal| {
                            t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64
                        };
                        let rss = std::fs::read_to_string("/proc/self/status")
                            .unwrap_or_default()
                            .lines()
                            .find_map(|l| l.strip_prefix("VmRSS:"))
                            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                            .unwrap_or(0u64);
                        println!("usage {} {} {rss}", us(u.user_time()), us(u.system_time()));
                    }
                    line.clear();
                }
            })
            .await;
            server.shutdown().await;
        });
}
