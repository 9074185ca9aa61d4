//! The tests' own OpenID provider on 127.0.0.1: discovery, JWKS, an authorization
//! endpoint that approves as the person the test chooses, a token endpoint that checks the PKCE
//! verifier; a panel that signs people in there, and the whole sign-in over HTTP. Shared by
//! `login.rs`, `browser.rs` and `workers.rs`.
//! Include with `#[path = "common/oidc.rs"] mod oidc;` beside `mod common;`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Form, Query, State};
use axum::response::{IntoResponse, Redirect};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sha2::Digest;
use toolwright_chat_panel::PanelConfig;
use toolwright_chat_panel::login::{OidcLogin, OidcLoginConfig};

use crate::common;

pub const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/identity/");
pub const CLIENT: &str = "chat-panel";

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIX}{name}")).expect("fixture")
}

/// base64url without padding (JWS, PKCE).
pub fn b64(v: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for c in v.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=c.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// The public key `kid` of the fixtures' JWKS (`rsa-a`, `rsa-b`, `ec-a`).
pub fn jwk(kid: &str) -> Value {
    let all: Value = serde_json::from_slice(&fixture("jwks.json")).unwrap();
    all[kid].clone()
}

/// A listener on 127.0.0.1 (a free port) and its base URL, `http://127.0.0.1:PORT`.
pub async fn bind_local() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    (listener, base)
}

/// Serves `app` on `listener` in the background (until the task is dropped with the runtime).
pub fn serve_app(
    listener: tokio::net::TcpListener,
    app: axum::Router,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    })
}

/// A token signed with the fixture key `key` (`rsa-a`, `rsa-b`: RS256; `ec-a`: ES256), header
/// `kid` as given.
pub fn token(key: &str, kid: &str, claims: &Value) -> String {
    let (alg, enc) = if key.starts_with("ec") {
        (
            Algorithm::ES256,
            EncodingKey::from_ec_pem(&fixture(&format!("{key}.pem"))).unwrap(),
        )
    } else {
        (
            Algorithm::RS256,
            EncodingKey::from_rsa_pem(&fixture(&format!("{key}.pem"))).unwrap(),
        )
    };
    let mut h = Header::new(alg);
    h.kid = Some(kid.into());
    jsonwebtoken::encode(&h, claims, &enc).unwrap()
}

/// What the provider remembers of an authorization it granted.
struct Grant {
    user: String,
    nonce: String,
    challenge: String,
    redirect: String,
}

#[derive(Clone)]
struct Op {
    issuer: String,
    /// Who the authorization endpoint signs in as.
    user: Arc<Mutex<String>>,
    grants: Arc<Mutex<HashMap<String, Grant>>>,
    /// What the authorization endpoint was asked (the last time).
    asked: Arc<Mutex<HashMap<String, String>>>,
    /// Claims set (or, `null`, removed) in the ID tokens the token endpoint issues.
    changes: Arc<Mutex<Value>>,
}

/// The test's OpenID provider.
pub struct Provider {
    pub issuer: String,
    user: Arc<Mutex<String>>,
    pub asked: Arc<Mutex<HashMap<String, String>>>,
    changes: Arc<Mutex<Value>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Provider {
    pub async fn start() -> Self {
        let (listener, issuer) = bind_local().await;
        let op = Op {
            issuer: issuer.clone(),
            user: Arc::new(Mutex::new("alice".into())),
            grants: Arc::default(),
            asked: Arc::default(),
            changes: Arc::new(Mutex::new(json!({}))),
        };
        let (user, asked, changes) = (op.user.clone(), op.asked.clone(), op.changes.clone());
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(|State(op): State<Op>| async move {
                    axum::Json(json!({"issuer": op.issuer,
                        "authorization_endpoint": format!("{}/authorize", op.issuer),
                        "token_endpoint": format!("{}/token", op.issuer),
                        "jwks_uri": format!("{}/jwks", op.issuer)}))
                }),
            )
            .route(
                "/jwks",
                axum::routing::get(|| async { axum::Json(json!({"keys": [jwk("rsa-a")]})) }),
            )
            .route("/authorize", axum::routing::get(authorize))
            .route("/token", axum::routing::post(token_endpoint))
            .with_state(op);
        let task = serve_app(listener, app);
        Self {
            issuer,
            user,
            asked,
            changes,
            _task: task,
        }
    }

    /// The ID tokens issued from now on have these claims set (`null`: removed), e.g. an `nbf`
    /// in the future.
    pub fn id_tokens_with(&self, changes: Value) {
        *self.changes.lock().unwrap() = changes;
    }

    /// The authorization endpoint signs in as `who` from now on.
    pub fn sign_in_as(&self, who: &str) {
        *self.user.lock().unwrap() = who.into();
    }
}

async fn authorize(
    State(op): State<Op>,
    Query(q): Query<HashMap<String, String>>,
) -> axum::response::Response {
    *op.asked.lock().unwrap() = q.clone();
    let ok = q.get("response_type").map(String::as_str) == Some("code")
        && q.get("client_id").map(String::as_str) == Some(CLIENT)
        && q.get("code_challenge_method").map(String::as_str) == Some("S256");
    let (Some(redirect), Some(state), Some(nonce), Some(challenge), true) = (
        q.get("redirect_uri"),
        q.get("state"),
        q.get("nonce"),
        q.get("code_challenge"),
        ok,
    ) else {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "bad authorization request",
        )
            .into_response();
    };
    let code = format!("code-{:x}", rand::random::<u64>());
    op.grants.lock().unwrap().insert(
        code.clone(),
        Grant {
            user: op.user.lock().unwrap().clone(),
            nonce: nonce.clone(),
            challenge: challenge.clone(),
            redirect: redirect.clone(),
        },
    );
    let mut to = url::Url::parse(redirect).unwrap();
    to.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", state);
    Redirect::to(to.as_str()).into_response()
}

async fn token_endpoint(
    State(op): State<Op>,
    Form(f): Form<HashMap<String, String>>,
) -> axum::response::Response {
    let refuse = |e: &str| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": e})),
        )
            .into_response()
    };
    if f.get("grant_type").map(String::as_str) != Some("authorization_code")
        || f.get("client_id").map(String::as_str) != Some(CLIENT)
    {
        return refuse("invalid_request");
    }
    // a code is used once
    let Some(grant) = f
        .get("code")
        .and_then(|c| op.grants.lock().unwrap().remove(c))
    else {
        return refuse("invalid_grant");
    };
    let verifier = f.get("code_verifier").cloned().unwrap_or_default();
    if b64(&sha2::Sha256::digest(verifier.as_bytes())) != grant.challenge
        || f.get("redirect_uri") != Some(&grant.redirect)
    {
        return refuse("invalid_grant");
    }
    let changes = op.changes.lock().unwrap().clone();
    let id_token = signed_token_with(&op.issuer, &grant.user, Some(&grant.nonce), &changes);
    axum::Json(json!({"access_token": "at", "token_type": "Bearer", "id_token": id_token}))
        .into_response()
}

/// A token `issuer` signs for `sub` (audience [`CLIENT`], five minutes, RS256 with the key the
/// provider's JWKS publishes as `rsa-a`): the provider's ID tokens, and the bearer tokens of the
/// tests that check `JwtBearer`.
pub fn signed_token(issuer: &str, sub: &str, nonce: Option<&str>) -> String {
    signed_token_with(issuer, sub, nonce, &json!({}))
}

/// [`signed_token`] with `changes` applied to its claims (a `null` removes the claim).
pub fn signed_token_with(issuer: &str, sub: &str, nonce: Option<&str>, changes: &Value) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut claims =
        json!({"iss": issuer, "aud": CLIENT, "sub": sub, "exp": now + 300, "iat": now});
    if let Some(n) = nonce {
        claims["nonce"] = json!(n);
    }
    for (k, v) in changes.as_object().into_iter().flatten() {
        if v.is_null() {
            claims.as_object_mut().unwrap().remove(k);
        } else {
            claims[k] = v.clone();
        }
    }
    token("rsa-a", "rsa-a", &claims)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `name=value` of the response's `Set-Cookie` named `name`, and the whole header.
pub fn set_cookie(r: &reqwest::Response, name: &str) -> (String, String) {
    let all = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} cookie: {:?}", r.headers()));
    (all.split(';').next().unwrap().to_owned(), all)
}

/// A panel signing people in at `op`, on 127.0.0.1 (its port chosen first: the redirect URL
/// names it).
pub async fn panel_with_login(op: &Provider) -> common::Fixture {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let login = OidcLogin::new(
        OidcLoginConfig::new(
            &op.issuer,
            CLIENT,
            format!("http://127.0.0.1:{port}/callback"),
        ),
        [5u8; 32],
    )
    .unwrap();
    common::start_with_agent_on(
        PanelConfig::default().with_oidc_login(login),
        common::delete_responder,
        common::with_gated_delete,
        &format!("127.0.0.1:{port}"),
    )
    .await
}

/// The sign-in's first two legs: `/login` (its `chat_login` cookie) and the provider's approval;
/// the login cookie and the callback URL the provider sends the browser back to.
pub async fn to_the_callback(op: &Provider, c: &reqwest::Client, base: &str) -> (String, String) {
    let r = c.get(format!("{base}login")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let (login_cookie, _) = set_cookie(&r, "chat_login");
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(to.starts_with(&format!("{}/authorize?", op.issuer)), "{to}");
    let r = c.get(&to).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 303, "the provider approves");
    let back = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(back.starts_with(&format!("{base}callback?")), "{back}");
    (login_cookie, back)
}

/// Signs `who` in through the whole flow; the session cookie (`chat_session=...`).
pub async fn sign_in(op: &Provider, base: &str, who: &str) -> String {
    op.sign_in_as(who);
    let c = client();
    let (login_cookie, back) = to_the_callback(op, &c, base).await;
    let r = c
        .get(&back)
        .header("cookie", &login_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (session, whole) = set_cookie(&r, "chat_session");
    assert!(
        whole.contains("HttpOnly") && whole.contains("SameSite=Lax") && whole.contains("Path=/"),
        "{whole}"
    );
    assert!(!whole.contains("Secure"), "http on loopback: {whole}");
    session
}
