//! a session the server expires while it keeps running. The official MCP
//! Python SDK's Streamable HTTP server (pinned, `tests/python/`) ends a session after an idle
//! period and answers its id with HTTP 404 — the path the spec gives for an expired session,
//! which a restarted server never exercised. The bridge must open a new session and retry the
//! call once, at once, with no restart of the service and no wait for the call's timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolwright_mcp_bridge::{McpBridge, ServiceConfig, ServiceStatus};

/// The idle period the server is started with: sessions with nothing in flight this long end.
const IDLE_SECONDS: f64 = 1.0;

/// `tests/python/idle_server.py` under the SDK's virtualenv, on a free port of 127.0.0.1, killed
/// when dropped; its log lines are kept for the assertions.
struct PythonServer {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl PythonServer {
    fn start() -> Self {
        let python = testkit::python_mcp_sdk().unwrap_or_else(|e| panic!("{e}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/idle_server.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .arg(IDLE_SECONDS.to_string())
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
                return Self { child, port, log };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the Python SDK server did not listen on 127.0.0.1:{port}: {:?}",
            log.lock().unwrap()
        );
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn whoami(bridge: &McpBridge) -> (String, u64) {
    let out: Value = bridge
        .call("py__whoami", json!({}))
        .await
        .map(|o| o.value)
        .unwrap();
    // The SDK sends the dict as text content (and as structured content where asked for).
    let out = match out {
        Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        other => other,
    };
    let session = out["session"].as_str().unwrap_or_else(|| panic!("{out}"));
    (session.to_owned(), out["pid"].as_u64().unwrap())
}

#[tokio::test]
async fn a_session_the_running_server_expired_is_replaced_at_once() {
    let server = PythonServer::start();
    let bridge = McpBridge::new();
    bridge
        .register(
            ServiceConfig::remote("py", server.url())
                .with_call_timeout(Duration::from_secs(20))
                .with_startup_timeout(Duration::from_secs(20)),
        )
        .unwrap();
    bridge.start("py").await.unwrap();

    let (first, pid) = whoami(&bridge).await;
    let (again, _) = whoami(&bridge).await;
    assert_eq!(
        first,
        again,
        "two calls in a row share the session: {}",
        server.log()
    );

    // Nothing in flight for longer than the idle period: the server ends the session and
    // keeps running.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !server.log().contains("idle timeout") {
        assert!(
            Instant::now() < deadline,
            "the server never expired the session (it keeps a session alive while a GET stream \
             is open): {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let started = Instant::now();
    let (second, same_pid) = whoami(&bridge).await;
    let took = started.elapsed();
    assert_eq!(same_pid, pid, "the same server process answered");
    assert_ne!(second, first, "the call ran on a new session");
    assert!(
        took < Duration::from_secs(10),
        "the expired session was replaced at once, not after the call's 20 s timeout: {took:?}"
    );
    assert_eq!(bridge.status("py").unwrap(), ServiceStatus::Running);
    let (third, _) = whoami(&bridge).await;
    assert_eq!(third, second, "the new session is kept");
    bridge.stop("py").await.unwrap();
}
