//! MCP servers' resources and prompts offered to the person ([`ChatPanel::offer_mcp`](super::ChatPanel::offer_mcp)):
//! the list, a prompt got with its arguments (and their completions), and the resources a
//! message names read into it. Every endpoint is behind the panel's request checks and its
//! authenticator, like every `/api/` request; each list and read is bounded.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use toolwright_core::{Message, Part};
use toolwright_mcp_bridge::{BridgeError, CompletionOf, McpBridge, Subscriber};

use super::guard::read_json_body_within;
use super::{App, error};
use crate::identity::Principal;

/// Most services the list asks.
pub(super) const MAX_SERVICES: usize = 16;
/// Most resources and most prompts the list shows of each service.
pub(super) const MAX_OFFERED: usize = 100;
/// Most resources one message may name.
pub(super) const MAX_RESOURCES: usize = 3;
/// Most text one resource may add to a message, in bytes.
pub(super) const MAX_RESOURCE_TEXT: usize = 256 * 1024;
/// Most arguments a prompt is got with, and the longest value of one, in characters.
const MAX_ARGUMENTS: usize = 32;
const MAX_ARGUMENT_CHARS: usize = 2000;
/// Most completions shown for one argument.
const MAX_COMPLETIONS: usize = 20;
/// The largest body of a prompt or completion request.
const MAX_BODY: usize = 96 * 1024;

/// The bridge, or the `404` that says the panel offers none.
#[allow(clippy::result_large_err)]
fn bridge(app: &App) -> Result<&McpBridge, Response> {
    app.mcp.get().ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            "this panel offers no MCP resources or prompts (ChatPanel::offer_mcp)",
        )
    })
}

/// The failure of a request to an MCP server, as the person reads it (the detail is logged).
fn failed(e: &BridgeError, what: &str) -> Response {
    tracing::info!(error = %e, "chat panel: {what} failed");
    let status = match e {
        BridgeError::NotOffered { .. } | BridgeError::UnknownService(_) => StatusCode::NOT_FOUND,
        BridgeError::Request { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        BridgeError::ServiceSubscriptionsFull { .. }
        | BridgeError::PersonSubscriptionsFull { .. } => StatusCode::CONFLICT,
        _ => StatusCode::BAD_GATEWAY,
    };
    error(status, format!("{what} failed: {e}"))
}

/// What the servers offer, as the page lists it.
pub(super) struct Listed {
    /// The side list's generation it was listed in ([`super::live::Changed::generation`]).
    generation: u64,
    at: std::time::Instant,
    /// `{"resources", "templates", "prompts"}`.
    value: Value,
}

/// `GET /api/mcp`: `{"resources": [...], "templates": [...], "prompts": [...]}` of every
/// registered service that offers them (at most [`MAX_SERVICES`] services, [`MAX_OFFERED`] of
/// each per service); `404` without [`ChatPanel::offer_mcp`](super::ChatPanel::offer_mcp).
/// The pages asking within [`MIN_GAP`](super::live::MIN_GAP) of each other, with no change
/// said between, are answered from one listing of the servers.
pub(super) async fn get_offers(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
) -> Response {
    let bridge = match bridge(&app) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mut offers = listing(&app, bridge).await;
    // Whether the tool search learns from use, and whether this person lets it learn from
    // their requests (their switch in the list).
    let learning = match bridge.learning_consent(who.id()).await {
        Ok(Some(consents)) => json!({"on": true, "consents": consents}),
        Ok(None) => json!({"on": false}),
        Err(e) => {
            tracing::warn!(error = %e, "chat panel: could not read the person's learning consent");
            json!({"on": true, "error": "your choice could not be read; try again later"})
        }
    };
    offers["learning"] = learning;
    offers["watched"] = watched_by(bridge, &who);
    axum::Json(offers).into_response()
}

/// The resources `who` watches, `[{"service", "uri"}]`.
fn watched_by(bridge: &McpBridge, who: &Principal) -> Value {
    let held = bridge.subscriptions_of(&Subscriber::Person(who.id().to_owned()));
    held.into_iter()
        .map(|(service, uri)| json!({"service": service, "uri": uri}))
        .collect()
}

/// The longest resource URI a person may watch, in bytes.
const MAX_WATCH_URI: usize = 2048;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchRequest {
    service: String,
    uri: String,
    watch: bool,
}

/// `POST /api/mcp/watch` with `{"service", "uri", "watch": true|false}`: the signed-in person
/// starts or stops watching a resource (their own subscription,
/// `McpBridge::subscribe_as` with `Subscriber::Person`; the server is told to unsubscribe only
/// when nobody else, the application included, still holds it). Answers `{"watched": [{"service",
/// "uri"}]}`, everything the person watches now. Refused with a sentence the page shows: `409`
/// past the person's or the server's bound (stop watching one first), `404` a service that
/// offers no subscriptions, `400` an empty or over-long URI.
pub(super) async fn post_watch(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (bridge, req) = match bridge_and_body::<WatchRequest>(
        &app,
        &headers,
        body,
        "{\"service\": string, \"uri\": string, \"watch\": bool}",
    )
    .await
    {
        Ok(both) => both,
        Err(r) => return r,
    };
    if req.uri.is_empty() || req.uri.len() > MAX_WATCH_URI {
        return error(
            StatusCode::BAD_REQUEST,
            format!("a resource URI is 1 to {MAX_WATCH_URI} bytes long"),
        );
    }
    let person = Subscriber::Person(who.id().to_owned());
    let done = if req.watch {
        bridge.subscribe_as(&person, &req.service, &req.uri).await
    } else {
        bridge.unsubscribe_as(&person, &req.service, &req.uri).await
    };
    match done {
        Ok(()) => axum::Json(json!({"watched": watched_by(&bridge, &who)})).into_response(),
        Err(e) if req.watch => failed(&e, "watching the resource"),
        Err(e) => failed(&e, "ending the watch"),
    }
}

/// What the servers offer: listed again after a change or after [`MIN_GAP`](super::live::MIN_GAP),
/// else the last listing (one listing at a time: pages asking at once wait for the same one).
async fn listing(app: &App, bridge: &McpBridge) -> Value {
    let generation = app.live.get().map_or(0, |rx| rx.borrow().generation);
    let mut last = app.listing.lock().await;
    if let Some(l) = &*last
        && l.generation == generation
        && l.at.elapsed() < super::live::MIN_GAP
    {
        return l.value.clone();
    }
    let mut resources = Vec::new();
    let mut templates = Vec::new();
    let mut prompts = Vec::new();
    for s in bridge.services().into_iter().take(MAX_SERVICES) {
        let service = s.config.name.clone();
        match bridge.resources(&service).await {
            Ok(list) => resources.extend(list.into_iter().take(MAX_OFFERED).map(|r| {
                json!({"service": r.service, "uri": r.uri, "name": r.name, "title": r.title,
                       "description": r.description, "mimeType": r.mime_type, "size": r.size})
            })),
            Err(BridgeError::NotOffered { .. }) => {}
            Err(e) => {
                tracing::warn!(service, error = %e, "chat panel: could not list an MCP server's resources")
            }
        }
        match bridge.resource_templates(&service).await {
            Ok(list) => templates.extend(list.into_iter().take(MAX_OFFERED).filter_map(|t| {
                // a template the panel cannot fill is not offered
                let arguments = match super::template::variables(&t.uri_template) {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::info!(service, error = %e, "chat panel: an MCP server's resource template is not offered");
                        return None;
                    }
                };
                Some(json!({"service": t.service, "uriTemplate": t.uri_template, "name": t.name,
                            "title": t.title, "description": t.description,
                            "mimeType": t.mime_type, "arguments": arguments}))
            })),
            Err(BridgeError::NotOffered { .. }) => {}
            Err(e) => {
                tracing::warn!(service, error = %e, "chat panel: could not list an MCP server's resource templates")
            }
        }
        match bridge.prompts(&service).await {
            Ok(list) => prompts.extend(list.into_iter().take(MAX_OFFERED).map(|p| {
                let arguments: Vec<Value> = p
                    .arguments
                    .iter()
                    .map(|a| json!({"name": a.name, "description": a.description, "required": a.required}))
                    .collect();
                json!({"service": p.service, "name": p.name, "title": p.title,
                       "description": p.description, "arguments": arguments})
            })),
            Err(BridgeError::NotOffered { .. }) => {}
            Err(e) => {
                tracing::warn!(service, error = %e, "chat panel: could not list an MCP server's prompts")
            }
        }
    }
    let value = json!({"resources": resources, "templates": templates, "prompts": prompts});
    *last = Some(Listed {
        generation,
        at: std::time::Instant::now(),
        value: value.clone(),
    });
    value
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsentRequest {
    consents: bool,
}

/// `POST /api/mcp/learning` with `{"consents": true|false}`: the person says whether the tool
/// search may learn from their requests (`McpBridge::set_learning_consent` for their
/// principal); `{"consents", "deleted"}` — saying no deletes what was learned from them. `404`
/// while the bridge does not learn from use.
pub(super) async fn post_learning(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (bridge, asked) =
        match bridge_and_body::<ConsentRequest>(&app, &headers, body, "{\"consents\": bool}").await
        {
            Ok(both) => both,
            Err(r) => return r,
        };
    match bridge.learning_consent(who.id()).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                "this panel's tool search does not learn from use (McpBridge::set_learn_from_use)",
            );
        }
        Err(e) => return failed(&e, "reading your choice"),
    }
    match bridge.set_learning_consent(who.id(), asked.consents).await {
        Ok(deleted) => {
            axum::Json(json!({"consents": asked.consents, "deleted": deleted})).into_response()
        }
        Err(e) => failed(&e, "keeping your choice"),
    }
}

/// `413` when a prompt's or template's `arguments` are more than [`MAX_ARGUMENTS`] or one is
/// longer than [`MAX_ARGUMENT_CHARS`] characters.
fn too_many_or_too_long(
    arguments: &BTreeMap<String, String>,
    what: &str,
    noun: &str,
) -> Option<Response> {
    let too_long = |v: &String| v.chars().count() > MAX_ARGUMENT_CHARS;
    (arguments.len() > MAX_ARGUMENTS || arguments.values().any(too_long)).then(|| {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a {what} takes at most {MAX_ARGUMENTS} {noun} of at most {MAX_ARGUMENT_CHARS} characters each"
            ),
        )
    })
}

/// The panel's bridge and the request's JSON body (at most [`MAX_BODY`] bytes) as a `T`;
/// else the refusal to answer with: `404` when the panel offers no bridge, `400` a body not of
/// the `expected` shape.
#[allow(clippy::result_large_err)]
async fn bridge_and_body<T: serde::de::DeserializeOwned>(
    app: &App,
    headers: &HeaderMap,
    body: Body,
    expected: &str,
) -> Result<(McpBridge, T), Response> {
    let bridge = bridge(app)?.clone();
    let bytes = read_json_body_within(app, headers, body, MAX_BODY).await?;
    let req = serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("malformed request: expected {expected}: {e}"),
        )
    })?;
    Ok((bridge, req))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptRequest {
    service: String,
    name: String,
    #[serde(default)]
    arguments: BTreeMap<String, String>,
}

/// `POST /api/mcp/prompt` with `{"service", "name", "arguments": {NAME: VALUE}}`: the prompt's
/// messages as the text to put in the input, `{"text"}` (their texts, one paragraph each); a
/// prompt longer than a message may be is `413`, a server's refusal (a missing argument) `422`
/// with its reason.
pub(super) async fn post_prompt(
    State(app): State<Arc<App>>,
    axum::Extension(_who): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (bridge, req) = match bridge_and_body::<PromptRequest>(
        &app,
        &headers,
        body,
        r#"{"service", "name", "arguments": {"NAME": "VALUE"}}"#,
    )
    .await
    {
        Ok(both) => both,
        Err(r) => return r,
    };
    if let Some(refused) = too_many_or_too_long(&req.arguments, "prompt", "arguments") {
        return refused;
    }
    let messages = match bridge
        .get_prompt(&req.service, &req.name, &req.arguments)
        .await
    {
        Ok(m) => m,
        Err(e) => return failed(&e, &format!("getting the prompt {:?}", req.name)),
    };
    let text = prompt_text(&messages);
    let chars = text.chars().count();
    if chars > app.config.max_text_chars {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the prompt {:?} is {chars} characters; a message may be at most {}",
                req.name, app.config.max_text_chars
            ),
        );
    }
    axum::Json(json!({"text": text})).into_response()
}

/// The texts of a prompt's messages, one paragraph each (their media named in a line).
fn prompt_text(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| {
            let mut t = m.content().to_owned();
            for p in m.parts() {
                let line = p.placeholder();
                if !line.is_empty() {
                    if !t.is_empty() {
                        t.push('\n');
                    }
                    t.push_str(&line);
                }
            }
            t
        })
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteRequest {
    service: String,
    /// The prompt whose argument it is, or
    #[serde(default)]
    prompt: Option<String>,
    /// the resource template whose variable it is.
    #[serde(default, rename = "uriTemplate")]
    uri_template: Option<String>,
    argument: String,
    #[serde(default)]
    value: String,
}

/// `POST /api/mcp/complete` with `{"service", "prompt" | "uriTemplate", "argument", "value"}`:
/// `{"values"}`, what the server suggests for the prompt's argument (or the resource
/// template's variable) given what was typed (at most 20); a server that does not complete
/// answers no values.
pub(super) async fn post_complete(
    State(app): State<Arc<App>>,
    axum::Extension(_who): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (bridge, req) = match bridge_and_body::<CompleteRequest>(
        &app,
        &headers,
        body,
        r#"{"service", "prompt" | "uriTemplate", "argument", "value"}"#,
    )
    .await
    {
        Ok(both) => both,
        Err(r) => return r,
    };
    if req.value.chars().count() > MAX_ARGUMENT_CHARS {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a value may be at most {MAX_ARGUMENT_CHARS} characters"),
        );
    }
    let of = match (&req.prompt, &req.uri_template) {
        (Some(p), None) => CompletionOf::Prompt(p),
        (None, Some(t)) => CompletionOf::ResourceTemplate(t),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "name either the prompt (\"prompt\") or the resource template (\"uriTemplate\") whose argument it is",
            );
        }
    };
    match bridge
        .complete(&req.service, of, &req.argument, &req.value)
        .await
    {
        Ok(mut values) => {
            values.truncate(MAX_COMPLETIONS);
            axum::Json(json!({"values": values})).into_response()
        }
        Err(BridgeError::NotOffered { .. }) => axum::Json(json!({"values": []})).into_response(),
        Err(e) => failed(&e, "completing the argument"),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateRequest {
    service: String,
    #[serde(rename = "uriTemplate")]
    uri_template: String,
    #[serde(default)]
    arguments: BTreeMap<String, String>,
}

/// Longest preview of a resource read from a template, in characters.
const PREVIEW_CHARS: usize = 300;

/// `POST /api/mcp/template` with `{"service", "uriTemplate", "arguments": {NAME: VALUE}}`: the
/// resource the service's template makes with the person's values, read as a message would
/// carry it — `{"uri", "preview"}` (the URI to name in the message's `"resources"`, and the
/// start of what it holds). Refused with a sentence the page shows: `404` a template the
/// service does not offer, `400` a variable left empty or a name the template lacks, `422` a
/// URI the template does not make (a value adding `..`, a query or a fragment) or the server's
/// refusal, `413` a resource larger than a message may carry, `415` media of a type the panel
/// does not take.
#[allow(clippy::result_large_err)] // the refusal is the answer (a `Response`)
pub(super) async fn post_template(
    State(app): State<Arc<App>>,
    axum::Extension(_who): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (bridge, req) = match bridge_and_body::<TemplateRequest>(
        &app,
        &headers,
        body,
        r#"{"service", "uriTemplate", "arguments": {"NAME": "VALUE"}}"#,
    )
    .await
    {
        Ok(both) => both,
        Err(r) => return r,
    };
    if let Some(refused) = too_many_or_too_long(&req.arguments, "template", "values") {
        return refused;
    }
    let offered = listing(&app, &bridge).await;
    let known = offered["templates"].as_array().is_some_and(|ts| {
        ts.iter().any(|t| {
            t["service"] == req.service.as_str() && t["uriTemplate"] == req.uri_template.as_str()
        })
    });
    if !known {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "{} offers no resource template {}; choose one from the list",
                req.service, req.uri_template
            ),
        );
    }
    let uri = match super::template::uri_from(&req.uri_template, &req.arguments) {
        Ok(u) => u,
        Err(e @ super::template::TemplateRefusal::NotMade { .. }) => {
            return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
        }
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let max = app.config.max_image_bytes;
    let parts = match read_one(&bridge, &req.service, &uri, &|p, uri| {
        super::attachments::checked_media(p, uri, max)
    })
    .await
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let preview = parts
        .iter()
        .map(|p| match p {
            Part::Text { text } => text.clone(),
            other => other.placeholder(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut cut: String = preview.chars().take(PREVIEW_CHARS).collect();
    if cut.len() < preview.len() {
        cut.push('…');
    }
    axum::Json(json!({"uri": uri, "preview": cut})).into_response()
}

/// The resources a message names, read from their servers, as parts after its text: each
/// resource's text as a text part headed by its URI (at most [`MAX_RESOURCE_TEXT`] bytes), its
/// pictures, sounds and files checked as an attachment is (`check`). At most
/// [`MAX_RESOURCES`]; a refusal is the answer, with a sentence the page shows.
#[allow(clippy::result_large_err)]
pub(super) async fn read_chosen(
    app: &App,
    chosen: Vec<super::attachments::ResourceChoice>,
    check: impl Fn(Part, &str) -> Result<Part, Response>,
) -> Result<Vec<Part>, Response> {
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    let bridge = bridge(app)?;
    if chosen.len() > MAX_RESOURCES {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!("a message may carry at most {MAX_RESOURCES} resources"),
        ));
    }
    let mut out = Vec::new();
    for c in chosen {
        out.extend(read_one(bridge, &c.service, &c.uri, &check).await?);
    }
    Ok(out)
}

/// One resource read from its server, as parts to add to a message (see [`read_chosen`]).
#[allow(clippy::result_large_err)]
async fn read_one(
    bridge: &McpBridge,
    service: &str,
    uri: &str,
    check: &impl Fn(Part, &str) -> Result<Part, Response>,
) -> Result<Vec<Part>, Response> {
    let parts = bridge
        .read_resource(service, uri)
        .await
        .map_err(|e| failed(&e, &format!("reading the resource {uri}")))?;
    let mut out = Vec::new();
    for p in parts {
        match p {
            Part::Text { text } => {
                if text.len() > MAX_RESOURCE_TEXT {
                    return Err(error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!(
                            "the resource {uri} is {} bytes of text; a message may carry at most {} of a resource",
                            text.len(),
                            MAX_RESOURCE_TEXT
                        ),
                    ));
                }
                out.push(Part::text(format!(
                    "[resource {uri} from {service}]\n{text}"
                )));
            }
            p @ (Part::Image(_) | Part::Audio(_) | Part::File(_)) => out.push(check(p, uri)?),
            // a server's own link or anything else: named, never fetched
            other => out.push(Part::text(other.placeholder())),
        }
    }
    Ok(out)
}
