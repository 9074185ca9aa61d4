//! S1/S2: skills load from directories and run in a sandbox that hostile skills cannot escape.
//! Each hostile test names the protection that stops it, then checks that the host is clean
//! (no leftover process, no leftover directory) and that the next call works.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;

use std::time::Duration;

use common::{env, env_with, fixtures, processes_with};
use serde_json::{Value, json};
use toolwright_core::{ToolErrorKind, ToolProvider};
use toolwright_sandbox::SandboxConfig;
use toolwright_skills::{SkillError, load_skills};

#[test]
fn s1_loading_reports_bad_skills_with_file_and_line_and_loads_the_rest() {
    let (skills, errors) = load_skills(&fixtures().join("broken"));
    assert_eq!(
        skills.iter().map(|s| &*s.name).collect::<Vec<_>>(),
        ["echo"]
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    let yaml = errors
        .iter()
        .find(|e| e.file.ends_with("bad-yaml/SKILL.md"))
        .unwrap();
    assert!(yaml.line >= 4, "line of the broken YAML: {yaml}");
    let name = errors
        .iter()
        .find(|e| e.file.ends_with("bad-name/SKILL.md"))
        .unwrap();
    assert_eq!(name.line, 2);
    assert!(name.message.contains("not a valid tool name"), "{name}");
}

#[tokio::test]
async fn s1_each_skill_becomes_a_tool() {
    let e = env();
    let tools = e.provider.list().await;
    let echo = tools.iter().find(|t| &*t.name == "echo").unwrap();
    assert_eq!(echo.parameters["required"][0], "text");
    assert!(tools.iter().all(|t| t.parameters["type"] == "object"));
    let r = e.call("echo", json!({"text": "你好"})).await.unwrap();
    assert_eq!(r["echo"]["text"], "你好");
    let err = e.call("nope", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::NotFound);
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_protections_in_force_are_reported() {
    let e = env();
    let p = e.provider.sandbox().protections();
    let text = p.to_string();
    for boundary in [
        "container:",
        "private filesystem:",
        "IPC namespace:",
        "PID namespace:",
        "dedicated uid",
        "no network:",
        "disk total:",
        "host unix sockets unreachable:",
        "user namespaces refused:",
        "inherited fds closed",
    ] {
        assert!(text.contains(boundary), "{boundary} missing from: {text}");
    }
    // This project's machines (and CI) run as root, with bubblewrap installed by `cargo xtask
    // test`, on a kernel with Landlock: every boundary is in force.
    if std::env::var("CI").is_ok() {
        assert!(
            p.container.is_some()
                && p.mount_namespace
                && p.ipc_namespace
                && p.pid_namespace
                && p.dedicated_uid
                && p.no_network
                && p.disk_total.is_some()
                && p.host_sockets_unreachable
                && p.user_namespaces_refused,
            "{text}"
        );
    }
}

#[tokio::test]
async fn s2_runs_in_a_fresh_directory_as_a_dedicated_uid() {
    for (mode, config) in common::both_modes() {
        let e = env_with(config);
        let a = e.call("prober", json!({})).await.unwrap();
        let b = e.call("prober", json!({})).await.unwrap();
        assert_eq!(a["leftovers"], json!([]), "{mode}: {a}");
        assert_eq!(
            b["leftovers"],
            json!([]),
            "{mode}: the second call saw files of the first: {b}"
        );
        if e.root() {
            assert_ne!(a["uid"], 0, "{mode}: skills never run as root");
        }
        e.assert_clean_and_working().await;
    }
}

#[tokio::test]
async fn s2_infinite_loop_is_stopped_by_the_timeout() {
    let e = env();
    let err = e.call("infinite-loop", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Timeout);
    assert_eq!(
        err.message,
        "skill infinite-loop timed out after 1 s and was stopped"
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_cpu_limit_stops_a_busy_loop_even_without_a_wall_clock_timeout() {
    let mut cfg = SandboxConfig::default().with_timeout(Duration::from_secs(20));
    cfg.cpu_seconds = 1;
    let e = env_with(cfg);
    let sandbox = e.provider.sandbox();
    let (skills, _) = load_skills(&fixtures().join("skills"));
    let mut skill = skills
        .into_iter()
        .find(|s| s.name == "infinite-loop")
        .unwrap();
    skill.timeout = None;
    let err = sandbox.run(&skill, &json!({})).await.unwrap_err();
    assert!(
        matches!(&err, SkillError::Failed { reason, .. } if reason.contains("CPU")),
        "{err}"
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_fork_bomb_is_refused_by_the_process_limit() {
    let e = env_with(
        SandboxConfig::default()
            .with_timeout(Duration::from_secs(20))
            .with_max_processes(16),
    );
    if !e.provider.sandbox().protections().dedicated_uid {
        panic!("the process limit needs a dedicated uid: run the tests as root (CI does)");
    }
    let r = e.call("fork-bomb", json!({})).await.unwrap();
    let forked = r["forked"].as_u64().unwrap();
    assert!(
        forked < 16,
        "the limit of 16 processes let {forked} forks through"
    );
    assert!(
        r["refused"]
            .as_str()
            .unwrap()
            .contains("Resource temporarily unavailable"),
        "{r}"
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_sigterm_ignoring_skill_and_its_escaped_children_are_all_killed() {
    let e = env();
    let err = e.call("stubborn", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Timeout);
    // Children in the group (sleep 986) and ones that left it with setsid (sleep 987).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        processes_with("sleep 987").is_empty(),
        "escaped children survived"
    );
    assert!(
        processes_with("sleep 986").is_empty(),
        "group children survived"
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_a_gigabyte_on_stdout_is_cut_at_the_output_limit() {
    let e = env();
    let err = e.call("firehose", json!({})).await.unwrap_err();
    assert_eq!(
        err.message,
        "skill firehose: stdout output exceeded 1 MiB; the skill was stopped"
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_agent_secrets_are_not_inherited_unless_allow_listed() {
    // SAFETY: set before any sandbox call in this test; the variables are unique to it.
    unsafe {
        std::env::set_var("OPENAI_API_KEY", "sk-must-not-leak");
        std::env::set_var("SKILL_ALLOWED_VAR", "allowed");
    }
    let e = env_with(
        SandboxConfig::default()
            .with_timeout(Duration::from_secs(10))
            .with_env_grant("SKILL_ALLOWED_VAR"),
    );
    let r = e.call("secret-reader", json!({})).await.unwrap();
    assert_eq!(r["OPENAI_API_KEY"], Value::Null);
    assert_eq!(r["SKILL_ALLOWED_VAR"], "allowed");
    let names: Vec<&str> = r["all"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut expected = vec![
        "HOME",
        "LANG",
        "PATH",
        "SKILL_ALLOWED_VAR",
        "SKILL_DIR",
        "TMPDIR",
    ];
    if e.container() {
        expected.insert(3, "PWD"); // bwrap's --chdir sets it: "/work"
    }
    assert_eq!(names, expected);
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_writes_outside_the_working_directory_are_refused() {
    let e = env();
    let outside = tempfile::tempdir().unwrap();
    // World-writable, so only Landlock (not file permissions) can stop the write.
    std::fs::set_permissions(
        outside.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let target = outside.path().join("escaped.txt");
    let targets = [
        target.to_string_lossy().into_owned(),
        "/tmp/skill-escape.txt".into(),
    ];
    let r = e
        .call("escaper", json!({"targets": targets}))
        .await
        .unwrap();
    // Refused, or (in a container, whose /tmp is its own tmpfs) written where the host never
    // sees it: either way nothing reaches the host.
    for t in &targets {
        let outcome = r[t].as_str().unwrap();
        assert!(outcome.starts_with("refused") || e.container(), "{t}: {r}");
    }
    assert!(!target.exists());
    assert!(!std::path::Path::new("/tmp/skill-escape.txt").exists());
    assert_eq!(r["inside"], "ok", "writing inside its own directory works");
    let own = r
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.ends_with("run.py"))
        .unwrap()
        .1;
    assert!(
        own.as_str().unwrap().starts_with("refused"),
        "the skill cannot modify itself: {own}"
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_no_network() {
    let e = env();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = e.call("networker", json!({"port": port})).await.unwrap();
    assert_eq!(r["connected"], false, "{r}");
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_non_json_output_is_a_readable_error() {
    let e = env();
    let err = e.call("chatty", json!({})).await.unwrap_err();
    assert!(
        err.message
            .starts_with("skill chatty printed output that is not JSON"),
        "{}",
        err.message
    );
    assert!(err.message.contains("Here is your answer"));
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_failing_skill_reports_status_and_stderr() {
    let e = env();
    let err = e.call("crasher", json!({})).await.unwrap_err();
    assert_eq!(
        err.message,
        "skill crasher failed: exited with status 3: Traceback: something broke"
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_dropping_a_call_midway_kills_it_and_cleans_up() {
    let e = env();
    let call = e.call("stubborn", json!({}));
    let _ = tokio::time::timeout(Duration::from_millis(400), call).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(processes_with("sleep 987").is_empty());
    assert!(processes_with("sleep 986").is_empty());
    e.assert_clean_and_working().await;
}

// Interactive calls (`Sandbox::run_interactive`, code mode's two-way channel).

const TALKER: &str = r#"import json, sys, time
req = json.loads(sys.stdin.readline())
mode = req["mode"]
if mode == "sum":
    total = 0
    for x in req["numbers"]:
        print(json.dumps({"double": x}), flush=True)
        total += json.loads(sys.stdin.readline())
    print(json.dumps({"total": total}), flush=True)
elif mode == "garbage":
    print("this is not json", flush=True)
    time.sleep(30)
elif mode == "flood":
    while True:
        print(json.dumps({"ping": "x" * 1000}), flush=True)
elif mode == "exit":
    sys.stderr.write("bad input\n")
    sys.exit(3)
"#;

/// A skill speaking frames, in a root of its own readable by the sandbox's uid.
fn talker() -> (tempfile::TempDir, toolwright_skills::Skill) {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("talker");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("talk.py"), TALKER).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: talker\ndescription: Talks in frames.\nentry: python3 talk.py\n---\n",
    )
    .unwrap();
    for (p, mode) in [
        (root.path().to_path_buf(), 0o755),
        (dir.clone(), 0o755),
        (dir.join("talk.py"), 0o644),
        (dir.join("SKILL.md"), 0o644),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let (mut skills, errors) = load_skills(root.path());
    assert!(errors.is_empty(), "{errors:?}");
    (root, skills.remove(0))
}

/// Answers `{"double": x}` with 2x after `delay`; keeps every frame; stops at `stop_after`.
struct Doubler {
    frames: Vec<Value>,
    delay: Duration,
    stop_after: usize,
}

#[async_trait::async_trait]
impl toolwright_sandbox::FrameHandler for Doubler {
    async fn frame(&mut self, frame: Value) -> toolwright_sandbox::FrameReply {
        self.frames.push(frame.clone());
        if self.frames.len() >= self.stop_after {
            return toolwright_sandbox::FrameReply::Stop("enough frames".into());
        }
        tokio::time::sleep(self.delay).await;
        match frame.get("double").and_then(Value::as_i64) {
            Some(x) => toolwright_sandbox::FrameReply::Answer(json!(2 * x)),
            None => toolwright_sandbox::FrameReply::Continue,
        }
    }
}

fn doubler() -> Doubler {
    Doubler {
        frames: Vec::new(),
        delay: Duration::ZERO,
        stop_after: usize::MAX,
    }
}

#[tokio::test]
async fn s2_an_interactive_call_answers_each_frame_and_ends_with_the_program() {
    let e = env();
    let (_root, skill) = talker();
    let mut h = doubler();
    e.provider
        .sandbox()
        .run_interactive(
            &skill,
            &json!({"mode": "sum", "numbers": [1, 2, 3]}),
            &mut h,
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        h.frames,
        [
            json!({"double": 1}),
            json!({"double": 2}),
            json!({"double": 3}),
            json!({"total": 12})
        ]
    );
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_an_interactive_call_ends_on_stop_bad_frames_floods_exit_status_and_its_time_limit() {
    let e = env_with(
        SandboxConfig::default()
            .with_timeout(Duration::from_secs(2))
            .with_output_limit(64 << 10),
    );
    let (_root, skill) = talker();
    let sandbox = e.provider.sandbox();
    let sum = json!({"mode": "sum", "numbers": [1, 2, 3]});

    let mut h = Doubler {
        stop_after: 2,
        ..doubler()
    };
    let err = sandbox
        .run_interactive(&skill, &sum, &mut h)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "skill talker was stopped: enough frames",
        "{err:?}"
    );

    let err = sandbox
        .run_interactive(&skill, &json!({"mode": "garbage"}), &mut doubler())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SkillError::NotJson { head, .. } if head == "this is not json"),
        "{err:?}"
    );

    let mut h = doubler();
    let err = sandbox
        .run_interactive(&skill, &json!({"mode": "flood"}), &mut h)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            SkillError::OutputTooLarge {
                stream: "stdout",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(h.frames.len() < 70, "{}", h.frames.len());

    let err = sandbox
        .run_interactive(&skill, &json!({"mode": "exit"}), &mut doubler())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("failed: exited with status 3: bad input"),
        "{err}"
    );

    // The time limit covers the handler's work too.
    let mut slow = Doubler {
        delay: Duration::from_secs(60),
        ..doubler()
    };
    let err = sandbox
        .run_interactive(&skill, &sum, &mut slow)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SkillError::Timeout { secs: 2, .. }),
        "{err:?}"
    );
    e.assert_clean_and_working().await;
}
