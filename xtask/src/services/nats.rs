//! NATS JetStream for messaging's bus tests: `nats-server` (Debian's package, installed
//! when missing) on 127.0.0.1 only, at a free port, no monitoring port, its JetStream store in
//! the service's own directory. Two servers: one the tests share (`TEST_NATS_URL`) and one a
//! fault test kills and starts again (`TEST_NATS_FAULT_*`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Role, Server, free_port, fresh_dir, wait_for_port, with_log};
use crate::run_quiet;

/// The shared server's URL (`nats://127.0.0.1:PORT`).
pub const TEST_NATS_URL: &str = "TEST_NATS_URL";
/// The fault-test server's URL; its config file (start it again with `nats-server -c CONF`),
/// its pid file (the running server's pid), and the `nats-server` program.
pub const TEST_NATS_FAULT_URL: &str = "TEST_NATS_FAULT_URL";
/// See [`TEST_NATS_FAULT_URL`].
pub const TEST_NATS_FAULT_CONF: &str = "TEST_NATS_FAULT_CONF";
/// See [`TEST_NATS_FAULT_URL`].
pub const TEST_NATS_FAULT_PID: &str = "TEST_NATS_FAULT_PID";
/// See [`TEST_NATS_FAULT_URL`].
pub const TEST_NATS_SERVER: &str = "TEST_NATS_SERVER";

/// One `nats-server -js`, started by xtask (a fault test may kill it and start another from
/// the same config, which writes the same pid file).
pub(super) struct Nats {
    role: Role,
    dir: PathBuf,
    bin: PathBuf,
    conf: PathBuf,
    pid_file: PathBuf,
    log: PathBuf,
    port: u16,
    child: Child,
}

fn nats_server_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin".into(), "/usr/bin".into()]); // Debian puts it in /usr/sbin
    dirs.into_iter()
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
}

/// Installs Debian's `nats-server` when missing; fails loudly when it cannot.
fn ensure_nats() -> Result<PathBuf, String> {
    if let Some(bin) = nats_server_bin() {
        return Ok(bin);
    }
    eprintln!("==> installing Debian's nats-server for messaging's bus tests");
    let apt = crate::needs::apt;
    let installed = run_quiet(
        "apt-get install nats-server",
        &mut apt(&["install", "-y", "-q", "nats-server"]),
    )
    .or_else(|_| {
        let _ = run_quiet("apt-get update", &mut apt(&["update", "-q"]));
        run_quiet(
            "apt-get install nats-server",
            &mut apt(&["install", "-y", "-q", "nats-server"]),
        )
    });
    if let Some(bin) = nats_server_bin() {
        return Ok(bin);
    }
    let why = installed.err().unwrap_or_default();
    Err(format!(
        "nats-server is needed by messaging's bus tests and could not be installed \
         (apt-get install nats-server){}{why}",
        if crate::ci() {
            "; CI=true, so this is a failure: "
        } else {
            "; install it and run again: "
        }
    ))
}

/// Whether process `pid` runs (not a zombie: a server xtask started and a test killed stays
/// one until xtask reaps it).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// The pid in `file`, when that process is alive.
fn running_pid(file: &Path) -> Option<u32> {
    let pid = std::fs::read_to_string(file)
        .ok()?
        .trim()
        .parse::<u32>()
        .ok()?;
    alive(pid).then_some(pid)
}

/// Stops the server whose pid `file` names: SIGTERM, then SIGKILL after 10 s.
fn stop_pid_file(file: &Path) -> Result<(), String> {
    let Some(pid) = running_pid(file) else {
        return Ok(()); // not running (a fault test may leave it so when it fails)
    };
    let _ = run_quiet(
        "kill nats-server",
        Command::new("kill").args(["-TERM", &pid.to_string()]),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if alive(pid) {
        run_quiet(
            "kill -KILL nats-server",
            Command::new("kill").args(["-KILL", &pid.to_string()]),
        )?;
    }
    Ok(())
}

impl Server for Nats {
    fn roles() -> &'static [Role] {
        &[Role::Shared, Role::Fault]
    }

    /// Starts one `nats-server -js`, listening on 127.0.0.1 only.
    fn start(role: Role) -> Result<Self, String> {
        let bin = ensure_nats()?;
        let kind = match role {
            Role::Shared => "nats",
            Role::Fault => "nats-fault",
        };
        let dir = fresh_dir(kind)?;
        let port = free_port()?;
        let pid_file = dir.join("nats.pid");
        let conf = dir.join("nats.conf");
        // No http/https monitoring port, no cluster, no leafnodes: only the client port on loopback.
        std::fs::write(
            &conf,
            format!(
                "listen: \"127.0.0.1:{port}\"\nserver_name: \"llmtk-test-{kind}\"\npid_file: {pid:?}\n\
                 jetstream {{\n  store_dir: {store:?}\n  max_memory_store: 64MB\n  max_file_store: 1GB\n}}\n",
                pid = pid_file.display().to_string(),
                store = dir.join("store").display().to_string(),
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
        let log = dir.join("nats.log");
        let log_file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        eprintln!(
            "==> starting nats-server (JetStream) on 127.0.0.1:{port} ({})",
            dir.display()
        );
        let child = Command::new(&bin)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("{}: could not start: {e}", bin.display()))?;
        Ok(Self {
            role,
            dir,
            bin,
            conf,
            pid_file,
            log,
            port,
            child,
        })
    }

    fn ready(&mut self) -> Result<(), String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        if wait_for_port(addr, Duration::from_secs(20)) {
            Ok(())
        } else {
            Err(with_log(
                format!("nats-server does not accept connections on {addr}"),
                &self.log,
            ))
        }
    }

    fn stop(&mut self) -> Result<(), String> {
        // The running server may be one a fault test started again: stop it by its pid file.
        let stopped = stop_pid_file(&self.pid_file);
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        stopped
    }

    fn reap(dir: &Path) {
        let _ = stop_pid_file(&dir.join("nats.pid"));
    }

    fn name(&self) -> &'static str {
        match self.role {
            Role::Shared => "nats-server",
            Role::Fault => "nats-server (fault tests)",
        }
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn env(&self) -> Vec<(String, String)> {
        let url = format!("nats://127.0.0.1:{}", self.port);
        match self.role {
            Role::Shared => vec![(TEST_NATS_URL.into(), url)],
            Role::Fault => vec![
                (TEST_NATS_FAULT_URL.into(), url),
                (TEST_NATS_FAULT_CONF.into(), self.conf.display().to_string()),
                (
                    TEST_NATS_FAULT_PID.into(),
                    self.pid_file.display().to_string(),
                ),
                (TEST_NATS_SERVER.into(), self.bin.display().to_string()),
            ],
        }
    }
}
