//! Bus throughput through one subscriber: `BATCH` messages sent, then all received in order
//! (mailbox large enough that nothing is dropped; checked). Plain vs with 3 quick replies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use toolwright_messaging::{MessageBus, OutgoingMessage, QuickReplies};

const BATCH: usize = 10_000;

fn bus(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("bus");
    g.throughput(Throughput::Elements(BATCH as u64));
    let q = QuickReplies::new(vec!["Yes".into(), "No".into(), "Later".into()]).unwrap();
    for (name, quick) in [
        ("one_subscriber_plain", None),
        ("one_subscriber_3_quick_replies", q),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let quick = quick.clone();
                rt.block_on(async move {
                    let bus = MessageBus::with_capacity(BATCH);
                    let mut inbox = bus.subscribe("r");
                    for _ in 0..BATCH {
                        let m = OutgoingMessage::new("s", "r", "hello")
                            .with_quick_replies(quick.clone());
                        bus.send(m).await.unwrap();
                    }
                    let mut last = 0;
                    for _ in 0..BATCH {
                        let m = inbox.recv().await.unwrap();
                        assert!(m.id > last);
                        last = m.id;
                    }
                    assert_eq!(inbox.dropped(), 0);
                })
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bus);
criterion_main!(benches);
