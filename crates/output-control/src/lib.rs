//! Stage 2 — output control: reading what a model wrote.
//!
//! Pure functions and one push parser; no I/O, no async, no other stage.
//!
//! * **Structured output (O1):** [`extract_json`] takes one JSON value out of raw model text
//!   (bare, in a ```` ```json ```` fence, or amid prose); [`validate`] / [`Validator`] check it
//!   against a JSON Schema and list every violation with its JSON-pointer path and a plain
//!   sentence ([`SchemaError::for_model`] is the re-prompt text); [`parse_as`] does both and
//!   deserializes into any `T: DeserializeOwned + JsonSchema`.
//! * **Tool decisions (O2):** [`parse_tool_decision`] reads spec 002's
//!   `{"tool": …, "arguments": …}` / `{"tool": null, "reply": …}` and spec 004's
//!   `{"tool_call": {"name": …, "arguments": …}}` into a [`ToolDecision`].
//! * **Tags (O3–O7):** [`parse_tool_actions`] parses a whole text into [`TagEvent`]s, and
//!   [`StreamParser`] does the same chunk by chunk as a model streams, holding back only a
//!   suffix that could still become a `<tool_action …>…</tool_action>` tag.
//!
//! ```
//! use toolwright_output_control::{StreamParser, TagEvent};
//! let mut parser = StreamParser::new();
//! let mut events = Vec::new();
//! for chunk in ["思考: 我需要搜索...<tool_action name=\"",
//!               "vector-search\"><query value=\"test\"",
//!               "\" /></tool_action>接下来..."] {
//!     events.extend(parser.push(chunk));
//! }
//! events.extend(parser.finish());
//! assert_eq!(events.len(), 3);
//! assert!(matches!(&events[1], TagEvent::Action(a) if a.name == "vector-search"));
//! ```
//!
//! # Tags inside Markdown code fences
//!
//! A complete tag inside a code fence (```` ```xml ````, ```` ``` ````) or inline code is a call
//! like any other. Models often wrap real calls in ```` ```xml ```` fences, and silently
//! dropping a real call is worse than running a quoted one: a quoted example with a
//! placeholder name fails as "Tool not found" and that result goes back to the model, which
//! recovers. Keeping the parser context-free is also what lets it pass plain chunks through
//! at once and give the same events however the stream is cut. To *show* the format without
//! calling, a prompt or model can write `&lt;tool_action …&gt;` or leave the tag unclosed
//! (an unclosed tag never runs).
//!
//! # Malformed tags
//!
//! A tag that breaks the grammar (given in `docs/stage-2-output-control.md`) is text, never
//! an error and never a panic. Text before
//! the point of failure is emitted; scanning resumes at the failing `<` or at the last `<`
//! that opened a child element, so a real tag written after a broken one is still found.

mod decision;
mod json;
mod schema;
mod stream;
mod tags;

pub use decision::{DecisionError, ToolDecision, parse_tool_decision};
pub use json::{JsonError, extract_json};
pub use schema::{
    InvalidSchema, ParseError, SchemaError, Validator, Violation, parse_as, validate,
};
pub use stream::{
    DEFAULT_MAX_TAG_BYTES, MIN_MAX_TAG_BYTES, StreamParser, TagOptions, parse_tool_actions,
    parse_tool_actions_with,
};
pub use tags::{Segment, TagEvent, TagEventRef, ToolAction};
