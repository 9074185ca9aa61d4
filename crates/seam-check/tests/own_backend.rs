//! A user-written backend proves the seam: it depends on `llm-core` only, implements
//! `chat` (streaming comes from the trait's default), and runs the tool loop with a typed tool.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ModelError, ModelInfo, ToolCall,
    async_trait,
};
use toolwright_core::{ToolContext, ToolError};
use toolwright_tool_system::{Agent, FnTool, LoopEvent};

/// A rule-based "model": asks for the weather of the city it sees, then reports the tool's
/// facts. It records every request it gets.
#[derive(Default)]
struct RuleModel {
    requests: Mutex<Vec<ChatRequest>>,
}

#[async_trait]
impl ChatModel for RuleModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("rules-v1", true)
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        Ok(match request.messages.last() {
            Some(Message::Tool { content, .. }) => {
                let w: Weather = serde_json::from_str(content)
                    .map_err(|e| ModelError::Inference(e.to_string()))?;
                ChatResponse::new(
                    format!("{}: {} and {}°C.", w.city, w.sky, w.celsius),
                    vec![],
                    FinishReason::Stop,
                    None,
                )
            }
            _ => ChatResponse::new(
                "",
                vec![ToolCall::new(
                    "call_1",
                    "get_weather",
                    serde_json::json!({"city": "Beijing"}),
                )],
                FinishReason::ToolCalls,
                None,
            ),
        })
    }
}

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name
    city: String,
}

#[derive(Serialize, Deserialize)]
struct Weather {
    city: String,
    sky: String,
    celsius: i32,
}

fn get_weather() -> FnTool {
    FnTool::typed(
        "get_weather",
        "Current weather for a city",
        |a: WeatherArgs, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(Weather {
                city: a.city,
                sky: "sunny".into(),
                celsius: 22,
            })
        },
    )
}

#[tokio::test]
async fn seam_a_user_written_chat_model_runs_the_loop_with_a_typed_tool() {
    let model = std::sync::Arc::new(RuleModel::default());
    let agent = Agent::builder(model.clone())
        .tool(get_weather())
        .build()
        .unwrap();
    let mut events = agent.run_stream("s1", "Weather in Beijing?");
    let mut results = Vec::new();
    let mut answer = None;
    while let Some(e) = events.next().await {
        match e {
            LoopEvent::ToolResult { content, .. } => results.push(content),
            LoopEvent::Finished(out) => answer = Some(out.answer),
            LoopEvent::Failed(e) => panic!("{e}"),
            _ => {}
        }
    }
    assert_eq!(answer.as_deref(), Some("Beijing: sunny and 22°C."));
    assert_eq!(
        results,
        vec![r#"{"city":"Beijing","sky":"sunny","celsius":22}"#]
    );
    let requests = model.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    // The typed tool's schema reached the backend through the request's tools.
    let spec = &requests[0].tools[0];
    assert_eq!(&*spec.name, "get_weather");
    assert_eq!(spec.parameters["required"], serde_json::json!(["city"]));
    assert_eq!(spec.parameters["properties"]["city"]["type"], "string");
}
