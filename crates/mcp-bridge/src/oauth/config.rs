//! How a remote service authorizes: [`OAuthConfig`], and the application's [`SignIn`] step.

use std::sync::Arc;
use std::time::Duration;

use super::{CredentialStore, InMemoryCredentialStore, OAuthError, Registration};

/// The application's part of the authorization-code flow: show the person the authorization
/// URL (open a browser, print it, or hand it to a panel). The browser comes back to the
/// loopback listener by itself; `sign_in` returns once the URL is on its way.
#[async_trait::async_trait]
pub trait SignIn: Send + Sync {
    /// Shows `authorization_url` to the person; an error when it cannot.
    async fn sign_in(&self, authorization_url: &str) -> Result<(), String>;
}

/// The sign-in of an application that receives the authorization server's redirect itself — a
/// web panel's route — instead of the bridge's loopback listener, for any number of principals
/// and workers ([`OAuthConfig::with_redirect_sign_in`]).
///
/// The bridge keeps the waiting sign-in (its `state` and PKCE verifier, whose it is) in the
/// [`CredentialStore`](super::CredentialStore), so the callback may land on any worker that
/// shares the store: the application's redirect route hands its query to
/// [`complete_sign_in`](super::complete_sign_in) with the identity of the person whose browser
/// brought it, which exchanges the code and stores the token; the worker whose call waits sees
/// the sign-in done ([`SignInRequest::completed`]) and the call goes on.
#[async_trait::async_trait]
pub trait RedirectSignIn: Send + Sync {
    /// The redirect URI registered with the authorization server: the application's route
    /// (`https://panel.example.com/oauth/callback`).
    fn redirect_uri(&self) -> String;
    /// Shows `request` to its principal, and returns once the sign-in ended
    /// ([`SignInRequest::completed`]) or at once (the bridge then waits for it itself); an
    /// error (what the person or the model should do next) when the person declined or
    /// nobody can be shown it. The bridge stops waiting after
    /// [`OAuthConfig::with_sign_in_timeout`].
    async fn sign_in(&self, request: SignInRequest) -> Result<(), String>;
}

/// One sign-in to show the person ([`RedirectSignIn::sign_in`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct SignInRequest {
    /// The MCP server that asks (its URL).
    pub server: String,
    /// Whose credential it is: the principal the tool call was made for
    /// ([`toolwright_core::ToolContext::principal`]), else [`OAuthConfig::with_store`]'s.
    pub principal: String,
    /// Where to send the person (with `state`, PKCE and `resource`).
    pub authorization_url: String,
    /// `true` when the person had signed in and the authorization server no longer accepts it
    /// (the refresh token was revoked or expired): tell them to sign in again.
    pub again: bool,
    /// Where the bridge keeps this sign-in while it waits, and its `state`.
    waiting: Option<(Arc<dyn CredentialStore>, String)>,
}

impl std::fmt::Debug for SignInRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInRequest")
            .field("server", &self.server)
            .field("principal", &self.principal)
            .field("authorization_url", &self.authorization_url)
            .field("again", &self.again)
            .finish_non_exhaustive()
    }
}

impl SignInRequest {
    /// A first sign-in (`again` false) of `principal` to `server` at `authorization_url`, that
    /// no store keeps ([`Self::completed`] never ends): for an application's own tests.
    pub fn new(
        server: impl Into<String>,
        principal: impl Into<String>,
        authorization_url: impl Into<String>,
    ) -> Self {
        Self {
            server: server.into(),
            principal: principal.into(),
            authorization_url: authorization_url.into(),
            again: false,
            waiting: None,
        }
    }
    /// This sign-in as a sign-in again (the previous one is no longer accepted).
    pub fn again(mut self) -> Self {
        self.again = true;
        self
    }
    /// The request for a sign-in kept in `store` under `state`.
    pub(crate) fn waiting_in(mut self, store: Arc<dyn CredentialStore>, state: String) -> Self {
        self.waiting = Some((store, state));
        self
    }
    /// Waits until this sign-in ended, whichever worker its callback landed on: `Ok` once its
    /// token is stored, else why not (the authorization server refused, the code exchange
    /// failed, nobody came back before it expired). Reads the store every 200 ms.
    pub async fn completed(&self) -> Result<(), String> {
        match &self.waiting {
            Some((store, state)) => super::pending::wait_completed(store.as_ref(), state).await,
            // made by `new` (an application's test): nothing can complete it
            None => std::future::pending().await,
        }
    }
}

/// How the person signs in: the bridge's loopback listener, or the application's own redirect.
#[derive(Clone)]
pub(crate) enum SignInVia {
    Loopback(Arc<dyn SignIn>),
    Redirect(Arc<dyn RedirectSignIn>),
}

impl SignInVia {
    fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Loopback(a), Self::Loopback(b)) => Arc::ptr_eq(a, b),
            (Self::Redirect(a), Self::Redirect(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// How a remote service authorizes with OAuth.
#[derive(Clone)]
pub struct OAuthConfig {
    pub(crate) sign_in: SignInVia,
    pub(crate) store: Arc<dyn CredentialStore>,
    pub(crate) principal: String,
    pub(crate) client: Option<Registration>,
    pub(crate) client_metadata_url: Option<String>,
    pub(crate) client_name: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) redirect_uri: String,
    pub(crate) max_authorizations: u32,
    pub(crate) sign_in_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) idle_close: Duration,
}

impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthConfig")
            .field("principal", &self.principal)
            .field("client_id", &self.client.as_ref().map(|c| &c.client_id))
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri)
            .field("max_authorizations", &self.max_authorizations)
            .finish_non_exhaustive()
    }
}

impl PartialEq for OAuthConfig {
    fn eq(&self, other: &Self) -> bool {
        self.sign_in.same(&other.sign_in)
            && Arc::ptr_eq(&self.store, &other.store)
            && self.principal == other.principal
            && self.client == other.client
            && self.client_metadata_url == other.client_metadata_url
            && self.client_name == other.client_name
            && self.scopes == other.scopes
            && self.redirect_uri == other.redirect_uri
            && self.max_authorizations == other.max_authorizations
            && self.sign_in_timeout == other.sign_in_timeout
            && self.max_connections == other.max_connections
            && self.idle_close == other.idle_close
    }
}

/// The default loopback redirect: a free port on 127.0.0.1.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:0/callback";

impl OAuthConfig {
    /// OAuth whose person signs in through `sign_in`, with tokens in a fresh
    /// [`InMemoryCredentialStore`] under the principal `"default"`, dynamic registration (or a
    /// metadata document, or a pre-registered client, when set), the loopback redirect
    /// [`DEFAULT_REDIRECT_URI`], at most 3 authorizations per request and 5 minutes to sign in.
    pub fn new(sign_in: Arc<dyn SignIn>) -> Self {
        Self::with_sign_in(SignInVia::Loopback(sign_in))
    }
    /// OAuth whose person signs in through an application that receives the redirect itself
    /// (a web panel): otherwise as [`Self::new`]; [`Self::with_redirect_uri`] does not apply.
    pub fn with_redirect_sign_in(sign_in: Arc<dyn RedirectSignIn>) -> Self {
        Self::with_sign_in(SignInVia::Redirect(sign_in))
    }
    fn with_sign_in(sign_in: SignInVia) -> Self {
        Self {
            sign_in,
            store: Arc::new(InMemoryCredentialStore::new()),
            principal: "default".into(),
            client: None,
            client_metadata_url: None,
            client_name: "toolwright".into(),
            scopes: Vec::new(),
            redirect_uri: DEFAULT_REDIRECT_URI.into(),
            max_authorizations: 3,
            sign_in_timeout: Duration::from_secs(300),
            max_connections: 32,
            idle_close: Duration::from_secs(300),
        }
    }
    /// Keep tokens and the registration in `store`; `principal` is whose credential the
    /// service's own connection (its tool list; calls made for no principal) uses when it
    /// starts on its own (autostart, [`crate::McpBridge::start`]); started inside a call, it
    /// is that call's principal's. A call made for another principal
    /// ([`toolwright_core::ToolContext::principal`]) uses that principal's credential, over a
    /// connection of its own ([`Self::with_max_connections`]).
    pub fn with_store(
        mut self,
        store: Arc<dyn CredentialStore>,
        principal: impl Into<String>,
    ) -> Self {
        self.store = store;
        self.principal = principal.into();
        self
    }
    /// A client registered with the authorization server beforehand (and its secret, for a
    /// confidential client): no registration is attempted.
    pub fn with_client(
        mut self,
        client_id: impl Into<String>,
        client_secret: Option<String>,
    ) -> Self {
        self.client = Some(Registration {
            client_id: client_id.into(),
            client_secret,
        });
        self
    }
    /// The HTTPS URL of this client's ID metadata document, used as its client ID where the
    /// authorization server supports them.
    pub fn with_client_metadata_url(mut self, url: impl Into<String>) -> Self {
        self.client_metadata_url = Some(url.into());
        self
    }
    /// The name given at dynamic registration.
    pub fn with_client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }
    /// Ask for these scopes instead of the challenge's or the resource's.
    pub fn with_scopes<I: IntoIterator<Item = S>, S: Into<String>>(mut self, scopes: I) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }
    /// The loopback redirect URI (`http://127.0.0.1:PORT/PATH`, `localhost` or `[::1]` as the
    /// host; port 0 picks a free one); anything else is refused. A
    /// [`Self::with_redirect_sign_in`] takes its application's redirect URI instead.
    pub fn with_redirect_uri(mut self, uri: impl Into<String>) -> Result<Self, OAuthError> {
        let uri = uri.into();
        loopback_redirect(&uri)?;
        self.redirect_uri = uri;
        Ok(self)
    }
    /// At most `n` authorizations (the first and the step-ups) for one request.
    pub fn with_max_authorizations(mut self, n: u32) -> Self {
        self.max_authorizations = n.max(1);
        self
    }
    /// At most `n` connections of other principals than [`Self::with_store`]'s open at once
    /// (default 32): a remote server knows its user by the token, so each principal's calls go
    /// over their own connection and MCP session. When all are taken, the least recently used
    /// idle one is closed; when none is idle, the call fails with a message to try again.
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }
    /// A principal's connection unused for `idle` is closed (default 5 minutes); the next call
    /// of theirs opens one again with their stored token.
    pub fn with_idle_close(mut self, idle: Duration) -> Self {
        self.idle_close = idle;
        self
    }
    /// This configuration for `principal`'s credential.
    pub(crate) fn for_principal(&self, principal: &str) -> Self {
        let mut config = self.clone();
        config.principal = principal.to_owned();
        config
    }
    /// How long the person has to sign in.
    pub fn with_sign_in_timeout(mut self, timeout: Duration) -> Self {
        self.sign_in_timeout = timeout;
        self
    }
}

/// The port and path of a loopback redirect URI, or why it is refused.
pub(super) fn loopback_redirect(uri: &str) -> Result<(u16, String), OAuthError> {
    let refused = || OAuthError::RedirectNotLoopback {
        uri: uri.to_owned(),
    };
    let url = url::Url::parse(uri).map_err(|_| refused())?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if url.scheme() != "http" || !loopback {
        return Err(refused());
    }
    Ok((url.port().unwrap_or(80), url.path().to_owned()))
}
