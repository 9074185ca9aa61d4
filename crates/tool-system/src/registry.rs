//! The built-in tool registry (T2): register, get, list, execute by name. It is also the
//! [`ToolProvider`] for built-in tools.

use foldhash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolwright_core::{ToolOutput, ToolSpec, TurnInfo, is_valid_tool_name};
use toolwright_output_control::{SchemaError, Validator};

use crate::typed::to_openai_tool;
use crate::{Tool, ToolContext, ToolError, ToolProvider};

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A tool with this name is already registered.
    #[error("a tool named `{0}` is already registered; tool names must be unique")]
    Duplicate(String),
    /// The name does not match `^[a-zA-Z0-9_-]{1,64}$`.
    #[error("invalid tool name `{0}`: use 1 to 64 characters from a-z, A-Z, 0-9, `_` and `-`")]
    InvalidName(String),
    /// The parameters schema does not compile.
    #[error("tool `{name}` has an invalid parameters schema: {message}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// What the schema compiler said.
        message: String,
    },
}

struct Entry {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
    validator: Arc<Validator>,
}

/// Built-in tools by name, in registration order.
///
/// ```
/// use toolwright_tool_system::{FnTool, ToolRegistry};
/// use toolwright_core::{ToolContext};
/// use serde_json::json;
/// let mut registry = ToolRegistry::new();
/// registry.register(FnTool::new("get_weather", "Get current weather for a city",
///     json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
///     |args, _| async move { Ok(json!({"temp": 22, "city": args["city"]})) }))?;
/// assert!(registry.register(FnTool::new("get_weather", "again", json!({}), |_, _| async { Ok(json!(null)) })).is_err());
/// assert_eq!(&*registry.list()[0].name, "get_weather");
/// assert_eq!(registry.openai_tools()[0]["function"]["name"], "get_weather");
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let out = rt.block_on(registry.execute("get_weather", json!({"city": "Beijing"}), ToolContext::new("c1")));
/// assert_eq!(out.unwrap().value["temp"], 22);
/// # Ok::<(), toolwright_tool_system::RegistryError>(())
/// ```
#[derive(Default)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| &e.spec.name))
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool; its name must be valid and unused and its schema must compile.
    pub fn register(&mut self, tool: impl Tool + 'static) -> Result<(), RegistryError> {
        self.register_arc(Arc::new(tool))
    }

    /// Registers a shared tool.
    pub fn register_arc(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let spec = tool.spec();
        if !is_valid_tool_name(&spec.name) {
            return Err(RegistryError::InvalidName(spec.name.to_string()));
        }
        if self.index.contains_key(&*spec.name) {
            return Err(RegistryError::Duplicate(spec.name.to_string()));
        }
        let validator =
            Validator::new(&spec.parameters).map_err(|e| RegistryError::InvalidSchema {
                name: spec.name.to_string(),
                message: e.message,
            })?;
        self.index.insert(spec.name.to_string(), self.entries.len());
        self.entries.push(Entry {
            tool,
            spec,
            validator: Arc::new(validator),
        });
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.index
            .get(name)
            .map(|&i| Arc::clone(&self.entries[i].tool))
    }

    /// Every tool's spec, in registration order.
    pub fn list(&self) -> Vec<ToolSpec> {
        self.entries.iter().map(|e| e.spec.clone()).collect()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tools as an API `tools` array (OpenAI format).
    pub fn openai_tools(&self) -> Vec<Value> {
        self.entries
            .iter()
            .map(|e| to_openai_tool(&e.spec))
            .collect()
    }

    /// The tools described for a system prompt (002's JSON-decision style).
    pub fn prompt_list(&self) -> String {
        crate::prompt::describe_tools(&self.list())
    }

    /// Runs tool `name` directly: unknown name → `Tool not found`, arguments checked against
    /// the schema first. No time limit here; the [`Dispatcher`](crate::Dispatcher) adds one.
    pub async fn execute(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let Some(&i) = self.index.get(name) else {
            return Err(ToolError::not_found(name));
        };
        let entry = &self.entries[i];
        entry
            .validator
            .validate(&args)
            .map_err(|e| self.invalid_arguments(name, &schema_problems(&e)))?;
        entry.tool.call(args, ctx).await
    }
}

#[async_trait::async_trait]
impl ToolProvider for ToolRegistry {
    fn provider_name(&self) -> &str {
        "builtin"
    }
    async fn list(&self) -> Vec<ToolSpec> {
        ToolRegistry::list(self)
    }
    /// A registry handed to a dispatcher is not registered into any more: its list is fixed.
    fn list_revision(&self) -> Option<u64> {
        Some(0)
    }
    async fn advertised(&self, _turn: &TurnInfo) -> Vec<ToolSpec> {
        ToolRegistry::list(self)
    }
    fn advertises_the_same_every_round(&self) -> bool {
        true
    }
    // The tool's own future, not boxed once more by `async_trait`.
    fn call<'life0, 'life1, 'async_trait>(
        &'life0 self,
        name: &'life1 str,
        args: Value,
        ctx: ToolContext,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<ToolOutput, ToolError>> + Send + 'async_trait>,
    >
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        match self.index.get(name) {
            Some(&i) => self.entries[i].tool.call(args, ctx),
            None => Box::pin(std::future::ready(Err(ToolError::not_found(name)))),
        }
    }
    fn timeout(&self, name: &str) -> Option<Duration> {
        self.index
            .get(name)
            .and_then(|&i| self.entries[i].tool.timeout())
    }
    fn idempotent(&self, name: &str) -> bool {
        self.index
            .get(name)
            .is_some_and(|&i| self.entries[i].tool.idempotent())
    }
    fn needs_approval(&self, name: &str, args: &Value) -> bool {
        self.index
            .get(name)
            .is_some_and(|&i| self.entries[i].tool.needs_approval(args))
    }
    fn final_answer(&self, name: &str, result: &Value) -> Option<String> {
        self.index
            .get(name)
            .and_then(|&i| self.entries[i].tool.final_answer(result))
    }
}

/// What the validator found, as one line: `"/city: 3 is not of type string; …"`.
pub(crate) fn schema_problems(e: &SchemaError) -> String {
    let list: Vec<String> = e.violations().iter().map(ToString::to_string).collect();
    if list.is_empty() {
        e.to_string()
    } else {
        list.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FnTool;
    use serde_json::json;

    fn noop(name: &str) -> FnTool {
        FnTool::new(
            name,
            "noop",
            json!({"type": "object", "properties": {}}),
            |_, _| async { Ok(json!("ok")) },
        )
    }

    #[test]
    fn t2_duplicate_and_invalid_names_are_rejected() {
        let mut r = ToolRegistry::new();
        assert!(r.register(noop("a")).is_ok());
        assert_eq!(
            r.register(noop("a")),
            Err(RegistryError::Duplicate("a".into()))
        );
        assert_eq!(
            r.register(noop("bad name")),
            Err(RegistryError::InvalidName("bad name".into()))
        );
        let broken = FnTool::new(
            "broken",
            "x",
            json!({"type": "object", "properties": {"a": {"type": 5}}}),
            |_, _| async { Ok(json!(1)) },
        );
        assert!(matches!(
            r.register(broken),
            Err(RegistryError::InvalidSchema { .. })
        ));
        assert_eq!(r.len(), 1);
    }

    #[tokio::test]
    async fn t2_execute_by_name_validates_and_reports_not_found() {
        let mut r = ToolRegistry::new();
        r.register(FnTool::new(
            "get_weather",
            "w",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            |a, _| async move { Ok(json!({"city": a["city"]})) },
        ))
        .unwrap();
        let e = r
            .execute("nope", json!({}), ToolContext::new("1"))
            .await
            .unwrap_err();
        assert_eq!(e.message, "Tool not found: nope");
        let e = r
            .execute("get_weather", json!({}), ToolContext::new("1"))
            .await
            .unwrap_err();
        assert_eq!(e.kind, crate::ToolErrorKind::InvalidArguments);
        assert!(e.message.contains("city"));
        assert!(r.prompt_list().contains("get_weather"));
    }
}
