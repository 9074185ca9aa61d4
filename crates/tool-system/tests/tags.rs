//! Spec 000 (`<tool_action>` tags in the ReAct loop, streaming detection) over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_tool_system::{Agent, FnTool, LoopEvent, ProtocolKind};

/// vector-search that records the arguments it got.
fn vector_search(seen: Arc<Mutex<Vec<Value>>>) -> FnTool {
    FnTool::new(
        "vector-search",
        "Search the knowledge base",
        json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}),
        move |args, _| {
            seen.lock().unwrap().push(args.clone());
            async move {
                Ok(json!({"hits": [format!("doc about {}", args["query"].as_str().unwrap_or(""))]}))
            }
        },
    )
}

fn tag_agent(server: &ScriptedServer, seen: Arc<Mutex<Vec<Value>>>) -> Agent {
    Agent::builder(model_without_fc(server))
        .tool(vector_search(seen))
        .protocol(ProtocolKind::Tag)
        .build()
        .unwrap()
}

#[tokio::test]
async fn t7_single_tag_call_is_parsed_and_run() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("<tool_action name=\"vector-search\">\n  <query value=\"读取文件\" />\n  <limit value=\"5\" />\n</tool_action>"));
    server.push(Reply::text("找到了。"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = store();
    let agent = Agent::builder(model_without_fc(&server))
        .tool(vector_search(seen.clone()))
        .protocol(ProtocolKind::Tag)
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "搜索").await.unwrap();
    assert_eq!(out.answer, "找到了。");
    assert_eq!(out.protocol, "tag");
    // {query: "读取文件", limit: "5"}, with "5" read as the schema's integer
    assert_eq!(
        seen.lock().unwrap()[0],
        json!({"query": "读取文件", "limit": 5})
    );
    // results are tool messages with synthesised ids; next iteration follows
    let tools = sent_tool_messages(&server, 1);
    assert_eq!(tools.len(), 1);
    assert!(
        tools[0]["content"]
            .as_str()
            .unwrap()
            .contains("doc about 读取文件")
    );
    let session = checked_session(&*store, "s").await;
    assert_eq!(session[1].tool_calls()[0].name, "vector-search");
}

#[tokio::test]
async fn t7_multiple_tags_run_in_order_each_result_separate() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(r#"<tool_action name="vector-search"><query value="a" /></tool_action> then <tool_action name="vector-search"><query value="b" /></tool_action>"#));
    server.push(Reply::text("done"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let agent = tag_agent(&server, seen.clone());
    agent.run("s", "two").await.unwrap();
    let queries: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|a| a["query"].clone())
        .collect();
    assert_eq!(queries, vec![json!("a"), json!("b")]);
    let tools = sent_tool_messages(&server, 1);
    assert_eq!(tools.len(), 2);
    assert!(
        tools[0]["content"]
            .as_str()
            .unwrap()
            .contains("doc about a")
    );
    assert!(
        tools[1]["content"]
            .as_str()
            .unwrap()
            .contains("doc about b")
    );
    assert_ne!(tools[0]["tool_call_id"], tools[1]["tool_call_id"]);
}

#[tokio::test]
async fn t7_unclosed_tag_never_runs() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(
        r#"Let me search <tool_action name="vector-search"><query value="a" />"#,
    ));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let agent = tag_agent(&server, seen.clone());
    let out = agent.run("s", "x").await.unwrap();
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(server.request_count(), 1);
    assert!(
        out.answer.contains("<tool_action"),
        "the unclosed tag stays text"
    );
}

#[tokio::test]
async fn t7_answer_at_the_round_limit_is_the_text_without_the_tags() {
    let server = ScriptedServer::start().await;
    server.respond_with(|_| {
        Reply::text(
            r#"Searching again. <tool_action name="vector-search"><query value="a" /></tool_action> Still looking."#,
        )
    });
    let agent = Agent::builder(model_without_fc(&server))
        .tool(vector_search(Arc::default()))
        .protocol(ProtocolKind::Tag)
        .max_iterations(2)
        .build()
        .unwrap();
    let out = agent.run("s", "x").await.unwrap();
    assert!(out.hit_iteration_limit);
    assert_eq!(out.answer, "Searching again.  Still looking.");
}

#[tokio::test]
async fn t3_unknown_tag_tool_error_reaches_model() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(
        r#"<tool_action name="xxx"><q value="1" /></tool_action>"#,
    ));
    server.push(Reply::text("ok"));
    let agent = tag_agent(&server, Arc::default());
    agent.run("s", "x").await.unwrap();
    let content: Value = serde_json::from_str(
        sent_tool_messages(&server, 1)[0]["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        content,
        json!({"success": false, "error": "Tool not found: xxx"})
    );
}

#[tokio::test]
async fn t7_tag_parsing_disabled_tags_are_plain_text() {
    let server = ScriptedServer::start().await;
    let text = r#"<tool_action name="vector-search"><query value="a" /></tool_action>"#;
    server.push(Reply::text(text));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(model_without_fc(&server))
        .tool(vector_search(seen.clone()))
        .protocol(ProtocolKind::Tag)
        .tool_action_parsing(false)
        .build()
        .unwrap();
    let mut events = agent.run_stream("s", "x");
    let mut shown = String::new();
    while let Some(ev) = events.next().await {
        if let LoopEvent::TextDelta(t) = ev {
            shown.push_str(&t);
        }
    }
    assert_eq!(shown, text);
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn t7_native_calls_win_over_tags() {
    let server = ScriptedServer::start().await;
    server.push(
        Reply::tool_call("call_native", "vector-search", r#"{"query":"native"}"#).with_content(
            r#"<tool_action name="vector-search"><query value="tag" /></tool_action>"#,
        ),
    );
    server.push(Reply::text("done"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(vector_search(seen.clone()))
        .protocol(ProtocolKind::Tag)
        .store(store.clone())
        .build()
        .unwrap();
    let mut events = agent.run_stream("s", "x");
    let mut shown = String::new();
    while let Some(ev) = events.next().await {
        if let LoopEvent::TextDelta(t) = ev {
            shown.push_str(&t);
        }
    }
    assert_eq!(seen.lock().unwrap().len(), 1, "only the native call runs");
    assert_eq!(seen.lock().unwrap()[0]["query"], "native");
    assert!(
        shown.contains(r#"<tool_action name="vector-search"><query value="tag" /></tool_action>"#),
        "the tag is shown as text: {shown}"
    );
    let tools = sent_tool_messages(&server, 1);
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["tool_call_id"], "call_native");
    // tools are also bound natively for a model with function calling
    assert!(server.requests()[0].body.get("tools").is_some());
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn t7_streaming_text_before_tag_reaches_caller_before_tool_runs() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("").shape(|s| {
        s.text_chunks = Some(vec![
            "思考: 我需要搜索...<tool_action name=\"".into(),
            "vector-search\"><query value=\"test\"".into(),
            "\" /></tool_action>接下来...".into(),
        ]);
        s.delay = Duration::from_millis(20);
    }));
    server.push(Reply::text("完成"));
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = ran.clone();
    let tool = FnTool::new(
        "vector-search",
        "search",
        json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        move |_, _| {
            r2.store(true, Ordering::SeqCst);
            async { Ok(json!("hit")) }
        },
    );
    let agent = Agent::builder(model_without_fc(&server))
        .tool(tool)
        .protocol(ProtocolKind::Tag)
        .build()
        .unwrap();
    let mut events = agent.run_stream("s", "搜索");
    let mut log = Vec::new();
    while let Some(ev) = events.next().await {
        match ev {
            LoopEvent::TextDelta(t) => {
                if t.contains("思考") {
                    assert!(
                        !ran.load(Ordering::SeqCst),
                        "text before the tag must reach the caller before the tool runs"
                    );
                }
                log.push(format!("text:{t}"));
            }
            LoopEvent::ToolCallStarted {
                name, arguments, ..
            } => log.push(format!("start:{name}:{}", arguments["query"])),
            LoopEvent::ToolResult { content, .. } => log.push(format!("result:{content}")),
            LoopEvent::Finished(out) => log.push(format!("final:{}", out.answer)),
            other => log.push(format!("{other:?}")),
        }
    }
    assert_eq!(
        log,
        vec![
            "text:思考: 我需要搜索...".to_owned(),
            "start:vector-search:\"test\"".into(),
            "result:hit".into(),
            "text:接下来...".into(),
            "text:完成".into(),
            "final:完成".into(),
        ]
    );
}

#[tokio::test]
async fn t7_plain_chunks_are_streamed_without_delay() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("").shape(|s| {
        s.text_chunks = Some(vec!["Hello ".into(), "world".into()]);
        // a long pause after the first chunk: it must be shown before the second arrives
        s.delay = Duration::from_millis(300);
    }));
    let agent = tag_agent(&server, Arc::default());
    let mut events = agent.run_stream("s", "hi");
    let first = loop {
        match events.next().await.unwrap() {
            LoopEvent::TextDelta(t) => break t,
            _ => continue,
        }
    };
    assert_eq!(
        first, "Hello ",
        "a chunk without <tool_action is passed on as it is"
    );
}

#[tokio::test]
async fn t8_tag_protocol_puts_generated_tool_prompt_in_system_message() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("hi"));
    server.push(Reply::text("hi"));
    let agent = tag_agent(&server, Arc::default());
    agent.run("s", "x").await.unwrap();
    let system = sent_messages(&server, 0)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("## vector-search")
            && system.contains("<tool_action name=\"vector-search\">"),
        "{system}"
    );
    let empty = Agent::builder(model_without_fc(&server))
        .protocol(ProtocolKind::Tag)
        .build()
        .unwrap();
    empty.run("s2", "x").await.unwrap();
    let system = sent_messages(&server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("No tools are available"), "{system}");
}

#[tokio::test]
async fn t5_dropping_the_event_stream_cancels_the_loop_and_the_tool() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("c1", "slow", "{}"));
    server.push(Reply::text("never"));
    let finished = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let (f2, s2) = (finished.clone(), started.clone());
    let slow = FnTool::new(
        "slow",
        "slow",
        json!({"type": "object", "properties": {}}),
        move |_, _| {
            let (f2, s2) = (f2.clone(), s2.clone());
            async move {
                s2.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(500)).await;
                f2.store(true, Ordering::SeqCst);
                Ok(json!("done"))
            }
        },
    );
    let agent = Agent::builder(model(&server)).tool(slow).build().unwrap();
    let mut events = agent.run_stream("s", "go");
    while let Some(ev) = events.next().await {
        if matches!(ev, LoopEvent::ToolCallStarted { .. }) {
            break;
        }
    }
    drop(events);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !finished.load(Ordering::SeqCst),
        "the running tool is cancelled with the stream"
    );
    assert_eq!(
        server.request_count(),
        1,
        "no further model call after cancellation"
    );
}

#[tokio::test]
async fn t5_stream_reports_iteration_limit_and_final_answer() {
    let server = ScriptedServer::start().await;
    server.respond_with(|_| {
        Reply::tool_call("c", "vector-search", r#"{"query":"again"}"#).with_content("searching")
    });
    let agent = Agent::builder(model(&server))
        .tool(vector_search(Arc::default()))
        .max_iterations(2)
        .build()
        .unwrap();
    let mut events = agent.run_stream("s", "go");
    let mut limit = None;
    let mut last = None;
    while let Some(ev) = events.next().await {
        match ev {
            LoopEvent::IterationLimitReached { iterations } => limit = Some(iterations),
            LoopEvent::Finished(out) => last = Some(out),
            _ => {}
        }
    }
    assert_eq!(
        limit,
        Some(3),
        "model calls: 2 rounds of tools, then the stop"
    );
    let out = last.unwrap();
    assert!(out.hit_iteration_limit);
    assert_eq!(out.answer, "searching");
}
