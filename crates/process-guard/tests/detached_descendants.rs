//! a child's detached (`setsid`) descendant outlived the owner's group kill.
//! Real processes, checked in `/proc`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

/// Alive = in `/proc` and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

fn session_of(pid: i32) -> i32 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = s.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// Waits (bounded) until `pid` is in another session than `of` (its `setsid` has run).
async fn wait_left_session(pid: i32, of: i32) {
    for _ in 0..200 {
        if session_of(pid) != session_of(of) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits (bounded) for the script to write the grandchild's pid into `file`.
async fn read_pid(file: &Path) -> i32 {
    for _ in 0..200 {
        if let Ok(s) = std::fs::read_to_string(file)
            && let Ok(p) = s.trim().parse()
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the script never wrote {}", file.display());
}

async fn wait_gone(pid: i32) -> bool {
    for _ in 0..200 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// `sh` starts `setsid sleep` in the background (it leaves the group and the session) and
/// writes its pid; then `sh` itself either stays (`sleep 600`) or exits.
fn script(pidfile: &Path, stay: bool) -> Command {
    let mut cmd = Command::new("sh");
    let tail = if stay { "; sleep 600" } else { "" };
    cmd.arg("-c").arg(format!(
        "setsid sleep 600 & echo $! > '{}'{tail}",
        pidfile.display()
    ));
    cmd.kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn reproduced_a_group_kill_leaves_the_setsid_grandchild_running() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut cmd = script(&pidfile, true);
    cmd.process_group(0);
    let mut child = cmd.spawn().unwrap();
    let grandchild = read_pid(&pidfile).await;
    let pgid = child.id().unwrap();
    // `$!` is written as soon as `sh` forks; `setsid` runs a moment later in the child.
    wait_left_session(grandchild, pgid as i32).await;
    assert_ne!(
        session_of(grandchild),
        session_of(pgid as i32),
        "it left the session"
    );
    toolwright_process_guard::kill_group(pgid);
    child.wait().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let survived = alive(grandchild);
    // clean up what the attack left behind
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(grandchild),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(
        survived,
        "the group kill alone should have missed it (the finding)"
    );
}

#[tokio::test]
async fn setsid_grandchild_is_gone_after_terminate() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let (mut child, guard) = toolwright_process_guard::spawn(&mut script(&pidfile, true)).unwrap();
    let grandchild = read_pid(&pidfile).await;
    assert!(alive(grandchild));
    assert!(
        guard.members().contains(&(grandchild as u32)),
        "the guard sees it: {:?}",
        guard.members()
    );
    guard
        .terminate(&mut child, Duration::from_millis(500))
        .await;
    assert!(wait_gone(grandchild).await, "pid {grandchild} still alive");
}

#[tokio::test]
async fn grandchild_of_a_child_that_already_exited_is_found_by_its_marker() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let (mut child, mut guard) =
        toolwright_process_guard::spawn(&mut script(&pidfile, false)).unwrap();
    let grandchild = read_pid(&pidfile).await;
    child.wait().await.unwrap(); // the child is gone; the grandchild was re-parented away
    assert!(alive(grandchild));
    assert!(guard.sweep() >= 1);
    assert!(wait_gone(grandchild).await, "pid {grandchild} still alive");
}

#[tokio::test]
async fn double_fork_with_a_cleared_environment_stays_in_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut cmd = Command::new("sh");
    // the subshell forks and exits at once: its child is orphaned and has no marker
    cmd.arg("-c").arg(format!(
        "(env -i setsid sleep 600 & echo $! > '{}') ; sleep 600",
        pidfile.display()
    ));
    let (mut child, guard) = toolwright_process_guard::spawn(&mut cmd).unwrap();
    let orphan = read_pid(&pidfile).await;
    let child_pid = child.id().unwrap() as i32;
    // re-parented to the child (a subreaper), not to PID 1
    let mut parent = 0;
    for _ in 0..100 {
        let s = std::fs::read_to_string(format!("/proc/{orphan}/stat")).unwrap();
        parent = s
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        if parent == child_pid {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        parent, child_pid,
        "the orphan's parent is the guarded child"
    );
    drop(guard); // dropping sweeps too
    assert!(wait_gone(orphan).await, "pid {orphan} still alive");
    let _ = child.wait().await;
}

#[tokio::test]
async fn fork_storm_is_frozen_and_killed() {
    // every process keeps forking; the sweep must not leave a fork that slipped past it
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(
        "f() { while :; do (setsid sh -c 'sleep 600' &) ; sleep 0.05; done; }; f & f & sleep 600",
    );
    let (mut child, guard) = toolwright_process_guard::spawn(&mut cmd).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = guard.members();
    assert!(before.len() >= 4, "{before:?}");
    let marker = guard.marker().to_owned();
    guard
        .terminate(&mut child, Duration::from_millis(200))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let left: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| alive(*p))
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
        })
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
    for p in before {
        assert!(wait_gone(p as i32).await, "pid {p} still alive");
    }
}
