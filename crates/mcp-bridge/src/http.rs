//! The Streamable HTTP transport of a remote MCP server: rmcp's client on reqwest, with the
//! entry's headers and its bearer token read from the environment variable the entry names.
//! Behind the `http` feature (on by default): without it mcp-bridge compiles no HTTP client.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use crate::config::ServiceConfig;
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
    let client = reqwest::Client::builder()
        .connect_timeout(config.startup_timeout)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    Ok(StreamableHttpClientTransport::with_client(
        SessionAware(client),
        cfg,
    ))
}

/// reqwest's client, with one repair: a server that no longer knows our session (it restarted)
/// should answer HTTP 404, which makes rmcp initialise a new session and retry the request once.
/// Some answer a JSON-RPC error with no `id` instead (server-everything: HTTP 400 "No valid
/// session ID provided"), which no request can be matched with, so the call would hang until its
/// timeout. An id-less error to a request sent on a session is taken as the expired session it
/// is.
#[derive(Clone)]
pub(crate) struct SessionAware(reqwest::Client);

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
        let on_session = session_id.is_some();
        let is_request = matches!(message, JsonRpcMessage::Request(_));
        let response = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        match response {
            StreamableHttpPostResponse::Json(JsonRpcMessage::Error(e), _)
                if on_session && is_request && e.id.is_none() =>
            {
                tracing::info!(
                    "MCP server answered a request on our session with an id-less error ({}); taking the session as expired",
                    e.error.message
                );
                Err(StreamableHttpError::SessionExpired)
            }
            other => Ok(other),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        self.0
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
        self.0
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
        self.0
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
