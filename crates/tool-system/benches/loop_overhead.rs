//! Loop overhead per round: an instant in-process model and a no-op tool, so everything
//! measured is the loop itself (state machine, protocol reader, dispatch with schema
//! validation and a spawned task, session appends, context building). Target: < 20 µs per round.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolwright_tool_system::{Agent, ProtocolKind};

fn agent(protocol: ProtocolKind) -> Agent {
    common::noop_agent(common::Instant, |b| b.protocol(protocol))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("tool_loop");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    let native = agent(ProtocolKind::Native);
    let plain = |a: &Agent, id: String| {
        rt.block_on(a.run(&id, "go")).unwrap();
    };
    // one run = 2 rounds (tool round + answer); a fresh session each run
    g.bench_function("native_run_2_rounds", |b| {
        b.iter_custom(|iters| common::fresh_runs(iters, || agent(ProtocolKind::Native), plain))
    });
    // The same run with `noop` held for approval: run → pending (state written), resume with
    // the decision (token checked, state claimed, round appended) → answer.
    let gated = || {
        common::noop_agent(common::Instant, |b| {
            b.protocol(ProtocolKind::Native)
                .require_approval("noop")
                .approval_key(toolwright_tool_system::ApprovalKey::new([7u8; 32]).unwrap())
        })
    };
    g.bench_function("native_run_held_and_resumed", |b| {
        b.iter_custom(|iters| {
            common::fresh_runs(iters, gated, |a, id| {
                rt.block_on(async {
                    let out = a.run(&id, "go").await.unwrap();
                    let held = out.pending_approval.unwrap();
                    a.resume(&id, &[held.calls[0].approve()]).await.unwrap()
                });
            })
        })
    });
    // Tracing on against off: `benches/loop_traced.rs` (feature `bench-traced`: the OTLP
    // exporter is not built for the tests).
    let dispatcher = native.dispatcher().clone();
    g.bench_function("dispatch_noop_validated", |b| {
        b.iter(|| {
            rt.block_on(dispatcher.dispatch(
                "noop",
                json!({"x": 1}),
                toolwright_core::ToolContext::new("c"),
            ))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
