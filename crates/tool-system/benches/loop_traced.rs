//! The loop with tracing on against off: the same run as `loop_overhead`'s
//! `native_run_2_rounds` with no subscriber, with a subscriber that takes every span and exports
//! nothing, with the OpenTelemetry layer and no exporter, and with the OTLP/HTTP exporter
//! sending to a receiver on 127.0.0.1. Behind the feature `bench-traced` (`cargo xtask bench`
//! turns it on), so the tests of tool-system build no OpenTelemetry exporter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
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
    let plain = |a: &Agent, id: String| {
        rt.block_on(a.run(&id, "go")).unwrap();
    };
    // Off, in the same process as the traced runs below.
    g.bench_function("native_run_2_rounds", |b| {
        b.iter_custom(|iters| common::fresh_runs(iters, || agent(ProtocolKind::Native), plain))
    });
    // Tracing on. Off is `native_run_2_rounds` above (no subscriber: each span is one
    // callsite check). Then: a subscriber that takes every span and exports nothing (the
    // layers' own cost: spans made, fields recorded, entered and closed); the OpenTelemetry
    // layer making every OpenTelemetry span, with no exporter; and the OTLP/HTTP exporter
    // sending them (batched, from its own thread) to a receiver on 127.0.0.1 that accepts
    // everything.
    let no_exporter = toolwright_telemetry::Telemetry::without_exporter("bench");
    let sink = otlp_sink();
    let otlp = toolwright_telemetry::Telemetry::otlp(&sink, "bench").unwrap();
    {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            g.bench_function("native_run_2_rounds_traced_no_exporter", |b| {
                b.iter_custom(|iters| {
                    common::fresh_runs(iters, || agent(ProtocolKind::Native), plain)
                })
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
                b.iter_custom(|iters| {
                    common::fresh_runs(iters, || agent(ProtocolKind::Native), plain)
                })
            });
        });
    }
    g.finish();
}

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

criterion_group!(benches, bench);
criterion_main!(benches);
