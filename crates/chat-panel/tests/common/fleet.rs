//! Shared by the tests that run the panel as worker processes (`workers`, `faults_mid_turn`):
//! the worker process, the fault-test services xtask starts, and the stored rows.
//! Include with `#[path = "common/fleet.rs"] mod fleet;` beside `mod common;`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use testkit::ScriptedServer;
use toolwright_chat_panel::PanelConfig;

/// Set in a worker process's environment: the test binary is then a worker, not the tests.
pub const CHILD: &str = "PANEL_WORKER_CHILD";
/// A worker's store poll in milliseconds (absent: the panel's default).
const FOLLOW_POLL: &str = "PANEL_WORKER_FOLLOW_POLL_MS";

/// Set in a worker's environment to `ISSUER`: the worker authenticates every API request with
/// `JwtBearer` against `ISSUER/jwks` (audience `chat-panel`), and its agent holds `delete_file`
/// for the person's approval (the approval tests' tool and key, the same on every worker).
const IDENTITY: &str = "PANEL_WORKER_JWT_ISSUER";

/// What the panel stores when a turn's answer was lost (kept in step with the panel).
pub const INTERRUPTED_START: &str = "The answer to your last message was interrupted";

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The worker process's `main`: the configuration from the environment (`DATABASE_URL`,
/// `NATS_URL` when set), a short turn lease so a dead worker is noticed quickly; prints
/// `listening ADDR`, serves until its stdin closes or it is killed.
pub fn worker_child() {
    runtime().block_on(async {
        let mut config = PanelConfig::from_env().with_turn_lease(Duration::from_millis(1500));
        if let Some(ms) = std::env::var(FOLLOW_POLL).ok().and_then(|v| v.parse().ok()) {
            config = config.with_follow_poll(Duration::from_millis(ms));
        }
        assert!(config.history.is_shared(), "DATABASE_URL was not read");
        let server = match std::env::var(IDENTITY) {
            Ok(issuer) => {
                let verifier = toolwright_chat_panel::identity::JwtBearer::new(
                    toolwright_chat_panel::identity::JwtBearerConfig::new(
                        format!("{issuer}/jwks"),
                        issuer,
                        "chat-panel",
                    ),
                )
                .unwrap();
                crate::common::serve_child_panel_with(
                    config.with_authenticator(verifier),
                    crate::common::with_gated_delete,
                )
                .await
            }
            Err(_) => crate::common::serve_child_panel(config).await,
        };
        println!("listening {}", server.addr());
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        })
        .await;
        server.shutdown().await;
    });
}

/// A running worker process (this test binary with [`CHILD`] set), killed when dropped.
pub struct Worker {
    child: Child,
    pub addr: SocketAddr,
}

impl Worker {
    /// A worker on `database_url` with the in-process bus.
    pub fn start(model: &ScriptedServer, database_url: &str) -> Self {
        Self::start_with_broker(model, database_url, None)
    }

    /// A worker whose bus is the NATS server at `broker` (`NATS_URL`), else in-process.
    pub fn start_with_broker(
        model: &ScriptedServer,
        database_url: &str,
        broker: Option<&str>,
    ) -> Self {
        Self::spawn(model, database_url, broker, Duration::from_millis(50))
    }

    /// A worker on `database_url` (in-process bus) that knows who calls: bearer tokens of
    /// `issuer` (see [`IDENTITY`]), and `delete_file` held for approval.
    pub fn start_with_identity(model: &ScriptedServer, database_url: &str, issuer: &str) -> Self {
        Self::spawn_with(
            model,
            database_url,
            None,
            Duration::from_millis(50),
            Some(issuer),
        )
    }

    /// A worker on `database_url` (in-process bus) that reads the store on a timer every
    /// `poll` only (the others: every 50 ms, so a test does not wait on the timer).
    pub fn start_with_poll(model: &ScriptedServer, database_url: &str, poll: Duration) -> Self {
        Self::spawn(model, database_url, None, poll)
    }

    fn spawn(
        model: &ScriptedServer,
        database_url: &str,
        broker: Option<&str>,
        poll: Duration,
    ) -> Self {
        Self::spawn_with(model, database_url, broker, poll, None)
    }

    fn spawn_with(
        model: &ScriptedServer,
        database_url: &str,
        broker: Option<&str>,
        poll: Duration,
        issuer: Option<&str>,
    ) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        match issuer {
            Some(i) => command.env(IDENTITY, i),
            None => command.env_remove(IDENTITY),
        };
        match broker {
            Some(url) => command.env("NATS_URL", url),
            None => command.env_remove("NATS_URL"),
        };
        command.env(FOLLOW_POLL, poll.as_millis().to_string());
        let (child, addr) = crate::common::spawn_panel(
            command
                .env(CHILD, "1")
                .env("DATABASE_URL", database_url)
                .env("CHAT_PANEL_MODEL_URL", model.base_url()),
        );
        Self { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// SIGKILL: no shutdown, no lease released.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `url` with its database replaced by `db`.
pub fn with_db(url: &str, db: &str) -> String {
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{base}/{db}{query}")
}

pub async fn pg_connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// A fresh database `name` on the server at `base` (a URL whose user may create databases);
/// its URL.
pub async fn fresh_database_on(base: &str, name: &str) -> String {
    let admin = pg_connect(base).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    with_db(base, name)
}

/// The stored messages of `sid`, as their JSON text, in order.
pub async fn stored_texts(url: &str, sid: &str) -> Vec<String> {
    pg_connect(url)
        .await
        .query(
            "SELECT message FROM ce_messages WHERE session_id = $1 ORDER BY seq",
            &[&sid],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

/// `POST {base}api/sessions/{sid}/messages` with `text`: the status and the body.
pub async fn post(c: &reqwest::Client, base: &str, sid: &str, text: &str) -> (u16, String) {
    let r = c
        .post(format!("{base}api/sessions/{sid}/messages"))
        .json(&serde_json::json!({ "text": text }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// A variable `cargo xtask test` sets for the fault-test services, or a failure saying so.
pub fn fault_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run `cargo xtask test`, or `cargo xtask with-services cargo test \
             -p toolwright-chat-panel --test NAME` (they start a fault-test PostgreSQL cluster and \
             nats-server on 127.0.0.1 and set TEST_PG_FAULT_* and TEST_NATS_FAULT_*)"
        )
    })
}

/// `pg_ctl ARGS` on the fault-test cluster (as the user xtask names, when it names one).
pub fn pg_ctl(args: &[&str]) {
    let data = fault_env("TEST_PG_FAULT_DATA");
    let ctl = fault_env("TEST_PG_FAULT_PG_CTL");
    let run_as = fault_env("TEST_PG_FAULT_RUN_AS");
    let mut cmd = if run_as.is_empty() {
        Command::new(&ctl)
    } else {
        let mut c = Command::new("runuser");
        c.args(["-u", &run_as, "--", &ctl]);
        c
    };
    let out = cmd.args(args).arg("-D").arg(&data).output().unwrap();
    assert!(
        out.status.success(),
        "pg_ctl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kill -KILL` the fault-test broker by its pid file, and waits until it is gone.
pub fn kill_broker() {
    let pid = std::fs::read_to_string(fault_env("TEST_NATS_FAULT_PID")).unwrap();
    let pid = pid.trim().to_owned();
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    // gone, or a zombie its parent (xtask) has not reaped yet
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    };
    while alive() {
        assert!(Instant::now() < deadline, "nats-server {pid} did not die");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the fault-test broker again (same port, same store); xtask stops it by its pid file.
pub fn start_broker() {
    let mut server = Command::new(fault_env("TEST_NATS_SERVER"))
        .arg("-c")
        .arg(fault_env("TEST_NATS_FAULT_CONF"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::spawn(move || server.wait());
}
