//! A provider's wire, replayed: a real HTTP/1.1 server on 127.0.0.1 that answers every `POST`
//! (any path: `/v1/messages`, `/v1/responses`, `/v1beta/models/…:streamGenerateContent`) from
//! a script, byte for byte (fixtures are sent exactly as recorded), and records every request
//! with its raw body. The native backends' tests and the tests that drive them through an agent
//! share it.
//!
//! Written on tokio's sockets alone: each connection carries one request and is closed after
//! the answer, so a streamed answer ends where its bytes end (a cut stream is simply a fixture
//! without its final event, or [`WireReply::Abort`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum WireReply {
    /// A JSON body with this status and extra headers.
    Json {
        /// The status.
        status: u16,
        /// The body, sent as is.
        body: String,
        /// Extra headers (`retry-after`, …).
        headers: Vec<(String, String)>,
    },
    /// An event stream, sent as these bytes in chunks of `chunk` bytes (0: all at once).
    Sse {
        /// The stream's bytes.
        body: String,
        /// Bytes per write; 0 sends it all at once.
        chunk: usize,
    },
    /// An event stream written one event per write, at once (as a server flushes each event).
    SseEvents(String),
    /// A 200 event stream whose connection breaks after these bytes (no clean end).
    Abort(String),
}

impl WireReply {
    /// A 200 JSON answer.
    pub fn json(body: impl Into<String>) -> Self {
        Self::Json {
            status: 200,
            body: body.into(),
            headers: Vec::new(),
        }
    }
    /// An error status with a JSON body and a `Retry-After` header when given.
    pub fn status(status: u16, body: impl Into<String>, retry_after: Option<&str>) -> Self {
        Self::Json {
            status,
            body: body.into(),
            headers: retry_after
                .map(|s| vec![("retry-after".to_owned(), s.to_owned())])
                .unwrap_or_default(),
        }
    }
    /// An event stream sent in one piece.
    pub fn sse(body: impl Into<String>) -> Self {
        Self::Sse {
            body: body.into(),
            chunk: 0,
        }
    }
    /// An event stream sent in pieces of `chunk` bytes (events split across reads).
    pub fn sse_chunked(body: impl Into<String>, chunk: usize) -> Self {
        Self::Sse {
            body: body.into(),
            chunk,
        }
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct WireRequest {
    /// The request path.
    pub path: String,
    /// Header names in lower case, with their values.
    pub headers: Vec<(String, String)>,
    /// The body as sent.
    pub raw: Vec<u8>,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: serde_json::Value,
    /// When it arrived.
    pub at: Instant,
}

impl WireRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Inner {
    script: VecDeque<WireReply>,
    fallback: Option<WireReply>,
    requests: Vec<WireRequest>,
    record: bool,
}

/// The server; it stops when dropped.
pub struct WireServer {
    addr: std::net::SocketAddr,
    inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WireServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WireServer {
    /// Binds 127.0.0.1 on a free port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(Mutex::new(Inner {
            record: true,
            ..Inner::default()
        }));
        let shared = inner.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    return;
                };
                let _ = conn.set_nodelay(true);
                tokio::spawn(serve(conn, shared.clone()));
            }
        });
        Self { addr, inner, task }
    }

    /// `http://127.0.0.1:PORT` (no path: each backend adds its own).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The body of request `i` as JSON.
    pub fn body(&self, i: usize) -> serde_json::Value {
        self.inner.lock().unwrap().requests[i].body.clone()
    }

    /// Appends a reply to the script.
    pub fn push(&self, reply: WireReply) {
        self.inner.lock().unwrap().script.push_back(reply);
    }

    /// The reply for every request the script does not cover.
    pub fn always(&self, reply: WireReply) {
        self.inner.lock().unwrap().fallback = Some(reply);
    }

    /// Stop recording requests (for benches).
    pub fn set_recording(&self, on: bool) {
        self.inner.lock().unwrap().record = on;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<WireRequest> {
        self.inner.lock().unwrap().requests.clone()
    }
}

async fn read_request(conn: &mut TcpStream) -> Option<WireRequest> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut raw = buf[head_end + 4..].to_vec();
    while raw.len() < len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&raw).unwrap_or(serde_json::Value::Null);
    Some(WireRequest {
        path,
        headers,
        raw,
        body,
        at: Instant::now(),
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";

async fn serve(mut conn: TcpStream, inner: Arc<Mutex<Inner>>) {
    let Some(request) = read_request(&mut conn).await else {
        return;
    };
    let reply = {
        let mut s = inner.lock().unwrap();
        if s.record {
            s.requests.push(request.clone());
        }
        s.script.pop_front().or_else(|| s.fallback.clone())
    };
    let reply = reply.unwrap_or_else(|| {
        WireReply::status(
            500,
            r#"{"error":{"message":"the test server's script is exhausted","type":"server_error","param":null,"code":null}}"#,
            None,
        )
    });
    match reply {
        WireReply::Json {
            status,
            body,
            headers,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                reason(status),
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
        }
        WireReply::SseEvents(body) => {
            let _ = conn.write_all(SSE_HEAD.as_bytes()).await;
            for event in body.split_inclusive("\n\n") {
                let _ = conn.write_all(event.as_bytes()).await;
            }
        }
        WireReply::Abort(bytes) => {
            // Chunked, and closed before the last chunk: the client reads these bytes, then a
            // body that breaks off (not a clean end of stream).
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            let _ = conn.write_all(head.as_bytes()).await;
            let chunk = format!("{:x}\r\n{bytes}\r\n", bytes.len());
            let _ = conn.write_all(chunk.as_bytes()).await;
            let _ = conn.flush().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
        WireReply::Sse { body, chunk } => {
            let _ = conn.write_all(SSE_HEAD.as_bytes()).await;
            if chunk == 0 {
                let _ = conn.write_all(body.as_bytes()).await;
            } else {
                for piece in body.as_bytes().chunks(chunk) {
                    let _ = conn.write_all(piece).await;
                    let _ = conn.flush().await;
                    tokio::time::sleep(Duration::from_micros(50)).await;
                }
            }
        }
    }
    let _ = conn.shutdown().await;
}
