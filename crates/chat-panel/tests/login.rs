//! #44: the browser login — OIDC authorization code with PKCE — against the test's own OpenID
//! provider on 127.0.0.1 (discovery, JWKS, an authorization endpoint that approves as the
//! person the test chooses, a token endpoint that checks the PKCE verifier), over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Form, Query, State};
use axum::response::{IntoResponse, Redirect};
use chat_panel::PanelConfig;
use chat_panel::login::{OidcLogin, OidcLoginConfig};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sha2::Digest;

const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/identity/");
const CLIENT: &str = "chat-panel";

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIX}{name}")).expect("fixture")
}

fn b64(v: &[u8]) -> String {
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
}

/// The test's OpenID provider.
pub struct Provider {
    pub issuer: String,
    user: Arc<Mutex<String>>,
    asked: Arc<Mutex<HashMap<String, String>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Provider {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let op = Op {
            issuer: issuer.clone(),
            user: Arc::new(Mutex::new("alice".into())),
            grants: Arc::default(),
            asked: Arc::default(),
        };
        let (user, asked) = (op.user.clone(), op.asked.clone());
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
                axum::routing::get(|| async {
                    let all: Value = serde_json::from_slice(&fixture("jwks.json")).unwrap();
                    axum::Json(json!({"keys": [all["rsa-a"]]}))
                }),
            )
            .route("/authorize", axum::routing::get(authorize))
            .route("/token", axum::routing::post(token))
            .with_state(op);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            issuer,
            user,
            asked,
            _task: task,
        }
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

async fn token(
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
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({"iss": op.issuer, "aud": CLIENT, "sub": grant.user, "nonce": grant.nonce,
        "exp": now + 300, "iat": now});
    let mut h = Header::new(Algorithm::RS256);
    h.kid = Some("rsa-a".into());
    let key = EncodingKey::from_rsa_pem(&fixture("rsa-a.pem")).unwrap();
    let id_token = jsonwebtoken::encode(&h, &claims, &key).unwrap();
    axum::Json(json!({"access_token": "at", "token_type": "Bearer", "id_token": id_token}))
        .into_response()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `name=value` of the response's `Set-Cookie` named `name`, and the whole header.
fn set_cookie(r: &reqwest::Response, name: &str) -> (String, String) {
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

/// Signs `who` in through the whole flow; the session cookie (`chat_session=...`).
pub async fn sign_in(op: &Provider, base: &str, who: &str) -> String {
    op.sign_in_as(who);
    let c = client();
    let r = c.get(format!("{base}login")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let (login_cookie, _) = set_cookie(&r, "chat_login");
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(to.starts_with(&format!("{}/authorize?", op.issuer)), "{to}");
    let r = c.get(&to).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 303, "the provider approves");
    let back = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(back.starts_with(&format!("{base}callback?")), "{back}");
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

#[tokio::test]
async fn login_code_flow_with_pkce_signs_the_person_in_and_the_cookie_is_theirs() {
    let op = Provider::start().await;
    let fx = panel_with_login(&op).await;
    let base = fx.url();
    let c = client();
    // no session: the page sends the person to /login, the API says where
    let r = c.get(&base).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/login");
    let r = c.post(format!("{base}api/sessions")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["login"], "/login", "{body}");

    let alice = sign_in(&op, &base, "alice").await;
    // what the provider was asked: S256 PKCE, a state and a nonce, our redirect
    let asked = op.asked.lock().unwrap().clone();
    assert_eq!(asked["code_challenge_method"], "S256");
    assert_eq!(asked["code_challenge"].len(), 43, "{asked:?}");
    assert!(
        asked["state"].len() >= 32 && asked["nonce"].len() >= 32,
        "{asked:?}"
    );
    assert_eq!(asked["redirect_uri"], format!("{base}callback"));
    assert_eq!(asked["scope"], "openid");

    let r = c.get(&base).header("cookie", &alice).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "the page, for alice");
    let r = c
        .post(format!("{base}api/sessions"))
        .header("cookie", &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let id = r.json::<Value>().await.unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    // bob signs in too: alice's conversation is not his
    let bob = sign_in(&op, &base, "bob").await;
    assert_ne!(bob, alice);
    let get = |cookie: String| {
        let c = c.clone();
        let url = format!("{base}api/sessions/{id}");
        async move {
            c.get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(get(alice.clone()).await, 200);
    assert_eq!(get(bob.clone()).await, 404);
    // a cookie altered to name alice is refused
    let tag = alice.rsplit_once('.').unwrap().1;
    let forged = format!(
        "chat_session={}.{tag}",
        br#"{"sub":"alice","exp":99999999999}"#
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(get(forged).await, 401);
    // logout clears the cookie
    let r = c
        .get(format!("{base}logout"))
        .header("cookie", &alice)
        .send()
        .await
        .unwrap();
    let (cleared, whole) = set_cookie(&r, "chat_session");
    assert_eq!(cleared, "chat_session=");
    assert!(whole.contains("Max-Age=0"), "{whole}");
}

#[tokio::test]
async fn login_a_callback_without_its_login_or_with_another_state_or_a_used_code_is_refused() {
    let op = Provider::start().await;
    let fx = panel_with_login(&op).await;
    let base = fx.url();
    let c = client();
    let r = c.get(format!("{base}login")).send().await.unwrap();
    let (login_cookie, _) = set_cookie(&r, "chat_login");
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    let r = c.get(&to).send().await.unwrap();
    let back = r.headers()["location"].to_str().unwrap().to_owned();
    // without the login cookie (another browser): refused
    let r = c.get(&back).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("not started here"));
    // another state
    let wrong = back.replace("state=", "state=00");
    let r = c
        .get(&wrong)
        .header("cookie", &login_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // the right one works once; the code used again is refused by the provider
    let r = c
        .get(&back)
        .header("cookie", &login_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = c
        .get(&back)
        .header("cookie", &login_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("invalid_grant"), "{text}");
    // the provider's error comes back as text, never as markup
    let r = c
        .get(format!("{base}callback?error=%3Cscript%3E&state=x"))
        .header("cookie", &login_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
}
