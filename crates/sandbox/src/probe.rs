//! What the machine allows, found once when the sandbox is made: bubblewrap (by running one
//! empty container like a call's), root, Landlock's ABI, user namespaces, the shared empty
//! network namespace. The answer is [`Protections`], which says which boundaries hold here and,
//! when calls are refused, why and what to do.

use std::os::fd::AsRawFd;

use crate::bwrap::Bwrap;
use crate::config::SandboxConfig;
use crate::landlock::scope_ruleset;
use crate::seccomp;
use crate::sys;
use crate::uid::take_uid;

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

/// What [`probe`] found, for the sandbox to keep.
pub(crate) struct Probed {
    pub protections: Protections,
    pub bwrap: Option<Bwrap>,
    pub root: bool,
    pub shared_net: Option<std::os::fd::OwnedFd>,
    pub user_maps: Option<sys::IdMaps>,
    /// The container's seccomp policy.
    pub policy: seccomp::Policy,
}

/// Finds bubblewrap and checks, by running one empty container, that it works here; works out
/// which protections are in force and logs them. Blocking (tens of milliseconds).
pub(crate) fn probe(config: &SandboxConfig) -> Probed {
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
    let refused = (config.container && !container && !config.allow_without_container).then(|| {
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
    // refused unless the operator accepted exactly that.
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
    Probed {
        protections,
        bwrap,
        root,
        shared_net,
        user_maps,
        policy,
    }
}
