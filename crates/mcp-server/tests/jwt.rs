//! Bearer tokens checked by the chat panel's JWKS verifier (feature `jwt`): a JWKS served on
//! 127.0.0.1, tokens signed with the panel's fixture keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use reqwest_ring as reqwest;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use toolwright_chat_panel::identity::{JwtBearer, JwtBearerConfig};
use toolwright_mcp_server::{HttpOptions, ProtectedResource};

const FIX: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../chat-panel/tests/fixtures/identity/"
);

fn token(kid: &str, claims: &Value) -> String {
    let key = std::fs::read(format!("{FIX}rsa-a.pem")).unwrap();
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_pem(&key).unwrap()).unwrap()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn tokens_are_checked_against_the_issuers_jwks() {
    common::tls();
    // the issuer: its JWKS with the fixture's public key `rsa-a`
    let all: Value =
        serde_json::from_slice(&std::fs::read(format!("{FIX}jwks.json")).unwrap()).unwrap();
    let jwks = json!({"keys": [all["rsa-a"].clone()]});
    let idp = common::serve(axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let jwks = jwks.clone();
            async move { axum::Json(jwks) }
        }),
    ))
    .await;
    let issuer = format!("http://{idp}");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let resource = format!("http://{addr}/mcp");
    let verifier = JwtBearer::new(JwtBearerConfig::new(
        format!("{issuer}/jwks"),
        issuer.clone(),
        &resource,
    ))
    .unwrap();
    let pr = ProtectedResource::new(resource.clone(), [issuer.clone()], Arc::new(verifier));
    let router = common::server()
        .router(HttpOptions::default().protected(pr))
        .unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    let send = |bearer: Option<String>| {
        let mut r = reqwest::Client::new()
            .post(&resource)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init.clone());
        if let Some(b) = bearer {
            r = r.bearer_auth(b);
        }
        r.send()
    };
    let good = token(
        "rsa-a",
        &json!({"sub": "ann", "iss": issuer, "aud": resource, "exp": now() + 600}),
    );
    assert_eq!(send(Some(good)).await.unwrap().status(), 200);

    let other_audience = token(
        "rsa-a",
        &json!({"sub": "ann", "iss": issuer, "aud": "http://elsewhere/mcp", "exp": now() + 600}),
    );
    let r = send(Some(other_audience)).await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );

    let expired = token(
        "rsa-a",
        &json!({"sub": "ann", "iss": issuer, "aud": resource, "exp": now() - 3600}),
    );
    let r = send(Some(expired)).await.unwrap();
    assert_eq!(r.status(), 401);
    let www = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(www.contains("expired"), "{www}");

    assert_eq!(send(None).await.unwrap().status(), 401);
}
