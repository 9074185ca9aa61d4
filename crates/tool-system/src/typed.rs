//! Tools from closures, typed tools whose schema comes from `schemars`, provider-ready schemas
//! and the OpenAI `tools` entry (001's `convert_to_openai_tool`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use model_gateway::ToolSpec;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::{Tool, ToolContext, ToolError};

type BoxFut = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;
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
/// use tool_system::{FnTool, Tool, ToolContext};
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
/// assert_eq!(out.unwrap()["temp"], 22);
/// ```
#[derive(Clone)]
pub struct FnTool {
    spec: ToolSpec,
    timeout: Option<Duration>,
    handler: Handler,
}

impl std::fmt::Debug for FnTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool")
            .field("spec", &self.spec)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl FnTool {
    /// A tool with a hand-written JSON Schema, taking the raw JSON arguments.
    ///
    /// ```
    /// use tool_system::{FnTool, Tool};
    /// use serde_json::json;
    /// let echo = FnTool::new("echo", "Echo the text back",
    ///     json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    ///     |args, _ctx| async move { Ok(args["text"].clone()) });
    /// assert_eq!(echo.spec().name, "echo");
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
        let handler: Handler = Arc::new(move |args, ctx| Box::pin(f(args, ctx)) as BoxFut);
        Self {
            spec: ToolSpec::new(name, description, normalize_schema(parameters)),
            timeout: None,
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
                serde_json::to_value(out).map_err(|e| {
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
            handler,
        }
    }

    /// This tool's own time limit (the dispatcher's default, 30 s, applies otherwise).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

#[async_trait::async_trait]
impl Tool for FnTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        (self.handler)(args, ctx).await
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// The parameters schema of `A`, ready for any provider: an object with `properties`, no
/// `$schema`, sub-schemas inlined (only recursive types keep `$defs`).
///
/// ```
/// #[derive(schemars::JsonSchema, serde::Deserialize)]
/// struct Inner { n: u32 }
/// #[derive(schemars::JsonSchema, serde::Deserialize)]
/// struct Args { inner: Inner }
/// let s = tool_system::schema_for::<Args>();
/// assert_eq!(s["properties"]["inner"]["properties"]["n"]["type"], "integer");
/// assert!(s.get("$defs").is_none());
/// ```
pub fn schema_for<A: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<A>();
    normalize_schema(schema.to_value())
}

/// Makes a parameters schema acceptable to providers: drops `$schema`; a schema that is not an
/// object schema (`true`, `{}`, a bare type) becomes `{"type": "object", "properties": {}}`
/// (merged); an object schema gets `properties` when it lacks them; `$ref`s into `$defs` are
/// inlined when they are not recursive.
///
/// ```
/// use serde_json::json;
/// let s = tool_system::normalize_schema(json!({"$schema": "x", "type": "object"}));
/// assert_eq!(s, json!({"type": "object", "properties": {}}));
/// assert_eq!(tool_system::normalize_schema(json!(true)), json!({"type": "object", "properties": {}}));
/// ```
pub fn normalize_schema(schema: Value) -> Value {
    let mut obj = match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    obj.remove("$schema");
    if let Some(Value::Object(defs)) = obj.remove("$defs") {
        let mut root = Value::Object(obj);
        let mut recursive = false;
        inline_refs(&mut root, &defs, 0, &mut recursive);
        obj = match root {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if recursive {
            obj.insert("$defs".into(), Value::Object(defs));
        }
    }
    match obj.get("type") {
        None => {
            obj.insert("type".into(), json!("object"));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => {
            // Not an object schema: providers require the arguments to be an object.
            return json!({"type": "object", "properties": {}});
        }
    }
    obj.entry("properties").or_insert_with(|| json!({}));
    Value::Object(obj)
}

const MAX_INLINE_DEPTH: usize = 32;

fn inline_refs(v: &mut Value, defs: &Map<String, Value>, depth: usize, recursive: &mut bool) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
            {
                if depth >= MAX_INLINE_DEPTH {
                    *recursive = true;
                    return;
                }
                if let Some(Value::Object(def)) = defs.get(name) {
                    let mut def = Value::Object(def.clone());
                    inline_refs(&mut def, defs, depth + 1, recursive);
                    if *recursive {
                        return;
                    }
                    m.remove("$ref");
                    if let Value::Object(d) = def {
                        for (k, val) in d {
                            m.entry(k).or_insert(val);
                        }
                    }
                    return;
                }
            }
            for val in m.values_mut() {
                inline_refs(val, defs, depth, recursive);
            }
        }
        Value::Array(a) => {
            for val in a {
                inline_refs(val, defs, depth, recursive);
            }
        }
        _ => {}
    }
}

/// The OpenAI `tools` entry for a tool (001's `convert_to_openai_tool`):
/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
///
/// ```
/// use model_gateway::ToolSpec;
/// use serde_json::json;
/// let spec = ToolSpec::new("get_weather", "Weather", json!({"type": "object", "properties": {}}));
/// let t = tool_system::to_openai_tool(&spec);
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

/// Whether `name` is a valid tool name for providers: `^[a-zA-Z0-9_-]{1,64}$`.
///
/// ```
/// assert!(tool_system::is_valid_tool_name("get_weather"));
/// assert!(tool_system::is_valid_tool_name("vector-search"));
/// assert!(!tool_system::is_valid_tool_name("get weather"));
/// assert!(!tool_system::is_valid_tool_name(""));
/// ```
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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

    #[test]
    fn t1_recursive_schema_keeps_defs_and_stays_object() {
        let s = schema_for::<Node>();
        assert_eq!(s["type"], "object");
        assert!(s.get("properties").is_some());
        assert!(s.get("$schema").is_none());
        // recursion cannot be inlined: refs point at the root or at kept definitions
        assert_eq!(s["properties"]["children"]["items"]["$ref"], "#");
        assert!(output_control::Validator::new(&s).is_ok());
        let v = output_control::Validator::new(&s).unwrap();
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
    fn t1_tool_name_rules() {
        assert!(is_valid_tool_name(&"a".repeat(64)));
        assert!(!is_valid_tool_name(&"a".repeat(65)));
        assert!(!is_valid_tool_name("工具"));
        assert!(!is_valid_tool_name("a.b"));
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
