//! The browser login's endpoints ([`crate::login`]): `/login`, `/callback`, `/logout`.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::App;
use crate::login::LoginError;

/// The Content-Security-Policy of the page `/callback` answers after a sign-in: its one script
/// from the panel's own file, nothing inline.
pub(super) const SIGNED_IN_CSP: &str = "default-src 'none'; script-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A plain-text answer (what a provider said is never HTML here).
fn text(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn no_login() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "this panel has no browser login (PanelConfig::with_oidc_login)".into(),
    )
}

fn with_cookies(mut r: Response, cookies: &[String]) -> Response {
    for c in cookies {
        if let Ok(v) = HeaderValue::from_str(c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

/// `GET /login`: to the provider, with state, nonce and PKCE.
pub(super) async fn get_login(State(app): State<Arc<App>>) -> Response {
    let Some(login) = app.config.login.clone() else {
        return no_login();
    };
    match login.start().await {
        Ok((location, cookie)) => {
            let mut r = StatusCode::SEE_OTHER.into_response();
            match HeaderValue::from_str(&location) {
                Ok(v) => {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                Err(_) => {
                    return text(
                        StatusCode::BAD_GATEWAY,
                        "the provider's authorization endpoint is not a usable URL".into(),
                    );
                }
            }
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            with_cookies(r, &[cookie])
        }
        Err(e) => {
            tracing::warn!(error = %e, "chat panel: could not start a sign-in");
            text(StatusCode::BAD_GATEWAY, e.to_string())
        }
    }
}

/// `GET /callback`: the code exchanged, the ID token verified, the session cookie set; then
/// a page that goes on to `/` by itself (a same-origin navigation: the redirect chain from the
/// provider is cross-site, which the panel's own page refuses).
pub(super) async fn get_callback(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let Some(login) = app.config.login.clone() else {
        return no_login();
    };
    match login.finish(query.as_deref().unwrap_or(""), &headers).await {
        Ok((who, cookies)) => {
            tracing::info!(principal = %who, "chat panel: signed in");
            // its script is a file of the panel's (`/signed-in.js`): nothing inline runs here
            let mut r = axum::response::Html(
                "<!doctype html><meta charset=utf-8><title>Signed in</title>\
                 <p>Signed in. <a id=go href=\"/\">Open the chat</a>.</p>\
                 <script src=\"/signed-in.js\"></script>",
            )
            .into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(SIGNED_IN_CSP),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            with_cookies(r, &cookies)
        }
        Err(e) => {
            tracing::info!(error = %e, "chat panel: a sign-in did not complete");
            let status = match e {
                LoginError::Provider(_) => StatusCode::BAD_GATEWAY,
                _ => StatusCode::BAD_REQUEST,
            };
            text(status, e.to_string())
        }
    }
}

/// `GET /logout`: the session cookie cleared, and the person signed out on every browser and
/// worker (their sessions issued until now are refused); `503` with the cookie cleared when
/// that could not be recorded.
pub(super) async fn get_logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(login) = app.config.login.clone() else {
        return no_login();
    };
    let r = match login.sign_out_request(&headers).await {
        Ok(who) => {
            if let Some(who) = who {
                tracing::info!(principal = %who, "chat panel: signed out everywhere");
            }
            text(StatusCode::OK, "Signed out.".into())
        }
        Err(e) => {
            tracing::error!(error = %e, "chat panel: a sign-out could not be recorded");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "Signed out in this browser only: the sign-out could not be recorded for your other browsers just now; try again shortly.".into(),
            )
        }
    };
    with_cookies(r, &[login.logout_cookie()])
}

/// `GET /oauth/callback`: an OAuth-protected MCP server's authorization server sending the
/// person back ([`crate::PanelSignIn`]), on any worker sharing the credential store: the
/// sign-in waiting under its `state` is completed when the caller is the principal it was
/// shown to (`403` otherwise, and it is left waiting), once and before it expires (`404`);
/// the code is exchanged here and the token stored, and the worker whose call waits goes on.
pub(super) async fn get_mcp_callback(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<crate::identity::Principal>,
    RawQuery(query): RawQuery,
) -> Response {
    use toolwright_mcp_bridge::oauth::CallbackError;
    match app
        .sign_ins
        .complete(who.id(), query.as_deref().unwrap_or(""))
        .await
    {
        Ok(()) => {
            tracing::info!(principal = %who.id(), "chat panel: an MCP sign-in came back");
            let mut r = axum::response::Html(
                "<!doctype html><meta charset=utf-8><title>Signed in</title>\
                 <p id=done>Signed in. You can close this window and go back to the conversation.</p>",
            )
            .into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(SIGNED_IN_CSP),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        Err(e) => {
            let status = match &e {
                CallbackError::NotYours => StatusCode::FORBIDDEN,
                CallbackError::Denied(_) => StatusCode::OK,
                CallbackError::Exchange(_) => StatusCode::BAD_GATEWAY,
                CallbackError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::NOT_FOUND,
            };
            tracing::info!(principal = %who.id(), error = %e, "chat panel: an MCP sign-in callback was not taken");
            text(status, e.to_string())
        }
    }
}
