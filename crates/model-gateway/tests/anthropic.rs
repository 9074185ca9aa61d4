//! The Anthropic backend against a real HTTP server on 127.0.0.1 that replays the published
//! SDK fixtures and recorded API answers byte for byte (tests/fixtures/anthropic, see
//! SOURCES.md there), and records what the backend sent.
#![cfg(feature = "anthropic")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{Value, json};
use testkit::{WireReply, WireServer};
use toolwright_core::{
    CachePolicy, CacheTtl, ChatEvent, ChatModel, ChatRequest, FinishReason, InvalidToolCall, Media,
    Message, ModelError, Part, Reasoning, ReasoningKind, ResponseFormat, ToolCall, ToolChoice,
    ToolSpec, collect_stream,
};
use toolwright_model_gateway::RetryPolicy;
use toolwright_model_gateway::anthropic::{AnthropicConfig, AnthropicModel, parse_sse_events};

// ---------------------------------------------------------------- the scripted server

enum Reply {
    /// An event stream, sent as is.
    Sse(Vec<u8>),
    /// A status with a JSON body and an optional `Retry-After`.
    Json(u16, String, Option<&'static str>),
    /// These bytes, then the connection is broken.
    Abort(Vec<u8>),
}

/// The workspace's replaying server, with this file's replies; requests read back as headers
/// and raw body.
struct Server(WireServer);

impl Server {
    async fn start() -> Self {
        Self(WireServer::start().await)
    }
    fn push(&self, r: Reply) {
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        self.0.push(match r {
            Reply::Sse(bytes) => WireReply::sse(text(bytes)),
            Reply::Json(status, body, retry_after) => WireReply::status(status, body, retry_after),
            Reply::Abort(bytes) => WireReply::Abort(text(bytes)),
        });
    }
    fn requests(&self) -> Vec<(HeaderMap, Bytes)> {
        self.0
            .requests()
            .into_iter()
            .map(|r| {
                let mut headers = HeaderMap::new();
                for (k, v) in &r.headers {
                    headers.append(
                        HeaderName::from_bytes(k.as_bytes()).unwrap(),
                        HeaderValue::from_str(v).unwrap(),
                    );
                }
                (headers, Bytes::from(r.raw))
            })
            .collect()
    }
    fn body(&self, i: usize) -> Value {
        self.0.body(i)
    }
    fn model(&self, f: impl FnOnce(AnthropicConfig) -> AnthropicConfig) -> AnthropicModel {
        let cfg = AnthropicConfig::new("claude-sonnet-4-20250514")
            .with_base_url(self.0.url())
            .with_api_key("sk-ant-test")
            .with_retry(
                RetryPolicy::default()
                    .with_base_delay(Duration::from_millis(5))
                    .with_max_delay(Duration::from_millis(20)),
            );
        AnthropicModel::new(f(cfg)).unwrap()
    }
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/anthropic/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A stream fixture as the API sends it: the SDK's files lack the blank line that closes
/// the last event (see SOURCES.md).
fn sse(name: &str) -> Vec<u8> {
    let mut b = fixture(name);
    while !b.ends_with(b"\n\n") {
        b.push(b'\n');
    }
    b
}

fn json_fixture(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

async fn events(model: &AnthropicModel, req: ChatRequest) -> Vec<Result<ChatEvent, ModelError>> {
    model.stream(req).await.unwrap().collect().await
}

fn weather_tool() -> ToolSpec {
    ToolSpec::new(
        "weather",
        "Get weather information for a location",
        json!({"properties":{"location":{"description":"the city","type":"string"}},"required":["location"],"type":"object"}),
    )
}

fn arith_tools() -> Vec<ToolSpec> {
    let schema = json!({"properties":{"a":{"description":"first number","type":"integer"},"b":{"description":"second number","type":"integer"}},"required":["a","b"],"type":"object"});
    vec![
        ToolSpec::new("add", "Add two numbers", schema.clone()),
        ToolSpec::new("multiply", "Multiply two numbers", schema),
    ]
}

fn png() -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(2u32.to_be_bytes());
    b.extend(3u32.to_be_bytes());
    b.extend([8, 6, 0, 0, 0]);
    b
}

// ---------------------------------------------------------------- text

#[tokio::test]
async fn a_streamed_text_answer_arrives_as_deltas_then_finishes_with_usage() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    let model = server.model(|c| c);
    let req = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hello")])
        .with_cache(CachePolicy::Off);
    let evs = events(&model, req).await;
    let evs: Vec<ChatEvent> = evs.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        evs,
        vec![
            ChatEvent::TextDelta("Hello".into()),
            ChatEvent::TextDelta(" there".into()),
            ChatEvent::TextDelta("!".into()),
            ChatEvent::Finish {
                reason: FinishReason::Stop,
                usage: Some(toolwright_core::Usage {
                    prompt_tokens: 11,
                    completion_tokens: 6,
                    total_tokens: 17,
                    ..Default::default()
                }),
            },
        ]
    );
    let (headers, _) = &server.requests()[0];
    assert_eq!(headers["x-api-key"], "sk-ant-test");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert!(headers.get("anthropic-beta").is_none());
    assert_eq!(headers["content-type"], "application/json");
    let body = server.body(0);
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-20250514",
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
            "max_tokens": 4096,
            "stream": true,
        })
    );
}

#[tokio::test]
async fn a_whole_answer_is_read_and_cached_tokens_count_in_the_prompt() {
    let server = Server::start().await;
    server.push(Reply::Json(
        200,
        String::from_utf8(fixture("rec_text.0.response.json")).unwrap(),
        None,
    ));
    server.push(Reply::Json(
        200,
        String::from_utf8(fixture("composed_cached_text.json")).unwrap(),
        None,
    ));
    let model = server.model(|c| c.with_beta("a-beta").with_beta("another-beta"));
    let rec = json_fixture("rec_text.0.request.json");
    let req = ChatRequest::new(vec![
        Message::system(rec["system"][0]["text"].as_str().unwrap()),
        Message::user(rec["messages"][0]["content"][0]["text"].as_str().unwrap()),
    ])
    .with_cache(CachePolicy::Off)
    .with_max_tokens(rec["max_tokens"].as_u64().unwrap() as u32);
    let r = model.chat(req.clone()).await.unwrap();
    assert!(r.content.starts_with("Olá!"));
    assert_eq!(r.finish_reason, FinishReason::Stop);
    let u = r.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (16, 34, 50)
    );
    let body = server.body(0);
    for key in ["model", "system", "messages", "max_tokens"] {
        assert_eq!(body[key], rec[key], "{key}");
    }
    assert!(body.get("stream").is_none());
    assert_eq!(
        server.requests()[0].0["anthropic-beta"],
        "a-beta,another-beta"
    );

    let u = model.chat(req).await.unwrap().usage.unwrap();
    // input 16 + cache writes 120 + cache reads 2048.
    assert_eq!(u.prompt_tokens, 2184);
    assert_eq!((u.cache_write_tokens, u.cache_read_tokens), (120, 2048));
    assert_eq!(
        (u.completion_tokens, u.total_tokens, u.reasoning_tokens),
        (34, 2218, 0)
    );
}

// ---------------------------------------------------------------- tools

#[tokio::test]
async fn parallel_tool_calls_stream_in_block_order_and_the_round_matches_the_recording() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("rec_parallel_tools_stream.0.response.sse")));
    server.push(Reply::Sse(sse("rec_parallel_tools_stream.1.response.sse")));
    let model = server.model(|c| c.with_max_tokens(4000));
    let rec0 = json_fixture("rec_parallel_tools_stream.0.request.json");
    let rec1 = json_fixture("rec_parallel_tools_stream.1.request.json");
    let mut history = vec![
        Message::system(rec0["system"][0]["text"].as_str().unwrap()),
        Message::user("Add and multiply the number 2 and 3"),
    ];
    let req = |h: &Vec<Message>| {
        ChatRequest::new(h.clone())
            .with_tools(arith_tools())
            .with_tool_choice(ToolChoice::Auto)
            .with_cache(CachePolicy::Off)
    };
    let evs: Vec<ChatEvent> = events(&model, req(&history))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let calls: Vec<&ToolCall> = evs
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].name.as_str(), calls[1].name.as_str()),
        ("add", "multiply")
    );
    assert_eq!(calls[0].arguments, json!({"a": 2, "b": 3}));
    assert_eq!(calls[0].id, "toolu_01UYxUYC2zRPY8wiutnF48eP");
    // Deltas first (indexed by call), then the whole calls, then the finish.
    let first_call = evs
        .iter()
        .position(|e| matches!(e, ChatEvent::ToolCall(_)))
        .unwrap();
    assert!(
        evs[..first_call]
            .iter()
            .all(|e| matches!(e, ChatEvent::TextDelta(_) | ChatEvent::ToolCallDelta { .. }))
    );
    assert!(evs.iter().any(
        |e| matches!(e, ChatEvent::ToolCallDelta { index: 1, name: Some(n), .. } if n == "multiply")
    ));
    assert!(matches!(
        evs.last(),
        Some(ChatEvent::Finish {
            reason: FinishReason::ToolCalls,
            ..
        })
    ));

    let body = server.body(0);
    for key in [
        "model",
        "system",
        "messages",
        "tools",
        "max_tokens",
        "stream",
    ] {
        assert_eq!(body[key], rec0[key], "{key}");
    }
    assert_eq!(body["tool_choice"], json!({"type": "auto"}));

    let r = collect_stream(Box::pin(futures::stream::iter(
        evs.into_iter().map(Ok::<ChatEvent, ModelError>),
    )))
    .await
    .unwrap();
    history.push(r.to_message());
    history.push(Message::tool("toolu_01UYxUYC2zRPY8wiutnF48eP", "add", "5"));
    history.push(Message::tool(
        "toolu_01VaRx1jpWCvPhi7L4kywAcd",
        "multiply",
        "6",
    ));
    let r2 = collect_stream(model.stream(req(&history)).await.unwrap())
        .await
        .unwrap();
    assert!(r2.content.contains("2 + 3 = 5"));
    // Both results in ONE user message, as recorded.
    assert_eq!(server.body(1)["messages"], rec1["messages"]);
}

#[tokio::test]
async fn a_failed_tool_result_is_marked_as_an_error() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    let model = server.model(|c| c);
    let history = vec![
        Message::user("go"),
        Message::assistant_with_tool_calls("", vec![ToolCall::new("t1", "f", json!({}))]),
        Message::tool("t1", "f", r#"{"success": false, "error": "no such file"}"#),
    ];
    events(
        &model,
        ChatRequest::new(history).with_cache(CachePolicy::Off),
    )
    .await;
    let result = &server.body(0)["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["is_error"], true);
}

#[tokio::test]
async fn unparsable_tool_input_is_an_invalid_call_and_is_sent_back_as_an_empty_object() {
    let server = Server::start().await;
    // The API stopped at max_tokens inside the call's arguments (the block never stopped).
    server.push(Reply::Sse(sse("sdk_incomplete_partial_json_response.sse")));
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    let model = server.model(|c| c);
    let history = vec![Message::user("Write my tax guide to taxes.txt")];
    let r = collect_stream(
        model
            .stream(ChatRequest::new(history.clone()))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.finish_reason, FinishReason::Length);
    assert!(r.tool_calls.is_empty());
    let bad: &InvalidToolCall = &r.invalid_tool_calls[0];
    assert_eq!(
        (bad.id.as_str(), bad.name.as_str()),
        ("toolu_01EKqbqmZrGRXy18eN7m9kvY", "make_file")
    );
    assert!(bad.raw.starts_with("{\"filename\": \"taxes.txt\""));
    assert!(r.content.ends_with("Let me do that for you now."));

    let mut history = history;
    history.push(r.to_message());
    history.push(Message::tool(
        bad.id.clone(),
        bad.name.clone(),
        bad.model_message(),
    ));
    events(&model, ChatRequest::new(history)).await;
    let sent = &server.body(1)["messages"][1]["content"];
    assert_eq!(sent[1]["type"], "tool_use");
    assert_eq!(sent[1]["input"], json!({}));
    // The result that answers it quotes the raw text.
    let result = &server.body(1)["messages"][2]["content"][0]["content"][0]["text"];
    assert!(result.as_str().unwrap().contains("taxes.txt"));
}

// ---------------------------------------------------------------- thinking

#[tokio::test]
async fn a_thinking_signature_is_replayed_unchanged() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("rec_thinking_tool_stream.0.response.sse")));
    server.push(Reply::Sse(sse("rec_thinking_tool_stream.1.response.sse")));
    let model = server.model(|c| c.with_thinking(4000));
    let rec0 = json_fixture("rec_thinking_tool_stream.0.request.json");
    let rec1 = json_fixture("rec_thinking_tool_stream.1.request.json");
    let mut history = vec![
        Message::system("You are a helpful assistant"),
        Message::user("What's the weather in Florence, Italy?"),
    ];
    let req = |h: &Vec<Message>| {
        ChatRequest::new(h.clone())
            .with_tools(vec![weather_tool()])
            .with_tool_choice(ToolChoice::Auto)
            .with_temperature(0.3)
            .with_cache(CachePolicy::Off)
    };
    let evs: Vec<ChatEvent> = events(&model, req(&history))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // Reasoning deltas, call deltas, then the whole reasoning part, the call, the finish.
    let kinds: Vec<&str> = evs
        .iter()
        .map(|e| match e {
            ChatEvent::ReasoningDelta(_) => "reasoning_delta",
            ChatEvent::ToolCallDelta { .. } => "call_delta",
            ChatEvent::Part(_) => "part",
            ChatEvent::ToolCall(_) => "call",
            ChatEvent::Finish { .. } => "finish",
            _ => "other",
        })
        .collect();
    let mut dedup = kinds.clone();
    dedup.dedup();
    assert_eq!(
        dedup,
        ["reasoning_delta", "call_delta", "part", "call", "finish"]
    );
    let body = server.body(0);
    for key in [
        "model",
        "system",
        "messages",
        "tools",
        "thinking",
        "max_tokens",
        "stream",
    ] {
        assert_eq!(body[key], rec0[key], "{key}");
    }
    // With thinking on no temperature is sent.
    assert!(body.get("temperature").is_none());

    let r = collect_stream(Box::pin(futures::stream::iter(
        evs.into_iter().map(Ok::<ChatEvent, ModelError>),
    )))
    .await
    .unwrap();
    let Part::Reasoning(thought) = &r.parts[0] else {
        panic!("{:?}", r.parts)
    };
    assert_eq!(thought.provider, "anthropic");
    assert_eq!(thought.kind, ReasoningKind::Full);
    let recorded_sig = rec1["messages"][1]["content"][0]["signature"]
        .as_str()
        .unwrap();
    assert_eq!(thought.signature.as_deref(), Some(recorded_sig));
    history.push(r.to_message());
    history.push(Message::tool(r.tool_calls[0].id.clone(), "weather", "40 C"));
    let r2 = collect_stream(model.stream(req(&history)).await.unwrap())
        .await
        .unwrap();
    assert!(r2.content.contains("40°C"));
    let body = server.body(1);
    // Byte for byte what the official SDK sent: thinking (signature unchanged) first,
    // then the call; the result in its own user message.
    assert_eq!(body["messages"], rec1["messages"]);
    let raw = String::from_utf8(server.requests()[1].1.to_vec()).unwrap();
    assert!(raw.contains(&format!("\"signature\":\"{recorded_sig}\"")));
}

#[tokio::test]
async fn a_whole_thinking_answer_keeps_its_signature() {
    let server = Server::start().await;
    server.push(Reply::Json(
        200,
        String::from_utf8(fixture("rec_thinking_tool.0.response.json")).unwrap(),
        None,
    ));
    let model = server.model(|c| c.with_thinking(4000));
    let rec = json_fixture("rec_thinking_tool.0.response.json");
    let r = model
        .chat(
            ChatRequest::new(vec![Message::user(
                "What's the weather in Florence, Italy?",
            )])
            .with_tools(vec![weather_tool()]),
        )
        .await
        .unwrap();
    let Part::Reasoning(t) = &r.parts[0] else {
        panic!()
    };
    assert_eq!(
        t.signature.as_deref(),
        rec["content"][0]["signature"].as_str()
    );
    assert_eq!(t.text, rec["content"][0]["thinking"].as_str().unwrap());
    assert_eq!(r.tool_calls[0].name, "weather");
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn a_redacted_thinking_block_is_replayed_as_its_data_before_the_rest() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse(
        "composed_redacted_thinking_tool_stream.sse",
    )));
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    let model = server.model(|c| c.with_thinking(4000));
    let mut history = vec![Message::user("What's the weather in Florence, Italy?")];
    let req = |h: &Vec<Message>| ChatRequest::new(h.clone()).with_tools(vec![weather_tool()]);
    let r = collect_stream(model.stream(req(&history)).await.unwrap())
        .await
        .unwrap();
    let Part::Reasoning(red) = &r.parts[0] else {
        panic!()
    };
    assert_eq!(red.kind, ReasoningKind::Redacted);
    assert!(
        red.encrypted
            .as_deref()
            .unwrap()
            .starts_with("EmwKAhgBEgy3va3pzix")
    );
    history.push(r.to_message());
    history.push(Message::tool(r.tool_calls[0].id.clone(), "weather", "40 C"));
    events(&model, req(&history)).await;
    let sent = &server.body(1)["messages"][1]["content"];
    assert_eq!(
        sent[0],
        json!({"type": "redacted_thinking", "data": red.encrypted.as_deref().unwrap()})
    );
    assert_eq!(sent[1]["type"], "thinking");
    assert_eq!(sent[2]["type"], "tool_use");
}

#[tokio::test]
async fn another_providers_reasoning_is_not_sent() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    let model = server.model(|c| c);
    let foreign = Reasoning::new("openai-responses", ReasoningKind::Summary, "secret plan")
        .with_encrypted("gAAAA-opaque")
        .with_id("rs_1");
    let unsigned = Reasoning::new("anthropic", ReasoningKind::Full, "unsigned musing");
    let history = vec![
        Message::user("hi"),
        Message::assistant("Hello!")
            .with_parts(vec![Part::Reasoning(foreign), Part::Reasoning(unsigned)]),
        Message::user("and again"),
    ];
    events(
        &model,
        ChatRequest::new(history).with_cache(CachePolicy::Off),
    )
    .await;
    let raw = String::from_utf8(server.requests()[0].1.to_vec()).unwrap();
    assert!(
        !raw.contains("secret plan") && !raw.contains("gAAAA") && !raw.contains("unsigned musing")
    );
    assert_eq!(
        server.body(0)["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]})
    );
}

// ---------------------------------------------------------------- media

#[tokio::test]
async fn an_image_in_the_user_message_and_in_a_tool_result_is_sent_natively() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("rec_image_stream.0.response.sse")));
    let model = server.model(|c| c.with_max_tokens(4000));
    let rec = json_fixture("rec_image_stream.0.request.json");
    let rec_image = &rec["messages"][0]["content"][1];
    let data = rec_image["source"]["data"].as_str().unwrap();
    let media_type = rec_image["source"]["media_type"].as_str().unwrap();
    let image = Media::image_base64(data, media_type).unwrap();
    let shot = Media::image_bytes(&png(), "image/png").unwrap();
    let pdf = Media::bytes(b"%PDF-1.4 tiny", "application/pdf")
        .unwrap()
        .with_name("a.pdf");
    let notes = Media::bytes("plain notes".as_bytes(), "text/plain").unwrap();
    let history = vec![
        Message::user_with_parts(
            rec["messages"][0]["content"][0]["text"].as_str().unwrap(),
            vec![Part::Image(image)],
        ),
        Message::assistant_with_tool_calls("", vec![ToolCall::new("t1", "shoot", json!({}))]),
        Message::tool_with_parts(
            "t1",
            "shoot",
            "done",
            vec![
                Part::Image(shot.clone()),
                Part::Image(Media::url("image/png", "https://example.com/a.png")),
                Part::File(pdf),
                Part::File(notes),
            ],
        ),
    ];
    let r = collect_stream(
        model
            .stream(ChatRequest::new(history).with_cache(CachePolicy::Off))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert!(r.content.contains("ghost"));
    let body = server.body(0);
    assert_eq!(body["messages"][0], rec["messages"][0]);
    let content = &body["messages"][2]["content"][0]["content"];
    let shot_data = match &shot.source {
        toolwright_core::MediaSource::Base64 { data } => data.clone(),
        _ => unreachable!(),
    };
    assert_eq!(
        content,
        &json!([
            {"type": "text", "text": "done"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": shot_data}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQgdGlueQ=="}, "title": "a.pdf"},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"}},
        ])
    );
}

#[tokio::test]
async fn media_kept_by_reference_is_sent_as_the_line_naming_it() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("rec_image_stream.0.response.sse")));
    let model = server.model(|c| c.with_max_tokens(4000));
    let kept = Part::Resource(toolwright_core::ResourceRef::new(
        "toolwright-blob:sha256:ab",
        "image/png",
        31_457_280,
    ));
    let line = kept.placeholder();
    let history = vec![
        Message::user("Screenshot the page"),
        Message::assistant_with_tool_calls("", vec![ToolCall::new("t1", "shoot", json!({}))]),
        Message::tool_with_parts("t1", "shoot", "done", vec![kept]),
    ];
    collect_stream(
        model
            .stream(ChatRequest::new(history).with_cache(CachePolicy::Off))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        server.body(0)["messages"][2]["content"][0]["content"],
        json!([{"type": "text", "text": "done"}, {"type": "text", "text": line}])
    );
}

#[tokio::test]
async fn audio_is_refused_before_anything_is_sent() {
    let server = Server::start().await;
    let model = server.model(|c| c);
    let wav = Media::bytes(b"RIFF....WAVE", "audio/wav").unwrap();
    for history in [
        vec![Message::user_with_parts(
            "listen",
            vec![Part::Audio(wav.clone())],
        )],
        vec![
            Message::user("go"),
            Message::assistant_with_tool_calls("", vec![ToolCall::new("t1", "rec", json!({}))]),
            Message::tool_with_parts("t1", "rec", "done", vec![Part::Audio(wav.clone())]),
        ],
    ] {
        let err = model.stream(ChatRequest::new(history)).await.err().unwrap();
        assert!(
            matches!(err, ModelError::Unsupported { part: "audio", .. }),
            "{err}"
        );
    }
    let err = model
        .chat(ChatRequest::new(vec![
            Message::user("hi"),
            Message::assistant("look").with_parts(vec![Part::Image(Media::url(
                "image/png",
                "https://x/y.png",
            ))]),
        ]))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Unsupported { part: "image", .. }));
    assert!(server.requests().is_empty());
}

// ---------------------------------------------------------------- errors

#[tokio::test]
async fn an_overloaded_error_mid_stream_is_a_typed_error_after_the_text_so_far() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("composed_error_mid_stream.sse")));
    let model = server.model(|c| c);
    let evs = events(&model, ChatRequest::new(vec![Message::user("Hello")])).await;
    assert_eq!(evs.len(), 2);
    assert!(matches!(&evs[0], Ok(ChatEvent::TextDelta(t)) if t == "Hello"));
    match &evs[1] {
        Err(
            e @ ModelError::Api {
                status: 529,
                code: Some(code),
                message,
            },
        ) => {
            assert_eq!(code, "overloaded_error");
            assert_eq!(message, "Overloaded");
            assert!(e.is_transient());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_429_and_a_529_with_retry_after_are_retried_then_succeed() {
    let server = Server::start().await;
    let overloaded = String::from_utf8(fixture("sdk_error_overloaded.json")).unwrap();
    let rate = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    server.push(Reply::Json(429, rate.into(), Some("1")));
    server.push(Reply::Json(529, overloaded.clone(), Some("0")));
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    let model = server.model(|c| c);
    let start = Instant::now();
    let r = collect_stream(
        model
            .stream(ChatRequest::new(vec![Message::user("Hello")]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.content, "Hello there!");
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured"
    );
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.requests()[0].1, server.requests()[2].1);

    // Retries exhausted: the last error, typed with the error body's type.
    let model = server.model(|c| c.with_retry(RetryPolicy::none()));
    server.push(Reply::Json(529, overloaded, Some("0")));
    let err = model
        .chat(ChatRequest::new(vec![Message::user("Hello")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Api { status: 529, code: Some(c), message } if c == "overloaded_error" && message == "Overloaded"),
        "{err}"
    );
}

#[tokio::test]
async fn a_bad_request_is_typed_and_not_retried() {
    let server = Server::start().await;
    server.push(Reply::Json(
        400,
        String::from_utf8(fixture("sdk_error_invalid_request.json")).unwrap(),
        None,
    ));
    let model = server.model(|c| c);
    let err = model
        .chat(ChatRequest::new(vec![Message::user("Hello")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Api { status: 400, code: Some(c), .. } if c == "invalid_request_error"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_cut_mid_block_is_interrupted_never_a_whole_answer() {
    let full = sse("rec_thinking_tool_stream.0.response.sse");
    let text = String::from_utf8(full.clone()).unwrap();
    // Cut after the tool's first argument text, inside block 1.
    let cut_at = text.find(r#""partial_json":"{"#).unwrap();
    let cut_at = text[cut_at..].find("\n\n").unwrap() + cut_at + 2;
    // Cut after the message's last delta, before message_stop.
    let no_stop = text.find("event: message_stop").unwrap();
    for (bytes, abort, what) in [
        (full[..cut_at].to_vec(), false, "inside content block 1"),
        (full[..cut_at].to_vec(), true, ""),
        (full[..no_stop].to_vec(), false, "before message_stop"),
    ] {
        let server = Server::start().await;
        server.push(if abort {
            Reply::Abort(bytes)
        } else {
            Reply::Sse(bytes)
        });
        let model = server.model(|c| c.with_thinking(4000));
        let evs = events(
            &model,
            ChatRequest::new(vec![Message::user("weather?")]).with_tools(vec![weather_tool()]),
        )
        .await;
        assert!(evs.iter().all(|e| !matches!(
            e,
            Ok(ChatEvent::ToolCall(_) | ChatEvent::Part(_) | ChatEvent::Finish { .. })
        )));
        match evs.last() {
            Some(Err(ModelError::StreamInterrupted { detail, .. })) => {
                assert!(detail.contains(what), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_refusal_finishes_as_content_filter() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("sdk_refusal_response.sse")));
    let model = server.model(|c| c);
    let r = collect_stream(
        model
            .stream(ChatRequest::new(vec![Message::user("...")]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.finish_reason, FinishReason::ContentFilter);
}

// ---------------------------------------------------------------- request options

#[tokio::test]
async fn tool_choice_and_a_json_schema_map_to_the_documented_fields() {
    let server = Server::start().await;
    for _ in 0..4 {
        server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    }
    let model = server.model(|c| c);
    let base = ChatRequest::new(vec![Message::user("hi")])
        .with_tools(vec![weather_tool()])
        .with_cache(CachePolicy::Off);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
    let cases = [
        base.clone().with_tool_choice(ToolChoice::Required),
        base.clone()
            .with_tool_choice(ToolChoice::Function("weather".into())),
        base.clone().with_tool_choice(ToolChoice::None),
        base.clone()
            .with_temperature(0.25)
            .with_response_format(ResponseFormat::JsonSchema {
                name: "city".into(),
                schema: schema.clone(),
                strict: true,
            }),
    ];
    for c in cases {
        events(&model, c).await;
    }
    assert_eq!(server.body(0)["tool_choice"], json!({"type": "any"}));
    assert_eq!(
        server.body(1)["tool_choice"],
        json!({"type": "tool", "name": "weather"})
    );
    assert_eq!(server.body(2)["tool_choice"], json!({"type": "none"}));
    assert_eq!(
        server.body(3)["output_config"],
        json!({"format": {"type": "json_schema", "schema": schema}})
    );
    assert_eq!(server.body(3)["temperature"], json!(0.25));

    let err = model
        .chat(
            base.clone()
                .with_response_format(ResponseFormat::JsonObject),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Config(m) if m.contains("JsonSchema")));
    let thinking = server.model(|c| c.with_thinking(2048));
    let err = thinking
        .chat(base.with_tool_choice(ToolChoice::Required))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Config(m) if m.contains("auto or none")));
}

// ---------------------------------------------------------------- caching

fn cache_controls(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "cache_control" {
                    out.push(format!("{path}={x}"));
                } else {
                    cache_controls(x, &format!("{path}/{k}"), out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                cache_controls(x, &format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn controls(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    cache_controls(v, "", &mut out);
    out
}

#[tokio::test]
async fn round_two_starts_with_the_bytes_of_round_one() {
    let server = Server::start().await;
    for _ in 0..3 {
        server.push(Reply::Sse(sse("rec_thinking_tool_stream.0.response.sse")));
    }
    let model = server.model(|c| c.with_thinking(4000));
    let mut history = vec![
        Message::system("You are a helpful assistant"),
        Message::user("What's the weather in Florence, Italy?"),
    ];
    let req = |h: &Vec<Message>| {
        ChatRequest::new(h.clone())
            .with_tools(vec![weather_tool()])
            .with_stable_prefix(h.len())
    };
    let r = collect_stream(model.stream(req(&history)).await.unwrap())
        .await
        .unwrap();
    // The same request again: the same bytes.
    collect_stream(model.stream(req(&history)).await.unwrap())
        .await
        .unwrap();
    history.push(r.to_message());
    history.push(Message::tool(r.tool_calls[0].id.clone(), "weather", "40 C"));
    collect_stream(model.stream(req(&history)).await.unwrap())
        .await
        .unwrap();
    let reqs = server.requests();
    let (one, again, two) = (&reqs[0].1, &reqs[1].1, &reqs[2].1);
    assert_eq!(one, again);
    // Round one's bytes up to the end of its messages are round two's first bytes.
    let end = one
        .windows(15)
        .position(|w| w == b"],\"max_tokens\":")
        .unwrap();
    assert!(two.starts_with(&one[..end]));
    assert_eq!(two[end], b',');
    // Tools and system carry their breakpoints; the moving one is the top-level field,
    // so no message's bytes change when the conversation grows.
    let eph = r#"{"type":"ephemeral"}"#;
    assert_eq!(
        controls(&server.body(0)),
        [
            format!("/tools/0={eph}"),
            format!("/system/0={eph}"),
            format!("={eph}")
        ]
    );
    assert_eq!(controls(&server.body(2)), controls(&server.body(0)));
}

#[tokio::test]
async fn hand_placed_breakpoints_come_first_and_automatic_ones_fill_up_to_four() {
    let server = Server::start().await;
    for _ in 0..5 {
        server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    }
    let model = server.model(|c| c.with_cache_ttl(CacheTtl::Long));
    let bp = Part::CacheBreakpoint(CacheTtl::Short);
    let history = vec![
        Message::system("sys"),
        Message::user_with_parts("a", vec![bp.clone()]),
        Message::assistant("b"),
        Message::user_with_parts("c", vec![bp.clone()]),
        Message::assistant("d"),
        Message::user("e"),
        Message::assistant("f"),
        Message::user("g"),
    ];
    let base = ChatRequest::new(history.clone()).with_tools(vec![weather_tool()]);
    // Auto with a stable prefix short of the end: tools, system, the prefix's end and the
    // top-level field; hand-placed ones first, automatic ones dropped from the earliest.
    events(&model, base.clone().with_stable_prefix(5)).await;
    let long = r#"{"type":"ephemeral","ttl":"1h"}"#;
    let c = controls(&server.body(0));
    assert_eq!(c.len(), 4, "{c:?}");
    assert_eq!(
        c,
        [
            format!("/messages/0/content/0={long}"),
            format!("/messages/2/content/0={long}"),
            format!("/messages/3/content/0={long}"),
            format!("={long}"),
        ],
        "a short TTL before a long one is made long"
    );
    // Without hand-placed ones all four automatic breakpoints.
    let plain: Vec<Message> = history
        .iter()
        .map(|m| match m {
            Message::User { content, .. } => Message::user(content.clone()),
            other => other.clone(),
        })
        .collect();
    events(
        &model,
        ChatRequest::new(plain.clone())
            .with_tools(vec![weather_tool()])
            .with_stable_prefix(5),
    )
    .await;
    assert_eq!(
        controls(&server.body(1)),
        [
            format!("/tools/0={long}"),
            format!("/system/0={long}"),
            format!("/messages/3/content/0={long}"),
            format!("={long}"),
        ]
    );
    // Manual: only the hand-placed ones; Off: none at all.
    events(&model, base.clone().with_cache(CachePolicy::Manual)).await;
    let eph = r#"{"type":"ephemeral"}"#;
    assert_eq!(
        controls(&server.body(2)),
        [
            format!("/messages/0/content/0={eph}"),
            format!("/messages/2/content/0={eph}")
        ]
    );
    events(&model, base.with_cache(CachePolicy::Off)).await;
    assert!(controls(&server.body(3)).is_empty());
}

// ---------------------------------------------------------------- configuration

#[test]
fn the_api_key_is_redacted_and_an_empty_model_is_refused() {
    let cfg = AnthropicConfig::new("claude").with_api_key("sk-ant-secret");
    assert!(!format!("{cfg:?}").contains("sk-ant-secret"));
    assert!(matches!(
        AnthropicModel::new(AnthropicConfig::new(" ")),
        Err(ModelError::Config(_))
    ));
    assert!(matches!(
        AnthropicModel::new(AnthropicConfig::new("claude").with_thinking(100)),
        Err(ModelError::Config(_))
    ));
    let m = AnthropicModel::new(AnthropicConfig::new("claude")).unwrap();
    assert_eq!(m.info().provider.as_deref(), Some("anthropic"));
    assert!(m.info().function_calling);
}

// ---------------------------------------------------------------- the parser, any input

fn event_strategy() -> impl Strategy<Value = (String, String)> {
    let index = 0u8..4;
    let text = "[a-z\"{}:, ]{0,8}";
    prop_oneof![
        Just((String::from("message_start"), String::from( r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}"#))),
        (index.clone(), prop_oneof![Just("text"), Just("thinking"), Just("redacted_thinking"), Just("tool_use"), Just("server_tool_use")])
            .prop_map(|(i, t)| (String::from("content_block_start"), format!(r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"{t}","id":"t{i}","name":"f","text":"","thinking":"","data":"x"}}}}"#))),
        (index.clone(), prop_oneof![Just(("text_delta", "text")), Just(("input_json_delta", "partial_json")), Just(("thinking_delta", "thinking")), Just(("signature_delta", "signature")), Just(("citations_delta", "citation"))], text)
            .prop_map(|(i, (d, f), t)| (String::from("content_block_delta"), json!({"type": "content_block_delta", "index": i, "delta": {"type": d, (f): t}}).to_string())),
        index.clone().prop_map(|i| (String::from("content_block_stop"), format!(r#"{{"type":"content_block_stop","index":{i}}}"#))),
        prop_oneof![Just("end_turn"), Just("tool_use"), Just("max_tokens"), Just("pause_turn"), Just("refusal"), Just("")]
            .prop_map(|r| (String::from("message_delta"), format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{r}"}},"usage":{{"output_tokens":7}}}}"#))),
        Just((String::from("message_stop"), String::from(r#"{"type":"message_stop"}"#))),
        Just((String::from("ping"), String::from(r#"{"type": "ping"}"#))),
        Just((String::from("error"), String::from(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#))),
        ("[a-z_]{0,12}", ".{0,40}"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn the_stream_parser_never_panics_and_ends_once(events in proptest::collection::vec(event_strategy(), 0..40)) {
        let out = parse_sse_events(events.iter().map(|(e, d)| (e.as_str(), d.as_str())));
        // It always ends, with exactly one Finish or one error, and that is its last item.
        let ends = out.iter().filter(|e| matches!(e, Ok(ChatEvent::Finish { .. }) | Err(_))).count();
        prop_assert_eq!(ends, 1);
        let last_ends = matches!(out.last(), Some(Ok(ChatEvent::Finish { .. }) | Err(_)));
        prop_assert!(last_ends);
        // Nothing whole before message_stop: whole parts and calls only right before Finish.
        if let Some(Ok(ChatEvent::Finish { .. })) = out.last() {
            prop_assert!(events.iter().any(|(_, d)| d.contains("message_stop")));
        }
    }
}

// ---------------------------------------------------------------- the parser, edge cases

fn start(i: usize, block: &str) -> (String, String) {
    (
        "content_block_start".into(),
        format!(r#"{{"type":"content_block_start","index":{i},"content_block":{block}}}"#),
    )
}

fn parse(events: &[(String, String)]) -> Vec<Result<ChatEvent, ModelError>> {
    parse_sse_events(events.iter().map(|(e, d)| (e.as_str(), d.as_str())))
}

const MESSAGE_START: &str =
    r#"{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}"#;

#[test]
fn a_signature_without_its_thinking_block_is_malformed() {
    let evs = parse(&[
        ("message_start".into(), MESSAGE_START.into()),
        start(0, r#"{"type":"text","text":""}"#),
        (
            "content_block_delta".into(),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}"#.into(),
        ),
    ]);
    assert!(
        matches!(evs.last(), Some(Err(ModelError::Malformed { detail, .. })) if detail.contains("not a thinking block")),
        "{evs:?}"
    );
    let evs = parse(&[
        ("message_start".into(), MESSAGE_START.into()),
        (
            "content_block_delta".into(),
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"signature_delta","signature":"c2ln"}}"#.into(),
        ),
    ]);
    assert!(
        matches!(evs.last(), Some(Err(ModelError::Malformed { detail, .. })) if detail.contains("never started"))
    );
}

#[test]
fn pause_turn_is_reported_as_it_is_and_pings_and_new_event_types_are_skipped() {
    let evs = parse(&[
        ("message_start".into(), MESSAGE_START.into()),
        ("ping".into(), r#"{"type": "ping"}"#.into()),
        ("some_future_event".into(), r#"{"type":"some_future_event","x":1}"#.into()),
        start(0, r#"{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{}}"#),
        (
            "content_block_stop".into(),
            r#"{"type":"content_block_stop","index":0}"#.into(),
        ),
        (
            "message_delta".into(),
            r#"{"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"output_tokens":9,"output_tokens_details":{"thinking_tokens":4}}}"#.into(),
        ),
        ("message_stop".into(), r#"{"type":"message_stop"}"#.into()),
    ]);
    assert_eq!(evs.len(), 1);
    match &evs[0] {
        Ok(ChatEvent::Finish { reason, usage }) => {
            assert_eq!(reason, &FinishReason::Other("pause_turn".into()));
            let u = usage.unwrap();
            assert_eq!(
                (u.prompt_tokens, u.completion_tokens, u.reasoning_tokens),
                (5, 9, 4)
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_later_system_message_stays_in_place_and_a_tool_results_breakpoint_marks_it() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    server.push(Reply::Json(
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#
            .into(),
        None,
    ));
    let model = server.model(|c| c);
    let history = vec![
        Message::system("Be brief."),
        Message::user("go"),
        Message::assistant_with_tool_calls("", vec![ToolCall::new("t1", "f", json!({"x": 1}))]),
        Message::tool_with_parts(
            "t1",
            "f",
            "ok",
            vec![Part::CacheBreakpoint(CacheTtl::Short)],
        ),
        Message::system("Now answer in French."),
    ];
    events(
        &model,
        ChatRequest::new(history.clone()).with_cache(CachePolicy::Manual),
    )
    .await;
    let body = server.body(0);
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "Be brief."}])
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}],
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Now answer in French."},
        ]})
    );
    let err = model.chat(ChatRequest::new(history)).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Api { status: 401, code: Some(c), message } if c == "authentication_error" && message.contains("ANTHROPIC_API_KEY")),
        "{err}"
    );
}

#[tokio::test]
async fn two_breakpoints_on_one_block_count_once_with_the_longer_ttl() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("sdk_basic_response.sse")));
    let model = server.model(|c| c);
    let history = vec![
        Message::user_with_parts(
            "a",
            vec![
                Part::CacheBreakpoint(CacheTtl::Short),
                Part::CacheBreakpoint(CacheTtl::Long),
            ],
        ),
        Message::assistant("b"),
        Message::user("c"),
    ];
    events(
        &model,
        ChatRequest::new(history).with_tools(vec![weather_tool()]),
    )
    .await;
    let long = r#"{"type":"ephemeral","ttl":"1h"}"#;
    // One hand-placed, then all three automatic ones fit (tools, the end); the tools'
    // breakpoint comes before a long one, so it is long too.
    assert_eq!(
        controls(&server.body(0)),
        [
            format!("/tools/0={long}"),
            format!("/messages/0/content/0={long}"),
            r#"={"type":"ephemeral"}"#.to_owned(),
        ]
    );
}

#[tokio::test]
async fn thinking_before_text_gives_its_part_and_its_tokens_as_reasoning() {
    let server = Server::start().await;
    server.push(Reply::Sse(sse("sdk_thinking_text.sse")));
    let model = server.model(|c| c.with_thinking(2048));
    let evs: Vec<ChatEvent> = events(
        &model,
        ChatRequest::new(vec![Message::user("claudius, what is a solar eclipse?")]),
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let first_text = evs
        .iter()
        .position(|e| matches!(e, ChatEvent::TextDelta(_)))
        .unwrap();
    assert!(
        evs[..first_text]
            .iter()
            .all(|e| matches!(e, ChatEvent::ReasoningDelta(_)))
    );
    let r = collect_stream(Box::pin(futures::stream::iter(
        evs.into_iter().map(Ok::<ChatEvent, ModelError>),
    )))
    .await
    .unwrap();
    assert_eq!(r.content, "Hi");
    let Part::Reasoning(t) = &r.parts[0] else {
        panic!()
    };
    assert!(t.text.starts_with("Simple educational question"));
    assert_eq!(
        t.signature.as_deref(),
        Some("c3ludGhldGljLXNpZ25hdHVyZS1maXh0dXJlLWEtbm90LWEtcmVhbC1zaWduYXR1cmU=")
    );
    let u = r.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.reasoning_tokens),
        (28, 106, 67)
    );
    // The API stopped it as a refusal after the text.
    assert_eq!(r.finish_reason, FinishReason::ContentFilter);
}
