//! The `quickReplies` parameter: rules, schema and validation (Q1–Q6, Q16–Q19).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// At most this many quick replies per message (Q3, Q18).
pub const MAX_QUICK_REPLIES: usize = 10;

/// A validated, non-empty list of quick replies: 1 to [`MAX_QUICK_REPLIES`] non-empty strings,
/// in the order given (Q8).
///
/// ```
/// use toolwright_messaging::QuickReplies;
/// let q = QuickReplies::new(vec!["Yes".into(), "No".into()]).unwrap().unwrap();
/// assert_eq!(q.as_slice(), ["Yes", "No"]);
/// assert!(QuickReplies::new(vec![]).unwrap().is_none()); // empty counts as absent (Q4)
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct QuickReplies(Vec<String>);

impl QuickReplies {
    /// Checks a list of strings. `Ok(None)` for an empty list (absent, Q4).
    pub fn new(items: Vec<String>) -> Result<Option<Self>, QuickRepliesError> {
        if items.len() > MAX_QUICK_REPLIES {
            return Err(QuickRepliesError::TooMany { count: items.len() });
        }
        if let Some(index) = items.iter().position(|s| s.trim().is_empty()) {
            return Err(QuickRepliesError::EmptyItem { index });
        }
        Ok(if items.is_empty() {
            None
        } else {
            Some(Self(items))
        })
    }
    /// The replies, in order.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
    /// The replies, in order.
    pub fn into_vec(self) -> Vec<String> {
        self.0
    }
}

impl TryFrom<Vec<String>> for QuickReplies {
    type Error = QuickRepliesError;
    fn try_from(items: Vec<String>) -> Result<Self, Self::Error> {
        match Self::new(items)? {
            Some(q) => Ok(q),
            None => Err(QuickRepliesError::EmptyList),
        }
    }
}

impl From<QuickReplies> for Vec<String> {
    fn from(q: QuickReplies) -> Self {
        q.0
    }
}

/// Which rule a `quickReplies` value broke. The `Display` text names the rule and the item, so
/// it can be given to the model as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuickRepliesError {
    /// Not an array (Q2).
    #[error("quickReplies must be an array of strings, but it is {found}")]
    NotArray {
        /// The JSON type found (`a string`, `an object`, ...).
        found: &'static str,
    },
    /// More than [`MAX_QUICK_REPLIES`] items (Q3).
    #[error("quickReplies has {count} items; at most 10 are allowed")]
    TooMany {
        /// How many items were given.
        count: usize,
    },
    /// An item that is not a string (Q5).
    #[error("quickReplies[{index}] is not a string (it is {found})")]
    NotString {
        /// The item's index.
        index: usize,
        /// The JSON type found.
        found: &'static str,
    },
    /// An empty string item (Q6).
    #[error("quickReplies[{index}] is empty")]
    EmptyItem {
        /// The item's index.
        index: usize,
    },
    /// An empty list where a non-empty [`QuickReplies`] was required (deserializing).
    #[error("quickReplies is empty")]
    EmptyList,
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Validates the raw `quickReplies` argument (Q1–Q6).
///
/// * missing, `null` or `[]` → `Ok(None)` (absent, Q1/Q4)
/// * not an array → [`QuickRepliesError::NotArray`] (Q2)
/// * more than 10 items → [`QuickRepliesError::TooMany`] (Q3), checked first
/// * an item that is not a string → [`QuickRepliesError::NotString`] (Q5), first offending index
/// * an empty string → [`QuickRepliesError::EmptyItem`] (Q6), first offending index
///
/// ```
/// use toolwright_messaging::validate_quick_replies;
/// use serde_json::json;
/// let err = validate_quick_replies(Some(&json!(["a", 2]))).unwrap_err();
/// assert_eq!(err.to_string(), "quickReplies[1] is not a string (it is a number)");
/// ```
pub fn validate_quick_replies(
    value: Option<&Value>,
) -> Result<Option<QuickReplies>, QuickRepliesError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(QuickRepliesError::NotArray {
                found: json_type(other),
            });
        }
    };
    if items.len() > MAX_QUICK_REPLIES {
        return Err(QuickRepliesError::TooMany { count: items.len() });
    }
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        match item {
            Value::String(s) if s.trim().is_empty() => {
                return Err(QuickRepliesError::EmptyItem { index });
            }
            Value::String(s) => out.push(s.clone()),
            other => {
                return Err(QuickRepliesError::NotString {
                    index,
                    found: json_type(other),
                });
            }
        }
    }
    QuickReplies::new(out)
}

/// The JSON Schema of the `quickReplies` property (Q16–Q19): an array of non-empty strings,
/// at most 10 items. It is optional: the tool's schema does not list it under `required`.
pub fn quick_replies_schema() -> Value {
    json!({
        // `null` means absent everywhere, the schema included: models fill optional fields
        // with null, and the dispatcher checks the schema before the tool sees the value.
        "type": ["array", "null"],
        "description": "Optional quick-reply options shown to the recipient as buttons, in this order. \
                        At most 10 non-empty strings. The recipient may still type a free reply. \
                        Omit it (or pass null or []) for none.",
        "items": {"type": "string", "minLength": 1},
        "maxItems": MAX_QUICK_REPLIES
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(v: Value) -> Result<Option<QuickReplies>, QuickRepliesError> {
        validate_quick_replies(Some(&v))
    }

    #[test]
    fn q1_quick_replies_is_optional() {
        assert_eq!(validate_quick_replies(None), Ok(None));
        assert_eq!(check(Value::Null), Ok(None));
        let q = check(json!(["Yes"])).unwrap().unwrap();
        assert_eq!(q.as_slice(), ["Yes"]);
    }

    #[test]
    fn q2_must_be_an_array_of_strings() {
        for (v, found) in [
            (json!("Yes"), "a string"),
            (json!({"a": 1}), "an object"),
            (json!(3), "a number"),
            (json!(true), "a boolean"),
        ] {
            let e = check(v).unwrap_err();
            assert_eq!(e, QuickRepliesError::NotArray { found });
            assert_eq!(
                e.to_string(),
                format!("quickReplies must be an array of strings, but it is {found}")
            );
        }
        assert!(check(json!(["a", "b"])).unwrap().is_some());
    }

    #[test]
    fn q3_more_than_ten_is_error() {
        let eleven: Vec<String> = (0..11).map(|i| format!("o{i}")).collect();
        let e = check(json!(eleven)).unwrap_err();
        assert_eq!(e, QuickRepliesError::TooMany { count: 11 });
        assert_eq!(
            e.to_string(),
            "quickReplies has 11 items; at most 10 are allowed"
        );
        let ten: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
        assert_eq!(check(json!(ten)).unwrap().unwrap().as_slice().len(), 10);
        // also through the typed constructor
        let eleven: Vec<String> = (0..11).map(|i| format!("o{i}")).collect();
        assert_eq!(
            QuickReplies::new(eleven),
            Err(QuickRepliesError::TooMany { count: 11 })
        );
    }

    #[test]
    fn q4_empty_array_counts_as_absent() {
        assert_eq!(check(json!([])), Ok(None));
        assert_eq!(QuickReplies::new(vec![]), Ok(None));
    }

    #[test]
    fn q5_non_string_item_is_error() {
        let e = check(json!(["a", "b", 3])).unwrap_err();
        assert_eq!(
            e,
            QuickRepliesError::NotString {
                index: 2,
                found: "a number"
            }
        );
        assert!(e.to_string().starts_with("quickReplies[2] is not a string"));
        for bad in [json!(null), json!(["x"]), json!({"t": "x"}), json!(false)] {
            let e = check(json!([bad])).unwrap_err();
            assert!(
                matches!(e, QuickRepliesError::NotString { index: 0, .. }),
                "{e}"
            );
        }
    }

    #[test]
    fn q6_empty_string_item_is_error() {
        let e = check(json!(["a", "", "c"])).unwrap_err();
        assert_eq!(e, QuickRepliesError::EmptyItem { index: 1 });
        assert_eq!(e.to_string(), "quickReplies[1] is empty");
        assert_eq!(
            QuickReplies::new(vec!["ok".into(), String::new()]),
            Err(QuickRepliesError::EmptyItem { index: 1 })
        );
    }

    #[test]
    fn q8_validation_keeps_order() {
        let q = check(json!(["3", "1", "2", "é", "<b>x</b>"]))
            .unwrap()
            .unwrap();
        assert_eq!(q.into_vec(), vec!["3", "1", "2", "é", "<b>x</b>"]);
    }

    #[test]
    fn q18_schema_max_items_is_ten() {
        let s = quick_replies_schema();
        assert_eq!(s["type"], serde_json::json!(["array", "null"]));
        assert_eq!(s["maxItems"], 10);
        assert_eq!(s["items"]["type"], "string");
        assert_eq!(s["items"]["minLength"], 1);
    }

    #[test]
    fn q3_deserializing_checks_the_rules_too() {
        let r: Result<QuickReplies, _> = serde_json::from_value(json!(["a", ""]));
        assert!(
            r.unwrap_err()
                .to_string()
                .contains("quickReplies[1] is empty")
        );
        let r: Result<QuickReplies, _> = serde_json::from_value(json!(["a", "b"]));
        assert_eq!(r.unwrap().as_slice(), ["a", "b"]);
    }
}
