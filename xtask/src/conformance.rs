//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned to
//! [`VERSION`]) against the bridge's client, `crates/mcp-bridge/examples/conformance-client.rs`:
//! `cargo xtask test` runs its client scenarios ([`SCENARIOS`], the authorization ones included)
//! and fails when one fails that is not an expected failure ([`EXPECTED_FAILURES`]: draft or
//! extension scenarios only, each with its reason); `cargo xtask conformance` runs them alone.
//!
//! - **Install** ([`ensure`]): npm, into `npm-conformance` under the toolkit cache, once, like
//!   the npm MCP test servers; node and npm from Debian when missing. The suite's 0.1.16
//!   imports `fs.globSync`, which Node 20 (Debian's) lacks, so the installed copy is patched
//!   once ([`patch_glob_sync`]): the import becomes Node's own `globSync` where there is one,
//!   else a shim for the one pattern the suite globs (`**/checks.json`). A piece that cannot be
//!   had is an error, never a skip (under `CI=true` it says so).
//! - **Run** ([`run`]): each scenario alone (`conformance client --scenario NAME --command
//!   CLIENT`), its results under `target/conformance/NAME`. The suite's servers listen on every
//!   interface (`listen(0)`); the loopback preload the tests use
//!   (`crates/mcp-bridge/scripts/loopback-only.cjs`, through `NODE_OPTIONS`) pins them to
//!   127.0.0.1, and the client refuses to go on unless the server's port is bound there alone
//!   (`--loopback-only`). A scenario passes when the suite says so (no failed check, no
//!   warning, the client exited 0); each gets a line PASS or FAIL with its checks.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cargo, ci, root, run, target_dir, toolkit_cache};

/// The npm package.
pub const PACKAGE: &str = "@modelcontextprotocol/conformance";
/// Its pinned version.
pub const VERSION: &str = "0.1.16";
/// The client scenarios run: every active one of the suite (`initialize`, `tools_call`,
/// elicitation defaults, SSE retry and the authorization ones, the 2025-03-26 back-compat
/// ones included), then the draft and extension ones ([`EXPECTED_FAILURES`] names those the
/// client does not do yet).
pub const SCENARIOS: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    // draft
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    // extension
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
];

/// Scenarios marked draft or extension by the suite that the client does not pass yet, each
/// with the reason. Only such scenarios may be listed ([`expected_failure`] refuses the
/// others); one that starts passing fails the run until it is taken off the list.
pub const EXPECTED_FAILURES: &[(&str, &str)] = &[
    (
        "auth/client-credentials-jwt",
        "extension (SEP-1046): the client_credentials grant with a private_key_jwt assertion; \
         the bridge's OAuth has only the authorization-code flow",
    ),
    (
        "auth/client-credentials-basic",
        "extension (SEP-1046): the client_credentials grant with client_secret_basic; the \
         bridge's OAuth has only the authorization-code flow",
    ),
    (
        "auth/cross-app-access-complete-flow",
        "extension (SEP-990, enterprise-managed authorization): token exchange at an identity \
         provider and a JWT bearer grant; not implemented",
    ),
];

/// The suite's draft and extension scenarios, the only ones [`EXPECTED_FAILURES`] may name.
const DRAFT_OR_EXTENSION: &[&str] = &[
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
];

/// Why `scenario` is expected to fail, when it is listed and draft or extension.
fn expected_failure(scenario: &str) -> Option<&'static str> {
    EXPECTED_FAILURES
        .iter()
        .find(|(name, _)| *name == scenario && DRAFT_OR_EXTENSION.contains(name))
        .map(|(_, why)| *why)
}

/// The client: an example of mcp-bridge.
const CLIENT: &str = "conformance-client";

/// Where the suite's npm install lives.
fn prefix() -> PathBuf {
    toolkit_cache().join("npm-conformance")
}

/// The suite's JS entry in `prefix`.
fn entry(prefix: &Path) -> PathBuf {
    prefix
        .join("node_modules")
        .join(PACKAGE)
        .join("dist")
        .join("index.js")
}

/// The version of the suite installed in `prefix`, if any.
fn installed_version(prefix: &Path) -> Option<String> {
    let manifest = prefix
        .join("node_modules")
        .join(PACKAGE)
        .join("package.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["version"].as_str().map(str::to_owned)
}

/// A missing piece: under `CI=true` a failure that says so, elsewhere what to run.
fn failure(what: &str, how: &str) -> String {
    if ci() {
        format!("{what} ({how}); CI=true, so this is a failure")
    } else {
        format!("{what}; {how}, then run `cargo xtask conformance` again")
    }
}

/// Installs the pinned suite (once), patches it for Node 20 and checks that it runs; returns
/// its JS entry.
pub fn ensure() -> Result<PathBuf, String> {
    crate::needs::ensure_node("the MCP conformance suite")?;
    let prefix = prefix();
    let entry = entry(&prefix);
    if installed_version(&prefix).as_deref() != Some(VERSION) || !entry.is_file() {
        std::fs::create_dir_all(&prefix)
            .map_err(|e| format!("cannot create {}: {e}", prefix.display()))?;
        run(
            &format!("installing {PACKAGE}@{VERSION} from npm"),
            Command::new("npm")
                .arg("install")
                .arg("--prefix")
                .arg(&prefix)
                .args(["--no-audit", "--no-fund", "--loglevel=error"])
                .arg(format!("{PACKAGE}@{VERSION}"))
                .stdout(std::process::Stdio::null()),
        )
        .map_err(|e| failure(&e, "it needs npm and the npm registry"))?;
    }
    if installed_version(&prefix).as_deref() != Some(VERSION) || !entry.is_file() {
        return Err(failure(
            &format!(
                "{PACKAGE}@{VERSION} is not at {} after npm install",
                entry.display()
            ),
            &format!(
                "run `npm install --prefix {} {PACKAGE}@{VERSION}` to see why",
                prefix.display()
            ),
        ));
    }
    patch_glob_sync(&entry)?;
    crate::run_quiet(
        "the MCP conformance suite (`conformance list`)",
        Command::new("node").arg(&entry).arg("list"),
    )
    .map_err(|e| failure(&e, "the installed suite does not run on this Node"))?;
    Ok(entry)
}

/// The import of 0.1.16's entry that Node 20 cannot link.
const GLOB_IMPORT: &str = r#"import{existsSync as a,globSync as o,mkdtempSync as s,promises as c,readFileSync as l}from"fs";"#;

/// What replaces it: the same import without `globSync`, and `o` bound to Node's own
/// `fs.globSync` where it exists, else to a shim for the pattern the suite uses
/// (`**/checks.json`: files of that name at any depth under `cwd`, relative paths). Any other
/// pattern throws rather than answer wrongly.
const GLOB_SHIM: &str = r#"import{existsSync as a,mkdtempSync as s,promises as c,readFileSync as l}from"fs";import*as __globShimFs from"fs";/* llm-toolkit: fs.globSync shim for Node < 22 */const o=__globShimFs.globSync??function(pattern,options={}){const m=/^\*\*\/([^*?[\]{}\/\\]+)$/.exec(pattern);if(!m)throw new Error("fs.globSync shim (Node < 22): unsupported pattern "+pattern);const cwd=options.cwd??process.cwd(),found=[];const walk=dir=>{for(const e of __globShimFs.readdirSync(dir?cwd+"/"+dir:cwd,{withFileTypes:true})){const rel=dir?dir+"/"+e.name:e.name;if(e.isDirectory())walk(rel);else if(e.name===m[1])found.push(rel)}};walk("");return found};"#;

/// `text` with the `fs.globSync` import replaced by [`GLOB_SHIM`]; unchanged when already
/// patched; an error when the import is not the one this shim was written for.
fn patched(text: &str) -> Result<Option<String>, String> {
    if text.contains(GLOB_SHIM) {
        return Ok(None);
    }
    match text.find(GLOB_IMPORT) {
        Some(_) => Ok(Some(text.replacen(GLOB_IMPORT, GLOB_SHIM, 1))),
        None => Err(format!(
            "{PACKAGE}@{VERSION}'s entry does not import fs.globSync as the shim expects: \
             was another version installed?"
        )),
    }
}

/// Patches the installed entry for Node without `fs.globSync` (see [`GLOB_SHIM`]); does
/// nothing when it is patched already.
pub fn patch_glob_sync(entry: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(entry)
        .map_err(|e| format!("cannot read {}: {e}", entry.display()))?;
    let Some(new) = patched(&text)? else {
        return Ok(());
    };
    let tmp = entry.with_extension("js.patching");
    std::fs::write(&tmp, new)
        .and_then(|()| std::fs::rename(&tmp, entry))
        .map_err(|e| format!("cannot patch {}: {e}", entry.display()))?;
    eprintln!(
        "==> patched {} (fs.globSync for Node < 22)",
        entry.display()
    );
    Ok(())
}

/// `s` as one word for `sh`.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `s` as one word of `NODE_OPTIONS` (which takes double quotes).
fn node_options_word(s: &str) -> String {
    if s.contains([' ', '"', '\\']) {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        s.to_owned()
    }
}

/// What one scenario's `checks.json` says: counts and the checks that did not pass.
#[derive(Debug, Default, PartialEq)]
struct Checks {
    passed: usize,
    failed: usize,
    warnings: usize,
    problems: Vec<String>,
}

/// The first `checks.json` at any depth under `dir`.
fn find_checks(dir: &Path) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in &entries {
        if path.file_name().is_some_and(|n| n == "checks.json") && path.is_file() {
            return Some(path.clone());
        }
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|p| find_checks(p))
}

/// Reads the `checks.json` the suite saved under `dir` (in a directory of its own, under
/// `auth/` for the auth scenarios, whose names hold a slash).
fn read_checks(dir: &Path) -> Option<Checks> {
    let found = find_checks(dir)?;
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(found).ok()?).ok()?;
    Some(summarise(json.as_array()?))
}

fn summarise(checks: &[serde_json::Value]) -> Checks {
    let mut out = Checks::default();
    for check in checks {
        let status = check["status"].as_str().unwrap_or_default();
        match status {
            "SUCCESS" => out.passed += 1,
            "FAILURE" => out.failed += 1,
            "WARNING" => out.warnings += 1,
            _ => continue,
        }
        if status != "SUCCESS" {
            out.problems.push(format!(
                "{status} {}: {}",
                check["name"].as_str().unwrap_or("?"),
                check["errorMessage"]
                    .as_str()
                    .or(check["description"].as_str())
                    .unwrap_or("")
            ));
        }
    }
    out
}

/// Installs the suite, builds the client and runs every scenario of [`SCENARIOS`]; an error
/// naming the scenarios that failed.
pub fn run_all() -> Result<(), String> {
    let entry = ensure()?;
    build_client()?;
    run_scenarios(&entry)
}

/// Builds the client, with the workspace's features (as `cargo test --workspace` builds it, so
/// after the tests only the example links).
pub fn build_client() -> Result<(), String> {
    run(
        "building the conformance client (mcp-bridge's example conformance-client)",
        cargo().args(["build", "--workspace", "--example", CLIENT]),
    )
}

/// Runs every scenario of [`SCENARIOS`] with the client already built; prints a line per
/// scenario and fails when one failed.
pub fn run_scenarios(entry: &Path) -> Result<(), String> {
    let client = target_dir().join("debug").join("examples").join(CLIENT);
    if !client.is_file() {
        return Err(format!(
            "the conformance client {} was not built",
            client.display()
        ));
    }
    let preload = root().join("crates/mcp-bridge/scripts/loopback-only.cjs");
    let node_options = format!(
        "{} --require {}",
        std::env::var("NODE_OPTIONS").unwrap_or_default(),
        node_options_word(&preload.to_string_lossy())
    );
    let results = target_dir().join("conformance");
    let mut lines = Vec::new();
    let mut failed = Vec::new();
    for scenario in SCENARIOS {
        let dir = results.join(scenario);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let log_path = dir.join("conformance.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let err_log = log
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log_path.display()))?;
        eprintln!("\n==> conformance scenario {scenario}");
        let status = crate::services::status_in_own_group(
            Command::new("node")
                .arg(entry)
                .args(["client", "--scenario", scenario, "--timeout", "30000"])
                .arg("--command")
                .arg(format!(
                    "{} --loopback-only",
                    shell_word(&client.to_string_lossy())
                ))
                .arg("--output-dir")
                .arg(&dir)
                .current_dir(&dir)
                .env("NODE_OPTIONS", node_options.trim())
                .stdin(std::process::Stdio::null())
                .stdout(log)
                .stderr(err_log),
        )
        .map_err(|e| format!("conformance {scenario}: could not start node: {e}"))?;
        let checks = read_checks(&dir);
        let counts = checks.as_ref().map_or_else(
            || "no checks.json".to_owned(),
            |c| {
                format!(
                    "{} passed, {} failed, {} warnings",
                    c.passed, c.failed, c.warnings
                )
            },
        );
        let passed = status.success()
            && checks
                .as_ref()
                .is_some_and(|c| c.failed == 0 && c.warnings == 0 && c.passed > 0);
        let expected = expected_failure(scenario);
        let verdict = match (passed, expected) {
            (true, None) => "PASS",
            (false, None) => "FAIL",
            (false, Some(_)) => "XFAIL",
            (true, Some(_)) => "XPASS",
        };
        let line = format!("conformance {scenario:<42} {verdict} ({counts})");
        eprintln!("{line}");
        if let Some(why) = expected {
            eprintln!("    expected to fail: {why}");
            if passed {
                eprintln!("    it passes now: take it off EXPECTED_FAILURES");
                failed.push(*scenario);
            }
            lines.push(line);
            continue;
        }
        if !passed {
            for problem in checks.iter().flat_map(|c| &c.problems) {
                eprintln!("    {problem}");
            }
            eprintln!(
                "    the suite exited {status}; its output: {}",
                log_path.display()
            );
            let output = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = output.lines().rev().take(40).collect();
            for l in tail.into_iter().rev() {
                eprintln!("    | {l}");
            }
            failed.push(*scenario);
        }
        lines.push(line);
    }
    eprintln!("\n==> MCP conformance suite {VERSION}, client scenarios:");
    for line in &lines {
        eprintln!("{line}");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "MCP conformance: {} of {} scenarios failed: {}",
            failed.len(),
            SCENARIOS.len(),
            failed.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_glob_sync_patch_replaces_the_import_once_and_refuses_other_entries() {
        let original = format!("{GLOB_IMPORT}import u from\"path\";var x=o(`**/checks.json`);");
        let once = patched(&original).unwrap().unwrap();
        assert!(!once.contains("globSync as o"), "{once}");
        assert!(once.ends_with("import u from\"path\";var x=o(`**/checks.json`);"));
        assert_eq!(
            patched(&once).unwrap(),
            None,
            "a second patch changes nothing"
        );
        assert!(patched("import{readFileSync as l}from\"fs\";").is_err());
    }

    /// The shim on the Node here: finds `checks.json` files at any depth, as relative paths,
    /// and throws on a pattern it does not handle.
    #[test]
    fn the_glob_sync_shim_finds_checks_files_under_cwd() {
        let dir = std::env::temp_dir().join(format!("xtask-glob-shim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("results/a-1")).unwrap();
        std::fs::create_dir_all(dir.join("results/b-2/deeper")).unwrap();
        for f in [
            "results/a-1/checks.json",
            "results/b-2/deeper/checks.json",
            "results/other.json",
        ] {
            std::fs::write(dir.join(f), "[]").unwrap();
        }
        let module = patched(&format!(
            "{GLOB_IMPORT}console.log(JSON.stringify(o(`**/checks.json`,{{cwd:process.argv[2]}}).sort()));\
             try{{o(`*.json`,{{cwd:process.argv[2]}});console.log(`no throw`)}}catch(e){{console.log(`threw`)}}"
        ))
        .unwrap()
        .unwrap();
        let script = dir.join("shim.mjs");
        std::fs::write(&script, module).unwrap();
        let out = Command::new("node")
            .arg(&script)
            .arg(dir.join("results"))
            .output()
            .expect("node runs (cargo xtask test installs it)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let native = Command::new("node")
            .args([
                "-e",
                "process.stdout.write(String(typeof require('fs').globSync))",
            ])
            .output()
            .unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines[0], r#"["a-1/checks.json","b-2/deeper/checks.json"]"#,
            "{stdout}"
        );
        if String::from_utf8_lossy(&native.stdout) != "function" {
            assert_eq!(lines[1], "threw", "the shim refuses other patterns");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn checks_are_found_under_the_directory_an_auth_scenario_name_makes() {
        let dir = std::env::temp_dir().join(format!("xtask-checks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let nested = dir
            .join("auth")
            .join("metadata-default-2026-11-29T09-25-47-388Z");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(dir.join("conformance.log"), "").unwrap();
        std::fs::write(
            nested.join("checks.json"),
            r#"[{"status":"SUCCESS","name":"A"},{"status":"SUCCESS","name":"B"}]"#,
        )
        .unwrap();
        let checks = read_checks(&dir).unwrap();
        assert_eq!(checks.passed, 2);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_checks(&dir).is_none());
    }

    #[test]
    fn only_draft_or_extension_scenarios_may_be_expected_to_fail() {
        for (name, why) in EXPECTED_FAILURES {
            assert!(DRAFT_OR_EXTENSION.contains(name), "{name} is active");
            assert!(SCENARIOS.contains(name), "{name} is not run");
            assert!(!why.is_empty());
            assert_eq!(expected_failure(name), Some(*why));
        }
        assert_eq!(expected_failure("auth/metadata-default"), None);
    }

    #[test]
    fn checks_are_counted_and_what_did_not_pass_is_named() {
        let checks: Vec<serde_json::Value> = serde_json::from_str(
            r#"[{"status":"SUCCESS","name":"A"},{"status":"INFO","name":"I"},
                {"status":"FAILURE","name":"B","errorMessage":"went wrong"},
                {"status":"WARNING","name":"C","description":"late"}]"#,
        )
        .unwrap();
        assert_eq!(
            summarise(&checks),
            Checks {
                passed: 1,
                failed: 1,
                warnings: 1,
                problems: vec!["FAILURE B: went wrong".into(), "WARNING C: late".into()],
            }
        );
    }

    #[test]
    fn shell_words_survive_the_suites_split_on_spaces() {
        assert_eq!(shell_word("/work/target/debug/x"), "/work/target/debug/x");
        assert_eq!(shell_word("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(node_options_word("/x/loopback.cjs"), "/x/loopback.cjs");
        assert_eq!(node_options_word(r#"/a b/"q""#), r#""/a b/\"q\"""#);
    }
}
