//! Schema → grammar: the JSON-schema subset (and a set of tools) compiled into the nodes of a
//! [`Grammar`], with each node's shortest completion and the longest one any state inside it
//! can come to owe.

use serde_json::Value;

use toolwright_core::ToolSpec;

use super::{
    AnswerChoice, DEFAULT_MAX_ITEMS, DEFAULT_STRING_MAX, Grammar, INTEGER_RANGE_MAX,
    LONGEST_STRING, Node, NodeId, SchemaError, TOOL_CALL_CLOSE, TOOL_CALL_OPEN,
};

/// A text answer may not start with this: neither a call nor a copy of the template's
/// `<tool_response>` blocks (nor a made-up `<user_response>`, which SmolLM2 writes) is an answer.
const TEXT_MAY_NOT_START: &str = "<";

/// Integer bounds that are enforced (as literals) when an integer has both ends.
const INTEGER_BOUNDS: [&str; 4] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/// Keywords that only annotate and are ignored.
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "format",
    "additionalProperties",
    "deprecated",
    "readOnly",
    "writeOnly",
];

struct Builder {
    nodes: Vec<Node>,
}

impl Builder {
    fn add(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        (self.nodes.len() - 1) as NodeId
    }
    fn lit(&mut self, s: &str) -> NodeId {
        self.add(Node::Lit(s.as_bytes().to_vec()))
    }
    fn seq(&mut self, v: Vec<NodeId>) -> NodeId {
        self.add(Node::Seq(v))
    }

    fn check_keys(
        obj: &serde_json::Map<String, Value>,
        allowed: &[&str],
        at: &str,
    ) -> Result<(), SchemaError> {
        for k in obj.keys() {
            if !allowed.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                return Err(SchemaError(format!(
                    "schema keyword `{k}` at {at} is not supported by constrained decoding"
                )));
            }
        }
        Ok(())
    }

    fn schema(&mut self, s: &Value, at: &str, depth: usize) -> Result<NodeId, SchemaError> {
        if depth > 16 {
            return Err(SchemaError(format!("schema nested too deep at {at}")));
        }
        let obj = match s {
            Value::Bool(true) => {
                return Err(SchemaError(format!(
                    "`true` (any value) at {at} is not supported"
                )));
            }
            Value::Object(o) => o,
            _ => return Err(SchemaError(format!("schema at {at} is not an object"))),
        };
        if let Some(e) = obj.get("enum") {
            Self::check_keys(obj, &["enum", "type"], at)?;
            let vals = e
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| SchemaError(format!("`enum` at {at} must be a non-empty array")))?;
            let mut alts = Vec::new();
            for v in vals {
                if v.is_array() || v.is_object() {
                    return Err(SchemaError(format!(
                        "`enum` at {at}: only strings, numbers, booleans and null"
                    )));
                }
                let text = v.to_string();
                alts.push(self.lit(&text));
            }
            return Ok(self.add(Node::Alt(alts)));
        }
        if let Some(c) = obj.get("const") {
            Self::check_keys(obj, &["const", "type"], at)?;
            let text = c.to_string();
            return Ok(self.lit(&text));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(list) = obj.get(key) {
                Self::check_keys(obj, &[key], at)?;
                let list = list.as_array().filter(|a| !a.is_empty()).ok_or_else(|| {
                    SchemaError(format!("`{key}` at {at} must be a non-empty array"))
                })?;
                let mut alts = Vec::new();
                for (i, sub) in list.iter().enumerate() {
                    alts.push(self.schema(sub, &format!("{at}/{key}/{i}"), depth + 1)?);
                }
                return Ok(self.add(Node::Alt(alts)));
            }
        }
        let types: Vec<&str> = match obj.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            None if obj.contains_key("properties") => vec!["object"],
            _ => {
                return Err(SchemaError(format!(
                    "schema at {at} has no `type` (or `enum`, `const`, `anyOf`)"
                )));
            }
        };
        let mut alts = Vec::new();
        for t in &types {
            alts.push(match *t {
                "string" => {
                    Self::check_keys(obj, &["type", "minLength", "maxLength"], at)?;
                    let max = obj
                        .get("maxLength")
                        .and_then(Value::as_u64)
                        .map(|m| m.min(u64::from(LONGEST_STRING)) as u32)
                        .unwrap_or(DEFAULT_STRING_MAX);
                    let min = match obj.get("minLength") {
                        None => 0,
                        Some(m) => m.as_u64().filter(|&m| m <= u64::from(max)).ok_or_else(|| {
                            SchemaError(format!(
                                "`minLength` at {at} must be a whole number no larger than the longest string ({max} characters)"
                            ))
                        })? as u32,
                    };
                    self.add(Node::Str { min, max })
                }
                "integer" if INTEGER_BOUNDS.iter().any(|k| obj.contains_key(*k)) => {
                    self.integer_range(obj, at)?
                }
                "number" | "integer" => {
                    Self::check_keys(obj, &["type"], at)?;
                    self.add(Node::Num {
                        integer: *t == "integer",
                    })
                }
                "boolean" => {
                    Self::check_keys(obj, &["type"], at)?;
                    let (a, b) = (self.lit("true"), self.lit("false"));
                    self.add(Node::Alt(vec![a, b]))
                }
                "null" => {
                    Self::check_keys(obj, &["type"], at)?;
                    self.lit("null")
                }
                "object" => self.object(obj, at, depth)?,
                "array" => self.array(obj, at, depth)?,
                other => {
                    return Err(SchemaError(format!(
                        "type `{other}` at {at} is not supported"
                    )));
                }
            });
        }
        Ok(if alts.len() == 1 {
            alts[0]
        } else {
            self.add(Node::Alt(alts))
        })
    }

    /// An integer with both bounds (`minimum`/`exclusiveMinimum` and `maximum`/
    /// `exclusiveMaximum`) and at most [`INTEGER_RANGE_MAX`] values: each value as a literal.
    fn integer_range(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        at: &str,
    ) -> Result<NodeId, SchemaError> {
        let mut keys = vec!["type"];
        keys.extend(INTEGER_BOUNDS);
        Self::check_keys(obj, &keys, at)?;
        let bound = |k: &str| -> Result<Option<i64>, SchemaError> {
            match obj.get(k) {
                None => Ok(None),
                Some(v) => v
                    .as_i64()
                    .or_else(|| {
                        v.as_f64()
                            .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                            .map(|f| f as i64)
                    })
                    .map(Some)
                    .ok_or_else(|| SchemaError(format!("`{k}` at {at} must be a whole number"))),
            }
        };
        let lo = match (bound("minimum")?, bound("exclusiveMinimum")?) {
            (Some(a), Some(b)) => Some(a.max(b.saturating_add(1))),
            (a, b) => a.or(b.map(|b| b.saturating_add(1))),
        };
        let hi = match (bound("maximum")?, bound("exclusiveMaximum")?) {
            (Some(a), Some(b)) => Some(a.min(b.saturating_sub(1))),
            (a, b) => a.or(b.map(|b| b.saturating_sub(1))),
        };
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Err(SchemaError(format!(
                "an integer at {at} with `minimum`/`maximum` needs both a lower and an upper bound to be enforced"
            )));
        };
        if hi < lo || hi - lo >= INTEGER_RANGE_MAX {
            return Err(SchemaError(format!(
                "the integer range {lo}..={hi} at {at} is empty or has more than {INTEGER_RANGE_MAX} values"
            )));
        }
        let alts = (lo..=hi).map(|n| self.lit(&n.to_string())).collect();
        Ok(self.add(Node::Alt(alts)))
    }

    /// `{"p1": v1, "p2": v2}` with keys in the schema's order; optional keys may be left out.
    fn object(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Result<NodeId, SchemaError> {
        Self::check_keys(obj, &["type", "properties", "required"], at)?;
        let empty = serde_json::Map::new();
        let props = match obj.get("properties") {
            Some(Value::Object(p)) => p,
            None => &empty,
            Some(_) => {
                return Err(SchemaError(format!(
                    "`properties` at {at} is not an object"
                )));
            }
        };
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for r in &required {
            if !props.contains_key(*r) {
                return Err(SchemaError(format!(
                    "required key `{r}` at {at} has no schema in `properties`"
                )));
            }
        }
        // Required keys first, in the order `required` lists them (an array keeps the author's
        // order; the `properties` map may not), then the optional ones in the map's order: the
        // model writes what it must say before the extras.
        let mut order: Vec<&str> = Vec::new();
        for r in &required {
            if !order.contains(r) {
                order.push(r);
            }
        }
        order.extend(
            props
                .keys()
                .map(String::as_str)
                .filter(|k| !required.contains(k)),
        );
        let mut entries = Vec::new(); // (key literal without separator, value node, required)
        for k in order {
            let Some(sub) = props.get(k) else { continue };
            let key = Value::String(k.to_owned()).to_string();
            let v = self.schema(sub, &format!("{at}/properties/{k}"), depth + 1)?;
            entries.push((key, v, required.contains(&k)));
        }
        let n = entries.len();
        // rest[i][first]: the properties from i on, then `}`; `first` = nothing written yet.
        let mut rest: Vec<[NodeId; 2]> = vec![[0, 0]; n + 1];
        for i in (0..=n).rev() {
            for (slot, first) in [(0usize, false), (1usize, true)] {
                let mut alts = Vec::new();
                if entries[i..].iter().all(|e| !e.2) {
                    alts.push(self.lit("}"));
                }
                for j in i..n {
                    let sep = if first { "" } else { ", " };
                    let key = self.lit(&format!("{sep}{}: ", entries[j].0));
                    alts.push(self.seq(vec![key, entries[j].1, rest[j + 1][0]]));
                    if entries[j].2 {
                        break; // a required key cannot be skipped
                    }
                }
                rest[i][slot] = self.add(Node::Alt(alts));
            }
        }
        let open = self.lit("{");
        Ok(self.seq(vec![open, rest[0][1]]))
    }

    /// `[a, b, c]`, at most `maxItems` (default 16).
    fn array(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Result<NodeId, SchemaError> {
        Self::check_keys(obj, &["type", "items", "maxItems", "minItems"], at)?;
        let min = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = obj
            .get("maxItems")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_MAX_ITEMS)
            .min(64);
        if min > max {
            return Err(SchemaError(format!("minItems > maxItems at {at}")));
        }
        let item_schema = obj
            .get("items")
            .ok_or_else(|| SchemaError(format!("array at {at} needs `items`")))?;
        let item = self.schema(item_schema, &format!("{at}/items"), depth + 1)?;
        // after[k]: k items written, then more or `]`.
        let close = self.lit("]");
        let mut after: Vec<NodeId> = vec![0; max as usize + 1];
        for k in (1..=max as usize).rev() {
            let mut alts = Vec::new();
            if k as u64 >= min {
                alts.push(close);
            }
            if k < max as usize {
                let comma = self.lit(", ");
                alts.push(self.seq(vec![comma, item, after[k + 1]]));
            }
            after[k] = self.add(Node::Alt(alts));
        }
        let open = self.lit("[");
        let mut alts = Vec::new();
        if min == 0 {
            alts.push(close);
        }
        if max > 0 {
            alts.push(self.seq(vec![item, after[1]]));
        }
        let body = self.add(Node::Alt(alts));
        Ok(self.seq(vec![open, body]))
    }

    fn finish(self, root: NodeId) -> Grammar {
        let nodes = self.nodes;
        const INF: u32 = u32::MAX / 4;
        let mut min_len = vec![INF; nodes.len()];
        loop {
            let mut changed = false;
            for (i, n) in nodes.iter().enumerate() {
                let v = match n {
                    Node::Lit(b) => b.len() as u32,
                    Node::Str { min, .. } => 2 + min,
                    Node::Num { .. } => 1,
                    Node::Seq(c) => c
                        .iter()
                        .fold(0u32, |a, &x| a.saturating_add(min_len[x as usize]))
                        .min(INF),
                    Node::Alt(c) => c.iter().map(|&x| min_len[x as usize]).min().unwrap_or(INF),
                    Node::Text { .. } => 1,
                };
                if v < min_len[i] {
                    min_len[i] = v;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Children are built before their parents, so one pass in order sees them first.
        let mut max_dist = vec![0u32; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            max_dist[i] = match n {
                Node::Lit(b) => b.len() as u32,
                // Closed: `""` and the owed characters; open: the quote, at most three UTF-8
                // continuation bytes or an escape's second byte, and the owed characters.
                Node::Str { min, .. } => min.saturating_add(5),
                Node::Num { .. } | Node::Text { .. } => 1,
                Node::Seq(c) => {
                    let mut worst = 0u32;
                    let mut after = 0u32;
                    for &x in c.iter().rev() {
                        let d = if (x as usize) < i {
                            max_dist[x as usize]
                        } else {
                            INF
                        };
                        worst = worst.max(d.saturating_add(after));
                        after = after.saturating_add(min_len[x as usize]);
                    }
                    worst
                }
                Node::Alt(c) => c
                    .iter()
                    .map(|&x| {
                        if (x as usize) < i {
                            max_dist[x as usize]
                        } else {
                            INF
                        }
                    })
                    .max()
                    .unwrap_or(0),
            };
        }
        Grammar {
            nodes,
            min_len,
            max_dist,
            root,
        }
    }
}

impl Grammar {
    /// Compiles a JSON schema (the supported subset, see docs/local-model.md).
    pub fn from_schema(schema: &Value) -> Result<Self, SchemaError> {
        let mut b = Builder { nodes: Vec::new() };
        let root = b.schema(schema, "#", 0)?;
        Ok(b.finish(root))
    }

    /// The local model's native tool call: `<tool_call>\n{"name": "<tool>", "arguments":
    /// {...}}\n</tool_call>` for one of `tools` (arguments per its `parameters`), or, with
    /// [`AnswerChoice::TextOrCall`], a plain-text answer that does not start with `<`, or, with
    /// [`AnswerChoice::JsonOrCall`], JSON of that schema (the language of
    /// [`Grammar::from_schema`]). Without tools only the answer is left (text for
    /// [`AnswerChoice::CallOnly`]).
    pub fn tool_call(tools: &[ToolSpec], choice: AnswerChoice<'_>) -> Result<Self, SchemaError> {
        let mut b = Builder { nodes: Vec::new() };
        let mut alts = Vec::new();
        for t in tools {
            let name = Value::String(t.name.to_string()).to_string();
            let head = b.lit(&format!(
                "{TOOL_CALL_OPEN}{{\"name\": {name}, \"arguments\": "
            ));
            let args = b.schema(&t.parameters, &format!("tool `{}` parameters", t.name), 0)?;
            let tail = b.lit(&format!("}}{TOOL_CALL_CLOSE}"));
            alts.push(b.seq(vec![head, args, tail]));
        }
        match choice {
            AnswerChoice::JsonOrCall(schema) => {
                alts.push(b.schema(schema, "#", 0)?);
            }
            AnswerChoice::CallOnly if !alts.is_empty() => {}
            AnswerChoice::TextOrCall | AnswerChoice::CallOnly => {
                alts.push(b.add(Node::Text {
                    not_starting: TEXT_MAY_NOT_START.as_bytes().to_vec(),
                }));
            }
        }
        let root = b.add(Node::Alt(alts));
        Ok(b.finish(root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::testing::{accepts, call, tools};
    use serde_json::json;

    #[test]
    fn tool_call_grammar_accepts_valid_calls_and_text_and_rejects_invalid() {
        let g = Grammar::tool_call(&tools(), AnswerChoice::TextOrCall).unwrap();
        assert!(accepts(&g, &call("weather", r#"{"city": "Paris"}"#)));
        assert!(accepts(
            &g,
            &call("weather", r#"{"city": "北京", "unit": "c"}"#)
        ));
        assert!(accepts(
            &g,
            &call("calc", r#"{"a": -1.5, "b": 20, "ok": true}"#)
        ));
        assert!(accepts(&g, "It is sunny in Paris."));
        assert!(
            !accepts(&g, "<user_response>\nIt is sunny."),
            "a tag is not an answer"
        );
        assert!(!accepts(&g, ""), "an empty answer is not an answer");
        assert!(!accepts(&g, &call("nope", "{}")));
        assert!(!accepts(&g, &call("weather", "{}")));
        assert!(!accepts(&g, &call("calc", r#"{"a": 1, "b": 1.5}"#)));
        assert!(!accepts(
            &g,
            &call("weather", r#"{"city": "x", "unit": "k"}"#)
        ));
        assert!(!accepts(&g, "<tool_call>\n{\"name\": \"weather\""));
        // Text that starts like a call is a call, held to the grammar; a copy of the
        // template's result block is not an answer.
        assert!(g.feed_bytes(&g.start(), b"<tool_call> just text").is_dead());
        assert!(
            g.feed_bytes(&g.start(), b"<tool_response>\nIt is sunny.")
                .is_dead()
        );
        let g = Grammar::tool_call(&tools(), AnswerChoice::CallOnly).unwrap();
        assert!(!accepts(&g, "It is sunny."));
        assert!(accepts(&g, &call("weather", r#"{"city": "Paris"}"#)));
    }

    #[test]
    fn a_response_schema_with_tools_allows_a_call_or_that_json_and_nothing_else() {
        let schema = json!({"type":"object","properties":{"city":{"type":"string"},"celsius":{"type":"integer"}},"required":["city","celsius"]});
        let g = Grammar::tool_call(&tools(), AnswerChoice::JsonOrCall(&schema)).unwrap();
        assert!(accepts(&g, &call("weather", r#"{"city": "Oslo"}"#)));
        assert!(accepts(&g, &call("calc", r#"{"a": 1, "b": 2}"#)));
        assert!(accepts(&g, r#"{"city": "Oslo", "celsius": 4}"#));
        for bad in [
            "It is 4 degrees in Oslo.",
            "",
            r#"{"city": "Oslo"}"#,
            r#"{"city": "Oslo", "celsius": 4.5}"#,
            r#"{"celsius": 4, "city": "Oslo"}"#,
            r#" {"city": "Oslo", "celsius": 4}"#,
            r#"{"city": "Oslo", "celsius": 4} That is all."#,
            "<tool_response>
weather: sunny",
        ] {
            assert!(!accepts(&g, bad), "{bad:?}");
        }
        assert!(!accepts(&g, &call("weather", "{}")));
        // The answer branch is the schema's own language, and it closes: nothing may follow.
        let json = Grammar::from_schema(&schema).unwrap();
        let answer = r#"{"city": "Oslo", "celsius": 4}"#;
        assert!(accepts(&json, answer));
        assert!(g.is_finished(&g.feed_bytes(&g.start(), answer.as_bytes())));
        // Without tools only the JSON is left; a schema the grammar cannot hold is an error.
        let g = Grammar::tool_call(&[], AnswerChoice::JsonOrCall(&schema)).unwrap();
        assert!(accepts(&g, answer));
        assert!(!accepts(&g, &call("weather", r#"{"city": "Oslo"}"#)));
        assert!(!accepts(&g, "Oslo is cold."));
        let e = Grammar::tool_call(
            &tools(),
            AnswerChoice::JsonOrCall(&json!({"type":"string","pattern":"x"})),
        )
        .unwrap_err();
        assert!(e.0.contains("pattern") && e.0.contains('#'), "{e}");
    }

    #[test]
    fn unsupported_keywords_are_errors() {
        let e = Grammar::from_schema(&json!({"type":"string","pattern":"x"})).unwrap_err();
        assert!(e.0.contains("pattern"), "{e}");
        assert!(
            Grammar::from_schema(&json!({"type":"array","items":{"type":"string"},"maxItems":2}))
                .is_ok()
        );
    }

    #[test]
    fn a_bounded_integer_is_enforced_as_its_values() {
        // server-everything's `get-resource-links`: `count` 1..=10.
        let g = Grammar::from_schema(&json!({"type":"object","properties":{"count":{"type":"integer","minimum":1,"maximum":10}}})).unwrap();
        for ok in [
            r#"{}"#,
            r#"{"count": 1}"#,
            r#"{"count": 10}"#,
            r#"{"count": 7}"#,
        ] {
            assert!(accepts(&g, ok), "{ok}");
        }
        for bad in [
            r#"{"count": 0}"#,
            r#"{"count": 11}"#,
            r#"{"count": 100}"#,
            r#"{"count": -1}"#,
            r#"{"count": 1.5}"#,
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        let g = Grammar::from_schema(
            &json!({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":2.0}),
        )
        .unwrap();
        assert!(accepts(&g, "-2") && accepts(&g, "1") && !accepts(&g, "-3") && !accepts(&g, "2"));
        for (bad, says) in [
            (json!({"type":"integer","minimum":1}), "both"),
            (json!({"type":"integer","minimum":0,"maximum":1000}), "256"),
            (json!({"type":"integer","minimum":5,"maximum":1}), "empty"),
            (json!({"type":"integer","minimum":0.5,"maximum":1}), "whole"),
            (json!({"type":"number","minimum":0,"maximum":1}), "minimum"),
        ] {
            let e = Grammar::from_schema(&bad).unwrap_err();
            assert!(e.0.contains(says), "{e}");
        }
    }

    #[test]
    fn min_length_is_enforced_and_counted_in_the_distance() {
        let g = Grammar::from_schema(&json!({"type":"array","items":{"type":"string","minLength":2,"maxLength":3},"maxItems":10})).unwrap();
        assert!(accepts(&g, r#"["ab", "北京"]"#));
        assert!(accepts(&g, r#"["a\"", "abc"]"#));
        assert!(!accepts(&g, r#"[""]"#));
        assert!(!accepts(&g, r#"["a"]"#));
        assert!(!accepts(&g, r#"["abcd"]"#));
        // After `["` two characters and the rest are owed: `xx"]`.
        let s = g.feed_bytes(&g.start(), br#"[""#);
        assert_eq!(g.distance(&s), 4);
        let s = g.feed_bytes(&g.start(), br#"[""#);
        assert_eq!(g.distance(&g.feed_bytes(&s, b"x")), 3);
        for bad in [
            json!({"type":"string","minLength":5,"maxLength":2}),
            json!({"type":"string","minLength":-1}),
        ] {
            let e = Grammar::from_schema(&bad).unwrap_err();
            assert!(e.0.contains("minLength"), "{e}");
        }
    }

    #[test]
    fn arrays_and_nested_objects() {
        let g = Grammar::from_schema(&json!({"type":"object","properties":{"xs":{"type":"array","items":{"type":"integer"},"maxItems":2},"o":{"type":"object","properties":{"k":{"type":["string","null"]}}}},"required":["xs"]})).unwrap();
        // `xs` is required, so it comes first.
        assert!(accepts(&g, r#"{"xs": [1, 2], "o": {"k": null}}"#));
        assert!(!accepts(&g, r#"{"o": {"k": null}, "xs": [1, 2]}"#));
        assert!(accepts(&g, r#"{"xs": []}"#));
        assert!(!accepts(&g, r#"{"xs": [1, 2, 3]}"#));
    }
}
