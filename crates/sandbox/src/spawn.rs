//! Starting one call: its host side prepared off the async threads, then bwrap (waiting on a
//! start pipe when made ahead of time) or, without a container, the program itself, with the
//! cleared environment, rlimits, namespaces, uid, Landlock and seccomp of [`sys::ChildSetup`];
//! and [`CallGuard`], which cleans the call up however it ends.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Stdio;

use crate::bwrap::Bwrap;
use crate::bwrap::{Layout, Scratch};
use crate::config::SandboxConfig;
use crate::host::{CallHost, PrepareInput, Prepared, prepare};
use crate::landlock::{ruleset, scope_ruleset};
use crate::sys::{self, ChildSetup, LimitKind};

/// A started call: its process (bwrap, or the skill itself without a container) and its host
/// side.
pub(crate) struct Started {
    pub(crate) child: tokio::process::Child,
    pub(crate) guard: CallGuard,
}

/// Cleans a call up even when its future is dropped midway.
pub(crate) struct CallGuard {
    pub(crate) pgid: Option<u32>,
    pub(crate) host: Option<CallHost>,
}

impl CallGuard {
    /// Kills the call's process group and cleans up its host side off the async threads.
    pub(crate) async fn finish(mut self) {
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

/// What every call starts from, fixed when the sandbox is made: the configuration and what
/// the machine allows, worked out once.
pub(crate) struct Setup {
    pub(crate) config: SandboxConfig,
    pub(crate) bwrap: Option<Bwrap>,
    pub(crate) root: bool,
    /// Landlock is used (no container, kernel has it).
    pub(crate) landlock: bool,
    /// The empty network namespace every container joins (see
    /// [`Protections::shared_network_namespace`]); `None`: each makes its own, or has network.
    pub(crate) shared_net: Option<std::os::fd::OwnedFd>,
    /// The container's seccomp program as bwrap reads it, compiled once.
    pub(crate) container_filter: Vec<u8>,
    /// The seccomp program installed directly when there is no container, compiled once.
    pub(crate) fallback_filter: Vec<libc::sock_filter>,
    /// Without a container and without root, where the kernel allows it: the maps of the user
    /// namespace each call makes its PID, IPC and network namespaces in.
    pub(crate) user_maps: Option<sys::IdMaps>,
}

/// What a call runs: the skill and the environment it is granted, as they are when the call
/// (or the container made ahead for it) starts. A container made ahead is used only by a call
/// with the same key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallKey {
    pub(crate) name: String,
    pub(crate) dir: std::path::PathBuf,
    pub(crate) entry: Vec<String>,
    pub(crate) env: Vec<(String, std::ffi::OsString)>,
}

/// Starts the call of `key`: prepares its host side (off the async threads), then spawns
/// bwrap — waiting on the returned start pipe before it runs the skill — or, without a
/// container, the skill itself.
pub(crate) async fn start(
    shared: &Setup,
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
                shared
                    .landlock
                    .then(|| ruleset(c.allow_network, &skill_dir, &work))
                    .flatten(),
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
        cmd.env("LANG", crate::bwrap::CONTAINER_LANG);
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
