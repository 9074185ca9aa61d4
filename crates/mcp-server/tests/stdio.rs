//! `toolwright-mcp serve --stdio` as a process, driven by rmcp's client over its stdin/stdout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{Answer, Person, text};
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().unwrap().clone())
}

/// The binary over stdio with the demo tools, `transfer` held, a 500 ms time limit.
async fn spawn(person: Person) -> (RunningService<RoleClient, Person>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.json");
    std::fs::write(
        &config,
        json!({"tools": ["demo"], "requireApproval": ["transfer"], "toolTimeoutMs": 500})
            .to_string(),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwright-mcp"));
    cmd.arg("serve").arg("--config").arg(&config).arg("--stdio");
    let transport = TokioChildProcess::new(cmd).unwrap();
    (common::connect(transport, person).await, dir)
}

#[tokio::test]
async fn over_stdio_a_client_lists_and_calls() {
    let (client, _dir) = spawn(Person::new(Answer::Approve)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"));
    let r = client
        .call_tool(call("echo", json!({"text": "over stdio"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "over stdio");
    let started = Instant::now();
    let r = client
        .call_tool(call("sleep", json!({"seconds": 60})))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(r.is_error, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn over_stdio_on_the_older_protocol_an_approval_is_an_elicitation_request() {
    for (answer, runs) in [(Answer::Approve, true), (Answer::Decline, false)] {
        let person = Person::new(answer).on(ProtocolVersion::V_2025_11_25);
        let (client, _dir) = spawn(person.clone()).await;
        let r = client
            .call_tool(call("transfer", json!({"to": "bo", "amount": 1})))
            .await
            .unwrap();
        assert_eq!(person.questions(), 1, "{answer:?}");
        assert_eq!(
            text(&r).contains("demo-0001"),
            runs,
            "{answer:?}: {}",
            text(&r)
        );
        assert_eq!(r.is_error == Some(true), !runs);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn over_stdio_on_the_current_protocol_an_approval_is_a_round_trip() {
    let person = Person::new(Answer::Approve);
    let (client, _dir) = spawn(person.clone()).await;
    let r = client
        .call_tool(call("transfer", json!({"to": "bo", "amount": 1})))
        .await
        .unwrap();
    assert_eq!(person.questions(), 1);
    assert!(text(&r).contains("demo-0001"), "{}", text(&r));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_config_that_serves_nothing_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.json");
    std::fs::write(&config, "{}").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwright-mcp"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("serves no tools"), "{err}");
}

#[tokio::test]
async fn over_stdio_a_tool_logs_and_asks_the_clients_model_and_person() {
    use rmcp::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.json");
    std::fs::write(&config, json!({"tools": ["conformance"]}).to_string()).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwright-mcp"));
    cmd.arg("serve").arg("--config").arg(&config).arg("--stdio");
    let seen = common::RecordingClient::default();
    let client = seen
        .clone()
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    client
        .call_tool(call("test_tool_with_logging", json!({})))
        .await
        .unwrap();
    let r = client
        .call_tool(call("test_sampling", json!({"prompt": "over a pipe?"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "LLM response: you asked: over a pipe?");
    let r = client
        .call_tool(call("test_elicitation", json!({"message": "name?"})))
        .await
        .unwrap();
    assert!(text(&r).contains("action=accept"), "{r:?}");
    assert_eq!(seen.logs.lock().unwrap().len(), 3);
    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(resources.len(), 3);
    client.cancel().await.unwrap();
}
