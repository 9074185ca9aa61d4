//! The JSON tool decision of spec 002 and the `tool_call` field of spec 004 (O2).

use serde_json::{Map, Value};

use crate::json::{JsonError, extract_json};

/// What the model decided: call a tool, or reply to the user.
///
/// ```
/// use toolwright_output_control::{parse_tool_decision, ToolDecision};
/// use serde_json::json;
/// // 002 shape
/// let d = parse_tool_decision(r#"{"tool": "get_weather", "arguments": {"city": "北京"}}"#)?;
/// assert_eq!(d, ToolDecision::Call { name: "get_weather".into(), arguments: json!({"city": "北京"}) });
/// // 004 shape, with a reply asking nothing
/// let d = parse_tool_decision(r#"{"tool_call": null, "reply": "你好"}"#)?;
/// assert_eq!(d, ToolDecision::Reply { text: "你好".into() });
/// # Ok::<(), toolwright_output_control::DecisionError>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDecision {
    /// Run the tool `name` with `arguments` (always a JSON object).
    Call {
        /// The tool's name.
        name: String,
        /// The arguments, a JSON object (`{}` when the model gave none).
        arguments: Value,
    },
    /// No tool: `text` is the answer for the user.
    Reply {
        /// The reply.
        text: String,
    },
}

/// The answer is not a usable tool decision. The `Display` text tells the model how to fix it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// No JSON could be taken from the answer. [`JsonError::NotFound`] here usually means the
    /// model answered in plain prose; a caller may treat that as a reply.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// The JSON is not an object.
    #[error("the answer is JSON {found}, not an object; {SHAPES}")]
    NotAnObject {
        /// What was found instead (e.g. "an array").
        found: &'static str,
    },
    /// The object has neither `tool`, `tool_call` nor a reply.
    #[error("the JSON object has no \"tool\" or \"tool_call\" field and no \"reply\"; {SHAPES}")]
    NoDecision,
    /// Both `tool` and `tool_call` name a call.
    #[error("the JSON has both \"tool\" and \"tool_call\"; use only one of them. {SHAPES}")]
    Ambiguous,
    /// The tool name is missing, empty or not a string.
    #[error(
        "the tool name is {problem}; \"{field}\" must be the tool's name as a non-empty string"
    )]
    BadToolName {
        /// Where the name should be: `tool` or `tool_call.name`.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The arguments are not a JSON object (or a string holding one).
    #[error(
        "the arguments of tool \"{tool}\" {problem}; \"arguments\" must be a JSON object such as {{\"city\": \"北京\"}}"
    )]
    BadArguments {
        /// The tool the call was for.
        tool: String,
        /// What is wrong with them.
        problem: String,
    },
    /// `tool` (or `tool_call`) is null but there is no reply text.
    #[error(
        "there is no tool call, so a reply is needed: {problem}; give \"reply\" as a string, e.g. {{\"tool\": null, \"reply\": \"...\"}}"
    )]
    MissingReply {
        /// What is wrong.
        problem: String,
    },
}

const SHAPES: &str = "answer with {\"tool\": \"NAME\", \"arguments\": {...}} to call a tool, or {\"tool\": null, \"reply\": \"...\"} to answer the user";

impl DecisionError {
    /// A short text to send back to the model so that it answers in the right shape.
    pub fn for_model(&self) -> String {
        format!("Your answer could not be used: {self}. Reply with the JSON only.")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads a tool decision from a model answer (bare JSON, fenced, or amid prose).
///
/// Accepted, with `arguments` also accepted as a string that holds a JSON object, and
/// missing or `null` arguments read as `{}`:
/// * 002: `{"tool": "name", "arguments": {...}}` · `{"tool": null, "reply": "..."}`
/// * 004: `{"tool_call": {"name": "name", "arguments": {...}}}` (a `reply`/`content` beside
///   it is ignored) · `{"tool_call": null, "reply": "..."}` (or `"content"`)
/// * `{"reply": "..."}` alone is a reply.
///
/// ```
/// use toolwright_output_control::{parse_tool_decision, ToolDecision};
/// let answer = "我来查一下。\n```json\n{\"tool_call\": {\"name\": \"search\", \"arguments\": \"{\\\"q\\\": \\\"rust\\\"}\"}}\n```";
/// let ToolDecision::Call { name, arguments } = parse_tool_decision(answer)? else { panic!() };
/// assert_eq!(name, "search");
/// assert_eq!(arguments["q"], "rust");
/// let err = parse_tool_decision(r#"{"tool": "search", "arguments": [1]}"#).unwrap_err();
/// assert!(err.to_string().contains("must be a JSON object"));
/// # Ok::<(), toolwright_output_control::DecisionError>(())
/// ```
pub fn parse_tool_decision(text: &str) -> Result<ToolDecision, DecisionError> {
    let value = extract_json(text)?;
    let Value::Object(obj) = value else {
        return Err(DecisionError::NotAnObject {
            found: type_name(&value),
        });
    };
    let tool = obj.get("tool");
    let tool_call = obj.get("tool_call");
    let tool_is_call = tool.is_some_and(|t| !t.is_null());
    let tool_call_is_call = tool_call.is_some_and(|t| !t.is_null());
    if tool_is_call && tool_call_is_call {
        return Err(DecisionError::Ambiguous);
    }
    if let Some(t) = tool.filter(|_| tool_is_call) {
        let name = tool_name(t, "tool")?;
        let arguments = arguments(obj.get("arguments"), &name)?;
        return Ok(ToolDecision::Call { name, arguments });
    }
    if let Some(tc) = tool_call.filter(|_| tool_call_is_call) {
        let Value::Object(call) = tc else {
            return Err(DecisionError::BadToolName {
                field: "tool_call.name",
                problem: format!(
                    "unreadable because \"tool_call\" is {}, not an object {{\"name\": ..., \"arguments\": {{...}}}}",
                    type_name(tc)
                ),
            });
        };
        let name = match call.get("name") {
            Some(n) => tool_name(n, "tool_call.name")?,
            None => {
                return Err(DecisionError::BadToolName {
                    field: "tool_call.name",
                    problem: "missing".into(),
                });
            }
        };
        let arguments = arguments(call.get("arguments"), &name)?;
        return Ok(ToolDecision::Call { name, arguments });
    }
    // No call: a reply is needed.
    let reply = obj.get("reply").or_else(|| obj.get("content"));
    match reply {
        Some(Value::String(s)) => Ok(ToolDecision::Reply { text: s.clone() }),
        Some(other) => Err(DecisionError::MissingReply {
            problem: format!("\"reply\" is {}, not a string", type_name(other)),
        }),
        None if tool.is_none() && tool_call.is_none() => Err(DecisionError::NoDecision),
        None => Err(DecisionError::MissingReply {
            problem: "\"reply\" is missing".into(),
        }),
    }
}

fn tool_name(v: &Value, field: &'static str) -> Result<String, DecisionError> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Value::String(_) => Err(DecisionError::BadToolName {
            field,
            problem: "empty".into(),
        }),
        other => Err(DecisionError::BadToolName {
            field,
            problem: format!("{} instead of a string", type_name(other)),
        }),
    }
}

fn arguments(v: Option<&Value>, tool: &str) -> Result<Value, DecisionError> {
    let bad = |problem: String| DecisionError::BadArguments {
        tool: tool.to_owned(),
        problem,
    };
    match v {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(Value::Object(o)) => Ok(Value::Object(o.clone())),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Value::Object(Map::new())),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(o)) => Ok(Value::Object(o)),
            Ok(other) => Err(bad(format!(
                "are a string holding {}, not an object",
                type_name(&other)
            ))),
            Err(e) => Err(bad(format!("are a string that is not valid JSON ({e})"))),
        },
        Some(other) => Err(bad(format!("are {}", type_name(other)))),
    }
}
