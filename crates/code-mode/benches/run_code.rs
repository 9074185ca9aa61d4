//! Cost of one `run_code` call, request to result, with the real sandbox and dispatcher:
//! `empty_script` (`pass`: the container, the Python start-up and the runner — what code mode
//! pays per script before the script's own work), `two_tool_calls` (two round trips over the
//! pipes and through the dispatcher) and, for comparison, `bare_python` (`python3 -I -S -c
//! pass` spawned without a sandbox). Each iteration first waits, untimed, for the container made
//! ahead of time, as in an agent where a model turn separates scripts.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolwright_code_mode::{CodeModeProvider, RUN_CODE};
use toolwright_core::{ToolContext, ToolProvider};
use toolwright_tool_system::{Dispatcher, FnTool, ToolRegistry};

fn provider() -> CodeModeProvider {
    let mut r = ToolRegistry::new();
    r.register(FnTool::new(
        "add",
        "Add two numbers.",
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        |args, _| async move { Ok(json!(args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0))) },
    ))
    .unwrap();
    CodeModeProvider::builder(Arc::new(Dispatcher::from_registry(r)))
        .build()
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let p = rt.block_on(async { provider() });
    let mut g = c.benchmark_group("code_mode");
    g.sample_size(30).measurement_time(Duration::from_secs(8));
    for (name, code) in [
        ("empty_script", "pass"),
        ("two_tool_calls", "print(add(a=1, b=2) + add(a=3, b=4))"),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        // A model turn separates scripts: the next container is made by then.
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        let t = Instant::now();
                        let out = p
                            .call(RUN_CODE, json!({"code": code}), ToolContext::new("b"))
                            .await
                            .unwrap();
                        total += t.elapsed();
                        assert!(out.value["calls"].is_array());
                    }
                    total
                })
            })
        });
    }
    g.bench_function("bare_python", |b| {
        b.iter(|| {
            let s = std::process::Command::new("/usr/bin/python3")
                .args(["-I", "-S", "-c", "pass"])
                .status()
                .unwrap();
            assert!(s.success());
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
