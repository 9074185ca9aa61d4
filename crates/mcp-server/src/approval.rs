//! A held call asked of the calling client's person by elicitation.
//!
//! Over protocol 2026-07-28 (no server-to-client requests) the server answers the first
//! `tools/call` with an `input_required` result carrying the question and a sealed state bound to
//! the tool and its arguments; the client asks its person and calls again with the answer and
//! the state, on any worker that holds the same key. Over older protocols a connection with a
//! session (stdio) sends `elicitation/create` and waits for the answer.

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputRequests, InputRequiredResult, RequestStateCodec,
    SealOptions,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

/// The key of the approval question among a call's input requests.
const APPROVAL_KEY: &str = "approval";

/// What to do with a held call.
pub(crate) enum Gate {
    /// The person approved: run it.
    Run,
    /// Ask the client (protocol 2026-07-28): answer with this result.
    Ask(InputRequiredResult),
    /// Do not run it; the model is told why.
    Refused(String),
}

/// The state sealed into an `input_required` result.
#[derive(serde::Serialize, serde::Deserialize)]
struct Held {
    tool: String,
}

/// The question shown to the person.
fn question(tool: &str, args: &Value) -> String {
    let mut shown = args.to_string();
    if shown.len() > 2_000 {
        let mut cut = 2_000;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push('…');
    }
    format!("Allow the tool `{tool}` to run with these arguments? {shown}")
}

fn schema() -> Option<ElicitationSchema> {
    serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": "Run this tool call", "default": true}
        },
        "required": ["approve"]
    }))
    .ok()
}

/// The bytes the sealed state is bound to: the tool and its arguments, so that an approval
/// cannot be replayed for another call.
fn bound_to(tool: &str, args: &Value) -> Vec<u8> {
    let mut b = tool.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(args.to_string().as_bytes());
    b
}

/// The person's answer as a decision.
fn decide(tool: &str, answer: &ElicitResult) -> Gate {
    match answer.action {
        ElicitationAction::Accept
            if answer
                .content
                .as_ref()
                .and_then(|c| c.get("approve"))
                .and_then(Value::as_bool)
                != Some(false) =>
        {
            Gate::Run
        }
        ElicitationAction::Accept | ElicitationAction::Decline => Gate::Refused(format!(
            "The person declined the call of `{tool}`; it was not run. Do not retry it; ask the person what to do instead."
        )),
        _ => Gate::Refused(format!(
            "The person dismissed the approval of `{tool}`; it was not run. Ask the person before trying again."
        )),
    }
}

/// What asking the person needs from the server: the codec that seals a held call's state, how
/// long a question waits, and whether this connection keeps a session (so that the server may
/// send the client an `elicitation/create` and read its answer).
pub(crate) struct Asker<'a> {
    pub(crate) codec: &'a RequestStateCodec,
    pub(crate) timeout: std::time::Duration,
    pub(crate) session: bool,
}

pub(crate) async fn gate(
    asker: Asker<'_>,
    tool: &str,
    args: &Value,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Gate {
    let can_elicit = context
        .client_capabilities()
        .is_some_and(|c| c.elicitation.is_some());
    let round_trips = context
        .protocol_version()
        .is_some_and(|v| !v.has_initialize());
    let bound = bound_to(tool, args);

    if round_trips {
        if let Some(state) = &request.request_state {
            let held: Held = match asker.codec.open_json_with(state, &bound) {
                Ok(h) => h,
                Err(e) => {
                    return Gate::Refused(format!(
                        "The approval for `{tool}` does not match this call or has expired ({e}); it was not run. Call it again to ask the person anew."
                    ));
                }
            };
            let answer = request
                .input_responses
                .as_ref()
                .and_then(|r| r.get(APPROVAL_KEY))
                .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
            return match answer {
                Some(a) if held.tool == tool => decide(tool, &a),
                _ => Gate::Refused(format!(
                    "The call of `{tool}` came back without the person's answer; it was not run."
                )),
            };
        }
        if !can_elicit {
            return no_elicitation(tool);
        }
        let Some(schema) = schema() else {
            return Gate::Refused(format!(
                "The approval question for `{tool}` could not be built; it was not run."
            ));
        };
        let options = SealOptions::new()
            .associated_data(&bound)
            .ttl(asker.timeout);
        let state = match asker.codec.seal_json_with(
            &Held {
                tool: tool.to_owned(),
            },
            &options,
        ) {
            Ok(s) => s,
            Err(e) => {
                return Gate::Refused(format!(
                    "The approval of `{tool}` could not be asked ({e}); it was not run."
                ));
            }
        };
        let mut requests = InputRequests::new();
        requests.insert(
            APPROVAL_KEY.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(
                ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: question(tool, args),
                    requested_schema: schema,
                },
            )),
        );
        return Gate::Ask(InputRequiredResult::new(Some(requests), Some(state)));
    }

    if !asker.session {
        return Gate::Refused(format!(
            "The tool `{tool}` needs the person's approval, and this server asks for it by elicitation, which over this stateless HTTP endpoint needs MCP protocol 2026-07-28; it was not run. Connect with a client that speaks 2026-07-28, or over stdio."
        ));
    }
    if !can_elicit {
        return no_elicitation(tool);
    }
    let Some(schema) = schema() else {
        return Gate::Refused(format!(
            "The approval question for `{tool}` could not be built; it was not run."
        ));
    };
    let asked = context
        .peer
        .create_elicitation_with_timeout(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question(tool, args),
                requested_schema: schema,
            },
            Some(asker.timeout),
        )
        .await;
    match asked {
        Ok(answer) => decide(tool, &answer),
        Err(e) => Gate::Refused(format!(
            "The person's approval of `{tool}` could not be had ({e}); it was not run."
        )),
    }
}

fn no_elicitation(tool: &str) -> Gate {
    Gate::Refused(format!(
        "The tool `{tool}` needs the person's approval, and this client cannot be asked (it did not declare the elicitation capability); it was not run."
    ))
}
