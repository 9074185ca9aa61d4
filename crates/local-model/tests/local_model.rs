//! The embedded local model (SmolLM2-135M-Instruct GGUF on candle), end to end: generation,
//! streaming, and native tool calls produced under the grammar (issues 9 and 12).
//!
//! These tests need the model file. It is fetched once into the user cache (or taken from
//! LOCAL_MODEL_PATH); when that is impossible they FAIL with the reason — they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat,
    ToolCall, ToolChoice, ToolSpec,
};
use toolwright_local_model::{DEFAULT_CALL_BIAS, LocalModel};

mod common;
use common::model_path;

fn model() -> LocalModel {
    static MODEL: OnceLock<LocalModel> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = model_path();
            LocalModel::from_file(&path)
                .unwrap_or_else(|e| panic!("cannot load the local model {}: {e}", path.display()))
        })
        .clone()
}

#[test]
fn g7_local_info_says_native_function_calling() {
    let info = model().info();
    assert!(info.function_calling);
    assert!(
        info.model.to_lowercase().contains("smollm2"),
        "{}",
        info.model
    );
}

#[test]
fn local_tokenizer_round_trips_text_including_chinese() {
    let m = model();
    let tok = m.tokenizer();
    for text in [
        "Hello, world! The weather in Paris is 21.5°C.",
        "用 天气 工具 查一下北京的天气。",
        "  leading spaces, tabs\tand\nnewlines\n\n",
        "emoji 🙂 and <|im_end|> as plain text",
        "x = [1, 2, 3]; {\"tool\": null}",
    ] {
        let ids = tok.encode(text).unwrap();
        assert!(!ids.is_empty());
        assert_eq!(tok.decode(&ids), text, "ids: {ids:?}");
    }
    // Known ids: digits are split one by one, the special marker text is not a special token.
    let ids = tok.encode("2024").unwrap();
    assert_eq!(ids.len(), 4, "{ids:?}");
    let ids = tok.encode("<|im_end|>").unwrap();
    assert!(!ids.contains(&tok.im_end()), "{ids:?}");
    assert!(ids.len() > 1);
    // "Hello" is one token in SmolLM2's vocabulary.
    assert_eq!(tok.encode("Hello").unwrap().len(), 1);
}

#[test]
fn local_chat_prompt_is_chatml() {
    let m = model();
    let tok = m.tokenizer();
    let ids = tok.chat_prompt(&[("user", "hi")]).unwrap();
    let text: String = ids
        .iter()
        .map(|&i| {
            tok.token_bytes(i)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_else(|| format!("<{i}>"))
        })
        .collect();
    assert_eq!(
        text,
        format!("<1>user\nhi<{}>\n<1>assistant\n", tok.im_end())
    );
    assert!(tok.default_system().unwrap().contains("SmolLM"));
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user(text)]).with_max_tokens(24)
}

#[tokio::test]
async fn local_seeded_generation_is_reproducible() {
    let m = model().with_seed(42);
    let req = ask("Write one sentence about the sea.").with_temperature(0.9);
    let a = m.chat(req.clone()).await.unwrap();
    let b = m.chat(req.clone()).await.unwrap();
    assert_eq!(a.content, b.content);
    assert!(!a.content.trim().is_empty());
    // A different seed explores: over a few seeds at least one answer differs.
    let mut differs = false;
    for seed in 1..6 {
        let c = model().with_seed(seed).chat(req.clone()).await.unwrap();
        differs |= c.content != a.content;
    }
    assert!(differs, "five other seeds all produced {:?}", a.content);
}

/// Token runs of length `n` that occur more than once.
fn repeated_ngrams(ids: &[u32], n: usize) -> usize {
    let mut seen = std::collections::HashSet::new();
    ids.windows(n).filter(|w| !seen.insert(w.to_vec())).count()
}

#[tokio::test]
async fn local_no_repeat_ngram_breaks_the_loops_of_a_small_model() {
    // Greedy decoding of this request loops without the ban.
    let req = ChatRequest::new(vec![Message::user(
        "Repeat after me: I am a chatbot. I am a chatbot. I am a chatbot.",
    )])
    .with_max_tokens(80)
    .with_temperature(0.0);
    let tok = model().tokenizer().clone();
    let plain = model().chat(req.clone()).await.unwrap().content;
    let plain_ids = tok.encode(&plain).unwrap();
    assert!(
        repeated_ngrams(&plain_ids, 3) >= 5,
        "the request no longer loops without the ban, so it proves nothing: {plain:?}"
    );
    let banned = model()
        .with_no_repeat_ngram(3)
        .chat(req)
        .await
        .unwrap()
        .content;
    let ids = tok.encode(&banned).unwrap();
    // Re-encoding the text may split a word differently from how it was generated, so allow
    // a trace; the loop itself is gone.
    assert!(
        repeated_ngrams(&ids, 3) <= 2,
        "{banned:?} repeats {} token trigrams",
        repeated_ngrams(&ids, 3)
    );
}

#[tokio::test]
async fn local_answers_a_question_sensibly() {
    let r = model()
        .with_seed(1)
        .chat(
            ChatRequest::new(vec![
                Message::system("You are a helpful assistant. Answer briefly."),
                Message::user("What is the capital city of France?"),
            ])
            .with_temperature(0.0)
            .with_max_tokens(40),
        )
        .await
        .unwrap();
    assert!(r.content.contains("Paris"), "{:?}", r.content);
    let usage = r.usage.unwrap();
    assert!(
        usage.prompt_tokens > 10 && usage.completion_tokens > 0,
        "{usage:?}"
    );
}

#[tokio::test]
async fn local_stream_sends_text_deltas_then_finish() {
    let m = model().with_seed(3);
    let mut s = m
        .stream(ask("Write a long story about a cat who learns to sail."))
        .await
        .unwrap();
    let mut deltas = Vec::new();
    let mut finish = None;
    while let Some(ev) = s.next().await {
        match ev.unwrap() {
            ChatEvent::TextDelta(t) => {
                assert!(finish.is_none(), "text after Finish");
                deltas.push(t);
            }
            ChatEvent::Finish { reason, usage } => finish = Some((reason, usage)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(deltas.len() > 3, "tokens arrive one by one: {deltas:?}");
    let (reason, usage) = finish.expect("a Finish event");
    // 24 tokens are not enough for a long story: cut off by the limit.
    assert_eq!(reason, FinishReason::Length, "{}", deltas.concat());
    assert_eq!(usage.unwrap().completion_tokens, 24);
}

#[tokio::test]
async fn local_dropping_the_stream_stops_generation() {
    // A model instance of its own: the shared one is busy with the other tests.
    let path = model_path();
    let m = LocalModel::from_file(&path).unwrap().with_seed(5);
    let req = ChatRequest::new(vec![Message::user(
        "Tell me a very long story about dragons.",
    )])
    .with_max_tokens(4000)
    .with_temperature(0.8);
    let mut s = m.stream(req).await.unwrap();
    let first = s.next().await.unwrap().unwrap();
    assert!(matches!(first, ChatEvent::TextDelta(_)));
    drop(s);
    // One generation at a time holds the weights: had the 4000-token generation gone on,
    // this 2-token request would wait minutes for it.
    let t = Instant::now();
    let r = m.chat(ask("Say yes.").with_max_tokens(2)).await.unwrap();
    assert_eq!(r.usage.unwrap().completion_tokens, 2);
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
}

fn three_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "Get the current weather for a city.",
            json!({"type": "object", "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            }, "required": ["city"]}),
        ),
        ToolSpec::new(
            "get_time",
            "Get the current time in a time zone.",
            json!({"type": "object", "properties": {
                "timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Paris"}
            }, "required": ["timezone"]}),
        ),
        ToolSpec::new(
            "calculator",
            "Evaluate an arithmetic operation on two numbers.",
            json!({"type": "object", "properties": {
                "a": {"type": "number"},
                "b": {"type": "number"},
                "op": {"type": "string", "enum": ["add", "sub", "mul", "div"]},
                "round": {"type": "boolean"},
                "digits": {"type": "integer"}
            }, "required": ["a", "b", "op"]}),
        ),
    ]
}

/// Checks one response to a request with tools: either a plain-text answer (no call, no
/// call markup in the text) or exactly one call of a bound tool with schema-valid arguments.
/// Returns the tool name, or "text".
fn check_response(r: &ChatResponse, tools: &[ToolSpec]) -> String {
    assert!(r.invalid_tool_calls.is_empty(), "{r:?}");
    assert!(
        !r.content.contains("<tool_call>"),
        "call markup leaked: {r:?}"
    );
    match r.tool_calls.as_slice() {
        [] => {
            assert!(!r.content.trim().is_empty(), "neither text nor call: {r:?}");
            assert_ne!(r.finish_reason, FinishReason::ToolCalls);
            "text".into()
        }
        [call] => {
            let spec = tools
                .iter()
                .find(|t| *t.name == *call.name)
                .unwrap_or_else(|| panic!("names an unbound tool: {r:?}"));
            let validator = jsonschema::validator_for(&spec.parameters).unwrap();
            let errors: Vec<String> = validator
                .iter_errors(&call.arguments)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "arguments invalid: {errors:?} in {r:?}");
            assert_eq!(r.finish_reason, FinishReason::ToolCalls);
            assert!(!call.id.is_empty());
            call.name.clone()
        }
        more => panic!("one call per turn, got {more:?}"),
    }
}

#[tokio::test]
async fn g3_local_tool_calls_are_schema_valid_events_over_20_seeded_runs() {
    let tools = three_tools();
    let questions = [
        "What's the weather like in Paris?",
        "What time is it in Tokyo right now?",
        "What is 12.5 times 4?",
        "Hi! How are you today?",
        "北京天气怎么样？",
    ];
    let mut seen: HashMap<String, usize> = HashMap::new();
    for seed in 0..20u64 {
        let q = questions[seed as usize % questions.len()];
        let req = ChatRequest::new(vec![Message::user(q)])
            .with_tools(tools.clone())
            .with_temperature(0.8)
            .with_max_tokens(64); // small on purpose: the mask must still close the call
        let r = model().with_seed(seed).chat(req).await.unwrap();
        *seen.entry(check_response(&r, &tools)).or_default() += 1;
    }
    // Not a quality bar for a 135M model, but the constraint must not collapse onto one branch.
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(
        seen.keys().any(|k| k != "text"),
        "no call in 20 runs: {seen:?}"
    );
}

#[tokio::test]
async fn g6_local_stream_sends_a_tool_call_event_and_no_call_markup_as_text() {
    let tools = three_tools();
    let req = ChatRequest::new(vec![Message::user("What's the weather in Berlin?")])
        .with_tools(tools.clone())
        .with_tool_choice(ToolChoice::Required);
    let mut s = model().with_seed(4).stream(req).await.unwrap();
    let mut calls = Vec::new();
    let mut finish = None;
    while let Some(ev) = s.next().await {
        match ev.unwrap() {
            ChatEvent::TextDelta(t) => panic!("a required call streamed text {t:?}"),
            ChatEvent::ToolCall(c) => calls.push(c),
            ChatEvent::Finish { reason, .. } => finish = Some(reason),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(finish, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn local_tool_choice_required_and_a_named_function_force_that_call() {
    let tools = three_tools();
    for seed in 0..3 {
        let req = ChatRequest::new(vec![Message::user("Hello there!")])
            .with_tools(tools.clone())
            .with_tool_choice(ToolChoice::Required)
            .with_max_tokens(48);
        let r = model().with_seed(seed).chat(req).await.unwrap();
        assert_ne!(check_response(&r, &tools), "text", "{r:?}");
        let req = ChatRequest::new(vec![Message::user("What's the weather in Berlin?")])
            .with_tools(tools.clone())
            .with_tool_choice(ToolChoice::Function("calculator".into()))
            .with_max_tokens(48);
        let r = model().with_seed(seed).chat(req).await.unwrap();
        assert_eq!(check_response(&r, &tools), "calculator", "{r:?}");
    }
    let err = model()
        .chat(
            ChatRequest::new(vec![Message::user("x")])
                .with_tools(tools)
                .with_tool_choice(ToolChoice::Function("nope".into())),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[tokio::test]
async fn local_tool_choice_none_answers_in_text() {
    // What the tool loop sends after the model repeated a call: answer, no more tools.
    let tools = three_tools();
    for seed in 0..3 {
        let r = model()
            .with_seed(seed)
            .chat(
                ChatRequest::new(vec![Message::user("What's the weather in Berlin?")])
                    .with_tools(tools.clone())
                    .with_tool_choice(ToolChoice::None)
                    .with_max_tokens(48),
            )
            .await
            .unwrap();
        assert!(r.tool_calls.is_empty(), "{r:?}");
        assert!(!r.content.trim().is_empty(), "{r:?}");
    }
}

#[tokio::test]
async fn local_a_tool_result_in_the_history_is_answered() {
    // One loop round by hand: the call, its result as a tool message, then the answer.
    let tools = three_tools();
    let r = model()
        .with_seed(1)
        .chat(
            ChatRequest::new(vec![
                Message::user("What's the weather in Paris?"),
                Message::assistant_with_tool_calls(
                    "",
                    vec![ToolCall::new(
                        "call_1",
                        "get_weather",
                        json!({"city": "Paris"}),
                    )],
                ),
                Message::tool(
                    "call_1",
                    "get_weather",
                    r#"{"city":"Paris","sky":"sunny","temp_c":21}"#,
                ),
            ])
            .with_tools(tools.clone())
            .with_tool_choice(ToolChoice::None)
            .with_temperature(0.0)
            .with_max_tokens(60),
        )
        .await
        .unwrap();
    assert!(r.tool_calls.is_empty(), "{r:?}");
    let text = r.content.to_lowercase();
    assert!(text.contains("sunny") || text.contains("21"), "{r:?}");
}

#[tokio::test]
async fn local_tiny_token_budget_still_closes_the_call() {
    let tools = three_tools();
    for seed in 0..3 {
        let req = ChatRequest::new(vec![Message::user("Weather in Rome?")])
            .with_tools(tools.clone())
            .with_tool_choice(ToolChoice::Required)
            .with_max_tokens(5);
        let r = model().with_seed(seed).chat(req).await.unwrap();
        check_response(&r, &tools);
        // The budget is raised to the shortest call (in bytes, a token at least one byte)
        // and never past it: the mask closed the call in time.
        let shortest = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"\"}}\n</tool_call>";
        assert!(r.usage.unwrap().completion_tokens as usize <= shortest.len() + 1);
    }
}
#[tokio::test]
async fn local_response_format_json_schema_is_obeyed() {
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "member": {"type": "boolean"}
    }, "required": ["name", "age"]});
    let validator = jsonschema::validator_for(&schema).unwrap();
    for seed in 0..5 {
        let req = ChatRequest::new(vec![Message::user(
            "Describe a person as JSON with name, age and tags.",
        )])
        .with_response_format(ResponseFormat::JsonSchema {
            name: "person".into(),
            schema: schema.clone(),
            strict: true,
        })
        .with_temperature(1.0)
        .with_max_tokens(80);
        let r = model().with_seed(seed).chat(req).await.unwrap();
        let v: Value = serde_json::from_str(&r.content)
            .unwrap_or_else(|e| panic!("does not parse ({e}): {}", r.content));
        assert!(validator.is_valid(&v), "{}", r.content);
    }
}

#[tokio::test]
async fn local_tools_with_a_response_schema_give_a_call_or_that_json_per_tool_choice() {
    let tools = three_tools();
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "celsius": {"type": "integer"}
    }, "required": ["city", "celsius"]});
    let validator = jsonschema::validator_for(&schema).unwrap();
    let is_answer = |r: &ChatResponse| {
        assert!(r.tool_calls.is_empty(), "{r:?}");
        let v: Value =
            serde_json::from_str(&r.content).unwrap_or_else(|e| panic!("not JSON ({e}): {r:?}"));
        assert!(validator.is_valid(&v), "{r:?}");
    };
    let history = vec![
        Message::user("How warm is it in Paris?"),
        Message::assistant_with_tool_calls(
            "",
            vec![ToolCall::new("c1", "get_weather", json!({"city": "Paris"}))],
        ),
        Message::tool("c1", "get_weather", r#"{"city":"Paris","celsius":21}"#),
    ];
    let ask = |messages: Vec<Message>, choice: Option<ToolChoice>| {
        let mut req = ChatRequest::new(messages)
            .with_tools(tools.clone())
            .with_response_format(ResponseFormat::JsonSchema {
                name: "forecast".into(),
                schema: schema.clone(),
                strict: true,
            })
            .with_temperature(1.0)
            .with_max_tokens(60);
        if let Some(c) = choice {
            req = req.with_tool_choice(c);
        }
        req
    };
    let mut kinds = HashMap::new();
    for seed in 0..4 {
        // Auto, asked first (with the call bias and without) and after the result: a call of a
        // bound tool, or JSON of the schema.
        for (upto, bias) in [(1, DEFAULT_CALL_BIAS), (1, 0.0), (3, DEFAULT_CALL_BIAS)] {
            let m = model().with_seed(seed).with_call_bias(bias);
            let r = m.chat(ask(history[..upto].to_vec(), None)).await.unwrap();
            let kind = if r.tool_calls.is_empty() {
                is_answer(&r);
                "json".to_owned()
            } else {
                check_response(&r, &tools)
            };
            *kinds.entry(kind).or_insert(0) += 1;
        }
        // Required or a named function: a call, never the JSON.
        let r = model().with_seed(seed);
        let r = r.chat(ask(history[..1].to_vec(), Some(ToolChoice::Required)));
        assert_ne!(check_response(&r.await.unwrap(), &tools), "text");
        let named = ask(
            history.clone(),
            Some(ToolChoice::Function("get_time".into())),
        );
        let r = model().with_seed(seed).chat(named).await.unwrap();
        assert_eq!(check_response(&r, &tools), "get_time", "{r:?}");
        // None, after a call and its result: the schema alone.
        let r = model().with_seed(seed);
        is_answer(
            &r.chat(ask(history.clone(), Some(ToolChoice::None)))
                .await
                .unwrap(),
        );
    }
    eprintln!("auto with a response schema gave {kinds:?}");
}

#[tokio::test]
async fn local_unsupported_schema_keyword_is_a_clear_error() {
    let req = ChatRequest::new(vec![Message::user("x")]).with_response_format(
        ResponseFormat::JsonSchema {
            name: "x".into(),
            schema: json!({"type": "string", "pattern": "^a+$"}),
            strict: true,
        },
    );
    let err = model().chat(req).await.unwrap_err().to_string();
    assert!(err.contains("pattern"), "{err}");
}
