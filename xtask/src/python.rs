//! The project's Python virtualenvs (Arize Phoenix for the telemetry test, LangChain core for
//! `cargo xtask bench langchain`): in the toolkit cache, outside the clone, kept between runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run_quiet;

/// A virtualenv of the project's: `NAME` in the toolkit cache ([`crate::toolkit_cache`]),
/// outside the clone, kept between runs.
pub(crate) fn cache_venv(name: &str) -> PathBuf {
    crate::toolkit_cache().join(name)
}

/// The Python that makes virtualenvs: `$PYTHON`, else `python3`.
pub(crate) fn system_python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Makes `venv` when it has no Python yet and runs `pip install ARGS` in it (`what` names the
/// install in an error, which carries pip's output).
pub(crate) fn pip_install(
    venv: &Path,
    what: &str,
    args: &[&std::ffi::OsStr],
) -> Result<(), String> {
    if !venv.join("bin/python").exists() {
        run_quiet(
            "python3 -m venv",
            Command::new(system_python()).args(["-m", "venv"]).arg(venv),
        )?;
    }
    run_quiet(
        what,
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(args),
    )
}
