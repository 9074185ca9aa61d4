//! `Agent::run` with 360 MCP tools connected against the bare loop (within 2×).
//!
//! `cargo bench -p toolwright-mcp-bridge --bench agent_360`. The model is tool-system's instant in-process
//! bench model (it calls `noop`, then answers), so what differs between the two rows is only
//! what the bridge adds to a run: its advertised tools for the turn (past the budget: the
//! search tool, on every turn), its turn section and the catalog it keeps. The 360 tools are
//! crates/tool-search/fixtures/tools.json, each recorded server a real process of this crate's
//! MCP test server, as in `benches/tool_search.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../tool-system/benches/common/mod.rs"]
mod loop_common;

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use toolwright_mcp_bridge::ToolSearchConfig;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bridge = rt.block_on(common::search::big_bridge(ToolSearchConfig::default()));
    let tools = rt.block_on(bridge.tools()).len();
    assert!(tools >= 360, "the fixture's catalog: {tools} tools");

    let mut g = c.benchmark_group("agent_run");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(2));
    let run = |a: &toolwright_tool_system::Agent, id: String| {
        rt.block_on(a.run(&id, "go")).unwrap();
    };
    g.bench_function("bare_2_rounds", |b| {
        b.iter_custom(|iters| {
            loop_common::fresh_runs(
                iters,
                || loop_common::noop_agent(loop_common::Instant, |b| b),
                run,
            )
        })
    });
    g.bench_function("with_360_mcp_tools_2_rounds", |b| {
        b.iter_custom(|iters| {
            loop_common::fresh_runs(
                iters,
                || {
                    loop_common::noop_agent(loop_common::Instant, |b| {
                        b.provider(Arc::new(bridge.clone()))
                            .turn_sections(Arc::new(bridge.clone()))
                    })
                },
                run,
            )
        })
    });
    g.finish();
    for s in bridge.services() {
        rt.block_on(bridge.stop(&s.config.name)).unwrap();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
