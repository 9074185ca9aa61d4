//! Cost of one sandboxed skill call, spawn to result, against an unsandboxed spawn of the same
//! program: `cat` (a few hundred microseconds bare, so the sandbox's own part shows) and the
//! Python `echo` fixture (what a typical skill pays in all).
//!
//! The container cases: `sandboxed_cat` is a call whose container was made ahead of time, as
//! in an agent, where a model turn separates calls (each iteration first waits, untimed, until
//! bwrap has finished making the container and waits on its start pipe — a model turn takes
//! longer); `sandboxed_cat_back_to_back` calls without a pause, so a call may
//! find its container still being made; `sandboxed_cat_cold` makes every container at the call
//! (`ready_containers = 0`). `sandboxed_cat_no_container` is the fallback where bwrap is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::time::Instant;
use toolwright_sandbox::SandboxConfig;
use toolwright_skills::{Sandbox, Skill, load_skills};

fn find(root: &Path, name: &str) -> Skill {
    let (skills, errors) = load_skills(root);
    assert!(errors.is_empty(), "{errors:?}");
    skills.into_iter().find(|s| s.name == name).unwrap()
}

async fn plain(program: &str, args: &[&Path]) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        // The same interpreter the sandbox finds (not a pyenv shim on the agent's PATH).
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(br#"{"text":"hello"}"#).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success());
}

fn last_word(skill: &Skill) -> String {
    let w = skill.entry.last().unwrap();
    if w.ends_with(".py") {
        format!("/skill/{w}")
    } else {
        w.clone()
    }
}

/// Whether a bwrap whose command ends with `last` is blocked reading its start pipe (descriptor
/// 4, `--block-fd 4`): the container is made and waits. Reads `/proc/PID/syscall` (root).
fn bwrap_waits(last: String) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmd.split(|b| *b == 0).filter(|w| !w.is_empty()).collect();
        words.first().is_some_and(|w| w.ends_with(b"bwrap"))
            && words.last() == Some(&last.as_bytes())
            && words
                .windows(2)
                .any(|w| w == [&b"--block-fd"[..], &b"4"[..]])
            && std::fs::read_to_string(e.path().join("syscall"))
                .is_ok_and(|s| s.starts_with("0 0x4 "))
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let fixtures = crate_dir().join("tests/fixtures/skills");
    let echo = find(&fixtures, "echo");
    let cat = find(&crate_dir().join("benches/skills"), "cat");
    let container = Sandbox::new(SandboxConfig::default());
    let cold = Sandbox::new(SandboxConfig::default().with_ready_containers(0));
    let fallback = Sandbox::new(SandboxConfig::default().with_container(false));
    eprintln!("protections: {}", container.protections());
    let args = json!({"text": "hello"});
    let mut g = c.benchmark_group("skills_call");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    // Untimed: wait until the container of the next call is ready, as a model turn would.
    let timed_when_ready = |sandbox: &Sandbox, skill: &Skill, iters: u64| {
        rt.block_on(async {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let waiting = Instant::now();
                while !(sandbox.is_ready(skill) && bwrap_waits(last_word(skill)))
                    && waiting.elapsed() < Duration::from_secs(5)
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let t = Instant::now();
                sandbox.run(skill, &args).await.unwrap();
                total += t.elapsed();
            }
            total
        })
    };
    rt.block_on(container.run(&cat, &args)).unwrap();
    // The untimed waits make these iterations long: a shorter measurement keeps the run short.
    g.measurement_time(Duration::from_secs(1));
    g.bench_function("sandboxed_cat", |b| {
        b.iter_custom(|iters| timed_when_ready(&container, &cat, iters))
    });
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("sandboxed_cat_back_to_back", |b| {
        b.to_async(&rt)
            .iter(|| async { container.run(&cat, &args).await.unwrap() })
    });
    g.bench_function("sandboxed_cat_cold", |b| {
        b.to_async(&rt)
            .iter(|| async { cold.run(&cat, &args).await.unwrap() })
    });
    g.bench_function("sandboxed_cat_no_container", |b| {
        b.to_async(&rt)
            .iter(|| async { fallback.run(&cat, &args).await.unwrap() })
    });
    g.bench_function("plain_spawn_cat", |b| {
        b.to_async(&rt).iter(|| plain("cat", &[]))
    });
    rt.block_on(container.run(&echo, &args)).unwrap();
    g.measurement_time(Duration::from_secs(1));
    g.bench_function("sandboxed_echo", |b| {
        b.iter_custom(|iters| timed_when_ready(&container, &echo, iters))
    });
    g.measurement_time(Duration::from_secs(5));
    let script = fixtures.join("echo/run.py");
    let script_args = [script.as_path()];
    g.bench_function("plain_spawn_echo", |b| {
        b.to_async(&rt).iter(|| plain("python3", &script_args))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

/// This crate's directory, read at run time: a build reused from another checkout (a shared
/// target dir) would otherwise look for fixtures in that checkout.
fn crate_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}
