//! Tool descriptions for system prompts: the tag format of 000 ([`generate_tool_prompt`]) and
//! the JSON decision format of 002 ([`json_decision_prompt`]).

use std::fmt::Write as _;

use serde_json::Value;
use toolwright_core::ToolSpec;

/// The `<tool_action>` tool prompt of 000 (T8): every tool's name, description and parameters,
/// with a usage example; with no tools, a prompt saying that no tools are available.
///
/// ```
/// use toolwright_core::ToolSpec;
/// use serde_json::json;
/// let tools = [ToolSpec::new("vector-search", "Search the knowledge base",
///     json!({"type": "object", "properties": {"query": {"type": "string", "description": "what to find"},
///            "limit": {"type": "integer"}}, "required": ["query"]}))];
/// let p = toolwright_tool_system::generate_tool_prompt(&tools);
/// assert!(p.contains("vector-search") && p.contains("Search the knowledge base"));
/// assert!(p.contains("query") && p.contains("limit"));
/// assert!(p.contains(r#"<tool_action name="vector-search">"#));
/// assert!(toolwright_tool_system::generate_tool_prompt(&[]).contains("No tools are available"));
/// ```
pub fn generate_tool_prompt(tools: &[ToolSpec]) -> String {
    if tools.is_empty() {
        return "No tools are available right now. Do not write <tool_action> tags; answer the user directly.".to_owned();
    }
    let mut s = String::from(
        "You can use the tools below. To call a tool, write a <tool_action> tag with one child element per parameter, each with a value attribute:\n\n",
    );
    for t in tools {
        let _ = writeln!(s, "## {}\n{}", t.name, t.description);
        let params = params(&t.parameters);
        if params.is_empty() {
            s.push_str("Parameters: none\n");
        } else {
            s.push_str("Parameters:\n");
            for p in &params {
                let _ = writeln!(
                    s,
                    "- {} ({}{}){}",
                    p.name,
                    p.ty,
                    if p.required {
                        ", required"
                    } else {
                        ", optional"
                    },
                    if p.description.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", p.description)
                    }
                );
            }
        }
        s.push('\n');
    }
    let example = &tools[0];
    let _ = write!(s, "Example:\n<tool_action name=\"{}\">\n", example.name);
    for p in params(&example.parameters) {
        let _ = writeln!(s, "  <{} value=\"...\" />", p.name);
    }
    s.push_str("</tool_action>\n\nWrite the tag only when you need the tool; the result comes back as a tool message. When you can answer, answer in plain text without tags.");
    s
}

/// The system-prompt section of 002's JSON decision loop: tool list plus the answer format.
///
/// ```
/// use toolwright_core::ToolSpec;
/// use serde_json::json;
/// let tools = [ToolSpec::new("get_weather", "Get current weather for a city",
///     json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}))];
/// let p = toolwright_tool_system::protocol::json_decision_prompt(&tools);
/// assert!(p.contains("get_weather") && p.contains(r#""tool": null"#));
/// ```
pub fn json_decision_prompt(tools: &[ToolSpec]) -> String {
    let mut s = String::new();
    if tools.is_empty() {
        s.push_str("No tools are available right now.\n\n");
    } else {
        s.push_str("Available tools:\n");
        s.push_str(&describe_tools(tools));
        s.push('\n');
    }
    s.push_str(
        "Answer with one JSON object only, no other text:\n\
         - to call a tool: {\"tool\": \"NAME\", \"arguments\": {...}}\n\
         - to reply to the user: {\"tool\": null, \"reply\": \"...\"}\n\
         A tool result comes back as a user message starting with [Tool result for NAME].",
    );
    s
}

/// The system-prompt section of a typed run ([`crate::Agent::run_as`]) for protocols whose
/// answer is the response's text: tools first, then the final answer as JSON of `schema`.
pub(crate) fn typed_answer_prompt(schema: &Value) -> String {
    format!(
        "Use the tools as usual while you work. When you give your final answer to the user, \
         it must be a single JSON object that matches this JSON Schema, with no other text:\n{schema}"
    )
}

/// One line per tool: name, description and the parameters schema as compact JSON.
pub fn describe_tools(tools: &[ToolSpec]) -> String {
    let mut s = String::new();
    for t in tools {
        let _ = writeln!(
            s,
            "- {}: {} Parameters: {}",
            t.name, t.description, t.parameters
        );
    }
    s
}

struct Param {
    name: String,
    ty: String,
    description: String,
    required: bool,
}

fn params(schema: &Value) -> Vec<Param> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, p)| Param {
            name: name.clone(),
            ty: match p.get("type") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("|"),
                _ => "any".to_owned(),
            },
            description: p
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            required: required.contains(&name.as_str()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn t8_generate_tool_prompt_has_name_description_params_and_example() {
        let tools = [
            ToolSpec::new(
                "vector-search",
                "Search documents",
                json!({"type": "object", "properties": {"query": {"type": "string", "description": "the query"}, "limit": {"type": "integer"}}, "required": ["query"]}),
            ),
            ToolSpec::new(
                "clock",
                "Current time",
                json!({"type": "object", "properties": {}}),
            ),
        ];
        let p = generate_tool_prompt(&tools);
        for needle in [
            "## vector-search",
            "Search documents",
            "- query (string, required): the query",
            "- limit (integer, optional)",
            "## clock",
            "Parameters: none",
            "<tool_action name=\"vector-search\">",
            "<query value=\"...\" />",
            "</tool_action>",
        ] {
            assert!(p.contains(needle), "missing {needle:?} in\n{p}");
        }
    }

    #[test]
    fn t8_empty_tool_list_says_no_tools() {
        let p = generate_tool_prompt(&[]);
        assert!(p.contains("No tools are available"));
        assert!(!p.contains("<tool_action name="));
    }
}
