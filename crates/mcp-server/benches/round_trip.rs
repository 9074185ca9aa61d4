//! `tools/call` round trips of the server (`echo`) with rmcp's client: over Streamable HTTP
//! (stateless, in this process on 127.0.0.1) and over stdio (the `toolwright-mcp` binary as a
//! child process), one client in sequence and 16 clients at once.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use toolwright_mcp_server::{HttpOptions, McpServer};
use toolwright_tool_system::Dispatcher;

type Client = RunningService<RoleClient, ()>;

fn echo() -> CallToolRequestParams {
    CallToolRequestParams::new("echo")
        .with_arguments(json!({"text": "hi"}).as_object().unwrap().clone())
}

async fn http_url() -> String {
    let d = Dispatcher::from_registry(toolwright_mcp_server::demo::tools().unwrap());
    let server = McpServer::builder(Arc::new(d)).build();
    let router = server.router(HttpOptions::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    url
}

async fn http_client(url: &str) -> Client {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap()
}

async fn stdio_client(config: &std::path::Path) -> Client {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwright-mcp"));
    cmd.arg("serve").arg("--config").arg(config).arg("--stdio");
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn concurrent(clients: &[Client]) {
    futures::future::join_all(clients.iter().map(|c| c.call_tool(echo())))
        .await
        .into_iter()
        .for_each(|r| {
            r.unwrap();
        });
}

fn bench(c: &mut Criterion) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.json");
    std::fs::write(&config, r#"{"tools": ["demo"]}"#).unwrap();
    let (http_one, http_many, stdio_one, stdio_many) = rt.block_on(async {
        let url = http_url().await;
        let one = http_client(&url).await;
        let mut many = Vec::new();
        for _ in 0..16 {
            many.push(http_client(&url).await);
        }
        let s_one = stdio_client(&config).await;
        let mut s_many = Vec::new();
        for _ in 0..16 {
            s_many.push(stdio_client(&config).await);
        }
        (one, many, s_one, s_many)
    });

    let mut g = c.benchmark_group("tools_call");
    g.throughput(Throughput::Elements(1));
    g.bench_function("http_sequential", |b| {
        b.to_async(&rt)
            .iter(|| async { http_one.call_tool(echo()).await.unwrap() })
    });
    g.bench_function("stdio_sequential", |b| {
        b.to_async(&rt)
            .iter(|| async { stdio_one.call_tool(echo()).await.unwrap() })
    });
    g.throughput(Throughput::Elements(16));
    g.bench_function("http_16_concurrent", |b| {
        b.to_async(&rt).iter(|| concurrent(&http_many))
    });
    g.bench_function("stdio_16_concurrent", |b| {
        b.to_async(&rt).iter(|| concurrent(&stdio_many))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
