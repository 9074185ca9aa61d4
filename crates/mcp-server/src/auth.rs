//! The server as an OAuth 2.1 protected resource (RFC 9728, as the MCP authorization spec
//! asks): its metadata document, and bearer tokens checked before any MCP message is read.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::json;

/// Who a verified bearer token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedToken {
    /// The token's subject (`sub`).
    pub subject: String,
}

impl VerifiedToken {
    /// A token verified for `subject`.
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
        }
    }
}

/// Checks a request's bearer token (a JWT against the authorization server's JWKS, an
/// introspection endpoint, …). The chat panel's `JwtBearer` fits behind it.
#[async_trait::async_trait]
pub trait TokenVerifier: Send + Sync + 'static {
    /// The token's subject, or the sentence to send back in the `401`'s
    /// `error_description` (no secrets).
    async fn verify(&self, headers: &HeaderMap) -> Result<VerifiedToken, String>;
}

/// The server's protected-resource metadata and the verifier its tokens must pass.
#[derive(Clone)]
pub struct ProtectedResource {
    resource: String,
    authorization_servers: Vec<String>,
    scopes_supported: Vec<String>,
    verifier: Arc<dyn TokenVerifier>,
}

impl std::fmt::Debug for ProtectedResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectedResource")
            .field("resource", &self.resource)
            .field("authorization_servers", &self.authorization_servers)
            .finish_non_exhaustive()
    }
}

impl ProtectedResource {
    /// The MCP endpoint's public URL `resource` (what clients send as the `resource`
    /// parameter and what tokens' audience names), the authorization servers that issue its
    /// tokens, and the verifier.
    pub fn new(
        resource: impl Into<String>,
        authorization_servers: impl IntoIterator<Item = impl Into<String>>,
        verifier: Arc<dyn TokenVerifier>,
    ) -> Self {
        Self {
            resource: resource.into(),
            authorization_servers: authorization_servers.into_iter().map(Into::into).collect(),
            scopes_supported: Vec::new(),
            verifier,
        }
    }

    /// The scopes the metadata lists (`scopes_supported`).
    pub fn with_scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.scopes_supported = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// The metadata document.
    pub(crate) fn metadata(&self) -> serde_json::Value {
        let mut doc = json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        if !self.scopes_supported.is_empty() {
            doc["scopes_supported"] = json!(self.scopes_supported);
        }
        doc
    }

    /// Where the metadata is served: `/.well-known/oauth-protected-resource` followed by the
    /// resource URL's path (RFC 9728 §3.1), and the URL of that.
    pub(crate) fn metadata_path_and_url(&self) -> (String, String) {
        let (origin, path) = match url::Url::parse(&self.resource) {
            Ok(u) => (
                u.origin().ascii_serialization(),
                u.path().trim_end_matches('/').to_owned(),
            ),
            Err(_) => (String::new(), String::new()),
        };
        let well_known = format!("/.well-known/oauth-protected-resource{path}");
        let url = format!("{origin}{well_known}");
        (well_known, url)
    }
}

/// The middleware in front of the MCP endpoint: a request without a valid token gets `401`
/// and `WWW-Authenticate: Bearer resource_metadata="…"`.
pub(crate) async fn require_token(
    State(pr): State<Arc<ProtectedResource>>,
    request: Request,
    next: Next,
) -> Response {
    match pr.verifier.verify(request.headers()).await {
        Ok(token) => {
            tracing::debug!(subject = %token.subject, "MCP request authorized");
            let mut request = request;
            request.extensions_mut().insert(token);
            next.run(request).await
        }
        Err(why) => {
            let (_, url) = pr.metadata_path_and_url();
            let had_token = request.headers().contains_key(header::AUTHORIZATION);
            let why = why.replace(['"', '\\'], "'");
            let challenge = if had_token {
                format!(
                    "Bearer resource_metadata=\"{url}\", error=\"invalid_token\", error_description=\"{why}\""
                )
            } else {
                format!("Bearer resource_metadata=\"{url}\"")
            };
            let mut response = (StatusCode::UNAUTHORIZED, why).into_response();
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            response
        }
    }
}

/// The chat panel's JWKS verifier as the server's: the token's `sub` is the subject; its
/// refusal (expired, unknown key, wrong audience, …) is the `401`'s description. Configure its
/// audience as the server's resource URL ([`ProtectedResource::new`]).
#[cfg(feature = "jwt")]
#[async_trait::async_trait]
impl TokenVerifier for toolwright_chat_panel::identity::JwtBearer {
    async fn verify(&self, headers: &HeaderMap) -> Result<VerifiedToken, String> {
        use toolwright_chat_panel::identity::{Authenticator, RequestHead};
        self.authenticate(RequestHead {
            headers,
            peer: None,
        })
        .await
        .map(|p| VerifiedToken::new(p.id()))
        .map_err(|r| r.to_string())
    }
}
