//! What the tool-system benches share: a no-op tool and a model turn that calls it once.
#![allow(dead_code)]

use std::sync::Arc;

use context_engine::MemoryStore;
use llm_core::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, Message, ModelError, ModelInfo,
    ToolCall, async_trait, response_stream,
};
use serde_json::json;
use tool_system::{Agent, AgentBuilder, FnTool};

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
