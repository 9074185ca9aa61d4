//! Discovery (M1): the tools of running services only — stopped and failed services contribute
//! none — from each server's cached list, fetched again after `notifications/tools/list_changed`;
//! and, for a name that is not among them, why.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use toolwright_core::{ToolError, ToolSpec};

use crate::bridge::{McpBridge, State};
use crate::catalog::{self, McpTool};
use crate::config::ServiceConfig;
use crate::connection::{Connection, lock};
use crate::names;

impl McpBridge {
    /// The running services with their connections, in name order.
    pub(crate) fn running(&self) -> Vec<(ServiceConfig, Arc<Connection>)> {
        lock(&self.inner.services)
            .values()
            .filter_map(|s| match &s.state {
                State::Running(c) => Some((s.config.clone(), c.clone())),
                _ => None,
            })
            .collect()
    }

    /// The tools of running services only (stopped and failed services contribute none),
    /// from the cache; a cache marked stale by `notifications/tools/list_changed` is fetched
    /// again first.
    pub async fn tools(&self) -> Vec<McpTool> {
        self.catalog().await.as_ref().clone()
    }

    /// The catalog, shared: rebuilt only when something that can change it happened since it
    /// was built (a service started, stopped or failed, a config changed, a server said its tool
    /// list changed — the catalog epoch moved — or a list's cache hint, `ttlMs`, ran out);
    /// otherwise the cached one, without copying it.
    pub(crate) async fn catalog(&self) -> Arc<Vec<McpTool>> {
        let epoch = self.inner.catalog_epoch.load(Ordering::SeqCst);
        {
            let cached = lock(&self.inner.catalog);
            if cached.0 == epoch && cached.2.is_none_or(|t| Instant::now() < t) {
                return cached.1.clone();
            }
        }
        let mut lists = Vec::new();
        let mut fresh_until: Option<Instant> = None;
        for (config, connection) in self.running() {
            let mut tools = connection.tools(config.startup_timeout).await;
            tools.retain(|t| config.offers(&t.name));
            lists.push((config.name, tools));
            if let Some(t) = connection.fresh_until() {
                fresh_until = Some(fresh_until.map_or(t, |f| f.min(t)));
            }
        }
        let tools = Arc::new(catalog::build(
            lists.iter().map(|(s, t)| (s.as_str(), t.as_slice())),
        ));
        // Built from what was true at `epoch` or later; a change during the build moved the
        // epoch on, so the next call builds again.
        *lock(&self.inner.catalog) = (epoch, tools.clone(), fresh_until);
        tools
    }

    /// The epoch of the cached catalog when it is still the one [`McpBridge::tools`] would
    /// give (what [`toolwright_core::ToolProvider::list_revision`] answers); `None` when it would be
    /// built again.
    pub(crate) fn catalog_revision(&self) -> Option<u64> {
        let epoch = self.inner.catalog_epoch.load(Ordering::SeqCst);
        let cached = lock(&self.inner.catalog);
        (cached.0 == epoch && cached.2.is_none_or(|t| Instant::now() < t)).then_some(epoch)
    }

    /// The connection and call timeout of a running service, without copying its config.
    pub(crate) fn connection_of(&self, service: &str) -> Option<(Arc<Connection>, Duration)> {
        match lock(&self.inner.services).get(service) {
            Some(s) => match &s.state {
                State::Running(c) => Some((c.clone(), s.config.call_timeout)),
                _ => None,
            },
            None => None,
        }
    }

    /// The registered service a tool name belongs to: the one whose `service__` prefix it
    /// carries, or the service's own name.
    pub(crate) fn service_of(&self, name: &str) -> Option<String> {
        lock(&self.inner.services)
            .values()
            .find(|s| {
                name == s.config.name || name.starts_with(&names::service_prefix(&s.config.name))
            })
            .map(|s| s.config.name.clone())
    }

    /// Whether `service` is running now.
    pub(crate) fn is_running(&self, service: &str) -> bool {
        matches!(
            lock(&self.inner.services).get(service).map(|s| &s.state),
            Some(State::Running(_))
        )
    }

    /// The catalog as [`McpBridge::tools`] last built it, without asking the servers.
    pub(crate) fn last_catalog(&self) -> Arc<Vec<McpTool>> {
        lock(&self.inner.catalog).1.clone()
    }

    /// The full spec of one tool (exposed or original name), or `None`.
    pub async fn describe_tool(&self, name: &str) -> Option<ToolSpec> {
        let tools = self.tools().await;
        catalog::resolve(&tools, name).map(McpTool::spec)
    }

    /// Why `name` cannot be called: its service is not running (a message the model can pass
    /// on, M4), or there is no such tool (`Tool not found: NAME`).
    pub(crate) fn unavailable(&self, name: &str) -> ToolError {
        let map = lock(&self.inner.services);
        for s in map.values() {
            let prefix = names::service_prefix(&s.config.name);
            if name.starts_with(&prefix) || name == s.config.name {
                let state = match &s.state {
                    State::Running(_) => break,
                    State::Stopped => "stopped".to_string(),
                    State::Starting => "still starting".to_string(),
                    State::Error(e) => format!("in error ({e})"),
                };
                return ToolError::unavailable(format!(
                    "The tool {name} belongs to the MCP service {}, which is not running (it is {state}). Tell the user it is unavailable right now and go on without it.",
                    s.config.name
                ));
            }
        }
        ToolError::not_found(name)
    }
}
