//! What the stage demos share: which model answers when the demo needs one, and their traces.

use std::sync::Arc;

use toolwright_core::ChatModel;
use toolwright_local_model::LocalModel;
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

/// The configured provider (`OPENAI_API_KEY` / `OPENAI_BASE_URL`, see the README), or else the
/// embedded local model (SmolLM2-135M-Instruct on the CPU, fetched once into the cache; native
/// tool calls, so an agent built on it needs nothing but its tools) with a fixed seed, the n-gram ban against small-model loops and short answers. Returns the model and
/// a sentence saying which it is, for the demo's first line.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let (model, which) = demo_support::demo_model().await?;
/// println!("Stage N demo: {which}");
/// # let _ = model; Ok(()) }
/// ```
pub async fn demo_model() -> Result<(Arc<dyn ChatModel>, String), Box<dyn std::error::Error>> {
    if let Some(cfg) = OpenAiConfig::from_env()? {
        let which = format!(
            "using the configured provider {} (model {})",
            cfg.base_url, cfg.model
        );
        return Ok((Arc::new(OpenAiModel::new(cfg)?), which));
    }
    let started = std::time::Instant::now();
    let model = LocalModel::builder()
        .seed(1)
        .no_repeat_ngram(3)
        .max_tokens(96)
        .build()
        .await?;
    let which = format!(
        "no provider configured (OPENAI_API_KEY/OPENAI_BASE_URL unset): using the embedded local model SmolLM2-135M-Instruct (CPU, in process; loaded in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok((Arc::new(model), which))
}

/// What [`init_tracing`] returns: keep it alive until the end of `main` (dropping it sends the
/// last spans when OTLP export is on).
#[must_use]
pub struct Traces {
    #[cfg(feature = "otlp")]
    _telemetry: Option<toolwright_telemetry::Telemetry>,
}

/// Sets up the demo's `tracing`: log lines by `RUST_LOG` (default `warn`). Built with the `otlp`
/// feature (`cargo xtask stage N` turns it on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set), the
/// demo's runs, model calls, tool calls and MCP requests also go to that OTLP/HTTP receiver
/// (the `telemetry` crate). Keep the returned value alive until the end of `main`: dropping it
/// sends the last spans.
pub fn init_tracing(service_name: &str) -> Traces {
    #[cfg(feature = "otlp")]
    {
        match toolwright_telemetry::Telemetry::from_env(service_name) {
            Ok(Some(t)) => match t.init() {
                Ok(()) => {
                    println!(
                        "traces: exported over OTLP to {}",
                        std::env::var(toolwright_telemetry::TRACES_ENDPOINT_VAR)
                            .or_else(|_| std::env::var(toolwright_telemetry::ENDPOINT_VAR))
                            .unwrap_or_default()
                    );
                    return Traces {
                        _telemetry: Some(t),
                    };
                }
                Err(e) => eprintln!("traces off: {e}"),
            },
            Ok(None) => {}
            Err(e) => eprintln!("traces off: {e}"),
        }
    }
    #[cfg(not(feature = "otlp"))]
    {
        let asked = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
        if asked {
            eprintln!(
                "traces off: {service_name} was built without OTLP export; `cargo xtask stage N` builds it with the exporter when OTEL_EXPORTER_OTLP_ENDPOINT is set (or add `--features otlp` to cargo run)"
            );
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .try_init();
    Traces {
        #[cfg(feature = "otlp")]
        _telemetry: None,
    }
}
