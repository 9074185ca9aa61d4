//! The system calls std and nix do not wrap the way we need. Every `unsafe` block of the crate is
//! here, each with its reason.
#![allow(unsafe_code)]

use std::io;

/// Capabilities a server started by root loses from its bounding set before exec (so it cannot
/// regain them): those that read or write another process's memory or the kernel's.
/// `CAP_SYS_PTRACE` (19) is the one that lets root read a non-dumpable process's
/// `/proc/PID/environ` and `mem`; `CAP_SYS_MODULE` (16), `CAP_SYS_RAWIO` (17), `CAP_SYS_ADMIN`
/// (21, old kernels' bpf and perf), `CAP_SYS_BOOT` (22, kexec), `CAP_PERFMON` (38) and `CAP_BPF`
/// (39) are other ways into memory.
pub(crate) const DROPPED_CAPS: [(libc::c_ulong, &str); 7] = [
    (19, "CAP_SYS_PTRACE"),
    (16, "CAP_SYS_MODULE"),
    (17, "CAP_SYS_RAWIO"),
    (21, "CAP_SYS_ADMIN"),
    (22, "CAP_SYS_BOOT"),
    (38, "CAP_PERFMON"),
    (39, "CAP_BPF"),
];

/// Installs the hook that runs in the child between fork and exec: mark it a child subreaper
/// (kept across exec, so every orphan in its tree stays in its tree while it lives) and, when
/// `drop_caps`, drop [`DROPPED_CAPS`] from its bounding set.
pub(crate) fn install(cmd: &mut std::process::Command, drop_caps: bool) {
    use std::os::unix::process::CommandExt;
    let hook = move || -> io::Result<()> {
        // SAFETY: prctl with integer arguments is a plain, async-signal-safe system call that
        // only changes an attribute of this (child) process; it reads no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if drop_caps {
            for (cap, _) in DROPPED_CAPS {
                // SAFETY: as above; PR_CAPBSET_DROP only shrinks this process's bounding set.
                if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
                    let e = io::Error::last_os_error();
                    // EINVAL: a capability this kernel does not know (CAP_BPF before 5.8).
                    if e.raw_os_error() != Some(libc::EINVAL) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    };
    // SAFETY: the hook makes only async-signal-safe system calls (prctl) and allocates nothing
    // (`last_os_error` reads errno into an integer), as required between fork and exec.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// `PR_SET_DUMPABLE` on this process.
pub(crate) fn set_dumpable(on: bool) -> io::Result<()> {
    // SAFETY: prctl with integer arguments changes one attribute of this process; no memory.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(on), 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `PR_GET_DUMPABLE` of this process.
pub(crate) fn dumpable() -> bool {
    // SAFETY: prctl(PR_GET_DUMPABLE) only returns a number.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1 }
}

/// Whether this process has `cap` in its effective set (read from `/proc/self/status`).
pub(crate) fn has_effective_cap(cap: libc::c_ulong) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1u64 << cap) != 0)
}
