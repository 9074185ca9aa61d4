//! The child process of one MCP server: a clean environment, contained by `process-guard`,
//! stderr into `tracing`, stdout checked line by line before rmcp reads it, and an end that
//! leaves nothing behind.
//!
//! Containment (`toolwright_process_guard::spawn`): the server runs in its own process group and is a child
//! subreaper, so whatever it starts — `npx` → `node`, a `setsid()` daemon, node's
//! `detached: true` — stays in its process tree, and carries a marker in its environment; a stop,
//! a failure or a dropped bridge freezes and kills that whole set. The agent process is made
//! non-dumpable when the first server starts, and a server started by root loses
//! `CAP_SYS_PTRACE` (and the other capabilities that read memory), so a server cannot read the
//! agent's `/proc/PID/environ` or memory. What this does and does not cover:
//! `crates/process-guard/README.md` (measured on this machine) and `process_guard`'s docs.
//!
//! rmcp's own child-process transport inherits stderr, does not start the child in its own
//! process group and ignores stdout lines that are not JSON, so the bridge spawns the
//! [`tokio::process::Command`] itself and hands rmcp a transport of its own (`StdioTransport`):
//! the server's messages, each stdout line framed (with a size cap), checked and parsed exactly
//! once as rmcp's service task reads them (no task or channel in between), and each message
//! written as one line to the server's stdin by the service task itself, at once, when the pipe
//! takes it. (It used to check each line, copy it through a pipe and let rmcp parse it again: a
//! third of the time of a call; and each message waited for a lock and a task of its own before
//! its write.) A `tools/call` does not go through rmcp's service task at all on the session
//! revision ([`Direct`]): the caller writes it and the reader hands the answer back.

use std::collections::HashMap;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::{Stream, StreamExt};
use rmcp::RoleClient;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
    CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::oneshot;

use crate::config::ServiceConfig;

/// The only variables a server's environment holds besides its service's `env`: these of the
/// agent's (when set), so that `npx`, `uvx` or `node` can start, and `PROCESS_GUARD`
/// (`toolwright_process_guard::MARKER_VAR`: a random marker, set by the bridge for each server, by which a
/// detached descendant is found and ended; not a secret). The agent's API keys and other
/// secrets are never passed on, and the server cannot read them from `/proc` either (see the
/// module docs).
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TZ",
    toolwright_process_guard::MARKER_VAR,
];

/// Largest JSON-RPC message (one stdout line) accepted from a server. A larger one breaks the
/// protocol: the service goes to `error`.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// How long closing the transport waits for unwritten messages before it closes stdin anyway.
const CLOSE_FLUSH: Duration = Duration::from_millis(500);

/// Longest stderr line kept for the log.
const MAX_STDERR_LINE: usize = 4096;

/// A spawned server.
pub(crate) struct Spawned {
    pub child: Child,
    pub group: GroupGuard,
    /// What rmcp reads and writes: the server's stdout and stdin.
    pub transport: StdioTransport,
    /// `tools/call` written by the caller itself, beside rmcp (see [`Direct`]).
    pub direct: Arc<Direct>,
    /// Fires once when stdout carried something that is not a JSON-RPC message.
    pub violation: oneshot::Receiver<String>,
}

/// Spawns `cfg`'s command contained (see the module docs) with a cleared environment.
pub(crate) fn spawn(cfg: &ServiceConfig) -> std::io::Result<Spawned> {
    if let Err(e) = toolwright_process_guard::protect_this_process() {
        tracing::warn!("MCP servers may be able to read this process's environment: {e}");
    }
    let mut cmd = Command::new(&cfg.command);
    cmd.args(&cfg.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for key in INHERITED_ENV
        .iter()
        .filter(|k| **k != toolwright_process_guard::MARKER_VAR)
    {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(&cfg.env);
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    let (mut child, guard) = toolwright_process_guard::spawn(&mut cmd).map_err(|e| match e {
        toolwright_process_guard::GuardError::Spawn { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    })?;
    let group = GroupGuard { guard };
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("child pipes missing"));
    };
    let service = cfg.name.clone();
    tokio::spawn(log_stderr(service.clone(), stderr));
    let (vtx, violation) = oneshot::channel();
    let stdin = Stdin::new(stdin);
    let direct = Arc::new(Direct {
        stdin: stdin.clone(),
        waiting: Mutex::new(Some(HashMap::new())),
        next: AtomicU64::new(0),
    });
    Ok(Spawned {
        child,
        group,
        transport: StdioTransport {
            messages: messages(service, stdout, vtx, direct.clone()),
            stdin,
        },
        direct,
        violation,
    })
}

/// The server's messages, read from its stdout.
type Messages = Pin<Box<dyn Stream<Item = ServerJsonRpcMessage> + Send>>;

/// rmcp's transport to a stdio server. rmcp's service task polls the stdout stream itself
/// (`receive`) and writes each outgoing message itself (`send`): a message goes into the pipe
/// before `send` returns whenever the pipe takes it (a message is small, the pipe holds 64 KiB),
/// so the future rmcp then spawns to finish the send has nothing left to do. Only a message the
/// pipe does not take at once waits in an ordered backlog, written by that future.
pub(crate) struct StdioTransport {
    messages: Messages,
    stdin: Arc<Stdin>,
}

/// The server's stdin, shared by the transport and the sends still finishing.
struct Stdin {
    state: Mutex<StdinState>,
    /// Held by the one future writing the backlog, so that only one waits on the pipe at a time
    /// (the pipe wakes one waiter); the others queue here in order.
    flushing: tokio::sync::Mutex<()>,
}

struct StdinState {
    /// `None` once the transport closed it.
    pipe: Option<ChildStdin>,
    /// Bytes not yet written, in the order the messages were sent. Empty nearly always.
    backlog: Vec<u8>,
    /// The first write error: every later send fails with it.
    broken: Option<std::io::ErrorKind>,
}

impl StdinState {
    /// Appends `msg` as one JSON line to the backlog.
    fn queue(&mut self, msg: &ClientJsonRpcMessage) -> std::io::Result<()> {
        if let Some(kind) = self.broken {
            return Err(kind.into());
        }
        if self.pipe.is_none() {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        let start = self.backlog.len();
        if let Err(e) = serde_json::to_writer(&mut self.backlog, msg) {
            self.backlog.truncate(start);
            return Err(std::io::Error::other(e));
        }
        self.backlog.push(b'\n');
        Ok(())
    }

    /// Writes as much of the backlog as the pipe takes now; `Pending` (with `cx` woken when the
    /// pipe can take more) while some is left.
    fn write_backlog(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Some(kind) = self.broken {
            return Poll::Ready(Err(kind.into()));
        }
        let Some(pipe) = self.pipe.as_mut() else {
            return Poll::Ready(if self.backlog.is_empty() {
                Ok(())
            } else {
                Err(std::io::ErrorKind::BrokenPipe.into())
            });
        };
        let mut written = 0;
        let result = loop {
            if written == self.backlog.len() {
                break Poll::Ready(Ok(()));
            }
            match Pin::new(&mut *pipe).poll_write(cx, &self.backlog[written..]) {
                Poll::Ready(Ok(0)) => break Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                Poll::Pending => break Poll::Pending,
            }
        };
        self.backlog.drain(..written);
        if let Poll::Ready(Err(e)) = &result {
            self.broken = Some(e.kind());
        }
        result
    }
}

impl Stdin {
    fn new(pipe: ChildStdin) -> Arc<Self> {
        Arc::new(Stdin {
            state: Mutex::new(StdinState {
                pipe: Some(pipe),
                backlog: Vec::with_capacity(1024),
                broken: None,
            }),
            flushing: tokio::sync::Mutex::new(()),
        })
    }

    /// Until the backlog is written (the bytes queued before this call included).
    async fn flush(&self) -> std::io::Result<()> {
        let _turn = self.flushing.lock().await;
        std::future::poll_fn(|cx| lock(&self.state).write_backlog(cx)).await
    }

    /// Sends `item` as one line: written here, by the caller, when the pipe takes it; else the
    /// backlog (which keeps the order of messages) is written by the returned future.
    fn send(
        self: &Arc<Self>,
        item: &ClientJsonRpcMessage,
    ) -> impl Future<Output = std::io::Result<()>> + Send + 'static + use<> {
        let now = {
            let mut state = lock(&self.state);
            let was_empty = state.backlog.is_empty();
            match state.queue(item) {
                Err(e) => Some(Err(e)),
                // Another send's bytes wait first: this one waits behind them.
                Ok(()) if !was_empty => None,
                Ok(()) => match state.write_backlog(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(done) => Some(done),
                    Poll::Pending => None,
                },
            }
        };
        let stdin = self.clone();
        async move {
            match now {
                Some(done) => done,
                None => stdin.flush().await,
            }
        }
    }
}

/// The prefix of the ids of [`Direct`]'s requests: strings, where rmcp's own ids are numbers,
/// so the two never meet.
const DIRECT_ID: &str = "mcp-bridge-";

/// `tools/call` without rmcp's service task in between. rmcp hands each request to its
/// service task through a channel (from a caller on another thread: a wake-up of that task's
/// thread per call) and spawns a task per message; here the caller writes its request line
/// itself and the stdout reader, which rmcp's task polls anyway, hands the answer straight to
/// it. Everything else — the handshake, lists, the server's own requests (elicitation) and
/// notifications — still goes through rmcp, on the same pipes. Used on the session revision
/// (`initialize`), where a call carries nothing but its params; on the stateless revision rmcp
/// adds the client's metadata to every request and ties the server's requests to the client's
/// pending ones, so calls go through rmcp there.
pub(crate) struct Direct {
    stdin: Arc<Stdin>,
    /// The callers waiting for an answer, by request number; `None` once stdout ended.
    waiting: Mutex<Option<HashMap<u64, oneshot::Sender<ServerJsonRpcMessage>>>>,
    next: AtomicU64,
}

impl Direct {
    /// `tools/call` with `params`: the answer, or the reason there is none. Dropped before the
    /// answer (a timeout, a cancelled turn), it tells the server with `notifications/cancelled`,
    /// as rmcp does.
    pub(crate) async fn call_tool(
        &self,
        params: CallToolRequestParams,
    ) -> Result<CallToolResponse, ServiceError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match lock(&self.waiting).as_mut() {
            Some(waiting) => waiting.insert(n, tx),
            None => return Err(ServiceError::TransportClosed),
        };
        let mut pending = Pending {
            direct: self,
            n,
            answered: false,
        };
        let request = ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            direct_id(n),
        );
        self.stdin
            .send(&request)
            .await
            .map_err(|_| ServiceError::TransportClosed)?;
        let answer = rx.await.map_err(|_| ServiceError::TransportClosed)?;
        pending.answered = true;
        match answer {
            JsonRpcMessage::Response(r) => match r.result {
                ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
                ServerResult::InputRequiredResult(asked) => {
                    Ok(CallToolResponse::InputRequired(asked))
                }
                ServerResult::CreateTaskResult(task) => Ok(CallToolResponse::Task(task)),
                // An empty result is a call that returned nothing (rmcp reads it so too).
                ServerResult::EmptyResult(_) => {
                    Ok(CallToolResponse::Complete(CallToolResult::default()))
                }
                _ => Err(ServiceError::UnexpectedResponse),
            },
            JsonRpcMessage::Error(e) => Err(ServiceError::McpError(e.error)),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Hands `msg` to the caller waiting for it when it answers a direct request (`None`);
    /// anything else is rmcp's (`Some`).
    fn route(&self, msg: ServerJsonRpcMessage) -> Option<ServerJsonRpcMessage> {
        let id = match &msg {
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        let Some(n) = id.and_then(direct_number) else {
            return Some(msg);
        };
        let waiter = lock(&self.waiting).as_mut().and_then(|w| w.remove(&n));
        match waiter {
            Some(tx) => {
                let _ = tx.send(msg);
            }
            None => tracing::debug!("dropped the answer to a cancelled call ({DIRECT_ID}{n})"),
        }
        None
    }

    /// stdout ended: every waiting caller gets [`ServiceError::TransportClosed`], and no new
    /// call is written.
    fn close(&self) {
        lock(&self.waiting).take();
    }
}

fn direct_id(n: u64) -> RequestId {
    RequestId::String(format!("{DIRECT_ID}{n}").into())
}

fn direct_number(id: &RequestId) -> Option<u64> {
    match id {
        RequestId::String(s) => s.strip_prefix(DIRECT_ID)?.parse().ok(),
        RequestId::Number(_) => None,
    }
}

/// A direct call not answered yet; dropped so, it is withdrawn and the server told.
struct Pending<'a> {
    direct: &'a Direct,
    n: u64,
    answered: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let was_waiting = lock(&self.direct.waiting)
            .as_mut()
            .and_then(|w| w.remove(&self.n))
            .is_some();
        if !was_waiting {
            return;
        }
        let cancel = ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(
            CancelledNotification::new(CancelledNotificationParam::new(
                Some(direct_id(self.n)),
                Some("the client stopped waiting (timed out or cancelled)".into()),
            )),
        ));
        let send = self.direct.stdin.send(&cancel);
        // Written at once nearly always; else finished in the background when a runtime runs.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(send);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.stdin.send(&item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.messages.next()
    }

    /// Writes what is left (for at most [`CLOSE_FLUSH`]: a server that no longer reads does not
    /// keep its stdin open), then closes the server's stdin: the polite way to end it.
    async fn close(&mut self) -> Result<(), Self::Error> {
        let flushed = tokio::time::timeout(CLOSE_FLUSH, self.stdin.flush())
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
        lock(&self.stdin.state).pipe = None;
        flushed
    }
}

/// What the reader of stdout keeps between messages.
struct Reader {
    service: String,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
    violation: Option<oneshot::Sender<String>>,
    /// Takes the answers to its own requests out of the stream.
    direct: Arc<Direct>,
}

impl Drop for Reader {
    /// However the stream ends (end of stdout, a violation, rmcp dropping the transport), no
    /// direct caller is left waiting.
    fn drop(&mut self) {
        self.direct.close();
    }
}

/// The server's stdout as messages: each line read with a size cap and parsed once. The MCP stdio
/// transport allows nothing else on stdout: on the first line that is too long or not JSON, the
/// violation is reported and the stream ends (rmcp then sees the transport close). A JSON line
/// that is not a JSON-RPC message is logged and skipped.
fn messages(
    service: String,
    stdout: ChildStdout,
    violation: oneshot::Sender<String>,
    direct: Arc<Direct>,
) -> Messages {
    let reader = Reader {
        service,
        stdout: BufReader::with_capacity(64 * 1024, stdout),
        line: Vec::new(),
        violation: Some(violation),
        direct,
    };
    Box::pin(futures::stream::unfold(reader, |mut r| async move {
        let msg = r.next_message().await?;
        Some((msg, r))
    }))
}

impl Reader {
    async fn next_message(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            self.line.clear();
            let problem = match read_line_capped(
                &mut self.stdout,
                &mut self.line,
                MAX_MESSAGE_BYTES,
            )
            .await
            {
                Err(e) => {
                    tracing::debug!(service = %self.service, "stdout read error: {e}");
                    return None;
                }
                Ok(LineRead::Eof) => return None,
                Ok(LineRead::TooLong) => format!(
                    "sent a message larger than {} MiB on stdout",
                    MAX_MESSAGE_BYTES / (1024 * 1024)
                ),
                Ok(LineRead::Line) => {
                    let body = trim_line(&self.line);
                    if body.is_empty() {
                        continue;
                    }
                    match serde_json::from_slice::<ServerJsonRpcMessage>(body) {
                        Ok(msg) => match self.direct.route(msg) {
                            Some(msg) => return Some(msg),
                            None => continue,
                        },
                        // JSON, but not a message we know: skipped, as rmcp's own codec does.
                        Err(e) if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() => {
                            tracing::warn!(service = %self.service, "skipped a JSON line that is not a JSON-RPC message: {e}");
                            continue;
                        }
                        Err(e) => {
                            let sample =
                                String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
                            format!(
                                "wrote output that is not a JSON-RPC message on stdout ({e}): {sample:?}"
                            )
                        }
                    }
                }
            };
            tracing::warn!(service = %self.service, "MCP server broke the protocol: {problem}");
            if let Some(tx) = self.violation.take() {
                let _ = tx.send(problem);
            }
            return None;
        }
    }
}

/// Every stderr line goes to the log, never into the protocol.
async fn log_stderr(service: String, stderr: impl AsyncRead + Unpin) {
    let mut lines = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match lines.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let end = buf.len().min(MAX_STDERR_LINE);
                let text = String::from_utf8_lossy(&buf[..end]);
                let text = text.trim_end();
                if !text.is_empty() {
                    tracing::info!(target: "toolwright_mcp_bridge::server_stderr", service = %service, "{text}");
                }
            }
        }
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut l = line;
    while let Some((last, rest)) = l.split_last() {
        if matches!(last, b'\n' | b'\r' | b' ' | b'\t') {
            l = rest;
        } else {
            break;
        }
    }
    l
}

enum LineRead {
    Line,
    Eof,
    TooLong,
}

async fn read_line_capped<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    out: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<LineRead> {
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if out.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if out.len() + take > cap {
            return Ok(LineRead::TooLong);
        }
        out.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if done {
            return Ok(LineRead::Line);
        }
    }
}

/// The server and everything it started. Dropping the guard kills all of it, so no path — a
/// panic in a caller, a dropped bridge — leaves a server or its children running.
#[derive(Debug)]
pub(crate) struct GroupGuard {
    guard: toolwright_process_guard::ProcessGuard,
}

impl GroupGuard {
    /// The process group id (= the server's pid).
    pub fn pgid(&self) -> i32 {
        i32::try_from(self.guard.pgid()).unwrap_or(i32::MAX)
    }

    /// Ends the server: SIGTERM to its group and tree, up to `grace` for the server to exit,
    /// then SIGKILL to everything it started (detached descendants included), then reaps it.
    pub async fn terminate(self, child: &mut Child, grace: Duration) -> Option<ExitStatus> {
        self.guard.terminate(child, grace).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tokio::io::AsyncReadExt;

    fn progress(n: usize, text: String) -> ClientJsonRpcMessage {
        serde_json::from_value(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "t", "progress": n, "message": text}}))
        .unwrap()
    }

    /// Messages larger than the pipe holds wait in the backlog: every message arrives whole and
    /// in the order sent, with the sends finishing concurrently as rmcp runs them (each on a task
    /// of its own); closing the transport closes the server's stdin, and a later send fails.
    #[tokio::test]
    async fn stdin_keeps_whole_lines_in_order_past_the_pipe_size() {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut transport = StdioTransport {
            messages: Box::pin(futures::stream::empty()),
            stdin: Stdin::new(child.stdin.take().unwrap()),
        };
        let sizes = [10, 1 << 20, 10, 300_000, 10];
        let sends: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| tokio::spawn(transport.send(progress(i, "x".repeat(*n)))))
            .collect();
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            stdout.read_to_end(&mut out).await.unwrap();
            out
        });
        for send in sends {
            send.await.unwrap().unwrap();
        }
        transport.close().await.unwrap();
        // `cat` saw the end of its input: it exits and its output ends.
        let out = reader.await.unwrap();
        let lines: Vec<Value> = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), sizes.len());
        for (i, (line, n)) in lines.iter().zip(sizes).enumerate() {
            assert_eq!(line["params"]["progress"].as_f64(), Some(i as f64));
            assert_eq!(line["params"]["message"].as_str().unwrap().len(), n);
        }
        assert!(child.wait().await.unwrap().success());
        assert!(transport.send(progress(9, "late".into())).await.is_err());
    }
}
