//! `Agent::run_as`: a typed final answer from a run that calls tools, on each call protocol.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::scripted::{Scripted, call, text};
use serde_json::json;
use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_core::{ChatResponse, Message};
use toolwright_tool_system::{Agent, FnTool, LoopError, ProtocolKind};

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    celsius: i32,
}

fn temperature() -> FnTool {
    FnTool::new(
        "temperature",
        "The temperature in a city now",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _| async move { Ok(json!({"city": args["city"], "celsius": 4})) },
    )
}

/// How each protocol asks for the tool, and how it writes an answer holding `json`.
struct Protocol {
    kind: ProtocolKind,
    function_calling: bool,
    ask: fn() -> ChatResponse,
    answer: fn(&str) -> ChatResponse,
}

fn protocols() -> Vec<Protocol> {
    vec![
        Protocol {
            kind: ProtocolKind::Native,
            function_calling: true,
            ask: || call("c1", "temperature", json!({"city": "Oslo"})),
            answer: |j| text(&format!("Here it is:\n```json\n{j}\n```")),
        },
        Protocol {
            kind: ProtocolKind::JsonDecision,
            function_calling: false,
            ask: || text(r#"{"tool": "temperature", "arguments": {"city": "Oslo"}}"#),
            answer: |j| text(&format!(r#"{{"tool": null, "reply": {j}}}"#)),
        },
        Protocol {
            kind: ProtocolKind::Tag,
            function_calling: false,
            ask: || {
                text(
                    r#"Checking.<tool_action name="temperature"><city value="Oslo" /></tool_action>"#,
                )
            },
            answer: |j| text(j),
        },
    ]
}

fn agent(p: &Protocol, replies: Vec<ChatResponse>) -> (Agent, Scripted, Arc<MemoryStore>) {
    let model = if p.function_calling {
        Scripted::new(replies)
    } else {
        Scripted::without_function_calling(replies)
    };
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder(model.clone())
        .tool(temperature())
        .protocol(p.kind.clone())
        .store(store.clone())
        .build()
        .unwrap();
    (agent, model, store)
}

fn system_text(req: &toolwright_core::ChatRequest) -> String {
    match &req.messages[0] {
        Message::System { content, .. } => content.clone(),
        other => panic!("no system message first: {other:?}"),
    }
}

const GOOD: &str = r#"{"city": "Oslo", "celsius": 4}"#;
const NO_CELSIUS: &str = r#"{"city": "Oslo"}"#;

#[tokio::test]
async fn each_protocol_calls_its_tool_then_gives_a_typed_answer() {
    for p in protocols() {
        let (agent, model, _) = agent(&p, vec![(p.ask)(), (p.answer)(GOOD)]);
        let out = agent.run_as::<Forecast>("s", "How warm is Oslo?").await;
        let out = out.unwrap_or_else(|e| panic!("{:?}: {e}", p.kind));
        assert_eq!(
            out.value,
            Some(Forecast {
                city: "Oslo".into(),
                celsius: 4
            }),
            "{:?}",
            p.kind
        );
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "{:?}", p.kind);
        for req in &requests {
            // the schema is in the prompt; nothing on the wire forces the answer's shape, so
            // the model stays free to call tools
            assert_eq!(req.response_format, None, "{:?}", p.kind);
            assert_eq!(req.tool_choice, None, "{:?}", p.kind);
            let system = system_text(req);
            assert!(system.contains("celsius"), "{:?}: {system}", p.kind);
        }
        if p.function_calling {
            assert_eq!(requests[0].tools.len(), 1, "tools stay bound");
        }
        // the tool ran: its result is in the second request
        let second = format!("{:?}", requests[1].messages);
        assert!(
            second.contains(r#"\"celsius\":4"#),
            "{:?}: {second}",
            p.kind
        );
    }
}

#[tokio::test]
async fn each_protocol_corrects_a_wrong_first_answer_once() {
    for p in protocols() {
        let replies = vec![(p.ask)(), (p.answer)(NO_CELSIUS), (p.answer)(GOOD)];
        let (agent, model, _) = agent(&p, replies);
        let out = agent.run_as::<Forecast>("s", "How warm is Oslo?").await;
        let out = out.unwrap_or_else(|e| panic!("{:?}: {e}", p.kind));
        assert_eq!(out.value.map(|f| f.celsius), Some(4), "{:?}", p.kind);
        let requests = model.requests();
        assert_eq!(requests.len(), 3, "{:?}", p.kind);
        // the correction says what was wrong
        let Some(Message::User { content, .. }) = requests[2].messages.last() else {
            panic!("{:?}: no correction: {:?}", p.kind, requests[2].messages)
        };
        assert!(
            content.contains("celsius") && content.contains("missing"),
            "{:?}: {content}",
            p.kind
        );
    }
}

#[tokio::test]
async fn an_answer_that_never_fits_fails_the_run_with_the_answer_kept() {
    for p in protocols() {
        let replies = vec![
            (p.ask)(),
            (p.answer)(NO_CELSIUS),
            (p.answer)(r#"{"city": "Oslo", "celsius": "cold"}"#),
            (p.answer)(GOOD), // never asked for: one correction round only
        ];
        let (agent, model, store) = agent(&p, replies);
        let err = agent
            .run_as::<Forecast>("s", "How warm is Oslo?")
            .await
            .unwrap_err();
        let LoopError::AnswerDoesNotFit { answer, problem } = &err else {
            panic!("{:?}: {err}", p.kind)
        };
        assert!(answer.contains("cold"), "{:?}: {answer}", p.kind);
        assert!(
            problem.to_string().contains("/celsius"),
            "{:?}: {problem}",
            p.kind
        );
        assert_eq!(model.requests().len(), 3, "{:?}", p.kind);
        // the session keeps the whole run, the last answer included
        let session = store.load_or_create("s").await.unwrap();
        let last = format!("{:?}", session.messages.last().unwrap());
        assert!(last.contains("cold"), "{:?}: {last}", p.kind);
    }
}

#[tokio::test]
async fn an_answer_without_any_json_is_corrected_then_typed() {
    let p = &protocols()[0];
    let replies = vec![text("It is 4 degrees in Oslo."), (p.answer)(GOOD)];
    let (agent, model, _) = agent(p, replies);
    let out = agent.run_as::<Forecast>("s", "How warm?").await.unwrap();
    assert_eq!(out.value.unwrap().city, "Oslo");
    let req = &model.requests()[1];
    let Some(Message::User { content, .. }) = req.messages.last() else {
        panic!()
    };
    assert!(content.contains("no JSON"), "{content}");
}

#[tokio::test]
async fn a_plain_run_of_the_same_agent_asks_for_no_shape() {
    let p = &protocols()[0];
    let (agent, model, _) = agent(p, vec![text("4 degrees")]);
    let out = agent.run("s", "How warm?").await.unwrap();
    assert_eq!(out.answer, "4 degrees");
    let sent = format!("{:?}", model.requests()[0].messages);
    assert!(!sent.contains("JSON Schema"), "{sent}");
}

/// The `response_format` schema of a request, as a validator.
fn wire_schema(req: &toolwright_core::ChatRequest) -> toolwright_output_control::Validator {
    match &req.response_format {
        Some(toolwright_core::ResponseFormat::JsonSchema { schema, .. }) => {
            toolwright_output_control::Validator::new(schema).unwrap()
        }
        other => panic!("no JSON schema on the wire: {other:?}"),
    }
}

fn fits(v: &toolwright_output_control::Validator, text: &str) -> bool {
    v.parse::<serde_json::Value>(text).is_ok()
}

#[tokio::test]
async fn a_model_keeping_its_tools_under_a_schema_gets_the_answer_format_on_the_wire() {
    for kind in [
        ProtocolKind::Native,
        ProtocolKind::Tag,
        ProtocolKind::JsonDecision,
    ] {
        let json = matches!(kind, ProtocolKind::JsonDecision);
        let answer = if json {
            format!(r#"{{"tool": null, "reply": {GOOD}}}"#)
        } else {
            GOOD.to_owned()
        };
        let ask = call("c1", "temperature", json!({"city": "Oslo"}));
        let model = Scripted::new(vec![ask, text(&answer)]).keeping_tools_under_a_schema();
        let agent = Agent::builder(model.clone())
            .tool(temperature())
            .protocol(kind.clone())
            .build()
            .unwrap();
        let out = agent.run_as::<Forecast>("s", "How warm is Oslo?").await;
        let out = out.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(out.value.map(|f| f.celsius), Some(4), "{kind:?}");
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "{kind:?}");
        for req in &requests {
            let v = wire_schema(req);
            assert!(fits(&v, &answer), "{kind:?}");
            if json {
                // the decision: a call of a bound tool, or the reply as the answer's JSON
                let decide = r#"{"tool": "temperature", "arguments": {"city": "Oslo"}}"#;
                assert!(fits(&v, decide));
                assert!(!fits(
                    &v,
                    r#"{"tool": "nope", "arguments": {"city": "Oslo"}}"#
                ));
                assert!(!fits(
                    &v,
                    &format!(r#"{{"tool": null, "reply": {NO_CELSIUS}}}"#)
                ));
                assert!(!fits(&v, r#"{"tool": null, "reply": "4 degrees"}"#));
            } else {
                // the answer's own schema, with the tools still bound
                assert!(!fits(&v, NO_CELSIUS), "{kind:?}");
                assert_eq!(req.tools.len(), 1, "{kind:?}");
                assert_eq!(req.tool_choice, None, "{kind:?}");
            }
        }
        // the schema stays in the prompt as well
        assert!(system_text(&requests[0]).contains("celsius"), "{kind:?}");
    }
}

#[tokio::test]
async fn tags_written_as_text_leave_no_room_for_a_schema_on_the_wire() {
    // Without native calls a tag call is text in the answer: no answer schema allows it.
    let p = &protocols()[2];
    let model = Scripted::without_function_calling(vec![(p.ask)(), (p.answer)(GOOD)])
        .keeping_tools_under_a_schema();
    let agent = Agent::builder(model.clone())
        .tool(temperature())
        .protocol(ProtocolKind::Tag)
        .build()
        .unwrap();
    let out = agent.run_as::<Forecast>("s", "How warm?").await.unwrap();
    assert_eq!(out.value.map(|f| f.celsius), Some(4));
    for req in model.requests() {
        assert_eq!(req.response_format, None);
    }
}

#[tokio::test]
async fn a_plain_run_on_a_model_keeping_its_tools_sends_no_schema() {
    let model = Scripted::new(vec![text("4 degrees")]).keeping_tools_under_a_schema();
    let agent = Agent::builder(model.clone())
        .tool(temperature())
        .build()
        .unwrap();
    agent.run("s", "How warm?").await.unwrap();
    assert_eq!(model.requests()[0].response_format, None);
}

/// The events of a typed stream up to its last, and that last one.
async fn drain(
    mut events: toolwright_tool_system::TypedLoopStream<Forecast>,
) -> (
    Vec<toolwright_tool_system::LoopEvent>,
    toolwright_tool_system::TypedLoopStream<Forecast>,
) {
    use futures::StreamExt;
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        seen.push(event);
    }
    (seen, events)
}

#[tokio::test]
async fn each_protocol_streams_its_tool_round_then_the_typed_answer() {
    use toolwright_tool_system::LoopEvent;
    for p in protocols() {
        let replies = vec![(p.ask)(), (p.answer)(NO_CELSIUS), (p.answer)(GOOD)];
        let (agent, model, _) = agent(&p, replies);
        let events = agent
            .run_stream_as::<Forecast>("s", "How warm is Oslo?")
            .unwrap();
        let (mut seen, events) = drain(events).await;
        assert!(
            seen.iter()
                .any(|e| matches!(e, LoopEvent::ToolResult { name, .. } if name == "temperature")),
            "{:?}: {seen:?}",
            p.kind
        );
        assert!(
            seen.iter()
                .any(|e| matches!(e, LoopEvent::Reprompted { .. })),
            "{:?}: the wrong first answer is corrected on the stream too",
            p.kind
        );
        let Some(LoopEvent::Finished(out)) = seen.pop() else {
            panic!("{:?}: the stream does not end with its output", p.kind)
        };
        let typed = events.read(out).unwrap();
        assert_eq!(
            typed.value,
            Some(Forecast {
                city: "Oslo".into(),
                celsius: 4
            }),
            "{:?}",
            p.kind
        );
        assert!(system_text(&model.requests()[0]).contains("celsius"));
    }
}

#[tokio::test]
async fn a_streamed_answer_that_never_fits_is_the_typed_error_when_read() {
    use toolwright_tool_system::LoopEvent;
    let p = &protocols()[0];
    let replies = vec![
        (p.ask)(),
        (p.answer)(NO_CELSIUS),
        (p.answer)(r#"{"city": "Oslo", "celsius": "cold"}"#),
    ];
    let (agent, model, _) = agent(p, replies);
    let events = agent
        .run_stream_as::<Forecast>("s", "How warm is Oslo?")
        .unwrap();
    let (mut seen, events) = drain(events).await;
    assert_eq!(model.requests().len(), 3, "one correction round only");
    let Some(LoopEvent::Finished(out)) = seen.pop() else {
        panic!("the stream does not end with its output")
    };
    let err = events.read(out).unwrap_err();
    let LoopError::AnswerDoesNotFit { answer, problem } = &err else {
        panic!("{err}")
    };
    assert!(answer.contains("cold"), "{answer}");
    assert!(problem.to_string().contains("/celsius"), "{problem}");
}
