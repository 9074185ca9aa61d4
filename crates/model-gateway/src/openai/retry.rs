//! Retries under async-openai's client: a tower layer that sees each HTTP attempt before any
//! byte of the body reaches the caller, so a retry can never repeat streamed text. The rules
//! are [`crate::retry`]'s.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use reqwest::Response;

use crate::retry::{RetryPolicy, retry_after};
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
                    Ok(r) if crate::retry::retryable(r.status().as_u16()) => {
                        retry_after(r.headers())
                    }
                    Ok(_) => return result,
                    Err(OpenAIError::Reqwest(e)) if e.is_connect() => None,
                    Err(OpenAIError::InvalidArgument(m)) if m == ATTEMPT_TIMED_OUT => None,
                    Err(_) => return result,
                };
                let Some(delay) =
                    crate::retry::next_delay(&policy, attempt, wait, start.elapsed(), deadline)
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
