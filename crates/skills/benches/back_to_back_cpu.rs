//! CPU per call of skill calls back to back (a script calling a skill in a loop): wall time per
//! call, and the CPU time of this process and of every process it waited for (bwrap, and through
//! it the skill) per call — less sensitive than wall time to other work on the machine. Work the
//! kernel does in its own threads for a call (a network namespace's teardown) is not counted.
//!
//! `cargo bench -p toolwright-skills --bench back_to_back_cpu [-- CALLS]` (default 400 calls, after 20
//! untimed). Prints one line per run.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unsafe_code)]

use std::time::{Duration, Instant};

use serde_json::json;
use toolwright_sandbox::SandboxConfig;
use toolwright_skills::{Sandbox, load_skills};

/// User + system CPU time of this process and of its waited-for descendants.
fn cpu() -> Duration {
    let mut total = Duration::ZERO;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: getrusage writes into `ru`, a zeroed struct of the right type.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(who, &mut ru);
            ru
        };
        for tv in [ru.ru_utime, ru.ru_stime] {
            total +=
                Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64);
        }
    }
    total
}

fn main() {
    let calls: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(400);
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let (skills, errors) = load_skills(&dir.join("benches/skills"));
    assert!(errors.is_empty(), "{errors:?}");
    let cat = skills.into_iter().find(|s| s.name == "cat").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let sandbox = Sandbox::new(SandboxConfig::default());
    let args = json!({"text": "hello"});
    rt.block_on(async {
        for _ in 0..20 {
            sandbox.run(&cat, &args).await.unwrap();
        }
        let (c0, t0) = (cpu(), Instant::now());
        for _ in 0..calls {
            sandbox.run(&cat, &args).await.unwrap();
        }
        let (wall, used) = (t0.elapsed(), cpu() - c0);
        println!(
            "back to back, {calls} calls: {:.2} ms wall per call, {:.2} ms CPU per call (agent + bwrap + skill), {:.2} cores busy",
            wall.as_secs_f64() * 1e3 / f64::from(calls),
            used.as_secs_f64() * 1e3 / f64::from(calls),
            used.as_secs_f64() / wall.as_secs_f64()
        );
    });
}
