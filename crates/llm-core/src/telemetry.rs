//! The seam between the layers' `tracing` spans and an OpenTelemetry exporter.
//!
//! The layers (tool-system, mcp-bridge) create `tracing` spans and must not depend on an
//! OpenTelemetry SDK. Two things they need are only known to whoever installed the exporter
//! (the `telemetry` crate, or your own setup), so they are set here, once, at start-up:
//!
//! * [`set_traceparent_source`]: a function giving the W3C `traceparent` of the *current*
//!   `tracing` span, which mcp-bridge puts in an MCP request's `_meta` so the server's own
//!   trace joins the agent's. Unset, no `traceparent` is sent.
//! * [`set_capture_message_content`]: whether spans may carry message text, tool arguments and
//!   results (`gen_ai.input.messages` and friends). Off unless someone turns it on.
//!
//! ```
//! fn none() -> Option<String> { None }
//! toolwright_core::telemetry::set_traceparent_source(none);
//! assert_eq!(toolwright_core::telemetry::current_traceparent(), None);
//! assert!(!toolwright_core::telemetry::capture_message_content());
//! ```

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Gives the W3C `traceparent` (`00-{trace id}-{span id}-{flags}`) of the current span, or
/// `None` when there is no sampled span to join.
pub type TraceparentSource = fn() -> Option<String>;

static TRACEPARENT: OnceLock<TraceparentSource> = OnceLock::new();
static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Sets the `traceparent` source; the first one set stays. Returns whether this one was set.
pub fn set_traceparent_source(source: TraceparentSource) -> bool {
    TRACEPARENT.set(source).is_ok()
}

/// The W3C `traceparent` of the current span, when a source is set and a span is exported.
pub fn current_traceparent() -> Option<String> {
    TRACEPARENT.get().and_then(|f| f())
}

/// Allows (or forbids) message text, tool arguments and tool results on spans.
pub fn set_capture_message_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

/// Whether spans may carry message text, tool arguments and results (off by default).
pub fn capture_message_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}
