//! The child process of one MCP server: a clean environment, contained by `process-guard`,
//! stderr into `tracing`, stdout checked line by line before rmcp reads it, and an end that
//! leaves nothing behind.
//!
//! Containment (`process_guard::spawn`): the server runs in its own process group and is a child
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
//! [`tokio::process::Command`] itself and hands rmcp a transport of its own: a stream of the
//! server's messages, each stdout line framed (with a size cap), checked and parsed exactly
//! once, and a sink that writes each message as one line to its stdin. (It used to check each
//! line, copy it through a pipe and let rmcp parse it again: a third of the time of a call.)

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use std::pin::Pin;

use futures::{Sink, Stream};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::oneshot;

use crate::config::ServiceConfig;

/// The only variables a server's environment holds besides its service's `env`: these of the
/// agent's (when set), so that `npx`, `uvx` or `node` can start, and `PROCESS_GUARD`
/// (`process_guard::MARKER_VAR`: a random marker, set by the bridge for each server, by which a
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
    process_guard::MARKER_VAR,
];

/// Largest JSON-RPC message (one stdout line) accepted from a server. A larger one breaks the
/// protocol: the service goes to `error`.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// Longest stderr line kept for the log.
const MAX_STDERR_LINE: usize = 4096;

/// A spawned server.
pub(crate) struct Spawned {
    pub child: Child,
    pub group: GroupGuard,
    /// What rmcp reads: the server's messages from its stdout, each line checked and parsed once.
    pub messages: Messages,
    /// What rmcp writes: one line per message to the server's stdin.
    pub writer: StdinSink,
    /// Fires once when stdout carried something that is not a JSON-RPC message.
    pub violation: oneshot::Receiver<String>,
}

/// Spawns `cfg`'s command contained (see the module docs) with a cleared environment.
pub(crate) fn spawn(cfg: &ServiceConfig) -> std::io::Result<Spawned> {
    if let Err(e) = process_guard::protect_this_process() {
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
        .filter(|k| **k != process_guard::MARKER_VAR)
    {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(&cfg.env);
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    let (mut child, guard) = process_guard::spawn(&mut cmd).map_err(|e| match e {
        process_guard::GuardError::Spawn { source, .. } => source,
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
    Ok(Spawned {
        child,
        group,
        messages: messages(service, stdout, vtx),
        writer: stdin_sink(stdin),
        violation,
    })
}

/// The server's messages, as rmcp's transport reads them.
pub(crate) type Messages = Pin<Box<dyn Stream<Item = ServerJsonRpcMessage> + Send>>;
/// Our messages to the server, as rmcp's transport writes them.
pub(crate) type StdinSink = Pin<Box<dyn Sink<ClientJsonRpcMessage, Error = std::io::Error> + Send>>;

/// Each message as one JSON line on the server's stdin.
fn stdin_sink(stdin: ChildStdin) -> StdinSink {
    Box::pin(futures::sink::unfold(
        (stdin, Vec::with_capacity(1024)),
        |(mut stdin, mut buf): (ChildStdin, Vec<u8>), msg: ClientJsonRpcMessage| async move {
            buf.clear();
            serde_json::to_writer(&mut buf, &msg).map_err(std::io::Error::other)?;
            buf.push(b'\n');
            stdin.write_all(&buf).await?;
            Ok((stdin, buf))
        },
    ))
}

/// What the reader of stdout keeps between messages.
struct Reader {
    service: String,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
    violation: Option<oneshot::Sender<String>>,
}

/// The server's stdout as messages: each line read with a size cap and parsed once. The MCP stdio
/// transport allows nothing else on stdout: on the first line that is too long or not JSON, the
/// violation is reported and the stream ends (rmcp then sees the transport close). A JSON line
/// that is not a JSON-RPC message is logged and skipped.
fn messages(service: String, stdout: ChildStdout, violation: oneshot::Sender<String>) -> Messages {
    let reader = Reader {
        service,
        stdout: BufReader::with_capacity(64 * 1024, stdout),
        line: Vec::new(),
        violation: Some(violation),
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
                        Ok(msg) => return Some(msg),
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
                    tracing::info!(target: "mcp_bridge::server_stderr", service = %service, "{text}");
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
    guard: process_guard::ProcessGuard,
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
