//! The model seam's typed errors. Each says what happened and what to do next (for the
//! operator); [`ModelError::user_message`] is the plain sentence for an end user.

use std::time::Duration;

/// Everything that can go wrong between a request and a whole response, for any backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The configuration is incomplete or invalid.
    #[error("invalid model configuration: {0}")]
    Config(String),

    /// The provider answered with an error status. 429 and 5xx were retried first (G8).
    #[error(
        "the provider answered HTTP {status}: {message}{hint}",
        hint = status_hint(*status)
    )]
    Api {
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
        /// The provider's error code, if any.
        code: Option<String>,
    },

    /// The server could not be reached (connection refused, DNS, TLS); retried first.
    #[error(
        "could not reach the model server: {0}. Check the base URL and that the server is running."
    )]
    Connect(String),

    /// No answer (or no next stream chunk) within the configured timeout.
    #[error(
        "the model server sent nothing for {0:?}; the request was abandoned. Raise the timeout or check the server's load."
    )]
    Timeout(Duration),

    /// An in-process model failed while computing a response (a tensor op, the tokenizer).
    #[error(
        "the local model failed during inference: {0}. Retry; if it persists, check the model file."
    )]
    Inference(String),

    /// The model's weights or tokenizer could not be fetched, verified or loaded.
    #[error("the model could not be loaded: {0}")]
    ModelLoad(String),

    /// The stream ended before the model finished: the partial answer is not a whole response.
    #[error("the response stream ended before the model finished ({detail}); {} characters of partial text were discarded. Retry the request.", partial_text.chars().count())]
    StreamInterrupted {
        /// What was observed.
        detail: String,
        /// The text received before the cut, for logging; never a complete answer.
        partial_text: String,
    },

    /// A stream chunk or a response body could not be understood.
    #[error("the model server sent a malformed {what}: {detail}. Raw: {raw}")]
    Malformed {
        /// "stream chunk" or "response".
        what: &'static str,
        /// The parser's complaint.
        detail: String,
        /// The offending text (truncated to 512 bytes).
        raw: String,
    },

    /// Any other transport failure.
    #[error("HTTP transport error: {0}")]
    Http(String),

    /// The request holds a part this backend cannot send (an image to a text-only model,
    /// audio to a wire without audio). Nothing was sent.
    #[error(
        "the {backend} backend cannot send {part} content; remove it, or use a backend that takes it"
    )]
    Unsupported {
        /// The part's kind ([`Part::kind`](crate::Part::kind)).
        part: &'static str,
        /// The backend that refused it.
        backend: String,
    },
}

fn status_hint(status: u16) -> &'static str {
    match status {
        400 => {
            " (the request was rejected: check the model name and the request fields; not retried)"
        }
        401 | 403 => " (check the API key; not retried)",
        404 => " (check the base URL and the model name; not retried)",
        429 => " (rate limited; retries were exhausted: wait, or lower the request rate)",
        500..=599 => " (server error; retries were exhausted: try again later)",
        _ => "",
    }
}

impl ModelError {
    /// Whether trying the same request again later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Api { status, .. } => *status == 429 || *status >= 500,
            Self::Connect(_)
            | Self::Timeout(_)
            | Self::StreamInterrupted { .. }
            | Self::Http(_) => true,
            _ => false,
        }
    }

    /// The plain sentence an end user is shown (a chat panel, a bot): no URLs, keys, bodies
    /// or status codes. The operator's log gets the `Display` text.
    ///
    /// ```
    /// let e = toolwright_core::ModelError::Api { status: 401, message: "bad key sk-123".into(), code: None };
    /// assert!(!e.user_message().contains("sk-123"));
    /// ```
    pub fn user_message(&self) -> &'static str {
        match self {
            Self::Api { status: 429, .. } => {
                "The assistant is receiving too many requests right now. Please try again in a minute."
            }
            Self::Timeout(_)
            | Self::Connect(_)
            | Self::StreamInterrupted { .. }
            | Self::Http(_) => {
                "The assistant could not reach its model just now. Please try again."
            }
            _ => "The assistant ran into a problem and could not answer. Please try again later.",
        }
    }

    /// A [`ModelError::Malformed`] whose `raw` is cut to 512 bytes on a character boundary.
    pub fn malformed(what: &'static str, detail: impl ToString, raw: &str) -> Self {
        let mut end = raw.len().min(512);
        while !raw.is_char_boundary(end) {
            end -= 1;
        }
        Self::Malformed {
            what,
            detail: detail.to_string(),
            raw: raw[..end].to_owned(),
        }
    }
}
