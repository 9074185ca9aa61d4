//! Servers the tests need, started privately for one run and stopped after (#27, #28):
//! PostgreSQL for context-engine's `PostgresStore` tests and nats-server (JetStream) for
//! messaging's bus tests (`services/nats.rs`), on 127.0.0.1; Arize Phoenix for the telemetry
//! crate's trace test, in a network namespace of its own (`services/phoenix.rs`). Each has a
//! directory of its own, runs as an unprivileged user when xtask is root where it can, is
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
mod phoenix; // nats-server (JetStream) for messaging's bus tests

/// The variable the PostgreSQL tests read: a superuser URL of the private cluster
/// (`postgres://postgres@127.0.0.1:PORT/postgres`). Not `DATABASE_URL`, so that a developer's
/// own database named there is never touched by the tests (they create and drop databases).
pub const TEST_DATABASE_URL: &str = "TEST_DATABASE_URL";

/// The variables of the second, private cluster that one test crashes and restarts
/// (`c4_postgres_server_crash_and_restart`): its URL, its data directory, its `pg_ctl`, and the
/// user to run `pg_ctl` as (empty: the current user).
pub const TEST_PG_FAULT_URL: &str = "TEST_PG_FAULT_URL";
/// See [`TEST_PG_FAULT_URL`].
pub const TEST_PG_FAULT_DATA: &str = "TEST_PG_FAULT_DATA";
/// See [`TEST_PG_FAULT_URL`].
pub const TEST_PG_FAULT_PG_CTL: &str = "TEST_PG_FAULT_PG_CTL";
/// See [`TEST_PG_FAULT_URL`].
pub const TEST_PG_FAULT_RUN_AS: &str = "TEST_PG_FAULT_RUN_AS";

/// Which PostgreSQL cluster: the one every test shares, or the one a fault test may crash.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cluster {
    Shared,
    Fault,
}

/// The account servers run as when xtask runs as root (PostgreSQL refuses to run as root);
/// Debian's `postgresql` package creates it.
const SERVICE_USER: &str = "postgres";

/// One running server.
struct Service {
    name: &'static str,
    env: Vec<(String, String)>,
    dir: PathBuf,
    stop: Box<dyn Fn() -> Result<(), String> + Send>,
}

/// The servers this process started, in start order. Global so that a signal can stop them
/// ([`watch_signals`]) as well as the [`Services`] guard's drop.
static RUNNING: Mutex<Vec<Service>> = Mutex::new(Vec::new());

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
                Need::Postgres => {
                    push(start_postgres(Cluster::Shared)?);
                    push(start_postgres(Cluster::Fault)?);
                }
                Need::Nats => {
                    push(nats::start(nats::Role::Shared)?);
                    push(nats::start(nats::Role::Fault)?);
                }
                Need::Phoenix => push(phoenix::start()?),
                Need::Bubblewrap | Need::McpServers | Need::Chromium => {}
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
            .flat_map(|s| s.env.clone())
            .collect()
    }
}

fn push(service: Service) {
    RUNNING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(service);
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
    for s in running.drain(..).rev() {
        eprintln!("==> stopping {}", s.name);
        if let Err(e) = (s.stop)() {
            eprintln!(
                "xtask: could not stop {}: {e} (files kept in {})",
                s.name,
                s.dir.display()
            );
            continue;
        }
        let _ = std::fs::remove_dir_all(&s.dir);
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
/// stops every server this process started, and exits with 128 + the signal's number (#40: a
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
            "usage: cargo xtask with-services CMD [ARGS…]   (e.g. cargo test -p context-engine)"
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

/// Where service `name` of this run keeps its files. Under the cargo target dir — unless xtask
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

/// A virtualenv of the project's: `NAME` in the toolkit cache ([`crate::toolkit_cache`]),
/// outside the clone, kept between runs.
pub(super) fn cache_venv(name: &str) -> PathBuf {
    crate::toolkit_cache().join(name)
}

/// The Python that makes virtualenvs: `$PYTHON`, else `python3`.
pub(super) fn system_python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Makes `venv` when it has no Python yet and runs `pip install ARGS` in it (`what` names the
/// install in an error, which carries pip's output).
pub(super) fn pip_install(
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

fn run_quiet(what: &str, cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
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
        phoenix::reap(&dir);
        nats::reap(&dir);
        if dir.join("data/postmaster.pid").exists()
            && let Some(bin) = postgres_bin_dir()
        {
            let _ = run_quiet(
                "pg_ctl stop (stale)",
                as_service_user(&bin.join("pg_ctl"))
                    .arg("stop")
                    .arg("-D")
                    .arg(dir.join("data"))
                    .args(["-m", "immediate", "-w"]),
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The newest `/usr/lib/postgresql/N/bin` with `initdb` (Debian's layout).
fn postgres_bin_dir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// Installs Debian's `postgresql` when its programs are missing; fails loudly when it cannot.
fn ensure_postgres() -> Result<PathBuf, String> {
    if let Some(bin) = postgres_bin_dir() {
        return Ok(bin);
    }
    eprintln!("==> installing Debian's postgresql for the session-store tests");
    let apt = crate::needs::apt;
    let _ = run_quiet("apt-get update", &mut apt(&["update", "-q"]));
    let installed = run_quiet(
        "apt-get install postgresql",
        &mut apt(&["install", "-y", "-q", "postgresql"]),
    );
    if let Some(bin) = postgres_bin_dir() {
        return Ok(bin);
    }
    let why = installed.err().unwrap_or_default();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    Err(format!(
        "PostgreSQL (initdb, pg_ctl) is needed by context-engine's PostgresStore tests and could not \
         be installed (apt-get install postgresql){}{why}",
        if ci {
            "; CI=true, so this is a failure: "
        } else {
            "; install it and run again: "
        }
    ))
}

/// initdb a private cluster, listening only on 127.0.0.1 at a free port (and a Unix socket in
/// its own directory), trust authentication for local connections only; start it.
fn start_postgres(cluster: Cluster) -> Result<Service, String> {
    let bin = ensure_postgres()?;
    let kind = match cluster {
        Cluster::Shared => "postgres",
        Cluster::Fault => "postgres-fault",
    };
    let dir = service_root().join(format!("{kind}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::write(dir.join("owner.pid"), std::process::id().to_string())
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    if is_root() {
        run_quiet(
            "chown the PostgreSQL directory",
            Command::new("chown")
                .args(["-R", &format!("{SERVICE_USER}:")])
                .arg(&dir),
        )
        .map_err(|e| format!("{e} (is Debian's `{SERVICE_USER}` user there?)"))?;
    }
    let data = dir.join("data");
    run_quiet(
        "initdb",
        as_service_user(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]),
    )?;
    // Only Unix-socket and 127.0.0.1 connections, and only those are trusted.
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhost all all 127.0.0.1/32 trust\n",
    )
    .map_err(|e| format!("cannot write pg_hba.conf: {e}"))?;
    let port = free_port()?;
    // A Unix socket path is limited to ~107 bytes; without room, TCP on 127.0.0.1 only.
    let socket_dir = if dir.as_os_str().len() < 80 {
        dir.display().to_string()
    } else {
        String::new()
    };
    // fsync off: a throwaway cluster; the tests kill clients, never this server's machine.
    let conf = format!(
        "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{socket_dir}'\n\
         max_connections = 300\nfsync = off\nfull_page_writes = off\n"
    );
    let mut pg_conf = std::fs::read_to_string(data.join("postgresql.conf"))
        .map_err(|e| format!("cannot read postgresql.conf: {e}"))?;
    pg_conf.push_str(&conf);
    std::fs::write(data.join("postgresql.conf"), pg_conf)
        .map_err(|e| format!("cannot write postgresql.conf: {e}"))?;
    let log = dir.join("postgres.log");
    let pg_ctl = bin.join("pg_ctl");
    eprintln!(
        "==> starting PostgreSQL on 127.0.0.1:{port} ({})",
        dir.display()
    );
    let started = run_quiet(
        "pg_ctl start",
        as_service_user(&pg_ctl)
            .arg("start")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60"]),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if let Err(e) = started.and_then(|()| {
        if wait_for_port(addr, Duration::from_secs(30)) {
            Ok(())
        } else {
            Err(format!("PostgreSQL does not accept connections on {addr}"))
        }
    }) {
        let tail = std::fs::read_to_string(&log).unwrap_or_default();
        return Err(format!("{e}\n--- {} ---\n{tail}", log.display()));
    }
    let stop_data = data.clone();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let env = match cluster {
        Cluster::Shared => vec![(TEST_DATABASE_URL.into(), url)],
        Cluster::Fault => vec![
            (TEST_PG_FAULT_URL.into(), url),
            (TEST_PG_FAULT_DATA.into(), data.display().to_string()),
            (TEST_PG_FAULT_PG_CTL.into(), pg_ctl.display().to_string()),
            (
                TEST_PG_FAULT_RUN_AS.into(),
                if is_root() {
                    SERVICE_USER.into()
                } else {
                    String::new()
                },
            ),
        ],
    };
    Ok(Service {
        name: match cluster {
            Cluster::Shared => "PostgreSQL",
            Cluster::Fault => "PostgreSQL (fault tests)",
        },
        env,
        dir,
        stop: Box::new(move || {
            if !stop_data.join("postmaster.pid").exists() {
                return Ok(()); // already stopped (a fault test may leave it so when it fails)
            }
            run_quiet(
                "pg_ctl stop",
                as_service_user(&pg_ctl)
                    .arg("stop")
                    .arg("-D")
                    .arg(&stop_data)
                    .args(["-m", "fast", "-w", "-t", "60"]),
            )
        }),
    })
}
