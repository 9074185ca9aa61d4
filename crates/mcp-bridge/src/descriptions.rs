//! The tiered descriptions (M3) as the bridge serves them for a turn: the intent of the
//! person's message, the level-1 section for the system prompt, the describe tool (level 2),
//! the MCP tools a request shows the model ([`McpBridge::advertised_tools`]), and tool search
//! past the budget (the index per catalog, [`crate::SEARCH_TOOL`]'s call).

use std::collections::BTreeMap;
use std::sync::Arc;

use llm_core::{ToolError, ToolSpec, TurnInfo};
use serde_json::{Value, json};
use tool_search::{SearchIndex, ToolDoc};

use crate::bridge::McpBridge;
use crate::catalog::{self, McpTool};
use crate::config::ServiceConfig;
use crate::connection::lock;
use crate::inject::{self, DESCRIBE_TOOL};
use crate::intent::{Intent, IntentChain, McpRecognizer};
use crate::names;
use crate::search::{
    self, MAX_RESULTS, RESULT_CHARS, SEARCH_TOOL, SearchResult, ToolSearchConfig, search_tool_spec,
};

/// What a turn shows of MCP tools.
struct TurnView {
    /// The system-prompt section.
    section: String,
    /// Whether the turn searches instead of listing.
    search: bool,
}

impl McpBridge {
    /// The prompt section for `intent` (see [`crate::inject`]): the matching tools' level-1
    /// lines, or, when those would pass the tool-search budget, how to search for them
    /// ([`crate::search`]).
    pub async fn prompt_section(&self, intent: &Intent) -> Option<String> {
        let tools = self.tools().await;
        self.turn_view(&tools, intent).map(|v| v.section)
    }

    /// What a turn with `intent` shows of MCP tools; `None` without an MCP intent.
    /// With [`crate::ToolSearchConfig::every_turn`], a turn without an MCP intent shows every
    /// running tool.
    fn turn_view(&self, tools: &[McpTool], intent: &Intent) -> Option<TurnView> {
        let config = self.tool_search();
        let descriptions = self.service_descriptions();
        let (section, matching) = match inject::level1_section(intent, tools, &descriptions) {
            Some(section) => (section, inject::matching_tools(intent, tools).len()),
            None if config.every_turn && !tools.is_empty() => {
                let all: Vec<&McpTool> = tools.iter().collect();
                (inject::level1_list(&all, &descriptions), all.len())
            }
            None => return None,
        };
        if matching > 0 && config.over_budget(&section) {
            return Some(TurnView {
                section: inject::search_section(intent, matching),
                search: true,
            });
        }
        Some(TurnView {
            section,
            search: false,
        })
    }

    /// A layer-1 recognizer for the services and running tools as they are now.
    pub async fn recognizer(&self) -> McpRecognizer {
        let tools = self.tools().await;
        self.recognizer_for(&tools)
    }

    fn recognizer_for(&self, tools: &[McpTool]) -> McpRecognizer {
        let configs: Vec<ServiceConfig> = lock(&self.inner.services)
            .values()
            .map(|s| s.config.clone())
            .collect();
        McpRecognizer::new(&configs, tools)
    }

    /// The level-1 section for the turn opened by `user_text`: the standard intent chain (MCP,
    /// Memory, HITL, Normal) reads it; `None` unless the intent is MCP.
    pub(crate) async fn turn_section(&self, user_text: &str) -> Option<String> {
        let (tools, intent) = self.turn_intent(user_text).await;
        self.turn_view(&tools, &intent).map(|v| v.section)
    }

    /// The running tools and the intent of `user_text`. When the intent names a service that is
    /// not running — still starting, not started yet, or crashed — it is waited for or started
    /// first, at most its startup timeout ([`crate::recovery`]); a turn with any other intent
    /// never waits for a service.
    async fn turn_intent(&self, user_text: &str) -> (Vec<McpTool>, Intent) {
        let tools = self.tools().await;
        let intent = IntentChain::standard(self.recognizer_for(&tools)).recognize(user_text);
        let Intent::Mcp(m) = &intent else {
            return (tools, intent);
        };
        let service = m
            .service
            .clone()
            .or_else(|| m.tool.as_deref().and_then(|t| self.service_of(t)));
        match service {
            Some(s) if !self.is_running(&s) && self.ensure_running(&s).await => {
                let tools = self.tools().await;
                let intent =
                    IntentChain::standard(self.recognizer_for(&tools)).recognize(user_text);
                (tools, intent)
            }
            _ => (tools, intent),
        }
    }

    /// Each service's description (M5: the configured one, else its name), by service name.
    fn service_descriptions(&self) -> BTreeMap<String, String> {
        lock(&self.inner.services)
            .values()
            .map(|s| (s.config.name.clone(), s.config.description().to_owned()))
            .collect()
    }

    /// The MCP tools a request of `turn` shows the model (M3 in the request):
    ///
    /// - no MCP intent in the turn's text, or no running tool: none;
    /// - an MCP intent: [`DESCRIBE_TOOL`] (level 2 on demand — the matching tools' level-1
    ///   lines are in the system prompt, [`McpBridge::prompt_section`]), plus the full spec of
    ///   each tool the model described earlier in this turn of this session;
    /// - an MCP intent whose level-1 list would pass the tool-search budget: the same, with
    ///   [`crate::SEARCH_TOOL`] first (the prompt then says how to search instead of listing);
    ///   tools a search returned count as described.
    ///
    /// A turn is the session plus the text that opened it; round 0 or another text starts a new
    /// one. Calls to any running tool still route (the dispatcher routes by `list`).
    pub async fn advertised_tools(&self, turn: &TurnInfo) -> Vec<ToolSpec> {
        let session = turn.session_id.as_deref();
        let (tools, intent) = self.turn_intent(&turn.user_text).await;
        let view = match self.turn_view(&tools, &intent) {
            Some(view) if !tools.is_empty() => view,
            _ => {
                lock(&self.inner.described).forget(session);
                return Vec::new();
            }
        };
        let described = lock(&self.inner.described).enter(session, &turn.user_text, turn.round);
        let mut specs = Vec::new();
        if view.search {
            specs.push(search::search_tool_spec());
        }
        specs.push(inject::describe_tool_spec());
        specs.extend(
            tools
                .iter()
                .filter(|t| described.contains(&t.exposed_name))
                .map(McpTool::spec),
        );
        specs
    }

    /// A call of [`DESCRIBE_TOOL`]: the named tool's full spec as JSON. In a session, the tool
    /// is then advertised for the rest of `session`'s turn.
    pub(crate) async fn describe_call(
        &self,
        args: &Value,
        session: Option<&str>,
    ) -> Result<Value, ToolError> {
        let Some(name) = args.get("name").and_then(Value::as_str) else {
            return Err(ToolError::invalid_arguments(format!(
                "{DESCRIBE_TOOL} needs {{\"name\": \"<tool name>\"}}; its parameters schema is {}",
                inject::describe_tool_spec().parameters
            )));
        };
        let tools = self.tools().await;
        let Some(tool) = catalog::resolve(&tools, name) else {
            return Err(self.unavailable(name));
        };
        lock(&self.inner.described).record(session, &tool.exposed_name);
        let spec = tool.spec();
        Ok(serde_json::json!({
            "name": spec.name, "description": spec.description, "parameters": spec.parameters
        }))
    }
}

/// Tool search ([`crate::search`]): the index per catalog and the search tool's call.
impl McpBridge {
    /// Sets when turns search instead of listing ([`ToolSearchConfig`]).
    pub fn set_tool_search(&self, config: ToolSearchConfig) {
        *lock(&self.inner.search_config) = config;
    }

    /// The tool-search settings in force.
    pub fn tool_search(&self) -> ToolSearchConfig {
        *lock(&self.inner.search_config)
    }

    /// The running tools that best match `query`, best first, at most `limit` (and at most
    /// [`MAX_RESULTS`]): what [`SEARCH_TOOL`] answers the model.
    pub async fn search_tools(&self, query: &str, limit: usize) -> Vec<SearchResult> {
        let catalog = self.catalog().await;
        let index = self.search_index(&catalog);
        index
            .search(query, limit.min(MAX_RESULTS))
            .into_iter()
            .filter_map(|h| {
                catalog.get(h.index).map(|t| SearchResult {
                    tool: t.clone(),
                    score: h.score,
                })
            })
            .collect()
    }

    /// The index over `catalog`, built once per catalog.
    fn search_index(&self, catalog: &Arc<Vec<McpTool>>) -> Arc<SearchIndex> {
        if let Some((built_for, index)) = lock(&self.inner.search_index).as_ref()
            && Arc::ptr_eq(built_for, catalog)
        {
            return index.clone();
        }
        let docs: Vec<ToolDoc> = {
            let services = lock(&self.inner.services);
            catalog
                .iter()
                .map(|t| {
                    let config = services.get(&t.service).map(|s| &s.config);
                    ToolDoc::new(t.exposed_name.clone(), t.description.clone())
                        .with_group(
                            t.service.clone(),
                            config
                                .and_then(|c| c.description.clone())
                                .unwrap_or_default(),
                        )
                        .with_keywords(
                            config
                                .map(|c| c.trigger_keywords.clone())
                                .unwrap_or_default(),
                        )
                })
                .collect()
        };
        let index = Arc::new(SearchIndex::new(docs));
        *lock(&self.inner.search_index) = Some((catalog.clone(), index.clone()));
        index
    }

    /// A call of [`SEARCH_TOOL`]: the best matching tools, each with one sentence; in a
    /// session they are then advertised with their full specs for the rest of the turn.
    pub(crate) async fn search_call(
        &self,
        args: &Value,
        session: Option<&str>,
    ) -> Result<Value, ToolError> {
        let Some(query) = args.get("query").and_then(Value::as_str) else {
            return Err(ToolError::invalid_arguments(format!(
                "{SEARCH_TOOL} needs {{\"query\": \"<words for what you need>\"}}; its parameters schema is {}",
                search_tool_spec().parameters
            )));
        };
        let limit = match args.get("limit") {
            None | Some(Value::Null) => self.tool_search().default_results,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_RESULTS as u64).contains(&n) => n as usize,
                _ => {
                    return Err(ToolError::invalid_arguments(format!(
                        "{SEARCH_TOOL}: `limit` must be a whole number from 1 to {MAX_RESULTS}, not {v}"
                    )));
                }
            },
        };
        let results = self.search_tools(query, limit).await;
        if results.is_empty() {
            return Ok(json!({
                "tools": [],
                "next": format!("No MCP tool matched \"{}\". Search again with other words (the English names of actions and things work best), or tell the user no tool offers it.", names::first_sentence(query, 200)),
            }));
        }
        let mut described = lock(&self.inner.described);
        let tools: Vec<Value> = results
            .iter()
            .map(|r| {
                described.record(session, &r.tool.exposed_name);
                let mut sentence = names::first_sentence(&r.tool.description, RESULT_CHARS);
                if sentence.is_empty() {
                    sentence = r.tool.level1(&r.tool.service);
                }
                json!({"name": r.tool.exposed_name, "description": sentence, "service": r.tool.service})
            })
            .collect();
        Ok(json!({
            "tools": tools,
            "next": format!("Call one of these tools by its exact name; their parameters are now in your tool list (or call `{DESCRIBE_TOOL}` with the name). If none fits, search again with other words."),
        }))
    }
}
