//! # process-guard — child processes that cannot outlive their owner
//!
//! The OS boundary of the toolkit in one place, shared by `mcp-bridge` (MCP servers) and
//! `skills` (sandboxed skill runs). Linux only.
//!
//! A child started through [`spawn`]:
//! * runs in its **own process group** (so [`kill_group`] ends it and every child that stayed in
//!   the group: `npx` → `node`);
//! * is a **child subreaper** (`PR_SET_CHILD_SUBREAPER`, kept across `exec`): a descendant
//!   orphaned while the child lives — a double fork, a `setsid()` daemon, node's
//!   `detached: true` — is re-parented to the child, not to PID 1, so the child's process tree
//!   holds *everything* it started;
//! * carries a **marker** in its environment (`PROCESS_GUARD=<token>`), inherited by its
//!   descendants, so one that escaped anyway (its subreaper died first) is still found;
//! * when this process runs with `CAP_SYS_PTRACE` (root), loses the capabilities that read other
//!   processes' memory from its bounding set ([`DROPPED_CAPABILITIES`]), so — together with
//!   [`protect_this_process`] — it cannot read this process's `/proc/PID/environ` or memory.
//!
//! [`ProcessGuard::sweep`] (and dropping the guard, and [`ProcessGuard::terminate`]) freezes
//! that whole set with `SIGSTOP` — rescanning until nothing new appears, so nothing forks past
//! the sweep — and then `SIGKILL`s it: the group, the tree, and every marked process.
//!
//! Why a subreaper and a sweep rather than a PID namespace or a cgroup: they need no privilege
//! and no delegated cgroup (this works for an unprivileged agent and inside containers whose
//! `/sys/fs/cgroup` is read-only), and the server stays an ordinary process (not PID 1 of a
//! namespace, which ignores default-action signals and must reap zombies). What it does not
//! cover is listed on [`ProcessGuard`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolwright_process_guard::GuardError> {
//! use std::time::Duration;
//! let mut cmd = tokio::process::Command::new("sh");
//! cmd.arg("-c").arg("setsid sleep 600 & sleep 600");
//! let (mut child, guard) = toolwright_process_guard::spawn(&mut cmd)?;
//! // … later: SIGTERM to the group, 2 s grace, then everything it started is killed.
//! guard.terminate(&mut child, Duration::from_secs(2)).await;
//! # Ok(()) }
//! ```

mod procfs;
mod sys;

use std::collections::HashMap;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// The environment variable that marks a guarded child and its descendants.
pub const MARKER_VAR: &str = "PROCESS_GUARD";

/// The capabilities a guarded child loses when this process has `CAP_SYS_PTRACE` (in practice:
/// runs as root): `CAP_SYS_PTRACE`, `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`, `CAP_SYS_ADMIN`,
/// `CAP_SYS_BOOT`, `CAP_PERFMON`, `CAP_BPF` — the ways into another process's memory.
pub const DROPPED_CAPABILITIES: [&str; 7] = [
    sys::DROPPED_CAPS[0].1,
    sys::DROPPED_CAPS[1].1,
    sys::DROPPED_CAPS[2].1,
    sys::DROPPED_CAPS[3].1,
    sys::DROPPED_CAPS[4].1,
    sys::DROPPED_CAPS[5].1,
    sys::DROPPED_CAPS[6].1,
];

const CAP_SYS_PTRACE: libc::c_ulong = 19;

/// What went wrong, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// The command could not be started.
    #[error("cannot start `{program}`: {source}; check that it exists and is executable")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The child exited before its pid could be read.
    #[error("`{program}` exited at once; run it by hand to see why")]
    ExitedAtOnce {
        /// The program.
        program: String,
    },
    /// A process attribute could not be set.
    #[error("{what} failed: {source}")]
    Prctl {
        /// Which call.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE = 0`): its `/proc/PID/environ`, `mem`,
/// `maps` and file descriptors become readable, and it becomes attachable with `ptrace`, only
/// by a process with `CAP_SYS_PTRACE` — not by other processes of the same user, and not by a
/// child started with [`spawn`] (which loses that capability). Also turns off core dumps of
/// this process. Idempotent. `exec` resets it for children, so they stay dumpable.
///
/// ```
/// toolwright_process_guard::protect_this_process()?;
/// assert!(!toolwright_process_guard::is_dumpable());
/// # Ok::<(), toolwright_process_guard::GuardError>(())
/// ```
pub fn protect_this_process() -> Result<(), GuardError> {
    sys::set_dumpable(false).map_err(|source| GuardError::Prctl {
        what: "prctl(PR_SET_DUMPABLE, 0)",
        source,
    })
}

/// Whether this process is dumpable (see [`protect_this_process`]).
pub fn is_dumpable() -> bool {
    sys::dumpable()
}

/// Sends `SIGKILL` to process group `pgid`. A group that is already gone is not an error;
/// `pgid` 0 or 1 (this process's own group, init) is refused and does nothing.
///
/// ```
/// // a group that does not exist: nothing happens
/// toolwright_process_guard::kill_group(999_999_999);
/// ```
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    signal_group(pgid, Signal::SIGKILL);
}

fn signal_group(pgid: i32, sig: Signal) {
    if let Err(e) = killpg(Pid::from_raw(pgid), sig)
        && e != Errno::ESRCH
    {
        tracing::warn!(pgid, "killpg({sig}) failed: {e}");
    }
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Starts `cmd` contained (see the crate docs): its own process group, a child subreaper, the
/// [`MARKER_VAR`] marker in its environment, and — when this process has `CAP_SYS_PTRACE` —
/// without [`DROPPED_CAPABILITIES`]. Set up stdio, environment and `kill_on_drop` on `cmd` as
/// you like before; this overrides the process group and adds a `pre_exec` hook.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolwright_process_guard::GuardError> {
/// let mut cmd = tokio::process::Command::new("sleep");
/// cmd.arg("60");
/// let (_child, guard) = toolwright_process_guard::spawn(&mut cmd)?;
/// assert_eq!(guard.pgid(), guard.pid());
/// drop(guard); // kills it and everything it started
/// # Ok(()) }
/// ```
pub fn spawn(
    cmd: &mut tokio::process::Command,
) -> Result<(tokio::process::Child, ProcessGuard), GuardError> {
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let marker = format!(
        "{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    cmd.env(MARKER_VAR, &marker).process_group(0);
    sys::install(cmd.as_std_mut(), sys::has_effective_cap(CAP_SYS_PTRACE));
    let child = cmd.spawn().map_err(|source| GuardError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or(GuardError::ExitedAtOnce { program })?;
    Ok((
        child,
        ProcessGuard {
            pid,
            marker: format!("{MARKER_VAR}={marker}"),
            armed: true,
        },
    ))
}

/// Everything a child started with [`spawn`] started. Dropping the guard runs
/// [`sweep`](Self::sweep): no path — a panic in the caller, a dropped owner — leaves a process
/// behind.
///
/// Not covered: a descendant that *both* cleared its environment (losing the marker) *and*
/// outlived the guarded child itself (the subreaper holding it) before the sweep — it is
/// re-parented to PID 1 and unknown to the guard; and a process that is not a descendant at all
/// (one the child asked another service, such as systemd or a container runtime, to start).
/// Killed processes whose parent died are reaped by PID 1; where PID 1 does not reap, they stay
/// zombies (dead, holding no memory) until it does.
#[derive(Debug)]
pub struct ProcessGuard {
    pid: i32,
    marker: String,
    armed: bool,
}

impl ProcessGuard {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// The child's process group id (= its pid).
    pub fn pgid(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// The `KEY=value` marker entry in the child's environment.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// The live processes the guard holds besides the child itself: its group, its process
    /// tree and every process carrying its marker. Zombies are not counted.
    pub fn members(&self) -> Vec<u32> {
        let table = procfs::all();
        let mut out: Vec<u32> = self
            .victims(&table, &HashMap::new())
            .into_iter()
            .filter(|p| p.pid != self.pid && p.state != b'Z')
            .map(|p| p.pid.unsigned_abs())
            .collect();
        out.sort_unstable();
        out
    }

    /// The group, the tree, the marked processes, and `known` (pid → start time) still alive.
    fn victims(
        &self,
        table: &[procfs::ProcInfo],
        known: &HashMap<i32, u64>,
    ) -> Vec<procfs::ProcInfo> {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let tree = procfs::descendants(table, self.pid);
        table
            .iter()
            .filter(|p| p.pid > 1 && p.pid != me)
            .filter(|p| {
                p.pid == self.pid
                    || p.pgid == self.pid
                    || tree.contains(&p.pid)
                    || known.get(&p.pid) == Some(&p.start)
                    || (p.state != b'Z' && procfs::environ_has(p.pid, &self.marker))
            })
            .copied()
            .collect()
    }

    /// Kills everything the guard holds, the child included: freezes each process with
    /// `SIGSTOP` (rescanning until a scan finds nothing new, so no fork slips past), then
    /// `SIGKILL`s them all and the group. Returns how many processes were killed. Synchronous
    /// and quick (a few scans of `/proc`); safe to call more than once.
    pub fn sweep(&mut self) -> usize {
        self.sweep_with(&HashMap::new())
    }

    fn sweep_with(&mut self, known: &HashMap<i32, u64>) -> usize {
        let mut frozen: HashMap<i32, u64> = HashMap::new();
        for _ in 0..64 {
            let table = procfs::all();
            let mut new = 0;
            for p in self.victims(&table, known) {
                if p.state == b'Z' || frozen.get(&p.pid) == Some(&p.start) {
                    continue;
                }
                if kill(Pid::from_raw(p.pid), Signal::SIGSTOP).is_ok() {
                    frozen.insert(p.pid, p.start);
                    new += 1;
                }
            }
            if new == 0 {
                break;
            }
        }
        let mut killed = 0;
        for (pid, start) in &frozen {
            // the same process (pid and start time), not a new one that reused the pid
            if procfs::info(*pid).is_some_and(|p| p.start == *start)
                && kill(Pid::from_raw(*pid), Signal::SIGKILL).is_ok()
            {
                killed += 1;
            }
        }
        signal_group(self.pid, Signal::SIGKILL);
        if killed > 1 {
            tracing::info!(
                pid = self.pid,
                killed,
                "process-guard: killed a child and the processes it started"
            );
        }
        self.armed = false;
        killed
    }

    /// Ends the child politely, then everything: `SIGTERM` to its group and to the rest of its
    /// tree, up to `grace` for the child to exit, then [`sweep`](Self::sweep), then reaps the
    /// child. Returns its exit status when it could be read.
    pub async fn terminate(
        mut self,
        child: &mut tokio::process::Child,
        grace: Duration,
    ) -> Option<ExitStatus> {
        // Who is there now: once the child exits, its tree is re-parented and no longer found
        // by walking from it.
        let table = procfs::all();
        let mut known = HashMap::new();
        for p in self.victims(&table, &HashMap::new()) {
            if p.state == b'Z' {
                continue;
            }
            known.insert(p.pid, p.start);
            if p.pgid != self.pid {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGTERM);
            }
        }
        signal_group(self.pid, Signal::SIGTERM);
        let status = tokio::time::timeout(grace, child.wait()).await.ok();
        self.sweep_with(&known);
        match status {
            Some(Ok(s)) => Some(s),
            _ => child.wait().await.ok(),
        }
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        if self.armed {
            self.sweep();
        }
    }
}
