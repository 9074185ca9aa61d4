//! The rules every tool source shares: what a tool name may be, and what a parameters schema
//! must look like for providers to accept it.

use serde_json::{Map, Value, json};

/// The longest tool name providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// Whether `name` is a valid tool name for providers: `^[a-zA-Z0-9_-]{1,64}$`.
///
/// ```
/// assert!(toolwright_core::is_valid_tool_name("get_weather"));
/// assert!(toolwright_core::is_valid_tool_name("vector-search"));
/// assert!(!toolwright_core::is_valid_tool_name("get weather"));
/// assert!(!toolwright_core::is_valid_tool_name(""));
/// ```
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Makes a parameters schema acceptable to providers: drops `$schema`; a schema that is not an
/// object schema (`true`, a bare type) becomes `{"type": "object", "properties": {}}`; an
/// object schema gets `type` and `properties` when it lacks them, and loses a `required` that
/// is not an array; `$ref`s into `$defs` are inlined when they are not recursive.
///
/// ```
/// use serde_json::json;
/// let s = toolwright_core::normalize_schema(json!({"$schema": "x", "type": "object"}));
/// assert_eq!(s, json!({"type": "object", "properties": {}}));
/// assert_eq!(toolwright_core::normalize_schema(json!(true)), json!({"type": "object", "properties": {}}));
/// ```
pub fn normalize_schema(schema: Value) -> Value {
    let mut obj = match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    obj.remove("$schema");
    if let Some(Value::Object(defs)) = obj.remove("$defs") {
        let mut root = Value::Object(obj);
        let mut recursive = false;
        inline_refs(&mut root, &defs, 0, &mut recursive);
        obj = match root {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if recursive {
            obj.insert("$defs".into(), Value::Object(defs));
        }
    }
    match obj.get("type") {
        None => {
            obj.insert("type".into(), json!("object"));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => {
            // Not an object schema: providers require the arguments to be an object. The
            // tool's own validation still gives the precise error.
            return json!({"type": "object", "properties": {}});
        }
    }
    if !matches!(obj.get("properties"), Some(Value::Object(_))) {
        obj.insert("properties".into(), json!({}));
    }
    if obj.get("required").is_some_and(|r| !r.is_array()) {
        obj.remove("required");
    }
    Value::Object(obj)
}

const MAX_INLINE_DEPTH: usize = 32;

fn inline_refs(v: &mut Value, defs: &Map<String, Value>, depth: usize, recursive: &mut bool) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
            {
                if depth >= MAX_INLINE_DEPTH {
                    *recursive = true;
                    return;
                }
                if let Some(Value::Object(def)) = defs.get(name) {
                    let mut def = Value::Object(def.clone());
                    inline_refs(&mut def, defs, depth + 1, recursive);
                    if *recursive {
                        return;
                    }
                    m.remove("$ref");
                    if let Value::Object(d) = def {
                        for (k, val) in d {
                            m.entry(k).or_insert(val);
                        }
                    }
                    return;
                }
            }
            for val in m.values_mut() {
                inline_refs(val, defs, depth, recursive);
            }
        }
        Value::Array(a) => {
            for val in a {
                inline_refs(val, defs, depth, recursive);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t1_tool_name_rules() {
        assert!(is_valid_tool_name(&"a".repeat(64)));
        assert!(!is_valid_tool_name(&"a".repeat(65)));
        assert!(!is_valid_tool_name("工具"));
        assert!(!is_valid_tool_name("a.b"));
    }

    #[test]
    fn m1_schema_without_parameters_is_normalised() {
        assert_eq!(
            normalize_schema(json!({})),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            normalize_schema(json!({"type": "object", "properties": null, "required": "a"})),
            json!({"type": "object", "properties": {}})
        );
        let full =
            json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]});
        assert_eq!(normalize_schema(full.clone()), full);
        assert_eq!(
            normalize_schema(json!({"type": "string"})),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn t1_non_recursive_refs_are_inlined() {
        let s = normalize_schema(json!({
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/P"}},
            "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}}}
        }));
        assert_eq!(s["properties"]["p"]["properties"]["x"]["type"], "integer");
        assert!(s.get("$defs").is_none());
    }
}
