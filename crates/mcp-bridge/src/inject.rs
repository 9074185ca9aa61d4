//! Tiered description injection (M3).
//!
//! **Level 1** — for an MCP intent, a prompt section with only the matching tools, each as its
//! name plus one sentence, and no schema. For any other intent, no section at all.
//!
//! **Level 2** — the full schema, fetched only when the model decides to call a tool: the bridge
//! offers [`DESCRIBE_TOOL`] (`{"name": "..."}` → name, description, parameters), and a call with
//! missing or malformed arguments comes back as an invalid-arguments error that carries the full
//! schema, so the model can correct itself in one more round.

use std::collections::BTreeMap;

use crate::bridge::{DESCRIBE_TOOL, McpTool};
use crate::intent::Intent;

/// The name of the per-turn prompt section the bridge fills.
pub const SECTION_NAME: &str = "mcp";

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

/// The level-1 section for `intent`, or `None` for a non-MCP intent.
///
/// `service_descriptions` gives each service's description, used when a tool has none.
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
    let mut out = String::from("## MCP tools\nMCP tools for this request (name: what it does):\n");
    for t in matching {
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
        "Call a tool by its exact name. To see its parameters first, call `{DESCRIBE_TOOL}` with {{\"name\": \"<tool name>\"}}; a call with wrong arguments also returns the full schema."
    ));
    Some(out)
}
