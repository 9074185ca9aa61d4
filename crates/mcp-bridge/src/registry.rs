//! The service registry (M5): register, update, remove, list; each service's status.

use crate::bridge::{McpBridge, Service, State};
use crate::config::{ServiceConfig, ServiceUpdate};
use crate::connection::lock;
use crate::error::BridgeError;

/// The status of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceStatus {
    /// Not started, or stopped.
    Stopped,
    /// Being started (spawn, handshake, first tool list).
    Starting,
    /// Up: its tools are offered.
    Running,
    /// It failed to start, exited, broke the protocol or stopped answering; the last error.
    Error(String),
}

impl ServiceStatus {
    /// `running`, `stopped`, `starting` or `error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Error(_) => "error",
        }
    }
}

impl From<&State> for ServiceStatus {
    fn from(state: &State) -> Self {
        match state {
            State::Stopped => Self::Stopped,
            State::Starting => Self::Starting,
            State::Running(_) => Self::Running,
            State::Error(e) => Self::Error(e.clone()),
        }
    }
}

/// A registered service and its status.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServiceInfo {
    /// Its configuration.
    pub config: ServiceConfig,
    /// Its status.
    pub status: ServiceStatus,
    /// The server's process id (also its process group id) while it runs.
    pub pid: Option<i32>,
}

impl McpBridge {
    /// Adds a service (stopped). Saved to the config file when there is one.
    pub fn register(&self, config: ServiceConfig) -> Result<(), BridgeError> {
        config.validate()?;
        {
            let mut map = lock(&self.inner.services);
            if map.contains_key(&config.name) {
                return Err(BridgeError::AlreadyRegistered(config.name));
            }
            map.insert(config.name.clone(), Service::stopped(config));
        }
        self.inner.notify();
        self.persist()
    }

    /// Changes a service. Description and keywords apply at once; a running service whose
    /// command, arguments, environment or directory changed is restarted.
    pub async fn update(&self, name: &str, update: ServiceUpdate) -> Result<(), BridgeError> {
        let process_changed = update.command.is_some()
            || update.args.is_some()
            || update.env.is_some()
            || update.cwd.is_some();
        let running = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            let mut next = svc.config.clone();
            next.apply(update);
            next.validate()?;
            svc.config = next;
            matches!(svc.state, State::Running(_) | State::Starting)
        };
        self.inner.notify();
        self.persist()?;
        if running && process_changed {
            self.restart(name).await?;
        }
        Ok(())
    }

    /// Stops and removes a service.
    pub async fn remove(&self, name: &str) -> Result<(), BridgeError> {
        self.stop(name).await?;
        lock(&self.inner.services).remove(name);
        self.inner.notify();
        self.persist()
    }

    /// Every registered service with its status, in name order.
    pub fn services(&self) -> Vec<ServiceInfo> {
        lock(&self.inner.services)
            .values()
            .map(|s| ServiceInfo {
                config: s.config.clone(),
                status: ServiceStatus::from(&s.state),
                pid: match &s.state {
                    State::Running(c) => c.pid,
                    _ => None,
                },
            })
            .collect()
    }

    /// One service's status.
    pub fn status(&self, name: &str) -> Result<ServiceStatus, BridgeError> {
        lock(&self.inner.services)
            .get(name)
            .map(|s| ServiceStatus::from(&s.state))
            .ok_or_else(|| BridgeError::UnknownService(name.into()))
    }

    /// The server's pid (= its process group id) while it runs.
    pub fn pid(&self, name: &str) -> Option<i32> {
        match lock(&self.inner.services).get(name).map(|s| &s.state) {
            Some(State::Running(c)) => c.pid,
            _ => None,
        }
    }
}
