//! C2 through the loop: per-turn system-prompt sections reach the request's system message and
//! are never stored as history.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{model, sent_messages, store};
use testkit::{Reply, ScriptedServer};
use toolwright_context_engine::SessionStore;
use toolwright_core::async_trait;
use toolwright_tool_system::{Agent, TurnSections};

struct EchoIntent;

#[async_trait]
impl TurnSections for EchoIntent {
    async fn sections(&self, user_text: &str) -> Vec<(String, String)> {
        if user_text.contains("weather") {
            vec![(
                "mcp".into(),
                "Tools you may call: weather__now — current weather.".into(),
            )]
        } else {
            vec![]
        }
    }
}

#[tokio::test]
async fn c2_turn_sections_reach_the_system_message_and_are_not_stored() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("It is sunny."));
    server.push(Reply::text("Hello!"));
    let store = store();
    let agent = Agent::builder(model(&server))
        .store(store.clone())
        .system_prompt("You are helpful.")
        .section("house-rules", "Answer in one sentence.")
        .turn_sections(Arc::new(EchoIntent))
        .build()
        .unwrap();
    agent.run("s", "what's the weather?").await.unwrap();
    agent.run("s", "hi").await.unwrap();

    let first = sent_messages(&server, 0);
    let system = first[0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are helpful."), "{system}");
    assert!(system.contains("Answer in one sentence."));
    assert!(
        system.contains("weather__now"),
        "the turn's section is in: {system}"
    );

    let second = sent_messages(&server, 1);
    let system = second[0]["content"].as_str().unwrap();
    assert!(system.contains("Answer in one sentence."));
    assert!(
        !system.contains("weather__now"),
        "a section is for its own turn only: {system}"
    );

    let stored = store.load("s").await.unwrap().messages;
    assert!(stored.iter().all(|m| !m.content().contains("weather__now")));
    assert!(
        stored
            .iter()
            .all(|m| m.role() != toolwright_core::Role::System),
        "sections are not history"
    );
}
