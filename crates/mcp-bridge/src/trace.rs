//! The client span of an MCP request (`{mcp.method.name} {target}`, as OpenTelemetry's MCP
//! semantic conventions name it) and the W3C `traceparent` that goes in the request's `_meta`,
//! so a server that traces joins the agent's trace as a child of this span.
//!
//! Plain `tracing`: the `traceparent` comes from [`toolwright_core::telemetry::current_traceparent`],
//! which an exporter (the `telemetry` crate) sets up; without one, nothing is added.

use rmcp::model::{CallToolRequestParams, RequestParamsMeta};
use toolwright_core::{ToolError, ToolErrorKind};
use tracing::Span;
use tracing::field::Empty;

/// The span of a `tools/call` request for `tool` (its name on the server) of `service`.
pub(crate) fn tools_call_span(tool: &str, service: &str) -> Span {
    tracing::info_span!(
        "tools/call",
        "otel.name" = %format_args!("tools/call {tool}"),
        "otel.kind" = "client",
        "mcp.method.name" = "tools/call",
        "gen_ai.operation.name" = "execute_tool",
        "gen_ai.tool.name" = tool,
        "mcp.service.name" = service,
        "error.type" = Empty,
        "otel.status_code" = Empty,
    )
}

/// The client span of another MCP request (`tools/list`) to service `service`.
pub(crate) fn request_span(method: &'static str, service: &str) -> Span {
    tracing::info_span!(
        "mcp.request",
        "otel.name" = method,
        "otel.kind" = "client",
        "mcp.method.name" = method,
        "mcp.service.name" = service,
    )
}

/// Puts the span's `traceparent` in the request's `_meta` when the span is exported.
pub(crate) fn propagate(span: &Span, params: &mut CallToolRequestParams) {
    if span.is_disabled() {
        return;
    }
    if let Some(tp) = span.in_scope(toolwright_core::telemetry::current_traceparent) {
        params.set_traceparent(&tp);
    }
}

/// Records a failed request's `error.type` (`tool_error` for a tool's own error, as the
/// conventions say; otherwise the kind of failure).
pub(crate) fn done<T>(span: &Span, result: &Result<T, ToolError>) {
    if span.is_disabled() {
        return;
    }
    if let Err(e) = result {
        let kind = match e.kind {
            ToolErrorKind::Failed => "tool_error",
            ToolErrorKind::InvalidArguments => "invalid_arguments",
            ToolErrorKind::Timeout => "timeout",
            ToolErrorKind::Crashed => "crashed",
            ToolErrorKind::Unavailable => "unavailable",
            ToolErrorKind::NotFound => "not_found",
            _ => "_OTHER",
        };
        span.record("error.type", kind);
        span.record("otel.status_code", "error");
    }
}
