//! The tiered descriptions (M3) as the bridge serves them for a turn: the intent of the
//! person's message, the level-1 section for the system prompt, the describe tool (level 2),
//! the MCP tools a request shows the model ([`McpBridge::advertised_tools`]), and tool search
//! past the budget (the index per catalog, [`crate::SEARCH_TOOL`]'s call).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::time::Instant;
use toolwright_core::{
    ChatRequest, EmbedKind, Message, ResponseFormat, ToolError, ToolSpec, TurnInfo,
};
use toolwright_tool_search::judge::Verdict;
use toolwright_tool_search::{Hit, SearchIndex, ToolDoc, embedding_text, text_hash};

use crate::bridge::McpBridge;
use crate::bridge::{SearchIndexCache, TurnCache};
use crate::catalog::{self, McpTool};
use crate::config::ServiceConfig;
use crate::connection::lock;
use crate::inject::{self, DESCRIBE_TOOL};
use crate::intent::{Intent, IntentChain, McpRecognizer};
use crate::names;
use crate::search::{
    self, MAX_RESULTS, RESULT_CHARS, SEARCH_TOOL, SearchJudge, SearchResult, SemanticSearch,
    ToolSearchConfig, search_tool_spec,
};

/// After the encoder failed while building the index, how long the search is BM25's alone
/// before the encoder is tried again.
const ENCODER_RETRY: std::time::Duration = std::time::Duration::from_secs(60);
/// How many texts go to the encoder at once.
const ENCODE_BATCH: usize = 32;

/// What a turn shows of MCP tools.
struct TurnView {
    /// The system-prompt section.
    section: String,
    /// Whether the turn searches instead of listing.
    search: bool,
}

/// What a turn with `intent` shows of MCP tools; `None` without an MCP intent, unless
/// [`crate::ToolSearchConfig::every_turn`] is on (every running tool, or past the budget the
/// search tool) or the whole catalog is past the budget
/// ([`crate::ToolSearchConfig::search_past_budget`]: the search tool).
fn turn_view(cache: &TurnCache, intent: &Intent) -> Option<TurnView> {
    let config = cache.config;
    let tools = cache.catalog.as_slice();
    let section = match inject::level1_section(intent, tools, &cache.descriptions) {
        Some(section) => {
            let matching = inject::matching_tools(intent, tools).len();
            if matching > 0 && config.over_budget(&section) {
                return Some(TurnView {
                    section: inject::search_section(intent, matching),
                    search: true,
                });
            }
            section
        }
        None if tools.is_empty() => return None,
        None => {
            let searching = config.search_past_budget && cache.all_over_budget;
            if !config.every_turn && !searching {
                return None;
            }
            if cache.all_over_budget {
                return Some(TurnView {
                    section: inject::search_section(intent, tools.len()),
                    search: true,
                });
            }
            cache.all.clone()
        }
    };
    Some(TurnView {
        section,
        search: false,
    })
}

impl McpBridge {
    /// The prompt section for `intent` (see `crate::inject`): the matching tools' level-1
    /// lines, or, when those would pass the tool-search budget, how to search for them
    /// (`crate::search`).
    pub async fn prompt_section(&self, intent: &Intent) -> Option<String> {
        let catalog = self.catalog().await;
        turn_view(&self.turn_cache(&catalog), intent).map(|v| v.section)
    }

    /// A layer-1 recognizer for the services and running tools as they are now.
    pub async fn recognizer(&self) -> McpRecognizer {
        let tools = self.catalog().await;
        McpRecognizer::new(&self.service_configs(), &tools)
    }

    fn service_configs(&self) -> Vec<ServiceConfig> {
        lock(&self.inner.services)
            .values()
            .map(|s| s.config.clone())
            .collect()
    }

    /// What turns read of `catalog` ([`TurnCache`]): the one built last when it was built
    /// from `catalog` with the search settings in force, else built now.
    fn turn_cache(&self, catalog: &Arc<Vec<McpTool>>) -> Arc<TurnCache> {
        let config = self.tool_search();
        if let Some(c) = lock(&self.inner.turn_cache).as_ref()
            && Arc::ptr_eq(&c.catalog, catalog)
            && c.config == config
        {
            return c.clone();
        }
        let descriptions = self.service_descriptions();
        let all = inject::level1_list(&catalog.iter().collect::<Vec<_>>(), &descriptions);
        let built = Arc::new(TurnCache {
            catalog: catalog.clone(),
            config,
            chain: IntentChain::standard(McpRecognizer::new(&self.service_configs(), catalog)),
            descriptions,
            all_over_budget: config.over_budget(&all),
            all,
        });
        *lock(&self.inner.turn_cache) = Some(built.clone());
        built
    }

    /// The level-1 section for the turn opened by `user_text`: the standard intent chain (MCP,
    /// Memory, HITL, Normal) reads it; `None` unless the intent is MCP.
    pub(crate) async fn turn_section(&self, user_text: &str) -> Option<String> {
        let (cache, intent) = self.turn_intent(user_text).await;
        turn_view(&cache, &intent).map(|v| v.section)
    }

    /// What turns read of the running tools, and the intent of `user_text`. When the intent
    /// names a service that is not running — still starting, not started yet, or crashed — it
    /// is waited for or started first, at most its startup timeout ([`crate::recovery`]); a
    /// turn with any other intent never waits for a service.
    async fn turn_intent(&self, user_text: &str) -> (Arc<TurnCache>, Intent) {
        let cache = self.turn_cache(&self.catalog().await);
        let intent = cache.chain.recognize(user_text);
        let Intent::Mcp(m) = &intent else {
            return (cache, intent);
        };
        let service = m
            .service
            .clone()
            .or_else(|| m.tool.as_deref().and_then(|t| self.service_of(t)));
        match service {
            Some(s) if !self.is_running(&s) && self.ensure_running(&s).await => {
                let cache = self.turn_cache(&self.catalog().await);
                let intent = cache.chain.recognize(user_text);
                (cache, intent)
            }
            _ => (cache, intent),
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
    /// - no running tool, or no MCP intent in the turn's text with a catalog under the budget:
    ///   none;
    /// - no MCP intent with the whole catalog past the budget (
    ///   [`ToolSearchConfig::search_past_budget`]): [`crate::SEARCH_TOOL`] and [`DESCRIBE_TOOL`];
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
        let (cache, intent) = self.turn_intent(&turn.user_text).await;
        let tools = cache.catalog.as_slice();
        let view = match turn_view(&cache, &intent) {
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

/// Tool search (`crate::search`): the index per catalog and the search tool's call.
impl McpBridge {
    /// Sets when turns search instead of listing ([`ToolSearchConfig`]).
    pub fn set_tool_search(&self, config: ToolSearchConfig) {
        *lock(&self.inner.search_config) = config;
    }

    /// The tool-search settings in force.
    pub fn tool_search(&self) -> ToolSearchConfig {
        *lock(&self.inner.search_config)
    }

    /// Sets search by meaning ([`SemanticSearch`]: an encoder, the fusion, where vectors are
    /// saved); `None` turns it off (BM25 alone). The index is built again on the next search.
    pub fn set_semantic_search(&self, semantic: Option<SemanticSearch>) {
        *lock(&self.inner.semantic) = semantic;
        *lock(&self.inner.search_index) = None;
    }

    /// The search-by-meaning settings in force, when any.
    pub fn semantic_search(&self) -> Option<SemanticSearch> {
        lock(&self.inner.semantic).clone()
    }

    /// Sets a chat model's second look at the search's candidates ([`SearchJudge`]); `None`
    /// turns it off.
    pub fn set_search_judge(&self, judge: Option<SearchJudge>) {
        *lock(&self.inner.judge) = judge;
    }

    /// The search judge in force, when any.
    pub fn search_judge(&self) -> Option<SearchJudge> {
        lock(&self.inner.judge).clone()
    }

    /// The running tools that best match `query`, best first, at most `limit` (and at most
    /// `MAX_RESULTS`): what [`SEARCH_TOOL`] answers the model. With [`SemanticSearch`], by
    /// words and by meaning, and empty when no tool fits (its threshold); when the encoder
    /// fails, by words alone (with a warning).
    pub async fn search_tools(&self, query: &str, limit: usize) -> Vec<SearchResult> {
        let catalog = self.catalog().await;
        let semantic = self.semantic_search();
        let judge = self.search_judge();
        let index = self.search_index(&catalog, semantic.as_ref()).await;
        let limit = limit.min(MAX_RESULTS);
        let wanted = judge.as_ref().map_or(limit, |j| j.candidates.max(limit));
        let mut hits = match semantic {
            Some(s) if index.has_vectors() => self.hybrid_hits(&s, &index, query, wanted).await,
            _ => index.search(query, wanted),
        };
        if let Some(j) = judge
            && limit > 0
            && !hits.is_empty()
        {
            hits = judged(&j, query, &catalog, hits).await;
        }
        hits.truncate(limit);
        hits.into_iter()
            .filter_map(|h| {
                catalog.get(h.index).map(|t| SearchResult {
                    tool: t.clone(),
                    score: h.score,
                })
            })
            .collect()
    }

    /// BM25 fused with the query's vector; BM25 alone when the encoder fails.
    async fn hybrid_hits(
        &self,
        s: &SemanticSearch,
        index: &SearchIndex,
        query: &str,
        limit: usize,
    ) -> Vec<Hit> {
        let text: String = query
            .chars()
            .take(toolwright_tool_search::MAX_QUERY_CHARS)
            .collect();
        let vector = match s.embedder.embed(&[text], EmbedKind::Query).await {
            Ok(v) if v.len() == 1 => v.into_iter().next(),
            Ok(v) => {
                tracing::warn!(
                    encoder = s.embedder.id(),
                    "the encoder gave {} vectors for one query; searching by words alone",
                    v.len()
                );
                None
            }
            Err(e) => {
                tracing::warn!(
                    encoder = s.embedder.id(),
                    "encoding the search query failed ({e}); searching by words alone"
                );
                None
            }
        };
        match vector.map(|v| index.search_hybrid(query, &v, limit)) {
            Some(Ok(hits)) => hits,
            Some(Err(e)) => {
                tracing::warn!(
                    encoder = s.embedder.id(),
                    "the query's vector was refused ({e}); searching by words alone"
                );
                index.search(query, limit)
            }
            None => index.search(query, limit),
        }
    }

    /// The index over `catalog`, built once per catalog (and search settings); with
    /// `semantic`, with the tools' vectors (only tools whose text is new are encoded).
    async fn search_index(
        &self,
        catalog: &Arc<Vec<McpTool>>,
        semantic: Option<&SemanticSearch>,
    ) -> Arc<SearchIndex> {
        self.refresh_learned().await;
        if let Some(c) = lock(&self.inner.search_index).as_ref()
            && Arc::ptr_eq(&c.catalog, catalog)
            && c.retry_at.is_none_or(|t| Instant::now() < t)
        {
            return c.index.clone();
        }
        let docs: Vec<ToolDoc> = {
            let services = lock(&self.inner.services);
            catalog
                .iter()
                .map(|t| search::tool_doc(t, services.get(&t.service).map(|s| &s.config)))
                .collect()
        };
        // What was learned from use: more words each tool is found by (its vector is of its own
        // text, so the vectors' cache stays valid).
        let docs: Vec<ToolDoc> = docs
            .into_iter()
            .map(|d| self.with_learned_words(d))
            .collect();
        let mut retry_at = None;
        let index = match semantic {
            None => SearchIndex::new(docs),
            Some(s) => {
                let fallback = |why: String, retry_at: &mut Option<Instant>| {
                    tracing::warn!(
                        encoder = s.embedder.id(),
                        "{why}; searching by words alone, the encoder is tried again in {}s",
                        ENCODER_RETRY.as_secs()
                    );
                    *retry_at = Some(Instant::now() + ENCODER_RETRY);
                };
                match self.tool_vectors(s, &docs).await {
                    Ok(v) => match SearchIndex::new(docs.clone())
                        .with_hybrid(s.fusion(docs.len()))
                        .with_vectors(v)
                    {
                        Ok(index) => index,
                        Err(e) => {
                            fallback(format!("tool vectors refused ({e})"), &mut retry_at);
                            SearchIndex::new(docs)
                        }
                    },
                    Err(e) => {
                        fallback(format!("encoding the tools failed ({e})"), &mut retry_at);
                        SearchIndex::new(docs)
                    }
                }
            }
        };
        let index = Arc::new(index);
        // A search settings change meanwhile cleared the slot: do not put an index of the old
        // settings back.
        if semantic.map(SemanticSearch::embedder_id)
            == self
                .semantic_search()
                .as_ref()
                .map(SemanticSearch::embedder_id)
        {
            *lock(&self.inner.search_index) = Some(SearchIndexCache {
                catalog: catalog.clone(),
                index: index.clone(),
                retry_at,
            });
        }
        index
    }

    /// One vector per doc, in order: from the cache, the missing ones encoded (in batches)
    /// and saved.
    async fn tool_vectors(
        &self,
        s: &SemanticSearch,
        docs: &[ToolDoc],
    ) -> Result<Vec<Vec<f32>>, String> {
        let texts: Vec<String> = docs.iter().map(embedding_text).collect();
        let hashes: Vec<u64> = texts.iter().map(|t| text_hash(t)).collect();
        let missing: Vec<usize> = {
            let mut cache = lock(&self.inner.vectors);
            cache.select(
                s.embedder.id(),
                s.embedder.dimensions(),
                s.cache_dir.as_deref(),
            );
            let mut seen = std::collections::HashSet::new();
            (0..texts.len())
                .filter(|&i| cache.get(hashes[i]).is_none() && seen.insert(hashes[i]))
                .collect()
        };
        if !missing.is_empty() {
            let mut fresh = Vec::with_capacity(missing.len());
            for chunk in missing.chunks(ENCODE_BATCH) {
                let batch: Vec<String> = chunk.iter().map(|&i| texts[i].clone()).collect();
                let vectors = s
                    .embedder
                    .embed(&batch, EmbedKind::Document)
                    .await
                    .map_err(|e| e.to_string())?;
                if vectors.len() != batch.len() {
                    return Err(format!(
                        "{} vectors for {} texts",
                        vectors.len(),
                        batch.len()
                    ));
                }
                fresh.extend(vectors);
            }
            let snapshot = {
                let mut cache = lock(&self.inner.vectors);
                cache.select(
                    s.embedder.id(),
                    s.embedder.dimensions(),
                    s.cache_dir.as_deref(),
                );
                for (&i, v) in missing.iter().zip(fresh) {
                    cache.insert(hashes[i], v);
                }
                cache.snapshot(&hashes)
            };
            if let Some((path, bytes)) = snapshot {
                let _ =
                    tokio::task::spawn_blocking(move || crate::vectors::save(&path, &bytes)).await;
            }
        }
        let cache = lock(&self.inner.vectors);
        hashes
            .iter()
            .map(|h| {
                cache
                    .get(*h)
                    .map(|v| v.to_vec())
                    .ok_or_else(|| "a tool vector went missing from the cache meanwhile".to_owned())
            })
            .collect()
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
                described.record_found(session, &r.tool.exposed_name, query);
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

/// `hits` (the search's candidates, best first) after `judge`'s second look: its picks first,
/// then the other candidates in their order; none when it says no candidate fits; `hits` as
/// they were when it errs, times out or answers something unreadable (with a warning).
async fn judged(judge: &SearchJudge, query: &str, catalog: &[McpTool], hits: Vec<Hit>) -> Vec<Hit> {
    let candidates: Vec<(&str, &str)> = hits
        .iter()
        .filter_map(|h| catalog.get(h.index))
        .map(|t| (t.exposed_name.as_str(), t.description.as_str()))
        .collect();
    if candidates.len() != hits.len() {
        return hits;
    }
    let prompt = toolwright_tool_search::judge::prompt(query, &candidates);
    let request = ChatRequest::new(vec![
        Message::system(prompt.system),
        Message::user(prompt.user),
    ])
    .with_temperature(0.0)
    .with_max_tokens(JUDGE_MAX_TOKENS)
    .with_response_format(ResponseFormat::JsonSchema {
        name: toolwright_tool_search::judge::SCHEMA_NAME.to_owned(),
        schema: prompt.schema,
        strict: true,
    });
    let model = judge.model.info().model;
    let answer = match tokio::time::timeout(judge.timeout, judge.model.chat(request)).await {
        Ok(Ok(r)) => r.content,
        Ok(Err(e)) => {
            tracing::warn!(judge = %model, "the search judge failed ({e}); keeping the search's order");
            return hits;
        }
        Err(_) => {
            tracing::warn!(judge = %model, timeout = ?judge.timeout, "the search judge did not answer in time; keeping the search's order");
            return hits;
        }
    };
    let names: Vec<&str> = candidates.iter().map(|(n, _)| *n).collect();
    match toolwright_tool_search::judge::read(&answer, &names) {
        Some(Verdict::NoneFits) => {
            tracing::debug!(judge = %model, "the search judge found no tool for the request");
            Vec::new()
        }
        Some(Verdict::Picks(picks)) => {
            let mut out: Vec<Hit> = picks.iter().map(|&i| hits[i].clone()).collect();
            out.extend(
                hits.into_iter()
                    .enumerate()
                    .filter(|(i, _)| !picks.contains(i))
                    .map(|(_, h)| h),
            );
            out
        }
        None => {
            let shown: String = answer.chars().take(200).collect();
            tracing::warn!(judge = %model, answer = %shown, "the search judge's answer names no candidate; keeping the search's order");
            hits
        }
    }
}

/// The most tokens the search judge may write (a list of at most a few tool names).
const JUDGE_MAX_TOKENS: u32 = 256;
