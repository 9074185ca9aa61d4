//! Who is calling: the narrow seam between a request's head and a [`Principal`].
//!
//! An [`Authenticator`] looks at the request head (its headers and the peer address of the TCP
//! connection) and answers with the principal or a typed [`Refusal`]; the panel answers a
//! refusal with `401` and the refusal's sentence. Three are provided:
//!
//! * [`NoAuth`] — everyone is [`Principal::local`]. Allowed only when the panel listens on a
//!   loopback address: [`ChatPanel::serve`](crate::ChatPanel::serve) refuses to start
//!   otherwise ([`IdentityError::NoAuthOffLoopback`]).
//! * [`TrustedProxyHeader`] — a reverse proxy that authenticated the person names them in a
//!   header (`X-Forwarded-User`…); the header is believed only on connections from the proxy
//!   addresses the operator lists, and a request from anywhere else is refused.
//! * [`JwtBearer`] — an OIDC/JWT bearer token (`Authorization: Bearer …`, the scheme in any
//!   case) whose signature, issuer, audience, expiry, not-before (`nbf`) and issue time (`iat`,
//!   never in the future) are checked against the provider's JWKS, fetched over HTTP(S)
//!   and cached; a token signed with a key the cache does not know makes one refetch (at most
//!   one per [`JwtBearerConfig::refetch_interval`]), so a rotated key is used without a restart.
//!   Only the asymmetric algorithms configured are accepted: `alg: none` and HMAC tokens (an
//!   HMAC "signed" with the provider's public key) are refused.
//!
//! Every worker with the same configuration agrees on who a request is: nothing is kept in
//! memory that another worker would need. Deployment: `docs/deploy.md`.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use toolwright_chat_panel::PanelConfig;
//! use toolwright_chat_panel::identity::{
//!     Algorithm, IdentityError, JwtBearer, JwtBearerConfig, TrustedProxyHeader,
//! };
//! // behind a proxy at 10.0.0.2 that names the person in X-Forwarded-User
//! let proxy = TrustedProxyHeader::new("x-forwarded-user", ["10.0.0.2".parse()?])?;
//! let config = PanelConfig::default()
//!     .with_allowed_host("chat.example.com")
//!     .with_authenticator(proxy);
//! assert!(!config.authenticator.loopback_only()); // may listen beyond loopback
//!
//! // or OIDC bearer tokens, checked against the provider's keys (fetched with the first token)
//! let oidc = JwtBearerConfig::new(
//!     "https://id.example.com/jwks",
//!     "https://id.example.com",
//!     "chat-panel",
//! );
//! let config = PanelConfig::default().with_authenticator(JwtBearer::new(oidc.clone())?);
//! # let _ = config;
//! // HMAC is never accepted: a token "signed" with the public key would verify
//! let hmac = JwtBearerConfig { algorithms: vec![Algorithm::HS256], ..oidc };
//! assert!(matches!(JwtBearer::new(hmac), Err(IdentityError::SymmetricAlgorithm(_))));
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName, header};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};

/// A JWS signature algorithm ([`JwtBearerConfig::algorithms`]).
pub use jsonwebtoken::Algorithm;

/// Who a request is: an opaque, stable id (the token's `sub`, the proxy header's value, or
/// `local` without authentication). Conversations belong to one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(String);

impl Principal {
    /// A principal with this id (1–256 characters, no control characters).
    pub fn new(id: impl Into<String>) -> Result<Self, Refusal> {
        let id = id.into();
        if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
            return Err(Refusal::BadPrincipal);
        }
        Ok(Self(id))
    }

    /// The one principal of a panel without authentication ([`NoAuth`]).
    pub fn local() -> Self {
        Self("local".into())
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an [`Authenticator`] sees of a request: its headers and who connected.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The TCP peer (the proxy, behind one); `None` when the panel's router is mounted in a
    /// server that does not say (then [`TrustedProxyHeader`] refuses every request).
    pub peer: Option<IpAddr>,
}

/// Why a request was not authenticated; the panel answers `401` with this sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No credentials at all.
    #[error("sign in: send `Authorization: Bearer <token>` from your identity provider")]
    MissingToken,
    /// The `Authorization` header is not a bearer token, or the token is not a JWT.
    #[error("the bearer token is malformed ({0}); sign in again")]
    Malformed(String),
    /// The token's `alg` is not one this panel accepts (HMAC, unknown, or not configured).
    #[error("tokens signed with {0} are not accepted here; use your identity provider's token")]
    AlgorithmNotAllowed(String),
    /// The token is not signed at all (`alg: none`).
    #[error("the token's `alg` is none; only signed tokens are accepted")]
    Unsigned,
    /// No key with the token's `kid` in the provider's key set, even after refetching it.
    #[error(
        "the token was signed with a key the identity provider does not publish; sign in again"
    )]
    UnknownKey,
    /// The signature does not verify.
    #[error("the token's signature does not verify; sign in again")]
    BadSignature,
    /// The token has expired.
    #[error("the token has expired; sign in again")]
    Expired,
    /// The token's `nbf` (not before) is later than now, beyond the allowed clock skew.
    #[error(
        "the token is not valid yet (its `nbf` is in the future); check the clocks of the identity provider and of this server"
    )]
    NotYetValid,
    /// The token's `iat` (issued at) is later than now, beyond the allowed clock skew.
    #[error(
        "the token says it was issued in the future (its `iat`); check the clocks of the identity provider and of this server"
    )]
    IssuedInFuture,
    /// A claim the panel needs is not in the (correctly signed) token.
    #[error("the token has no `{claim}` claim ({required} is required)")]
    MissingClaim {
        /// The claim's name (`sub`, `exp`, `iss`, `aud`).
        claim: String,
        /// What it must hold.
        required: &'static str,
    },
    /// A claim of the (correctly signed) token is of the wrong type (a numeric `sub`, a string
    /// `exp`…).
    #[error("the token's `{claim}` claim is {found} ({required} is required)")]
    ClaimType {
        /// The claim's name.
        claim: String,
        /// What it holds: "a number", "a string", "an array"…
        found: &'static str,
        /// What it must hold.
        required: &'static str,
    },
    /// The token was issued by another issuer.
    #[error("the token was issued by another identity provider than this panel trusts")]
    WrongIssuer,
    /// The token is for another audience.
    #[error(
        "the token is meant for another application; ask your identity provider for one for this panel"
    )]
    WrongAudience,
    /// The token's subject (or the proxy header) cannot be a principal.
    #[error(
        "the identity named (the token's `sub`, or the proxy's header) is not usable: 1 to 256 characters, no control characters"
    )]
    BadPrincipal,
    /// The provider's key set could not be fetched, so no token can be checked now.
    #[error("the identity provider's keys cannot be fetched just now; try again shortly")]
    KeysUnavailable,
    /// A browser without a session: sign in at `/login` ([`crate::login`]).
    #[error("sign in first: open /login")]
    SignIn,
    /// The identity header came from an address that is not a trusted proxy, or is missing.
    #[error("this panel is reached through its proxy only; sign in there")]
    NotFromTrustedProxy,
    /// The session was signed out (`/logout`, or by the operator) after it began.
    #[error("this session was signed out; sign in again at /login")]
    SignedOut,
    /// Whether the session was signed out cannot be checked just now (the session store).
    #[error("the session cannot be checked just now; try again shortly")]
    CannotCheck,
}

/// A configuration the panel refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// [`NoAuth`] on an address other than loopback: anyone who can reach it would be everyone.
    #[error(
        "{addr} is not a loopback address and the panel has no authentication: listen on 127.0.0.1, or configure PanelConfig::with_authenticator (JwtBearer, TrustedProxyHeader)"
    )]
    NoAuthOffLoopback {
        /// The address asked for.
        addr: std::net::SocketAddr,
    },
    /// An algorithm that is not asymmetric was configured for [`JwtBearer`].
    #[error(
        "{0:?} is not an asymmetric signature algorithm: configure RS*/PS*/ES*/EdDSA, as your provider's JWKS publishes"
    )]
    SymmetricAlgorithm(Algorithm),
    /// No algorithm, issuer or audience configured for [`JwtBearer`].
    #[error("JwtBearer needs {0}: set it in JwtBearerConfig")]
    Missing(&'static str),
    /// The HTTP client for the JWKS could not be built (TLS set-up).
    #[error("JwtBearer: no HTTP client for the JWKS ({0}); check the TLS set-up")]
    Http(String),
    /// The browser login's configuration ([`crate::login::OidcLogin::new`]).
    #[error("OidcLogin: {0}")]
    Login(String),
    /// [`TrustedProxyHeader`] without proxy addresses, or with a header name that is not one.
    #[error("TrustedProxyHeader: {0}")]
    Proxy(String),
}

/// Request head → principal or refusal. Implement it to plug in another identity source.
#[async_trait::async_trait]
pub trait Authenticator: Send + Sync + std::fmt::Debug + 'static {
    /// Who sent this request.
    async fn authenticate(&self, head: RequestHead<'_>) -> Result<Principal, Refusal>;

    /// Whether the panel may only listen on loopback with this authenticator ([`NoAuth`]).
    fn loopback_only(&self) -> bool {
        false
    }
}

/// No authentication: everyone is [`Principal::local`]. The panel refuses to listen on an
/// address other than loopback with it.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAuth;

#[async_trait::async_trait]
impl Authenticator for NoAuth {
    async fn authenticate(&self, _: RequestHead<'_>) -> Result<Principal, Refusal> {
        Ok(Principal::local())
    }
    fn loopback_only(&self) -> bool {
        true
    }
}

/// The principal named by a trusted reverse proxy in a header, believed only from the proxy
/// addresses the operator lists.
#[derive(Debug, Clone)]
pub struct TrustedProxyHeader {
    header: HeaderName,
    proxies: HashSet<IpAddr>,
}

impl TrustedProxyHeader {
    /// The principal is the value of `header` on requests whose TCP peer is one of `proxies`.
    pub fn new(
        header: &str,
        proxies: impl IntoIterator<Item = IpAddr>,
    ) -> Result<Self, IdentityError> {
        let header = HeaderName::try_from(header)
            .map_err(|e| IdentityError::Proxy(format!("`{header}` is not a header name: {e}")))?;
        let proxies: HashSet<IpAddr> = proxies.into_iter().collect();
        if proxies.is_empty() {
            return Err(IdentityError::Proxy(
                "name the proxies' addresses: a header from anyone else would be believed".into(),
            ));
        }
        Ok(Self { header, proxies })
    }
}

#[async_trait::async_trait]
impl Authenticator for TrustedProxyHeader {
    async fn authenticate(&self, head: RequestHead<'_>) -> Result<Principal, Refusal> {
        if !head.peer.is_some_and(|p| self.proxies.contains(&p)) {
            return Err(Refusal::NotFromTrustedProxy);
        }
        let mut values = head.headers.get_all(&self.header).iter();
        let (Some(v), None) = (values.next(), values.next()) else {
            // none, or two (a client's own header passed along with the proxy's)
            return Err(Refusal::NotFromTrustedProxy);
        };
        let v = v.to_str().map_err(|_| Refusal::BadPrincipal)?.trim();
        Principal::new(v)
    }
}

/// [`JwtBearer`]'s settings.
#[derive(Debug, Clone)]
pub struct JwtBearerConfig {
    /// The provider's JWKS URL (`jwks_uri` of its OIDC discovery document).
    pub jwks_url: String,
    /// The expected `iss`.
    pub issuer: String,
    /// The accepted `aud` values (this panel's client id).
    pub audience: Vec<String>,
    /// The accepted algorithms; asymmetric only (default `RS256`, `ES256`).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp`, `nbf` and `iat` (default 30 s): a token is refused once
    /// expired longer than this, or when its `nbf` or `iat` is further than this in the future.
    pub leeway: Duration,
    /// How long fetched keys are used before they are fetched again (default 1 h).
    pub cache_for: Duration,
    /// The least time between two fetches caused by unknown `kid`s (default 10 s): tokens with
    /// made-up key ids cannot make the panel hammer the provider.
    pub refetch_interval: Duration,
    /// Timeout of one JWKS fetch (default 5 s).
    pub fetch_timeout: Duration,
}

impl JwtBearerConfig {
    /// Defaults for a provider at `jwks_url` issuing as `issuer` for `audience`.
    pub fn new(jwks_url: impl Into<String>, issuer: impl Into<String>, audience: &str) -> Self {
        Self {
            jwks_url: jwks_url.into(),
            issuer: issuer.into(),
            audience: vec![audience.to_owned()],
            algorithms: vec![Algorithm::RS256, Algorithm::ES256],
            leeway: Duration::from_secs(30),
            cache_for: Duration::from_secs(3600),
            refetch_interval: Duration::from_secs(10),
            fetch_timeout: Duration::from_secs(5),
        }
    }
}

/// A fetched key set.
struct Keys {
    by_kid: HashMap<String, Arc<DecodingKey>>,
    fetched: Instant,
}

/// OIDC/JWT bearer tokens checked against the provider's JWKS (see the module notes).
#[derive(Debug)]
pub struct JwtBearer {
    config: JwtBearerConfig,
    /// One per accepted algorithm: jsonwebtoken refuses a key with a validation that lists an
    /// algorithm of another family.
    validation: HashMap<Algorithm, Validation>,
    http: reqwest::Client,
    keys: RwLock<Option<Arc<Keys>>>,
    /// One fetch at a time; holds when the last one started.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("kids", &self.by_kid.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn asymmetric(a: Algorithm) -> bool {
    !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

impl JwtBearer {
    /// Checks the configuration; keys are fetched with the first token.
    pub fn new(config: JwtBearerConfig) -> Result<Self, IdentityError> {
        if let Some(a) = config.algorithms.iter().find(|a| !asymmetric(**a)) {
            return Err(IdentityError::SymmetricAlgorithm(*a));
        }
        if config.algorithms.is_empty() {
            return Err(IdentityError::Missing("at least one algorithm"));
        }
        if config.issuer.is_empty() {
            return Err(IdentityError::Missing("the issuer"));
        }
        if config.audience.iter().all(String::is_empty) {
            return Err(IdentityError::Missing("the audience"));
        }
        let validation = config
            .algorithms
            .iter()
            .map(|a| {
                let mut v = Validation::new(*a);
                v.set_issuer(&[&config.issuer]);
                v.set_audience(&config.audience);
                v.leeway = config.leeway.as_secs();
                v.validate_nbf = true;
                // `sub` is checked by `check_claims`, which can say whether it is missing or
                // not a string (jsonwebtoken says "missing" for both)
                v.set_required_spec_claims(&["exp", "iss", "aud"]);
                (*a, v)
            })
            .collect();
        let http = reqwest::Client::builder()
            .timeout(config.fetch_timeout)
            .build()
            .map_err(|e| IdentityError::Http(e.to_string()))?;
        Ok(Self {
            config,
            validation,
            http,
            keys: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(None),
        })
    }

    fn cached(&self) -> Option<Arc<Keys>> {
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The key `kid`, fetching the set when it is missing or stale (at most once per
    /// `refetch_interval` for unknown kids).
    async fn key(&self, kid: &str) -> Result<Arc<DecodingKey>, Refusal> {
        let fresh = |k: &Keys| k.fetched.elapsed() < self.config.cache_for;
        if let Some(keys) = self.cached()
            && fresh(&keys)
            && let Some(k) = keys.by_kid.get(kid)
        {
            return Ok(k.clone());
        }
        let mut last = self.fetching.lock().await;
        // someone else may have fetched while we waited
        let cached = self.cached();
        if let Some(keys) = &cached
            && fresh(keys)
            && let Some(k) = keys.by_kid.get(kid)
        {
            return Ok(k.clone());
        }
        let stale = cached.as_deref().is_none_or(|k| !fresh(k));
        if !stale && last.is_some_and(|t| t.elapsed() < self.config.refetch_interval) {
            return Err(Refusal::UnknownKey);
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(keys) => {
                let keys = Arc::new(keys);
                *self
                    .keys
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(keys.clone());
                keys.by_kid.get(kid).cloned().ok_or(Refusal::UnknownKey)
            }
            Err(e) => {
                tracing::warn!(url = %self.config.jwks_url, error = %e, "chat panel: could not fetch the identity provider's keys");
                // a stale set still verifies the keys it has
                cached
                    .and_then(|k| k.by_kid.get(kid).cloned())
                    .ok_or(Refusal::KeysUnavailable)
            }
        }
    }

    async fn fetch(&self) -> Result<Keys, String> {
        let set: JwkSet = self
            .http
            .get(&self.config.jwks_url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        let mut by_kid = HashMap::new();
        for jwk in &set.keys {
            let Some(kid) = &jwk.common.key_id else {
                continue;
            };
            match DecodingKey::from_jwk(jwk) {
                Ok(k) => {
                    by_kid.insert(kid.clone(), Arc::new(k));
                }
                Err(e) => {
                    tracing::warn!(kid = %kid, error = %e, "chat panel: skipped a key of the provider's JWKS");
                }
            }
        }
        Ok(Keys {
            by_kid,
            fetched: Instant::now(),
        })
    }
}

/// The token of an `Authorization` header value: `Bearer <token>`, the scheme in any case
/// (RFC 9110: authentication schemes are case-insensitive), one or more spaces before the token.
fn bearer_token(value: &str) -> Result<&str, Refusal> {
    let not_bearer = || Refusal::Malformed("not `Bearer <token>`".into());
    let (scheme, token) = value
        .trim()
        .split_once([' ', '\t'])
        .ok_or_else(not_bearer)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains([' ', '\t']) {
        return Err(not_bearer());
    }
    Ok(token)
}

#[async_trait::async_trait]
impl Authenticator for JwtBearer {
    async fn authenticate(&self, head: RequestHead<'_>) -> Result<Principal, Refusal> {
        let value = head
            .headers
            .get(header::AUTHORIZATION)
            .ok_or(Refusal::MissingToken)?;
        let value = value
            .to_str()
            .map_err(|_| Refusal::Malformed("not ASCII".into()))?;
        let token = bearer_token(value)?;
        Principal::new(self.verify::<Claims>(token).await?.sub)
    }
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
}

/// What a JSON value is, for a refusal's sentence.
fn kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value as V;
    match v {
        V::Null => "null",
        V::Bool(_) => "a boolean",
        V::Number(_) => "a number",
        V::String(_) => "a string",
        V::Array(_) => "an array",
        V::Object(_) => "an object",
    }
}

/// The first of the registered claims jsonwebtoken reads that is present with the wrong type.
fn mistyped(claims: &serde_json::Map<String, serde_json::Value>) -> Option<Refusal> {
    use serde_json::Value as V;
    ["exp", "nbf", "sub", "iss", "aud"]
        .into_iter()
        .find_map(|c| {
            let ok = match (c, claims.get(c)?) {
                (_, V::Null) => true,
                ("exp" | "nbf", v) => v.is_number(),
                ("sub" | "iss", v) => v.is_string(),
                (_, V::Array(a)) => a.iter().all(V::is_string),
                (_, v) => v.is_string(),
            };
            (!ok).then(|| Refusal::ClaimType {
                claim: c.to_owned(),
                found: kind(&claims[c]),
                required: required(c),
            })
        })
}

/// What claim `c` must hold, for a refusal's sentence.
fn required(c: &str) -> &'static str {
    match c {
        "sub" => "a string",
        "iss" => "an issuer string",
        "aud" => "an audience naming this panel's client id",
        _ => "a time in seconds since 1970",
    }
}

/// base64url without padding (a JWS part) → bytes; `None` when it is not.
fn b64url(part: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(part.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in part.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The token's `alg`, read before anything else: `none` (an unsigned token) and names that are
/// no signature algorithm at all are refused here, each with a sentence of its own.
fn token_alg(token: &str) -> Result<Algorithm, Refusal> {
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed(
            "not a JWT: expected three base64url parts separated by dots".into(),
        ));
    };
    let header: serde_json::Value = b64url(head)
        .and_then(|h| serde_json::from_slice(&h).ok())
        .filter(serde_json::Value::is_object)
        .ok_or_else(|| Refusal::Malformed("its header is not base64url-encoded JSON".into()))?;
    let alg = match header.get("alg") {
        Some(serde_json::Value::String(a)) => a,
        Some(_) => {
            return Err(Refusal::Malformed(
                "its header's `alg` is not a string".into(),
            ));
        }
        None => return Err(Refusal::Malformed("its header has no `alg`".into())),
    };
    if alg.eq_ignore_ascii_case("none") {
        return Err(Refusal::Unsigned);
    }
    alg.parse::<Algorithm>()
        .map_err(|_| Refusal::AlgorithmNotAllowed(printable(alg)))
}

/// At most 40 characters of `s`, control characters dropped: a client's text in a sentence.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(40).collect()
}

impl JwtBearer {
    /// The claims of `token` once its signature (against the provider's keys), `iss`, `aud`,
    /// `exp`, `nbf`, `iat` and `sub` are checked: for the bearer tokens of API clients, and the ID
    /// tokens of the browser login ([`crate::login`]).
    pub(crate) async fn verify<T: serde::de::DeserializeOwned>(
        &self,
        token: &str,
    ) -> Result<T, Refusal> {
        let alg = token_alg(token)?;
        let Some(validation) = self.validation.get(&alg) else {
            return Err(Refusal::AlgorithmNotAllowed(format!("{alg:?}")));
        };
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Refusal::Malformed(format!("its header is not a JWS header ({e})")))?;
        let kid = header
            .kid
            .ok_or_else(|| Refusal::Malformed("no `kid` in the token's header".into()))?;
        let key = self.key(&kid).await?;
        type Map = serde_json::Map<String, serde_json::Value>;
        let claims = match jsonwebtoken::decode::<Map>(token, &key, validation) {
            Ok(data) => data.claims,
            Err(e) => return Err(refusal(token, e.kind())),
        };
        self.check_claims(&claims)?;
        serde_json::from_value(serde_json::Value::Object(claims))
            .map_err(|e| Refusal::Malformed(format!("its claims are not what was expected ({e})")))
    }

    /// What jsonwebtoken leaves unchecked: `sub` a string, `iat` (when present) a time not in
    /// the future beyond the leeway.
    fn check_claims(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), Refusal> {
        match claims.get("sub") {
            Some(serde_json::Value::String(_)) => {}
            None | Some(serde_json::Value::Null) => {
                return Err(Refusal::MissingClaim {
                    claim: "sub".into(),
                    required: required("sub"),
                });
            }
            Some(other) => {
                return Err(Refusal::ClaimType {
                    claim: "sub".into(),
                    found: kind(other),
                    required: required("sub"),
                });
            }
        }
        match claims.get("iat") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Number(n)) => {
                let now = jsonwebtoken::get_current_timestamp() as f64;
                let latest = now + self.config.leeway.as_secs_f64();
                if n.as_f64().is_none_or(|iat| iat > latest) {
                    return Err(Refusal::IssuedInFuture);
                }
            }
            Some(other) => {
                return Err(Refusal::ClaimType {
                    claim: "iat".into(),
                    found: kind(other),
                    required: required("iat"),
                });
            }
        }
        Ok(())
    }
}

/// jsonwebtoken's error → the refusal that says what is wrong. Claims are looked at only after
/// the signature verified (jsonwebtoken validates them after it checked the signature), so
/// reading them again here for the sentence trusts nothing unsigned.
fn refusal(token: &str, e: &jsonwebtoken::errors::ErrorKind) -> Refusal {
    use jsonwebtoken::errors::ErrorKind as K;
    // whether claim `c` is there at all (it is, when jsonwebtoken found it unusable)
    let present = |c: &str| {
        jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(token)
            .ok()
            .and_then(|d| d.claims.get(c).filter(|v| !v.is_null()).map(kind))
    };
    let about = |c: &str| match present(c) {
        Some(found) => Refusal::ClaimType {
            claim: c.to_owned(),
            found,
            required: required(c),
        },
        None => Refusal::MissingClaim {
            claim: c.to_owned(),
            required: required(c),
        },
    };
    match e {
        K::ExpiredSignature => Refusal::Expired,
        K::ImmatureSignature => Refusal::NotYetValid,
        K::InvalidIssuer => Refusal::WrongIssuer,
        K::InvalidAudience => Refusal::WrongAudience,
        K::MissingRequiredClaim(c) | K::InvalidClaimFormat(c) => about(c),
        K::InvalidToken => {
            Refusal::Malformed("not a JWT: expected three base64url parts separated by dots".into())
        }
        K::Base64(_) | K::Utf8(_) => {
            Refusal::Malformed("its claims are not base64url-encoded UTF-8".into())
        }
        // a claim jsonwebtoken reads that is of a type it cannot read at all (an object as
        // `sub`) fails its whole reading: say which
        K::Json(_) => jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(token)
            .ok()
            .and_then(|d| d.claims.as_object().and_then(mistyped))
            .unwrap_or_else(|| Refusal::Malformed("its claims are not a JSON object".into())),
        // a bad signature, or a key of another family than the token's algorithm
        _ => Refusal::BadSignature,
    }
}
