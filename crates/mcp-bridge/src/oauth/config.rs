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

/// How a remote service authorizes with OAuth.
#[derive(Clone)]
pub struct OAuthConfig {
    pub(crate) sign_in: Arc<dyn SignIn>,
    pub(crate) store: Arc<dyn CredentialStore>,
    pub(crate) principal: String,
    pub(crate) client: Option<Registration>,
    pub(crate) client_metadata_url: Option<String>,
    pub(crate) client_name: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) redirect_uri: String,
    pub(crate) max_authorizations: u32,
    pub(crate) sign_in_timeout: Duration,
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
        Arc::ptr_eq(&self.sign_in, &other.sign_in)
            && Arc::ptr_eq(&self.store, &other.store)
            && self.principal == other.principal
            && self.client == other.client
            && self.client_metadata_url == other.client_metadata_url
            && self.client_name == other.client_name
            && self.scopes == other.scopes
            && self.redirect_uri == other.redirect_uri
            && self.max_authorizations == other.max_authorizations
            && self.sign_in_timeout == other.sign_in_timeout
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
        }
    }
    /// Keep tokens and the registration in `store`, under `principal`.
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
    /// host; port 0 picks a free one); anything else is refused.
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
