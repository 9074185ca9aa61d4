//! Each backend against an implementation of its provider's wire that we did not write:
//! LiteLLM's proxy (pinned, testkit's `LiteLlmProxy`) on 127.0.0.1, in front of the scripted
//! OpenAI-compatible server. A backend's request is parsed by the proxy's own reading of the
//! provider's API (Chat Completions, Anthropic Messages, OpenAI Responses, Gemini
//! generateContent) and translated to Chat Completions; the scripted answer comes back through
//! the proxy's own encoder of that wire, JSON or SSE. Each test checks what the backend made
//! of the answer and what reached the upstream, request by request.
//!
//! The native backends' modules compile with their features (`anthropic`, `openai-responses`,
//! `gemini`). What passes and what the proxy itself gets wrong: `docs/independent-checks.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{LiteLlmProxy, Recorded, Reply, ScriptedServer};
use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ToolSpec,
    collect_stream,
};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel, RetryPolicy};

/// The scripted upstream and the proxy in front of it.
struct Rig {
    server: ScriptedServer,
    proxy: LiteLlmProxy,
    /// What is being checked, for failure messages ("text, streamed", …).
    step: std::sync::Mutex<&'static str>,
}

impl Rig {
    async fn start() -> Self {
        let server = ScriptedServer::start().await;
        let proxy = LiteLlmProxy::start(&server.base_url())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Self {
            server,
            proxy,
            step: std::sync::Mutex::new("start"),
        }
    }

    /// Starts the next step: its name in failure messages, the upstream's record emptied.
    fn step(&self, name: &'static str) {
        *self.step.lock().unwrap() = name;
        self.server.clear_requests();
    }

    /// A failure message with what the upstream received and what the proxy printed.
    fn explain(&self, what: &str) -> String {
        let bodies: Vec<String> = self
            .server
            .requests()
            .iter()
            .map(|r| r.body.to_string())
            .collect();
        format!(
            "[{}] {what}\n--- the upstream received {} request(s):\n{}\n--- LiteLLM {}'s output (last lines):\n{}",
            self.step.lock().map(|s| *s).unwrap_or("?"),
            bodies.len(),
            bodies.join("\n"),
            testkit::litellm_version(),
            self.proxy.log_tail(80)
        )
    }

    /// One call, whole or streamed; a streamed one also returns how many text deltas it had.
    async fn call<M: ChatModel>(
        &self,
        model: &M,
        request: ChatRequest,
        stream: bool,
    ) -> (ChatResponse, usize) {
        let result = if stream {
            match model.stream(request).await {
                Ok(mut s) => {
                    let mut events = Vec::new();
                    while let Some(e) = s.next().await {
                        events.push(e);
                    }
                    let deltas = events
                        .iter()
                        .filter(|e| matches!(e, Ok(ChatEvent::TextDelta(t)) if !t.is_empty()))
                        .count();
                    collect_stream(Box::pin(futures::stream::iter(events)))
                        .await
                        .map(|r| (r, deltas))
                }
                Err(e) => Err(e),
            }
        } else {
            model.chat(request).await.map(|r| (r, 0))
        };
        result.unwrap_or_else(|e| panic!("{}", self.explain(&format!("the call failed: {e:?}"))))
    }

    /// The upstream's `n`th request (from 0), which must have arrived.
    fn upstream(&self, n: usize) -> Recorded {
        self.server
            .requests()
            .get(n)
            .cloned()
            .unwrap_or_else(|| panic!("{}", self.explain(&format!("no upstream request #{n}"))))
    }
}

fn weather() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Current weather of a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

const SYSTEM: &str = "Answer in one short sentence.";
const GREETING: &str = "Bonjour from the scripted upstream, through the proxy.";
const QUESTION: &str = "What is the weather in Paris?";
const CALL_ID: &str = "call_wx_paris_1";
const RESULT: &str = r#"{"temp_c":18,"sky":"clear"}"#;
const ANSWER: &str = "It is 18 degrees and clear in Paris.";

/// The text of a Chat Completions message's `content`: a string, or text parts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The request's messages, each as (role, text).
fn roles_and_texts(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                text_of(&m["content"]),
            )
        })
        .collect()
}

/// What the proxy forwarded is the upstream's model name, our stream flag, the proxy's own
/// upstream key.
fn check_forwarded(rig: &Rig, req: &Recorded, model: &str, stream: bool) {
    let body = &req.body;
    assert_eq!(body["model"], model, "{}", rig.explain("model name"));
    assert_eq!(
        body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        stream,
        "{}",
        rig.explain("the upstream request's stream flag follows the backend's")
    );
    assert_eq!(
        req.headers["authorization"],
        format!("Bearer {}", LiteLlmProxy::UPSTREAM_KEY),
        "{}",
        rig.explain("the proxy authenticates upstream with its own key")
    );
}

/// A text answer: the system prompt and the question reach the upstream as the two messages
/// they are, and the scripted text comes back whole, with a stop and the upstream's usage.
async fn text_answer<M: ChatModel>(rig: &Rig, model: &M, name: &str, stream: bool) {
    rig.server.push(Reply::text(GREETING));
    let request = ChatRequest::new(vec![
        Message::system(SYSTEM),
        Message::user("Greet me in French."),
    ]);
    let (r, deltas) = rig.call(model, request, stream).await;
    assert_eq!(r.content, GREETING, "{}", rig.explain("the answer's text"));
    assert_eq!(
        r.finish_reason,
        FinishReason::Stop,
        "{}",
        rig.explain("finish")
    );
    assert!(r.tool_calls.is_empty() && r.invalid_tool_calls.is_empty());
    if stream {
        // The upstream sent the text in pieces of 4 characters; the proxy passes pieces on.
        assert!(
            deltas >= 2,
            "{}",
            rig.explain(&format!(
                "{deltas} text delta(s): the stream was not incremental"
            ))
        );
    }
    let usage = r
        .usage
        .unwrap_or_else(|| panic!("{}", rig.explain("no usage: the upstream reported 10 + 5")));
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens),
        (10, 5),
        "{}",
        rig.explain("usage")
    );
    assert_eq!(rig.server.request_count(), 1, "{}", rig.explain("one call"));
    let req = rig.upstream(0);
    check_forwarded(rig, &req, name, stream);
    assert_eq!(
        roles_and_texts(&req.body),
        [
            ("system".to_owned(), SYSTEM.to_owned()),
            ("user".to_owned(), "Greet me in French.".to_owned())
        ],
        "{}",
        rig.explain("the messages as the upstream got them")
    );
}

/// A tool round: the tool's schema reaches the upstream; the scripted call comes back as one
/// call with parsed arguments; the call and its result, sent back as history, reach the
/// upstream as an assistant call and the tool message answering it (ids matching); the
/// scripted final text comes back. `id_kept`: the proxy hands the upstream's call id to the
/// backend and the backend's id back to the upstream unchanged (the wire has call ids).
async fn tool_round<M: ChatModel>(rig: &Rig, model: &M, name: &str, stream: bool, id_kept: bool) {
    rig.server.push(Reply::tool_call(
        CALL_ID,
        "get_weather",
        r#"{"city":"Paris"}"#,
    ));
    rig.server.push(Reply::text(ANSWER));
    let ask = |history: Vec<Message>| ChatRequest::new(history).with_tools(vec![weather()]);

    let (first, _) = rig
        .call(model, ask(vec![Message::user(QUESTION)]), stream)
        .await;
    assert_eq!(
        first.finish_reason,
        FinishReason::ToolCalls,
        "{}",
        rig.explain("finish of the calling turn")
    );
    assert!(
        first.invalid_tool_calls.is_empty(),
        "{}",
        rig.explain(&format!("invalid calls: {:?}", first.invalid_tool_calls))
    );
    assert_eq!(first.tool_calls.len(), 1, "{}", rig.explain("one call"));
    let call = &first.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert_eq!(
        call.arguments,
        json!({"city": "Paris"}),
        "{}",
        rig.explain("arguments")
    );
    assert!(!call.id.is_empty(), "a call has an id to answer it by");
    if id_kept {
        assert_eq!(call.id, CALL_ID, "{}", rig.explain("the call's id"));
    }

    let req = rig.upstream(0);
    check_forwarded(rig, &req, name, stream);
    let tools = req.body["tools"].as_array().cloned().unwrap_or_default();
    assert_eq!(tools.len(), 1, "{}", rig.explain("one tool offered"));
    let f = &tools[0]["function"];
    assert_eq!(f["name"], "get_weather");
    assert_eq!(f["description"], "Current weather of a city");
    assert_eq!(
        f["parameters"]["properties"]["city"]["type"],
        "string",
        "{}",
        rig.explain("the tool's schema")
    );
    assert_eq!(f["parameters"]["required"], json!(["city"]));

    let history = vec![
        Message::user(QUESTION),
        Message::assistant_with_tool_calls(first.content.clone(), first.tool_calls.clone())
            .with_parts(first.parts.clone()),
        Message::tool(call.id.clone(), "get_weather", RESULT),
    ];
    let (second, _) = rig.call(model, ask(history), stream).await;
    assert_eq!(
        second.content,
        ANSWER,
        "{}",
        rig.explain("the final answer")
    );
    assert_eq!(second.finish_reason, FinishReason::Stop);
    assert!(second.tool_calls.is_empty());

    assert_eq!(
        rig.server.request_count(),
        2,
        "{}",
        rig.explain("two calls")
    );
    let req = rig.upstream(1);
    check_forwarded(rig, &req, name, stream);
    let msgs = req.body["messages"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = msgs.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool"],
        "{}",
        rig.explain("the round as the upstream got it")
    );
    assert_eq!(text_of(&msgs[0]["content"]), QUESTION);
    let sent_calls = msgs[1]["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        sent_calls.len(),
        1,
        "{}",
        rig.explain("the assistant's call")
    );
    assert_eq!(sent_calls[0]["function"]["name"], "get_weather");
    let sent_args: Value = serde_json::from_str(
        sent_calls[0]["function"]["arguments"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("{}", rig.explain(&format!("arguments are not JSON: {e}"))));
    assert_eq!(sent_args, json!({"city": "Paris"}));
    assert_eq!(
        msgs[2]["tool_call_id"],
        sent_calls[0]["id"],
        "{}",
        rig.explain("the tool message answers the assistant's call")
    );
    if id_kept {
        assert_eq!(
            sent_calls[0]["id"],
            CALL_ID,
            "{}",
            rig.explain("the call id upstream")
        );
    }
    let result: Value = serde_json::from_str(&text_of(&msgs[2]["content"]))
        .unwrap_or_else(|e| panic!("{}", rig.explain(&format!("the tool result: {e}"))));
    assert_eq!(result, serde_json::from_str::<Value>(RESULT).unwrap());
}

fn no_retry() -> RetryPolicy {
    RetryPolicy::none()
}

/// The first call through a fresh proxy can take seconds (it imports lazily).
const TIMEOUT: Duration = Duration::from_secs(120);

/// A text answer and a tool round, whole then streamed, through one proxy (it takes 10 to
/// 30 s to start). `id_kept`: see [`tool_round`].
async fn text_and_tool_round_whole_and_streamed<M: ChatModel>(
    rig: &Rig,
    model: &M,
    name: &str,
    id_kept: bool,
) {
    rig.step("text, whole");
    text_answer(rig, model, name, false).await;
    rig.step("text, streamed");
    text_answer(rig, model, name, true).await;
    rig.step("tool round, whole");
    tool_round(rig, model, name, false, id_kept).await;
    rig.step("tool round, streamed");
    tool_round(rig, model, name, true, id_kept).await;
}

fn chat_completions(proxy: &LiteLlmProxy, name: &str, key: &str) -> OpenAiModel {
    OpenAiModel::new(
        OpenAiConfig::new(name)
            .with_base_url(format!("{}/v1", proxy.base_url()))
            .with_api_key(key)
            .with_retry(no_retry())
            .with_timeout(TIMEOUT),
    )
    .unwrap()
}

/// Chat Completions, the proxy's own wire, and its check of the key: a key it does not know
/// is an API error that never reaches the upstream (so the native backends' runs below prove
/// each sends its key in its provider's header). LiteLLM without a database answers such a
/// key with 400, not 401.
#[tokio::test]
async fn chat_completions_answers_text_and_a_tool_round_through_litellm_whole_and_streamed() {
    let rig = Rig::start().await;
    let m = chat_completions(&rig.proxy, "scripted-chat", rig.proxy.api_key());
    text_and_tool_round_whole_and_streamed(&rig, &m, "scripted-chat", true).await;

    rig.step("a key the proxy does not know");
    rig.server.push(Reply::text(GREETING));
    let stranger = chat_completions(&rig.proxy, "scripted-chat", "sk-not-the-master-key");
    let err = stranger
        .chat(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .expect_err("a wrong key must fail");
    assert!(
        matches!(err, toolwright_core::ModelError::Api { status, .. } if (400..500).contains(&status)),
        "{}",
        rig.explain(&format!("{err:?}"))
    );
    assert_eq!(rig.server.request_count(), 0, "{}", rig.explain("upstream"));

    // Dropped, the proxy is gone: killed with its process group and reaped.
    let pid = rig.proxy.pid();
    let port = rig.proxy.base_url();
    drop(rig);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the proxy (pid {pid}) outlived its LiteLlmProxy"
    );
    let port = port.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "something still listens on the proxy's port {port}"
    );
}

#[cfg(feature = "anthropic")]
mod anthropic {
    use super::*;
    use toolwright_model_gateway::anthropic::{AnthropicConfig, AnthropicModel};

    #[tokio::test]
    async fn anthropic_messages_answer_text_and_a_tool_round_through_litellm_whole_and_streamed() {
        let rig = Rig::start().await;
        let m = AnthropicModel::new(
            AnthropicConfig::new("scripted-anthropic")
                .with_base_url(rig.proxy.base_url())
                .with_api_key(rig.proxy.api_key())
                .with_retry(no_retry())
                .with_timeout(TIMEOUT),
        )
        .unwrap();
        text_and_tool_round_whole_and_streamed(&rig, &m, "scripted-anthropic", true).await;
    }
}

#[cfg(feature = "openai-responses")]
mod openai_responses {
    use super::*;
    use toolwright_model_gateway::OpenAiResponsesModel;

    #[tokio::test]
    async fn openai_responses_answer_text_and_a_tool_round_through_litellm_whole_and_streamed() {
        let rig = Rig::start().await;
        let m = OpenAiResponsesModel::new(
            OpenAiConfig::new("scripted-responses")
                .with_base_url(format!("{}/v1", rig.proxy.base_url()))
                .with_api_key(rig.proxy.api_key())
                .with_retry(no_retry())
                .with_timeout(TIMEOUT),
        )
        .unwrap();
        text_and_tool_round_whole_and_streamed(&rig, &m, "scripted-responses", true).await;
    }
}

#[cfg(feature = "gemini")]
mod gemini {
    use super::*;
    use toolwright_model_gateway::gemini::{GeminiConfig, GeminiModel};

    #[tokio::test]
    async fn gemini_answers_text_and_a_tool_round_through_litellm_whole_and_streamed() {
        let rig = Rig::start().await;
        let m = GeminiModel::new(
            GeminiConfig::new("scripted-gemini")
                .with_base_url(format!("{}/v1beta", rig.proxy.base_url()))
                .with_api_key(rig.proxy.api_key())
                .with_retry(no_retry())
                .with_timeout(TIMEOUT),
        )
        .unwrap();
        text_and_tool_round_whole_and_streamed(&rig, &m, "scripted-gemini", false).await;
    }
}
