//! Content beyond text on the Chat Completions wire, over real HTTP against the scripted
//! server: images, audio and files as content parts, a tool's image lowered into a user
//! message naming its call, reasoning read and replayed within the turn, the prompt cache
//! key, and the cache and reasoning token counts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_core::{
    CachePolicy, ChatEvent, ChatModel, ChatRequest, Media, Message, ModelError, Part, Reasoning,
    ReasoningKind, ToolCall,
};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel, RetryPolicy};

fn model(server: &ScriptedServer) -> OpenAiModel {
    OpenAiModel::new(
        OpenAiConfig::new("deepseek-chat")
            .with_base_url(server.base_url())
            .with_retry(RetryPolicy::none())
            .with_timeout(Duration::from_secs(5)),
    )
    .unwrap()
}

/// A 1×1 PNG.
fn png() -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(1u32.to_be_bytes());
    b.extend(1u32.to_be_bytes());
    b.extend([8, 6, 0, 0, 0]);
    b
}

fn image() -> Part {
    Part::Image(Media::image_bytes(&png(), "image/png").unwrap())
}

fn raw_json(v: Value) -> Reply {
    Reply::Raw {
        status: 200,
        content_type: "application/json".into(),
        body: v.to_string(),
    }
}

/// DeepSeek's documented reasoning response shape (`deepseek-reasoner`), with the cache and
/// reasoning counts its usage reports.
fn reasoning_answer() -> Reply {
    raw_json(json!({
        "id": "930c60df", "object": "chat.completion", "created": 1705651072, "model": "deepseek-reasoner",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null, "message": {
            "role": "assistant", "content": "9.11 is smaller.",
            "reasoning_content": "Compare the tenths: 1 < 9."}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 50, "total_tokens": 80,
            "prompt_cache_hit_tokens": 20, "prompt_cache_miss_tokens": 10,
            "completion_tokens_details": {"reasoning_tokens": 40}}
    }))
}

#[tokio::test]
async fn a_persons_image_audio_and_file_are_sent_as_content_parts() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("a cat"));
    let audio = Part::Audio(Media::bytes(b"RIFF....WAVE", "audio/wav").unwrap());
    let pdf = Part::File(
        Media::bytes(b"%PDF-1.7", "application/pdf")
            .unwrap()
            .with_name("a.pdf"),
    );
    let url = Part::Image(Media::url("image/jpeg", "https://example.com/cat.jpg"));
    let ask = Message::user_with_parts("What is this?", vec![image(), url, audio, pdf]);
    model(&server)
        .chat(ChatRequest::new(vec![ask]))
        .await
        .unwrap();
    let body = &server.requests()[0].body;
    let content = &body["messages"][0]["content"];
    assert_eq!(content[0], json!({"type": "text", "text": "What is this?"}));
    assert_eq!(content[1]["type"], "image_url");
    let data_url = content[1]["image_url"]["url"].as_str().unwrap();
    assert!(
        data_url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{data_url}"
    );
    assert_eq!(
        content[2]["image_url"]["url"],
        "https://example.com/cat.jpg"
    );
    assert_eq!(content[3]["type"], "input_audio");
    assert_eq!(content[3]["input_audio"]["format"], "wav");
    assert_eq!(content[4]["type"], "file");
    assert_eq!(content[4]["file"]["filename"], "a.pdf");
    assert!(
        content[4]["file"]["file_data"]
            .as_str()
            .unwrap()
            .starts_with("data:application/pdf;base64,")
    );
}

#[tokio::test]
async fn a_tools_image_follows_the_tool_results_as_a_user_message_naming_the_call() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("It shows a login page."));
    let calls = vec![
        ToolCall::new("call_1", "screenshot", json!({})),
        ToolCall::new("call_2", "title", json!({})),
    ];
    let history = vec![
        Message::user("What is on the page?"),
        Message::assistant_with_tool_calls("", calls),
        Message::tool_with_parts("call_1", "screenshot", "taken", vec![image()]),
        Message::tool("call_2", "title", "Login"),
    ];
    model(&server)
        .chat(ChatRequest::new(history))
        .await
        .unwrap();
    let messages = server.requests()[0].body["messages"].clone();
    let roles: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    // Every tool message stays right after the call it answers; the image comes after them.
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "user"]);
    assert_eq!(messages[2]["content"], "taken");
    let lowered = &messages[4]["content"];
    assert!(
        lowered[0]["text"].as_str().unwrap().contains("`call_1`"),
        "{lowered}"
    );
    assert_eq!(lowered[1]["type"], "image_url");
}

#[tokio::test]
async fn media_kept_by_reference_stays_in_its_tool_message_as_the_line_naming_it() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("It is kept."));
    let kept = Part::Resource(toolwright_core::ResourceRef::new(
        "toolwright-blob:sha256:ab",
        "image/png",
        31_457_280,
    ));
    let line = kept.placeholder();
    let history = vec![
        Message::user("Screenshot the page"),
        Message::assistant_with_tool_calls(
            "",
            vec![ToolCall::new("call_1", "screenshot", json!({}))],
        ),
        Message::tool_with_parts("call_1", "screenshot", "taken", vec![kept]),
    ];
    model(&server)
        .chat(ChatRequest::new(history))
        .await
        .unwrap();
    let messages = server.requests()[0].body["messages"].clone();
    assert_eq!(
        messages.as_array().unwrap().len(),
        3,
        "nothing lowered: {messages}"
    );
    assert_eq!(messages[2]["content"], json!(format!("taken\n{line}")));
}

#[tokio::test]
async fn reasoning_is_read_and_the_cache_and_reasoning_tokens_are_counted() {
    let server = ScriptedServer::start().await;
    server.push(reasoning_answer());
    let r = model(&server)
        .chat(ChatRequest::new(vec![Message::user("9.11 or 9.8?")]))
        .await
        .unwrap();
    assert_eq!(r.content, "9.11 is smaller.");
    let Part::Reasoning(reasoning) = &r.parts[0] else {
        panic!("{:?}", r.parts)
    };
    assert_eq!(
        (reasoning.provider.as_str(), reasoning.text.as_str()),
        ("openai-chat", "Compare the tenths: 1 < 9.")
    );
    let u = r.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.cache_read_tokens, u.reasoning_tokens),
        (30, 20, 40)
    );
}

#[tokio::test]
async fn streamed_reasoning_arrives_as_deltas_then_one_part_before_the_finish() {
    let server = ScriptedServer::start().await;
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let body = [
        chunk(
            json!({"role": "assistant", "content": null, "reasoning_content": "Compare "}),
            Value::Null,
        ),
        chunk(json!({"reasoning_content": "the tenths."}), Value::Null),
        chunk(json!({"content": "9.11"}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    server.push(Reply::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body,
    });
    let mut stream = model(&server)
        .stream(ChatRequest::new(vec![Message::user("9.11 or 9.8?")]))
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(e) = stream.next().await {
        events.push(e.unwrap());
    }
    assert_eq!(events[0], ChatEvent::ReasoningDelta("Compare ".into()));
    assert_eq!(events[1], ChatEvent::ReasoningDelta("the tenths.".into()));
    assert_eq!(events[2], ChatEvent::TextDelta("9.11".into()));
    assert_eq!(
        events[3],
        ChatEvent::Part(Part::Reasoning(Reasoning::new(
            "openai-chat",
            ReasoningKind::Full,
            "Compare the tenths."
        )))
    );
    assert!(matches!(events[4], ChatEvent::Finish { .. }));
}

#[tokio::test]
async fn reasoning_goes_back_within_the_turn_only_and_never_from_another_provider() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("done"));
    let ours = |t: &str| Part::Reasoning(Reasoning::new("openai-chat", ReasoningKind::Full, t));
    let theirs = Part::Reasoning(
        Reasoning::new("anthropic", ReasoningKind::Full, "claude's").with_signature("sig"),
    );
    let call = ToolCall::new("c1", "lookup", json!({}));
    let history = vec![
        Message::user("first question"),
        Message::assistant("first answer").with_parts(vec![ours("earlier turn")]),
        Message::user("second question"),
        Message::assistant_with_tool_calls("", vec![call]).with_parts(vec![ours("this turn")]),
        Message::tool("c1", "lookup", "found"),
        Message::assistant("").with_parts(vec![theirs]),
    ];
    model(&server)
        .chat(ChatRequest::new(history))
        .await
        .unwrap();
    let m = server.requests()[0].body["messages"].clone();
    assert!(m[1].get("reasoning_content").is_none(), "{}", m[1]);
    assert_eq!(m[3]["reasoning_content"], "this turn");
    assert!(m[5].get("reasoning_content").is_none(), "{}", m[5]);
    assert!(!m.to_string().contains("claude's"));
}

#[tokio::test]
async fn the_prompt_cache_key_is_sent_unless_caching_is_off() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("a"));
    server.push(Reply::text("b"));
    let m = model(&server);
    let ask = || ChatRequest::new(vec![Message::user("hi")]).with_cache_key("tw-0123");
    m.chat(ask()).await.unwrap();
    m.chat(ask().with_cache(CachePolicy::Off)).await.unwrap();
    let r = server.requests();
    assert_eq!(r[0].body["prompt_cache_key"], "tw-0123");
    assert!(r[1].body.get("prompt_cache_key").is_none());
}

#[tokio::test]
async fn content_the_wire_cannot_carry_is_refused_before_anything_is_sent() {
    let server = ScriptedServer::start().await;
    let history = vec![
        Message::user("draw"),
        Message::assistant("here").with_parts(vec![image()]),
    ];
    let err = model(&server)
        .chat(ChatRequest::new(history))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ModelError::Unsupported { part: "image", .. }),
        "{err}"
    );
    let audio_url = Part::Audio(Media::url("audio/wav", "https://example.com/a.wav"));
    let err = model(&server)
        .chat(ChatRequest::new(vec![Message::user_with_parts(
            "listen",
            vec![audio_url],
        )]))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Unsupported { part: "audio", .. }));
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn the_stable_prefix_of_a_request_is_sent_the_same_next_round() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("a"));
    server.push(Reply::text("b"));
    let m = model(&server);
    let first = vec![
        Message::system("You are terse."),
        Message::user("Look at this").with_parts(vec![image()]),
    ];
    let mut second = first.clone();
    second.push(Message::assistant("a"));
    second.push(Message::user("and now?"));
    m.chat(ChatRequest::new(first)).await.unwrap();
    m.chat(ChatRequest::new(second)).await.unwrap();
    let r = server.requests();
    let text = |i: usize, k: usize| r[i].body["messages"][k].to_string();
    for k in 0..2 {
        assert_eq!(text(0, k), text(1, k));
    }
}
