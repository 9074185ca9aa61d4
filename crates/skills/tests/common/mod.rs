//! What the sandbox tests share: the fixture skills, a provider over them with its own temp
//! root, and the checks that a call left nothing behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolwright_core::{ToolContext, ToolProvider};
use toolwright_sandbox::SandboxConfig;
use toolwright_skills::{Sandbox, SkillsProvider, load_skills};

pub fn fixtures() -> PathBuf {
    crate_dir().join("tests/fixtures")
}

pub struct Env {
    pub provider: SkillsProvider,
    pub temp: tempfile::TempDir,
}

/// A provider over `fixtures/skills` with this configuration, making its call directories in a
/// temp root of its own (so a test can see that nothing is left there).
pub fn env_with(config: SandboxConfig) -> Env {
    let temp = tempfile::tempdir().unwrap();
    let mut config = config;
    config.temp_root = Some(temp.path().to_path_buf());
    let (skills, errors) = load_skills(&fixtures().join("skills"));
    assert!(errors.is_empty(), "{errors:?}");
    Env {
        provider: SkillsProvider::from_skills(skills, Arc::new(Sandbox::new(config))),
        temp,
    }
}

pub fn env() -> Env {
    env_with(SandboxConfig::default().with_timeout(Duration::from_secs(10)))
}

/// The default configuration, and the same without the container: what holds where bubblewrap
/// is missing.
pub fn both_modes() -> [(&'static str, SandboxConfig); 2] {
    let base = SandboxConfig::default().with_timeout(Duration::from_secs(10));
    [
        ("container", base.clone()),
        ("no container", base.with_container(false)),
    ]
}

impl Env {
    pub async fn call(&self, name: &str, args: Value) -> Result<Value, toolwright_core::ToolError> {
        self.provider
            .call(name, args, ToolContext::new("c1"))
            .await
            .map(|o| o.value)
    }

    /// The host is clean (within 10 s: a dropped call is cleaned up on a blocking thread) once
    /// the containers made ahead of time are stopped, and the sandbox still works.
    pub async fn assert_clean_and_working(&self) {
        self.provider.sandbox().stop_ready();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left: Vec<_> = std::fs::read_dir(self.temp.path()).unwrap().collect();
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "call directories left behind: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = self
            .call("echo", json!({"text": "still alive"}))
            .await
            .unwrap();
        assert_eq!(r["echo"]["text"], "still alive");
    }

    pub fn container(&self) -> bool {
        self.provider.sandbox().protections().container.is_some()
    }

    pub fn root(&self) -> bool {
        self.provider.sandbox().protections().dedicated_uid
    }
}

/// Pids of processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(pid);
            }
        }
    }
    found
}

/// Runs `f` on a thread and fails the test if it takes longer than `limit` (a guard against a
/// hang, not a speed measurement).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("did not finish within {limit:?}"))
}

/// Tests here run as root (CI does): protections that need it are asserted, not skipped.
pub fn require_root(env: &Env, what: &str) {
    if !env.root() {
        panic!("{what} needs root (a dedicated uid): run the tests as root, as CI does");
    }
}

/// Waits (at most 10 s) until `n` containers made ahead of time wait in `sandbox`.
pub async fn wait_ready(sandbox: &Sandbox, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sandbox.ready() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "no container was made ahead of time ({} of {n})",
            sandbox.ready()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Seconds since boot, as the kernel counts process start times.
pub fn uptime_secs() -> f64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// Tests of the container fail, rather than skip, where bubblewrap does not work.
pub fn require_container(env: &Env, what: &str) {
    if !env.container() {
        panic!(
            "{what} needs the bubblewrap container: {}",
            env.provider.sandbox().protections()
        );
    }
}

/// This crate's directory, read at run time: a build reused from another checkout (a shared
/// target dir) would otherwise look for fixtures in that checkout.
fn crate_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}
