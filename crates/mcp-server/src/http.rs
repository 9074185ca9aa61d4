//! Streamable HTTP: the server as an axum router, stateless (the default) or with sessions.

use std::sync::Arc;

use axum::Json;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::auth::{ProtectedResource, require_token};
use crate::error::ServeError;
use crate::server::McpServer;

/// How long a client waits before it reconnects to a closed SSE stream (stateful mode).
const SSE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// How the HTTP endpoint is offered: where, to which `Host` names and `Origin`s, and behind
/// which authorization.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    path: String,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    protected: Option<ProtectedResource>,
    stateful: bool,
}

impl Default for HttpOptions {
    /// At `/mcp`, for the loopback host names (`localhost`, `127.0.0.1`, `::1`) and pages of
    /// loopback origins (any port): a page of any other origin gets `403`. No authorization.
    fn default() -> Self {
        Self {
            path: "/mcp".into(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: vec![
                "http://localhost:*".into(),
                "http://127.0.0.1:*".into(),
                "http://[::1]:*".into(),
            ],
            protected: None,
            stateful: false,
        }
    }
}

impl HttpOptions {
    /// The endpoint's path (default `/mcp`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// The `Host` names (or `host:port`) the server answers to, replacing the loopback
    /// default: the names a load balancer or a person uses to reach it. A request for any
    /// other host gets `403` (DNS rebinding).
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// The web origins (`https://app.example.com:443`, `http://localhost:*`) whose pages may
    /// call the server, replacing the loopback default; empty: no page at all. A request with
    /// any other `Origin` gets `403`; a request without one (a program, not a browser) is
    /// served.
    pub fn allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// Keep a session per client (`Mcp-Session-Id`) in this process instead of serving
    /// stateless (the default). A session lets a tool ask the client mid-call (sampling,
    /// elicitation, an approval over protocols before 2026-07-28), lets a client watch
    /// resources (`resources/subscribe`) and keep a log level, and streams answers as SSE
    /// with event ids (a priming event, a `retry` interval) that a client resumes with
    /// `Last-Event-ID`. The cost: every request of a session must reach the process that
    /// holds it (sticky routing behind a load balancer), and a restart ends the sessions.
    pub fn stateful(mut self, stateful: bool) -> Self {
        self.stateful = stateful;
        self
    }

    /// Serve as an OAuth protected resource: its metadata document, and a valid bearer token
    /// on every MCP request.
    pub fn protected(mut self, resource: ProtectedResource) -> Self {
        self.protected = Some(resource);
        self
    }
}

impl McpServer {
    /// The server as an axum router: the MCP endpoint at the options' path (Streamable HTTP;
    /// stateless with JSON answers unless a call streams, or with sessions and SSE answers when
    /// [`HttpOptions::stateful`]) and, when protected, the metadata document.
    pub fn router(&self, options: HttpOptions) -> Result<axum::Router, ServeError> {
        if !options.path.starts_with('/') {
            return Err(ServeError::Config(format!(
                "the HTTP path {:?} must start with `/`",
                options.path
            )));
        }
        if options.allowed_hosts.is_empty() {
            return Err(ServeError::Config(
                "name at least one allowed host: without a Host check a web page could reach the server by DNS rebinding".into(),
            ));
        }
        let base = StreamableHttpServerConfig::default()
            .with_allowed_hosts(options.allowed_hosts)
            .with_allowed_origins(options.allowed_origins)
            .enforce_origin_validation();
        let server = self.clone();
        let path = options.path.clone();
        let endpoint = if options.stateful {
            let config = base
                .with_legacy_session_mode(true)
                .with_json_response(false)
                .with_sse_retry(Some(SSE_RETRY));
            let service = StreamableHttpService::new(
                move || Ok(server.for_connection(true)),
                Arc::new(LocalSessionManager::default()),
                config,
            );
            axum::Router::new().route_service(&path, service)
        } else {
            let config = base
                .with_legacy_session_mode(false)
                .with_json_response(true)
                .with_sse_keep_alive(None);
            let service = StreamableHttpService::new(
                move || Ok(server.for_connection(false)),
                Arc::new(NeverSessionManager::default()),
                config,
            );
            axum::Router::new().route_service(&path, service)
        };
        let mut mcp = endpoint.layer(axum::middleware::from_fn(parse_errors_as_json_rpc));
        if let Some(pr) = options.protected {
            let pr = Arc::new(pr);
            mcp = mcp.layer(axum::middleware::from_fn_with_state(
                Arc::clone(&pr),
                require_token,
            ));
            let (path, _) = pr.metadata_path_and_url();
            let doc = pr.metadata();
            let serve = move || {
                let doc = doc.clone();
                async move { Json(doc) }
            };
            let mut meta = axum::Router::new().route(&path, get(serve.clone()));
            if path != "/.well-known/oauth-protected-resource" {
                meta = meta.route("/.well-known/oauth-protected-resource", get(serve));
            }
            mcp = mcp.merge(meta);
        }
        Ok(mcp)
    }
}

/// rmcp answers a JSON body it cannot read with `415` and a line of text; a JSON-RPC client
/// expects a parse error (`-32700`) it can read. A `415` to a request that did say
/// `application/json` is that case: answered `400` with the JSON-RPC error, the reason kept.
async fn parse_errors_as_json_rpc(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let said_json = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let response = next.run(request).await;
    if !said_json || response.status() != http::StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap_or_default();
    let reason = String::from_utf8_lossy(&body);
    tracing::debug!(%reason, "MCP request body is not JSON-RPC");
    (
        http::StatusCode::BAD_REQUEST,
        Json(serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32700, "message": format!("Parse error: {reason}")}
        })),
    )
        .into_response()
}
