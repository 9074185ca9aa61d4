//! One bridge, many people, many workers, against the official Python SDK's authorization
//! server and a protected MCP server (`crates/chat-panel/tests/fixtures/oauth_server.py`): each
//! principal's calls carry their own token (the server says whose), a principal with no token
//! is asked and nobody else is, and a sign-in shown by one worker is completed by another that
//! shares the store (PostgreSQL in `cargo xtask test`), once and only by its principal.
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolwright_core::{ToolContext, ToolProvider};
use toolwright_mcp_bridge::oauth::{
    CallbackError, CredentialKey, CredentialStore, InMemoryCredentialStore, OAuthConfig,
    RedirectSignIn, SessionCredentialStore, SignInRequest, complete_sign_in,
};
use toolwright_mcp_bridge::{McpBridge, ServiceConfig};

/// The Python SDK's authorization server and protected MCP server on 127.0.0.1.
struct AuthServer {
    child: Child,
    base: String,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AuthServer {
    fn start() -> Self {
        let python = testkit::python_mcp_sdk().unwrap_or_else(|e| panic!("{e}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../chat-panel/tests/fixtures/oauth_server.py"
        );
        let mut child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self {
                    child,
                    base: format!("http://127.0.0.1:{port}"),
                };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the auth server did not listen: {:?}", log.lock().unwrap());
    }
}

/// What the "browser" did for one sign-in.
#[derive(Debug, Default)]
struct Browser {
    /// Whom each sign-in was shown to, in order.
    asked: Vec<String>,
    /// The callback queries that completed a sign-in.
    callbacks: Vec<(String, String)>,
    /// A callback under another principal's state, and what it got.
    cross: Vec<String>,
}

/// The panel's part, played by a client: shows nobody anything, but as the person named in the
/// request allows at the consent page and brings the callback to *worker 2*'s store
/// (`callback_store`); `declines` are the people who say "Not now". Before its own callback,
/// each one's sign-in is first tried by "mallory" (refused, and it stays waiting).
struct PlayedBrowser {
    callback_store: Arc<dyn CredentialStore>,
    declines: Vec<String>,
    /// The people whose consent waits until the gate opens.
    gated: Vec<String>,
    gate: Arc<tokio::sync::Notify>,
    seen: Arc<Mutex<Browser>>,
}

#[async_trait::async_trait]
impl RedirectSignIn for PlayedBrowser {
    fn redirect_uri(&self) -> String {
        "http://127.0.0.1:1/oauth/callback".into()
    }

    async fn sign_in(&self, request: SignInRequest) -> Result<(), String> {
        let who = request.principal.clone();
        self.seen.lock().unwrap().asked.push(who.clone());
        if self.declines.contains(&who) {
            return Err(format!("{who} chose not to sign in now"));
        }
        if self.gated.contains(&who) {
            self.gate.notified().await;
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest_ring::Client::builder()
            .redirect(reqwest_ring::redirect::Policy::none())
            .build()
            .unwrap();
        // the authorization endpoint sends the browser to the consent page
        let to_consent = http.get(&request.authorization_url).send().await.unwrap();
        let consent = to_consent.headers()["location"]
            .to_str()
            .unwrap()
            .to_owned();
        let consent = url::Url::parse(&request.authorization_url)
            .unwrap()
            .join(&consent)
            .unwrap();
        let key = consent
            .query_pairs()
            .find(|(k, _)| k == "key")
            .unwrap()
            .1
            .into_owned();
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("key", &key)
            .append_pair("subject", &who)
            .finish();
        let back = http
            .post(consent.as_str())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        let callback = back.headers()["location"].to_str().unwrap().to_owned();
        let query = callback.split_once('?').unwrap().1.to_owned();
        // someone else's browser brings the callback: refused, and it stays theirs
        let cross = complete_sign_in(&self.callback_store, "mallory", &query).await;
        self.seen.lock().unwrap().cross.push(format!("{cross:?}"));
        complete_sign_in(&self.callback_store, &who, &query)
            .await
            .map_err(|e| e.to_string())?;
        self.seen.lock().unwrap().callbacks.push((who, query));
        // worker 1 (the bridge) sees the sign-in done in the store
        request.completed().await
    }
}

fn ctx(principal: &str) -> ToolContext {
    let mut ctx = ToolContext::default();
    ctx.principal = Some(principal.to_owned());
    ctx
}

async fn echo(bridge: &McpBridge, principal: &str, text: &str) -> Result<String, String> {
    ToolProvider::call(bridge, "demo__echo", json!({"text": text}), ctx(principal))
        .await
        .map(|o| o.value.to_string())
        .map_err(|e| e.message)
}

async fn token_of(store: &Arc<dyn CredentialStore>, principal: &str, server: &str) -> String {
    use oauth2::TokenResponse;
    let key = CredentialKey {
        principal: principal.into(),
        server: server.into(),
    };
    let record = store.load(&key).await.unwrap().unwrap().record;
    record.token.unwrap().access_token().secret().clone()
}

/// The whole story on two workers' stores (`worker1` the bridge's, `worker2` the callback's).
async fn many_people_one_bridge(
    worker1: Arc<dyn CredentialStore>,
    worker2: Arc<dyn CredentialStore>,
) {
    let auth = AuthServer::start();
    let server = format!("{}/mcp", auth.base);
    let seen = Arc::new(Mutex::new(Browser::default()));
    let gate = Arc::new(tokio::sync::Notify::new());
    let browser = PlayedBrowser {
        callback_store: worker2.clone(),
        declines: vec!["carol".into()],
        gated: vec!["erin".into()],
        gate: gate.clone(),
        seen: seen.clone(),
    };
    let oauth = OAuthConfig::with_redirect_sign_in(Arc::new(browser))
        .with_store(worker1.clone(), "alice")
        .with_sign_in_timeout(Duration::from_secs(30))
        // one other person's connection at a time: each next person's closes the idle one
        .with_max_connections(1);
    let bridge = McpBridge::new();
    bridge
        .register(
            ServiceConfig::remote("demo", server.clone())
                .with_autostart(false)
                .with_oauth(oauth),
        )
        .unwrap();

    // alice (the service's own principal) signs in when her call starts the service
    let a = echo(&bridge, "alice", "one").await.unwrap();
    assert!(a.contains("echo: one (signed in as alice)"), "{a}");
    // bob, through the same bridge, is asked himself and his call goes under his token
    let b = echo(&bridge, "bob", "two").await.unwrap();
    assert!(b.contains("echo: two (signed in as bob)"), "{b}");
    assert_eq!(seen.lock().unwrap().asked, ["alice", "bob"]);
    // again: each under their own token, nobody asked
    let a = echo(&bridge, "alice", "three").await.unwrap();
    assert!(a.contains("(signed in as alice)"), "{a}");
    let b = echo(&bridge, "bob", "four").await.unwrap();
    assert!(b.contains("(signed in as bob)"), "{b}");
    assert_eq!(seen.lock().unwrap().asked, ["alice", "bob"]);
    let (ta, tb) = (
        token_of(&worker1, "alice", &server).await,
        token_of(&worker1, "bob", &server).await,
    );
    assert_ne!(ta, tb, "two principals, two tokens");

    // carol has no token and declines: she is asked (her connection taking the place of bob's
    // idle one — else her call would fail as "all in use"), her call fails with a message,
    // nobody else is asked and the others go on: bob's connection is made again with his
    // stored token
    let c = echo(&bridge, "carol", "five").await.unwrap_err();
    assert!(c.contains("chose not to sign in"), "{c}");
    assert_eq!(seen.lock().unwrap().asked, ["alice", "bob", "carol"]);
    let b = echo(&bridge, "bob", "six").await.unwrap();
    assert!(b.contains("(signed in as bob)"), "{b}");

    // erin's connection is in use while she signs in: dave finds no idle one to take and is
    // told to try again; once erin is in, her call goes on
    let erin = {
        let bridge = bridge.clone();
        tokio::spawn(async move { echo(&bridge, "erin", "seven").await })
    };
    while !seen.lock().unwrap().asked.iter().any(|w| w == "erin") {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = echo(&bridge, "dave", "eight").await.unwrap_err();
    assert!(d.contains("all in use; try again in a moment"), "{d}");
    gate.notify_one();
    let e = erin.await.unwrap().unwrap();
    assert!(e.contains("echo: seven (signed in as erin)"), "{e}");
    assert!(!seen.lock().unwrap().asked.iter().any(|w| w == "dave"));

    let (cross, callbacks) = {
        let seen = seen.lock().unwrap();
        (seen.cross.clone(), seen.callbacks.clone())
    };
    // mallory's callbacks under alice's, bob's and erin's states were refused, theirs went
    // through
    assert_eq!(cross, ["Err(NotYours)", "Err(NotYours)", "Err(NotYours)"]);
    // a replayed callback is refused, by its own principal too
    for (who, query) in &callbacks {
        let again = complete_sign_in(&worker2, who, query).await;
        assert!(
            matches!(again, Err(CallbackError::Unknown | CallbackError::Used)),
            "{again:?}"
        );
    }
    assert_eq!(
        token_of(&worker1, "alice", &server).await,
        ta,
        "unchanged by the replays"
    );
}

/// Callbacks that are no sign-in's answer: typed errors, nothing panics, nothing is stored.
async fn bad_callbacks(store: Arc<dyn CredentialStore>) {
    // states of their own on every run (a shared database keeps the last run's)
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let st = |name: &str| format!("{name}-{run}");
    assert!(matches!(
        complete_sign_in(&store, "alice", "code=x").await,
        Err(CallbackError::NoState)
    ));
    assert!(matches!(
        complete_sign_in(&store, "alice", "code=x&state=never-issued").await,
        Err(CallbackError::Unknown)
    ));
    // a slot holding garbage
    assert!(
        store
            .swap_sign_in(&st("garbage"), None, Some("not json {"))
            .await
            .unwrap()
    );
    let garbage =
        complete_sign_in(&store, "alice", &format!("code=x&state={}", st("garbage"))).await;
    assert!(
        matches!(garbage, Err(CallbackError::Store(_))),
        "{garbage:?}"
    );
    // an expired one
    let waiting = |principal: &str, expires_at: u64| {
        json!({"principal": principal, "server": "http://127.0.0.1:9/mcp",
            "redirect_uri": "http://127.0.0.1:1/oauth/callback", "resource": null,
            "expires_at": expires_at, "authorization": null, "outcome": {"is": "waiting"}})
        .to_string()
    };
    assert!(
        store
            .swap_sign_in(&st("old"), None, Some(&waiting("alice", 1)))
            .await
            .unwrap()
    );
    assert!(matches!(
        complete_sign_in(&store, "alice", &format!("code=x&state={}", st("old"))).await,
        Err(CallbackError::Expired)
    ));
    // a slot whose principal was changed: refused for the one who changed it to someone else
    let far = u64::MAX / 2;
    assert!(
        store
            .swap_sign_in(&st("moved"), None, Some(&waiting("bob", far)))
            .await
            .unwrap()
    );
    assert!(matches!(
        complete_sign_in(&store, "alice", &format!("code=x&state={}", st("moved"))).await,
        Err(CallbackError::NotYours)
    ));
    // one with no verifier left (tampered): claimed and ended, never exchanged, then used
    let r = complete_sign_in(&store, "bob", &format!("code=x&state={}", st("moved"))).await;
    assert!(matches!(r, Err(CallbackError::Store(_))), "{r:?}");
    assert!(matches!(
        complete_sign_in(&store, "bob", &format!("code=x&state={}", st("moved"))).await,
        Err(CallbackError::Used)
    ));
    // an authorization server's `error=` ends a waiting sign-in as denied
    assert!(
        store
            .swap_sign_in(&st("denied"), None, Some(&waiting("bob", far)))
            .await
            .unwrap()
    );
    let r = complete_sign_in(
        &store,
        "bob",
        &format!("error=access_denied&state={}", st("denied")),
    )
    .await;
    assert!(
        matches!(&r, Err(CallbackError::Denied(why)) if why.contains("access_denied")),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_people_through_one_bridge_each_sign_in_and_call_under_their_own_token() {
    let store: Arc<dyn CredentialStore> = Arc::new(InMemoryCredentialStore::new());
    many_people_one_bridge(store.clone(), store).await;
}

#[tokio::test]
async fn callbacks_that_answer_no_waiting_sign_in_are_refused_with_typed_errors() {
    bad_callbacks(Arc::new(InMemoryCredentialStore::new())).await;
}

/// Two workers, each with its own connection to one PostgreSQL database (`TEST_DATABASE_URL`,
/// which `cargo xtask test` and `cargo xtask with-services` set): worker 1's bridge shows the
/// sign-ins and holds the calls; every callback is completed through worker 2's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sign_in_completed_on_another_worker_lets_the_held_call_go_on() {
    use toolwright_context_engine::PostgresStore;
    let url = std::env::var("TEST_DATABASE_URL")
        .expect("TEST_DATABASE_URL: run `cargo xtask with-services`, which starts PostgreSQL");
    let worker1: Arc<dyn CredentialStore> = Arc::new(SessionCredentialStore::new(Arc::new(
        PostgresStore::connect(&url).await.unwrap(),
    )));
    let worker2: Arc<dyn CredentialStore> = Arc::new(SessionCredentialStore::new(Arc::new(
        PostgresStore::connect(&url).await.unwrap(),
    )));
    many_people_one_bridge(worker1, worker2.clone()).await;
    bad_callbacks(worker2).await;
}
