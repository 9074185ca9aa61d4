//! Spec 001 (native function calling) and the dispatcher scenarios of 000 over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_context_engine::SessionStore;
use toolwright_core::{Message, ToolContext, ToolError, ToolProvider, ToolSpec};
use toolwright_tool_system::{Agent, FnTool, LoopEvent};

#[tokio::test]
async fn t5_bind_tools_sends_tools_field_not_prompt() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("hi"));
    let agent = Agent::builder(model(&server))
        .tool(weather(Arc::default()))
        .system_prompt("You are helpful.")
        .build()
        .unwrap();
    agent.run("s", "hello").await.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        body["tools"][0]["function"]["parameters"]["required"][0],
        "city"
    );
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert_eq!(
        system, "You are helpful.",
        "no tool schema in the system prompt"
    );
}

#[tokio::test]
async fn t5_bind_empty_tools_sends_no_tools_field_and_answers_text() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("plain answer"));
    let agent = Agent::builder(model(&server)).build().unwrap();
    let out = agent.run("s", "hello").await.unwrap();
    assert_eq!(out.answer, "plain answer");
    assert!(server.requests()[0].body.get("tools").is_none());
}

#[tokio::test]
async fn t5_tool_result_appended_as_tool_message_with_call_id() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call(
        "call_abc",
        "get_weather",
        r#"{"city":"Beijing"}"#,
    ));
    server.push(Reply::text("It is 22 degrees in Beijing."));
    let (agent, calls, store) = weather_agent(&server);
    let out = agent.run("s", "Weather in Beijing?").await.unwrap();
    assert_eq!(out.answer, "It is 22 degrees in Beijing.");
    assert_eq!(out.iterations, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let tools = sent_tool_messages(&server, 1);
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["tool_call_id"], "call_abc");
    let content: Value = serde_json::from_str(tools[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"temp": 22, "city": "Beijing"}));
    // the assistant call precedes it in the next request
    let msgs = sent_messages(&server, 1);
    assert_eq!(msgs[msgs.len() - 2]["tool_calls"][0]["id"], "call_abc");
    let session = checked_session(&*store, "s").await;
    assert_eq!(session.len(), 4);
    assert_eq!(
        session[3],
        Message::assistant("It is 22 degrees in Beijing.")
    );
}

#[tokio::test]
async fn t5_stop_without_tool_calls_is_plain_answer() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("No tools needed."));
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model(&server))
        .tool(weather(calls.clone()))
        .build()
        .unwrap();
    let out = agent.run("s", "hi").await.unwrap();
    assert_eq!(out.answer, "No tools needed.");
    assert_eq!(out.iterations, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn t3_unknown_tool_error_reaches_model() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("call_1", "xxx", "{}"));
    server.push(Reply::text("Sorry, I cannot do that."));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(Arc::default()))
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "do xxx").await.unwrap();
    assert_eq!(out.answer, "Sorry, I cannot do that.");
    let tools = sent_tool_messages(&server, 1);
    let content: Value = serde_json::from_str(tools[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        content,
        json!({"success": false, "error": "Tool not found: xxx"})
    );
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn t3_second_provider_is_routed_through_the_same_seam() {
    /// Stands in for the Skills executor: any provider behind the same trait.
    struct Skills;
    #[toolwright_core::async_trait]
    impl ToolProvider for Skills {
        fn provider_name(&self) -> &str {
            "skills"
        }
        async fn list(&self) -> Vec<ToolSpec> {
            vec![ToolSpec::new(
                "summarize",
                "Summarize text",
                json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            )]
        }
        async fn call(
            &self,
            name: &str,
            args: Value,
            _ctx: ToolContext,
        ) -> Result<toolwright_core::ToolOutput, ToolError> {
            let result: Result<Value, ToolError> = async {
                match name {
                    "summarize" => Ok(json!(format!(
                        "summary of {}",
                        args["text"].as_str().unwrap_or("")
                    ))),
                    _ => Err(ToolError::not_found(name)),
                }
            }
            .await;
            result.map(toolwright_core::ToolOutput::from)
        }
    }
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "get_weather", r#"{"city":"Paris"}"#),
        ("c2", "summarize", r#"{"text":"abc"}"#),
    ]));
    server.push(Reply::text("done"));
    let agent = Agent::builder(model(&server))
        .tool(weather(Arc::default()))
        .provider(Arc::new(Skills))
        .build()
        .unwrap();
    agent.run("s", "go").await.unwrap();
    let names: Vec<String> = server.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, vec!["get_weather", "summarize"]);
    let tools = sent_tool_messages(&server, 1);
    assert!(tools[0]["content"].as_str().unwrap().contains("Paris"));
    assert_eq!(tools[1]["content"], "summary of abc");
}

#[tokio::test]
async fn t4_tool_timeout_result_and_loop_continues() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("call_1", "slow", "{}"));
    server.push(Reply::text("The tool timed out, sorry."));
    let finished = Arc::new(AtomicBool::new(false));
    let f2 = finished.clone();
    let slow = FnTool::new(
        "slow",
        "sleeps",
        json!({"type": "object", "properties": {}}),
        move |_, _| {
            let f2 = f2.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                f2.store(true, Ordering::SeqCst);
                Ok(json!("late"))
            }
        },
    )
    .with_timeout(Duration::from_millis(200));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(slow)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "go").await.unwrap();
    assert_eq!(out.answer, "The tool timed out, sorry.");
    let content: Value = serde_json::from_str(
        sent_tool_messages(&server, 1)[0]["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(content["success"], false);
    assert_eq!(
        content["error"],
        "Tool slow timed out after 200 ms and was stopped"
    );
    assert!(!finished.load(Ordering::SeqCst));
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn t4_tool_error_message_becomes_tool_content_and_loop_continues() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("call_1", "flaky", "{}"));
    server.push(Reply::text("It failed."));
    let agent = Agent::builder(model(&server))
        .tool(failing("flaky", "database unreachable"))
        .build()
        .unwrap();
    let out = agent.run("s", "go").await.unwrap();
    assert_eq!(out.answer, "It failed.");
    let content = sent_tool_messages(&server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(content.contains("database unreachable"));
    assert!(
        !content.contains("operator-only"),
        "operator detail must not reach the model"
    );
}

#[tokio::test]
async fn t4_panicking_tool_result_and_loop_continues() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("call_1", "boom", "{}"));
    server.push(Reply::text("recovered"));
    let boom = FnTool::new(
        "boom",
        "panics",
        json!({"type": "object", "properties": {}}),
        |_, _| async {
            let v: Vec<u8> = Vec::new();
            Ok(json!(v[3])) // index out of bounds: a panic inside the tool
        },
    );
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(boom)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "go").await.unwrap();
    assert_eq!(out.answer, "recovered");
    let content = sent_tool_messages(&server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(content.contains("Tool boom crashed"), "{content}");
    assert!(
        !content.contains("index out of bounds"),
        "the panic text is the operator's, not the model's: {content}"
    );
    let session = checked_session(&*store, "s").await;
    assert_eq!(session.len(), 4);
}

#[tokio::test]
async fn t5_invalid_json_arguments_error_reaches_model_for_that_call() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("call_ok", "get_weather", r#"{"city":"Oslo"}"#),
        ("call_bad", "get_weather", r#"{"city": Oslo"#),
    ]));
    server.push(Reply::text("done"));
    let (agent, calls, store) = weather_agent(&server);
    let out = agent.run("s", "go").await.unwrap();
    assert_eq!(out.answer, "done");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the valid sibling runs, the invalid one does not"
    );
    let tools = sent_tool_messages(&server, 1);
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["tool_call_id"], "call_ok");
    assert!(tools[0]["content"].as_str().unwrap().contains("Oslo"));
    assert_eq!(tools[1]["tool_call_id"], "call_bad");
    let bad: Value = serde_json::from_str(tools[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(bad["success"], false);
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("Invalid JSON arguments for tool `get_weather`"),
        "{bad}"
    );
    // the raw arguments are kept in the session, not lost
    let session = checked_session(&*store, "s").await;
    assert_eq!(
        session[1].tool_calls()[1].arguments,
        json!(r#"{"city": Oslo"#)
    );
}

#[tokio::test]
async fn t4_schema_invalid_arguments_not_run_error_reaches_model() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call(
        "call_1",
        "get_weather",
        r#"{"town":"Oslo"}"#,
    ));
    server.push(Reply::tool_call(
        "call_2",
        "get_weather",
        r#"{"city":"Oslo"}"#,
    ));
    server.push(Reply::text("fixed"));
    let (agent, calls, store) = weather_agent(&server);
    let out = agent.run("s", "go").await.unwrap();
    assert_eq!(out.answer, "fixed");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let first = sent_tool_messages(&server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        first.contains("Invalid arguments for tool get_weather"),
        "{first}"
    );
    assert!(first.contains("city"), "{first}");
    assert_eq!(checked_session(&*store, "s").await.len(), 6);
}

#[tokio::test]
async fn t5_max_iterations_runs_five_rounds_then_returns_the_last_response_and_warns() {
    let server = ScriptedServer::start().await;
    for i in 0..6 {
        server.push(
            Reply::tool_call(
                &format!("call_{i}"),
                "get_weather",
                &format!(r#"{{"city":"Rome {i}"}}"#),
            )
            .with_content(&format!("round {i}")),
        );
    }
    server.push(Reply::text("never requested"));
    let (agent, calls, store) = weather_agent(&server);
    let logs = Logs::capture();
    let out = agent.run("s", "loop").await.unwrap();
    assert!(out.hit_iteration_limit);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        5,
        "001: the tool-call loop runs max_iterations (5) rounds"
    );
    assert_eq!(server.request_count(), 6);
    assert_eq!(out.iterations, 6, "model calls");
    assert_eq!(out.answer, "round 5", "the last model response is returned");
    let log = logs.text();
    assert!(
        log.contains("WARN") && log.contains("reached max_iterations"),
        "{log}"
    );
    let session = checked_session(&*store, "s").await;
    let last = session.last().unwrap().content().to_owned();
    assert!(last.contains("Not run"), "{last}");
}

#[tokio::test]
async fn t5_model_looping_on_same_failing_call_ends_with_session_intact() {
    let server = ScriptedServer::start().await;
    server.respond_with(|_| Reply::tool_call("call_same", "flaky", "{}"));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(failing("flaky", "always broken"))
        .max_iterations(3)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "try").await.unwrap();
    assert!(out.hit_iteration_limit);
    assert_eq!(
        server.request_count(),
        4,
        "3 rounds of tools, then the stop"
    );
    let session = checked_session(&*store, "s").await;
    assert_eq!(session.len(), 1 + 4 * 2);
    assert_eq!(session[0], Message::user("try"));
    // a second run in the same session works and sees the history
    server.push(Reply::text("giving up"));
    let out = agent.run("s", "ok stop").await.unwrap();
    assert_eq!(out.answer, "giving up");
    assert_eq!(sent_messages(&server, 4).len(), 1 + 4 * 2 + 1);
}

#[tokio::test]
async fn t4_huge_result_capped_with_note_and_session_intact() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("call_1", "dump", "{}"));
    server.push(Reply::text("summarised"));
    let dump = FnTool::new(
        "dump",
        "huge",
        json!({"type": "object", "properties": {}}),
        |_, _| async { Ok(json!("x".repeat(1_000_000))) },
    );
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(dump)
        .max_result_bytes(4096)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "dump").await.unwrap();
    assert_eq!(out.answer, "summarised");
    let content = sent_tool_messages(&server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(content.len() <= 4096);
    assert!(content.contains("[truncated: the result was 1000000 bytes"));
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn t5_several_calls_run_concurrently_results_in_call_order() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("a", "meet", r#"{"who":"a"}"#),
        ("b", "meet", r#"{"who":"b"}"#),
        ("c", "meet", r#"{"who":"c"}"#),
    ]));
    server.push(Reply::text("all met"));
    // Each call waits until all three are running: only possible if they run concurrently.
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let meet = FnTool::new(
        "meet",
        "waits for the others",
        json!({"type": "object", "properties": {"who": {"type": "string"}}}),
        move |args, _| {
            let b = barrier.clone();
            async move {
                b.wait().await;
                Ok(args["who"].clone())
            }
        },
    )
    .with_timeout(Duration::from_secs(10));
    let agent = Agent::builder(model(&server)).tool(meet).build().unwrap();
    agent.run("s", "go").await.unwrap();
    let tools = sent_tool_messages(&server, 1);
    let order: Vec<&str> = tools
        .iter()
        .map(|t| t["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec!["a", "b", "c"]);
    let contents: Vec<&str> = tools
        .iter()
        .map(|t| t["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, vec!["a", "b", "c"]);
}

#[tokio::test]
async fn t1_typed_tool_schema_matches_what_is_deserialized() {
    #[derive(Deserialize, JsonSchema)]
    struct Args {
        /// City name.
        city: String,
        /// Unit.
        unit: Unit,
    }
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Unit {
        Celsius,
        Fahrenheit,
    }
    let tool = FnTool::typed(
        "get_weather",
        "Weather",
        |a: Args, _ctx: ToolContext| async move {
            Ok(json!({"city": a.city, "f": matches!(a.unit, Unit::Fahrenheit)}))
        },
    );
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call(
        "c1",
        "get_weather",
        r#"{"city":"Oslo","unit":"kelvin"}"#,
    ));
    server.push(Reply::tool_call(
        "c2",
        "get_weather",
        r#"{"city":"Oslo","unit":"fahrenheit"}"#,
    ));
    server.push(Reply::text("ok"));
    let agent = Agent::builder(model(&server)).tool(tool).build().unwrap();
    agent.run("s", "go").await.unwrap();
    let params = &server.requests()[0].body["tools"][0]["function"]["parameters"];
    assert_eq!(params["type"], "object");
    assert!(params.get("$schema").is_none() && params.get("$defs").is_none());
    assert_eq!(
        params["properties"]["unit"]["enum"],
        json!(["celsius", "fahrenheit"])
    );
    // the schema rejects what deserialization would reject, before the tool runs
    let first = sent_tool_messages(&server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        first.contains("Invalid arguments") && first.contains("/unit"),
        "{first}"
    );
    let second = sent_tool_messages(&server, 2)[1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        serde_json::from_str::<Value>(&second).unwrap(),
        json!({"city": "Oslo", "f": true})
    );
}

#[tokio::test]
async fn t9_function_calling_false_switches_to_prompt_and_plain_output_is_answer() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("I think it is sunny."));
    let store = store();
    let agent = Agent::builder(model_without_fc(&server))
        .tool(weather(Arc::default()))
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "Weather?").await.unwrap();
    assert_eq!(out.protocol, "json");
    assert_eq!(
        out.answer, "I think it is sunny.",
        "no valid call is a plain answer, not an error"
    );
    let body = &server.requests()[0].body;
    assert!(
        body.get("tools").is_none(),
        "no tools field for a model without function calling"
    );
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("get_weather") && system.contains("\"tool\": null"),
        "{system}"
    );
    assert_eq!(checked_session(&*store, "s").await.len(), 2);
}

#[tokio::test]
async fn t9_function_calling_false_logs_a_deprecation_warning_through_a_run() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("plain"));
    let agent = Agent::builder(model_without_fc(&server))
        .tool(weather(Arc::default()))
        .build()
        .unwrap();
    let logs = Logs::capture();
    agent.run("s", "Weather?").await.unwrap();
    let log = logs.text();
    assert!(log.contains("WARN") && log.contains("deprecated"), "{log}");
}

#[tokio::test]
async fn t9_fallback_output_without_valid_call_json_is_the_answer_with_no_extra_call() {
    let server = ScriptedServer::start().await;
    // Looks like a decision but is broken JSON: 001 says plain text, no error.
    server.push(Reply::text(
        r#"{"tool": "get_weather", "args": {"city": Beijing}"#,
    ));
    server.push(Reply::text("never requested"));
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model_without_fc(&server))
        .tool(weather(calls.clone()))
        .build()
        .unwrap();
    let out = agent.run("s", "Weather?").await.unwrap();
    assert_eq!(
        out.answer,
        r#"{"tool": "get_weather", "args": {"city": Beijing}"#
    );
    assert_eq!(server.request_count(), 1, "no correction round by default");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn t6_the_correction_round_is_an_option() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(
        r#"{"tool": "get_weather", "args": {"city": Beijing}"#,
    ));
    server.push(Reply::text(r#"{"tool": null, "reply": "Fixed."}"#));
    let agent = Agent::builder(model_without_fc(&server))
        .tool(weather(Arc::default()))
        .corrections(true)
        .build()
        .unwrap();
    let out = agent.run("s", "Weather?").await.unwrap();
    assert_eq!(out.answer, "Fixed.");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn t5_model_error_keeps_finished_rounds_in_session() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("c1", "get_weather", r#"{"city":"Oslo"}"#));
    server.push(Reply::status(400, "bad request"));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(Arc::default()))
        .store(store.clone())
        .build()
        .unwrap();
    let err = agent.run("s", "go").await.unwrap_err();
    assert!(
        matches!(err, toolwright_tool_system::LoopError::Model(_)),
        "{err}"
    );
    let session = checked_session(&*store, "s").await;
    assert_eq!(
        session.len(),
        3,
        "user + assistant call + tool result survive the failure"
    );
    let _ = store.list().await.unwrap();
}

#[tokio::test]
async fn t5_context_budget_trims_old_history_but_session_keeps_everything() {
    let server = ScriptedServer::start().await;
    for _ in 0..3 {
        server.push(Reply::text("long answer ".repeat(100)));
    }
    let store = store();
    let agent = Agent::builder(model(&server))
        .context_budget(400)
        .store(store.clone())
        .build()
        .unwrap();
    for i in 0..3 {
        agent
            .run("s", &format!("question {i} {}", "words ".repeat(50)))
            .await
            .unwrap();
    }
    let sent = sent_messages(&server, 2);
    assert!(
        sent.len() < 5,
        "old turns are trimmed from the request: {}",
        sent.len()
    );
    assert!(
        sent.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .starts_with("question 2")
    );
    assert_eq!(
        checked_session(&*store, "s").await.len(),
        6,
        "the session keeps every message"
    );
}

/// A model that calls get_weather(Beijing) twice in a row, then answers.
async fn two_identical_calls_then_an_answer() -> ScriptedServer {
    let server = ScriptedServer::start().await;
    for id in ["c1", "c2"] {
        server.push(Reply::tool_call(
            id,
            "get_weather",
            r#"{"city": "Beijing"}"#,
        ));
    }
    server.push(Reply::text("Sunny, 22°C."));
    server
}

#[tokio::test]
async fn t5_repeated_identical_calls_run_again_by_default() {
    let server = two_identical_calls_then_an_answer().await;
    let (agent, calls, store) = weather_agent(&server);
    let out = agent.run("s", "weather?").await.unwrap();
    assert_eq!(out.answer, "Sunny, 22°C.");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "a tool that is not declared idempotent runs every time"
    );
    assert!(server.requests()[2].body.get("tool_choice").is_none());
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn t5_a_repeated_call_of_an_idempotent_tool_reuses_the_result_and_asks_for_an_answer() {
    let server = two_identical_calls_then_an_answer().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(calls.clone()).idempotent())
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "weather?").await.unwrap();
    assert_eq!(out.answer, "Sunny, 22°C.");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the repeat was not run again"
    );
    let reqs = server.requests();
    assert!(reqs[1].body.get("tool_choice").is_none());
    assert_eq!(
        reqs[2].body["tool_choice"], "none",
        "after a repeat the model is asked to answer"
    );
    // Both calls have their result in the session, so the history stays a valid request.
    let session = checked_session(&*store, "s").await;
    let results: Vec<_> = session
        .iter()
        .filter(|m| m.role() == toolwright_core::Role::Tool)
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].content(), results[1].content());
}

#[tokio::test]
async fn g5_three_streamed_calls_the_middle_one_broken_the_others_run() {
    let server = ScriptedServer::start().await;
    server.push(
        Reply::tool_calls(&[
            ("c1", "get_weather", r#"{"city":"Oslo"}"#),
            ("c2", "get_weather", r#"{"city": Beijing"#),
            ("c3", "get_weather", r#"{"city":"Lima"}"#),
        ])
        .shape(|s| s.args_chunk = 4),
    );
    server.push(Reply::text("two of three"));
    let (agent, calls, store) = weather_agent(&server);
    let mut events = agent.run_stream("s", "go");
    let mut results = Vec::new();
    let mut answer = None;
    while let Some(ev) = events.next().await {
        match ev {
            LoopEvent::ToolResult {
                id,
                content,
                is_error,
                ..
            } => results.push((id, content, is_error)),
            LoopEvent::Finished(out) => answer = Some(out.answer),
            LoopEvent::Failed(e) => panic!("the run failed: {e}"),
            _ => {}
        }
    }
    assert_eq!(answer.as_deref(), Some("two of three"));
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the two valid calls ran");
    assert_eq!(results.len(), 3);
    assert!(!results[0].2 && !results[2].2);
    assert!(results[0].1.contains("Oslo") && results[2].1.contains("Lima"));
    let (id, bad, is_error) = &results[1];
    assert_eq!(id, "c2");
    assert!(is_error);
    assert!(
        bad.contains("get_weather") && bad.contains("Beijing"),
        "{bad}"
    );
    let sent = sent_tool_messages(&server, 1);
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[1]["tool_call_id"], "c2");
    // The raw text goes back to the provider verbatim as the call's arguments.
    let assistant = &sent_messages(&server, 1)[1];
    assert_eq!(
        assistant["tool_calls"][1]["function"]["arguments"],
        r#"{"city": Beijing"#
    );
    checked_session(&*store, "s").await;
}

/// A tool that ends the turn: its string argument comes back as its result, which is the answer.
fn submit(calls: Arc<AtomicUsize>) -> FnTool {
    FnTool::new(
        "submit",
        "Submit the final report to the user",
        json!({"type": "object", "properties": {"report": {"type": "string"}}, "required": ["report"]}),
        move |args, _ctx| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                match args["report"].as_str() {
                    Some("") => Err(ToolError::failed("the report is empty")),
                    _ => Ok(args["report"].clone()),
                }
            }
        },
    )
    .ends_turn()
}

#[tokio::test]
async fn t5_a_tool_that_ends_the_turn_gives_the_answer_without_another_model_call() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "get_weather", r#"{"city":"Oslo"}"#),
        ("c2", "submit", r#"{"report":"Oslo: 22 degrees."}"#),
    ]));
    server.push(Reply::text("You are welcome."));
    let (calls, submitted) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(weather(calls))
        .tool(submit(submitted.clone()))
        .store(store.clone())
        .build()
        .unwrap();
    let mut events = agent.run_stream("s", "Report Oslo's weather");
    let (mut text, mut out) = (String::new(), None);
    while let Some(ev) = events.next().await {
        match ev {
            LoopEvent::TextDelta(t) => text.push_str(&t),
            LoopEvent::Finished(o) => out = Some(o),
            LoopEvent::Failed(e) => panic!("the run failed: {e}"),
            _ => {}
        }
    }
    let out = out.unwrap();
    assert_eq!(out.answer, "Oslo: 22 degrees.");
    assert_eq!(text, "Oslo: 22 degrees.", "the answer is streamed as text");
    assert_eq!(out.iterations, 1, "one model call");
    assert_eq!(server.requests().len(), 1);
    assert_eq!(submitted.load(Ordering::SeqCst), 1);
    // The session is a valid history: calls, both results, then the answer as the reply.
    let session = checked_session(&*store, "s").await;
    assert_eq!(session.len(), 5, "{session:?}");
    assert_eq!(session[4], Message::assistant("Oslo: 22 degrees."));
    // The next turn sends it as the assistant's reply after the tool results.
    agent.run("s", "thanks").await.unwrap();
    let msgs = sent_messages(&server, 1);
    let n = msgs.len();
    assert_eq!(msgs[n - 3]["role"], "tool");
    assert_eq!(msgs[n - 2]["role"], "assistant");
    assert_eq!(msgs[n - 2]["content"], "Oslo: 22 degrees.");
    assert_eq!(msgs[n - 1]["content"], "thanks");
}

#[tokio::test]
async fn t5_a_failed_call_of_a_tool_that_ends_the_turn_goes_back_to_the_model() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("c1", "submit", r#"{"report":""}"#));
    server.push(Reply::text("I have nothing to report."));
    let submitted = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model(&server))
        .tool(submit(submitted.clone()))
        .build()
        .unwrap();
    let out = agent.run("s", "report").await.unwrap();
    assert_eq!(out.answer, "I have nothing to report.");
    assert_eq!(out.iterations, 2);
    assert_eq!(submitted.load(Ordering::SeqCst), 1);
    let sent = sent_tool_messages(&server, 1);
    assert!(sent[0]["content"].as_str().unwrap().contains("empty"));
}

#[tokio::test]
async fn a_persons_picture_is_stored_and_sent_with_their_text() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("A red square."));
    let store = store();
    let agent = Agent::builder(model(&server))
        .store(store.clone())
        .build()
        .unwrap();
    let png = [
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0,
        0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0,
    ];
    let picture = toolwright_core::Part::Image(
        toolwright_core::Media::image_bytes(&png, "image/png").unwrap(),
    );
    let mut events = agent.run_stream_with_parts("s", "What is this?", vec![picture.clone()]);
    let mut answer = None;
    while let Some(e) = events.next().await {
        if let LoopEvent::Finished(out) = e {
            answer = Some(out.answer);
        }
    }
    assert_eq!(answer.as_deref(), Some("A red square."));
    let stored = store.load("s").await.unwrap().messages;
    assert_eq!(
        stored[0],
        Message::user_with_parts("What is this?", vec![picture])
    );
    let sent = &server.requests()[0].body["messages"];
    let user = sent
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    let url = user["content"][1]["image_url"]["url"].as_str().unwrap();
    assert!(url.starts_with("data:image/png;base64,"), "{user}");
    assert_eq!(user["content"][0]["text"], "What is this?", "{user}");
}

#[tokio::test]
async fn the_answer_keeps_the_models_reasoning_in_the_session() {
    struct Thinker;
    #[toolwright_core::async_trait]
    impl toolwright_core::ChatModel for Thinker {
        fn info(&self) -> toolwright_core::ModelInfo {
            toolwright_core::ModelInfo::new("thinker", true)
        }
        async fn chat(
            &self,
            _: toolwright_core::ChatRequest,
        ) -> Result<toolwright_core::ChatResponse, toolwright_core::ModelError> {
            Ok(toolwright_core::ChatResponse::new(
                "4",
                vec![],
                toolwright_core::FinishReason::Stop,
                None,
            )
            .with_parts(vec![toolwright_core::Part::Reasoning(
                toolwright_core::Reasoning::new(
                    "openai-chat",
                    toolwright_core::ReasoningKind::Full,
                    "2 and 2 make 4",
                ),
            )]))
        }
    }
    let store = store();
    let agent = Agent::builder(Thinker)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "2 + 2?").await.unwrap();
    assert_eq!(out.answer, "4");
    let stored = store.load("s").await.unwrap().messages;
    let answer = stored.last().unwrap();
    assert_eq!(answer.content(), "4");
    assert!(
        matches!(answer.parts(), [toolwright_core::Part::Reasoning(r)] if r.text == "2 and 2 make 4"),
        "{answer:?}"
    );
}
