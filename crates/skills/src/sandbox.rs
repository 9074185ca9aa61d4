//! Running one skill call in a sandbox.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, path_beneath_rules,
};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::Skill;
use crate::sys::{self, ChildSetup, LimitKind};

/// Limits and switches of the sandbox.
///
/// ```
/// use skills::SandboxConfig;
/// use std::time::Duration;
/// let cfg = SandboxConfig::default().with_timeout(Duration::from_secs(5)).with_max_processes(16);
/// assert_eq!(cfg.output_limit, 1024 * 1024);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// Wall-clock limit of one call (a skill's own `timeout_secs` overrides it).
    pub timeout: Duration,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Address space in bytes (RLIMIT_AS).
    pub memory_bytes: u64,
    /// Largest file the skill may write (RLIMIT_FSIZE).
    pub file_size_bytes: u64,
    /// Processes of the sandbox user (RLIMIT_NPROC; enforced only when running as a
    /// dedicated uid, see [`Protections`]).
    pub max_processes: u64,
    /// Open files (RLIMIT_NOFILE).
    pub max_open_files: u64,
    /// Bytes kept from stdout, and from stderr; more is an error.
    pub output_limit: usize,
    /// Allow network access (default: no network).
    pub allow_network: bool,
    /// When the agent runs as root, skills run as uids from this range (one per concurrent call).
    pub uid_range: (u32, u32),
    /// Where the per-call directories are made (default: the system temp dir).
    pub temp_root: Option<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            cpu_seconds: 30,
            memory_bytes: 1 << 30,
            file_size_bytes: 16 << 20,
            max_processes: 64,
            max_open_files: 128,
            output_limit: 1 << 20,
            allow_network: false,
            uid_range: (400_000, 401_000),
            temp_root: None,
        }
    }
}

impl SandboxConfig {
    /// Set the wall-clock limit.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
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
}

/// Which protections are in force on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Protections {
    /// Skills run as a dedicated uid (the agent is root): process limits apply and leftovers of
    /// a call are found and killed by uid.
    pub dedicated_uid: bool,
    /// Landlock ABI in force (filesystem confined to the call's directory plus read-only system
    /// directories), or `None` when the kernel lacks Landlock.
    pub landlock_abi: Option<i64>,
    /// Network cut off: a new, empty network namespace (root) or Landlock TCP rules (ABI ≥ 4).
    pub no_network: bool,
    /// Always: wall-clock timeout with process-group kill, CPU/memory/file/open-file limits,
    /// cleared environment, fresh working directory, capped output.
    pub base: bool,
}

impl std::fmt::Display for Protections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "on" } else { "OFF" };
        write!(
            f,
            "timeout+group kill, rlimits, cleared env, fresh dir, capped output: on; dedicated uid (process limit, leftover sweep): {}; landlock filesystem: {}; no network: {}",
            yes(self.dedicated_uid),
            self.landlock_abi
                .map_or_else(|| "OFF".to_owned(), |v| format!("on (ABI {v})")),
            yes(self.no_network)
        )
    }
}

/// Why a skill call failed; the message is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// The call ran past its wall-clock limit; every process of it was killed.
    #[error("skill {name} timed out after {secs} s and was stopped")]
    Timeout {
        /// Skill name.
        name: String,
        /// The limit in seconds.
        secs: u64,
    },
    /// The skill wrote more than the output limit.
    #[error("skill {name}: {stream} output exceeded {limit}; the skill was stopped")]
    OutputTooLarge {
        /// Skill name.
        name: String,
        /// "stdout" or "stderr".
        stream: &'static str,
        /// The limit, in words ("1 MiB").
        limit: String,
    },
    /// The skill exited with an error or was killed by a limit.
    #[error("skill {name} failed: {reason}")]
    Failed {
        /// Skill name.
        name: String,
        /// Exit status and the end of its stderr.
        reason: String,
    },
    /// The skill's stdout was not JSON.
    #[error("skill {name} printed output that is not JSON ({error}): {head}")]
    NotJson {
        /// Skill name.
        name: String,
        /// The parser's complaint.
        error: String,
        /// The start of what it printed.
        head: String,
    },
    /// The sandbox could not be set up (a host problem, not the skill's).
    #[error("skill {name} could not be started: {reason}")]
    Spawn {
        /// Skill name.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

/// Runs skills, one sandboxed child process per call.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    protections: Protections,
}

fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

fn tail(s: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(s);
    let t = text.trim();
    let start = t.char_indices().rev().nth(n).map_or(0, |(i, _)| i);
    t[start..].to_owned()
}

/// Frees a uid and kills whatever a call left behind, even when the call's future is dropped.
struct CallGuard {
    pgid: Option<u32>,
    uid: Option<(u32, u32)>,
    /// Released (unlocked) when dropped, after the sweep.
    _uid_lease: Option<std::fs::File>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            sys::kill_group(pgid);
        }
        if let Some((uid, gid)) = self.uid {
            // kill(-1) as the sandbox uid reaches every process of that uid, including any that
            // left the process group (setsid) — and nothing else.
            use std::os::unix::process::CommandExt;
            let _ = std::process::Command::new("/bin/sh")
                .args(["-c", "kill -9 -1 2>/dev/null; true"])
                .uid(uid)
                .gid(gid)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        // `_dir` drops after this: the call's directory is removed once nothing runs in it.
    }
}

impl Sandbox {
    /// A sandbox with these limits; logs which protections are in force on this machine.
    pub fn new(config: SandboxConfig) -> Self {
        let root = sys::euid() == 0;
        let landlock_abi = sys::landlock_abi();
        let protections = Protections {
            dedicated_uid: root,
            landlock_abi,
            no_network: !config.allow_network && (root || landlock_abi.is_some_and(|v| v >= 4)),
            base: true,
        };
        tracing::info!(%protections, "skills sandbox ready");
        Self {
            config,
            protections,
        }
    }

    /// The protections in force.
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Leases a uid for one call. The lease is an exclusive `flock` on a file per uid, so two
    /// sandboxes — in this process or in another agent on the machine — never share a uid (the
    /// sweep after a call kills every process of its uid).
    fn take_uid(&self) -> Option<(u32, std::fs::File)> {
        let dir = std::env::temp_dir().join("llm-toolkit-skill-uids");
        std::fs::create_dir_all(&dir).ok()?;
        let (lo, hi) = self.config.uid_range;
        let span = hi.saturating_sub(lo).max(1);
        let start = (std::process::id().wrapping_mul(2_654_435_761)) % span;
        (0..span).map(|i| lo + (start + i) % span).find_map(|uid| {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(uid.to_string()))
                .ok()?;
            file.try_lock().ok()?;
            Some((uid, file))
        })
    }

    fn landlock(&self, skill_dir: &Path, work: &Path) -> Option<landlock::RulesetCreated> {
        self.protections.landlock_abi?;
        let abi = ABI::V6;
        let read_only = [
            "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt",
        ];
        let devices = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"];
        let mut rs = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .ok()?;
        if !self.config.allow_network {
            rs = rs.handle_access(AccessNet::from_all(abi)).ok()?;
        }
        rs.create()
            .ok()?
            .add_rules(path_beneath_rules(read_only, AccessFs::from_read(abi)))
            .ok()?
            .add_rules(path_beneath_rules([skill_dir], AccessFs::from_read(abi)))
            .ok()?
            .add_rules(path_beneath_rules(devices, AccessFs::from_all(abi)))
            .ok()?
            .add_rules(path_beneath_rules([work], AccessFs::from_all(abi)))
            .ok()
    }

    /// Runs `skill` with `args` on stdin and returns the JSON it printed.
    pub async fn run(&self, skill: &Skill, args: &Value) -> Result<Value, SkillError> {
        let name = skill.name.clone();
        let spawn_err = |reason: String| SkillError::Spawn {
            name: name.clone(),
            reason,
        };

        // Layout: DIR (0711, agent-owned) / skill (a read-only copy) and / work (sandbox-owned).
        let mut builder = tempfile::Builder::new();
        builder.prefix("skill-call-");
        let dir = match &self.config.temp_root {
            Some(root) => builder.tempdir_in(root),
            None => builder.tempdir(),
        }
        .map_err(|e| spawn_err(format!("cannot make a call directory: {e}")))?;
        let skill_copy = dir.path().join("skill");
        let work = dir.path().join("work");
        copy_dir(&skill.dir, &skill_copy, 64 << 20)
            .map_err(|e| spawn_err(format!("cannot copy the skill directory: {e}")))?;
        std::fs::create_dir(&work)
            .map_err(|e| spawn_err(format!("cannot make the work directory: {e}")))?;
        set_mode(dir.path(), 0o711).map_err(|e| spawn_err(e.to_string()))?;

        let (ids, lease) = if self.protections.dedicated_uid {
            let (uid, lease) = self.take_uid().ok_or_else(|| {
                spawn_err("every sandbox uid is in use: too many concurrent skill calls".into())
            })?;
            (Some((uid, uid)), Some(lease))
        } else {
            (None, None)
        };
        let mut guard = CallGuard {
            pgid: None,
            uid: ids,
            _uid_lease: lease,
            _dir: Some(dir),
        };
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&work, Some(uid), Some(gid))
                .map_err(|e| spawn_err(format!("chown: {e}")))?;
        }
        set_mode(&work, 0o700).map_err(|e| spawn_err(e.to_string()))?;

        // Words of the entry that name a file of the skill (`run.py`, `./bin/tool`) point into
        // the skill's copy; everything else (`python3`, flags) is passed as written.
        let words: Vec<String> = skill
            .entry
            .iter()
            .map(|w| {
                let candidate = skill_copy.join(w);
                if !w.starts_with('-') && !Path::new(w).is_absolute() && candidate.is_file() {
                    candidate.to_string_lossy().into_owned()
                } else {
                    w.clone()
                }
            })
            .collect();
        let program = words[0].clone();
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&words[1..])
            .current_dir(&work)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &work)
            .env("TMPDIR", &work)
            .env("LANG", "C.UTF-8")
            .env("SKILL_DIR", &skill_copy)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        for key in &skill.env {
            if let Ok(v) = std::env::var(key) {
                cmd.env(key, v);
            }
        }
        let c = &self.config;
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
        sys::install(
            &mut cmd,
            ChildSetup {
                limits,
                unshare_net: !c.allow_network && ids.is_some(),
                ids,
                landlock: self.landlock(&skill_copy, &work),
            },
        );
        let mut child = cmd
            .spawn()
            .map_err(|e| spawn_err(format!("{program}: {e}")))?;
        guard.pgid = child.id();

        let input = serde_json::to_vec(args).unwrap_or_default();
        if let Some(mut stdin) = child.stdin.take() {
            // A skill that does not read its input is fine: ignore a broken pipe.
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
            });
        }
        let limit = c.output_limit;
        let (over_tx, mut over_rx) = tokio::sync::mpsc::channel::<&'static str>(2);
        let out = tokio::spawn(read_capped(
            child.stdout.take(),
            limit,
            "stdout",
            over_tx.clone(),
        ));
        let err = tokio::spawn(read_capped(child.stderr.take(), limit, "stderr", over_tx));

        let timeout = skill.timeout.unwrap_or(c.timeout);
        let outcome = tokio::select! {
            status = child.wait() => Ok(status),
            _ = tokio::time::sleep(timeout) => Err(SkillError::Timeout { name: name.clone(), secs: timeout.as_secs().max(1) }),
            Some(stream) = over_rx.recv() => Err(SkillError::OutputTooLarge { name: name.clone(), stream, limit: human_bytes(limit) }),
        };
        // Whatever happened, nothing of this call keeps running.
        if let Some(pgid) = guard.pgid {
            sys::kill_group(pgid);
        }
        let _ = child.start_kill();
        let _ = child.wait().await;
        drop(guard); // sweeps the uid, then removes the directory
        let collect = |h: tokio::task::JoinHandle<Vec<u8>>| async move {
            tokio::time::timeout(Duration::from_secs(2), h)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default()
        };
        let (stdout, stderr) = (collect(out).await, collect(err).await);
        // A skill that hit the cap usually dies of the closed pipe (EPIPE) at the same moment, so
        // its exit can win the race above: the cap, recorded by the reader, is the real cause.
        let outcome = match (outcome, over_rx.try_recv()) {
            (Ok(_), Ok(stream)) => Err(SkillError::OutputTooLarge {
                name: name.clone(),
                stream,
                limit: human_bytes(limit),
            }),
            (outcome, _) => outcome,
        };
        let status = outcome?.map_err(|e| spawn_err(format!("wait: {e}")))?;

        if !status.success() {
            use std::os::unix::process::ExitStatusExt;
            let why = match status.signal() {
                Some(libc::SIGXCPU) => "exceeded its CPU time limit".to_owned(),
                Some(libc::SIGXFSZ) => "exceeded its file size limit".to_owned(),
                Some(libc::SIGKILL) => {
                    "was killed (it may have reached its CPU or memory limit)".to_owned()
                }
                Some(s) => format!("was killed by signal {s}"),
                None => format!("exited with status {}", status.code().unwrap_or(-1)),
            };
            let err_tail = tail(&stderr, 400);
            let reason = if err_tail.is_empty() {
                why
            } else {
                format!("{why}: {err_tail}")
            };
            return Err(SkillError::Failed { name, reason });
        }
        serde_json::from_slice(&stdout).map_err(|e| SkillError::NotJson {
            name,
            error: e.to_string(),
            head: tail(&stdout[..stdout.len().min(200)], 200),
        })
    }
}

async fn read_capped(
    pipe: Option<impl AsyncRead + Unpin>,
    limit: usize,
    stream: &'static str,
    over: tokio::sync::mpsc::Sender<&'static str>,
) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return buf,
            Ok(n) => {
                if buf.len() + n > limit {
                    let _ = over.send(stream).await;
                    return buf;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// Copies a skill directory (regular files and directories only; links are skipped), refusing
/// more than `budget` bytes.
fn copy_dir(from: &Path, to: &Path, mut budget: u64) -> std::io::Result<()> {
    fn walk(from: &Path, to: &Path, budget: &mut u64) -> std::io::Result<()> {
        std::fs::create_dir(to)?;
        set_mode(to, 0o755)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let ty = entry.file_type()?;
            let dest = to.join(entry.file_name());
            if ty.is_dir() {
                walk(&entry.path(), &dest, budget)?;
            } else if ty.is_file() {
                let n = std::fs::copy(entry.path(), &dest)?;
                // Readable by the sandbox uid; executable where the original was; never writable.
                use std::os::unix::fs::PermissionsExt;
                let mode = entry.metadata()?.permissions().mode();
                set_mode(&dest, if mode & 0o111 != 0 { 0o555 } else { 0o444 })?;
                *budget = budget.checked_sub(n).ok_or_else(|| {
                    std::io::Error::other("the skill directory is larger than 64 MiB")
                })?;
            }
        }
        Ok(())
    }
    walk(from, to, &mut budget)
}
