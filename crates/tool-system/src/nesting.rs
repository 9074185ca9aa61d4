//! Where the current task runs among sub-agents ([`crate::AgentTool`]): the path of sub-agents
//! above it, and the exchange of the run whose calls it serves — through which a sub-agent's
//! held run goes up to the run that called it, and comes back down to be resumed. A task-local
//! the dispatcher carries into a tool call's own task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::run::AgentRun;

tokio::task_local! {
    static NEST: Nest;
}

/// The sub-agent path of a task, and the exchange of the run whose calls it serves.
#[derive(Clone, Default)]
pub(crate) struct Nest {
    /// The sub-agents the task runs under, outermost first (empty at the top).
    pub(crate) path: Arc<[String]>,
    /// The exchange of the run that made the call, if a run made it.
    pub(crate) exchange: Option<Arc<Exchange>>,
}

/// Between one run and the sub-agents its calls run, by the caller's call id: the held runs
/// going down to be resumed, and the runs of sub-agents that held going up.
#[derive(Default)]
pub(crate) struct Exchange {
    /// The ids of the calls the run is running now: only a sub-agent called as one of them
    /// (not one a tool calls in turn, e.g. from a code-mode script) answers to the run.
    serving: Mutex<String>,
    resume: Mutex<HashMap<String, AgentRun>>,
    held: Mutex<HashMap<String, AgentRun>>,
    /// Whether `held` has anything (read on every call, locked only when set).
    any_held: AtomicBool,
}

impl Exchange {
    /// The run is about to run the calls `ids` (one a line, in a buffer used again).
    pub(crate) fn serve<'a>(&self, ids: impl Iterator<Item = &'a str>) {
        let mut buf = lock(&self.serving);
        buf.clear();
        for id in ids {
            buf.push_str(id);
            buf.push('\n');
        }
    }

    /// Whether call `id` is one the run is running now (an id with a line break never is).
    pub(crate) fn serves(&self, id: &str) -> bool {
        lock(&self.serving).lines().any(|s| s == id)
    }

    /// The run of call `id`'s sub-agent to go on with (its calls decided).
    pub(crate) fn put_resume(&self, id: &str, run: AgentRun) {
        lock(&self.resume).insert(id.to_owned(), run);
    }

    /// The run call `id`'s sub-agent goes on with, if it is resumed.
    pub(crate) fn take_resume(&self, id: &str) -> Option<AgentRun> {
        lock(&self.resume).remove(id)
    }

    /// Call `id`'s sub-agent holds calls for a person: its run.
    pub(crate) fn put_held(&self, id: &str, run: AgentRun) {
        lock(&self.held).insert(id.to_owned(), run);
        self.any_held.store(true, Ordering::Release);
    }

    /// Whether call `id`'s sub-agent holds.
    pub(crate) fn is_held(&self, id: &str) -> bool {
        self.any_held.load(Ordering::Acquire) && lock(&self.held).contains_key(id)
    }

    /// The run call `id`'s sub-agent holds, taken.
    pub(crate) fn take_held(&self, id: &str) -> Option<AgentRun> {
        if !self.any_held.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.held).remove(id)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The current task's place among sub-agents, if it has one.
pub(crate) fn current() -> Option<Nest> {
    NEST.try_with(Nest::clone).ok()
}

/// Runs `fut` in `nest` (the dispatcher carries it into a tool call's own task).
pub(crate) async fn within<F: std::future::Future>(nest: Option<Nest>, fut: F) -> F::Output {
    match nest {
        Some(n) => NEST.scope(n, fut).await,
        None => fut.await,
    }
}

/// `fut` — a run's calls — with the run's `exchange`, on the current path (the scope itself,
/// not an `async fn` around it: the calls' future is moved once, not twice, per step).
pub(crate) fn serving<F: std::future::Future>(
    exchange: &Arc<Exchange>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Nest, F> {
    static TOP: std::sync::LazyLock<Arc<[String]>> = std::sync::LazyLock::new(|| Arc::from([]));
    let path = NEST
        .try_with(|n| Arc::clone(&n.path))
        .unwrap_or_else(|_| Arc::clone(&TOP));
    let nest = Nest {
        path,
        exchange: Some(Arc::clone(exchange)),
    };
    NEST.scope(nest, fut)
}

/// Runs `fut` — a sub-agent's run — under `path`, serving no run yet.
pub(crate) async fn under<F: std::future::Future>(path: Arc<[String]>, fut: F) -> F::Output {
    NEST.scope(
        Nest {
            path,
            exchange: None,
        },
        fut,
    )
    .await
}
