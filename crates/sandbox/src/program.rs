//! What one run runs ([`Program`]) and what a run that is not interactive returns ([`Output`]).

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// A program to run in the sandbox: its argv, the directory it comes from (shown read-only), the
/// environment variables it asks for and the time limit it asks for. The operator's
/// [`crate::SandboxConfig`] decides what it gets: a variable only when granted
/// ([`crate::SandboxConfig::is_granted`]), a time limit cut to the cap
/// ([`crate::SandboxConfig::timeout_for`]).
///
/// ```
/// use toolwright_sandbox::Program;
/// use std::time::Duration;
/// let p = Program::new("count", "/opt/count", ["python3", "run.py"])
///     .with_env("LANGUAGE")
///     .with_timeout(Duration::from_secs(5));
/// assert!(p.check().is_ok());
/// assert!(Program::new("none", "/opt", Vec::<String>::new()).check().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Program {
    /// What errors call it, and the key of its [`crate::Grant`] in
    /// [`crate::SandboxConfig::grants`].
    pub name: String,
    /// Its directory on the host, shown read-only (at `/skill` in a container; `SKILL_DIR` says
    /// where). A word of `argv` that names a file in it (`run.py`, `bin/tool`) is passed as that
    /// file's path as the program sees it.
    pub dir: PathBuf,
    /// The program and its arguments; the program is looked up in
    /// `/usr/local/bin:/usr/bin:/bin` unless it is a file of [`Self::dir`].
    pub argv: Vec<String>,
    /// Environment variables of the agent it asks for (it gets those granted).
    pub env: Vec<String>,
    /// The wall-clock limit it asks for (`None`: [`crate::SandboxConfig::timeout`]).
    pub timeout: Option<Duration>,
}

impl Program {
    /// A program named `name` from `dir`, run as `argv`.
    pub fn new(
        name: impl Into<String>,
        dir: impl Into<PathBuf>,
        argv: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            dir: dir.into(),
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            timeout: None,
        }
    }
    /// Asks for one more environment variable of the agent.
    pub fn with_env(mut self, var: impl Into<String>) -> Self {
        self.env.push(var.into());
        self
    }
    /// Asks for this wall-clock limit.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
    /// Why it cannot be run, before anything is made for it: an empty argv or name, or a
    /// variable name the environment cannot hold.
    pub fn check(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("the program has no name: give it one (errors and grants use it)".into());
        }
        if self.argv.first().is_none_or(String::is_empty) {
            return Err(format!(
                "program {}: argv is empty: give at least the program to run",
                self.name
            ));
        }
        if let Some(v) = self
            .env
            .iter()
            .find(|v| v.is_empty() || v.contains(['=', '\0']))
        {
            return Err(format!(
                "program {}: {v:?} cannot be an environment variable's name (empty, or with = or NUL)",
                self.name
            ));
        }
        Ok(())
    }
}

/// What a program that exited with status 0 printed ([`crate::Sandbox::run`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Output {
    /// Its stdout, at most [`crate::SandboxConfig::output_limit`] bytes.
    pub stdout: Vec<u8>,
    /// Its stderr, at most [`crate::SandboxConfig::output_limit`] bytes.
    pub stderr: Vec<u8>,
}

/// Whether a word of [`Program::argv`] may name a file of [`Program::dir`]: a relative path made
/// of plain names (`run.py`, `./bin/tool`; not `/bin/sh`, not `../other/run.py`, not `python3`
/// unless the directory has such a file). Such a word that names a file there is passed as that
/// file's path as the program sees it.
pub fn is_plain_relative(word: &str) -> bool {
    let p = Path::new(word);
    p.components().any(|c| matches!(c, Component::Normal(_)))
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The last `n` characters of `s` (lossy UTF-8, trimmed): what an error shows of a program's
/// output.
pub(crate) fn tail(s: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(s);
    let t = text.trim();
    let start = t.char_indices().rev().nth(n).map_or(0, |(i, _)| i);
    t[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_refuses_what_cannot_run() {
        let ok = Program::new("p", "/d", ["sh", "-c", "true"]);
        assert_eq!(ok.check(), Ok(()));
        assert!(Program::new("", "/d", ["sh"]).check().is_err());
        let e = Program::new("p", "/d", Vec::<String>::new())
            .check()
            .unwrap_err();
        assert!(e.contains("argv is empty"), "{e}");
        assert!(Program::new("p", "/d", [""]).check().is_err());
        for bad in ["", "A=B", "A\0"] {
            assert!(ok.clone().with_env(bad).check().is_err(), "{bad:?}");
        }
        assert_eq!(ok.with_env("API_KEY").check(), Ok(()));
    }

    #[test]
    fn only_plain_relative_words_can_name_files_of_the_directory() {
        for yes in ["run.py", "./bin/tool", "a/b/c"] {
            assert!(is_plain_relative(yes), "{yes}");
        }
        for no in ["/bin/sh", "../x/run.py", "a/../../b", ".", "./", ""] {
            assert!(!is_plain_relative(no), "{no}");
        }
    }
}
