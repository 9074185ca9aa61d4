//! What can go wrong setting a server up or running it.

/// Why the server could not be set up or stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The key that seals approval state is too short.
    #[error(
        "the approval state key has {0} bytes; give at least 32 random bytes (the same on every worker)"
    )]
    StateKey(usize),
    /// A setting of [`crate::HttpOptions`] or the config file cannot be used.
    #[error("{0}")]
    Config(String),
    /// Reading the config file or a transport failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The MCP session over stdio could not start or ended with an error.
    #[error("the MCP session over stdio failed: {0}")]
    Session(String),
}
