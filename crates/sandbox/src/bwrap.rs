//! The container boundary of a call: bubblewrap (`bwrap`), found on the machine and checked
//! once when the sandbox starts.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::seccomp;
use crate::sys::{self, ChildSetup};

/// Where `bwrap` is looked for when the configuration names none (fixed places, not `PATH`).
const BWRAP_PLACES: [&str; 3] = ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"];

/// System directories shown read-only in the container (a link on the host stays a link).
const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The dynamic linker's cache: copied into each container from a descriptor the call opens
/// (bwrap's `--file`: no mount, so no parse of the mount table), else bound read-only.
pub(crate) const LD_CACHE: &str = "/etc/ld.so.cache";

/// The `/etc` directories programs read at run time, shown read-only: the `/usr/bin`
/// alternatives. (`ld.so.conf` and `ld.so.conf.d` are read only by `ldconfig`,
/// `/etc/ca-certificates` only by `update-ca-certificates`: not shown.) The rest of `/etc` is not
/// in the container.
const ETC_DIRS: [&str; 1] = ["/etc/alternatives"];

/// Certificates, shown read-only only when the network is allowed: without it no IP socket can be
/// made, so no TLS either.
const ETC_SSL: &str = "/etc/ssl";

/// The time zone: a symbolic link on most systems, made as a link in the container (no mount).
const LOCALTIME: &str = "/etc/localtime";

/// The locale of a call.
pub(crate) const CONTAINER_LANG: &str = "C.UTF-8";

/// A working bubblewrap.
#[derive(Debug, Clone)]
pub(crate) struct Bwrap {
    pub path: PathBuf,
    pub version: String,
}

/// Where the call's directory is in the container (as root): `/tmp`, `/dev` and `/skill` are
/// links into it, so the container binds it once, not once per directory (bwrap parses the
/// whole mount table after every bind).
pub(crate) const CALL_DIR: &str = "/.call";

/// The device nodes of a container's `/dev` (those of bwrap's `--dev`), `(name, major, minor)`:
/// made by root in the call's directory, mode 0666, as on the host.
pub(crate) const DEVICES: [(&str, u32, u32); 6] = [
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// The links of a container's `/dev` (those of bwrap's `--dev`, but `core` and `ptmx`: no
/// `/proc/kcore` access, no pseudo-terminals).
pub(crate) const DEV_LINKS: [(&str, &str); 4] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// Where the call's writable directories come from.
pub(crate) enum Scratch<'a> {
    /// The call's directory on the host (root): its own size- and inode-limited tmpfs holding
    /// `work`, `tmp` (the call's uid, 0700), `dev` (root's, 0755: [`DEVICES`], [`DEV_LINKS`] and
    /// `shm`, the call's uid, 0700) and `skill` (a read-only bind of the skill). Shown at
    /// [`CALL_DIR`], with `/work` bound again (so the working directory reads `/work`).
    Host { call: &'a Path },
    /// A tmpfs of this size for each of `/work`, `/tmp`, `/dev/shm` (without root), the skill
    /// (when there is one) bound read-only at `/skill`.
    PerMount { bytes: u64, skill: Option<&'a Path> },
}

/// What one container shows and does.
pub(crate) struct Layout<'a> {
    pub scratch: Scratch<'a>,
    /// The network is allowed (the operator's choice): certificates are shown.
    pub network: bool,
    /// The descriptor number of the call's open `/etc/ld.so.cache`, copied into the container;
    /// `None`: bound read-only where there is one.
    pub ld_cache_fd: Option<i32>,
    /// A network namespace of the container's own (bwrap's `--unshare-net`); off when the
    /// network is allowed, or when the container is started in the sandbox's shared, empty one.
    pub unshare_net: bool,
    pub allow_user_namespaces: bool,
    pub read_only: &'a [PathBuf],
    /// The seccomp program is read from this descriptor number.
    pub seccomp_fd: i32,
    /// When set, the container is made and then waits, before running the command, until a
    /// byte can be read from this descriptor number (bwrap's `--block-fd`): the container of
    /// the next call is made ahead of time.
    pub block_fd: Option<i32>,
}

impl Bwrap {
    /// Finds `bwrap`: `configured`, else the first of [`BWRAP_PLACES`].
    pub fn find(configured: Option<&Path>) -> Result<Self, String> {
        let path = match configured {
            Some(p) => p.to_path_buf(),
            None => BWRAP_PLACES
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    "bubblewrap is not installed (no bwrap in /usr/bin, /usr/local/bin, /bin): install it (Debian/Ubuntu: apt-get install bubblewrap)".to_owned()
                })?,
        };
        let out = std::process::Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || version.is_empty() {
            return Err(format!("{} --version failed", path.display()));
        }
        Ok(Self { path, version })
    }

    /// The arguments of one container, up to and including `--`.
    pub fn args(&self, l: &Layout<'_>) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::with_capacity(64);
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            a.extend(items.iter().map(|i| i.as_ref().to_os_string()));
        };
        push(&[
            &"--unshare-user",
            &"--unshare-ipc",
            &"--unshare-pid",
            &"--unshare-uts",
            &"--unshare-cgroup-try",
            &"--die-with-parent",
            &"--new-session",
            // The skill is PID 1 of its namespace: no reaper process is forked between the
            // container's start and the skill's (a fork and a hand-over off each call's path).
            // When it exits the kernel kills everything else in the namespace, as before; its
            // orphans stay zombies until then (counted in its process limit).
            &"--as-pid-1",
        ]);
        if l.unshare_net {
            push(&[&"--unshare-net"]);
        }
        if !l.allow_user_namespaces {
            push(&[&"--disable-userns"]);
        }
        for dir in SYSTEM_DIRS {
            let p = Path::new(dir);
            match std::fs::read_link(p) {
                Ok(target) => push(&[&"--symlink", &target, &p]),
                Err(_) if p.is_dir() => push(&[&"--ro-bind", &p, &p]),
                Err(_) => {}
            }
        }
        match l.ld_cache_fd {
            Some(fd) => push(&[&"--perms", &"0444", &"--file", &fd.to_string(), &LD_CACHE]),
            None => push(&[&"--ro-bind-try", &LD_CACHE, &LD_CACHE]),
        }
        for d in ETC_DIRS {
            push(&[&"--ro-bind-try", &d, &d]);
        }
        if l.network {
            push(&[&"--ro-bind-try", &ETC_SSL, &ETC_SSL]);
        }
        match std::fs::read_link(LOCALTIME) {
            Ok(target) => push(&[&"--symlink", &target, &LOCALTIME]),
            Err(_) => push(&[&"--ro-bind-try", &LOCALTIME, &LOCALTIME]),
        }
        for p in l.read_only {
            push(&[&"--ro-bind-try", p, p]);
        }
        push(&[&"--proc", &"/proc"]);
        match &l.scratch {
            Scratch::Host { call } => {
                // Two binds where there were ten (`--dev`'s six nodes, three scratch
                // directories, the skill). `--dev-bind`: the nodes root made in `dev` work; the
                // call cannot make one (no `CAP_MKNOD` in the host's user namespace), the skill
                // bind inside keeps its own `nodev`, `nosuid` and read-only flags.
                let work = call.join("work");
                push(&[&"--dev-bind", call, &CALL_DIR, &"--bind", &work, &"/work"]);
                for name in ["tmp", "dev", "skill"] {
                    let target = Path::new(CALL_DIR).join(name);
                    push(&[&"--symlink", &target, &Path::new("/").join(name)]);
                }
            }
            Scratch::PerMount { bytes, skill } => {
                push(&[&"--dev", &"/dev"]);
                let size = bytes.to_string();
                for at in ["/work", "/tmp", "/dev/shm"] {
                    push(&[&"--size", &size, &"--tmpfs", &at]);
                }
                if let Some(skill) = skill {
                    push(&[&"--ro-bind", skill, &"/skill"]);
                }
                // `--dev`'s tmpfs belongs to the container's user: read-only, so nothing is
                // written outside the call's limited directories.
                push(&[&"--remount-ro", &"/dev"]);
            }
        }
        // The root bwrap makes is a tmpfs the container's user owns, without a size limit:
        // read-only, so the only writable places are the call's (limited) directories.
        push(&[&"--remount-ro", &"/"]);
        if let Some(fd) = l.block_fd {
            push(&[&"--block-fd", &fd.to_string()]);
        }
        // The skill's locale, set by bwrap after its own start: bwrap's `setlocale(LC_ALL, "")`
        // then finds no LANG and loads no locale files (part of each container's making).
        push(&[&"--setenv", &"LANG", &CONTAINER_LANG]);
        let fd = l.seccomp_fd.to_string();
        push(&[&"--chdir", &"/work", &"--seccomp", &fd, &"--"]);
        a
    }

    /// Runs `true` in a container like a call's (as `ids` when given), so a machine where
    /// bubblewrap cannot work (user namespaces disabled, an AppArmor rule) is found at start-up
    /// rather than at the first call.
    pub fn probe(
        &self,
        ids: Option<(u32, u32)>,
        policy: seccomp::Policy,
        unshare_net: bool,
        join_net: Option<i32>,
        landlock: Option<landlock::RulesetCreated>,
    ) -> Result<(), String> {
        let filter = seccomp::to_bytes(&seccomp::program(policy));
        let (reader, mut writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
        writer
            .write_all(&filter)
            .map_err(|e| format!("pipe: {e}"))?;
        drop(writer);
        let layout = Layout {
            scratch: Scratch::PerMount {
                bytes: 1 << 20,
                skill: None,
            },
            network: !unshare_net && join_net.is_none(),
            ld_cache_fd: None,
            unshare_net,
            allow_user_namespaces: policy.allow_user_namespaces,
            read_only: &[],
            seccomp_fd: 3,
            block_fd: None,
        };
        let mut cmd = tokio::process::Command::new(&self.path);
        cmd.args(self.args(&layout))
            .arg("true")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        use std::os::fd::AsRawFd;
        sys::install(
            &mut cmd,
            ChildSetup {
                join_net,
                keep_fds: vec![reader.as_raw_fd()],
                limits: vec![],
                unshare_net: false,
                unshare_ipc: false,
                unshare_pid: false,
                user_namespace: None,
                ids,
                landlock,
                seccomp: None,
            },
        )
        .map_err(|e| e.to_string())?;
        let std_cmd = cmd.as_std_mut();
        std_cmd.process_group(0);
        let out = std_cmd
            .output()
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} could not make a container ({}): {}",
                self.path.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bwrap() -> Bwrap {
        Bwrap {
            path: PathBuf::from("/usr/bin/bwrap"),
            version: "bubblewrap 0.0".into(),
        }
    }

    fn layout(scratch: Scratch<'_>) -> Layout<'_> {
        Layout {
            scratch,
            network: false,
            ld_cache_fd: None,
            unshare_net: true,
            allow_user_namespaces: false,
            read_only: &[],
            seccomp_fd: 3,
            block_fd: None,
        }
    }

    fn strings(a: Vec<OsString>) -> Vec<String> {
        a.into_iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    /// Whether `words` appear in `args` next to each other, in this order.
    fn has(args: &[String], words: &[&str]) -> bool {
        args.windows(words.len()).any(|w| w == words)
    }

    #[test]
    fn every_container_has_its_namespaces_filter_and_read_only_root() {
        let a = strings(bwrap().args(&layout(Scratch::PerMount {
            bytes: 1 << 20,
            skill: None,
        })));
        for flag in [
            "--unshare-user",
            "--unshare-ipc",
            "--unshare-pid",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--unshare-net",
            "--disable-userns",
        ] {
            assert!(a.iter().any(|x| x == flag), "{flag} missing: {a:?}");
        }
        assert_eq!(
            a.last().map(String::as_str),
            Some("--"),
            "the command comes after"
        );
        assert!(has(&a, &["--seccomp", "3", "--"]));
        assert!(has(&a, &["--chdir", "/work"]));
        assert!(has(&a, &["--remount-ro", "/"]));
        assert!(has(&a, &["--setenv", "LANG", CONTAINER_LANG]));
        assert!(has(&a, &["--proc", "/proc"]));
        assert!(!a.iter().any(|x| x == "--block-fd"));
        assert!(
            !a.iter().any(|x| x == ETC_SSL),
            "no certificates without network"
        );
    }

    #[test]
    fn without_root_each_writable_directory_is_a_sized_tmpfs() {
        let skill = Path::new("/opt/skill");
        let a = strings(bwrap().args(&layout(Scratch::PerMount {
            bytes: 4096,
            skill: Some(skill),
        })));
        for at in ["/work", "/tmp", "/dev/shm"] {
            assert!(has(&a, &["--size", "4096", "--tmpfs", at]), "{at}: {a:?}");
        }
        assert!(has(&a, &["--ro-bind", "/opt/skill", "/skill"]));
        assert!(has(&a, &["--remount-ro", "/dev"]));
    }

    #[test]
    fn as_root_the_call_directory_is_bound_once() {
        let call = Path::new("/dev/shm/skill-call-x");
        let a = strings(bwrap().args(&layout(Scratch::Host { call })));
        assert!(has(
            &a,
            &["--dev-bind", "/dev/shm/skill-call-x", CALL_DIR, "--bind"]
        ));
        assert!(has(&a, &["/dev/shm/skill-call-x/work", "/work"]));
        for name in ["tmp", "dev", "skill"] {
            let target = format!("{CALL_DIR}/{name}");
            assert!(
                has(&a, &["--symlink", &target, &format!("/{name}")]),
                "{name}"
            );
        }
        assert!(!a.iter().any(|x| x == "--tmpfs"));
    }

    #[test]
    fn switches_show_in_the_arguments() {
        let extra = [PathBuf::from("/opt/tools")];
        let mut l = layout(Scratch::PerMount {
            bytes: 1,
            skill: None,
        });
        l.network = true;
        l.unshare_net = false;
        l.allow_user_namespaces = true;
        l.read_only = &extra;
        l.block_fd = Some(4);
        l.ld_cache_fd = Some(5);
        let a = strings(bwrap().args(&l));
        assert!(!a.iter().any(|x| x == "--unshare-net"));
        assert!(!a.iter().any(|x| x == "--disable-userns"));
        assert!(has(&a, &["--ro-bind-try", ETC_SSL, ETC_SSL]));
        assert!(has(&a, &["--ro-bind-try", "/opt/tools", "/opt/tools"]));
        assert!(has(&a, &["--block-fd", "4"]));
        assert!(has(&a, &["--file", "5", LD_CACHE]));
    }

    #[test]
    fn a_missing_bwrap_says_what_to_install() {
        let e = Bwrap::find(Some(Path::new("/nonexistent/bwrap"))).unwrap_err();
        assert!(e.contains("/nonexistent/bwrap"), "{e}");
    }
}
