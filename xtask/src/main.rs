//! Project tasks.
//!
//! - `cargo xtask stage N`: builds and runs the Stage N demo, then that stage's tests.
//! - `cargo xtask test`: everything CI runs: installs/checks test dependencies, `cargo fmt
//!   --check`, `cargo clippy -D warnings`, every test, the official MCP conformance suite's
//!   client scenarios against the bridge, and every stage demo.
//! - `cargo xtask conformance`: those conformance scenarios alone, then the suite's server
//!   scenarios against the toolkit's MCP server (`conformance_server.rs`); `cargo xtask
//!   conformance server`: the server scenarios alone.
//! - `cargo xtask bench`: the criterion benchmarks.
//! - `cargo xtask bench langchain [--pairs N]`: the tool loop against LangChain core's same
//!   round, alternating on this machine, and their ratio.
//! - `cargo xtask bench mcp-server`: the MCP server's `tools/call` round trips against the
//!   official Python and TypeScript SDKs' servers (`crates/mcp-server/benches/versus_sdks.rs`),
//!   side by side on this machine.
//!
//! Under `CI=true` a test dependency that cannot be installed is a failure, never a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod api;
mod conformance;
mod conformance_server;
mod graph;
mod langchain;
mod needs;
mod python;
mod services;

use needs::{Need, STAGES};

/// model-gateway's native backends, each behind a feature of its own.
const NATIVE_BACKENDS: &str = "anthropic,gemini,openai-responses";

/// The features clippy lints with beyond the defaults.
const CLIPPY_FEATURES: &str = "toolwright-messaging/nats,toolwright-tool-system/bench-traced,\
toolwright-model-gateway/anthropic,toolwright-model-gateway/gemini,\
toolwright-model-gateway/openai-responses";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("stage") => match args.get(1).and_then(|n| n.parse::<u8>().ok()) {
            Some(n) => stage(n),
            None => Err("usage: cargo xtask stage N   (N = 0..=5)".into()),
        },
        Some("test") => test_all(),
        Some("bench") => bench(&args[1..]),
        Some("deps") => needs::ensure(&needs::all()).and_then(|()| conformance::ensure().map(drop)),
        Some("conformance") if args.get(1).is_some_and(|a| a == "server") => conformance_server::run_all(),
        Some("conformance") => conformance::run_all().and_then(|()| conformance_server::run_all()),
        Some("graph") => graph::write(),
        Some("api") => graph::metadata().and_then(|m| api::write(&root(), &target_dir(), &m)),
        Some("layers") => check_layers(),
        Some("package") => graph::metadata().and_then(|m| api::package(&m)),
        Some("with-services") => services::run_with(&args[1..]),
        _ => Err(
            "usage: cargo xtask <stage N | test | conformance | bench | deps | graph | api | package | layers | with-services CMD…>"
                .into(),
        ),
    };
    // A signal's thread ends the process itself once it has stopped the servers.
    services::wait_if_stopping();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root. Read at run time (`cargo run` sets `CARGO_MANIFEST_DIR`): cargo reuses a
/// build from another checkout of the same workspace when the target dir is shared (CI's clone and
/// the developer's tree), and a path baked in at compile time would then point at the other one.
fn root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Above this, cargo's incremental state is removed before the tests build.
const INCREMENTAL_LIMIT: u64 = 8 << 30;

/// Cargo keeps incremental state for the workspace's own crates per build configuration and never
/// collects it: on the target dir CI shares with the developer's tree it reached 17 GB and filled
/// the disk mid-run. Above [`INCREMENTAL_LIMIT`] it is removed (the next build of the workspace's
/// crates is then a full one; dependencies are not touched).
fn prune_incremental() {
    let target = target_dir();
    let dir = target.join("debug").join("incremental");
    let size = dir_size(&dir);
    if size > INCREMENTAL_LIMIT {
        eprintln!(
            "\n==> removing {} ({} GiB of incremental build state, above {} GiB)",
            dir.display(),
            size >> 30,
            INCREMENTAL_LIMIT >> 30
        );
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            eprintln!("could not remove it ({e}); the build goes on");
        }
    }
    prune_executables(&target.join("debug").join("deps"), EXECUTABLES_LIMIT);
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the workspace root), else `target`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { root().join(t) })
        .unwrap_or_else(|| root().join("target"))
}

/// Above this, old test, bench and demo executables are removed before the tests build.
const EXECUTABLES_LIMIT: u64 = 16 << 30;

/// Test and bench executables (hundreds of MB each with debug info) pile up in `debug/deps`
/// without end: one per crate, per checkout path (CI's clone and the developer's tree hash
/// differently) and per dependency change. On 2026-11-25 they reached 32 GiB and a link failed
/// with a full disk. Above [`EXECUTABLES_LIMIT`] those not written in the last two hours are
/// removed, and then, while still above it, the oldest of the recent ones (on 2026-11-26 two
/// full test builds within two hours, the tree's and a CI clone's, left 37 GiB of recent ones
/// and 6 GB of disk); cargo links any it needs again (its fingerprint sees the output missing).
fn prune_executables(deps: &Path, limit: u64) {
    use std::os::unix::fs::PermissionsExt;
    let recent = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3600);
    let Ok(entries) = std::fs::read_dir(deps) else {
        return;
    };
    let executables: Vec<(PathBuf, u64, std::time::SystemTime)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            let library = [".so", ".rlib", ".rmeta", ".d"]
                .iter()
                .any(|x| name.ends_with(x));
            let modified = meta.modified().ok()?;
            (meta.is_file() && !library && meta.permissions().mode() & 0o100 != 0)
                .then(|| (e.path(), meta.len(), modified))
        })
        .collect();
    let mut total: u64 = executables.iter().map(|e| e.1).sum();
    if total <= limit {
        return;
    }
    let before = total;
    let mut by_age = executables;
    by_age.sort_by_key(|e| e.2);
    let mut removed = 0;
    for (path, len, modified) in &by_age {
        if *modified >= recent && total <= limit {
            break;
        }
        if std::fs::remove_file(path).is_ok() {
            total -= len;
            removed += 1;
        }
    }
    eprintln!(
        "\n==> removed {removed} test executables from {} ({} GiB of executables, above {} GiB: the old ones, then the oldest recent ones while above)",
        deps.display(),
        before >> 30,
        limit >> 30
    );
}

/// Bytes of the files under `path` (symbolic links not followed; unreadable parts count 0).
fn dir_size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| dir_size(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

/// The toolkit's cache: `$XDG_CACHE_HOME/llm-toolkit`, else `~/.cache/llm-toolkit` (npm MCP
/// servers, the local model, Python virtualenvs; the same rule as the model fetcher and
/// `testkit::toolkit_cache_dir`). CI's first-run check points `XDG_CACHE_HOME` at an empty
/// directory.
fn toolkit_cache() -> PathBuf {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => std::env::var_os("HOME")
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
            .join(".cache"),
    };
    base.join("llm-toolkit")
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(what: &str, cmd: &mut Command) -> Result<(), String> {
    eprintln!("\n==> {what}");
    let status =
        services::status_in_own_group(cmd).map_err(|e| format!("{what}: could not start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what}: failed ({status})"))
    }
}

/// Runs `cmd` to its end, its output kept for the error when it fails.
pub(crate) fn run_quiet(what: &str, cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A stage's demo package: `examples/stage-N`, whose binary is `stage-N`. Each has only the
/// dependencies its demo uses, so a stage builds nothing another stage needs.
fn demo_package(n: u8) -> String {
    format!("stage-{n}")
}

fn demo_exists(n: u8) -> bool {
    root()
        .join(format!("examples/stage-{n}/Cargo.toml"))
        .exists()
}

/// Whether package `pkg` is in its folder under `crates/` ([`needs::folder`]).
fn crate_exists(pkg: &str) -> bool {
    root()
        .join("crates")
        .join(needs::folder(pkg))
        .join("Cargo.toml")
        .exists()
}

fn stage(n: u8) -> Result<(), String> {
    let stage = STAGES
        .iter()
        .find(|s| s.n == n)
        .ok_or_else(|| format!("there is no Stage {n}; stages are 0..=5"))?;
    if !demo_exists(n) || !stage.packages.iter().all(|p| crate_exists(p)) {
        return Err(format!(
            "Stage {n} ({}) is not built yet: no examples/stage-{n} or crate",
            stage.name
        ));
    }
    // The same table and code as `cargo xtask test`: what the demo and the tests need. The
    // installs (npm, pip, apt: mostly waiting on the network) run beside the build (CPU), which
    // needs none of them: a first run is a minute shorter.
    let needs = stage.needs;
    let installs = std::thread::spawn(move || needs::ensure(needs));
    // The demo and the tests in one build and one feature resolution: built apart, every
    // dependency whose features differ between the two (tokio, serde_json, hyper, reqwest, …)
    // was compiled twice, a third of a cold stage's build.
    let demo = demo_package(n);
    let mut packages = vec!["-p", demo.as_str()];
    for p in stage.packages {
        packages.extend(["-p", p]);
    }
    let built = run(
        &format!(
            "building the Stage {n} demo and the tests of {} (a first build takes minutes)",
            stage.packages.join(", ")
        ),
        cargo()
            .arg("build")
            .args(&packages)
            .args(["--bins", "--tests"])
            .args(demo_features(n)),
    );
    let installed = installs
        .join()
        .unwrap_or_else(|_| Err("installing what the stage needs panicked".to_owned()));
    built?;
    installed?;
    run_demo(n, &format!("Stage {n} demo ({})", stage.name))?;
    let mut test = cargo();
    test.arg("test").args(&packages).args(demo_features(n));
    let services = services::Services::start(stage.needs)?; // e.g. PostgreSQL for Stage 1's stores
    run(&format!("Stage {n} tests"), test.envs(services.env()))
}

/// The OpenTelemetry variables that turn on a demo's OTLP export (the `telemetry` crate).
const OTLP_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// `--features otlp` when a demo that exports traces is asked to (one of [`OTLP_VARS`] set): the
/// exporter is built only then.
fn demo_features(n: u8) -> Vec<&'static str> {
    let has_otlp = std::fs::read_to_string(root().join(format!("examples/stage-{n}/Cargo.toml")))
        .is_ok_and(|m| m.contains("\notlp = "));
    let asked = OTLP_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if has_otlp && asked {
        vec!["--features", "otlp"]
    } else {
        vec![]
    }
}

/// Runs the Stage `n` demo (every variant of it), as built by the build before it (its binary
/// in the target dir: `cargo run` would resolve the demo's features alone and build it again).
fn run_demo(n: u8, what: &str) -> Result<(), String> {
    let binary = target_dir().join("debug").join(demo_package(n));
    if !binary.exists() {
        return Err(format!("{} was not built", binary.display()));
    }
    for args in demo_runs(n) {
        let label = if !args.is_empty() {
            format!("{what} {}", args.join(" "))
        } else {
            what.to_owned()
        };
        let mut demo = Command::new(&binary);
        demo.current_dir(root()).args(*args);
        run(&label, &mut demo)?;
    }
    Ok(())
}

/// The runs of a demo: a long-running one gets arguments that make it exit by itself. The chat
/// panel runs with the model it would use (the local one offline) and with the scripted model,
/// which exercises a quick-reply click.
fn demo_runs(n: u8) -> &'static [&'static [&'static str]] {
    if n == 5 {
        &[&["--smoke"], &["--scripted", "--smoke"]]
    } else {
        &[&[]]
    }
}

fn test_all() -> Result<(), String> {
    prune_incremental();
    graph::check()?;
    let needs: Vec<Need> = needs::all();
    needs::ensure(&needs)?;
    let conformance_suite = conformance::ensure()?;
    run(
        "cargo fmt --check",
        cargo().args(["fmt", "--all", "--check"]),
    )?;
    run(
        "cargo clippy -D warnings",
        // With messaging's `nats` feature, so the broker backend is linted too, tool-system's
        // `bench-traced` (its traced-loop bench) and model-gateway's native backends; the other
        // optional features — context-engine's `postgres` and `sqlite` — are on through
        // dev-dependencies.
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            CLIPPY_FEATURES,
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    check_layers()?;
    run(
        "cargo doc -D warnings",
        cargo()
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    let metadata = graph::metadata()?;
    api::check(&root(), &target_dir(), &metadata)?;
    let services = services::Services::start(&needs)?; // on 127.0.0.1; stopped on drop or signal
    run(
        "cargo test (every crate; local-model's tests fetch the model once into the user's cache and fail, never skip, when they cannot)",
        cargo().args(["test", "--workspace"]).envs(services.env()),
    )?;
    // model-gateway's native backends are behind features of their own (a user builds only the
    // wires they use): their tests run here, each against its provider's recorded wire and
    // through LiteLLM's proxy (installed above, Need::LiteLlmProxy).
    run(
        "cargo test -p toolwright-model-gateway --features anthropic,gemini,openai-responses (the native backends)",
        cargo()
            .args(["test", "-p", "toolwright-model-gateway"])
            .args(["--features", NATIVE_BACKENDS])
            .envs(services.env()),
    )?;
    // messaging's bus on NATS JetStream is behind its `nats` feature (no broker client in the
    // embedded build), so `--workspace` does not build those tests: run them here, on the broker.
    run(
        "cargo test -p toolwright-messaging --features nats (the bus across processes, on nats-server)",
        cargo()
            .args(["test", "-p", "toolwright-messaging", "--features", "nats"])
            .args(["--test", "bus_across_processes"])
            .envs(services.env()),
    )?;
    // The official MCP conformance suite's client scenarios against the bridge's client (an
    // example of mcp-bridge, built by the tests above with the workspace's features).
    conformance::build_client()?;
    conformance::run_scenarios(&conformance_suite)?;
    conformance_server::build_server()
        .and_then(|()| conformance_server::run_scenarios(&conformance_suite))?;
    // The demos' binaries with the workspace's features, as the tests above were built (only
    // the binaries link).
    run(
        "building the stage demos",
        cargo().args(["build", "--workspace", "--bins", "--tests"]),
    )?;
    for s in STAGES.iter().filter(|s| demo_exists(s.n)) {
        run_demo(s.n, &format!("Stage {} demo", s.n))?;
    }
    api::package(&metadata)?;
    eprintln!("\nxtask test: all green");
    Ok(())
}

/// The layers above the backends must not compile an HTTP client or a model runtime:
/// checked on `cargo tree`'s normal dependencies, dev-dependencies aside.
fn check_layers() -> Result<(), String> {
    const LAYERS: &[&str] = &[
        "toolwright-core",
        "toolwright-context-engine",
        "toolwright-output-control",
        "toolwright-tool-system",
        "toolwright-sandbox",
        "toolwright-skills",
        "toolwright-code-mode",
        "toolwright-messaging",
        "toolwright-mcp-bridge",
        "seam-check",
        "toolwright-tool-search",
        "toolwright-process-guard",
        // the facade: without default features it is toolwright-core alone; each feature adds
        // a layer (what the default ones build is checked by its quick-start test)
        "toolwright",
    ];
    // Every other crate, and why it may hold what the layers may not (the check covers
    // every crate; a new crate must be put in one list or the other).
    const EXEMPT: &[(&str, &str)] = &[
        (
            "toolwright-model-gateway",
            "a backend: HTTP to the provider",
        ),
        ("toolwright-local-model", "a backend: the embedded model"),
        ("toolwright-telemetry", "the OpenTelemetry exporter"),
        (
            "toolwright-chat-panel",
            "the web front (axum) and remote MCP servers over HTTP",
        ),
        ("testkit", "test support: scripted HTTP servers"),
        (
            "toolwright-mcp-server",
            "an MCP server: its HTTP endpoint (axum)",
        ),
    ];
    let all = graph::library_crates()?;
    if let Some(c) = all
        .iter()
        .find(|c| !LAYERS.contains(&c.as_str()) && !EXEMPT.iter().any(|(e, _)| e == c))
    {
        return Err(format!(
            "layer check: crate `{c}` is in neither LAYERS nor EXEMPT of xtask's check_layers: say which it is"
        ));
    }
    // The OpenTelemetry SDK and exporter belong to the `telemetry` crate: the layers emit plain
    // `tracing` spans and reach it only through llm-core's telemetry seam.
    const BACKEND_ONLY: &[&str] = &[
        "async-openai",
        "reqwest",
        "candle-core",
        "tower",
        "opentelemetry_sdk",
        "opentelemetry-otlp",
        "tracing-opentelemetry",
    ];
    eprintln!(
        "\n==> layer check: {LAYERS:?} depend on none of {BACKEND_ONLY:?} (without default features: mcp-bridge's `http` feature, remote MCP servers, brings reqwest by design)"
    );
    for layer in LAYERS {
        let out = cargo()
            .args(["tree", "-p", layer, "-e", "normal", "--prefix", "none"])
            .arg("--no-default-features")
            .args(
                (*layer == "toolwright-context-engine")
                    .then_some(["--features", "postgres"])
                    .into_iter()
                    .flatten(),
            ) // the PostgreSQL driver is allowed; check it brings no HTTP client
            .output()
            .map_err(|e| format!("cargo tree: could not start: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo tree -p {layer} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let tree = String::from_utf8_lossy(&out.stdout);
        for dep in BACKEND_ONLY {
            if tree.lines().any(|l| l.starts_with(&format!("{dep} v"))) {
                return Err(format!(
                    "layer check: {layer} depends on {dep}; only backends (model-gateway, local-model) and the telemetry exporter may. `cargo tree -p {layer} -i {dep}` shows the path."
                ));
            }
        }
    }
    // the database drivers and the broker client are features; with its default features
    // off no crate compiles them (chat-panel, context-engine and messaging turn them on by name:
    // `postgres`, `nats`, `sqlite`). tiktoken is context-engine's feature too, but tool-system
    // always turns it on: the loop's default counter is exact for OpenAI-family models.
    const DRIVERS: &[&str] = &["tokio-postgres", "async-nats", "rusqlite"];
    eprintln!("==> layer check: with default features off, no crate builds {DRIVERS:?}");
    for c in &all {
        let out = cargo()
            .args(["tree", "-p", c, "-e", "normal", "--prefix", "none"])
            .arg("--no-default-features")
            .output()
            .map_err(|e| format!("cargo tree: could not start: {e}"))?;
        let tree = String::from_utf8_lossy(&out.stdout);
        let found = DRIVERS
            .iter()
            .find(|d| tree.lines().any(|l| l.starts_with(&format!("{d} v"))));
        if !out.status.success() || found.is_some() {
            return Err(format!(
                "layer check: {c} without default features builds {} (or cargo tree failed: {}); put it behind a feature, `cargo tree -p {c} --no-default-features -i DEP` shows the path",
                found.unwrap_or(&"?"),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    // The panel's store and broker switches compile with the features off (their refusal,
    // `PanelError::FeatureOff`, is the code that runs then).
    run(
        "cargo check -p toolwright-chat-panel --no-default-features",
        cargo().args([
            "check",
            "-p",
            "toolwright-chat-panel",
            "--no-default-features",
            "--lib",
        ]),
    )?;
    // no stage's demo builds a tensor library (the local model has its own GGUF reader and
    // kernels; candle is its tests' oracle): candle-core alone was 252 s of a cold Stage 3.
    for stage in STAGES {
        let pkg = format!("stage-{}", stage.n);
        let out = cargo()
            .args(["tree", "-p", &pkg, "-e", "normal", "--prefix", "none"])
            .output()
            .map_err(|e| format!("cargo tree: could not start: {e}"))?;
        let tree = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || tree.lines().any(|l| l.starts_with("candle-")) {
            return Err(format!(
                "layer check: the {pkg} demo builds candle (or cargo tree failed: {}); `cargo tree -p {pkg} -i candle-core` shows the path",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

fn bench(extra: &[String]) -> Result<(), String> {
    if extra.first().is_some_and(|a| a == "langchain") {
        return langchain::bench(&extra[1..]);
    }
    // The Python SDK and server-everything the MCP benches run against (the bridge's stdio
    // bench, the server's versus_sdks).
    needs::ensure(&[Need::McpServers])?;
    if extra.first().is_some_and(|a| a == "mcp-server") {
        return run(
            "the MCP server against the official SDKs' servers",
            cargo()
                .args([
                    "bench",
                    "-p",
                    "toolwright-mcp-server",
                    "--bench",
                    "versus_sdks",
                ])
                .args(&extra[1..]),
        );
    }
    let services = services::Services::start(&[Need::Postgres, Need::Nats])?; // postgres_append, bus_nats
    // The MCP bridge's stdio bench starts this example as its server (`cargo bench` builds no
    // examples).
    run(
        "building the MCP test server for the benches",
        cargo().args([
            "build",
            "--release",
            "-p",
            "toolwright-mcp-bridge",
            "--example",
            "misbehaving-mcp-server",
        ]),
    )?;
    run(
        "cargo bench",
        cargo()
            .args(["bench", "--workspace"])
            // the benches behind features (a bench whose features are off is not run)
            .args([
                "--features",
                "toolwright-tool-system/bench-traced,toolwright-messaging/nats",
            ])
            .args(extra)
            .envs(services.env()),
    )
}

fn have(path: &str) -> bool {
    Path::new(path).exists()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::{dir_size, prune_executables};

    #[test]
    fn old_executables_go_above_the_limit_then_recent_ones_while_above_and_libraries_stay() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-prune-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 3600);
        for (name, exec, age) in [
            ("old_test-1", true, Some(old)),
            ("new_test-2", true, None),
            ("libdep-3.rlib", true, Some(old)),
            ("notes-4", false, Some(old)),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, [0u8; 64]).unwrap();
            let mode = if exec { 0o755 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            if let Some(t) = age {
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(t)
                    .unwrap();
            }
        }
        prune_executables(&dir, 1 << 20); // under the limit: nothing goes
        assert!(dir.join("old_test-1").exists());
        prune_executables(&dir, 100); // above it: only the old executable goes
        assert!(!dir.join("old_test-1").exists());
        for kept in ["new_test-2", "libdep-3.rlib", "notes-4"] {
            assert!(dir.join(kept).exists(), "{kept}");
        }
        // Still above a smaller limit with only recent executables left: they go too, never
        // libraries or other files.
        prune_executables(&dir, 10);
        assert!(!dir.join("new_test-2").exists());
        for kept in ["libdep-3.rlib", "notes-4"] {
            assert!(dir.join(kept).exists(), "{kept}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `cargo xtask stage N` refuses a stage whose crates it cannot find: every package a
    /// stage names (`toolwright-…`) must be found in its folder under `crates/`.
    #[test]
    fn every_stage_package_is_found_in_its_folder() {
        for stage in crate::needs::STAGES {
            for p in stage.packages {
                assert!(
                    super::crate_exists(p),
                    "stage {}: no crate folder for {p}",
                    stage.n
                );
            }
        }
    }

    #[test]
    fn dir_size_counts_nested_files_and_not_a_missing_dir() {
        let dir = std::env::temp_dir().join(format!("xtask-dir-size-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("x"), [0u8; 100]).unwrap();
        std::fs::write(dir.join("a/b/y"), [0u8; 23]).unwrap();
        assert_eq!(dir_size(&dir), 123);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(dir_size(&dir), 0);
    }
}
