//! The system calls' tests: the read-only binds (root only) and the descriptor numbers a
//! call's child rearranges.

use super::*;

/// Root only (mounts); under `CI=true` a run without root fails rather than skipping.
pub(super) fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root || std::env::var("CI").as_deref() != Ok("true"),
        "the mount tests need root under CI"
    );
    root
}

/// The kernel gives a new descriptor the lowest free number, and the agent's other threads
/// free low numbers at any time: a call's Landlock ruleset can be given 3, the number its
/// first kept descriptor is moved onto. The call must still start, inside its domain (it
/// cannot read `/proc/version`, outside its rules). Runs in a process of its own — this
/// test binary again, only this test — where which numbers are free is decided here.
#[test]
fn a_ruleset_on_the_number_a_kept_descriptor_moves_onto_still_restricts_the_call() {
    const NAME: &str =
        "sys::tests::a_ruleset_on_the_number_a_kept_descriptor_moves_onto_still_restricts_the_call";
    const CHILD: &str = "TOOLWRIGHT_SANDBOX_LOW_NUMBERS";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    if landlock_abi().is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Landlock is expected under CI"
        );
        eprintln!("NOT RUN: this kernel has no Landlock");
        return;
    }
    // 3…10 made ours (whatever was inherited there moved away, kept open), then 3, 4, 5
    // freed: the ruleset gets 3, the kept pipe 4 and 5.
    let mut held = Vec::new();
    for fd in 3..=10 {
        // SAFETY: fcntl and close on plain numbers; this process runs only this test.
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) >= 0 {
                assert!(libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100) >= 0);
                libc::close(fd);
            }
        }
        held.push(std::fs::File::open("/dev/null").unwrap());
    }
    drop(held.drain(..3));
    let dir = tempfile::tempdir().unwrap();
    let ruleset = crate::landlock::ruleset(true, dir.path(), dir.path()).unwrap();
    let (reader, _writer) = std::io::pipe().unwrap();
    use std::os::fd::AsRawFd;
    assert_eq!(
        reader.as_raw_fd(),
        4,
        "the numbers were not free as planned"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = runtime.block_on(async {
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.args(["-c", "cat /proc/version >/dev/null 2>&1 && exit 7; exit 0"]);
        install(
            &mut cmd,
            ChildSetup {
                join_net: None,
                keep_fds: vec![reader.as_raw_fd()],
                limits: Vec::new(),
                unshare_net: false,
                unshare_ipc: false,
                unshare_pid: false,
                user_namespace: None,
                ids: None,
                landlock: Some(ruleset),
                seccomp: None,
            },
        )
        .unwrap();
        cmd.status().await
    });
    let status = status.unwrap_or_else(|e| panic!("the call did not start: {e}"));
    assert_eq!(
        status.code(),
        Some(0),
        "the call ran outside its Landlock domain (it read /proc/version)"
    );
}

/// After either way of binding, the view at `at` is read-only: nothing in the source can be
/// written, removed or renamed through it (what emptied a fixture skill when the call's
/// directory was removed through a bind that was still writable), and the mount is
/// read-only, nosuid and nodev.
#[test]
fn a_read_only_bind_leaves_the_skill_untouched_by_whatever_removes_the_call_directory() {
    if !root() {
        return;
    }
    type Bind = fn(&Path, &Path) -> io::Result<()>;
    let ways: [(&str, Bind); 3] = [
        ("in use", bind_read_only),
        ("detached", bind_read_only_detached),
        ("classic", bind_read_only_classic),
    ];
    for (way, bind) in ways {
        let skill = tempfile::tempdir().unwrap();
        std::fs::write(skill.path().join("SKILL.md"), "---\nname: x\n---\n").unwrap();
        std::fs::write(skill.path().join("run.py"), "print(1)\n").unwrap();
        let call = tempfile::tempdir().unwrap();
        let at = call.path().join("skill");
        std::fs::create_dir(&at).unwrap();
        bind(skill.path(), &at).unwrap_or_else(|e| panic!("{way}: {e}"));

        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = mountinfo
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(at.to_str().unwrap()))
            .unwrap_or_else(|| panic!("{way}: no mount at {}", at.display()));
        let options: Vec<&str> = line.split(' ').nth(5).unwrap().split(',').collect();
        for o in ["ro", "nosuid", "nodev"] {
            assert!(options.contains(&o), "{way}: {line}");
        }
        let erofs = |r: io::Result<()>| r.unwrap_err().raw_os_error() == Some(libc::EROFS);
        assert!(erofs(std::fs::write(at.join("new"), "x")), "{way}");
        assert!(erofs(std::fs::remove_file(at.join("run.py"))), "{way}");
        assert!(
            erofs(std::fs::rename(at.join("run.py"), at.join("moved"))),
            "{way}"
        );
        // What a temp root's owner does to the call's directory while the bind is there.
        assert!(std::fs::remove_dir_all(call.path()).is_err(), "{way}");
        assert_eq!(
            std::fs::read_to_string(skill.path().join("run.py")).unwrap(),
            "print(1)\n",
            "{way}"
        );
        assert!(skill.path().join("SKILL.md").is_file(), "{way}");
        unmount(&at).unwrap();
    }
}
