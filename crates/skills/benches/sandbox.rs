//! Cost of one sandboxed skill call, spawn to result, against an unsandboxed spawn of the same
//! program (the floor set by fork/exec and the Python interpreter).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use skills::{Sandbox, SandboxConfig, load_skills};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills");
    let (skills, _) = load_skills(&root);
    let echo = skills.into_iter().find(|s| s.name == "echo").unwrap();
    let sandbox = Sandbox::new(SandboxConfig::default());
    eprintln!("protections: {}", sandbox.protections());
    let args = json!({"text": "hello"});
    let mut g = c.benchmark_group("skills_call");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("sandboxed_echo", |b| {
        b.to_async(&rt)
            .iter(|| async { sandbox.run(&echo, &args).await.unwrap() })
    });
    let script = root.join("echo/run.py");
    g.bench_function("plain_spawn_echo", |b| {
        b.to_async(&rt).iter(|| async {
            use tokio::io::AsyncWriteExt;
            let mut child = tokio::process::Command::new("python3")
                .arg(&script)
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
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
