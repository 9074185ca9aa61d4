//! Which tools each request of a run shows: a provider that shows more once the model asked
//! is asked again after every round; one that shows a fixed set is asked once per run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, Message, ModelError, ModelInfo,
    ToolCall, ToolContext, ToolError, ToolOutput, ToolProvider, ToolSpec, TurnInfo, async_trait,
    response_stream,
};
use toolwright_tool_system::Agent;

/// Calls `look` once, then answers; keeps the tool names of every request.
#[derive(Default)]
struct Recording {
    tools_seen: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl ChatModel for Recording {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("recording", true)
    }
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let names = req.tools.iter().map(|t| t.name.to_string()).collect();
        self.tools_seen.lock().unwrap().push(names);
        Ok(match req.messages.last() {
            Some(Message::Tool { .. }) => {
                ChatResponse::new("done", vec![], FinishReason::Stop, None)
            }
            _ => ChatResponse::new(
                "",
                vec![ToolCall::new("c1", "look", json!({}))],
                FinishReason::ToolCalls,
                None,
            ),
        })
    }
    async fn stream(&self, req: ChatRequest) -> Result<ChatStream, ModelError> {
        Ok(response_stream(self.chat(req).await?))
    }
}

/// Lists `look` and `detail`; shows `detail` only after the first round, as an MCP service
/// shows a tool's schema once the model asked for it. Counts how often it is asked.
struct Growing {
    fixed: bool,
    asked: AtomicUsize,
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, "a tool", json!({"type": "object"}))
}

#[async_trait]
impl ToolProvider for Growing {
    fn provider_name(&self) -> &str {
        "growing"
    }
    async fn list(&self) -> Vec<ToolSpec> {
        vec![spec("look"), spec("detail")]
    }
    async fn advertised(&self, turn: &TurnInfo) -> Vec<ToolSpec> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if turn.round == 0 || self.fixed {
            vec![spec("look")]
        } else {
            vec![spec("look"), spec("detail")]
        }
    }
    fn advertises_the_same_every_round(&self) -> bool {
        self.fixed
    }
    async fn call(
        &self,
        _name: &str,
        _args: Value,
        _ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(json!("seen").into())
    }
}

async fn run_with(fixed: bool) -> (Vec<Vec<String>>, usize) {
    let model = Arc::new(Recording::default());
    let provider = Arc::new(Growing {
        fixed,
        asked: AtomicUsize::new(0),
    });
    let agent = Agent::builder(Arc::clone(&model))
        .provider(Arc::clone(&provider) as Arc<dyn ToolProvider>)
        .build()
        .unwrap();
    let out = agent.run("s", "look around").await.unwrap();
    assert_eq!(out.answer, "done");
    let seen = model.tools_seen.lock().unwrap().clone();
    (seen, provider.asked.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_provider_that_shows_more_after_a_round_is_asked_again_and_its_new_tool_reaches_the_model()
 {
    let (seen, asked) = run_with(false).await;
    assert_eq!(seen, vec![vec!["look"], vec!["look", "detail"]]);
    assert_eq!(asked, 2);
}

#[tokio::test]
async fn a_provider_that_shows_a_fixed_set_is_asked_once_per_run() {
    let (seen, asked) = run_with(true).await;
    assert_eq!(seen, vec![vec!["look"], vec!["look"]]);
    assert_eq!(asked, 1);
}
