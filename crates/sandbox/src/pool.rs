//! The pool of containers made ahead of time: with bubblewrap, the container of a program's
//! next call is made right after a call of it starts (bwrap's `--block-fd` keeps it waiting,
//! with nothing of the program running), so that making it — namespaces, mounts, the uid lease,
//! the call's tmpfs — is off the next call's path. [`Shared`] is what calls and the pool share.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::spawn::{CallKey, Setup, Started, start};
use crate::sys;

/// What calls and the containers made ahead of time share: the call's [`Setup`] (fixed when
/// the sandbox is made, and all a start needs) and the pool's own state.
pub(crate) struct Shared {
    pub(crate) setup: Setup,
    /// Containers made ahead of time, oldest first, at most one per skill.
    pub(crate) ready: Mutex<Vec<Ready>>,
    /// Containers being made ahead right now, each with the call waiting to take it, if any.
    pub(crate) making: Mutex<Vec<Making>>,
    /// Set when the sandbox is dropped: nothing more is made ahead.
    pub(crate) closed: AtomicBool,
    /// Bumped by [`Sandbox::stop_ready`]: a container whose making began before is not kept.
    pub(crate) generation: AtomicU64,
    /// Calls served by a container made ahead of time (waiting, or handed over when made).
    pub(crate) served_ahead: AtomicU64,
    /// Calls that made their own container (or, without one, their own process).
    pub(crate) made_on_call: AtomicU64,
}

impl std::ops::Deref for Shared {
    type Target = Setup;
    fn deref(&self) -> &Setup {
        &self.setup
    }
}

/// A container being made ahead of time. A call of the same key that finds none ready waits
/// for this one instead of making its own: calls back to back would otherwise each make a
/// container while the previous call's is being made, both slower for sharing the CPU.
pub(crate) struct Making {
    pub(crate) key: CallKey,
    /// The call that waits for it; dropped (the call makes its own) if the making fails.
    pub(crate) taker: Option<tokio::sync::oneshot::Sender<Ready>>,
}

/// A container made ahead of time, waiting (bwrap's `--block-fd`) before it runs the skill.
pub(crate) struct Ready {
    pub(crate) key: CallKey,
    pub(crate) started: Option<Started>,
    /// A byte written here lets the container run the skill.
    pub(crate) go: Option<std::io::PipeWriter>,
}

impl Ready {
    /// Whether bwrap is still waiting (it has not died, e.g. of a host problem).
    pub(crate) fn alive(&mut self) -> bool {
        self.started
            .as_mut()
            .is_some_and(|s| matches!(s.child.try_wait(), Ok(None)))
    }

    /// Lets the container run the skill, and hands the call over.
    pub(crate) fn go(mut self) -> std::io::Result<Started> {
        let mut go = self
            .go
            .take()
            .ok_or_else(|| std::io::Error::other("no start pipe"))?;
        std::io::Write::write_all(&mut go, b"x")?;
        drop(go);
        self.started
            .take()
            .ok_or_else(|| std::io::Error::other("already started"))
    }
}

/// A container that no call took is killed before its start pipe is closed: bwrap reads the
/// closed pipe as "go", so closing it first would run the skill without a call. The outer
/// bwrap is killed and reaped (its death kills the inner one, `--die-with-parent`), then the
/// pipe is closed, then the host side is swept and removed (`CallGuard`).
impl Drop for Ready {
    fn drop(&mut self) {
        if let Some(mut s) = self.started.take() {
            if let Some(pgid) = s.guard.pgid {
                sys::kill_group(pgid);
            }
            let _ = s.child.start_kill();
            for _ in 0..1000 {
                match s.child.try_wait() {
                    Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                    _ => break,
                }
            }
            drop(self.go.take());
            drop(s);
        }
    }
}

impl Shared {
    pub(crate) fn lock_ready(&self) -> std::sync::MutexGuard<'_, Vec<Ready>> {
        self.ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_making(&self) -> std::sync::MutexGuard<'_, Vec<Making>> {
        self.making
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that a container for `key` is being made ahead, unless one is already (being)
    /// made; whether the caller should make it.
    pub(crate) fn begin_making(&self, key: &CallKey) -> bool {
        if self.lock_ready().iter().any(|r| &r.key == key) {
            return false;
        }
        let mut making = self.lock_making();
        if making.iter().any(|m| &m.key == key) {
            return false;
        }
        making.push(Making {
            key: key.clone(),
            taker: None,
        });
        true
    }

    /// When a container for `key` is being made and no other call waits for it: where it will
    /// be handed over.
    pub(crate) fn wait_for_making(
        &self,
        key: &CallKey,
    ) -> Option<tokio::sync::oneshot::Receiver<Ready>> {
        let mut making = self.lock_making();
        let m = making
            .iter_mut()
            .find(|m| &m.key == key && m.taker.is_none())?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        m.taker = Some(tx);
        Some(rx)
    }

    /// The container made ahead for `key`, if one is still waiting.
    pub(crate) fn take_ready(&self, key: &CallKey) -> Option<Ready> {
        let mut ready = {
            let mut all = self.lock_ready();
            let i = all.iter().position(|r| &r.key == key)?;
            all.remove(i)
        };
        // A dead one (bwrap failed) is dropped, reaped at once; the call makes its own.
        ready.alive().then_some(ready)
    }
}

/// Makes the container of `key`'s next call ahead of time, unless one waits already, the
/// sandbox is gone or [`Sandbox::stop_ready`] was called since `generation` was read; the
/// oldest waiting container gives way when there are too many.
pub(crate) async fn make_ready(shared: Arc<Shared>, key: CallKey, generation: u64) {
    // However this ends, `key`'s entry in `making` (put there by the caller) goes: a call
    // waiting for a container that is not handed over then looks in the list, or makes its own.
    struct Done<'a>(&'a Shared, &'a CallKey);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.lock_making().retain(|m| &m.key != self.1);
        }
    }
    let _done = Done(&shared, &key);
    let has = |shared: &Shared| shared.lock_ready().iter().any(|r| r.key == key);
    if shared.closed.load(Ordering::Acquire) || has(&shared) {
        return;
    }
    let ready = match start(&shared, &key).await {
        Ok((started, Some(go))) => Ready {
            key: key.clone(),
            started: Some(started),
            go: Some(go),
        },
        Ok((started, None)) => {
            drop(started);
            return;
        }
        Err(e) => {
            tracing::debug!(skill = %key.name, error = %e, "could not make a container ahead of time");
            return;
        }
    };
    let taker = shared
        .lock_making()
        .iter_mut()
        .find(|m| m.key == key)
        .and_then(|m| m.taker.take());
    let ready = match taker {
        Some(tx)
            if !shared.closed.load(Ordering::Acquire)
                && shared.generation.load(Ordering::Acquire) == generation =>
        {
            match tx.send(ready) {
                Ok(()) => return,
                Err(ready) => ready, // the call went away: keep it for the next one
            }
        }
        _ => ready,
    };
    let surplus = {
        let mut all = shared.lock_ready();
        if shared.closed.load(Ordering::Acquire)
            || shared.generation.load(Ordering::Acquire) != generation
            || all.iter().any(|r| r.key == key)
        {
            Some(ready)
        } else {
            let old = (all.len() >= shared.config.ready_containers).then(|| all.remove(0));
            all.push(ready);
            old
        }
    };
    if let Some(r) = surplus {
        let _ = tokio::task::spawn_blocking(move || drop(r)).await;
    }
}
