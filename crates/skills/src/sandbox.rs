//! Running one skill call in a sandbox.
//!
//! Threat model: the operator (who builds the [`SandboxConfig`]) is trusted; the skill's author
//! and the model choosing its arguments are not. A skill asks (`env`, `timeout_secs`), the
//! operator's configuration grants. See `docs/skills.md`.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, path_beneath_rules,
};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::container::{Bwrap, Layout, Scratch};
use crate::manifest::is_plain_relative;
use crate::seccomp;
use crate::sys::{self, ChildSetup, LimitKind};
use crate::{Skill, SkillLoadError};

/// What the operator grants one skill beyond the global grants of [`SandboxConfig`].
///
/// ```
/// use skills::{SandboxConfig, SkillGrant};
/// use std::time::Duration;
/// let cfg = SandboxConfig::default().with_skill_grant(
///     "weather",
///     SkillGrant::default().with_env("WEATHER_API_KEY").with_max_timeout(Duration::from_secs(90)),
/// );
/// assert_eq!(cfg.grants["weather"].env, ["WEATHER_API_KEY"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SkillGrant {
    /// Environment variables this skill may receive (when it asks for them in `env`).
    pub env: Vec<String>,
    /// The longest time limit this skill may ask for (instead of [`SandboxConfig::max_timeout`]).
    pub max_timeout: Option<Duration>,
}

impl SkillGrant {
    /// Grants one more environment variable.
    pub fn with_env(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }
    /// Sets this skill's longest time limit.
    pub fn with_max_timeout(mut self, t: Duration) -> Self {
        self.max_timeout = Some(t);
        self
    }
}

/// Limits, grants and switches of the sandbox: the operator's side of the threat model.
///
/// ```
/// use skills::SandboxConfig;
/// use std::time::Duration;
/// let cfg = SandboxConfig::default().with_timeout(Duration::from_secs(5)).with_max_processes(16);
/// assert_eq!(cfg.output_limit, 1024 * 1024);
/// assert!(cfg.env.is_empty(), "no variable of the agent reaches a skill unless granted");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// Wall-clock limit of a call whose skill asks for none.
    pub timeout: Duration,
    /// The longest wall-clock limit a skill may ask for with `timeout_secs` (a longer request is
    /// cut to it); a [`SkillGrant`] may set another for one skill.
    pub max_timeout: Duration,
    /// Environment variables of the agent any skill may receive when it asks for them.
    pub env: Vec<String>,
    /// Per-skill grants, by skill name.
    pub grants: BTreeMap<String, SkillGrant>,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Address space in bytes (RLIMIT_AS).
    pub memory_bytes: u64,
    /// Largest file the skill may write (RLIMIT_FSIZE).
    pub file_size_bytes: u64,
    /// Total bytes of everything a call writes (`/work`, `/tmp`, `/dev/shm` together, as root;
    /// each of them without root).
    pub disk_bytes: u64,
    /// Total files and directories a call may create (as root).
    pub disk_inodes: u64,
    /// Processes of the sandbox user (RLIMIT_NPROC; enforced only when running as a
    /// dedicated uid, see [`Protections`]).
    pub max_processes: u64,
    /// Open files (RLIMIT_NOFILE).
    pub max_open_files: u64,
    /// Bytes kept from stdout, and from stderr; more is an error.
    pub output_limit: usize,
    /// Allow network access (default: no network).
    pub allow_network: bool,
    /// Allow skills to create user namespaces (default: refused by seccomp).
    pub allow_user_namespaces: bool,
    /// Run each call in a bubblewrap container (default: on). Where `bwrap` is missing or
    /// cannot make a container, calls are refused unless
    /// [`allow_without_container`](Self::allow_without_container) is set; turning this off
    /// chooses the weaker boundary deliberately.
    pub container: bool,
    /// Run calls under the weaker boundary (Landlock, seccomp, rlimits; PID, IPC and network
    /// namespaces as root or where the kernel allows user namespaces; no mount namespace) when a
    /// container cannot be made here, instead of refusing them (default: off).
    pub allow_without_container: bool,
    /// Run calls even where no PID namespace can be made either (no container, no root, and the
    /// kernel refuses user namespaces), so that a skill can discover and signal-probe the host's
    /// processes (default: off, such calls are refused). Accepting the weaker boundary
    /// ([`Self::allow_without_container`]) does not accept this: it is asked for by itself.
    pub allow_host_pids: bool,
    /// The `bwrap` to use (default: `/usr/bin/bwrap`, `/usr/local/bin/bwrap` or `/bin/bwrap`).
    pub bwrap_path: Option<PathBuf>,
    /// More host paths shown read-only in the container (e.g. `/opt/tools`).
    pub read_only_paths: Vec<PathBuf>,
    /// When the agent runs as root, skills run as uids from this range (one per concurrent call).
    pub uid_range: (u32, u32),
    /// Where the per-call directories are made (default: `/dev/shm` as root where it is a tmpfs
    /// — only mount points are made there, each call's files are on a tmpfs of its own —, else
    /// the system temp dir). As root it must be reachable (searchable) by the sandbox uids:
    /// `/tmp` and `/dev/shm` are.
    pub temp_root: Option<PathBuf>,
    /// How many skills may each have one container made ahead of time for their next call
    /// (default 4; 0: every call makes its container when it starts). A container made ahead
    /// serves exactly one call — its own uid, tmpfs and namespaces — and waits, with nothing of
    /// the skill running, until a call takes it. Each holds a sandbox uid while it waits.
    pub ready_containers: usize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(60),
            env: Vec::new(),
            grants: BTreeMap::new(),
            cpu_seconds: 30,
            memory_bytes: 1 << 30,
            file_size_bytes: 16 << 20,
            disk_bytes: 64 << 20,
            disk_inodes: 4096,
            max_processes: 64,
            max_open_files: 128,
            output_limit: 1 << 20,
            allow_network: false,
            allow_user_namespaces: false,
            container: true,
            allow_without_container: false,
            allow_host_pids: false,
            bwrap_path: None,
            read_only_paths: Vec::new(),
            uid_range: (400_000, 401_000),
            temp_root: None,
            ready_containers: 4,
        }
    }
}

impl SandboxConfig {
    /// Set the wall-clock limit of calls whose skill asks for none.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    /// Set the longest wall-clock limit a skill may ask for.
    pub fn with_max_timeout(mut self, t: Duration) -> Self {
        self.max_timeout = t;
        self
    }
    /// Grant an environment variable to every skill that asks for it.
    pub fn with_env_grant(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }
    /// Set what one skill is granted.
    pub fn with_skill_grant(mut self, skill: impl Into<String>, grant: SkillGrant) -> Self {
        self.grants.insert(skill.into(), grant);
        self
    }
    /// Set the process limit.
    pub fn with_max_processes(mut self, n: u64) -> Self {
        self.max_processes = n;
        self
    }
    /// Set the output limit.
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }
    /// Set the memory limit.
    pub fn with_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }
    /// Set the disk limits of one call: total bytes and files.
    pub fn with_disk(mut self, bytes: u64, inodes: u64) -> Self {
        self.disk_bytes = bytes;
        self.disk_inodes = inodes;
        self
    }
    /// Turn the bubblewrap container on or off.
    pub fn with_container(mut self, on: bool) -> Self {
        self.container = on;
        self
    }
    /// Accept the weaker boundary (no container) where bubblewrap is missing or cannot make a
    /// container, instead of refusing every call.
    pub fn allow_without_container(mut self, on: bool) -> Self {
        self.allow_without_container = on;
        self
    }
    /// Accept calls where even a PID namespace cannot be made (the kernel refuses user
    /// namespaces and the agent is not root): a skill can then discover the host's pids. Off
    /// by default: such calls are refused ([`Protections::refused`] says why and what to do).
    pub fn allow_host_pids(mut self, on: bool) -> Self {
        self.allow_host_pids = on;
        self
    }
    /// Set how many skills may have a container made ahead of time (0: none).
    pub fn with_ready_containers(mut self, n: usize) -> Self {
        self.ready_containers = n;
        self
    }
}

/// Which protections are in force on this machine. Everything in the "always" group holds
/// everywhere; the rest depends on root, on bubblewrap and on the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Protections {
    /// The bubblewrap version when each call runs in its own container (new mount, IPC, PID,
    /// UTS and user namespaces); `None` otherwise, see [`Protections::container_error`].
    pub container: Option<String>,
    /// Why there is no container (bwrap missing, or it could not make a container here).
    pub container_error: Option<String>,
    /// A new mount namespace whose root shows only read-only system directories, the skill
    /// (read-only) and private tmpfs for `/work`, `/tmp`, `/dev/shm`: no host file or socket
    /// path resolves inside.
    pub mount_namespace: bool,
    /// A new IPC namespace: System V objects and POSIX message queues die with the call.
    pub ipc_namespace: bool,
    /// A new PID namespace: the skill sees and signals only its own processes, and all of them
    /// die with it. Without a container: as root, or in a user namespace of the call's own
    /// where the kernel allows one (else see [`Protections::namespaces_error`]).
    pub pid_namespace: bool,
    /// Without a container and without root: why the call's PID, IPC and network namespaces
    /// cannot be made (the kernel refuses user namespaces to this user, e.g.
    /// `sysctl user.max_user_namespaces=0` or an AppArmor rule); the host's pids are then
    /// discoverable by a skill. `None` when they are made, or not needed (container, root).
    pub namespaces_error: Option<String>,
    /// Skills run as a dedicated uid (the agent is root): process limits apply and leftovers of
    /// a call are found and killed by uid (in a container, by its PID namespace instead: no
    /// process of the call can be outside it).
    pub dedicated_uid: bool,
    /// Network cut off: a new, empty network namespace (container, root, or a user namespace of
    /// the call's own without root) or Landlock TCP rules (ABI ≥ 4).
    pub no_network: bool,
    /// Containers share one empty network namespace, made once by the sandbox (a loopback
    /// device, down: no address at all), instead of one made per call (root, container, no
    /// network, Landlock ABI ≥ 6). What a namespace per call kept apart between calls is kept
    /// apart by [`Protections::only_unix_sockets`] and
    /// [`Protections::abstract_unix_sockets_scoped`]; see `docs/skills.md`.
    pub shared_network_namespace: bool,
    /// `socket()` of every family but `AF_UNIX` is refused by seccomp, and io_uring with it: no
    /// IP, netlink or packet socket can be made (container without network).
    pub only_unix_sockets: bool,
    /// A call cannot connect to an abstract unix socket made outside its own call: each call is
    /// a Landlock domain of its own, scoped (`LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET`, ABI ≥ 6).
    pub abstract_unix_sockets_scoped: bool,
    /// Total bytes and files a call may write (`disk_bytes`, `disk_inodes`), when enforced for
    /// all its writable directories together (root: one size- and inode-limited tmpfs).
    pub disk_total: Option<(u64, u64)>,
    /// Host unix sockets cannot be reached: no host path in the mount namespace, or (without a
    /// container and without network) `socket(AF_UNIX)` refused by seccomp.
    pub host_sockets_unreachable: bool,
    /// Creating a user namespace is refused (seccomp, and bwrap's `--disable-userns`).
    pub user_namespaces_refused: bool,
    /// Landlock ABI in force (filesystem confined to the call's directory plus read-only system
    /// directories) when there is no container, or `None` (container, or no Landlock).
    pub landlock_abi: Option<i64>,
    /// Always: wall-clock timeout with process-group kill, CPU/memory/file/open-file limits,
    /// granted environment only, descriptors above 2 closed, kernel keyrings refused, fresh
    /// working directory, capped output.
    pub base: bool,
    /// Set when every call is refused: a container was asked for, none can be made here, and
    /// the weaker boundary was not accepted ([`SandboxConfig::allow_without_container`]); or
    /// without a container not even a PID namespace can be made and host pids were not
    /// accepted ([`SandboxConfig::allow_host_pids`]). Says what to do and which option accepts
    /// the weaker boundary.
    pub refused: Option<String>,
}

impl std::fmt::Display for Protections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "on" } else { "OFF" };
        if let Some(why) = &self.refused {
            write!(f, "CALLS REFUSED: {why}; ")?;
        }
        match (&self.container, &self.container_error) {
            (Some(v), _) => write!(f, "container: {v} (mount, IPC, PID namespaces)")?,
            (None, Some(e)) => write!(f, "container: OFF ({e})")?,
            (None, None) => write!(f, "container: OFF")?,
        }
        write!(
            f,
            "; private filesystem: {}; IPC namespace: {}; PID namespace: {}{}; dedicated uid (process limit, leftover sweep): {}; no network: {}{}; only unix sockets: {}; abstract unix sockets scoped to the call: {}; disk total: {}; host unix sockets unreachable: {}; user namespaces refused: {}; landlock filesystem: {}; always: timeout+group kill, rlimits, granted env only, inherited fds closed, keyrings refused, fresh dir, capped output",
            yes(self.mount_namespace),
            yes(self.ipc_namespace),
            yes(self.pid_namespace),
            self.namespaces_error
                .as_deref()
                .map_or_else(String::new, |e| format!(" ({e})")),
            yes(self.dedicated_uid),
            yes(self.no_network),
            if self.shared_network_namespace {
                " (one empty network namespace shared by the calls)"
            } else {
                ""
            },
            yes(self.only_unix_sockets),
            yes(self.abstract_unix_sockets_scoped),
            self.disk_total.map_or_else(
                || "OFF (per-file limit only)".to_owned(),
                |(b, i)| format!("{} MiB, {i} files", b >> 20)
            ),
            yes(self.host_sockets_unreachable),
            yes(self.user_namespaces_refused),
            match (self.landlock_abi, self.mount_namespace) {
                (Some(v), _) => format!("on (ABI {v})"),
                (None, true) => "not used (the container is the filesystem boundary)".to_owned(),
                (None, false) => "OFF".to_owned(),
            },
        )
    }
}

/// Why a skill call failed; the message is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// The call ran past its wall-clock limit; every process of it was killed.
    #[error("skill {name} timed out after {secs} s and was stopped")]
    Timeout {
        /// Skill name.
        name: String,
        /// The limit in seconds.
        secs: u64,
    },
    /// The skill wrote more than the output limit.
    #[error("skill {name}: {stream} output exceeded {limit}; the skill was stopped")]
    OutputTooLarge {
        /// Skill name.
        name: String,
        /// "stdout" or "stderr".
        stream: &'static str,
        /// The limit, in words ("1 MiB").
        limit: String,
    },
    /// The skill exited with an error or was killed by a limit.
    #[error("skill {name} failed: {reason}")]
    Failed {
        /// Skill name.
        name: String,
        /// Exit status and the end of its stderr.
        reason: String,
    },
    /// The skill's stdout was not JSON.
    #[error("skill {name} printed output that is not JSON ({error}): {head}")]
    NotJson {
        /// Skill name.
        name: String,
        /// The parser's complaint.
        error: String,
        /// The start of what it printed.
        head: String,
    },
    /// The sandbox refuses calls: no container can be made on this machine and the operator
    /// did not accept the weaker boundary ([`Protections::refused`]).
    #[error("skill {name} was not run: {reason}")]
    Refused {
        /// Skill name.
        name: String,
        /// What to install, and the option that accepts the weaker boundary.
        reason: String,
    },
    /// An interactive call was ended by its handler ([`FrameReply::Stop`]); the program was
    /// killed.
    #[error("skill {name} was stopped: {reason}")]
    Stopped {
        /// Skill name.
        name: String,
        /// The handler's reason.
        reason: String,
    },
    /// The sandbox could not be set up (a host problem, not the skill's).
    #[error("skill {name} could not be started: {reason}")]
    Spawn {
        /// Skill name.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

/// Runs skills, one sandboxed child process per call.
///
/// With bubblewrap, the container of a skill's next call is made ahead of time, right after a
/// call of that skill starts (see [`SandboxConfig::ready_containers`]): making it — namespaces,
/// mounts, the uid lease, the call's tmpfs — is then off the next call's path. Dropping the
/// sandbox kills every container it made ahead of time.
pub struct Sandbox {
    protections: Protections,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("config", &self.shared.config)
            .field("protections", &self.protections)
            .field("ready", &self.ready())
            .finish()
    }
}

/// What calls and the containers made ahead of time share.
struct Shared {
    config: SandboxConfig,
    bwrap: Option<Bwrap>,
    root: bool,
    /// Landlock is used (no container, kernel has it).
    landlock: bool,
    /// The empty network namespace every container joins (see
    /// [`Protections::shared_network_namespace`]); `None`: each makes its own, or has network.
    shared_net: Option<std::os::fd::OwnedFd>,
    /// The container's seccomp program as bwrap reads it, compiled once.
    container_filter: Vec<u8>,
    /// The seccomp program installed directly when there is no container, compiled once.
    fallback_filter: Vec<libc::sock_filter>,
    /// Without a container and without root, where the kernel allows it: the maps of the user
    /// namespace each call makes its PID, IPC and network namespaces in.
    user_maps: Option<sys::IdMaps>,
    /// Containers made ahead of time, oldest first, at most one per skill.
    ready: Mutex<Vec<Ready>>,
    /// Containers being made ahead right now, each with the call waiting to take it, if any.
    making: Mutex<Vec<Making>>,
    /// Set when the sandbox is dropped: nothing more is made ahead.
    closed: AtomicBool,
    /// Bumped by [`Sandbox::stop_ready`]: a container whose making began before is not kept.
    generation: AtomicU64,
    /// Calls served by a container made ahead of time (waiting, or handed over when made).
    served_ahead: AtomicU64,
    /// Calls that made their own container (or, without one, their own process).
    made_on_call: AtomicU64,
}

/// What a call runs: the skill and the environment it is granted, as they are when the call
/// (or the container made ahead for it) starts. A container made ahead is used only by a call
/// with the same key.
#[derive(Debug, Clone, PartialEq)]
struct CallKey {
    name: String,
    dir: PathBuf,
    entry: Vec<String>,
    env: Vec<(String, std::ffi::OsString)>,
}

/// A container being made ahead of time. A call of the same key that finds none ready waits
/// for this one instead of making its own: calls back to back would otherwise each make a
/// container while the previous call's is being made, both slower for sharing the CPU.
struct Making {
    key: CallKey,
    /// The call that waits for it; dropped (the call makes its own) if the making fails.
    taker: Option<tokio::sync::oneshot::Sender<Ready>>,
}

/// A started call: its process (bwrap, or the skill itself without a container) and its host
/// side.
struct Started {
    child: tokio::process::Child,
    guard: CallGuard,
}

/// A container made ahead of time, waiting (bwrap's `--block-fd`) before it runs the skill.
struct Ready {
    key: CallKey,
    started: Option<Started>,
    /// A byte written here lets the container run the skill.
    go: Option<std::io::PipeWriter>,
}

impl Ready {
    /// Whether bwrap is still waiting (it has not died, e.g. of a host problem).
    fn alive(&mut self) -> bool {
        self.started
            .as_mut()
            .is_some_and(|s| matches!(s.child.try_wait(), Ok(None)))
    }

    /// Lets the container run the skill, and hands the call over.
    fn go(mut self) -> std::io::Result<Started> {
        let mut go = self
            .go
            .take()
            .ok_or_else(|| std::io::Error::other("no start pipe"))?;
        std::io::Write::write_all(&mut go, b"x")?;
        drop(go);
        self.started
            .take()
            .ok_or_else(|| std::io::Error::other("already started"))
    }
}

/// A container that no call took is killed before its start pipe is closed: bwrap reads the
/// closed pipe as "go", so closing it first would run the skill without a call. The outer
/// bwrap is killed and reaped (its death kills the inner one, `--die-with-parent`), then the
/// pipe is closed, then the host side is swept and removed (`CallGuard`).
impl Drop for Ready {
    fn drop(&mut self) {
        if let Some(mut s) = self.started.take() {
            if let Some(pgid) = s.guard.pgid {
                sys::kill_group(pgid);
            }
            let _ = s.child.start_kill();
            for _ in 0..1000 {
                match s.child.try_wait() {
                    Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                    _ => break,
                }
            }
            drop(self.go.take());
            drop(s);
        }
    }
}

fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

fn tail(s: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(s);
    let t = text.trim();
    let start = t.char_indices().rev().nth(n).map_or(0, |(i, _)| i);
    t[start..].to_owned()
}

/// The host side of one call: its uid lease, its directory (and the mounts on it).
struct CallHost {
    ids: Option<(u32, u32)>,
    /// Kill every process of `ids` when done (the uid sweep). Not needed in a container: the
    /// skill is PID 1 of its PID namespace, and when it dies the kernel kills everything else in
    /// the namespace; no process of the call can be outside it (bwrap's own process outside it
    /// is the call's child, killed and reaped before the host side is cleaned up).
    sweep: bool,
    /// Released (unlocked) when dropped, after the sweep.
    lease: Option<std::fs::File>,
    dir: Option<tempfile::TempDir>,
    /// Mount points to detach, innermost first.
    mounts: Vec<PathBuf>,
}

/// Kills what is left of the call, then unmounts and removes its directory. Blocking: runs on a
/// blocking thread (see `CallGuard`), or wherever the value is dropped.
impl Drop for CallHost {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.ids.filter(|_| self.sweep) {
            sys::kill_uid(uid, gid);
        }
        for m in self.mounts.drain(..) {
            if let Err(e) = sys::unmount(&m) {
                tracing::warn!(mount = %m.display(), error = %e, "cannot unmount a skill call's directory");
            }
        }
        drop(self.dir.take());
        drop(self.lease.take());
    }
}

/// Cleans a call up even when its future is dropped midway.
struct CallGuard {
    pgid: Option<u32>,
    host: Option<CallHost>,
}

impl CallGuard {
    /// Kills the call's process group and cleans up its host side off the async threads.
    async fn finish(mut self) {
        if let Some(pgid) = self.pgid.take() {
            sys::kill_group(pgid);
        }
        if let Some(host) = self.host.take() {
            let _ = tokio::task::spawn_blocking(move || drop(host)).await;
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            sys::kill_group(pgid);
        }
        if let Some(host) = self.host.take() {
            match tokio::runtime::Handle::try_current() {
                // Should the runtime be shutting down, the task is dropped unrun and `host` is
                // cleaned up where it is dropped: either way it is cleaned up.
                Ok(rt) => {
                    rt.spawn_blocking(move || drop(host));
                }
                Err(_) => drop(host),
            }
        }
    }
}

/// The files and directories of `skill` that a uid which neither owns them nor is in their
/// group cannot read (files: `o+r`; directories: `o+rx`; an entry program of the skill: `o+rx`),
/// each as a rejection saying the `chmod` to run. Links are followed to no other place (the
/// loader allows only links within the skill, whose targets are checked themselves).
fn unreadable_by_others(skill: &Skill) -> Vec<SkillLoadError> {
    use std::os::unix::fs::PermissionsExt;
    let program = skill
        .entry
        .first()
        .filter(|w| is_plain_relative(w))
        .map(|w| skill.dir.join(w));
    let mut out = Vec::new();
    let mut stack = vec![skill.dir.clone()];
    let mut seen = 0usize;
    while let Some(path) = stack.pop() {
        seen += 1;
        if seen > crate::MAX_SKILL_DIR_ENTRIES + 1 || out.len() >= 20 {
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o7777;
        let (need, what, fix) = if meta.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&path) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
            (0o005, "directory", "o+rx")
        } else if meta.is_file() {
            if program.as_deref() == Some(path.as_path()) {
                (0o005, "entry program", "o+rx")
            } else {
                (0o004, "file", "o+r")
            }
        } else {
            continue;
        };
        if mode & need != need {
            out.push(SkillLoadError::rejected_dir(
                &path,
                format!(
                    "this {what} of skill {} is not readable by the sandbox's uid (mode {mode:04o}): calls run as a uid of their own, neither its owner nor in its group; fix: chmod {fix} {} (or chmod -R o+rX {})",
                    skill.name,
                    path.display(),
                    skill.dir.display()
                ),
            ));
        }
    }
    out
}

/// What `prepare` made for one call.
struct Prepared {
    host: CallHost,
    /// Entry words, files of the skill pointing at the skill as the skill sees it.
    words: Vec<String>,
    /// The working directory, `/work` in a container.
    work: PathBuf,
    /// The skill's directory as the skill sees it.
    skill_dir: PathBuf,
    /// The call's directory a container binds (root).
    scratch_host: Option<PathBuf>,
    /// The skill's directory on the host that is shown to the skill.
    skill_host: PathBuf,
    /// `/etc/ld.so.cache`, open, for the container to copy (where there is one).
    ld_cache: Option<std::fs::File>,
}

/// Everything `prepare` needs, owned (it runs on a blocking thread).
struct PrepareInput {
    skill_dir: PathBuf,
    entry: Vec<String>,
    temp_root: Option<PathBuf>,
    root: bool,
    container: bool,
    uid_range: (u32, u32),
    disk: (u64, u64),
}

/// The default place of the call directories as root, where it is a tmpfs: making and removing
/// a directory there touches no disk (on ext4 `/tmp` it was ~2 % of a loop's CPU, journal and
/// discards). Each call's files are on its own size-limited tmpfs mounted on its directory.
const SHM: &str = "/dev/shm";

fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// Leases a uid for one call. The lease is an exclusive `flock` on a file per uid, so two
/// sandboxes — in this process or in another agent on the machine — never share a uid (the
/// sweep after a call kills every process of its uid).
fn take_uid((lo, hi): (u32, u32)) -> Option<(u32, std::fs::File)> {
    let dir = std::env::temp_dir().join("llm-toolkit-skill-uids");
    std::fs::create_dir_all(&dir).ok()?;
    // Calls take turns through the range (a uid just swept is not the next one leased).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let span = hi.saturating_sub(lo).max(1);
    let turn = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start = (std::process::id().wrapping_mul(2_654_435_761)).wrapping_add(turn) % span;
    (0..span).map(|i| lo + (start + i) % span).find_map(|uid| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(uid.to_string()))
            .ok()?;
        file.try_lock().ok()?;
        Some((uid, file))
    })
}

/// Makes the host side of a call. Layouts:
/// - root: `DIR` is its own tmpfs (size- and inode-limited) holding `work`, `tmp` (owned by the
///   call's uid) and `skill` (a read-only bind of the skill's directory, so no byte is copied
///   and no mode changes); with a container also `dev` (root's: the device nodes and links of
///   the container's `/dev`, and `shm`, the call's), without one `shm`;
/// - container without root: nothing on the host (bwrap makes the tmpfs mounts);
/// - neither: `DIR/work`, and the skill's directory as it is (Landlock keeps it read-only).
fn prepare(p: PrepareInput) -> Result<Prepared, String> {
    let (ids, lease) = if p.root {
        let (uid, lease) = take_uid(p.uid_range)
            .ok_or("every sandbox uid is in use: too many concurrent skill calls")?;
        (Some((uid, uid)), Some(lease))
    } else {
        (None, None)
    };
    let mut host = CallHost {
        ids,
        sweep: !p.container,
        lease,
        dir: None,
        mounts: Vec::new(),
    };
    let inside = p.container;
    let needs_dir = p.root || !p.container;
    let mut scratch_host = None;
    let mut skill_host = p.skill_dir.clone();
    let mut work = PathBuf::from("/work");
    if needs_dir {
        let mut builder = tempfile::Builder::new();
        builder.prefix("skill-call-");
        let dir = match &p.temp_root {
            Some(root) => builder.tempdir_in(root),
            None if p.root && sys::is_tmpfs(Path::new(SHM)) => builder.tempdir_in(SHM),
            None => builder.tempdir(),
        }
        .map_err(|e| format!("cannot make a call directory: {e}"))?;
        let d = dir.path().to_path_buf();
        host.dir = Some(dir);
        if let Some((uid, gid)) = ids {
            // Device nodes work on it only in a container, whose `/dev` is here.
            sys::mount_tmpfs(&d, p.disk.0, p.disk.1, inside)
                .map_err(|e| format!("cannot mount the call's tmpfs on {}: {e}", d.display()))?;
            host.mounts.push(d.clone());
            let shm = if inside {
                make_dev(&d.join("dev"))?;
                "dev/shm"
            } else {
                "shm"
            };
            for sub in ["work", "tmp", shm] {
                let s = d.join(sub);
                std::fs::create_dir(&s)
                    .and_then(|()| std::os::unix::fs::chown(&s, Some(uid), Some(gid)))
                    .and_then(|()| set_mode(&s, 0o700))
                    .map_err(|e| format!("cannot make {}: {e}", s.display()))?;
            }
            let sk = d.join("skill");
            std::fs::create_dir(&sk).map_err(|e| format!("cannot make {}: {e}", sk.display()))?;
            sys::bind_read_only(&p.skill_dir, &sk)
                .map_err(|e| format!("cannot mount the skill on {}: {e}", sk.display()))?;
            host.mounts.insert(0, sk.clone());
            skill_host = sk;
            scratch_host = Some(d.clone());
            if !inside {
                work = d.join("work");
            }
        } else {
            work = d.join("work");
            std::fs::create_dir(&work)
                .map_err(|e| format!("cannot make {}: {e}", work.display()))?;
            set_mode(&work, 0o700).map_err(|e| e.to_string())?;
        }
    }
    let skill_dir = if inside {
        PathBuf::from("/skill")
    } else {
        skill_host.clone()
    };
    // Words of the entry that name a file of the skill (`run.py`, `./bin/tool`) point into the
    // skill as the skill sees it; everything else (`python3`, flags) is passed as written.
    let words = p
        .entry
        .iter()
        .map(|w| {
            if is_plain_relative(w) && p.skill_dir.join(w).is_file() {
                skill_dir.join(w).to_string_lossy().into_owned()
            } else {
                w.clone()
            }
        })
        .collect();
    Ok(Prepared {
        host,
        words,
        work,
        skill_dir,
        scratch_host,
        skill_host,
        ld_cache: inside
            .then(|| std::fs::File::open(crate::container::LD_CACHE).ok())
            .flatten(),
    })
}

/// Makes `dev`, the container's `/dev`, in the call's directory (root): root's, 0755, so the
/// call cannot change it; the device nodes of bwrap's `--dev` (0666, as on the host) and its
/// links to `/proc/self/fd`. (The call's `shm` is made in it after.)
fn make_dev(dev: &Path) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot make {}: {e}", dev.display());
    std::fs::create_dir(dev)
        .and_then(|()| set_mode(dev, 0o755))
        .map_err(fail)?;
    for (name, major, minor) in crate::container::DEVICES {
        sys::make_char_device(&dev.join(name), major, minor, 0o666).map_err(fail)?;
    }
    for (name, target) in crate::container::DEV_LINKS {
        std::os::unix::fs::symlink(target, dev.join(name)).map_err(fail)?;
    }
    Ok(())
}

impl Sandbox {
    /// A sandbox with these limits and grants. Finds bubblewrap and checks, by running one empty
    /// container, that it works here; logs which protections are in force on this machine.
    /// Blocking (tens of milliseconds): call it at start-up, or through `spawn_blocking`.
    pub fn new(config: SandboxConfig) -> Self {
        let root = sys::euid() == 0;
        let landlock = sys::landlock_abi();
        let policy = seccomp::Policy {
            allow_user_namespaces: config.allow_user_namespaces,
            deny_unix_sockets: false,
            only_unix_sockets: !config.allow_network,
        };
        // One empty network namespace for every container instead of one per call (its making
        // and teardown were ~12 % of a loop's CPU), where what the per-call namespace kept apart
        // can be kept apart otherwise: abstract unix sockets scoped to the call (Landlock ABI
        // ≥ 6), every other socket family refused (seccomp). Root: it joins it before bwrap.
        let mut shared_net = None;
        if config.container && root && !config.allow_network && landlock.is_some_and(|v| v >= 6) {
            match sys::empty_network_namespace() {
                Ok(fd) => shared_net = Some(fd),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot make the shared empty network namespace: each call makes its own");
                }
            }
        }
        let (bwrap, container_error) = if !config.container {
            (None, Some("turned off in SandboxConfig".to_owned()))
        } else {
            let probe = Bwrap::find(config.bwrap_path.as_deref()).and_then(|b| {
                let lease = if root {
                    take_uid(config.uid_range)
                } else {
                    None
                };
                let ids = lease.as_ref().map(|(u, _)| (*u, *u));
                if root && ids.is_none() {
                    return Err("no free sandbox uid to check bubblewrap with".to_owned());
                }
                // With the shared network namespace (and the call's Landlock domain) first; where
                // that cannot make a container, each call makes its own network namespace.
                let shared = shared_net.as_ref().and_then(|fd| {
                    let tried = scope_ruleset().and_then(|scope| {
                        b.probe(ids, policy, false, Some(fd.as_raw_fd()), Some(scope))
                    });
                    if let Err(e) = &tried {
                        tracing::warn!(error = %e, "containers cannot share the empty network namespace here: each call makes its own");
                    }
                    tried.ok()
                });
                if shared.is_none() {
                    shared_net = None;
                    b.probe(ids, policy, !config.allow_network, None, None)?;
                }
                if let Some((uid, gid)) = ids {
                    sys::kill_uid(uid, gid);
                }
                Ok(b)
            });
            match probe {
                Ok(b) => (Some(b), None),
                Err(e) => (None, Some(e)),
            }
        };
        let container = bwrap.is_some();
        if !container {
            shared_net = None;
        }
        let refused =
            (config.container && !container && !config.allow_without_container).then(|| {
                format!(
                    "the skills sandbox cannot make a container here ({}). Install bubblewrap \
                 (`apt-get install bubblewrap` on Debian/Ubuntu, `dnf install bubblewrap` on \
                 Fedora), or accept the weaker boundary (Landlock and seccomp, no mount \
                 namespace) with SandboxConfig::allow_without_container(true)",
                    container_error.as_deref().unwrap_or("no bubblewrap")
                )
            });
        // Without a container, root makes the call's namespaces directly; any other user in a
        // user namespace of the call's own, checked here once (the kernel may refuse them).
        let (user_maps, namespaces_error) = if container || root || refused.is_some() {
            (None, None)
        } else {
            let maps = sys::IdMaps::own();
            match sys::probe_user_namespace(&maps, !config.allow_network) {
                Ok(()) => (Some(maps), None),
                Err(e) => (None, Some(e)),
            }
        };
        let own_namespaces = !container && (root || user_maps.is_some());
        // Without a container and without namespaces of its own, a skill sees the host's pids:
        // refused unless the operator accepted exactly that (#42).
        let refused = refused.or_else(|| {
            (!container && !own_namespaces && !config.allow_host_pids).then(|| {
                format!(
                    "the skills sandbox cannot hide the host's processes here: no container, and                      no PID namespace ({}). Install bubblewrap (`apt-get install bubblewrap`), run                      the agent as root, or let this user make user namespaces (`sysctl                      user.max_user_namespaces=15000`, `kernel.unprivileged_userns_clone=1`); or                      accept that a skill can see the host's pids with                      SandboxConfig::allow_host_pids(true)",
                    namespaces_error
                        .as_deref()
                        .unwrap_or("the kernel refuses user namespaces")
                )
            })
        });
        let protections = Protections {
            container: bwrap.as_ref().map(|b| b.version.clone()),
            container_error,
            mount_namespace: container,
            ipc_namespace: container || own_namespaces,
            pid_namespace: container || own_namespaces,
            namespaces_error,
            dedicated_uid: root,
            no_network: !config.allow_network
                && (container || own_namespaces || landlock.is_some_and(|v| v >= 4)),
            shared_network_namespace: shared_net.is_some(),
            only_unix_sockets: container && !config.allow_network,
            abstract_unix_sockets_scoped: shared_net.is_some(),
            disk_total: root.then_some((config.disk_bytes, config.disk_inodes)),
            host_sockets_unreachable: container || !config.allow_network,
            user_namespaces_refused: !config.allow_user_namespaces,
            landlock_abi: if container { None } else { landlock },
            base: true,
            refused,
        };
        let ready_ahead = if container {
            config.ready_containers
        } else {
            0
        };
        if container {
            tracing::info!(%protections, ready_ahead, "skills sandbox ready");
        } else if protections.refused.is_some() {
            tracing::error!(%protections, "skills sandbox refuses calls: no container");
        } else if protections.namespaces_error.is_some() {
            tracing::warn!(%protections, "skills sandbox ready without a container and without a PID namespace (user namespaces refused): fewer protections, a skill can discover the host's pids");
        } else {
            tracing::warn!(%protections, "skills sandbox ready without a container: fewer protections");
        }
        let shared = Shared {
            container_filter: seccomp::to_bytes(&seccomp::program(policy)),
            fallback_filter: seccomp::program(seccomp::Policy {
                allow_user_namespaces: config.allow_user_namespaces,
                deny_unix_sockets: !config.allow_network,
                only_unix_sockets: false,
            }),
            shared_net,
            landlock: protections.landlock_abi.is_some(),
            user_maps,
            config,
            bwrap,
            root,
            ready: Mutex::new(Vec::new()),
            making: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            served_ahead: AtomicU64::new(0),
            made_on_call: AtomicU64::new(0),
        };
        Self {
            protections,
            shared: Arc::new(shared),
        }
    }

    /// Starts making the container of `key`'s next call, unless one is (being) made already.
    fn make_next(&self, key: &CallKey) {
        if self.shared.bwrap.is_some()
            && self.shared.config.ready_containers > 0
            && self.shared.begin_making(key)
        {
            let generation = self.shared.generation.load(Ordering::Acquire);
            tokio::spawn(make_ready(
                Arc::clone(&self.shared),
                key.clone(),
                generation,
            ));
        }
    }

    /// How calls got their container so far: `(made ahead of time, made by the call)`. A call
    /// right after another of the same skill takes the container being made for it, so in a
    /// loop of calls only the first makes its own.
    pub fn containers_used(&self) -> (u64, u64) {
        (
            self.shared.served_ahead.load(Ordering::Relaxed),
            self.shared.made_on_call.load(Ordering::Relaxed),
        )
    }

    /// The protections in force.
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.shared.config
    }

    /// How many containers started ahead of time are waiting for a call (each for one skill;
    /// bwrap may still be making some of them).
    pub fn ready(&self) -> usize {
        self.shared.lock_ready().len()
    }

    /// Whether a container was started ahead of time for the next call of `skill` (with the
    /// environment granted to it now). bwrap may still be making it: a call that takes it then
    /// waits for the rest.
    pub fn is_ready(&self, skill: &Skill) -> bool {
        let key = self.key(skill);
        self.shared.lock_ready().iter().any(|r| r.key == key)
    }

    /// Kills the containers made ahead of time, and those being made (a call of their skill
    /// makes them again), e.g. after the skills on disk changed. Blocking for a few
    /// milliseconds per container.
    pub fn stop_ready(&self) {
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        let all = std::mem::take(&mut *self.shared.lock_ready());
        drop(all);
    }

    /// The wall-clock limit of a call of `skill`: what it asks for (or the default), cut to the
    /// operator's cap for it.
    pub fn timeout_for(&self, skill: &Skill) -> Duration {
        let cap = self
            .shared
            .config
            .grants
            .get(&skill.name)
            .and_then(|g| g.max_timeout)
            .unwrap_or(self.shared.config.max_timeout);
        skill.timeout.unwrap_or(self.shared.config.timeout).min(cap)
    }

    fn is_granted(&self, skill: &Skill, var: &str) -> bool {
        self.shared.config.env.iter().any(|v| v == var)
            || self
                .shared
                .config
                .grants
                .get(&skill.name)
                .is_some_and(|g| g.env.iter().any(|v| v == var))
    }

    /// The environment variables `skill` asks for that the operator granted.
    pub fn granted_env<'s>(&self, skill: &'s Skill) -> Vec<&'s str> {
        skill
            .env
            .iter()
            .filter(|v| self.is_granted(skill, v))
            .map(String::as_str)
            .collect()
    }

    /// What `skill` asks for and will not get, as load reports with file and line: each
    /// ungranted variable, a time limit above the cap ([`crate::LoadOutcome::Restricted`]);
    /// and, when calls run as a dedicated uid (the agent is root), each file or directory of
    /// the skill that uid could not read, with the `chmod` that fixes it
    /// ([`crate::LoadOutcome::Rejected`]: its calls could not work).
    pub fn check_requests(&self, skill: &Skill) -> Vec<SkillLoadError> {
        let mut out = Vec::new();
        if self.protections.dedicated_uid {
            out.extend(unreadable_by_others(skill));
        }
        for (i, var) in skill.env.iter().enumerate() {
            if !self.is_granted(skill, var) {
                out.push(SkillLoadError::restricted(
                    &skill.file,
                    skill.env_line(i),
                    format!(
                        "env: {var} is not granted to skill {}, so it will not be passed; if the skill should have it, grant it in SandboxConfig (env, or grants[\"{}\"].env)",
                        skill.name, skill.name
                    ),
                ));
            }
        }
        if let Some(asked) = skill.timeout {
            let given = self.timeout_for(skill);
            if asked > given {
                out.push(SkillLoadError::restricted(
                    &skill.file,
                    skill.timeout_line(),
                    format!(
                        "timeout_secs {} is above the {} s the operator allows, so calls stop after {} s; to allow more, raise SandboxConfig max_timeout or grants[\"{}\"].max_timeout",
                        asked.as_secs_f64(),
                        given.as_secs_f64(),
                        given.as_secs_f64(),
                        skill.name
                    ),
                ));
            }
        }
        out
    }

    fn key(&self, skill: &Skill) -> CallKey {
        CallKey {
            name: skill.name.clone(),
            dir: skill.dir.clone(),
            entry: skill.entry.clone(),
            env: self
                .granted_env(skill)
                .into_iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (k.to_owned(), v)))
                .collect(),
        }
    }

    /// Runs `skill` with `args` on stdin and returns the JSON it printed. The call's time limit
    /// counts from here, whether its container was made ahead of time or is made now.
    pub async fn run(&self, skill: &Skill, args: &Value) -> Result<Value, SkillError> {
        let timeout = self.timeout_for(skill);
        let deadline = tokio::time::Instant::now() + timeout;
        let name = skill.name.clone();
        let (mut child, guard, key) = self.begin(skill).await?;
        let container = self.shared.bwrap.is_some();

        let input = serde_json::to_vec(args).unwrap_or_default();
        if let Some(mut stdin) = child.stdin.take() {
            // A skill that does not read its input is fine: ignore a broken pipe.
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
            });
        }
        let limit = self.shared.config.output_limit;
        let (over_tx, mut over_rx) = tokio::sync::mpsc::channel::<&'static str>(2);
        let out = tokio::spawn(read_capped(
            child.stdout.take(),
            limit,
            "stdout",
            over_tx.clone(),
        ));
        let err = tokio::spawn(read_capped(child.stderr.take(), limit, "stderr", over_tx));

        let outcome = tokio::select! {
            status = child.wait() => Ok(status),
            _ = tokio::time::sleep_until(deadline) => Err(SkillError::Timeout { name: name.clone(), secs: timeout.as_secs().max(1) }),
            Some(stream) = over_rx.recv() => Err(SkillError::OutputTooLarge { name: name.clone(), stream, limit: human_bytes(limit) }),
        };
        self.end(&mut child, guard, &key).await;
        let (stdout, stderr) = (collect(out).await, collect(err).await);
        // A skill that hit the cap usually dies of the closed pipe (EPIPE) at the same moment, so
        // its exit can win the race above: the cap, recorded by the reader, is the real cause.
        let outcome = match (outcome, over_rx.try_recv()) {
            (Ok(_), Ok(stream)) => Err(SkillError::OutputTooLarge {
                name: name.clone(),
                stream,
                limit: human_bytes(limit),
            }),
            (outcome, _) => outcome,
        };
        let status = outcome?.map_err(|e| SkillError::Spawn {
            name: name.clone(),
            reason: format!("wait: {e}"),
        })?;
        if let Some(reason) = failure(status, &stderr, container) {
            return Err(SkillError::Failed { name, reason });
        }
        serde_json::from_slice(&stdout).map_err(|e| SkillError::NotJson {
            name,
            error: e.to_string(),
            head: tail(&stdout[..stdout.len().min(200)], 200),
        })
    }

    /// Runs `skill` as a conversation: `input` goes to its stdin as one JSON line; then every
    /// line it prints on stdout is a *frame* (one JSON value) given to `handler`, whose
    /// [`FrameReply::Answer`] is written back to its stdin as one JSON line, until the program
    /// exits. `Ok(())` when it exits with status 0.
    ///
    /// The sandbox is the same as for [`Sandbox::run`] — one container per call, the same
    /// limits — and the call's time limit covers the whole conversation, the handler's work
    /// included. All of stdout over the call (frames) counts against
    /// [`SandboxConfig::output_limit`], as does stderr. A line that is not JSON ends the call
    /// ([`SkillError::NotJson`]); [`FrameReply::Stop`] ends it ([`SkillError::Stopped`]).
    ///
    /// ```no_run
    /// # async fn demo(sandbox: &skills::Sandbox, skill: &skills::Skill) -> Result<(), skills::SkillError> {
    /// use serde_json::{json, Value};
    /// use skills::{FrameHandler, FrameReply};
    /// /// Answers every `{"add": [a, b]}` frame with the sum.
    /// struct Adder;
    /// #[async_trait::async_trait]
    /// impl FrameHandler for Adder {
    ///     async fn frame(&mut self, frame: Value) -> FrameReply {
    ///         let a = frame["add"][0].as_i64().unwrap_or(0);
    ///         let b = frame["add"][1].as_i64().unwrap_or(0);
    ///         FrameReply::Answer(json!(a + b))
    ///     }
    /// }
    /// sandbox.run_interactive(skill, &json!({"start": 1}), &mut Adder).await
    /// # }
    /// ```
    pub async fn run_interactive(
        &self,
        skill: &Skill,
        input: &Value,
        handler: &mut (dyn FrameHandler + '_),
    ) -> Result<(), SkillError> {
        let timeout = self.timeout_for(skill);
        let deadline = tokio::time::Instant::now() + timeout;
        let name = skill.name.clone();
        let (mut child, guard, key) = self.begin(skill).await?;
        let container = self.shared.bwrap.is_some();
        let limit = self.shared.config.output_limit;
        let (over_tx, mut over_rx) = tokio::sync::mpsc::channel::<&'static str>(2);
        let err = tokio::spawn(read_capped(child.stderr.take(), limit, "stderr", over_tx));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();

        let outcome = tokio::select! {
            r = async {
                // Ended early (stopped, a bad frame, too much): killed below, not waited for.
                match converse(stdin, stdout, input, handler, limit).await {
                    Ok(()) => Ok(child.wait().await),
                    Err(ended) => Err(ended),
                }
            } => Ok(r),
            _ = tokio::time::sleep_until(deadline) => Err(SkillError::Timeout { name: name.clone(), secs: timeout.as_secs().max(1) }),
            Some(stream) = over_rx.recv() => Err(SkillError::OutputTooLarge { name: name.clone(), stream, limit: human_bytes(limit) }),
        };
        self.end(&mut child, guard, &key).await;
        let stderr = collect(err).await;
        let status = match outcome? {
            Ok(status) => status,
            Err(Ended::Stopped(reason)) => return Err(SkillError::Stopped { name, reason }),
            Err(Ended::TooLarge) => {
                return Err(SkillError::OutputTooLarge {
                    name,
                    stream: "stdout",
                    limit: human_bytes(limit),
                });
            }
            Err(Ended::NotJson { error, head }) => {
                return Err(SkillError::NotJson { name, error, head });
            }
        };
        if let Ok(stream) = over_rx.try_recv() {
            return Err(SkillError::OutputTooLarge {
                name,
                stream,
                limit: human_bytes(limit),
            });
        }
        let status = status.map_err(|e| SkillError::Spawn {
            name: name.clone(),
            reason: format!("wait: {e}"),
        })?;
        match failure(status, &stderr, container) {
            Some(reason) => Err(SkillError::Failed { name, reason }),
            None => Ok(()),
        }
    }

    /// Takes (or makes) the container of a call of `skill` and lets it run the skill.
    async fn begin(
        &self,
        skill: &Skill,
    ) -> Result<(tokio::process::Child, CallGuard, CallKey), SkillError> {
        if let Some(reason) = &self.protections.refused {
            return Err(SkillError::Refused {
                name: skill.name.clone(),
                reason: reason.clone(),
            });
        }
        let spawn_err = |reason: String| SkillError::Spawn {
            name: skill.name.clone(),
            reason,
        };
        let key = self.key(skill);
        // Whether this call came while its container was still being made: calls of the skill
        // in a loop. Then the next one's making starts now, beside this call, not after it.
        let mut in_a_loop = false;
        let ready = match self.shared.take_ready(&key) {
            Some(ready) => Some(ready),
            // One is being made for this skill: take it when it is ready (sooner than making
            // another), or, if its making fails, make our own.
            None => match self.shared.wait_for_making(&key) {
                Some(handover) => {
                    in_a_loop = true;
                    match handover.await {
                        Ok(mut ready) => ready.alive().then_some(ready),
                        // Made but not handed over (a race with its end): it waits in the list.
                        Err(_) => self.shared.take_ready(&key),
                    }
                }
                // Or it was finished between the two looks.
                None => self.shared.take_ready(&key),
            },
        };
        let counter = match ready {
            Some(_) => &self.shared.served_ahead,
            None => &self.shared.made_on_call,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if in_a_loop {
            self.make_next(&key);
        }
        let started = match ready {
            Some(ready) => ready.go(),
            None => match start(&self.shared, &key).await.map_err(spawn_err)? {
                (started, None) => Ok(started),
                (started, Some(go)) => Ready {
                    key: key.clone(),
                    started: Some(started),
                    go: Some(go),
                }
                .go(),
            },
        }
        .map_err(|e| spawn_err(format!("starting the container: {e}")))?;
        Ok((started.child, started.guard, key))
    }

    /// Whatever happened, nothing of the call keeps running: its process group is killed and
    /// reaped; the next call's container is started; the host side is cleaned up in the
    /// background.
    async fn end(&self, child: &mut tokio::process::Child, mut guard: CallGuard, key: &CallKey) {
        // (Taken: once bwrap is reaped its pid may be reused, so the group is not signalled
        // again later.)
        if let Some(pgid) = guard.pgid.take() {
            sys::kill_group(pgid);
        }
        let _ = child.start_kill();
        let _ = child.wait().await;
        // The next call's container, unless its making began already (a loop, in `begin`);
        // made now, not while this call ran (on two cores it would have slowed the call down),
        // and registered before this call answers, so that a call right after it waits for
        // this container instead of making one of its own.
        self.make_next(key);
        // bwrap is dead, and the skill with it (`--die-with-parent`); the skill is PID 1 of its
        // namespace, so the kernel kills everything else in it. Sweeping the uid, unmounting and
        // removing the directory need not hold the answer up. The uid stays leased until the
        // sweep is done, so no call can get it before.
        tokio::spawn(guard.finish());
    }
}

/// What a reader task collected, waiting at most 2 s for it.
async fn collect(h: tokio::task::JoinHandle<Vec<u8>>) -> Vec<u8> {
    tokio::time::timeout(Duration::from_secs(2), h)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// Why a finished call failed, from its exit status and the end of its stderr; `None` when it
/// exited with status 0.
fn failure(status: std::process::ExitStatus, stderr: &[u8], container: bool) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    if status.success() {
        return None;
    }
    // bwrap reports a skill killed by signal N as exit status 128 + N (as shells do).
    let signal = status.signal().or_else(|| {
        status
            .code()
            .filter(|c| container && (129..=128 + 64).contains(c))
            .map(|c| c - 128)
    });
    let why = match signal {
        Some(libc::SIGXCPU) => "exceeded its CPU time limit".to_owned(),
        Some(libc::SIGXFSZ) => "exceeded its file size limit".to_owned(),
        Some(libc::SIGKILL) => {
            "was killed (it may have reached its CPU or memory limit)".to_owned()
        }
        Some(s) => format!("was killed by signal {s}"),
        None => format!("exited with status {}", status.code().unwrap_or(-1)),
    };
    let err_tail = tail(stderr, 400);
    Some(if err_tail.is_empty() {
        why
    } else {
        format!("{why}: {err_tail}")
    })
}

/// What a [`FrameHandler`] tells the sandbox after one frame of [`Sandbox::run_interactive`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FrameReply {
    /// Write this value to the program's stdin, as one line of JSON.
    Answer(Value),
    /// Write nothing; go on reading frames.
    Continue,
    /// End the call now: the program is killed and the call fails with
    /// [`SkillError::Stopped`] and this reason.
    Stop(String),
}

/// The agent's side of an interactive call ([`Sandbox::run_interactive`]): gets each frame the
/// program printed, in order, one at a time.
#[async_trait::async_trait]
pub trait FrameHandler: Send {
    /// One frame from the program. The call's time limit runs while this is awaited.
    async fn frame(&mut self, frame: Value) -> FrameReply;
}

/// How a conversation ended early.
enum Ended {
    Stopped(String),
    TooLarge,
    NotJson { error: String, head: String },
}

/// The conversation of an interactive call: `input` as the first line of stdin, then each
/// stdout line to `handler` and its answer back, until stdout ends. Stdout is bounded to
/// `limit` bytes over the whole call.
async fn converse(
    stdin: Option<tokio::process::ChildStdin>,
    stdout: Option<tokio::process::ChildStdout>,
    input: &Value,
    handler: &mut (dyn FrameHandler + '_),
    limit: usize,
) -> Result<(), Ended> {
    use tokio::io::AsyncBufReadExt;
    let Some(stdout) = stdout else {
        return Ok(());
    };
    let mut stdin = stdin;
    // A program that stops reading its stdin is its own problem (it waits for an answer it
    // cannot get, until the time limit): a failed write only stops further writes.
    async fn send(stdin: &mut Option<tokio::process::ChildStdin>, value: &Value) {
        if let Some(pipe) = stdin.as_mut() {
            let mut line = serde_json::to_vec(value).unwrap_or_default();
            line.push(b'\n');
            if pipe.write_all(&line).await.is_err() || pipe.flush().await.is_err() {
                *stdin = None;
            }
        }
    }
    send(&mut stdin, input).await;
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut used = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let room = (limit.saturating_sub(used) as u64).saturating_add(1);
        let n = match (&mut reader).take(room).read_until(b'\n', &mut line).await {
            Ok(n) => n,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        used += n;
        if used > limit {
            return Err(Ended::TooLarge);
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let frame: Value = serde_json::from_slice(text).map_err(|e| Ended::NotJson {
            error: e.to_string(),
            head: tail(&text[..text.len().min(200)], 200),
        })?;
        match handler.frame(frame).await {
            FrameReply::Answer(v) => send(&mut stdin, &v).await,
            FrameReply::Continue => {}
            FrameReply::Stop(reason) => return Err(Ended::Stopped(reason)),
        }
    }
}

impl Shared {
    fn lock_ready(&self) -> std::sync::MutexGuard<'_, Vec<Ready>> {
        self.ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_making(&self) -> std::sync::MutexGuard<'_, Vec<Making>> {
        self.making
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that a container for `key` is being made ahead, unless one is already (being)
    /// made; whether the caller should make it.
    fn begin_making(&self, key: &CallKey) -> bool {
        if self.lock_ready().iter().any(|r| &r.key == key) {
            return false;
        }
        let mut making = self.lock_making();
        if making.iter().any(|m| &m.key == key) {
            return false;
        }
        making.push(Making {
            key: key.clone(),
            taker: None,
        });
        true
    }

    /// When a container for `key` is being made and no other call waits for it: where it will
    /// be handed over.
    fn wait_for_making(&self, key: &CallKey) -> Option<tokio::sync::oneshot::Receiver<Ready>> {
        let mut making = self.lock_making();
        let m = making
            .iter_mut()
            .find(|m| &m.key == key && m.taker.is_none())?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        m.taker = Some(tx);
        Some(rx)
    }

    /// The container made ahead for `key`, if one is still waiting.
    fn take_ready(&self, key: &CallKey) -> Option<Ready> {
        let mut ready = {
            let mut all = self.lock_ready();
            let i = all.iter().position(|r| &r.key == key)?;
            all.remove(i)
        };
        // A dead one (bwrap failed) is dropped, reaped at once; the call makes its own.
        ready.alive().then_some(ready)
    }

    fn landlock(&self, skill_dir: &Path, work: &Path) -> Option<landlock::RulesetCreated> {
        if !self.landlock {
            return None;
        }
        let abi = ABI::V6;
        let read_only = [
            "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt",
        ];
        let devices = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"];
        let mut rs = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .ok()?;
        if !self.config.allow_network {
            rs = rs.handle_access(AccessNet::from_all(abi)).ok()?;
        }
        rs.create()
            .ok()?
            .add_rules(path_beneath_rules(read_only, AccessFs::from_read(abi)))
            .ok()?
            .add_rules(path_beneath_rules([skill_dir], AccessFs::from_read(abi)))
            .ok()?
            .add_rules(path_beneath_rules(devices, AccessFs::from_all(abi)))
            .ok()?
            .add_rules(path_beneath_rules([work], AccessFs::from_all(abi)))
            .ok()
    }
}

/// Makes the container of `key`'s next call ahead of time, unless one waits already, the
/// sandbox is gone or [`Sandbox::stop_ready`] was called since `generation` was read; the
/// oldest waiting container gives way when there are too many.
async fn make_ready(shared: Arc<Shared>, key: CallKey, generation: u64) {
    // However this ends, `key`'s entry in `making` (put there by the caller) goes: a call
    // waiting for a container that is not handed over then looks in the list, or makes its own.
    struct Done<'a>(&'a Shared, &'a CallKey);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.lock_making().retain(|m| &m.key != self.1);
        }
    }
    let _done = Done(&shared, &key);
    let has = |shared: &Shared| shared.lock_ready().iter().any(|r| r.key == key);
    if shared.closed.load(Ordering::Acquire) || has(&shared) {
        return;
    }
    let ready = match start(&shared, &key).await {
        Ok((started, Some(go))) => Ready {
            key: key.clone(),
            started: Some(started),
            go: Some(go),
        },
        Ok((started, None)) => {
            drop(started);
            return;
        }
        Err(e) => {
            tracing::debug!(skill = %key.name, error = %e, "could not make a container ahead of time");
            return;
        }
    };
    let taker = shared
        .lock_making()
        .iter_mut()
        .find(|m| m.key == key)
        .and_then(|m| m.taker.take());
    let ready = match taker {
        Some(tx)
            if !shared.closed.load(Ordering::Acquire)
                && shared.generation.load(Ordering::Acquire) == generation =>
        {
            match tx.send(ready) {
                Ok(()) => return,
                Err(ready) => ready, // the call went away: keep it for the next one
            }
        }
        _ => ready,
    };
    let surplus = {
        let mut all = shared.lock_ready();
        if shared.closed.load(Ordering::Acquire)
            || shared.generation.load(Ordering::Acquire) != generation
            || all.iter().any(|r| r.key == key)
        {
            Some(ready)
        } else {
            let old = (all.len() >= shared.config.ready_containers).then(|| all.remove(0));
            all.push(ready);
            old
        }
    };
    if let Some(r) = surplus {
        let _ = tokio::task::spawn_blocking(move || drop(r)).await;
    }
}

/// Starts the call of `key`: prepares its host side (off the async threads), then spawns
/// bwrap — waiting on the returned start pipe before it runs the skill — or, without a
/// container, the skill itself.
async fn start(
    shared: &Shared,
    key: &CallKey,
) -> Result<(Started, Option<std::io::PipeWriter>), String> {
    let c = &shared.config;
    let input = PrepareInput {
        skill_dir: key.dir.clone(),
        entry: key.entry.clone(),
        temp_root: c.temp_root.clone(),
        root: shared.root,
        container: shared.bwrap.is_some(),
        uid_range: c.uid_range,
        disk: (c.disk_bytes, c.disk_inodes),
    };
    // Leasing a uid, mounting and making directories are disk work: off the async threads.
    let Prepared {
        host,
        words,
        work,
        skill_dir,
        scratch_host,
        skill_host,
        ld_cache,
    } = tokio::task::spawn_blocking(move || prepare(input))
        .await
        .map_err(|e| format!("preparing the call: {e}"))??;
    let ids = host.ids;
    let mut guard = CallGuard {
        pgid: None,
        host: Some(host),
    };

    let mut cmd;
    let mut keep_fds = Vec::new();
    let mut readers = Vec::new();
    let mut go = None;
    let (landlock, fallback_seccomp) = match &shared.bwrap {
        Some(bwrap) => {
            // A filter of a few hundred bytes fits a pipe's buffer: this never blocks.
            let (reader, mut writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
            std::io::Write::write_all(&mut writer, &shared.container_filter)
                .map_err(|e| format!("pipe: {e}"))?;
            drop(writer);
            keep_fds.push(reader.as_raw_fd());
            readers.push(reader);
            let (reader, writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
            keep_fds.push(reader.as_raw_fd());
            readers.push(reader);
            go = Some(writer);
            // Descriptor 5, when the call has it: bwrap reads it to its end and closes it.
            let ld_cache_fd = ld_cache.as_ref().map(|f| {
                keep_fds.push(f.as_raw_fd());
                5
            });
            let scratch = match &scratch_host {
                Some(call) => Scratch::Host { call },
                None => Scratch::PerMount {
                    bytes: c.disk_bytes,
                    skill: Some(&skill_host),
                },
            };
            let layout = Layout {
                scratch,
                network: c.allow_network,
                ld_cache_fd,
                unshare_net: !c.allow_network && shared.shared_net.is_none(),
                allow_user_namespaces: c.allow_user_namespaces,
                read_only: &c.read_only_paths,
                seccomp_fd: 3,
                block_fd: Some(4),
            };
            cmd = tokio::process::Command::new(&bwrap.path);
            cmd.args(bwrap.args(&layout)).args(&words);
            // In the shared network namespace each call is a Landlock domain of its own, so its
            // abstract unix sockets are out of every other call's reach.
            let scope = match &shared.shared_net {
                Some(_) => Some(scope_ruleset()?),
                None => None,
            };
            (scope, None)
        }
        None => {
            let (program, rest) = words
                .split_first()
                .ok_or_else(|| "the skill's entry is empty".to_owned())?;
            cmd = tokio::process::Command::new(program);
            cmd.args(rest).current_dir(&work);
            (
                shared.landlock(&skill_dir, &work),
                Some(shared.fallback_filter.clone()),
            )
        }
    };
    let container = shared.bwrap.is_some();
    let tmp = if container {
        PathBuf::from("/tmp")
    } else {
        work.clone()
    };
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &work)
        .env("TMPDIR", &tmp)
        .env("SKILL_DIR", &skill_dir)
        .envs(key.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut limits = vec![
        (LimitKind::Cpu, c.cpu_seconds),
        (LimitKind::AddressSpace, c.memory_bytes),
        (LimitKind::FileSize, c.file_size_bytes),
        (LimitKind::OpenFiles, c.max_open_files),
        (LimitKind::CoreSize, 0),
    ];
    if ids.is_some() {
        limits.push((LimitKind::Processes, c.max_processes));
    }
    // Without a container the call makes its own PID, IPC and network namespaces: directly as
    // root, else inside a user namespace of its own (when the kernel allows it, see `new`).
    let user_namespace = if container || ids.is_some() {
        None
    } else {
        shared.user_maps.clone()
    };
    let own_namespaces = !container && (ids.is_some() || user_namespace.is_some());
    if !container {
        // (In a container bwrap sets it: `--setenv`, see `Bwrap::args`.)
        cmd.env("LANG", crate::container::CONTAINER_LANG);
    }
    sys::install(
        &mut cmd,
        ChildSetup {
            join_net: shared.shared_net.as_ref().map(|fd| fd.as_raw_fd()),
            keep_fds,
            limits,
            unshare_net: own_namespaces && !c.allow_network,
            unshare_ipc: own_namespaces,
            unshare_pid: own_namespaces,
            user_namespace,
            ids,
            landlock,
            seccomp: fallback_seccomp,
        },
    )
    .map_err(|e| e.to_string())?;
    let program = words.first().cloned().unwrap_or_default();
    let child = cmd.spawn().map_err(|e| format!("{program}: {e}"))?;
    drop(readers);
    guard.pgid = child.id();
    Ok((Started { child, guard }, go))
}

/// A Landlock ruleset that handles nothing but abstract unix sockets: restricting a process with
/// it makes a new domain (one per call) whose processes cannot connect to an abstract socket
/// made outside it. A kernel without the scope (ABI < 6) is an error, never a silent no-op.
fn scope_ruleset() -> Result<landlock::RulesetCreated, String> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::AbstractUnixSocket)
        .and_then(Ruleset::create)
        .map_err(|e| format!("cannot scope the call's abstract unix sockets (Landlock): {e}"))
}

async fn read_capped(
    pipe: Option<impl AsyncRead + Unpin>,
    limit: usize,
    stream: &'static str,
    over: tokio::sync::mpsc::Sender<&'static str>,
) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return buf,
            Ok(n) => {
                if buf.len() + n > limit {
                    let _ = over.send(stream).await;
                    return buf;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Kills the containers made ahead of time, now (the calls under way clean up after themselves).
impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.stop_ready();
    }
}
