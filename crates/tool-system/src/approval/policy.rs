//! The agent's own approval rules ([`ApprovalPolicy`]): which calls need a person, by tool name
//! and a predicate on the arguments. A pure decision.

use std::sync::Arc;

/// Whether a call to a tool needs approval, by predicate on its arguments.
pub type ApprovalPredicate = Arc<dyn Fn(&serde_json::Value) -> bool + Send + Sync>;

/// The agent's own approval rules: gate any tool by name — including tools of providers you
/// did not write — always or by a predicate on the arguments. A call needs approval when the
/// policy, the tool or its provider says so.
///
/// ```
/// use toolwright_tool_system::ApprovalPolicy;
/// use serde_json::json;
/// let policy = ApprovalPolicy::new()
///     .always("delete_file")
///     .when("transfer", |args| args["amount"].as_f64().unwrap_or(f64::INFINITY) > 100.0);
/// assert!(policy.requires("delete_file", &json!({"path": "a"})));
/// assert!(policy.requires("transfer", &json!({"amount": 500})));
/// assert!(!policy.requires("transfer", &json!({"amount": 5})));
/// assert!(!policy.requires("get_weather", &json!({})));
/// ```
#[derive(Clone, Default)]
pub struct ApprovalPolicy {
    rules: Vec<(String, ApprovalPredicate)>,
}

impl std::fmt::Debug for ApprovalPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|(n, _)| n))
            .finish()
    }
}

impl ApprovalPolicy {
    /// No rules: only tools and providers decide.
    pub fn new() -> Self {
        Self::default()
    }
    /// Every call to `tool` needs approval.
    pub fn always(self, tool: impl Into<String>) -> Self {
        self.when(tool, |_| true)
    }
    /// Calls to `tool` need approval when `predicate` holds for their arguments.
    pub fn when(
        mut self,
        tool: impl Into<String>,
        predicate: impl Fn(&serde_json::Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.rules.push((tool.into(), Arc::new(predicate)));
        self
    }
    /// Whether a call to `tool` with `args` needs approval by these rules.
    pub fn requires(&self, tool: &str, args: &serde_json::Value) -> bool {
        self.rules.iter().any(|(n, p)| n == tool && p(args))
    }
    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}
