//! Lifecycle: start, stop, restart — in the foreground, in the background, or on the first turn
//! that needs a service. A start spawns the server and waits for its handshake and first tool
//! list ([`crate::connection`]); a failure at any point, then or later, puts the service in
//! `error` with the reason; a stop waits until its whole process group is gone. When a failed or
//! crashed service is tried again is [`crate::recovery`]'s decision.

use std::sync::{Arc, Weak};

use crate::bridge::{Inner, McpBridge, State};
use crate::config::ServiceConfig;
use crate::connection::{Connection, STOP_GRACE, lock};
use crate::error::BridgeError;
use crate::recovery;

impl McpBridge {
    /// Starts a service: spawn, MCP handshake and first tool list, all within its startup
    /// timeout. On failure the service is in `error` with the reason and nothing is left running.
    /// Starting a running service does nothing; a service that is still starting is waited for.
    /// An operator's start clears the service's failure count (`crate::recovery`).
    pub async fn start(&self, name: &str) -> Result<(), BridgeError> {
        {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            svc.failures = 0;
            svc.retry_at = None;
            svc.held = false;
        }
        match self.begin_start(name)? {
            Some((config, generation)) => {
                finish_start(Arc::downgrade(&self.inner), config, generation, None).await
            }
            None => {
                self.wait_while_starting(name).await;
                match self.status(name)? {
                    crate::ServiceStatus::Running => Ok(()),
                    crate::ServiceStatus::Error(reason) => Err(BridgeError::StartFailed {
                        service: name.into(),
                        reason,
                    }),
                    other => Err(BridgeError::StartFailed {
                        service: name.into(),
                        reason: format!("it is {} now", other.as_str()),
                    }),
                }
            }
        }
    }

    /// Starts, in the background, every service that is enabled and set to start with the
    /// bridge (`autostart`, the default), and returns their names at once: each is `starting`
    /// until it runs or fails. A turn that needs none of them does not wait for them; a turn
    /// or call that needs one waits at most that service's startup timeout. Needs a Tokio
    /// runtime ([`BridgeError::NoRuntime`] otherwise).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), toolwright_mcp_bridge::BridgeError> {
    /// let bridge = toolwright_mcp_bridge::McpBridge::with_config_file("mcp.json")?;
    /// let starting = bridge.start_in_background()?; // returns at once
    /// # Ok(()) }
    /// ```
    pub fn start_in_background(&self) -> Result<Vec<String>, BridgeError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| BridgeError::NoRuntime)?;
        let names: Vec<String> = lock(&self.inner.services)
            .values()
            .filter(|s| {
                s.config.autostart
                    && !s.config.disabled
                    && !s.held
                    && matches!(s.state, State::Stopped | State::Error(_))
            })
            .map(|s| s.config.name.clone())
            .collect();
        let mut started = Vec::new();
        for name in names {
            if let Ok(Some((config, generation))) = self.begin_start(&name) {
                let weak = Arc::downgrade(&self.inner);
                handle.spawn(async move {
                    // The outcome is recorded in the service's state.
                    let _ = finish_start(weak, config, generation, None).await;
                });
                started.push(name);
            }
        }
        Ok(started)
    }

    /// Starts every stopped or failed service that is not disabled, one after another, and
    /// waits; returns the ones that failed. [`McpBridge::start_in_background`] does not wait.
    pub async fn start_all(&self) -> Vec<(String, BridgeError)> {
        let names: Vec<String> = lock(&self.inner.services)
            .values()
            .filter(|s| !s.config.disabled)
            .map(|s| s.config.name.clone())
            .collect();
        let mut failed = Vec::new();
        for n in names {
            if let Err(e) = self.start(&n).await {
                failed.push((n, e));
            }
        }
        failed
    }

    /// Stops a service and waits until its whole process group is gone. It is not started
    /// again on demand until [`McpBridge::start`].
    pub async fn stop(&self, name: &str) -> Result<(), BridgeError> {
        let previous = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            svc.generation += 1;
            svc.held = true;
            std::mem::replace(&mut svc.state, State::Stopped)
        };
        self.inner.notify();
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

    /// Marks `name` as starting and returns what to launch, or `None` when it is already
    /// running or starting.
    fn begin_start(&self, name: &str) -> Result<Option<(ServiceConfig, u64)>, BridgeError> {
        let begun = {
            let mut map = lock(&self.inner.services);
            let svc = map
                .get_mut(name)
                .ok_or_else(|| BridgeError::UnknownService(name.into()))?;
            if svc.config.disabled {
                return Err(BridgeError::Disabled(name.into()));
            }
            if matches!(svc.state, State::Running(_) | State::Starting) {
                return Ok(None);
            }
            svc.generation += 1;
            svc.state = State::Starting;
            (svc.config.clone(), svc.generation)
        };
        self.inner.notify();
        Ok(Some(begun))
    }

    /// Waits while `name` is starting, at most its startup timeout (plus the stop grace).
    async fn wait_while_starting(&self, name: &str) {
        let mut rx = self.inner.changed.subscribe();
        let Some(limit) = lock(&self.inner.services)
            .get(name)
            .map(|s| s.config.startup_timeout + STOP_GRACE)
        else {
            return;
        };
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let starting = matches!(
                lock(&self.inner.services).get(name).map(|s| &s.state),
                Some(State::Starting)
            );
            if !starting {
                return;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Makes `service` available to a turn or call that needs it, and says whether it runs:
    /// a running service at once; a starting one is waited for, at most its startup timeout; a
    /// stopped (not yet started, `autostart: false`) or failed one is started now when
    /// [`crate::recovery`] allows it. A disabled service, one the operator stopped, or one whose
    /// backoff has not run out is `false` at once: the caller gives the model the
    /// service-unavailable message and the conversation goes on.
    pub(crate) async fn ensure_running(&self, service: &str) -> bool {
        self.ensure_running_for(service, None).await
    }

    /// [`Self::ensure_running`] for a call made for `principal`: an OAuth-protected service
    /// started now starts with their credential ([`crate::principals`]).
    pub(crate) async fn ensure_running_for(&self, service: &str, principal: Option<&str>) -> bool {
        loop {
            let now = tokio::time::Instant::now();
            let step = match lock(&self.inner.services).get(service) {
                None => return false,
                Some(s) => recovery::next_step(s, now),
            };
            match step {
                recovery::Step::Ready => return true,
                recovery::Step::GiveUp => return false,
                recovery::Step::Wait => {
                    self.wait_while_starting(service).await;
                    return matches!(
                        lock(&self.inner.services).get(service).map(|s| &s.state),
                        Some(State::Running(_))
                    );
                }
                recovery::Step::Start => match self.begin_start(service) {
                    Ok(Some((config, generation))) => {
                        let weak = Arc::downgrade(&self.inner);
                        return finish_start(weak, config, generation, principal)
                            .await
                            .is_ok();
                    }
                    // Someone else began it in between: wait for theirs.
                    Ok(None) => continue,
                    Err(_) => return false,
                },
            }
        }
    }
}

/// Launches a service begun by `begin_start` and records the outcome, unless it was stopped or
/// restarted meanwhile (its generation moved on). Holds the bridge only weakly, so dropping the
/// last bridge handle during a start still ends the server.
async fn finish_start(
    inner: Weak<Inner>,
    config: ServiceConfig,
    generation: u64,
    principal: Option<&str>,
) -> Result<(), BridgeError> {
    let name = config.name.clone();
    // A failure after the start (exit, protocol violation, hang) lands here, unless the
    // service was stopped or restarted in between.
    let on_failure = {
        let weak = inner.clone();
        let service = name.clone();
        move |reason: String| {
            if let Some(inner) = weak.upgrade() {
                let mut changed = false;
                if let Some(svc) = lock(&inner.services).get_mut(&service)
                    && svc.generation == generation
                    && matches!(svc.state, State::Running(_))
                {
                    svc.state = State::Error(reason);
                    recovery::record_failure(svc, tokio::time::Instant::now(), true);
                    changed = true;
                }
                if changed {
                    inner.notify();
                }
            }
        }
    };
    let Some(bridge) = inner.upgrade() else {
        return Err(BridgeError::StartFailed {
            service: name,
            reason: "the bridge was dropped before the service started".into(),
        });
    };
    let hooks = crate::connection::Hooks {
        epoch: bridge.catalog_epoch.clone(),
        elicitation: bridge.elicitation.clone(),
        notices: bridge.notices.clone(),
    };
    #[cfg(feature = "http")]
    let config = {
        let template = lock(&bridge.oauth).clone();
        match config.with_file_oauth(template.as_ref()) {
            // An OAuth service started inside a call for a principal is theirs.
            Ok(mut config) => {
                if let (Some(oauth), Some(principal)) = (&mut config.oauth, principal) {
                    *oauth = oauth.for_principal(principal);
                }
                config
            }
            Err(reason) => {
                drop(bridge);
                return failed_to_start(&inner, &name, generation, reason);
            }
        }
    };
    #[cfg(not(feature = "http"))]
    let _ = principal;
    drop(bridge);
    let launched = Connection::launch(&config, generation, hooks, on_failure).await;
    let weak_inner = inner.clone();
    let Some(inner) = inner.upgrade() else {
        if let Ok(connection) = launched {
            connection.end(None);
        }
        return Err(BridgeError::StartFailed {
            service: name,
            reason: "the bridge was dropped while the service was starting".into(),
        });
    };
    let result = match launched {
        Ok(connection) => {
            let mut map = lock(&inner.services);
            match map.get_mut(&name) {
                Some(svc) if svc.generation == generation => {
                    svc.state = State::Running(connection);
                    Ok(())
                }
                _ => {
                    // Stopped or removed while starting.
                    connection.end(None);
                    Err(BridgeError::StartFailed {
                        service: name,
                        reason: "stopped while starting".into(),
                    })
                }
            }
        }
        Err(reason) => {
            drop(inner);
            return failed_to_start(&weak_inner, &name, generation, reason);
        }
    };
    inner.notify();
    result
}

/// Records that the start of `name` (this `generation`) failed for `reason`, unless it was
/// stopped or restarted meanwhile.
fn failed_to_start(
    inner: &Weak<Inner>,
    name: &str,
    generation: u64,
    reason: String,
) -> Result<(), BridgeError> {
    tracing::warn!(service = %name, "MCP service failed to start: {reason}");
    if let Some(inner) = inner.upgrade() {
        if let Some(svc) = lock(&inner.services).get_mut(name)
            && svc.generation == generation
        {
            svc.state = State::Error(reason.clone());
            recovery::record_failure(svc, tokio::time::Instant::now(), false);
        }
        inner.notify();
    }
    Err(BridgeError::StartFailed {
        service: name.to_owned(),
        reason,
    })
}
