//! The tool loop's events turned into the page's events, with no I/O: what an answer's stream
//! shows live before its rows are stored ([`translate`]). The running answer (`turn.rs`) feeds
//! it one [`LoopEvent`] at a time and sends what comes out; the stored rows (`events.rs`) share
//! the same [`Live`] record so that a stored entry replaces its live one.

use std::collections::{HashMap, HashSet};

use axum::response::sse::Event;
use serde_json::{Value, json};
use toolwright_tool_system::{LoopEvent, PendingApproval};

use crate::backend::user_sentence;
use crate::state::{Entry, EntryKind, RunSummary, ToolActivity, live_id};

/// What the page was shown live and is not stored yet.
#[derive(Debug, Default)]
pub(super) struct Live {
    /// The assistant entry whose text is streaming (shown until its stored row replaces it).
    pub provisional: Option<u64>,
    /// Running tools shown before their round is stored, by call id.
    pub live_tools: HashMap<String, Entry>,
    /// Calls already shown from the store. The loop's events can trail the store (a round is
    /// stored before the panel reads its last events): such a call's late live events are not
    /// shown again.
    pub stored_calls: HashSet<String>,
    /// An answer's text was shown from the store before any of it streamed live: its late
    /// deltas are not shown (they would make a second copy). Cleared by the next live call.
    pub text_ahead: bool,
}

/// One event for the page.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum PanelEvent {
    /// `entry`: a new entry.
    Entry(Entry),
    /// `update`: a changed entry.
    Update(Entry),
    /// `delta`: text appended to the assistant entry `id`.
    Delta { id: u64, text: String },
    /// `approval`: calls wait for the person's decision.
    Approval(PendingApproval),
}

impl PanelEvent {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Entry(_) => "entry",
            Self::Update(_) => "update",
            Self::Delta { .. } => "delta",
            Self::Approval(_) => "approval",
        }
    }

    /// The SSE event's data.
    pub fn data(&self) -> Value {
        let v = match self {
            Self::Entry(e) | Self::Update(e) => serde_json::to_value(e),
            Self::Delta { id, text } => Ok(json!({"id": id, "text": text})),
            Self::Approval(p) => serde_json::to_value(p),
        };
        v.unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not encode a panel event");
            Value::Null
        })
    }

    /// The SSE event (`None` when it cannot be encoded; logged).
    pub fn sse(&self) -> Option<Event> {
        ev(self.name(), &self.data())
    }
}

/// What one loop event means for the page.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Step {
    /// Events to send, in order.
    pub emit: Vec<PanelEvent>,
    /// The loop ended (finished or failed).
    pub ended: bool,
    /// The error entry shown when the answer failed (also stored, so a reload shows it).
    pub failed: Option<Entry>,
    /// What the answer cost, when it finished and the model reported its usage.
    pub run: Option<RunSummary>,
}

/// An entry shown while the answer streams (an id from [`crate::state::LIVE_IDS`] up).
pub(super) fn live_entry(kind: EntryKind, text: impl Into<String>) -> Entry {
    Entry::new(live_id(), kind, text)
}

/// Turns one loop event into the page's events, updating what was shown live.
pub(super) fn translate(live: &mut Live, event: LoopEvent) -> Step {
    let mut step = Step::default();
    let emit = &mut step.emit;
    match event {
        LoopEvent::TextDelta(t) if t.is_empty() || live.text_ahead => {}
        LoopEvent::TextDelta(text) => {
            let id = match live.provisional {
                Some(id) => id,
                None => {
                    let e = live_entry(EntryKind::Assistant, "");
                    let id = e.id;
                    emit.push(PanelEvent::Entry(e));
                    live.provisional = Some(id);
                    id
                }
            };
            emit.push(PanelEvent::Delta { id, text });
        }
        // the round's text is behind it: the next round's text streams again
        LoopEvent::ToolCallStarted { id, .. } if live.stored_calls.contains(&id) => {
            live.text_ahead = false;
        }
        LoopEvent::ToolResult { id, .. } if live.stored_calls.contains(&id) => {}
        LoopEvent::ToolCallStarted {
            id,
            name,
            arguments,
        } => {
            live.text_ahead = false;
            let mut e = live_entry(EntryKind::Tool, name.clone());
            e.tool = Some(ToolActivity {
                call_id: id.clone(),
                name,
                arguments,
                result: None,
                is_error: false,
            });
            emit.push(PanelEvent::Entry(e.clone()));
            live.live_tools.insert(id, e);
        }
        LoopEvent::ToolResult {
            id,
            name,
            content,
            is_error,
        } => {
            let e = live.live_tools.entry(id.clone()).or_insert_with(|| {
                let mut e = live_entry(EntryKind::Tool, name.clone());
                e.tool = Some(ToolActivity {
                    call_id: id,
                    name,
                    arguments: Value::Null,
                    result: None,
                    is_error,
                });
                e
            });
            if let Some(t) = &mut e.tool {
                t.result = Some(content);
                t.is_error = is_error;
            }
            emit.push(PanelEvent::Update(e.clone()));
        }
        LoopEvent::Finished(out) => {
            step.ended = true;
            step.run = RunSummary::of(out.usage, out.cost);
        }
        // Shown from the event as it comes, and from the store on a reload
        // (`GET /api/sessions/{id}`'s `pending`).
        LoopEvent::ApprovalRequired(pending) => emit.push(PanelEvent::Approval(pending)),
        LoopEvent::IterationLimitReached { iterations: n } => {
            emit.push(PanelEvent::Entry(live_entry(
                EntryKind::Notice,
                format!("The agent stopped after {n} model calls (its round limit)."),
            )));
        }
        LoopEvent::Failed(err) => {
            step.ended = true;
            let e = live_entry(EntryKind::Error, user_sentence(&err));
            emit.push(PanelEvent::Entry(e.clone()));
            step.failed = Some(e);
        }
        _ => {}
    }
    step
}

/// One SSE event named `name` with `data` as its JSON (logged and `None` if it cannot be encoded).
pub(super) fn ev(name: &str, data: &impl serde::Serialize) -> Option<Event> {
    match Event::default().event(name).json_data(data) {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::error!(error = %e, "could not encode an SSE event");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::LIVE_IDS;
    use toolwright_tool_system::LoopError;

    /// `(name, data)` of each event, with live ids replaced by `L0`, `L1`… in order of first
    /// appearance (they come from a process-wide counter).
    fn shape(events: &[PanelEvent], ids: &mut Vec<u64>) -> Vec<(String, Value)> {
        fn norm(v: &mut Value, ids: &mut Vec<u64>) {
            match v {
                Value::Object(m) => {
                    for (k, x) in m.iter_mut() {
                        if (k == "id" || k == "replaces")
                            && let Some(n) = x.as_u64()
                            && n >= LIVE_IDS
                        {
                            let i = ids.iter().position(|&y| y == n).unwrap_or_else(|| {
                                ids.push(n);
                                ids.len() - 1
                            });
                            *x = json!(format!("L{i}"));
                        } else {
                            norm(x, ids);
                        }
                    }
                }
                Value::Array(a) => a.iter_mut().for_each(|x| norm(x, ids)),
                _ => {}
            }
        }
        events
            .iter()
            .map(|e| {
                let mut d = e.data();
                norm(&mut d, ids);
                (e.name().to_owned(), d)
            })
            .collect()
    }

    fn tool_entry(id: &str, name: &str, args: Value, result: Value, err: bool) -> Value {
        json!({"id": id, "kind": "tool", "text": name, "answered": false,
            "tool": {"callId": "c1", "name": name, "arguments": args, "result": result, "isError": err}})
    }

    fn pending() -> PendingApproval {
        serde_json::from_value(json!({"session_id": "s-0000001", "text": "may I?",
            "calls": [{"id": "c9", "name": "rm", "arguments": {"path": "/tmp/x"}, "token": "t", "maybe_ran": false}]}))
        .expect("a PendingApproval")
    }

    #[test]
    fn loop_events_become_the_pages_events() {
        type Case = (
            &'static str,
            fn(&mut Live),
            Vec<LoopEvent>,
            Vec<(&'static str, Value)>,
            bool,
        );
        let started = || LoopEvent::ToolCallStarted {
            id: "c1".into(),
            name: "add".into(),
            arguments: json!({"a": 1}),
        };
        let result = || LoopEvent::ToolResult {
            id: "c1".into(),
            name: "add".into(),
            content: "2".into(),
            is_error: false,
        };
        let cases: Vec<Case> = vec![
            (
                "text makes one assistant entry, then deltas into it",
                |_| {},
                vec![
                    LoopEvent::TextDelta("Hel".into()),
                    LoopEvent::TextDelta(String::new()),
                    LoopEvent::TextDelta("lo".into()),
                ],
                vec![
                    (
                        "entry",
                        json!({"id": "L0", "kind": "assistant", "text": "", "answered": false}),
                    ),
                    ("delta", json!({"id": "L0", "text": "Hel"})),
                    ("delta", json!({"id": "L0", "text": "lo"})),
                ],
                false,
            ),
            (
                "text already shown from the store is not streamed again",
                |l| l.text_ahead = true,
                vec![LoopEvent::TextDelta("late".into())],
                vec![],
                false,
            ),
            (
                "a live call, then its result updates the same entry",
                |_| {},
                vec![started(), result()],
                vec![
                    (
                        "entry",
                        tool_entry("L0", "add", json!({"a": 1}), Value::Null, false),
                    ),
                    (
                        "update",
                        tool_entry("L0", "add", json!({"a": 1}), json!("2"), false),
                    ),
                ],
                false,
            ),
            (
                "a result whose start was not seen still shows",
                |_| {},
                vec![result()],
                vec![(
                    "update",
                    tool_entry("L0", "add", Value::Null, json!("2"), false),
                )],
                false,
            ),
            (
                "a call already shown from the store is not shown again, and text streams again",
                |l| {
                    l.stored_calls.insert("c1".into());
                    l.text_ahead = true;
                },
                vec![started(), result(), LoopEvent::TextDelta("x".into())],
                vec![
                    (
                        "entry",
                        json!({"id": "L0", "kind": "assistant", "text": "", "answered": false}),
                    ),
                    ("delta", json!({"id": "L0", "text": "x"})),
                ],
                false,
            ),
            (
                "held calls are shown as they come",
                |_| {},
                vec![LoopEvent::ApprovalRequired(pending())],
                vec![(
                    "approval",
                    serde_json::to_value(pending()).expect("serializable"),
                )],
                false,
            ),
            (
                "the round limit is a notice",
                |_| {},
                vec![LoopEvent::IterationLimitReached { iterations: 7 }],
                vec![(
                    "entry",
                    json!({"id": "L0", "kind": "notice", "answered": false,
                        "text": "The agent stopped after 7 model calls (its round limit)."}),
                )],
                false,
            ),
            (
                "a failure ends the answer with an error entry in plain words",
                |_| {},
                vec![LoopEvent::Failed(LoopError::Cancelled)],
                vec![(
                    "entry",
                    json!({"id": "L0", "kind": "error", "answered": false,
                        "text": "The assistant ran into a problem and could not answer. Please try again later."}),
                )],
                true,
            ),
            (
                "an ignored event shows nothing",
                |_| {},
                vec![LoopEvent::Reprompted {
                    correction: "fix it".into(),
                }],
                vec![],
                false,
            ),
        ];
        for (what, setup, input, want, want_ended) in cases {
            let mut live = Live::default();
            setup(&mut live);
            let (mut got, mut ids, mut ended) = (Vec::new(), Vec::new(), false);
            for event in input {
                let step = translate(&mut live, event);
                assert_eq!(
                    step.failed.is_some(),
                    step.ended && !step.emit.is_empty(),
                    "{what}"
                );
                ended |= step.ended;
                got.extend(shape(&step.emit, &mut ids));
            }
            let want: Vec<(String, Value)> =
                want.into_iter().map(|(n, v)| (n.to_owned(), v)).collect();
            assert_eq!(got, want, "{what}");
            assert_eq!(ended, want_ended, "{what}");
        }
    }
}
