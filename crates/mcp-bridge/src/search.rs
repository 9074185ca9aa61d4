//! Tool search (#26): when the level-1 lines a turn would show pass a token budget, the turn
//! shows one search tool instead, [`SEARCH_TOOL`]; the model looks up what it needs by words
//! (English or Chinese) and gets the best few tools back, each with one sentence, which are then
//! callable with their full schemas for the rest of the turn. Works the same for every provider
//! and call protocol, the embedded local model included: it is an ordinary tool advertised
//! through [`llm_core::ToolProvider::advertised`].
//!
//! This module holds the settings and the tool's spec; the bridge's side (the index per
//! catalog, the call) is in `descriptions.rs`.
//!
//! Ranking is [`tool_search`]'s BM25 over each tool's exposed name, the server's description,
//! its service's name and configured description, and the service's trigger keywords. The
//! index is built once per catalog and rebuilt when the catalog changes.
//!
//! ```
//! use mcp_bridge::{McpBridge, search::ToolSearchConfig};
//! let bridge = McpBridge::new();
//! // Search when the listed tools would take more than 1,000 tokens; 5 results by default.
//! bridge.set_tool_search(ToolSearchConfig::default().with_budget_tokens(1_000));
//! assert_eq!(bridge.tool_search().budget_tokens, 1_000);
//! ```

use context_engine::{EstimateCounter, TokenCounter};
use llm_core::ToolSpec;
use serde_json::json;

use crate::catalog::McpTool;

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
    /// [`context_engine::EstimateCounter`], which errs high); past it, the turn gets
    /// [`SEARCH_TOOL`] instead of the list. `0`: always search; `usize::MAX`: never.
    /// Default 2,000 (about 80 tools).
    pub budget_tokens: usize,
    /// How many tools a search returns when the model does not say (at most
    /// [`MAX_RESULTS`]). Default 5.
    pub default_results: usize,
    /// Whether every turn may use MCP tools, not only turns with an MCP intent. Off by default
    /// (M3: a turn without an MCP intent shows no MCP tool). On, a turn without an MCP intent
    /// shows every running tool's level-1 line — or, past the budget, only [`SEARCH_TOOL`]
    /// (about 150 tokens whatever the number of tools): the way to give a model hundreds of
    /// tools without trigger keywords.
    pub every_turn: bool,
}

impl Default for ToolSearchConfig {
    fn default() -> Self {
        Self {
            budget_tokens: 2_000,
            default_results: 5,
            every_turn: false,
        }
    }
}

impl ToolSearchConfig {
    /// Sets [`ToolSearchConfig::budget_tokens`].
    pub fn with_budget_tokens(mut self, tokens: usize) -> Self {
        self.budget_tokens = tokens;
        self
    }
    /// Sets [`ToolSearchConfig::default_results`] (clamped to 1..=[`MAX_RESULTS`]).
    pub fn with_default_results(mut self, n: usize) -> Self {
        self.default_results = n.clamp(1, MAX_RESULTS);
        self
    }
    /// Sets [`ToolSearchConfig::every_turn`].
    pub fn with_every_turn(mut self, on: bool) -> Self {
        self.every_turn = on;
        self
    }
    /// Whether a list of this text is over the budget.
    pub(crate) fn over_budget(&self, listed: &str) -> bool {
        self.budget_tokens != usize::MAX && EstimateCounter.count_text(listed) > self.budget_tokens
    }
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

/// One search result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SearchResult {
    /// The tool.
    pub tool: McpTool,
    /// Its BM25 score (only comparable within one search).
    pub score: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

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
