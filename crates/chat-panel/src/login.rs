//! Browser login: the OpenID Connect authorization code flow with PKCE, so the page works
//! for a person, not only for API clients that bring a bearer token.
//!
//! * `GET /login` sends the browser to the provider's authorization endpoint with a fresh
//!   `state`, `nonce` and PKCE `code_challenge` (S256); the three are kept in a short-lived
//!   cookie (`chat_login`, 10 minutes) sealed with the panel's cookie key, so the callback may
//!   land on any worker.
//! * `GET /callback?code&state` checks the state against that cookie, exchanges the code at the
//!   token endpoint (with the PKCE verifier, and the client secret by HTTP Basic when one is
//!   configured), verifies the ID token with the same JWKS verifier as bearer tokens
//!   ([`JwtBearer`]: signature, `iss`, `aud` = the client id, `exp`) and its `nonce`, and sets
//!   the session cookie `chat_session`: the subject and an expiry, sealed (HMAC-SHA256) with the
//!   cookie key — `HttpOnly; SameSite=Lax; Path=/`, and `Secure` unless the redirect URL is
//!   `http://` on a loopback address. No session is kept in memory: every worker with the same
//!   cookie key and provider agrees on who a cookie is.
//! * `GET /logout` clears the cookie and signs the person out on every browser and worker: the
//!   panel's store records the time, and a session cookie issued before it is refused
//!   ([`crate::ChatPanel::sign_out`] does the same for an operator; see `signout.rs`).
//!
//! [`OidcLogin`] is also the panel's [`Authenticator`]: a request is the principal of its
//! session cookie, else of its `Authorization: Bearer` ID token (API clients), else refused —
//! and the page itself sends a browser without a session to `/login`.
//!
//! ```
//! use toolwright_chat_panel::PanelConfig;
//! use toolwright_chat_panel::login::{OidcLogin, OidcLoginConfig};
//! let login = OidcLogin::new(
//!     OidcLoginConfig::new("https://id.example.com", "chat-panel", "https://chat.example.com/callback"),
//!     [7u8; 32], // the same secret on every worker, e.g. from `openssl rand -hex 32`
//! )?;
//! let config = PanelConfig::default()
//!     .with_allowed_host("chat.example.com")
//!     .with_oidc_login(login);
//! # let _ = config;
//! # Ok::<(), toolwright_chat_panel::identity::IdentityError>(())
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, header};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::identity::{
    Algorithm, Authenticator, IdentityError, JwtBearer, JwtBearerConfig, Principal, Refusal,
    RequestHead,
};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "chat_session";
/// The name of the cookie that carries a login in progress from `/login` to `/callback`.
pub const LOGIN_COOKIE: &str = "chat_login";
/// How long a login may take between `/login` and `/callback`.
const LOGIN_TTL: Duration = Duration::from_secs(600);

/// The provider's endpoints, when they are configured rather than discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcEndpoints {
    /// `authorization_endpoint`.
    pub authorization: String,
    /// `token_endpoint`.
    pub token: String,
    /// `jwks_uri`.
    pub jwks: String,
}

/// [`OidcLogin`]'s settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OidcLoginConfig {
    /// The provider (`iss` of its tokens); its discovery document is
    /// `{issuer}/.well-known/openid-configuration` unless [`endpoints`](Self::endpoints) are given.
    pub issuer: String,
    /// This panel's client id at the provider (the ID token's `aud`).
    pub client_id: String,
    /// The client secret, for a confidential client (sent with HTTP Basic to the token endpoint).
    pub client_secret: Option<String>,
    /// Where the provider sends the browser back: this panel's `/callback`, as the browser
    /// reaches it (`https://chat.example.com/callback`).
    pub redirect_url: String,
    /// The endpoints, when not discovered.
    pub endpoints: Option<OidcEndpoints>,
    /// The scopes asked for (default `openid`).
    pub scopes: Vec<String>,
    /// How long a session cookie is good for (default 8 h); the person logs in again after.
    pub session_ttl: Duration,
    /// The ID token algorithms accepted (default `RS256`, `ES256`; asymmetric only).
    pub algorithms: Vec<Algorithm>,
    /// Timeout of each request to the provider (default 10 s).
    pub http_timeout: Duration,
    /// Clock skew allowed on the ID token's `exp`, `nbf` and `iat` (default 30 s), as
    /// [`JwtBearerConfig::leeway`] for bearer tokens.
    pub leeway: Duration,
    /// How often a worker reads a principal's sign-out record again (default 5 s): a sign-out
    /// on another worker takes effect here within this time (on the worker that took it, at
    /// once). Each read is one query to the session store.
    pub revocation_recheck: Duration,
}

impl OidcLoginConfig {
    /// Defaults for `client_id` at `issuer`, coming back to `redirect_url`.
    pub fn new(
        issuer: impl Into<String>,
        client_id: impl Into<String>,
        redirect_url: impl Into<String>,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            client_id: client_id.into(),
            client_secret: None,
            redirect_url: redirect_url.into(),
            endpoints: None,
            scopes: vec!["openid".into()],
            session_ttl: Duration::from_secs(8 * 3600),
            algorithms: vec![Algorithm::RS256, Algorithm::ES256],
            http_timeout: Duration::from_secs(10),
            leeway: Duration::from_secs(30),
            revocation_recheck: Duration::from_secs(5),
        }
    }

    /// Sets [`OidcLoginConfig::revocation_recheck`].
    pub fn with_revocation_recheck(mut self, every: Duration) -> Self {
        self.revocation_recheck = every;
        self
    }

    /// With a client secret (a confidential client).
    pub fn with_client_secret(mut self, secret: impl Into<String>) -> Self {
        self.client_secret = Some(secret.into());
        self
    }

    /// With the provider's endpoints given rather than discovered.
    pub fn with_endpoints(mut self, endpoints: OidcEndpoints) -> Self {
        self.endpoints = Some(endpoints);
        self
    }
}

/// Why a login did not complete; the browser is shown the sentence (`400`, or `502` when the
/// provider failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// The provider's discovery document or token endpoint cannot be used.
    #[error("the identity provider cannot be reached or answered oddly ({0}); try again shortly")]
    Provider(String),
    /// The callback came without a login started in this browser, or after 10 minutes.
    #[error("this sign-in was not started here or took too long; start again at /login")]
    NoLoginInProgress,
    /// The callback's `state` is not the one this browser was sent with.
    #[error("the sign-in answer does not belong to this browser's sign-in; start again at /login")]
    StateMismatch,
    /// The provider refused (the person declined, or the client is not allowed).
    #[error("the identity provider refused the sign-in ({0}); start again at /login")]
    Refused(String),
    /// The ID token does not verify, or its nonce is not this login's.
    #[error("the identity provider's answer could not be verified ({0}); start again at /login")]
    BadIdToken(String),
}

#[derive(Debug)]
struct Provider {
    endpoints: OidcEndpoints,
    verifier: JwtBearer,
}

/// The browser login and the authenticator of its session cookie: see the module notes.
pub struct OidcLogin {
    config: OidcLoginConfig,
    cookie_key: Arc<[u8]>,
    secure: bool,
    http: reqwest::Client,
    provider: tokio::sync::OnceCell<Provider>,
    /// Who signed out, and when (`signout.rs`).
    pub(crate) sign_outs: crate::signout::SignOuts,
}

impl std::fmt::Debug for OidcLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcLogin")
            .field("issuer", &self.config.issuer)
            .field("client_id", &self.config.client_id)
            .field("redirect_url", &self.config.redirect_url)
            .field("secure", &self.secure)
            .finish_non_exhaustive()
    }
}

/// What the login cookie carries from `/login` to `/callback`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginState {
    state: String,
    nonce: String,
    verifier: String,
    exp: u64,
}

/// What the session cookie carries.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionClaims {
    sub: String,
    exp: u64,
    /// When it was issued, ms since the Unix epoch: a sign-out after it ends it. A cookie of
    /// before this field counts as issued at 0 (ended by any sign-out).
    #[serde(default)]
    iat_ms: u64,
}

#[derive(Deserialize)]
struct IdClaims {
    sub: String,
    #[serde(default)]
    nonce: Option<String>,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    id_token: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

impl OidcLogin {
    /// Checks the configuration: a cookie key of at least 32 bytes (the same on every worker),
    /// a redirect URL whose path is `/callback`, `https://` unless on a loopback address.
    pub fn new(
        config: OidcLoginConfig,
        cookie_key: impl AsRef<[u8]>,
    ) -> Result<Self, IdentityError> {
        let key = cookie_key.as_ref();
        if key.len() < 32 {
            return Err(IdentityError::Login(format!(
                "the cookie key has {} bytes, at least 32 are needed (e.g. `openssl rand -hex 32`)",
                key.len()
            )));
        }
        for (what, v) in [("issuer", &config.issuer), ("client id", &config.client_id)] {
            if v.is_empty() {
                return Err(IdentityError::Login(format!("the {what} is empty")));
            }
        }
        if config.algorithms.is_empty() {
            return Err(IdentityError::Missing("at least one algorithm"));
        }
        let url = url::Url::parse(&config.redirect_url).map_err(|e| {
            IdentityError::Login(format!("redirect URL `{}`: {e}", config.redirect_url))
        })?;
        if url.path() != "/callback" {
            return Err(IdentityError::Login(format!(
                "the redirect URL must be this panel's /callback, not `{}`",
                url.path()
            )));
        }
        let loopback = match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        let secure = match url.scheme() {
            "https" => true,
            "http" if loopback => false,
            other => {
                return Err(IdentityError::Login(format!(
                    "the redirect URL must be https (or http on a loopback address), not {other}: the session cookie would travel in clear"
                )));
            }
        };
        let http = reqwest::Client::builder()
            .timeout(config.http_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| IdentityError::Http(e.to_string()))?;
        Ok(Self {
            sign_outs: crate::signout::SignOuts::new(config.revocation_recheck),
            config,
            cookie_key: Arc::from(key),
            secure,
            http,
            provider: tokio::sync::OnceCell::new(),
        })
    }

    /// The provider's endpoints and verifier: discovered with the first login (tried again on
    /// the next one when it fails).
    async fn provider(&self) -> Result<&Provider, LoginError> {
        self.provider
            .get_or_try_init(|| async {
                let endpoints = match &self.config.endpoints {
                    Some(e) => e.clone(),
                    None => self.discover().await?,
                };
                let mut bearer = JwtBearerConfig::new(
                    endpoints.jwks.clone(),
                    self.config.issuer.clone(),
                    &self.config.client_id,
                );
                bearer.algorithms = self.config.algorithms.clone();
                bearer.fetch_timeout = self.config.http_timeout;
                bearer.leeway = self.config.leeway;
                let verifier =
                    JwtBearer::new(bearer).map_err(|e| LoginError::Provider(e.to_string()))?;
                Ok(Provider {
                    endpoints,
                    verifier,
                })
            })
            .await
    }

    async fn discover(&self) -> Result<OidcEndpoints, LoginError> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let d: Discovery = self
            .http
            .get(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| LoginError::Provider(format!("{url}: {e}")))?
            .json()
            .await
            .map_err(|e| LoginError::Provider(format!("{url}: {e}")))?;
        // OpenID Connect Discovery 1.0, 4.3: the document names the issuer it was fetched for
        if d.issuer != self.config.issuer {
            return Err(LoginError::Provider(format!(
                "the discovery document names issuer `{}`, not `{}`",
                d.issuer, self.config.issuer
            )));
        }
        Ok(OidcEndpoints {
            authorization: d.authorization_endpoint,
            token: d.token_endpoint,
            jwks: d.jwks_uri,
        })
    }

    /// `GET /login`: where to send the browser, and the login cookie to set.
    pub(crate) async fn start(&self) -> Result<(String, String), LoginError> {
        let p = self.provider().await?;
        let login = LoginState {
            state: random_hex(),
            nonce: random_hex(),
            verifier: format!("{}{}", random_hex(), random_hex()), // 64 of [0-9a-f]: RFC 7636's 43–128
            exp: now_s() + LOGIN_TTL.as_secs(),
        };
        let challenge = base64url(&Sha256::digest(login.verifier.as_bytes()));
        let mut url = url::Url::parse(&p.endpoints.authorization)
            .map_err(|e| LoginError::Provider(format!("authorization endpoint: {e}")))?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", &self.config.redirect_url)
            .append_pair("scope", &self.config.scopes.join(" "))
            .append_pair("state", &login.state)
            .append_pair("nonce", &login.nonce)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        let sealed = self.seal(b"chat-panel login v1", &login);
        let cookie = self.cookie(LOGIN_COOKIE, &sealed, LOGIN_TTL.as_secs());
        Ok((url.into(), cookie))
    }

    /// `GET /callback?{query}`: the person's principal and the cookies to set (the session,
    /// and the login cookie cleared).
    pub(crate) async fn finish(
        &self,
        query: &str,
        headers: &HeaderMap,
    ) -> Result<(Principal, Vec<String>), LoginError> {
        let mut code = None;
        let mut state = None;
        let mut error = None;
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "code" => code = Some(v.into_owned()),
                "state" => state = Some(v.into_owned()),
                "error" => error = Some(v.into_owned()),
                _ => {}
            }
        }
        let login: LoginState = cookie_value(headers, LOGIN_COOKIE)
            .and_then(|c| self.open(b"chat-panel login v1", c))
            .filter(|l: &LoginState| l.exp > now_s())
            .ok_or(LoginError::NoLoginInProgress)?;
        if !state.is_some_and(|s| constant_eq(s.as_bytes(), login.state.as_bytes())) {
            return Err(LoginError::StateMismatch);
        }
        if let Some(e) = error {
            return Err(LoginError::Refused(printable(&e)));
        }
        let code = code.ok_or_else(|| LoginError::Refused("no code in the answer".into()))?;
        let p = self.provider().await?;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", &code)
            .append_pair("redirect_uri", &self.config.redirect_url)
            .append_pair("client_id", &self.config.client_id)
            .append_pair("code_verifier", &login.verifier)
            .finish();
        let mut req = self
            .http
            .post(&p.endpoints.token)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .body(body);
        if let Some(secret) = &self.config.client_secret {
            // RFC 6749 2.3.1: client id and secret form-encoded, then Basic
            let enc =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            req = req.basic_auth(enc(&self.config.client_id), Some(enc(secret)));
        }
        let res = req
            .send()
            .await
            .map_err(|e| LoginError::Provider(format!("token endpoint: {e}")))?;
        let status = res.status();
        let tokens: TokenResponse = res
            .json()
            .await
            .map_err(|e| LoginError::Provider(format!("token endpoint ({status}): {e}")))?;
        let id_token = match (tokens.id_token, tokens.error) {
            (Some(t), _) if status.is_success() => t,
            (_, Some(e)) => return Err(LoginError::Refused(printable(&e))),
            _ => {
                return Err(LoginError::Provider(format!(
                    "token endpoint answered {status} without an ID token"
                )));
            }
        };
        let claims: IdClaims = p
            .verifier
            .verify(&id_token)
            .await
            .map_err(|e| LoginError::BadIdToken(e.to_string()))?;
        if !claims
            .nonce
            .is_some_and(|n| constant_eq(n.as_bytes(), login.nonce.as_bytes()))
        {
            return Err(LoginError::BadIdToken(
                "its nonce is not this sign-in's (a replayed token?)".into(),
            ));
        }
        let who = Principal::new(claims.sub).map_err(|e| LoginError::BadIdToken(e.to_string()))?;
        let ttl = self.config.session_ttl.as_secs();
        let session = SessionClaims {
            sub: who.id().to_owned(),
            exp: now_s() + ttl,
            iat_ms: now_ms(),
        };
        let sealed = self.seal(b"chat-panel session v1", &session);
        let cookies = vec![
            self.cookie(SESSION_COOKIE, &sealed, ttl),
            self.cookie(LOGIN_COOKIE, "", 0),
        ];
        Ok((who, cookies))
    }

    /// The cookie that ends the session (`GET /logout`).
    pub(crate) fn logout_cookie(&self) -> String {
        self.cookie(SESSION_COOKIE, "", 0)
    }

    /// The principal of the request's session cookie: `None` without one, a refusal for one
    /// that is forged, altered, expired or signed out (or when the sign-outs cannot be read:
    /// closed, not open).
    pub(crate) async fn session(&self, headers: &HeaderMap) -> Option<Result<Principal, Refusal>> {
        let raw = cookie_value(headers, SESSION_COOKIE)?;
        let Some(s) = self.open::<SessionClaims>(b"chat-panel session v1", raw) else {
            return Some(Err(Refusal::BadSignature));
        };
        if s.exp <= now_s() {
            return Some(Err(Refusal::Expired));
        }
        match self.sign_outs.signed_out(&s.sub, s.iat_ms).await {
            Ok(false) => {}
            Ok(true) => return Some(Err(Refusal::SignedOut)),
            Err(e) => {
                tracing::warn!(error = %e, "chat panel: the sign-outs could not be read; the session is refused");
                return Some(Err(Refusal::CannotCheck));
            }
        }
        Some(Principal::new(s.sub))
    }

    /// `GET /logout`'s work: the principal of the request's (valid) session cookie signed out
    /// everywhere; `Ok(None)` without one.
    pub(crate) async fn sign_out_request(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<Principal>, toolwright_context_engine::StoreError> {
        let Some(Ok(who)) = self.session(headers).await else {
            return Ok(None);
        };
        self.sign_outs.sign_out(who.id(), now_ms()).await?;
        Ok(Some(who))
    }

    fn cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{name}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Lax{secure}")
    }

    fn mac(&self, domain: &[u8], payload: &[u8]) -> Option<Hmac<Sha256>> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.cookie_key).ok()?;
        for f in [domain, payload] {
            mac.update(&(f.len() as u64).to_be_bytes());
            mac.update(f);
        }
        Some(mac)
    }

    /// `hex(json).hex(mac)`.
    fn seal<T: Serialize>(&self, domain: &[u8], value: &T) -> String {
        let payload = serde_json::to_vec(value).unwrap_or_default();
        match self.mac(domain, &payload) {
            Some(m) => format!("{}.{}", hex(&payload), hex(&m.finalize().into_bytes())),
            None => String::new(), // HMAC takes keys of any length; never reached
        }
    }

    fn open<T: serde::de::DeserializeOwned>(&self, domain: &[u8], sealed: &str) -> Option<T> {
        let (payload, tag) = sealed.split_once('.')?;
        let (payload, tag) = (unhex(payload)?, unhex(tag)?);
        self.mac(domain, &payload)?.verify_slice(&tag).ok()?;
        serde_json::from_slice(&payload).ok()
    }
}

#[async_trait::async_trait]
impl Authenticator for OidcLogin {
    async fn authenticate(&self, head: RequestHead<'_>) -> Result<Principal, Refusal> {
        if let Some(who) = self.session(head.headers).await {
            return who;
        }
        if head.headers.contains_key(header::AUTHORIZATION) {
            let p = self
                .provider()
                .await
                .map_err(|_| Refusal::KeysUnavailable)?;
            return p.verifier.authenticate(head).await;
        }
        Err(Refusal::SignIn)
    }
}

/// The value of cookie `name` in the request's `Cookie` headers (the first).
fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// At most 200 printable characters of what a provider said, for the person's page.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(200).collect()
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn random_hex() -> String {
    hex(&rand::random::<[u8; 16]>())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Base64url without padding (RFC 7636's `code_challenge`).
fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login() -> OidcLogin {
        OidcLogin::new(
            OidcLoginConfig::new(
                "https://id.example",
                "panel",
                "http://127.0.0.1:8080/callback",
            ),
            [9u8; 32],
        )
        .unwrap()
    }

    #[test]
    fn login_pkce_challenge_is_base64url_of_sha256() {
        // SHA-256 of nothing, base64url without padding (as Python's hashlib + base64 give it)
        assert_eq!(
            base64url(&Sha256::digest(b"")),
            "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
    }

    #[tokio::test]
    async fn login_session_cookies_are_sealed_and_expire() {
        let l = login();
        let headers = |c: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::COOKIE, c.parse().unwrap());
            h
        };
        let good = l.seal(
            b"chat-panel session v1",
            &SessionClaims {
                sub: "alice".into(),
                exp: now_s() + 60,
                iat_ms: now_ms(),
            },
        );
        let who = l
            .session(&headers(&format!("a=b; {SESSION_COOKIE}={good}")))
            .await;
        assert_eq!(who, Some(Ok(Principal::new("alice").unwrap())));
        // altered: another subject under the same MAC
        let (_, tag) = good.split_once('.').unwrap();
        let forged = format!("{}.{tag}", hex(br#"{"sub":"bob","exp":99999999999}"#));
        assert_eq!(
            l.session(&headers(&format!("{SESSION_COOKIE}={forged}")))
                .await,
            Some(Err(Refusal::BadSignature))
        );
        // sealed by another key
        let other = OidcLogin::new(
            OidcLoginConfig::new(
                "https://id.example",
                "panel",
                "http://127.0.0.1:8080/callback",
            ),
            [8u8; 32],
        )
        .unwrap();
        let theirs = other.seal(
            b"chat-panel session v1",
            &SessionClaims {
                sub: "alice".into(),
                exp: now_s() + 60,
                iat_ms: now_ms(),
            },
        );
        assert_eq!(
            l.session(&headers(&format!("{SESSION_COOKIE}={theirs}")))
                .await,
            Some(Err(Refusal::BadSignature))
        );
        // a login cookie is no session cookie
        let login_state = l.seal(
            b"chat-panel login v1",
            &SessionClaims {
                sub: "alice".into(),
                exp: now_s() + 60,
                iat_ms: now_ms(),
            },
        );
        assert_eq!(
            l.session(&headers(&format!("{SESSION_COOKIE}={login_state}")))
                .await,
            Some(Err(Refusal::BadSignature))
        );
        let expired = l.seal(
            b"chat-panel session v1",
            &SessionClaims {
                sub: "alice".into(),
                exp: now_s() - 1,
                iat_ms: now_ms(),
            },
        );
        assert_eq!(
            l.session(&headers(&format!("{SESSION_COOKIE}={expired}")))
                .await,
            Some(Err(Refusal::Expired))
        );
        assert_eq!(l.session(&headers("other=1")).await, None);
        // not ASCII: no cookie the panel can read
        assert_eq!(
            l.session(&headers(&format!("{SESSION_COOKIE}=é.é"))).await,
            None
        );
        for junk in ["x", ".", "zz.zz", "00."] {
            assert_eq!(
                l.session(&headers(&format!("{SESSION_COOKIE}={junk}")))
                    .await,
                Some(Err(Refusal::BadSignature)),
                "{junk}"
            );
        }
    }

    #[test]
    fn login_config_rules() {
        let cfg = |redirect: &str| OidcLoginConfig::new("https://id.example", "panel", redirect);
        assert!(OidcLogin::new(cfg("https://chat.example/callback"), [1u8; 32]).is_ok());
        assert!(OidcLogin::new(cfg("https://chat.example/callback"), [1u8; 31]).is_err());
        assert!(OidcLogin::new(cfg("http://chat.example/callback"), [1u8; 32]).is_err());
        assert!(OidcLogin::new(cfg("https://chat.example/elsewhere"), [1u8; 32]).is_err());
        assert!(OidcLogin::new(cfg("not a url"), [1u8; 32]).is_err());
        let l = OidcLogin::new(cfg("https://chat.example/callback"), [1u8; 32]).unwrap();
        let c = l.cookie(SESSION_COOKIE, "v", 60);
        assert!(c.ends_with("HttpOnly; SameSite=Lax; Secure"), "{c}");
        assert!(c.contains("Path=/;"), "{c}");
        let c = login().cookie(SESSION_COOKIE, "v", 60);
        assert!(!c.contains("Secure"), "http on loopback: {c}");
    }
}
