//! Where tokens and registrations live: the [`CredentialStore`] seam, one in this process's
//! memory, and one in a session store (PostgreSQL, SQLite, …) that workers share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::transport::auth::{AuthorizationMetadata, OAuthTokenResponse};
use serde::{Deserialize, Serialize};

use toolwright_context_engine::SessionStore;

use super::OAuthError;

/// Whose credential for which server: tokens are per principal (the person or identity the
/// agent acts for) and per server URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CredentialKey {
    /// The principal.
    pub principal: String,
    /// The MCP server's URL.
    pub server: String,
}

/// The client registration with the authorization server (pre-registered, a metadata-document
/// URL, or dynamically registered), its secret included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    /// The client ID.
    pub client_id: String,
    /// Its secret, for confidential clients.
    pub client_secret: Option<String>,
}

/// What the store keeps for one [`CredentialKey`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CredentialRecord {
    /// The client registration.
    pub registration: Option<Registration>,
    /// The authorization server's metadata (its token endpoint, for a refresh by any worker).
    pub metadata: Option<AuthorizationMetadata>,
    /// The token response.
    pub token: Option<OAuthTokenResponse>,
    /// When the token was received (seconds since the epoch).
    pub received_at: Option<u64>,
    /// The scopes granted.
    pub granted_scopes: Vec<String>,
    /// Set while one caller refreshes: until then (seconds since the epoch) the others wait.
    pub refreshing_until: Option<u64>,
}

/// A record with the version the store gave it; [`CredentialStore::compare_and_set`] writes only
/// over that version.
#[derive(Debug, Clone)]
pub struct Versioned {
    /// The record.
    pub record: CredentialRecord,
    /// Its version.
    pub version: u64,
}

/// Where tokens and registrations live. A store shared by workers (a session store with
/// compare-and-set) makes a credential refresh happen once across them all.
#[async_trait::async_trait]
pub trait CredentialStore: Send + Sync {
    /// The record of `key`, if any.
    async fn load(&self, key: &CredentialKey) -> Result<Option<Versioned>, OAuthError>;
    /// Writes `record` if the stored version is still `expected` (`None`: nothing stored);
    /// `Ok(false)` when another writer came first.
    async fn compare_and_set(
        &self,
        key: &CredentialKey,
        expected: Option<u64>,
        record: CredentialRecord,
    ) -> Result<bool, OAuthError>;
    /// The sign-in waiting under the OAuth `state` (the text the bridge wrote: whose, for which
    /// server, its PKCE verifier until a callback claims it), if any.
    async fn load_sign_in(&self, state: &str) -> Result<Option<String>, OAuthError>;
    /// Writes `new` under `state` if it still holds `expected` (`None`: nothing); `new` `None`
    /// forgets it. `Ok(false)` when another writer came first.
    async fn swap_sign_in(
        &self,
        state: &str,
        expected: Option<&str>,
        new: Option<&str>,
    ) -> Result<bool, OAuthError>;
}

/// A [`CredentialStore`] in this process's memory.
#[derive(Debug, Default, Clone)]
pub struct InMemoryCredentialStore {
    records: Arc<Mutex<HashMap<CredentialKey, Versioned>>>,
    sign_ins: Arc<Mutex<HashMap<String, String>>>,
}

impl InMemoryCredentialStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait::async_trait]
impl CredentialStore for InMemoryCredentialStore {
    async fn load(&self, key: &CredentialKey) -> Result<Option<Versioned>, OAuthError> {
        let records = locked(&self.records)?;
        Ok(records.get(key).cloned())
    }
    async fn compare_and_set(
        &self,
        key: &CredentialKey,
        expected: Option<u64>,
        record: CredentialRecord,
    ) -> Result<bool, OAuthError> {
        let mut records = locked(&self.records)?;
        let current = records.get(key).map(|v| v.version);
        if current != expected {
            return Ok(false);
        }
        let version = current.map_or(1, |v| v + 1);
        records.insert(key.clone(), Versioned { record, version });
        Ok(true)
    }
    async fn load_sign_in(&self, state: &str) -> Result<Option<String>, OAuthError> {
        let sign_ins = locked(&self.sign_ins)?;
        Ok(sign_ins.get(state).cloned())
    }
    async fn swap_sign_in(
        &self,
        state: &str,
        expected: Option<&str>,
        new: Option<&str>,
    ) -> Result<bool, OAuthError> {
        let mut sign_ins = locked(&self.sign_ins)?;
        if sign_ins.get(state).map(String::as_str) != expected {
            return Ok(false);
        }
        match new {
            Some(text) => sign_ins.insert(state.to_owned(), text.to_owned()),
            None => sign_ins.remove(state),
        };
        Ok(true)
    }
}

/// `mutex`'s guard; a lock poisoned by a panicking holder is a store failure.
fn locked<T>(mutex: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>, OAuthError> {
    mutex
        .lock()
        .map_err(|_| OAuthError::Store("poisoned lock".into()))
}

/// The state slot a [`SessionCredentialStore`] keeps one credential in.
const SLOT: &str = "mcp-bridge.oauth.credential";
/// The state slot a [`SessionCredentialStore`] keeps one waiting sign-in in.
const SIGN_IN_SLOT: &str = "mcp-bridge.oauth.sign-in";

/// A [`CredentialStore`] in a [`SessionStore`]: every worker that shares the store (a
/// `PostgresStore` on one database, say) shares the tokens, and the store's compare-and-set of
/// state slots makes a credential's refresh happen once across all of them.
///
/// Each credential is one session, `mcp-oauth-` and a SHA-256 of its key (no principal or URL in
/// the id), with no messages and the record in the state slot `mcp-bridge.oauth.credential` as
/// `{"version": N, "record": …}`. The record holds the tokens and the client secret as they
/// are: protect the database as you would any token store. A store that trims old sessions
/// (the panel's `max_sessions` on a store of its own) could drop a credential, and the person
/// would sign in again: give the panel a shared store, or the credentials a store of their own.
/// A sign-in waiting for the person's browser is one session too, `mcp-oauth-sign-in-` and a
/// SHA-256 of its OAuth `state`, slot `mcp-bridge.oauth.sign-in`, until the worker that asked
/// sees it end; its PKCE verifier is taken out when a callback claims it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::sync::Arc;
/// use toolwright_context_engine::MemoryStore;
/// use toolwright_mcp_bridge::oauth::{
///     CredentialKey, CredentialRecord, CredentialStore, SessionCredentialStore,
/// };
/// let store = SessionCredentialStore::new(Arc::new(MemoryStore::new()));
/// let key = CredentialKey { principal: "alice".into(), server: "https://mcp.example/mcp".into() };
/// assert!(store.load(&key).await.unwrap().is_none());
/// assert!(store.compare_and_set(&key, None, CredentialRecord::default()).await.unwrap());
/// // a second writer that also saw nothing stored loses
/// assert!(!store.compare_and_set(&key, None, CredentialRecord::default()).await.unwrap());
/// assert_eq!(store.load(&key).await.unwrap().unwrap().version, 1);
/// # }
/// ```
#[derive(Clone)]
pub struct SessionCredentialStore {
    sessions: Arc<dyn SessionStore>,
}

impl std::fmt::Debug for SessionCredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCredentialStore")
            .finish_non_exhaustive()
    }
}

/// What the slot holds.
#[derive(Serialize, Deserialize)]
struct Slot {
    version: u64,
    record: CredentialRecord,
}

impl SessionCredentialStore {
    /// Credentials kept in `sessions`, which must have state slots (`MemoryStore`,
    /// `SqliteStore`, `PostgresStore` do).
    pub fn new(sessions: Arc<dyn SessionStore>) -> Self {
        Self { sessions }
    }

    /// The session that holds the sign-in waiting under `state`.
    fn sign_in_session(state: &str) -> String {
        crate::slot::hashed_session_id("mcp-oauth-sign-in-", &[state])
    }

    /// The session that holds `key`'s record.
    fn session_of(key: &CredentialKey) -> String {
        crate::slot::hashed_session_id("mcp-oauth-", &[&key.principal, &key.server])
    }

    async fn slot(&self, session: &str) -> Result<Option<String>, OAuthError> {
        self.slot_of(session, SLOT).await
    }

    async fn slot_of(&self, session: &str, slot: &str) -> Result<Option<String>, OAuthError> {
        crate::slot::read(self.sessions.as_ref(), session, slot)
            .await
            .map_err(|e| OAuthError::Store(e.to_string()))
    }

    fn parse(session: &str, text: &str) -> Result<Slot, OAuthError> {
        serde_json::from_str(text).map_err(|e| {
            OAuthError::Store(format!(
                "session {session}'s slot {SLOT} does not hold a credential ({e}); delete that \
                 session and sign in again"
            ))
        })
    }
}

#[async_trait::async_trait]
impl CredentialStore for SessionCredentialStore {
    async fn load(&self, key: &CredentialKey) -> Result<Option<Versioned>, OAuthError> {
        let session = Self::session_of(key);
        let Some(text) = self.slot(&session).await? else {
            return Ok(None);
        };
        let slot = Self::parse(&session, &text)?;
        Ok(Some(Versioned {
            record: slot.record,
            version: slot.version,
        }))
    }

    async fn compare_and_set(
        &self,
        key: &CredentialKey,
        expected: Option<u64>,
        record: CredentialRecord,
    ) -> Result<bool, OAuthError> {
        let session = Self::session_of(key);
        let current = self.slot(&session).await?;
        let version = match &current {
            Some(text) => Some(Self::parse(&session, text)?.version),
            None => None,
        };
        if version != expected {
            return Ok(false);
        }
        // The version only grows, so the slot's text stands for its version: a compare-and-set
        // of the text is one of the version.
        let new = serde_json::to_string(&Slot {
            version: version.map_or(1, |v| v + 1),
            record,
        })
        .map_err(|e| OAuthError::Store(e.to_string()))?;
        crate::slot::swap(
            self.sessions.as_ref(),
            &session,
            SLOT,
            current.as_deref(),
            &new,
        )
        .await
        .map_err(|e| OAuthError::Store(e.to_string()))
    }

    async fn load_sign_in(&self, state: &str) -> Result<Option<String>, OAuthError> {
        self.slot_of(&Self::sign_in_session(state), SIGN_IN_SLOT)
            .await
    }

    async fn swap_sign_in(
        &self,
        state: &str,
        expected: Option<&str>,
        new: Option<&str>,
    ) -> Result<bool, OAuthError> {
        let session = Self::sign_in_session(state);
        let store = |e: toolwright_context_engine::StoreError| OAuthError::Store(e.to_string());
        match new {
            Some(new) => crate::slot::swap(
                self.sessions.as_ref(),
                &session,
                SIGN_IN_SLOT,
                expected,
                new,
            )
            .await
            .map_err(store),
            // Only an ended sign-in is forgotten, by the worker that waited for it: read,
            // compare, delete its session.
            None => {
                if self.slot_of(&session, SIGN_IN_SLOT).await?.as_deref() != expected {
                    return Ok(false);
                }
                match self.sessions.delete(&session).await {
                    Ok(()) | Err(toolwright_context_engine::StoreError::NotFound { .. }) => {
                        Ok(true)
                    }
                    Err(e) => Err(store(e)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use toolwright_context_engine::{MemoryStore, StateChange};

    use super::*;

    fn key() -> CredentialKey {
        CredentialKey {
            principal: "alice".into(),
            server: "https://mcp.example/mcp".into(),
        }
    }

    #[tokio::test]
    async fn each_write_needs_the_version_it_read_and_raises_it_by_one() {
        let store = SessionCredentialStore::new(Arc::new(MemoryStore::new()));
        let record = CredentialRecord {
            granted_scopes: vec!["mcp:read".into()],
            ..CredentialRecord::default()
        };
        assert!(
            store
                .compare_and_set(&key(), None, record.clone())
                .await
                .unwrap()
        );
        assert!(
            !store
                .compare_and_set(&key(), None, record.clone())
                .await
                .unwrap()
        );
        assert!(
            !store
                .compare_and_set(&key(), Some(2), record.clone())
                .await
                .unwrap()
        );
        assert!(
            store
                .compare_and_set(&key(), Some(1), record)
                .await
                .unwrap()
        );
        let read = store.load(&key()).await.unwrap().unwrap();
        assert_eq!(read.version, 2);
        assert_eq!(read.record.granted_scopes, ["mcp:read"]);
        // another principal's credential for the same server is another record
        let bob = CredentialKey {
            principal: "bob".into(),
            ..key()
        };
        assert!(store.load(&bob).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn workers_racing_to_write_the_first_record_let_exactly_one_win() {
        let sessions: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
        let writes = (0..8).map(|_| {
            let store = SessionCredentialStore::new(Arc::clone(&sessions));
            tokio::spawn(async move {
                store
                    .compare_and_set(&key(), None, CredentialRecord::default())
                    .await
                    .unwrap()
            })
        });
        let mut won = 0;
        for w in writes {
            won += usize::from(w.await.unwrap());
        }
        assert_eq!(won, 1);
    }

    #[tokio::test]
    async fn a_slot_that_holds_no_credential_is_a_store_error_that_says_what_to_do() {
        let sessions: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
        let id = SessionCredentialStore::session_of(&key());
        sessions.create(&id).await.unwrap();
        sessions
            .append_with_state(&id, &[], StateChange::new(SLOT, None, Some("not json")))
            .await
            .unwrap();
        let store = SessionCredentialStore::new(sessions);
        let err = store.load(&key()).await.unwrap_err();
        assert!(
            matches!(&err, OAuthError::Store(why) if why.contains("sign in again")),
            "{err}"
        );
        assert!(
            store
                .compare_and_set(&key(), None, CredentialRecord::default())
                .await
                .is_err()
        );
    }

    #[test]
    fn the_session_id_names_neither_the_principal_nor_the_server() {
        let id = SessionCredentialStore::session_of(&key());
        assert!(id.starts_with("mcp-oauth-") && id.len() == 10 + 64, "{id}");
        assert!(!id.contains("alice") && !id.contains("example"));
    }
}
