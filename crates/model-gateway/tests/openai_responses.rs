//! The OpenAI Responses backend against a real HTTP server on 127.0.0.1 that replays the
//! published reference's bodies and event streams byte for byte (tests/fixtures/
//! openai-responses, see its README) and records what the backend sent.
#![cfg(feature = "openai-responses")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{WireReply as Reply, WireServer as Server};
use toolwright_core::{
    CachePolicy, CacheTtl, ChatEvent, ChatModel, ChatRequest, ChatResponse, FinishReason, Media,
    Message, ModelError, Part, Reasoning, ReasoningKind, ResponseFormat, ToolCall, ToolChoice,
    ToolSpec, collect_stream,
};
use toolwright_model_gateway::{OpenAiConfig, OpenAiResponsesModel, ResponsesOptions, RetryPolicy};

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("fixtures/openai-responses/", $name))
    };
}

const ENC1: &str = "gAAAAABoTq1Xk9Zl3f0Jr8vU2mYqz7wS3nH4aE5cB6dF7gH8iJ9kL0mN1oP2qR3sT4uV5wX6yZ7aB8cD9eF0gH1iJ2kL3mN4oP5qR6sT7uV8wX9yZ0+/aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2yZ3==";
const ENC2: &str = "gAAAAABoTq1ZzY9xW8vU7tS6rQ5pO4nM3lK2jI1hG0fE9dC8bA7zY6xW5vU4tS3rQ2pO1nM0lK9jI8hG7fE6dC5bA4zY3xW2vU1tS0rQ9pO8nM7lK6jI5hG4fE3dC2bA1+/zY0xW9vU8tS7rQ6pO5nM4lK3jI2==";
const RS1: &str = "rs_68b1d5a1f2c08190b3d2e1f0a9b8c7d60f1a2b3c4d5e6f70";
const CALL1: &str = "call_Xk3mPq9RtY2vLs8nWb4cZd1e";

fn config(server: &Server) -> OpenAiConfig {
    OpenAiConfig::new("gpt-5.4")
        .with_base_url(server.base_url())
        .with_api_key("sk-test")
        .with_retry(
            RetryPolicy::default()
                .with_base_delay(Duration::from_millis(5))
                .with_max_delay(Duration::from_millis(20)),
        )
        .with_timeout(Duration::from_secs(5))
}

fn model(server: &Server) -> OpenAiResponsesModel {
    OpenAiResponsesModel::new(config(server)).unwrap()
}

fn weather() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Get the current weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}),
    )
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![
        Message::system("You are a helpful assistant."),
        Message::user("Weather in Paris?"),
    ])
    .with_tools(vec![weather()])
}

/// All events of a stream, the error (if any) last.
async fn events(m: &OpenAiResponsesModel, req: ChatRequest) -> Vec<Result<ChatEvent, ModelError>> {
    m.stream(req).await.unwrap().collect().await
}

const PNG_1X1: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0, 0,
    1, 0, 0, 0, 1, 8, 6, 0, 0, 0,
];

#[tokio::test]
async fn a_text_answer_is_read_from_the_documented_response() {
    let server = Server::start().await;
    server.push(Reply::json(fixture!("text.json")));
    let m = OpenAiResponsesModel::new(config(&server).with_header("x-tenant", "acme")).unwrap();
    let r = m.chat(ask()).await.unwrap();
    assert!(
        r.content
            .starts_with("In a peaceful grove beneath a silver moon")
    );
    assert_eq!(r.finish_reason, FinishReason::Stop);
    let u = r.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (36, 87, 123)
    );
    assert_eq!(
        (
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.reasoning_tokens
        ),
        (0, 0, 0)
    );
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/responses");
    assert_eq!(req.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(req.header("x-tenant"), Some("acme"));
    let b = &req.body;
    assert_eq!(b["model"], "gpt-5.4");
    assert_eq!(b["store"], false);
    assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(b["stream"], false);
    // The system message is the first input item, so that the prefix stays cacheable.
    assert_eq!(
        b["input"][0],
        json!({"type": "message", "role": "system", "content": "You are a helpful assistant."})
    );
    assert_eq!(
        b["input"][1],
        json!({"type": "message", "role": "user", "content": "Weather in Paris?"})
    );
    assert!(b.get("reasoning").is_none() && b.get("prompt_cache_key").is_none());
}

#[tokio::test]
async fn the_documented_stream_becomes_text_deltas_then_finish() {
    let server = Server::start().await;
    server.push(Reply::sse_chunked(fixture!("stream_text.sse"), 97));
    let m = model(&server);
    let evs = events(&m, ChatRequest::new(vec![Message::user("Hello!")])).await;
    let evs: Vec<ChatEvent> = evs.into_iter().map(Result::unwrap).collect();
    let text: String = evs
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hi there! How can I assist you today?");
    let Some(ChatEvent::Finish { reason, usage }) = evs.last() else {
        panic!("{evs:?}")
    };
    assert_eq!(*reason, FinishReason::Stop);
    let u = usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (37, 11, 48)
    );
    assert_eq!(server.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn tools_choice_format_and_settings_follow_the_published_reference() {
    let server = Server::start().await;
    server.push(Reply::json(fixture!("function_call.json")));
    let m = model(&server).with_options(
        ResponsesOptions::default()
            .with_reasoning_effort("high")
            .with_reasoning_summary("auto"),
    );
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
    let req = ask()
        .with_tool_choice(ToolChoice::Function("get_weather".into()))
        .with_response_format(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: schema.clone(),
            strict: true,
        })
        .with_max_tokens(300)
        .with_temperature(0.5)
        .with_cache_key("conversation-42");
    m.chat(req).await.unwrap();
    let b = &server.requests()[0].body;
    // The reference's function tool: flat, not nested under "function" as Chat Completions has it.
    let documented: Value = serde_json::from_str(fixture!("functions.request.json")).unwrap();
    let tool = &b["tools"][0];
    let doc_tool = &documented["tools"][0];
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let mut expected = keys(doc_tool);
    expected.push("strict".into());
    expected.sort();
    assert_eq!(keys(tool), expected);
    assert_eq!(tool["type"], "function");
    assert_eq!(tool["name"], "get_weather");
    assert_eq!(tool["parameters"], *weather().parameters);
    assert_eq!(tool["strict"], false);
    assert_eq!(
        b["tool_choice"],
        json!({"type": "function", "name": "get_weather"})
    );
    assert_eq!(
        b["text"],
        json!({"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": true}})
    );
    assert_eq!(b["reasoning"], json!({"effort": "high", "summary": "auto"}));
    assert_eq!(b["max_output_tokens"], 300);
    assert_eq!(b["temperature"], 0.5);
    assert_eq!(b["prompt_cache_key"], "conversation-42");
    for (choice, wire) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::None, json!("none")),
        (ToolChoice::Required, json!("required")),
    ] {
        server.push(Reply::json(fixture!("text.json")));
        m.chat(ask().with_tool_choice(choice)).await.unwrap();
        assert_eq!(server.requests().last().unwrap().body["tool_choice"], wire);
    }
    for (format, wire) in [
        (ResponseFormat::Text, json!({"type": "text"})),
        (ResponseFormat::JsonObject, json!({"type": "json_object"})),
    ] {
        server.push(Reply::json(fixture!("text.json")));
        m.chat(ask().with_response_format(format)).await.unwrap();
        assert_eq!(
            server.requests().last().unwrap().body["text"]["format"],
            wire
        );
    }
    // No tools bound: no tools field, and no tool_choice either.
    server.push(Reply::json(fixture!("text.json")));
    m.chat(ChatRequest::new(vec![Message::user("hi")]).with_tool_choice(ToolChoice::Required))
        .await
        .unwrap();
    let last = server.requests().last().unwrap().body.clone();
    assert!(last.get("tools").is_none() && last.get("tool_choice").is_none());
}

#[tokio::test]
async fn the_documented_function_call_is_a_tool_call() {
    let server = Server::start().await;
    server.push(Reply::json(fixture!("function_call.json")));
    let r = model(&server).chat(ask()).await.unwrap();
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        r.tool_calls,
        vec![ToolCall::new(
            "call_unLAR8MvFNptuiZK6K6HCy5k",
            "get_current_weather",
            json!({"location": "Boston, MA", "unit": "celsius"})
        )]
    );
    assert_eq!(r.content, "");
}

/// Round 1 streams reasoning then a call; round 2 must carry that reasoning item first,
/// unchanged (id, both summary parts, encrypted content), then the call, then its output.
#[tokio::test]
async fn reasoning_before_a_tool_call_is_replayed_unchanged_in_the_next_round() {
    let server = Server::start().await;
    server.push(Reply::sse_chunked(
        fixture!("stream_reasoning_tool.sse"),
        113,
    ));
    server.push(Reply::sse(fixture!("stream_reasoning_answer.sse")));
    let m = model(&server);
    let evs: Vec<ChatEvent> = events(&m, ask())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // Deltas first, then the whole reasoning parts, then the call, then Finish.
    let reasoning: String = evs
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ReasoningDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasoning,
        "**Checking the weather**\n\nThe user wants Paris weather; I should call get_weather.\n\n**Choosing units**\n\nCelsius fits Paris."
    );
    let first_part = evs
        .iter()
        .position(|e| matches!(e, ChatEvent::Part(_)))
        .unwrap();
    let call = evs
        .iter()
        .position(|e| matches!(e, ChatEvent::ToolCall(_)))
        .unwrap();
    let last_delta = evs
        .iter()
        .rposition(|e| {
            matches!(
                e,
                ChatEvent::ToolCallDelta { .. } | ChatEvent::ReasoningDelta(_)
            )
        })
        .unwrap();
    assert!(last_delta < first_part && first_part < call, "{evs:?}");
    let round1 = {
        let server_events = futures::stream::iter(evs.into_iter().map(Ok::<ChatEvent, ModelError>));
        collect_stream(Box::pin(server_events)).await.unwrap()
    };
    assert_eq!(round1.finish_reason, FinishReason::ToolCalls);
    let u = round1.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.cache_read_tokens, u.cache_write_tokens),
        (1200, 1024, 0)
    );
    assert_eq!(
        (u.completion_tokens, u.reasoning_tokens, u.total_tokens),
        (310, 256, 1510)
    );
    assert_eq!(round1.parts.len(), 2, "one part per summary part");
    let Part::Reasoning(r) = &round1.parts[0] else {
        panic!()
    };
    assert_eq!(r.provider, "openai-responses");
    assert_eq!(r.kind, ReasoningKind::Summary);
    assert_eq!(r.id.as_deref(), Some(RS1));
    assert_eq!(r.encrypted.as_deref(), Some(ENC1));
    assert_eq!(r.call_id.as_deref(), Some(CALL1));
    assert_eq!(
        round1.tool_calls,
        vec![ToolCall::new(
            CALL1,
            "get_weather",
            json!({"city": "Paris", "unit": "celsius"})
        )]
    );

    let mut history = ask().messages;
    history.push(round1.to_message());
    history.push(Message::tool(CALL1, "get_weather", r#"{"temp_c":18}"#));
    let round2 = collect_stream(
        m.stream(ChatRequest::new(history).with_tools(vec![weather()]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(round2.content, "It is 18 °C in Paris.");
    let input = &server.requests()[1].body["input"];
    let documented_item = {
        let sse = fixture!("stream_reasoning_tool.sse");
        let done = sse
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .find(|v| v["type"] == "response.output_item.done" && v["item"]["type"] == "reasoning")
            .unwrap();
        done["item"].clone()
    };
    assert_eq!(
        input[2], documented_item,
        "the reasoning item goes back as it came"
    );
    assert_eq!(input[2]["encrypted_content"], ENC1);
    assert_eq!(
        input[3],
        json!({"type": "function_call", "call_id": CALL1, "name": "get_weather",
               "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"})
    );
    assert_eq!(
        input[4],
        json!({"type": "function_call_output", "call_id": CALL1, "output": "{\"temp_c\":18}"})
    );
    assert_eq!(input.as_array().unwrap().len(), 5);
    // The answer's own reasoning (no call follows it) is kept for the round after.
    let Part::Reasoning(r2) = &round2.parts[0] else {
        panic!()
    };
    assert_eq!(
        (r2.encrypted.as_deref(), r2.call_id.as_deref()),
        (Some(ENC2), None)
    );
}

/// A held run is stored as JSON between rounds (session stores do that): the reasoning item
/// read back from it is sent with byte-identical encrypted content.
#[tokio::test]
async fn a_held_runs_reasoning_survives_json_and_goes_back_identical() {
    let server = Server::start().await;
    server.push(Reply::json(fixture!("reasoning_tool.json")));
    server.push(Reply::json(fixture!("text.json")));
    let m = model(&server);
    let round1: ChatResponse = m.chat(ask()).await.unwrap();
    let stored = serde_json::to_string(&round1.to_message()).unwrap();
    let restored: Message = serde_json::from_str(&stored).unwrap();
    assert_eq!(restored, round1.to_message());
    let mut history = ask().messages;
    history.push(restored);
    history.push(Message::tool(CALL1, "get_weather", "18 C"));
    m.chat(ChatRequest::new(history)).await.unwrap();
    let sent = &server.requests()[1];
    let documented: Value = serde_json::from_str(fixture!("reasoning_tool.json")).unwrap();
    assert_eq!(sent.body["input"][2], documented["output"][0]);
    let raw = String::from_utf8(sent.raw.clone()).unwrap();
    assert!(
        raw.contains(&format!("\"encrypted_content\":\"{ENC1}\"")),
        "{raw}"
    );
}

#[tokio::test]
async fn parallel_calls_are_two_tool_calls_in_order() {
    let server = Server::start().await;
    server.push(Reply::sse(fixture!("stream_parallel_calls.sse")));
    let r = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall::new("call_Paris0001", "get_weather", json!({"city": "Paris"})),
            ToolCall::new("call_Tokyo0002", "get_weather", json!({"city": "Tokyo"})),
        ]
    );
    // And they go back in that order, each answered by its own output.
    server.push(Reply::json(fixture!("text.json")));
    let mut history = ask().messages;
    history.push(r.to_message());
    history.push(Message::tool("call_Paris0001", "get_weather", "18"));
    history.push(Message::tool("call_Tokyo0002", "get_weather", "25"));
    model(&server)
        .chat(ChatRequest::new(history))
        .await
        .unwrap();
    let input = server.requests()[1].body["input"].clone();
    let kinds: Vec<&str> = input
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output"
        ]
    );
    assert_eq!(input[3]["call_id"], "call_Tokyo0002");
}

#[tokio::test]
async fn images_and_files_go_as_input_parts_in_user_messages_and_tool_outputs() {
    let server = Server::start().await;
    server.always(Reply::json(fixture!("text.json")));
    let m = model(&server);
    let png = Media::image_bytes(PNG_1X1, "image/png").unwrap();
    let url = "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg";
    let pdf = Media::bytes(b"%PDF-1.7", "application/pdf")
        .unwrap()
        .with_name("a.pdf");
    let user = Message::user_with_parts(
        "what is in this image?",
        vec![
            Part::Image(Media::url("image/jpeg", url)),
            Part::Image(png.clone()),
            Part::File(pdf),
            Part::File(Media::url(
                "application/pdf",
                "https://www.berkshirehathaway.com/letters/2024ltr.pdf",
            )),
            Part::CacheBreakpoint(CacheTtl::Short),
        ],
    );
    let shot = Message::tool_with_parts(CALL1, "shoot", "done", vec![Part::Image(png.clone())]);
    let history = vec![
        user,
        Message::assistant_with_tool_calls("", vec![ToolCall::new(CALL1, "shoot", json!({}))]),
        shot,
    ];
    m.chat(ChatRequest::new(history)).await.unwrap();
    let input = server.requests()[0].body["input"].clone();
    let documented: Value = serde_json::from_str(fixture!("image_input.request.json")).unwrap();
    let doc_user = &documented["input"][0];
    // The reference's shapes: input_text, then input_image with image_url (and detail).
    assert_eq!(input[0]["role"], doc_user["role"]);
    assert_eq!(input[0]["content"][0], doc_user["content"][0]);
    let mut doc_image = doc_user["content"][1].clone();
    doc_image["detail"] = json!("auto");
    assert_eq!(input[0]["content"][1], doc_image);
    let data_url = format!(
        "data:image/png;base64,{}",
        match &png.source {
            toolwright_core::MediaSource::Base64 { data } => data.clone(),
            _ => unreachable!(),
        }
    );
    assert_eq!(
        input[0]["content"][2],
        json!({"type": "input_image", "image_url": data_url, "detail": "auto"})
    );
    assert_eq!(
        input[0]["content"][3],
        json!({"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0xLjc=", "filename": "a.pdf"})
    );
    let doc_file: Value = serde_json::from_str(fixture!("file_input.request.json")).unwrap();
    assert_eq!(
        input[0]["content"][4]["file_url"],
        doc_file["input"][0]["content"][1]["file_url"]
    );
    assert_eq!(
        input[0]["content"].as_array().unwrap().len(),
        5,
        "the breakpoint adds nothing"
    );
    // The tool's screenshot goes in the output array the reference documents.
    assert_eq!(
        input[2],
        json!({"type": "function_call_output", "call_id": CALL1, "output": [
            {"type": "input_text", "text": "done"},
            {"type": "input_image", "image_url": data_url, "detail": "auto"}]})
    );
}

#[tokio::test]
async fn media_kept_by_reference_is_sent_as_the_line_naming_it_in_the_tool_output() {
    let server = Server::start().await;
    server.always(Reply::json(fixture!("text.json")));
    let m = model(&server);
    let kept = Part::Resource(toolwright_core::ResourceRef::new(
        "toolwright-blob:sha256:ab",
        "image/png",
        31_457_280,
    ));
    let line = kept.placeholder();
    let history = vec![
        Message::user("Screenshot the page"),
        Message::assistant_with_tool_calls("", vec![ToolCall::new(CALL1, "shoot", json!({}))]),
        Message::tool_with_parts(CALL1, "shoot", "done", vec![kept]),
    ];
    m.chat(ChatRequest::new(history)).await.unwrap();
    assert_eq!(
        server.requests()[0].body["input"][2],
        json!({"type": "function_call_output", "call_id": CALL1, "output": [
            {"type": "input_text", "text": "done"},
            {"type": "input_text", "text": line}]})
    );
}

#[tokio::test]
async fn parts_the_wire_cannot_carry_are_refused_before_sending() {
    let server = Server::start().await;
    server.always(Reply::json(fixture!("text.json")));
    let m = model(&server);
    let wav = Media::bytes(b"RIFF....WAVE", "audio/wav").unwrap();
    let png = Media::image_bytes(PNG_1X1, "image/png").unwrap();
    let cases = [
        Message::user_with_parts("listen", vec![Part::Audio(wav.clone())]),
        Message::tool_with_parts(CALL1, "record", "done", vec![Part::Audio(wav)]),
        Message::Assistant {
            content: "here".into(),
            tool_calls: vec![],
            parts: vec![Part::Image(png)],
        },
    ];
    for (i, msg) in cases.into_iter().enumerate() {
        let err = m.chat(ChatRequest::new(vec![msg])).await.unwrap_err();
        let ModelError::Unsupported { part, backend } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(backend, "OpenAI Responses");
        assert_eq!(*part, if i == 2 { "image" } else { "audio" });
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn another_providers_reasoning_is_not_sent() {
    let server = Server::start().await;
    server.always(Reply::json(fixture!("text.json")));
    let theirs = vec![
        Part::Reasoning(
            Reasoning::new("anthropic", ReasoningKind::Full, "hmm").with_signature("sig-anthropic"),
        ),
        Part::Reasoning(Reasoning::new(
            "openai-chat",
            ReasoningKind::Full,
            "thinking",
        )),
        Part::Reasoning(
            Reasoning::new("gemini", ReasoningKind::Full, "")
                .with_signature("sig-gemini")
                .with_id("rs_x"),
        ),
    ];
    let history = vec![
        Message::user("hi"),
        Message::assistant("hello").with_parts(theirs),
        Message::user("again"),
    ];
    model(&server)
        .chat(ChatRequest::new(history))
        .await
        .unwrap();
    let sent = &server.requests()[0];
    let raw = String::from_utf8(sent.raw.clone()).unwrap();
    for absent in [
        "sig-anthropic",
        "thinking",
        "sig-gemini",
        "\"reasoning\"",
        "hmm",
    ] {
        assert!(!raw.contains(absent), "{absent} in {raw}");
    }
    assert_eq!(
        sent.body["input"][1],
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]})
    );
}

#[tokio::test]
async fn an_error_event_mid_stream_is_a_typed_error_after_the_text_so_far() {
    let server = Server::start().await;
    server.push(Reply::sse(fixture!("stream_error_event.sse")));
    let evs = events(&model(&server), ask()).await;
    assert!(
        matches!(&evs[0], Ok(ChatEvent::TextDelta(t)) if t == "Partial"),
        "{evs:?}"
    );
    let Some(Err(ModelError::Api {
        status,
        message,
        code,
    })) = evs.last()
    else {
        panic!("{evs:?}")
    };
    assert_eq!(
        (message.as_str(), code.as_deref()),
        ("Something went wrong", Some("ERR_SOMETHING"))
    );
    assert_eq!(*status, 400);
    assert!(
        !evs.iter()
            .any(|e| matches!(e, Ok(ChatEvent::Finish { .. })))
    );
}

#[tokio::test]
async fn a_failed_response_is_a_typed_transient_error() {
    let server = Server::start().await;
    server.push(Reply::sse(fixture!("stream_failed.sse")));
    let err = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap_err();
    let ModelError::Api {
        status,
        message,
        code,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(*status, 500);
    assert_eq!(message, "The model failed to generate a response.");
    assert_eq!(code.as_deref(), Some("server_error"));
    assert!(err.is_transient());
}

#[tokio::test]
async fn rate_limits_and_overload_are_retried_after_retry_after_then_succeed() {
    let server = Server::start().await;
    server.push(Reply::status(429, fixture!("error_429.json"), Some("1")));
    server.push(Reply::status(
        529,
        r#"{"error":{"message":"Overloaded","type":"server_error","param":null,"code":null}}"#,
        Some("0"),
    ));
    server.push(Reply::json(fixture!("text.json")));
    let m = model(&server);
    let t = Instant::now();
    let r = m.chat(ask()).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "{:?}",
        t.elapsed()
    );
    assert!(r.content.starts_with("In a peaceful grove"));
    assert_eq!(server.requests().len(), 3);
    // The same for a stream: the retry happens before any byte of the answer.
    server.push(Reply::status(429, fixture!("error_429.json"), Some("0")));
    server.push(Reply::sse(fixture!("stream_text.sse")));
    let r = collect_stream(m.stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(r.content, "Hi there! How can I assist you today?");
    assert_eq!(server.requests().len(), 5);
    // When retries run out, the error keeps OpenAI's code.
    let none = OpenAiResponsesModel::new(config(&server).with_retry(RetryPolicy::none())).unwrap();
    server.push(Reply::status(429, fixture!("error_429.json"), Some("0")));
    let err = none.chat(ask()).await.unwrap_err();
    let ModelError::Api { status, code, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*status, code.as_deref()),
        (429, Some("rate_limit_exceeded"))
    );
}

#[tokio::test]
async fn a_rejected_request_is_a_typed_error_and_not_retried() {
    let server = Server::start().await;
    server.push(Reply::status(400, fixture!("error_400.json"), None));
    let err = model(&server).chat(ask()).await.unwrap_err();
    let ModelError::Api {
        status,
        code,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((*status, code.as_deref()), (400, Some("invalid_value")));
    assert!(message.contains("input_audio"));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_cut_mid_block_is_interrupted_not_a_shorter_answer() {
    for (fixture, partial, inside) in [
        (fixture!("stream_cut.sse"), "The answer is", "(message)"),
        (fixture!("stream_cut_call.sse"), "", "(function_call)"),
    ] {
        let server = Server::start().await;
        server.push(Reply::sse(fixture));
        let evs = events(&model(&server), ask()).await;
        assert!(
            !evs.iter()
                .any(|e| matches!(e, Ok(ChatEvent::Finish { .. } | ChatEvent::ToolCall(_))))
        );
        let Some(Err(ModelError::StreamInterrupted {
            detail,
            partial_text,
        })) = evs.last()
        else {
            panic!("{evs:?}")
        };
        assert_eq!(partial_text, partial);
        assert!(detail.contains(inside), "{detail}");
    }
}

#[tokio::test]
async fn unparsable_tool_arguments_become_an_invalid_tool_call() {
    let server = Server::start().await;
    server.push(Reply::sse(fixture!("stream_bad_arguments.sse")));
    let r = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.invalid_tool_calls.len(), 1);
    let bad = &r.invalid_tool_calls[0];
    assert_eq!(
        (bad.id.as_str(), bad.name.as_str(), bad.raw.as_str()),
        ("call_bad00001", "get_weather", "{\"city\": Paris")
    );
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    // The call goes back verbatim, answered by the loop's message.
    server.push(Reply::json(fixture!("text.json")));
    let mut history = ask().messages;
    history.push(r.to_message());
    history.push(Message::tool(&bad.id, &bad.name, bad.model_message()));
    model(&server)
        .chat(ChatRequest::new(history))
        .await
        .unwrap();
    assert_eq!(
        server.requests()[1].body["input"][2]["arguments"],
        "{\"city\": Paris"
    );
}

#[tokio::test]
async fn an_answer_cut_at_max_output_tokens_finishes_with_length() {
    let server = Server::start().await;
    server.push(Reply::sse(fixture!("stream_incomplete.sse")));
    let r = collect_stream(model(&server).stream(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(r.content, "Once upon a time");
    assert_eq!(r.finish_reason, FinishReason::Length);
    assert_eq!(r.usage.unwrap().completion_tokens, 16);
}

#[tokio::test]
async fn the_cache_key_is_sent_unless_caching_is_off() {
    let server = Server::start().await;
    server.always(Reply::json(fixture!("text.json")));
    let m = model(&server);
    m.chat(ask().with_cache_key("k1").with_cache(CachePolicy::Manual))
        .await
        .unwrap();
    m.chat(ask().with_cache_key("k1").with_cache(CachePolicy::Off))
        .await
        .unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].body["prompt_cache_key"], "k1");
    assert!(reqs[1].body.get("prompt_cache_key").is_none());
}

#[tokio::test]
async fn store_is_an_option_and_replay_still_happens_when_it_is_on() {
    let server = Server::start().await;
    server.push(Reply::json(fixture!("reasoning_tool.json")));
    server.push(Reply::json(fixture!("text.json")));
    let m = model(&server).with_options(ResponsesOptions::default().with_store(true));
    let r = m.chat(ask()).await.unwrap();
    let mut history = ask().messages;
    history.push(r.to_message());
    history.push(Message::tool(CALL1, "get_weather", "18"));
    m.chat(ChatRequest::new(history)).await.unwrap();
    let b = &server.requests()[1].body;
    assert_eq!(b["store"], true);
    assert_eq!(b["input"][2]["encrypted_content"], ENC1);
}

/// The same request twice is the same bytes; the next round's request starts with this
/// round's bytes up to the end of its input items (system, tools, earlier items unchanged).
#[tokio::test]
async fn requests_are_byte_stable_and_the_next_round_extends_the_last() {
    let server = Server::start().await;
    server.push(Reply::json(fixture!("reasoning_tool.json")));
    server.push(Reply::json(fixture!("reasoning_tool.json")));
    server.push(Reply::json(fixture!("text.json")));
    let m = model(&server);
    let req = ask().with_cache_key("conv-1");
    let r = m.chat(req.clone()).await.unwrap();
    m.chat(req.clone()).await.unwrap();
    let mut next = req.clone();
    next.messages.push(r.to_message());
    next.messages
        .push(Message::tool(CALL1, "get_weather", "18"));
    m.chat(next).await.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].raw, reqs[1].raw);
    let first = String::from_utf8(reqs[0].raw.clone()).unwrap();
    let second = String::from_utf8(reqs[2].raw.clone()).unwrap();
    let input_end = first.find("],\"prompt_cache_key\"").unwrap();
    assert_eq!(
        &second[..input_end],
        &first[..input_end],
        "\n{first}\n{second}"
    );
    assert!(first.find("\"tools\"").unwrap() < first.find("\"input\"").unwrap());
}

#[tokio::test]
async fn info_names_the_openai_provider_and_debug_hides_the_key() {
    let server = Server::start().await;
    let m = OpenAiResponsesModel::new(config(&server).with_api_key("sk-very-secret")).unwrap();
    let info = m.info();
    assert_eq!(
        (info.model.as_str(), info.provider.as_deref()),
        ("gpt-5.4", Some("openai"))
    );
    assert!(!format!("{m:?}").contains("sk-very-secret"));
    let err = OpenAiResponsesModel::new(OpenAiConfig::new(" ")).unwrap_err();
    assert!(matches!(err, ModelError::Config(_)));
}
