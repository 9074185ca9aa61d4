//! One bridge, many people: a call made for a principal to an OAuth-protected remote service
//! goes over that principal's own connection, with their token and their MCP session (a remote
//! server knows its user by the token, so sessions are never shared across people). The
//! service's own connection (its tool list) is the principal's whose call started it, else
//! [`OAuthConfig::with_store`]'s (a start on its own: autostart, an operator's), and serves
//! their calls and calls made for no principal.
//!
//! At most [`OAuthConfig::with_max_connections`] such connections are open; one unused for
//! [`OAuthConfig::with_idle_close`] is closed when the next call comes, and when all are taken
//! the least recently used idle one makes room. A principal with no token is asked to sign in
//! by their own connection's handshake ([`crate::oauth`]); nobody else is.
//!
//! [`OAuthConfig::with_store`]: crate::oauth::OAuthConfig::with_store
//! [`OAuthConfig::with_max_connections`]: crate::oauth::OAuthConfig::with_max_connections
//! [`OAuthConfig::with_idle_close`]: crate::oauth::OAuthConfig::with_idle_close

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::config::ServiceConfig;
use crate::connection::{Connection, Hooks, lock};
use crate::oauth::OAuthConfig;

/// One principal's connection to one service.
struct Slot {
    /// The connection, once made (made under this lock, so one at a time per principal).
    cell: Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>,
    /// The service's generation it was made for: a restarted service's are made again.
    generation: u64,
    last_used: Instant,
    /// Held by every call in flight over it: idle when only the slot holds it.
    in_use: Arc<()>,
}

impl Slot {
    fn idle(&self) -> bool {
        Arc::strong_count(&self.in_use) == 1
    }
    fn close(self) {
        if let Ok(cell) = self.cell.try_lock()
            && let Some(connection) = cell.as_ref()
        {
            connection.end(None);
        }
    }
}

/// The bridge's per-principal connections, by (service, principal).
#[derive(Default)]
pub(crate) struct PrincipalConnections {
    slots: Mutex<HashMap<(String, String), Slot>>,
}

/// A principal's connection for one call; the connection counts as in use while it is held.
pub(crate) struct Lease {
    pub(crate) connection: Arc<Connection>,
    _in_use: Arc<()>,
}

impl PrincipalConnections {
    /// `principal`'s connection to `service` (generation `generation`) under `config` (whose
    /// OAuth is `oauth`): the open one, else one made now — asking them to sign in when they
    /// have no token — after closing what has been idle too long or a restarted service left,
    /// and making room past `oauth`'s bound; or why there is none.
    pub(crate) async fn lease(
        &self,
        service: &str,
        principal: &str,
        generation: u64,
        mut config: ServiceConfig,
        oauth: OAuthConfig,
        hooks: Hooks,
    ) -> Result<Lease, String> {
        let key = (service.to_owned(), principal.to_owned());
        let (cell, in_use) = {
            let mut slots = lock(&self.slots);
            // Close what has been idle too long, and what a restarted service left.
            let now = Instant::now();
            let gone: Vec<_> = slots
                .iter()
                .filter(|((s, _), slot)| {
                    slot.idle()
                        && (now.duration_since(slot.last_used) >= oauth.idle_close
                            || (s == service && slot.generation != generation))
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                if let Some(slot) = slots.remove(&k) {
                    tracing::info!(service = %k.0, "closed an idle per-principal MCP connection");
                    slot.close();
                }
            }
            if !slots.contains_key(&key) && slots.len() >= oauth.max_connections {
                let lru = slots
                    .iter()
                    .filter(|(_, slot)| slot.idle())
                    .min_by_key(|(_, slot)| slot.last_used)
                    .map(|(k, _)| k.clone());
                match lru.and_then(|k| slots.remove(&k)) {
                    Some(slot) => slot.close(),
                    None => {
                        return Err(format!(
                            "The MCP service {service} has {} people's connections open, all in use; try again in a moment.",
                            oauth.max_connections
                        ));
                    }
                }
            }
            let slot = slots.entry(key).or_insert_with(|| Slot {
                cell: Arc::default(),
                generation,
                last_used: now,
                in_use: Arc::new(()),
            });
            slot.last_used = now;
            (slot.cell.clone(), slot.in_use.clone())
        };
        let mut cell = cell.lock().await;
        if let Some(connection) = cell.as_ref().filter(|c| !c.is_finished()) {
            return Ok(Lease {
                connection: connection.clone(),
                _in_use: in_use,
            });
        }
        config.oauth = Some(oauth.for_principal(principal));
        let name = service.to_owned();
        let connection = Connection::launch(&config, generation, hooks, move |reason| {
            tracing::info!(service = %name, "a per-principal MCP connection ended: {reason}");
        })
        .await
        .map_err(|reason| {
            format!("The MCP service {service} could not be reached for this person: {reason}")
        })?;
        *cell = Some(connection.clone());
        Ok(Lease {
            connection,
            _in_use: in_use,
        })
    }
}
