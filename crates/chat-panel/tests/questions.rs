//! MCP servers' questions (elicitation) in the panel over real HTTP: a question asked at the
//! very first instant of an answer — before the model has said anything, as a tool that asks at
//! the start of its call, or a backend that starts its answer at once, can — is shown in the
//! answer's stream and waits for the person, in every new conversation; none is declined unseen.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};
use toolwright_chat_panel::{AgentBackend, ChatBackend, ChatPanel, EventStream, PanelConfig};
use toolwright_mcp_bridge::elicitation::{
    ElicitationAnswer, ElicitationMode, ElicitationRequest, Elicitor,
};

/// How many new conversations each test starts.
const CONVERSATIONS: usize = 40;

fn budget_question(session: &str) -> ElicitationRequest {
    ElicitationRequest::new(
        "planner",
        Some(session.to_owned()),
        "What is the budget?",
        ElicitationMode::Form {
            schema: json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
        },
    )
}

/// A backend whose answer asks the person first, at the earliest instant there is: inside
/// `reply` itself, before the answer's stream is even handed to the panel (the question is
/// polled once right there; a panel with no turn registered for the session yet declines it on
/// that first poll). Once answered, the agent answers the message. Every answer the asker got
/// is kept.
struct AsksAtOnce {
    agent: AgentBackend,
    elicitor: Arc<OnceLock<toolwright_chat_panel::PanelElicitor>>,
    answers: Arc<Mutex<Vec<(String, ElicitationAnswer)>>>,
}

impl ChatBackend for AsksAtOnce {
    fn reply(&self, session_id: &str, principal: &str, text: &str) -> EventStream {
        let elicitor = self.elicitor.get().cloned().expect("the panel's elicitor");
        let request = budget_question(session_id);
        let mut asking = Box::pin(async move { elicitor.elicit(request).await });
        // asked now: the first poll registers the question, or declines it
        let first = asking.as_mut().now_or_never();
        let (agent, answers) = (self.agent.clone(), self.answers.clone());
        let (session, principal, text) =
            (session_id.to_owned(), principal.to_owned(), text.to_owned());
        Box::pin(
            futures::stream::once(async move {
                let answer = match first {
                    Some(a) => a,
                    None => asking.await,
                };
                answers.lock().unwrap().push((session.clone(), answer));
                agent.reply(&session, &principal, &text)
            })
            .flatten(),
        )
    }

    fn store(&self) -> Arc<dyn toolwright_context_engine::SessionStore> {
        self.agent.store()
    }
}

/// POSTs `text` to conversation `id` and reads the answer's stream until its question shows;
/// answers it (accept, `amount`) and reads the stream to its end. The question's event, or
/// `None` when the stream ended without one (the question never reached the person).
async fn ask_and_answer(base: &str, id: &str, amount: u64) -> Option<Value> {
    let client = reqwest::Client::new();
    let conv = format!("{base}api/sessions/{id}");
    let turn = client
        .post(format!("{conv}/messages"))
        .json(&json!({"text": "plan it"}))
        .send()
        .await
        .unwrap();
    assert_eq!(turn.status().as_u16(), 200, "{id}");
    let mut stream = turn.bytes_stream();
    let mut seen = String::new();
    let question = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(chunk) = stream.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            let events = common::sse_events(&seen);
            if let Some((_, q)) = events.iter().find(|(e, _)| e == "elicitation") {
                return Some(q.clone());
            }
            if events.iter().any(|(e, _)| e == "done") {
                return None;
            }
        }
        None
    })
    .await
    .unwrap_or_else(|_| panic!("{id}: neither a question nor the end of the answer: {seen}"))?;
    let n = question["id"].as_u64().unwrap();
    let answer = client
        .post(format!("{conv}/elicitations/{n}"))
        .json(&json!({"action": "accept", "content": {"amount": amount}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200, "{id}");
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(chunk) = stream.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{id}: the answer did not end: {seen}"));
    assert!(seen.contains("event: done"), "{id}: {seen}");
    Some(question)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_at_the_first_instant_of_an_answer_is_shown_in_every_new_conversation() {
    let model = testkit::ScriptedServer::start().await;
    model.respond_with(|_: &Value| testkit::Reply::text("Noted."));
    let dir = tempfile::tempdir().unwrap();
    let config = PanelConfig::default().with_history_path(dir.path().join("panel.sqlite3"));
    let mut cfg = toolwright_model_gateway::OpenAiConfig::new("scripted");
    cfg.base_url = model.base_url();
    let llm = toolwright_model_gateway::OpenAiModel::new(cfg).unwrap();
    let bus = toolwright_messaging::MessageBus::new();
    let agent = AgentBackend::text_only(llm, "You plan.", &config)
        .await
        .unwrap();
    let slot: Arc<OnceLock<toolwright_chat_panel::PanelElicitor>> = Arc::default();
    let answers = Arc::new(Mutex::new(Vec::new()));
    let backend = AsksAtOnce {
        agent,
        elicitor: slot.clone(),
        answers: answers.clone(),
    };
    let panel = ChatPanel::new(backend, bus, config);
    slot.set(panel.elicitor()).unwrap();
    let server = panel.serve("127.0.0.1:0").await.unwrap();
    let base = server.url();

    // new conversations, several at once
    let runs = (0..CONVERSATIONS).map(|k| {
        let base = base.clone();
        async move {
            let id = format!("first-instant-{k:04}");
            let shown = ask_and_answer(&base, &id, 100 + k as u64).await;
            (id, shown)
        }
    });
    let results = futures::future::join_all(runs).await;
    let unseen: Vec<&str> = results
        .iter()
        .filter(|(_, shown)| shown.is_none())
        .map(|(id, _)| id.as_str())
        .collect();
    assert!(
        unseen.is_empty(),
        "{} of {CONVERSATIONS} questions never reached the person: {unseen:?}",
        unseen.len()
    );
    for (id, shown) in &results {
        let q = shown.as_ref().unwrap();
        assert_eq!(q["message"], "What is the budget?", "{id}");
        assert_eq!(q["service"], "planner", "{id}");
    }
    // and each asker got its own person's answer — none was declined
    let mut got = answers.lock().unwrap().clone();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), CONVERSATIONS);
    for (k, (id, answer)) in got.iter().enumerate() {
        assert_eq!(id, &format!("first-instant-{k:04}"));
        assert_eq!(
            answer,
            &ElicitationAnswer::Accept(json!({"amount": 100 + k as u64})),
            "{id}"
        );
    }
    server.shutdown().await;
}

/// The same through the agent's own tool loop: the model's first word is a call of a tool that
/// asks at the start of its call (the scripted model answers at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_asks_at_the_start_of_its_call_is_shown_in_every_new_conversation() {
    let slot: Arc<OnceLock<toolwright_chat_panel::PanelElicitor>> = Arc::default();
    let for_tool = slot.clone();
    let tool = toolwright_tool_system::FnTool::new(
        "ask_budget",
        "Asks the person for a budget",
        json!({"type": "object", "properties": {}}),
        move |_args, ctx: toolwright_core::ToolContext| {
            let slot = for_tool.clone();
            async move {
                let elicitor = slot
                    .get()
                    .cloned()
                    .ok_or_else(|| toolwright_core::ToolError::failed("no elicitor yet"))?;
                let session = ctx.session_id.clone().unwrap_or_default();
                Ok(json!(format!(
                    "{:?}",
                    elicitor.elicit(budget_question(&session)).await
                )))
            }
        },
    )
    .with_timeout(Duration::from_secs(60));
    let fx = common::start_with_agent(
        PanelConfig::default().with_max_concurrent_turns(CONVERSATIONS),
        |body: &Value| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            if messages.last().is_some_and(|m| m["role"] == "tool") {
                testkit::Reply::text("Noted.")
            } else {
                testkit::Reply::tool_call("q1", "ask_budget", "{}")
            }
        },
        move |b| b.tool(tool),
    )
    .await;
    slot.set(fx.panel_elicitor.clone()).unwrap();
    let base = fx.url();
    let runs = (0..CONVERSATIONS).map(|k| {
        let base = base.clone();
        async move {
            let id = format!("tool-asks-{k:04}");
            let shown = ask_and_answer(&base, &id, 7).await;
            (id, shown)
        }
    });
    let results = futures::future::join_all(runs).await;
    let unseen: Vec<&str> = results
        .iter()
        .filter(|(_, shown)| shown.is_none())
        .map(|(id, _)| id.as_str())
        .collect();
    assert!(
        unseen.is_empty(),
        "{} of {CONVERSATIONS} questions never reached the person: {unseen:?}",
        unseen.len()
    );
    // every tool got the answer, none a decline
    let sent: Vec<String> = fx
        .model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains("\"role\":\"tool\""))
        .collect();
    assert_eq!(
        sent.len(),
        CONVERSATIONS,
        "one tool result per conversation"
    );
    assert!(
        sent.iter()
            .all(|b| b.contains("Accept") && !b.contains("Decline")),
        "{sent:?}"
    );
}
