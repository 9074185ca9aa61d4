//! `toolwright-mcp serve --config FILE [--stdio] [--listen ADDR]`: the tools a config file
//! names, served as an MCP server over Streamable HTTP (default) or stdio. Logs go to stderr
//! (`RUST_LOG`).

use std::path::PathBuf;
use std::process::ExitCode;

use toolwright_mcp_server::ServeError;
use toolwright_mcp_server::config::ServeConfig;

const USAGE: &str = "usage: toolwright-mcp serve --config FILE [--stdio] [--listen ADDR]
  --config FILE   the JSON config (tools, approvals, http); see the crate docs
  --stdio         serve one client on stdin/stdout instead of HTTP
  --listen ADDR   the HTTP address, overriding the file's http.listen";

struct Args {
    config: PathBuf,
    stdio: bool,
    listen: Option<String>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    if args.next().as_deref() != Some("serve") {
        return Err(USAGE.into());
    }
    let (mut config, mut stdio, mut listen) = (None, false, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" => config = args.next().map(PathBuf::from),
            "--stdio" => stdio = true,
            "--listen" => listen = args.next(),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let config = config.ok_or_else(|| format!("--config FILE is required\n{USAGE}"))?;
    Ok(Args {
        config,
        stdio,
        listen,
    })
}

async fn run(args: Args) -> Result<(), ServeError> {
    let config = ServeConfig::load(&args.config)?;
    let server = config.server().await?;
    if args.stdio {
        return server.serve_stdio().await;
    }
    let addr = args.listen.unwrap_or_else(|| config.http.listen.clone());
    let router = server.router(config.http_options())?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServeError::Io {
            what: format!("listen on {addr}"),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| ServeError::Io {
        what: "read the listening address".into(),
        source,
    })?;
    // The one line on stdout: where to connect (a test or a script reads it).
    println!("listening on http://{local}{}", config.http.path);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|source| ServeError::Io {
            what: "serve HTTP".into(),
            source,
        })
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolwright-mcp: {e}");
            ExitCode::FAILURE
        }
    }
}
