//! Stage 0 requirements (G1–G8), each proved over real HTTP against the scripted
//! OpenAI-compatible server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, FinishReason, Message, ModelError, ToolSpec, collect_stream,
};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel, RetryPolicy};

fn fast_retry() -> RetryPolicy {
    RetryPolicy::default()
        .with_base_delay(Duration::from_millis(5))
        .with_max_delay(Duration::from_millis(20))
}

fn model(server: &ScriptedServer) -> OpenAiModel {
    OpenAiModel::new(
        OpenAiConfig::new("test-model")
            .with_base_url(server.base_url())
            .with_api_key("sk-test")
            .with_retry(fast_retry())
            .with_timeout(Duration::from_secs(5)),
    )
    .unwrap()
}

fn weather() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Get current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Weather in Beijing?")])
}

#[tokio::test]
async fn g1_config_base_url_key_model_and_headers_reach_the_server() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("hi"));
    let m = OpenAiModel::new(
        OpenAiConfig::new("qwen-plus")
            .with_base_url(server.base_url())
            .with_api_key("sk-secret")
            .with_header("x-tenant", "acme"),
    )
    .unwrap();
    let r = m
        .chat(ask().with_temperature(0.5).with_max_tokens(42))
        .await
        .unwrap();
    assert_eq!(r.content, "hi");
    let req = &server.requests()[0];
    assert_eq!(req.body["model"], "qwen-plus");
    assert_eq!(req.body["max_tokens"], 42);
    assert_eq!(req.headers["authorization"], "Bearer sk-secret");
    assert_eq!(req.headers["x-tenant"], "acme");
    // A per-request model override wins.
    server.push(Reply::text("hi"));
    m.chat(ask().with_model("qwen-max")).await.unwrap();
    assert_eq!(server.requests()[1].body["model"], "qwen-max");
}

/// An `https://` provider is reached over TLS: the client is built without a panic (reqwest
/// panics when rustls has no crypto provider), its first bytes on the wire are a TLS
/// handshake record, and a server that hangs up mid-handshake is a typed error.
#[tokio::test]
async fn g1_an_https_provider_is_reached_over_tls_and_a_broken_handshake_is_a_typed_error() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let first_bytes = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut record = [0u8; 3];
        conn.read_exact(&mut record).await.unwrap();
        record // the connection and the listener close here: later attempts are refused
    });
    let model = OpenAiModel::new(
        OpenAiConfig::new("test-model")
            .with_base_url(format!("https://127.0.0.1:{port}/v1"))
            .with_api_key("sk-test")
            .with_retry(fast_retry())
            .with_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let err = model.chat(ask()).await.unwrap_err();
    let record = first_bytes.await.unwrap();
    assert_eq!(record[0], 0x16, "a TLS handshake record: {record:?}");
    assert_eq!(record[1], 0x03, "TLS 1.x: {record:?}");
    assert!(!err.to_string().is_empty(), "{err:?}");
}

#[tokio::test]
async fn g1_debug_output_redacts_the_api_key() {
    let cfg = OpenAiConfig::new("m").with_api_key("sk-very-secret");
    assert!(!format!("{cfg:?}").contains("sk-very-secret"));
}

#[tokio::test]
async fn g2_no_tools_bound_means_no_tools_field() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("plain answer"));
    server.push(Reply::text("plain answer"));
    let m = model(&server);
    let r = m.chat(ask()).await.unwrap();
    assert_eq!(r.content, "plain answer");
    let body = &server.requests()[0].body;
    assert!(body.get("tools").is_none(), "tools field present: {body}");
    assert!(body.get("tool_choice").is_none());
    // and the streamed path too
    collect_stream(m.stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert!(server.requests()[1].body.get("tools").is_none());
}

#[tokio::test]
async fn g2_bound_tools_travel_in_the_tools_field() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("ok"));
    model(&server)
        .chat(ask().with_tools(vec![weather()]))
        .await
        .unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        body["tools"][0]["function"]["parameters"]["required"][0],
        "city"
    );
    // the system prompt carries no tool definitions
    assert!(!body["messages"].to_string().contains("get_weather"));
}

#[tokio::test]
async fn g3_native_tool_calls_are_parsed_to_json_objects() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("call_a", "get_weather", r#"{"city":"Beijing"}"#),
        ("call_b", "get_weather", r#"{"city":"上海"}"#),
    ]));
    let r = model(&server)
        .chat(ask().with_tools(vec![weather()]))
        .await
        .unwrap();
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].id, "call_a");
    assert_eq!(r.tool_calls[0].name, "get_weather");
    assert_eq!(r.tool_calls[0].arguments, json!({"city": "Beijing"}));
    assert_eq!(r.tool_calls[1].arguments["city"], "上海");
}

#[tokio::test]
async fn g3_history_with_tool_calls_and_results_round_trips_on_the_wire() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("It is 22 degrees."));
    let call = toolwright_core::ToolCall::new("call_1", "get_weather", json!({"city": "Beijing"}));
    let req = ChatRequest::new(vec![
        Message::system("sys"),
        Message::user("Weather?"),
        Message::assistant_with_tool_calls("", vec![call]),
        Message::tool("call_1", "get_weather", r#"{"temp":22}"#),
    ]);
    model(&server).chat(req).await.unwrap();
    let msgs = &server.requests()[0].body["messages"];
    assert_eq!(msgs[2]["role"], "assistant");
    assert_eq!(
        msgs[2]["content"], "",
        "never null: see the interop test below"
    );
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"city":"Beijing"}"#
    );
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "call_1");
}

#[tokio::test]
async fn g4_stop_without_tool_calls_is_a_plain_message_with_empty_calls() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("Just text."));
    let r = model(&server)
        .chat(ask().with_tools(vec![weather()]))
        .await
        .unwrap();
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.content, "Just text.");
    assert_eq!(r.usage.unwrap().total_tokens, 15);
}

/// llama-cpp-python's OpenAI-compatible server answers an assistant message with
/// `"content": null` with HTTP 500 and validation errors; this server does the same.
fn rejects_null_content(body: &serde_json::Value) -> Reply {
    let null_content = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| m.get("content").is_some_and(serde_json::Value::is_null));
    if null_content {
        Reply::status(
            500,
            "7 validation errors for ChatCompletionRequestAssistantMessage content: none is not an allowed value",
        )
    } else {
        Reply::text("It is sunny.")
    }
}

#[tokio::test]
async fn g3_interop_a_call_without_text_goes_out_as_empty_content_whole_and_streamed() {
    let server = ScriptedServer::start().await;
    server.respond_with(rejects_null_content);
    let call = toolwright_core::ToolCall::new("call_1", "get_weather", json!({"city": "Beijing"}));
    let history = vec![
        Message::user("Weather in Beijing?"),
        Message::assistant_with_tool_calls("", vec![call]),
        Message::tool("call_1", "get_weather", r#"{"sky":"sunny"}"#),
    ];
    let m = model(&server);
    let r = m.chat(ChatRequest::new(history.clone())).await.unwrap();
    assert_eq!(r.content, "It is sunny.");
    let streamed = collect_stream(m.stream(ChatRequest::new(history)).await.unwrap())
        .await
        .unwrap();
    assert_eq!(streamed.content, "It is sunny.");
    assert_eq!(
        server.request_count(),
        2,
        "no retries: both accepted at once"
    );
}

#[tokio::test]
async fn g5_invalid_json_arguments_are_reported_with_name_and_raw_whole() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "get_weather", r#"{"city": "Paris"}"#),
        ("c2", "get_weather", r#"{"city": Beijing"#),
    ]));
    let r = model(&server)
        .chat(ask().with_tools(vec![weather()]))
        .await
        .unwrap();
    assert_eq!(r.tool_calls.len(), 1, "the valid call stands");
    assert_eq!(r.tool_calls[0].arguments, json!({"city": "Paris"}));
    let bad = &r.invalid_tool_calls[0];
    assert_eq!((bad.id.as_str(), bad.name.as_str()), ("c2", "get_weather"));
    assert_eq!(bad.raw, r#"{"city": Beijing"#);
    assert!(!bad.error.is_empty());
}

#[tokio::test]
async fn g5_invalid_json_arguments_are_an_event_and_the_stream_goes_on() {
    let server = ScriptedServer::start().await;
    server.push(
        Reply::tool_calls(&[
            ("c1", "get_weather", r#"{"city": Beijing"#),
            ("c2", "get_weather", r#"{"city": "Paris"}"#),
        ])
        .shape(|s| s.args_chunk = 3),
    );
    let mut stream = model(&server)
        .stream(ask().with_tools(vec![weather()]))
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(e) = stream.next().await {
        events.push(e.unwrap());
    }
    let invalid: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::InvalidToolCall(bad) => Some(bad.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(invalid.len(), 1);
    assert_eq!(invalid[0].name, "get_weather");
    assert_eq!(invalid[0].raw, r#"{"city": Beijing"#);
    assert!(invalid[0].model_message().contains("get_weather"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ChatEvent::ToolCall(c) if c.id == "c2")),
        "the other call survives"
    );
    assert!(matches!(events.last(), Some(ChatEvent::Finish { .. })));
}

#[tokio::test]
async fn g6_text_deltas_arrive_before_the_stream_ends() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("one two three four five six").shape(|s| {
        s.text_chunk = 4;
        s.delay = Duration::from_millis(60);
    }));
    let mut stream = model(&server).stream(ask()).await.unwrap();
    let start = Instant::now();
    let mut first_delta_at = None;
    let mut text = String::new();
    let mut finished_at = None;
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            ChatEvent::TextDelta(t) => {
                first_delta_at.get_or_insert(start.elapsed());
                text.push_str(&t);
            }
            ChatEvent::Finish { reason, .. } => {
                assert_eq!(reason, FinishReason::Stop);
                finished_at = Some(start.elapsed());
            }
            _ => {}
        }
    }
    assert_eq!(text, "one two three four five six");
    // Delivered incrementally: the first delta came several chunk-delays before the end.
    let (first, end) = (first_delta_at.unwrap(), finished_at.unwrap());
    assert!(
        end - first >= Duration::from_millis(300),
        "first {first:?}, end {end:?}"
    );
}

#[tokio::test]
async fn g6_tool_call_deltas_split_over_many_chunks_are_reassembled() {
    let server = ScriptedServer::start().await;
    server.push(
        Reply::tool_calls(&[
            (
                "call_a",
                "get_weather",
                r#"{"city":"Beijing","unit":"celsius"}"#,
            ),
            ("call_b", "get_time", r#"{"tz":"Asia/Shanghai"}"#),
        ])
        .with_content("Let me check.")
        .shape(|s| s.args_chunk = 1),
    );
    let mut stream = model(&server)
        .stream(ask().with_tools(vec![weather()]))
        .await
        .unwrap();
    let (mut deltas, mut calls, mut finish) = (0, vec![], None);
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            ChatEvent::ToolCallDelta { .. } => deltas += 1,
            ChatEvent::ToolCall(c) => calls.push(c),
            ChatEvent::Finish { reason, usage } => finish = Some((reason, usage)),
            ChatEvent::TextDelta(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        deltas > 40,
        "expected one delta per argument character, got {deltas}"
    );
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "call_a");
    assert_eq!(
        calls[0].arguments,
        json!({"city": "Beijing", "unit": "celsius"})
    );
    assert_eq!(calls[1].name, "get_time");
    assert_eq!(calls[1].arguments, json!({"tz": "Asia/Shanghai"}));
    let (reason, usage) = finish.unwrap();
    assert_eq!(reason, FinishReason::ToolCalls);
    assert_eq!(usage.unwrap().prompt_tokens, 10);
}

#[tokio::test]
async fn g6_tolerates_missing_index_and_empty_finish_reason() {
    let server = ScriptedServer::start().await;
    server.push(
        Reply::tool_calls(&[("call_a", "a", r#"{"x":1}"#), ("call_b", "b", r#"{"y":2}"#)]).shape(
            |s| {
                s.omit_index = true;
                s.empty_finish_reason = true;
                s.args_chunk = 2;
            },
        ),
    );
    let r = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].arguments, json!({"x": 1}));
    assert_eq!(r.tool_calls[1].name, "b");
    assert_eq!(r.tool_calls[1].arguments, json!({"y": 2}));
}

#[tokio::test]
async fn g8_429_with_retry_after_then_success() {
    let server = ScriptedServer::start().await;
    server.push(Reply::status(429, "slow down").retry_after("1"));
    server.push(Reply::text("finally"));
    let start = Instant::now();
    let r = model(&server).chat(ask()).await.unwrap();
    assert_eq!(r.content, "finally");
    assert_eq!(server.request_count(), 2);
    // Retry-After: 1 was honoured rather than the 5 ms backoff.
    assert!(
        start.elapsed() >= Duration::from_millis(950),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn g8_500_is_retried_then_succeeds() {
    let server = ScriptedServer::start().await;
    server.push(Reply::status(500, "boom"));
    server.push(Reply::status(503, "busy"));
    server.push(Reply::text("ok"));
    let r = model(&server).chat(ask()).await.unwrap();
    assert_eq!(r.content, "ok");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn g8_retries_are_bounded_and_end_in_a_typed_error() {
    let server = ScriptedServer::start().await;
    for _ in 0..10 {
        server.push(Reply::status(502, "bad gateway"));
    }
    let err = model(&server).chat(ask()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Api { status: 502, .. }),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(server.request_count(), 4, "1 attempt + 3 retries");
}

#[tokio::test]
async fn g8_400_is_not_retried() {
    let server = ScriptedServer::start().await;
    server.push(Reply::status(400, "bad field"));
    server.push(Reply::text("never sent"));
    let err = model(&server).chat(ask()).await.unwrap_err();
    match &err {
        ModelError::Api {
            status, message, ..
        } => {
            assert_eq!(*status, 400);
            assert_eq!(message, "bad field");
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.is_transient());
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn g8_401_is_not_retried_and_says_to_check_the_key() {
    let server = ScriptedServer::start().await;
    server.push(Reply::status(401, "invalid api key"));
    let err = model(&server).chat(ask()).await.unwrap_err();
    assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn g8_streamed_request_is_retried_before_any_text() {
    let server = ScriptedServer::start().await;
    server.push(Reply::status(429, "later").retry_after("0"));
    server.push(Reply::text("streamed after retry"));
    let r = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(r.content, "streamed after retry");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn g8_timeout_gives_a_typed_error() {
    let server = ScriptedServer::start().await;
    server.push(Reply::Hang);
    let m = OpenAiModel::new(
        OpenAiConfig::new("m")
            .with_base_url(server.base_url())
            .with_retry(RetryPolicy::none())
            .with_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let err = m.chat(ask()).await.unwrap_err();
    assert!(matches!(err, ModelError::Timeout(_)), "{err:?}");
}

fn with_times(server: &ScriptedServer, attempt: Duration, deadline: Duration) -> OpenAiModel {
    OpenAiModel::new(
        OpenAiConfig::new("m")
            .with_base_url(server.base_url())
            .with_retry(fast_retry())
            .with_timeout(attempt)
            .with_deadline(deadline),
    )
    .unwrap()
}

#[tokio::test]
async fn g8_a_hung_attempt_times_out_alone_and_is_retried_within_the_deadline() {
    let server = ScriptedServer::start().await;
    server.push(Reply::Hang);
    server.push(Reply::text("second attempt"));
    let m = with_times(&server, Duration::from_millis(300), Duration::from_secs(30));
    let r = m.chat(ask()).await.unwrap();
    assert_eq!(r.content, "second attempt");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn g8_retry_after_longer_than_the_attempt_timeout_is_honoured_within_the_deadline() {
    let server = ScriptedServer::start().await;
    server.push(Reply::status(429, "slow down").retry_after("1"));
    server.push(Reply::text("finally"));
    // Before: one 500 ms timeout wrapped the call, its retries and the wait, so a Retry-After of
    // 1 s could never be honoured. Now 500 ms bounds each attempt and 30 s the whole call.
    let m = with_times(&server, Duration::from_millis(500), Duration::from_secs(30));
    let r = m.chat(ask()).await.unwrap();
    assert_eq!(r.content, "finally");
    assert_eq!(server.request_count(), 2);
    let streamed_server = ScriptedServer::start().await;
    streamed_server.push(Reply::status(429, "slow down").retry_after("1"));
    streamed_server.push(Reply::text("streamed"));
    let m = with_times(
        &streamed_server,
        Duration::from_millis(500),
        Duration::from_secs(30),
    );
    let r = collect_stream(m.stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(r.content, "streamed");
}

#[tokio::test]
async fn g8_a_retry_the_deadline_cannot_wait_for_is_not_started() {
    let server = ScriptedServer::start().await;
    server.push(Reply::status(429, "slow down").retry_after("5"));
    server.push(Reply::text("never sent"));
    let m = with_times(&server, Duration::from_secs(5), Duration::from_secs(1));
    let err = m.chat(ask()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Api { status: 429, .. }),
        "the server's own answer, at once: {err:?}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn g8_stalled_stream_times_out_between_chunks() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("abcdefgh").shape(|s| s.delay = Duration::from_millis(800)));
    let m = OpenAiModel::new(
        OpenAiConfig::new("m")
            .with_base_url(server.base_url())
            .with_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let err = match m.stream(ask()).await {
        Ok(s) => collect_stream(s).await.unwrap_err(),
        Err(e) => e,
    };
    assert!(matches!(err, ModelError::Timeout(_)), "{err:?}");
}

#[tokio::test]
async fn g8_stream_cut_midway_is_an_error_not_a_truncated_answer() {
    let server = ScriptedServer::start().await;
    // role chunk + 2 text chunks, then the connection is cut: no finish, no [DONE].
    server.push(Reply::text("The answer is forty-two").shape(|s| {
        s.text_chunk = 5;
        s.cut_after = Some(3);
        s.delay = Duration::from_millis(20);
    }));
    let mut stream = model(&server).stream(ask()).await.unwrap();
    let mut text = String::new();
    let mut error = None;
    let mut finished = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(ChatEvent::TextDelta(t)) => text.push_str(&t),
            Ok(ChatEvent::Finish { .. }) => finished = true,
            Ok(_) => {}
            Err(e) => error = Some(e),
        }
    }
    assert_eq!(
        text, "The answer",
        "the deltas before the cut were delivered"
    );
    assert!(!finished, "a cut stream must not report Finish");
    let err = error.expect("a cut stream must end in an error");
    assert!(
        matches!(err, ModelError::StreamInterrupted { .. }),
        "{err:?}"
    );
    assert_eq!(
        server.request_count(),
        1,
        "streamed text already reached the caller: no retry"
    );
}

#[tokio::test]
async fn g8_stream_closed_cleanly_without_finish_is_interrupted() {
    let server = ScriptedServer::start().await;
    server.push(Reply::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"half an ans\"}}]}\n\n"
            .into(),
    });
    let err = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap_err();
    match err {
        ModelError::StreamInterrupted { partial_text, .. } => {
            assert_eq!(partial_text, "half an ans")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn g8_malformed_sse_line_gives_a_typed_error() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("hello world").shape(|s| {
        s.malformed_after = Some((2, "{not json".into()));
    }));
    let err = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::Malformed {
                what: "stream chunk",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn g8_malformed_json_body_gives_a_typed_error() {
    let server = ScriptedServer::start().await;
    server.push(Reply::Raw {
        status: 200,
        content_type: "application/json".into(),
        body: "<html>proxy error</html>".into(),
    });
    let err = model(&server).chat(ask()).await.unwrap_err();
    assert!(matches!(err, ModelError::Malformed { .. }), "{err:?}");
}

#[tokio::test]
async fn g8_connection_refused_is_retried_then_typed() {
    // Bind and drop to find a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let m = OpenAiModel::new(
        OpenAiConfig::new("m")
            .with_base_url(format!("http://127.0.0.1:{port}/v1"))
            .with_retry(fast_retry().with_max_retries(2)),
    )
    .unwrap();
    let err = m.chat(ask()).await.unwrap_err();
    assert!(matches!(err, ModelError::Connect(_)), "{err:?}");
    assert!(err.to_string().contains("OPENAI_BASE_URL"));
}

#[tokio::test]
async fn g8_unknown_fields_and_missing_ids_are_tolerated() {
    let server = ScriptedServer::start().await;
    server.push(Reply::Raw {
        status: 200,
        content_type: "application/json".into(),
        body: json!({"choices": [{"message": {"role": "assistant", "content": null, "reasoning_content": "hmm",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            "finish_reason": "", "extra": 1}], "x_vendor": true})
        .to_string(),
    });
    let r = model(&server).chat(ask()).await.unwrap();
    assert_eq!(r.tool_calls[0].id, "call_0");
    assert_eq!(r.tool_calls[0].arguments, json!({"city": "Paris"}));
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
}

#[test]
fn g7_function_calling_capability_is_reported() {
    let on = OpenAiModel::new(OpenAiConfig::new("gpt-4o")).unwrap();
    assert!(on.info().function_calling);
    let off = OpenAiModel::new(OpenAiConfig::new("tiny").with_function_calling(false)).unwrap();
    assert!(!off.info().function_calling);
    assert_eq!(off.info().model, "tiny");
}

#[tokio::test]
async fn g8_error_object_inside_a_200_stream_is_a_typed_error() {
    let server = ScriptedServer::start().await;
    server.push(Reply::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"message\":\"model overloaded\",\"code\":\"overloaded\"}}\n\n".into(),
    });
    let err = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap_err();
    match err {
        ModelError::Api { message, code, .. } => {
            assert_eq!(message, "model overloaded");
            assert_eq!(code.as_deref(), Some("overloaded"));
        }
        other => panic!("{other:?}"),
    }
}
