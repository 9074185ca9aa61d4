//! Spec 002 (Stage 3 JSON-decision `runToolLoop`) over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use testkit::{Reply, ScriptedServer};
use toolwright_context_engine::SessionStore;
use toolwright_core::Message;
use toolwright_tool_system::{Agent, ProtocolKind};

#[tokio::test]
async fn t6_json_decision_loop_get_weather_end_to_end() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(
        r#"{"tool": "get_weather", "arguments": {"city": "Beijing"}}"#,
    ));
    server.push(Reply::text(
        r#"```json
{"tool": null, "reply": "It is 22°C in Beijing."}
```"#,
    ));
    let calls = Arc::new(AtomicUsize::new(0));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(calls.clone()))
        .store(store.clone())
        .protocol(ProtocolKind::JsonDecision)
        .max_iterations(5)
        .build()
        .unwrap();
    let out = agent
        .run("s", "What's the weather in Beijing?")
        .await
        .unwrap();
    assert_eq!(out.answer, "It is 22°C in Beijing.");
    assert_eq!(out.protocol, "json");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // tools described in the system prompt, not in a tools field
    let first = &server.requests()[0].body;
    assert!(first.get("tools").is_none());
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("get_weather") && system.contains("Get current weather for a city"));
    // the result is injected as a user message
    let second = sent_messages(&server, 1);
    let last = second.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"],
        "[Tool result for get_weather]\n{\"temp\":22,\"city\":\"Beijing\"}"
    );
    let session = checked_session(&*store, "s").await;
    assert_eq!(session.len(), 4);
    assert_eq!(
        session[2],
        Message::user("[Tool result for get_weather]\n{\"temp\":22,\"city\":\"Beijing\"}")
    );
}

#[tokio::test]
async fn t6_max_tool_rounds_run_then_the_last_response_is_returned() {
    let server = ScriptedServer::start().await;
    server
        .respond_with(|_| Reply::text(r#"{"tool": "get_weather", "arguments": {"city": "Rome"}}"#));
    let calls = Arc::new(AtomicUsize::new(0));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(calls.clone()))
        .protocol(ProtocolKind::JsonDecision)
        .max_iterations(3)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "loop").await.unwrap();
    assert!(out.hit_iteration_limit);
    // 001: the caller gets the last model response as it is.
    assert_eq!(
        out.answer,
        r#"{"tool": "get_weather", "arguments": {"city": "Rome"}}"#
    );
    assert_eq!(
        server.request_count(),
        4,
        "3 rounds of tools, then the stop"
    );
    // get_weather is not declared idempotent: every round runs it.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let session = checked_session(&*store, "s").await;
    assert!(session.last().unwrap().content().contains("Not run"));
}

#[tokio::test]
async fn t6_with_corrections_on_an_unparseable_answer_is_reprompted_once_then_plain() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(
        r#"{"tool": "get_weather", "arguments": [1, 2]}"#,
    ));
    server.push(Reply::text(r#"{"tool": "get_weather", "arguments": "#));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(Arc::default()))
        .protocol(ProtocolKind::JsonDecision)
        .corrections(true)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "weather?").await.unwrap();
    assert_eq!(server.request_count(), 2, "one re-prompt only");
    let correction = sent_messages(&server, 1).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(correction.contains("must be a JSON object"), "{correction}");
    assert_eq!(
        out.answer, r#"{"tool": "get_weather", "arguments": "#,
        "then the text is the answer, not an error"
    );
    assert_eq!(checked_session(&*store, "s").await.len(), 4); // user, bad, correction, bad
}

#[tokio::test]
async fn t6_with_corrections_the_model_fixes_its_decision() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(
        r#"{"tool": "get_weather", "arguments": {"city": "Oslo",}}"#,
    ));
    server.push(Reply::text(
        r#"{"tool": "get_weather", "arguments": {"city": "Oslo"}}"#,
    ));
    server.push(Reply::text(r#"{"tool": null, "reply": "22 in Oslo"}"#));
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model(&server))
        .tool(weather(calls.clone()))
        .protocol(ProtocolKind::JsonDecision)
        .corrections(true)
        .build()
        .unwrap();
    let out = agent.run("s", "weather?").await.unwrap();
    assert_eq!(out.answer, "22 in Oslo");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn t3_unknown_tool_in_json_decision_reaches_model() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(r#"{"tool": "teleport", "arguments": {}}"#));
    server.push(Reply::text(
        r#"{"tool": null, "reply": "I cannot teleport."}"#,
    ));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(Arc::default()))
        .protocol(ProtocolKind::JsonDecision)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "teleport me").await.unwrap();
    assert_eq!(out.answer, "I cannot teleport.");
    let last = sent_messages(&server, 1).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        last,
        "[Tool result for teleport]\n{\"success\":false,\"error\":\"Tool not found: teleport\"}"
    );
    let _ = store.load("s").await.unwrap();
}

#[tokio::test]
async fn t9_fallback_output_without_valid_call_is_plain_answer() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("The weather is probably fine."));
    let agent = Agent::builder(model_without_fc(&server))
        .tool(weather(Arc::default()))
        .build()
        .unwrap();
    let out = agent.run("s", "weather?").await.unwrap();
    assert_eq!(out.answer, "The weather is probably fine.");
    assert_eq!(server.request_count(), 1);
}
