//! Retries with exponential backoff and jitter, honouring `Retry-After` (G8).
//!
//! This is a tower layer under async-openai's client: it sees each HTTP attempt before any byte
//! of the body reaches the caller, so a retry can never repeat streamed text.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use reqwest::Response;

/// How failed attempts are retried: 429, 5xx and connection errors only; never other 4xx.
///
/// ```
/// use toolwright_model_gateway::RetryPolicy;
/// use std::time::Duration;
/// let p = RetryPolicy::default().with_max_retries(5).with_base_delay(Duration::from_millis(50));
/// assert_eq!(p.max_retries, 5);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// The first backoff delay; doubled each retry, with jitter.
    pub base_delay: Duration,
    /// No computed backoff is longer than this.
    pub max_delay: Duration,
    /// A server's `Retry-After` longer than this is not waited for: the error is returned.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }
    /// Set the number of retries.
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }
    /// Set the first backoff delay.
    pub fn with_base_delay(mut self, d: Duration) -> Self {
        self.base_delay = d;
        self
    }
    /// Set the cap on backoff delays.
    pub fn with_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Backoff before retry number `attempt` (0-based): exponential, "equal jitter".
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(attempt.min(16)))
            .min(self.max_delay);
        let half = exp / 2;
        half + half.mul_f64(rand::random::<f64>())
    }
}

/// Parses `retry-after-ms`, or `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// What the layer answers when an attempt ran past its time and no retry may follow; the
/// backend turns it into [`crate::ModelError::Timeout`].
pub(crate) const ATTEMPT_TIMED_OUT: &str = "llm-toolkit: the attempt timed out";

/// The tower layer installed under the async-openai client.
#[derive(Clone, Debug)]
pub(crate) struct RetryLayer {
    pub(crate) policy: RetryPolicy,
    /// Longest wait for one attempt's response headers.
    pub(crate) attempt_timeout: Duration,
    /// The whole call: no retry starts, and no backoff or `Retry-After` is waited for, past it.
    pub(crate) deadline: Duration,
}

impl<S> tower::Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            inner,
            layer: self.clone(),
        }
    }
}

/// The retrying service.
#[derive(Clone, Debug)]
pub(crate) struct Retry<S> {
    inner: S,
    layer: RetryLayer,
}

type BoxFut = Pin<Box<dyn Future<Output = Result<Response, OpenAIError>> + Send>>;

impl<S> tower::Service<HttpRequestFactory> for Retry<S>
where
    S: tower::Service<HttpRequestFactory, Response = Response, Error = OpenAIError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = OpenAIError;
    type Future = BoxFut;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), OpenAIError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequestFactory) -> BoxFut {
        let clone = self.inner.clone();
        let mut service = std::mem::replace(&mut self.inner, clone);
        let RetryLayer {
            policy,
            attempt_timeout,
            deadline,
        } = self.layer.clone();
        Box::pin(async move {
            use tower::ServiceExt;
            let start = tokio::time::Instant::now();
            let mut attempt = 0u32;
            loop {
                let call = service.ready().await?.call(request.clone());
                let result = match tokio::time::timeout(attempt_timeout, call).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!(
                            attempt = attempt + 1,
                            ?attempt_timeout,
                            "model request attempt timed out"
                        );
                        Err(OpenAIError::InvalidArgument(ATTEMPT_TIMED_OUT.into()))
                    }
                };
                let wait = match &result {
                    Ok(r) if crate::http::retryable(r.status().as_u16()) => {
                        retry_after(r.headers())
                    }
                    Ok(_) => return result,
                    Err(OpenAIError::Reqwest(e)) if e.is_connect() => None,
                    Err(OpenAIError::InvalidArgument(m)) if m == ATTEMPT_TIMED_OUT => None,
                    Err(_) => return result,
                };
                let Some(delay) =
                    crate::http::next_delay(&policy, attempt, wait, start.elapsed(), deadline)
                else {
                    return result;
                };
                match &result {
                    Ok(r) => {
                        tracing::warn!(status = %r.status(), attempt = attempt + 1, ?delay, "retrying model request")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, attempt = attempt + 1, ?delay, "retrying model request")
                    }
                }
                // Drop the failed response (and its connection) before sleeping.
                drop(result);
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn h(name: &'static str, v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(name, HeaderValue::from_str(v).unwrap());
        m
    }

    #[test]
    fn g8_retry_after_seconds_ms_and_http_date() {
        assert_eq!(
            retry_after(&h("retry-after", "2")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&h("retry-after", "0.5")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            retry_after(&h("retry-after-ms", "250")),
            Some(Duration::from_millis(250))
        );
        let future =
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        let d = retry_after(&h("retry-after", &future)).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        let past = httpdate::fmt_http_date(std::time::SystemTime::UNIX_EPOCH);
        assert_eq!(retry_after(&h("retry-after", &past)), Some(Duration::ZERO));
        assert_eq!(retry_after(&h("retry-after", "soon")), None);
        assert_eq!(retry_after(&h("retry-after", "-3")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn g8_backoff_grows_exponentially_with_jitter_and_is_capped() {
        let p = RetryPolicy::default()
            .with_base_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(1));
        for attempt in 0..10 {
            let full = Duration::from_millis(100 * 2u64.pow(attempt)).min(Duration::from_secs(1));
            let d = p.backoff(attempt);
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempt}: {d:?} not in [{:?}, {full:?}]",
                full / 2
            );
        }
        // Jitter: not every draw is the same.
        let draws: std::collections::HashSet<_> = (0..20).map(|_| p.backoff(3)).collect();
        assert!(draws.len() > 1);
    }
}
