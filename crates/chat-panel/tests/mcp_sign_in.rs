//! Signing in to an OAuth-protected MCP server through the panel, in a real headless Chromium,
//! against an authorization server that is not ours: the official Python SDK's (`mcp` on PyPI,
//! `tests/fixtures/oauth_server.py`), which also serves the protected MCP server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/browser.rs"]
mod chrome;
mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use chrome::{BROWSER_LOCK, Browser};
use fantoccini::Locator;
use serde_json::{Value, json};
use testkit::Reply;
use toolwright_mcp_bridge::oauth::{CredentialStore, InMemoryCredentialStore, OAuthConfig};
use toolwright_mcp_bridge::{McpBridge, ServiceConfig};

/// The SDK's authorization server and protected MCP server, on 127.0.0.1; ended on drop.
struct AuthServer {
    child: tokio::process::Child,
    base: String,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            toolwright_process_guard::kill_group(pid);
        }
    }
}

impl AuthServer {
    async fn start() -> Self {
        let python = testkit::python_mcp_sdk().unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oauth_server.py");
        let child = tokio::process::Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let up = reqwest::get(format!("{base}/.well-known/oauth-authorization-server")).await;
            if up.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the SDK's authorization server did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { child, base }
    }

    /// How many token requests of each grant it answered, and requests refused for an expired
    /// access token.
    async fn counts(&self) -> Value {
        reqwest::get(format!("{}/test/counts", self.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn post(&self, what: &str) {
        let r = reqwest::Client::new()
            .post(format!("{}/test/{what}", self.base))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{what}: {}", r.status());
    }
}

/// The scripted model: asked anything, it calls `demo__echo` with the person's text (twice at
/// once, `one` and `two`, when the text is "both"); given the results, it says them.
fn responder(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    if last["role"] == "tool" {
        let results: Vec<String> = messages
            .iter()
            .rev()
            .take_while(|m| m["role"] == "tool")
            .map(|m| {
                // the SDK's tools answer structured content: `{"result": …}`
                let content = m["content"].as_str().unwrap_or_default();
                serde_json::from_str::<Value>(content)
                    .ok()
                    .and_then(|v| v["result"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| content.to_owned())
            })
            .collect();
        return Reply::text(format!("Tool said: {}", results.join(" | ")));
    }
    let text = last["content"].as_str().unwrap_or_default().to_owned();
    let n = messages.len();
    if text == "both" {
        Reply::tool_calls(&[
            (&format!("a{n}"), "demo__echo", r#"{"text": "one"}"#),
            (&format!("b{n}"), "demo__echo", r#"{"text": "two"}"#),
        ])
    } else {
        Reply::tool_call(
            &format!("c{n}"),
            "demo__echo",
            &json!({ "text": text }).to_string(),
        )
    }
}

/// The person follows the sign-in link of the latest sign-in: a new window with the
/// authorization server's consent page, "Allow", back to the panel's `/oauth/callback`, which
/// says they are signed in; then the conversation's window again.
async fn sign_in(b: &Browser) {
    let chat = b.client.window().await.unwrap();
    b.wait_until(
        "a sign-in link",
        "!!document.querySelector('.entry-signin:not(.done) a.sign-in')",
    )
    .await;
    let before = b.client.windows().await.unwrap();
    b.click(".entry-signin:not(.done) a.sign-in").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let consent = loop {
        let now = b.client.windows().await.unwrap();
        if let Some(w) = now.into_iter().find(|w| !before.contains(w)) {
            break w;
        }
        assert!(tokio::time::Instant::now() < deadline, "no sign-in window");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    b.client.switch_to_window(consent).await.unwrap();
    b.client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Id("allow"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let done = match b
        .client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Id("done"))
        .await
    {
        Ok(done) => done,
        Err(e) => panic!(
            "the sign-in did not come back to the panel ({e}): at {:?}: {}",
            b.client.current_url().await.map(|u| u.to_string()),
            b.client.source().await.unwrap_or_default()
        ),
    };
    assert!(done.text().await.unwrap().starts_with("Signed in."));
    assert!(
        b.client
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/oauth/callback")
    );
    b.client.close_window().await.unwrap();
    b.client.switch_to_window(chat).await.unwrap();
}

/// Waits until an answer of the conversation says `needle`; on timeout, fails with what the
/// conversation shows.
async fn wait_for_answer(b: &Browser, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let texts = b
            .js("return Array.from(document.querySelectorAll('.entry-assistant .text')).map(e => e.textContent);")
            .await;
        if texts.as_array().is_some_and(|t| {
            t.iter()
                .any(|x| x.as_str().is_some_and(|x| x.contains(needle)))
        }) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let all = b
                .js("return document.getElementById('log').innerText;")
                .await;
            panic!(
                "no answer saying {needle:?}; the conversation shows:\n{}",
                all.as_str().unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A panel worker with a bridge of its own to the SDK's protected MCP server as `demo`, its
/// OAuth credentials in `store` and signed in through the panel; on loopback there is no
/// authentication, so the person is the local principal.
async fn panel_worker(
    auth: &AuthServer,
    store: Arc<dyn CredentialStore>,
) -> (common::Fixture, McpBridge) {
    let bridge = McpBridge::new();
    let provider = Arc::new(bridge.clone());
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        responder,
        move |b| b.provider(provider),
    )
    .await;
    let oauth =
        OAuthConfig::with_redirect_sign_in(Arc::new(fx.chat.mcp_sign_in(&fx.url(), store.clone())))
            .with_store(store, "local")
            .with_sign_in_timeout(Duration::from_secs(60));
    bridge
        .register(
            ServiceConfig::remote("demo", format!("{}/mcp", auth.base))
                .with_autostart(false)
                .with_oauth(oauth),
        )
        .unwrap();
    (fx, bridge)
}

/// Sign in, call a tool; the token expires and two calls race (one refresh); the
/// authorization server revokes the sign-in (the person is told and signs in again).
#[tokio::test]
async fn a_person_signs_in_to_an_oauth_mcp_server_through_the_panel() {
    let _one = BROWSER_LOCK.lock().await;
    let auth = AuthServer::start().await;
    let (fx, bridge) = panel_worker(&auth, Arc::new(InMemoryCredentialStore::new())).await;

    let b = Browser::start().await;
    b.open(&fx).await;

    // 1. the first call needs the person: signed in through the panel, the call goes on
    b.type_and_send("hello").await;
    b.wait_until(
        "the sign-in prompt",
        "!!document.querySelector('.entry-signin a.sign-in')",
    )
    .await;
    let prompt = b
        .js("return document.querySelector('.entry-signin').textContent;")
        .await;
    assert!(
        prompt.as_str().unwrap().contains("needs you to sign in"),
        "{prompt}"
    );
    sign_in(&b).await;
    wait_for_answer(&b, "Tool said: echo: hello (signed in as ada)").await;
    b.idle().await;
    assert!(
        b.js("return !!document.querySelector('.entry-signin.done');")
            .await
            .as_bool()
            .unwrap()
    );
    let counts = auth.counts().await;
    assert_eq!(counts["authorization_code"], 1, "{counts}");
    assert_eq!(counts["refresh_token"], 0, "{counts}");

    // 2. the token expires at the server; two calls at once: exactly one refresh, no sign-in
    auth.post("expire").await;
    b.type_and_send("both").await;
    wait_for_answer(
        &b,
        "Tool said: echo: two (signed in as ada) | echo: one (signed in as ada)",
    )
    .await;
    b.idle().await;
    let counts = auth.counts().await;
    assert_eq!(counts["refresh_token"], 1, "exactly one refresh: {counts}");
    assert_eq!(counts["authorization_code"], 1, "no new sign-in: {counts}");
    assert_eq!(
        counts["expired_refused"], 2,
        "both calls met the expired token (they raced): {counts}"
    );

    // 3. the sign-in is revoked: the person is told to sign in again; "Not now" ends the
    //    turn with a message saying so, and the next call offers the sign-in again
    auth.post("revoke").await;
    b.type_and_send("after revoke").await;
    b.wait_until(
        "the sign-in-again prompt",
        "!!document.querySelector('.entry-signin:not(.done) a.sign-in')",
    )
    .await;
    let again = b
        .js(
            "const s = document.querySelectorAll('.entry-signin:not(.done)');
             const box = s[s.length - 1];
             return [box.textContent, box.querySelector('a.sign-in').textContent];",
        )
        .await;
    assert!(
        again[0]
            .as_str()
            .unwrap()
            .contains("has ended (revoked or expired). Sign in again"),
        "{again}"
    );
    assert_eq!(again[1], json!("Sign in again"));
    b.click(".entry-signin:not(.done) button.decline").await;
    wait_for_answer(&b, "has to sign in again").await;
    b.idle().await;
    let counts = auth.counts().await;
    assert_eq!(counts["refresh_token"], 2, "the refused refresh: {counts}");

    b.type_and_send("signed in again").await;
    sign_in(&b).await;
    wait_for_answer(&b, "Tool said: echo: signed in again (signed in as ada)").await;
    b.idle().await;
    let counts = auth.counts().await;
    assert_eq!(counts["authorization_code"], 2, "{counts}");
    b.close().await;
    bridge.stop_all().await;
}

/// Two panel workers, each with a bridge of its own, keep the person's credential in one
/// PostgreSQL database (`TEST_DATABASE_URL`, which `cargo xtask test` starts): signed in through
/// worker 1's page, the token expires at the SDK's server, and the person's calls on both
/// workers at once make exactly one refresh request there, with no new sign-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_panel_workers_on_one_database_refresh_a_persons_expired_token_once() {
    use toolwright_context_engine::{PostgresStore, SessionStore};
    use toolwright_mcp_bridge::oauth::SessionCredentialStore;
    let url = std::env::var("TEST_DATABASE_URL")
        .expect("TEST_DATABASE_URL: run `cargo xtask test`, which starts PostgreSQL");
    let _one = BROWSER_LOCK.lock().await;
    let auth = AuthServer::start().await;
    let mut workers = Vec::new();
    for _ in 0..2 {
        let sessions: Arc<dyn SessionStore> = Arc::new(PostgresStore::connect(&url).await.unwrap());
        workers.push(panel_worker(&auth, Arc::new(SessionCredentialStore::new(sessions))).await);
    }

    // signed in through worker 1's page
    let first = Browser::start().await;
    first.open(&workers[0].0).await;
    first.type_and_send("hello").await;
    sign_in(&first).await;
    wait_for_answer(&first, "Tool said: echo: hello (signed in as ada)").await;
    first.idle().await;
    let counts = auth.counts().await;
    assert_eq!(counts["authorization_code"], 1, "{counts}");
    assert_eq!(counts["refresh_token"], 0, "{counts}");

    // the token expires; the person writes on both workers at once
    auth.post("expire").await;
    let second = Browser::start().await;
    second.open(&workers[1].0).await;
    tokio::join!(
        first.type_and_send("from one"),
        second.type_and_send("from two")
    );
    wait_for_answer(&first, "Tool said: echo: from one (signed in as ada)").await;
    wait_for_answer(&second, "Tool said: echo: from two (signed in as ada)").await;
    first.idle().await;
    second.idle().await;
    let counts = auth.counts().await;
    eprintln!("the authorization server's counts after both workers' calls: {counts}");
    assert_eq!(
        counts["refresh_token"], 1,
        "exactly one refresh for both workers: {counts}"
    );
    assert_eq!(counts["authorization_code"], 1, "no new sign-in: {counts}");
    assert!(
        second
            .js("return !document.querySelector('.entry-signin');")
            .await
            .as_bool()
            .unwrap(),
        "worker 2 never asked the person to sign in"
    );
    first.close().await;
    second.close().await;
    for (_, bridge) in workers {
        bridge.stop_all().await;
    }
}
