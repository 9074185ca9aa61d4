//! Who may call: the checks that run before every handler (size of the request target, `Host`,
//! `Sec-Fetch-Site`, `Origin`) and the session id in the path.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{App, error};
use crate::identity::Principal;

/// `host[:port]` → host, lower case (`[::1]:80` → `[::1]`).
pub(super) fn host_name(host: &str) -> String {
    let h = host.trim().to_ascii_lowercase();
    if h.starts_with('[') {
        return h.split_inclusive(']').next().unwrap_or_default().to_owned();
    }
    h.split(':').next().unwrap_or_default().to_owned()
}

pub(super) fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"))
}

/// Who may call: see [`ChatPanel`]'s API notes. Runs before every handler.
pub(super) async fn check_request(
    State(app): State<Arc<App>>,
    mut req: Request,
    next: Next,
) -> Response {
    let c = &app.config;
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > c.max_uri_bytes {
        return error(
            StatusCode::URI_TOO_LONG,
            format!("request target is longer than {} bytes", c.max_uri_bytes),
        );
    }
    let h = req.headers();
    let Some(host) =
        header_str(h, header::HOST).or_else(|| req.uri().authority().map(|a| a.as_str()))
    else {
        return error(StatusCode::BAD_REQUEST, "the request has no Host header");
    };
    let host_ok = matches!(
        host_name(host).as_str(),
        "127.0.0.1" | "localhost" | "[::1]"
    ) || c.allowed_hosts.iter().any(|a| a.eq_ignore_ascii_case(host));
    if !host_ok {
        tracing::warn!(host = %host, "chat panel: refused a request for a foreign Host (DNS rebinding?)");
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "Host `{host}` is not this panel's address; behind a proxy, add it with PanelConfig::with_allowed_host"
            ),
        );
    }
    let fetch_site = header_str(h, header::HeaderName::from_static("sec-fetch-site"));
    // the browser login's two ends are reached from the provider's pages: they check
    // their own state (a sealed cookie and `state`), and change nothing but the caller's cookie
    let login_leg = (c.login.is_some()
        && *req.method() == Method::GET
        && matches!(req.uri().path(), "/login" | "/callback"))
        // an MCP server's sign-in coming back: checked against its waiting `state` and the
        // principal it was shown to
        || (*req.method() == Method::GET
            && req.uri().path() == crate::mcp_sign_in::CALLBACK_PATH);
    if let Some(site) = fetch_site
        && !login_leg
        && !matches!(site, "same-origin" | "none")
    {
        tracing::warn!(sec_fetch_site = %site, "chat panel: refused a cross-site request");
        return error(
            StatusCode::FORBIDDEN,
            "cross-site requests are not accepted: use the panel's own page",
        );
    }
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && let Some(origin) = header_str(h, header::ORIGIN) {
        let o = origin.to_ascii_lowercase();
        let own = o == format!("http://{}", host.to_ascii_lowercase())
            || o == format!("https://{}", host.to_ascii_lowercase());
        if !own
            && !c
                .allowed_origins
                .iter()
                .any(|a| a.eq_ignore_ascii_case(origin))
        {
            tracing::warn!(origin = %origin, "chat panel: refused a request from another origin");
            return error(
                StatusCode::FORBIDDEN,
                format!(
                    "requests from origin `{origin}` are not accepted; add it with PanelConfig::with_allowed_origin if it is yours"
                ),
            );
        }
    }
    if req.uri().path().starts_with("/api/")
        || req.uri().path() == crate::mcp_sign_in::CALLBACK_PATH
    {
        let peer = req
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip());
        let head = crate::identity::RequestHead {
            headers: req.headers(),
            peer,
        };
        match c.authenticator.authenticate(head).await {
            Ok(p) => {
                req.extensions_mut().insert(p);
            }
            Err(why) => {
                tracing::info!(reason = %why, "chat panel: refused an unauthenticated request");
                let mut r = if c.login.is_some() {
                    // the page goes there to sign in again (a session that ended)
                    (
                        StatusCode::UNAUTHORIZED,
                        axum::Json(
                            serde_json::json!({"error": why.to_string(), "login": "/login"}),
                        ),
                    )
                        .into_response()
                } else {
                    error(StatusCode::UNAUTHORIZED, why.to_string())
                };
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
                return r;
            }
        }
    }
    next.run(req).await
}

#[allow(clippy::result_large_err)] // built once per request and returned straight away
pub(super) fn session_id(path: Result<Path<String>, PathRejection>) -> Result<String, Response> {
    check_session_id(path).map_err(|m| error(StatusCode::BAD_REQUEST, m))
}

pub(super) fn check_session_id(
    path: Result<Path<String>, PathRejection>,
) -> Result<String, String> {
    let Path(id) = path.map_err(|e| format!("bad session id: {e}"))?;
    if crate::state::is_session_id(&id) {
        Ok(id)
    } else {
        Err("bad session id: use 8 to 64 characters of A-Z, a-z, 0-9, '-' and '_'".into())
    }
}

/// Whether `who` may use conversation `id`: `Ok(true)` it is theirs, `Ok(false)` there is
/// no such conversation yet (without authentication only: the page names its conversations);
/// [`not_found`] when it is another principal's, and — with authentication, where the server
/// names conversations (`POST /api/sessions`) — when there is none: the same bytes either way,
/// so a caller learns nothing of others' conversations, not even that one exists. A
/// conversation with no owner recorded (created before owners were recorded, or by a bus message to a person)
/// is [`Principal::local`]'s only: without authentication everything stays as it was, and with
/// it nobody takes over an old conversation by knowing its id.
pub(super) async fn access(app: &App, id: &str, who: &Principal) -> Result<bool, Response> {
    let owner = match app.sessions.owner(id).await {
        Ok(o) => o,
        Err(e) => return Err(store_failed(&e)),
    };
    let ok = match owner {
        None if app.config.authenticator.loopback_only() => return Ok(false),
        None => return Err(not_found()),
        Some(Some(o)) => o == who.id(),
        Some(None) => *who == Principal::local(),
    };
    if ok {
        Ok(true)
    } else {
        tracing::info!(session = %id, principal = %who, "chat panel: refused another principal's conversation");
        Err(not_found())
    }
}

/// `404` for a conversation the caller may not see: one that does not exist and another's
/// answer alike, to the byte.
pub(super) fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such conversation: start one with POST /api/sessions",
    )
}

/// The answer when the session store failed: logged, and `503` saying to try again.
pub(super) fn store_failed(e: &toolwright_context_engine::StoreError) -> Response {
    tracing::error!(error = %e, "chat panel: the session store failed");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the conversation could not be loaded or saved just now; try again shortly",
    )
}

/// A JSON request body within the panel's size and time limits.
pub(super) async fn read_json_body(
    app: &App,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, Response> {
    read_json_body_within(app, headers, body, app.config.max_body_bytes).await
}

/// [`read_json_body`] with a body limit of `limit` bytes.
pub(super) async fn read_json_body_within(
    app: &App,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<axum::body::Bytes, Response> {
    let json_type = header_str(headers, header::CONTENT_TYPE)
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the request as Content-Type: application/json",
        ));
    }
    let body = match tokio::time::timeout(
        app.config.body_read_timeout,
        axum::body::to_bytes(body, limit),
    )
    .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let too_big = length_limit_hit(&e);
            return Err(if too_big {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body is larger than {limit} bytes"),
                )
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("could not read the request body: {e}"),
                )
            });
        }
        Err(_) => {
            tracing::info!(
                timeout_ms = app.config.body_read_timeout.as_millis() as u64,
                "chat panel: a request body did not arrive in time"
            );
            return Err(error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    app.config.body_read_timeout.as_secs()
                ),
            ));
        }
    };
    Ok(body)
}

/// Whether reading the body stopped at the size limit (`to_bytes` reports that as an error
/// whose source chain holds http-body-util's `LengthLimitError`).
pub(super) fn length_limit_hit(e: &axum::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.to_string().contains("length limit exceeded") {
            return true;
        }
        cur = err.source();
    }
    false
}
