//! Stage 3 demo: 002's get_weather, end to end, in each call protocol (native function
//! calling, the JSON decision of 002, the `<tool_action>` tags of 000), printing every step.
//!
//! With `OPENAI_API_KEY` / `OPENAI_BASE_URL` (and `OPENAI_MODEL`) set it talks to that
//! provider. Without them it first runs the embedded local model (SmolLM2-135M-Instruct on the
//! CPU, in process, feature `local` of model-gateway): it has no native function calling, so the
//! loop uses 002's JSON decision and the model's decoding is constrained to valid decisions. It
//! then walks through the three wire protocols with the scripted OpenAI-compatible server as the
//! model, then a handoff (a front desk hands the question to a weather desk agent) and code mode.
//! The first line says which model runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::Arc;

use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_core::ToolContext;
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};
use toolwright_tool_system::{Agent, FnTool, LoopEvent, ProtocolKind};

/// Arguments of get_weather.
#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// The city, e.g. "Beijing".
    city: String,
}

/// The script the offline demo model writes in code mode: three calls, one line printed.
const CODE_MODE_SCRIPT: &str = "\
temps = {c: get_weather(city=c)[\"temp\"] for c in [\"Beijing\", \"Shanghai\", \"Guangzhou\"]}
warmest = max(temps, key=temps.get)
final_answer(f\"Warmest of {len(temps)}: {warmest} at {temps[warmest]} C (one script, three calls).\")
";

/// The tool the front desk hands the conversation to the weather desk with.
const HANDOFF: &str = "transfer_to_weather_desk";

/// What the offline demo model answers, from the request it gets.
fn offline_model(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .first()
        .filter(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    let tool_result = messages.iter().rev().find_map(|m| {
        let content = m["content"].as_str()?;
        if m["role"] == "tool" {
            Some(content.to_owned())
        } else {
            content
                .strip_prefix("[Tool result for get_weather]\n")
                .map(str::to_owned)
        }
    });
    let slow = |r: Reply| {
        r.shape(|s| {
            s.text_chunk = 8;
            s.delay = std::time::Duration::from_millis(10);
        })
    };
    let answer = |result: &str| {
        let v: Value = serde_json::from_str(result).unwrap_or(Value::Null);
        format!(
            "It is {}°C and {} in {}.",
            v["temp"],
            v["sky"].as_str().unwrap_or("?"),
            v["city"].as_str().unwrap_or("?")
        )
    };
    if system.contains("front desk") {
        // the triage agent: weather questions go to the weather desk
        return Reply::tool_call("call_handoff", HANDOFF, "{}");
    }
    if system.contains("weather desk") {
        // the agent handed to: the same conversation (with the handoff in it), its own tools
        let weather = messages.iter().rev().find_map(|m| {
            let v: Value = serde_json::from_str(m["content"].as_str()?).ok()?;
            (m["role"] == "tool" && v.get("temp").is_some()).then_some(v)
        });
        return match weather {
            None => Reply::tool_call("call_desk", "get_weather", r#"{"city": "Beijing"}"#),
            Some(v) => slow(Reply::text(format!(
                "Weather desk here: {}",
                answer(&v.to_string())
            ))),
        };
    }
    let offers_code = body["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t["function"]["name"] == toolwright_code_mode::RUN_CODE)
    });
    if offers_code {
        // code mode: one script calls get_weather three times and ends the turn with its
        // final_answer (the model is called once); had it only printed, the model would answer
        // from what it printed
        return match messages.iter().rev().find(|m| m["role"] == "tool") {
            None => Reply::tool_call(
                "call_code",
                toolwright_code_mode::RUN_CODE,
                &json!({ "code": CODE_MODE_SCRIPT }).to_string(),
            ),
            Some(m) => {
                let result: Value =
                    serde_json::from_str(m["content"].as_str().unwrap_or("")).unwrap_or_default();
                slow(Reply::text(format!(
                    "From one script: {}",
                    result["printed"]
                        .as_str()
                        .unwrap_or("(nothing printed)")
                        .trim()
                )))
            }
        };
    }
    if body.get("tools").is_some() && !system.contains("<tool_action") {
        // native function calling
        return match tool_result {
            None => Reply::tool_call("call_1", "get_weather", r#"{"city": "Beijing"}"#),
            Some(r) => slow(Reply::text(answer(&r))),
        };
    }
    if system.contains("<tool_action") {
        return match tool_result {
            None => slow(Reply::text(
                "I need the current weather first. <tool_action name=\"get_weather\"><city value=\"Beijing\" /></tool_action>",
            )),
            Some(r) => slow(Reply::text(answer(&r))),
        };
    }
    match tool_result {
        None => Reply::text(r#"{"tool": "get_weather", "arguments": {"city": "Beijing"}}"#),
        Some(r) => Reply::text(json!({"tool": null, "reply": answer(&r)}).to_string()),
    }
}

/// Prints a run's events as they arrive.
async fn show(
    mut events: toolwright_tool_system::LoopStream,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut in_text = false;
    while let Some(event) = events.next().await {
        match event {
            LoopEvent::TextDelta(t) => {
                if !in_text {
                    print!("model: ");
                    in_text = true;
                }
                print!("{t}");
                std::io::stdout().flush()?;
                continue;
            }
            LoopEvent::ToolCallStarted {
                id,
                name,
                arguments,
            } => println!(
                "{}  -> tool call {name}({arguments}) [id {id}]",
                if in_text { "\n" } else { "" }
            ),
            LoopEvent::ToolResult {
                name,
                content,
                is_error,
                ..
            } => {
                println!(
                    "  <- {} from {name}: {content}",
                    if is_error { "error" } else { "result" }
                )
            }
            LoopEvent::Reprompted { correction } => println!(
                "{}  (answer unreadable; asked again: {correction})",
                if in_text { "\n" } else { "" }
            ),
            LoopEvent::IterationLimitReached { iterations } => {
                println!("\n  (stopped at the limit of {iterations} model calls)")
            }
            LoopEvent::Finished(out) => {
                println!(
                    "{}final answer ({} protocol, {} model calls): {}",
                    if in_text { "\n" } else { "" },
                    out.protocol,
                    out.iterations,
                    out.answer
                );
                println!("  {}", usage_line(&out));
            }
            LoopEvent::Failed(e) => println!("\nfailed: {e}"),
            other => println!("{other:?}"),
        }
        in_text = false;
    }
    Ok(())
}

/// The run's tokens and what they cost, from the dated price table. A model the table does
/// not know (the embedded and the scripted demo models) is priced as gpt-4o-mini, and the line
/// says so.
fn usage_line(out: &toolwright_tool_system::LoopOutput) -> String {
    let Some(u) = out.usage else {
        return "usage: the model reported none".into();
    };
    let table = toolwright_core::PriceTable::builtin();
    let cost = match out.cost {
        Some(c) => format!("cost ${c:.6} (prices of {})", table.as_of()),
        None => format!(
            "cost: the model is not in the price table of {}; at gpt-4o-mini's prices ${:.6}",
            table.as_of(),
            table.cost("gpt-4o-mini", &u).unwrap_or_default()
        ),
    };
    format!(
        "usage: {} input tokens ({} from the cache, {} written to it), {} output ({} reasoning); {cost}",
        u.prompt_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.completion_tokens,
        u.reasoning_tokens
    )
}

fn weather_tool() -> FnTool {
    FnTool::typed(
        "get_weather",
        "Get current weather for a city",
        |a: WeatherArgs, _: ToolContext| async move {
            // A made-up temperature per city, so the demo's code-mode script has something to compare.
            let temp = 18 + a.city.len() % 7;
            Ok(json!({"city": a.city, "temp": temp, "sky": "sunny"}))
        },
    )
}

/// 002's question answered by the embedded local model, deciding for real.
async fn local_model_run() -> Result<(), Box<dyn std::error::Error>> {
    use toolwright_local_model::LocalModel;
    let started = std::time::Instant::now();
    let model = LocalModel::builder()
        // A fixed seed keeps the demo reproducible.
        .seed(1)
        .build()
        .await?;
    println!(
        "\n=== the embedded local model decides (native tool calls under its grammar; loaded in {:.1} s) ===",
        started.elapsed().as_secs_f64()
    );
    let agent = Agent::builder(model)
        .tool(weather_tool())
        .system_prompt("You are a helpful assistant. Use tools when they help.")
        .build()?;
    println!("user: What's the weather in Beijing?");
    show(agent.run_stream("demo-local", "What's the weather in Beijing?")).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _traces = demo_support::init_tracing("llm-toolkit-stage-3");
    let (config, _offline) = match OpenAiConfig::from_env()? {
        Some(cfg) => {
            println!(
                "Stage 3 demo: using the configured provider {} (model {})",
                cfg.base_url, cfg.model
            );
            (cfg, None)
        }
        None => {
            println!(
                "Stage 3 demo: no provider configured (OPENAI_API_KEY/OPENAI_BASE_URL unset): using the embedded local model SmolLM2-135M-Instruct (CPU, in process), then the scripted demo model for the protocol walk-through"
            );
            local_model_run().await?;
            let server = ScriptedServer::start().await;
            println!(
                "\n--- protocol walk-through with the scripted demo model at {} ---",
                server.base_url()
            );
            server.respond_with(offline_model);
            (
                OpenAiConfig::new("offline-demo").with_base_url(server.base_url()),
                Some(server),
            )
        }
    };
    let model = Arc::new(OpenAiModel::new(config)?);
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());

    for (session, title, protocol) in [
        (
            "demo-native",
            "native function calling (001)",
            ProtocolKind::Native,
        ),
        (
            "demo-json",
            "JSON decision in the system prompt (002)",
            ProtocolKind::JsonDecision,
        ),
        (
            "demo-tag",
            "<tool_action> tags, ReAct (000)",
            ProtocolKind::Tag,
        ),
    ] {
        println!("\n=== {title} ===");
        let agent = Agent::builder(Arc::clone(&model))
            .tool(weather_tool())
            .system_prompt("You are a helpful assistant. Use tools when they help.")
            .protocol(protocol)
            .store(Arc::clone(&store))
            .build()?;
        println!("user: What's the weather in Beijing?");
        show(agent.run_stream(session, "What's the weather in Beijing?")).await?;
        let stored = store.load(session).await?;
        println!(
            "session {session}: {} messages stored",
            stored.messages.len()
        );
    }
    handoff_turn(Arc::clone(&model), Arc::clone(&store)).await?;
    code_mode_turn(model, store).await
}

/// Agents compose: a front-desk agent has no tools of its own, only a handoff; the weather desk
/// it hands the conversation to (its own instructions and tools, the same session) answers.
async fn handoff_turn(
    model: Arc<OpenAiModel>,
    store: Arc<dyn SessionStore>,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n=== a handoff: the front desk hands the conversation to the weather desk ===");
    let weather_desk = Agent::builder(Arc::clone(&model))
        .tool(weather_tool())
        .system_prompt("You are the weather desk. Use get_weather, then answer the person.")
        .build()?;
    let front_desk = Agent::builder(model)
        .system_prompt(
            "You are the front desk. Hand weather questions to the weather desk; answer the rest.",
        )
        .handoff(
            &weather_desk,
            HANDOFF,
            "Hand the conversation to the weather desk for anything about the weather",
        )
        .store(Arc::clone(&store))
        .build()?;
    println!("user: What's the weather in Beijing?");
    show(front_desk.run_stream("demo-handoff", "What's the weather in Beijing?")).await?;
    let stored = store.load("demo-handoff").await?;
    println!(
        "session demo-handoff: {} messages stored (the front desk's handoff call and its result, then the weather desk's call, result and answer)",
        stored.messages.len()
    );
    Ok(())
}

/// Code mode: the model writes one script that calls get_weather as a function in the
/// skills sandbox; three tool calls, one model call: the script's `final_answer` is the reply. Without bubblewrap code mode refuses to run, and the demo prints why.
async fn code_mode_turn(
    model: Arc<OpenAiModel>,
    store: Arc<dyn SessionStore>,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n=== code mode: one script calls the tools as functions (run_code) ===");
    let mut registry = toolwright_tool_system::ToolRegistry::new();
    registry.register(weather_tool())?;
    let tools = Arc::new(toolwright_tool_system::Dispatcher::from_registry(registry));
    let built = tokio::task::spawn_blocking(move || {
        toolwright_code_mode::CodeModeProvider::builder(tools).build()
    })
    .await?;
    let code = match built {
        Ok(code) => code,
        Err(e) => {
            println!("code mode is not available here: {e}");
            return Ok(());
        }
    };
    let agent = Agent::builder(model)
        .provider(Arc::new(code))
        .system_prompt("You are a helpful assistant. Use tools when they help.")
        .store(Arc::clone(&store))
        .build()?;
    let question = "Which is warmest now: Beijing, Shanghai or Guangzhou?";
    println!("user: {question}");
    show(agent.run_stream("demo-code", question)).await?;
    let stored = store.load("demo-code").await?;
    println!(
        "session demo-code: {} messages stored (the script is the call's arguments; its calls are in the result; its final_answer is the reply)",
        stored.messages.len()
    );
    Ok(())
}
