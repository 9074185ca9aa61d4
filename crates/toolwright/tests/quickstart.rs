//! The README's quick start, as a user runs it: a project of its own outside the workspace
//! (`examples/quickstart`, copied to a temporary directory with the workspace's lock file so it
//! resolves the same versions), depending on the facade by path with its default features. It
//! is built with cargo, run against a scripted OpenAI-compatible server on 127.0.0.1, and what it
//! builds is checked: no database driver, browser driver or sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::{Reply, ScriptedServer};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // The outer `cargo test`'s own settings are not the user's.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The quick start copied out of the workspace, its path dependency made absolute.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = workspace().join("examples/quickstart");
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::copy(src.join("src/main.rs"), dir.path().join("src/main.rs")).unwrap();
    let facade = workspace()
        .join("crates/toolwright")
        .canonicalize()
        .unwrap();
    let manifest = std::fs::read_to_string(src.join("Cargo.toml"))
        .unwrap()
        .replace("../../crates/toolwright", facade.to_str().unwrap());
    assert!(
        manifest.contains(facade.to_str().unwrap()),
        "the quick start depends on the facade by path"
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(
        workspace().join("Cargo.lock"),
        dir.path().join("Cargo.lock"),
    )
    .unwrap();
    dir
}

#[test]
fn the_readme_shows_the_quick_start_as_it_is_built_and_run() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let main =
        std::fs::read_to_string(workspace().join("examples/quickstart/src/main.rs")).unwrap();
    assert!(
        readme.contains(main.trim_end()),
        "README.md's quick start and examples/quickstart/src/main.rs differ: copy the file into the README"
    );
    let lines = main.lines().count();
    assert!(
        lines <= 25,
        "the quick start is {lines} lines; keep it short"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quick_start_builds_outside_the_workspace_and_runs_a_tool_round() {
    let dir = project();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quickstart-target");

    // What the default features build: no database driver, browser driver or sandbox.
    let tree = cargo()
        .args(["tree", "-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let tree_text = String::from_utf8_lossy(&tree.stdout);
    if !tree.status.success() {
        // --offline fails when a crate is not in cargo's cache yet; the build below fetches it.
        let online = cargo()
            .args(["tree", "-e", "normal", "--prefix", "none"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            online.status.success(),
            "cargo tree: {}",
            String::from_utf8_lossy(&online.stderr)
        );
        check_tree(&String::from_utf8_lossy(&online.stdout));
    } else {
        check_tree(&tree_text);
    }

    let build = cargo()
        .args(["build", "--quiet", "--target-dir"])
        .arg(&target)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "the quick start does not build: {}",
        String::from_utf8_lossy(&build.stderr)
    );

    let server = ScriptedServer::start().await;
    server.set_recording(true);
    server.push(Reply::tool_call(
        "call_1",
        "get_weather",
        r#"{"city":"Paris"}"#,
    ));
    server.push(Reply::text("It is clear in Paris, 21 °C."));
    let run = tokio::process::Command::new(target.join("debug/quickstart"))
        .env("OPENAI_BASE_URL", server.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "scripted")
        .output()
        .await
        .unwrap();
    assert!(
        run.status.success(),
        "the quick start failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).trim(),
        "It is clear in Paris, 21 °C."
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one tool round, then the answer");
    assert_eq!(
        requests[0].body["tools"][0]["function"]["name"],
        "get_weather"
    );
    let tool_message = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the second request holds the tool's result")
        .clone();
    assert_eq!(tool_message["tool_call_id"], "call_1");
    let result: serde_json::Value =
        serde_json::from_str(tool_message["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        result,
        serde_json::json!({"city": "Paris", "sky": "clear", "celsius": 21})
    );
}

fn check_tree(tree: &str) {
    assert!(
        tree.lines()
            .any(|l| l.starts_with("toolwright-tool-system v")),
        "cargo tree printed: {tree}"
    );
    for heavy in [
        "rusqlite",
        "libsqlite3-sys",
        "tokio-postgres",
        "async-nats",
        "fantoccini",
        "toolwright-sandbox",
        "toolwright-skills",
        "toolwright-chat-panel",
        "candle-core",
    ] {
        assert!(
            !tree.lines().any(|l| l.starts_with(&format!("{heavy} v"))),
            "the facade's default features build {heavy}; put it behind a feature"
        );
    }
}
