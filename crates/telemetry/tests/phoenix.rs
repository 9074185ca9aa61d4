//! traces in a real trace viewer. An agent with a tool runs against the
//! scripted OpenAI-compatible server; its spans go over OTLP/HTTP to Arize Phoenix, and the
//! test reads them back from Phoenix's REST API: the tree (run → model calls, tool call), the
//! GenAI attributes, and nothing of the message text (content capture is off).
//!
//! Phoenix's gRPC receiver listens on every interface whatever `PHOENIX_HOST` says, so
//! `cargo xtask test` starts it in a network namespace of its own where only loopback exists
//! (`unshare -n`, `lo` up) and exports `TEST_PHOENIX_PID` (its process) and
//! `TEST_PHOENIX_PORT`. This test then re-runs itself inside that namespace (`nsenter`) to
//! talk to it; nothing of Phoenix is reachable from outside the namespace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolwright_telemetry::Telemetry;

const INSIDE: &str = "TEST_PHOENIX_INSIDE";
const PID: &str = "TEST_PHOENIX_PID";
const PORT: &str = "TEST_PHOENIX_PORT";
const USERNS: &str = "TEST_PHOENIX_USERNS";
const NAME: &str = "traces_reach_phoenix_as_a_run_model_tool_tree";

fn var(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "{name} is not set, so the Phoenix trace test cannot run: run `cargo xtask test` (it \
             installs Arize Phoenix and starts it in a private network namespace), or `cargo \
             xtask with-services cargo test -p toolwright-telemetry --test phoenix`"
        ),
    }
}

#[test]
fn traces_reach_phoenix_as_a_run_model_tool_tree() {
    if std::env::var_os(INSIDE).is_some() {
        inside();
        return;
    }
    let pid = var(PID);
    var(PORT);
    let mut nsenter = Command::new("nsenter");
    nsenter.args(["-t", &pid, "-n"]);
    if std::env::var_os(USERNS).is_some() {
        nsenter.args(["-U", "--preserve-credentials"]);
    }
    let status = nsenter
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .status()
        .expect("nsenter (util-linux) runs");
    assert!(
        status.success(),
        "the test inside Phoenix's namespace failed: {status}"
    );
}

fn inside() {
    let base = format!("http://127.0.0.1:{}", var(PORT));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        wait_until_up(&http, &base).await;

        let telemetry = Telemetry::otlp(&base, "phoenix-trace-test").unwrap();
        telemetry.init().unwrap();
        let session = common::unique_session();
        let out = common::run_agent_in(&session).await;
        assert_eq!(out.answer, common::SECRET_ANSWER);
        telemetry.flush().unwrap();

        let spans = spans_of(&http, &base, &session).await;
        let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
        let one =
            |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
        let run = one("invoke_agent");
        assert_eq!(run.len(), 1, "{names:?}");
        let run = run[0];
        assert!(
            run["parent_span_id"].as_str().is_none_or(str::is_empty),
            "the run is the root: {run}"
        );
        assert_eq!(attr(run, "gen_ai.operation.name"), "invoke_agent");
        assert_eq!(attr(run, "gen_ai.provider.name"), "openai");
        assert_eq!(attr(run, "gen_ai.request.model"), "scripted-model");
        assert_eq!(attr(run, "gen_ai.usage.input_tokens"), "20");
        assert_eq!(attr(run, "gen_ai.usage.output_tokens"), "10");
        let chats = one("chat scripted-model");
        assert_eq!(chats.len(), 2, "{names:?}");
        let tools = one("execute_tool get_weather");
        assert_eq!(tools.len(), 1, "{names:?}");
        for child in chats.iter().chain(&tools) {
            assert_eq!(child["parent_span_id"], run["span_id"], "{child}");
            assert_eq!(child["trace_id"], run["trace_id"]);
        }
        for chat in &chats {
            assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
            assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), "10");
        }
        assert_eq!(attr(tools[0], "gen_ai.tool.name"), "get_weather");
        assert_eq!(attr(tools[0], "gen_ai.tool.call.id"), "call_1");
        // Content capture is off: nothing of the conversation reached the viewer.
        let all = Value::Array(spans.clone()).to_string();
        for secret in [common::SECRET_ARG, "oracle-5512", "clear-8842"] {
            assert!(!all.contains(secret), "{secret} reached Phoenix: {all}");
        }
        println!("Phoenix holds the trace: {names:?}");
    });
}

/// Phoenix takes 10–30 s to start; the test waits for it (a bounded wait, not a timing).
async fn wait_until_up(http: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Phoenix did not come up at {base} within 240 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every span of the trace whose run has `gen_ai.conversation.id` = `session`, from Phoenix's
/// REST API (OTLP JSON), once Phoenix has ingested all four.
async fn spans_of(http: &reqwest::Client, base: &str, session: &str) -> Vec<Value> {
    let url = format!("{base}/v1/projects/default/spans/otlpv1");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let session_filter = format!("gen_ai.conversation.id:{session}");
        let body = get_json(
            http,
            &url,
            &[("limit", "1000"), ("attribute", &session_filter)],
        )
        .await;
        if let Some(trace) = body["data"][0]["trace_id"].as_str() {
            let trace = get_json(http, &url, &[("limit", "1000"), ("trace_id", trace)]).await;
            let spans = trace["data"].as_array().cloned().unwrap_or_default();
            if spans.len() >= 4 {
                return spans;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Phoenix did not show the run's four spans within 60 s: {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn get_json(http: &reqwest::Client, url: &str, query: &[(&str, &str)]) -> Value {
    http.get(url)
        .query(query)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// An attribute's value as text (OTLP JSON: `{"key", "value": {"string_value" | "int_value"}}`).
fn attr(span: &Value, key: &str) -> String {
    let kv = span["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
        .unwrap_or_else(|| panic!("{} has no {key}: {span}", span["name"]));
    let v = &kv["value"];
    for k in ["string_value", "int_value", "bool_value", "double_value"] {
        match &v[k] {
            Value::Null => continue,
            Value::String(s) => return s.clone(),
            other => return other.to_string(),
        }
    }
    panic!("{key}: unexpected value {v}")
}
