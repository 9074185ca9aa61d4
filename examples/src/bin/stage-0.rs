//! Stage 0 demo: a streamed chat and a call with one bound tool, showing the parsed tool call.
//!
//! With `OPENAI_API_KEY` / `OPENAI_BASE_URL` (and `OPENAI_MODEL`) set it talks to that
//! provider. Without them it starts the scripted OpenAI-compatible server in-process as an
//! offline demo model, and says so on the first line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use futures::StreamExt;
use model_gateway::{
    ChatEvent, ChatModel, ChatRequest, Message, OpenAiConfig, OpenAiModel, ToolSpec,
};
use serde_json::json;
use testkit::{Reply, ScriptedServer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (config, _offline) = match OpenAiConfig::from_env()? {
        Some(cfg) => {
            println!(
                "Stage 0 demo: using the configured provider {} (model {})",
                cfg.base_url, cfg.model
            );
            (cfg, None)
        }
        None => {
            let server = ScriptedServer::start().await;
            println!(
                "Stage 0 demo: no provider configured (OPENAI_API_KEY/OPENAI_BASE_URL unset): using the offline scripted demo model at {}",
                server.base_url()
            );
            server.push(
                Reply::text(
                    "Hello! I am streaming this answer to you, a few characters at a time.",
                )
                .shape(|s| {
                    s.text_chunk = 6;
                    s.delay = std::time::Duration::from_millis(15);
                }),
            );
            server.push(Reply::tool_call(
                "call_1",
                "get_weather",
                r#"{"city": "Beijing", "unit": "celsius"}"#,
            ));
            (
                OpenAiConfig::new("offline-demo").with_base_url(server.base_url()),
                Some(server),
            )
        }
    };
    let model = OpenAiModel::new(config)?;

    println!("\n1) Streamed chat:");
    let mut stream = model
        .stream(ChatRequest::new(vec![Message::user(
            "Say hello in one sentence.",
        )]))
        .await?;
    while let Some(event) = stream.next().await {
        match event? {
            ChatEvent::TextDelta(t) => {
                print!("{t}");
                std::io::stdout().flush()?;
            }
            ChatEvent::Finish { reason, usage } => {
                println!("\n   [finish: {reason:?}, usage: {usage:?}]")
            }
            _ => {}
        }
    }

    println!("\n2) One bound tool:");
    let weather = ToolSpec::new(
        "get_weather",
        "Get current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}),
    );
    let response = model
        .chat(
            ChatRequest::new(vec![Message::user("What's the weather in Beijing?")])
                .with_tools(vec![weather]),
        )
        .await?;
    println!("   finish_reason: {:?}", response.finish_reason);
    if response.tool_calls.is_empty() {
        println!("   the model answered in text: {}", response.content);
    }
    for call in &response.tool_calls {
        println!(
            "   tool call id={} name={} arguments={}",
            call.id, call.name, call.arguments
        );
    }
    Ok(())
}
