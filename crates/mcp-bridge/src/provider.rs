//! How the bridge plugs into the tool loop: [`toolwright_core::ToolProvider`] (every running MCP tool
//! routes and runs; a request shows only what the turn's intent calls for; invalid arguments
//! are answered with the tool's full schema) and [`toolwright_tool_system::TurnSections`] (the level-1
//! section of each turn).

use std::time::Duration;

use serde_json::Value;
use toolwright_core::{ToolContext, ToolError, ToolOutput, ToolProvider, ToolSpec, TurnInfo};

use crate::bridge::McpBridge;
use crate::catalog::{self, McpTool};
use crate::connection::{STOP_GRACE, lock};
use crate::execution::{self, HEALTH_CHECK};
use crate::inject::{self, DESCRIBE_TOOL};
use crate::names;
use crate::search::{self, SEARCH_TOOL};

#[async_trait::async_trait]
impl ToolProvider for McpBridge {
    fn provider_name(&self) -> &str {
        "mcp"
    }

    /// Full specs of running services' tools, plus [`DESCRIBE_TOOL`] and [`SEARCH_TOOL`] when
    /// there are any: what the dispatcher routes and validates with.
    async fn list(&self) -> Vec<ToolSpec> {
        let tools = self.tools().await;
        if tools.is_empty() {
            return Vec::new();
        }
        let mut specs: Vec<ToolSpec> = tools.iter().map(McpTool::spec).collect();
        specs.push(inject::describe_tool_spec());
        specs.push(search::search_tool_spec());
        specs
    }

    /// The catalog epoch while the catalog built at it is still good (no service changed
    /// state or config, no server said its list changed, no list's cache hint ran out since);
    /// `None` otherwise, so the dispatcher lists again. With it, a run over hundreds of MCP
    /// tools does not list and compare them all before every run.
    fn list_revision(&self) -> Option<u64> {
        self.catalog_revision()
    }

    /// What a request shows the model: nothing without an MCP intent (unless the catalog is
    /// past the search budget: then the search tool); with one,
    /// [`DESCRIBE_TOOL`] and the tools described so far in the turn
    /// ([`McpBridge::advertised_tools`]).
    async fn advertised(&self, turn: &TurnInfo) -> Vec<ToolSpec> {
        self.advertised_tools(turn).await
    }

    async fn call(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        self.call_in(
            name,
            args,
            ctx.session_id.as_deref(),
            ctx.principal.as_deref(),
        )
        .await
    }

    /// Whether a call waits for a person's approval: the tool's service says so in its config
    /// (`require_approval`, [`crate::config::RequireApproval`]). The bridge's own describe and
    /// search tools never do. A name of a service's prefix that is not (yet) in the catalog is
    /// judged by the service's rule with the prefix taken off, so a gate is never skipped for
    /// want of a tool list.
    fn needs_approval(&self, name: &str, _args: &Value) -> bool {
        if name == DESCRIBE_TOOL || name == SEARCH_TOOL {
            return false;
        }
        let catalog = self.last_catalog();
        let (service, tool) = match catalog::resolve(&catalog, name) {
            Some(t) => (t.service.clone(), t.name.clone()),
            None => match self.service_of(name) {
                Some(s) => {
                    let tool = name
                        .strip_prefix(&names::service_prefix(&s))
                        .unwrap_or(name)
                        .to_owned();
                    (s, tool)
                }
                None => return false,
            },
        };
        lock(&self.inner.services)
            .get(&service)
            .is_some_and(|s| s.config.requires_approval(&tool))
    }

    /// The service's call timeout, plus the time the call may wait for the person (the
    /// elicitation limit: it does not count against the call timeout), plus room for the
    /// health check and stop, so that the bridge's own timeout (which cancels the request and
    /// checks the server) fires first.
    fn timeout(&self, name: &str) -> Option<Duration> {
        let person = self.inner.elicitation.person_budget();
        let map = lock(&self.inner.services);
        map.values()
            .find(|s| name.starts_with(&names::service_prefix(&s.config.name)))
            .map(|s| {
                s.config
                    .call_timeout
                    .saturating_add(person)
                    .saturating_add(HEALTH_CHECK + STOP_GRACE * 5)
            })
    }

    /// The problems the dispatcher's validator found, and the tool's full parameter schema:
    /// under level-1 descriptions the model may never have seen it.
    fn invalid_arguments(&self, name: &str, problems: &str) -> ToolError {
        if name == SEARCH_TOOL {
            return ToolError::invalid_arguments(format!(
                "Invalid arguments for {SEARCH_TOOL}: {problems}. Its parameter schema is {}. Call it again with a few words as `query`.",
                search::search_tool_spec().parameters
            ));
        }
        if name == DESCRIBE_TOOL {
            return ToolError::invalid_arguments(format!(
                "Invalid arguments for {DESCRIBE_TOOL}: {problems}. Its parameter schema is {}. Call it again with the tool's exact name.",
                inject::describe_tool_spec().parameters
            ));
        }
        let catalog = self.last_catalog();
        match catalog::resolve(&catalog, name) {
            Some(tool) => execution::invalid_arguments(tool, problems),
            None => ToolError::invalid_arguments(format!(
                "Invalid arguments for {name}: {problems}. The tool was not run; call {DESCRIBE_TOOL} with its name for its parameters."
            )),
        }
    }
}

/// M3 in the loop: for each turn, the standard intent chain (MCP, Memory, HITL, Normal) reads the
/// user's message; an MCP intent adds the level-1 section (`mcp`) to that request's system
/// prompt, any other intent adds nothing. Plug it in with
/// `Agent::builder(model).provider(Arc::new(bridge.clone())).turn_sections(Arc::new(bridge))`.
#[async_trait::async_trait]
impl toolwright_tool_system::TurnSections for McpBridge {
    async fn sections(&self, user_text: &str) -> Vec<(String, String)> {
        match self.turn_section(user_text).await {
            Some(text) => vec![(inject::SECTION_NAME.to_owned(), text)],
            None => Vec::new(),
        }
    }
}
