//! Where the pinned third-party MCP servers the tests run against are installed (npm, PyPI).

use std::path::PathBuf;

/// The toolkit's cache: `$XDG_CACHE_HOME/llm-toolkit`, else `~/.cache/llm-toolkit` (the rule
/// the local model's fetcher and `cargo xtask` follow too, so one variable points them all at
/// another directory, as CI's first-run check does).
pub fn toolkit_cache_dir() -> PathBuf {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
    };
    base.join("llm-toolkit")
}

/// The JS entry of the npm MCP server `@modelcontextprotocol/PACKAGE` (`server-everything`,
/// `server-filesystem`, `server-memory`): `MCP_SERVER_<NAME>` when set (e.g.
/// `MCP_SERVER_EVERYTHING`), else where `cargo xtask stage N` / `cargo xtask test` install it
/// (`crates/mcp-bridge/install-test-deps.sh`, `crates/code-mode/install-eval-deps.sh`).
///
/// # Errors
/// A message naming the path and the command that installs it, when it is not there.
pub fn npm_mcp_server(package: &str) -> Result<PathBuf, String> {
    let var = format!(
        "MCP_SERVER_{}",
        package.trim_start_matches("server-").to_ascii_uppercase()
    );
    let prefix = if package == "server-everything" {
        "npm"
    } else {
        "npm-code-mode-eval"
    };
    let path = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            toolkit_cache_dir()
                .join(prefix)
                .join("node_modules/@modelcontextprotocol")
                .join(package)
                .join("dist/index.js")
        });
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "@modelcontextprotocol/{package} is not installed at {} — run `cargo xtask test` or `cargo xtask stage N`, which install it (or set {var})",
            path.display()
        ))
    }
}

/// The Python of the virtualenv holding the official MCP Python SDK, pinned
/// (`crates/mcp-bridge/tests/python/requirements.txt`): `MCP_PYTHON_SDK` when set, else
/// `mcp-python/bin/python` under [`toolkit_cache_dir`], where `cargo xtask stage 4` and
/// `cargo xtask test` install it (`crates/mcp-bridge/install-test-deps.sh`).
///
/// # Errors
/// A message naming the path and the command that installs it, when it is not there.
pub fn python_mcp_sdk() -> Result<PathBuf, String> {
    let python = std::env::var_os("MCP_PYTHON_SDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| toolkit_cache_dir().join("mcp-python/bin/python"));
    if python.is_file() {
        Ok(python)
    } else {
        Err(format!(
            "the MCP Python SDK is not installed at {} — run `cargo xtask test` or `cargo xtask stage 4`, which install it (or set MCP_PYTHON_SDK)",
            python.display()
        ))
    }
}

/// The launcher of the MCP Inspector (npm `@modelcontextprotocol/inspector`, pinned), whose
/// `--cli` mode the server's tests drive it in: `MCP_INSPECTOR` when set, else
/// `npm-inspector/…/clients/launcher/build/index.js` under [`toolkit_cache_dir`], where
/// `cargo xtask test` installs it (`crates/mcp-server/install-test-deps.sh`).
///
/// # Errors
/// A message naming the path and the command that installs it, when it is not there.
pub fn mcp_inspector() -> Result<PathBuf, String> {
    let path = std::env::var_os("MCP_INSPECTOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            toolkit_cache_dir()
                .join("npm-inspector/node_modules/@modelcontextprotocol/inspector")
                .join("clients/launcher/build/index.js")
        });
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the MCP Inspector is not installed at {} — run `cargo xtask test`, which installs it, or `bash crates/mcp-server/install-test-deps.sh` (or set MCP_INSPECTOR)",
            path.display()
        ))
    }
}
