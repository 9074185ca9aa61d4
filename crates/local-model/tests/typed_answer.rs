//! A typed run (`Agent::run_as`) on the real embedded model: the tool is called, then the
//! answer is JSON of the run's type, held to it by the grammar while the tools stay bound.
//!
//! These tests need the model file. It is fetched once into the user cache (or taken from
//! LOCAL_MODEL_PATH); when that is impossible they FAIL with the reason — they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::Deserialize;
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError, ModelInfo, ResponseFormat,
    ToolContext, ToolError, async_trait, response_stream,
};
use toolwright_local_model::LocalModel;
use toolwright_tool_system::{Agent, FnTool, ProtocolKind};

mod common;
use common::model_path;

/// The local model as the agent sees it, keeping each request and its response.
struct Recorded {
    inner: LocalModel,
    log: Mutex<Vec<(ChatRequest, ChatResponse)>>,
}

#[async_trait]
impl ChatModel for Recorded {
    fn info(&self) -> ModelInfo {
        self.inner.info()
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let r = self.inner.chat(request.clone()).await?;
        self.log.lock().unwrap().push((request, r.clone()));
        Ok(r)
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        Ok(response_stream(self.chat(request).await?))
    }
}

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name
    city: String,
}

/// The run's type.
#[derive(Debug, Deserialize, JsonSchema)]
struct Forecast {
    city: String,
    celsius: i32,
}

/// A run of `protocol` with one weather tool: the typed output, how often the tool ran, and
/// what the model was asked and answered.
async fn typed_run(
    protocol: ProtocolKind,
) -> (
    Result<toolwright_tool_system::TypedOutput<Forecast>, toolwright_tool_system::LoopError>,
    usize,
    Vec<(ChatRequest, ChatResponse)>,
) {
    let inner = LocalModel::builder()
        .model_path(model_path())
        .seed(3)
        .max_tokens(64)
        .build()
        .await
        .unwrap();
    let model = Arc::new(Recorded {
        inner,
        log: Mutex::new(Vec::new()),
    });
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let agent = Agent::builder(Arc::clone(&model))
        .tool(
            FnTool::typed(
                "get_weather",
                "Get the current weather of a city",
                move |a: WeatherArgs, _: ToolContext| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async move {
                        Ok::<_, ToolError>(
                            serde_json::json!({"city": a.city, "celsius": 4, "sky": "cloudy"}),
                        )
                    }
                },
            )
            // A repeat of the same lookup reuses its result and asks for the answer: a 135M model
            // shown a call and its result tends to call again.
            .idempotent(),
        )
        .protocol(protocol)
        .max_iterations(3)
        .system_prompt("You are a helpful assistant. Use tools when they help.")
        .build()
        .unwrap();
    let out = agent
        .run_as::<Forecast>("s1", "How warm is it in Oslo?")
        .await;
    let log = model.log.lock().unwrap().clone();
    (out, ran.load(Ordering::SeqCst), log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_run_on_native_calls_calls_the_tool_then_answers_json_of_the_type() {
    let (out, ran, log) = typed_run(ProtocolKind::Native).await;
    let out = out.unwrap_or_else(|e| panic!("{e}; the rounds: {log:#?}"));
    assert!(ran >= 1, "the tool never ran: {log:#?}");
    assert!(
        !log[0].1.tool_calls.is_empty(),
        "round 1 made no call: {log:#?}"
    );
    let forecast = out.value.expect("not held for approval");
    eprintln!(
        "answer {:?} → {forecast:?} after {} model calls",
        out.output.answer,
        log.len()
    );
    // Every request had the tools bound and the answer's schema on the wire: the answer was
    // held to it, not corrected into it.
    for (req, _) in &log {
        assert_eq!(req.tools.len(), 1);
        assert!(
            matches!(&req.response_format, Some(ResponseFormat::JsonSchema { schema, .. }) if schema["properties"]["celsius"].is_object()),
            "{:?}",
            req.response_format
        );
    }
    let last = &log.last().unwrap().1;
    assert!(last.tool_calls.is_empty(), "{last:?}");
    let raw: serde_json::Value = serde_json::from_str(&last.content)
        .unwrap_or_else(|e| panic!("the answer is not bare JSON ({e}): {}", last.content));
    // The typed value is the JSON the model wrote.
    assert_eq!(raw["city"], forecast.city.as_str(), "{raw}");
    assert_eq!(raw["celsius"], forecast.celsius, "{raw}");
}

/// What the run's last response was, for a failure message.
fn last_answer(log: &[(ChatRequest, ChatResponse)]) -> String {
    log.last()
        .map(|(_, r)| format!("{:?} {:?}", r.content, r.tool_calls))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_run_on_tags_calls_natively_then_answers_json_of_the_type() {
    let (out, ran, log) = typed_run(ProtocolKind::Tag).await;
    let out = out.unwrap_or_else(|e| panic!("{e}; last: {}", last_answer(&log)));
    assert!(ran >= 1, "the tool never ran: {log:#?}");
    assert!(
        !log[0].1.tool_calls.is_empty(),
        "round 1 made no native call: {log:#?}"
    );
    assert!(out.value.is_some());
    for (req, _) in &log {
        assert!(matches!(
            req.response_format,
            Some(ResponseFormat::JsonSchema { .. })
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_run_on_json_decisions_decides_a_call_then_replies_json_of_the_type() {
    let (out, ran, log) = typed_run(ProtocolKind::JsonDecision).await;
    let out = out.unwrap_or_else(|e| panic!("{e}; last: {}", last_answer(&log)));
    assert!(ran >= 1, "the tool never ran: {log:#?}");
    let first: serde_json::Value = serde_json::from_str(&log[0].1.content).unwrap();
    assert_eq!(first["tool"], "get_weather", "{first}");
    assert!(out.value.is_some());
    for (req, _) in &log {
        assert!(req.tools.is_empty());
        assert!(matches!(
            req.response_format,
            Some(ResponseFormat::JsonSchema { .. })
        ));
    }
}
