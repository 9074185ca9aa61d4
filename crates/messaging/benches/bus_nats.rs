//! The bus across two processes on NATS JetStream (a bench binary, bounded in count and time):
//! this process sends, a second process (this binary again, with `--receive`) receives.
//!
//! * burst: `BURST` messages sent back to back (each `send` awaits the broker's acknowledgement),
//!   then received: messages per second each way;
//! * paced: `PACED` messages, one every `PACE`, each stamped with its send time: latency from the
//!   start of `send` to the moment `recv` hands it out in the other process, p50 / p99;
//! * group: `BURST` messages to `GROUP_RECIPIENTS` recipients `user:N`, received in the other
//!   process by one group subscription (`subscribe_group("user")`): messages per second;
//! * idle: a process that subscribes `GROUP_RECIPIENTS` recipients one by one, against one
//!   that holds a single group subscription for them all, neither receiving anything: its CPU
//!   time per second and resident memory over `IDLE`.
//!
//! `cargo xtask with-services cargo bench -p toolwright-messaging --features nats --bench bus_nats`
//! (needs `TEST_NATS_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use toolwright_messaging::{MessageBus, NatsConfig, OutgoingMessage, QuickReplies};

const BURST: usize = 2000;
const PACED: usize = 300;
const PACE: Duration = Duration::from_millis(10);
const LIMIT: Duration = Duration::from_secs(180);
const GROUP_RECIPIENTS: usize = 500;
const IDLE: Duration = Duration::from_secs(10);

/// This process's CPU time (user + system, all threads) in ms, and resident memory in KiB.
fn cpu_ms_and_rss_kib() -> (f64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // fields 14 and 15 of stat (utime, stime), counted after the command's closing ')'
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    (ticks as f64 * 10.0, rss) // USER_HZ is 100
}

/// The idle process: `own` subscribes `n` recipients `user:I` one by one, `group` holds one
/// group subscription for the family; after a warm-up it prints `idle CPU_MS_PER_S RSS_KIB
/// RSS_GROWTH_KIB` (growth: since before subscribing).
async fn idle(url: &str, stream: &str, mode: &str, n: usize) {
    let bus = MessageBus::connect_nats_with(bus_config(url, stream))
        .await
        .unwrap();
    let (_, rss_before) = cpu_ms_and_rss_kib();
    let subs: Vec<toolwright_messaging::Subscription> = if mode == "group" {
        vec![bus.subscribe_group("user").unwrap()]
    } else {
        (0..n).map(|i| bus.subscribe(format!("user:{i}"))).collect()
    };
    tokio::time::sleep(Duration::from_secs(3)).await; // consumers created, pulls open
    assert!(subs.iter().all(|s| s.problem().is_none()));
    let (cpu0, _) = cpu_ms_and_rss_kib();
    tokio::time::sleep(IDLE).await;
    let (cpu1, rss) = cpu_ms_and_rss_kib();
    println!(
        "idle {:.1} {rss} {}",
        (cpu1 - cpu0) / IDLE.as_secs_f64(),
        rss.saturating_sub(rss_before)
    );
    drop(subs);
}

/// The receiving process of the group figure: takes `n` messages with one group subscription.
async fn receive_group(url: &str, stream: &str, n: usize) {
    let bus = MessageBus::connect_nats_with(bus_config(url, stream))
        .await
        .unwrap();
    let mut inbox = bus.subscribe_group("user").unwrap();
    let mut first = None;
    for _ in 0..n {
        let m = tokio::time::timeout(LIMIT, inbox.recv()).await;
        let Ok(Some(_)) = m else {
            panic!("no message within {LIMIT:?}: {:?}", inbox.problem());
        };
        first.get_or_insert_with(Instant::now);
    }
    println!("done {}", first.map_or(0.0, |f| f.elapsed().as_secs_f64()));
}

fn done_seconds(out: &std::process::Output) -> f64 {
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("done "))
        .unwrap()
        .parse()
        .unwrap()
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn bus_config(url: &str, stream: &str) -> NatsConfig {
    NatsConfig::new(url).stream(stream)
}

/// The receiving process: takes `n` messages for `to`, prints the latency of each stamped one
/// (`lat NANOS`), then `done SECONDS` for the time from the first message to the last.
async fn receive(url: &str, stream: &str, to: &str, n: usize) {
    let bus = MessageBus::connect_nats_with(bus_config(url, stream))
        .await
        .unwrap();
    let mut inbox = bus.subscribe(to);
    println!("ready");
    let mut first = None;
    for _ in 0..n {
        let m = inbox.recv().await.unwrap();
        let at = now_nanos();
        first.get_or_insert_with(Instant::now);
        if let Some(sent) = m.text.strip_prefix("t=") {
            println!("lat {}", at - sent.parse::<u128>().unwrap());
        }
    }
    println!("done {}", first.map_or(0.0, |f| f.elapsed().as_secs_f64()));
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--receive") {
        let (url, stream, to, n) = (&args[i + 1], &args[i + 2], &args[i + 3], &args[i + 4]);
        receive(url, stream, to, n.parse().unwrap()).await;
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--receive-group") {
        receive_group(&args[i + 1], &args[i + 2], args[i + 3].parse().unwrap()).await;
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--idle") {
        let (url, stream, mode, n) = (&args[i + 1], &args[i + 2], &args[i + 3], &args[i + 4]);
        idle(url, stream, mode, n.parse().unwrap()).await;
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return; // `cargo bench -- --list`
    }
    let url = std::env::var("TEST_NATS_URL").unwrap_or_else(|_| {
        panic!(
            "TEST_NATS_URL is not set: run `cargo xtask with-services cargo bench -p toolwright-messaging \
             --features nats --bench bus_nats`"
        )
    });
    let stream = format!("BENCH_{}", std::process::id());
    let bus = MessageBus::connect_nats_with(bus_config(&url, &stream))
        .await
        .unwrap();
    let quick = QuickReplies::new(vec!["Yes".into(), "No".into(), "Later".into()]).unwrap();
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();

    // burst: send all, then a second process takes all
    let t = Instant::now();
    for i in 0..BURST {
        let m = OutgoingMessage::new("agent", "user:burst", format!("message {i}"))
            .with_quick_replies(quick.clone());
        bus.send(m).await.unwrap();
    }
    let send_s = t.elapsed().as_secs_f64();
    let out = Command::new(&exe)
        .args(["--receive", &url, &stream, "user:burst", &BURST.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let recv_s: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("done "))
        .unwrap()
        .parse()
        .unwrap();

    // paced: the receiver is up first; one stamped message every PACE
    let mut child = Command::new(&exe)
        .args(["--receive", &url, &stream, "user:paced", &PACED.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let mut tick = tokio::time::interval(PACE);
    for _ in 0..PACED {
        tick.tick().await;
        assert!(started.elapsed() < LIMIT, "bench ran past {LIMIT:?}");
        let m = OutgoingMessage::new("agent", "user:paced", format!("t={}", now_nanos()));
        bus.send(m).await.unwrap();
    }
    let mut lat: Vec<f64> = lines
        .map_while(Result::ok)
        .filter_map(|l| {
            l.strip_prefix("lat ")
                .map(|n| n.parse::<f64>().unwrap() / 1e6)
        })
        .collect();
    assert!(child.wait().unwrap().success());
    assert_eq!(lat.len(), PACED);
    lat.sort_by(f64::total_cmp);

    // group: many recipients of one family, one group subscription in the other process (a
    // stream of its own: the per-recipient consumers of `user:burst` and `user:paced` above
    // would overlap the group's, which the broker refuses)
    let group_stream = format!("{stream}_GROUP");
    let group_bus = MessageBus::connect_nats_with(bus_config(&url, &group_stream))
        .await
        .unwrap();
    let t = Instant::now();
    for i in 0..BURST {
        let m = OutgoingMessage::new("agent", format!("user:{}", i % GROUP_RECIPIENTS), "hi");
        group_bus.send(m).await.unwrap();
    }
    let group_send_s = t.elapsed().as_secs_f64();
    let out = Command::new(&exe)
        .args(["--receive-group", &url, &group_stream, &BURST.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let group_recv_s = done_seconds(&out);

    // idle: per-recipient subscriptions against one group subscription (own streams each)
    let mut idle_lines = Vec::new();
    for mode in ["own", "group"] {
        let s = format!("{stream}_IDLE_{mode}");
        let out = Command::new(&exe)
            .args(["--idle", &url, &s, mode, &GROUP_RECIPIENTS.to_string()])
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v: Vec<f64> = text
            .lines()
            .find_map(|l| l.strip_prefix("idle "))
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        idle_lines.push(format!(
            "  idle, {GROUP_RECIPIENTS} recipients, {}: {:.1} ms CPU/s, RSS {:.0} KiB (+{:.0} KiB for the subscriptions, {:.1} KiB each)",
            if mode == "own" { "one subscription each" } else { "one group subscription" },
            v[0],
            v[1],
            v[2],
            v[2] / GROUP_RECIPIENTS as f64
        ));
    }
    assert!(started.elapsed() < LIMIT, "bench ran past {LIMIT:?}");

    println!("bus on NATS JetStream, two processes, 127.0.0.1:");
    println!(
        "  burst {BURST}: send {:.0} msg/s (each acknowledged by the broker), receive {:.0} msg/s",
        BURST as f64 / send_s,
        BURST as f64 / recv_s
    );
    println!(
        "  paced {PACED} every {PACE:?}: send -> handed out in the other process p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat[lat.len() - 1]
    );
    println!(
        "  group burst {BURST} to {GROUP_RECIPIENTS} recipients: send {:.0} msg/s, one group subscription receives {:.0} msg/s",
        BURST as f64 / group_send_s,
        BURST as f64 / group_recv_s
    );
    for l in idle_lines {
        println!("{l}");
    }
}
