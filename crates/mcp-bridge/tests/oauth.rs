//! OAuth for remote servers against an authorization server on 127.0.0.1 written here (it
//! counts and records every request): one refresh for two callers at once, the registration's
//! secret kept across it, and the bad answers refused with typed errors.
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolwright_mcp_bridge::oauth::{
    CredentialRecord, CredentialStore, InMemoryCredentialStore, OAuthConfig, OAuthError,
    OAuthSession, Registration, SignIn,
};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Handler = dyn Fn(&Seen, u16) -> (u16, &'static str, String) + Send + Sync;

/// An HTTP/1.1 server on 127.0.0.1 answering each request with `handler` (status, content
/// type, body); every request is recorded.
async fn serve(handler: Arc<Handler>) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let mut lines = head.lines();
                let first: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                    .collect();
                let length: usize = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + length {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let seen = Seen {
                    method: first.first().copied().unwrap_or("").to_owned(),
                    path: first.get(1).copied().unwrap_or("").to_owned(),
                    headers,
                    body: String::from_utf8_lossy(&buf[head_end..]).to_string(),
                };
                log.lock().unwrap().push(seen.clone());
                let (status, content_type, body) = handler(&seen, port);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, seen)
}

/// A sign-in that must not be reached.
struct NoPerson;

#[async_trait::async_trait]
impl SignIn for NoPerson {
    async fn sign_in(&self, url: &str) -> Result<(), String> {
        Err(format!("no person in this test (asked to open {url})"))
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A credential whose access token expired an hour ago, with a refresh token and a
/// confidential registration, for the authorization server on `port`.
fn expired_credential(port: u16) -> CredentialRecord {
    let base = format!("http://127.0.0.1:{port}");
    CredentialRecord {
        registration: Some(Registration {
            client_id: "registered-client".into(),
            client_secret: Some("registered-secret".into()),
        }),
        metadata: Some(
            serde_json::from_value(json!({
                "issuer": base,
                "authorization_endpoint": format!("{base}/authorize"),
                "token_endpoint": format!("{base}/token"),
            }))
            .unwrap(),
        ),
        token: Some(
            serde_json::from_value(json!({
                "access_token": "expired-token",
                "token_type": "bearer",
                "expires_in": 60,
                "refresh_token": "refresh-1",
            }))
            .unwrap(),
        ),
        received_at: Some(now() - 3600),
        granted_scopes: vec!["mcp:read".into()],
        refreshing_until: None,
    }
}

const SERVER: &str = "http://127.0.0.1:9/mcp";

async fn seeded(port: u16) -> (Arc<InMemoryCredentialStore>, OAuthConfig) {
    let store = Arc::new(InMemoryCredentialStore::new());
    let config = OAuthConfig::new(Arc::new(NoPerson)).with_store(store.clone(), "alice");
    let key = OAuthSession::new(config.clone(), SERVER).key().clone();
    assert!(
        store
            .compare_and_set(&key, None, expired_credential(port))
            .await
            .unwrap()
    );
    (store, config)
}

/// A token endpoint that answers each refresh with `fresh-token-N` after 300 ms (slow enough
/// that a second worker asks while the first one's refresh is on), counting the requests.
async fn slow_token_endpoint() -> (u16, Arc<Mutex<Vec<Seen>>>, Arc<AtomicUsize>) {
    let token_requests = Arc::new(AtomicUsize::new(0));
    let counter = token_requests.clone();
    let (port, seen) = serve(Arc::new(move |req: &Seen, _| {
        if req.method == "POST" && req.path == "/token" {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            std::thread::sleep(Duration::from_millis(300));
            let body = json!({
                "access_token": format!("fresh-token-{n}"),
                "token_type": "Bearer",
                "expires_in": 3600,
                "refresh_token": format!("refresh-{}", n + 1),
            });
            (200, "application/json", body.to_string())
        } else {
            (404, "text/plain", "no".into())
        }
    }))
    .await;
    (port, seen, token_requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_with_one_expired_credential_make_exactly_one_refresh_request() {
    let (port, seen, token_requests) = slow_token_endpoint().await;
    let (store, config) = seeded(port).await;
    // Two workers: separate sessions, one shared store.
    let first = OAuthSession::new(config.clone(), SERVER);
    let second = OAuthSession::new(config.clone(), SERVER);
    let (a, b) = tokio::join!(first.access_token(), second.access_token());
    assert_eq!(a.unwrap().as_deref(), Some("fresh-token-1"));
    assert_eq!(b.unwrap().as_deref(), Some("fresh-token-1"));
    assert_eq!(token_requests.load(Ordering::SeqCst), 1);

    let requests = seen.lock().unwrap().clone();
    let refresh = requests.iter().find(|r| r.path == "/token").unwrap();
    let form: Vec<(String, String)> = url::form_urlencoded::parse(refresh.body.as_bytes())
        .into_owned()
        .collect();
    let field = |n: &str| form.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(field("grant_type"), Some("refresh_token"));
    assert_eq!(field("refresh_token"), Some("refresh-1"));
    assert_eq!(field("resource"), Some(SERVER), "refresh without resource");
    // The registration's secret authenticated the refresh (client_secret_basic).
    assert!(
        refresh
            .header("authorization")
            .is_some_and(|h| h.starts_with("Basic ")),
        "{refresh:?}"
    );

    // After the refresh the registration and its secret are still stored, no lease is left.
    let key = first.key().clone();
    let stored = store.load(&key).await.unwrap().unwrap().record;
    assert_eq!(
        stored.registration.unwrap().client_secret.as_deref(),
        Some("registered-secret")
    );
    assert!(stored.refreshing_until.is_none());
    // And a third caller uses the fresh token without a request.
    let third = OAuthSession::new(config, SERVER);
    assert_eq!(
        third.access_token().await.unwrap().as_deref(),
        Some("fresh-token-1")
    );
    assert_eq!(token_requests.load(Ordering::SeqCst), 1);
}

/// Two workers, each with its own connection to one PostgreSQL database (`TEST_DATABASE_URL`,
/// set by `cargo xtask test`), hold their credentials in it through `SessionCredentialStore`:
/// an expired token is refreshed by one of them, and the other uses the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_on_one_postgresql_database_make_exactly_one_refresh_request() {
    use toolwright_context_engine::{PostgresStore, SessionStore};
    use toolwright_mcp_bridge::oauth::SessionCredentialStore;
    let url = std::env::var("TEST_DATABASE_URL")
        .expect("TEST_DATABASE_URL: run `cargo xtask test`, which starts PostgreSQL");
    let (port, _, token_requests) = slow_token_endpoint().await;
    // A server URL of this run's own: the database outlives the test.
    let server = format!("http://127.0.0.1:9/mcp-{}-{}", std::process::id(), now());
    let worker = |sessions: PostgresStore| {
        let sessions: Arc<dyn SessionStore> = Arc::new(sessions);
        let store = Arc::new(SessionCredentialStore::new(sessions));
        OAuthConfig::new(Arc::new(NoPerson)).with_store(store, "alice")
    };
    let first = worker(PostgresStore::connect(&url).await.unwrap());
    let second = worker(PostgresStore::connect(&url).await.unwrap());
    let one = OAuthSession::new(first.clone(), &server);
    let other = OAuthSession::new(second, &server);
    let seeded = SessionCredentialStore::new(Arc::new(PostgresStore::connect(&url).await.unwrap()));
    assert!(
        seeded
            .compare_and_set(one.key(), None, expired_credential(port))
            .await
            .unwrap()
    );

    let (a, b) = tokio::join!(one.access_token(), other.access_token());
    assert_eq!(a.unwrap().as_deref(), Some("fresh-token-1"));
    assert_eq!(b.unwrap().as_deref(), Some("fresh-token-1"));
    assert_eq!(
        token_requests.load(Ordering::SeqCst),
        1,
        "one refresh in all"
    );

    // In the database: the fresh token, the registration's secret, no lease left.
    let stored = seeded.load(one.key()).await.unwrap().unwrap();
    let record = stored.record;
    assert_eq!(
        oauth2::TokenResponse::access_token(&record.token.unwrap()).secret(),
        "fresh-token-1"
    );
    assert_eq!(
        record.registration.unwrap().client_secret.as_deref(),
        Some("registered-secret")
    );
    assert!(record.refreshing_until.is_none());
    assert!(
        stored.version >= 2,
        "seeded, then refreshed: {}",
        stored.version
    );
}

#[tokio::test]
async fn a_token_endpoint_answering_html_is_refused_and_the_refresh_can_be_tried_again() {
    let (port, seen) = serve(Arc::new(|_: &Seen, _| {
        (
            200,
            "text/html; charset=utf-8",
            "<html><body>Sign in to continue</body></html>".into(),
        )
    }))
    .await;
    let (_store, config) = seeded(port).await;
    let session = OAuthSession::new(config, SERVER);
    for _ in 0..2 {
        match session.access_token().await {
            Err(OAuthError::NotJson { url, content_type }) => {
                assert!(url.ends_with("/token"), "{url}");
                assert!(content_type.starts_with("text/html"), "{content_type}");
            }
            other => panic!("expected NotJson, got {other:?}"),
        }
    }
    // The lease was released after the first failure: the second call asked again.
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn authorization_server_metadata_pointing_to_another_origin_is_refused() {
    let (port, seen) = serve(Arc::new(|req: &Seen, port| {
        let base = format!("http://127.0.0.1:{port}");
        match req.path.as_str() {
            "/.well-known/oauth-protected-resource/mcp" => (
                200,
                "application/json",
                json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]})
                    .to_string(),
            ),
            "/.well-known/oauth-authorization-server" => (
                200,
                "application/json",
                json!({
                    "issuer": base,
                    "authorization_endpoint": format!("{base}/authorize"),
                    "token_endpoint": "http://127.0.0.2:9/token",
                    "response_types_supported": ["code"],
                    "code_challenge_methods_supported": ["S256"],
                })
                .to_string(),
            ),
            _ => (404, "text/plain", "no".into()),
        }
    }))
    .await;
    let server = format!("http://127.0.0.1:{port}/mcp");
    let session = OAuthSession::new(OAuthConfig::new(Arc::new(NoPerson)), server);
    let challenge = format!(
        "Bearer resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\""
    );
    match session.authorize(&challenge, false, None).await {
        Err(OAuthError::CrossOrigin { field, url, .. }) => {
            assert_eq!(field, "token_endpoint");
            assert_eq!(url, "http://127.0.0.2:9/token");
        }
        other => panic!("expected CrossOrigin, got {other:?}"),
    }
    // Nothing was registered or sent anywhere after the metadata.
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|r| r.method == "GET" && r.path.starts_with("/.well-known/")),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn a_redirect_to_a_non_loopback_uri_is_refused() {
    let config = OAuthConfig::new(Arc::new(NoPerson));
    match config.with_redirect_uri("https://app.example.com/oauth/callback") {
        Err(OAuthError::RedirectNotLoopback { uri }) => {
            assert_eq!(uri, "https://app.example.com/oauth/callback");
        }
        other => panic!("expected RedirectNotLoopback, got {other:?}"),
    }
}

#[test]
fn oauth_gives_the_person_the_sign_in_time_at_start_and_in_calls() {
    let oauth = OAuthConfig::new(Arc::new(NoPerson)).with_sign_in_timeout(Duration::from_secs(120));
    let service = toolwright_mcp_bridge::ServiceConfig::remote("docs", SERVER)
        .with_startup_timeout(Duration::from_secs(20))
        .with_oauth(oauth);
    assert_eq!(service.startup_timeout, Duration::from_secs(120));
    assert_eq!(service.call_timeout, Duration::from_secs(120));
}

#[tokio::test]
async fn a_token_the_server_refuses_before_its_expiry_is_refreshed_once() {
    let token_requests = Arc::new(AtomicUsize::new(0));
    let counter = token_requests.clone();
    let (port, _seen) = serve(Arc::new(move |req: &Seen, _| {
        if req.method == "POST" && req.path == "/token" {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            let body = json!({
                "access_token": format!("fresh-token-{n}"),
                "token_type": "Bearer",
                "expires_in": 3600,
            });
            (200, "application/json", body.to_string())
        } else {
            (404, "text/plain", "no".into())
        }
    }))
    .await;
    let (store, config) = seeded(port).await;
    let session = OAuthSession::new(config, SERVER);
    // The stored token is still valid here (received just now), but the server refused it.
    let key = session.key().clone();
    let mut current = store.load(&key).await.unwrap().unwrap();
    current.record.received_at = Some(now());
    assert!(
        store
            .compare_and_set(&key, Some(current.version), current.record)
            .await
            .unwrap()
    );
    assert_eq!(
        session.access_token().await.unwrap().as_deref(),
        Some("expired-token"),
        "a valid token is used as it is"
    );
    assert_eq!(
        session
            .replace_refused("expired-token")
            .await
            .unwrap()
            .as_deref(),
        Some("fresh-token-1")
    );
    // A caller still holding the old token gets the replacement without a second request.
    assert_eq!(
        session
            .replace_refused("expired-token")
            .await
            .unwrap()
            .as_deref(),
        Some("fresh-token-1")
    );
    assert_eq!(token_requests.load(Ordering::SeqCst), 1);
    // The refresh response had no refresh token: the old one is kept (RFC 6749 §6).
    let stored = store.load(&key).await.unwrap().unwrap().record;
    assert!(
        stored
            .token
            .is_some_and(|t| oauth2::TokenResponse::refresh_token(&t).is_some())
    );
}

/// `"oauth"` in the config file: a remote entry that asks for it starts only once the
/// application said how the person signs in (`set_oauth`), and fails before any request with a
/// message that says so; an entry that cannot work is kept out of service with the reason.
#[tokio::test]
async fn a_config_file_entry_asking_for_oauth_needs_the_applications_sign_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    std::fs::write(
        &path,
        json!({"mcpServers": {
            "remote": {"url": "http://127.0.0.1:9/mcp", "oauth": {"scopes": ["read"]}},
            "local": {"command": "node", "oauth": true},
            "typo": {"url": "http://127.0.0.1:9/mcp", "oauth": {"scope": "read"}}
        }})
        .to_string(),
    )
    .unwrap();
    let bridge = toolwright_mcp_bridge::McpBridge::with_config_file(&path).unwrap();
    let names: Vec<String> = bridge
        .services()
        .into_iter()
        .map(|s| s.config.name)
        .collect();
    assert_eq!(
        names,
        ["remote"],
        "the two entries that cannot work are kept out"
    );
    let err = bridge.start("remote").await.unwrap_err().to_string();
    assert!(err.contains("set_oauth"), "{err}");
    // The file is written back as it was, the `oauth` entries and the skipped ones included.
    bridge
        .update("remote", toolwright_mcp_bridge::ServiceUpdate::default())
        .await
        .unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        saved["mcpServers"]["remote"]["oauth"],
        json!({"scopes": ["read"]})
    );
    assert_eq!(saved["mcpServers"]["local"]["oauth"], json!(true));
    assert_eq!(
        saved["mcpServers"]["typo"]["oauth"],
        json!({"scope": "read"})
    );
}

/// A refresh the authorization server refuses for good (`invalid_grant`: the refresh token was
/// revoked) drops the token and keeps the registration: no token (the person signs in again),
/// and no second refresh request with the dead refresh token.
#[tokio::test]
async fn a_revoked_refresh_token_drops_the_token_and_keeps_the_registration() {
    let (port, seen) = serve(Arc::new(|_: &Seen, _| {
        (
            400,
            "application/json",
            json!({"error": "invalid_grant", "error_description": "refresh token revoked"})
                .to_string(),
        )
    }))
    .await;
    let (store, config) = seeded(port).await;
    let session = OAuthSession::new(config, SERVER);
    assert_eq!(session.access_token().await.unwrap(), None);
    assert_eq!(session.access_token().await.unwrap(), None);
    assert_eq!(seen.lock().unwrap().len(), 1, "one refused refresh");
    let kept = store.load(session.key()).await.unwrap().unwrap().record;
    assert!(kept.token.is_none());
    assert!(kept.refreshing_until.is_none(), "the lease ended");
    assert_eq!(
        kept.registration.map(|r| r.client_secret),
        Some(Some("registered-secret".into()))
    );
}
