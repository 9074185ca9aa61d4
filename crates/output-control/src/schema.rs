//! JSON Schema validation with errors a model can act on (O1), and typed parsing.

use std::fmt;

use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::json::{JsonError, extract_json};

/// One way in which a value breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer to the offending value (`""` is the whole value), e.g. `/arguments/city`.
    pub path: String,
    /// The schema keyword that failed, e.g. `required`, `type`, `maxItems`.
    pub keyword: String,
    /// A plain sentence saying what is wrong and what is expected.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        };
        write!(f, "at {path}: {} [{}]", self.message, self.keyword)
    }
}

/// The schema itself is not a valid JSON Schema (a programming error, not the model's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the JSON Schema is invalid: {message}; fix the schema given to the validator")]
pub struct InvalidSchema {
    /// What the schema compiler reported.
    pub message: String,
}

/// Validation failed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The value breaks the schema; every violation is listed.
    #[error("the JSON does not match the schema: {}", list(.0))]
    Violations(Vec<Violation>),
    /// The schema could not be compiled.
    #[error(transparent)]
    InvalidSchema(#[from] InvalidSchema),
}

fn list(v: &[Violation]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl SchemaError {
    /// The violations (empty for [`SchemaError::InvalidSchema`]).
    pub fn violations(&self) -> &[Violation] {
        match self {
            SchemaError::Violations(v) => v,
            SchemaError::InvalidSchema(_) => &[],
        }
    }

    /// A short text to send back to the model so it can correct its answer.
    ///
    /// ```
    /// use serde_json::json;
    /// let schema = json!({"type": "object", "required": ["city"]});
    /// let err = toolwright_output_control::validate(&json!({}), &schema).unwrap_err();
    /// assert!(err.for_model().contains("city"));
    /// ```
    pub fn for_model(&self) -> String {
        match self {
            SchemaError::Violations(v) => {
                let mut s = String::from("Your JSON does not match the required schema:\n");
                for violation in v {
                    s.push_str("- ");
                    s.push_str(&violation.to_string());
                    s.push('\n');
                }
                s.push_str("Send the corrected JSON only, with every problem above fixed.");
                s
            }
            SchemaError::InvalidSchema(e) => format!(
                "The tool's parameter schema is broken ({}); this is not your fault — answer without this tool.",
                e.message
            ),
        }
    }
}

/// A compiled JSON Schema, for callers that validate many values against one schema.
///
/// ```
/// use toolwright_output_control::Validator;
/// use serde_json::json;
/// let v = Validator::new(&json!({
///     "type": "object",
///     "properties": {"city": {"type": "string"}},
///     "required": ["city"],
/// }))?;
/// assert!(v.validate(&json!({"city": "北京"})).is_ok());
/// let err = v.validate(&json!({"city": 3})).unwrap_err();
/// assert_eq!(err.violations()[0].path, "/city");
/// # Ok::<(), toolwright_output_control::InvalidSchema>(())
/// ```
pub struct Validator {
    inner: jsonschema::Validator,
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validator").finish_non_exhaustive()
    }
}

impl Validator {
    /// Compiles `schema` (draft detected from `$schema`, 2020-12 by default).
    pub fn new(schema: &Value) -> Result<Validator, InvalidSchema> {
        jsonschema::validator_for(schema)
            .map(|inner| Validator { inner })
            .map_err(|e| InvalidSchema {
                message: e.to_string(),
            })
    }

    /// Compiles the schema that `schemars` derives for `T`.
    pub fn for_type<T: JsonSchema>() -> Result<Validator, InvalidSchema> {
        Validator::new(schemars::schema_for!(T).as_value())
    }

    /// Checks `value`, listing every violation.
    pub fn validate(&self, value: &Value) -> Result<(), SchemaError> {
        if self.inner.is_valid(value) {
            return Ok(());
        }
        let violations: Vec<Violation> = self
            .inner
            .iter_errors(value)
            .map(|e| describe(&e))
            .collect();
        if violations.is_empty() {
            // is_valid and iter_errors disagree; do not claim success on an invalid value.
            return Err(SchemaError::Violations(vec![Violation {
                path: String::new(),
                keyword: "schema".into(),
                message: "does not match the schema".into(),
            }]));
        }
        Err(SchemaError::Violations(violations))
    }

    /// Extracts JSON from `text`, validates it with this validator, then deserializes it.
    /// Use with a validator from [`Validator::for_type`] to avoid recompiling the schema.
    pub fn parse<T: DeserializeOwned>(&self, text: &str) -> Result<T, ParseError> {
        let value = extract_json(text)?;
        self.validate(&value)?;
        serde_json::from_value(value).map_err(|e| ParseError::Deserialize {
            message: e.to_string(),
        })
    }
}

/// Validates `value` against `schema`, compiling the schema each time (use [`Validator`] to
/// compile once).
///
/// ```
/// use serde_json::json;
/// let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}});
/// assert!(toolwright_output_control::validate(&json!({"n": 3}), &schema).is_ok());
/// let err = toolwright_output_control::validate(&json!({"n": 30}), &schema).unwrap_err();
/// assert_eq!(err.violations()[0].path, "/n");
/// assert_eq!(err.violations()[0].keyword, "maximum");
/// ```
pub fn validate(value: &Value, schema: &Value) -> Result<(), SchemaError> {
    Validator::new(schema)?.validate(value)
}

/// Typed parse failed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// No JSON could be taken from the text.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// The JSON breaks the type's schema.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The JSON matches the schema but serde refused it (e.g. a custom deserializer).
    #[error(
        "the JSON could not be read as the expected type: {message}; send JSON of the expected shape"
    )]
    Deserialize {
        /// serde_json's message.
        message: String,
    },
    /// The type's derived schema did not compile.
    #[error(transparent)]
    InvalidSchema(#[from] InvalidSchema),
}

impl ParseError {
    /// A short text to send back to the model so it can correct its answer.
    pub fn for_model(&self) -> String {
        match self {
            ParseError::Schema(e) => e.for_model(),
            other => other.to_string(),
        }
    }
}

/// Extracts JSON from model text, validates it against `T`'s derived JSON Schema and
/// deserializes it. Compiles the schema on every call; reuse a [`Validator::for_type`] with
/// [`Validator::parse`] in hot loops.
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema, Debug)]
/// struct Weather { city: String, days: u8 }
///
/// let w: Weather = toolwright_output_control::parse_as("好的：{\"city\": \"上海\", \"days\": 3}")?;
/// assert_eq!(w.city, "上海");
/// let err = toolwright_output_control::parse_as::<Weather>("{\"city\": \"上海\"}").unwrap_err();
/// assert!(err.to_string().contains("days"));
/// # Ok::<(), toolwright_output_control::ParseError>(())
/// ```
pub fn parse_as<T: DeserializeOwned + JsonSchema>(text: &str) -> Result<T, ParseError> {
    Validator::for_type::<T>()?.parse(text)
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(e: &ValidationError<'_>) -> Violation {
    let instance: &Value = e.instance();
    let kind = e.kind();
    let message = match kind {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            format!("the required property \"{name}\" is missing; add it")
        }
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => t.to_string(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            format!(
                "must be of type {expected}, but is {} ({})",
                json_type_name(instance),
                short(instance)
            )
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => format!(
            "has properties that are not allowed: {}; remove them",
            quoted_list(unexpected)
        ),
        ValidationErrorKind::Enum { options } => {
            format!(
                "is {}, but must be one of {}",
                short(instance),
                short(options)
            )
        }
        ValidationErrorKind::Constant { expected_value } => format!(
            "is {}, but must be exactly {}",
            short(instance),
            short(expected_value)
        ),
        ValidationErrorKind::MinLength { limit } => {
            format!("is too short: must have at least {limit} characters")
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("is too long: must have at most {limit} characters")
        }
        ValidationErrorKind::MinItems { limit } => {
            format!("has too few items: must have at least {limit}")
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!("has too many items: must have at most {limit}")
        }
        ValidationErrorKind::MinProperties { limit } => {
            format!("has too few properties: must have at least {limit}")
        }
        ValidationErrorKind::MaxProperties { limit } => {
            format!("has too many properties: must have at most {limit}")
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("is {}, but must be at least {limit}", short(instance))
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("is {}, but must be at most {limit}", short(instance))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("is {}, but must be greater than {limit}", short(instance))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("is {}, but must be less than {limit}", short(instance))
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!(
                "is {}, but must be a multiple of {multiple_of}",
                short(instance)
            )
        }
        ValidationErrorKind::Pattern { pattern } => {
            format!(
                "is {}, but must match the pattern /{pattern}/",
                short(instance)
            )
        }
        ValidationErrorKind::Format { format } => {
            format!("is {}, but must be a valid {format}", short(instance))
        }
        ValidationErrorKind::UniqueItems => "has duplicate items; every item must be unique".into(),
        ValidationErrorKind::AnyOf { .. } | ValidationErrorKind::OneOfNotValid { .. } => format!(
            "is {}, which matches none of the allowed alternatives",
            short(instance)
        ),
        ValidationErrorKind::OneOfMultipleValid { .. } => format!(
            "is {}, which matches more than one of the alternatives; make it match exactly one",
            short(instance)
        ),
        ValidationErrorKind::FalseSchema => "is not allowed here; remove it".into(),
        _ => e.to_string(),
    };
    Violation {
        path: e.instance_path().as_str().to_owned(),
        keyword: kind.keyword().to_owned(),
        message,
    }
}
