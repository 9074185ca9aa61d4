//! Stage 1 benchmarks: building a request from a long session, and durable SQLite and PostgreSQL
//! appends (PostgreSQL: the server `TEST_DATABASE_URL` names; `cargo xtask bench` starts one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use toolwright_context_engine::{
    ContextBuilder, Durability, History, SessionStore, SqliteStore, TiktokenCounter,
};
use toolwright_core::{Message, TokenCounter, ToolCall};

/// A realistic 4-message round: question, tool call, tool result, answer.
fn round(i: usize) -> Vec<Message> {
    let id = format!("call_{i}");
    vec![
        Message::user(format!(
            "Question {i}: what does the file report_{i}.txt say about revenue?"
        )),
        Message::assistant_with_tool_calls(
            "",
            vec![ToolCall::new(
                &id,
                "read_file",
                json!({"path": format!("report_{i}.txt")}),
            )],
        ),
        Message::tool(
            &id,
            "read_file",
            format!("Revenue grew {i}% year over year. ").repeat(25),
        ),
        Message::assistant(format!("The report says revenue grew {i}% year over year. ").repeat(4)),
    ]
}

fn build_context(c: &mut Criterion) {
    let counter: Arc<dyn TokenCounter> = Arc::new(TiktokenCounter::o200k_base().unwrap());
    let messages: Vec<Message> = (0..2_500).flat_map(round).collect();
    assert_eq!(messages.len(), 10_000);
    let history = History::from_messages(counter.clone(), messages.clone());
    let builder = ContextBuilder::new("You are a careful analyst. ".repeat(20))
        .section(
            "tools",
            "read_file(path): returns the file's text. ".repeat(5),
        )
        .with_counter(counter)
        .with_budget(8_000);
    let ctx = builder.build(&history).unwrap();
    eprintln!(
        "10k messages, 8k budget: kept {} messages, dropped {}, {} tokens",
        ctx.kept.len(),
        ctx.dropped.len(),
        ctx.tokens
    );

    let mut g = c.benchmark_group("build");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    g.bench_function("10k_messages_8k_budget_cached_counts", |b| {
        b.iter(|| builder.build(std::hint::black_box(&history)).unwrap())
    });
    g.sample_size(10);
    g.bench_function("10k_messages_8k_budget_uncached_tiktoken", |b| {
        b.iter(|| {
            builder
                .build_messages(std::hint::black_box(&messages))
                .unwrap()
        })
    });
    g.finish();
}

fn sqlite_appends(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("sqlite_append");
    g.measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);

    for (name, durability) in [("full", Durability::Full), ("normal", Durability::Normal)] {
        let store =
            SqliteStore::open_with(dir.path().join(format!("{name}.db")), durability).unwrap();
        rt.block_on(store.create("one")).unwrap();
        let r = round(7);
        g.throughput(Throughput::Elements(r.len() as u64));
        g.bench_function(format!("{name}/1_session_sequential_4msg_rounds"), |b| {
            b.iter(|| rt.block_on(store.append("one", &r)).unwrap())
        });

        let sessions = 32;
        for s in 0..sessions {
            rt.block_on(store.create(&format!("c{s}"))).unwrap();
        }
        let store = Arc::new(store);
        g.throughput(Throughput::Elements((r.len() * sessions) as u64));
        g.bench_function(format!("{name}/32_sessions_concurrent_4msg_rounds"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let tasks: Vec<_> = (0..sessions)
                        .map(|s| {
                            let store = store.clone();
                            let r = r.clone();
                            tokio::spawn(async move { store.append(&format!("c{s}"), &r).await })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap().unwrap();
                    }
                })
            })
        });
    }
    g.finish();
}

/// The same appends against PostgreSQL, in a fresh database `ce_bench` on the server
/// `TEST_DATABASE_URL` names.
fn postgres_appends(c: &mut Criterion) {
    let Ok(base) = std::env::var("TEST_DATABASE_URL") else {
        eprintln!(
            "postgres_append: NOT RUN — TEST_DATABASE_URL is not set; run `cargo xtask bench` \
             (it starts a private PostgreSQL) or set it to a server whose user may create databases"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = rt.block_on(async {
        let (admin, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        for sql in [
            "DROP DATABASE IF EXISTS ce_bench WITH (FORCE)",
            "CREATE DATABASE ce_bench",
        ] {
            admin.batch_execute(sql).await.unwrap();
        }
        let (head, query) = base.split_once('?').unwrap_or((&base, ""));
        let (server, _) = head.rsplit_once('/').unwrap();
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("{server}/ce_bench{query}")
    });
    let store = rt
        .block_on(toolwright_context_engine::PostgresStore::connect(&url))
        .unwrap();
    let mut g = c.benchmark_group("postgres_append");
    g.measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);
    rt.block_on(store.create("one")).unwrap();
    let r = round(7);
    g.throughput(Throughput::Elements(r.len() as u64));
    g.bench_function("1_session_sequential_4msg_rounds", |b| {
        b.iter(|| rt.block_on(store.append("one", &r)).unwrap())
    });
    let sessions = 32;
    for s in 0..sessions {
        rt.block_on(store.create(&format!("c{s}"))).unwrap();
    }
    let store = Arc::new(store);
    g.throughput(Throughput::Elements((r.len() * sessions) as u64));
    g.bench_function("32_sessions_concurrent_4msg_rounds", |b| {
        b.iter(|| {
            rt.block_on(async {
                let tasks: Vec<_> = (0..sessions)
                    .map(|s| {
                        let store = store.clone();
                        let r = r.clone();
                        tokio::spawn(async move { store.append(&format!("c{s}"), &r).await })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap().unwrap();
                }
            })
        })
    });
    g.finish();
}

criterion_group!(benches, build_context, sqlite_appends, postgres_appends);
criterion_main!(benches);
