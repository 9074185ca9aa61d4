//! Servers the tests need, started privately for one run and stopped after, one
//! module each, all in one shape ([`Server`]: start, ready, stop; and reap, for what a killed
//! run left): PostgreSQL for context-engine's `PostgresStore` tests (`postgres.rs`) and
//! nats-server (JetStream) for messaging's bus tests (`nats.rs`), on 127.0.0.1; Arize Phoenix
//! for the telemetry crate's trace test, in a network namespace of its own (`phoenix.rs`). Each
//! has a directory of its own, runs as an unprivileged user when xtask is root where it can, is
//! exported to the tests through environment variables and is stopped when the [`Services`]
//! guard is dropped (on success, failure or panic).
//!
//! `cargo xtask test` starts them around `cargo test --workspace`;
//! `cargo xtask with-services CMD ARGS…` runs any command with them (e.g. one crate's tests).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use crate::is_root;
use crate::needs::Need;

mod nats;
mod phoenix;
mod postgres;

use nats::Nats;
use phoenix::Phoenix;
use postgres::Postgres;

/// Which of a kind's servers: the one every test shares, or the one a fault test may crash,
/// kill and start again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Shared,
    Fault,
}

/// One kind of server the tests need. [`Services`] runs each the same way: `start`, then
/// `ready` (on failure, `stop`), and `stop` when the run ends or a signal comes; `reap` stops
/// what a run killed outright left behind.
trait Server: Send {
    /// The roles this kind runs in, each a server of its own, started in this order.
    fn roles() -> &'static [Role]
    where
        Self: Sized;

    /// Installs what is missing, makes the server's files in a fresh directory of its own
    /// ([`fresh_dir`]) and launches it, without waiting for it to take connections.
    fn start(role: Role) -> Result<Self, String>
    where
        Self: Sized;

    /// Waits until the server is ready for the tests; an error carries its log.
    fn ready(&mut self) -> Result<(), String>;

    /// Stops the server. One that already stopped (a fault test may leave it so) is no error.
    fn stop(&mut self) -> Result<(), String>;

    /// Stops this kind's server that a killed earlier run left in `dir`, if any (every stale
    /// directory is offered to every kind).
    fn reap(dir: &Path)
    where
        Self: Sized;

    /// Its name in xtask's output.
    fn name(&self) -> &'static str;

    /// Its directory, removed once it has stopped.
    fn dir(&self) -> &Path;

    /// The variables that tell the tests where it is.
    fn env(&self) -> Vec<(String, String)>;
}

/// The account servers run as when xtask runs as root (PostgreSQL refuses to run as root);
/// Debian's `postgresql` package creates it.
const SERVICE_USER: &str = "postgres";

/// The servers this process started, in start order. Global so that a signal can stop them
/// ([`watch_signals`]) as well as the [`Services`] guard's drop.
static RUNNING: Mutex<Vec<Box<dyn Server>>> = Mutex::new(Vec::new());

/// The servers of one run; dropping this stops them (in reverse order) and removes their files.
/// So does SIGINT, SIGTERM or SIGHUP to xtask (Ctrl-C, CI's time limit), and a later run stops
/// what a run killed by SIGKILL left ([`reap_stale`]).
pub struct Services {
    _private: (),
}

impl Services {
    /// Starts the servers among `needs` (PostgreSQL, NATS, Phoenix; the rest are installed by
    /// [`crate::needs::ensure`]).
    pub fn start(needs: &[Need]) -> Result<Self, String> {
        watch_signals();
        reap_stale();
        // Made first, so a server that fails to start stops those started before it.
        let services = Self { _private: () };
        for need in needs {
            match need {
                Need::Postgres => launch::<Postgres>()?,
                Need::Nats => launch::<Nats>()?,
                Need::Phoenix => launch::<Phoenix>()?,
                Need::Bubblewrap | Need::McpServers | Need::Chromium | Need::LiteLlmProxy => {}
            }
        }
        Ok(services)
    }

    /// The variables that tell the tests where the servers are.
    pub fn env(&self) -> Vec<(String, String)> {
        RUNNING
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flat_map(|s| s.env())
            .collect()
    }
}

/// Starts kind `S`'s servers, each ready before the next starts; one that does not become
/// ready is stopped (its directory kept, with its log, for the next run to clear).
fn launch<S: Server + 'static>() -> Result<(), String> {
    for &role in S::roles() {
        let mut server = S::start(role)?;
        if let Err(e) = server.ready() {
            let _ = server.stop();
            return Err(e);
        }
        RUNNING
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(server));
    }
    Ok(())
}

impl Drop for Services {
    fn drop(&mut self) {
        wait_if_stopping();
        stop_all();
    }
}

/// Set by [`watch_signals`] when a signal came: from then on only its thread stops the servers
/// and ends the process (with 128 + the signal's number).
static STOPPING: AtomicBool = AtomicBool::new(false);

/// When a signal is being handled, waits for its thread to end the process: the command it
/// killed makes the main thread return at the same moment, and it must neither stop the
/// servers beside that thread nor exit first with its own status.
pub fn wait_if_stopping() {
    if STOPPING.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// Stops every server this process started, newest first, and removes their files.
fn stop_all() {
    let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    for mut s in running.drain(..).rev() {
        eprintln!("==> stopping {}", s.name());
        if let Err(e) = s.stop() {
            eprintln!(
                "xtask: could not stop {}: {e} (files kept in {})",
                s.name(),
                s.dir().display()
            );
            continue;
        }
        let _ = std::fs::remove_dir_all(s.dir());
    }
}

/// The process groups of the commands xtask is waiting for. Commands run in a group of
/// their own, so that a signal xtask gets reaches all of a command's processes (cargo, the test
/// binaries, their children) exactly once, through [`watch_signals`].
static CHILD_GROUPS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// The process groups of the commands running now (a stage's installs run beside its build).
fn groups() -> std::sync::MutexGuard<'static, Vec<u32>> {
    CHILD_GROUPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `cmd` to its end in a process group of its own, which a signal to xtask is passed on to.
pub fn status_in_own_group(cmd: &mut Command) -> std::io::Result<std::process::ExitStatus> {
    use std::os::unix::process::CommandExt;
    watch_signals();
    let mut child = cmd.process_group(0).spawn()?;
    let group = child.id();
    groups().push(group);
    let status = child.wait();
    groups().retain(|g| *g != group);
    status
}

/// On SIGINT, SIGTERM or SIGHUP: passes the signal on to the running command's process group,
/// stops every server this process started, and exits with 128 + the signal's number (a
/// `cargo xtask test` ended by a time limit left PostgreSQL and Phoenix running for as long as
/// the machine lived). Installed once; before it, a signal ends xtask as usual.
pub fn watch_signals() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "xtask: cannot watch for signals ({e}); servers a killed run leaves are stopped by the next run"
                );
                return;
            }
        };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                STOPPING.store(true, Ordering::SeqCst);
                eprintln!("\nxtask: got signal {signal}: stopping what it started");
                for group in groups().clone() {
                    let _ = Command::new("kill")
                        .args([&format!("-{signal}"), "--", &format!("-{group}")])
                        .status();
                }
                stop_all();
                std::process::exit(128 + signal);
            }
        });
    });
}

/// `cargo xtask with-services CMD ARGS…`: runs one command with the test servers up.
pub fn run_with(cmd: &[String]) -> Result<(), String> {
    let Some((program, args)) = cmd.split_first() else {
        return Err(
            "usage: cargo xtask with-services CMD [ARGS…]   (e.g. cargo test -p toolwright-context-engine)"
                .into(),
        );
    };
    let services = Services::start(&crate::needs::all())?;
    let status = status_in_own_group(Command::new(program).args(args).envs(services.env()))
        .map_err(|e| format!("{program}: could not start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} failed ({status})"))
    }
}

/// Where the servers of this run keep their files. Under the cargo target dir — unless xtask
/// is root: the service user could not reach a directory under root's home, so then under the
/// system's temporary directory.
fn service_root() -> PathBuf {
    if is_root() {
        std::env::temp_dir().join("llm-toolkit-services")
    } else {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| super::root().join("target"));
        target.join("services")
    }
}

/// A fresh directory for server `kind` of this run (`KIND-PID` under [`service_root`]), with
/// an `owner.pid` that tells a later run whether its owner is gone ([`reap_stale`]).
fn fresh_dir(kind: &str) -> Result<PathBuf, String> {
    let dir = service_root().join(format!("{kind}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::write(dir.join("owner.pid"), std::process::id().to_string())
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    Ok(dir)
}

/// `error` followed by the server's log, for the operator to see why.
fn with_log(error: String, log: &Path) -> String {
    let tail = std::fs::read_to_string(log).unwrap_or_default();
    format!("{error}\n--- {} ---\n{tail}", log.display())
}

/// A loopback port nobody listens on now.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// Waits until something accepts connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// `program` run as the service user when xtask is root, else as is.
fn as_service_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", SERVICE_USER, "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Stops servers a killed earlier run left behind (their owner process is gone).
fn reap_stale() {
    let Ok(entries) = std::fs::read_dir(service_root()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let owner = std::fs::read_to_string(dir.join("owner.pid")).unwrap_or_default();
        let alive = owner
            .trim()
            .parse::<u32>()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if alive {
            continue;
        }
        Phoenix::reap(&dir);
        Nats::reap(&dir);
        Postgres::reap(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
