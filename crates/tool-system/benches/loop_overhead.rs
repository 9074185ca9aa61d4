//! Loop overhead per round: an instant in-process model and a no-op tool, so everything
//! measured is the loop itself (state machine, protocol reader, dispatch with schema
//! validation and a spawned task, session appends, context building). Target: < 20 µs per round.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tool_system::{Agent, ProtocolKind};

fn agent(protocol: ProtocolKind) -> Agent {
    common::noop_agent(common::Instant, |b| b.protocol(protocol))
}

/// Runs a fresh session per iteration for `iters` iterations, on a new agent (an empty
/// in-memory store) every 1,000, and gives the time of the runs alone. One agent for a whole
/// bench would keep every session: hundreds of thousands, a kilobyte each, so that a run would
/// also pay for a growing heap's page faults and a growing map's rehashing — the cost of a
/// store nobody empties, not of the loop (LangChain's round, `benches/langchain`, keeps nothing).
fn fresh_runs(iters: u64, make: impl Fn() -> Agent, run: impl Fn(&Agent, String)) -> Duration {
    const PER_AGENT: u64 = 1_000;
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let agent = make();
        let n = PER_AGENT.min(iters - done);
        let started = std::time::Instant::now();
        for i in 0..n {
            run(&agent, format!("s{i}"));
        }
        total += started.elapsed();
        done += n;
        // the agent and its sessions are dropped here, outside the timing
    }
    total
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
        b.iter_custom(|iters| fresh_runs(iters, || agent(ProtocolKind::Native), plain))
    });
    // The same run with `noop` held for approval: run → pending (state written), resume with
    // the decision (token checked, state claimed, round appended) → answer.
    let gated = || {
        common::noop_agent(common::Instant, |b| {
            b.protocol(ProtocolKind::Native)
                .require_approval("noop")
                .approval_key(tool_system::ApprovalKey::new([7u8; 32]).unwrap())
        })
    };
    g.bench_function("native_run_held_and_resumed", |b| {
        b.iter_custom(|iters| {
            fresh_runs(iters, gated, |a, id| {
                rt.block_on(async {
                    let out = a.run(&id, "go").await.unwrap();
                    let held = out.pending_approval.unwrap();
                    a.resume(&id, &[held.calls[0].approve()]).await.unwrap()
                });
            })
        })
    });
    // Tracing on (#27). Off is `native_run_2_rounds` above (no subscriber: each span is one
    // callsite check). Then: a subscriber that takes every span and exports nothing (the
    // layers' own cost: spans made, fields recorded, entered and closed); the OpenTelemetry
    // layer making every OpenTelemetry span, with no exporter; and the OTLP/HTTP exporter
    // sending them (batched, from its own thread) to a receiver on 127.0.0.1 that accepts
    // everything.
    let no_exporter = telemetry::Telemetry::without_exporter("bench");
    let sink = otlp_sink();
    let otlp = telemetry::Telemetry::otlp(&sink, "bench").unwrap();
    {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            g.bench_function("native_run_2_rounds_traced_no_exporter", |b| {
                b.iter_custom(|iters| fresh_runs(iters, || agent(ProtocolKind::Native), plain))
            });
        });
    }
    for (name, t) in [
        (
            "native_run_2_rounds_traced_otel_sdk_no_exporter",
            &no_exporter,
        ),
        ("native_run_2_rounds_traced_otlp", &otlp),
    ] {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(t.layer());
        tracing::subscriber::with_default(subscriber, || {
            g.bench_function(name, |b| {
                b.iter_custom(|iters| fresh_runs(iters, || agent(ProtocolKind::Native), plain))
            });
        });
    }
    let dispatcher = native.dispatcher().clone();
    g.bench_function("dispatch_noop_validated", |b| {
        b.iter(|| {
            rt.block_on(dispatcher.dispatch(
                "noop",
                json!({"x": 1}),
                tool_system::ToolContext::new("c"),
            ))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

/// An OTLP/HTTP receiver on 127.0.0.1 that answers every request with an empty 200 (what a
/// trace collector answers an accepted export); returns its base URL. Lives as long as the
/// bench process.
fn otlp_sink() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.to_ascii_lowercase();
                        if let Some(v) = l.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if stream.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}
