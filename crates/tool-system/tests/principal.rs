//! Who a call is made for: a tool sees the agent's principal (`acting_as`) in its context, in a
//! sub-agent too, and none for a program that names nobody.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};

use common::scripted::{Scripted, call, text};
use serde_json::json;
use toolwright_tool_system::{Agent, FnTool};

/// A tool that keeps the principal of each call it gets.
fn whoami(seen: Arc<Mutex<Vec<Option<String>>>>) -> FnTool {
    FnTool::new(
        "whoami",
        "Says who the call is for",
        json!({"type": "object", "properties": {}}),
        move |_, ctx| {
            seen.lock().unwrap().push(ctx.principal.clone());
            async move { Ok(json!("noted")) }
        },
    )
}

#[tokio::test]
async fn a_tool_sees_the_principal_the_agent_acts_for_and_none_without_one() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = Scripted::new(vec![
        call("c1", "whoami", json!({})),
        text("done"),
        call("c2", "whoami", json!({})),
        text("done"),
    ]);
    let agent = Agent::builder(model)
        .tool(whoami(seen.clone()))
        .build()
        .unwrap();
    agent
        .acting_as("alice")
        .run("s1", "who am I?")
        .await
        .unwrap();
    agent.run("s2", "who am I?").await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [Some("alice".to_owned()), None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_calls_are_made_for_the_person_the_top_agent_acts_for() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = Agent::builder(Scripted::new(vec![
        call("i1", "whoami", json!({})),
        text("noted who you are"),
    ]))
    .tool(whoami(seen.clone()))
    .build()
    .unwrap();
    let outer = Agent::builder(Scripted::new(vec![
        call("o1", "helper", json!({"input": "note who I am"})),
        text("done"),
    ]))
    .tool(inner.as_tool("helper", "A helper agent"))
    .build()
    .unwrap();
    outer.acting_as("bob").run("s", "note me").await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [Some("bob".to_owned())]);
}
