//! The endpoints: the page, a conversation's state and events, and the three `POST`s (a
//! message, approval decisions, an answer to an MCP server's question).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::OwnedSemaphorePermit;

use super::attachments::{MALFORMED, PostBody, attachments, checked_media, picture_allowance};
use super::events::follow;
use super::guard::{access, not_found};
use super::guard::{
    check_session_id, header_str, read_json_body, read_json_body_within, session_id, store_failed,
};
use super::turn::{Turn, start_turn};
use super::{APP_CSS, APP_JS, App, PAGE, error};
use crate::identity::Principal;
use crate::lease::{self, Acquired};
use crate::state::entries_from_history;

pub(super) async fn page(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    // with a browser login, a person without a session signs in first
    if let Some(login) = &app.config.login
        && !matches!(login.session(&headers).await, Some(Ok(_)))
    {
        let mut r = StatusCode::SEE_OTHER.into_response();
        r.headers_mut()
            .insert(header::LOCATION, HeaderValue::from_static("/login"));
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return r;
    }
    let mut r = axum::response::Html(PAGE).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The page's Content-Security-Policy: its script and style only from the panel's own files
/// (`/app.js`, `/app.css`), nothing inline — no `<script>` or `<style>` in the page, no event
/// handler or `style` attribute —, requests to the panel only, images and sounds from the
/// panel's own media endpoint only (no `data:` or other sites' URLs), no frames.
pub(super) const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; media-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One of the page's own files: `body` as `content_type`, never sniffed as anything else. Not
/// secret (the same for everyone, signed in or not); revalidated rather than kept, so a new
/// version of the panel is picked up at the next load.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /app.js`: the page's script.
pub(super) async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /app.css`: the page's style.
pub(super) async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// `GET /signed-in.js`: the script of the page `/callback` answers after a sign-in (it goes on
/// to the panel's page).
pub(super) async fn signed_in_js() -> Response {
    asset("text/javascript; charset=utf-8", "location.replace('/');\n")
}

/// Every `/api/` answer (conversation text, approval tokens, errors — the refusals of the
/// request checks included) is kept by no cache (`Cache-Control: no-store`) and never sniffed as
/// another type than it says (`X-Content-Type-Options: nosniff`).
pub(super) async fn api_headers(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    let api = path == "/api" || path.starts_with("/api/");
    let mut r = next.run(req).await;
    if api {
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    }
    r
}

pub(super) async fn get_session(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    if let Err(r) = access(&app, &id, &who).await {
        return r;
    }
    match app.sessions.find(&id).await {
        Ok(true) => {}
        Ok(false) => {
            return axum::Json(json!({"sessionId": id, "busy": false, "entries": [],
                "pending": null, "decisions": [], "lastEventId": 0,
                "maxImageBytes": app.config.max_image_bytes,
                "attachTypes": crate::media::attachable()}))
            .into_response();
        }
        Err(e) => return store_failed(&e),
    }
    let store = app.sessions.store();
    let (mut base, mut messages, turn) = match app.sessions.rows_and_turn(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => (0, Vec::new(), None),
        Err(e) => return store_failed(&e),
    };
    // whether an answer runs on any worker (an expired lease is closed here, and what that
    // stored is read again)
    let stale = turn.as_deref().is_some_and(lease::expired);
    let busy = match lease::running_from(store, &id, turn).await {
        Ok(b) => b,
        Err(e) => return store_failed(&e),
    };
    if stale {
        (base, messages) = match app.sessions.rows(&id).await {
            Ok(Some(r)) => r,
            Ok(None) => (0, Vec::new()),
            Err(e) => return store_failed(&e),
        };
    }
    let mut entries = entries_from_history(&id, base, &messages);
    match store.get_state(&id, crate::state::RUNS_KEY).await {
        Ok(runs) => {
            crate::state::attach_runs(&mut entries, &crate::state::read_runs(runs.as_deref()))
        }
        Err(e) => return store_failed(&e),
    }
    let excess = entries.len().saturating_sub(app.config.max_entries.max(10));
    entries.drain(..excess);
    // Calls waiting for the person's approval, from the store: a reload or a restart shows
    // the same ones (with fresh tokens).
    let pending = app.backend.pending_approval(&id, who.id()).await;
    // who decided what: approvals and answers to MCP servers' questions
    let decisions = match crate::decisions::decisions(app.sessions.store(), &id).await {
        Ok(d) => d,
        Err(e) => return store_failed(&e),
    };
    let last = base + messages.len() as u64;
    axum::Json(
        json!({"sessionId": id, "busy": busy, "entries": entries, "pending": pending,
        "decisions": decisions, "lastEventId": last, "maxImageBytes": app.config.max_image_bytes,
        "attachTypes": crate::media::attachable()}),
    )
    .into_response()
}

/// `GET /api/sessions/{id}/events`: see [`ChatPanel`]. `400` for a `Last-Event-ID` or `after`
/// that is not a row number.
pub(super) async fn get_events(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    query: axum::extract::RawQuery,
) -> Response {
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    if let Err(r) = access(&app, &id, &who).await {
        return r;
    }
    let from_query = query.0.as_deref().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("after="))
            .map(str::to_owned)
    });
    let after = match header_str(&headers, header::HeaderName::from_static("last-event-id"))
        .map(str::to_owned)
        .or(from_query)
    {
        None => 0,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => n,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID (or after=) must be a row number from this stream",
                );
            }
        },
    };
    Sse::new(follow(app, id, who, after).map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `POST /api/sessions/{id}/approvals` with `{"decisions": [{"call_id", "token", "approved",
/// "reason"?}]}`: the person's decisions on calls held for approval (the tokens are those of
/// the pending state the page was shown). Answers like a message: an SSE stream of the rest of
/// the turn. A decision that does not verify, or a call decided already (a second click, a
/// second tab), ends the stream with an error entry and changes nothing.
pub(super) async fn post_approvals(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Decisions {
        decisions: Vec<toolwright_tool_system::ApprovalDecision>,
    }
    const MAX_DECISIONS: usize = 64;
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let body = match read_json_body(&app, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let decisions = match serde_json::from_slice::<Decisions>(&body) {
        Ok(d) if !d.decisions.is_empty() && d.decisions.len() <= MAX_DECISIONS => d.decisions,
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("send between 1 and {MAX_DECISIONS} decisions"),
            );
        }
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "malformed request: expected {{\"decisions\": [{{\"call_id\", \"token\", \"approved\", \"reason\"?}}]}}: {e}"
                ),
            );
        }
    };
    let permit = match answer_slot(&app).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    match access(&app, &id, &who).await {
        Ok(true) => {}
        Ok(false) => return not_found(),
        Err(r) => return r,
    }
    match app.sessions.find(&id).await {
        Ok(true) => {}
        Ok(false) => return not_found(),
        Err(e) => return store_failed(&e),
    }
    let (lease, before) = match take_turn(&app, &id).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    // questions asked by the calls it runs are shown from the first instant
    let asks = app.asks.turn_started(&id, who.id());
    let events = app.backend.resume(&id, who.id(), decisions);
    let turn = Turn {
        id,
        lease,
        before,
        asks,
        permit,
    };
    start_turn(app, turn, events)
}

/// Takes the session's turn lease for this worker: `(lease, the last stored row before)`;
/// `409` when an answer runs (on any worker), `503` when the store fails.
#[allow(clippy::result_large_err)] // built once per request and returned straight away
pub(super) async fn take_turn(app: &App, id: &str) -> Result<(String, u64), Response> {
    let store = app.sessions.store();
    let (before, turn) = match app.sessions.rows_and_turn(id).await {
        Ok(Some((base, messages, turn))) => (base + messages.len() as u64, turn),
        Ok(None) => (0, None),
        Err(e) => return Err(store_failed(&e)),
    };
    match lease::acquire_from(store, id, &app.worker, app.config.turn_lease, turn).await {
        Ok(Acquired::Held(lease)) => Ok((lease, before)),
        Ok(Acquired::Busy) => Err(still_running()),
        Err(e) => Err(store_failed(&e)),
    }
}

#[allow(clippy::result_large_err)] // the resources' check answers a refusal as the response itself
pub(super) async fn post_message(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = match session_id(path) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let limit = app
        .config
        .max_body_bytes
        .saturating_add(picture_allowance(&app.config));
    let body = match read_json_body_within(&app, &headers, body, limit).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let req: PostBody = match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => match serde_json::from_value(v) {
            Ok(r) => r,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("{MALFORMED}: {e}")),
        },
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{MALFORMED}: not an object"),
            );
        }
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("{MALFORMED}: {e}")),
    };
    let text = req.text.trim().to_owned();
    let mut parts = match attachments(req.attachments, app.config.max_image_bytes) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if text.is_empty() && parts.is_empty() && req.resources.is_empty() {
        return error(StatusCode::BAD_REQUEST, "text is empty");
    }
    let chars = text.chars().count();
    if chars > app.config.max_text_chars {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "text has {chars} characters; at most {} are allowed",
                app.config.max_text_chars
            ),
        );
    }
    let permit = match answer_slot(&app).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    match access(&app, &id, &who).await {
        // With authentication the server names conversations (`POST /api/sessions`): an id a
        // client proposes is never used as a key (`access` answers 404), so nobody can pick,
        // or guess, another's; without, the page's first message creates it — but never as
        // someone else's inbox (a loopback-only authenticator of the operator's own names
        // several principals and lets clients pick ids: one could take another's inbox id).
        Ok(false)
            if id.starts_with(crate::state::INBOX_PREFIX)
                && id != crate::state::inbox_id(who.id()) =>
        {
            return not_found();
        }
        Ok(_) => {}
        Err(r) => return r,
    }
    if let Err(e) = app.sessions.find_or_create(&id, who.id()).await {
        return store_failed(&e);
    }
    // created meanwhile by someone else (two first messages racing): theirs
    if let Err(r) = access(&app, &id, &who).await {
        return r;
    }
    // the MCP resources it names, read now, checked as attachments are
    let max = app.config.max_image_bytes;
    match super::offers::read_chosen(&app, req.resources, |p, uri| checked_media(p, uri, max)).await
    {
        Ok(more) => parts.extend(more),
        Err(r) => return r,
    }
    // The quick reply a message answers is recorded from the stored text (the latest open set
    // offering it), the same on every worker and after a reload.
    let _ = req.in_reply_to;
    let (lease, before) = match take_turn(&app, &id).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    // registered for MCP servers' questions before the model or any tool can run (the backend
    // may start the answer at once): a question asked at the first instant is shown, not
    // declined for want of a turn
    let asks = app.asks.turn_started(&id, who.id());
    let events = app.backend.reply_with_parts(&id, who.id(), &text, parts);
    let turn = Turn {
        id,
        lease,
        before,
        asks,
        permit,
    };
    start_turn(app, turn, events)
}

/// A free answer slot within the queue timeout, or `503`.
pub(super) async fn answer_slot(app: &Arc<App>) -> Result<OwnedSemaphorePermit, Response> {
    match tokio::time::timeout(
        app.config.queue_timeout,
        app.permits.clone().acquire_owned(),
    )
    .await
    {
        Ok(Ok(p)) => Ok(p),
        _ => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the panel is busy; try again shortly",
        )),
    }
}

/// `409`: the session's answer is still running.
pub(super) fn still_running() -> Response {
    error(
        StatusCode::CONFLICT,
        "an answer is still running in this session; wait for it to finish",
    )
}

/// `POST /api/sessions/{id}/elicitations/{n}` with `{"action": "accept" | "decline" |
/// "cancel", "content"?}`: the person's answer to an MCP server's question; `404` when it is not
/// waiting (answered already — a second click or tab —, or its turn ended).
pub(super) async fn post_elicitation(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    path: Result<Path<(String, u64)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        action: String,
        #[serde(default)]
        content: Option<Value>,
    }
    let Ok(Path((id, n))) = path else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected /api/sessions/{id}/elicitations/{number}",
        );
    };
    if let Err(why) = check_session_id(Ok(Path(id.clone()))) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let body = match read_json_body(&app, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let answer = match serde_json::from_slice::<Answer>(&body) {
        Ok(a) => match (a.action.as_str(), a.content) {
            ("accept", Some(c @ Value::Object(_))) => {
                toolwright_mcp_bridge::elicitation::ElicitationAnswer::Accept(c)
            }
            ("accept", None) => {
                toolwright_mcp_bridge::elicitation::ElicitationAnswer::Accept(json!({}))
            }
            ("decline", _) => toolwright_mcp_bridge::elicitation::ElicitationAnswer::Decline,
            ("cancel", _) => toolwright_mcp_bridge::elicitation::ElicitationAnswer::Cancel,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "action must be accept (with an object as content), decline or cancel",
                );
            }
        },
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("malformed request: expected {{\"action\", \"content\"?}}: {e}"),
            );
        }
    };
    match access(&app, &id, &who).await {
        Ok(true) => {}
        Ok(false) => return not_found(),
        Err(r) => return r,
    }
    let gone = || {
        error(
            StatusCode::NOT_FOUND,
            "no such question is waiting (it was answered already, or its answer ended)",
        )
    };
    let Some(question) = app.asks.claim(&id, n) else {
        return gone();
    };
    // Recorded before the asker gets it: an answer nobody could later attribute is not
    // given — the question is cancelled instead.
    let (action, content) = match &answer {
        toolwright_mcp_bridge::elicitation::ElicitationAnswer::Accept(c) => {
            ("accept", Some(c.clone()))
        }
        toolwright_mcp_bridge::elicitation::ElicitationAnswer::Decline => ("decline", None),
        _ => ("cancel", None),
    };
    let record = crate::decisions::AnswerRecord {
        question: n,
        service: question.service.clone(),
        message: question.message.clone(),
        action: action.into(),
        content,
        principal: who.id().to_owned(),
        at_ms: crate::decisions::now_ms(),
    };
    if let Err(e) = crate::decisions::record_answer(app.sessions.store(), &id, &record).await {
        tracing::error!(session = %id, error = %e, "chat panel: could not record an answer to an MCP question; the question is cancelled");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "your answer could not be recorded, so it was not given: the question was cancelled; try the request again",
        );
    }
    if question.answer(answer) {
        axum::Json(json!({"ok": true})).into_response()
    } else {
        gone()
    }
}

/// `POST /api/sessions`: a new conversation, owned by the caller, named by the server —
/// `{"sessionId"}`: 128 random bits as 32 hex digits, so nobody can guess another's.
/// `GET /api/inbox`: the caller's inbox conversation, where bus messages addressed to
/// them (`person:PRINCIPAL`, [`crate::person_address`]) are stored; created as theirs when it
/// does not exist yet.
pub(super) async fn get_inbox(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
) -> Response {
    match app.sessions.open_inbox(who.id()).await {
        Ok(Some(id)) => axum::Json(json!({"sessionId": id})).into_response(),
        Ok(None) => not_found(),
        Err(e) => store_failed(&e),
    }
}

pub(super) async fn post_session(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
) -> Response {
    let id = format!("{:032x}", rand::random::<u128>());
    match app.sessions.find_or_create(&id, who.id()).await {
        Ok(true) => axum::Json(json!({"sessionId": id})).into_response(),
        // 2^-128: a collision would mean the random source is broken
        Ok(false) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the new conversation's id was taken already; the server's random source is suspect",
        ),
        Err(e) => store_failed(&e),
    }
}
