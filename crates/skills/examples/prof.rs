#![allow(clippy::unwrap_used, missing_docs)]
use serde_json::json;
use skills::{Sandbox, SandboxConfig, load_skills};
use std::path::Path;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let ready: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let (skills, _) = load_skills(&Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/skills"));
    let cat = skills.into_iter().find(|s| s.name == "cat").unwrap();
    let sb = Sandbox::new(SandboxConfig::default().with_ready_containers(ready));
    let args = json!({"text": "hello"});
    sb.run(&cat, &args).await.unwrap();
    let mut times = vec![];
    for _ in 0..n {
        let t = Instant::now();
        while ready > 0 && sb.ready() == 0 && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        let t = Instant::now();
        sb.run(&cat, &args).await.unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut plain = vec![];
    for _ in 0..n {
        use tokio::io::AsyncWriteExt;
        let t = Instant::now();
        let mut child = tokio::process::Command::new("cat")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(br#"{"text":"hello"}"#).await.unwrap();
        drop(stdin);
        child.wait_with_output().await.unwrap();
        plain.push(t.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    plain.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "plain min {:.2} median {:.2} p90 {:.2} ms",
        plain[0],
        plain[n / 2],
        plain[n * 9 / 10]
    );
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "min {:.2} median {:.2} p90 {:.2} ms",
        times[0],
        times[n / 2],
        times[n * 9 / 10]
    );
}
