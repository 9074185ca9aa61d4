//! The retry rules every backend shares (G8): which failures are retried, the backoff with
//! jitter, `Retry-After`, and the call's deadline. The OpenAI backends apply them in a tower
//! layer under async-openai (`openai/retry.rs`), the native ones in [`crate::http`].

use std::time::Duration;

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
/// When to send attempt `attempt + 1` after a failed one, or `None` to give up: 429, 5xx
/// (Anthropic's 529 among them) and connection errors are retried; a `Retry-After` is
/// honoured up to [`RetryPolicy::max_retry_after`]; nothing starts past `deadline`.
pub(crate) fn next_delay(
    policy: &RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
    elapsed: Duration,
    deadline: Duration,
) -> Option<Duration> {
    if attempt >= policy.max_retries {
        return None;
    }
    let delay = match retry_after {
        Some(d) if d > policy.max_retry_after => {
            tracing::warn!(
                ?d,
                "server asked to retry after more than max_retry_after; giving up"
            );
            return None;
        }
        Some(d) => d,
        None => policy.backoff(attempt),
    };
    if elapsed + delay >= deadline {
        tracing::warn!(
            ?delay,
            ?deadline,
            "the next retry would start past the call's deadline; giving up"
        );
        return None;
    }
    Some(delay)
}

/// Whether an HTTP status is worth another attempt.
pub(crate) fn retryable(status: u16) -> bool {
    status == 429 || status >= 500
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
