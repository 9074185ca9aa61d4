//! OAuth 2.1 for remote MCP servers, as the MCP authorization spec (2025-11-25) says, built on
//! rmcp's `auth` module (discovery, registration, PKCE, the code and refresh exchanges).
//!
//! A remote service configured with [`OAuthConfig`] ([`crate::ServiceConfig::with_oauth`]) sends
//! its first request without a token; the server's 401 and its `WWW-Authenticate` challenge
//! start the authorization:
//!
//! 1. **Discovery** (rmcp): the protected-resource metadata the challenge names (else the
//!    well-known paths, path-based first), then the authorization server's metadata (RFC 8414
//!    and OpenID Connect well-known paths, path insertion, and the 2025-03-26 fallbacks). The
//!    protected-resource metadata must name this server (`resource`), and the authorization
//!    server's endpoints must all be on the origin of its issuer ([`OAuthError::CrossOrigin`]).
//! 2. **The client**: a pre-registered one ([`OAuthConfig::with_client`]) first, else a client
//!    ID metadata document ([`OAuthConfig::with_client_metadata_url`]) when the server supports
//!    them, else dynamic registration. The registration (and its secret) is kept in the
//!    [`CredentialStore`] with the tokens, so a refresh or a step-up reuses it.
//! 3. **The person**: the authorization URL (PKCE S256, `resource`, the scopes the challenge
//!    names, else the resource's `scopes_supported`, else none) goes to the application's
//!    [`SignIn`]; the browser comes back to a loopback listener on 127.0.0.1
//!    ([`OAuthConfig::with_redirect_uri`] refuses any other host), and the code is exchanged
//!    (with `resource`) at the token endpoint with the method the server supports (none,
//!    `client_secret_basic`, `client_secret_post`).
//! 4. **Use**: every request carries the token; a token near its expiry is refreshed (with
//!    `resource`) by exactly one caller per credential, the others wait for its result
//!    ([`CredentialStore::compare_and_set`]); a 403 `insufficient_scope` asks for the union of
//!    the granted and the challenged scopes, at most [`OAuthConfig::with_max_authorizations`]
//!    authorizations for one request ([`OAuthError::StepUpLimit`]).
//!
//! A token endpoint that answers anything but JSON is refused ([`OAuthError::NotJson`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oauth2::TokenResponse;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest,
    AuthorizationSession, OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRequest,
    StoredCredentials,
};
use rmcp::transport::{
    CredentialStore as RmcpCredentialStore, auth::OAuthClientConfig, auth::WWWAuthenticateParams,
};

mod config;
mod pending;
mod store;
use config::SignInVia;
use config::loopback_redirect;
pub use config::{DEFAULT_REDIRECT_URI, OAuthConfig, RedirectSignIn, SignIn, SignInRequest};
pub use pending::{CallbackError, complete_sign_in};
pub use store::{
    CredentialKey, CredentialRecord, CredentialStore, InMemoryCredentialStore, Registration,
    SessionCredentialStore, Versioned,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why an authorization could not be had; each says what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// The loopback redirect is not on this machine.
    #[error(
        "the OAuth redirect {uri} is not a loopback address: the sign-in listener only binds \
         127.0.0.1; use http://127.0.0.1:PORT/callback (PORT 0 picks a free one)"
    )]
    RedirectNotLoopback {
        /// The refused URI.
        uri: String,
    },
    /// Authorization-server metadata names an endpoint on another origin than its issuer.
    #[error(
        "the authorization server's metadata puts its {field} at {url}, not on its own origin \
         {origin}: refused (a mix-up or a tampered document); ask the server's operator to \
         fix its metadata"
    )]
    CrossOrigin {
        /// The metadata field.
        field: &'static str,
        /// The URL it gave.
        url: String,
        /// The issuer's origin.
        origin: String,
    },
    /// The token (or registration) endpoint answered something that is not JSON.
    #[error(
        "the authorization server's {url} answered {content_type}, not JSON: it is not an OAuth \
         endpoint (a login page or a proxy in between?); check the server's metadata"
    )]
    NotJson {
        /// The endpoint.
        url: String,
        /// What it answered.
        content_type: String,
    },
    /// Authorization after authorization still left the request without the scope it needs.
    #[error(
        "the server still refuses the request after {attempts} authorizations (insufficient \
         scope {scope:?}); not asking the person again — the account may lack that permission"
    )]
    StepUpLimit {
        /// Authorizations made for this request.
        attempts: u32,
        /// The scope the server asked for last.
        scope: String,
    },
    /// The application's sign-in step failed or the person did not come back in time.
    #[error("sign-in did not complete: {0}")]
    SignIn(String),
    /// The person had signed in, the authorization server no longer accepts it (the refresh
    /// token was revoked or expired), and signing in again did not complete.
    #[error(
        "the sign-in to {server} is no longer accepted (revoked, or expired at its authorization \
         server) and signing in again did not complete: {reason}; the person has to sign in \
         again to use this server's tools"
    )]
    SignInAgain {
        /// The MCP server.
        server: String,
        /// Why signing in again did not complete.
        reason: String,
    },
    /// The credential store failed.
    #[error("the OAuth credential store failed: {0}; check its backend")]
    Store(String),
    /// Discovery, registration or a token exchange failed (rmcp's reason).
    #[error("OAuth with the server failed: {0}")]
    Protocol(String),
}

impl From<AuthError> for OAuthError {
    fn from(e: AuthError) -> Self {
        Self::Protocol(e.to_string())
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long before its expiry a token is refreshed.
const REFRESH_MARGIN_SECS: u64 = 30;
/// How long one caller's refresh may hold the others.
const REFRESH_LEASE_SECS: u64 = 30;

/// The origin (`scheme://host:port`) of `url`.
fn origin(url: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()
        .map(|u| u.origin().ascii_serialization())
}

/// Refuses metadata whose endpoints leave the issuer's origin.
fn check_origins(metadata: &AuthorizationMetadata) -> Result<(), OAuthError> {
    let Some(expected) = metadata
        .issuer
        .as_deref()
        .or(Some(metadata.authorization_endpoint.as_str()))
        .and_then(origin)
    else {
        return Err(OAuthError::Protocol(format!(
            "the authorization endpoint {} is not a URL",
            metadata.authorization_endpoint
        )));
    };
    let endpoints = [
        (
            "authorization_endpoint",
            Some(&metadata.authorization_endpoint),
        ),
        ("token_endpoint", Some(&metadata.token_endpoint)),
        (
            "registration_endpoint",
            metadata.registration_endpoint.as_ref(),
        ),
    ];
    for (field, url) in endpoints {
        if let Some(url) = url
            && origin(url).as_deref() != Some(expected.as_str())
        {
            return Err(OAuthError::CrossOrigin {
                field,
                url: url.clone(),
                origin: expected,
            });
        }
    }
    Ok(())
}

/// rmcp's OAuth HTTP client, refusing a POST answered with something other than JSON (a token
/// or registration endpoint that is really a web page) and remembering it.
struct JsonOnly {
    inner: Arc<dyn OAuthHttpClient>,
    refused: Arc<Mutex<Option<OAuthError>>>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0} answered {1}, not JSON")]
struct NotJsonAnswer(String, String);

impl OAuthHttpClient for JsonOnly {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let post = request.request.method() == http::Method::POST;
            let url = request.request.uri().to_string();
            let response = self.inner.execute(request).await?;
            if post {
                let content_type = response
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("no content type")
                    .to_owned();
                let json = content_type
                    .split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
                if !json && !response.body().is_empty() {
                    if let Ok(mut slot) = self.refused.lock() {
                        *slot = Some(OAuthError::NotJson {
                            url: url.clone(),
                            content_type: content_type.clone(),
                        });
                    }
                    return Err(Box::new(NotJsonAnswer(url, content_type)) as _);
                }
            }
            Ok(response)
        })
    }
}

/// rmcp's view of one [`CredentialKey`] in a [`CredentialStore`]: its code exchange and refresh
/// save through it, keeping the registration and clearing the refresh lease.
struct StoreView {
    store: Arc<dyn CredentialStore>,
    key: CredentialKey,
}

#[async_trait::async_trait]
impl RmcpCredentialStore for StoreView {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let found = self
            .store
            .load(&self.key)
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
        Ok(found.and_then(|v| {
            let client_id = v.record.registration.as_ref()?.client_id.clone();
            Some(StoredCredentials::new(
                client_id,
                v.record.token,
                v.record.granted_scopes,
                v.record.received_at,
            ))
        }))
    }
    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        loop {
            let found = self
                .store
                .load(&self.key)
                .await
                .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
            let (mut record, version) = found.map_or((CredentialRecord::default(), None), |v| {
                (v.record, Some(v.version))
            });
            record.token = credentials.token_response.clone();
            record.received_at = credentials.token_received_at;
            record.granted_scopes = credentials.granted_scopes.clone();
            record.refreshing_until = None;
            if self
                .store
                .compare_and_set(&self.key, version, record)
                .await
                .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
            {
                return Ok(());
            }
        }
    }
    async fn clear(&self) -> Result<(), AuthError> {
        change_record(self.store.as_ref(), &self.key, forget_token)
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))
    }
}

/// Changes `key`'s stored record with `change`, by compare-and-set (read again and changed
/// again when another writer came first); nothing when there is no record.
async fn change_record(
    store: &dyn CredentialStore,
    key: &CredentialKey,
    change: fn(&mut CredentialRecord),
) -> Result<(), OAuthError> {
    loop {
        let Some(v) = store.load(key).await? else {
            return Ok(());
        };
        let mut record = v.record;
        change(&mut record);
        if store.compare_and_set(key, Some(v.version), record).await? {
            return Ok(());
        }
    }
}

/// The token gone (the registration and metadata kept) and no refresh lease.
fn forget_token(record: &mut CredentialRecord) {
    record.token = None;
    record.refreshing_until = None;
}

/// One remote server's OAuth for one principal: tokens from the store, refreshed once across
/// callers, and authorization when the server asks for it.
pub struct OAuthSession {
    config: OAuthConfig,
    server: String,
    key: CredentialKey,
    refused: Arc<Mutex<Option<OAuthError>>>,
    /// One authorization at a time in this process.
    authorizing: tokio::sync::Mutex<()>,
    /// The authorization server refused the refresh token: the next sign-in is a sign-in again.
    refused_refresh: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for OAuthSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSession")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl OAuthSession {
    /// The session of `config` for the MCP server at `server`.
    pub fn new(config: OAuthConfig, server: impl Into<String>) -> Self {
        let server = server.into();
        Self {
            key: CredentialKey {
                principal: config.principal.clone(),
                server: server.clone(),
            },
            config,
            server,
            refused: Arc::new(Mutex::new(None)),
            authorizing: tokio::sync::Mutex::new(()),
            refused_refresh: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// At most this many authorizations for one request.
    pub(crate) fn max_authorizations(&self) -> u32 {
        self.config.max_authorizations
    }

    /// The key its credential is stored under.
    pub fn key(&self) -> &CredentialKey {
        &self.key
    }

    /// A manager for this server whose HTTP client refuses non-JSON answers and whose store is
    /// ours.
    async fn manager(&self) -> Result<AuthorizationManager, OAuthError> {
        crate::tls::ensure_crypto_provider();
        let inner = rmcp::transport::auth::default_oauth_http_client()?;
        let client = JsonOnly {
            inner: Arc::new(inner),
            refused: self.refused.clone(),
        };
        let mut manager = AuthorizationManager::new_with_oauth_http_client(
            self.server.as_str(),
            Arc::new(client),
        )
        .await?;
        manager.set_credential_store(StoreView {
            store: self.config.store.clone(),
            key: self.key.clone(),
        });
        Ok(manager)
    }

    /// An rmcp error, or the typed refusal the HTTP client recorded while it happened.
    fn protocol_error(&self, e: AuthError) -> OAuthError {
        match self.refused.lock().ok().and_then(|mut s| s.take()) {
            Some(refused) => refused,
            None => e.into(),
        }
    }

    /// A usable access token: the stored one, or a refreshed one (exactly one caller across
    /// every session sharing the store refreshes; the others wait for its result); `None`
    /// when the person has to authorize.
    pub async fn access_token(&self) -> Result<Option<String>, OAuthError> {
        self.token_replacing(None).await
    }

    /// A token to use instead of `refused`, which the server turned away (401) although it had
    /// not expired here (revoked, or the clocks disagree): a refresh, done once across callers
    /// like an expiry's; `None` when there is nothing to refresh with. A token another caller
    /// already put in its place is returned as it is.
    pub async fn replace_refused(&self, refused: &str) -> Result<Option<String>, OAuthError> {
        self.token_replacing(Some(refused)).await
    }

    async fn token_replacing(&self, refused: Option<&str>) -> Result<Option<String>, OAuthError> {
        let store = &self.config.store;
        for _ in 0..2000 {
            let Some(current) = store.load(&self.key).await? else {
                return Ok(None);
            };
            let record = &current.record;
            let Some(token) = &record.token else {
                return Ok(None);
            };
            let expires_at = match (token.expires_in(), record.received_at) {
                (Some(lifetime), Some(at)) => Some(at + lifetime.as_secs()),
                _ => None,
            };
            let t = now();
            let access = token.access_token().secret();
            if expires_at.is_none_or(|e| e > t + REFRESH_MARGIN_SECS)
                && refused != Some(access.as_str())
            {
                return Ok(Some(access.clone()));
            }
            if token.refresh_token().is_none() || record.registration.is_none() {
                return Ok(None);
            }
            if record.refreshing_until.is_some_and(|until| until > t) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            // Claim the refresh: only the caller whose compare-and-set lands refreshes.
            let mut claimed = record.clone();
            claimed.refreshing_until = Some(t + REFRESH_LEASE_SECS);
            if !store
                .compare_and_set(&self.key, Some(current.version), claimed)
                .await?
            {
                continue;
            }
            return match self.refresh(record).await {
                Ok(Some(token)) => Ok(Some(token)),
                // Refused for good (revoked or expired): the token goes, the registration
                // stays, and the person is asked to sign in again.
                Ok(None) => {
                    self.drop_token().await?;
                    Ok(None)
                }
                Err(e) => {
                    self.release_lease().await?;
                    Err(e)
                }
            };
        }
        Err(OAuthError::Store(
            "another worker has held the refresh of this credential too long".into(),
        ))
    }

    /// Refreshes with the stored registration and metadata (saved by rmcp through
    /// [`StoreView`], which also ends the lease); `None` when the authorization server refuses
    /// the refresh token for good (`invalid_grant`: revoked or expired).
    async fn refresh(&self, record: &CredentialRecord) -> Result<Option<String>, OAuthError> {
        let mut manager = self.manager().await?;
        let (Some(metadata), Some(registration)) = (&record.metadata, &record.registration) else {
            return Err(OAuthError::Protocol(
                "the stored credential has no registration or metadata to refresh with".into(),
            ));
        };
        manager.set_metadata(metadata.clone());
        let mut client = OAuthClientConfig::new(
            registration.client_id.clone(),
            self.config.redirect_uri.clone(),
        );
        if let Some(secret) = &registration.client_secret {
            client = client.with_client_secret(secret.clone());
        }
        manager.configure_client(client)?;
        match manager.refresh_token().await {
            Ok(token) => Ok(Some(token.access_token().secret().clone())),
            Err(AuthError::TokenRefreshRejected(why)) => {
                tracing::info!(server = %self.server, principal = %self.key.principal, reason = %why,
                    "the authorization server refused the refresh token; the person signs in again");
                self.refused_refresh
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err(self.protocol_error(e)),
        }
    }

    /// Forgets the token (keeping the registration and metadata) and ends the refresh lease.
    async fn drop_token(&self) -> Result<(), OAuthError> {
        change_record(self.config.store.as_ref(), &self.key, forget_token).await
    }

    /// Ends a refresh lease that did not end in a saved token.
    async fn release_lease(&self) -> Result<(), OAuthError> {
        change_record(self.config.store.as_ref(), &self.key, |r| {
            r.refreshing_until = None
        })
        .await
    }

    /// Runs the authorization the server's `challenge` (its `WWW-Authenticate`) asks for, with
    /// the granted scopes and the challenged ones when `step_up`; the new access token.
    /// `sent` is the token the refused request carried: when another caller authorized while
    /// this one waited, its token is used instead of asking the person again.
    pub async fn authorize(
        &self,
        challenge: &str,
        step_up: bool,
        sent: Option<&str>,
    ) -> Result<String, OAuthError> {
        let _one = self.authorizing.lock().await;
        if !step_up
            && let Some(token) = self.access_token().await?
            && Some(token.as_str()) != sent
        {
            return Ok(token);
        }
        let manager = self.manager().await?;
        let metadata = match manager
            .resolve_metadata_from_challenge(Some(challenge))
            .await
        {
            Ok(resolution) => resolution.metadata,
            Err(AuthError::AuthorizationServerMismatch {
                expected_issuer,
                received_issuer,
            }) => {
                self.legacy_metadata(&expected_issuer, &received_issuer)
                    .await?
            }
            Err(e) => return Err(self.protocol_error(e)),
        };
        check_origins(&metadata)?;
        let mut manager = manager;
        manager.set_metadata(metadata.clone());

        let stored = self.config.store.load(&self.key).await?;
        // A registration is reused for the same authorization server only.
        let registration = self.config.client.clone().or_else(|| {
            stored.as_ref().and_then(|v| {
                let same = v.record.metadata.as_ref().map(|m| &m.token_endpoint)
                    == Some(&metadata.token_endpoint);
                if same {
                    v.record.registration.clone()
                } else {
                    None
                }
            })
        });

        // Where the browser comes back: the bridge's loopback listener, or the application.
        let (back, redirect_uri) = match &self.config.sign_in {
            SignInVia::Loopback(sign_in) => {
                let (port, path) = loopback_redirect(&self.config.redirect_uri)?;
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                    .await
                    .map_err(|e| {
                        OAuthError::SignIn(format!("cannot listen on 127.0.0.1:{port}: {e}"))
                    })?;
                let bound = listener
                    .local_addr()
                    .map_err(|e| OAuthError::SignIn(e.to_string()))?
                    .port();
                let uri = format!("http://127.0.0.1:{bound}{path}");
                (Back::Listener(sign_in.clone(), listener, bound, path), uri)
            }
            SignInVia::Redirect(r) => (Back::Application(r.clone()), r.redirect_uri()),
        };

        let granted = stored
            .as_ref()
            .map(|v| v.record.granted_scopes.clone())
            .unwrap_or_default();
        let scopes: Option<Vec<String>> = if !self.config.scopes.is_empty() {
            Some(self.config.scopes.clone())
        } else if step_up {
            let params = WWWAuthenticateParams::parse(challenge, &url_of(&self.server)?);
            let mut scopes = granted;
            for s in params.scope.as_deref().unwrap_or("").split_whitespace() {
                if !scopes.iter().any(|g| g == s) {
                    scopes.push(s.to_owned());
                }
            }
            Some(scopes)
        } else {
            None
        };

        // The client: pre-registered (configured, or registered before with this server),
        // else a metadata document where the server takes them, else dynamic registration
        // here (rather than inside rmcp) so that its secret is kept.
        let cimd = self.config.client_metadata_url.clone().filter(|_| {
            metadata
                .additional_fields
                .get("client_id_metadata_document_supported")
                .and_then(serde_json::Value::as_bool)
                == Some(true)
        });
        let registration = match (registration, &cimd) {
            (Some(r), _) => Some(r),
            (None, Some(_)) => None,
            (None, None) => {
                let wanted: Vec<&str> = scopes.iter().flatten().map(String::as_str).collect();
                let registered = manager
                    .register_client(&self.config.client_name, &redirect_uri, &wanted)
                    .await
                    .map_err(|e| self.protocol_error(e))?;
                Some(Registration {
                    client_id: registered.client_id,
                    client_secret: registered.client_secret,
                })
            }
        };

        let mut request = AuthorizationRequest::new(redirect_uri.clone())
            .with_client_name(self.config.client_name.clone())
            .with_challenge(challenge);
        match (&registration, cimd) {
            (Some(r), _) => {
                request = request.with_preregistered_client(r.client_id.clone());
                if let Some(secret) = &r.client_secret {
                    request = request.with_client_secret(secret.clone());
                }
            }
            (None, Some(url)) => request = request.with_client_metadata_url(url),
            (None, None) => {}
        }
        request = match scopes {
            Some(scopes) => request.with_scopes(scopes),
            None => request.with_initial_scope_selection(),
        };

        // A redirect sign-in keeps rmcp's authorization state (its PKCE verifier) to write it
        // to the store, where any worker can complete it.
        let captured = pending::OneState::default();
        let mut manager = manager;
        if matches!(back, Back::Application(_)) {
            manager.set_state_store(captured.clone());
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| self.protocol_error(e))?;
        let (client_id, _) = session
            .get_credentials()
            .await
            .map_err(|e| self.protocol_error(e))?;
        let client_secret = registration
            .filter(|r| r.client_id == client_id)
            .and_then(|r| r.client_secret);
        // The registration and metadata first: the code exchange saves the token next to them.
        self.save_registration(
            Registration {
                client_id,
                client_secret,
            },
            metadata,
        )
        .await?;

        let again = self
            .refused_refresh
            .swap(false, std::sync::atomic::Ordering::Relaxed);
        let not_back = || {
            format!(
                "nobody came back to {redirect_uri} within {:?}",
                self.config.sign_in_timeout
            )
        };
        let failed = |reason: String| {
            if again {
                OAuthError::SignInAgain {
                    server: self.server.clone(),
                    reason,
                }
            } else {
                OAuthError::SignIn(reason)
            }
        };
        let callback = match back {
            Back::Listener(sign_in, listener, bound, path) => {
                sign_in
                    .sign_in(session.get_authorization_url())
                    .await
                    .map_err(failed)?;
                tokio::time::timeout(
                    self.config.sign_in_timeout,
                    wait_for_callback(&listener, bound, &path),
                )
                .await
                .map_err(|_| failed(not_back()))??
            }
            Back::Application(sign_in) => {
                let (state, stored) = captured
                    .0
                    .lock()
                    .ok()
                    .and_then(|mut s| s.take())
                    .ok_or_else(|| {
                        OAuthError::Protocol("the authorization URL was made with no state".into())
                    })?;
                let url = session.get_authorization_url().to_owned();
                let store = self.config.store.clone();
                pending::Waiting::new(
                    &self.key,
                    redirect_uri.clone(),
                    &url,
                    stored,
                    self.config.sign_in_timeout,
                )
                .save(store.as_ref(), &state)
                .await?;
                let request =
                    SignInRequest::new(self.server.clone(), self.key.principal.clone(), url)
                        .waiting_in(store.clone(), state.clone());
                let request = if again { request.again() } else { request };
                let ended = tokio::time::timeout(self.config.sign_in_timeout, async {
                    sign_in.sign_in(request.clone()).await?;
                    request.completed().await
                })
                .await;
                let outcome = match ended {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(why)) => Err(failed(why)),
                    Err(_) => Err(failed(not_back())),
                };
                pending::forget(store.as_ref(), &state).await;
                outcome?;
                return match self.access_token().await? {
                    Some(token) => Ok(token),
                    None => Err(failed(
                        "the sign-in completed but no token is stored for it".into(),
                    )),
                };
            }
        };
        let token = session
            .handle_callback_url(&callback)
            .await
            .map_err(|e| self.protocol_error(e))?;
        Ok(token.access_token().secret().clone())
    }

    /// The 2025-03-26 revision's discovery: no protected-resource metadata, the server's own
    /// origin is its authorization server, and its metadata sits at that origin's RFC 8414
    /// well-known path, though its `issuer` may name a path under it (`/oauth`). rmcp refuses
    /// that document (RFC 8414 wants the issuer to match the path it was fetched from); it is
    /// taken here only when the expected issuer is this server's origin and the received one
    /// is on that same origin, so nothing outside the server's origin can be named this way.
    async fn legacy_metadata(
        &self,
        expected_issuer: &str,
        received_issuer: &str,
    ) -> Result<AuthorizationMetadata, OAuthError> {
        let mismatch = || {
            OAuthError::Protocol(format!(
                "the authorization server's metadata names the issuer {received_issuer}, not \
                 {expected_issuer} where it was fetched; refused (RFC 8414)"
            ))
        };
        let server_origin = origin(&self.server).ok_or_else(mismatch)?;
        if origin(expected_issuer).as_deref() != Some(server_origin.as_str())
            || origin(received_issuer).as_deref() != Some(server_origin.as_str())
            || !url_of(expected_issuer)?.path().trim_matches('/').is_empty()
        {
            return Err(mismatch());
        }
        let url = format!("{server_origin}/.well-known/oauth-authorization-server");
        crate::tls::ensure_crypto_provider();
        let response = reqwest_ring::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| OAuthError::Protocol(format!("{url}: {e}")))?;
        let body = response
            .bytes()
            .await
            .map_err(|e| OAuthError::Protocol(format!("{url}: {e}")))?;
        let metadata: AuthorizationMetadata = serde_json::from_slice(&body)
            .map_err(|e| OAuthError::Protocol(format!("{url} is not OAuth metadata: {e}")))?;
        if metadata.issuer.as_deref() != Some(received_issuer) {
            return Err(mismatch());
        }
        tracing::warn!(
            server = %self.server,
            issuer = received_issuer,
            "using the 2025-03-26 authorization metadata at the server's origin, whose issuer names a path under it"
        );
        Ok(metadata)
    }

    async fn save_registration(
        &self,
        registration: Registration,
        metadata: AuthorizationMetadata,
    ) -> Result<(), OAuthError> {
        loop {
            let found = self.config.store.load(&self.key).await?;
            let (mut record, version) = found.map_or((CredentialRecord::default(), None), |v| {
                (v.record, Some(v.version))
            });
            record.registration = Some(registration.clone());
            record.metadata = Some(metadata.clone());
            if self
                .config
                .store
                .compare_and_set(&self.key, version, record)
                .await?
            {
                return Ok(());
            }
        }
    }
}

/// Where the browser comes back to after a sign-in.
enum Back {
    /// The bridge's loopback listener (its port and path), the URL shown by the application.
    Listener(Arc<dyn SignIn>, tokio::net::TcpListener, u16, String),
    /// The application's own redirect.
    Application(Arc<dyn RedirectSignIn>),
}

fn url_of(s: &str) -> Result<url::Url, OAuthError> {
    url::Url::parse(s).map_err(|e| OAuthError::Protocol(format!("{s} is not a URL: {e}")))
}

/// Largest request the loopback listener reads.
const MAX_CALLBACK_BYTES: usize = 16 * 1024;

/// Accepts connections on the loopback listener until one asks for `path`; answers it with a
/// page saying the sign-in is done, and returns the full callback URL.
async fn wait_for_callback(
    listener: &tokio::net::TcpListener,
    port: u16,
    path: &str,
) -> Result<String, OAuthError> {
    loop {
        let (mut socket, _) = listener
            .accept()
            .await
            .map_err(|e| OAuthError::SignIn(format!("loopback listener: {e}")))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 2048];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_CALLBACK_BYTES {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let target = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or("");
        let ours = target.split('?').next() == Some(path) && target.contains('?');
        let (status, body) = if ours {
            ("200 OK", "Signed in; you can close this window.")
        } else {
            ("404 Not Found", "Not the sign-in callback.")
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = socket.write_all(answer.as_bytes()).await;
        let _ = socket.shutdown().await;
        if ours {
            return Ok(format!("http://127.0.0.1:{port}{target}"));
        }
    }
}

/// Counts authorizations for one request against the limit.
#[derive(Debug)]
pub(crate) struct Authorizations {
    max: u32,
    made: u32,
}

impl Authorizations {
    pub(crate) fn new(max: u32) -> Self {
        Self { max, made: 0 }
    }
    /// Whether another may be made; [`OAuthError::StepUpLimit`] when the limit is reached.
    pub(crate) fn another(&mut self, scope: &str) -> Result<(), OAuthError> {
        if self.made >= self.max {
            return Err(OAuthError::StepUpLimit {
                attempts: self.made,
                scope: scope.to_owned(),
            });
        }
        self.made += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_redirect_off_this_machine_is_refused() {
        for uri in [
            "http://example.com/callback",
            "https://127.0.0.1/callback",
            "http://10.0.0.1:8080/cb",
            "not a url",
        ] {
            assert!(
                matches!(
                    loopback_redirect(uri),
                    Err(OAuthError::RedirectNotLoopback { .. })
                ),
                "{uri}"
            );
        }
        assert_eq!(
            loopback_redirect("http://127.0.0.1:0/callback").unwrap(),
            (0, "/callback".to_owned())
        );
        assert!(loopback_redirect("http://localhost:8976/cb").is_ok());
        assert!(loopback_redirect("http://[::1]:8976/cb").is_ok());
    }

    #[test]
    fn metadata_whose_endpoints_leave_the_issuers_origin_is_refused() {
        let mut m: AuthorizationMetadata = serde_json::from_value(serde_json::json!({
            "issuer": "https://auth.example.com",
            "authorization_endpoint": "https://auth.example.com/authorize",
            "token_endpoint": "https://auth.example.com/token",
        }))
        .unwrap();
        assert!(check_origins(&m).is_ok());
        m.token_endpoint = "https://evil.example.net/token".into();
        match check_origins(&m) {
            Err(OAuthError::CrossOrigin { field, url, origin }) => {
                assert_eq!(field, "token_endpoint");
                assert_eq!(url, "https://evil.example.net/token");
                assert_eq!(origin, "https://auth.example.com");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_authorization_count_stops_at_the_limit() {
        let mut a = Authorizations::new(3);
        for _ in 0..3 {
            a.another("mcp:admin").unwrap();
        }
        assert!(matches!(
            a.another("mcp:admin"),
            Err(OAuthError::StepUpLimit { attempts: 3, .. })
        ));
    }
}
