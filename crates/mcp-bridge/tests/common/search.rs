//! The tool-search fixture as running services, and a scripted model's replies in each call
//! protocol: shared by tests/tool_search.rs and benches/tool_search.rs.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_core::ToolProvider;
use toolwright_tool_system::{Agent, ProtocolKind};

use toolwright_mcp_bridge::{DESCRIBE_TOOL, McpBridge, SEARCH_TOOL, ToolSearchConfig};

use super::{init_tracing, own};

pub const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tool-search/fixtures/tools.json"
);

/// The Chinese vendors' servers (crates/tool-search/fixtures/README.md, "mixed-language").
pub const MIXED_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tool-search/fixtures/mixed-tools.json"
);

/// A bridge with one service per server of the 360-tool fixture and of the mixed-language
/// one (634 tools), all started.
#[allow(dead_code)]
pub async fn mixed_bridge(config: ToolSearchConfig) -> McpBridge {
    let b = big_bridge(config).await;
    let text = std::fs::read_to_string(MIXED_FIXTURE).expect("the mixed-language fixture");
    let mixed: Value = serde_json::from_str(&text).unwrap();
    let servers: Vec<String> = mixed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    for name in &servers {
        b.register(own(
            name,
            &["--tools-file", MIXED_FIXTURE, "--tools-of", name.as_str()],
        ))
        .unwrap();
    }
    futures::future::join_all(servers.iter().map(|s| b.start(s)))
        .await
        .into_iter()
        .for_each(|r| r.unwrap());
    b
}

pub fn fixture() -> Value {
    let text = std::fs::read_to_string(FIXTURE).expect("the recorded tools fixture");
    serde_json::from_str(&text).unwrap()
}

/// A bridge with one service per recorded server, all started.
pub async fn big_bridge(config: ToolSearchConfig) -> McpBridge {
    init_tracing();
    let b = McpBridge::new();
    b.set_tool_search(config);
    let servers: Vec<String> = fixture()["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    for name in &servers {
        let mut config = own(
            name,
            &["--tools-file", FIXTURE, "--tools-of", name.as_str()],
        );
        if name == "everything" {
            config = config.with_trigger_keywords(["the everything server"]);
        }
        b.register(config).unwrap();
    }
    futures::future::join_all(servers.iter().map(|s| b.start(s)))
        .await
        .into_iter()
        .for_each(|r| r.unwrap());
    b
}

pub fn call(protocol: &ProtocolKind, id: &str, name: &str, args: &Value) -> Reply {
    match protocol {
        ProtocolKind::Native => Reply::tool_call(id, name, &args.to_string()),
        ProtocolKind::JsonDecision => {
            Reply::text(json!({"tool": name, "arguments": args}).to_string())
        }
        _ => {
            let params: String = args
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    format!(r#"<{k} value="{v}" />"#)
                })
                .collect();
            Reply::text(format!(
                r#"<tool_action name="{name}">{params}</tool_action>"#
            ))
        }
    }
}

pub fn answer(protocol: &ProtocolKind, text: &str) -> Reply {
    match protocol {
        ProtocolKind::JsonDecision => Reply::text(json!({"tool": null, "reply": text}).to_string()),
        _ => Reply::text(text),
    }
}

/// Arguments that fit `schema`'s required string parameters (the tools the tests call take
/// strings).
pub fn arguments_for(schema: &Value) -> Value {
    let mut args = Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        args.insert(name.to_owned(), json!("notes.txt"));
    }
    Value::Object(args)
}

pub fn tokens(text: &str) -> usize {
    tiktoken_rs::o200k_base()
        .unwrap()
        .encode_with_special_tokens(text)
        .len()
}

/// The names bound in a request's `tools` field, its system message, and its tool part (the
/// `tools` field plus everything the system message says after the base prompt).
pub fn request_parts(body: &Value) -> (Vec<String>, String, String) {
    let tools = body.get("tools").cloned().unwrap_or(json!([]));
    let bound: Vec<String> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    let system = body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let described = system
        .strip_prefix("You are helpful.")
        .unwrap_or(&system)
        .to_owned();
    let tool_text = if bound.is_empty() {
        described
    } else {
        format!("{tools}{described}")
    };
    (bound, system, tool_text)
}

/// Every MCP tool's full schema (the bridge's own describe and search tools aside), as a
/// request's `tools` field would carry them: the "(a) every full schema" of the evaluation.
pub async fn full_schemas(b: &McpBridge) -> String {
    let all: Vec<Value> = b
        .list()
        .await
        .iter()
        .filter(|s| *s.name != *SEARCH_TOOL && *s.name != *DESCRIBE_TOOL)
        .map(toolwright_tool_system::to_openai_tool)
        .collect();
    Value::Array(all).to_string()
}

/// The tool-part tokens (o200k) of a search turn's requests.
#[derive(Debug)]
pub struct SearchTurn {
    /// The first request: the search tool instead of the list.
    pub first: usize,
    /// The second: the search result, and the hits callable with their full schemas.
    pub second: usize,
    /// Every tool's full schema, as a request's `tools` field would carry them.
    pub full: usize,
}

/// One turn in `protocol` over every recorded tool, every turn showing MCP tools: search, call
/// a hit, answer; checks what each request the provider received carries.
pub async fn search_turn(protocol: ProtocolKind) -> SearchTurn {
    let b = big_bridge(ToolSearchConfig::default().with_every_turn(true)).await;
    let catalog = b.tools().await;
    assert!(
        catalog.len() >= 300,
        "the fixture has {} tools",
        catalog.len()
    );
    let query = "read the contents of a text file";
    let hits = b.search_tools(query, 5).await;
    assert!(!hits.is_empty(), "search for {query:?} found nothing");
    let target = hits[0].tool.clone();
    let args = arguments_for(&target.input_schema);

    let server = ScriptedServer::start().await;
    let model = toolwright_model_gateway::OpenAiModel::new(
        toolwright_model_gateway::OpenAiConfig::new("gpt-4o").with_base_url(server.base_url()),
    )
    .unwrap();
    let agent = Agent::builder(model)
        .provider(Arc::new(b.clone()))
        .turn_sections(Arc::new(b.clone()))
        .system_prompt("You are helpful.")
        .protocol(protocol.clone())
        .build()
        .unwrap();
    let p = &protocol;
    server.push(call(p, "c1", SEARCH_TOOL, &json!({"query": query})));
    server.push(call(p, "c2", &target.exposed_name, &args));
    server.push(answer(p, "Done."));
    let out = agent
        .run("s", "Please look at my notes file and tell me what it says")
        .await
        .unwrap();
    assert_eq!(out.answer, "Done.", "{protocol:?}");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 3, "{protocol:?}");
    let native_or_tag = !matches!(protocol, ProtocolKind::JsonDecision);
    let (bound0, system0, text0) = request_parts(&reqs[0].body);
    // Request 1: the search tool and the describe tool, no MCP tool listed or bound.
    assert!(text0.contains(SEARCH_TOOL), "{protocol:?}: {text0}");
    assert!(
        system0.contains("too many to list"),
        "{protocol:?}: {system0}"
    );
    for t in catalog.iter() {
        assert!(
            !text0.contains(&format!("{}:", t.exposed_name))
                && !text0.contains(&format!("\"{}\"", t.exposed_name)),
            "{protocol:?}: {} is listed in the first request",
            t.exposed_name
        );
    }
    if native_or_tag {
        assert_eq!(bound0, [SEARCH_TOOL, DESCRIBE_TOOL], "{protocol:?}");
    }
    // Request 2: the search result reached the model, and the hits are callable with their
    // full schemas.
    let (bound1, _, text1) = request_parts(&reqs[1].body);
    let history1 = reqs[1].body["messages"].to_string();
    assert!(
        history1.contains(&target.exposed_name),
        "{protocol:?}: the search result names the hit: {history1}"
    );
    assert!(
        text1.contains(&target.exposed_name),
        "{protocol:?}: the hit is advertised: {text1}"
    );
    if native_or_tag {
        assert!(
            bound1.contains(&target.exposed_name),
            "{protocol:?}: {bound1:?}"
        );
        assert!(bound1.len() <= 2 + 5, "{protocol:?}: {bound1:?}");
    }
    // Request 3: the call ran on the (recorded) server and its result reached the model.
    let history2 = reqs[2].body["messages"].to_string();
    assert!(
        history2.contains(&format!("{} ran with", target.name)),
        "{protocol:?}: {history2}"
    );

    let full = tokens(&full_schemas(&b).await);
    let first = tokens(&text0);
    let second = tokens(&text1);
    for name in b.services().into_iter().map(|s| s.config.name) {
        b.stop(&name).await.unwrap();
    }
    SearchTurn {
        first,
        second,
        full,
    }
}

/// The embedded local model behind a recorder: every request it receives, and the prompt
/// tokens (its own tokenizer and chat template) it had read before each.
pub struct Recording {
    pub model: toolwright_local_model::LocalModel,
    pub seen: std::sync::Mutex<Vec<(toolwright_core::ChatRequest, u64)>>,
}

impl Recording {
    pub fn prompt_tokens_so_far(&self) -> u64 {
        let c = self.model.prompt_counters();
        c.processed + c.reused
    }
}

#[async_trait::async_trait]
impl toolwright_core::ChatModel for Recording {
    fn info(&self) -> toolwright_core::ModelInfo {
        self.model.info()
    }
    async fn chat(
        &self,
        request: toolwright_core::ChatRequest,
    ) -> Result<toolwright_core::ChatResponse, toolwright_core::ModelError> {
        let so_far = self.prompt_tokens_so_far();
        self.seen.lock().unwrap().push((request.clone(), so_far));
        self.model.chat(request).await
    }
    async fn stream(
        &self,
        request: toolwright_core::ChatRequest,
    ) -> Result<toolwright_core::ChatStream, toolwright_core::ModelError> {
        let so_far = self.prompt_tokens_so_far();
        self.seen.lock().unwrap().push((request.clone(), so_far));
        self.model.stream(request).await
    }
}

/// A search turn decided by the embedded local model (SmolLM2-135M, native calls under its
/// grammar) over `b`'s tools.
pub struct LocalTurn {
    /// Prompt tokens (its tokenizer and chat template) of the first request.
    pub first: u64,
    /// Every full schema in its tokenizer.
    pub full: u64,
    /// Every request it received, with the prompt tokens read before it.
    pub seen: Vec<(toolwright_core::ChatRequest, u64)>,
    /// The run's answer.
    pub answer: String,
}

/// Runs one turn of the local model over `b`'s tools ("Read the file notes.txt ...").
pub async fn local_search_turn(b: &McpBridge) -> LocalTurn {
    let model = toolwright_local_model::LocalModel::builder()
        .seed(1)
        .max_tokens(64)
        .build()
        .await
        .expect("the local model (fetched once into the user's cache)");
    let full = model
        .tokenizer()
        .encode(&full_schemas(b).await)
        .unwrap()
        .len() as u64;
    let recording = Arc::new(Recording {
        model,
        seen: std::sync::Mutex::new(Vec::new()),
    });
    let agent = Agent::builder(recording.clone())
        .provider(Arc::new(b.clone()))
        .turn_sections(Arc::new(b.clone()))
        .system_prompt("You are helpful.")
        .build()
        .unwrap();
    let out = agent
        .run("local", "Read the file notes.txt and tell me what it says")
        .await
        .unwrap();
    let after = recording.prompt_tokens_so_far();
    let seen = recording.seen.lock().unwrap().clone();
    let start = seen[0].1;
    let end = seen.get(1).map_or(after, |(_, s)| *s);
    LocalTurn {
        first: end - start,
        full,
        seen,
        answer: out.answer,
    }
}
