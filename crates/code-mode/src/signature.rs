//! Tools as Python functions: a tool's JSON Schema becomes a typed signature; its level-1 line
//! (the first sentence of its description) the one-line docstring the model sees in
//! `run_code`'s description; the full docstring (every parameter, nested keys, the whole
//! description) is level 2, given on demand by `describe_function` and by `help()` in a script.

use serde_json::{Map, Value, json};
use toolwright_core::ToolSpec;

/// Length of a level-1 line, as for MCP tools (mcp-bridge's catalog).
const LEVEL1_CHARS: usize = 120;
/// How deep nested object schemas are spelled out in a full description.
const MAX_DEPTH: usize = 3;

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "match", "case", "type",
];

/// Names the runner defines in a script's namespace; a tool is never bound over them.
const RESERVED: &[&str] = &[
    "json",
    "print",
    "help",
    "ToolError",
    "ToolTimeout",
    "InvalidArguments",
    "ToolNotFound",
    "ToolUnavailable",
    "ToolCrashed",
    "ResultTooLarge",
    "ApprovalRequired",
    "CallLimitExceeded",
];

/// Whether `s` is a plain Python identifier (ASCII) that is not a keyword.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&s)
}

/// The Python name of tool `tool`: `-` becomes `_`; a name that is a keyword, a reserved name
/// or starts with a digit gets a `_` added.
pub(crate) fn python_name(tool: &str) -> String {
    let mut name: String = tool
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    if KEYWORDS.contains(&name.as_str()) || RESERVED.contains(&name.as_str()) {
        name.push('_');
    }
    name
}

pub(crate) use toolwright_core::first_sentence;

/// One parameter of a function.
#[derive(Debug, Clone)]
struct Param {
    name: String,
    schema: Value,
    required: bool,
}

/// A tool bound as a Python function.
#[derive(Debug, Clone)]
pub(crate) struct Function {
    /// The name in the script.
    pub name: String,
    /// The tool it calls.
    pub tool: String,
    description: String,
    params: Vec<Param>,
    /// The tool's parameter names are not all identifiers: the function takes one dict.
    by_dict: bool,
}

impl Function {
    /// The function for `spec`.
    pub fn new(spec: &ToolSpec) -> Self {
        let props = spec
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let required: Vec<&str> = spec
            .parameters
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut params: Vec<Param> = props
            .iter()
            .map(|(k, v)| Param {
                name: k.clone(),
                schema: v.clone(),
                required: required.contains(&k.as_str()),
            })
            .collect();
        // Required first (Python needs them before the ones with a default), each group in the
        // schema's order.
        params.sort_by_key(|p| !p.required);
        let by_dict = params.iter().any(|p| !is_identifier(&p.name));
        Self {
            name: python_name(&spec.name),
            tool: spec.name.to_string(),
            description: spec.description.to_string(),
            params,
            by_dict,
        }
    }

    /// The tool's whole description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The level-1 line: the first sentence of the description.
    pub fn level1(&self) -> String {
        first_sentence(&self.description, LEVEL1_CHARS)
    }

    /// `name(a: str, b: int | None = None) -> Any`, top-level types only (nested objects are
    /// `dict`).
    pub fn signature(&self) -> String {
        let args = if self.by_dict {
            "arguments: dict".to_owned()
        } else {
            self.params
                .iter()
                .map(|p| {
                    let ty = py_type(&p.schema, 1);
                    if p.required {
                        format!("{}: {ty}", p.name)
                    } else {
                        format!("{}: {} = None", p.name, optional(&ty))
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!("{}({args}) -> Any", self.name)
    }

    /// The level-1 entry of `run_code`'s description: the signature without its `-> Any`
    /// (every function returns its tool's JSON result, which the description says once; the
    /// suffix cost about 3 tokens a function, 7 % of the list — docs/benchmarks-archive.md).
    pub fn brief(&self) -> String {
        let signature = self.signature();
        let signature = signature.strip_suffix(" -> Any").unwrap_or(&signature);
        let line = self.level1();
        if line.is_empty() {
            format!("- {signature}")
        } else {
            format!("- {signature}: {line}")
        }
    }

    /// The full description (level 2): a Python stub with the whole description and every
    /// parameter, nested object keys spelled out.
    pub fn full(&self) -> String {
        let mut doc = String::new();
        let description = self.description.trim();
        if !description.is_empty() {
            doc.push_str(description);
            doc.push_str("\n\n");
        }
        if !self.params.is_empty() {
            if self.by_dict {
                doc.push_str(
                    "Call it with one dict (the tool's parameter names are not Python names).\n",
                );
            }
            doc.push_str("Args:\n");
            for p in &self.params {
                describe_param(&mut doc, &p.name, &p.schema, p.required, 1);
            }
            doc.push('\n');
        }
        doc.push_str(&format!(
            "Calls tool `{}`. Returns its JSON result as Python values; raises ToolError (or a subclass: ToolTimeout, InvalidArguments, ToolNotFound, ToolUnavailable, ToolCrashed, ResultTooLarge, ApprovalRequired, CallLimitExceeded) when the call fails.",
            self.tool
        ));
        let body: String = doc
            .trim_end()
            .lines()
            .map(|l| {
                if l.is_empty() {
                    String::new()
                } else {
                    format!("    {}", l.replace("\"\"\"", "\\\"\\\"\\\""))
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        format!("def {}:\n    \"\"\"\n{body}\n    \"\"\"", self.signature())
    }

    /// What the runner needs to define the function.
    pub fn runner_spec(&self) -> Value {
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| p.required)
            .map(|p| &*p.name)
            .collect();
        let params: Vec<&str> = self.params.iter().map(|p| &*p.name).collect();
        json!({
            "name": self.name,
            "tool": self.tool,
            "params": params,
            "required": required,
            "dict": self.by_dict,
            "doc": self.full(),
        })
    }
}

fn optional(ty: &str) -> String {
    if ty == "Any" || ty.ends_with("| None") || ty == "None" {
        ty.to_owned()
    } else {
        format!("{ty} | None")
    }
}

fn describe_param(out: &mut String, name: &str, schema: &Value, required: bool, depth: usize) {
    let indent = "    ".repeat(depth);
    let ty = py_type(schema, 1);
    let mut line = format!(
        "{indent}{name} ({ty}{}",
        if required { "" } else { ", optional" }
    );
    if let Some(d) = schema.get("default") {
        line.push_str(&format!(", default {d}"));
    }
    line.push(')');
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        let d = d.split_whitespace().collect::<Vec<_>>().join(" ");
        line.push_str(": ");
        line.push_str(&d);
    }
    out.push_str(&line);
    out.push('\n');
    let object = match schema.get("type").and_then(Value::as_str) {
        Some("array") => schema.get("items").unwrap_or(&Value::Null),
        _ => schema,
    };
    if depth < MAX_DEPTH
        && let Some(props) = object.get("properties").and_then(Value::as_object)
    {
        let required: Vec<&str> = object
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push_str(&format!("{indent}    keys:\n"));
        for (k, v) in props {
            describe_param(out, k, v, required.contains(&k.as_str()), depth + 2);
        }
    }
}

/// The Python type of a JSON Schema: `str`, `int`, `float`, `bool`, `None`, `list[T]`, `dict`
/// (or `dict[str, T]`), `Literal[...]` for an enum or const, unions with `|`; `Any` when the
/// schema does not say.
pub(crate) fn py_type(schema: &Value, depth: usize) -> String {
    let Some(obj) = schema.as_object() else {
        return "Any".to_owned();
    };
    if depth > 4 {
        return "Any".to_owned();
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        return literal(values);
    }
    if let Some(c) = obj.get("const") {
        return literal(std::slice::from_ref(c));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = obj.get(key).and_then(Value::as_array) {
            return union(alts.iter().map(|a| py_type(a, depth + 1)));
        }
    }
    match obj.get("type") {
        Some(Value::String(t)) => one_type(t, obj, depth),
        Some(Value::Array(ts)) => union(
            ts.iter()
                .filter_map(Value::as_str)
                .map(|t| one_type(t, obj, depth)),
        ),
        _ if obj.contains_key("properties") => "dict".to_owned(),
        _ => "Any".to_owned(),
    }
}

fn one_type(t: &str, obj: &Map<String, Value>, depth: usize) -> String {
    match t {
        "string" => "str".to_owned(),
        "integer" => "int".to_owned(),
        "number" => "float".to_owned(),
        "boolean" => "bool".to_owned(),
        "null" => "None".to_owned(),
        "array" => match obj.get("items") {
            Some(items) => format!("list[{}]", py_type(items, depth + 1)),
            None => "list".to_owned(),
        },
        "object" => match obj.get("additionalProperties") {
            Some(v @ Value::Object(_)) if !obj.contains_key("properties") => {
                format!("dict[str, {}]", py_type(v, depth + 1))
            }
            _ => "dict".to_owned(),
        },
        _ => "Any".to_owned(),
    }
}

fn union(types: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for t in types {
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    if seen.iter().any(|t| t == "Any") || seen.is_empty() {
        return "Any".to_owned();
    }
    seen.join(" | ")
}

fn literal(values: &[Value]) -> String {
    let items: Vec<String> = values
        .iter()
        .map(|v| match v {
            Value::String(s) => format!("{s:?}"),
            Value::Bool(true) => "True".to_owned(),
            Value::Bool(false) => "False".to_owned(),
            Value::Null => "None".to_owned(),
            other => other.to_string(),
        })
        .collect();
    format!("Literal[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> ToolSpec {
        ToolSpec::new(
            "get-weather",
            "Get current weather for a city. Uses a public service; slow at night.",
            json!({
                "type": "object",
                "properties": {
                    "units": {"type": "string", "enum": ["c", "f"], "description": "Degrees"},
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": ["integer", "null"]},
                    "at": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}, "required": ["lat"]},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["city"]
            }),
        )
    }

    #[test]
    fn code_mode_signature_is_typed_from_the_schema_with_required_first() {
        let f = Function::new(&weather());
        assert_eq!(f.name, "get_weather");
        assert_eq!(
            f.signature(),
            r#"get_weather(city: str, units: Literal["c", "f"] | None = None, days: int | None = None, at: dict | None = None, tags: list[str] | None = None) -> Any"#
        );
        assert_eq!(
            f.brief(),
            r#"- get_weather(city: str, units: Literal["c", "f"] | None = None, days: int | None = None, at: dict | None = None, tags: list[str] | None = None): Get current weather for a city."#
        );
    }

    #[test]
    fn code_mode_full_description_has_every_parameter_and_nested_keys() {
        let full = Function::new(&weather()).full();
        assert!(full.starts_with("def get_weather(city: str"), "{full}");
        for needed in [
            "Uses a public service; slow at night.",
            "city (str): City name",
            "units (Literal[\"c\", \"f\"], optional): Degrees",
            "lat (float)",
            "lon (float, optional)",
            "Calls tool `get-weather`",
        ] {
            assert!(full.contains(needed), "{needed} missing from:\n{full}");
        }
    }

    #[test]
    fn code_mode_names_that_are_not_python_become_python() {
        assert_eq!(python_name("svc__search"), "svc__search");
        assert_eq!(python_name("9lives"), "_9lives");
        assert_eq!(python_name("class"), "class_");
        assert_eq!(python_name("print"), "print_");
        let odd = Function::new(&ToolSpec::new(
            "odd",
            "",
            json!({"type": "object", "properties": {"weird-key": {"type": "string"}}}),
        ));
        assert_eq!(odd.signature(), "odd(arguments: dict) -> Any");
        assert_eq!(odd.brief(), "- odd(arguments: dict)");
    }

    #[test]
    fn code_mode_types_of_unusual_schemas() {
        assert_eq!(py_type(&json!({}), 1), "Any");
        assert_eq!(py_type(&json!(true), 1), "Any");
        assert_eq!(
            py_type(&json!({"anyOf": [{"type": "string"}, {"type": "null"}]}), 1),
            "str | None"
        );
        assert_eq!(py_type(&json!({"const": 3}), 1), "Literal[3]");
        assert_eq!(
            py_type(
                &json!({"type": "object", "additionalProperties": {"type": "integer"}}),
                1
            ),
            "dict[str, int]"
        );
        // Deep nesting ends in Any, not in a stack overflow.
        let mut deep = json!({"type": "string"});
        for _ in 0..200 {
            deep = json!({"type": "array", "items": deep});
        }
        assert!(py_type(&deep, 1).contains("Any"));
        assert_eq!(first_sentence("One. Two.", 120), "One.");
        assert_eq!(first_sentence(&"x".repeat(200), 10).chars().count(), 10);
    }
}
