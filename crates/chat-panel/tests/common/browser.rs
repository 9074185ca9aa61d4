//! A real headless Chromium driven over WebDriver (chromedriver + fantoccini), shared by the
//! browser tests (`browser.rs`) and the two-worker page test (`workers.rs`).
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `cargo xtask test` installs them), or `CHROME_BIN` / `CHROMEDRIVER`.
//! Missing browser = failing test, never a skip.
#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::common::Fixture;

/// One browser at a time: the machine has 2 cores.
pub static BROWSER_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn binary(env: &str, default: &str) -> PathBuf {
    let p = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        p.is_file(),
        "{} not found (set {env} to override): the browser tests need Debian's chromium and chromium-driver; \
         run `cargo xtask test`, which installs them",
        p.display()
    );
    p
}

/// A command of chromedriver's own: one Chrome DevTools Protocol call.
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        let body = json!({"cmd": self.cmd, "params": self.params});
        (axum::http::Method::POST, Some(body.to_string()))
    }
}

pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

/// A test that fails (panics) never reaches `close`: chromedriver and every Chromium process it
/// started end here all the same (killing chromedriver alone left Chromium running).
impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id() {
            toolwright_process_guard::kill_group(pid);
        }
    }
}

impl Browser {
    pub async fn start() -> Self {
        let chrome = binary("CHROME_BIN", "/usr/bin/chromium");
        let driver_bin = binary("CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let driver = tokio::process::Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // its own process group, Chromium's processes with it: all ended on drop
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {}: {e}", driver_bin.display()));
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chrome,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--window-size=900,720",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let client = loop {
            let mut b =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
            b.capabilities(caps.clone());
            match b.connect(&url).await {
                Ok(c) => break c,
                Err(e) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "chromedriver at {url} did not start a session: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        Self {
            client,
            driver,
            _profile: profile,
        }
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
    }

    /// Runs `script` in every page this browser opens from now on, before any script of the
    /// page's own (and whatever the page's Content-Security-Policy says).
    pub async fn before_every_page(&self, script: &str) {
        self.client
            .issue_cmd(Cdp {
                cmd: "Page.addScriptToEvaluateOnNewDocument",
                params: json!({"source": script}),
            })
            .await
            .unwrap();
    }

    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// Polls a JS expression until it is true.
    pub async fn wait_until(&self, what: &str, expr: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if self.js(&format!("return !!({expr});")).await == json!(true) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what} ({expr})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn open(&self, fx: &Fixture) {
        self.open_url(&fx.url()).await;
    }

    /// Opens the page at `url` and waits until it has loaded its conversation.
    pub async fn open_url(&self, url: &str) {
        self.client.goto(url).await.unwrap();
        self.wait_until("page load", "document.body.dataset.ready === '1'")
            .await;
    }

    /// Opens the page at `url` behind a browser login: the panel sends the browser to `/login`,
    /// the provider and `/callback`, which goes on to the page; waits until the page has loaded
    /// its conversation (scripts may fail while the browser is between pages: tried again).
    pub async fn open_signed_in(&self, url: &str) {
        self.client.goto(url).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ready = self
                .client
                .execute(
                    "return location.pathname === '/' && document.body.dataset.ready === '1';",
                    vec![],
                )
                .await;
            if matches!(ready, Ok(Value::Bool(true))) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the page did not load after signing in (last: {ready:?}, at {:?})",
                self.client.current_url().await.map(|u| u.to_string())
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The conversation id the page keeps (`localStorage['chatPanelSession']`).
    pub async fn session_id(&self) -> String {
        let v = self
            .js("return localStorage.getItem('chatPanelSession');")
            .await;
        v.as_str().expect("the page keeps a session id").to_owned()
    }

    /// Waits until an element matching `css` has the text `text` (or, with `prefix`, one that
    /// starts with it).
    pub async fn wait_for_text(&self, css: &str, text: &str, prefix: bool) {
        let test = if prefix {
            format!("e.textContent.startsWith({text:?})")
        } else {
            format!("e.textContent === {text:?}")
        };
        self.wait_until(
            &format!("{css} saying {text:?}"),
            &format!("Array.from(document.querySelectorAll({css:?})).some(e => {test})"),
        )
        .await;
    }

    pub async fn type_and_send(&self, text: &str) {
        let input = self.client.find(Locator::Id("input")).await.unwrap();
        input.send_keys(text).await.unwrap();
        self.client
            .find(Locator::Id("send"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }

    /// Chooses the file at `path` in the composer's picture picker (as the person's file
    /// dialog would).
    pub async fn attach(&self, path: &std::path::Path) {
        let input = self.client.find(Locator::Id("picture")).await.unwrap();
        input.send_keys(&path.display().to_string()).await.unwrap();
    }

    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }

    pub async fn idle(&self) {
        self.wait_until("the answer to finish", "document.body.dataset.idle === '1'")
            .await;
    }

    /// Texts and disabled flags of the quick-reply buttons of the n-th message entry.
    pub async fn buttons(&self, nth: usize) -> Vec<(String, bool)> {
        let v = self
            .js(&format!(
                "const m = document.querySelectorAll('.entry-message')[{nth}];
                 if (!m) return null;
                 return Array.from(m.querySelectorAll('.quick-replies > button.quick-reply'))
                   .map(b => [b.textContent, b.disabled]);"
            ))
            .await;
        serde_json::from_value::<Vec<(String, bool)>>(v).unwrap_or_default()
    }
}
