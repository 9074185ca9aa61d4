//! What the tool-system benches share: a no-op tool and a model turn that calls it once.
#![allow(dead_code)]

use std::sync::Arc;

use serde_json::json;
use toolwright_context_engine::MemoryStore;
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, Message, ModelError, ModelInfo,
    ToolCall, async_trait, response_stream,
};
use toolwright_tool_system::{Agent, AgentBuilder, FnTool};

/// `noop(x: integer)`, answering "ok".
pub fn noop_tool() -> FnTool {
    FnTool::new(
        "noop",
        "does nothing",
        json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
        |_, _| async { Ok(json!("ok")) },
    )
}

/// The model's side of a two-round loop: call `noop` until a tool result is there, then answer.
pub fn noop_round(req: &ChatRequest) -> ChatResponse {
    match req.messages.last() {
        Some(Message::Tool { .. }) => ChatResponse::new("done", vec![], FinishReason::Stop, None),
        _ => ChatResponse::new(
            "",
            vec![ToolCall::new("c1", "noop", json!({"x": 1}))],
            FinishReason::ToolCalls,
            None,
        ),
    }
}

/// An instant in-process model playing [`noop_round`]: everything measured is the loop.
pub struct Instant;

#[async_trait]
impl ChatModel for Instant {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("instant", true)
    }
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        Ok(noop_round(&req))
    }
    async fn stream(&self, req: ChatRequest) -> Result<ChatStream, ModelError> {
        Ok(response_stream(self.chat(req).await?))
    }
}

/// An agent over `model` with [`noop_tool`] and an in-memory store; `configure` may change it.
pub fn noop_agent(
    model: impl ChatModel + 'static,
    configure: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> Agent {
    configure(
        Agent::builder(model)
            .tool(noop_tool())
            .store(Arc::new(MemoryStore::new())),
    )
    .build()
    .unwrap()
}

/// Runs a fresh session per iteration for `iters` iterations, on a new agent (an empty
/// in-memory store) every 1,000, and gives the time of the runs alone. One agent for a whole
/// bench would keep every session: hundreds of thousands, a kilobyte each, so that a run would
/// also pay for a growing heap's page faults and a growing map's rehashing — the cost of a
/// store nobody empties, not of the loop (LangChain's round, `benches/langchain`, keeps nothing).
pub fn fresh_runs(
    iters: u64,
    make: impl Fn() -> Agent,
    run: impl Fn(&Agent, String),
) -> std::time::Duration {
    const PER_AGENT: u64 = 1_000;
    let mut total = std::time::Duration::ZERO;
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
