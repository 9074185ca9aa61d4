//! Tool search: when the level-1 lines a turn would show pass a token budget, the turn
//! shows one search tool instead, [`SEARCH_TOOL`]; the model looks up what it needs by words
//! (English or Chinese) and gets the best few tools back, each with one sentence, which are then
//! callable with their full schemas for the rest of the turn. Works the same for every provider
//! and call protocol, the embedded local model included: it is an ordinary tool advertised
//! through [`toolwright_core::ToolProvider::advertised`].
//!
//! This module holds the settings and the tool's spec; the bridge's side (the index per
//! catalog, the call) is in `descriptions.rs`.
//!
//! Ranking is [`tool_search`]'s BM25 over each tool's exposed name, the server's description,
//! its service's name and configured description, and the service's trigger keywords
//! ([`tool_doc`]). With [`SemanticSearch`] (an encoder), it is fused with the cosine ranking of
//! the tools' and the query's vectors. The index is built once per catalog and rebuilt
//! when the catalog changes.
//!
//! ```
//! use toolwright_mcp_bridge::{McpBridge, ToolSearchConfig};
//! let bridge = McpBridge::new();
//! // Search when the listed tools would take more than 1,000 tokens; 5 results by default.
//! bridge.set_tool_search(ToolSearchConfig::default().with_budget_tokens(1_000));
//! assert_eq!(bridge.tool_search().budget_tokens, 1_000);
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolwright_core::{ChatModel, Embedder, EstimateCounter, TokenCounter, ToolSpec};
use toolwright_tool_search::HybridConfig;

use crate::catalog::McpTool;
use crate::config::ServiceConfig;

/// The name of the bridge's search tool.
pub const SEARCH_TOOL: &str = "mcp_search_tools";

/// The most tools one search returns.
pub const MAX_RESULTS: usize = 10;

/// Length of the sentence each search result carries.
pub(crate) const RESULT_CHARS: usize = 120;

/// When a turn searches instead of listing, and how many tools a search returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolSearchConfig {
    /// The most tokens the level-1 list of a turn may take (counted with
    /// [`toolwright_core::EstimateCounter`], which errs high); past it, the turn gets
    /// [`SEARCH_TOOL`] instead of the list. `0`: always search; `usize::MAX`: never.
    /// Default 2,000 (about 80 tools).
    pub budget_tokens: usize,
    /// How many tools a search returns when the model does not say (at most
    /// `MAX_RESULTS`). Default 5.
    pub default_results: usize,
    /// Whether every turn may use MCP tools, not only turns with an MCP intent. Off by default
    /// (M3: a turn without an MCP intent shows no MCP tool). On, a turn without an MCP intent
    /// shows every running tool's level-1 line — or, past the budget, only [`SEARCH_TOOL`]
    /// (about 150 tokens whatever the number of tools).
    ///
    /// Off, a catalog whose whole level-1 list is past the budget still gets [`SEARCH_TOOL`] on
    /// every turn (a user with 300 tools and no trigger keywords must still reach them),
    /// unless [`ToolSearchConfig::search_past_budget`] is off; a smaller catalog keeps M3's
    /// keyword path.
    pub every_turn: bool,
    /// Whether a turn without an MCP intent gets [`SEARCH_TOOL`] when the whole catalog's
    /// level-1 list is past the budget. On by default.
    pub search_past_budget: bool,
}

impl Default for ToolSearchConfig {
    fn default() -> Self {
        Self {
            budget_tokens: 2_000,
            default_results: 5,
            every_turn: false,
            search_past_budget: true,
        }
    }
}

impl ToolSearchConfig {
    /// Sets [`ToolSearchConfig::budget_tokens`].
    pub fn with_budget_tokens(mut self, tokens: usize) -> Self {
        self.budget_tokens = tokens;
        self
    }
    /// Sets [`ToolSearchConfig::default_results`] (clamped to 1..=`MAX_RESULTS`).
    pub fn with_default_results(mut self, n: usize) -> Self {
        self.default_results = n.clamp(1, MAX_RESULTS);
        self
    }
    /// Sets [`ToolSearchConfig::every_turn`].
    pub fn with_every_turn(mut self, on: bool) -> Self {
        self.every_turn = on;
        self
    }
    /// Sets [`ToolSearchConfig::search_past_budget`].
    pub fn with_search_past_budget(mut self, on: bool) -> Self {
        self.search_past_budget = on;
        self
    }
    /// Whether a list of this text is over the budget.
    pub(crate) fn over_budget(&self, listed: &str) -> bool {
        self.budget_tokens != usize::MAX && EstimateCounter.count_text(listed) > self.budget_tokens
    }
}

/// Search by meaning: an encoder for the tools' and the query's vectors, how its ranking
/// is fused with BM25's, and where the tools' vectors are kept between runs. Set it with
/// [`crate::McpBridge::set_semantic_search`].
///
/// Each tool's vector is computed once per (encoder id, hash of the tool's text —
/// [`toolwright_tool_search::embedding_text`] of [`tool_doc`]): a catalog change (`list_changed`, a service
/// started) encodes only the tools whose text is new, and the vectors are saved to
/// `<cache dir>/tool-vectors-<hash of the encoder id>.bin`, so a restart encodes nothing. When
/// the encoder fails, the search is BM25's alone for that call (a `tracing` warning says why);
/// a turn never fails for it.
///
/// ```
/// use std::sync::Arc;
/// use toolwright_core::{async_trait, EmbedKind, Embedder, ModelError};
/// use toolwright_mcp_bridge::{McpBridge, SemanticSearch};
///
/// struct MyEncoder; // e.g. a local model, or an /v1/embeddings endpoint
/// #[async_trait]
/// impl Embedder for MyEncoder {
///     fn id(&self) -> &str { "my-encoder-v1" }
///     fn dimensions(&self) -> usize { 2 }
///     async fn embed(&self, texts: &[String], _: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
///         Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
///     }
/// }
///
/// let bridge = McpBridge::new();
/// let dir = std::env::temp_dir().join("my-app-vectors");
/// bridge.set_semantic_search(Some(SemanticSearch::new(Arc::new(MyEncoder)).with_cache_dir(Some(dir))));
/// assert_eq!(bridge.semantic_search().map(|s| s.embedder_id().to_owned()).as_deref(), Some("my-encoder-v1"));
/// ```
#[derive(Clone)]
pub struct SemanticSearch {
    pub(crate) embedder: Arc<dyn Embedder>,
    /// `None`: [`HybridConfig::for_encoder`] for the catalog's size.
    pub(crate) fusion: Option<HybridConfig>,
    pub(crate) cache_dir: Option<PathBuf>,
}

impl std::fmt::Debug for SemanticSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemanticSearch")
            .field("embedder", &self.embedder.id())
            .field("fusion", &self.fusion)
            .field("cache_dir", &self.cache_dir)
            .finish()
    }
}

impl SemanticSearch {
    /// Search by meaning with `embedder`, fused with BM25 ([`HybridConfig::for_encoder`] for
    /// the catalog's size, each time the index is built: language-neutral cosines, and "no
    /// tool fits" on for the encoder it was calibrated for, multilingual-e5-small), vectors
    /// kept in the toolkit cache (`toolkit_cache_dir`). For another encoder, calibrate a
    /// threshold and set it with [`SemanticSearch::with_fusion`].
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self {
            fusion: None,
            embedder,
            cache_dir: toolkit_cache_dir(),
        }
    }
    /// Sets the fusion and the "no tool fits" threshold ([`HybridConfig`]), for every catalog
    /// size, instead of the encoder's defaults.
    pub fn with_fusion(mut self, fusion: HybridConfig) -> Self {
        self.fusion = Some(fusion);
        self
    }
    /// Sets the directory the vectors are saved in; `None`: kept in memory only.
    pub fn with_cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }
    /// The encoder's id ([`Embedder::id`]).
    pub fn embedder_id(&self) -> &str {
        self.embedder.id()
    }
    /// The fusion settings for a catalog of `tools` tools: the ones set with
    /// [`SemanticSearch::with_fusion`], else [`HybridConfig::for_encoder`].
    pub fn fusion(&self, tools: usize) -> HybridConfig {
        self.fusion
            .unwrap_or_else(|| HybridConfig::for_encoder(self.embedder.id(), tools))
    }
}

/// A chat model's second look at the search's best candidates, set with
/// [`crate::McpBridge::set_search_judge`]: the search (BM25, with [`SemanticSearch`] by meaning
/// too) finds [`SearchJudge::candidates`] tools, the model reads the request and each
/// candidate's name and first sentence ([`toolwright_tool_search::judge`]) and answers which serve it, best
/// first — or none. Its picks come first, the other candidates after them in the search's order;
/// when it answers that no candidate fits, the search returns no tool and the model that searched
/// is told so. The judge can only reorder or turn down: a name it makes up is ignored.
///
/// What it costs: one chat request per search (about 30 tokens per candidate and 10 out), so
/// use a fast, cheap model. What it never does: fail a search. A judge that errs, times out
/// ([`SearchJudge::timeout`]) or answers something unreadable leaves the search's own order
/// (with a `tracing` warning).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::{sync::Arc, time::Duration};
/// use toolwright_mcp_bridge::{McpBridge, SearchJudge};
/// // Any ChatModel: here an OpenAI-compatible endpoint (a hosted mini model, vLLM, Ollama…).
/// let judge = toolwright_model_gateway::OpenAiModel::new(
///     toolwright_model_gateway::OpenAiConfig::new("gpt-4o-mini").with_api_key(std::env::var("OPENAI_API_KEY")?),
/// )?;
/// let bridge = McpBridge::new();
/// bridge.set_search_judge(Some(
///     SearchJudge::new(Arc::new(judge)).with_candidates(20).with_timeout(Duration::from_secs(5)),
/// ));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SearchJudge {
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) candidates: usize,
    pub(crate) timeout: Duration,
}

impl std::fmt::Debug for SearchJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchJudge")
            .field("model", &self.model.info().model)
            .field("candidates", &self.candidates)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl SearchJudge {
    /// A judge on `model`: 20 candidates, a 10 s timeout.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        Self {
            model,
            candidates: 20,
            timeout: Duration::from_secs(10),
        }
    }
    /// How many of the search's best tools the judge reads (clamped to 1..=
    /// [`toolwright_tool_search::MAX_LIMIT`]; at least the results asked for are always read).
    pub fn with_candidates(mut self, n: usize) -> Self {
        self.candidates = n.clamp(1, toolwright_tool_search::MAX_LIMIT);
        self
    }
    /// How long a search waits for the judge before it keeps its own order.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// How many candidates the judge reads.
    pub fn candidates(&self) -> usize {
        self.candidates
    }
    /// How long a search waits for the judge.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The toolkit's cache directory: `$XDG_CACHE_HOME/llm-toolkit`, else
/// `$HOME/.cache/llm-toolkit` (the rule of xtask and the local model); `None` when neither
/// variable is set.
pub fn toolkit_cache_dir() -> Option<PathBuf> {
    let from = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    from("XDG_CACHE_HOME")
        .map(|d| d.join("llm-toolkit"))
        .or_else(|| from("HOME").map(|h| h.join(".cache").join("llm-toolkit")))
}

/// The spec of [`SEARCH_TOOL`].
pub fn search_tool_spec() -> ToolSpec {
    ToolSpec::new(
        SEARCH_TOOL,
        "Finds MCP tools by what they do. Give a few words (English works best; Chinese works too); returns the best matching tools (name and one sentence), which you can then call by their exact names.",
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words for what you need, e.g. \"read a file\" or \"take a screenshot of a web page\""},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "description": "How many tools to return (default 5)"}
            },
            "required": ["query"]
        }),
    )
}

/// What the search knows of `tool`: its exposed name, the server's description, its service
/// (name and configured description) as the group, the service's trigger keywords, and its
/// parameters' names and descriptions (from the input schema's `properties`, in order). BM25
/// reads all but the parameters; an encoder reads [`toolwright_tool_search::embedding_text`] of it.
///
/// ```no_run
/// # async fn demo(bridge: toolwright_mcp_bridge::McpBridge) {
/// use toolwright_mcp_bridge::tool_doc;
/// let services = bridge.services();
/// for t in bridge.tools().await.iter() {
///     let config = services.iter().find(|s| s.config.name == t.service).map(|s| &s.config);
///     // What an encoder reads for the tool, and the key its vector is cached under.
///     let text = toolwright_tool_search::embedding_text(&tool_doc(t, config));
///     println!("{:016x} {text}", toolwright_tool_search::text_hash(&text));
/// }
/// # }
/// ```
pub fn tool_doc(
    tool: &McpTool,
    service: Option<&ServiceConfig>,
) -> toolwright_tool_search::ToolDoc {
    let parameters = tool
        .input_schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(name, p)| {
                    let description = p
                        .get("description")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default();
                    (name.clone(), description.to_owned())
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    toolwright_tool_search::ToolDoc::new(tool.exposed_name.clone(), tool.description.clone())
        .with_group(
            tool.service.clone(),
            service
                .and_then(|c| c.description.clone())
                .unwrap_or_default(),
        )
        .with_keywords(
            service
                .map(|c| c.trigger_keywords.clone())
                .unwrap_or_default(),
        )
        .with_parameters(parameters)
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SearchResult {
    /// The tool.
    pub tool: McpTool,
    /// Its score: BM25's, or the fused one with [`SemanticSearch`] (only comparable within one
    /// search).
    pub score: f32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn m3_tool_doc_carries_the_service_and_the_parameters() {
        let Value::Object(schema) = json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "Where the file is"},
            "head": {"type": "integer"}
        }}) else {
            unreachable!()
        };
        let tool = rmcp::model::Tool::new("read_file", "Read a file.", std::sync::Arc::new(schema));
        let catalog = crate::catalog::build([("fs", &[tool][..])]);
        let config = ServiceConfig::new("fs", "x")
            .with_description("Files on this machine")
            .with_trigger_keywords(["文件"]);
        let doc = tool_doc(&catalog[0], Some(&config));
        assert_eq!(doc.name, "fs__read_file");
        assert_eq!(doc.group, "fs");
        assert_eq!(doc.group_description, "Files on this machine");
        assert_eq!(doc.keywords, ["文件"]);
        assert_eq!(
            doc.parameters,
            [
                ("path".to_owned(), "Where the file is".to_owned()),
                ("head".to_owned(), String::new())
            ]
        );
        assert_eq!(
            toolwright_tool_search::embedding_text(&doc),
            "read file: Read a file"
        );
        let bare = tool_doc(&catalog[0], None);
        assert!(bare.keywords.is_empty() && bare.group_description.is_empty());
    }

    #[test]
    fn budget_edges() {
        let c = ToolSearchConfig::default().with_budget_tokens(0);
        assert!(c.over_budget("- a: b"));
        assert!(!c.over_budget(""));
        let c = ToolSearchConfig::default().with_budget_tokens(usize::MAX);
        assert!(!c.over_budget(&"x ".repeat(100_000)));
        assert_eq!(
            ToolSearchConfig::default()
                .with_default_results(99)
                .default_results,
            MAX_RESULTS
        );
    }
}
