//! The official MCP conformance suite's **server** scenarios (the same pinned
//! [`conformance::VERSION`]) against the toolkit's MCP server, `toolwright-mcp serve`
//! (crates/mcp-server), over stateful Streamable HTTP (`"http": {"stateful": true}`: sessions,
//! so that a tool can ask the client mid-call and SSE streams carry resumable event ids) on
//! 127.0.0.1 with the suite's fixtures (`"tools": ["conformance"]`: its tools, resources and
//! prompts).
//!
//! - [`RUN`]: the scenarios run; each must pass (no failed check, no warning).
//! - [`NOT_OFFERED`]: active scenarios of MCP features the server does not offer, each with
//!   what is missing (none today). They are not run and not counted as passing.
//! - Every scenario `conformance list --server` names must be in one of the two lists: a new
//!   scenario of another suite version fails the run until it is placed.
//!
//! Results land under `target/conformance-server/NAME`; a line PASS or FAIL per scenario.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{cargo, conformance, run, target_dir};

/// The server scenarios run against the server; all must pass.
pub const RUN: &[&str] = &[
    "server-initialize",
    "ping",
    "logging-set-level",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
];

/// Active server scenarios not run, with why (none: the server offers every feature the
/// suite's active server scenarios test).
pub const NOT_OFFERED: &[(&str, &str)] = &[];

const BIN: &str = "toolwright-mcp";

/// Installs the suite, builds the server and runs [`RUN`].
pub fn run_all() -> Result<(), String> {
    let entry = conformance::ensure()?;
    build_server()?;
    run_scenarios(&entry)
}

/// Builds `toolwright-mcp`.
pub fn build_server() -> Result<(), String> {
    run(
        "building the MCP server (toolwright-mcp)",
        cargo().args(["build", "-p", "toolwright-mcp-server", "--bin", BIN]),
    )
}

/// The server scenarios `conformance list --server` names.
fn listed(entry: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("node")
        .arg(entry)
        .args(["list", "--server"])
        .output()
        .map_err(|e| format!("conformance list: could not start node: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "conformance list --server failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// The server process; stopped on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the built server (stateful HTTP) with the suite's fixtures on a free port of 127.0.0.1; it
/// and its URL (the line it prints on stdout).
fn start_server(dir: &Path) -> Result<(Server, String), String> {
    let bin = target_dir().join("debug").join(BIN);
    if !bin.is_file() {
        return Err(format!("the MCP server {} was not built", bin.display()));
    }
    let config = dir.join("serve.json");
    std::fs::write(
        &config,
        r#"{"tools": ["conformance"], "http": {"listen": "127.0.0.1:0", "stateful": true}}"#,
    )
    .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let log = std::fs::File::create(dir.join("server.log"))
        .map_err(|e| format!("cannot create the server log: {e}"))?;
    let mut child = Command::new(&bin)
        .args(["serve", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let stdout = child.stdout.take();
    let server = Server(child);
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    if let Some(out) = stdout {
        let mut reader = std::io::BufReader::new(out);
        while Instant::now() < deadline {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line.starts_with("listening on ") => {
                    let url = line.trim().trim_start_matches("listening on ").to_owned();
                    return Ok((server, url));
                }
                Ok(_) => continue,
            }
        }
    }
    Err(format!(
        "the MCP server did not say where it listens; its log: {}",
        dir.join("server.log").display()
    ))
}

/// Counts of one scenario's checks and the ones that did not pass.
fn read_checks(dir: &Path) -> Option<(usize, Vec<String>)> {
    fn find(dir: &Path) -> Option<PathBuf> {
        for e in std::fs::read_dir(dir).ok()?.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                if let Some(f) = find(&p) {
                    return Some(f);
                }
            } else if p.file_name().is_some_and(|n| n == "checks.json") {
                return Some(p);
            }
        }
        None
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(find(dir)?).ok()?).ok()?;
    let mut passed = 0;
    let mut problems = Vec::new();
    for c in json.as_array()? {
        match c["status"].as_str().unwrap_or_default() {
            "SUCCESS" => passed += 1,
            s @ ("FAILURE" | "WARNING") => problems.push(format!(
                "{s} {}: {}",
                c["name"].as_str().unwrap_or("?"),
                c["errorMessage"].as_str().unwrap_or("")
            )),
            _ => {}
        }
    }
    Some((passed, problems))
}

/// Runs [`RUN`] against the server already built; a line per scenario; fails when one failed
/// or when the suite names a scenario in neither list.
pub fn run_scenarios(entry: &Path) -> Result<(), String> {
    let names = listed(entry)?;
    let unplaced: Vec<&String> = names
        .iter()
        .filter(|n| !RUN.contains(&n.as_str()) && !NOT_OFFERED.iter().any(|(s, _)| s == n))
        .collect();
    if !unplaced.is_empty() {
        return Err(format!(
            "the conformance suite has server scenarios xtask/src/conformance_server.rs does not place: {unplaced:?}; add each to RUN or NOT_OFFERED"
        ));
    }
    let results = target_dir().join("conformance-server");
    let _ = std::fs::remove_dir_all(&results);
    std::fs::create_dir_all(&results)
        .map_err(|e| format!("cannot create {}: {e}", results.display()))?;
    let (_server, url) = start_server(&results)?;
    let mut lines = Vec::new();
    let mut failed = Vec::new();
    for scenario in RUN {
        let dir = results.join(scenario);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let log_path = dir.join("conformance.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let err_log = log
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log_path.display()))?;
        let status = crate::services::status_in_own_group(
            Command::new("node")
                .arg(entry)
                .args(["server", "--url", &url, "--scenario", scenario])
                .arg("--output-dir")
                .arg(&dir)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err_log),
        )
        .map_err(|e| format!("conformance {scenario}: could not start node: {e}"))?;
        let checks = read_checks(&dir);
        let passed = status.success()
            && checks
                .as_ref()
                .is_some_and(|(n, problems)| *n > 0 && problems.is_empty());
        let counts = checks.as_ref().map_or_else(
            || "no checks.json".to_owned(),
            |(n, p)| format!("{n} passed, {} not", p.len()),
        );
        let line = format!(
            "conformance server {scenario:<32} {} ({counts})",
            if passed { "PASS" } else { "FAIL" }
        );
        eprintln!("{line}");
        if !passed {
            for p in checks.iter().flat_map(|(_, p)| p) {
                eprintln!("    {p}");
            }
            eprintln!(
                "    the suite exited {status}; its output: {}",
                log_path.display()
            );
            failed.push(*scenario);
        }
        lines.push(line);
    }
    eprintln!(
        "\n==> MCP conformance suite {}, server scenarios against toolwright-mcp:",
        conformance::VERSION
    );
    for line in &lines {
        eprintln!("{line}");
    }
    for (scenario, why) in NOT_OFFERED {
        eprintln!("conformance server {scenario:<32} NOT RUN ({why})");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "MCP conformance (server): {} of {} scenarios failed: {}",
            failed.len(),
            RUN.len(),
            failed.join(", ")
        ))
    }
}
