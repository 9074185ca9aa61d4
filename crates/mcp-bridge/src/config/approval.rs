//! Which calls of a service's tools wait for a person's approval: the `require_approval` key.

use serde::{Deserialize, Serialize};

/// Which calls of a service's tools wait for a person's approval (tool-system's approval flow,
/// through [`toolwright_core::ToolProvider::needs_approval`]): the `require_approval` key, spelled as
/// OpenAI's hosted MCP tool spells it — `"always"`, `"never"`, or per tool
/// `{"always": ["delete_file"], "never": ["read_file"]}` (each list may also be written
/// `{"tool_names": [...]}`); with the object form, a tool in neither list needs none. Tool
/// names are the server's own. Written back as spelled. A value of another shape makes the
/// entry malformed (kept in the file, not run): never silently ungated.
///
/// ```
/// let f = toolwright_mcp_bridge::ConfigFile::parse(r#"{"mcpServers": {
///   "fs": {"command": "x", "require_approval": {"always": ["write_file"]}},
///   "shell": {"command": "y", "require_approval": "always"}}}"#).unwrap();
/// assert!(f.services[0].requires_approval("write_file"));
/// assert!(!f.services[0].requires_approval("read_file"));
/// assert!(f.services[1].requires_approval("anything"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum RequireApproval {
    /// Every tool (`"always"`) or none (`"never"`).
    All(ApprovalMode),
    /// Per tool.
    Tools {
        /// These tools' calls need approval.
        #[serde(default, skip_serializing_if = "ToolNames::is_empty")]
        always: ToolNames,
        /// These never do (listed for the reader; a tool in neither list needs none).
        #[serde(default, skip_serializing_if = "ToolNames::is_empty")]
        never: ToolNames,
    },
}

/// `"always"` or `"never"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Every call waits for approval.
    Always,
    /// No call does.
    Never,
}

/// A list of tool names: `["a", "b"]` or `{"tool_names": ["a", "b"]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolNames {
    /// `["a", "b"]`.
    List(Vec<String>),
    /// `{"tool_names": ["a", "b"]}`.
    Named {
        /// The names.
        tool_names: Vec<String>,
    },
}

impl Default for ToolNames {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl ToolNames {
    fn names(&self) -> &[String] {
        match self {
            Self::List(n) | Self::Named { tool_names: n } => n,
        }
    }
    fn is_empty(&self) -> bool {
        self.names().is_empty()
    }
}

impl RequireApproval {
    /// Calls of these tools need approval (`{"always": [...]}`).
    pub fn tools<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::Tools {
            always: ToolNames::List(tools.into_iter().map(Into::into).collect()),
            never: ToolNames::default(),
        }
    }

    /// Whether a call of `tool` (the server's name) needs approval. A tool in both lists
    /// needs it (the safe side).
    pub fn applies_to(&self, tool: &str) -> bool {
        match self {
            Self::All(mode) => *mode == ApprovalMode::Always,
            Self::Tools { always, .. } => always.names().iter().any(|t| t == tool),
        }
    }
}
