//! # code-mode — the model writes one short script that calls tools as functions
//!
//! [`CodeModeProvider`] is a [`ToolProvider`] with two tools:
//!
//! * [`RUN_CODE`] (`{"code": "..."}`): runs a Python 3 script in the `sandbox` (one
//!   bubblewrap container per script, no network, bounded CPU, memory, time and output). In the
//!   script every tool of the [`Dispatcher`] it was built over is a Python function; each call
//!   goes back to the agent over the sandbox's pipes and through that dispatcher — schema
//!   validation, the tool's time limit, the result cap and the trace span apply per call, as
//!   for a direct call — and a failure comes back as a Python exception the script can catch
//!   (`ToolTimeout`, `InvalidArguments`, `ResultTooLarge`, … all subclasses of `ToolError`).
//!   The model gets only what the script printed (capped, with a note) and the list of calls
//!   it made.
//! * [`DESCRIBE_FUNCTION`] (`{"name": "..."}`): one function's full description (level 2).
//!   `run_code`'s own description lists each function as a typed signature generated from
//!   the tool's JSON Schema with its level-1 line (the first sentence of its description).
//!
//! Because code mode is a tool, it works with every provider, every call protocol (native,
//! JSON decision, tags) and the local model. Design and threat model: `docs/code-mode.md`.
//!
//! ```no_run
//! # async fn demo(model: impl toolwright_core::ChatModel + 'static, registry: toolwright_tool_system::ToolRegistry) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use toolwright_code_mode::{CodeLimits, CodeModeProvider};
//! use toolwright_tool_system::{Agent, Dispatcher};
//! // The tools scripts may call, behind their own dispatcher (limits, caps, validation).
//! let tools = Arc::new(Dispatcher::from_registry(registry));
//! // Blocking (it checks the sandbox once): at start-up, or in `spawn_blocking`.
//! let code = CodeModeProvider::builder(tools).limits(CodeLimits::default()).build()?;
//! let agent = Agent::builder(model).provider(Arc::new(code)).build()?;
//! let out = agent.run("s1", "Compare the weather in Paris and Oslo").await?;
//! println!("{}", out.answer);
//! # Ok(()) }
//! ```

mod run;
mod signature;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolwright_core::{
    EstimateCounter, TokenCounter, ToolContext, ToolError, ToolProvider, ToolSpec, TurnInfo,
};
use toolwright_sandbox::{Program, Sandbox, SandboxConfig};
use toolwright_tool_search::{Hit, HybridConfig, SearchIndex, ToolDoc, embedding_text};
use toolwright_tool_system::{ApprovalPolicy, Dispatcher};

use crate::signature::Function;

/// The tool that runs a script.
pub const RUN_CODE: &str = "run_code";
/// The tool that gives one function's full description.
pub const DESCRIBE_FUNCTION: &str = "describe_function";
/// The function that ends a script with the turn's reply ([`CodeModeBuilder::final_answer`]).
pub const FINAL_ANSWER: &str = "final_answer";
/// The tool that finds functions by what they do, offered when there are too many functions to
/// list ([`CodeModeBuilder::search_budget_tokens`]).
pub const SEARCH_FUNCTIONS: &str = "search_functions";
/// How many functions `run_code`'s description lists for a turn when they are searched, and
/// how many [`SEARCH_FUNCTIONS`] returns by default.
const SEARCHED: usize = 8;
/// The most functions one [`SEARCH_FUNCTIONS`] call returns.
const MAX_SEARCHED: usize = 20;

/// The Python runner: defines the functions, runs the script, speaks the frames.
const RUNNER: &str = include_str!("runner.py");

/// The bounds of one script.
///
/// ```
/// use toolwright_code_mode::CodeLimits;
/// use std::time::Duration;
/// let l = CodeLimits::default().with_max_calls(5).with_time_limit(Duration::from_secs(10));
/// assert_eq!((l.max_calls, l.shown_output_bytes), (5, 8 * 1024));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CodeLimits {
    /// Tool calls one script may make (default 20). The call past it raises
    /// `CallLimitExceeded` in the script; a call after that stops the script.
    pub max_calls: usize,
    /// Wall-clock limit of a script, its tool calls included (default 30 s).
    pub time_limit: Duration,
    /// CPU seconds of the script's process (default 10).
    pub cpu_seconds: u64,
    /// Address space of the script's process (default 512 MiB).
    pub memory_bytes: u64,
    /// Printed bytes given to the model (default 8 KiB); the rest is cut, with a note.
    pub shown_output_bytes: usize,
    /// Printed bytes at which the script is stopped as an output flood (default 1 MiB).
    pub max_output_bytes: usize,
}

impl Default for CodeLimits {
    fn default() -> Self {
        Self {
            max_calls: 20,
            time_limit: Duration::from_secs(30),
            cpu_seconds: 10,
            memory_bytes: 512 << 20,
            shown_output_bytes: 8 << 10,
            max_output_bytes: 1 << 20,
        }
    }
}

impl CodeLimits {
    /// Set the tool calls per script.
    pub fn with_max_calls(mut self, n: usize) -> Self {
        self.max_calls = n;
        self
    }
    /// Set the wall-clock limit of a script.
    pub fn with_time_limit(mut self, t: Duration) -> Self {
        self.time_limit = t;
        self
    }
    /// Set the CPU seconds of a script.
    pub fn with_cpu_seconds(mut self, s: u64) -> Self {
        self.cpu_seconds = s;
        self
    }
    /// Set the printed bytes shown to the model, and the printed bytes that stop a script.
    pub fn with_output(mut self, shown: usize, max: usize) -> Self {
        self.shown_output_bytes = shown.max(64);
        self.max_output_bytes = max.max(self.shown_output_bytes);
        self
    }
}

/// Why code mode could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodeModeError {
    /// The sandbox refuses to run anything here (no container, weaker boundary not accepted).
    #[error("code mode cannot run scripts: {0}")]
    NoSandbox(String),
    /// The runner's files could not be written where the sandbox can read them.
    #[error(
        "code mode cannot set up its runner: {0}; check that the temp directory (SandboxConfig::temp_root, or TMPDIR) is writable and readable by other users"
    )]
    Runner(String),
}

/// Builds a [`CodeModeProvider`]; see [`CodeModeProvider::builder`].
#[derive(Debug)]
pub struct CodeModeBuilder {
    tools: Arc<Dispatcher>,
    sandbox: SandboxConfig,
    limits: CodeLimits,
    policy: ApprovalPolicy,
    inherit_agent_approvals: bool,
    python: String,
    final_answer: bool,
    search_budget_tokens: usize,
    embedder: EmbedderSlot,
}

/// The encoder for search by meaning, shown by its id in `Debug`.
#[derive(Clone)]
struct EmbedderSlot(Option<Arc<dyn toolwright_core::Embedder>>);

impl std::fmt::Debug for EmbedderSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_ref().map_or("none", |e| e.id()))
    }
}

impl CodeModeBuilder {
    /// Search by meaning: past the search budget, the functions listed for a turn and
    /// [`SEARCH_FUNCTIONS`]' answers rank by BM25 fused with `embedder`'s vectors (the same
    /// hybrid search as the MCP bridge, `toolwright_tool_search::SearchIndex::search_hybrid`). The
    /// functions are encoded once per list of functions. An encoder that fails leaves the search
    /// to BM25, with a `tracing` warning (until the list of functions changes).
    pub fn embedder(mut self, embedder: Arc<dyn toolwright_core::Embedder>) -> Self {
        self.embedder = EmbedderSlot(Some(embedder));
        self
    }
    /// The size past which `run_code`'s description stops listing every function (default
    /// 2,000 tokens, about 60 functions; the MCP bridge's tool-search budget). Past it, a turn's
    /// `run_code` lists the functions that best match the person's request (BM25, the
    /// `tool-search` crate, English and Chinese), says how many there are, and the model gets
    /// [`SEARCH_FUNCTIONS`] to find others; every function can still be called in scripts.
    /// `0`: always search; `usize::MAX`: always list all.
    pub fn search_budget_tokens(mut self, tokens: usize) -> Self {
        self.search_budget_tokens = tokens;
        self
    }
    /// Whether scripts get `final_answer(text)` (default `true`): it ends the script, and
    /// `text` is the turn's reply as it is ([`ToolProvider::final_answer`]) — the whole task in
    /// one model call. Off: the model always reads what the script printed and answers itself.
    pub fn final_answer(mut self, on: bool) -> Self {
        self.final_answer = on;
        self
    }
    /// The bounds of one script.
    pub fn limits(mut self, limits: CodeLimits) -> Self {
        self.limits = limits;
        self
    }
    /// The sandbox's configuration (default: [`SandboxConfig::default`]). Its time, CPU and
    /// memory limits are replaced by those of [`CodeLimits`]; its output limit is raised to fit
    /// [`CodeLimits::max_output_bytes`].
    pub fn sandbox_config(mut self, config: SandboxConfig) -> Self {
        self.sandbox = config;
        self
    }
    /// More approval rules for scripts' calls, beside the agent's: a script's call that they
    /// (or the tool) say needs approval is refused — a script cannot wait for a person — with
    /// `ApprovalRequired`, telling the model to call the tool directly. The agent's own rules
    /// (`AgentBuilder::require_approval`, and its tools' `needs_approval`) apply without this:
    /// they come with every call the agent makes ([`ToolContext::approval_gate`]).
    pub fn approval_policy(mut self, policy: ApprovalPolicy) -> Self {
        self.policy = policy;
        self
    }
    /// Whether a script's call that the calling agent would hold for approval is refused
    /// (default `true`). `false` lets scripts run calls the agent gates, with only
    /// [`Self::approval_policy`] and the tools' own `needs_approval` refusing: say so only when
    /// the tools scripts reach are not the ones the agent gates.
    pub fn inherit_agent_approvals(mut self, on: bool) -> Self {
        self.inherit_agent_approvals = on;
        self
    }
    /// The Python interpreter inside the sandbox (default `python3`, looked up in
    /// `/usr/local/bin:/usr/bin:/bin` of the container).
    pub fn python(mut self, program: impl Into<String>) -> Self {
        self.python = program.into();
        self
    }

    /// Writes the runner, makes the sandbox and checks that it can run scripts. Blocking (the
    /// sandbox checks bubblewrap once, tens of milliseconds).
    pub fn build(self) -> Result<CodeModeProvider, CodeModeError> {
        let mut config = self.sandbox;
        let l = &self.limits;
        config.timeout = l.time_limit;
        config.max_timeout = config.max_timeout.max(l.time_limit);
        config.cpu_seconds = l.cpu_seconds;
        config.memory_bytes = l.memory_bytes;
        // Frames: the printed text (escaped as JSON, so up to 6 bytes a byte), the calls'
        // arguments and the runner's own lines.
        config.output_limit = config
            .output_limit
            .max(l.max_output_bytes.saturating_mul(6).saturating_add(1 << 20));
        let dir = write_runner(config.temp_root.as_deref(), &self.python)?;
        let sandbox = Sandbox::new(config);
        if let Some(why) = &sandbox.protections().refused {
            return Err(CodeModeError::NoSandbox(why.clone()));
        }
        // The runner is a program of the sandbox's (no SKILL.md in between): the interpreter,
        // isolated (`-I`: no user site, no PYTHON* variables; `-S`: no site module), on the
        // runner file of its directory. No variable of the agent is asked for; the time limit
        // is the configuration's (`CodeLimits::time_limit`, set above).
        let runner = Program::new(
            RUN_CODE,
            dir.path(),
            [&*self.python, "-I", "-S", "runner.py"],
        );
        runner.check().map_err(CodeModeError::Runner)?;
        tracing::info!(protections = %sandbox.protections(), "code mode ready");
        Ok(CodeModeProvider {
            tools: self.tools,
            sandbox,
            runner,
            limits: self.limits,
            policy: self.policy,
            inherit_agent_approvals: self.inherit_agent_approvals,
            final_answer: self.final_answer,
            search_budget_tokens: self.search_budget_tokens,
            embedder: self.embedder.0,
            index: std::sync::Mutex::new(None),
            _dir: dir,
        })
    }
}

fn write_runner(
    temp_root: Option<&std::path::Path>,
    python: &str,
) -> Result<tempfile::TempDir, CodeModeError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |e: std::io::Error| CodeModeError::Runner(e.to_string());
    let mut b = tempfile::Builder::new();
    b.prefix("code-mode-runner-");
    let dir = match temp_root {
        Some(root) => b.tempdir_in(root),
        None => b.tempdir(),
    }
    .map_err(err)?;
    if python.is_empty() || python.chars().any(char::is_whitespace) {
        return Err(CodeModeError::Runner(format!(
            "the Python program {python:?} must be one word"
        )));
    }
    std::fs::write(dir.path().join("runner.py"), RUNNER).map_err(err)?;
    // Readable by every uid: as root, scripts run as a uid of their own.
    for (path, mode) in [
        (dir.path().to_path_buf(), 0o755),
        (dir.path().join("runner.py"), 0o644),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(err)?;
    }
    Ok(dir)
}

/// The code tool over the tools of one [`Dispatcher`]; see the crate docs.
pub struct CodeModeProvider {
    tools: Arc<Dispatcher>,
    sandbox: Sandbox,
    /// The runner as the sandbox runs it.
    runner: Program,
    limits: CodeLimits,
    policy: ApprovalPolicy,
    /// [`CodeModeBuilder::inherit_agent_approvals`].
    inherit_agent_approvals: bool,
    /// Scripts get `final_answer()` ([`CodeModeBuilder::final_answer`]).
    final_answer: bool,
    /// [`CodeModeBuilder::search_budget_tokens`].
    search_budget_tokens: usize,
    /// [`CodeModeBuilder::embedder`].
    embedder: Option<Arc<dyn toolwright_core::Embedder>>,
    /// The search index over the functions, with the names it was built from.
    index: std::sync::Mutex<Option<(Vec<String>, Arc<SearchIndex>)>>,
    /// The runner's files, removed with the provider.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for CodeModeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModeProvider")
            .field("tools", &self.tools)
            .field("limits", &self.limits)
            .field("sandbox", &self.sandbox)
            .finish()
    }
}

impl CodeModeProvider {
    /// A builder over `tools`: every tool it lists becomes a function in scripts, and every
    /// call a script makes is dispatched by it. Give it the tools you want scripts to reach
    /// (usually the same providers as the agent's, without this one).
    pub fn builder(tools: Arc<Dispatcher>) -> CodeModeBuilder {
        CodeModeBuilder {
            tools,
            sandbox: SandboxConfig::default(),
            limits: CodeLimits::default(),
            policy: ApprovalPolicy::new(),
            inherit_agent_approvals: true,
            python: "python3".to_owned(),
            final_answer: true,
            search_budget_tokens: 2_000,
            embedder: EmbedderSlot(None),
        }
    }

    /// The limits of one script.
    pub fn limits(&self) -> &CodeLimits {
        &self.limits
    }

    /// The sandbox scripts run in: its [`Sandbox::protections`] say which boundaries hold.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The tools as functions, one per Python name (the first tool wins a clash; logged).
    async fn functions(&self) -> Vec<Function> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for spec in self.tools.specs().await {
            if [RUN_CODE, DESCRIBE_FUNCTION, SEARCH_FUNCTIONS].contains(&&*spec.name) {
                continue;
            }
            let f = Function::new(&spec);
            if names.insert(f.name.clone()) {
                out.push(f);
            } else {
                tracing::warn!(tool = %spec.name, function = %f.name, "another tool has this Python name; not bound in code mode");
            }
        }
        out
    }

    /// Whether scripts get `final_answer()`: on, and no bound tool has that name.
    fn offers_final_answer(&self, functions: &[Function]) -> bool {
        self.final_answer && !functions.iter().any(|f| f.name == FINAL_ANSWER)
    }

    /// Whether listing every function would pass the search budget.
    fn over_budget(&self, functions: &[Function]) -> bool {
        if self.search_budget_tokens == usize::MAX {
            return false;
        }
        let listing: String = functions.iter().map(|f| f.brief() + "\n").collect();
        EstimateCounter.count_text(&listing) > self.search_budget_tokens
    }

    /// The search index over `functions` (built once per list of functions), with their
    /// vectors when there is an encoder.
    async fn index(&self, functions: &[Function]) -> Arc<SearchIndex> {
        let names: Vec<String> = functions.iter().map(|f| f.name.clone()).collect();
        {
            let cached = self.index.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((built_from, index)) = cached.as_ref()
                && *built_from == names
            {
                return Arc::clone(index);
            }
        }
        let docs: Vec<ToolDoc> = functions
            .iter()
            .map(|f| ToolDoc::new(f.name.clone(), f.description()))
            .collect();
        let index = match &self.embedder {
            None => SearchIndex::new(docs),
            Some(e) => {
                let texts: Vec<String> = docs.iter().map(embedding_text).collect();
                let mut vectors = Ok(Vec::with_capacity(texts.len()));
                for chunk in texts.chunks(32) {
                    match e.embed(chunk, toolwright_core::EmbedKind::Document).await {
                        Ok(v) if v.len() == chunk.len() => {
                            if let Ok(all) = vectors.as_mut() {
                                all.extend(v);
                            }
                        }
                        Ok(v) => {
                            vectors = Err(format!("{} vectors for {} texts", v.len(), chunk.len()));
                            break;
                        }
                        Err(err) => {
                            vectors = Err(err.to_string());
                            break;
                        }
                    }
                }
                // The same fusion and "no tool fits" judge as the MCP bridge's search.
                match vectors.and_then(|v| {
                    SearchIndex::new(docs.clone())
                        .with_hybrid(HybridConfig::for_encoder(e.id(), docs.len()))
                        .with_vectors(v)
                        .map_err(|err| err.to_string())
                }) {
                    Ok(index) => index,
                    Err(why) => {
                        tracing::warn!(
                            encoder = e.id(),
                            "encoding the functions failed ({why}); searching them by words alone"
                        );
                        SearchIndex::new(docs)
                    }
                }
            }
        };
        let index = Arc::new(index);
        *self.index.lock().unwrap_or_else(|p| p.into_inner()) = Some((names, Arc::clone(&index)));
        index
    }

    /// The functions that best match `query`, best first: BM25, fused with the query's vector
    /// when there is an encoder (BM25 alone when it fails).
    async fn search<'f>(
        &self,
        functions: &'f [Function],
        query: &str,
        limit: usize,
    ) -> Vec<&'f Function> {
        let index = self.index(functions).await;
        let hits: Vec<Hit> = match &self.embedder {
            Some(e) if index.has_vectors() => {
                let text: String = query
                    .chars()
                    .take(toolwright_tool_search::MAX_QUERY_CHARS)
                    .collect();
                match e.embed(&[text], toolwright_core::EmbedKind::Query).await {
                    Ok(v) if v.len() == 1 => index
                        .search_hybrid(query, &v[0], limit)
                        .unwrap_or_else(|err| {
                            tracing::warn!(
                                encoder = e.id(),
                                "the query's vector was refused ({err}); searching by words alone"
                            );
                            index.search(query, limit)
                        }),
                    Ok(_) | Err(_) => {
                        tracing::warn!(
                            encoder = e.id(),
                            "encoding the search query failed; searching by words alone"
                        );
                        index.search(query, limit)
                    }
                }
            }
            _ => index.search(query, limit),
        };
        hits.into_iter()
            .filter_map(|h| functions.get(h.index))
            .collect()
    }

    /// `run_code`'s description: what it does, its limits, and the level-1 line of each
    /// function of `listed` (`None`: all of them).
    fn run_code_description(&self, functions: &[Function], listed: Option<&[&Function]>) -> String {
        let l = &self.limits;
        let mut s = format!(
            "Run a short Python 3 script (standard library only) in a sandbox (no network, no host files). In it, the tools below are functions: call several, combine their results in code, and print() only what you need. You get back only the printed text (at most {}) and the list of calls made. A failed call raises ToolError (.kind, .message; subclasses ToolTimeout, InvalidArguments, ToolNotFound, ToolUnavailable, ToolCrashed, ResultTooLarge, ApprovalRequired, CallLimitExceeded), which the script can catch. Limits per script: {} tool calls, {} s. Full description of one function: call {DESCRIBE_FUNCTION}.",
            toolwright_sandbox::human_bytes(l.shown_output_bytes),
            l.max_calls,
            l.time_limit.as_secs_f64()
        );
        if self.offers_final_answer(functions) {
            s.push_str(&format!(
                " When the script has the user's answer, end it with {FINAL_ANSWER}(text): text is your reply to the user as it is, with no further step."
            ));
        }
        let listed: Vec<&Function> = match listed {
            Some(l) => l.to_vec(),
            None => functions.iter().collect(),
        };
        if listed.len() < functions.len() {
            s.push_str(&format!(
                " There are {} functions; listed are the {} that best match the request. To find others by what they do, call {SEARCH_FUNCTIONS} (a tool, not a function); every function can be called in scripts.",
                functions.len(),
                listed.len()
            ));
        }
        s.push_str("\nFunctions (keyword arguments; each returns the tool's JSON result):");
        if functions.is_empty() {
            s.push_str("\n(none: no tools are bound)");
        }
        for f in listed {
            s.push('\n');
            s.push_str(&f.brief());
        }
        s
    }

    /// The tools: `run_code` (listing `listed`, or every function), `describe_function`, and
    /// [`SEARCH_FUNCTIONS`] when `search` (the functions are over the search budget).
    fn specs(
        &self,
        functions: &[Function],
        listed: Option<&[&Function]>,
        search: bool,
    ) -> Vec<ToolSpec> {
        let mut specs = vec![
            ToolSpec::new(
                RUN_CODE,
                self.run_code_description(functions, listed),
                json!({
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": "Python 3 source; print() what you want to see"}},
                    "required": ["code"]
                }),
            ),
            ToolSpec::new(
                DESCRIBE_FUNCTION,
                format!(
                    "Returns the full description of one function available in {RUN_CODE} scripts: its typed signature, every parameter and what it returns."
                ),
                json!({
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "The function's name (or its tool's)"}},
                    "required": ["name"]
                }),
            ),
        ];
        if search {
            specs.push(ToolSpec::new(
                SEARCH_FUNCTIONS,
                format!(
                    "Finds functions for {RUN_CODE} scripts by what they do. Give a few words (English works best; Chinese works too); returns the best matching functions' signatures and one-line docs."
                ),
                json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "Words for what you need, e.g. \"read a file\""},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCHED, "description": format!("How many functions to return (default {SEARCHED})")}
                    },
                    "required": ["query"]
                }),
            ));
        }
        specs
    }

    /// [`SEARCH_FUNCTIONS`]'s answer: the matching functions' lines.
    async fn search_answer(
        &self,
        functions: &[Function],
        args: &Value,
    ) -> Result<Value, ToolError> {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .ok_or_else(|| {
                self.invalid_arguments(SEARCH_FUNCTIONS, "/query: a non-empty string is required")
            })?;
        let limit = match args.get("limit") {
            None | Some(Value::Null) => SEARCHED,
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=MAX_SEARCHED as u64).contains(n))
                .map(|n| n as usize)
                .ok_or_else(|| {
                    self.invalid_arguments(
                        SEARCH_FUNCTIONS,
                        &format!("/limit: a whole number from 1 to {MAX_SEARCHED} is required"),
                    )
                })?,
        };
        let found = self.search(functions, query, limit).await;
        if found.is_empty() {
            return Ok(Value::String(format!(
                "No function fits \"{query}\". Try other words (the English names of actions and things work best), or tell the user no tool does this."
            )));
        }
        let lines: Vec<String> = found.iter().map(|f| f.brief()).collect();
        Ok(Value::String(lines.join("\n")))
    }

    fn describe(functions: &[Function], name: &str) -> Result<Value, ToolError> {
        match functions.iter().find(|f| f.name == name || f.tool == name) {
            Some(f) => Ok(Value::String(f.full())),
            None => {
                let known: Vec<&str> = functions.iter().map(|f| &*f.name).collect();
                Err(ToolError::invalid_arguments(format!(
                    "There is no function {name}; the functions are: {}. Call {DESCRIBE_FUNCTION} again with one of them.",
                    if known.is_empty() {
                        "(none)".to_owned()
                    } else {
                        known.join(", ")
                    }
                )))
            }
        }
    }
}

#[async_trait::async_trait]
impl ToolProvider for CodeModeProvider {
    fn provider_name(&self) -> &str {
        "code-mode"
    }

    async fn list(&self) -> Vec<ToolSpec> {
        let functions = self.functions().await;
        let search = self.over_budget(&functions);
        self.specs(&functions, None, search)
    }

    /// Every function's line while they fit the search budget; past it, the functions that
    /// best match the turn's request, and [`SEARCH_FUNCTIONS`].
    async fn advertised(&self, turn: &TurnInfo) -> Vec<ToolSpec> {
        let functions = self.functions().await;
        if !self.over_budget(&functions) {
            return self.specs(&functions, None, false);
        }
        let listed = self.search(&functions, &turn.user_text, SEARCHED).await;
        self.specs(&functions, Some(&listed), true)
    }

    async fn call(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<toolwright_core::ToolOutput, ToolError> {
        let result: Result<Value, ToolError> = async {
            match name {
                RUN_CODE => {
                    let code = args.get("code").and_then(Value::as_str).ok_or_else(|| {
                        self.invalid_arguments(name, "/code: a string is required")
                    })?;
                    let functions = self.functions().await;
                    run::run(self, &functions, code, ctx).await
                }
                SEARCH_FUNCTIONS => self.search_answer(&self.functions().await, &args).await,
                DESCRIBE_FUNCTION => {
                    let wanted = args.get("name").and_then(Value::as_str).unwrap_or_default();
                    Self::describe(&self.functions().await, wanted)
                }
                other => Err(ToolError::not_found(other)),
            }
        }
        .await;
        result.map(toolwright_core::ToolOutput::from)
    }

    /// A script that called `final_answer(text)` ended the turn: `text` is the reply.
    fn final_answer(&self, name: &str, result: &Value) -> Option<String> {
        (name == RUN_CODE)
            .then(|| {
                result
                    .get("answer")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .flatten()
    }

    /// The sandbox stops a script at its own limit; the dispatcher's is a backstop a little
    /// longer, so the model reads the sandbox's message.
    fn timeout(&self, name: &str) -> Option<Duration> {
        (name == RUN_CODE).then(|| self.limits.time_limit + Duration::from_secs(5))
    }
}
