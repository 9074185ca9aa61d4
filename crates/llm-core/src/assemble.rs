//! Reassembly of streamed tool-call deltas into whole calls (G6), tolerant of servers that
//! omit `index` or `id`.

use crate::{GatewayError, ToolCall};
use serde_json::Value;

#[derive(Debug, Default)]
struct Partial {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Collects tool-call deltas keyed by index and turns them into [`ToolCall`]s at the end.
#[derive(Debug, Default)]
pub struct ToolCallAssembler {
    calls: Vec<Partial>,
    last: Option<usize>,
}

impl ToolCallAssembler {
    /// A new, empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one delta and returns the index it was filed under.
    ///
    /// Without an `index`, a delta that brings a new `id`, or a name while the current call
    /// already has one, starts a new call; anything else continues the last call.
    pub fn push(
        &mut self,
        index: Option<usize>,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
    ) -> usize {
        let index = match index {
            Some(i) => i,
            None => match self.last {
                None => 0,
                Some(last) => {
                    let cur = &self.calls[last];
                    let new_id =
                        id.is_some_and(|id| !id.is_empty() && cur.id.as_deref() != Some(id));
                    let new_name =
                        name.is_some_and(|n| !n.is_empty()) && !cur.name.is_empty() && id.is_none();
                    if new_id || new_name {
                        self.calls.len()
                    } else {
                        last
                    }
                }
            },
        };
        // A hostile server's absurd index must not make us allocate for it.
        let index = if index > self.calls.len() + 64 {
            self.calls.len()
        } else {
            index
        };
        while self.calls.len() <= index {
            self.calls.push(Partial::default());
        }
        let call = &mut self.calls[index];
        if let Some(id) = id.filter(|s| !s.is_empty()) {
            call.id = Some(id.to_owned());
        }
        if let Some(name) = name {
            // Some servers resend the whole name in every chunk; most send it once.
            if call.name != name {
                call.name.push_str(name);
            }
        }
        if let Some(a) = arguments {
            call.arguments.push_str(a);
        }
        self.last = Some(index);
        index
    }

    /// Whether any delta arrived.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The whole calls, in index order, with arguments parsed (G5 on bad JSON).
    pub fn finish(self) -> Result<Vec<ToolCall>, GatewayError> {
        self.calls
            .into_iter()
            .enumerate()
            .filter(|(_, p)| !p.name.is_empty() || !p.arguments.is_empty())
            .map(|(i, p)| {
                let arguments = parse_arguments(&p.name, &p.arguments)?;
                Ok(ToolCall {
                    id: p.id.unwrap_or_else(|| format!("call_{i}")),
                    name: p.name,
                    arguments,
                })
            })
            .collect()
    }
}

/// Parses a tool call's argument text; an empty text means no arguments (`{}`).
pub fn parse_arguments(name: &str, raw: &str) -> Result<Value, GatewayError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(raw).map_err(|e| GatewayError::InvalidToolArguments {
        name: name.to_owned(),
        raw: raw.to_owned(),
        error: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn g6_deltas_by_index_in_any_order() {
        let mut a = ToolCallAssembler::new();
        a.push(Some(1), Some("b"), Some("second"), Some("{\"y\""));
        a.push(Some(0), Some("a"), Some("first"), Some("{\"x\":"));
        a.push(Some(0), None, None, Some("1}"));
        a.push(Some(1), None, None, Some(":2}"));
        let calls = a.finish().unwrap();
        assert_eq!(calls[0].name, "first");
        assert_eq!(calls[0].arguments, json!({"x": 1}));
        assert_eq!(calls[1].id, "b");
        assert_eq!(calls[1].arguments, json!({"y": 2}));
    }

    #[test]
    fn g6_missing_index_new_id_starts_a_new_call() {
        let mut a = ToolCallAssembler::new();
        assert_eq!(a.push(None, Some("c1"), Some("f"), Some("{")), 0);
        assert_eq!(a.push(None, None, None, Some("}")), 0);
        assert_eq!(a.push(None, Some("c2"), Some("g"), Some("{}")), 1);
        assert_eq!(a.finish().unwrap().len(), 2);
    }

    #[test]
    fn g6_repeated_full_name_is_not_doubled_and_empty_args_mean_no_arguments() {
        let mut a = ToolCallAssembler::new();
        a.push(Some(0), Some("c1"), Some("ping"), None);
        a.push(Some(0), None, Some("ping"), None);
        let calls = a.finish().unwrap();
        assert_eq!(calls[0].name, "ping");
        assert_eq!(calls[0].arguments, json!({}));
    }

    #[test]
    fn g6_hostile_index_does_not_allocate() {
        let mut a = ToolCallAssembler::new();
        let i = a.push(Some(usize::MAX), Some("c"), Some("f"), Some("{}"));
        assert_eq!(i, 0);
    }

    #[test]
    fn g5_invalid_arguments_carry_name_and_raw() {
        let err = parse_arguments("get_weather", "{city:").unwrap_err();
        assert!(
            matches!(err, GatewayError::InvalidToolArguments { ref name, ref raw, .. } if name == "get_weather" && raw == "{city:")
        );
    }
}
