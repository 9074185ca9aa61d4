//! Sampling from a real server: npm's server-everything offers `trigger-sampling-request` only
//! to a client that declares sampling, and its tool sends `sampling/createMessage` back through
//! the bridge to the application's model (a recording model behind the `ChatModel` seam, and the embedded local
//! model). The
//! person is asked first, the answer's length is cut to the operator's limit, a request past the
//! rate is refused, and a person who says no stops it. Fails, never skips, when
//! server-everything is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ModelError, ModelInfo,
};
use toolwright_mcp_bridge::elicitation::{ElicitationAnswer, ElicitationRequest, Elicitor};
use toolwright_mcp_bridge::{McpBridge, Sampling};

const TOOL: &str = "everything__trigger-sampling-request";

/// Answers every request with one sentence, keeping what it was asked.
#[derive(Default)]
struct Recording {
    asked: Mutex<Vec<ChatRequest>>,
}

#[async_trait::async_trait]
impl ChatModel for Recording {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("recording-model", false)
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.asked.lock().unwrap().push(request);
        Ok(ChatResponse::new(
            "The sky is blue.",
            Vec::new(),
            FinishReason::Stop,
            None,
        ))
    }
}

/// Says yes or no as told, keeping the questions.
struct Person {
    yes: AtomicBool,
    asked: Mutex<Vec<ElicitationRequest>>,
}

#[async_trait::async_trait]
impl Elicitor for Person {
    async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer {
        self.asked.lock().unwrap().push(request);
        if self.yes.load(Ordering::SeqCst) {
            ElicitationAnswer::Accept(json!({}))
        } else {
            ElicitationAnswer::Decline
        }
    }
}

async fn started(bridge: &McpBridge) {
    bridge.register(common::everything("everything")).unwrap();
    bridge.start("everything").await.unwrap();
}

#[tokio::test]
async fn a_servers_sampling_request_is_put_to_the_person_and_answered_by_the_model_within_bounds() {
    common::init_tracing();
    let model = Arc::new(Recording::default());
    let person = Arc::new(Person {
        yes: AtomicBool::new(true),
        asked: Mutex::new(Vec::new()),
    });
    let bridge = McpBridge::new();
    bridge.set_sampling(Some(
        Sampling::new(model.clone())
            .with_max_tokens(50)
            .with_rate(2),
    ));
    bridge.set_elicitor(person.clone(), Duration::from_secs(10));
    started(&bridge).await;

    let args = json!({"prompt": "What colour is the sky?", "maxTokens": 500});
    let out = bridge.call(TOOL, args.clone()).await.unwrap().value;
    let text = out.as_str().map_or_else(|| out.to_string(), str::to_owned);
    assert!(text.contains("The sky is blue."), "{text}");
    assert!(text.contains("recording-model"), "{text}");

    let asked = model.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    let request = &asked[0];
    assert_eq!(
        request.max_tokens,
        Some(50),
        "the server's 500 is cut to 50"
    );
    assert_eq!(request.temperature, Some(0.7));
    match request.messages.as_slice() {
        [
            Message::System { content },
            Message::User { content: user, .. },
        ] => {
            assert_eq!(content, "You are a helpful test server.");
            assert!(user.contains("What colour is the sky?"), "{user}");
        }
        other => panic!("{other:?}"),
    }
    {
        let questions = person.asked.lock().unwrap();
        assert_eq!(questions.len(), 1);
        assert_eq!(questions[0].service, "everything");
        assert!(
            questions[0].message.contains("at most 50 tokens")
                && questions[0].message.contains("What colour is the sky?"),
            "{}",
            questions[0].message
        );
    }

    // The person says no: the model is not asked, and the server hears why.
    person.yes.store(false, Ordering::SeqCst);
    let err = bridge.call(TOOL, args.clone()).await.unwrap_err();
    assert!(err.message.contains("did not allow"), "{}", err.message);
    assert_eq!(model.asked.lock().unwrap().len(), 1);

    // Past two requests a minute, refused before the person is asked.
    person.yes.store(true, Ordering::SeqCst);
    let err = bridge.call(TOOL, args).await.unwrap_err();
    assert!(
        err.message.contains("more than 2 requests a minute"),
        "{}",
        err.message
    );
    assert_eq!(person.asked.lock().unwrap().len(), 2);
    assert_eq!(model.asked.lock().unwrap().len(), 1);
    bridge.stop("everything").await.unwrap();
}

/// Without `set_sampling` the client never declares sampling, and the server does not offer
/// the tool that would ask for it.
#[tokio::test]
async fn without_sampling_set_the_server_is_never_told_it_may_ask() {
    common::init_tracing();
    let bridge = McpBridge::new();
    started(&bridge).await;
    let tools = bridge.tools().await;
    assert!(
        tools.iter().any(|t| t.exposed_name == "everything__echo"),
        "the server is up"
    );
    assert!(
        !tools.iter().any(|t| t.exposed_name == TOOL),
        "offered without sampling declared"
    );
    bridge.stop("everything").await.unwrap();
}

/// The same request answered by the embedded local model (SmolLM2-135M on the CPU, in this
/// process, through the `ChatModel` seam): what it wrote reaches the server, and the server's
/// tool gives it back with the model's name.
#[tokio::test]
async fn a_servers_sampling_request_is_answered_by_the_local_model() {
    common::init_tracing();
    let model = toolwright_local_model::LocalModel::builder()
        .seed(1)
        .build()
        .await
        .expect("the local model (fetched once into the user's cache)");
    let name = toolwright_core::ChatModel::info(&model).model;
    let person = Arc::new(Person {
        yes: AtomicBool::new(true),
        asked: Mutex::new(Vec::new()),
    });
    let bridge = McpBridge::new();
    bridge.set_sampling(Some(Sampling::new(Arc::new(model)).with_max_tokens(24)));
    bridge.set_elicitor(person.clone(), Duration::from_secs(10));
    started(&bridge).await;

    let args = json!({"prompt": "Name one colour.", "maxTokens": 500});
    let out = bridge.call(TOOL, args).await.unwrap().value;
    let text = out.as_str().map_or_else(|| out.to_string(), str::to_owned);
    println!("server-everything's sampling tool, answered by the local model: {text}");
    // "LLM sampling result: {the sampling/createMessage result}"
    let result: serde_json::Value = text
        .find('{')
        .and_then(|at| serde_json::from_str(&text[at..]).ok())
        .unwrap_or_else(|| panic!("no result in {text}"));
    assert_eq!(result["model"], name.as_str(), "{text}");
    assert!(
        result["content"]["text"]
            .as_str()
            .is_some_and(|t| !t.trim().is_empty()),
        "the model wrote something: {text}"
    );
    assert_eq!(
        person.asked.lock().unwrap().len(),
        1,
        "the person was asked"
    );
    bridge.stop("everything").await.unwrap();
}
