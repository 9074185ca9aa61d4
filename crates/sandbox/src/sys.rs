//! The few system calls the sandbox needs that std does not wrap. Every `unsafe` block of the
//! crate is here, each with its reason.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use landlock::RulesetCreated;

/// Most descriptors a call passes on deliberately (as 3, 4, …).
pub(crate) const MAX_KEPT_FDS: usize = 4;

/// What the child does between fork and exec, in this order: descriptors (the kept ones moved to
/// 3, 4, …, every other one above 2 closed at exec), resource limits, new namespaces, dropping
/// to the sandbox uid/gid, Landlock (which sets no_new_privs), then seccomp.
pub(crate) struct ChildSetup {
    /// Join this network namespace first (a descriptor of it, held by the sandbox), before
    /// anything else: as root, and before the descriptors are moved.
    pub join_net: Option<RawFd>,
    pub keep_fds: Vec<RawFd>,
    pub limits: Vec<(LimitKind, u64)>,
    pub unshare_net: bool,
    pub unshare_ipc: bool,
    /// Run the program as PID 1 of a new PID namespace (without a container): it can see and
    /// signal only its own processes, and they all die with it.
    pub unshare_pid: bool,
    /// Make the namespaces above inside a new user namespace that maps only the agent's own
    /// uid and gid (without root, without a container): what lets an unprivileged agent make
    /// them. Before Landlock and seccomp, which refuse user namespaces to the skill.
    pub user_namespace: Option<IdMaps>,
    pub ids: Option<(u32, u32)>,
    pub landlock: Option<RulesetCreated>,
    pub seccomp: Option<Vec<libc::sock_filter>>,
}

/// The uid and gid maps of a user namespace that maps the agent's own ids to themselves (and
/// nothing else: no root inside), written by the child into `/proc/self/…` after `unshare`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl IdMaps {
    /// The maps of this process's own effective uid and gid.
    pub fn own() -> Self {
        // SAFETY: geteuid/getegid cannot fail and have no side effects.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// In the child, right after `unshare(CLONE_NEWUSER | …)`: writes the maps (`setgroups`
    /// denied first, as the kernel requires of an unprivileged gid map). Only async-signal-safe
    /// calls on buffers made before the fork.
    fn write(&self) -> io::Result<()> {
        write_proc_file(c"/proc/self/setgroups", b"deny")?;
        write_proc_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_proc_file(c"/proc/self/gid_map", &self.gid_map)
    }
}

/// Writes `data` to `path` in one `write` (how `/proc/self/*_map` must be written).
fn write_proc_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open, write and close are async-signal-safe; `path` is NUL-terminated and `data`
    // a valid buffer of its length.
    unsafe {
        let fd = check(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC))?;
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// A new, empty network namespace (only a loopback device, down: no address at all), made once
/// and held by the returned descriptor; calls join it with [`ChildSetup::join_net`]. Made on a
/// thread of its own (a network namespace belongs to a thread), which then ends. Root only.
pub(crate) fn empty_network_namespace() -> io::Result<std::os::fd::OwnedFd> {
    std::thread::spawn(|| {
        // SAFETY: unshare(CLONE_NEWNET) changes only this thread's network namespace; the thread
        // does nothing else but open its namespace file, and ends.
        check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
        let f = std::fs::File::open("/proc/thread-self/ns/net")?;
        Ok(std::os::fd::OwnedFd::from(f))
    })
    .join()
    .map_err(|_| io::Error::other("the thread making the network namespace panicked"))?
}

/// The namespace flags of the weaker boundary's calls without root.
fn user_namespace_flags(unshare_net: bool) -> libc::c_int {
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWIPC;
    if unshare_net {
        flags |= libc::CLONE_NEWNET;
    }
    flags
}

/// Checks, once at start-up, that this process may make what a call without root makes: a user
/// namespace mapping its own ids, with PID, IPC (and, when `unshare_net`, network) namespaces in
/// it, and a process inside the PID namespace. A forked child tries it and reports the step and
/// errno that failed; `Err` says which (e.g. user namespaces disabled by `sysctl`, or refused by
/// an AppArmor rule).
pub(crate) fn probe_user_namespace(maps: &IdMaps, unshare_net: bool) -> Result<(), String> {
    let (mut reader, writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let wfd = writer.as_raw_fd();
    let flags = user_namespace_flags(unshare_net) | libc::CLONE_NEWPID;
    // SAFETY: the child makes only async-signal-safe system calls on memory made before the
    // fork (no allocation, no locks: safe in a threaded process) and leaves with _exit; the
    // parent waits for it by pid.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            let report = |step: u8, err: io::Error| -> ! {
                let errno = err.raw_os_error().unwrap_or(0);
                let mut msg = [0u8; 5];
                msg[0] = step;
                msg[1..].copy_from_slice(&errno.to_ne_bytes());
                libc::write(wfd, msg.as_ptr().cast(), msg.len());
                libc::_exit(1)
            };
            if let Err(e) = check(libc::unshare(flags)) {
                report(1, e);
            }
            if let Err(e) = maps.write() {
                report(2, e);
            }
            let inner = libc::fork();
            if inner < 0 {
                report(3, io::Error::last_os_error());
            }
            if inner == 0 {
                libc::_exit(if libc::getpid() == 1 { 0 } else { 1 });
            }
            let mut status = 0;
            while libc::waitpid(inner, &mut status, 0) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                report(4, io::Error::from_raw_os_error(0));
            }
            libc::_exit(0)
        }
    }
    drop(writer);
    let mut status = 0;
    // SAFETY: waitpid on the child just forked, into a local status word.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
    let mut msg = Vec::new();
    let _ = reader.read_to_end(&mut msg);
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return Ok(());
    }
    let errno = msg
        .get(1..5)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(i32::from_ne_bytes);
    let err = errno.map_or_else(String::new, |e| {
        format!(": {}", io::Error::from_raw_os_error(e))
    });
    Err(match msg.first() {
        Some(1) => format!("the kernel refuses user namespaces to this user (unshare{err})"),
        Some(2) => format!("a user namespace cannot map this user's ids (uid_map{err})"),
        Some(3) => format!("no process can be made in a new PID namespace (fork{err})"),
        Some(4) => "the first process of a new PID namespace is not PID 1".to_owned(),
        _ => format!("the user namespace check failed ({status:#x})"),
    })
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

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// In the child: moves `keep` to 3, 4, … and marks every other descriptor above 2 close-on-exec
/// (std's own exec-error pipe is already close-on-exec, so it keeps working).
fn arrange_fds(keep: &[RawFd; MAX_KEPT_FDS], n: usize) -> io::Result<()> {
    let mut high = [-1; MAX_KEPT_FDS];
    for (h, fd) in high.iter_mut().zip(keep).take(n) {
        // SAFETY: fcntl(F_DUPFD) on a descriptor this child inherited; no memory is touched.
        *h = check(unsafe { libc::fcntl(*fd, libc::F_DUPFD, 64) })?;
    }
    for (i, h) in high.iter().enumerate().take(n) {
        let target = 3 + i as RawFd;
        // SAFETY: dup2 onto a small number; a descriptor of the agent there is replaced, which
        // is what we want (it must not reach the skill). The copy lacks FD_CLOEXEC.
        check(unsafe { libc::dup2(*h, target) })?;
    }
    let first = 3 + n as libc::c_uint;
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only changes this child's descriptor table.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return Ok(());
    }
    // Kernels before 5.11: mark each descriptor up to the open-file limit.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `lim`, a valid struct.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    let top = lim.rlim_cur.min(1 << 20) as RawFd;
    for fd in first as RawFd..top {
        // SAFETY: F_SETFD on a descriptor number; EBADF for unused numbers is ignored.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    Ok(())
}

/// Installs `setup` to run in the child before exec.
pub(crate) fn install(cmd: &mut tokio::process::Command, setup: ChildSetup) -> io::Result<()> {
    let ChildSetup {
        join_net,
        keep_fds,
        limits,
        unshare_net,
        unshare_ipc,
        unshare_pid,
        user_namespace,
        ids,
        landlock,
        seccomp,
    } = setup;
    if keep_fds.len() > MAX_KEPT_FDS {
        return Err(io::Error::other(
            "too many descriptors to pass to the skill",
        ));
    }
    let mut keep = [-1; MAX_KEPT_FDS];
    keep[..keep_fds.len()].copy_from_slice(&keep_fds);
    let n_keep = keep_fds.len();
    // The ruleset as a plain descriptor (`None` inside: the kernel has no Landlock, and the
    // crate's best effort made an empty ruleset), restricted to by hand below.
    let landlock: Option<Option<std::os::fd::OwnedFd>> = landlock.map(Into::into);
    let hook = move || -> io::Result<()> {
        if let Some(fd) = join_net {
            // SAFETY: setns is a plain system call on a descriptor the sandbox holds open; it
            // only changes this (child) process's network namespace.
            check(unsafe { libc::setns(fd, libc::CLONE_NEWNET) })?;
        }
        // The kernel gives a new descriptor the lowest free number, and the agent's other
        // threads free low numbers at any time: the ruleset may hold 3, 4 or 5, which the kept
        // descriptors are about to be moved onto. Lifted above them first.
        let ruleset_fd = match &landlock {
            Some(Some(fd)) => {
                use std::os::fd::AsRawFd;
                // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor this child inherited.
                Some(check(unsafe {
                    libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 64)
                })?)
            }
            _ => None,
        };
        arrange_fds(&keep, n_keep)?;
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
            check(unsafe { libc::setrlimit(kind.resource(), &lim) })?;
        }
        let mut flags = 0;
        if user_namespace.is_some() {
            // (Made first by the kernel: the others below belong to it.)
            flags |= libc::CLONE_NEWUSER;
        }
        if unshare_net {
            flags |= libc::CLONE_NEWNET;
        }
        if unshare_ipc {
            flags |= libc::CLONE_NEWIPC;
        }
        if flags != 0 {
            // SAFETY: unshare is a plain system call; it only affects this (child) process.
            check(unsafe { libc::unshare(flags) })?;
        }
        if let Some(maps) = &user_namespace {
            maps.write()?;
        }
        if unshare_pid {
            enter_new_pid_namespace()?;
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
        if landlock.is_some() {
            // What the landlock crate's `restrict_self` does, on the lifted descriptor: set
            // no_new_privs, then enter the ruleset's domain. (Its errors reach the agent as the
            // errno itself: std passes only an errno from a failed child.)
            // SAFETY: prctl and landlock_restrict_self are plain system calls on integers.
            unsafe {
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
                if let Some(fd) = ruleset_fd
                    && libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        if let Some(filter) = &seccomp {
            let prog = libc::sock_fprog {
                len: u16::try_from(filter.len()).unwrap_or(u16::MAX),
                filter: filter.as_ptr().cast_mut(),
            };
            // SAFETY: prctl with valid arguments; `prog` points at `filter`, which lives in this
            // closure for the whole call; the kernel copies the program.
            unsafe {
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
                check(libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ))?;
            }
        }
        Ok(())
    };
    // SAFETY: the hook only makes system calls (and, on failure, builds an io::Error); glibc
    // keeps malloc usable in a forked child, and nothing here takes a lock another thread holds.
    unsafe {
        cmd.pre_exec(hook);
    }
    Ok(())
}

/// In the forked child, before exec: makes a new PID namespace and forks once more. The
/// grandchild — PID 1 of the new namespace — returns and goes on to exec the program; this
/// process stays in the old namespace only to wait for it and leave with its status (or the
/// signal that ended it), so the agent sees the program's exit as before. The grandchild dies
/// with it (`PR_SET_PDEATHSIG`), and both are in the call's process group, which the timeout
/// kills. Only async-signal-safe calls.
fn enter_new_pid_namespace() -> io::Result<()> {
    // SAFETY: unshare, fork, waitpid, prctl, getppid, signal, kill and _exit are
    // async-signal-safe system calls on plain integer arguments and a local status word.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWPID))?;
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // (`getppid` is 0 here: the parent is outside the namespace. Were it killed before
            // this line, the kill was the call's group kill, which reaches this process too.)
            check(libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            return Ok(());
        }
        // This process never execs, so the descriptors it got from the agent's fork (pipes of
        // other calls among them: a skill would never see its stdin end) are closed now.
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        let mut status = 0;
        loop {
            let r = libc::waitpid(pid, &mut status, 0);
            if r == pid {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Mounts a tmpfs of at most `bytes` bytes and `inodes` files on `at` (root only), never with
/// set-uid bits; with device nodes working only when `devices` (the call directory of a
/// container, whose `/dev` nodes root makes there with [`make_char_device`]; no process of a
/// call can make one: that takes `CAP_MKNOD` in the host's user namespace).
pub(crate) fn mount_tmpfs(at: &Path, bytes: u64, inodes: u64, devices: bool) -> io::Result<()> {
    let target = c_path(at)?;
    let data = CString::new(format!("size={bytes},nr_inodes={inodes},mode=0711"))
        .map_err(|_| io::Error::other("mount options"))?;
    let fstype = c"tmpfs";
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    check(unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | if devices { 0 } else { libc::MS_NODEV },
            data.as_ptr().cast(),
        )
    })
    .map(|_| ())
}

/// Makes the character device `major:minor` at `at` with exactly `mode` (root only).
pub(crate) fn make_char_device(at: &Path, major: u32, minor: u32, mode: u32) -> io::Result<()> {
    let path = c_path(at)?;
    // SAFETY: `path` is a valid NUL-terminated string; mknod and chmod read nothing else.
    unsafe {
        check(libc::mknod(
            path.as_ptr(),
            libc::S_IFCHR | mode,
            libc::makedev(major, minor),
        ))?;
        // mknod applies the umask; the mode is set again without it.
        check(libc::chmod(path.as_ptr(), mode))?;
    }
    Ok(())
}

/// Bind-mounts `from` on `at`, read-only, without set-uid bits or devices (root only).
///
/// The bind is never writable at `at`, not even for an instant: with the mount API of Linux
/// 5.12+ a detached copy of the mount is made read-only first and attached after. The classic
/// way (bind, then remount read-only) leaves a moment in which `at` is a writable view of the
/// skill's own directory, and whatever removes the call's directory in that moment (the owner
/// of a temp root cleaning up while a container is being made ahead) deletes the skill's files
/// through it — CI saw a fixture skill emptied that way. The classic way is kept only for
/// kernels (or seccomp profiles) without the new calls.
pub(crate) fn bind_read_only(from: &Path, at: &Path) -> io::Result<()> {
    match bind_read_only_detached(from, at) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
            bind_read_only_classic(from, at)
        }
        other => other,
    }
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `open_tree(OPEN_TREE_CLONE)` of `from`, `mount_setattr` read-only, nosuid, nodev on the
/// detached copy, then `move_mount` onto `at`.
fn bind_read_only_detached(from: &Path, at: &Path) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    let source = c_path(from)?;
    let target = c_path(at)?;
    let syscall_result = |r: libc::c_long| {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    // SAFETY: a valid NUL-terminated path; the result is a new descriptor this function owns.
    let fd = syscall_result(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    })?;
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::other("open_tree: descriptor"))?;
    // SAFETY: `fd` was just returned by open_tree and is owned by nothing else.
    let tree = unsafe { OwnedFd::from_raw_fd(fd) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `tree` is an open mount descriptor, "" with AT_EMPTY_PATH names it, and `attr` is
    // a valid mount_attr of the size passed.
    syscall_result(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    // SAFETY: as above; `target` is a valid NUL-terminated path.
    syscall_result(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })?;
    Ok(())
}

/// Bind, then remount read-only (writable in between: see [`bind_read_only`]).
fn bind_read_only_classic(from: &Path, at: &Path) -> io::Result<()> {
    let source = c_path(from)?;
    let target = c_path(at)?;
    // SAFETY: valid NUL-terminated strings; null fstype/data are allowed for MS_BIND.
    unsafe {
        check(libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        ))?;
    }
    Ok(())
}

/// Kills every process of `uid` (the sandbox uid of a finished call): a child switches to that
/// uid and calls `kill(-1, SIGKILL)`, which reaches every process of the uid — including any
/// that left the process group — and nothing else. (Killed processes may take a moment to be
/// gone; leases rotate through the uid range, so the next call does not start under their
/// process limit.)
pub(crate) fn kill_uid(uid: u32, gid: u32) {
    // SAFETY: the child only makes raw system calls (no allocation, no locks: safe after fork in
    // a threaded process) and leaves with _exit; the parent waits for it by pid.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == 0
                && libc::syscall(libc::SYS_setresgid, gid, gid, gid) == 0
                && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
            {
                libc::kill(-1, libc::SIGKILL);
            }
            libc::_exit(0);
        }
        if pid > 0 {
            let mut status = 0;
            while libc::waitpid(pid, &mut status, 0) < 0
                && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
            {}
        }
    }
}

/// Detaches the mount on `at` (lazily: processes still inside keep it until they are gone).
pub(crate) fn unmount(at: &Path) -> io::Result<()> {
    let target = c_path(at)?;
    // SAFETY: `target` is a valid NUL-terminated string.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) }).map(|_| ())
}

/// Sends SIGKILL to a whole process group (process-guard's, shared with mcp-bridge); a group
/// that is already gone is not an error.
pub(crate) fn kill_group(pgid: u32) {
    toolwright_process_guard::kill_group(pgid);
}

/// Whether `at` is a directory on a tmpfs.
pub(crate) fn is_tmpfs(at: &Path) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    let Ok(path) = c_path(at) else {
        return false;
    };
    // SAFETY: statfs writes into `st`, a zeroed struct of the right type; `path` is a valid
    // NUL-terminated string.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(path.as_ptr(), &mut st) == 0 && st.f_type as libc::c_long == TMPFS_MAGIC
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

#[cfg(test)]
mod tests;

/// The window the classic bind leaves, measured (2026-11-28, the project's 2-core VM): with a
/// thread removing the skill's file through the mount point while the bind is made, the classic
/// way lost the file in 14 of 2,000 rounds (each time its read-only remount failed with EBUSY:
/// the removal held the mount writable); the detached way in none.
#[cfg(test)]
mod race {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_skill_file_removed_through_the_mount_point_while_it_is_bound_survives() {
        if !super::tests::root() {
            return;
        }
        let skill = tempfile::tempdir().unwrap();
        let call = tempfile::tempdir().unwrap();
        let at = call.path().join("skill");
        std::fs::create_dir(&at).unwrap();
        for round in 0..2_000 {
            let stop = Arc::new(AtomicBool::new(false));
            let victim = at.join("run.py");
            let hammer = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = std::fs::remove_file(&victim);
                    }
                })
            };
            if round == 0 {
                std::fs::write(skill.path().join("run.py"), "print(1)\n").unwrap();
            }
            let bound = bind_read_only(skill.path(), &at);
            std::thread::sleep(std::time::Duration::from_micros(200));
            stop.store(true, Ordering::Relaxed);
            hammer.join().unwrap();
            let _ = unmount(&at);
            bound.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(
                skill.path().join("run.py").is_file(),
                "round {round}: the skill's file was removed through its bind"
            );
        }
    }
}
