//! The few system calls the sandbox needs that std does not wrap. Every `unsafe` block of the
//! crate is here, each with its reason.
#![allow(unsafe_code)]

use std::io;

use landlock::RulesetCreated;

/// What the child does between fork and exec, in this order: resource limits, a new network
/// namespace, dropping to the sandbox uid/gid, then Landlock (which sets no_new_privs).
pub(crate) struct ChildSetup {
    pub limits: Vec<(LimitKind, u64)>,
    pub unshare_net: bool,
    pub ids: Option<(u32, u32)>,
    pub landlock: Option<RulesetCreated>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum LimitKind {
    Cpu,
    AddressSpace,
    FileSize,
    Processes,
    OpenFiles,
    CoreSize,
}

impl LimitKind {
    fn resource(self) -> libc::__rlimit_resource_t {
        match self {
            Self::Cpu => libc::RLIMIT_CPU,
            Self::AddressSpace => libc::RLIMIT_AS,
            Self::FileSize => libc::RLIMIT_FSIZE,
            Self::Processes => libc::RLIMIT_NPROC,
            Self::OpenFiles => libc::RLIMIT_NOFILE,
            Self::CoreSize => libc::RLIMIT_CORE,
        }
    }
}

/// Installs `setup` to run in the child before exec.
pub(crate) fn install(cmd: &mut tokio::process::Command, setup: ChildSetup) {
    let ChildSetup {
        limits,
        unshare_net,
        ids,
        landlock,
    } = setup;
    let mut landlock = landlock;
    let hook = move || -> io::Result<()> {
        for (kind, value) in &limits {
            // For CPU time the hard limit is one second above the soft one, so the skill gets
            // SIGXCPU (reported as "CPU time limit") before the kernel's SIGKILL.
            let hard = match kind {
                LimitKind::Cpu => value.saturating_add(1),
                _ => *value,
            };
            let lim = libc::rlimit {
                rlim_cur: *value,
                rlim_max: hard,
            };
            // SAFETY: setrlimit is async-signal-safe and `lim` is a valid, initialised struct.
            if unsafe { libc::setrlimit(kind.resource(), &lim) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if unshare_net {
            // SAFETY: unshare is a plain system call; it only affects this (child) process.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some((uid, gid)) = ids {
            // SAFETY: setgroups/setgid/setuid are async-signal-safe system calls; a null list
            // with size 0 is the documented way to clear supplementary groups.
            unsafe {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        if let Some(ruleset) = landlock.take() {
            ruleset
                .restrict_self()
                .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))?;
        }
        Ok(())
    };
    // SAFETY: the hook only makes system calls (and, on failure, builds an io::Error); glibc
    // keeps malloc usable in a forked child, and nothing here takes a lock another thread holds.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Sends SIGKILL to a whole process group; a group that is already gone is not an error.
pub(crate) fn kill_group(pgid: u32) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill with a negative pid signals the process group; it has no memory effects.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// The Landlock ABI version the kernel supports, or `None`.
pub(crate) fn landlock_abi() -> Option<i64> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number; it reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v)
}

/// The effective uid of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and has no side effects.
    unsafe { libc::geteuid() }
}
