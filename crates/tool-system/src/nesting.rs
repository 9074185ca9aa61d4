//! The path of sub-agents the current task runs under ([`crate::AgentTool`]): a task-local the
//! dispatcher carries into a tool call's own task.

use std::sync::Arc;

tokio::task_local! {
    /// The sub-agents the current task runs under, outermost first.
    pub(crate) static PATH: Arc<[String]>;
}

/// The sub-agent path of the current task (empty at the top).
pub(crate) fn current_path() -> Option<Arc<[String]>> {
    PATH.try_with(Arc::clone).ok()
}

/// Runs `fut` under `path` (the dispatcher carries the path into a tool call's own task).
pub(crate) async fn within<F: std::future::Future>(
    path: Option<Arc<[String]>>,
    fut: F,
) -> F::Output {
    match path {
        Some(p) => PATH.scope(p, fut).await,
        None => fut.await,
    }
}
