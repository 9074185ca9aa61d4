//! Tools from closures, typed tools whose schema comes from `schemars`, provider-ready schemas
//! and the OpenAI `tools` entry (001's `convert_to_openai_tool`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use toolwright_core::{ToolOutput, ToolSpec, normalize_schema};

use crate::{Tool, ToolContext, ToolError};

type BoxFut = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;
type Handler = Arc<dyn Fn(Value, ToolContext) -> BoxFut + Send + Sync>;

/// A [`Tool`] made from an async function.
///
/// [`FnTool::typed`] is the usual way: the argument type derives `schemars::JsonSchema` and
/// `serde::Deserialize`, so the schema the model sees is generated from the very type the
/// arguments are deserialized into and the two cannot drift apart.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use toolwright_tool_system::{FnTool};
/// use toolwright_core::{Tool, ToolContext};
///
/// /// Arguments of get_weather.
/// #[derive(Deserialize, JsonSchema)]
/// struct Args {
///     /// The city, e.g. "Beijing".
///     city: String,
/// }
///
/// let weather = FnTool::typed("get_weather", "Get current weather for a city",
///     |args: Args, _ctx: ToolContext| async move {
///         Ok(serde_json::json!({"temp": 22, "city": args.city}))
///     });
/// let spec = weather.spec();
/// assert_eq!(spec.parameters["type"], "object");
/// assert_eq!(spec.parameters["required"][0], "city");
/// assert!(spec.parameters.get("$schema").is_none());
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let out = rt.block_on(weather.call(serde_json::json!({"city": "Beijing"}), ToolContext::new("c1")));
/// assert_eq!(out.unwrap().value["temp"], 22);
/// ```
#[derive(Clone)]
pub struct FnTool {
    spec: ToolSpec,
    timeout: Option<Duration>,
    idempotent: bool,
    ends_turn: bool,
    handler: Handler,
}

impl std::fmt::Debug for FnTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool")
            .field("spec", &self.spec)
            .field("timeout", &self.timeout)
            .field("idempotent", &self.idempotent)
            .field("ends_turn", &self.ends_turn)
            .finish_non_exhaustive()
    }
}

impl FnTool {
    /// A tool with a hand-written JSON Schema, taking the raw JSON arguments and answering
    /// JSON. A tool whose result carries an image or a file implements [`Tool`] and answers a
    /// [`ToolOutput`].
    ///
    /// ```
    /// use toolwright_tool_system::{FnTool};
    /// use toolwright_core::{Tool};
    /// use serde_json::json;
    /// let echo = FnTool::new("echo", "Echo the text back",
    ///     json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    ///     |args, _ctx| async move { Ok(args["text"].clone()) });
    /// assert_eq!(&*echo.spec().name, "echo");
    /// ```
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        f: F,
    ) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |args, ctx| {
            let call = f(args, ctx);
            Box::pin(async move { call.await.map(ToolOutput::new) }) as BoxFut
        });
        Self {
            spec: ToolSpec::new(name, description, normalize_schema(parameters)),
            timeout: None,
            idempotent: false,
            ends_turn: false,
            handler,
        }
    }

    /// A typed tool: the schema is generated from `A` and the arguments are deserialized into
    /// `A` before `f` runs; `f`'s result is serialized to JSON.
    pub fn typed<A, F, Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        f: F,
    ) -> Self
    where
        A: JsonSchema + DeserializeOwned + Send + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: Serialize,
    {
        let name = name.into();
        let tool_name = name.clone();
        let f = Arc::new(f);
        let handler: Handler = Arc::new(move |args: Value, ctx| {
            let f = Arc::clone(&f);
            let tool_name = tool_name.clone();
            Box::pin(async move {
                let typed: A = serde_json::from_value(args).map_err(|e| {
                    ToolError::invalid_arguments(format!(
                        "Invalid arguments for tool {tool_name}: {e}"
                    ))
                })?;
                let out = f(typed, ctx).await?;
                serde_json::to_value(out).map(ToolOutput::new).map_err(|e| {
                    ToolError::failed(format!(
                        "Tool {tool_name} returned a result that is not JSON"
                    ))
                    .with_detail(e.to_string())
                })
            }) as BoxFut
        });
        Self {
            spec: ToolSpec::new(name, description, schema_for::<A>()),
            timeout: None,
            idempotent: false,
            ends_turn: false,
            handler,
        }
    }

    /// This tool's own time limit (the dispatcher's default, 30 s, applies otherwise).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Declares the tool idempotent ([`Tool::idempotent`]): a repeat with the same arguments
    /// in one run is answered from the earlier result instead of running again.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Makes a successful result the turn's answer ([`Tool::final_answer`]): the loop stops
    /// after the round that called this tool and returns its result as the reply, without
    /// another model call (the OpenAI Agents SDK's `StopAtTools`). A string result is the
    /// text as is; any other JSON is given as JSON text.
    ///
    /// ```
    /// use toolwright_tool_system::{FnTool};
    /// use toolwright_core::{Tool};
    /// use serde_json::json;
    /// let done = FnTool::new("submit", "Submit the final report",
    ///     json!({"type": "object", "properties": {"report": {"type": "string"}}, "required": ["report"]}),
    ///     |args, _ctx| async move { Ok(args["report"].clone()) })
    ///     .ends_turn();
    /// assert_eq!(done.final_answer(&json!("All checks pass.")).as_deref(), Some("All checks pass."));
    /// ```
    pub fn ends_turn(mut self) -> Self {
        self.ends_turn = true;
        self
    }
}

#[async_trait::async_trait]
impl Tool for FnTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }
    // The handler's future as it is (already boxed), not boxed once more by `async_trait`.
    fn call<'life0, 'async_trait>(
        &'life0 self,
        args: Value,
        ctx: ToolContext,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        (self.handler)(args, ctx)
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    fn final_answer(&self, result: &Value) -> Option<String> {
        self.ends_turn.then(|| match result {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

/// The parameters schema of `A`, ready for any provider: an object with `properties`, no
/// `$schema`, sub-schemas inlined (only recursive types keep `$defs`).
pub(crate) fn schema_for<A: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<A>();
    normalize_schema(schema.to_value())
}

/// The OpenAI `tools` entry for a tool (001's `convert_to_openai_tool`):
/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
///
/// ```
/// use toolwright_core::{ToolOutput, ToolSpec, normalize_schema};
/// use serde_json::json;
/// let spec = ToolSpec::new("get_weather", "Weather", json!({"type": "object", "properties": {}}));
/// let t = toolwright_tool_system::to_openai_tool(&spec);
/// assert_eq!(t["type"], "function");
/// assert_eq!(t["function"]["name"], "get_weather");
/// ```
pub fn to_openai_tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Node {
        name: String,
        children: Vec<Node>,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        n: u32,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Outer {
        inner: Inner,
    }

    #[test]
    fn t1_nested_types_are_inlined_without_defs() {
        let s = schema_for::<Outer>();
        assert_eq!(
            s["properties"]["inner"]["properties"]["n"]["type"],
            "integer"
        );
        assert!(s.get("$defs").is_none());
    }

    #[test]
    fn t1_recursive_schema_keeps_defs_and_stays_object() {
        let s = schema_for::<Node>();
        assert_eq!(s["type"], "object");
        assert!(s.get("properties").is_some());
        assert!(s.get("$schema").is_none());
        // recursion cannot be inlined: refs point at the root or at kept definitions
        assert_eq!(s["properties"]["children"]["items"]["$ref"], "#");
        assert!(toolwright_output_control::Validator::new(&s).is_ok());
        let v = toolwright_output_control::Validator::new(&s).unwrap();
        assert!(
            v.validate(
                &serde_json::json!({"name": "a", "children": [{"name": "b", "children": []}]})
            )
            .is_ok()
        );
        assert!(
            v.validate(
                &serde_json::json!({"name": "a", "children": [{"name": 1, "children": []}]})
            )
            .is_err()
        );
    }

    #[test]
    fn t1_unit_args_give_empty_object_schema() {
        #[derive(serde::Deserialize, JsonSchema)]
        struct NoArgs {}
        let s = schema_for::<NoArgs>();
        assert_eq!(s["type"], "object");
        assert!(s["properties"].is_object());
    }
}
