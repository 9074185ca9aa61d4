//! #27 item 3, the bridge's side: MCP elicitation with real servers — server-everything's
//! `trigger-elicitation-request` over stdio (the 2025-11-25 server-initiated request) and
//! testkit's Streamable HTTP server answering `input_required` (the 2026-07-28 way). The
//! elicitor here stands in for the person (the chat panel is the real one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{everything, init_tracing};
use llm_core::{ToolContext, ToolProvider};
use mcp_bridge::McpBridge;
use mcp_bridge::elicitation::{ElicitationAnswer, ElicitationMode, ElicitationRequest, Elicitor};
use serde_json::{Value, json};

/// Answers every question with `answer`, after recording it; `None` never answers.
struct Person {
    answer: Option<ElicitationAnswer>,
    asked: Mutex<Vec<ElicitationRequest>>,
}

#[async_trait::async_trait]
impl Elicitor for Person {
    async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer {
        self.asked.lock().unwrap().push(request);
        match &self.answer {
            Some(a) => a.clone(),
            None => std::future::pending().await,
        }
    }
}

fn person(answer: Option<ElicitationAnswer>) -> Arc<Person> {
    Arc::new(Person {
        answer,
        asked: Mutex::new(Vec::new()),
    })
}

async fn everything_bridge() -> McpBridge {
    init_tracing();
    let b = McpBridge::new();
    b.register(everything("everything")).unwrap();
    b.start("everything").await.unwrap();
    b
}

const TOOL: &str = "everything__trigger-elicitation-request";

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

#[tokio::test]
async fn elicitation_form_accepted_reaches_the_server_with_the_session() {
    let b = everything_bridge().await;
    // The bridge declares the capability: server-everything offers its elicitation tool only
    // to clients that do.
    assert!(
        b.tools().await.iter().any(|t| t.exposed_name == TOOL),
        "the elicitation tool is listed"
    );
    let p = person(Some(ElicitationAnswer::Accept(
        json!({"name": "Ada Lovelace", "check": true, "integer": 7}),
    )));
    b.set_elicitor(p.clone(), Duration::from_secs(30));
    let out = ToolProvider::call(
        &b,
        TOOL,
        json!({}),
        ToolContext::new("c1").with_session("s1"),
    )
    .await
    .unwrap();
    let out = text(&out);
    assert!(out.contains("Ada Lovelace"), "{out}");
    let asked = p.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].service, "everything");
    assert_eq!(asked[0].session.as_deref(), Some("s1"));
    assert!(
        asked[0].message.contains("Please provide"),
        "{}",
        asked[0].message
    );
    match &asked[0].mode {
        ElicitationMode::Form { schema } => {
            assert_eq!(schema["properties"]["name"]["type"], "string", "{schema}");
        }
        other => panic!("{other:?}"),
    }
    b.stop("everything").await.unwrap();
}

#[tokio::test]
async fn elicitation_without_a_ui_is_declined_and_a_slow_person_is_cancelled() {
    let b = everything_bridge().await;
    // No elicitor: declined at once, the call completes.
    let out = text(&b.call(TOOL, json!({})).await.unwrap());
    assert!(out.to_lowercase().contains("decline"), "{out}");
    // A person who never answers: cancelled after the limit, the call completes.
    let p = person(None);
    b.set_elicitor(p.clone(), Duration::from_millis(300));
    let out = text(&b.call(TOOL, json!({})).await.unwrap());
    assert!(out.to_lowercase().contains("cancel"), "{out}");
    assert_eq!(p.asked.lock().unwrap().len(), 1);
    // Declined by the person.
    b.set_elicitor(
        person(Some(ElicitationAnswer::Decline)),
        Duration::from_secs(30),
    );
    let out = text(&b.call(TOOL, json!({})).await.unwrap());
    assert!(out.to_lowercase().contains("decline"), "{out}");
    b.stop("everything").await.unwrap();
}

#[tokio::test]
async fn elicitation_input_required_of_the_stateless_revision_is_answered() {
    init_tracing();
    let server = testkit::McpHttpServer::start().await;
    let b = McpBridge::new();
    b.register(mcp_bridge::ServiceConfig::remote("st", server.url()))
        .unwrap();
    b.start("st").await.unwrap();
    let p = person(Some(ElicitationAnswer::Accept(json!({"name": "Grace"}))));
    b.set_elicitor(p.clone(), Duration::from_secs(30));
    let out = text(&b.call("st__ask", json!({})).await.unwrap());
    assert!(out.starts_with("answered: "), "{out}");
    let answered: Value = serde_json::from_str(out.trim_start_matches("answered: ")).unwrap();
    assert_eq!(answered["action"], "accept", "{answered}");
    assert_eq!(answered["content"]["name"], "Grace", "{answered}");
    assert_eq!(p.asked.lock().unwrap()[0].message, "What is your name?");
    assert!(server.protocol_versions().iter().all(|v| v == "2026-07-28"));
    b.stop("st").await.unwrap();
}
