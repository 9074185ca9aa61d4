//! The HTTP side of the native backends (Anthropic, Gemini): one POST with retries that
//! honour `Retry-After`, and the server-sent events of a streamed answer.
//!
//! The OpenAI backends get the same retry rules from [`crate::openai`]'s tower layer under
//! async-openai; both ask [`next_delay`] whether and when to try again.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::Value;

use crate::ModelError;
use crate::retry::{RetryPolicy, next_delay, retry_after, retryable};

/// A POST client with the retry rules of a backend's configuration.
#[derive(Clone, Debug)]
pub(crate) struct Poster {
    pub(crate) client: reqwest::Client,
    pub(crate) policy: RetryPolicy,
    /// Longest wait for one attempt's response headers, and between two stream chunks.
    pub(crate) attempt_timeout: Duration,
    /// The whole call, every attempt and wait included.
    pub(crate) deadline: Duration,
}

/// The most of an error body kept for the error's message.
const MAX_ERROR_BODY: usize = 64 * 1024;

impl Poster {
    /// A client with these rules.
    pub(crate) fn new(
        policy: RetryPolicy,
        attempt_timeout: Duration,
        deadline: Duration,
    ) -> Result<Self, ModelError> {
        crate::ensure_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(attempt_timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| ModelError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            client,
            policy,
            attempt_timeout,
            deadline,
        })
    }

    /// POSTs `body` as JSON to `url` with `headers`, retrying as [`next_delay`] says. A
    /// final non-2xx answer becomes the error `api_error(status, body)` gives (each API
    /// shapes its error body its own way).
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &Value,
        api_error: fn(u16, &str) -> ModelError,
    ) -> Result<reqwest::Response, ModelError> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| ModelError::Config(format!("request body: {e}")))?;
        let start = tokio::time::Instant::now();
        let mut attempt = 0u32;
        loop {
            let mut request = self
                .client
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes.clone());
            for (k, v) in headers {
                request = request.header(k.as_str(), v.as_str());
            }
            let sent = tokio::time::timeout(self.attempt_timeout, request.send()).await;
            let (error, wait) = match sent {
                Ok(Ok(r)) if r.status().is_success() => return Ok(r),
                Ok(Ok(r)) => {
                    let status = r.status().as_u16();
                    let wait = retry_after(r.headers());
                    let text = read_capped(r).await;
                    let error = api_error(status, &text);
                    if !retryable(status) {
                        return Err(error);
                    }
                    (error, wait.or_else(|| retry_info_delay(&text)))
                }
                Ok(Err(e)) if e.is_connect() => (ModelError::Connect(e.to_string()), None),
                Ok(Err(e)) if e.is_timeout() => (ModelError::Timeout(self.attempt_timeout), None),
                Ok(Err(e)) => return Err(ModelError::Http(e.to_string())),
                Err(_) => (ModelError::Timeout(self.attempt_timeout), None),
            };
            let Some(delay) =
                next_delay(&self.policy, attempt, wait, start.elapsed(), self.deadline)
            else {
                return Err(error);
            };
            tracing::warn!(%error, attempt = attempt + 1, ?delay, "retrying model request");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

/// The wait a Google API error body asks for when no `Retry-After` came with it:
/// `google.rpc.RetryInfo.retryDelay` among `error.details` (Gemini's 429 has it), a protobuf
/// Duration in JSON (`"12s"`, `"34.4s"`). `None` for any other body.
pub(crate) fn retry_info_delay(body: &str) -> Option<Duration> {
    if !body.contains("google.rpc.RetryInfo") {
        return None;
    }
    let v: Value = serde_json::from_str(body).ok()?;
    // Some front ends wrap the error object in an array.
    let v = match v {
        Value::Array(a) => a.into_iter().next()?,
        other => other,
    };
    let details = v.get("error")?.get("details")?.as_array()?;
    details.iter().find_map(|d| {
        if !d.get("@type")?.as_str()?.ends_with("google.rpc.RetryInfo") {
            return None;
        }
        let secs: f64 = d
            .get("retryDelay")?
            .as_str()?
            .strip_suffix('s')?
            .parse()
            .ok()?;
        Duration::try_from_secs_f64(secs).ok()
    })
}

/// The text of an error body, at most [`MAX_ERROR_BODY`] bytes of it.
async fn read_capped(mut r: reqwest::Response) -> String {
    let mut buf = Vec::new();
    while let Ok(Some(chunk)) = r.chunk().await {
        buf.extend_from_slice(&chunk);
        if buf.len() >= MAX_ERROR_BODY {
            buf.truncate(MAX_ERROR_BODY);
            break;
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The JSON body of a whole (non-streamed) answer.
pub(crate) async fn json_body(r: reqwest::Response) -> Result<Value, ModelError> {
    let bytes = r
        .bytes()
        .await
        .map_err(|e| ModelError::Http(e.to_string()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ModelError::malformed("response", e, &String::from_utf8_lossy(&bytes)))
}

/// One server-sent event: its `event:` name (empty when none) and its `data:` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) event: String,
    pub(crate) data: String,
}

/// The events of a streamed answer, each awaited at most `chunk_timeout`; a transport error
/// or a silent server ends the stream with a typed error.
pub(crate) type SseStream = Pin<Box<dyn Stream<Item = Result<SseEvent, ModelError>> + Send>>;

/// The server-sent events of `r`'s body (parsed by `eventsource-stream`, the parser
/// async-openai itself streams with).
pub(crate) fn sse(r: reqwest::Response, chunk_timeout: Duration) -> SseStream {
    let events = r.bytes_stream().eventsource();
    let stream = futures::stream::unfold(
        (Box::pin(events), false),
        move |(mut events, done)| async move {
            if done {
                return None;
            }
            match tokio::time::timeout(chunk_timeout, events.next()).await {
                Err(_) => Some((Err(ModelError::Timeout(chunk_timeout)), (events, true))),
                Ok(None) => None,
                Ok(Some(Ok(e))) => Some((
                    Ok(SseEvent {
                        event: e.event,
                        data: e.data,
                    }),
                    (events, false),
                )),
                Ok(Some(Err(e))) => Some((
                    Err(ModelError::StreamInterrupted {
                        detail: e.to_string(),
                        partial_text: String::new(),
                    }),
                    (events, true),
                )),
            }
        },
    );
    Box::pin(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_after_past_the_limit_or_the_deadline_gives_up() {
        let p = RetryPolicy::default();
        let s = Duration::from_secs;
        assert_eq!(next_delay(&p, 0, Some(s(2)), s(0), s(300)), Some(s(2)));
        assert_eq!(next_delay(&p, 0, Some(s(61)), s(0), s(300)), None);
        assert_eq!(next_delay(&p, 0, Some(s(2)), s(299), s(300)), None);
        assert_eq!(next_delay(&p, 3, Some(s(1)), s(0), s(300)), None);
        assert!(next_delay(&p, 0, None, s(0), s(300)).unwrap() <= p.max_delay);
        assert!(retryable(529) && retryable(429) && !retryable(400) && !retryable(404));
    }

    #[test]
    fn a_google_retry_info_in_the_error_body_gives_the_wait() {
        let body = r#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[
            {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[]},
            {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"34.4s"}]}}"#;
        assert_eq!(retry_info_delay(body), Some(Duration::from_millis(34_400)));
        let wrapped = format!("[{body}]");
        assert_eq!(
            retry_info_delay(&wrapped),
            Some(Duration::from_millis(34_400))
        );
        assert_eq!(
            retry_info_delay(r#"{"error":{"type":"overloaded_error"}}"#),
            None
        );
        let bad = r#"{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"-1s"}]}}"#;
        assert_eq!(retry_info_delay(bad), None);
    }
}
