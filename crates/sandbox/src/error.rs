//! Why a run failed ([`RunError`]). Each message names the program and says what to do next:
//! the caller (an agent, a model) reads it.

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run went past its wall-clock limit; every process of it was killed.
    #[error(
        "program {name} timed out after {secs} s and was stopped; if it needs longer, raise SandboxConfig::timeout (or its Grant::max_timeout)"
    )]
    Timeout {
        /// [`crate::Program::name`].
        name: String,
        /// The limit in seconds.
        secs: u64,
    },
    /// The program wrote more than [`crate::SandboxConfig::output_limit`] to one stream.
    #[error(
        "program {name}: {stream} output exceeded {limit}; the program was stopped (print less, or raise SandboxConfig::output_limit)"
    )]
    OutputTooLarge {
        /// [`crate::Program::name`].
        name: String,
        /// "stdout" or "stderr".
        stream: &'static str,
        /// The limit, in words ("1 MiB").
        limit: String,
    },
    /// The program exited with an error or was killed by a limit.
    #[error("program {name} failed: {reason}")]
    Failed {
        /// [`crate::Program::name`].
        name: String,
        /// Exit status and the end of its stderr.
        reason: String,
    },
    /// A frame of an interactive run was not one JSON value on one line; the program was killed.
    #[error(
        "program {name} printed a frame that is not JSON ({error}): {head}; an interactive program prints one JSON value per line on stdout (logs go to stderr)"
    )]
    NotJson {
        /// [`crate::Program::name`].
        name: String,
        /// The parser's complaint.
        error: String,
        /// The end of the line (at most 200 characters).
        head: String,
    },
    /// The sandbox refuses runs: no container can be made on this machine and the operator did
    /// not accept the weaker boundary ([`crate::Protections::refused`]).
    #[error("program {name} was not run: {reason}")]
    Refused {
        /// [`crate::Program::name`].
        name: String,
        /// What to install, and the option that accepts the weaker boundary.
        reason: String,
    },
    /// An interactive run was ended by its handler ([`crate::FrameReply::Stop`]); the program
    /// was killed.
    #[error("program {name} was stopped: {reason}")]
    Stopped {
        /// [`crate::Program::name`].
        name: String,
        /// The handler's reason.
        reason: String,
    },
    /// The run could not be set up: a host problem, or a [`crate::Program`] that cannot run.
    #[error("program {name} could not be started: {reason}")]
    Spawn {
        /// [`crate::Program::name`].
        name: String,
        /// What went wrong.
        reason: String,
    },
}

impl RunError {
    /// The program's name, whichever the error.
    pub fn name(&self) -> &str {
        match self {
            Self::Timeout { name, .. }
            | Self::OutputTooLarge { name, .. }
            | Self::Failed { name, .. }
            | Self::NotJson { name, .. }
            | Self::Refused { name, .. }
            | Self::Stopped { name, .. }
            | Self::Spawn { name, .. } => name,
        }
    }
}
