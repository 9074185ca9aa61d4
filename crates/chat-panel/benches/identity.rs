//! What knowing who calls costs a request. `JwtBearer` with its keys cached (fetched
//! once from a JWKS served on 127.0.0.1 by this bench, as a provider would): verifying an RS256
//! and an ES256 token; and the whole guard path — the same `GET /api/sessions/{id}` through the
//! panel's router (request checks, authentication, ownership, handler) without authentication
//! and with a bearer token, whose difference is what verification adds to a request.
//!
//! Run: `cargo bench -p toolwright-chat-panel --bench identity`. Criterion keeps the median (p50) in
//! `target/criterion/<name>/new/estimates.json`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/common/oidc.rs"]
mod oidc;

use std::hint::black_box;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, header};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolwright_chat_panel::identity::{Authenticator, JwtBearer, JwtBearerConfig, RequestHead};
use toolwright_chat_panel::{ChatBackend, ChatPanel, EventStream, PanelConfig};
use toolwright_context_engine::{MemoryStore, SessionStore};
use tower::ServiceExt;

const ISS: &str = "https://id.example.test";
const AUD: &str = "chat-panel";

/// A backend that is never asked to answer: the bench reads conversations only.
struct Reader(Arc<dyn SessionStore>);

impl ChatBackend for Reader {
    fn reply(&self, _: &str, _: &str, _: &str) -> EventStream {
        Box::pin(futures::stream::empty())
    }
    fn store(&self) -> Arc<dyn SessionStore> {
        Arc::clone(&self.0)
    }
}

/// A JWKS with the RSA and EC fixture keys on 127.0.0.1; its URL.
async fn jwks() -> String {
    let app = axum::Router::new().route(
        "/jwks",
        axum::routing::get(|| async {
            axum::Json(json!({"keys": [oidc::jwk("rsa-a"), oidc::jwk("ec-a")]}))
        }),
    );
    let (listener, base) = oidc::bind_local().await;
    drop(oidc::serve_app(listener, app));
    format!("{base}/jwks")
}

fn bearer_token(key: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // valid for the whole run
    let claims = json!({"sub": "alice", "iss": ISS, "aud": AUD, "exp": now + 86_400, "iat": now});
    format!("Bearer {}", oidc::token(key, key, &claims))
}

fn verifier(url: &str) -> JwtBearer {
    JwtBearer::new(JwtBearerConfig::new(url, ISS, AUD)).unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = rt.block_on(jwks());

    let mut g = c.benchmark_group("identity_verify_cached_jwks");
    let bearer = verifier(&url);
    for key in ["rsa-a", "ec-a"] {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&bearer_token(key)).unwrap(),
        );
        let head = || RequestHead {
            headers: &headers,
            peer: None,
        };
        // the first token fetches the keys; every one after uses them
        let who = rt.block_on(bearer.authenticate(head())).unwrap();
        assert_eq!(who.id(), "alice");
        let alg = if key.starts_with("ec") {
            "ES256"
        } else {
            "RS256"
        };
        g.bench_function(alg, |b| {
            b.iter(|| black_box(rt.block_on(bearer.authenticate(black_box(head()))).is_ok()));
        });
    }
    g.finish();

    // the whole guard path: one conversation read through the router, without and with a token
    let mut g = c.benchmark_group("identity_guard_get_session");
    let token = bearer_token("rsa-a");
    for (name, config) in [
        ("no_auth", PanelConfig::default()),
        (
            "jwt_bearer_rs256",
            PanelConfig::default().with_authenticator(verifier(&url)),
        ),
    ] {
        let router = rt.block_on(async {
            let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
            ChatPanel::new(
                Reader(store),
                toolwright_messaging::MessageBus::new(),
                config,
            )
            .router()
        });
        // the caller's own conversation (minted as with any client: `POST /api/sessions`)
        let minted = rt
            .block_on(
                router.clone().oneshot(
                    Request::post("/api/sessions")
                        .header(header::HOST, "127.0.0.1")
                        .header(header::AUTHORIZATION, &token)
                        .body(Body::empty())
                        .unwrap(),
                ),
            )
            .unwrap();
        assert_eq!(minted.status().as_u16(), 200, "{name}");
        let body = rt
            .block_on(axum::body::to_bytes(minted.into_body(), 1 << 16))
            .unwrap();
        let id = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        let path = format!("/api/sessions/{id}");
        let request = || {
            Request::get(&path)
                .header(header::HOST, "127.0.0.1")
                .header(header::AUTHORIZATION, &token)
                .body(Body::empty())
                .unwrap()
        };
        let status = rt
            .block_on(router.clone().oneshot(request()))
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 200, "{name}");
        g.bench_function(name, |b| {
            b.iter(|| {
                let r = rt.block_on(router.clone().oneshot(request())).unwrap();
                black_box(r.status())
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
