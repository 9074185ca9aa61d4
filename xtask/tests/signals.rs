//! xtask stops every server it started when it is stopped — SIGTERM or SIGINT to its
//! process group (CI's time limit, Ctrl-C) — and a new run stops what a run killed outright
//! (SIGKILL) left behind. Real servers: `cargo xtask with-services` starts both PostgreSQL
//! clusters, both nats-servers and Phoenix, as `cargo xtask test` does; the test then looks for
//! their processes in `/proc`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The kinds of service directory xtask makes, each suffixed with its owner's pid.
const KINDS: [&str; 5] = [
    "postgres",
    "postgres-fault",
    "nats",
    "nats-fault",
    "phoenix",
];

/// One test at a time: each starts five servers (Phoenix is heavy to start on 2 cores).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `cargo xtask with-services sh -c 'echo ready; sleep SECS'` in a process group of its own;
/// returns once the command runs (every server started).
fn start_xtask(secs: u32) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["with-services", "sh", "-c"])
        .arg(format!("echo ready; exec sleep {secs}"))
        .env("CARGO_MANIFEST_DIR", env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim() == "ready" {
                let _ = tx.send(());
            }
        }
    });
    // Phoenix is installed by `cargo xtask test` before the tests run; a first install here
    // would take minutes.
    if rx.recv_timeout(Duration::from_secs(600)).is_err() {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", child.id())])
            .status();
        panic!(
            "xtask with-services did not start its command: {:?}",
            child.wait()
        );
    }
    child
}

/// The processes (pid, kind) whose command line or environment names a service directory of
/// xtask `owner`: `…/postgres-OWNER/data`, `…/nats-fault-OWNER/nats.conf`,
/// `PHOENIX_WORKING_DIR=…/phoenix-OWNER/work`.
fn service_processes(owner: u32) -> Vec<(u32, &'static str)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let read = |f: &str| {
            std::fs::read(entry.path().join(f))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default()
        };
        let stat = read("stat");
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'))
        {
            continue; // a zombie runs nothing
        }
        let text = format!("{} {}", read("cmdline"), read("environ"));
        for kind in KINDS {
            if text.contains(&format!("/{kind}-{owner}/")) {
                found.push((pid, kind));
            }
        }
    }
    found
}

fn kinds(found: &[(u32, &'static str)]) -> Vec<&'static str> {
    let mut k: Vec<&str> = found.iter().map(|f| f.1).collect();
    k.sort_unstable();
    k.dedup();
    k
}

/// Waits until no process of xtask `owner`'s services is left; panics naming those left.
fn assert_none_left(owner: u32, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = service_processes(owner);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!("left running after xtask {owner} ended: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_for_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "xtask did not exit");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal_group(pgid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(ok.success());
}

fn stopped_by(signal: &str, number: i32) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut xtask = start_xtask(600);
    let owner = xtask.id();
    let running = service_processes(owner);
    assert_eq!(
        kinds(&running),
        {
            let mut all = KINDS.to_vec();
            all.sort_unstable();
            all
        },
        "every server is running before the signal: {running:?}"
    );
    signal_group(owner, signal);
    let status = wait_for_exit(&mut xtask, Duration::from_secs(120));
    assert_eq!(
        status.code(),
        Some(128 + number),
        "xtask exits as stopped by {signal}: {status:?} (signal {:?})",
        status.signal()
    );
    assert_none_left(owner, Duration::from_secs(30));
    let services = services_root();
    for kind in KINDS {
        assert!(
            !services.join(format!("{kind}-{owner}")).exists(),
            "{kind}'s directory is removed"
        );
    }
}

/// Where xtask keeps its servers' files (`services/mod.rs`: the temporary directory as root).
fn services_root() -> std::path::PathBuf {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if root {
        std::env::temp_dir().join("llm-toolkit-services")
    } else {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
            .join("services")
    }
}

#[test]
fn sigterm_to_xtasks_process_group_stops_every_server_it_started() {
    stopped_by("TERM", 15);
}

#[test]
fn sigint_to_xtasks_process_group_stops_every_server_it_started() {
    stopped_by("INT", 2);
}

#[test]
fn a_run_stops_the_servers_a_killed_run_left() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut xtask = start_xtask(601);
    let owner = xtask.id();
    assert!(!service_processes(owner).is_empty());
    // SIGKILL to xtask alone: nothing of it runs to stop its servers.
    let _ = Command::new("kill")
        .args(["-KILL", &owner.to_string()])
        .status();
    let _ = wait_for_exit(&mut xtask, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    let orphans = service_processes(owner);
    assert!(
        !orphans.is_empty(),
        "the servers outlive a SIGKILLed xtask (what the next run must stop)"
    );
    // The command the killed run started (its own process group's, so the SIGKILL did not
    // reach it; its environment names the servers' directories) is this test's to end.
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", "^sleep 601$"])
        .status();
    // The next run reaps them before it starts its own.
    let next = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["with-services", "true"])
        .env("CARGO_MANIFEST_DIR", env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(next.success());
    assert_none_left(owner, Duration::from_secs(30));
}
