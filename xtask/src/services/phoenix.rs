//! Arize Phoenix, the trace viewer the telemetry test exports to.
//!
//! Phoenix's gRPC receiver listens on every interface whatever `PHOENIX_HOST` says, so it runs
//! in a network namespace of its own where only loopback exists (`unshare -n`, `lo` up; as a
//! user namespace's root when xtask is not root). Nothing outside the namespace can reach it;
//! the test enters the namespace (`nsenter -t PID -n`) to talk to it. Installed with pip into a
//! virtualenv under `~/.cache/llm-toolkit` (outside the clone, kept between runs).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{Role, Server, fresh_dir, with_log};
use crate::is_root;
use crate::python::{cache_venv, pip_install, system_python};

/// The version the test was written against (its REST API: `/v1/projects/{p}/spans/otlpv1`).
const PHOENIX: &str = "arize-phoenix==20.26.1";
/// Phoenix's port inside its namespace (the namespace is private, so no clash with anything).
const PORT: u16 = 6006;

/// The virtualenv Phoenix is installed in.
fn venv() -> PathBuf {
    cache_venv("phoenix-venv")
}

/// `phoenix`, installed when missing; fails loudly when it cannot be.
fn ensure_phoenix() -> Result<PathBuf, String> {
    let bin = venv().join("bin/phoenix");
    if bin.exists() {
        return Ok(bin);
    }
    eprintln!("==> installing {PHOENIX} from PyPI (the trace viewer of the telemetry test)");
    let installed = pip_install(&venv(), "pip install arize-phoenix", &[PHOENIX.as_ref()]);
    match installed {
        Ok(()) if bin.exists() => Ok(bin),
        other => {
            let _ = std::fs::remove_dir_all(venv());
            Err(format!(
                "Arize Phoenix is needed by the telemetry crate's trace test and could not be installed \
                 ({} -m venv, then pip install {PHOENIX}): {}",
                system_python(),
                other
                    .err()
                    .unwrap_or_else(|| "no phoenix program after the install".into())
            ))
        }
    }
}

/// Phoenix, the leader of its own process group (`unshare`, the shell and Phoenix are one
/// process: each execs the next).
pub(super) struct Phoenix {
    dir: PathBuf,
    pid: u32,
    /// It runs in a user namespace of its own (xtask is not root).
    userns: bool,
    child: Child,
}

/// Ends Phoenix's process group (it is its leader).
fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status();
}

impl Server for Phoenix {
    /// One Phoenix: nothing crashes it on purpose.
    fn roles() -> &'static [Role] {
        &[Role::Shared]
    }

    /// Starts Phoenix in its own network namespace.
    fn start(_role: Role) -> Result<Self, String> {
        let bin = ensure_phoenix()?;
        let dir = fresh_dir("phoenix")?;
        std::fs::create_dir_all(dir.join("work"))
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let log = std::fs::File::create(dir.join("phoenix.log"))
            .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
        let userns = !is_root();
        let mut cmd = Command::new("unshare");
        if userns {
            cmd.arg("--map-root-user");
        }
        // `unshare` execs the shell, which execs Phoenix: the child's pid is Phoenix's.
        let child = cmd
            .args([
                "--net",
                "sh",
                "-c",
                "ip link set lo up && exec \"$0\" serve",
            ])
            .arg(&bin)
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", PORT.to_string())
            .env("PHOENIX_WORKING_DIR", dir.join("work"))
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("unshare (util-linux) could not start Phoenix: {e}"))?;
        let pid = child.id();
        let phoenix = Self {
            dir,
            pid,
            userns,
            child,
        };
        std::fs::write(phoenix.dir.join("phoenix.pid"), pid.to_string()).map_err(|e| {
            kill_group(pid);
            format!("cannot write in {}: {e}", phoenix.dir.display())
        })?;
        eprintln!(
            "==> Phoenix starting in its own network namespace (pid {pid}, log {})",
            phoenix.dir.join("phoenix.log").display()
        );
        Ok(phoenix)
    }

    /// Only that Phoenix has not already exited: it takes 10–30 s to listen, and the test waits
    /// for it (in its namespace), so that the wait overlaps with the build.
    fn ready(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(with_log(
                format!("Phoenix exited at once ({status})"),
                &self.dir.join("phoenix.log"),
            )),
            Err(e) => Err(format!("Phoenix (pid {}): {e}", self.pid)),
        }
    }

    fn stop(&mut self) -> Result<(), String> {
        kill_group(self.pid);
        self.child.wait().map(|_| ()).map_err(|e| e.to_string())
    }

    /// Stops a Phoenix an earlier, killed run left behind in `dir`.
    fn reap(dir: &Path) {
        if let Some(pid) = std::fs::read_to_string(dir.join("phoenix.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        {
            kill_group(pid);
        }
    }

    fn name(&self) -> &'static str {
        "phoenix"
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("TEST_PHOENIX_PID".to_owned(), self.pid.to_string()),
            ("TEST_PHOENIX_PORT".to_owned(), PORT.to_string()),
        ];
        if self.userns {
            env.push(("TEST_PHOENIX_USERNS".to_owned(), "1".to_owned()));
        }
        env
    }
}
