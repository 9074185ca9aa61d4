//! The panel's own accept loop (`axum::serve` has no timeouts and no connection cap): hyper's
//! HTTP/1 connection with a header-read timeout, an I/O wrapper with an idle timeout and a
//! write-stall timeout, and a cap on open connections that closes the longest idle one first.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use futures::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Sleep;
use tower::ServiceExt;

/// The connection limits, from [`crate::PanelConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub write_stall_timeout: Duration,
    pub max_head_bytes: usize,
}

/// One open connection, as the accept loop sees it.
struct Conn {
    /// Requests whose response (body included) is not finished.
    in_flight: AtomicUsize,
    /// When it last read a byte or finished a response.
    last_active: Mutex<Instant>,
    /// Closes it.
    close: Notify,
}

impl Conn {
    fn touch(&self) {
        *self
            .last_active
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }
    fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0).then(|| {
            *self
                .last_active
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        })
    }
}

/// Logs at most once a second per kind, so a flood does not flood the log.
struct RateLimitedLog(AtomicU64);

impl RateLimitedLog {
    fn ready(&self, start: Instant) -> bool {
        let now = start.elapsed().as_secs() + 1;
        self.0.swap(now, Ordering::Relaxed) != now
    }
}

struct Table {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    start: Instant,
    evict_log: RateLimitedLog,
    refuse_log: RateLimitedLog,
}

/// Runs the accept loop until `stop` turns true, then lets open responses finish.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let table = Arc::new(Table {
        conns: Mutex::new(HashMap::new()),
        next: AtomicU64::new(1),
        start: Instant::now(),
        evict_log: RateLimitedLog(AtomicU64::new(0)),
        refuse_log: RateLimitedLog(AtomicU64::new(0)),
    });
    let max = limits.max_connections.max(1);
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE/ENFILE and friends: wait a little instead of spinning
                tracing::warn!(error = %e, "chat panel: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let conn = Arc::new(Conn {
            in_flight: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            close: Notify::new(),
        });
        let admitted = {
            let mut conns = table.conns.lock().unwrap_or_else(PoisonError::into_inner);
            let room = conns.len() < max
                || {
                    let victim = conns
                        .iter()
                        .filter_map(|(id, c)| c.idle_since().map(|t| (t, *id)))
                        .min();
                    match victim.and_then(|(_, id)| conns.remove(&id)) {
                        Some(v) => {
                            v.close.notify_one();
                            if table.evict_log.ready(table.start) {
                                tracing::warn!(
                                    max_connections = max,
                                    "chat panel: connection limit reached; closing the longest idle connection"
                                );
                            }
                            true
                        }
                        None => false,
                    }
                };
            if room {
                let id = table.next.fetch_add(1, Ordering::Relaxed);
                conns.insert(id, conn.clone());
                Some(id)
            } else {
                None
            }
        };
        match admitted {
            Some(id) => {
                let (table, router, limits, stop) =
                    (table.clone(), router.clone(), limits.clone(), stop.clone());
                tokio::spawn(async move {
                    run_conn(stream, conn, router, &limits, stop).await;
                    table
                        .conns
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&id);
                });
            }
            None => {
                if table.refuse_log.ready(table.start) {
                    tracing::warn!(
                        max_connections = max,
                        "chat panel: connection limit reached and every connection is busy; refusing with 503"
                    );
                }
                tokio::spawn(refuse(stream));
            }
        }
    }
    // stopping: each connection finishes its current response and closes (`run_conn`)
}

/// The answer to a connection over the cap when none can be closed.
async fn refuse(mut stream: TcpStream) {
    let body = r#"{"error":"the panel has too many open connections; try again shortly"}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// Decrements the in-flight count when the response body is finished or dropped.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.touch();
    }
}

async fn run_conn(
    stream: TcpStream,
    conn: Arc<Conn>,
    router: Router,
    limits: &Limits,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    // who connected, for the authenticator (a trusted proxy's header is believed from it only)
    let peer = stream.peer_addr().ok();
    let io = Guarded {
        io: stream,
        conn: conn.clone(),
        idle_timeout: limits.idle_timeout,
        write_stall_timeout: limits.write_stall_timeout,
        idle: None,
        stall: None,
        writing: false,
    };
    let svc_conn = conn.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        svc_conn.in_flight.fetch_add(1, Ordering::AcqRel);
        let guard = InFlight(svc_conn.clone());
        let router = router.clone();
        async move {
            let mut req = req.map(Body::new);
            if let Some(p) = peer {
                req.extensions_mut().insert(axum::extract::ConnectInfo(p));
            }
            let resp = match router.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            let (parts, body) = resp.into_parts();
            let body = Body::from_stream(body.into_data_stream().map(move |chunk| {
                let _keep = &guard;
                chunk
            }));
            Ok::<_, std::convert::Infallible>(hyper::Response::from_parts(parts, body))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_head_bytes.max(8192));
    let http = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(http);
    tokio::select! {
        r = http.as_mut() => {
            if let Err(e) = r {
                if e.is_timeout() {
                    tracing::info!("chat panel: closed a connection that did not send its request headers in time");
                } else {
                    tracing::debug!(error = %e, "chat panel: connection ended");
                }
            }
        }
        _ = conn.close.notified() => {}
        _ = stop.changed() => {
            http.as_mut().graceful_shutdown();
            let _ = http.await;
        }
    }
}

/// The socket, with two timeouts: reading nothing for `idle_timeout` while no request is in
/// flight, and a write the peer does not take for `write_stall_timeout`, both end the
/// connection (with a log line).
struct Guarded {
    io: TcpStream,
    conn: Arc<Conn>,
    idle_timeout: Duration,
    write_stall_timeout: Duration,
    idle: Option<Pin<Box<Sleep>>>,
    stall: Option<Pin<Box<Sleep>>>,
    /// The last write is waiting for the peer: the connection is not idle (a finished
    /// response may still be on its way out).
    writing: bool,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.conn.touch();
                }
                this.idle = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                if this.writing || this.conn.in_flight.load(Ordering::Acquire) > 0 {
                    this.idle = None;
                    return Poll::Pending;
                }
                let timeout = this.idle_timeout;
                let sleep = this
                    .idle
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if sleep.as_mut().poll(cx).is_ready() {
                    tracing::info!(
                        idle_timeout_ms = timeout.as_millis() as u64,
                        "chat panel: closing an idle connection"
                    );
                    return Poll::Ready(Err(timed_out("idle timeout")));
                }
                Poll::Pending
            }
        }
    }
}

impl Guarded {
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let timeout = self.write_stall_timeout;
        let sleep = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if sleep.as_mut().poll(cx).is_ready() {
            tracing::warn!(
                write_stall_timeout_ms = timeout.as_millis() as u64,
                "chat panel: closing a connection whose client stopped reading"
            );
            return true;
        }
        false
    }
}

impl Guarded {
    /// What every write does with the inner write's answer: progress clears the stall timer, a
    /// write that stays pending past the stall limit fails.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(r) => {
                self.stall = None;
                self.writing = false;
                Poll::Ready(r)
            }
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(timed_out("write stalled"))),
            Poll::Pending => {
                self.writing = true;
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write(cx, data);
        this.after_write(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.after_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
