//! The language of constrained decoding: a byte-level JSON grammar compiled from a JSON-schema
//! subset, run as a set of pushdown stacks. At generation time llguidance computes the masks
//! from the same language ([`Grammar::lark`]), and this grammar follows the bytes to know the
//! shortest completion ([`Grammar::distance`]); near the end of the token budget its token trie
//! masks alone, keeping only tokens after which the value still fits (see `constraint.rs`).
//!
//! The output is fixed-format JSON: `{"a": 1, "b": "x"}` (one space after `:` and `,`, none
//! elsewhere), keys in the schema's order, no `\u` escapes. Every string and number has a
//! length cap and the mask never lets the model start something it cannot finish within the
//! token budget, so a constrained answer always closes and always parses.
//!
//! A tool-call grammar ([`Grammar::tool_call`]) is the backend's own output format for native
//! calls: `<tool_call>\n{"name": "<tool>", "arguments": {...}}\n</tool_call>`, or (when the
//! request allows it) a plain-text answer, which is any text that does not start with `<`
//! (a call, or a copy of the template's tags). Once the text has left the tag behind, nothing is constrained any more.

use serde_json::Value;

use llm_core::ToolSpec;

/// Longest free string (in characters) unless the schema says `maxLength`.
pub const DEFAULT_STRING_MAX: u32 = 200;
/// Longest string any schema may ask for (`maxLength` above this is cut to it), in characters.
pub const LONGEST_STRING: u32 = 600;
/// The tag that opens a tool call in the local model's output.
pub const TOOL_CALL_OPEN: &str = "<tool_call>\n";
/// The tag that closes a tool call.
pub const TOOL_CALL_CLOSE: &str = "\n</tool_call>";
/// A text answer may not start with this: neither a call nor a copy of the template's
/// `<tool_response>` blocks (nor a made-up `<user_response>`, which SmolLM2 writes) is an answer.
const TEXT_MAY_NOT_START: &str = "<";
/// Longest number, in characters.
pub const NUMBER_MAX: u8 = 16;
/// Most array items unless the schema says `maxItems`.
pub const DEFAULT_MAX_ITEMS: u64 = 16;

/// Integer bounds that are enforced (as literals) when an integer has both ends.
const INTEGER_BOUNDS: [&str; 4] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
/// Most values of a bounded integer.
pub const INTEGER_RANGE_MAX: i64 = 256;

type NodeId = u32;

#[derive(Debug, Clone)]
enum Node {
    /// Exact bytes.
    Lit(Vec<u8>),
    /// A JSON string with quotes, `min..=max` characters.
    Str { min: u32, max: u32 },
    /// A JSON number (`-?(0|[1-9][0-9]*)(\.[0-9]+)?`), or an integer.
    Num { integer: bool },
    /// One after the other.
    Seq(Vec<NodeId>),
    /// One of these.
    Alt(Vec<NodeId>),
    /// Free text (at least one byte) that does not start with these bytes.
    Text { not_starting: Vec<u8> },
}

/// A compiled grammar.
#[derive(Debug, Clone)]
pub struct Grammar {
    nodes: Vec<Node>,
    min_len: Vec<u32>,
    /// The largest shortest-completion of any state inside each node.
    max_dist: Vec<u32>,
    root: NodeId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NumSt {
    Start,
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
}

impl NumSt {
    fn accepting(self) -> bool {
        matches!(self, Self::Zero | Self::Int | Self::Frac)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Frame {
    Lit {
        node: NodeId,
        pos: u32,
    },
    Str {
        open: bool,
        esc: bool,
        len: u32,
        min: u32,
        max: u32,
        /// UTF-8 continuation bytes still expected, and the range of the next one.
        need: u8,
        lo: u8,
        hi: u8,
    },
    Num {
        st: NumSt,
        integer: bool,
        len: u8,
    },
    Seq {
        node: NodeId,
        idx: u32,
    },
    Text {
        node: NodeId,
        /// Bytes written, up to 2 (only "none", "one" and "more" matter).
        len: u8,
        /// How many leading bytes matched the forbidden start; `u8::MAX` once they differ.
        guard: u8,
    },
}

/// `Frame::Text::guard` once the text no longer starts like the forbidden prefix.
const DIVERGED: u8 = u8::MAX;

type Stack = Vec<Frame>;

/// Where the matcher is: every way the bytes so far can continue (an empty stack = complete).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    stacks: Vec<Stack>,
}

impl State {
    /// No continuation is possible: the bytes so far are not a prefix of the grammar.
    pub fn is_dead(&self) -> bool {
        self.stacks.is_empty()
    }
}

/// Why a schema cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError(pub String);

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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

/// What a tool-call grammar lets the model write instead of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerChoice {
    /// A plain-text answer, or a call (`tool_choice` auto).
    TextOrCall,
    /// A call only (`tool_choice` required, or a named function).
    CallOnly,
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
    /// [`AnswerChoice::TextOrCall`], a plain-text answer that does not start with `<`.
    /// Without tools only the text answer is left.
    pub fn tool_call(tools: &[ToolSpec], choice: AnswerChoice) -> Result<Self, SchemaError> {
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
        if choice == AnswerChoice::TextOrCall || alts.is_empty() {
            alts.push(b.add(Node::Text {
                not_starting: TEXT_MAY_NOT_START.as_bytes().to_vec(),
            }));
        }
        let root = b.add(Node::Alt(alts));
        Ok(b.finish(root))
    }

    /// The state before any byte.
    pub fn start(&self) -> State {
        let mut out = Vec::new();
        self.push_node(Vec::new(), self.root, &mut out);
        State { stacks: out }
    }

    fn push_node(&self, mut stack: Stack, node: NodeId, out: &mut Vec<Stack>) {
        match &self.nodes[node as usize] {
            Node::Lit(b) if b.is_empty() => self.complete(stack, out),
            Node::Lit(_) => {
                stack.push(Frame::Lit { node, pos: 0 });
                out.push(stack);
            }
            Node::Str { min, max } => {
                stack.push(Frame::Str {
                    open: false,
                    esc: false,
                    len: 0,
                    min: *min,
                    max: *max,
                    need: 0,
                    lo: 0,
                    hi: 0,
                });
                out.push(stack);
            }
            Node::Num { integer } => {
                stack.push(Frame::Num {
                    st: NumSt::Start,
                    integer: *integer,
                    len: 0,
                });
                out.push(stack);
            }
            Node::Seq(c) if c.is_empty() => self.complete(stack, out),
            Node::Seq(c) => {
                let first = c[0];
                stack.push(Frame::Seq { node, idx: 0 });
                self.push_node(stack, first, out);
            }
            Node::Alt(c) => {
                for &x in c {
                    self.push_node(stack.clone(), x, out);
                }
            }
            Node::Text { not_starting } => {
                stack.push(Frame::Text {
                    node,
                    len: 0,
                    guard: if not_starting.is_empty() { DIVERGED } else { 0 },
                });
                out.push(stack);
            }
        }
    }

    /// The child on top of `stack` just finished (and was popped): move its parent on.
    fn complete(&self, mut stack: Stack, out: &mut Vec<Stack>) {
        match stack.pop() {
            None => out.push(stack),
            Some(Frame::Seq { node, idx }) => {
                let Node::Seq(c) = &self.nodes[node as usize] else {
                    return;
                };
                let next = idx as usize + 1;
                if next < c.len() {
                    let child = c[next];
                    stack.push(Frame::Seq {
                        node,
                        idx: next as u32,
                    });
                    self.push_node(stack, child, out);
                } else {
                    self.complete(stack, out);
                }
            }
            // Only sequences have children on the stack.
            Some(_) => {}
        }
    }

    fn feed_stack(&self, mut stack: Stack, b: u8, out: &mut Vec<Stack>) {
        let Some(top) = stack.last_mut() else {
            return; // complete: nothing may follow
        };
        match top {
            Frame::Lit { node, pos } => {
                let Node::Lit(bytes) = &self.nodes[*node as usize] else {
                    return;
                };
                if bytes.get(*pos as usize) != Some(&b) {
                    return;
                }
                *pos += 1;
                if *pos as usize == bytes.len() {
                    stack.pop();
                    self.complete(stack, out);
                } else {
                    out.push(stack);
                }
            }
            Frame::Str {
                open,
                esc,
                len,
                min,
                max,
                need,
                lo,
                hi,
            } => {
                if !*open {
                    if b == b'"' {
                        *open = true;
                        out.push(stack);
                    }
                    return;
                }
                if *need > 0 {
                    if (*lo..=*hi).contains(&b) {
                        *need -= 1;
                        (*lo, *hi) = (0x80, 0xBF);
                        out.push(stack);
                    }
                    return;
                }
                if *esc {
                    if b"\"\\/bfnrt".contains(&b) {
                        *esc = false;
                        out.push(stack);
                    }
                    return;
                }
                if b == b'"' {
                    if *len >= *min {
                        stack.pop();
                        self.complete(stack, out);
                    }
                    return;
                }
                if *len >= *max || b < 0x20 || b == 0x7F {
                    return;
                }
                let (n, l, h) = match b {
                    b'\\' => {
                        *esc = true;
                        (0, 0, 0)
                    }
                    0x00..=0x7F => (0, 0, 0),
                    0xC2..=0xDF => (1, 0x80, 0xBF),
                    0xE0 => (2, 0xA0, 0xBF),
                    0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
                    0xED => (2, 0x80, 0x9F),
                    0xF0 => (3, 0x90, 0xBF),
                    0xF1..=0xF3 => (3, 0x80, 0xBF),
                    0xF4 => (3, 0x80, 0x8F),
                    _ => return,
                };
                *len += 1;
                (*need, *lo, *hi) = (n, l, h);
                out.push(stack);
            }
            Frame::Num { st, integer, len } => {
                let digit = b.is_ascii_digit();
                let next = if *len >= NUMBER_MAX {
                    None
                } else {
                    match (*st, b) {
                        (NumSt::Start, b'-') => Some(NumSt::Minus),
                        (NumSt::Start | NumSt::Minus, b'0') => Some(NumSt::Zero),
                        (NumSt::Start | NumSt::Minus, _) if digit => Some(NumSt::Int),
                        (NumSt::Int, _) if digit => Some(NumSt::Int),
                        (NumSt::Zero | NumSt::Int, b'.') if !*integer => Some(NumSt::Dot),
                        (NumSt::Dot | NumSt::Frac, _) if digit => Some(NumSt::Frac),
                        _ => None,
                    }
                };
                // A number may only step into a state that needs another digit (`-`, `.`)
                // while there is room left for that digit: `123…6.` at the cap can neither go
                // on nor end.
                let next = next.filter(|n| n.accepting() || *len + 1 < NUMBER_MAX);
                if let Some(n) = next {
                    *st = n;
                    *len += 1;
                    out.push(stack);
                } else if st.accepting() {
                    // The number ended; the byte belongs to what follows it.
                    stack.pop();
                    let mut after = Vec::new();
                    self.complete(stack, &mut after);
                    for s in after {
                        self.feed_stack(s, b, out);
                    }
                }
            }
            Frame::Text { node, len, guard } => {
                if *guard != DIVERGED {
                    let Node::Text { not_starting } = &self.nodes[*node as usize] else {
                        return;
                    };
                    if not_starting.get(usize::from(*guard)) == Some(&b) {
                        *guard += 1;
                        if usize::from(*guard) == not_starting.len() {
                            return; // the forbidden start is complete: this branch is dead
                        }
                    } else {
                        *guard = DIVERGED;
                    }
                }
                *len = len.saturating_add(1).min(2);
                out.push(stack);
            }
            Frame::Seq { .. } => {}
        }
    }

    /// The state after one more byte (dead if the byte cannot come next).
    pub fn feed(&self, state: &State, b: u8) -> State {
        let mut out = Vec::with_capacity(state.stacks.len());
        for s in &state.stacks {
            self.feed_stack(s.clone(), b, &mut out);
        }
        State { stacks: out }
    }

    /// The state after some bytes.
    pub fn feed_bytes(&self, state: &State, bytes: &[u8]) -> State {
        let mut s = state.clone();
        for &b in bytes {
            if s.is_dead() {
                break;
            }
            s = self.feed(&s, b);
        }
        s
    }

    fn stack_can_end(&self, stack: &Stack) -> bool {
        match stack.last() {
            None => true,
            Some(Frame::Text { len, .. }) => *len > 0 && stack.len() == 1,
            Some(Frame::Num { st, .. }) if st.accepting() => {
                let mut s = stack.clone();
                s.pop();
                let mut after = Vec::new();
                self.complete(s, &mut after);
                after.iter().any(Vec::is_empty)
            }
            Some(_) => false,
        }
    }

    /// The model is writing the body of a string value: what comes next is its free choice,
    /// not structure the grammar dictates.
    pub fn in_string(&self, state: &State) -> bool {
        !state.stacks.is_empty()
            && state.stacks.iter().all(|s| {
                matches!(
                    s.last(),
                    Some(Frame::Str { open: true, .. } | Frame::Text { .. })
                )
            })
    }

    /// The model is writing free text that nothing constrains any more (a plain-text answer
    /// past the point where it could still become a tool call): no mask is needed.
    pub fn is_free(&self, state: &State) -> bool {
        !state.stacks.is_empty()
            && state.stacks.iter().all(|s| {
                matches!(
                    s.as_slice(),
                    [Frame::Text {
                        guard: DIVERGED,
                        ..
                    }]
                )
            })
    }

    /// The bytes so far are a whole value.
    pub fn can_end(&self, state: &State) -> bool {
        state.stacks.iter().any(|s| self.stack_can_end(s))
    }

    /// The bytes so far are a whole value that nothing may extend (e.g. after the final `}`).
    pub fn is_finished(&self, state: &State) -> bool {
        !state.stacks.is_empty() && state.stacks.iter().all(Vec::is_empty)
    }

    /// The fewest bytes that complete the value from `state`.
    pub fn distance(&self, state: &State) -> u32 {
        state
            .stacks
            .iter()
            .map(|s| self.stack_distance(s))
            .min()
            .unwrap_or(u32::MAX)
    }

    fn stack_distance(&self, stack: &[Frame]) -> u32 {
        let mut d: u32 = 0;
        for f in stack {
            d = d.saturating_add(match *f {
                Frame::Lit { node, pos } => match &self.nodes[node as usize] {
                    Node::Lit(b) => b.len() as u32 - pos,
                    _ => 0,
                },
                Frame::Str {
                    open,
                    esc,
                    need,
                    len,
                    min,
                    ..
                } => {
                    // Characters still owed to `minLength` are at least one byte each.
                    let owed = min.saturating_sub(len);
                    if open {
                        1 + u32::from(need) + u32::from(esc) + owed
                    } else {
                        2 + owed
                    }
                }
                Frame::Num { st, .. } => u32::from(!st.accepting()),
                Frame::Text { len, .. } => u32::from(len == 0),
                Frame::Seq { node, idx } => match &self.nodes[node as usize] {
                    Node::Seq(c) => c[idx as usize + 1..]
                        .iter()
                        .fold(0u32, |a, &x| a.saturating_add(self.min_len[x as usize])),
                    _ => 0,
                },
            });
        }
        d
    }
}

impl Grammar {
    /// An upper bound of [`Grammar::distance`] over every state reachable from `state` (itself
    /// included): while the tokens left after the next one are at least this, no token the
    /// grammar allows can leave a value that does not fit, and the mask needs no budget check.
    pub fn reach(&self, state: &State) -> u32 {
        state
            .stacks
            .iter()
            .map(|s| self.stack_reach(s))
            .max()
            .unwrap_or(0)
    }

    /// For each frame: what the frames below it still owe, plus the most this frame can come to
    /// owe from here on (for a sequence: once its current child is done).
    fn stack_reach(&self, stack: &Stack) -> u32 {
        let mut below = 0u32;
        let mut worst = 0u32;
        for f in stack {
            let own = match *f {
                Frame::Lit { node, pos } => match &self.nodes[node as usize] {
                    Node::Lit(b) => (b.len() as u32).saturating_sub(pos),
                    _ => 0,
                },
                // The quotes, at most three UTF-8 continuation bytes or an escape's second byte,
                // and the characters still owed to `minLength`.
                Frame::Str { len, min, .. } => min.saturating_sub(len).saturating_add(5),
                Frame::Num { .. } | Frame::Text { .. } => 1,
                Frame::Seq { node, idx } => match &self.nodes[node as usize] {
                    Node::Seq(c) => {
                        let mut w = 0u32;
                        let mut after = 0u32;
                        for &x in c[idx as usize + 1..].iter().rev() {
                            w = w.max(self.max_dist[x as usize].saturating_add(after));
                            after = after.saturating_add(self.min_len[x as usize]);
                        }
                        w
                    }
                    _ => 0,
                },
            };
            worst = worst.max(below.saturating_add(own));
            below = below.saturating_add(self.stack_distance(std::slice::from_ref(f)));
        }
        worst
    }

    /// The same language as a Lark grammar for llguidance: one rule per sequence or choice,
    /// literals inline, strings, numbers and text as lexemes with the same length caps, so a
    /// token llguidance allows is one this grammar allows (the property test checks it).
    pub(crate) fn lark(&self) -> Result<String, SchemaError> {
        let mut out = format!("start: {}\n", self.lark_atom(self.root));
        let mut seen = vec![false; self.nodes.len()];
        let mut todo = vec![self.root];
        while let Some(n) = todo.pop() {
            if std::mem::replace(&mut seen[n as usize], true) {
                continue;
            }
            let line = match &self.nodes[n as usize] {
                Node::Lit(_) => continue,
                Node::Seq(c) | Node::Alt(c) => {
                    todo.extend(c.iter().copied());
                    let sep = if matches!(self.nodes[n as usize], Node::Seq(_)) {
                        " "
                    } else {
                        " | "
                    };
                    let body: Vec<String> = c.iter().map(|&x| self.lark_atom(x)).collect();
                    let body = if body.is_empty() {
                        "\"\"".to_owned()
                    } else {
                        body.join(sep)
                    };
                    format!("r{n}: {body}")
                }
                Node::Str { min, max } => {
                    format!(r#"S{n}: /"(?:[^"\\\x00-\x1F\x7F]|\\["\\\x2Fbfnrt]){{{min},{max}}}"/"#)
                }
                Node::Num { integer } => {
                    let frac = if *integer { "" } else { r"(?:\.[0-9]+)?" };
                    format!(r"N{n}: /-?(?:0|[1-9][0-9]*){frac}/ & /.{{1,{NUMBER_MAX}}}/")
                }
                Node::Text { not_starting } => match not_starting.as_slice() {
                    [] => format!(r"T{n}: /(?s:.)+/"),
                    [b] if b.is_ascii() => format!(r"T{n}: /[^\x{b:02X}](?s:.)*/"),
                    _ => {
                        return Err(SchemaError(
                            "text may only be kept from starting with one ASCII byte".into(),
                        ));
                    }
                },
            };
            out.push_str(&line);
            out.push('\n');
        }
        Ok(out)
    }

    fn lark_atom(&self, n: NodeId) -> String {
        match &self.nodes[n as usize] {
            Node::Lit(b) => Value::String(String::from_utf8_lossy(b).into_owned()).to_string(),
            Node::Str { .. } => format!("S{n}"),
            Node::Num { .. } => format!("N{n}"),
            Node::Text { .. } => format!("T{n}"),
            Node::Seq(_) | Node::Alt(_) => format!("r{n}"),
        }
    }
}

impl Grammar {
    /// `state` with what cannot change the next token's mask forgotten: inside a string that
    /// has reached `minLength` and is more than `slack` characters from `maxLength`, its length
    /// so far does not matter (no token is longer than `slack` bytes).
    fn mask_key(&self, state: &State, slack: u32) -> State {
        let mut key = state.clone();
        for stack in &mut key.stacks {
            for f in stack.iter_mut() {
                if let Frame::Str {
                    open: true,
                    len,
                    min,
                    max,
                    ..
                } = f
                    && *len >= *min
                    && len.saturating_add(slack) <= *max
                {
                    *len = *min;
                }
            }
        }
        key
    }
}

/// Masks already computed for one grammar, by state: inside a long string every token asks the
/// same question, and the walk of the whole vocabulary costs far more than a lookup.
#[derive(Debug)]
pub struct MaskCache {
    masks: std::collections::HashMap<State, Vec<(u32, u32)>>,
    /// Tokens stored over all masks.
    stored: usize,
    /// Most tokens kept over all masks; the cache starts over when full.
    capacity: usize,
}

impl Default for MaskCache {
    /// 2M tokens (8 bytes each: 16 MB). A string-body mask holds most of the vocabulary
    /// (~49k tokens for SmolLM2).
    fn default() -> Self {
        Self::with_capacity(2_000_000)
    }
}

impl MaskCache {
    /// A cache keeping at most `capacity` tokens over all masks.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            masks: std::collections::HashMap::new(),
            stored: 0,
            capacity,
        }
    }

    /// Tokens currently stored over all masks.
    #[cfg(test)]
    fn stored(&self) -> usize {
        self.stored
    }

    /// The same as [`TokenTrie::allowed`], remembered.
    pub fn allowed(
        &mut self,
        trie: &TokenTrie,
        g: &Grammar,
        state: &State,
        budget: u32,
        out: &mut Vec<u32>,
    ) {
        let within = |found: &[(u32, u32)], out: &mut Vec<u32>| {
            out.extend(
                found
                    .iter()
                    .filter(|&&(_, d)| d <= budget)
                    .map(|&(id, _)| id),
            );
        };
        let key = g.mask_key(state, trie.depth);
        if let Some(found) = self.masks.get(&key) {
            within(found, out);
            return;
        }
        let mut found = Vec::new();
        trie.walk(0, g, state, &mut found);
        within(&found, out);
        if self.stored + found.len() > self.capacity {
            self.masks.clear();
            self.stored = 0;
        }
        self.stored += found.len();
        self.masks.insert(key, found);
    }
}

/// All tokens' bytes in a trie, so a mask is one walk that drops whole dead subtrees.
#[derive(Debug, Clone, Default)]
pub struct TokenTrie {
    /// children[n] = (byte, child) sorted by byte.
    children: Vec<Vec<(u8, u32)>>,
    token: Vec<Option<u32>>,
    /// The longest token, in bytes.
    depth: u32,
}

impl TokenTrie {
    /// A trie of `(id, bytes)`; empty byte strings are skipped.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a [u8])>) -> Self {
        let mut t = Self {
            children: vec![Vec::new()],
            token: vec![None],
            depth: 0,
        };
        for (id, bytes) in tokens {
            if bytes.is_empty() {
                continue;
            }
            let mut n = 0usize;
            for &b in bytes {
                n = match t.children[n].binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => t.children[n][i].1 as usize,
                    Err(i) => {
                        let new = t.children.len();
                        t.children.push(Vec::new());
                        t.token.push(None);
                        t.children[n].insert(i, (b, new as u32));
                        new
                    }
                };
            }
            t.token[n] = Some(id);
            t.depth = t.depth.max(bytes.len() as u32);
        }
        t
    }

    /// Tokens whose bytes the grammar accepts from `state` and that leave at most `budget`
    /// bytes to complete the value: one walk of the trie. (The engine asks through
    /// [`MaskCache`], which remembers masks by state; this uncached form is what the cache is
    /// tested and benchmarked against.)
    pub fn allowed(&self, g: &Grammar, state: &State, budget: u32, out: &mut Vec<u32>) {
        let mut found = Vec::new();
        self.walk(0, g, state, &mut found);
        out.extend(
            found
                .into_iter()
                .filter(|&(_, d)| d <= budget)
                .map(|(id, _)| id),
        );
    }

    /// Every token the grammar accepts from `state`, with the bytes left to complete after it.
    fn walk(&self, n: usize, g: &Grammar, state: &State, out: &mut Vec<(u32, u32)>) {
        for &(b, child) in &self.children[n] {
            let next = g.feed(state, b);
            if next.is_dead() {
                continue;
            }
            if let Some(id) = self.token[child as usize] {
                out.push((id, g.distance(&next)));
            }
            self.walk(child as usize, g, &next, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn accepts(g: &Grammar, text: &str) -> bool {
        let s = g.feed_bytes(&g.start(), text.as_bytes());
        !s.is_dead() && g.can_end(&s)
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec::new(
                "weather",
                "w",
                json!({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}),
            ),
            ToolSpec::new(
                "calc",
                "c",
                json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"integer"},"ok":{"type":"boolean"}},"required":["a","b"]}),
            ),
        ]
    }

    fn call(name: &str, args: &str) -> String {
        format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>")
    }

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
    fn text_is_free_once_it_cannot_become_a_call() {
        let g = Grammar::tool_call(&tools(), AnswerChoice::TextOrCall).unwrap();
        let at = |t: &str| g.feed_bytes(&g.start(), t.as_bytes());
        assert!(!g.is_free(&g.start()));
        assert!(!g.is_free(&at("<tool")), "may still become a call");
        assert!(at("<tooth").is_dead(), "neither a call nor text");
        assert!(g.is_free(&at("Sunny")));
        assert!(!g.is_free(&at(&call("weather", r#"{"city": "P"#))));
        assert!(g.is_finished(&at(&call("weather", r#"{"city": "P"}"#))));
    }

    #[test]
    fn in_string_is_only_the_body_of_a_string_value_or_text() {
        let g = Grammar::tool_call(&tools(), AnswerChoice::CallOnly).unwrap();
        let at = |t: &str| g.in_string(&g.feed_bytes(&g.start(), t.as_bytes()));
        assert!(!at("<tool_call>\n{\"name\": "));
        assert!(
            !at("<tool_call>\n{\"name\": \"wea"),
            "a tool name is a literal, not a string value"
        );
        assert!(at(r#"<tool_call>
{"name": "weather", "arguments": {"city": "Par"#));
        assert!(!at(r#"<tool_call>
{"name": "weather", "arguments": {"city": "Paris""#));
        let g = Grammar::tool_call(&tools(), AnswerChoice::TextOrCall).unwrap();
        assert!(g.in_string(&g.feed_bytes(&g.start(), b"Hello")));
    }

    #[test]
    fn distance_is_the_shortest_completion() {
        let g = Grammar::tool_call(&tools(), AnswerChoice::TextOrCall).unwrap();
        assert_eq!(g.distance(&g.start()), 1, "one byte of text");
        let g = Grammar::tool_call(&tools(), AnswerChoice::CallOnly).unwrap();
        assert_eq!(
            g.distance(&g.start()) as usize,
            call("weather", r#"{"city": ""}"#).len()
        );
        let s = g.feed_bytes(
            &g.start(),
            b"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"a\": 1",
        );
        assert_eq!(g.distance(&s) as usize, ", \"b\": 0}}\n</tool_call>".len());
    }

    /// Issue 12: a masked walk got stuck after this text. The number `872012003712916` (15
    /// characters) took a `.` as its 16th, the cap, and then could neither take a digit nor
    /// end. A number now steps into `-` or `.` only with room left for the digit it owes.
    #[test]
    fn a_number_at_its_length_cap_can_always_end() {
        let g = Grammar::from_schema(&walks::schemas()[1]).unwrap();
        let stuck = "{\"n\": 0, \"o\": {\"k\": \"@%ꄸ#6\"}, \"ok\": false, \"x\": 872012003712916";
        let s = g.feed_bytes(&g.start(), stuck.as_bytes());
        assert!(!s.is_dead());
        assert!(
            g.feed(&s, b'.').is_dead(),
            "no room for a digit after the dot"
        );
        let s = g.feed_bytes(&s, b"}");
        assert!(g.is_finished(&s));
        // With room left the dot is fine, and the number closes with one more digit.
        let s = g.feed_bytes(
            &g.start(),
            b"{\"n\": 0, \"o\": {\"k\": \"abc\"}, \"x\": 12345678901234.",
        );
        assert!(!s.is_dead());
        assert!(g.is_finished(&g.feed_bytes(&s, b"5}")));
        // Every reachable number state can end within its distance.
        let mut s = g.feed_bytes(&g.start(), b"{\"n\": -");
        for _ in 0..NUMBER_MAX {
            assert!(g.distance(&s) < u32::MAX / 4, "{s:?}");
            let next = g.feed(&s, b'9');
            if next.is_dead() {
                break;
            }
            s = next;
        }
        assert!(!g.feed_bytes(&s, b", \"o\": {\"k\": \"abc\"}}").is_dead());
        // llguidance, which masks while the budget is far, agrees: no dot, and `}` ends it.
        let (_, v) = walks::engine_vocabulary();
        let mut c = crate::constraint::Constraint::start(&g, &v);
        for &b in stuck.as_bytes() {
            c.commit(u32::from(b), &[b]).unwrap();
        }
        let mut allowed = Vec::new();
        c.mask(1000, &mut allowed).unwrap();
        assert!(c.masked_by_llguidance());
        assert!(!allowed.contains(&u32::from(b'.')), "{allowed:?}");
        assert!(allowed.contains(&u32::from(b'}')), "{allowed:?}");
        // With no token left after this one, the keeper allows only the close.
        c.mask(0, &mut allowed).unwrap();
        assert!(!c.masked_by_llguidance());
        assert_eq!(allowed, vec![u32::from(b'}')]);
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

    /// Random walks through the mask: whatever the model picks among the allowed tokens, the
    /// text closes within the budget, parses, and is valid against the schema it came from.
    mod walks {
        use super::*;
        use crate::constraint::{Constraint, Vocabulary};
        use proptest::prelude::*;

        pub(super) fn schemas() -> Vec<Value> {
            vec![
                json!({"type":"object","properties":{"recipient":{"type":"string","minLength":1},"text":{"type":"string","minLength":1,"maxLength":40},"quickReplies":{"type":"array","items":{"type":"string","minLength":1,"maxLength":8},"maxItems":10}},"required":["recipient","text"]}),
                // Properties in alphabetical order: the same key order whether or not serde_json
                // keeps insertion order (llguidance turns `preserve_order` on).
                json!({"type":"object","properties":{"c":{"type":"integer","minimum":-2,"maximum":12},"e":{"enum":["a","b",1,true]},"n":{"type":"integer"},"o":{"type":"object","properties":{"k":{"type":"string","minLength":3,"maxLength":5}},"required":["k"]},"ok":{"type":"boolean"},"x":{"type":["number","null"]}},"required":["n","o"]}),
                json!({"type":"array","items":{"anyOf":[{"type":"string","minLength":2,"maxLength":4},{"const":"c"}]},"minItems":1,"maxItems":4}),
            ]
        }

        fn vocabulary() -> Vec<Vec<u8>> {
            let mut v: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
            for t in [
                "\"",
                "\\",
                ", \"",
                "\": ",
                "{\"",
                "[\"",
                "\"]",
                "\"}",
                "}}",
                "北京",
                "é",
                "ab",
                "true",
                "null",
                "12",
                ".5",
                "-",
                "\\n",
                "\\\"",
                "recipient",
                "text",
                "quickReplies",
            ] {
                // Each byte string once (the trie keeps one id per string).
                if t.len() > 1 {
                    v.push(t.as_bytes().to_vec());
                }
            }
            v
        }

        /// The walk's vocabulary as the engine sees it: every byte, some longer tokens, and
        /// one end-of-turn control token (the last id).
        pub(super) fn engine_vocabulary() -> (Vec<Vec<u8>>, Vocabulary) {
            let vocab = vocabulary();
            let mut tokens: Vec<Option<&[u8]>> = vocab.iter().map(|t| Some(t.as_slice())).collect();
            tokens.push(None);
            let end = vec![vocab.len() as u32];
            let v = Vocabulary::new(&tokens, end);
            (vocab, v)
        }

        fn walk_tools() -> Vec<ToolSpec> {
            vec![
                ToolSpec::new("send", "", schemas()[0].clone()),
                ToolSpec::new("mixed", "", schemas()[1].clone()),
            ]
        }

        /// The value a finished text stands for, checked against the schema it came from:
        /// the text itself (`which` < 3), or the arguments of a declared tool's call.
        fn check(which: usize, text: &[u8]) -> Result<(), TestCaseError> {
            let text = String::from_utf8_lossy(text);
            let (schema, json) = if which < 3 {
                (schemas()[which].clone(), text.to_string())
            } else {
                let body = text
                    .strip_prefix(TOOL_CALL_OPEN)
                    .and_then(|t| t.strip_suffix(TOOL_CALL_CLOSE))
                    .ok_or_else(|| TestCaseError::fail(format!("not a call block: {text}")))?;
                let call: Value = serde_json::from_str(body)
                    .map_err(|e| TestCaseError::fail(format!("{e}: {body}")))?;
                let tool = walk_tools()
                    .into_iter()
                    .find(|t| call["name"] == *t.name)
                    .ok_or_else(|| TestCaseError::fail(format!("undeclared tool: {body}")))?;
                ((*tool.parameters).clone(), call["arguments"].to_string())
            };
            let v: Value = serde_json::from_str(&json)
                .map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(validator.is_valid(&v), "{} is not valid", v);
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            /// The engine's walk: llguidance masks while the budget is far, the keeper near the
            /// end. Where llguidance masks, it allows exactly what the grammar allows.
            #[test]
            fn every_allowed_walk_ends_in_a_valid_value(
                which in 0usize..4,
                picks in proptest::collection::vec(any::<u32>(), 0..400),
                budget in 40u32..300,
            ) {
                let g = if which < 3 {
                    Grammar::from_schema(&schemas()[which]).unwrap()
                } else {
                    Grammar::tool_call(&walk_tools(), AnswerChoice::CallOnly).unwrap()
                };
                let (vocab, v) = engine_vocabulary();
                let end = vocab.len() as u32;
                let trie = TokenTrie::new(vocab.iter().enumerate().map(|(i, t)| (i as u32, t.as_slice())));
                let mut c = Constraint::start(&g, &v);
                // As the engine does: at least the shortest answer's tokens.
                let budget = budget.max(c.min_tokens());
                let mut llg_steps = 0u32;
                let mut used = 0u32;
                let mut text = Vec::new();
                let mut allowed = Vec::new();
                let mut picks = picks.into_iter();
                let mut ended = false;
                while !c.is_finished() {
                    prop_assert!(used < budget, "over budget after {:?}", String::from_utf8_lossy(&text));
                    let left = budget - used - 1;
                    c.mask(left, &mut allowed)
                        .map_err(|e| TestCaseError::fail(format!("{e} after {:?}", String::from_utf8_lossy(&text))))?;
                    prop_assert_eq!(c.masked_by_llguidance(), left >= g.reach(c.state()));
                    if c.masked_by_llguidance() {
                        // llguidance's mask is the grammar's, token for token.
                        llg_steps += 1;
                        let mut own = Vec::new();
                        trie.allowed(&g, c.state(), u32::MAX, &mut own);
                        if g.can_end(c.state()) {
                            own.push(end);
                        }
                        own.sort_unstable();
                        prop_assert_eq!(&allowed, &own, "after {:?}", String::from_utf8_lossy(&text));
                    }
                    // Once the random picks run out, take the shortest way to the end.
                    let pick = match picks.next() {
                        Some(p) => allowed[p as usize % allowed.len()],
                        None if allowed.contains(&end) => end,
                        None => *allowed
                            .iter()
                            .min_by_key(|&&id| g.distance(&g.feed_bytes(c.state(), &vocab[id as usize])))
                            .unwrap(),
                    };
                    used += 1;
                    if pick == end {
                        ended = true;
                        break;
                    }
                    let tok = &vocab[pick as usize];
                    text.extend_from_slice(tok);
                    c.commit(pick, tok).unwrap();
                }
                prop_assert!(ended || c.is_finished());
                prop_assert!(used <= budget);
                // With room to spare, llguidance masked the first token.
                if budget > g.reach(&g.start()) {
                    prop_assert!(llg_steps > 0);
                }
                check(which, &text)?;
            }
        }
    }

    #[test]
    fn mask_cache_stays_within_its_capacity_and_still_answers() {
        let g = Grammar::from_schema(&json!({"type":"string","maxLength":400})).unwrap();
        // A 300-byte token: string states within 300 characters of the cap stay distinct, so
        // the cache fills and has to start over many times.
        let mut vocab: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        vocab.push(vec![b'a'; 300]);
        let trie = TokenTrie::new(
            vocab
                .iter()
                .enumerate()
                .map(|(i, t)| (i as u32, t.as_slice())),
        );
        let mut cache = MaskCache::with_capacity(1000);
        let mut state = g.start();
        for b in std::iter::once(b'"').chain(std::iter::repeat_n(b'a', 399)) {
            let (mut cached, mut walked) = (Vec::new(), Vec::new());
            cache.allowed(&trie, &g, &state, 1000, &mut cached);
            trie.allowed(&g, &state, 1000, &mut walked);
            assert_eq!(cached, walked);
            assert!(cache.stored() <= 1000, "{}", cache.stored());
            state = g.feed(&state, b);
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

    #[test]
    fn trie_mask_respects_budget() {
        let g = Grammar::from_schema(&json!({"type":"boolean"})).unwrap();
        let toks: Vec<(u32, &[u8])> =
            vec![(0, b"t"), (1, b"true"), (2, b"f"), (3, b"x"), (4, b"tr")];
        let trie = TokenTrie::new(toks);
        let mut out = Vec::new();
        trie.allowed(&g, &g.start(), 10, &mut out);
        out.sort();
        assert_eq!(out, vec![0, 1, 2, 4]);
        out.clear();
        // With only 3 bytes of budget left after this token, "f" (4 more) is not allowed.
        trie.allowed(&g, &g.start(), 3, &mut out);
        out.sort();
        assert_eq!(out, vec![0, 1, 4]);
    }
}
