//! A fixed loop workload for a profiler (valgrind's callgrind: this VM has no hardware counters,
//! and its clock moves by 2x between runs, so instruction counts are the stable measure of the
//! loop's cost). The run is `loop_overhead`'s `native_run_2_rounds`: an instant in-process model,
//! two rounds, one no-op tool, a fresh `MemoryStore` session per run.
//!
//! `cargo bench -p toolwright-tool-system --bench loop_profile --no-run`, then run the binary as
//! `loop_profile off N`, `loop_profile traced N` (a subscriber that takes every span and
//! exports nothing, set for the scope of the runs as the criterion bench does) or
//! `loop_profile traced-global N` (the same subscriber set as the process's default, as an
//! application does with `init()`) or `loop_profile held N` (a run held for approval, then
//! approved and resumed: `loop_overhead`'s `native_run_held_and_resumed`) under `valgrind --tool=callgrind`; the instructions of one
//! run are (IR(2N) - IR(N)) / N. Without arguments (as `cargo bench` runs it) it does nothing.
//!
//! `loop_profile paired N` times tracing off against on by the clock the only way this VM's
//! clock allows: N pairs of batches of 1,000 runs, off and on (a subscriber that takes every
//! span, set for the batch) one right after the other, the order flipped every pair, each batch
//! on a fresh agent; it prints each side's median µs per run and the median of the pairs' ratios.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use toolwright_tool_system::ProtocolKind;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(runs)) = (args.next(), args.next()) else {
        return;
    };
    let runs: u64 = runs.parse().expect("N: a number of runs");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if mode == "paired" {
        paired(&rt, runs);
        return;
    }
    if mode == "held" {
        // `loop_overhead`'s `native_run_held_and_resumed`: the call is held for approval, then
        // approved and the run goes on.
        let agent = common::noop_agent(common::Instant, |b| {
            b.protocol(ProtocolKind::Native)
                .require_approval("noop")
                .approval_key(toolwright_tool_system::ApprovalKey::new([7u8; 32]).unwrap())
        });
        for i in 0..runs {
            rt.block_on(async {
                let id = format!("s{i}");
                let out = agent.run(&id, "go").await.unwrap();
                let held = out.pending_approval.unwrap();
                agent.resume(&id, &[held.calls[0].approve()]).await.unwrap()
            });
        }
        std::process::exit(0);
    }
    let agent = common::noop_agent(common::Instant, |b| b.protocol(ProtocolKind::Native));
    let go = || {
        for i in 0..runs {
            rt.block_on(agent.run(&format!("s{i}"), "go")).unwrap();
        }
    };
    match mode.as_str() {
        "off" => go(),
        "traced" => tracing::subscriber::with_default(tracing_subscriber::registry(), go),
        "traced-global" => {
            tracing::subscriber::set_global_default(tracing_subscriber::registry()).unwrap();
            go()
        }
        other => panic!("mode {other:?}: off, traced, traced-global or paired"),
    }
    // Not the store's teardown (N sessions freed at once): the timed bench never drops it either.
    std::process::exit(0);
}

/// µs per run of one batch of 1,000 runs on a fresh agent, traced or not.
fn batch(rt: &tokio::runtime::Runtime, traced: bool) -> f64 {
    const RUNS: u32 = 1_000;
    let agent = common::noop_agent(common::Instant, |b| b.protocol(ProtocolKind::Native));
    let ids: Vec<String> = (0..RUNS).map(|i| format!("s{i}")).collect();
    let go = || {
        let started = std::time::Instant::now();
        for id in &ids {
            rt.block_on(agent.run(id, "go")).unwrap();
        }
        started.elapsed().as_secs_f64() * 1e6 / f64::from(RUNS)
    };
    if traced {
        tracing::subscriber::with_default(tracing_subscriber::registry(), go)
    } else {
        go()
    }
}

fn paired(rt: &tokio::runtime::Runtime, pairs: u64) {
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    batch(rt, false); // warm-up
    batch(rt, true);
    let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..pairs.max(1) {
        let (a, b) = if pair % 2 == 0 {
            let a = batch(rt, false);
            (a, batch(rt, true))
        } else {
            let b = batch(rt, true);
            (batch(rt, false), b)
        };
        off.push(a);
        on.push(b);
        ratios.push(b / a);
    }
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (best_off, best_on) = (best(&off), best(&on));
    println!(
        "paired: {} pairs of 1000 runs; off median {:.2} µs (best {best_off:.2}), traced median {:.2} µs (best {best_on:.2}); median of the pairs' ratios {:+.1} %, ratio of bests {:+.1} %",
        off.len(),
        median(&mut off),
        median(&mut on),
        (median(&mut ratios) - 1.0) * 100.0,
        (best_on / best_off - 1.0) * 100.0,
    );
}
