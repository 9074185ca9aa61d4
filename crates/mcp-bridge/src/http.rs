//! The Streamable HTTP transport of a remote MCP server: rmcp's client on reqwest, with the
//! entry's headers and its bearer token read from the environment variable the entry names.
//! Behind the `http` feature (on by default): without it mcp-bridge compiles no HTTP client.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use reqwest_ring as reqwest;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};

use crate::tls::ensure_crypto_provider;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use rmcp::transport::auth::AuthError;

use crate::config::ServiceConfig;
use crate::oauth::{Authorizations, OAuthError, OAuthSession};
use crate::process::MAX_MESSAGE_BYTES;

/// The transport for `config`'s server at `url`, or why it cannot be built (a header that is not
/// valid HTTP, a token variable that is not set).
pub(crate) fn transport(
    config: &ServiceConfig,
    url: &str,
) -> Result<StreamableHttpClientTransport<SessionAware>, String> {
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        let n = http::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header name {name:?} is not valid HTTP: {e}"))?;
        let v = http::HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("the value of header {name} is not valid HTTP: {e}"))?;
        headers.insert(n, v);
    }
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(headers)
        .reinit_on_expired_session(true)
        .max_json_response_size(MAX_MESSAGE_BYTES)
        .max_sse_event_size(MAX_MESSAGE_BYTES);
    if let Some(var) = &config.bearer_token_env_var {
        let token = std::env::var(var).map_err(|_| {
            format!("the bearer token variable {var} is not set (or not UTF-8); set it in the agent's environment")
        })?;
        cfg = cfg.auth_header(token);
    }
    ensure_crypto_provider();
    let client = reqwest::Client::builder()
        .connect_timeout(config.startup_timeout)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let oauth = config
        .oauth
        .as_ref()
        .map(|o| Arc::new(OAuthSession::new(o.clone(), url)));
    Ok(StreamableHttpClientTransport::with_client(
        SessionAware {
            client,
            oauth,
            handshake_refused: Arc::default(),
        },
        cfg,
    ))
}

/// reqwest's client, with one repair: a server that no longer knows our session (it restarted,
/// or ended the session while it kept running) should answer HTTP 404, which makes rmcp
/// initialise a new session and retry the request once (`tests/session_expiry.rs` against the
/// official Python SDK). Some answer a JSON-RPC error with no `id` instead (server-everything:
/// HTTP 400 "Bad Request: No valid session ID provided"), which no request can be matched with,
/// so the call would hang until its timeout. Only that answer is taken as an expired session
/// ([`expired_session_error`]): anything else, an id-less "internal error" included, is the
/// server's answer, because retrying a call the server may have half run is not ours to do.
///
/// With OAuth ([`crate::ServiceConfig::with_oauth`]) every request carries the session's token,
/// and a 401 or a 403 `insufficient_scope` runs the authorization and retries the request, at
/// most [`crate::oauth::OAuthConfig::with_max_authorizations`] times.
#[derive(Clone)]
pub(crate) struct SessionAware {
    client: reqwest::Client,
    oauth: Option<Arc<OAuthSession>>,
    /// A sign-in the handshake asked for and did not get: the handshake's next request
    /// (`initialize` after `server/discover`) is answered with it instead of asking again.
    handshake_refused: Arc<std::sync::Mutex<Option<OAuthError>>>,
}

/// An OAuth failure as the transport's error (its message says what to do).
fn oauth_error(e: OAuthError) -> StreamableHttpError<reqwest::Error> {
    StreamableHttpError::Auth(AuthError::AuthorizationFailed(e.to_string()))
}

/// The requests a person waits for, which may ask them to sign in: the handshake, and a call,
/// a read or a prompt. A background request (a tool list refreshed, a ping) that meets a 401 is
/// answered with the sign-in's message instead (a failed refresh keeps the previous list), so
/// the person is never asked for something they did not do, nor twice in one turn.
fn asks_person(message: &ClientJsonRpcMessage) -> bool {
    let method = method_of(message);
    matches!(
        method.as_deref(),
        Some(
            "server/discover"
                | "initialize"
                | "tools/call"
                | "resources/read"
                | "prompts/get"
                | "completion/complete"
        )
    )
}

/// The method of a request; `None` for anything else.
fn method_of(message: &ClientJsonRpcMessage) -> Option<String> {
    match message {
        ClientJsonRpcMessage::Request(_) => serde_json::to_value(message)
            .ok()
            .and_then(|v| v["method"].as_str().map(str::to_owned)),
        _ => None,
    }
}

/// Whether `message` is a handshake request (`server/discover`, `initialize`).
fn is_handshake(message: &ClientJsonRpcMessage) -> bool {
    matches!(
        method_of(message).as_deref(),
        Some("server/discover" | "initialize")
    )
}

/// A copy of `e` when it is a sign-in that did not complete (`SignIn`, `SignInAgain`).
fn sign_in_refusal(e: &OAuthError) -> Option<OAuthError> {
    match e {
        OAuthError::SignIn(why) => Some(OAuthError::SignIn(why.clone())),
        OAuthError::SignInAgain { server, reason } => Some(OAuthError::SignInAgain {
            server: server.clone(),
            reason: reason.clone(),
        }),
        _ => None,
    }
}

/// A sign-in that did not complete (declined, timed out, no longer accepted and not renewed)
/// answers the request it held with a JSON-RPC error carrying the message, instead of failing
/// the transport: the connection and its MCP session stay, the caller (the model) reads what to
/// do, and the next request asks the person again. A notification the server refuses for want
/// of a sign-in is dropped (logged). Other OAuth failures fail the transport.
fn sign_in_answer(
    e: OAuthError,
    message: &ClientJsonRpcMessage,
    session_id: Option<&Arc<str>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
    match (&e, message) {
        (
            OAuthError::SignIn(_) | OAuthError::SignInAgain { .. },
            ClientJsonRpcMessage::Request(request),
        ) => {
            tracing::info!(error = %e, "an MCP request is answered with the sign-in's failure");
            let error = rmcp::model::ErrorData::new(
                rmcp::model::ErrorCode::INVALID_REQUEST,
                e.to_string(),
                None,
            );
            Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::Error(rmcp::model::JsonRpcError::new(
                    Some(request.id.clone()),
                    error,
                )),
                session_id.map(|s| s.to_string()),
            ))
        }
        (OAuthError::SignIn(_) | OAuthError::SignInAgain { .. }, _) => {
            tracing::info!(error = %e, "a notification or response to the MCP server is dropped: the server needs a sign-in");
            Ok(StreamableHttpPostResponse::Accepted)
        }
        _ => Err(oauth_error(e)),
    }
}

impl SessionAware {
    /// The token to send: the caller's, else the OAuth session's (none when it has none yet).
    async fn token(
        &self,
        auth_header: Option<String>,
    ) -> Result<Option<String>, StreamableHttpError<reqwest::Error>> {
        match &self.oauth {
            Some(oauth) => oauth.access_token().await.map_err(oauth_error),
            None => Ok(auth_header),
        }
    }

    /// One POST, with the expired-session repair.
    async fn post_once(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let on_session = session_id.is_some();
        let is_request = matches!(message, ClientJsonRpcMessage::Request(_));
        let response = self
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        if let Some(why) = expired_session_error(on_session, is_request, &response) {
            tracing::info!(
                "MCP server answered a request on our session with an id-less error ({why}); taking the session as expired"
            );
            return Err(StreamableHttpError::SessionExpired);
        }
        Ok(response)
    }
}

impl StreamableHttpClient for SessionAware {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let Some(oauth) = &self.oauth else {
            return self
                .post_once(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await;
        };
        let mut token = oauth.access_token().await.map_err(oauth_error)?;
        let mut authorizations = Authorizations::new(oauth.max_authorizations());
        let mut refreshed = false;
        loop {
            let sent = token.clone();
            match self
                .post_once(
                    uri.clone(),
                    message.clone(),
                    session_id.clone(),
                    sent.clone(),
                    custom_headers.clone(),
                    limits,
                )
                .await
            {
                Err(StreamableHttpError::AuthRequired(challenge)) => {
                    // A token the server turned away before its time: one refresh first.
                    if let (Some(refused), false) = (&sent, refreshed) {
                        refreshed = true;
                        match oauth.replace_refused(refused).await {
                            Ok(Some(fresh)) => {
                                token = Some(fresh);
                                continue;
                            }
                            Ok(None) => {}
                            Err(e) => tracing::info!(
                                "refreshing a refused token failed ({e}); signing in again"
                            ),
                        }
                    }
                    authorizations.another("").map_err(oauth_error)?;
                    if !asks_person(&message) {
                        return sign_in_answer(
                            OAuthError::SignIn(
                                "the server needs the person to sign in; they are asked at the next call of its tools, not for a background request".into(),
                            ),
                            &message,
                            session_id.as_ref(),
                        );
                    }
                    let refused_before = is_handshake(&message)
                        .then(|| self.handshake_refused.lock().ok()?.take())
                        .flatten();
                    if let Some(refused) = refused_before {
                        return sign_in_answer(refused, &message, session_id.as_ref());
                    }
                    match oauth
                        .authorize(&challenge.www_authenticate_header, false, sent.as_deref())
                        .await
                    {
                        Ok(fresh) => token = Some(fresh),
                        Err(e) => {
                            if is_handshake(&message)
                                && let Some(copy) = sign_in_refusal(&e)
                                && let Ok(mut slot) = self.handshake_refused.lock()
                            {
                                *slot = Some(copy);
                            }
                            return sign_in_answer(e, &message, session_id.as_ref());
                        }
                    }
                }
                Err(StreamableHttpError::InsufficientScope(challenge)) => {
                    authorizations
                        .another(challenge.required_scope.as_deref().unwrap_or(""))
                        .map_err(oauth_error)?;
                    match oauth
                        .authorize(&challenge.www_authenticate_header, true, sent.as_deref())
                        .await
                    {
                        Ok(fresh) => token = Some(fresh),
                        Err(e) => return sign_in_answer(e, &message, session_id.as_ref()),
                    }
                }
                other => return other,
            }
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        let auth_header = self.token(auth_header).await?;
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<reqwest::Error>> {
        let auth_header = self.token(auth_header).await?;
        self.client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<reqwest::Error>> {
        let auth_header = self.token(auth_header).await?;
        self.client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// The message of `response` when it is a server's way of saying "I do not know that session"
/// without HTTP 404: a JSON-RPC error with no `id`, to a request (not a notification or a
/// reply) that carried a session, whose message is about the session ("No valid session ID
/// provided", "Session not found"). Anything else is left to the caller as the server's answer.
fn expired_session_error(
    on_session: bool,
    is_request: bool,
    response: &StreamableHttpPostResponse,
) -> Option<&str> {
    let StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _) = response else {
        return None;
    };
    let about_session = e.error.message.to_ascii_lowercase().contains("session");
    (on_session && is_request && e.id.is_none() && about_session).then_some(&*e.error.message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn answer(v: serde_json::Value) -> StreamableHttpPostResponse {
        StreamableHttpPostResponse::Json(serde_json::from_value(v).unwrap(), None)
    }

    #[test]
    fn only_an_id_less_session_error_to_a_request_on_a_session_is_an_expired_session() {
        let no_session = json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"}});
        let not_found = json!({"jsonrpc": "2.0",
            "error": {"code": -32600, "message": "Session not found"}});
        let internal = json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32603, "message": "Internal error"}});
        let with_id = json!({"jsonrpc": "2.0", "id": 7,
            "error": {"code": -32000, "message": "No valid session ID provided"}});
        let result = json!({"jsonrpc": "2.0", "id": 7, "result": {}});
        // (on a session, a request, the answer, taken as expired)
        let table = [
            (true, true, &no_session, true),
            (true, true, &not_found, true),
            (false, true, &no_session, false),
            (true, false, &no_session, false),
            (true, true, &internal, false),
            (true, true, &with_id, false),
            (true, true, &result, false),
        ];
        for (on_session, is_request, v, expired) in table {
            assert_eq!(
                expired_session_error(on_session, is_request, &answer(v.clone())).is_some(),
                expired,
                "on_session={on_session} is_request={is_request} {v}"
            );
        }
        assert!(expired_session_error(true, true, &StreamableHttpPostResponse::Accepted).is_none());
    }
}
