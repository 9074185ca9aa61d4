//! Hostile requests and connections over real HTTP on 127.0.0.1, each attack tried as an
//! outside report did it: another web page drives the agent (a cross-origin `text/plain` POST,
//! a foreign `Host`, a cross-site GET creating sessions), the array body and the empty 405/414
//! bodies, and slow and idle connections held forever (with short timeouts).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::{start, start_with};
use serde_json::{Value, json};
use testkit::Reply;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolwright_chat_panel::PanelConfig;

const SID: &str = "victim-session-01";
const BIG: usize = 8 * 1024 * 1024;

/// Sends raw bytes and reads the whole answer until the server closes (bounded).
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn post_req(host: &str, extra: &str, ctype: &str, body: &str) -> String {
    format!(
        "POST /api/sessions/{SID}/messages HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn status_of(resp: &str) -> u16 {
    resp.split_whitespace()
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap_or(0)
}

fn json_body(resp: &str) -> Value {
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body.trim()).unwrap_or(Value::Null)
}

async fn entries(base: &str, sid: &str) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{base}api/sessions/{sid}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["entries"].as_array().unwrap().clone()
}

#[tokio::test]
async fn cross_origin_text_plain_post_and_foreign_host_are_rejected() {
    let fx = start().await;
    let addr = fx.panel.addr();
    let own = addr.to_string();
    // the report's request: a "simple" cross-origin request, no CORS preflight needed
    let attack = post_req(
        "attacker.example",
        "Origin: http://attacker.example\r\n",
        "text/plain",
        r#"{"text":"hi"}"#,
    );
    let r = raw(addr, &attack).await;
    assert_eq!(status_of(&r), 403, "{r}");
    assert!(
        json_body(&r)["error"]
            .as_str()
            .unwrap()
            .contains("attacker.example"),
        "{r}"
    );
    // each check on its own
    let cases = [
        // text/plain from the panel's own origin: still not JSON
        (
            post_req(
                &own,
                &format!("Origin: http://{own}\r\n"),
                "text/plain",
                r#"{"text":"hi"}"#,
            ),
            415,
        ),
        // a form post
        (
            post_req(&own, "", "application/x-www-form-urlencoded", "text=hi"),
            415,
        ),
        // JSON with a foreign Host (DNS rebinding: the attacker's name resolving to 127.0.0.1)
        (
            post_req(
                "attacker.example:80",
                "",
                "application/json",
                r#"{"text":"hi"}"#,
            ),
            403,
        ),
        // another origin on the same machine (another port)
        (
            post_req(
                &own,
                "Origin: http://127.0.0.1:1\r\n",
                "application/json",
                r#"{"text":"hi"}"#,
            ),
            403,
        ),
        (
            post_req(
                &own,
                "Origin: null\r\n",
                "application/json",
                r#"{"text":"hi"}"#,
            ),
            403,
        ),
        // what a browser says about a cross-site fetch
        (
            post_req(
                &own,
                "Sec-Fetch-Site: cross-site\r\n",
                "application/json",
                r#"{"text":"hi"}"#,
            ),
            403,
        ),
        (
            post_req(
                &own,
                "Sec-Fetch-Site: same-site\r\n",
                "application/json",
                r#"{"text":"hi"}"#,
            ),
            403,
        ),
    ];
    for (req, want) in cases {
        let r = raw(addr, &req).await;
        assert_eq!(status_of(&r), want, "{req}\n---\n{r}");
        assert!(json_body(&r)["error"].is_string(), "{r}");
    }
    assert_eq!(fx.model.request_count(), 0, "no turn ran");
    assert!(
        entries(&fx.url(), SID).await.is_empty(),
        "the victim session is untouched"
    );
    // the panel's own page (same origin, JSON) still works, with and without Origin
    let ok = post_req(
        &own,
        &format!("Origin: http://{own}\r\nSec-Fetch-Site: same-origin\r\n"),
        "application/json; charset=utf-8",
        r#"{"text":"hello"}"#,
    );
    let r = raw(addr, &ok).await;
    assert_eq!(status_of(&r), 200, "{r}");
    assert!(r.contains("event: done"), "{r}");
    let r = raw(
        addr,
        &post_req(
            &format!("localhost:{}", addr.port()),
            "",
            "application/json",
            r#"{"text":"again"}"#,
        ),
    )
    .await;
    assert_eq!(status_of(&r), 200, "{r}");
}

#[tokio::test]
async fn allow_list_for_a_deployment_behind_a_proxy() {
    let fx = start_with(
        PanelConfig::default()
            .with_allowed_host("chat.example.com")
            .with_allowed_origin("https://chat.example.com"),
        common::demo_responder,
    )
    .await;
    let r = raw(
        fx.panel.addr(),
        &post_req(
            "chat.example.com",
            "Origin: https://chat.example.com\r\n",
            "application/json",
            r#"{"text":"hello"}"#,
        ),
    )
    .await;
    assert_eq!(status_of(&r), 200, "{r}");
    let r = raw(
        fx.panel.addr(),
        &post_req(
            "chat.example.com",
            "Origin: https://evil.example.com\r\n",
            "application/json",
            r#"{"text":"hello"}"#,
        ),
    )
    .await;
    assert_eq!(status_of(&r), 403, "{r}");
    let r = raw(
        fx.panel.addr(),
        "GET /healthz HTTP/1.1\r\nHost: other.example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&r), 403, "{r}");
}

#[tokio::test]
async fn get_never_creates_a_session_so_cross_site_gets_evict_nothing() {
    // at most 2 conversations: before the fix, two GETs for other ids evicted the real one
    let fx = start_with(
        PanelConfig::default().with_max_sessions(2),
        common::demo_responder,
    )
    .await;
    let c = reqwest::Client::new();
    let r = c
        .post(format!("{}api/sessions/{SID}/messages", fx.url()))
        .json(&json!({"text": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.text().await.unwrap();
    let before = entries(&fx.url(), SID).await;
    assert!(!before.is_empty());
    for i in 0..5 {
        let sid = format!("drive-by-get-{i:04}");
        let v: Value = c
            .get(format!("{}api/sessions/{sid}", fx.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["entries"], json!([]), "{v}");
    }
    assert_eq!(
        entries(&fx.url(), SID).await,
        before,
        "the real conversation is still there"
    );
}

#[tokio::test]
async fn array_bodies_are_rejected_and_405_414_have_json_bodies() {
    let fx = start().await;
    let addr = fx.panel.addr();
    let own = addr.to_string();
    let r = raw(addr, &post_req(&own, "", "application/json", r#"["hi",3]"#)).await;
    assert_eq!(status_of(&r), 400, "{r}");
    assert!(
        json_body(&r)["error"]
            .as_str()
            .unwrap()
            .contains("not an object"),
        "{r}"
    );
    assert_eq!(fx.model.request_count(), 0);

    let r = raw(addr, &format!("PUT /api/sessions/{SID}/messages HTTP/1.1\r\nHost: {own}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")).await;
    assert_eq!(status_of(&r), 405, "{r}");
    assert!(
        r.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{r}"
    );
    assert!(json_body(&r)["error"].is_string(), "{r}");
    let r = raw(
        addr,
        &format!("DELETE /api/sessions/{SID} HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status_of(&r), 405, "{r}");
    assert!(json_body(&r)["error"].is_string(), "{r}");

    let long = "a".repeat(10_000);
    let r = raw(
        addr,
        &format!("GET /api/sessions/{long} HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status_of(&r), 414, "{r}");
    assert_eq!(
        json_body(&r)["error"],
        "request target is longer than 8192 bytes",
        "{r}"
    );
    let r = raw(
        addr,
        &format!("GET /nope?{long} HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status_of(&r), 414, "{r}");
}

/// Short limits so the slow clients are cut within seconds.
fn short_limits() -> PanelConfig {
    PanelConfig::default()
        .with_header_read_timeout(Duration::from_secs(1))
        .with_body_read_timeout(Duration::from_secs(1))
        .with_idle_timeout(Duration::from_secs(1))
        .with_write_stall_timeout(Duration::from_secs(1))
}

/// Reads until the server closes; returns what came (bounded by a generous guard).
async fn until_closed(s: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let guard = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(guard, s.read(&mut buf)).await {
            Err(_) => return None, // still open after 15 s
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn idle_and_slowloris_connections_are_closed() {
    let fx = start_with(short_limits(), common::demo_responder).await;
    let addr = fx.panel.addr();
    let host = addr.to_string();
    // 1. idle: connects, sends nothing
    let mut idle = TcpStream::connect(addr).await.unwrap();
    // 2. a partial request line
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(b"GET /heal").await.unwrap();
    // 3. slow headers: a byte now and then, forever
    let mut slow_headers = TcpStream::connect(addr).await.unwrap();
    slow_headers
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    let drip = tokio::spawn(async move {
        for _ in 0..40 {
            if slow_headers.write_all(b"X").await.is_err() {
                return (slow_headers, true);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        (slow_headers, false)
    });
    // 4. slow body: the headers promise 100 bytes, 5 arrive
    let mut slow_body = TcpStream::connect(addr).await.unwrap();
    slow_body
        .write_all(
            format!(
                "POST /api/sessions/slow-body-01/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"te"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // 5. idle keep-alive: one request answered, then silence
    let mut keep_alive = TcpStream::connect(addr).await.unwrap();
    keep_alive
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();

    assert!(
        until_closed(&mut idle).await.is_some(),
        "idle connection still open"
    );
    assert!(
        until_closed(&mut partial).await.is_some(),
        "partial request line still open"
    );
    let body = until_closed(&mut slow_body)
        .await
        .expect("slow body still open");
    assert!(body.starts_with("HTTP/1.1 408"), "{body}");
    assert!(body.contains("did not arrive within 1 s"), "{body}");
    let ka = until_closed(&mut keep_alive)
        .await
        .expect("idle keep-alive still open");
    assert!(ka.starts_with("HTTP/1.1 200"), "{ka}");
    let (mut slow_headers, cut) = drip.await.unwrap();
    assert!(
        cut || until_closed(&mut slow_headers).await.is_some(),
        "slow headers still open"
    );
    // and the panel still answers
    assert_eq!(
        reqwest::get(format!("{}healthz", fx.url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "ok"
    );
}

// Two threads: the panel's timers (1 s) must not wait while the test parses a large state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_and_the_answer_is_kept() {
    // an answer far larger than the socket buffers, to a client that never reads
    let big = "y".repeat(BIG);
    let fx = start_with(
        short_limits().with_turn_timeout(Duration::from_secs(60)),
        move |_| Reply::text(big.clone()).shape(|s| s.text_chunk = 256 * 1024),
    )
    .await;
    let addr = fx.panel.addr();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let body = r#"{"text":"a long one please"}"#;
    s.write_all(
        format!(
            "POST /api/sessions/{SID}/messages HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // never read; the answer must still complete into the conversation and free the session
    // (a fresh connection per poll: the 1 s idle timeout closes pooled ones)
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let v: Value = c
            .get(format!("{}api/sessions/{SID}", fx.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let done = v["busy"] == false
            && v["entries"].as_array().unwrap().iter().any(|e| {
                e["kind"] == "assistant" && e["text"].as_str().is_some_and(|t| t.len() == BIG)
            });
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the answer never completed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // the stalled connection was closed by the server: reading now ends (after the buffered part)
    let mut sink = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut sink)).await;
    assert!(r.is_ok(), "the stalled connection was never closed");
    assert!(
        sink.len() < BIG,
        "it was cut, not delivered: {} bytes",
        sink.len()
    );
}
