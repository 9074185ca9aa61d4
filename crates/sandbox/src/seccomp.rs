//! The sandbox's seccomp filter, as a classic BPF program (no libseccomp: it is a dozen
//! instructions). It refuses, with an error the skill can handle:
//! - creating a user namespace (`clone`/`unshare` with `CLONE_NEWUSER`; `clone3`, whose flags a
//!   filter cannot read, answers ENOSYS so libc falls back to `clone`), unless configured;
//! - the kernel keyrings (`add_key`, `keyctl`, `request_key`): keys outlive a call;
//! - optionally `socket(AF_UNIX, …)`, for sandboxes without a mount namespace, where a path to a
//!   host socket can be reached (`socketpair` stays allowed);
//! - optionally `socket()` of every family but `AF_UNIX` (EAFNOSUPPORT), and `io_uring_setup`
//!   (ENOSYS: an io_uring can make sockets without the `socket` system call), for containers that
//!   share one empty network namespace: no IP, netlink, packet or other socket can be made, so
//!   the namespace holds nothing calls could meet in but abstract unix sockets, which Landlock
//!   scopes to the call;
//! - every system call of another architecture (i386 `int 0x80`, x32), whose numbers differ.

use libc::sock_filter;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the skills sandbox's seccomp filter knows x86_64 and aarch64");

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0_LOW: u32 = 16; // args[0], low 32 bits (little-endian)

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
const RET_EAFNOSUPPORT: u32 = libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn nr(n: libc::c_long) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// What the filter refuses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    pub allow_user_namespaces: bool,
    pub deny_unix_sockets: bool,
    /// Refuse `socket()` of every family but `AF_UNIX`, and io_uring.
    pub only_unix_sockets: bool,
}

/// The filter program.
pub(crate) fn program(policy: Policy) -> Vec<sock_filter> {
    // Each rule: (syscall number, what to do). Actions are expressed as the index of a return
    // instruction in the tail, so jumps are computed once the list is known.
    enum Then {
        Ret(u32),
        FlagsHaveNewUser,
        Arg0IsUnix,
        Arg0IsNotUnix,
    }
    let mut rules: Vec<(u32, Then)> = vec![
        (nr(libc::SYS_add_key), Then::Ret(RET_EPERM)),
        (nr(libc::SYS_keyctl), Then::Ret(RET_EPERM)),
        (nr(libc::SYS_request_key), Then::Ret(RET_EPERM)),
    ];
    if !policy.allow_user_namespaces {
        rules.push((nr(libc::SYS_clone3), Then::Ret(RET_ENOSYS)));
        rules.push((nr(libc::SYS_unshare), Then::FlagsHaveNewUser));
        rules.push((nr(libc::SYS_clone), Then::FlagsHaveNewUser));
    }
    if policy.deny_unix_sockets {
        rules.push((nr(libc::SYS_socket), Then::Arg0IsUnix));
    } else if policy.only_unix_sockets {
        rules.push((nr(libc::SYS_socket), Then::Arg0IsNotUnix));
    }
    if policy.only_unix_sockets {
        rules.push((nr(libc::SYS_io_uring_setup), Then::Ret(RET_ENOSYS)));
    }

    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, RET_EPERM),
        stmt(BPF_LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // x32 system calls: the same arch value, numbers with bit 30 set.
        p.push(jump(BPF_JGE_K, 0x4000_0000, 0, 1));
        p.push(stmt(BPF_RET_K, RET_EPERM));
    }
    // Per rule: `jeq nr` over a block; the block is either `ret` (1 instruction) or a check of
    // args[0] (load, jset/jeq, ret deny, ret allow: 4 instructions).
    for (number, then) in rules {
        let block: Vec<sock_filter> = match then {
            Then::Ret(action) => vec![stmt(BPF_RET_K, action)],
            Then::FlagsHaveNewUser => vec![
                stmt(BPF_LD_W_ABS, OFF_ARG0_LOW),
                jump(BPF_JSET_K, libc::CLONE_NEWUSER as u32, 0, 1),
                stmt(BPF_RET_K, RET_EPERM),
                stmt(BPF_RET_K, RET_ALLOW),
            ],
            Then::Arg0IsUnix => vec![
                stmt(BPF_LD_W_ABS, OFF_ARG0_LOW),
                jump(BPF_JEQ_K, libc::AF_UNIX as u32, 0, 1),
                stmt(BPF_RET_K, RET_EPERM),
                stmt(BPF_RET_K, RET_ALLOW),
            ],
            Then::Arg0IsNotUnix => vec![
                stmt(BPF_LD_W_ABS, OFF_ARG0_LOW),
                jump(BPF_JEQ_K, libc::AF_UNIX as u32, 1, 0),
                stmt(BPF_RET_K, RET_EAFNOSUPPORT),
                stmt(BPF_RET_K, RET_ALLOW),
            ],
        };
        p.push(jump(
            BPF_JEQ_K,
            number,
            0,
            u8::try_from(block.len()).unwrap_or(0),
        ));
        p.extend(block);
    }
    p.push(stmt(BPF_RET_K, RET_ALLOW));
    p
}

/// The program as the bytes of `struct sock_filter[]`, which `bwrap --seccomp FD` reads.
pub(crate) fn to_bytes(program: &[sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for i in program {
        out.extend_from_slice(&i.code.to_ne_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_ne_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policies() -> Vec<Policy> {
        let mut out = Vec::new();
        for a in [false, true] {
            for b in [false, true] {
                for c in [false, true] {
                    out.push(Policy {
                        allow_user_namespaces: a,
                        deny_unix_sockets: b,
                        only_unix_sockets: c,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_allowing() {
        for policy in policies() {
            let p = program(policy);
            assert!(p.len() < 64, "{policy:?}: {} instructions", p.len());
            let last = p.last().unwrap();
            assert_eq!((last.code, last.k), (BPF_RET_K, RET_ALLOW));
            for (i, ins) in p.iter().enumerate() {
                if ins.code & 0x07 == 0x05 {
                    // a conditional jump: both targets inside the program
                    assert!(i + 1 + usize::from(ins.jt) < p.len(), "{policy:?} at {i}");
                    assert!(i + 1 + usize::from(ins.jf) < p.len(), "{policy:?} at {i}");
                }
            }
            // The architecture is checked first.
            assert_eq!((p[0].code, p[0].k), (BPF_LD_W_ABS, OFF_ARCH));
            assert_eq!(p[1].k, AUDIT_ARCH);
        }
    }

    #[test]
    fn policies_refuse_what_they_say() {
        let refuses = |policy: Policy, call: libc::c_long| {
            program(policy)
                .iter()
                .any(|i| i.code == BPF_JEQ_K && i.k == nr(call))
        };
        let base = Policy {
            allow_user_namespaces: false,
            deny_unix_sockets: false,
            only_unix_sockets: false,
        };
        assert!(refuses(base, libc::SYS_keyctl), "keyrings always");
        assert!(refuses(base, libc::SYS_unshare));
        assert!(!refuses(base, libc::SYS_socket));
        let userns = Policy {
            allow_user_namespaces: true,
            ..base
        };
        assert!(!refuses(userns, libc::SYS_unshare));
        let only_unix = Policy {
            only_unix_sockets: true,
            ..base
        };
        assert!(refuses(only_unix, libc::SYS_socket));
        assert!(refuses(only_unix, libc::SYS_io_uring_setup));
    }

    #[test]
    fn bytes_are_eight_per_instruction() {
        let p = program(Policy {
            allow_user_namespaces: false,
            deny_unix_sockets: true,
            only_unix_sockets: false,
        });
        let b = to_bytes(&p);
        assert_eq!(b.len(), p.len() * 8);
        assert_eq!(&b[..2], &p[0].code.to_ne_bytes());
        assert_eq!(&b[4..8], &p[0].k.to_ne_bytes());
    }
}
