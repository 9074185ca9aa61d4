//! Nothing to use: this crate exists for its test, `tests/own_backend.rs`, which proves that a
//! backend written against `llm-core` alone drives `tool-system`'s loop. Its `[dependencies]`
//! are exactly those two crates; `cargo xtask test` also checks with `cargo tree` that no
//! layer above the backends pulls in an HTTP client.

/// The examples of `docs/architecture.md` (your own backend, store, tool provider and call
/// protocol), compiled and run as this crate's doctests so the page cannot drift from the code.
#[doc = include_str!("../../../docs/architecture.md")]
mod architecture_doc {}
