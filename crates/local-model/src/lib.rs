//! An embedded local model (cargo feature `local`): a small GGUF chat model run in process on
//! the CPU with `candle`, behind the same [`ChatModel`] trait as the HTTP backends.
//!
//! The default is SmolLM2-135M-Instruct (Q4_1, 98 MB), fetched once into the user's cache
//! (`$XDG_CACHE_HOME/llm-toolkit/models` or `~/.cache/llm-toolkit/models`); `LOCAL_MODEL_PATH`
//! points to your own GGUF instead. It has no native function calling (`function_calling ==
//! false`), but its tool decisions are reliable: when tools are bound to a request (or given
//! with [`LocalModel::with_decision_tools`]) or the request asks for a JSON schema, decoding is
//! constrained by a grammar so the answer always parses and always names a real tool with
//! schema-valid arguments. See `docs/local-model.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), model_gateway::GatewayError> {
//! use model_gateway::{ChatModel, ChatRequest, Message};
//! let model = model_gateway::local::default_model().await?;
//! let answer = model.chat(ChatRequest::new(vec![Message::user("Say hi")])).await?;
//! println!("{}", answer.content);
//! # Ok(()) }
//! ```

mod engine;
mod fetch;
mod grammar;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

pub use engine::GenerationStats;
pub use fetch::{
    ModelSource, SMOLLM2_SHA256, SMOLLM2_SIZE, WheelSource, default_cache_dir, ensure_model,
    sha256_file,
};
pub use grammar::{DEFAULT_REPLY_MAX, DEFAULT_STRING_MAX, Grammar, NullChoice, SchemaError};
pub use tokenizer::LocalTokenizer;

use engine::{Engine, Sampling, Stop};

use crate::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, GatewayError,
    Message, ModelInfo, ResponseFormat, ToolChoice, ToolSpec, Usage, collect_stream,
};

/// The environment variable that points to a GGUF file to use instead of the default model.
pub const LOCAL_MODEL_PATH_ENV: &str = "LOCAL_MODEL_PATH";

/// The default local model, ready to use: `LOCAL_MODEL_PATH` if set, else SmolLM2-135M-Instruct
/// from the cache (fetched on first use).
pub async fn default_model() -> Result<Arc<dyn ChatModel>, GatewayError> {
    Ok(Arc::new(LocalModel::builder().build().await?))
}

/// Settings of a [`LocalModel`]; see [`LocalModel::builder`].
#[derive(Debug, Clone)]
pub struct LocalModelBuilder {
    path: Option<PathBuf>,
    source: ModelSource,
    cache_dir: Option<PathBuf>,
    options: Options,
}

#[derive(Debug, Clone)]
struct Options {
    seed: Option<u64>,
    temperature: f32,
    top_p: f32,
    max_tokens: u32,
    repeat_penalty: f32,
    no_repeat_ngram: usize,
    decision_tools: Vec<ToolSpec>,
}

impl Default for LocalModelBuilder {
    fn default() -> Self {
        Self {
            path: None,
            source: ModelSource::smollm2_135m_instruct(),
            cache_dir: None,
            options: Options {
                seed: None,
                temperature: 0.3,
                top_p: 0.9,
                max_tokens: 512,
                repeat_penalty: 1.1,
                no_repeat_ngram: 0,
                decision_tools: Vec::new(),
            },
        }
    }
}

impl LocalModelBuilder {
    /// Use this GGUF file (wins over `LOCAL_MODEL_PATH` and the download).
    pub fn model_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }
    /// Fetch this model instead of the default one.
    pub fn source(mut self, source: ModelSource) -> Self {
        self.source = source;
        self
    }
    /// Cache directory for fetched models (default: [`default_cache_dir`]).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }
    /// A fixed sampling seed: the same request then always gives the same answer.
    /// Without one, each request draws a random seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.options.seed = Some(seed);
        self
    }
    /// Default temperature (0 = greedy) when a request sets none. Default 0.3.
    pub fn temperature(mut self, t: f32) -> Self {
        self.options.temperature = t.max(0.0);
        self
    }
    /// Nucleus sampling mass. Default 0.9.
    pub fn top_p(mut self, p: f32) -> Self {
        self.options.top_p = p.clamp(0.0, 1.0);
        self
    }
    /// Default token limit when a request sets none. Default 512.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.options.max_tokens = n.max(1);
        self
    }
    /// Repetition penalty over the last 64 tokens (1.0 = off). Default 1.1.
    pub fn repeat_penalty(mut self, p: f32) -> Self {
        self.options.repeat_penalty = p.max(1.0);
        self
    }
    /// Never repeat a run of `n` tokens within one answer (0 = off, the default). Small models
    /// fall into loops ("I am a chatbot. I am a chatbot. …"); 3–4 stops them. It also applies
    /// while a tool decision is constrained, where the repetition penalty does not (structure
    /// repeats on purpose); there the grammar's next bytes always win over the ban.
    pub fn no_repeat_ngram(mut self, n: usize) -> Self {
        self.options.no_repeat_ngram = n;
        self
    }
    /// See [`LocalModel::with_decision_tools`].
    pub fn decision_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.options.decision_tools = tools;
        self
    }

    /// Resolves the file (builder path, else `LOCAL_MODEL_PATH`, else fetch into the cache)
    /// and loads it on a blocking thread.
    pub async fn build(self) -> Result<LocalModel, GatewayError> {
        let path = match self.path {
            Some(p) => p,
            None => match std::env::var_os(LOCAL_MODEL_PATH_ENV).filter(|v| !v.is_empty()) {
                Some(p) => PathBuf::from(p),
                None => {
                    let dir = match self.cache_dir {
                        Some(d) => d,
                        None => default_cache_dir().ok_or_else(|| {
                            GatewayError::Config(
                                "no cache directory: set XDG_CACHE_HOME or HOME, or LOCAL_MODEL_PATH"
                                    .into(),
                            )
                        })?,
                    };
                    ensure_model(&self.source, &dir).await?
                }
            },
        };
        let engine = tokio::task::spawn_blocking(move || Engine::load(&path))
            .await
            .map_err(|e| GatewayError::Config(format!("loading the local model failed: {e}")))??;
        Ok(LocalModel {
            engine: Arc::new(engine),
            options: self.options,
        })
    }
}

/// A GGUF chat model running in process on the CPU. Cheap to clone (the weights are shared);
/// one generation runs at a time per loaded model.
#[derive(Clone)]
pub struct LocalModel {
    engine: Arc<Engine>,
    options: Options,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("model", &self.engine.name)
            .field("options", &self.options)
            .finish()
    }
}

/// What one request asks the engine to do.
struct Plan {
    prompt: Vec<u32>,
    sampling: Sampling,
    grammar: Option<Grammar>,
}

impl LocalModel {
    /// Settings, then [`LocalModelBuilder::build`].
    pub fn builder() -> LocalModelBuilder {
        LocalModelBuilder::default()
    }

    /// Loads a GGUF file now, on this thread (blocking; about a second).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, GatewayError> {
        Ok(Self {
            engine: Arc::new(Engine::load(path.as_ref())?),
            options: LocalModelBuilder::default().options,
        })
    }

    /// The same model with a fixed seed (see [`LocalModelBuilder::seed`]).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.options.seed = Some(seed);
        self
    }

    /// The same model with the n-gram ban (see [`LocalModelBuilder::no_repeat_ngram`]).
    pub fn with_no_repeat_ngram(mut self, n: usize) -> Self {
        self.options.no_repeat_ngram = n;
        self
    }

    /// The same model, constraining every request that binds no tools of its own to the JSON
    /// decision of the tool loop over these tools: `{"tool": "<name>", "arguments": {...}}`
    /// or `{"tool": null, "reply": "..."}`. For tool-system's JSON-decision protocol, which
    /// describes the tools in the system prompt and binds none.
    pub fn with_decision_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.options.decision_tools = tools;
        self
    }

    /// The tokenizer read from the GGUF file.
    pub fn tokenizer(&self) -> &LocalTokenizer {
        &self.engine.tokenizer
    }

    /// How long loading the weights took.
    pub fn load_time(&self) -> Duration {
        self.engine.load_time
    }

    /// The whole response and the generation's timings.
    pub async fn chat_with_stats(
        &self,
        request: ChatRequest,
    ) -> Result<(ChatResponse, GenerationStats), GatewayError> {
        let plan = self.plan(&request)?;
        let engine = Arc::clone(&self.engine);
        tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            let (stop, stats) = engine.generate(
                &plan.prompt,
                plan.sampling,
                plan.grammar.as_ref(),
                &|| true,
                &mut |t| {
                    text.push_str(&t);
                    true
                },
            )?;
            Ok((
                ChatResponse::new(text, Vec::new(), finish(stop), Some(usage(&stats))),
                stats,
            ))
        })
        .await
        .map_err(|e| GatewayError::Config(format!("the local generation task failed: {e}")))?
    }

    fn plan(&self, req: &ChatRequest) -> Result<Plan, GatewayError> {
        let tok = &self.engine.tokenizer;
        let opts = &self.options;
        // Which constraint applies.
        let decision_tools: &[ToolSpec] = if !req.tools.is_empty() {
            &req.tools
        } else {
            &opts.decision_tools
        };
        let grammar = match (&req.response_format, &req.tool_choice) {
            (Some(ResponseFormat::JsonSchema { schema, .. }), _) => Some(
                Grammar::from_schema(schema)
                    .map_err(|e| GatewayError::Config(format!("response_format schema: {e}")))?,
            ),
            // A decision-constrained model told "no tool": the only decision left is the answer.
            (_, Some(ToolChoice::None))
                if req.tools.is_empty() && !opts.decision_tools.is_empty() =>
            {
                Some(
                    Grammar::tool_decision(&[], NullChoice::Allowed)
                        .map_err(|e| GatewayError::Config(format!("tool schema: {e}")))?,
                )
            }
            (_, Some(ToolChoice::None)) => None,
            _ if decision_tools.is_empty() => None,
            (_, choice) => {
                let (tools, null): (Vec<ToolSpec>, NullChoice) = match choice {
                    Some(ToolChoice::Function(name)) => {
                        let t = decision_tools
                            .iter()
                            .filter(|t| &t.name == name)
                            .cloned()
                            .collect::<Vec<_>>();
                        if t.is_empty() {
                            return Err(GatewayError::Config(format!(
                                "tool_choice names `{name}`, which is not among the request's tools"
                            )));
                        }
                        (t, NullChoice::Forbidden)
                    }
                    Some(ToolChoice::Required) => (decision_tools.to_vec(), NullChoice::Forbidden),
                    _ => (decision_tools.to_vec(), NullChoice::Allowed),
                };
                Some(
                    Grammar::tool_decision(&tools, null)
                        .map_err(|e| GatewayError::Config(format!("tool schema: {e}")))?,
                )
            }
        };
        // ChatML turns.
        let mut turns: Vec<(String, String)> = Vec::new();
        let tool_section = (!req.tools.is_empty()
            && !matches!(req.tool_choice, Some(ToolChoice::None)))
        .then(|| describe_tools(&req.tools));
        if !matches!(req.messages.first(), Some(Message::System { .. })) {
            let base = tok
                .default_system()
                .unwrap_or("You are a helpful assistant.");
            turns.push(("system".into(), base.to_owned()));
        }
        for m in &req.messages {
            match m {
                Message::System { content } => turns.push(("system".into(), content.clone())),
                Message::User { content } => turns.push(("user".into(), content.clone())),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut text = content.clone();
                    for c in tool_calls {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(
                            &serde_json::json!({"tool": c.name, "arguments": c.arguments})
                                .to_string(),
                        );
                    }
                    turns.push(("assistant".into(), text));
                }
                Message::Tool { name, content, .. } => turns.push((
                    "user".into(),
                    format!("[Tool result for {name}]\n{content}"),
                )),
            }
        }
        if let (Some(section), Some(first)) = (tool_section, turns.first_mut()) {
            first.1 = format!("{}\n\n{section}", first.1);
        }
        let refs: Vec<(&str, &str)> = turns
            .iter()
            .map(|(r, c)| (r.as_str(), c.as_str()))
            .collect();
        let prompt = tok.chat_prompt(&refs)?;
        let sampling = Sampling {
            temperature: req.temperature.unwrap_or(opts.temperature).max(0.0),
            top_p: opts.top_p,
            seed: opts.seed.unwrap_or_else(rand::random),
            max_tokens: req.max_tokens.unwrap_or(opts.max_tokens).max(1),
            repeat_penalty: if grammar.is_some() {
                1.0 // structure repeats on purpose
            } else {
                opts.repeat_penalty
            },
            no_repeat_ngram: opts.no_repeat_ngram,
        };
        Ok(Plan {
            prompt,
            sampling,
            grammar,
        })
    }
}

fn describe_tools(tools: &[ToolSpec]) -> String {
    let mut s = String::from("You can call these tools:\n");
    for t in tools {
        s.push_str(&format!(
            "- {}: {} Arguments (JSON Schema): {}\n",
            t.name, t.description, t.parameters
        ));
    }
    s.push_str(
        "Answer with one JSON object and nothing else: {\"tool\": \"<name>\", \"arguments\": {...}} \
         to call a tool, or {\"tool\": null, \"reply\": \"<your answer>\"} to answer directly.",
    );
    s
}

fn finish(stop: Stop) -> FinishReason {
    match stop {
        Stop::EndOfTurn | Stop::Cancelled => FinishReason::Stop,
        Stop::Length => FinishReason::Length,
    }
}

fn usage(s: &GenerationStats) -> Usage {
    Usage {
        prompt_tokens: s.prompt_tokens,
        completion_tokens: s.generated_tokens,
        total_tokens: s.prompt_tokens + s.generated_tokens,
    }
}

#[async_trait::async_trait]
impl ChatModel for LocalModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new(self.engine.name.clone(), false)
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, GatewayError> {
        collect_stream(self.stream(request).await?).await
    }

    /// Text deltas as tokens are generated, then `Finish`. Generation runs on a blocking
    /// thread and stops when the stream is dropped.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, GatewayError> {
        let plan = self.plan(&request)?;
        let engine = Arc::clone(&self.engine);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<ChatEvent, GatewayError>>(64);
        tokio::task::spawn_blocking(move || {
            let closed = tx.clone();
            let alive = move || !closed.is_closed();
            let res = engine.generate(
                &plan.prompt,
                plan.sampling,
                plan.grammar.as_ref(),
                &alive,
                &mut |t| tx.blocking_send(Ok(ChatEvent::TextDelta(t))).is_ok(),
            );
            let last = match res {
                Ok((Stop::Cancelled, _)) => return,
                Ok((stop, stats)) => Ok(ChatEvent::Finish {
                    reason: finish(stop),
                    usage: Some(usage(&stats)),
                }),
                Err(e) => Err(e),
            };
            let _ = tx.blocking_send(last);
        });
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|ev| (ev, rx))
        }))
        .boxed())
    }
}
