//! Who decided, over real HTTP: an approval and an answer to an MCP server's question record who
//! decided (the principal), when, and on what (the exact arguments, the answer given), in the
//! conversation's store — `decisions` of `GET /api/sessions/{id}` — and another principal
//! holding the first one's approval token gets `404` wherever they present it, learning nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::{Value, json};
use toolwright_chat_panel::PanelConfig;
use toolwright_chat_panel::identity::TrustedProxyHeader;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Behind a "proxy" on 127.0.0.1 that names the person in `x-forwarded-user`.
fn proxied() -> PanelConfig {
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    PanelConfig::default()
        .with_authenticator(TrustedProxyHeader::new("x-forwarded-user", [local]).unwrap())
}

async fn call(who: &str, method: reqwest::Method, url: &str, body: Option<Value>) -> (u16, String) {
    let r = reqwest::Client::new()
        .request(method, url)
        .header("x-forwarded-user", who);
    common::send(r, body).await
}

async fn mint(base: &str, who: &str) -> String {
    let (s, body) = call(
        who,
        reqwest::Method::POST,
        &format!("{base}api/sessions"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn state(base: &str, who: &str, id: &str) -> Value {
    let (s, body) = call(
        who,
        reqwest::Method::GET,
        &format!("{base}api/sessions/{id}"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn who_decided_an_approval_names_its_principal_and_a_copied_token_gets_404() {
    let fx = common::start_with_agent(
        proxied(),
        common::delete_responder,
        common::with_gated_delete,
    )
    .await;
    let base = fx.url();
    let id = mint(&base, "alice").await;
    let conv = format!("{base}api/sessions/{id}");
    let (s, body) = call(
        "alice",
        reqwest::Method::POST,
        &format!("{conv}/messages"),
        Some(json!({"text": "delete my notes"})),
    )
    .await;
    assert_eq!(s, 200);
    let events = common::sse_events(&body);
    let (_, pending) = events
        .iter()
        .find(|(e, _)| e == "approval")
        .unwrap_or_else(|| panic!("no approval event: {body}"));
    let call_id = pending["calls"][0]["id"].as_str().unwrap().to_owned();
    let token = pending["calls"][0]["token"].as_str().unwrap().to_owned();
    let approve = json!({"decisions": [{"call_id": call_id, "token": token, "approved": true}]});

    // bob holds alice's token (copied, sent to him): 404 on her conversation, whatever he tries,
    // and the answer shows nothing of it
    for (what, method, url, body) in [
        (
            "approve",
            reqwest::Method::POST,
            format!("{conv}/approvals"),
            Some(approve.clone()),
        ),
        ("state", reqwest::Method::GET, conv.clone(), None),
        (
            "events",
            reqwest::Method::GET,
            format!("{conv}/events"),
            None,
        ),
    ] {
        let (s, text) = call("bob", method, &url, body).await;
        assert_eq!(s, 404, "{what}: {text}");
        assert!(
            !text.contains(&token) && !text.contains("notes") && !text.contains("alice"),
            "{what}: {text}"
        );
    }
    // ... and in a conversation of his own it decides nothing
    let his = mint(&base, "bob").await;
    let (_, text) = call(
        "bob",
        reqwest::Method::POST,
        &format!("{base}api/sessions/{his}/approvals"),
        Some(approve.clone()),
    )
    .await;
    assert!(!text.contains("deleted"), "{text}");
    let s = state(&base, "alice", &id).await;
    assert_eq!(
        s["pending"]["calls"][0]["id"],
        json!(call_id),
        "still waiting: {s}"
    );
    assert_eq!(s["decisions"], json!([]), "{s}");
    // the token alice is shown again is hers (fresh, bound to her)
    let again = s["pending"]["calls"][0]["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let t0 = now_ms();
    let (st, body) = call(
        "alice",
        reqwest::Method::POST,
        &format!("{conv}/approvals"),
        Some(json!({"decisions": [{"call_id": call_id, "token": again, "approved": true}]})),
    )
    .await;
    let t1 = now_ms();
    assert_eq!(st, 200);
    assert!(
        common::sse_events(&body)
            .iter()
            .any(|(e, d)| e == "update"
                && d["tool"]["result"] == r#"{"deleted":"<b>notes</b>.txt"}"#),
        "the approved call ran: {body}"
    );
    let s = state(&base, "alice", &id).await;
    assert_eq!(s["pending"], Value::Null);
    let decisions = s["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{s}");
    let d = &decisions[0];
    assert_eq!(d["kind"], "approval");
    assert_eq!(d["principal"], "alice");
    assert_eq!(d["callId"], json!(call_id));
    assert_eq!(d["tool"], "delete_file");
    assert_eq!(d["approved"], true);
    assert_eq!(d["arguments"], json!({"path": "<b>notes</b>.txt"}));
    let at = d["atMs"].as_u64().unwrap();
    assert!((t0..=t1).contains(&at), "{at} not in {t0}..={t1}");

    // kept in the conversation's store: a new panel over the same history file shows it
    let fx = fx.restart(proxied(), common::with_gated_delete).await;
    let s = state(&fx.url(), "alice", &id).await;
    assert_eq!(s["decisions"], json!(decisions), "{s}");
    fx.panel.shutdown().await;
}

/// A tool that asks the person a question through the panel's own elicitor, for the call's
/// session, and returns the answer it got.
fn asking_tool(
    slot: Arc<OnceLock<toolwright_chat_panel::PanelElicitor>>,
) -> toolwright_tool_system::FnTool {
    use toolwright_mcp_bridge::elicitation::{ElicitationMode, ElicitationRequest, Elicitor};
    toolwright_tool_system::FnTool::new(
        "ask_budget",
        "Asks the person for a budget",
        json!({"type": "object", "properties": {}}),
        move |_args, ctx: toolwright_core::ToolContext| {
            let slot = slot.clone();
            async move {
                let elicitor = slot
                    .get()
                    .cloned()
                    .ok_or_else(|| toolwright_core::ToolError::failed("no elicitor yet"))?;
                let request = ElicitationRequest::new(
                    "planner",
                    ctx.session_id.clone(),
                    "What is the budget?",
                    ElicitationMode::Form {
                        schema: json!({"type": "object",
                            "properties": {"amount": {"type": "number"}}}),
                    },
                );
                Ok(json!(format!("{:?}", elicitor.elicit(request).await)))
            }
        },
    )
    .with_timeout(Duration::from_secs(60))
}

#[tokio::test]
async fn who_decided_an_answer_to_an_mcp_question_names_its_principal() {
    let slot: Arc<OnceLock<toolwright_chat_panel::PanelElicitor>> = Arc::default();
    let tool = asking_tool(slot.clone());
    let fx = common::start_with_agent(
        proxied(),
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
    let id = mint(&base, "alice").await;
    let conv = format!("{base}api/sessions/{id}");
    let turn = reqwest::Client::new()
        .post(format!("{conv}/messages"))
        .header("x-forwarded-user", "alice")
        .json(&json!({"text": "plan it"}))
        .send()
        .await
        .unwrap();
    assert_eq!(turn.status().as_u16(), 200);
    // read the turn's stream until the question shows
    let mut stream = turn.bytes_stream();
    let mut seen = String::new();
    let question = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let chunk = stream.next().await.expect("the stream goes on").unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if let Some((_, q)) = common::sse_events(&seen)
                .into_iter()
                .find(|(e, _)| e == "elicitation")
            {
                return q;
            }
        }
    })
    .await
    .expect("the question is asked");
    let n = question["id"].as_u64().unwrap();
    let url = format!("{conv}/elicitations/{n}");
    let answer = json!({"action": "accept", "content": {"amount": 1200}});
    // bob cannot answer it
    let (s, text) = call("bob", reqwest::Method::POST, &url, Some(answer.clone())).await;
    assert_eq!(s, 404, "{text}");
    let t0 = now_ms();
    let (s, text) = call("alice", reqwest::Method::POST, &url, Some(answer)).await;
    let t1 = now_ms();
    assert_eq!(s, 200, "{text}");
    let rest = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = stream.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        seen
    })
    .await
    .expect("the turn ends");
    assert!(rest.contains("Noted."), "{rest}");
    assert!(rest.contains("1200"), "the tool got the answer: {rest}");
    let s = state(&base, "alice", &id).await;
    let decisions = s["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{s}");
    let d = &decisions[0];
    assert_eq!(d["kind"], "answer");
    assert_eq!(d["principal"], "alice");
    assert_eq!(d["service"], "planner");
    assert_eq!(d["message"], "What is the budget?");
    assert_eq!(d["action"], "accept");
    assert_eq!(d["content"], json!({"amount": 1200}));
    let at = d["atMs"].as_u64().unwrap();
    assert!((t0..=t1).contains(&at), "{at} not in {t0}..={t1}");
}
