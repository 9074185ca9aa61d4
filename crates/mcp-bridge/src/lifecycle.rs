//! Lifecycle: start, stop, restart. A start spawns the server and waits for its handshake and
//! first tool list ([`crate::connection`]); a failure at any point, then or later, puts the
//! service in `error` with the reason; a stop waits until its whole process group is gone.

use std::sync::Arc;

use crate::bridge::{McpBridge, State};
use crate::connection::{Connection, STOP_GRACE, lock};
use crate::error::BridgeError;

impl McpBridge {
    /// Starts a service: spawn, MCP handshake and first tool list, all within its startup
    /// timeout. On failure the service is in `error` with the reason and nothing is left running.
    /// Starting a running service does nothing.
    pub async fn start(&self, name: &str) -> Result<(), BridgeError> {
        let (config, generation) = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            if matches!(svc.state, State::Running(_) | State::Starting) {
                return Ok(());
            }
            svc.generation += 1;
            svc.state = State::Starting;
            (svc.config.clone(), svc.generation)
        };
        // A failure after the start (exit, protocol violation, hang) lands here, unless the
        // service was stopped or restarted in between.
        let weak = Arc::downgrade(&self.inner);
        let service = name.to_owned();
        let on_failure = move |reason: String| {
            if let Some(inner) = weak.upgrade()
                && let Some(svc) = lock(&inner.services).get_mut(&service)
                && svc.generation == generation
                && matches!(svc.state, State::Running(_))
            {
                svc.state = State::Error(reason);
            }
        };
        match Connection::launch(&config, generation, on_failure).await {
            Ok(connection) => {
                let mut map = lock(&self.inner.services);
                match map.get_mut(name) {
                    Some(svc) if svc.generation == generation => {
                        svc.state = State::Running(connection);
                        Ok(())
                    }
                    _ => {
                        // Stopped or removed while starting.
                        connection.end(None);
                        Err(BridgeError::StartFailed {
                            service: name.into(),
                            reason: "stopped while starting".into(),
                        })
                    }
                }
            }
            Err(reason) => {
                tracing::warn!(service = %name, "MCP service failed to start: {reason}");
                if let Some(svc) = lock(&self.inner.services).get_mut(name)
                    && svc.generation == generation
                {
                    svc.state = State::Error(reason.clone());
                }
                Err(BridgeError::StartFailed {
                    service: name.into(),
                    reason,
                })
            }
        }
    }

    /// Starts every stopped or failed service; returns the ones that failed.
    pub async fn start_all(&self) -> Vec<(String, BridgeError)> {
        let names: Vec<String> = lock(&self.inner.services).keys().cloned().collect();
        let mut failed = Vec::new();
        for n in names {
            if let Err(e) = self.start(&n).await {
                failed.push((n, e));
            }
        }
        failed
    }

    /// Stops a service and waits until its whole process group is gone.
    pub async fn stop(&self, name: &str) -> Result<(), BridgeError> {
        let previous = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            svc.generation += 1;
            std::mem::replace(&mut svc.state, State::Stopped)
        };
        if let State::Running(connection) = previous {
            connection.end(None);
            connection.wait_finished(STOP_GRACE * 4).await;
        }
        Ok(())
    }

    /// Stops then starts a service.
    pub async fn restart(&self, name: &str) -> Result<(), BridgeError> {
        self.stop(name).await?;
        self.start(name).await
    }

    /// Stops every service.
    pub async fn stop_all(&self) {
        let names: Vec<String> = lock(&self.inner.services).keys().cloned().collect();
        for n in names {
            let _ = self.stop(&n).await;
        }
    }
}
