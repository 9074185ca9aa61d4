//! Tiered description injection (M3): what the model is shown of MCP tools.
//!
//! **Level 1** — for an MCP intent, a prompt section with only the matching tools, each as its
//! name plus one sentence: its service's description (M5; the service name when none is
//! configured). No schema. For any other intent, no section at all.
//!
//! **Level 2** — one tool's full spec (the server's description and the parameter schema),
//! fetched only when the model asks: the bridge offers [`DESCRIBE_TOOL`]
//! (`{"name": "..."}` → name, description, parameters), after which that tool's full spec is in
//! the next requests of the same turn; and a call whose arguments do not fit comes back as an
//! invalid-arguments error that carries the full schema, so the model fixes it in one round.

use std::collections::BTreeMap;

use toolwright_core::ToolSpec;

use crate::catalog::McpTool;
use crate::intent::Intent;

/// The name of the per-turn prompt section the bridge fills.
pub const SECTION_NAME: &str = "mcp";

/// The bridge's own tool that returns another tool's full spec (level 2).
pub const DESCRIBE_TOOL: &str = "mcp_describe_tool";

/// The spec of [`DESCRIBE_TOOL`].
pub fn describe_tool_spec() -> ToolSpec {
    ToolSpec::new(
        DESCRIBE_TOOL,
        "Returns the full description and parameter schema of an MCP tool listed in the system prompt; call it before calling that tool.",
        serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The tool's exact name"}},
            "required": ["name"]
        }),
    )
}

/// The tools an MCP intent points at: the named tool (exposed or original name, any case), or
/// every tool of the named service.
pub fn matching_tools<'a>(intent: &Intent, tools: &'a [McpTool]) -> Vec<&'a McpTool> {
    let Intent::Mcp(m) = intent else {
        return Vec::new();
    };
    if let Some(name) = &m.tool {
        let lower = name.to_lowercase();
        let named: Vec<&McpTool> = tools
            .iter()
            .filter(|t| t.name.to_lowercase() == lower || t.exposed_name.to_lowercase() == lower)
            .collect();
        if !named.is_empty() {
            return named;
        }
    }
    match &m.service {
        Some(s) => tools.iter().filter(|t| &t.service == s).collect(),
        None => Vec::new(),
    }
}

/// The section of a turn whose level-1 list would pass the tool-search budget: how to find the
/// `matching` tools with [`crate::SEARCH_TOOL`] instead of the list.
pub fn search_section(intent: &Intent, matching: usize) -> String {
    let scope = match intent {
        Intent::Mcp(m) if m.tool.is_none() => m
            .service
            .as_deref()
            .map(|s| format!(" (the MCP service `{s}` has {matching})"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    format!(
        "## MCP tools\nMCP tools can help with this request{scope}, too many to list here. Find the ones you need with `{}` {{\"query\": \"<a few words of what you need>\"}}: it returns the best matching tools, each with one sentence, and makes them callable. Then call the one that fits by its exact name. If nothing fits, search again with other words.",
        crate::search::SEARCH_TOOL
    )
}

/// The level-1 section for `intent`, or `None` for a non-MCP intent.
///
/// `service_descriptions` gives each service's description (M5: the configured one, else the
/// service name); a service missing from it is described by its name.
pub fn level1_section(
    intent: &Intent,
    tools: &[McpTool],
    service_descriptions: &BTreeMap<String, String>,
) -> Option<String> {
    let Intent::Mcp(m) = intent else {
        return None;
    };
    let matching = matching_tools(intent, tools);
    if matching.is_empty() {
        let asked = m
            .tool
            .as_deref()
            .or(m.service.as_deref())
            .unwrap_or("an MCP tool");
        return Some(format!(
            "## MCP tools\nThe user asked for `{asked}`, but no running MCP service offers it right now. Say that it is unavailable; do not call it."
        ));
    }
    Some(level1_list(&matching, service_descriptions))
}

/// The level-1 section listing `tools`: each as its name and one sentence.
pub fn level1_list(tools: &[&McpTool], service_descriptions: &BTreeMap<String, String>) -> String {
    let mut out = String::from("## MCP tools\nMCP tools for this request (name: what it does):\n");
    for t in tools {
        let service_desc = service_descriptions
            .get(&t.service)
            .map(String::as_str)
            .unwrap_or(&t.service);
        out.push_str(&format!(
            "- {}: {}\n",
            t.exposed_name,
            t.level1(service_desc)
        ));
    }
    out.push_str(&format!(
        "To use one, first call `{DESCRIBE_TOOL}` with {{\"name\": \"<tool name>\"}}: it returns the tool's parameters and makes the tool callable. Then call the tool by its exact name."
    ));
    out
}
