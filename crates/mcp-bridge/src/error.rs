//! Errors of the bridge's management API (register, start, …). Tool calls use
//! [`toolwright_core::ToolError`] instead, whose message is written for the model.

/// A management operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// No service by that name.
    #[error("no MCP service named {0}")]
    UnknownService(String),
    /// A service by that name is already registered.
    #[error("an MCP service named {0} is already registered")]
    AlreadyRegistered(String),
    /// The configuration cannot work.
    #[error("invalid MCP service configuration: {0}")]
    InvalidConfig(String),
    /// The service could not be started (spawn failed, handshake failed or timed out…); the
    /// service is now in `error` with this text as its last error.
    #[error("MCP service {service} failed to start: {reason}")]
    StartFailed {
        /// The service.
        service: String,
        /// Why.
        reason: String,
    },
    /// The service is disabled in its configuration (`"disabled": true`); enable it first.
    #[error(
        "MCP service {0} is disabled in its configuration; set `disabled` to false to start it"
    )]
    Disabled(String),
    /// A background start needs a Tokio runtime, and none is running on this thread.
    #[error(
        "starting MCP services in the background needs a Tokio runtime; call this from async code"
    )]
    NoRuntime,
    /// The service's server does not offer this feature (its `initialize` answer lacks the
    /// capability): nothing to list or read there.
    #[error("MCP service {service} does not offer {feature}")]
    NotOffered {
        /// The service.
        service: String,
        /// `resources`, `prompts` or `completions`.
        feature: &'static str,
    },
    /// The server refused a request, broke the protocol, or did not answer within the
    /// service's call timeout; `reason` is the server's message or what went wrong.
    #[error("MCP service {service} could not answer {method}: {reason}")]
    Request {
        /// The service.
        service: String,
        /// The request, e.g. `resources/read`.
        method: &'static str,
        /// Why.
        reason: String,
    },
    /// The service already holds [`MAX_SUBSCRIPTIONS`](crate::MAX_SUBSCRIPTIONS) resource
    /// subscriptions; a new one needs an old one ended first.
    #[error(
        "MCP service {service} already holds {most} resource subscriptions, the most it may; unsubscribe from one first"
    )]
    ServiceSubscriptionsFull {
        /// The service.
        service: String,
        /// The bound.
        most: usize,
    },
    /// The person already holds [`MAX_PERSON_SUBSCRIPTIONS`](crate::MAX_PERSON_SUBSCRIPTIONS)
    /// resource subscriptions; a new one needs an old one ended first.
    #[error(
        "{principal} already watches {most} resources, the most one person may; stop watching one first"
    )]
    PersonSubscriptionsFull {
        /// The person's principal.
        principal: String,
        /// The bound.
        most: usize,
    },
    /// Reading or writing the config file failed.
    #[error("config file: {0}")]
    Io(String),
    /// The session store the bridge keeps a deployment's values in (learned search pairs)
    /// could not be read or written; the text says what to do.
    #[error("session store: {0}")]
    Store(String),
}
