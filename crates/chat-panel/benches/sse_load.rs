//! SSE under load: 200 concurrent clients each POST one message to its own session on a panel
//! over the offline scripted agent (send_message with quick replies, then a streamed answer).
//! Prints time to first SSE event and time to `done` (p50/p95/max) per round. Bounded: a fixed
//! number of rounds, each with a 120 s limit. Run: `cargo bench -p toolwright-chat-panel --bench sse_load`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

const CLIENTS: usize = 200;
const ROUNDS: usize = 3;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let fx = common::start().await;
        fx.model.set_recording(false);
        let base = fx.url();
        println!("sse_load: {CLIENTS} concurrent clients x {ROUNDS} rounds against {base}");
        for round in 0..ROUNDS {
            let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
            let start = Instant::now();
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|i| {
                    let (client, base) = (client.clone(), base.clone());
                    tokio::spawn(async move {
                        let t0 = Instant::now();
                        let r = client
                            .post(format!("{base}api/sessions/bench-r{round}-c{i:04}/messages"))
                            .json(&json!({"text": "hello"}))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(r.status().as_u16(), 200);
                        let mut body = r.bytes_stream();
                        let mut first = None;
                        let mut text = String::new();
                        while let Some(chunk) = body.next().await {
                            let chunk = chunk.unwrap();
                            text.push_str(&String::from_utf8_lossy(&chunk));
                            if first.is_none() && text.contains("event:") {
                                first = Some(t0.elapsed());
                            }
                        }
                        assert!(text.contains("event: done"), "no done event");
                        (first.unwrap(), t0.elapsed())
                    })
                })
                .collect();
            let results = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(tasks))
                .await
                .expect("round did not finish within 120 s");
            let wall = start.elapsed();
            let (mut first, mut done): (Vec<_>, Vec<_>) = results.into_iter().map(|r| r.unwrap()).unzip();
            println!(
                "round {round}: first event p50 {} p95 {} max {} | done p50 {} p95 {} max {} | wall {} ({:.0} answers/s)",
                ms(pct(&mut first, 0.5)),
                ms(pct(&mut first, 0.95)),
                ms(pct(&mut first, 1.0)),
                ms(pct(&mut done, 0.5)),
                ms(pct(&mut done, 0.95)),
                ms(pct(&mut done, 1.0)),
                ms(wall),
                CLIENTS as f64 / wall.as_secs_f64()
            );
        }
    });
}
