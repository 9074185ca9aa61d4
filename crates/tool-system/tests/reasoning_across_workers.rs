//! A run held for approval on one worker and resumed on another, in PostgreSQL: worker 1
//! holds the round, worker 2 (another store connection, another agent) resumes it. The
//! request it sends to the model carries the same reasoning, signature and encrypted content
//! byte for byte; a sub-agent's held call is decided through the top run and the sub-agent
//! goes on there; the run's token usage counts the part before the hold. Needs
//! `TEST_DATABASE_URL` (set by `cargo xtask test`). The models are recording ones behind the
//! `ChatModel` seam: what is under test is what the loop stores and replays.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::json;
use toolwright_context_engine::PostgresStore;
use toolwright_core::Usage;
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ModelError, ModelInfo, Part,
    Reasoning, ReasoningKind, ToolCall, async_trait,
};
use toolwright_tool_system::{Agent, ApprovalKey, FnTool};

/// Answers from a script and records every request.
#[derive(Default)]
struct Recording {
    answers: Mutex<VecDeque<ChatResponse>>,
    requests: Mutex<Vec<ChatRequest>>,
}

#[async_trait]
impl ChatModel for Recording {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("claude-sonnet-4-5", true).with_provider("anthropic")
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.requests.lock().unwrap().push(request);
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| ModelError::Config("the script is exhausted".into()))
    }
}

fn thinking() -> Vec<Part> {
    vec![
        Part::Reasoning(
            Reasoning::new(
                "anthropic",
                ReasoningKind::Full,
                "The user wants /tmp/a gone; deleting needs approval.",
            )
            .with_signature("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pk"),
        ),
        Part::Reasoning(
            Reasoning::new("anthropic", ReasoningKind::Redacted, "")
                .with_encrypted("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
        ),
    ]
}

fn agent(model: Arc<Recording>, store: PostgresStore) -> Agent {
    let delete = FnTool::new(
        "delete_file",
        "Delete a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args, _| async move { Ok(json!({"deleted": args["path"]})) },
    );
    Agent::builder(model)
        .tool(delete)
        .require_approval("delete_file")
        .approval_key(ApprovalKey::new([7u8; 32]).unwrap())
        .store(Arc::new(store))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_held_run_resumed_on_another_worker_replays_the_same_reasoning() {
    let url = std::env::var("TEST_DATABASE_URL")
        .expect("TEST_DATABASE_URL: run `cargo xtask test`, which starts PostgreSQL");
    let session = format!("reasoning-{}", std::process::id());
    let model = Arc::new(Recording::default());
    let call = ToolCall::new("toolu_01", "delete_file", json!({"path": "/tmp/a"}));
    model.answers.lock().unwrap().extend([
        ChatResponse::new("", vec![call], FinishReason::ToolCalls, None).with_parts(thinking()),
        ChatResponse::new("Deleted.", vec![], FinishReason::Stop, None),
    ]);

    let worker1 = agent(model.clone(), PostgresStore::connect(&url).await.unwrap());
    let held = worker1.run(&session, "delete /tmp/a").await.unwrap();
    let pending = held.pending_approval.expect("the delete is held");
    drop(worker1);

    let worker2 = agent(model.clone(), PostgresStore::connect(&url).await.unwrap());
    let out = worker2
        .resume(&session, &[pending.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "Deleted.");

    let requests = model.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    let replayed = requests[1]
        .messages
        .iter()
        .find(|m| !m.tool_calls().is_empty())
        .expect("the round's assistant message");
    assert_eq!(replayed.parts(), thinking().as_slice());
    assert!(matches!(
        requests[1].messages.last(),
        Some(Message::Tool { content, .. }) if content.contains("/tmp/a")
    ));
}

/// A lead agent over `store` whose tool `researcher` is a sub-agent (over the same store)
/// that deletes files only with approval.
fn lead(
    lead_model: Arc<Recording>,
    inner_model: Arc<Recording>,
    url_store: PostgresStore,
) -> Agent {
    let store = Arc::new(url_store);
    let researcher = Agent::builder(inner_model)
        .tool(FnTool::new(
            "delete_file",
            "Delete a file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            |args, _| async move { Ok(json!({"deleted": args["path"]})) },
        ))
        .require_approval("delete_file")
        .store(store.clone())
        .build()
        .unwrap();
    Agent::builder(lead_model)
        .tool(researcher.as_tool("researcher", "Cleans up"))
        .approval_key(ApprovalKey::new([7u8; 32]).unwrap())
        .store(store)
        .build()
        .unwrap()
}

fn used(prompt: u32, completion: u32) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        ..Usage::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_held_call_is_decided_on_another_worker_through_the_top_run() {
    let url = std::env::var("TEST_DATABASE_URL")
        .expect("TEST_DATABASE_URL: run `cargo xtask test`, which starts PostgreSQL");
    let session = format!("nested-{}", std::process::id());
    let (lead_model, inner_model) = (
        Arc::new(Recording::default()),
        Arc::new(Recording::default()),
    );
    let researcher = ToolCall::new("c1", "researcher", json!({"input": "remove /tmp/a"}));
    lead_model.answers.lock().unwrap().extend([
        ChatResponse::new("", vec![researcher], FinishReason::ToolCalls, used(100, 10)),
        ChatResponse::new("Cleaned up.", vec![], FinishReason::Stop, used(200, 5)),
    ]);
    let delete = ToolCall::new("r1", "delete_file", json!({"path": "/tmp/a"}));
    inner_model.answers.lock().unwrap().extend([
        ChatResponse::new("", vec![delete], FinishReason::ToolCalls, None),
        ChatResponse::new("Deleted /tmp/a.", vec![], FinishReason::Stop, None),
    ]);

    let worker1 = lead(
        lead_model.clone(),
        inner_model.clone(),
        PostgresStore::connect(&url).await.unwrap(),
    );
    let held = worker1.run(&session, "tidy up").await.unwrap();
    let pending = held
        .pending_approval
        .expect("the sub-agent's delete holds the top run");
    assert_eq!(pending.calls[0].id, "researcher/r1");
    assert_eq!(held.usage, used(100, 10));
    drop(worker1);

    let worker2 = lead(
        lead_model.clone(),
        inner_model.clone(),
        PostgresStore::connect(&url).await.unwrap(),
    );
    let out = worker2
        .resume(&session, &[pending.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "Cleaned up.");
    assert_eq!(out.iterations, 2);
    assert_eq!(
        out.usage,
        used(300, 15),
        "the run's usage counts the part before the hold"
    );
    let inner = inner_model.requests.lock().unwrap();
    assert_eq!(inner.len(), 2);
    assert!(matches!(
        inner[1].messages.last(),
        Some(Message::Tool { content, .. }) if content.contains("/tmp/a")
    ));
    let lead = lead_model.requests.lock().unwrap();
    assert!(matches!(
        lead[1].messages.last(),
        Some(Message::Tool { content, .. }) if content.contains("Deleted /tmp/a.")
    ));
}
