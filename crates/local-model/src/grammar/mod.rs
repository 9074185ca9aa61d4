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
//! (a call, or a copy of the template's tags). Once the text has left the tag behind, nothing is
//! constrained any more. With a `response_format` JSON schema the answer instead of a call is
//! JSON of that schema (which never starts with `<` either), constrained to its end.
//!
//! The parts: `compile` turns a schema (or a set of tools) into the grammar's nodes; `state`
//! runs the bytes through it (the pushdown stacks, the distance to the end); `lark` writes the
//! same language for llguidance; `mask` finds the tokens a state allows (the token trie and the
//! cache of masks); `walks` (tests) drives random walks through the whole of it.

mod compile;
mod lark;
mod mask;
mod state;
#[cfg(test)]
mod walks;

pub use mask::{MaskCache, TokenTrie};
pub use state::State;

/// Longest free string (in characters) unless the schema says `maxLength`.
pub const DEFAULT_STRING_MAX: u32 = 200;
/// Longest string any schema may ask for (`maxLength` above this is cut to it), in characters.
pub const LONGEST_STRING: u32 = 600;
/// The tag that opens a tool call in the local model's output.
pub const TOOL_CALL_OPEN: &str = "<tool_call>\n";
/// The tag that closes a tool call.
pub const TOOL_CALL_CLOSE: &str = "\n</tool_call>";
/// Longest number, in characters.
pub const NUMBER_MAX: u8 = 16;
/// Most array items unless the schema says `maxItems`.
pub const DEFAULT_MAX_ITEMS: u64 = 16;

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

/// Why a schema cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError(pub String);

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a tool-call grammar lets the model write instead of a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnswerChoice<'a> {
    /// A plain-text answer, or a call (`tool_choice` auto).
    TextOrCall,
    /// JSON valid against this schema (compiled as [`Grammar::from_schema`] compiles it), or a
    /// call (`tool_choice` auto with a `response_format` JSON schema).
    JsonOrCall(&'a serde_json::Value),
    /// A call only (`tool_choice` required, or a named function).
    CallOnly,
}

/// What the tests of every part share: a grammar's whole-text check and a small tool set.
#[cfg(test)]
mod testing {
    use super::Grammar;
    use serde_json::json;
    use toolwright_core::ToolSpec;

    pub(super) fn accepts(g: &Grammar, text: &str) -> bool {
        let s = g.feed_bytes(&g.start(), text.as_bytes());
        !s.is_dead() && g.can_end(&s)
    }

    pub(super) fn tools() -> Vec<ToolSpec> {
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

    pub(super) fn call(name: &str, args: &str) -> String {
        format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>")
    }
}
