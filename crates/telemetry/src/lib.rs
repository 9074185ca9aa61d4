//! OpenTelemetry export of the toolkit's traces.
//!
//! The layers (tool-system, mcp-bridge) emit plain `tracing` spans named and attributed as
//! OpenTelemetry's GenAI semantic conventions say: `invoke_agent` for a run, `chat {model}` for
//! each model call, `execute_tool {tool}` for each tool call, `tools/call {tool}` for each MCP
//! request. They know nothing of OpenTelemetry; this crate turns those spans into OTLP:
//!
//! * [`Telemetry::from_env`] reads the standard variables — `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), `OTEL_EXPORTER_OTLP_HEADERS`,
//!   `OTEL_SERVICE_NAME`, `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER` — and gives `None`
//!   (tracing off, nothing installed, nothing sent) when no endpoint is set.
//! * Spans go out over OTLP/HTTP (protobuf) from a background thread in batches; a receiver
//!   that is down costs dropped spans, never a failed or slower run.
//! * Message text, tool arguments and results are **not** put on spans unless
//!   `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (or
//!   [`Telemetry::capture_message_content`]).
//! * An MCP request carries the W3C `traceparent` of its span in `_meta`, so a server that
//!   traces joins the agent's trace.
//!
//! ```no_run
//! # fn main() -> Result<(), toolwright_telemetry::TelemetryError> {
//! // At start-up: OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, off otherwise.
//! let telemetry = toolwright_telemetry::Telemetry::from_env("my-agent")?;
//! if let Some(t) = &telemetry {
//!     t.init()?; // the global subscriber: these spans + log lines filtered by RUST_LOG
//! }
//! // ... run agents ...
//! drop(telemetry); // flushes what is left
//! # Ok(())
//! # }
//! ```
//!
//! With a subscriber of your own, add [`Telemetry::layer`] to it instead of calling `init`.

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanExporter};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

/// The standard variable naming the OTLP receiver (`http://host:4318`; `/v1/traces` is added).
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The traces-only variant of [`ENDPOINT_VAR`], used as given (no path added).
pub const TRACES_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `true` lets spans carry message text, tool arguments and results (off by default).
pub const CAPTURE_CONTENT_VAR: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Why tracing could not be set up. The agent itself does not need it: log the error and go
/// on without traces, or fix the setting it names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter could not be built from the settings.
    #[error(
        "could not set up the OTLP trace exporter: {0}. Check OTEL_EXPORTER_OTLP_ENDPOINT (a URL such as http://127.0.0.1:4318) and OTEL_EXPORTER_OTLP_HEADERS"
    )]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A protocol other than OTLP over HTTP was asked for.
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL={0} is not supported: this crate exports OTLP over HTTP; set it to http/protobuf (or unset it) and point the endpoint at the receiver's HTTP port (usually 4318)"
    )]
    UnsupportedProtocol(String),
    /// `init` was called where a global `tracing` subscriber is already set.
    #[error(
        "a global tracing subscriber is already set: add Telemetry::layer() to that subscriber instead of calling init"
    )]
    SubscriberAlreadySet,
    /// Spans could not be flushed (the receiver is down or refused them); they are lost, the
    /// runs they describe are not affected.
    #[error("could not flush spans to the OTLP receiver: {0}; is it running and reachable?")]
    Flush(String),
}

/// An installed trace pipeline: the tracer provider and its exporter. Dropping it flushes the
/// spans not yet sent and stops the exporter's thread.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Telemetry {
    /// The pipeline the standard OpenTelemetry variables describe, or `None` when tracing is
    /// off: no `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
    /// `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`. `service_name` is used unless
    /// `OTEL_SERVICE_NAME` says otherwise. Message content follows
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`.
    pub fn from_env(service_name: &str) -> Result<Option<Self>, TelemetryError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let off = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        if off || (var(ENDPOINT_VAR).is_none() && var(TRACES_ENDPOINT_VAR).is_none()) {
            return Ok(None);
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        let protocol = match protocol.as_str() {
            "http/protobuf" => Protocol::HttpBinary,
            other => return Err(TelemetryError::UnsupportedProtocol(other.into())),
        };
        // The exporter reads the endpoint, headers and timeout variables itself.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()?;
        let capture = var(CAPTURE_CONTENT_VAR).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(Some(
            Self::with_exporter(exporter, service_name).capture_message_content(capture),
        ))
    }

    /// Exports to the OTLP/HTTP receiver at `endpoint` (its base URL, e.g.
    /// `http://127.0.0.1:4318`; `/v1/traces` is added), whatever the variables say.
    pub fn otlp(endpoint: &str, service_name: &str) -> Result<Self, TelemetryError> {
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .build()?;
        Ok(Self::with_exporter(exporter, service_name))
    }

    /// Exports with any OpenTelemetry span exporter (batched, from a background thread).
    pub fn with_exporter(exporter: impl SpanExporter + 'static, service_name: &str) -> Self {
        Self::build(
            SdkTracerProvider::builder().with_batch_exporter(exporter),
            service_name,
        )
    }

    /// Builds every span (ids, attributes, parents) and sends none: what tracing costs
    /// without its exporter, for measuring; a `traceparent` still reaches MCP servers.
    pub fn without_exporter(service_name: &str) -> Self {
        Self::build(SdkTracerProvider::builder(), service_name)
    }

    fn build(builder: opentelemetry_sdk::trace::TracerProviderBuilder, service_name: &str) -> Self {
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service_name.to_owned());
        }
        let provider = builder.with_resource(resource.build()).build();
        let tracer = provider.tracer("llm-toolkit");
        toolwright_core::telemetry::set_traceparent_source(current_traceparent);
        Self { provider, tracer }
    }

    /// Lets spans carry message text, tool arguments and results (or forbids it: the
    /// default). Applies to the whole process.
    pub fn capture_message_content(self, on: bool) -> Self {
        toolwright_core::telemetry::set_capture_message_content(on);
        self
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans, for a subscriber of your
    /// own. It takes spans at INFO and above, except those of the HTTP and OpenTelemetry
    /// crates the exporter itself uses (so exporting never traces itself).
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let own = Targets::new().with_default(LevelFilter::INFO).with_targets(
            [
                "opentelemetry",
                "opentelemetry_sdk",
                "opentelemetry_otlp",
                "opentelemetry_http",
                "reqwest",
                "hyper",
                "hyper_util",
                "h2",
                "tower",
                "rustls",
            ]
            .map(|t| (t, LevelFilter::OFF)),
        );
        // Off: source location, thread, target and busy/idle time on every span — attributes
        // the GenAI conventions do not ask for, measured at ~40 % of tracing's cost per run
        // (docs/benchmarks-archive.md); the OpenTelemetry context is not activated on every span
        // entry either (the layers read it only for a `traceparent`, from the span itself).
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_filter(own)
    }

    /// Sets the process's global `tracing` subscriber: these spans, plus log lines on stderr
    /// filtered by `RUST_LOG` (none when it is unset).
    pub fn init(&self) -> Result<(), TelemetryError> {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let logs = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
            );
        tracing_subscriber::registry()
            .with(self.layer())
            .with(logs)
            .try_init()
            .map_err(|_| TelemetryError::SubscriberAlreadySet)
    }

    /// Sends every finished span now (blocks until the exporter has answered).
    pub fn flush(&self) -> Result<(), TelemetryError> {
        self.provider
            .force_flush()
            .map_err(|e| TelemetryError::Flush(e.to_string()))
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "telemetry shutdown");
        }
    }
}

/// The W3C `traceparent` of the current `tracing` span's OpenTelemetry span, when it has one.
fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_traceparent_outside_an_exported_span() {
        assert_eq!(current_traceparent(), None);
    }

    #[test]
    fn traceparent_of_the_current_exported_span() {
        use tracing_subscriber::layer::SubscriberExt;
        let t = Telemetry::without_exporter("t");
        let _g = tracing::subscriber::set_default(tracing_subscriber::registry().with(t.layer()));
        let span = tracing::info_span!("outer");
        let tp = span
            .in_scope(current_traceparent)
            .expect("a traceparent in the span");
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4, "{tp}");
        assert_eq!(
            (parts[0], parts[1].len(), parts[2].len(), parts[3]),
            ("00", 32, 16, "01")
        );
    }
}
