//! [`Sandbox`]: runs programs, one sandboxed child process per run, and the two ways to run
//! one — [`Sandbox::run`] (stdin bytes in, stdout and stderr out) and
//! [`Sandbox::run_interactive`] (the frame protocol) — with what every run shares: the time
//! limit, the output caps, the exit status read as a reason.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::config::SandboxConfig;
use crate::error::RunError;
use crate::frame::{Ended, FrameHandler, converse};
use crate::pool::{Ready, Shared, make_ready};
use crate::probe::{Probed, Protections, probe};
use crate::program::{Output, Program, tail};
use crate::seccomp;
use crate::spawn::{CallGuard, CallKey, Setup, start};
use crate::sys;

/// Runs programs, one sandboxed child process per run.
///
/// With bubblewrap, the container of a program's next run is made ahead of time, right after a
/// run of that program starts (see [`SandboxConfig::ready_containers`]): making it — namespaces,
/// mounts, the uid lease, the run's tmpfs — is then off the next run's path. Dropping the
/// sandbox kills every container it made ahead of time.
pub struct Sandbox {
    protections: Protections,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("config", &self.shared.config)
            .field("protections", &self.protections)
            .field("ready", &self.ready())
            .finish()
    }
}

/// A size as the sandbox's messages state it: whole MiB or KiB when it is one, else bytes — so
/// a caller's own messages about the same limits read alike.
///
/// ```
/// assert_eq!(toolwright_sandbox::human_bytes(64 << 20), "64 MiB");
/// assert_eq!(toolwright_sandbox::human_bytes(3 << 10), "3 KiB");
/// assert_eq!(toolwright_sandbox::human_bytes(1500), "1500 bytes");
/// ```
pub fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

impl Sandbox {
    /// A sandbox with these limits and grants. Finds bubblewrap and checks, by running one empty
    /// container, that it works here; logs which protections are in force on this machine.
    /// Blocking (tens of milliseconds): call it at start-up, or through `spawn_blocking`.
    pub fn new(config: SandboxConfig) -> Self {
        let Probed {
            protections,
            bwrap,
            root,
            shared_net,
            user_maps,
            policy,
        } = probe(&config);
        let shared = Shared {
            setup: Setup {
                container_filter: seccomp::to_bytes(&seccomp::program(policy)),
                fallback_filter: seccomp::program(seccomp::Policy {
                    allow_user_namespaces: config.allow_user_namespaces,
                    deny_unix_sockets: !config.allow_network,
                    only_unix_sockets: false,
                }),
                shared_net,
                landlock: protections.landlock_abi.is_some(),
                user_maps,
                config,
                bwrap,
                root,
            },
            ready: Mutex::new(Vec::new()),
            making: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            served_ahead: AtomicU64::new(0),
            made_on_call: AtomicU64::new(0),
        };
        Self {
            protections,
            shared: Arc::new(shared),
        }
    }

    /// Starts making the container of `key`'s next call, unless one is (being) made already.
    fn make_next(&self, key: &CallKey) {
        if self.shared.bwrap.is_some()
            && self.shared.config.ready_containers > 0
            && self.shared.begin_making(key)
        {
            let generation = self.shared.generation.load(Ordering::Acquire);
            tokio::spawn(make_ready(
                Arc::clone(&self.shared),
                key.clone(),
                generation,
            ));
        }
    }

    /// How calls got their container so far: `(made ahead of time, made by the call)`. A call
    /// right after another of the same program takes the container being made for it, so in a
    /// loop of calls only the first makes its own.
    pub fn containers_used(&self) -> (u64, u64) {
        (
            self.shared.served_ahead.load(Ordering::Relaxed),
            self.shared.made_on_call.load(Ordering::Relaxed),
        )
    }

    /// The protections in force.
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.shared.config
    }

    /// How many containers started ahead of time are waiting for a call (each for one program;
    /// bwrap may still be making some of them).
    pub fn ready(&self) -> usize {
        self.shared.lock_ready().len()
    }

    /// Whether a container was started ahead of time for the next run of `program` (with the
    /// environment granted to it now). bwrap may still be making it: a run that takes it then
    /// waits for the rest.
    pub fn is_ready(&self, program: &Program) -> bool {
        let key = self.key(program);
        self.shared.lock_ready().iter().any(|r| r.key == key)
    }

    /// Kills the containers made ahead of time, and those being made (a run of their program
    /// makes them again), e.g. after the programs on disk changed. Blocking for a few
    /// milliseconds per container.
    pub fn stop_ready(&self) {
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        let all = std::mem::take(&mut *self.shared.lock_ready());
        drop(all);
    }

    /// The wall-clock limit of a run of `program`: what it asks for (or the default), cut to the
    /// operator's cap for it ([`SandboxConfig::timeout_for`]).
    pub fn timeout_for(&self, program: &Program) -> Duration {
        self.shared
            .config
            .timeout_for(&program.name, program.timeout)
    }

    /// The environment variables `program` asks for that the operator granted.
    pub fn granted_env<'p>(&self, program: &'p Program) -> Vec<&'p str> {
        program
            .env
            .iter()
            .filter(|v| self.shared.config.is_granted(&program.name, v))
            .map(String::as_str)
            .collect()
    }

    fn key(&self, program: &Program) -> CallKey {
        CallKey {
            name: program.name.clone(),
            dir: program.dir.clone(),
            entry: program.argv.clone(),
            env: self
                .granted_env(program)
                .into_iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (k.to_owned(), v)))
                .collect(),
        }
    }

    /// Runs `program` with `stdin` as its standard input and returns what it printed, when it
    /// exits with status 0. The run's time limit counts from here, whether its container was
    /// made ahead of time or is made now.
    pub async fn run(&self, program: &Program, stdin: &[u8]) -> Result<Output, RunError> {
        let timeout = self.timeout_for(program);
        let deadline = tokio::time::Instant::now() + timeout;
        let name = program.name.clone();
        let (mut child, guard, key) = self.begin(program).await?;
        let container = self.shared.bwrap.is_some();

        let input = stdin.to_vec();
        if let Some(mut stdin) = child.stdin.take() {
            // A program that does not read its input is fine: ignore a broken pipe.
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
            });
        }
        let limit = self.shared.config.output_limit;
        let (over_tx, mut over_rx) = tokio::sync::mpsc::channel::<&'static str>(2);
        let out = tokio::spawn(read_capped(
            child.stdout.take(),
            limit,
            "stdout",
            over_tx.clone(),
        ));
        let err = tokio::spawn(read_capped(child.stderr.take(), limit, "stderr", over_tx));

        let outcome = tokio::select! {
            status = child.wait() => Ok(status),
            _ = tokio::time::sleep_until(deadline) => Err(RunError::Timeout { name: name.clone(), secs: timeout.as_secs().max(1) }),
            Some(stream) = over_rx.recv() => Err(RunError::OutputTooLarge { name: name.clone(), stream, limit: human_bytes(limit) }),
        };
        self.end(&mut child, guard, &key).await;
        let (stdout, stderr) = (collect(out).await, collect(err).await);
        // A program that hit the cap usually dies of the closed pipe (EPIPE) at the same moment, so
        // its exit can win the race above: the cap, recorded by the reader, is the real cause.
        let outcome = match (outcome, over_rx.try_recv()) {
            (Ok(_), Ok(stream)) => Err(RunError::OutputTooLarge {
                name: name.clone(),
                stream,
                limit: human_bytes(limit),
            }),
            (outcome, _) => outcome,
        };
        let status = outcome?.map_err(|e| RunError::Spawn {
            name: name.clone(),
            reason: format!("wait: {e}"),
        })?;
        if let Some(reason) = failure(status, &stderr, container) {
            return Err(RunError::Failed { name, reason });
        }
        Ok(Output { stdout, stderr })
    }

    /// Runs `program` as a conversation: `input` goes to its stdin as one JSON line; then every
    /// line it prints on stdout is a *frame* (one JSON value) given to `handler`, whose
    /// [`FrameReply::Answer`](crate::FrameReply::Answer) is written back to its stdin as one JSON line, until the program
    /// exits. `Ok(())` when it exits with status 0.
    ///
    /// The sandbox is the same as for [`Sandbox::run`] — one container per call, the same
    /// limits — and the call's time limit covers the whole conversation, the handler's work
    /// included. All of stdout over the call (frames) counts against
    /// [`SandboxConfig::output_limit`], as does stderr. A line that is not JSON ends the call
    /// ([`RunError::NotJson`]); [`FrameReply::Stop`](crate::FrameReply::Stop) ends it ([`RunError::Stopped`]).
    ///
    /// ```no_run
    /// # async fn demo(sandbox: &toolwright_sandbox::Sandbox, program: &toolwright_sandbox::Program) -> Result<(), toolwright_sandbox::RunError> {
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
    /// sandbox.run_interactive(program, &json!({"start": 1}), &mut Adder).await
    /// # }
    /// ```
    pub async fn run_interactive(
        &self,
        program: &Program,
        input: &Value,
        handler: &mut (dyn FrameHandler + '_),
    ) -> Result<(), RunError> {
        let timeout = self.timeout_for(program);
        let deadline = tokio::time::Instant::now() + timeout;
        let name = program.name.clone();
        let (mut child, guard, key) = self.begin(program).await?;
        let container = self.shared.bwrap.is_some();
        let limit = self.shared.config.output_limit;
        let (over_tx, mut over_rx) = tokio::sync::mpsc::channel::<&'static str>(2);
        let err = tokio::spawn(read_capped(child.stderr.take(), limit, "stderr", over_tx));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();

        let outcome = tokio::select! {
            r = async {
                // Ended early (stopped, a bad frame, too much): killed below, not waited for.
                match converse(stdin, stdout, input, handler, limit).await {
                    Ok(()) => Ok(child.wait().await),
                    Err(ended) => Err(ended),
                }
            } => Ok(r),
            _ = tokio::time::sleep_until(deadline) => Err(RunError::Timeout { name: name.clone(), secs: timeout.as_secs().max(1) }),
            Some(stream) = over_rx.recv() => Err(RunError::OutputTooLarge { name: name.clone(), stream, limit: human_bytes(limit) }),
        };
        self.end(&mut child, guard, &key).await;
        let stderr = collect(err).await;
        let status = match outcome? {
            Ok(status) => status,
            Err(Ended::Stopped(reason)) => return Err(RunError::Stopped { name, reason }),
            Err(Ended::TooLarge) => {
                return Err(RunError::OutputTooLarge {
                    name,
                    stream: "stdout",
                    limit: human_bytes(limit),
                });
            }
            Err(Ended::NotJson { error, head }) => {
                return Err(RunError::NotJson { name, error, head });
            }
        };
        if let Ok(stream) = over_rx.try_recv() {
            return Err(RunError::OutputTooLarge {
                name,
                stream,
                limit: human_bytes(limit),
            });
        }
        let status = status.map_err(|e| RunError::Spawn {
            name: name.clone(),
            reason: format!("wait: {e}"),
        })?;
        match failure(status, &stderr, container) {
            Some(reason) => Err(RunError::Failed { name, reason }),
            None => Ok(()),
        }
    }

    /// Takes (or makes) the container of a run of `program` and lets it run the program.
    async fn begin(
        &self,
        program: &Program,
    ) -> Result<(tokio::process::Child, CallGuard, CallKey), RunError> {
        if let Some(reason) = &self.protections.refused {
            return Err(RunError::Refused {
                name: program.name.clone(),
                reason: reason.clone(),
            });
        }
        let spawn_err = |reason: String| RunError::Spawn {
            name: program.name.clone(),
            reason,
        };
        program.check().map_err(spawn_err)?;
        let key = self.key(program);
        // Whether this call came while its container was still being made: calls of the skill
        // in a loop. Then the next one's making starts now, beside this call, not after it.
        let mut in_a_loop = false;
        let ready = match self.shared.take_ready(&key) {
            Some(ready) => Some(ready),
            // One is being made for this skill: take it when it is ready (sooner than making
            // another), or, if its making fails, make our own.
            None => match self.shared.wait_for_making(&key) {
                Some(handover) => {
                    in_a_loop = true;
                    match handover.await {
                        Ok(mut ready) => ready.alive().then_some(ready),
                        // Made but not handed over (a race with its end): it waits in the list.
                        Err(_) => self.shared.take_ready(&key),
                    }
                }
                // Or it was finished between the two looks.
                None => self.shared.take_ready(&key),
            },
        };
        let counter = match ready {
            Some(_) => &self.shared.served_ahead,
            None => &self.shared.made_on_call,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if in_a_loop {
            self.make_next(&key);
        }
        let started = match ready {
            Some(ready) => ready.go(),
            None => match start(&self.shared, &key).await.map_err(spawn_err)? {
                (started, None) => Ok(started),
                (started, Some(go)) => Ready {
                    key: key.clone(),
                    started: Some(started),
                    go: Some(go),
                }
                .go(),
            },
        }
        .map_err(|e| spawn_err(format!("starting the container: {e}")))?;
        Ok((started.child, started.guard, key))
    }

    /// Whatever happened, nothing of the call keeps running: its process group is killed and
    /// reaped; the next call's container is started; the host side is cleaned up in the
    /// background.
    async fn end(&self, child: &mut tokio::process::Child, mut guard: CallGuard, key: &CallKey) {
        // (Taken: once bwrap is reaped its pid may be reused, so the group is not signalled
        // again later.)
        if let Some(pgid) = guard.pgid.take() {
            sys::kill_group(pgid);
        }
        let _ = child.start_kill();
        let _ = child.wait().await;
        // The next call's container, unless its making began already (a loop, in `begin`);
        // made now, not while this call ran (on two cores it would have slowed the call down),
        // and registered before this call answers, so that a call right after it waits for
        // this container instead of making one of its own.
        self.make_next(key);
        // bwrap is dead, and the skill with it (`--die-with-parent`); the skill is PID 1 of its
        // namespace, so the kernel kills everything else in it. Sweeping the uid, unmounting and
        // removing the directory need not hold the answer up. The uid stays leased until the
        // sweep is done, so no call can get it before.
        tokio::spawn(guard.finish());
    }
}

/// What a reader task collected, waiting at most 2 s for it.
async fn collect(h: tokio::task::JoinHandle<Vec<u8>>) -> Vec<u8> {
    tokio::time::timeout(Duration::from_secs(2), h)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// Why a finished call failed, from its exit status and the end of its stderr; `None` when it
/// exited with status 0.
fn failure(status: std::process::ExitStatus, stderr: &[u8], container: bool) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    if status.success() {
        return None;
    }
    // bwrap reports a skill killed by signal N as exit status 128 + N (as shells do).
    let signal = status.signal().or_else(|| {
        status
            .code()
            .filter(|c| container && (129..=128 + 64).contains(c))
            .map(|c| c - 128)
    });
    let why = match signal {
        Some(libc::SIGXCPU) => "exceeded its CPU time limit".to_owned(),
        Some(libc::SIGXFSZ) => "exceeded its file size limit".to_owned(),
        Some(libc::SIGKILL) => {
            "was killed (it may have reached its CPU or memory limit)".to_owned()
        }
        Some(s) => format!("was killed by signal {s}"),
        None => format!("exited with status {}", status.code().unwrap_or(-1)),
    };
    let err_tail = tail(stderr, 400);
    Some(if err_tail.is_empty() {
        why
    } else {
        format!("{why}: {err_tail}")
    })
}

/// Reads `pipe` to its end, keeping at most `limit` bytes; past that, says which `stream` went
/// over on `over` and stops.
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

/// Kills the containers made ahead of time, now (the calls under way clean up after themselves).
impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.stop_ready();
    }
}
