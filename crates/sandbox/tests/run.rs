//! A real program through the sandbox, with and without the container: stdin in, stdout and
//! stderr out, a failure read as a reason, a time limit, and the frame protocol both ways.
//! bubblewrap is expected here (CI installs it): where it is missing, the container case must
//! be refused with what to install, and under `CI` its absence is a failure, not a skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use serde_json::{Value, json};
use toolwright_sandbox::{FrameHandler, FrameReply, Program, RunError, Sandbox, SandboxConfig};

/// A program directory anyone may read (as root calls run as a uid of their own).
fn program_dir(script: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("run.sh"), script).unwrap();
    for (p, mode) in [
        (dir.path().to_path_buf(), 0o755),
        (dir.path().join("run.sh"), 0o644),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    dir
}

/// The sandboxes to try: with the container (where bubblewrap works) and without.
fn sandboxes(temp: &std::path::Path) -> Vec<(&'static str, Sandbox)> {
    let mut base = SandboxConfig::default().with_timeout(Duration::from_secs(10));
    base.temp_root = Some(temp.to_path_buf());
    let container = Sandbox::new(base.clone());
    let mut out = Vec::new();
    match &container.protections().container {
        Some(_) => out.push(("container", container)),
        None if std::env::var_os("CI").is_some() => {
            panic!("no container under CI: {}", container.protections())
        }
        None => {
            let why = container.protections().refused.clone().unwrap_or_default();
            assert!(
                why.contains("bubblewrap"),
                "the refusal says what to install: {why}"
            );
            eprintln!("bubblewrap cannot make a container here: only the case without it runs");
        }
    }
    let without = Sandbox::new(base.with_container(false).allow_without_container(true));
    if without.protections().refused.is_none() {
        out.push(("no container", without));
    }
    assert!(!out.is_empty(), "neither mode can run here");
    out
}

#[tokio::test]
async fn a_program_gets_its_stdin_and_returns_what_it_printed() {
    let dir = program_dir("read line; echo \"got $line\"; echo note >&2; pwd\n");
    let temp = tempfile::tempdir().unwrap();
    for (mode, sandbox) in sandboxes(temp.path()) {
        let p = Program::new("echo", dir.path(), ["sh", "run.sh"]);
        let out = sandbox.run(&p, b"hello\n").await.unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let mut lines = stdout.lines();
        assert_eq!(lines.next(), Some("got hello"), "{mode}");
        let pwd = lines.next().unwrap();
        assert!(
            pwd == "/work" || pwd.ends_with("/work"),
            "{mode}: a fresh working directory, not {pwd}"
        );
        assert_eq!(String::from_utf8(out.stderr).unwrap(), "note\n", "{mode}");
    }
}

#[tokio::test]
async fn a_failure_says_why_and_a_time_limit_stops_it() {
    let dir = program_dir("echo broken >&2; exit 3\n");
    let temp = tempfile::tempdir().unwrap();
    for (mode, sandbox) in sandboxes(temp.path()) {
        let p = Program::new("bad", dir.path(), ["sh", "run.sh"]);
        let e = sandbox.run(&p, b"").await.unwrap_err();
        match &e {
            RunError::Failed { name, reason } => {
                assert_eq!(name, "bad");
                assert!(
                    reason.contains("status 3") && reason.contains("broken"),
                    "{mode}: {reason}"
                );
            }
            other => panic!("{mode}: {other:?}"),
        }
        let slow =
            Program::new("slow", dir.path(), ["sleep", "30"]).with_timeout(Duration::from_secs(1));
        let started = std::time::Instant::now();
        let e = sandbox.run(&slow, b"").await.unwrap_err();
        assert!(
            matches!(e, RunError::Timeout { secs: 1, .. }),
            "{mode}: {e:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{mode}");
        assert!(
            e.to_string().contains("SandboxConfig::timeout"),
            "says what to raise: {e}"
        );
        let empty = Program::new("empty", dir.path(), Vec::<String>::new());
        let e = sandbox.run(&empty, b"").await.unwrap_err();
        assert!(matches!(e, RunError::Spawn { .. }), "{mode}: {e:?}");
    }
}

/// Answers `{"add": [a, b]}` with the sum; keeps the rest.
#[derive(Default)]
struct Adder(Vec<Value>);

#[async_trait::async_trait]
impl FrameHandler for Adder {
    async fn frame(&mut self, frame: Value) -> FrameReply {
        self.0.push(frame.clone());
        match (frame["add"][0].as_i64(), frame["add"][1].as_i64()) {
            (Some(a), Some(b)) => FrameReply::Answer(json!(a + b)),
            _ => FrameReply::Continue,
        }
    }
}

#[tokio::test]
async fn an_interactive_program_converses_over_frames() {
    // Reads its input line, asks for a sum, reports the answer it got.
    let dir = program_dir(
        "read input\necho '{\"add\": [40, 2]}'\nread sum\necho \"{\\\"input\\\": $input, \\\"sum\\\": $sum}\"\n",
    );
    let temp = tempfile::tempdir().unwrap();
    for (mode, sandbox) in sandboxes(temp.path()) {
        let p = Program::new("adder", dir.path(), ["sh", "run.sh"]);
        let mut h = Adder::default();
        sandbox
            .run_interactive(&p, &json!({"start": 1}), &mut h)
            .await
            .unwrap();
        assert_eq!(
            h.0,
            [
                json!({"add": [40, 2]}),
                json!({"input": {"start": 1}, "sum": 42})
            ],
            "{mode}"
        );
        // A line that is not JSON ends the call, and says what the protocol is.
        let bad = program_dir("echo hello\n");
        let p = Program::new("chatty", bad.path(), ["sh", "run.sh"]);
        let e = sandbox
            .run_interactive(&p, &json!(null), &mut Adder::default())
            .await
            .unwrap_err();
        assert!(matches!(e, RunError::NotJson { .. }), "{mode}: {e:?}");
        assert!(e.to_string().contains("one JSON value per line"), "{e}");
    }
}
