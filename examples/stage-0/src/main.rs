//! Stage 0 demo: a streamed chat and a call with one bound tool, showing the parsed tool call.
//!
//! With `OPENAI_API_KEY` / `OPENAI_BASE_URL` (and `OPENAI_MODEL`) set it talks to that
//! provider. Without them it runs the embedded local model (SmolLM2-135M-Instruct on the CPU):
//! a streamed chat, then a native tool call made under its grammar; and it shows `tool_calls`
//! parsing over HTTP against the scripted OpenAI-compatible server. The first line says which
//! model runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use futures::StreamExt;
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_core::{ChatEvent, ChatModel, ChatRequest, Message, ToolSpec};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

/// The embedded local model: a streamed answer, then a native tool call with valid arguments.
async fn local_demo() -> Result<(), Box<dyn std::error::Error>> {
    let model = toolwright_local_model::LocalModel::builder()
        .seed(1)
        .build()
        .await?;
    println!("\n1) Streamed chat (local model):");
    let stream = model
        .stream(
            ChatRequest::new(vec![Message::user("Say hello in one sentence.")]).with_max_tokens(40),
        )
        .await?;
    print_stream(stream).await?;
    println!("\n2) One bound tool (local model, native call under its grammar):");
    let r = model
        .chat(
            ChatRequest::new(vec![Message::user("What's the weather in Beijing?")])
                .with_tools(vec![weather_spec()]),
        )
        .await?;
    for call in &r.tool_calls {
        println!(
            "   tool call: {} {} (id {})",
            call.name, call.arguments, call.id
        );
    }
    if r.tool_calls.is_empty() {
        println!("   answer: {}", r.content);
    }
    Ok(())
}

/// Prints text deltas as they arrive, then the finish reason and usage.
async fn print_stream(
    mut stream: toolwright_core::ChatStream,
) -> Result<(), Box<dyn std::error::Error>> {
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
    Ok(())
}

fn weather_spec() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Get current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}),
    )
}

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
            println!(
                "Stage 0 demo: no provider configured (OPENAI_API_KEY/OPENAI_BASE_URL unset): using the embedded local model SmolLM2-135M-Instruct (CPU, in process); native tool calls shown with the scripted demo model"
            );
            local_demo().await?;
            let server = ScriptedServer::start().await;
            println!(
                "\n--- the same two calls over HTTP, scripted demo model at {} ---",
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
    let stream = model
        .stream(ChatRequest::new(vec![Message::user(
            "Say hello in one sentence.",
        )]))
        .await?;
    print_stream(stream).await?;

    println!("\n2) One bound tool:");
    let weather = weather_spec();
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
