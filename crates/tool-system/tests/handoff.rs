//! A handoff: the conversation goes to another agent, which answers the person.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::scripted::{Scripted, call, text};
use serde_json::json;
use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_core::Message;
use toolwright_tool_system::Agent;

#[tokio::test]
async fn the_agent_handed_to_answers_the_person_in_the_same_session() {
    let billing_model = Scripted::new(vec![text("Billing here: your refund is on its way.")]);
    let billing = Agent::builder(billing_model.clone())
        .system_prompt("You are the billing desk.")
        .build()
        .unwrap();
    let triage_model = Scripted::new(vec![call("c1", "to_billing", json!({}))]);
    let store = Arc::new(MemoryStore::new());
    let triage = Agent::builder(triage_model.clone())
        .system_prompt("You route people.")
        .handoff(
            &billing,
            "to_billing",
            "Hand billing questions to the billing desk",
        )
        .store(store.clone())
        .build()
        .unwrap();

    let out = triage.run("s", "Where is my refund?").await.unwrap();
    assert_eq!(out.answer, "Billing here: your refund is on its way.");
    assert_eq!(triage_model.requests().len(), 1, "triage asked once");
    assert_eq!(out.iterations, 2, "both model calls counted");
    // billing saw the person's message and the handoff, with its own instructions
    let req = &billing_model.requests()[0];
    let sent = format!("{:?}", req.messages);
    assert!(
        sent.contains("billing desk") && !sent.contains("You route people"),
        "{sent}"
    );
    assert!(
        sent.contains("Where is my refund?") && sent.contains("Handed off to to_billing"),
        "{sent}"
    );
    // the session holds the whole turn, and the output lists it
    let stored = store.load_or_create("s").await.unwrap().messages;
    assert_eq!(stored.len(), 4, "{stored:?}");
    assert_eq!(out.new_messages, stored);
    assert!(
        matches!(stored.last(), Some(Message::Assistant { content, .. }) if content.contains("refund"))
    );
}

#[tokio::test]
async fn a_chain_of_handoffs_stops_at_the_limit_and_the_last_agent_answers() {
    // agent i hands to agent i+1; agent 4 (after 4 handoffs) is refused and answers itself
    let mut next: Option<Agent> = None;
    let mut models = Vec::new();
    for i in (0..6).rev() {
        let model = Scripted::new(vec![
            call(&format!("h{i}"), "next", json!({})),
            text(&format!("agent {i} answers")),
        ]);
        models.push(model.clone());
        let mut b = Agent::builder(model);
        if let Some(n) = &next {
            b = b.handoff(n, "next", "Hand to the next agent");
        }
        next = Some(b.build().unwrap());
    }
    models.reverse();
    let out = next.unwrap().run("s", "hi").await.unwrap();
    assert_eq!(out.answer, "agent 4 answers");
    let refused = format!("{:?}", models[4].requests()[1].messages.last());
    assert!(
        refused.contains("Refused") && refused.contains("4 times"),
        "{refused}"
    );
    assert!(models[5].requests().is_empty(), "agent 5 was never reached");
}
