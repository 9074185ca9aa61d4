//! Reassembly of streamed tool-call deltas into whole calls (G6), tolerant of servers that
//! omit `index` or `id`.

use crate::{InvalidToolCall, ToolCall};

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

    /// The whole calls, in index order, with arguments parsed. A call whose arguments are
    /// not JSON is an `Err` in its place (G5); the others are unaffected.
    pub fn finish(self) -> Vec<Result<ToolCall, InvalidToolCall>> {
        self.calls
            .into_iter()
            .enumerate()
            .filter(|(_, p)| !p.name.is_empty() || !p.arguments.is_empty())
            .map(|(i, p)| {
                let id = p.id.unwrap_or_else(|| format!("call_{i}"));
                ToolCall::parse(id, p.name, &p.arguments)
            })
            .collect()
    }
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
        let calls: Vec<ToolCall> = a.finish().into_iter().map(Result::unwrap).collect();
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
        assert_eq!(a.finish().len(), 2);
    }

    #[test]
    fn g6_repeated_full_name_is_not_doubled_and_empty_args_mean_no_arguments() {
        let mut a = ToolCallAssembler::new();
        a.push(Some(0), Some("c1"), Some("ping"), None);
        a.push(Some(0), None, Some("ping"), None);
        let calls: Vec<ToolCall> = a.finish().into_iter().map(Result::unwrap).collect();
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
    fn g5_one_invalid_call_leaves_the_others_whole() {
        let mut a = ToolCallAssembler::new();
        a.push(Some(0), Some("a"), Some("first"), Some("{}"));
        a.push(Some(1), Some("b"), Some("get_weather"), Some("{city:"));
        a.push(Some(2), Some("c"), Some("third"), Some("{\"x\":1}"));
        let out = a.finish();
        assert_eq!(out[0].as_ref().unwrap().name, "first");
        let bad = out[1].as_ref().unwrap_err();
        assert_eq!(
            (bad.id.as_str(), bad.name.as_str(), bad.raw.as_str()),
            ("b", "get_weather", "{city:")
        );
        assert_eq!(out[2].as_ref().unwrap().arguments, json!({"x": 1}));
    }
}
