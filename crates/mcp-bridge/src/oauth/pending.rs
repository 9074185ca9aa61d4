//! A sign-in waiting for the person's browser, kept in the [`CredentialStore`] so that any worker
//! can complete it: the worker that asked writes it (`state`, PKCE verifier, whose, for which
//! server, until when), the authorization server sends the browser back to whichever worker the
//! load balancer picks, that worker claims it by compare-and-set (once), exchanges the code and
//! stores the token ([`complete_sign_in`]); the asking worker sees it done in the store and its
//! held call goes on ([`SignInRequest::completed`](super::SignInRequest::completed)).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, OAuthClientConfig, StateStore, StoredAuthorizationState,
};
use serde::{Deserialize, Serialize};

use super::{CredentialKey, CredentialStore, JsonOnly, OAuthError, StoreView, now};

/// How often a waiting worker reads the store.
const POLL: Duration = Duration::from_millis(200);
/// How long a worker's claim of a sign-in may hold its code exchange.
const EXCHANGE_SECS: u64 = 60;

/// Where a waiting sign-in is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case")]
enum Outcome {
    /// Shown to the person, no callback yet.
    Waiting,
    /// A worker took the callback and exchanges the code.
    Exchanging,
    /// The token is stored.
    Done,
    /// It ended without a token: why.
    Failed { reason: String },
}

/// One waiting sign-in, as stored (JSON) under its `state`.
#[derive(Serialize, Deserialize)]
pub(crate) struct Waiting {
    principal: String,
    server: String,
    redirect_uri: String,
    /// The `resource` the authorization asked for (the code exchange repeats it).
    resource: Option<String>,
    /// Seconds since the epoch after which no callback is taken.
    expires_at: u64,
    /// rmcp's state of the authorization (the PKCE verifier, the expected issuer, the scopes
    /// asked for): taken out by the worker that claims the callback, so it is stored only
    /// while nobody has come back.
    authorization: Option<StoredAuthorizationState>,
    outcome: Outcome,
}

/// Why a callback did not sign anyone in; each says what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallbackError {
    /// The callback URL has no `state`.
    #[error(
        "the callback carries no `state`: it is not the answer to a sign-in; start again by calling the tool"
    )]
    NoState,
    /// No sign-in waits under this `state` (never issued, or forgotten after it ended).
    #[error(
        "no sign-in is waiting for this callback (it was completed, declined or never started); call the tool again to sign in"
    )]
    Unknown,
    /// The sign-in was shown to another principal; it is left waiting for them.
    #[error("this sign-in was started for someone else; nothing was signed in")]
    NotYours,
    /// The sign-in's time ran out.
    #[error("this sign-in has expired; call the tool again to sign in")]
    Expired,
    /// The callback was taken before (a replay, or a second tab).
    #[error(
        "this sign-in was already completed (a callback is used once); call the tool again if it still needs a sign-in"
    )]
    Used,
    /// The authorization server sent the browser back with an error (the person refused, say).
    #[error("the authorization server did not sign in: {0}")]
    Denied(String),
    /// The code exchange failed.
    #[error("the sign-in came back but its code could not be exchanged: {0}")]
    Exchange(OAuthError),
    /// The store failed or holds something that is not a waiting sign-in.
    #[error(transparent)]
    Store(OAuthError),
}

fn parse(state: &str, text: &str) -> Result<Waiting, OAuthError> {
    serde_json::from_str(text).map_err(|e| {
        OAuthError::Store(format!(
            "the waiting sign-in under a callback's state does not hold a sign-in ({e}); it is \
             refused — sign in again (state starting {})",
            state.chars().take(4).collect::<String>()
        ))
    })
}

fn text_of(w: &Waiting) -> Result<String, OAuthError> {
    serde_json::to_string(w).map_err(|e| OAuthError::Store(e.to_string()))
}

impl Waiting {
    /// A sign-in of `key` shown now, for `timeout`.
    pub(crate) fn new(
        key: &CredentialKey,
        redirect_uri: String,
        authorization_url: &str,
        authorization: StoredAuthorizationState,
        timeout: Duration,
    ) -> Self {
        let resource = url::Url::parse(authorization_url).ok().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "resource")
                .map(|(_, v)| v.into_owned())
        });
        Self {
            principal: key.principal.clone(),
            server: key.server.clone(),
            redirect_uri,
            resource,
            expires_at: now() + timeout.as_secs().max(1),
            authorization: Some(authorization),
            outcome: Outcome::Waiting,
        }
    }

    /// Writes it under `state` (which must be new).
    pub(crate) async fn save(
        &self,
        store: &dyn CredentialStore,
        state: &str,
    ) -> Result<(), OAuthError> {
        if store
            .swap_sign_in(state, None, Some(&text_of(self)?))
            .await?
        {
            Ok(())
        } else {
            Err(OAuthError::Store(
                "a sign-in with the same state is already waiting; try again".into(),
            ))
        }
    }
}

/// rmcp's state store for one authorization: keeps what `get_authorization_url` saves (the
/// worker then writes it to the credential store with the rest), and gives the claimed state
/// back for the code exchange.
#[derive(Clone, Default)]
pub(crate) struct OneState(pub(crate) Arc<Mutex<Option<(String, StoredAuthorizationState)>>>);

#[async_trait::async_trait]
impl StateStore for OneState {
    async fn save(
        &self,
        csrf_token: &str,
        state: StoredAuthorizationState,
    ) -> Result<(), AuthError> {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some((csrf_token.to_owned(), state));
        }
        Ok(())
    }
    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        Ok(self.0.lock().ok().and_then(|s| {
            s.as_ref()
                .filter(|(t, _)| t == csrf_token)
                .map(|(_, s)| s.clone())
        }))
    }
    async fn delete(&self, _csrf_token: &str) -> Result<(), AuthError> {
        if let Ok(mut slot) = self.0.lock() {
            *slot = None;
        }
        Ok(())
    }
}

/// Completes the sign-in the authorization server's callback answers, on whichever worker it
/// landed: `query` is the callback URL's query (`code`, `state`, maybe `iss` or `error`),
/// `principal` the identity of the person whose browser brought it (the panel's login).
///
/// The sign-in waiting under `state` in `store` must be `principal`'s (else
/// [`CallbackError::NotYours`], and it is left waiting), not expired and not used; it is
/// claimed by compare-and-set (exactly one of two workers given the same callback goes on), its
/// PKCE verifier taken out of the store, the code exchanged (with `resource`, the registration's
/// secret) at the token endpoint, and the token stored for `principal` and the server. The
/// worker that asked sees the sign-in done and its held call goes on.
pub async fn complete_sign_in(
    store: &Arc<dyn CredentialStore>,
    principal: &str,
    query: &str,
) -> Result<(), CallbackError> {
    let params: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
    let state = params.get("state").ok_or(CallbackError::NoState)?;
    let text = store
        .load_sign_in(state)
        .await
        .map_err(CallbackError::Store)?
        .ok_or(CallbackError::Unknown)?;
    let mut waiting = parse(state, &text).map_err(CallbackError::Store)?;
    if waiting.principal != principal {
        tracing::warn!(
            principal,
            "an OAuth callback for another principal's sign-in was refused"
        );
        return Err(CallbackError::NotYours);
    }
    if waiting.outcome != Outcome::Waiting {
        return Err(CallbackError::Used);
    }
    if waiting.expires_at <= now() {
        return Err(CallbackError::Expired);
    }
    // Claim it: only the worker whose compare-and-set lands exchanges the code.
    let authorization = waiting.authorization.take();
    waiting.outcome = Outcome::Exchanging;
    waiting.expires_at = waiting.expires_at.max(now() + EXCHANGE_SECS);
    let claimed = text_of(&waiting).map_err(CallbackError::Store)?;
    if !store
        .swap_sign_in(state, Some(&text), Some(&claimed))
        .await
        .map_err(CallbackError::Store)?
    {
        return Err(CallbackError::Used);
    }
    let result = match (params.get("error"), params.get("code"), authorization) {
        (Some(error), _, _) => Err(CallbackError::Denied(format!(
            "it answered `{error}`{}",
            params
                .get("error_description")
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ))),
        (None, None, _) => Err(CallbackError::Denied("the callback has no code".into())),
        (None, Some(_), None) => Err(CallbackError::Store(OAuthError::Store(
            "the waiting sign-in has no PKCE verifier".into(),
        ))),
        (None, Some(code), Some(authorization)) => exchange(
            store,
            &waiting,
            state,
            code,
            params.get("iss").map(String::as_str),
            authorization,
        )
        .await
        .map_err(CallbackError::Exchange),
    };
    waiting.outcome = match &result {
        Ok(()) => Outcome::Done,
        Err(e) => Outcome::Failed {
            reason: e.to_string(),
        },
    };
    let ended = text_of(&waiting).map_err(CallbackError::Store)?;
    store
        .swap_sign_in(state, Some(&claimed), Some(&ended))
        .await
        .map_err(CallbackError::Store)?;
    result
}

/// The code exchange of `waiting` with the registration and metadata stored for it.
async fn exchange(
    store: &Arc<dyn CredentialStore>,
    waiting: &Waiting,
    state: &str,
    code: &str,
    issuer: Option<&str>,
    authorization: StoredAuthorizationState,
) -> Result<(), OAuthError> {
    let key = CredentialKey {
        principal: waiting.principal.clone(),
        server: waiting.server.clone(),
    };
    let record = store
        .load(&key)
        .await?
        .map(|v| v.record)
        .unwrap_or_default();
    let (Some(metadata), Some(registration)) = (record.metadata, record.registration) else {
        return Err(OAuthError::Store(
            "the credential has no registration or metadata to exchange the code with".into(),
        ));
    };
    crate::tls::ensure_crypto_provider();
    let refused = Arc::new(Mutex::new(None));
    let client = JsonOnly {
        inner: Arc::new(rmcp::transport::auth::default_oauth_http_client()?),
        refused: refused.clone(),
    };
    // The manager's base URL stands for the resource when it names none: the resource the
    // authorization asked for is repeated at the code exchange.
    let base = waiting.resource.as_deref().unwrap_or(&waiting.server);
    let mut manager =
        AuthorizationManager::new_with_oauth_http_client(base, Arc::new(client)).await?;
    manager.set_metadata(metadata);
    let mut config = OAuthClientConfig::new(registration.client_id, waiting.redirect_uri.clone());
    if let Some(secret) = registration.client_secret {
        config = config.with_client_secret(secret);
    }
    manager.configure_client(config)?;
    manager.set_state_store(OneState(Arc::new(Mutex::new(Some((
        state.to_owned(),
        authorization,
    ))))));
    manager.set_credential_store(StoreView {
        store: store.clone(),
        key,
    });
    match manager
        .exchange_code_for_token_with_issuer(code, state, issuer)
        .await
    {
        Ok(token) => {
            tracing::info!(principal = %waiting.principal, server = %waiting.server,
                scopes = ?token.scopes().map(|s| s.len()), "an OAuth sign-in completed");
            Ok(())
        }
        Err(e) => Err(refused
            .lock()
            .ok()
            .and_then(|mut s| s.take())
            .unwrap_or_else(|| e.into())),
    }
}

/// Waits until the sign-in under `state` ends, on any worker: `Ok` when its token is stored,
/// else why not (failed, forgotten, or nobody came back before it expired). Only reads: the
/// worker that asked forgets it ([`forget`]), so that any number may wait.
pub(crate) async fn wait_completed(store: &dyn CredentialStore, state: &str) -> Result<(), String> {
    loop {
        let text = store
            .load_sign_in(state)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the sign-in was forgotten before it completed")?;
        let waiting = parse(state, &text).map_err(|e| e.to_string())?;
        match &waiting.outcome {
            Outcome::Done => return Ok(()),
            Outcome::Failed { reason } => return Err(reason.clone()),
            Outcome::Waiting | Outcome::Exchanging if waiting.expires_at <= now() => {
                return Err("nobody came back from the sign-in before it expired".to_owned());
            }
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// Forgets the sign-in under `state` once its wait is over (its callback is then refused), but
/// not while a worker exchanges its code.
pub(crate) async fn forget(store: &dyn CredentialStore, state: &str) {
    if let Ok(Some(text)) = store.load_sign_in(state).await
        && parse(state, &text).map_or(true, |w| w.outcome != Outcome::Exchanging)
        && let Err(e) = store.swap_sign_in(state, Some(&text), None).await
    {
        tracing::info!(error = %e, "an ended sign-in could not be forgotten");
    }
}
