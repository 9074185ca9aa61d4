//! The agent every trace test runs: one tool, a scripted OpenAI-compatible server over real
//! HTTP that calls it once and then answers (two model calls, 10 + 5 tokens each).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_context_engine::MemoryStore;
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel, RetryPolicy};
use toolwright_tool_system::{Agent, FnTool, LoopOutput};

/// Words that appear only in the conversation's text, never in a span unless content capture
/// is on.
pub const SECRET_QUESTION: &str = "Is it sunny in Zanzibar-7731?";
pub const SECRET_ARG: &str = "Zanzibar-7731";
pub const SECRET_ANSWER: &str = "Sunny, 31 degrees, says the oracle-5512.";

/// A session id no earlier run used (the Phoenix test finds its trace by it).
pub fn unique_session() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("session-{}-{nanos}", std::process::id())
}

pub async fn run_agent() -> LoopOutput {
    run_agent_in("session-1").await
}

pub async fn run_agent_in(session: &str) -> LoopOutput {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call(
        "call_1",
        "get_weather",
        &json!({"city": SECRET_ARG}).to_string(),
    ));
    server.push(Reply::text(SECRET_ANSWER));
    let model = OpenAiModel::new(
        OpenAiConfig::new("scripted-model")
            .with_base_url(server.base_url())
            .with_retry(RetryPolicy::none()),
    )
    .unwrap();
    let weather = FnTool::new(
        "get_weather",
        "Weather of a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _| {
            let city = args["city"].as_str().unwrap_or("").to_owned();
            async move { Ok(json!({"city": city, "sky": "clear-8842"})) }
        },
    );
    let agent = Agent::builder(model)
        .tool(weather)
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    agent.run(session, SECRET_QUESTION).await.unwrap()
}
