//! PostgreSQL for context-engine's `PostgresStore` tests: Debian's `postgresql`
//! (installed when missing), a private cluster made with `initdb` in the service's own directory,
//! listening only on 127.0.0.1 at a free port (and a Unix socket in that directory), trusting
//! local connections only. Two clusters: one the tests share (`TEST_DATABASE_URL`) and one a
//! fault test crashes and starts again (`TEST_PG_FAULT_*`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{
    Role, SERVICE_USER, Server, as_service_user, free_port, fresh_dir, wait_for_port, with_log,
};
use crate::is_root;
use crate::run_quiet;

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

/// One private cluster, started by `pg_ctl`.
pub(super) struct Postgres {
    role: Role,
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    pg_ctl: PathBuf,
    port: u16,
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
    Err(format!(
        "PostgreSQL (initdb, pg_ctl) is needed by context-engine's PostgresStore tests and could not \
         be installed (apt-get install postgresql){}{why}",
        if crate::ci() {
            "; CI=true, so this is a failure: "
        } else {
            "; install it and run again: "
        }
    ))
}

/// `pg_ctl stop -D DATA -m MODE -w` (as the service user when xtask is root).
fn pg_ctl_stop(
    what: &str,
    pg_ctl: &Path,
    data: &Path,
    mode: &str,
    timeout: &[&str],
) -> Result<(), String> {
    run_quiet(
        what,
        as_service_user(pg_ctl)
            .arg("stop")
            .arg("-D")
            .arg(data)
            .args(["-m", mode, "-w"])
            .args(timeout),
    )
}

impl Server for Postgres {
    fn roles() -> &'static [Role] {
        &[Role::Shared, Role::Fault]
    }

    /// initdb a private cluster, listening only on 127.0.0.1 at a free port (and a Unix socket
    /// in its own directory), trust authentication for local connections only; start it.
    fn start(role: Role) -> Result<Self, String> {
        let bin = ensure_postgres()?;
        let dir = fresh_dir(match role {
            Role::Shared => "postgres",
            Role::Fault => "postgres-fault",
        })?;
        if is_root() {
            run_quiet(
                "chown the PostgreSQL directory",
                std::process::Command::new("chown")
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
        run_quiet(
            "pg_ctl start",
            as_service_user(&pg_ctl)
                .arg("start")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60"]),
        )
        .map_err(|e| with_log(e, &log))?;
        Ok(Self {
            role,
            dir,
            data,
            log,
            pg_ctl,
            port,
        })
    }

    fn ready(&mut self) -> Result<(), String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        if wait_for_port(addr, Duration::from_secs(30)) {
            Ok(())
        } else {
            Err(with_log(
                format!("PostgreSQL does not accept connections on {addr}"),
                &self.log,
            ))
        }
    }

    fn stop(&mut self) -> Result<(), String> {
        if !self.data.join("postmaster.pid").exists() {
            return Ok(()); // already stopped (a fault test may leave it so when it fails)
        }
        pg_ctl_stop(
            "pg_ctl stop",
            &self.pg_ctl,
            &self.data,
            "fast",
            &["-t", "60"],
        )
    }

    fn reap(dir: &Path) {
        if dir.join("data/postmaster.pid").exists()
            && let Some(bin) = postgres_bin_dir()
        {
            let _ = pg_ctl_stop(
                "pg_ctl stop (stale)",
                &bin.join("pg_ctl"),
                &dir.join("data"),
                "immediate",
                &[],
            );
        }
    }

    fn name(&self) -> &'static str {
        match self.role {
            Role::Shared => "PostgreSQL",
            Role::Fault => "PostgreSQL (fault tests)",
        }
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn env(&self) -> Vec<(String, String)> {
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        match self.role {
            Role::Shared => vec![(TEST_DATABASE_URL.into(), url)],
            Role::Fault => vec![
                (TEST_PG_FAULT_URL.into(), url),
                (TEST_PG_FAULT_DATA.into(), self.data.display().to_string()),
                (
                    TEST_PG_FAULT_PG_CTL.into(),
                    self.pg_ctl.display().to_string(),
                ),
                (
                    TEST_PG_FAULT_RUN_AS.into(),
                    if is_root() {
                        SERVICE_USER.into()
                    } else {
                        String::new()
                    },
                ),
            ],
        }
    }
}
