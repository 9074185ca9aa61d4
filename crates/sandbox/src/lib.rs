//! # sandbox — run one untrusted program per call, contained
//!
//! Owns everything between "run this program with these grants" and its exit: the operator's
//! limits and grants ([`SandboxConfig`], [`Grant`]), what the machine allows ([`Protections`]),
//! a bubblewrap container per run (made ahead of time from a pool), uids, Landlock, seccomp,
//! the process start, and the JSON-lines frame protocol of interactive runs ([`FrameHandler`]).
//! Every system call std does not wrap is in one file, `sys.rs`.
//!
//! A run is a [`Program`] (argv, its read-only directory, the variables and time it asks for);
//! [`Sandbox::run`] gives it stdin bytes and returns its [`Output`], [`Sandbox::run_interactive`]
//! converses with it. Failures are a [`RunError`] whose message says what to do next. The
//! `skills` crate runs skills on it; `code-mode` runs its Python runner on it. Threat model:
//! the operator is trusted, the program and whoever chose its input are not (`docs/skills.md`).
//!
//! ```no_run
//! use toolwright_sandbox::{Program, Sandbox, SandboxConfig};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Blocking (it checks bubblewrap once): at start-up, or in `spawn_blocking`.
//! let sandbox = Sandbox::new(SandboxConfig::default());
//! if let Some(why) = &sandbox.protections().refused {
//!     return Err(why.clone().into()); // says what to install, or which option to accept
//! }
//! let wc = Program::new("wc", "/opt/wc", ["wc", "-w"]);
//! let out = sandbox.run(&wc, b"three short words").await?;
//! assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3");
//! # Ok(()) }
//! ```

mod bwrap;
mod config;
mod error;
mod frame;
mod host;
mod landlock;
mod pool;
mod probe;
mod program;
mod run;
mod seccomp;
mod spawn;
mod sys;
mod uid;

pub use config::{Grant, SandboxConfig};
pub use error::RunError;
pub use frame::{FrameHandler, FrameReply};
pub use probe::Protections;
pub use program::{Output, Program, is_plain_relative};
pub use run::{Sandbox, human_bytes};
