//! Identity: the authenticators against a real token issuer — a JWKS served over HTTP on
//! 127.0.0.1 by this test, whose keys it rotates — and the panel's `401`s over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;
#[path = "common/oidc.rs"]
mod oidc;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use oidc::{b64, fixture, jwk, token};
use serde_json::{Value, json};
use toolwright_chat_panel::PanelConfig;
use toolwright_chat_panel::identity::{
    Authenticator, IdentityError, JwtBearer, JwtBearerConfig, Principal, Refusal, RequestHead,
    TrustedProxyHeader,
};

const ISS: &str = "https://id.example.test";
const AUD: &str = "chat-panel";
/// The test's token issuer: serves `{"keys": [...]}` at `/jwks`, counting fetches.
struct Issuer {
    url: String,
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

impl Issuer {
    async fn start(kids: &[&str]) -> Self {
        let keys = Arc::new(Mutex::new(kids.iter().map(|k| jwk(k)).collect::<Vec<_>>()));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (k, f) = (keys.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (k, f) = (k.clone(), f.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    axum::Json(json!({"keys": *k.lock().unwrap()}))
                }
            }),
        );
        let (listener, base) = oidc::bind_local().await;
        let url = format!("{base}/jwks");
        let task = oidc::serve_app(listener, app);
        Self {
            url,
            keys,
            fetches,
            _task: task,
        }
    }

    /// The provider rotates: from now on it publishes these keys only.
    fn publish(&self, kids: &[&str]) {
        *self.keys.lock().unwrap() = kids.iter().map(|k| jwk(k)).collect();
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    fn bearer(&self) -> JwtBearer {
        let mut c = JwtBearerConfig::new(&self.url, ISS, AUD);
        c.refetch_interval = Duration::from_millis(1000);
        JwtBearer::new(c).unwrap()
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(sub: &str) -> Value {
    json!({"sub": sub, "iss": ISS, "aud": AUD, "exp": now() + 600, "iat": now()})
}

fn head_with(auth: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(a) = auth {
        h.insert("authorization", HeaderValue::from_str(a).unwrap());
    }
    h
}

async fn check(b: &JwtBearer, token: &str) -> Result<Principal, Refusal> {
    let h = head_with(Some(&format!("Bearer {token}")));
    b.authenticate(RequestHead {
        headers: &h,
        peer: None,
    })
    .await
}

#[tokio::test]
async fn jwt_tokens_signed_by_the_issuers_rsa_and_ec_keys_name_their_subject() {
    let issuer = Issuer::start(&["rsa-a", "ec-a"]).await;
    let b = issuer.bearer();
    let p = check(&b, &token("rsa-a", "rsa-a", &claims("alice")))
        .await
        .unwrap();
    assert_eq!(p.id(), "alice");
    let p = check(&b, &token("ec-a", "ec-a", &claims("bob")))
        .await
        .unwrap();
    assert_eq!(p.id(), "bob");
    assert_eq!(issuer.fetches(), 1, "the keys are fetched once and cached");
}

#[tokio::test]
async fn jwt_expired_wrong_audience_wrong_issuer_unknown_key_alg_none_and_hmac_are_refused() {
    let issuer = Issuer::start(&["rsa-a", "ec-a"]).await;
    let b = issuer.bearer();
    let mut expired = claims("alice");
    expired["exp"] = json!(now() - 3600);
    let mut wrong_aud = claims("alice");
    wrong_aud["aud"] = json!("another-app");
    let mut wrong_iss = claims("alice");
    wrong_iss["iss"] = json!("https://evil.example.test");
    let mut no_exp = claims("alice");
    no_exp.as_object_mut().unwrap().remove("exp");
    // alg none: an unsigned token naming a key the issuer publishes
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT","kid":"rsa-a"}"#),
        b64(claims("alice").to_string().as_bytes())
    );
    // HMAC "signed" with the issuer's public key (the classic RS256→HS256 confusion)
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("rsa-a".into());
    let hmac = jsonwebtoken::encode(
        &hs,
        &claims("alice"),
        &EncodingKey::from_secret(&fixture("rsa-a.pub.pem")),
    )
    .unwrap();
    let cases: Vec<(&str, String, Refusal)> = vec![
        (
            "expired",
            token("rsa-a", "rsa-a", &expired),
            Refusal::Expired,
        ),
        (
            "no exp",
            token("rsa-a", "rsa-a", &no_exp),
            Refusal::MissingClaim {
                claim: "exp".into(),
                required: "a time in seconds since 1970",
            },
        ),
        (
            "wrong audience",
            token("rsa-a", "rsa-a", &wrong_aud),
            Refusal::WrongAudience,
        ),
        (
            "wrong issuer",
            token("rsa-a", "rsa-a", &wrong_iss),
            Refusal::WrongIssuer,
        ),
        (
            "a key the issuer does not publish",
            token("rsa-b", "rsa-b", &claims("alice")),
            Refusal::UnknownKey,
        ),
        (
            "another key claiming a published kid",
            token("rsa-b", "rsa-a", &claims("alice")),
            Refusal::BadSignature,
        ),
        (
            "an RSA signature under the EC key's kid",
            token("rsa-a", "ec-a", &claims("alice")),
            Refusal::BadSignature,
        ),
        (
            "HMAC signed with the public key",
            hmac,
            Refusal::AlgorithmNotAllowed("HS256".into()),
        ),
    ];
    for (what, t, want) in cases {
        assert_eq!(check(&b, &t).await, Err(want), "{what}");
    }
    assert_eq!(check(&b, &none).await, Err(Refusal::Unsigned), "alg none");
    let missing = head_with(None);
    let r = b
        .authenticate(RequestHead {
            headers: &missing,
            peer: None,
        })
        .await;
    assert_eq!(r, Err(Refusal::MissingToken));
    let basic = head_with(Some("Basic YWxpY2U6cHc="));
    let r = b
        .authenticate(RequestHead {
            headers: &basic,
            peer: None,
        })
        .await;
    assert!(matches!(r, Err(Refusal::Malformed(_))), "{r:?}");
}

/// `claims("alice")` with `changes` applied (a `null` removes the claim).
fn claims_with(changes: Value) -> Value {
    let mut c = claims("alice");
    for (k, v) in changes.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

#[tokio::test]
async fn a_token_not_yet_valid_is_refused() {
    let issuer = Issuer::start(&["rsa-a"]).await;
    let b = issuer.bearer(); // leeway 30 s
    for (what, nbf) in [
        ("an hour ahead", now() + 3600),
        ("a day ahead", now() + 86_400),
    ] {
        let t = token("rsa-a", "rsa-a", &claims_with(json!({"nbf": nbf})));
        let r = check(&b, &t).await;
        assert_eq!(r, Err(Refusal::NotYetValid), "nbf {what}");
        assert!(
            r.unwrap_err().to_string().contains("not valid yet"),
            "the refusal says why"
        );
    }
    // within the leeway (clock skew), or already valid: accepted
    for nbf in [now() + 10, now(), now() - 3600] {
        let t = token("rsa-a", "rsa-a", &claims_with(json!({"nbf": nbf})));
        assert_eq!(check(&b, &t).await.unwrap().id(), "alice", "nbf {nbf}");
    }
    // the configured leeway is the one applied
    let mut wide = JwtBearerConfig::new(&issuer.url, ISS, AUD);
    wide.leeway = Duration::from_secs(600);
    let wide = JwtBearer::new(wide).unwrap();
    let five_minutes = token("rsa-a", "rsa-a", &claims_with(json!({"nbf": now() + 300})));
    assert_eq!(check(&wide, &five_minutes).await.unwrap().id(), "alice");
    assert_eq!(check(&b, &five_minutes).await, Err(Refusal::NotYetValid));
    let mut none = JwtBearerConfig::new(&issuer.url, ISS, AUD);
    none.leeway = Duration::ZERO;
    let none = JwtBearer::new(none).unwrap();
    let ten_seconds = token("rsa-a", "rsa-a", &claims_with(json!({"nbf": now() + 10})));
    assert_eq!(check(&none, &ten_seconds).await, Err(Refusal::NotYetValid));
    // an `nbf` that is no time at all
    let t = token("rsa-a", "rsa-a", &claims_with(json!({"nbf": "tomorrow"})));
    assert_eq!(
        check(&b, &t).await.unwrap_err().to_string(),
        "the token's `nbf` claim is a string (a time in seconds since 1970 is required)"
    );

    // over HTTP: 401, saying why
    let fx = common::start_with(
        PanelConfig::default().with_authenticator(issuer.bearer()),
        common::demo_responder,
    )
    .await;
    let early = token("rsa-a", "rsa-a", &claims_with(json!({"nbf": now() + 3600})));
    let r = reqwest::Client::new()
        .post(format!("{}api/sessions", fx.url()))
        .bearer_auth(&early)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("not valid yet"),
        "{body}"
    );
}

#[tokio::test]
async fn a_token_issued_in_the_future_is_refused() {
    let issuer = Issuer::start(&["rsa-a"]).await;
    let b = issuer.bearer(); // leeway 30 s
    for iat in [now() + 3600, now() + 86_400] {
        let t = token("rsa-a", "rsa-a", &claims_with(json!({"iat": iat})));
        let r = check(&b, &t).await;
        assert_eq!(r, Err(Refusal::IssuedInFuture), "iat {iat}");
        assert!(r.unwrap_err().to_string().contains("`iat`"));
    }
    // clock skew within the leeway, an old one, or none at all: accepted
    for iat in [json!(now() + 10), json!(now() - 86_400), Value::Null] {
        let t = token("rsa-a", "rsa-a", &claims_with(json!({"iat": iat})));
        assert_eq!(check(&b, &t).await.unwrap().id(), "alice", "iat {iat}");
    }
    let t = token("rsa-a", "rsa-a", &claims_with(json!({"iat": "now"})));
    assert_eq!(
        check(&b, &t).await.unwrap_err().to_string(),
        "the token's `iat` claim is a string (a time in seconds since 1970 is required)"
    );
}

#[tokio::test]
async fn the_bearer_scheme_is_matched_in_any_case() {
    let issuer = Issuer::start(&["rsa-a"]).await;
    let b = issuer.bearer();
    let t = token("rsa-a", "rsa-a", &claims("alice"));
    for scheme in ["Bearer", "bearer", "BEARER", "BeArEr"] {
        for gap in [" ", "  ", "\t"] {
            let h = head_with(Some(&format!("{scheme}{gap}{t}")));
            let r = b
                .authenticate(RequestHead {
                    headers: &h,
                    peer: None,
                })
                .await;
            assert_eq!(r.unwrap().id(), "alice", "{scheme:?} {gap:?}");
        }
    }
    for bad in [
        format!("Bearer{t}"),
        format!("Basic {t}"),
        format!("Bearers {t}"),
        "Bearer".to_owned(),
        "Bearer   ".to_owned(),
        format!("Bearer {t} {t}"),
    ] {
        let h = head_with(Some(&bad));
        let r = b
            .authenticate(RequestHead {
                headers: &h,
                peer: None,
            })
            .await;
        assert!(matches!(r, Err(Refusal::Malformed(_))), "{bad:?}: {r:?}");
    }
    // over HTTP, as a client that writes the scheme in capitals sends it
    let fx = common::start_with(
        PanelConfig::default().with_authenticator(issuer.bearer()),
        common::demo_responder,
    )
    .await;
    for scheme in ["BEARER", "bearer"] {
        let r = reqwest::Client::new()
            .post(format!("{}api/sessions", fx.url()))
            .header("authorization", format!("{scheme} {t}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
    }
}

#[tokio::test]
async fn refusals_say_what_is_wrong_with_the_token() {
    let issuer = Issuer::start(&["rsa-a"]).await;
    let b = issuer.bearer();
    let signed = |changes: Value| token("rsa-a", "rsa-a", &claims_with(changes));
    let unsigned = |alg: &str| {
        format!(
            "{}.{}.",
            b64(format!(r#"{{"alg":"{alg}","typ":"JWT","kid":"rsa-a"}}"#).as_bytes()),
            b64(claims("alice").to_string().as_bytes())
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "no sub",
            signed(json!({"sub": null})),
            "the token has no `sub` claim (a string is required)",
        ),
        (
            "a numeric sub",
            signed(json!({"sub": 42})),
            "the token's `sub` claim is a number (a string is required)",
        ),
        (
            "an object as sub",
            signed(json!({"sub": {"id": "alice"}})),
            "the token's `sub` claim is an object (a string is required)",
        ),
        (
            "alg none",
            unsigned("none"),
            "the token's `alg` is none; only signed tokens are accepted",
        ),
        (
            "alg NONE",
            unsigned("NONE"),
            "the token's `alg` is none; only signed tokens are accepted",
        ),
        (
            "an algorithm nobody knows",
            unsigned("XY999"),
            "tokens signed with XY999 are not accepted here; use your identity provider's token",
        ),
        (
            "no exp",
            signed(json!({"exp": null})),
            "the token has no `exp` claim (a time in seconds since 1970 is required)",
        ),
        (
            "exp as text",
            signed(json!({"exp": "soon"})),
            "the token's `exp` claim is a string (a time in seconds since 1970 is required)",
        ),
        (
            "no iss",
            signed(json!({"iss": null})),
            "the token has no `iss` claim (an issuer string is required)",
        ),
        (
            "a numeric aud",
            signed(json!({"aud": 7})),
            "the token's `aud` claim is a number (an audience naming this panel's client id is required)",
        ),
        (
            "not a JWT",
            "not-a-token".to_owned(),
            "the bearer token is malformed (not a JWT: expected three base64url parts separated by dots); sign in again",
        ),
        (
            "a header that is not JSON",
            format!("{}.{}.x", b64(b"{alg"), b64(b"{}")),
            "the bearer token is malformed (its header is not base64url-encoded JSON); sign in again",
        ),
    ];
    for (what, t, want) in cases {
        let got = check(&b, &t).await.unwrap_err().to_string();
        assert_eq!(got, want, "{what}");
    }
    // an empty sub is a string, but names nobody
    let r = check(&b, &signed(json!({"sub": ""}))).await.unwrap_err();
    assert_eq!(r, Refusal::BadPrincipal);
    // a signature that does not verify is still just that (and its claims are not looked at)
    let forged = token("rsa-b", "rsa-a", &claims_with(json!({"sub": 42})));
    assert_eq!(check(&b, &forged).await, Err(Refusal::BadSignature));
}

#[tokio::test]
async fn jwt_a_rotated_key_is_picked_up_without_restart_and_unknown_kids_refetch_at_a_bounded_rate()
{
    let issuer = Issuer::start(&["rsa-a"]).await;
    let b = issuer.bearer();
    assert!(
        check(&b, &token("rsa-a", "rsa-a", &claims("alice")))
            .await
            .is_ok()
    );
    assert_eq!(issuer.fetches(), 1);
    // the provider rotates to rsa-b; within the refetch interval an unknown kid is refused
    // without asking it again
    issuer.publish(&["rsa-b"]);
    let rotated = token("rsa-b", "rsa-b", &claims("alice"));
    assert_eq!(check(&b, &rotated).await, Err(Refusal::UnknownKey));
    assert_eq!(issuer.fetches(), 1, "no refetch within the interval");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(check(&b, &rotated).await.unwrap().id(), "alice");
    assert_eq!(issuer.fetches(), 2, "the unknown kid made one refetch");
    // made-up kids cannot make the panel hammer the provider
    let ghost = token("rsa-b", "ghost", &claims("alice"));
    for _ in 0..20 {
        assert_eq!(check(&b, &ghost).await, Err(Refusal::UnknownKey));
    }
    assert_eq!(issuer.fetches(), 2);
    // the retired key no longer verifies once the set is refetched
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let old = token("rsa-a", "rsa-a", &claims("alice"));
    assert_eq!(check(&b, &old).await, Err(Refusal::UnknownKey));
    assert_eq!(issuer.fetches(), 3);
}

#[tokio::test]
async fn jwt_an_unreachable_issuer_is_a_refusal_that_says_so() {
    let mut c = JwtBearerConfig::new("http://127.0.0.1:9/jwks", ISS, AUD);
    c.fetch_timeout = Duration::from_secs(2);
    let b = JwtBearer::new(c).unwrap();
    let r = check(&b, &token("rsa-a", "rsa-a", &claims("alice"))).await;
    assert_eq!(r, Err(Refusal::KeysUnavailable));
}

#[test]
fn jwt_config_refuses_hmac_algorithms() {
    let mut c = JwtBearerConfig::new("http://127.0.0.1:9/jwks", ISS, AUD);
    c.algorithms = vec![Algorithm::RS256, Algorithm::HS256];
    assert_eq!(
        JwtBearer::new(c).err(),
        Some(IdentityError::SymmetricAlgorithm(Algorithm::HS256))
    );
}

#[tokio::test]
async fn proxy_header_is_believed_only_from_the_named_proxies_and_only_once() {
    let proxy: IpAddr = "10.0.0.7".parse().unwrap();
    let auth = TrustedProxyHeader::new("x-forwarded-user", [proxy]).unwrap();
    let mut h = HeaderMap::new();
    h.insert("x-forwarded-user", HeaderValue::from_static("alice"));
    let from = |peer: Option<IpAddr>| RequestHead { headers: &h, peer };
    assert_eq!(
        auth.authenticate(from(Some(proxy))).await.unwrap().id(),
        "alice"
    );
    for peer in [Some("10.0.0.8".parse().unwrap()), None] {
        assert_eq!(
            auth.authenticate(from(peer)).await,
            Err(Refusal::NotFromTrustedProxy)
        );
    }
    // a client's own header passed along beside the proxy's
    h.append("x-forwarded-user", HeaderValue::from_static("mallory"));
    let twice = RequestHead {
        headers: &h,
        peer: Some(proxy),
    };
    assert_eq!(
        auth.authenticate(twice).await,
        Err(Refusal::NotFromTrustedProxy)
    );
    let none = HeaderMap::new();
    let missing = RequestHead {
        headers: &none,
        peer: Some(proxy),
    };
    assert_eq!(
        auth.authenticate(missing).await,
        Err(Refusal::NotFromTrustedProxy)
    );
    assert!(matches!(
        TrustedProxyHeader::new("x-forwarded-user", []),
        Err(IdentityError::Proxy(_))
    ));
}

#[tokio::test]
async fn panel_without_authentication_refuses_to_listen_off_loopback() {
    let backend_dir = tempfile::tempdir().unwrap();
    let config = PanelConfig::default().with_history_path(backend_dir.path().join("p.sqlite3"));
    let bus = toolwright_messaging::MessageBus::new();
    let model = testkit::ScriptedServer::start().await;
    let mut cfg = toolwright_model_gateway::OpenAiConfig::new("scripted");
    cfg.base_url = model.base_url();
    let llm = toolwright_model_gateway::OpenAiModel::new(cfg).unwrap();
    let backend = toolwright_chat_panel::AgentBackend::build(llm, bus.clone(), &config, |b| b)
        .await
        .unwrap();
    let panel = toolwright_chat_panel::ChatPanel::new(backend, bus, config);
    let err = panel.serve("0.0.0.0:0").await.unwrap_err();
    let inner = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<IdentityError>());
    assert!(
        matches!(inner, Some(IdentityError::NoAuthOffLoopback { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn panel_answers_401_without_a_valid_token_and_serves_the_tokens_subject() {
    let issuer = Issuer::start(&["rsa-a"]).await;
    let fx = common::start_with(
        PanelConfig::default().with_authenticator(issuer.bearer()),
        common::demo_responder,
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}api/sessions/conv-00000001", fx.url());
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("sign in"),
        "{body}"
    );
    let bad = token("rsa-b", "rsa-a", &claims("alice"));
    let r = client.get(&url).bearer_auth(bad).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let good = token("rsa-a", "rsa-a", &claims("alice"));
    // let in: an id nobody was given is not found; one alice starts is hers
    let r = client.get(&url).bearer_auth(&good).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .post(format!("{}api/sessions", fx.url()))
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = r.json::<Value>().await.unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = client
        .get(format!("{}api/sessions/{id}", fx.url()))
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // the page and the health check need no token (they show nothing of anyone's)
    assert_eq!(client.get(fx.url()).send().await.unwrap().status(), 200);
    let health = client
        .get(format!("{}healthz", fx.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn panel_behind_a_proxy_takes_the_header_from_the_proxy_only() {
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    let elsewhere: IpAddr = "10.0.0.7".parse().unwrap();
    for (proxy, want) in [(local, 200), (elsewhere, 401)] {
        let fx = common::start_with(
            PanelConfig::default()
                .with_authenticator(TrustedProxyHeader::new("x-forwarded-user", [proxy]).unwrap()),
            common::demo_responder,
        )
        .await;
        let r = reqwest::Client::new()
            .post(format!("{}api/sessions", fx.url()))
            .header("x-forwarded-user", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want, "proxy {proxy}");
    }
}

/// A panel behind a "proxy" on 127.0.0.1 that names the person in `x-forwarded-user`: each
/// request says who it is.
async fn proxied_panel() -> common::Fixture {
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    common::start_with(
        PanelConfig::default()
            .with_authenticator(TrustedProxyHeader::new("x-forwarded-user", [local]).unwrap()),
        common::demo_responder,
    )
    .await
}

/// A new conversation of `who`'s, named by the server.
async fn mint(fx: &common::Fixture, who: &str) -> String {
    named_by_the_server(fx, who, reqwest::Method::POST, "api/sessions").await
}

/// The `sessionId` that `method path` answers `who` (`200`).
async fn named_by_the_server(
    fx: &common::Fixture,
    who: &str,
    method: reqwest::Method,
    path: &str,
) -> String {
    let (s, body) = as_user(who, method, format!("{}{path}", fx.url()), None).await;
    assert_eq!(s, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A custom authenticator (the seam): the person named in `x-forwarded-user`, from anyone,
/// loopback only — so conversations may still be started under ids the client picks.
#[derive(Debug)]
struct LocalUsers;

#[async_trait::async_trait]
impl Authenticator for LocalUsers {
    async fn authenticate(&self, head: RequestHead<'_>) -> Result<Principal, Refusal> {
        let v = head
            .headers
            .get("x-forwarded-user")
            .ok_or(Refusal::MissingToken)?;
        Principal::new(v.to_str().map_err(|_| Refusal::BadPrincipal)?)
    }
    fn loopback_only(&self) -> bool {
        true
    }
}

async fn as_user(
    who: &str,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> (u16, String) {
    let r = reqwest::Client::new()
        .request(method, url)
        .header("x-forwarded-user", who);
    common::send(r, body).await
}

#[tokio::test]
async fn ownership_every_endpoint_answers_404_to_another_principal() {
    let fx = proxied_panel().await;
    let id = mint(&fx, "alice").await;
    let base = format!("{}api/sessions/{id}", fx.url());
    let (s, body) = as_user(
        "alice",
        reqwest::Method::POST,
        format!("{base}/messages"),
        Some(json!({"text": "hello"})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (s, mine) = as_user("alice", reqwest::Method::GET, base.clone(), None).await;
    assert_eq!(s, 200);
    let entries = serde_json::from_str::<Value>(&mine).unwrap()["entries"]
        .as_array()
        .unwrap()
        .len();
    assert!(entries >= 2, "{mine}");
    use reqwest::Method as M;
    let attempts = [
        ("state", M::GET, base.clone(), None),
        ("events", M::GET, format!("{base}/events"), None),
        (
            "message",
            M::POST,
            format!("{base}/messages"),
            Some(json!({"text": "I am alice now"})),
        ),
        (
            "approvals",
            M::POST,
            format!("{base}/approvals"),
            Some(json!({"decisions": [{"call_id": "call_1", "token": "t", "approved": true}]})),
        ),
        (
            "elicitation",
            M::POST,
            format!("{base}/elicitations/1"),
            Some(json!({"action": "cancel"})),
        ),
    ];
    for (what, method, url, body) in attempts {
        let (s, text) = as_user("bob", method, url, body).await;
        assert_eq!(s, 404, "{what}: {text}");
        assert!(text.contains("no such conversation"), "{what}: {text}");
    }
    // bob's message was not stored: alice's conversation is as it was
    let (_, after) = as_user("alice", M::GET, base, None).await;
    let entries_after = serde_json::from_str::<Value>(&after).unwrap()["entries"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(entries_after, entries);
    assert!(!after.contains("I am alice now"));
}

#[tokio::test]
async fn ownership_a_stream_opened_before_another_principal_creates_the_conversation_shows_none_of_it()
 {
    let fx = common::start_with(
        PanelConfig::default().with_authenticator(LocalUsers),
        common::demo_responder,
    )
    .await;
    let base = format!("{}api/sessions/conv-later-0001", fx.url());
    let follow = tokio::spawn(as_user(
        "bob",
        reqwest::Method::GET,
        format!("{base}/events"),
        None,
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, _) = as_user(
        "alice",
        reqwest::Method::POST,
        format!("{base}/messages"),
        Some(json!({"text": "secret plans"})),
    )
    .await;
    assert_eq!(s, 200);
    let (s, seen) = follow.await.unwrap();
    assert_eq!(s, 200);
    assert!(
        !seen.contains("secret plans") && !seen.contains("event: row"),
        "{seen}"
    );
}

#[tokio::test]
async fn ownership_the_server_mints_unguessable_ids_and_refuses_client_chosen_ones() {
    let fx = proxied_panel().await;
    let sessions = format!("{}api/sessions", fx.url());
    let (s, body) = as_user("alice", reqwest::Method::POST, sessions.clone(), None).await;
    assert_eq!(s, 200, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    let (_, other) = as_user("alice", reqwest::Method::POST, sessions, None).await;
    assert!(!other.contains(&id), "two conversations, two ids");
    // the minted conversation is alice's: she can post into it, bob cannot see it
    let base = format!("{}api/sessions/{id}", fx.url());
    let (s, text) = as_user(
        "alice",
        reqwest::Method::POST,
        format!("{base}/messages"),
        Some(json!({"text": "hello"})),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let (s, _) = as_user("bob", reqwest::Method::GET, base, None).await;
    assert_eq!(s, 404);
    // an id the client picks is not used as a key: nothing is created under it
    let chosen = format!("{}api/sessions/my-own-id-0001", fx.url());
    let (s, text) = as_user(
        "alice",
        reqwest::Method::POST,
        format!("{chosen}/messages"),
        Some(json!({"text": "hello"})),
    )
    .await;
    assert_eq!(s, 404, "{text}");
    assert!(text.contains("POST /api/sessions"), "{text}");
    let (s, text) = as_user("alice", reqwest::Method::GET, chosen, None).await;
    assert_eq!(s, 404, "nothing was created under it: {text}");
}

/// `method url` as `who`: the status, the headers but `date`, and the body's bytes.
async fn exactly(
    who: &str,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> (u16, Vec<(String, Vec<u8>)>, Vec<u8>) {
    let mut r = reqwest::Client::new()
        .request(method, url)
        .header("x-forwarded-user", who);
    if let Some(b) = body {
        r = r.json(b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let mut headers: Vec<(String, Vec<u8>)> = r
        .headers()
        .iter()
        .filter(|(n, _)| *n != "date")
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect();
    headers.sort();
    let bytes = tokio::time::timeout(Duration::from_secs(20), r.bytes())
        .await
        .expect("the response ends")
        .unwrap();
    (status, headers, bytes.to_vec())
}

/// behind authentication, another's conversation and one that does not exist get
/// the same answer to the byte (status, headers but `date`, body) on every endpoint, so a caller
/// cannot even learn that an id is in use.
#[tokio::test]
async fn anothers_conversation_and_one_that_does_not_exist_answer_byte_identically() {
    let fx = proxied_panel().await;
    let id = mint(&fx, "alice").await;
    let api = format!("{}api/sessions", fx.url());
    let (s, _) = as_user(
        "alice",
        reqwest::Method::POST,
        format!("{api}/{id}/messages"),
        Some(json!({"text": "hello"})),
    )
    .await;
    assert_eq!(s, 200);
    // an id of the same shape that nobody was given
    let nobodys = format!("{:032x}", u128::from_str_radix(&id, 16).unwrap() ^ 1);
    use reqwest::Method as M;
    let message = json!({"text": "hello"});
    let approve = json!({"decisions": [{"call_id": "call_1", "token": "t", "approved": true}]});
    let answer = json!({"action": "cancel"});
    for (what, method, tail, body) in [
        ("state", M::GET, "", None),
        ("events", M::GET, "/events", None),
        ("message", M::POST, "/messages", Some(&message)),
        ("approvals", M::POST, "/approvals", Some(&approve)),
        ("elicitation", M::POST, "/elicitations/1", Some(&answer)),
    ] {
        let anothers = exactly("bob", method.clone(), &format!("{api}/{id}{tail}"), body).await;
        let none = exactly("bob", method, &format!("{api}/{nobodys}{tail}"), body).await;
        assert_eq!(anothers.0, 404, "{what}");
        assert_eq!(
            anothers,
            none,
            "{what}: {} vs {}",
            String::from_utf8_lossy(&anothers.2),
            String::from_utf8_lossy(&none.2)
        );
    }
    // and nothing was created under the unknown id
    let (s, _) = as_user("alice", M::GET, format!("{api}/{nobodys}"), None).await;
    assert_eq!(s, 404);
}

/// `who`'s inbox conversation on `fx` (`GET /api/inbox`).
async fn inbox_of(fx: &common::Fixture, who: &str) -> String {
    named_by_the_server(fx, who, reqwest::Method::GET, "api/inbox").await
}

/// Waits until `who`'s view of conversation `id` shows a message `text` from `from`, and
/// gives that entry.
async fn message_shown(fx: &common::Fixture, who: &str, id: &str, from: &str, text: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (s, body) = as_user(
            who,
            reqwest::Method::GET,
            format!("{}api/sessions/{id}", fx.url()),
            None,
        )
        .await;
        if s == 200 {
            let state: Value = serde_json::from_str(&body).unwrap();
            if let Some(e) = state["entries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["kind"] == "message" && e["from"] == from && e["text"] == text)
            {
                return e.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{who} never saw {text:?} in {id}: {s} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// a service addresses a person (`person:PRINCIPAL`, `toolwright_chat_panel::person_address`),
/// not a conversation id. The message lands in that principal's inbox conversation — created as
/// theirs by the message itself when they never opened it — which `GET /api/inbox` gives them
/// (the same id every time, and on any worker); another principal has an inbox of their own and
/// gets 404 on theirs, byte for byte as for an id nobody has; an answer to the message's quick
/// reply runs a turn there. Under an authenticator that lets clients pick ids, nobody starts a
/// conversation under another's inbox id. Without authentication the one person is `local`.
#[tokio::test]
async fn bus_messages_to_a_principal_reach_their_inbox_and_nobody_elses() {
    use reqwest::Method as M;
    let fx = proxied_panel().await;
    // before alice ever opened her inbox
    common::invoice_for_alice(&fx.bus).await;
    let alices = inbox_of(&fx, "alice").await;
    assert_eq!(
        inbox_of(&fx, "alice").await,
        alices,
        "one inbox, the same id"
    );
    let shown = message_shown(&fx, "alice", &alices, "billing-bot", "Invoice 42 is ready").await;
    assert_eq!(
        shown["quickReplies"],
        json!(["Pay now", "Later"]),
        "{shown}"
    );
    // after: the same conversation
    fx.bus
        .send(toolwright_messaging::OutgoingMessage::new(
            "billing-bot",
            toolwright_chat_panel::person_address("alice"),
            "Reminder: invoice 42",
        ))
        .await
        .unwrap();
    message_shown(&fx, "alice", &alices, "billing-bot", "Reminder: invoice 42").await;

    let bobs = inbox_of(&fx, "bob").await;
    assert_ne!(bobs, alices);
    let (_, bob_view) = as_user(
        "bob",
        M::GET,
        format!("{}api/sessions/{bobs}", fx.url()),
        None,
    )
    .await;
    assert!(!bob_view.contains("invoice 42"), "{bob_view}");
    let api = format!("{}api/sessions", fx.url());
    // an inbox id of the same shape that nobody has
    let last = if alices.ends_with('0') { '1' } else { '0' };
    let nobodys = format!("{}{last}", &alices[..alices.len() - 1]);
    let message = json!({"text": "Pay now"});
    for (what, method, tail, body) in [
        ("state", M::GET, "", None),
        ("events", M::GET, "/events", None),
        ("message", M::POST, "/messages", Some(&message)),
    ] {
        let anothers = exactly(
            "bob",
            method.clone(),
            &format!("{api}/{alices}{tail}"),
            body,
        )
        .await;
        let none = exactly("bob", method, &format!("{api}/{nobodys}{tail}"), body).await;
        assert_eq!(anothers.0, 404, "{what}");
        assert_eq!(anothers, none, "{what}");
    }
    // alice answers with a quick reply: a turn in her inbox
    let (s, body) = as_user(
        "alice",
        M::POST,
        format!("{api}/{alices}/messages"),
        Some(message),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (_, view) = as_user("alice", M::GET, format!("{api}/{alices}"), None).await;
    let view: Value = serde_json::from_str(&view).unwrap();
    let answered = view["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["text"] == "Invoice 42 is ready")
        .unwrap();
    assert_eq!(answered["answered"], true, "{answered}");
    assert_eq!(answered["chosen"], "Pay now", "{answered}");

    // an authenticator that lets clients pick ids (loopback only): bob cannot start a
    // conversation under carol's inbox id before she has one, and carol's messages reach her
    let picky = common::start_with(
        PanelConfig::default().with_authenticator(LocalUsers),
        common::demo_responder,
    )
    .await;
    let carols = inbox_of(&fx, "carol").await; // the same id on every panel
    let (s, body) = as_user(
        "bob",
        M::POST,
        format!("{}api/sessions/{carols}/messages", picky.url()),
        Some(json!({"text": "mine now"})),
    )
    .await;
    assert_eq!(s, 404, "{body}");
    picky
        .bus
        .send(toolwright_messaging::OutgoingMessage::new(
            "hr-bot",
            toolwright_chat_panel::person_address("carol"),
            "Your leave is approved",
        ))
        .await
        .unwrap();
    assert_eq!(inbox_of(&picky, "carol").await, carols);
    message_shown(&picky, "carol", &carols, "hr-bot", "Your leave is approved").await;
    let (_, view) = as_user(
        "carol",
        M::GET,
        format!("{}api/sessions/{carols}", picky.url()),
        None,
    )
    .await;
    assert!(!view.contains("mine now"), "{view}");

    // without authentication the one person is `local`
    let open = common::start().await;
    open.bus
        .send(toolwright_messaging::OutgoingMessage::new(
            "ops-bot",
            toolwright_chat_panel::person_address("local"),
            "Backup done",
        ))
        .await
        .unwrap();
    let (s, body) = common::send(
        reqwest::Client::new().get(format!("{}api/inbox", open.url())),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let state = common::session_state(&open.url(), &id).await;
        if state["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["text"] == "Backup done")
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
