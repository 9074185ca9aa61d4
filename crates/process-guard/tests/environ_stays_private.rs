//! a child of the same user read the agent's `/proc/PID/environ`.
//! One test in its own binary: `protect_this_process` changes the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Stdio;

use tokio::process::Command;

/// A probe that reads this (test) process's environ and memory map and prints what it got.
fn probe() -> Command {
    let me = std::process::id();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "tr '\\0' '\\n' < /proc/{me}/environ 2>&1; echo; head -c 200 /proc/{me}/maps 2>&1; \
             head -c 16 /proc/{me}/mem >/dev/null 2>&1 && echo MEM-READ"
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn output(mut child: tokio::process::Child) -> String {
    let _ = child.stdin.take();
    let out = child.wait_with_output().await.unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `cargo test` puts this in the test binary's environment: our stand-in for an API key.
const SECRET: &str = concat!("CARGO_PKG_NAME=", env!("CARGO_PKG_NAME"));

#[tokio::test]
async fn a_guarded_child_cannot_read_the_agents_environ_or_memory() {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    // the attack, first: an ordinary child reads the agent's environment
    assert!(toolwright_process_guard::is_dumpable());
    let got = output(probe().spawn().unwrap()).await;
    assert!(got.contains(SECRET), "the finding: {got}");

    toolwright_process_guard::protect_this_process().unwrap();
    assert!(!toolwright_process_guard::is_dumpable());

    // measured on this machine: for a root child, non-dumpable alone is not enough (root has
    // CAP_SYS_PTRACE); for a child of an ordinary user it is
    let got = output(probe().spawn().unwrap()).await;
    if root {
        assert!(
            got.contains(SECRET),
            "root with CAP_SYS_PTRACE still reads: {got}"
        );
    } else {
        assert!(!got.contains(SECRET), "{got}");
    }

    // a guarded child (which loses CAP_SYS_PTRACE) reads nothing
    let (child, _guard) = toolwright_process_guard::spawn(&mut probe()).unwrap();
    let got = output(child).await;
    assert!(!got.contains(SECRET), "{got}");
    assert!(!got.contains("MEM-READ"), "{got}");
    assert!(got.contains("Permission denied"), "{got}");
    assert!(!got.contains("r-xp"), "no memory map either: {got}");
}
