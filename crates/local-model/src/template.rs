//! The local model's chat template with tools: ChatML turns, the tools described in the system
//! turn, calls written as `<tool_call>` blocks and results given back as `<tool_response>`
//! blocks (the format of the Hermes / Qwen2.5 ChatML tool templates that llama.cpp and vLLM
//! render). It is this backend's own rendering of a request: the layers above send ordinary
//! messages and tools and get ordinary tool-call events back.

use serde_json::{Value, json};
use toolwright_core::{Message, Part, ToolCall, ToolSpec};

use crate::grammar::{TOOL_CALL_CLOSE, TOOL_CALL_OPEN};

/// The ChatML turns (role, content) of a request.
pub(crate) fn turns(
    messages: &[Message],
    tools: &[ToolSpec],
    default_system: &str,
) -> Vec<(&'static str, String)> {
    let mut turns: Vec<(&'static str, String)> = Vec::new();
    if !matches!(messages.first(), Some(Message::System { .. })) {
        turns.push(("system", default_system.to_owned()));
    }
    for m in messages {
        match m {
            Message::System { content } => turns.push(("system", content.clone())),
            Message::User { content, parts } => turns.push(("user", with_parts(content, parts))),
            Message::Assistant {
                content,
                tool_calls,
                parts,
            } => {
                let mut text = with_parts(content, parts);
                for c in tool_calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&render_call(c));
                }
                turns.push(("assistant", text));
            }
            Message::Tool {
                name,
                content,
                parts,
                ..
            } => {
                let content = with_parts(content, parts);
                let block = format!("<tool_response>\n{name}: {content}\n</tool_response>");
                // Results of one round share one turn, as the model's calls shared one.
                match turns.last_mut() {
                    Some(("user", prev)) if prev.ends_with("</tool_response>") => {
                        prev.push('\n');
                        prev.push_str(&block);
                    }
                    _ => turns.push(("user", block)),
                }
            }
        }
    }
    if !tools.is_empty()
        && let Some((_, system)) = turns.first_mut()
    {
        system.push_str(&tools_section(tools));
    }
    turns
}

/// A message's text with its parts as text: more text as it is, media as a line naming what
/// was left out (this model reads text only; a person's media is refused before this, see
/// `refuse_media`), reasoning of other models and cache hints not at all.
fn with_parts(content: &str, parts: &[Part]) -> String {
    let mut text = content.to_owned();
    for p in parts {
        let line = p.placeholder();
        if !line.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&line);
        }
    }
    text
}

/// A call exactly as the grammar makes the model write it.
pub(crate) fn render_call(c: &ToolCall) -> String {
    let mut s = format!("{TOOL_CALL_OPEN}{{\"name\": ");
    fixed_json(&json!(c.name), &mut s);
    s.push_str(", \"arguments\": ");
    fixed_json(&c.arguments, &mut s);
    s.push('}');
    s.push_str(TOOL_CALL_CLOSE);
    s
}

/// JSON in the grammar's layout: `{"a": 1, "b": [1, 2]}` (a space after `:` and `,`).
fn fixed_json(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                fixed_json(x, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                fixed_json(x, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The system prompt's description of the tools and of how to call them.
/// `v` with every object's keys in alphabetical order.
fn sorted_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted_keys(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted_keys).collect()),
        other => other.clone(),
    }
}

fn tools_section(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "\n\n# Tools\n\nYou may call one of these functions to get facts you do not know:\n<tools>\n",
    );
    for t in tools {
        s.push_str(&format!(
            "{{\"name\": {}, \"description\": {}, \"parameters\": {}}}",
            json!(t.name),
            json!(t.description),
            sorted_keys(&t.parameters)
        ));
        s.push('\n');
    }
    s.push_str(
        "</tools>\n\nTo call a function, answer with only:\n<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n</tool_call>\n\
         A function's result comes back inside <tool_response></tool_response>. Then answer the user in plain text, \
         stating the facts the result gives and nothing that contradicts them.",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_and_results_are_rendered_as_tool_blocks() {
        let spec = ToolSpec::new(
            "get_weather",
            "Weather of a city.",
            json!({"type": "object"}),
        );
        let msgs = vec![
            Message::user("Weather in Paris?"),
            Message::assistant_with_tool_calls(
                "",
                vec![ToolCall::new("c1", "get_weather", json!({"city": "Paris"}))],
            ),
            Message::tool("c1", "get_weather", r#"{"sky":"sunny"}"#),
        ];
        let t = turns(&msgs, &[spec], "You are helpful.");
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].0, "system");
        assert!(t[0].1.starts_with("You are helpful.\n\n# Tools"));
        assert!(
            t[0].1
                .contains(r#"{"name": "get_weather", "description": "Weather of a city.""#)
        );
        assert_eq!(
            t[2],
            (
                "assistant",
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
                    .to_owned()
            )
        );
        assert_eq!(
            t[3],
            (
                "user",
                "<tool_response>\nget_weather: {\"sky\":\"sunny\"}\n</tool_response>".to_owned()
            )
        );
        // Nothing of tool-system's JSON-decision framing.
        assert!(t.iter().all(|(_, c)| !c.contains("[Tool result for")));
    }

    #[test]
    fn results_of_one_round_share_one_turn_and_no_tools_means_no_section() {
        let msgs = vec![
            Message::system("S"),
            Message::user("q"),
            Message::tool("a", "x", "1"),
            Message::tool("b", "y", "2"),
        ];
        let t = turns(&msgs, &[], "unused");
        assert_eq!(t[0], ("system", "S".to_owned()));
        assert_eq!(t.len(), 3);
        assert_eq!(
            t[2].1,
            "<tool_response>\nx: 1\n</tool_response>\n<tool_response>\ny: 2\n</tool_response>"
        );
    }
}
