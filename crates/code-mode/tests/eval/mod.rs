//! The code-mode evaluation: multi-step tasks over the project's own tools and
//! real MCP servers, each run by a real `Agent` over real HTTP in native tool calling and in
//! code mode, with the model's requests recorded and counted. Used by
//! `examples/code_mode_eval.rs` (the table in docs/benchmarks.md) and by
//! `tests/code_mode_eval.rs` (a few tasks, so the evaluation cannot rot).
//!
//! The model is either the scripted server (a competent model's moves, decided from the request
//! it receives: it reads the real tool results and computes its answer from them) or, when
//! `OPENAI_BASE_URL` / `OPENAI_API_KEY` are set, a real model. Either way every request goes
//! through a recording proxy on 127.0.0.1, so model calls and prompt tokens are counted over
//! the exact bodies the model's server received.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

pub mod fixture;
pub mod proxy;
pub mod tasks;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_code_mode::{CodeLimits, CodeModeProvider, RUN_CODE};
use toolwright_core::{ToolContext, ToolError, ToolProvider, ToolSpec};
use toolwright_mcp_bridge::{DESCRIBE_TOOL, McpBridge, SEARCH_TOOL, ServiceConfig};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};
use toolwright_tool_system::{Agent, Dispatcher};

pub use tasks::{Needs, Task};

/// The system prompt of every run, in both modes.
pub const SYSTEM_PROMPT: &str = "You are a careful assistant. Use the tools to find facts; never guess. Paths are relative to the file server's root.";

/// The most model calls one run may make.
pub const MAX_ROUNDS: usize = 12;

/// How a task is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every tool's full schema in the request's `tools`; the model calls them one by one
    /// (several per round when they do not depend on each other).
    Native,
    /// Only `run_code` and `describe_function`; the model writes one script that ends with
    /// `final_answer(...)`: the script's reply ends the turn.
    Code,
    /// Code mode without `final_answer` ([`toolwright_code_mode::CodeModeBuilder::final_answer`] off): the
    /// script prints, and the model answers from what it printed in a second call.
    CodePrinted,
    /// Code mode with a more careful model: it first asks `describe_function` for every
    /// function its script will call (one round, in parallel), then writes the script.
    CodeDescribeFirst,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Code => "code mode",
            Mode::CodePrinted => "code mode, answering after the script",
            Mode::CodeDescribeFirst => "code mode, describing first",
        }
    }
}

/// One round of the model: the calls it made and their results, in order.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub calls: Vec<(String, Value)>,
    pub results: Vec<Value>,
}

/// A scripted model's next move.
#[derive(Debug, Clone)]
pub enum Move {
    Calls(Vec<(String, Value)>),
    Answer(String),
}

/// `(tool, arguments)` for [`Move::Calls`].
pub fn call(tool: &str, args: Value) -> (String, Value) {
    (tool.to_owned(), args)
}

/// The text of a tool result: MCP tools answer `{"content": "..."}`, others a string or JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(m) if m.len() == 1 && m.get("content").is_some_and(Value::is_string) => {
            m["content"].as_str().unwrap_or_default().to_owned()
        }
        other => other.to_string(),
    }
}

/// The conversation of the current run, read from a request body: the rounds after the last
/// user message.
pub fn turns_of(body: &Value) -> Vec<Turn> {
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);
    let start = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .map_or(0, |i| i + 1);
    let mut turns: Vec<Turn> = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    for m in &messages[start..] {
        if m["role"] == "assistant" {
            let mut t = Turn::default();
            ids.clear();
            for c in m["tool_calls"].as_array().unwrap_or(&empty) {
                let name = c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let args = c["function"]["arguments"]
                    .as_str()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or(Value::Null);
                ids.push(c["id"].as_str().unwrap_or_default().to_owned());
                t.calls.push((name, args));
            }
            t.results = vec![Value::Null; t.calls.len()];
            turns.push(t);
        } else if m["role"] == "tool"
            && let Some(t) = turns.last_mut()
        {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            let content = m["content"].as_str().unwrap_or_default();
            let value =
                serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.to_owned()));
            if let Some(i) = ids.iter().position(|x| x == id) {
                t.results[i] = value;
            }
        }
    }
    turns
}

/// The scripted model's move for `task` in `mode`, given the conversation so far.
pub fn scripted_move(task: &Task, mode: Mode, turns: &[Turn]) -> Move {
    match mode {
        Mode::Native => (task.native)(turns),
        Mode::CodeDescribeFirst if turns.is_empty() => Move::Calls(
            functions_called(&task.script)
                .into_iter()
                .map(|f| call(toolwright_code_mode::DESCRIBE_FUNCTION, json!({"name": f})))
                .collect(),
        ),
        Mode::Code | Mode::CodeDescribeFirst | Mode::CodePrinted => match turns
            .iter()
            .rev()
            .find(|t| t.calls.iter().any(|c| c.0 == RUN_CODE))
        {
            None if mode == Mode::CodePrinted => {
                Move::Calls(vec![call(RUN_CODE, json!({"code": task.script}))])
            }
            None => Move::Calls(vec![call(
                RUN_CODE,
                json!({"code": with_final_answer(&task.script)}),
            )]),
            // The script's reply ended the turn; the model is asked again only when it did not
            // (it failed, or printed instead).
            Some(t) => {
                let r = t.results.first().cloned().unwrap_or(Value::Null);
                match r.get("printed").and_then(Value::as_str) {
                    Some(printed) => Move::Answer(printed.trim().to_owned()),
                    None => Move::Answer(format!("The script failed: {}", text(&r))),
                }
            }
        },
    }
}

/// A task's script as a model that has `final_answer` writes it: the lines it would print are
/// collected, and the script ends by giving them to `final_answer` as the reply.
pub fn with_final_answer(script: &str) -> String {
    format!(
        "lines = []\ndef say(*parts):\n    lines.append(\" \".join(str(p) for p in parts))\n{}final_answer(\"\\n\".join(lines))\n",
        script.replace("print(", "say(")
    )
}

/// The tool functions a script calls, in order of first use: the project's own tools and the
/// MCP tools (`service__tool`).
pub fn functions_called(script: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let bytes = script.as_bytes();
    for (i, _) in script.match_indices('(') {
        let start = bytes[..i]
            .iter()
            .rposition(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
            .map_or(0, |p| p + 1);
        let name = &script[start..i];
        let is_tool = name.contains("__") || tasks::OWN_TOOLS.contains(&name);
        if is_tool && !out.iter().any(|o| o == name) {
            out.push(name.to_owned());
        }
    }
    out
}

fn reply_of(round: usize, m: Move) -> Reply {
    match m {
        Move::Answer(t) => Reply::text(t),
        Move::Calls(calls) => {
            let calls: Vec<(String, String, String)> = calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| (format!("call_{round}_{i}"), name, args.to_string()))
                .collect();
            let refs: Vec<(&str, &str, &str)> = calls
                .iter()
                .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
                .collect();
            Reply::tool_calls(&refs)
        }
    }
}

/// The MCP servers' JS entries: `MCP_SERVER_<NAME>` (EVERYTHING, FILESYSTEM, MEMORY), else
/// where `cargo xtask` installs them ([`testkit::npm_mcp_server`]).
pub fn server_entry(package: &str) -> Result<PathBuf, String> {
    testkit::npm_mcp_server(package)
}

/// The bridge's tools as plain native tools: every tool's full schema, none of the bridge's
/// own describe/search tools (the baseline: what an application gets without tiering).
struct PlainBridge(McpBridge);

#[async_trait::async_trait]
impl ToolProvider for PlainBridge {
    fn provider_name(&self) -> &str {
        "mcp"
    }
    async fn list(&self) -> Vec<ToolSpec> {
        self.0
            .list()
            .await
            .into_iter()
            .filter(|s| *s.name != *DESCRIBE_TOOL && *s.name != *SEARCH_TOOL)
            .collect()
    }
    async fn call(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<toolwright_core::ToolOutput, ToolError> {
        ToolProvider::call(&self.0, name, args, ctx).await
    }
    fn timeout(&self, name: &str) -> Option<Duration> {
        self.0.timeout(name)
    }
}

/// The tools of one mode's run: a fresh fixture directory and knowledge graph, the servers.
pub struct Env {
    pub fixture: tempfile::TempDir,
    pub bridge: McpBridge,
    graph_dir: tempfile::TempDir,
    own: Arc<toolwright_tool_system::ToolRegistry>,
    plain: Arc<PlainBridge>,
    /// The sandbox's temporary files.
    sandbox_temp: tempfile::TempDir,
}

impl Env {
    /// Starts the servers `needs` asks for, over a fresh fixture.
    pub async fn start(needs: Needs) -> Result<Env, String> {
        let fixture = fixture::create().map_err(|e| format!("fixture: {e}"))?;
        // The knowledge graph's file, outside the directory the filesystem server serves.
        let graph_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let bridge = McpBridge::new();
        let node = |name: &str, package: &str| -> Result<ServiceConfig, String> {
            Ok(ServiceConfig::new(name, "node")
                .with_args([server_entry(package)?.to_string_lossy().into_owned()])
                .with_call_timeout(Duration::from_secs(20))
                .with_startup_timeout(Duration::from_secs(30)))
        };
        let mut started = Vec::new();
        if needs.fs {
            bridge
                .register(
                    node("fs", "server-filesystem")?
                        .with_args([
                            server_entry("server-filesystem")?
                                .to_string_lossy()
                                .into_owned(),
                            fixture.path().to_string_lossy().into_owned(),
                        ])
                        .with_cwd(fixture.path()),
                )
                .map_err(|e| e.to_string())?;
            started.push("fs");
        }
        if needs.memory {
            let graph = graph_dir.path().join("graph.jsonl");
            bridge
                .register(
                    node("memory", "server-memory")?
                        .with_env("MEMORY_FILE_PATH", graph.to_string_lossy()),
                )
                .map_err(|e| e.to_string())?;
            started.push("memory");
        }
        if needs.everything {
            bridge
                .register(
                    node("everything", "server-everything")?
                        .with_args([
                            server_entry("server-everything")?
                                .to_string_lossy()
                                .into_owned(),
                            "stdio".to_owned(),
                        ])
                        .with_enabled_tools(["get-sum"]),
                )
                .map_err(|e| e.to_string())?;
            started.push("everything");
        }
        for s in started {
            bridge
                .start(s)
                .await
                .map_err(|e| format!("starting {s}: {e}"))?;
        }
        Ok(Env {
            fixture,
            bridge: bridge.clone(),
            graph_dir,
            own: Arc::new(tasks::own_tools()),
            plain: Arc::new(PlainBridge(bridge)),
            sandbox_temp: tempfile::tempdir().map_err(|e| e.to_string())?,
        })
    }

    pub fn root(&self) -> &Path {
        self.fixture.path()
    }

    /// The agent of `mode` over `model`.
    fn agent(&self, mode: Mode, model: OpenAiModel) -> Result<Agent, String> {
        let b = Agent::builder(model)
            .system_prompt(SYSTEM_PROMPT)
            .max_iterations(MAX_ROUNDS);
        let b = match mode {
            Mode::Native => b
                .provider(self.own.clone())
                .provider(self.plain.clone() as Arc<dyn ToolProvider>),
            Mode::Code | Mode::CodeDescribeFirst => b.provider(Arc::new(self.code_provider(true)?)),
            Mode::CodePrinted => b.provider(Arc::new(self.code_provider(false)?)),
        };
        b.build().map_err(|e| e.to_string())
    }

    /// Code mode over the same tools as native mode; `final_answer` offered or not.
    pub fn code_provider(&self, final_answer: bool) -> Result<CodeModeProvider, String> {
        let tools = Dispatcher::new()
            .with_provider(self.own.clone())
            .with_provider(self.plain.clone() as Arc<dyn ToolProvider>);
        let mut config = toolwright_sandbox::SandboxConfig::default();
        config.temp_root = Some(self.sandbox_temp.path().to_path_buf());
        CodeModeProvider::builder(Arc::new(tools))
            .limits(CodeLimits::default().with_time_limit(Duration::from_secs(60)))
            .sandbox_config(config)
            .final_answer(final_answer)
            .build()
            .map_err(|e| e.to_string())
    }

    /// The `tools` of a request in `mode`: what the model is shown.
    pub async fn shown_tools(&self, mode: Mode) -> Result<Vec<ToolSpec>, String> {
        Ok(match mode {
            Mode::Native => {
                let mut v = ToolProvider::list(self.own.as_ref()).await;
                v.extend(self.plain.list().await);
                v
            }
            Mode::Code | Mode::CodeDescribeFirst => self.code_provider(true)?.list().await,
            Mode::CodePrinted => self.code_provider(false)?.list().await,
        })
    }

    pub async fn stop(self) {
        self.bridge.stop_all().await;
    }
}

/// The task the scripted model is playing, and in which mode.
pub type Current = Arc<Mutex<Option<(Arc<Task>, Mode)>>>;

/// Which model plays.
pub enum Player {
    /// The scripted server plays each task's moves.
    Scripted(ScriptedServer, Current),
    /// A real model (from the `OPENAI_*` environment variables).
    Real(OpenAiConfig),
}

impl Player {
    /// The real model when `OPENAI_BASE_URL` or `OPENAI_API_KEY` is set, else the scripted one.
    pub async fn from_env() -> Result<Player, String> {
        match OpenAiConfig::from_env().map_err(|e| e.to_string())? {
            Some(cfg) => Ok(Player::Real(cfg)),
            None => Ok(Player::scripted().await),
        }
    }

    pub async fn scripted() -> Player {
        let server = ScriptedServer::start().await;
        server.set_recording(false);
        let current: Current = Arc::default();
        let c = current.clone();
        server.respond_with(move |body| {
            let Some((task, mode)) = c.lock().unwrap().clone() else {
                return Reply::status(500, "no task is running");
            };
            let turns = turns_of(body);
            reply_of(turns.len(), scripted_move(&task, mode, &turns))
        });
        Player::Scripted(server, current)
    }

    pub fn is_real(&self) -> bool {
        matches!(self, Player::Real(_))
    }

    /// The model's name, for the report.
    pub fn describe(&self) -> String {
        match self {
            Player::Scripted(..) => "the scripted server (a competent model's moves)".into(),
            Player::Real(cfg) => format!("{} at {}", cfg.model, cfg.base_url),
        }
    }

    fn upstream(&self) -> String {
        match self {
            Player::Scripted(s, _) => s.base_url(),
            Player::Real(cfg) => cfg.base_url.clone(),
        }
    }

    fn model(&self, proxy: &str) -> OpenAiModel {
        let cfg = match self {
            Player::Scripted(..) => OpenAiConfig::new("scripted"),
            Player::Real(cfg) => cfg.clone(),
        };
        OpenAiModel::new(cfg.with_base_url(proxy)).unwrap()
    }
}

/// One task's run in one mode.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub task: &'static str,
    /// Rounds of dependent tool calls a competent native model needs.
    pub steps: usize,
    pub mode: Mode,
    /// Requests the model's server received.
    pub model_calls: usize,
    /// Tokens (o200k_base) of every request's messages and tools, added up.
    pub prompt_tokens: usize,
    /// The largest single request, in tokens.
    pub largest_request: usize,
    /// Tokens of the first request's `tools` field alone (the per-request cost of the tools).
    pub tools_tokens: usize,
    /// `Ok` when the final answer passed the task's check, else why not.
    pub outcome: Result<(), String>,
    pub answer: String,
}

/// Tokens of one request body: its `messages` and `tools` as the JSON sent, o200k_base.
pub fn request_tokens(body: &Value) -> usize {
    let part = json!({"messages": body["messages"], "tools": body.get("tools").cloned().unwrap_or(json!([]))});
    tokens(&part.to_string())
}

pub fn tokens(text: &str) -> usize {
    static BPE: std::sync::OnceLock<tiktoken_rs::CoreBPE> = std::sync::OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().unwrap())
        .encode_with_special_tokens(text)
        .len()
}

/// Runs `tasks` in `mode` (one fresh [`Env`] for the mode), in order.
pub async fn run_mode(
    player: &Player,
    tasks: &[Arc<Task>],
    mode: Mode,
) -> Result<Vec<RunResult>, String> {
    let needs = tasks.iter().fold(Needs::default(), |a, t| a.union(t.needs));
    let env = Env::start(needs).await?;
    let proxy = proxy::Proxy::start(player.upstream()).await;
    let agent = env.agent(mode, player.model(&proxy.base_url()))?;
    let mut out = Vec::new();
    for task in tasks {
        if let Player::Scripted(_, current) = player {
            *current.lock().unwrap() = Some((task.clone(), mode));
        }
        let before = proxy.requests().len();
        let session = format!("{}-{}", task.id, mode.name());
        let run = agent.run(&session, &task.prompt).await;
        let bodies: Vec<Value> = proxy.requests()[before..].to_vec();
        let per: Vec<usize> = bodies.iter().map(request_tokens).collect();
        let (answer, outcome) = match run {
            Ok(o) if o.hit_iteration_limit => (
                o.answer.clone(),
                Err(format!("stopped at the round limit ({MAX_ROUNDS})")),
            ),
            Ok(o) => {
                let outcome = (task.check)(&o.answer, env.root());
                (o.answer, outcome)
            }
            Err(e) => (String::new(), Err(format!("the run failed: {e}"))),
        };
        out.push(RunResult {
            task: task.id,
            steps: task.steps,
            mode,
            model_calls: bodies.len(),
            prompt_tokens: per.iter().sum(),
            largest_request: per.iter().copied().max().unwrap_or(0),
            tools_tokens: bodies
                .first()
                .and_then(|b| b.get("tools"))
                .map_or(0, |t| tokens(&t.to_string())),
            outcome,
            answer,
        });
    }
    env.stop().await;
    Ok(out)
}

/// The side-by-side table (markdown), totals and ratios; each of `extra` (runs of other modes,
/// e.g. [`Mode::CodePrinted`], [`Mode::CodeDescribeFirst`]) adds three columns.
pub fn report(native: &[RunResult], code: &[RunResult], extra: &[Vec<RunResult>]) -> String {
    let extra: Vec<&Vec<RunResult>> = extra.iter().filter(|e| !e.is_empty()).collect();
    let mut s = String::from(
        "| task | steps | calls: native | code | prompt tokens: native | code | largest request: native | code | result: native | code |",
    );
    for e in &extra {
        s.push_str(&format!(" {}: calls | tokens | result |", e[0].mode.name()));
    }
    s.push_str("\n|---|---|---|---|---|---|---|---|---|---|");
    for _ in &extra {
        s.push_str("---|---|---|");
    }
    s.push('\n');
    let ok = |r: &RunResult| if r.outcome.is_ok() { "pass" } else { "FAIL" };
    let sum = |rs: &[RunResult], f: fn(&RunResult) -> usize| rs.iter().map(f).sum::<usize>();
    for (i, (n, c)) in native.iter().zip(code).enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            n.task,
            n.steps,
            n.model_calls,
            c.model_calls,
            n.prompt_tokens,
            c.prompt_tokens,
            n.largest_request,
            c.largest_request,
            ok(n),
            ok(c)
        ));
        for x in extra.iter().filter_map(|e| e.get(i)) {
            s.push_str(&format!(
                " {} | {} | {} |",
                x.model_calls,
                x.prompt_tokens,
                ok(x)
            ));
        }
        s.push('\n');
    }
    let calls = |rs: &[RunResult]| sum(rs, |r| r.model_calls);
    let toks = |rs: &[RunResult]| sum(rs, |r| r.prompt_tokens);
    let passed = |rs: &[RunResult]| sum(rs, |r| usize::from(r.outcome.is_ok()));
    s.push_str(&format!(
        "| **total ({} tasks)** | | **{}** | **{}** | **{}** | **{}** | | | **{}/{}** | **{}/{}** |",
        native.len(),
        calls(native),
        calls(code),
        toks(native),
        toks(code),
        passed(native),
        native.len(),
        passed(code),
        code.len()
    ));
    for e in &extra {
        s.push_str(&format!(
            " **{}** | **{}** | **{}/{}** |",
            calls(e),
            toks(e),
            passed(e),
            e.len()
        ));
    }
    s.push('\n');
    let ratio = |a: usize, b: usize| a as f64 / b.max(1) as f64;
    s.push_str(&format!(
        "\nNative / code mode: model calls {:.2}× (goal ≥ 3×), prompt tokens {:.2}× (goal ≥ 5×); results (success rate): native {}/{} ({:.0} %), code mode {}/{} ({:.0} %).\n",
        ratio(calls(native), calls(code)),
        ratio(toks(native), toks(code)),
        passed(native),
        native.len(),
        100.0 * ratio(passed(native), native.len()),
        passed(code),
        code.len(),
        100.0 * ratio(passed(code), code.len())
    ));
    for e in &extra {
        s.push_str(&format!(
            "Native / {}: model calls {:.2}×, prompt tokens {:.2}×; results {}/{}.\n",
            e[0].mode.name(),
            ratio(calls(native), calls(e)),
            ratio(toks(native), toks(e)),
            passed(e),
            e.len()
        ));
    }
    let deep = |rs: &[RunResult]| -> Vec<RunResult> {
        rs.iter().filter(|r| r.steps >= 3).cloned().collect()
    };
    let (dn, dc) = (deep(native), deep(code));
    s.push_str(&format!(
        "Tasks of 3 or more dependent steps ({}): model calls {} vs {} ({:.2}×), prompt tokens {} vs {} ({:.2}×).\n",
        dn.len(),
        calls(&dn),
        calls(&dc),
        ratio(calls(&dn), calls(&dc)),
        toks(&dn),
        toks(&dc),
        ratio(toks(&dn), toks(&dc))
    ));
    let tools = |rs: &[RunResult]| rs.iter().map(|r| r.tools_tokens).max().unwrap_or(0);
    s.push_str(&format!(
        "The `tools` field alone, per request: native {} tokens, code mode {} tokens.\n",
        tools(native),
        tools(code)
    ));
    s
}
