//! A fixed loop workload for a profiler (valgrind's callgrind: this VM has no hardware counters,
//! and its clock moves by 2x between runs, so instruction counts are the stable measure of the
//! loop's cost). The run is `loop_overhead`'s `native_run_2_rounds`: an instant in-process model,
//! two rounds, one no-op tool, a fresh `MemoryStore` session per run.
//!
//! `cargo bench -p tool-system --bench loop_profile --no-run`, then run the binary as
//! `loop_profile off N`, `loop_profile traced N` (a subscriber that takes every span and
//! exports nothing, set for the scope of the runs as the criterion bench does) or
//! `loop_profile traced-global N` (the same subscriber set as the process's default, as an
//! application does with `init()`) under `valgrind --tool=callgrind`; the instructions of one
//! run are (IR(2N) - IR(N)) / N. Without arguments (as `cargo bench` runs it) it does nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use tool_system::ProtocolKind;

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
        other => panic!("mode {other:?}: off, traced or traced-global"),
    }
    // Not the store's teardown (N sessions freed at once): the timed bench never drops it either.
    std::process::exit(0);
}
