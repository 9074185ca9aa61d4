//! The tiered descriptions (M3) as the bridge serves them for a turn: the intent of the
//! person's message, the level-1 section for the system prompt, the describe tool (level 2),
//! and the MCP tools a request shows the model ([`McpBridge::advertised_tools`]).

use std::collections::BTreeMap;

use llm_core::{ToolError, ToolSpec, TurnInfo};
use serde_json::Value;

use crate::bridge::McpBridge;
use crate::catalog::{self, McpTool};
use crate::config::ServiceConfig;
use crate::connection::lock;
use crate::inject::{self, DESCRIBE_TOOL};
use crate::intent::{Intent, IntentChain, McpRecognizer};

impl McpBridge {
    /// The prompt section for `intent` (see [`crate::inject`]).
    pub async fn prompt_section(&self, intent: &Intent) -> Option<String> {
        let tools = self.tools().await;
        inject::level1_section(intent, &tools, &self.service_descriptions())
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
        inject::level1_section(&intent, &tools, &self.service_descriptions())
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
    ///   each tool the model described earlier in this turn of this session.
    ///
    /// A turn is the session plus the text that opened it; round 0 or another text starts a new
    /// one. Calls to any running tool still route (the dispatcher routes by `list`).
    pub async fn advertised_tools(&self, turn: &TurnInfo) -> Vec<ToolSpec> {
        let session = turn.session_id.as_deref();
        let (tools, intent) = self.turn_intent(&turn.user_text).await;
        if tools.is_empty() || !matches!(intent, Intent::Mcp(_)) {
            lock(&self.inner.described).forget(session);
            return Vec::new();
        }
        let described = lock(&self.inner.described).enter(session, &turn.user_text, turn.round);
        let mut specs = vec![inject::describe_tool_spec()];
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
