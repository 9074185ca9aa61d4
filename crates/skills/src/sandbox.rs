//! Running one skill call on the [`sandbox`] crate: a skill's manifest becomes a
//! [`toolwright_sandbox::Program`] (its directory, `entry`, the variables and time limit it asks for), its
//! JSON arguments the program's stdin, and its stdout the JSON result. What a skill asks for and
//! will not get is reported at load ([`Sandbox::check_requests`]).
//!
//! Threat model: the operator (who builds the [`SandboxConfig`]) is trusted; the skill's author
//! and the model choosing its arguments are not. A skill asks (`env`, `timeout_secs`), the
//! operator's configuration grants. See `docs/skills.md`.

use std::time::Duration;

use serde_json::Value;
use toolwright_sandbox::{FrameHandler, Program, Protections, RunError, SandboxConfig};

use crate::manifest::is_plain_relative;
use crate::{Skill, SkillLoadError};

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
    /// The sandbox refuses calls: no container can be made on this machine and the operator
    /// did not accept the weaker boundary ([`Protections::refused`]).
    #[error("skill {name} was not run: {reason}")]
    Refused {
        /// Skill name.
        name: String,
        /// What to install, and the option that accepts the weaker boundary.
        reason: String,
    },
    /// An interactive call was ended by its handler (`FrameReply::Stop`); the program was
    /// killed.
    #[error("skill {name} was stopped: {reason}")]
    Stopped {
        /// Skill name.
        name: String,
        /// The handler's reason.
        reason: String,
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

impl SkillError {
    /// The sandbox's error as the skill's (the same cases; the messages name the skill).
    fn from_run(e: RunError) -> Self {
        match e {
            RunError::Timeout { name, secs } => Self::Timeout { name, secs },
            RunError::OutputTooLarge {
                name,
                stream,
                limit,
            } => Self::OutputTooLarge {
                name,
                stream,
                limit,
            },
            RunError::Failed { name, reason } => Self::Failed { name, reason },
            RunError::NotJson { name, error, head } => Self::NotJson { name, error, head },
            RunError::Refused { name, reason } => Self::Refused { name, reason },
            RunError::Stopped { name, reason } => Self::Stopped { name, reason },
            // `RunError` is non-exhaustive: a new case is at least a failure to start.
            other => Self::Spawn {
                name: other.name().to_owned(),
                reason: match other {
                    RunError::Spawn { reason, .. } => reason,
                    other => other.to_string(),
                },
            },
        }
    }
}

/// Runs skills, one sandboxed child process per call ([`toolwright_sandbox::Sandbox`], which this wraps).
///
/// With bubblewrap, the container of a skill's next call is made ahead of time, right after a
/// call of that skill starts (see [`SandboxConfig::ready_containers`]): making it — namespaces,
/// mounts, the uid lease, the call's tmpfs — is then off the next call's path. Dropping the
/// sandbox kills every container it made ahead of time.
pub struct Sandbox {
    inner: toolwright_sandbox::Sandbox,
}

/// As before the split: the configuration, the protections and the containers waiting.
impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// The program a call of `skill` runs.
fn program(skill: &Skill) -> Program {
    let mut p = Program::new(skill.name.clone(), skill.dir.clone(), skill.entry.clone());
    p.env.clone_from(&skill.env);
    p.timeout = skill.timeout;
    p
}

/// The files and directories of `skill` that a uid which neither owns them nor is in their
/// group cannot read (files: `o+r`; directories: `o+rx`; an entry program of the skill: `o+rx`),
/// each as a rejection saying the `chmod` to run. Links are followed to no other place (the
/// loader allows only links within the skill, whose targets are checked themselves).
fn unreadable_by_others(skill: &Skill) -> Vec<SkillLoadError> {
    use std::os::unix::fs::PermissionsExt;
    let program = skill
        .entry
        .first()
        .filter(|w| is_plain_relative(w))
        .map(|w| skill.dir.join(w));
    let mut out = Vec::new();
    let mut stack = vec![skill.dir.clone()];
    let mut seen = 0usize;
    while let Some(path) = stack.pop() {
        seen += 1;
        if seen > crate::MAX_SKILL_DIR_ENTRIES + 1 || out.len() >= 20 {
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o7777;
        let (need, what, fix) = if meta.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&path) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
            (0o005, "directory", "o+rx")
        } else if meta.is_file() {
            if program.as_deref() == Some(path.as_path()) {
                (0o005, "entry program", "o+rx")
            } else {
                (0o004, "file", "o+r")
            }
        } else {
            continue;
        };
        if mode & need != need {
            out.push(SkillLoadError::rejected_dir(
                &path,
                format!(
                    "this {what} of skill {} is not readable by the sandbox's uid (mode {mode:04o}): calls run as a uid of their own, neither its owner nor in its group; fix: chmod {fix} {} (or chmod -R o+rX {})",
                    skill.name,
                    path.display(),
                    skill.dir.display()
                ),
            ));
        }
    }
    out
}

impl Sandbox {
    /// A sandbox with these limits and grants. Finds bubblewrap and checks, by running one empty
    /// container, that it works here; logs which protections are in force on this machine.
    /// Blocking (tens of milliseconds): call it at start-up, or through `spawn_blocking`.
    pub fn new(config: SandboxConfig) -> Self {
        Self {
            inner: toolwright_sandbox::Sandbox::new(config),
        }
    }

    /// The program-level sandbox underneath (to run programs that are not skills with the same
    /// limits, pool and protections).
    pub fn programs(&self) -> &toolwright_sandbox::Sandbox {
        &self.inner
    }

    /// How calls got their container so far: `(made ahead of time, made by the call)`. A call
    /// right after another of the same skill takes the container being made for it, so in a
    /// loop of calls only the first makes its own.
    pub fn containers_used(&self) -> (u64, u64) {
        self.inner.containers_used()
    }

    /// The protections in force.
    pub fn protections(&self) -> &Protections {
        self.inner.protections()
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        self.inner.config()
    }

    /// How many containers started ahead of time are waiting for a call (each for one skill;
    /// bwrap may still be making some of them).
    pub fn ready(&self) -> usize {
        self.inner.ready()
    }

    /// Whether a container was started ahead of time for the next call of `skill` (with the
    /// environment granted to it now). bwrap may still be making it: a call that takes it then
    /// waits for the rest.
    pub fn is_ready(&self, skill: &Skill) -> bool {
        self.inner.is_ready(&program(skill))
    }

    /// Kills the containers made ahead of time, and those being made (a call of their skill
    /// makes them again), e.g. after the skills on disk changed. Blocking for a few
    /// milliseconds per container.
    pub fn stop_ready(&self) {
        self.inner.stop_ready();
    }

    /// The wall-clock limit of a call of `skill`: what it asks for (or the default), cut to the
    /// operator's cap for it.
    pub fn timeout_for(&self, skill: &Skill) -> Duration {
        self.config().timeout_for(&skill.name, skill.timeout)
    }

    /// The environment variables `skill` asks for that the operator granted.
    pub fn granted_env<'s>(&self, skill: &'s Skill) -> Vec<&'s str> {
        skill
            .env
            .iter()
            .filter(|v| self.config().is_granted(&skill.name, v))
            .map(String::as_str)
            .collect()
    }

    /// What `skill` asks for and will not get, as load reports with file and line: each
    /// ungranted variable, a time limit above the cap ([`crate::LoadOutcome::Restricted`]);
    /// and, when calls run as a dedicated uid (the agent is root), each file or directory of
    /// the skill that uid could not read, with the `chmod` that fixes it
    /// ([`crate::LoadOutcome::Rejected`]: its calls could not work).
    pub fn check_requests(&self, skill: &Skill) -> Vec<SkillLoadError> {
        let mut out = Vec::new();
        if self.protections().dedicated_uid {
            out.extend(unreadable_by_others(skill));
        }
        for (i, var) in skill.env.iter().enumerate() {
            if !self.config().is_granted(&skill.name, var) {
                out.push(SkillLoadError::restricted(
                    &skill.file,
                    skill.env_line(i),
                    format!(
                        "env: {var} is not granted to skill {}, so it will not be passed; if the skill should have it, grant it in SandboxConfig (env, or grants[\"{}\"].env)",
                        skill.name, skill.name
                    ),
                ));
            }
        }
        if let Some(asked) = skill.timeout {
            let given = self.timeout_for(skill);
            if asked > given {
                out.push(SkillLoadError::restricted(
                    &skill.file,
                    skill.timeout_line(),
                    format!(
                        "timeout_secs {} is above the {} s the operator allows, so calls stop after {} s; to allow more, raise SandboxConfig max_timeout or grants[\"{}\"].max_timeout",
                        asked.as_secs_f64(),
                        given.as_secs_f64(),
                        given.as_secs_f64(),
                        skill.name
                    ),
                ));
            }
        }
        out
    }

    /// Runs `skill` with `args` on stdin and returns the JSON it printed. The call's time limit
    /// counts from here, whether its container was made ahead of time or is made now.
    pub async fn run(&self, skill: &Skill, args: &Value) -> Result<Value, SkillError> {
        let input = serde_json::to_vec(args).unwrap_or_default();
        let out = self
            .inner
            .run(&program(skill), &input)
            .await
            .map_err(SkillError::from_run)?;
        let stdout = out.stdout;
        serde_json::from_slice(&stdout).map_err(|e| SkillError::NotJson {
            name: skill.name.clone(),
            error: e.to_string(),
            head: tail(&stdout[..stdout.len().min(200)], 200),
        })
    }

    /// Runs `skill` as a conversation: `input` goes to its stdin as one JSON line; then every
    /// line it prints on stdout is a *frame* (one JSON value) given to `handler`, whose
    /// `FrameReply::Answer` is written back to its stdin as one JSON line, until the program
    /// exits. `Ok(())` when it exits with status 0.
    ///
    /// The sandbox is the same as for [`Sandbox::run`] — one container per call, the same
    /// limits — and the call's time limit covers the whole conversation, the handler's work
    /// included. All of stdout over the call (frames) counts against
    /// [`SandboxConfig::output_limit`], as does stderr. A line that is not JSON ends the call
    /// ([`SkillError::NotJson`]); `FrameReply::Stop` ends it ([`SkillError::Stopped`]).
    ///
    /// ```no_run
    /// # async fn demo(sandbox: &toolwright_skills::Sandbox, skill: &toolwright_skills::Skill) -> Result<(), toolwright_skills::SkillError> {
    /// use serde_json::{json, Value};
    /// use toolwright_sandbox::{FrameHandler, FrameReply};
    /// /// Answers every `{"add": [a, b]}` frame with the sum.
    /// struct Adder;
    /// #[async_trait::async_trait]
    /// impl FrameHandler for Adder {
    ///     async fn frame(&mut self, frame: Value) -> FrameReply {
    ///         let a = frame["add"][0].as_i64().unwrap_or(0);
    ///         let b = frame["add"][1].as_i64().unwrap_or(0);
    ///         FrameReply::Answer(json!(a + b))
    ///     }
    /// }
    /// sandbox.run_interactive(skill, &json!({"start": 1}), &mut Adder).await
    /// # }
    /// ```
    pub async fn run_interactive(
        &self,
        skill: &Skill,
        input: &Value,
        handler: &mut (dyn FrameHandler + '_),
    ) -> Result<(), SkillError> {
        self.inner
            .run_interactive(&program(skill), input, handler)
            .await
            .map_err(SkillError::from_run)
    }
}

/// The last `n` characters of `s`, trimmed (what an error shows of a bad output).
fn tail(s: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(s);
    let t = text.trim();
    let start = t.char_indices().rev().nth(n).map_or(0, |(i, _)| i);
    t[start..].to_owned()
}
