//! Per-turn system-prompt sections (C2): text computed from the user's message for this turn
//! only — e.g. mcp-bridge's level-1 tool descriptions when the message shows an MCP intent —
//! composed into the system message of each request and never stored as history.

use std::fmt;

/// Computes named sections of the system prompt for one turn from the user's message.
///
/// ```
/// use toolwright_tool_system::{TurnSections};
/// use toolwright_core::{async_trait};
/// struct Today;
/// #[async_trait]
/// impl TurnSections for Today {
///     async fn sections(&self, _user_text: &str) -> Vec<(String, String)> {
///         vec![("date".into(), "Today is 2026-11-22.".into())]
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait TurnSections: Send + Sync {
    /// `(name, text)` pairs for this turn; empty when there is nothing to add.
    async fn sections(&self, user_text: &str) -> Vec<(String, String)>;
}

impl fmt::Debug for dyn TurnSections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TurnSections")
    }
}
