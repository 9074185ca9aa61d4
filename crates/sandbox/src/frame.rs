//! The frame protocol of an interactive call: the input as one JSON line on the program's
//! stdin, then every line it prints on stdout is a frame (one JSON value) for a
//! [`FrameHandler`], whose [`FrameReply::Answer`] goes back as one JSON line. The child is
//! untrusted: stdout is bounded over the whole call, and a line that is not JSON ends it.

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What a [`FrameHandler`] tells the sandbox after one frame of [`crate::Sandbox::run_interactive`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FrameReply {
    /// Write this value to the program's stdin, as one line of JSON.
    Answer(Value),
    /// Write nothing; go on reading frames.
    Continue,
    /// End the call now: the program is killed and the call fails with
    /// [`crate::RunError::Stopped`] and this reason.
    Stop(String),
}

/// The agent's side of an interactive call ([`crate::Sandbox::run_interactive`]): gets each frame the
/// program printed, in order, one at a time.
#[async_trait::async_trait]
pub trait FrameHandler: Send {
    /// One frame from the program. The call's time limit runs while this is awaited.
    async fn frame(&mut self, frame: Value) -> FrameReply;
}

/// How a conversation ended early.
#[derive(Debug, PartialEq)]
pub(crate) enum Ended {
    Stopped(String),
    TooLarge,
    NotJson { error: String, head: String },
}

/// Longest end of a bad line kept in [`Ended::NotJson`], in characters.
pub(crate) const HEAD_CHARS: usize = 200;

/// One line of the program's stdout as a frame: `None` for a blank line (skipped), else the one
/// JSON value it holds. A line that is not JSON is [`Ended::NotJson`], keeping at most
/// [`HEAD_CHARS`] characters of it for the message. Never panics, whatever the bytes.
pub(crate) fn decode(line: &[u8]) -> Result<Option<Value>, Ended> {
    let text = line.trim_ascii();
    if text.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(text)
        .map(Some)
        .map_err(|e| Ended::NotJson {
            error: e.to_string(),
            head: crate::run::tail(&text[..text.len().min(HEAD_CHARS)], HEAD_CHARS),
        })
}

/// A value as one line for the program's stdin: compact JSON (which escapes every newline inside
/// strings) and `\n`.
pub(crate) fn encode(value: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(value).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The conversation of an interactive call: `input` as the first line of stdin, then each
/// stdout line to `handler` and its answer back, until stdout ends. Stdout is bounded to
/// `limit` bytes over the whole call: no more than `limit + 1` bytes are ever read.
pub(crate) async fn converse<W, R>(
    stdin: Option<W>,
    stdout: Option<R>,
    input: &Value,
    handler: &mut (dyn FrameHandler + '_),
    limit: usize,
) -> Result<(), Ended>
where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    use tokio::io::AsyncBufReadExt;
    let Some(stdout) = stdout else {
        return Ok(());
    };
    let mut stdin = stdin;
    // A program that stops reading its stdin is its own problem (it waits for an answer it
    // cannot get, until the time limit): a failed write only stops further writes.
    async fn send<W: AsyncWrite + Unpin>(stdin: &mut Option<W>, value: &Value) {
        if let Some(pipe) = stdin.as_mut() {
            let line = encode(value);
            if pipe.write_all(&line).await.is_err() || pipe.flush().await.is_err() {
                *stdin = None;
            }
        }
    }
    send(&mut stdin, input).await;
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut used = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let room = (limit.saturating_sub(used) as u64).saturating_add(1);
        let n = match (&mut reader).take(room).read_until(b'\n', &mut line).await {
            Ok(n) => n,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        used += n;
        if used > limit {
            return Err(Ended::TooLarge);
        }
        let Some(frame) = decode(&line)? else {
            continue;
        };
        match handler.frame(frame).await {
            FrameReply::Answer(v) => send(&mut stdin, &v).await,
            FrameReply::Continue => {}
            FrameReply::Stop(reason) => return Err(Ended::Stopped(reason)),
        }
    }
}
