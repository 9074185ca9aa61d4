//! The Gemini backend against a real HTTP server on 127.0.0.1 that replays the published
//! answers of `tests/fixtures/gemini/` byte for byte (see its SOURCES.md) and records every
//! request, whose bodies are checked field by field against the API reference.
#![cfg(feature = "gemini")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{WireReply, WireRequest, WireServer};
use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, FinishReason, Media, Message, ModelError, Part, Reasoning,
    ReasoningKind, ResponseFormat, ToolChoice, ToolSpec, collect_stream,
};
use toolwright_model_gateway::RetryPolicy;
use toolwright_model_gateway::gemini::{GeminiConfig, GeminiModel};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/gemini/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `data:` payloads of a fixture stream, parsed.
fn events_of(sse: &str) -> Vec<Value> {
    sse.split("\r\n\r\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// One answer of the scripted server.
#[derive(Clone)]
enum Answer {
    /// 200 with these bytes as `text/event-stream`, then the connection closes.
    Sse(String),
    /// This status, body and extra headers, as JSON.
    Json(u16, String, Vec<(&'static str, String)>),
}

/// The workspace's replaying server, with this file's answers.
struct Server(WireServer);

impl Server {
    async fn start() -> Self {
        Self(WireServer::start().await)
    }

    fn push(&self, a: Answer) {
        self.0.push(match a {
            Answer::Sse(body) => WireReply::sse(body),
            Answer::Json(status, body, headers) => WireReply::Json {
                status,
                body,
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            },
        });
    }
    fn seen(&self) -> Vec<WireRequest> {
        self.0.requests()
    }
    fn config(&self, model: &str) -> GeminiConfig {
        GeminiConfig::new(model)
            .with_base_url(format!("{}/v1beta", self.0.url()))
            .with_api_key("test-key")
            .with_retry(RetryPolicy::none())
    }
}

async fn events(model: &GeminiModel, req: ChatRequest) -> Vec<Result<ChatEvent, ModelError>> {
    model.stream(req).await.unwrap().collect().await
}

fn ok_events(evs: Vec<Result<ChatEvent, ModelError>>) -> Vec<ChatEvent> {
    evs.into_iter().map(Result::unwrap).collect()
}

fn weather_tool() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "The weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn signature_in(fixture_sse: &str, event: usize, part: usize) -> String {
    events_of(fixture_sse)[event]["candidates"][0]["content"]["parts"][part]["thoughtSignature"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_streamed_text_answer_gives_deltas_usage_and_keeps_the_turn_signature() {
    let server = Server::start().await;
    let sse = fixture("text.sse");
    server.push(Answer::Sse(sse.clone()));
    let model = GeminiModel::new(server.config("gemini-3-pro-preview")).unwrap();
    let req = ChatRequest::new(vec![
        Message::system("You are terse."),
        Message::user("How many r's are in strawberry?"),
    ]);
    let evs = ok_events(events(&model, req).await);
    let sig = signature_in(&sse, 2, 0);
    assert_eq!(
        evs,
        vec![
            ChatEvent::TextDelta("There are **3**".into()),
            ChatEvent::TextDelta(" \"r\"s in strawberry.\n\nst**r**awbe**rr**y".into()),
            ChatEvent::Part(Part::Reasoning(
                Reasoning::new("gemini", ReasoningKind::Redacted, "").with_signature(sig)
            )),
            ChatEvent::Finish {
                reason: FinishReason::Stop,
                usage: Some(toolwright_core::Usage {
                    prompt_tokens: 9,
                    completion_tokens: 23 + 185,
                    total_tokens: 217,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                    reasoning_tokens: 185,
                }),
            },
        ]
    );
    let seen = &server.seen()[0];
    assert_eq!(
        seen.path,
        "/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse"
    );
    assert_eq!(seen.header("x-goog-api-key"), Some("test-key"));
    assert_eq!(
        seen.body.clone(),
        json!({
            "systemInstruction": {"parts": [{"text": "You are terse."}]},
            "contents": [{"role": "user", "parts": [{"text": "How many r's are in strawberry?"}]}],
        })
    );
}

#[tokio::test]
async fn a_streamed_turn_signature_goes_back_on_the_turns_text_part() {
    let server = Server::start().await;
    let sse = fixture("empty_text_signature.sse");
    server.push(Answer::Sse(sse.clone()));
    server.push(Answer::Sse(fixture("text.sse")));
    let model = GeminiModel::new(server.config("gemini-3-flash-preview")).unwrap();
    let mut history = vec![Message::user("2 + 2?")];
    let r = collect_stream(
        model
            .stream(ChatRequest::new(history.clone()))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.content, "4");
    let usage = r.usage.unwrap();
    assert_eq!(
        (
            usage.completion_tokens,
            usage.reasoning_tokens,
            usage.total_tokens
        ),
        (1 + 52, 52, 68)
    );
    history.push(r.to_message());
    history.push(Message::user("Times 3?"));
    collect_stream(model.stream(ChatRequest::new(history)).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        server.seen()[1].body.clone()["contents"][1],
        json!({"role": "model", "parts": [{"text": "4", "thoughtSignature": signature_in(&sse, 1, 0)}]})
    );
}

#[tokio::test]
async fn a_whole_answer_keeps_the_signature_its_text_part_carried_and_sends_it_back_there() {
    let server = Server::start().await;
    let body = fixture("text.json");
    server.push(Answer::Json(200, body.clone(), vec![]));
    server.push(Answer::Json(200, body.clone(), vec![]));
    let model = GeminiModel::new(server.config("models/gemini-3-pro-preview")).unwrap();
    let first = vec![Message::user("How many r's are in strawberry?")];
    let r = model.chat(ChatRequest::new(first.clone())).await.unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    let part = &v["candidates"][0]["content"]["parts"][0];
    assert_eq!(r.content, part["text"].as_str().unwrap());
    assert_eq!(r.finish_reason, FinishReason::Stop);
    let usage = r.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.reasoning_tokens
        ),
        (9, 29 + 282, 282)
    );
    assert_eq!(
        server.seen()[0].path,
        "/v1beta/models/gemini-3-pro-preview:generateContent"
    );

    let mut second = first;
    second.push(r.to_message());
    second.push(Message::user("And in raspberry?"));
    model.chat(ChatRequest::new(second)).await.unwrap();
    let sent = server.seen()[1].body.clone();
    assert_eq!(
        sent["contents"][1],
        json!({"role": "model", "parts": [{"text": part["text"], "thoughtSignature": part["thoughtSignature"]}]})
    );
}

#[tokio::test]
async fn a_tool_round_sends_the_call_back_with_its_id_and_signature_and_the_result_as_a_function_response()
 {
    let server = Server::start().await;
    let sse = fixture("tool_call_with_id.sse");
    server.push(Answer::Sse(sse.clone()));
    server.push(Answer::Sse(fixture("text.sse")));
    let model = GeminiModel::new(server.config("gemini-3.1-pro-preview")).unwrap();
    let mut history = vec![Message::user("Weather in San Francisco?")];
    let req = ChatRequest::new(history.clone())
        .with_tools(vec![weather_tool()])
        .with_tool_choice(ToolChoice::Auto);
    let evs = ok_events(events(&model, req.clone()).await);
    let sig = signature_in(&sse, 1, 0);
    assert_eq!(evs[0], ChatEvent::TextDelta("Let me check.".into()));
    assert_eq!(
        evs[1],
        ChatEvent::ToolCallDelta {
            index: 0,
            id: Some("g1bmv6il".into()),
            name: Some("get_weather".into()),
            arguments: r#"{"city":"San Francisco"}"#.into(),
        }
    );
    assert_eq!(
        evs[2],
        ChatEvent::Part(Part::Reasoning(
            Reasoning::new("gemini", ReasoningKind::Redacted, "")
                .with_signature(sig.clone())
                .with_call_id("g1bmv6il")
        ))
    );
    let ChatEvent::ToolCall(call) = &evs[3] else {
        panic!("{:?}", evs[3])
    };
    assert_eq!(
        (call.id.as_str(), call.name.as_str()),
        ("g1bmv6il", "get_weather")
    );
    assert_eq!(call.arguments, json!({"city": "San Francisco"}));
    assert!(matches!(
        evs[4],
        ChatEvent::Finish {
            reason: FinishReason::ToolCalls,
            ..
        }
    ));

    let first = server.seen()[0].body.clone();
    assert_eq!(
        first["tools"],
        json!([{"functionDeclarations": [{
            "name": "get_weather",
            "description": "The weather in a city",
            "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }]}])
    );
    assert_eq!(
        first["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );

    let r = collect_stream(Box::pin(futures::stream::iter(
        evs.into_iter().map(Ok::<_, ModelError>),
    )))
    .await
    .unwrap();
    history.push(r.to_message());
    history.push(Message::tool("g1bmv6il", "get_weather", "Sunny, 18°C"));
    let text = collect_stream(
        model
            .stream(ChatRequest::new(history).with_tools(vec![weather_tool()]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert!(text.content.starts_with("There are"));
    let second = server.seen()[1].body.clone();
    assert_eq!(
        second["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Weather in San Francisco?"}]},
            {"role": "model", "parts": [
                {"text": "Let me check."},
                {"functionCall": {"id": "g1bmv6il", "name": "get_weather", "args": {"city": "San Francisco"}},
                 "thoughtSignature": sig},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "g1bmv6il", "name": "get_weather", "response": {"output": "Sunny, 18°C"}}},
            ]},
        ])
    );
}

#[tokio::test]
async fn a_call_without_an_id_gets_a_stable_one_that_is_never_sent_to_gemini() {
    let server = Server::start().await;
    let body = fixture("tool_call.json");
    for _ in 0..3 {
        server.push(Answer::Json(200, body.clone(), vec![]));
    }
    let model = GeminiModel::new(server.config("gemini-3-pro-preview")).unwrap();
    let req =
        ChatRequest::new(vec![Message::user("Weather in SF?")]).with_tools(vec![weather_tool()]);
    let a = model.chat(req.clone()).await.unwrap();
    let b = model.chat(req.clone()).await.unwrap();
    assert_eq!(a, b, "the same answer read twice gives the same ids");
    assert_eq!(
        a.finish_reason,
        FinishReason::ToolCalls,
        "STOP with a call is a tool-call stop"
    );
    let id = a.tool_calls[0].id.clone();
    assert_eq!(id, "toolwright-gemini-JniLacKqGqH0xs0P0O776As-0");
    let Part::Reasoning(r) = &a.parts[0] else {
        panic!()
    };
    assert_eq!(r.call_id.as_deref(), Some(id.as_str()));

    let mut history = req.messages.clone();
    history.push(a.to_message());
    history.push(Message::tool(
        id.clone(),
        "weather",
        r#"{"temperature": 18, "sky": "clear"}"#,
    ));
    model.chat(ChatRequest::new(history)).await.unwrap();
    let sent = server.seen()[2].body.clone();
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        sent["contents"][1]["parts"][0],
        json!({"functionCall": {"name": "weather", "args": {"location": "San Francisco"}},
               "thoughtSignature": v["candidates"][0]["content"]["parts"][0]["thoughtSignature"]})
    );
    assert_eq!(
        sent["contents"][2]["parts"][0],
        json!({"functionResponse": {"name": "weather", "response": {"temperature": 18, "sky": "clear"}}}),
        "a JSON object result is the response itself; no id Gemini did not make"
    );
}

#[tokio::test]
async fn parallel_calls_keep_the_signature_on_the_first_call_and_their_results_share_one_content() {
    let server = Server::start().await;
    let sse = fixture("parallel_calls.sse");
    server.push(Answer::Sse(sse.clone()));
    server.push(Answer::Sse(fixture("text.sse")));
    let model = GeminiModel::new(server.config("gemini-3.1-flash-lite")).unwrap();
    let mut history = vec![Message::user("Weather in Paris and Tokyo?")];
    let r = collect_stream(
        model
            .stream(ChatRequest::new(history.clone()).with_tools(vec![weather_tool()]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["lpndqlku", "m6rogicj"]);
    assert_eq!(r.parts.len(), 1);
    history.push(r.to_message());
    history.push(Message::tool("lpndqlku", "get_weather", "Rain, 12°C"));
    history.push(Message::tool("m6rogicj", "get_weather", "[\"clear\", 21]"));
    collect_stream(
        model
            .stream(ChatRequest::new(history).with_tools(vec![weather_tool()]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let sent = server.seen()[1].body.clone();
    let sig = signature_in(&sse, 0, 0);
    assert_eq!(
        sent["contents"][1]["parts"],
        json!([
            {"functionCall": {"id": "lpndqlku", "name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": sig},
            {"functionCall": {"id": "m6rogicj", "name": "get_weather", "args": {"city": "Tokyo"}}},
        ])
    );
    assert_eq!(
        sent["contents"][2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"id": "lpndqlku", "name": "get_weather", "response": {"output": "Rain, 12°C"}}},
            {"functionResponse": {"id": "m6rogicj", "name": "get_weather", "response": {"output": "[\"clear\", 21]"}}},
        ]}),
        "one user content per round; a result that is not a JSON object goes under `output`"
    );
    assert_eq!(sent["contents"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn thought_summaries_interleaved_with_a_call_are_replayed_unchanged_on_the_next_request() {
    let server = Server::start().await;
    let sse = fixture("thinking_then_tool_call.sse");
    server.push(Answer::Sse(sse.clone()));
    server.push(Answer::Sse(fixture("text.sse")));
    let model = GeminiModel::new(
        server
            .config("gemini-2.5-flash")
            .with_thinking_budget(1024)
            .with_include_thoughts(true),
    )
    .unwrap();
    let mut history = vec![Message::user("Weather in Paris?")];
    let evs = ok_events(
        events(
            &model,
            ChatRequest::new(history.clone()).with_tools(vec![weather_tool()]),
        )
        .await,
    );
    let summary = "**Checking the forecast**\n\nThe user asks about Paris, so I need the weather tool. I'll call get_weather with the city.";
    let sig = signature_in(&sse, 2, 0);
    assert_eq!(
        evs[..2],
        [
            ChatEvent::ReasoningDelta("**Checking the forecast**\n\nThe user asks about Paris, so I need the weather tool.".into()),
            ChatEvent::ReasoningDelta(" I'll call get_weather with the city.".into()),
        ]
    );
    assert!(matches!(&evs[2], ChatEvent::ToolCallDelta { index: 0, .. }));
    assert_eq!(
        evs[3..5],
        [
            ChatEvent::Part(Part::Reasoning(Reasoning::new(
                "gemini",
                ReasoningKind::Summary,
                summary
            ))),
            ChatEvent::Part(Part::Reasoning(
                Reasoning::new("gemini", ReasoningKind::Redacted, "")
                    .with_signature(sig.clone())
                    .with_call_id("8f2kq1x0")
            )),
        ]
    );
    assert!(matches!(&evs[5], ChatEvent::ToolCall(c) if c.id == "8f2kq1x0"));
    let ChatEvent::Finish { reason, usage } = &evs[6] else {
        panic!("{:?}", evs[6])
    };
    assert_eq!(*reason, FinishReason::ToolCalls);
    let usage = usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cache_read_tokens,
            usage.reasoning_tokens,
            usage.total_tokens
        ),
        (412, 18 + 141, 384, 141, 412 + 18 + 141)
    );
    assert_eq!(
        server.seen()[0].body.clone()["generationConfig"],
        json!({"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
    );

    let r = collect_stream(Box::pin(futures::stream::iter(
        evs.into_iter().map(Ok::<_, ModelError>),
    )))
    .await
    .unwrap();
    history.push(r.to_message());
    history.push(Message::tool("8f2kq1x0", "get_weather", "Rain"));
    collect_stream(
        model
            .stream(ChatRequest::new(history).with_tools(vec![weather_tool()]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let seen = server.seen();
    let sent = seen[1].body.clone();
    assert_eq!(
        sent["contents"][1]["parts"],
        json!([
            {"text": summary, "thought": true},
            {"functionCall": {"id": "8f2kq1x0", "name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": sig},
        ])
    );
    let raw = String::from_utf8(seen[1].raw.clone()).unwrap();
    assert!(
        raw.contains(&format!("\"thoughtSignature\":\"{sig}\"")),
        "the signature's bytes are unchanged"
    );
}

#[tokio::test]
async fn images_audio_and_files_in_a_user_message_go_inline_or_as_file_data() {
    let server = Server::start().await;
    server.push(Answer::Json(200, fixture("text.json"), vec![]));
    let model = GeminiModel::new(server.config("gemini-2.5-flash")).unwrap();
    let png = [
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0,
        0, 2, 0, 0, 0, 3, 8, 6, 0, 0, 0,
    ];
    let image = Media::image_bytes(&png, "image/png").unwrap();
    let data = match &image.source {
        toolwright_core::MediaSource::Base64 { data } => data.clone(),
        other => panic!("{other:?}"),
    };
    let msg = Message::user_with_parts(
        "Compare these.",
        vec![
            Part::Image(image),
            Part::Audio(Media::bytes(b"RIFF....WAVE", "audio/wav").unwrap()),
            Part::File(Media::url(
                "application/pdf",
                "https://example.com/report.pdf",
            )),
            Part::text("Be brief."),
        ],
    );
    model.chat(ChatRequest::new(vec![msg])).await.unwrap();
    let sent = server.seen()[0].body.clone();
    assert_eq!(
        sent["contents"][0]["parts"],
        json!([
            {"text": "Compare these."},
            {"inlineData": {"mimeType": "image/png", "data": data}},
            {"inlineData": {"mimeType": "audio/wav", "data": "UklGRi4uLi5XQVZF"}},
            {"fileData": {"mimeType": "application/pdf", "fileUri": "https://example.com/report.pdf"}},
            {"text": "Be brief."},
        ])
    );
}

#[tokio::test]
async fn an_image_in_a_tool_result_rides_in_the_function_response_and_one_by_url_follows_it() {
    let server = Server::start().await;
    server.push(Answer::Json(200, fixture("text.json"), vec![]));
    let model = GeminiModel::new(server.config("gemini-3-pro-preview")).unwrap();
    let shot = Media::bytes(b"\x89PNG\r\n\x1a\nrest", "image/png").unwrap();
    let history = vec![
        Message::user("Screenshot both pages"),
        Message::assistant_with_tool_calls(
            "",
            vec![
                toolwright_core::ToolCall::new("c1", "shoot", json!({"page": 1})),
                toolwright_core::ToolCall::new("c2", "shoot", json!({"page": 2})),
            ],
        ),
        Message::tool_with_parts("c1", "shoot", "page 1", vec![Part::Image(shot)]),
        Message::tool_with_parts(
            "c2",
            "shoot",
            "page 2",
            vec![Part::Image(Media::url(
                "image/png",
                "https://example.com/2.png",
            ))],
        ),
    ];
    model.chat(ChatRequest::new(history)).await.unwrap();
    let sent = server.seen()[0].body.clone();
    let contents = sent["contents"].as_array().unwrap();
    assert_eq!(
        contents.len(),
        3,
        "the results and what follows them are one user content"
    );
    assert_eq!(
        contents[2]["parts"],
        json!([
            {"functionResponse": {"id": "c1", "name": "shoot", "response": {"output": "page 1"},
                "parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgpyZXN0"}}]}},
            {"functionResponse": {"id": "c2", "name": "shoot", "response": {"output": "page 2"}}},
            {"text": "The result of call `c2` (shoot) came with:"},
            {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/2.png"}},
        ])
    );
}

#[tokio::test]
async fn media_kept_by_reference_is_sent_as_the_line_naming_it_in_the_function_response() {
    let server = Server::start().await;
    server.push(Answer::Json(200, fixture("text.json"), vec![]));
    let model = GeminiModel::new(server.config("gemini-3-pro-preview")).unwrap();
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
            vec![toolwright_core::ToolCall::new("c1", "shoot", json!({}))],
        ),
        Message::tool_with_parts("c1", "shoot", "done", vec![kept]),
    ];
    model.chat(ChatRequest::new(history)).await.unwrap();
    let sent = server.seen()[0].body.clone();
    assert_eq!(
        sent["contents"][2]["parts"],
        json!([{"functionResponse": {"id": "c1", "name": "shoot",
            "response": {"output": format!("done\n{line}")}}}])
    );
}

#[tokio::test]
async fn an_error_event_mid_stream_is_a_typed_error_after_the_text_before_it() {
    let server = Server::start().await;
    server.push(Answer::Sse(fixture("error_mid_stream.sse")));
    let model = GeminiModel::new(server.config("gemini-2.5-flash")).unwrap();
    let evs = events(
        &model,
        ChatRequest::new(vec![Message::user("Tell me a story")]),
    )
    .await;
    assert_eq!(evs.len(), 2);
    assert_eq!(
        evs[0].as_ref().unwrap(),
        &ChatEvent::TextDelta("test".into())
    );
    match &evs[1] {
        Err(ModelError::Api {
            status,
            message,
            code,
        }) => {
            assert_eq!(
                (*status, message.as_str(), code.as_deref()),
                (500, "Error", Some("INTERNAL"))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_429_is_retried_after_its_retry_after_then_succeeds() {
    let server = Server::start().await;
    server.push(Answer::Json(
        429,
        fixture("error_429.json"),
        vec![("retry-after", "1".into())],
    ));
    server.push(Answer::Sse(fixture("text.sse")));
    let model = GeminiModel::new(
        server
            .config("gemini-2.5-flash")
            .with_retry(RetryPolicy::default()),
    )
    .unwrap();
    let r = collect_stream(
        model
            .stream(ChatRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert!(r.content.starts_with("There are"));
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let waited = seen[1].at - seen[0].at;
    assert!(
        waited >= Duration::from_millis(950),
        "waited {waited:?}, the header said 1 s"
    );
}

#[tokio::test]
async fn the_retry_delay_gemini_puts_in_the_body_is_honoured() {
    // The body of error_429.json asks for 34.4 s: past the policy's limit of 1 s, so the call
    // gives up at once with Gemini's status, rather than retrying on a short backoff.
    let server = Server::start().await;
    server.push(Answer::Json(429, fixture("error_429.json"), vec![]));
    let mut policy = RetryPolicy::default();
    policy.max_retry_after = Duration::from_secs(1);
    let model = GeminiModel::new(server.config("gemini-2.5-flash").with_retry(policy)).unwrap();
    let err = model
        .chat(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap_err();
    match &err {
        ModelError::Api {
            status: 429,
            code,
            message,
        } => {
            assert_eq!(code.as_deref(), Some("RESOURCE_EXHAUSTED"));
            assert!(message.starts_with("You exceeded your current quota"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.seen().len(), 1);

    // A 503 whose RetryInfo asks for 0.3 s (the documented shape with a shorter delay) is
    // retried after it.
    let server = Server::start().await;
    let unavailable = r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"0.3s"}]}}"#;
    server.push(Answer::Json(503, unavailable.into(), vec![]));
    server.push(Answer::Json(200, fixture("text.json"), vec![]));
    let model = GeminiModel::new(
        server
            .config("gemini-2.5-flash")
            .with_retry(RetryPolicy::default()),
    )
    .unwrap();
    model
        .chat(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let seen = server.seen();
    assert!(seen[1].at - seen[0].at >= Duration::from_millis(290));
}

#[tokio::test]
async fn a_stream_cut_mid_event_or_closed_without_finish_reason_is_interrupted() {
    let sse = fixture("text.sse");
    let second = sse
        .find("data: ")
        .and_then(|_| sse[1..].find("data: "))
        .unwrap()
        + 1;
    for cut in [&sse[..second + 60], &sse[..second]] {
        let server = Server::start().await;
        server.push(Answer::Sse(cut.to_owned()));
        let model = GeminiModel::new(server.config("gemini-3-pro-preview")).unwrap();
        let evs = events(&model, ChatRequest::new(vec![Message::user("hi")])).await;
        assert_eq!(
            evs[0].as_ref().unwrap(),
            &ChatEvent::TextDelta("There are **3**".into())
        );
        match evs.last().unwrap() {
            Err(ModelError::StreamInterrupted { partial_text, .. }) => {
                assert_eq!(partial_text, "There are **3**")
            }
            other => panic!("{other:?}"),
        }
        assert!(
            !evs.iter()
                .any(|e| matches!(e, Ok(ChatEvent::Finish { .. })))
        );
    }
}

#[tokio::test]
async fn unparsable_tool_arguments_become_an_invalid_tool_call_beside_the_good_one() {
    let server = Server::start().await;
    server.push(Answer::Sse(fixture("unparsable_args.sse")));
    let model = GeminiModel::new(server.config("gemini-2.5-flash")).unwrap();
    let r = collect_stream(
        model
            .stream(ChatRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.invalid_tool_calls.len(), 1);
    let bad = &r.invalid_tool_calls[0];
    assert_eq!(
        (bad.name.as_str(), bad.raw.as_str()),
        ("get_weather", "{city:")
    );
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments, json!({"zone": "UTC"}));
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_ne!(bad.id, r.tool_calls[0].id);
}

#[tokio::test]
async fn another_providers_reasoning_is_never_sent() {
    let server = Server::start().await;
    server.push(Answer::Json(200, fixture("text.json"), vec![]));
    let model = GeminiModel::new(server.config("gemini-2.5-flash")).unwrap();
    let history = vec![
        Message::user("hi"),
        Message::assistant("hello").with_parts(vec![
            Part::Reasoning(
                Reasoning::new("anthropic", ReasoningKind::Full, "I think")
                    .with_signature("anthropic-sig"),
            ),
            Part::Reasoning(
                Reasoning::new("openai-responses", ReasoningKind::Summary, "s")
                    .with_encrypted("enc"),
            ),
            Part::Reasoning(
                Reasoning::new("gemini", ReasoningKind::Redacted, "").with_signature("gemini-sig"),
            ),
        ]),
        Message::user("again"),
    ];
    model.chat(ChatRequest::new(history)).await.unwrap();
    let seen = server.seen();
    let raw = String::from_utf8(seen[0].raw.clone()).unwrap();
    assert!(!raw.contains("anthropic-sig") && !raw.contains("I think") && !raw.contains("enc"));
    assert_eq!(
        seen[0].body.clone()["contents"][1],
        json!({"role": "model", "parts": [{"text": "hello", "thoughtSignature": "gemini-sig"}]})
    );
}

#[tokio::test]
async fn the_same_request_is_byte_identical_and_the_next_round_starts_with_this_ones_bytes() {
    let server = Server::start().await;
    for _ in 0..3 {
        server.push(Answer::Json(200, fixture("tool_call.json"), vec![]));
    }
    let model = GeminiModel::new(
        server
            .config("gemini-3-pro-preview")
            .with_include_thoughts(true),
    )
    .unwrap();
    let mut history = vec![
        Message::system("You are terse."),
        Message::user("Weather in SF?"),
    ];
    let req = ChatRequest::new(history.clone())
        .with_tools(vec![weather_tool()])
        .with_tool_choice(ToolChoice::Auto)
        .with_temperature(0.5);
    let r = model.chat(req.clone()).await.unwrap();
    model.chat(req.clone()).await.unwrap();
    history.push(r.to_message());
    history.push(Message::tool(r.tool_calls[0].id.clone(), "weather", "Fog"));
    model
        .chat(
            ChatRequest::new(history)
                .with_tools(vec![weather_tool()])
                .with_tool_choice(ToolChoice::Auto)
                .with_temperature(0.5),
        )
        .await
        .unwrap();
    let seen = server.seen();
    assert_eq!(seen[0].raw, seen[1].raw);
    let first = String::from_utf8(seen[0].raw.clone()).unwrap();
    let next = String::from_utf8(seen[2].raw.clone()).unwrap();
    let contents = serde_json::to_string(&seen[0].body.clone()["contents"]).unwrap();
    let end = first.find(&contents).unwrap() + contents.len() - 1; // up to the closing `]`
    assert!(first.starts_with("{\"systemInstruction\""));
    assert_eq!(
        next[..end],
        first[..end],
        "system, tools and round 1 are the same bytes"
    );
}

#[tokio::test]
async fn tool_choice_and_response_format_map_to_tool_config_and_a_json_schema() {
    let server = Server::start().await;
    for _ in 0..2 {
        server.push(Answer::Json(200, fixture("text.json"), vec![]));
    }
    let model =
        GeminiModel::new(server.config("gemini-2.5-flash").with_thinking_level("low")).unwrap();
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let req = ChatRequest::new(vec![Message::user("count")])
        .with_tools(vec![weather_tool()])
        .with_tool_choice(ToolChoice::Function("get_weather".into()))
        .with_max_tokens(256)
        .with_temperature(0.25)
        .with_response_format(ResponseFormat::JsonSchema {
            name: "count".into(),
            schema: schema.clone(),
            strict: true,
        });
    model.chat(req).await.unwrap();
    let req = ChatRequest::new(vec![Message::user("count")])
        .with_tools(vec![weather_tool()])
        .with_tool_choice(ToolChoice::None)
        .with_response_format(ResponseFormat::JsonObject);
    model.chat(req).await.unwrap();
    let seen = server.seen();
    let (a, b) = (seen[0].body.clone(), seen[1].body.clone());
    assert_eq!(
        a["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}})
    );
    assert_eq!(
        a["generationConfig"],
        json!({"temperature": 0.25, "maxOutputTokens": 256, "responseMimeType": "application/json",
               "responseJsonSchema": schema, "thinkingConfig": {"thinkingLevel": "low"}})
    );
    assert_eq!(
        b["toolConfig"],
        json!({"functionCallingConfig": {"mode": "NONE"}})
    );
    assert_eq!(
        b["generationConfig"]["responseMimeType"],
        "application/json"
    );
    assert!(b["generationConfig"].get("responseJsonSchema").is_none());
}

#[tokio::test]
async fn a_bad_key_is_a_typed_error_that_names_the_variables_and_is_not_retried() {
    let server = Server::start().await;
    let body = r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}"#;
    server.push(Answer::Json(400, body.into(), vec![]));
    let model = GeminiModel::new(
        server
            .config("gemini-2.5-flash")
            .with_retry(RetryPolicy::default()),
    )
    .unwrap();
    let err = model
        .chat(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Api { status: 400, code: Some(c), .. } if c == "INVALID_ARGUMENT")
    );
    assert!(err.to_string().contains("GEMINI_API_KEY"));
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn the_config_says_who_serves_the_model_and_hides_the_key() {
    let cfg = GeminiConfig::new("gemini-2.5-flash").with_api_key("AIzaSecret");
    assert!(!format!("{cfg:?}").contains("AIzaSecret"));
    let model = GeminiModel::new(cfg.clone()).unwrap();
    assert!(!format!("{model:?}").contains("AIzaSecret"));
    let info = model.info();
    assert_eq!(info.provider.as_deref(), Some("gcp.gemini"));
    assert!(info.function_calling);
    let both = cfg.with_thinking_budget(128).with_thinking_level("low");
    assert!(matches!(GeminiModel::new(both), Err(ModelError::Config(_))));
}
