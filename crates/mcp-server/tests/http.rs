//! The server over Streamable HTTP, driven by rmcp's client and by raw requests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use reqwest_ring as reqwest;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Answer, Person, connect_http, http_server, text};
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use serde_json::{Value, json};
use toolwright_mcp_server::{HttpOptions, ProtectedResource, TokenVerifier, VerifiedToken};

fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().unwrap().clone())
}

#[tokio::test]
async fn a_client_lists_and_calls_the_dispatchers_tools() {
    let url = http_server().await;
    let client = connect_http(&url, Person::new(Answer::Approve)).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for want in ["echo", "add", "pixel", "chime", "transfer", "sleep"] {
        assert!(
            names.contains(&want.to_owned()),
            "{want} missing from {names:?}"
        );
    }
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(echo.input_schema["required"], json!(["text"]));

    let r = client
        .call_tool(call("echo", json!({"text": "hello"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "hello");
    assert_ne!(r.is_error, Some(true));
    let r = client
        .call_tool(call("add", json!({"a": 2, "b": 3})))
        .await
        .unwrap();
    assert_eq!(text(&r), "5.0");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn image_and_audio_parts_become_mcp_image_and_audio_content() {
    let url = http_server().await;
    let client = connect_http(&url, Person::new(Answer::Approve)).await;
    let r = client.call_tool(call("pixel", json!({}))).await.unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["content"][1]["type"], "image");
    assert_eq!(v["content"][1]["mimeType"], "image/png");
    assert!(
        v["content"][1]["data"]
            .as_str()
            .unwrap()
            .starts_with("iVBORw0KGgo")
    );
    let r = client.call_tool(call("chime", json!({}))).await.unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["content"][1]["type"], "audio");
    assert_eq!(v["content"][1]["mimeType"], "audio/wav");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_held_call_is_asked_of_the_person_and_runs_when_approved() {
    let url = http_server().await;
    let person = Person::new(Answer::Approve);
    let client = connect_http(&url, person.clone()).await;
    let r = client
        .call_tool(call("transfer", json!({"to": "ann", "amount": 5})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(text(&r).contains("demo-0001"), "{}", text(&r));
    assert_eq!(person.questions(), 1);
    let q = person.last_question.lock().unwrap().clone();
    assert!(q.contains("transfer") && q.contains("ann"), "{q}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_held_call_the_person_declines_is_refused_and_not_run() {
    let url = http_server().await;
    let person = Person::new(Answer::Decline);
    let client = connect_http(&url, person.clone()).await;
    let r = client
        .call_tool(call("transfer", json!({"to": "ann", "amount": 5})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("declined"), "{}", text(&r));
    assert!(!text(&r).contains("demo-0001"));
    assert_eq!(person.questions(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_that_cannot_be_asked_gets_a_clear_refusal() {
    let url = http_server().await;
    let client = connect_http(&url, Person::new(Answer::CannotAsk)).await;
    let r = client
        .call_tool(call("transfer", json!({"to": "ann", "amount": 5})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("elicitation capability"), "{}", text(&r));
}

#[tokio::test]
async fn an_older_protocol_over_stateless_http_is_told_how_to_get_asked() {
    let url = http_server().await;
    let person = Person::new(Answer::Approve).on(ProtocolVersion::V_2025_11_25);
    let client = connect_http(&url, person.clone()).await;
    let r = client
        .call_tool(call("transfer", json!({"to": "ann", "amount": 5})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("2026-07-28"), "{}", text(&r));
    assert_eq!(person.questions(), 0);
    // Calls that need no approval work on the older protocol.
    let r = client
        .call_tool(call("echo", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "hi");
}

#[tokio::test]
async fn an_approval_cannot_be_replayed_for_other_arguments() {
    // A second worker with the same key takes the retry; a retry whose arguments differ from
    // the approved ones is refused.
    use rmcp::model::CallToolResponse;
    let key = [7u8; 32];
    let make = || {
        let d = toolwright_tool_system::Dispatcher::from_registry(
            toolwright_mcp_server::demo::tools().unwrap(),
        );
        toolwright_mcp_server::McpServer::builder(Arc::new(d))
            .approval_policy(toolwright_tool_system::ApprovalPolicy::new().always("transfer"))
            .state_key(key.to_vec())
            .unwrap()
            .build()
    };
    let a = common::serve(make().router(HttpOptions::default()).unwrap()).await;
    let b = common::serve(make().router(HttpOptions::default()).unwrap()).await;
    let first = connect_http(&format!("http://{a}/mcp"), Person::new(Answer::Approve)).await;
    let second = connect_http(&format!("http://{b}/mcp"), Person::new(Answer::Approve)).await;
    let asked = first
        .call_tool_once(call("transfer", json!({"to": "ann", "amount": 5})))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(input) = asked else {
        panic!("expected input_required, got {asked:?}")
    };
    let state = input.request_state.clone().unwrap();
    let mut answers = rmcp::model::InputResponses::new();
    answers.insert(
        "approval".into(),
        json!({"action": "accept", "content": {"approve": true}}),
    );
    // The same call on the other worker runs.
    let same = call("transfer", json!({"to": "ann", "amount": 5}))
        .with_request_state(state.clone())
        .with_input_responses(answers.clone());
    let CallToolResponse::Complete(done) = second.call_tool_once(same).await.unwrap() else {
        panic!("expected a result")
    };
    assert!(text(&done).contains("demo-0001"), "{}", text(&done));
    // Other arguments with that approval do not.
    let other = call("transfer", json!({"to": "mallory", "amount": 5000}))
        .with_request_state(state)
        .with_input_responses(answers);
    let CallToolResponse::Complete(refused) = second.call_tool_once(other).await.unwrap() else {
        panic!("expected a result")
    };
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).contains("does not match"),
        "{}",
        text(&refused)
    );
}

#[tokio::test]
async fn a_tool_that_hangs_is_stopped_at_the_time_limit() {
    let url = http_server().await;
    let client = connect_http(&url, Person::new(Answer::Approve)).await;
    let started = Instant::now();
    let r = client
        .call_tool(call("sleep", json!({"seconds": 60})))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("timed out"), "{}", text(&r));
    // and the server goes on
    let r = client
        .call_tool(call("echo", json!({"text": "still here"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "still here");
}

fn post(url: &str) -> reqwest::RequestBuilder {
    common::tls();
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
}

fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string()
}

#[tokio::test]
async fn a_page_of_a_foreign_origin_is_refused_with_403() {
    let url = http_server().await;
    let r = post(&url)
        .header("origin", "http://evil.example.com")
        .body(initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    let r = post(&url)
        .header("origin", format!("http://127.0.0.1:{port}"))
        .body(initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_request_for_a_foreign_host_is_refused() {
    let url = http_server().await;
    let r = post(&url)
        .header("host", "evil.example.com")
        .body(initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn a_malformed_request_gets_a_json_rpc_error_and_the_server_goes_on() {
    let url = http_server().await;
    let r = post(&url)
        .body("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\":")
        .send()
        .await
        .unwrap();
    let status = r.status();
    let raw = r.text().await.unwrap();
    assert!(status.is_client_error(), "{status} {raw}");
    let body: Value =
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{status} {raw:?}: {e}"));
    assert_eq!(body["jsonrpc"], "2.0");
    assert!(body["error"]["code"].as_i64().is_some(), "{body}");

    let r = post(&url)
        .header("mcp-protocol-version", "2025-11-25")
        .body(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": 5}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert!(text.contains("\"error\""), "{text}");

    let client = connect_http(&url, Person::new(Answer::Approve)).await;
    let r = client
        .call_tool(call("echo", json!({"text": "ok"})))
        .await
        .unwrap();
    assert_eq!(common::text(&r), "ok");
}

#[tokio::test]
async fn a_call_with_arguments_that_do_not_fit_is_an_error_result() {
    let url = http_server().await;
    let client = connect_http(&url, Person::new(Answer::Approve)).await;
    let r = client
        .call_tool(call("add", json!({"a": "two"})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("Invalid arguments"), "{}", text(&r));
}

/// Accepts `Bearer good` as subject `ann`.
struct OneToken;

#[async_trait::async_trait]
impl TokenVerifier for OneToken {
    async fn verify(&self, headers: &http::HeaderMap) -> Result<VerifiedToken, String> {
        match headers.get("authorization").and_then(|v| v.to_str().ok()) {
            Some("Bearer good") => Ok(VerifiedToken::new("ann")),
            Some(_) => Err("the token is not valid".into()),
            None => Err("sign in".into()),
        }
    }
}

#[tokio::test]
async fn a_protected_server_serves_its_metadata_and_wants_a_valid_token() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let resource = format!("http://{addr}/mcp");
    let pr = ProtectedResource::new(
        resource.clone(),
        ["https://auth.example.com"],
        Arc::new(OneToken),
    )
    .with_scopes(["tools"]);
    let router = common::server()
        .router(HttpOptions::default().protected(pr))
        .unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });

    common::tls();
    let meta: Value = reqwest::get(format!(
        "http://{addr}/.well-known/oauth-protected-resource/mcp"
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(meta["resource"], resource);
    assert_eq!(
        meta["authorization_servers"],
        json!(["https://auth.example.com"])
    );
    assert_eq!(meta["scopes_supported"], json!(["tools"]));

    let r = post(&resource).body(initialize()).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"http://{addr}/.well-known/oauth-protected-resource/mcp\""
        )),
        "{challenge}"
    );
    let r = post(&resource)
        .bearer_auth("bad")
        .body(initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );
    let r = post(&resource)
        .bearer_auth("good")
        .body(initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
