//! Containers made ahead of time: the container of a skill's next call is
//! made while nothing needs it, so bubblewrap's set-up is off the call's path. These tests prove
//! that this takes nothing away: each container serves one call (its own namespaces, uid and
//! tmpfs; nothing of an earlier call in it), the call's arguments, environment and time limit
//! are the call's own, and nothing of a waiting container outlives the sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{
    Env, env_with, fixtures, processes_with, require_container, require_root, uptime_secs,
    wait_ready,
};
use serde_json::{Value, json};
use toolwright_core::{ToolContext, ToolProvider};
use toolwright_sandbox::SandboxConfig;
use toolwright_skills::{LoadOutcome, SkillsProvider};

fn env() -> Env {
    let e = env_with(SandboxConfig::default().with_timeout(Duration::from_secs(10)));
    require_container(&e, "containers made ahead of time");
    e
}

async fn probe(e: &Env, tag: &str) -> Value {
    e.call(
        "container-probe",
        json!({"tag": tag, "env": ["SKILL_READY_VAR"]}),
    )
    .await
    .unwrap()
}

fn nothing_seen(r: &Value) -> bool {
    r["seen"]
        .as_object()
        .unwrap()
        .values()
        .all(|v| v == &json!([]))
}

#[tokio::test]
async fn s2_a_container_made_ahead_serves_one_call_and_the_next_sees_nothing_of_it() {
    let e = env();
    let sandbox = e.provider.sandbox();
    let first = probe(&e, "first").await;
    assert!(nothing_seen(&first), "{first}");
    wait_ready(sandbox, 1).await;
    // The next call's container is older than the call: it was made ahead of time.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let called_at = uptime_secs();
    let second = probe(&e, "second").await;
    let made_at = second["pid1_start_secs"].as_f64().unwrap();
    assert!(
        made_at < called_at - 0.1,
        "the second call's container was made at {made_at} s, the call began at {called_at} s"
    );
    // …and it is a container of its own: made after the first one, with another uid. (Namespace
    // ids are compared only between containers that live at the same time, below: the kernel
    // reuses the number of a namespace that is gone.)
    assert!(
        made_at > first["pid1_start_secs"].as_f64().unwrap(),
        "{first} / {second}"
    );
    if e.root() {
        assert_ne!(first["uid"], second["uid"], "{first} / {second}");
    }
    // Nothing the first call left — files in /work, /tmp, /dev/shm, a System V segment — is
    // in the second call's container.
    assert!(
        nothing_seen(&second),
        "the second call saw what the first left: {second}"
    );
    // The container that waited was taken; the one for the call after is made again.
    wait_ready(sandbox, 1).await;
    assert_eq!(sandbox.ready(), 1, "one container per skill waits");
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_each_container_is_handed_to_one_call_even_when_calls_overlap() {
    let e = env();
    probe(&e, "warm-up").await;
    wait_ready(e.provider.sandbox(), 1).await;
    let (a, b, c, d) = tokio::join!(
        probe(&e, "overlap-0"),
        probe(&e, "overlap-1"),
        probe(&e, "overlap-2"),
        probe(&e, "overlap-3")
    );
    let results = [a, b, c, d];
    let mounts: BTreeSet<String> = results
        .iter()
        .map(|r| r["ns"]["mnt"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(mounts.len(), 4, "two calls shared a container: {results:?}");
    let ipcs: BTreeSet<_> = results.iter().map(|r| r["ns"]["ipc"].to_string()).collect();
    assert_eq!(
        ipcs.len(),
        4,
        "two calls shared an IPC namespace: {results:?}"
    );
    for r in &results {
        assert!(nothing_seen(r), "a call saw another's files: {r}");
    }
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_a_calls_time_limit_counts_from_the_call_not_from_when_its_container_was_made() {
    let e = env_with(SandboxConfig::default().with_timeout(Duration::from_secs(1)));
    require_container(&e, "containers made ahead of time");
    probe(&e, "first").await;
    wait_ready(e.provider.sandbox(), 1).await;
    // The waiting container is now older than the call's whole time limit.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = probe(&e, "late").await;
    assert_eq!(r["args"]["tag"], "late");
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_arguments_and_granted_environment_are_the_calls_own() {
    let e = env_with(
        SandboxConfig::default()
            .with_timeout(Duration::from_secs(10))
            .with_env_grant("SKILL_READY_VAR"),
    );
    require_container(&e, "containers made ahead of time");
    // SAFETY: no other test of this binary reads or writes this variable.
    unsafe { std::env::set_var("SKILL_READY_VAR", "one") };
    let r = probe(&e, "a").await;
    assert_eq!(r["env"]["SKILL_READY_VAR"], "one", "{r}");
    wait_ready(e.provider.sandbox(), 1).await;
    // The operator changed the granted value after the next container was made: the call gets
    // today's value (in a container made for it), not the one of when the container was made.
    unsafe { std::env::set_var("SKILL_READY_VAR", "two") };
    let r = probe(&e, "b").await;
    assert_eq!(r["env"]["SKILL_READY_VAR"], "two", "{r}");
    assert_eq!(r["args"], json!({"tag": "b", "env": ["SKILL_READY_VAR"]}));
    wait_ready(e.provider.sandbox(), 1).await;
    let r = probe(&e, "c").await;
    assert_eq!(r["env"]["SKILL_READY_VAR"], "two", "{r}");
    assert_eq!(r["args"]["tag"], "c");
    e.assert_clean_and_working().await;
}

#[tokio::test]
async fn s2_dropping_the_sandbox_kills_its_waiting_containers_and_removes_their_directories() {
    let e = env();
    probe(&e, "first").await;
    wait_ready(e.provider.sandbox(), 1).await;
    // The waiting bwrap names the call's directory (root) or the skill (without root) in its
    // command line.
    let needle = if e.root() {
        e.temp.path().to_string_lossy().into_owned()
    } else {
        fixtures()
            .join("skills/container-probe")
            .to_string_lossy()
            .into_owned()
    };
    assert!(
        !processes_with(&needle).is_empty(),
        "no waiting container found by {needle}"
    );
    let Env { provider, temp } = e;
    drop(provider);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(&needle);
        let dirs: Vec<_> = std::fs::read_dir(temp.path()).unwrap().collect();
        if left.is_empty() && dirs.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after the sandbox was dropped: processes {left:?}, directories {dirs:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn s2_without_ready_containers_every_call_makes_its_own() {
    let e = env_with(
        SandboxConfig::default()
            .with_timeout(Duration::from_secs(10))
            .with_ready_containers(0),
    );
    require_container(&e, "the container");
    let a = probe(&e, "a").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(e.provider.sandbox().ready(), 0);
    let b = probe(&e, "b").await;
    // A container of its own: made after the first one. (Not compared by namespace id: the
    // kernel reuses the number of a namespace that is gone, and the first container is gone —
    // CI failed once on exactly that.)
    assert!(
        b["pid1_start_secs"].as_f64().unwrap() > a["pid1_start_secs"].as_f64().unwrap(),
        "{a} / {b}"
    );
    assert!(nothing_seen(&b), "{b}");
    e.assert_clean_and_working().await;
}

/// A skills root with a copy of `container-probe` whose `run.py` has `mode`.
fn probe_root(mode: u32) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("container-probe");
    std::fs::create_dir(&dir).unwrap();
    for f in ["SKILL.md", "run.py"] {
        std::fs::copy(
            fixtures().join("skills/container-probe").join(f),
            dir.join(f),
        )
        .unwrap();
    }
    std::fs::set_permissions(dir.join("run.py"), std::fs::Permissions::from_mode(mode)).unwrap();
    root
}

#[tokio::test]
async fn s2_a_skill_file_the_sandbox_uid_cannot_read_is_refused_at_load_with_the_chmod_that_fixes_it()
 {
    let root = probe_root(0o600);
    let (provider, errors) = SkillsProvider::load(root.path(), SandboxConfig::default());
    let env = Env {
        provider,
        temp: tempfile::tempdir().unwrap(),
    };
    require_root(&env, "a dedicated sandbox uid");
    let file = root.path().join("container-probe/run.py");
    let e = errors
        .iter()
        .find(|e| e.file == file)
        .unwrap_or_else(|| panic!("no report for {}: {errors:?}", file.display()));
    assert!(matches!(e.outcome, LoadOutcome::Rejected), "{e}");
    let text = e.to_string();
    assert!(text.contains("mode 0600"), "{text}");
    assert!(
        text.contains(&format!("chmod o+r {}", file.display())),
        "{text}"
    );
    assert_eq!(env.provider.skills().count(), 0, "an unusable skill loaded");

    // Once readable, it loads and runs.
    let root = probe_root(0o644);
    let (provider, errors) = SkillsProvider::load(root.path(), SandboxConfig::default());
    assert!(
        errors
            .iter()
            .all(|e| !matches!(e.outcome, LoadOutcome::Rejected)),
        "{errors:?}"
    );
    assert_eq!(provider.skills().count(), 1);
    let r = provider
        .call(
            "container-probe",
            json!({"tag": "readable"}),
            ToolContext::new("c1"),
        )
        .await
        .unwrap();
    assert_eq!(r.value["args"]["tag"], "readable");
}

/// calls of one skill back to back (a script calling a skill in a loop) each take
/// the container being made for them instead of making their own beside it: only the first
/// call makes one. (The time this saves is in `cargo bench -p toolwright-skills --bench sandbox`,
/// `sandboxed_cat_back_to_back`.)
#[tokio::test]
async fn s2_calls_back_to_back_take_the_container_being_made_for_them() {
    let e = env();
    for i in 0..6 {
        let r = probe(&e, &format!("loop-{i}")).await;
        assert!(nothing_seen(&r), "{r}");
    }
    assert_eq!(e.provider.sandbox().containers_used(), (5, 1));
    e.assert_clean_and_working().await;
}
