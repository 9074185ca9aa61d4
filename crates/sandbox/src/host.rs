//! The host side of one call: its uid lease (as root: one dedicated uid per concurrent call),
//! its directory and the mounts on it, made before the call ([`prepare`]) and swept, unmounted
//! and removed after it ([`CallHost`]'s drop).

use std::path::{Path, PathBuf};

use crate::program::is_plain_relative;
use crate::sys;
use crate::uid::take_uid;

/// The host side of one call: its uid lease, its directory (and the mounts on it).
pub(crate) struct CallHost {
    pub(crate) ids: Option<(u32, u32)>,
    /// Kill every process of `ids` when done (the uid sweep). Not needed in a container: the
    /// skill is PID 1 of its PID namespace, and when it dies the kernel kills everything else in
    /// the namespace; no process of the call can be outside it (bwrap's own process outside it
    /// is the call's child, killed and reaped before the host side is cleaned up).
    pub(crate) sweep: bool,
    /// Released (unlocked) when dropped, after the sweep.
    pub(crate) lease: Option<std::fs::File>,
    pub(crate) dir: Option<tempfile::TempDir>,
    /// Mount points to detach, innermost first.
    pub(crate) mounts: Vec<PathBuf>,
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

/// What `prepare` made for one call.
pub(crate) struct Prepared {
    pub(crate) host: CallHost,
    /// Entry words, files of the skill pointing at the skill as the skill sees it.
    pub(crate) words: Vec<String>,
    /// The working directory, `/work` in a container.
    pub(crate) work: PathBuf,
    /// The skill's directory as the skill sees it.
    pub(crate) skill_dir: PathBuf,
    /// The call's directory a container binds (root).
    pub(crate) scratch_host: Option<PathBuf>,
    /// The skill's directory on the host that is shown to the skill.
    pub(crate) skill_host: PathBuf,
    /// `/etc/ld.so.cache`, open, for the container to copy (where there is one).
    pub(crate) ld_cache: Option<std::fs::File>,
}

/// Everything `prepare` needs, owned (it runs on a blocking thread).
pub(crate) struct PrepareInput {
    pub(crate) skill_dir: PathBuf,
    pub(crate) entry: Vec<String>,
    pub(crate) temp_root: Option<PathBuf>,
    pub(crate) root: bool,
    pub(crate) container: bool,
    pub(crate) uid_range: (u32, u32),
    pub(crate) disk: (u64, u64),
}

/// The default place of the call directories as root, where it is a tmpfs: making and removing
/// a directory there touches no disk (on ext4 `/tmp` it was ~2 % of a loop's CPU, journal and
/// discards). Each call's files are on its own size-limited tmpfs mounted on its directory.
pub(crate) const SHM: &str = "/dev/shm";

pub(crate) fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// Makes the host side of a call. Layouts:
/// - root: `DIR` is its own tmpfs (size- and inode-limited) holding `work`, `tmp` (owned by the
///   call's uid) and `skill` (a read-only bind of the skill's directory, so no byte is copied
///   and no mode changes); with a container also `dev` (root's: the device nodes and links of
///   the container's `/dev`, and `shm`, the call's), without one `shm`;
/// - container without root: nothing on the host (bwrap makes the tmpfs mounts);
/// - neither: `DIR/work`, and the skill's directory as it is (Landlock keeps it read-only).
pub(crate) fn prepare(p: PrepareInput) -> Result<Prepared, String> {
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
            .then(|| std::fs::File::open(crate::bwrap::LD_CACHE).ok())
            .flatten(),
    })
}

/// Makes `dev`, the container's `/dev`, in the call's directory (root): root's, 0755, so the
/// call cannot change it; the device nodes of bwrap's `--dev` (0666, as on the host) and its
/// links to `/proc/self/fd`. (The call's `shm` is made in it after.)
pub(crate) fn make_dev(dev: &Path) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot make {}: {e}", dev.display());
    std::fs::create_dir(dev)
        .and_then(|()| set_mode(dev, 0o755))
        .map_err(fail)?;
    for (name, major, minor) in crate::bwrap::DEVICES {
        sys::make_char_device(&dev.join(name), major, minor, 0o666).map_err(fail)?;
    }
    for (name, target) in crate::bwrap::DEV_LINKS {
        std::os::unix::fs::symlink(target, dev.join(name)).map_err(fail)?;
    }
    Ok(())
}
