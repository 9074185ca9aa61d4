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
            head: crate::program::tail(&text[..text.len().min(HEAD_CHARS)], HEAD_CHARS),
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Records every frame; answers `{"n": k}` with `k + 1`, stops at `{"stop": why}`.
    #[derive(Default)]
    struct Recorder(Vec<Value>);

    #[async_trait::async_trait]
    impl FrameHandler for Recorder {
        async fn frame(&mut self, frame: Value) -> FrameReply {
            self.0.push(frame.clone());
            if let Some(why) = frame["stop"].as_str() {
                return FrameReply::Stop(why.to_owned());
            }
            match frame["n"].as_i64() {
                Some(k) => FrameReply::Answer(json!(k + 1)),
                None => FrameReply::Continue,
            }
        }
    }

    /// Runs `converse` with `out` as the program's whole stdout; returns how it ended, the
    /// frames the handler got and what was written to the program's stdin.
    async fn talk(out: &[u8], limit: usize) -> (Result<(), Ended>, Vec<Value>, Vec<u8>) {
        let (mut child_out, our_out) = tokio::io::duplex(out.len().max(1));
        let (our_in, mut child_in) = tokio::io::duplex(1 << 20);
        let out = out.to_vec();
        let writer = tokio::spawn(async move {
            let _ = child_out.write_all(&out).await;
        });
        let mut h = Recorder::default();
        let r = converse(
            Some(our_in),
            Some(our_out),
            &json!({"go": 1}),
            &mut h,
            limit,
        )
        .await;
        writer.abort();
        let mut written = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            child_in.read_to_end(&mut written),
        )
        .await;
        (r, h.0, written)
    }

    #[test]
    fn a_line_is_one_value_a_blank_line_nothing() {
        assert_eq!(decode(b"  \r\n"), Ok(None));
        assert_eq!(decode(b"{\"a\": 1}\r\n"), Ok(Some(json!({"a": 1}))));
        assert_eq!(decode(b"3"), Ok(Some(json!(3))));
        let Err(Ended::NotJson { error, head }) = decode(b"hello {") else {
            panic!("not JSON must end the call");
        };
        assert!(!error.is_empty());
        assert_eq!(head, "hello {");
        assert!(
            decode(b"1 2").is_err(),
            "two values on a line are not a frame"
        );
    }

    #[test]
    fn the_head_of_a_bad_line_is_bounded() {
        let long = "x".repeat(10_000);
        let Err(Ended::NotJson { head, .. }) = decode(long.as_bytes()) else {
            panic!();
        };
        assert!(head.chars().count() <= HEAD_CHARS, "{}", head.len());
    }

    #[test]
    fn an_answer_is_one_line() {
        let v = json!({"text": "two\nlines", "u": "é"});
        let line = encode(&v);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(decode(&line), Ok(Some(v)));
    }

    #[tokio::test]
    async fn frames_go_to_the_handler_and_answers_back() {
        let (r, frames, written) = talk(b"{\"n\": 1}\n\n{\"log\": 0}\n{\"n\": 41}\n", 1000).await;
        assert_eq!(r, Ok(()));
        assert_eq!(
            frames,
            [json!({"n": 1}), json!({"log": 0}), json!({"n": 41})]
        );
        assert_eq!(
            String::from_utf8(written).unwrap(),
            "{\"go\":1}\n2\n42\n",
            "the input first, then one line per answer, none for Continue"
        );
    }

    #[tokio::test]
    async fn stop_ends_the_conversation_with_its_reason() {
        let (r, frames, _) = talk(b"{\"stop\": \"enough\"}\n{\"n\": 1}\n", 1000).await;
        assert_eq!(r, Err(Ended::Stopped("enough".into())));
        assert_eq!(frames.len(), 1, "nothing is read after a stop");
    }

    #[tokio::test]
    async fn stdout_is_bounded_over_the_whole_call() {
        // Three frames of 8 bytes each: 16 fit a limit of 16, the third goes over.
        let out = b"{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n";
        let (r, frames, _) = talk(out, 16).await;
        assert_eq!(r, Err(Ended::TooLarge));
        assert_eq!(frames.len(), 2);
        let (r, _, _) = talk(out, 24).await;
        assert_eq!(r, Ok(()), "exactly the limit is allowed");
        // One endless line is cut at the limit, not buffered whole.
        let (r, frames, _) = talk(&[b'7'; 100_000], 64).await;
        assert_eq!((r, frames.len()), (Err(Ended::TooLarge), 0));
    }

    #[tokio::test]
    async fn a_bad_frame_ends_the_call() {
        let (r, frames, _) = talk(b"{\"n\": 1}\nnot json\n{\"n\": 2}\n", 1000).await;
        assert!(matches!(r, Err(Ended::NotJson { .. })), "{r:?}");
        assert_eq!(frames.len(), 1);
    }

    #[tokio::test]
    async fn no_stdout_is_a_finished_conversation() {
        let mut h = Recorder::default();
        let r = converse(
            None::<tokio::io::DuplexStream>,
            None::<tokio::io::DuplexStream>,
            &json!(null),
            &mut h,
            10,
        )
        .await;
        assert_eq!(r, Ok(()));
    }

    proptest! {
        /// Whatever bytes the untrusted child prints, decoding never panics and keeps at most
        /// `HEAD_CHARS` characters of a bad line.
        #[test]
        fn decoding_any_bytes_is_safe(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            match decode(&bytes) {
                Ok(_) => {}
                Err(Ended::NotJson { head, .. }) => prop_assert!(head.chars().count() <= HEAD_CHARS),
                Err(e) => prop_assert!(false, "{e:?}"),
            }
        }

        /// What the agent sends is read back as the same value, on one line.
        #[test]
        fn answers_round_trip(s in ".*", n in any::<i64>()) {
            let v = json!({"s": s, "n": n});
            let line = encode(&v);
            prop_assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
            prop_assert_eq!(decode(&line), Ok(Some(v)));
        }

        /// Over any stdout and any limit, a conversation that ends well read no more than the
        /// limit, and the frames given to the handler fit in it.
        #[test]
        fn the_bound_holds_for_any_stdout(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just(b"{\"n\": 5}".to_vec()),
                    Just(b"[1, 2, 3]".to_vec()),
                    Just(Vec::new()),
                    proptest::collection::vec(any::<u8>(), 0..40),
                ],
                0..12,
            ),
            limit in 0usize..200,
        ) {
            let out: Vec<u8> = lines.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (r, frames, _) = rt.block_on(talk(&out, limit));
            if r == Ok(()) {
                prop_assert!(out.len() <= limit, "{} bytes read under a limit of {limit}", out.len());
            }
            let non_blank = lines.iter().filter(|l| !l.trim_ascii().is_empty()).count();
            prop_assert!(frames.len() <= non_blank);
            if out.len() > limit {
                prop_assert!(r.is_err(), "{} bytes over a limit of {limit} ended well", out.len());
            }
        }
    }
}
