//! Stage 4 — mcp-bridge: a real MCP server (the official server-everything, run with node over
//! stdio) and a remote one (the same server in its Streamable HTTP mode, on 127.0.0.1) registered
//! from a Claude-Desktop-style `mcpServers` file and started in the background; discovery;
//! search by meaning beside a server whose tools are described in Chinese (HowToCook): a
//! Chinese request finds the English-described tool, and a request no tool serves gets "no tool
//! fits"; an intent; the level-1 section injected into the prompt; a call through tool-system's
//! loop with 004's
//! `tool_call` answer and a `tool` message back; and the friendly message once the service is
//! stopped. Runs offline: an in-process scripted model shows the 004 wire form, then the same
//! turn is decided by a real model — the configured provider, or with none the embedded local
//! model (SmolLM2-135M on the CPU, decoding constrained to the tools the intent matched).
//!
//! `cargo xtask stage 4` installs the servers first (crates/mcp-bridge/install-test-deps.sh);
//! `MCP_SERVER_EVERYTHING` overrides where its JS entry is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use toolwright_core::ToolProvider;
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, Message, ModelError, ModelInfo,
    async_trait, response_stream,
};
use toolwright_mcp_bridge::IntentChain;
use toolwright_mcp_bridge::{McpBridge, ToolCallProtocol};
use toolwright_tool_system::{Agent, ProtocolKind};

/// The model's part, scripted: it asks for the echo tool with 004's `tool_call` JSON, then
/// answers with what the `tool` message said.
struct ScriptedModel;

#[async_trait]
impl ChatModel for ScriptedModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("scripted-stage-4", false)
    }
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let text = match req.messages.last() {
            Some(Message::Tool { content, .. }) => {
                json!({"tool_call": null, "reply": format!("服务器回答：{content}")}).to_string()
            }
            _ => json!({"tool_call": {"name": "everything__echo", "arguments": {"message": "你好，MCP"}}})
                .to_string(),
        };
        Ok(ChatResponse::new(text, vec![], FinishReason::Stop, None))
    }
    async fn stream(&self, req: ChatRequest) -> Result<ChatStream, ModelError> {
        Ok(response_stream(self.chat(req).await?))
    }
}

/// HowToCook's MCP server (tools described in Chinese), installed beside server-everything by
/// crates/mcp-bridge/install-test-deps.sh.
fn cook_entry() -> Option<String> {
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
    };
    let path = cache.join("llm-toolkit/npm/node_modules/howtocook-mcp/build/index.js");
    path.is_file().then(|| path.to_string_lossy().into_owned())
}

fn everything_entry() -> Option<String> {
    // where `cargo xtask stage 4` installs it: the toolkit cache ($XDG_CACHE_HOME or ~/.cache)
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
    };
    let path = std::env::var("MCP_SERVER_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            cache.join(
                "llm-toolkit/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    path.is_file().then(|| path.to_string_lossy().into_owned())
}

/// Rough token count: ~4 bytes of English/JSON per token (docs/benchmarks.md uses tiktoken).
fn approx_tokens(s: &str) -> usize {
    s.len().div_ceil(4)
}

#[tokio::main]
async fn main() {
    let _traces = demo_support::init_tracing("llm-toolkit-stage-4");
    let Some(entry) = everything_entry() else {
        eprintln!(
            "server-everything is not installed: run `cargo xtask stage 4` (or crates/mcp-bridge/install-test-deps.sh)"
        );
        std::process::exit(1);
    };
    let Some(cook_entry) = cook_entry() else {
        eprintln!(
            "howtocook-mcp is not installed: run `cargo xtask stage 4` (or crates/mcp-bridge/install-test-deps.sh)"
        );
        std::process::exit(1);
    };

    match toolwright_model_gateway::OpenAiConfig::from_env() {
        Ok(Some(cfg)) => println!(
            "Stage 4 demo: using the configured provider {} (model {}) for the model turn (6b); the scripted model shows the protocol first (6)",
            cfg.base_url, cfg.model
        ),
        _ => println!(
            "Stage 4 demo: no provider configured (OPENAI_API_KEY/OPENAI_BASE_URL unset): using the embedded local model SmolLM2-135M-Instruct (CPU, in process) for the model turn (6b); the scripted model shows the protocol first (6)"
        ),
    }
    println!("\n== 1. Registry: a Claude Desktop `mcpServers` file, as it is");
    let dir = std::env::temp_dir().join(format!("stage-4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The remote server: server-everything's Streamable HTTP mode, which listens on every
    // interface unless told otherwise; the preload pins it to 127.0.0.1.
    let preload = dir.join("loopback-only.cjs");
    std::fs::write(
        &preload,
        include_str!("../../../crates/mcp-bridge/scripts/loopback-only.cjs"),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _remote_server = tokio::process::Command::new("node")
        .arg("--require")
        .arg(&preload)
        .args([entry.as_str(), "streamableHttp"])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let file = dir.join("mcp.json");
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&json!({"mcpServers": {
            "everything": {"command": "node", "args": [entry, "stdio"],
                           "description": "The MCP reference server",
                           "trigger_keywords": ["回显", "echo back"]},
            "remote": {"url": format!("http://127.0.0.1:{port}/mcp"),
                       "description": "The MCP reference server, over Streamable HTTP",
                       "headers": {"X-Client": "llm-toolkit stage 4"}}
        }}))
        .unwrap(),
    )
    .unwrap();
    let bridge = McpBridge::with_config_file(&file).unwrap();
    for s in bridge.services() {
        println!(
            "   {} — {} (status {}, keywords {:?})",
            s.config.name,
            s.config.description(),
            s.status.as_str(),
            s.config.trigger_keywords
        );
    }

    println!(
        "\n== 2. Start in the background (stdio: own process group, clean environment, stderr to the log; remote: Streamable HTTP)"
    );
    let starting = bridge.start_in_background().unwrap();
    println!("   starting: {starting:?} — a turn that needs neither does not wait for them");
    bridge.start("everything").await.unwrap(); // waits for the background start
    bridge.start("remote").await.unwrap();
    println!(
        "   everything: {} (pid {}); remote: {}",
        bridge.status("everything").unwrap().as_str(),
        bridge.pid("everything").unwrap_or_default(),
        bridge.status("remote").unwrap().as_str()
    );
    let over_http = bridge
        .call(
            "remote__echo",
            json!({"message": "hello over Streamable HTTP"}),
        )
        .await
        .unwrap()
        .value;
    println!("   remote__echo → {over_http}");

    println!("\n== 3. Discovery (running services only, names namespaced service__tool)");
    let tools = bridge.tools().await;
    println!("   {} tools:", tools.len());
    for t in tools.iter().take(6) {
        println!("   - {}", t.exposed_name);
    }
    println!("   …");

    // Search by meaning in a mixed-language catalog: a Chinese vendor's server beside the
    // reference one (HowToCook describes its tools in Chinese, as Chinese users' servers often
    // do). A request that shares no word with its tool's name or description: BM25 alone finds
    // nothing (not even through its glossary); the embedded sentence encoder finds it.
    let mut cook = toolwright_mcp_bridge::ServiceConfig::new("cook", "node");
    cook.args = vec![cook_entry];
    cook.description = Some("HowToCook 菜谱".to_owned());
    bridge.register(cook).unwrap();
    bridge.start("cook").await.unwrap();
    let mixed = bridge.tools().await;
    let chinese: Vec<&str> = mixed
        .iter()
        .filter(|t| t.service == "cook")
        .map(|t| t.exposed_name.as_str())
        .collect();
    let ask = "how much is 17 and 25 combined";
    println!(
        "\n== 3b. Search by meaning over {} tools, {} of them described in Chinese ({}): {ask:?} (the tool says \"get-sum: Returns the sum of two numbers\")",
        mixed.len(),
        chinese.len(),
        chinese.join(", ")
    );
    let names = |hits: Vec<toolwright_mcp_bridge::SearchResult>| {
        hits.into_iter()
            .map(|h| h.tool.exposed_name)
            .collect::<Vec<_>>()
    };
    println!(
        "   by words alone (BM25): {:?}",
        names(bridge.search_tools(ask, 3).await)
    );
    // multilingual-e5-small at 4 bits on the CPU; `cargo xtask stage 4` fetched it once into
    // the toolkit cache (the same fetcher and file as the tests), so this runs offline. Its
    // "no tool fits" judge is on by default.
    let started = std::time::Instant::now();
    let encoder = toolwright_local_model::E5Embedder::fetch()
        .await
        .expect("the sentence encoder (72 MB, fetched once into the toolkit cache)");
    bridge.set_semantic_search(Some(toolwright_mcp_bridge::SemanticSearch::new(Arc::new(
        encoder,
    ))));
    let by_meaning = names(bridge.search_tools(ask, 3).await);
    println!(
        "   by words and meaning (BM25 + the encoder): {by_meaning:?} ({} tools encoded and searched in {:.1?})",
        mixed.len(),
        started.elapsed()
    );
    let first_is_sum = |hits: &[String]| hits.first().is_some_and(|n| n.ends_with("__get-sum"));
    println!(
        "   → {}",
        if first_is_sum(&by_meaning) {
            "found by meaning: get-sum first"
        } else {
            "get-sum was not first"
        }
    );
    assert!(
        first_is_sum(&by_meaning),
        "search by meaning should put get-sum first for {ask:?}"
    );
    // A Chinese request for the English-described tool, with Chinese-described tools in the
    // catalog that a small multilingual encoder is drawn to: language-neutral cosines keep
    // the meaning.
    let ask_zh = "十七加二十五等于多少";
    let zh_hits = names(bridge.search_tools(ask_zh, 3).await);
    println!("   in Chinese, {ask_zh:?} → {zh_hits:?}");
    assert!(
        first_is_sum(&zh_hits),
        "the Chinese request should find the English-described get-sum first, not a recipe tool"
    );
    // A request no tool serves: the search returns nothing, and the model is told so.
    let no_fit = "book a train ticket to Shanghai tomorrow";
    let told = bridge
        .call(toolwright_mcp_bridge::SEARCH_TOOL, json!({"query": no_fit}))
        .await
        .unwrap()
        .value;
    println!("   a request no tool serves, {no_fit:?} → {told}");
    assert!(
        told["tools"].as_array().is_some_and(Vec::is_empty),
        "no tool serves {no_fit:?}: the search should say no tool fits"
    );
    // The rest of the demo as before: BM25 alone, the reference servers only.
    bridge.set_semantic_search(None);
    bridge.remove("cook").await.unwrap();

    let user = "用 echo 工具 把「你好，MCP」回显给我";
    println!("\n== 4. Intent for: {user}");
    let chain = IntentChain::standard(bridge.recognizer().await);
    let intent = chain.recognize(user);
    println!("   {intent:?}");
    println!("   and for \"你好\": {:?}", chain.recognize("你好"));

    println!("\n== 5. Level-1 section injected into the system prompt (no schema)");
    let section = bridge.prompt_section(&intent).await.unwrap();
    println!(
        "{}",
        section
            .lines()
            .map(|l| format!("   | {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let full: String = ToolProvider::list(&bridge)
        .await
        .iter()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect();
    let all_level1 = bridge
        .prompt_section(&chain.recognize("请回显"))
        .await
        .unwrap();
    println!(
        "   ≈ tokens: this section {}, level 1 for all {} tools {}, full schemas {}",
        approx_tokens(&section),
        tools.len(),
        approx_tokens(&all_level1),
        approx_tokens(&full)
    );
    println!(
        "   for a non-MCP intent: {:?}",
        bridge.prompt_section(&chain.recognize("你好")).await
    );

    println!("\n== 6. The call, through tool-system's loop (004 tool_call → role=tool message)");
    let agent = Agent::builder(ScriptedModel)
        .provider(Arc::new(bridge.clone()))
        // The bridge computes each turn's level-1 section from the user's message (M3).
        .turn_sections(Arc::new(bridge.clone()))
        .protocol(ProtocolKind::Custom(Arc::new(ToolCallProtocol)))
        .system_prompt("You are a helpful assistant.")
        .build()
        .unwrap();
    let out = agent.run("demo", user).await.unwrap();
    for m in &out.new_messages {
        match m {
            Message::Tool { name, content, .. } => {
                println!("   tool message: name={name} content={content:?}")
            }
            Message::Assistant { content, .. } if !content.is_empty() => {
                println!("   assistant: {content}")
            }
            _ => {}
        }
    }
    println!("   answer: {}", out.answer);

    // The same turn decided by a real model: the configured provider, or with none the
    // embedded local model, which calls the tools the agent binds natively under its grammar.
    let real: Arc<dyn ChatModel> = match toolwright_model_gateway::OpenAiConfig::from_env() {
        Ok(Some(cfg)) => {
            println!(
                "\n== 6b. The same turn decided by the configured provider ({})",
                cfg.model
            );
            Arc::new(toolwright_model_gateway::OpenAiModel::new(cfg).unwrap())
        }
        _ => {
            println!(
                "\n== 6b. The same turn decided by the embedded local model SmolLM2-135M (no provider configured; native tool calls under its grammar)"
            );
            Arc::new(
                toolwright_local_model::LocalModel::builder()
                    .seed(1)
                    .build()
                    .await
                    .unwrap(),
            )
        }
    };
    let agent = Agent::builder(real)
        .provider(Arc::new(bridge.clone()))
        .turn_sections(Arc::new(bridge.clone()))
        .system_prompt("You are a helpful assistant.")
        .build()
        .unwrap();
    let out = agent.run("demo-real", user).await.unwrap();
    for m in &out.new_messages {
        match m {
            Message::Tool { name, content, .. } => {
                println!("   tool message: name={name} content={content:?}")
            }
            Message::User { content, .. } if content.starts_with("[Tool result for ") => {
                println!("   tool result (002 form): {content:?}")
            }
            Message::Assistant { content, .. } if !content.is_empty() => {
                println!("   assistant: {content}")
            }
            _ => {}
        }
    }
    println!("   answer ({} protocol): {}", out.protocol, out.answer);

    println!("\n== 7. Stop: the whole process group ends; a call now gets a friendly message");
    bridge.stop("everything").await.unwrap();
    println!(
        "   status: {}",
        bridge.status("everything").unwrap().as_str()
    );
    let err = bridge
        .call("everything__echo", json!({"message": "still there?"}))
        .await
        .unwrap_err();
    println!("   {}", err.to_model_json());
    let _ = std::fs::remove_dir_all(&dir);
}
