//! The catalog of MCP tools as the model sees them: [`McpTool`] (service, original name, exposed
//! name, description, normalised schema), how a set of servers' tool lists becomes one table
//! of unique exposed names, and how a name the model wrote is resolved in it.
//!
//! Pure: no processes, no locks. Discovery ([`crate::McpBridge::tools`]) feeds it the running
//! servers' lists.

use std::collections::HashSet;

use serde_json::Value;
use toolwright_core::ToolSpec;

use crate::names;

/// Length of a level-1 description sentence.
const LEVEL1_CHARS: usize = 120;

/// One tool of a running service, as discovered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct McpTool {
    /// The service it belongs to.
    pub service: String,
    /// Its name on the server.
    pub name: String,
    /// The name the model calls it by (`service__tool`, see `crate::names`).
    pub exposed_name: String,
    /// The server's full description (level 2).
    pub description: String,
    /// The input schema, normalised ([`toolwright_core::normalize_schema`]).
    pub input_schema: Value,
}

impl McpTool {
    /// The level-1 text of this tool: the first sentence (at most 120 characters) of its
    /// service's description — the configured one, or the service name when none is configured
    /// (M5, [`crate::ServiceConfig::description`]). The server's own description is level 2:
    /// [`McpTool::spec`], the describe tool.
    pub fn level1(&self, service_description: &str) -> String {
        let s = names::first_sentence(service_description, LEVEL1_CHARS);
        if s.is_empty() {
            names::first_sentence(&self.service, LEVEL1_CHARS)
        } else {
            s
        }
    }

    /// The full spec (level 2): exposed name, the server's description and the schema.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            self.exposed_name.clone(),
            self.description.clone(),
            self.input_schema.clone(),
        )
    }
}

/// One table of tools from the running servers' lists, in the order given: each tool gets its
/// exposed name ([`names::exposed_name`]); a name already taken gets the hashed form; a tool
/// whose hashed form is taken too is left out (logged).
pub(crate) fn build<'a, I>(lists: I) -> Vec<McpTool>
where
    I: IntoIterator<Item = (&'a str, &'a [rmcp::model::Tool])>,
{
    let mut out = Vec::new();
    let mut used = HashSet::new();
    for (service, tools) in lists {
        for t in tools {
            let mut exposed = names::exposed_name(service, &t.name);
            if used.contains(&exposed) {
                exposed = names::hashed(&exposed, service, &t.name);
            }
            if !used.insert(exposed.clone()) {
                tracing::warn!(service = %service, tool = %t.name, "tool name clash; tool skipped");
                continue;
            }
            out.push(McpTool {
                service: service.to_owned(),
                name: t.name.to_string(),
                exposed_name: exposed,
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: toolwright_core::normalize_schema(Value::Object(
                    t.input_schema.as_ref().clone(),
                )),
            });
        }
    }
    out
}

/// The tool `name` refers to: an exposed name first; else an original name that exactly one
/// tool has (a bare name two services share is ambiguous, so `None` rather than a guess).
pub(crate) fn resolve<'a>(tools: &'a [McpTool], name: &str) -> Option<&'a McpTool> {
    if let Some(t) = tools.iter().find(|t| t.exposed_name == name) {
        return Some(t);
    }
    let mut by_original = tools.iter().filter(|t| t.name == name);
    match (by_original.next(), by_original.next()) {
        (Some(t), None) => Some(t),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn tool(name: &str, schema: Value) -> rmcp::model::Tool {
        let Value::Object(m) = schema else {
            unreachable!("object schemas only")
        };
        rmcp::model::Tool::new(name.to_owned(), "Does it. In detail.", Arc::new(m))
    }

    #[test]
    fn m1_catalog_names_are_unique_and_schemas_normalised() {
        let a = [
            tool("echo", json!({"$schema": "x"})),
            tool("a b", json!({})),
        ];
        let b = [tool("echo", json!({"type": "object", "required": "oops"}))];
        let c = [tool("b", json!({}))];
        let cat = build([("s", &a[..]), ("s2", &b[..]), ("s__a", &c[..])]);
        let exposed: Vec<&str> = cat.iter().map(|t| t.exposed_name.as_str()).collect();
        assert_eq!(exposed[..3], ["s__echo", "s__a_b", "s2__echo"]);
        // `s__a` + `b` sanitises to `s__a__b`, no clash with `s__a_b`.
        assert_eq!(exposed[3], "s__a__b");
        for t in &cat {
            assert_eq!(t.input_schema, json!({"type": "object", "properties": {}}));
            assert!(toolwright_core::is_valid_tool_name(&t.exposed_name));
        }
        // A clash after sanitising gets the hashed form.
        let x = [tool("a.b", json!({})), tool("a_b", json!({}))];
        let cat = build([("s", &x[..])]);
        assert_eq!(cat[0].exposed_name, "s__a_b");
        assert_ne!(cat[1].exposed_name, "s__a_b");
        assert!(toolwright_core::is_valid_tool_name(&cat[1].exposed_name));
    }

    #[test]
    fn m1_bare_name_resolves_only_when_unambiguous() {
        let a = [tool("echo", json!({})), tool("add", json!({}))];
        let b = [tool("echo", json!({}))];
        let cat = build([("s", &a[..]), ("t", &b[..])]);
        assert_eq!(
            resolve(&cat, "t__echo").map(|t| t.service.as_str()),
            Some("t")
        );
        assert_eq!(resolve(&cat, "add").map(|t| t.service.as_str()), Some("s"));
        assert_eq!(resolve(&cat, "echo"), None);
        assert_eq!(resolve(&cat, "nope"), None);
    }

    #[test]
    fn m5_level1_is_the_service_description_not_the_tool_text() {
        let cat = build([("weather", &[tool("now", json!({}))][..])]);
        let t = &cat[0];
        assert_eq!(
            t.level1("Weather anywhere. Uses wttr.in."),
            "Weather anywhere."
        );
        assert!(!t.level1("Weather anywhere.").contains("Does it"));
        // The default description is the service name (004).
        assert_eq!(t.level1(""), "weather");
        assert_eq!(&*t.spec().description, "Does it. In detail.");
    }
}
