//! Bounded load run: 1,000 concurrent tool loops against the scripted OpenAI-compatible server
//! with 20 ms model latency (two model calls and one tool call per loop). They must all finish
//! within 3× the time of one loop: no global lock serialises loops. Run by `cargo bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{Reply, ScriptedServer};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel, RetryPolicy};
use toolwright_tool_system::Agent;

const LOOPS: usize = 1000;
const LATENCY: Duration = Duration::from_millis(20);

fn responder(body: &Value) -> Reply {
    let answered = body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let r = if answered {
        Reply::text("done")
    } else {
        Reply::tool_call("c1", "noop", r#"{"x": 1}"#)
    };
    r.latency(LATENCY)
}

/// The same loop with an in-process model that sleeps 20 ms per call: isolates the loop
/// (sessions, dispatcher, tasks) from the HTTP stack.
struct Sleepy;

#[toolwright_core::async_trait]
impl toolwright_core::ChatModel for Sleepy {
    fn info(&self) -> toolwright_core::ModelInfo {
        toolwright_core::ModelInfo::new("sleepy", true)
    }
    async fn chat(
        &self,
        req: toolwright_core::ChatRequest,
    ) -> Result<toolwright_core::ChatResponse, toolwright_core::ModelError> {
        tokio::time::sleep(LATENCY).await;
        Ok(common::noop_round(&req))
    }
    async fn stream(
        &self,
        req: toolwright_core::ChatRequest,
    ) -> Result<toolwright_core::ChatStream, toolwright_core::ModelError> {
        Ok(toolwright_core::response_stream(self.chat(req).await?))
    }
}

async fn measure(label: &str, agent: &Agent) -> f64 {
    for i in 0..3 {
        agent.run(&format!("warm{i}"), "go").await.unwrap();
    }
    let mut single = Duration::MAX;
    for i in 0..5 {
        let t = Instant::now();
        agent.run(&format!("one{i}"), "go").await.unwrap();
        single = single.min(t.elapsed());
    }
    let t = Instant::now();
    let handles: Vec<_> = (0..LOOPS)
        .map(|i| {
            let agent = agent.clone();
            tokio::spawn(async move { agent.run(&format!("load{i}"), "go").await })
        })
        .collect();
    let mut ok = 0;
    for h in handles {
        if let Ok(Ok(out)) = h.await
            && out.answer == "done"
        {
            ok += 1;
        }
    }
    let all = t.elapsed();
    let ratio = all.as_secs_f64() / single.as_secs_f64();
    println!(
        "tool_loop/load/{label}: one loop {:.1} ms; {LOOPS} concurrent loops {:.1} ms ({ratio:.2}x one loop); {ok}/{LOOPS} finished with the answer{}",
        single.as_secs_f64() * 1e3,
        all.as_secs_f64() * 1e3,
        if ratio > 3.0 {
            " -- ABOVE the 3x target"
        } else {
            " -- within the 3x target"
        }
    );
    assert_eq!(ok, LOOPS, "every loop must finish");
    ratio
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing special: skip then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = ScriptedServer::start().await;
        server.set_recording(false);
        server.respond_with(responder);
        let model = OpenAiModel::new(
            OpenAiConfig::new("m").with_base_url(server.base_url()).with_retry(RetryPolicy::none()).with_timeout(Duration::from_secs(60)),
        )
        .unwrap();
        let agent = common::noop_agent(model, |b| b);

        measure("in_process_model", &common::noop_agent(Sleepy, |b| b)).await;
        measure("scripted_http_server", &agent).await;

        // Baseline: the same 2 x 1,000 streamed requests through the gateway alone, no tool loop.
        let model = Arc::new(OpenAiModel::new(
            OpenAiConfig::new("m").with_base_url(server.base_url()).with_retry(RetryPolicy::none()).with_timeout(Duration::from_secs(60)),
        ).unwrap());
        let t = Instant::now();
        let handles: Vec<_> = (0..LOOPS)
            .map(|_| {
                let model = Arc::clone(&model);
                tokio::spawn(async move {
                    use toolwright_core::{ChatModel, ChatRequest, Message, collect_stream};
                    for _ in 0..2 {
                        let s = model.stream(ChatRequest::new(vec![Message::user("go")])).await?;
                        collect_stream(s).await?;
                    }
                    Ok::<(), toolwright_core::ModelError>(())
                })
            })
            .collect();
        let mut ok = 0;
        for h in handles {
            if let Ok(Ok(())) = h.await {
                ok += 1;
            }
        }
        println!(
            "tool_loop/load/gateway_only_baseline: {LOOPS} concurrent clients x 2 streamed requests, no tool loop: {:.1} ms; {ok}/{LOOPS} ok",
            t.elapsed().as_secs_f64() * 1e3
        );
    });
}
