//! The operator's side of the threat model: limits, grants and switches ([`SandboxConfig`]) and
//! what one program is granted beyond them ([`Grant`]). Pure data and the two rules that read
//! it: which variables a program gets ([`SandboxConfig::is_granted`]) and which time limit
//! ([`SandboxConfig::timeout_for`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// What the operator grants one program beyond the global grants of [`SandboxConfig`].
///
/// ```
/// use toolwright_sandbox::{SandboxConfig, Grant};
/// use std::time::Duration;
/// let cfg = SandboxConfig::default().with_grant(
///     "weather",
///     Grant::default().with_env("WEATHER_API_KEY").with_max_timeout(Duration::from_secs(90)),
/// );
/// assert_eq!(cfg.grants["weather"].env, ["WEATHER_API_KEY"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Grant {
    /// Environment variables this program may receive (when it asks for them in `env`).
    pub env: Vec<String>,
    /// The longest time limit this program may ask for (instead of [`SandboxConfig::max_timeout`]).
    pub max_timeout: Option<Duration>,
}

impl Grant {
    /// Grants one more environment variable.
    pub fn with_env(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }
    /// Sets this program's longest time limit.
    pub fn with_max_timeout(mut self, t: Duration) -> Self {
        self.max_timeout = Some(t);
        self
    }
}

/// Limits, grants and switches of the sandbox: the operator's side of the threat model.
///
/// ```
/// use toolwright_sandbox::SandboxConfig;
/// use std::time::Duration;
/// let cfg = SandboxConfig::default().with_timeout(Duration::from_secs(5)).with_max_processes(16);
/// assert_eq!(cfg.output_limit, 1024 * 1024);
/// assert!(cfg.env.is_empty(), "no variable of the agent reaches a program unless granted");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// Wall-clock limit of a call whose program asks for none.
    pub timeout: Duration,
    /// The longest wall-clock limit a program may ask for with `timeout_secs` (a longer request is
    /// cut to it); a [`Grant`] may set another for one program.
    pub max_timeout: Duration,
    /// Environment variables of the agent any program may receive when it asks for them.
    pub env: Vec<String>,
    /// Per-program grants, by program name ([`crate::Program::name`]).
    pub grants: BTreeMap<String, Grant>,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Address space in bytes (RLIMIT_AS).
    pub memory_bytes: u64,
    /// Largest file the program may write (RLIMIT_FSIZE).
    pub file_size_bytes: u64,
    /// Total bytes of everything a call writes (`/work`, `/tmp`, `/dev/shm` together, as root;
    /// each of them without root).
    pub disk_bytes: u64,
    /// Total files and directories a call may create (as root).
    pub disk_inodes: u64,
    /// Processes of the sandbox user (RLIMIT_NPROC; enforced only when running as a
    /// dedicated uid, see `Protections`).
    pub max_processes: u64,
    /// Open files (RLIMIT_NOFILE).
    pub max_open_files: u64,
    /// Bytes kept from stdout, and from stderr; more is an error.
    pub output_limit: usize,
    /// Allow network access (default: no network).
    pub allow_network: bool,
    /// Allow programs to create user namespaces (default: refused by seccomp).
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
    /// kernel refuses user namespaces), so that a program can discover and signal-probe the host's
    /// processes (default: off, such calls are refused). Accepting the weaker boundary
    /// ([`Self::allow_without_container`]) does not accept this: it is asked for by itself.
    pub allow_host_pids: bool,
    /// The `bwrap` to use (default: `/usr/bin/bwrap`, `/usr/local/bin/bwrap` or `/bin/bwrap`).
    pub bwrap_path: Option<PathBuf>,
    /// More host paths shown read-only in the container (e.g. `/opt/tools`).
    pub read_only_paths: Vec<PathBuf>,
    /// When the agent runs as root, programs run as uids from this range (one per concurrent call).
    pub uid_range: (u32, u32),
    /// Where the per-call directories are made (default: `/dev/shm` as root where it is a tmpfs
    /// — only mount points are made there, each call's files are on a tmpfs of its own —, else
    /// the system temp dir). As root it must be reachable (searchable) by the sandbox uids:
    /// `/tmp` and `/dev/shm` are.
    pub temp_root: Option<PathBuf>,
    /// How many programs may each have one container made ahead of time for their next call
    /// (default 4; 0: every call makes its container when it starts). A container made ahead
    /// serves exactly one call — its own uid, tmpfs and namespaces — and waits, with nothing of
    /// the program running, until a call takes it. Each holds a sandbox uid while it waits.
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
    /// Set the wall-clock limit of calls whose program asks for none.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    /// Set the longest wall-clock limit a program may ask for.
    pub fn with_max_timeout(mut self, t: Duration) -> Self {
        self.max_timeout = t;
        self
    }
    /// Grant an environment variable to every program that asks for it.
    pub fn with_env_grant(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }
    /// Set what one program is granted.
    pub fn with_grant(mut self, program: impl Into<String>, grant: Grant) -> Self {
        self.grants.insert(program.into(), grant);
        self
    }
    /// [`Self::with_grant`], under the name the `skills` crate has always used (a skill's name is
    /// its program's name).
    pub fn with_skill_grant(self, skill: impl Into<String>, grant: Grant) -> Self {
        self.with_grant(skill, grant)
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
    /// namespaces and the agent is not root): a program can then discover the host's pids. Off
    /// by default: such calls are refused (`Protections::refused` says why and what to do).
    pub fn allow_host_pids(mut self, on: bool) -> Self {
        self.allow_host_pids = on;
        self
    }
    /// Set how many programs may have a container made ahead of time (0: none).
    pub fn with_ready_containers(mut self, n: usize) -> Self {
        self.ready_containers = n;
        self
    }

    /// Whether `program` may receive the environment variable `var`: granted to every program
    /// ([`Self::env`]) or to this one ([`Grant::env`]).
    pub fn is_granted(&self, program: &str, var: &str) -> bool {
        self.env.iter().any(|v| v == var)
            || self
                .grants
                .get(program)
                .is_some_and(|g| g.env.iter().any(|v| v == var))
    }

    /// The wall-clock limit of a call of `program` that asks for `asked` (or the default
    /// [`Self::timeout`]), cut to the operator's cap for it ([`Grant::max_timeout`], else
    /// [`Self::max_timeout`]).
    pub fn timeout_for(&self, program: &str, asked: Option<Duration>) -> Duration {
        let cap = self
            .grants
            .get(program)
            .and_then(|g| g.max_timeout)
            .unwrap_or(self.max_timeout);
        asked.unwrap_or(self.timeout).min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_granted_by_default() {
        let c = SandboxConfig::default();
        assert!(!c.is_granted("any", "HOME"));
        assert!(c.env.is_empty() && c.grants.is_empty());
        assert!(c.container && !c.allow_without_container && !c.allow_host_pids);
        assert!(!c.allow_network && !c.allow_user_namespaces);
    }

    #[test]
    fn a_global_grant_reaches_every_program_a_grant_only_its_own() {
        let c = SandboxConfig::default()
            .with_env_grant("LANGUAGE")
            .with_grant("weather", Grant::default().with_env("API_KEY"));
        assert!(c.is_granted("weather", "LANGUAGE"));
        assert!(c.is_granted("other", "LANGUAGE"));
        assert!(c.is_granted("weather", "API_KEY"));
        assert!(
            !c.is_granted("other", "API_KEY"),
            "one program's grant is not another's"
        );
        assert!(!c.is_granted("weather", "API_KEY_2"), "names match exactly");
        assert!(
            !c.is_granted("weather", "api_key"),
            "names are case-sensitive"
        );
    }

    #[test]
    fn with_skill_grant_is_with_grant() {
        let g = Grant::default().with_env("K");
        assert_eq!(
            SandboxConfig::default().with_skill_grant("s", g.clone()),
            SandboxConfig::default().with_grant("s", g)
        );
    }

    #[test]
    fn time_limit_is_the_ask_or_the_default_cut_to_the_cap() {
        let s = Duration::from_secs;
        let c = SandboxConfig::default()
            .with_timeout(s(30))
            .with_max_timeout(s(60))
            .with_grant("slow", Grant::default().with_max_timeout(s(90)));
        assert_eq!(c.timeout_for("p", None), s(30), "the default");
        assert_eq!(
            c.timeout_for("p", Some(s(5))),
            s(5),
            "a shorter ask is kept"
        );
        assert_eq!(
            c.timeout_for("p", Some(s(600))),
            s(60),
            "cut to max_timeout"
        );
        assert_eq!(
            c.timeout_for("slow", Some(s(600))),
            s(90),
            "cut to its grant's cap"
        );
        assert_eq!(
            c.timeout_for("slow", Some(s(75))),
            s(75),
            "a grant may allow more"
        );
        // A grant's cap replaces the global one, also when it is lower.
        let c = c.with_grant("fast", Grant::default().with_max_timeout(s(2)));
        assert_eq!(c.timeout_for("fast", None), s(2));
    }

    #[test]
    fn a_grant_without_cap_leaves_the_global_cap() {
        let s = Duration::from_secs;
        let c = SandboxConfig::default()
            .with_max_timeout(s(10))
            .with_grant("p", Grant::default().with_env("X"));
        assert_eq!(c.timeout_for("p", Some(s(20))), s(10));
    }

    #[test]
    fn builders_set_what_they_name() {
        let c = SandboxConfig::default()
            .with_max_processes(3)
            .with_output_limit(10)
            .with_memory_bytes(11)
            .with_disk(12, 13)
            .with_container(false)
            .allow_without_container(true)
            .allow_host_pids(true)
            .with_ready_containers(0);
        assert_eq!(
            (c.max_processes, c.output_limit, c.memory_bytes),
            (3, 10, 11)
        );
        assert_eq!((c.disk_bytes, c.disk_inodes), (12, 13));
        assert!(!c.container && c.allow_without_container && c.allow_host_pids);
        assert_eq!(c.ready_containers, 0);
    }
}
