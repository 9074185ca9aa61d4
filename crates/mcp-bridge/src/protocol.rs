//! [`ToolCallProtocol`]: 004's wire format on top of tool-system's loop (M6). The model answers
//! with JSON holding `tool_call: {name, arguments}` (or `tool_call: null` and a `reply`); each
//! result comes back as a message with role `tool`, the tool's name and the content.
//!
//! Unlike 002's JSON protocol it puts no tool list in the prompt: the tools the model sees are
//! the level-1 section ([`crate::McpBridge::prompt_section`]) of the turn, and the full schema is
//! one [`crate::DESCRIBE_TOOL`] call away.

use toolwright_core::ToolSpec;
use toolwright_tool_system::protocol::{CallProtocol, JsonDecisionProtocol, ResponseReader};

/// 004's `tool_call` protocol (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolCallProtocol;

/// The answer-format part of the system prompt.
pub const FORMAT_PROMPT: &str = "Answer with one JSON object only, no other text:\n\
- to call a tool: {\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": {...}}}\n\
- to answer the user: {\"tool_call\": null, \"reply\": \"<your answer>\"}\n\
Each tool result comes back as a `tool` message; a result {\"success\": false, \"error\": ...} says what went wrong.";

impl CallProtocol for ToolCallProtocol {
    fn name(&self) -> &'static str {
        "json"
    }
    fn binds_tools(&self) -> bool {
        false
    }
    fn prompt_section(&self, _tools: &[ToolSpec]) -> Option<String> {
        Some(FORMAT_PROMPT.to_string())
    }
    fn reader(&self, tools: &[ToolSpec], seq: usize) -> Box<dyn ResponseReader> {
        // 002's reader already accepts 004's `tool_call` form (output-control, O2).
        JsonDecisionProtocol.reader(tools, seq)
    }
    fn concurrent(&self) -> bool {
        false
    }
    // Each result comes back as a `tool` message: the trait's default `round_messages`.
}
