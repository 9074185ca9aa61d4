//! Signing in to OAuth-protected MCP servers through the panel: [`PanelSignIn`] is the
//! [`RedirectSignIn`] to build the bridge's OAuth with
//! (`OAuthConfig::with_redirect_sign_in(Arc::new(panel.mcp_sign_in(panel_url, store.clone()))).with_store(store, principal)`),
//! for every person the panel serves and every worker behind it.
//!
//! When a tool call needs a person's authorization (the principal the call was made for), the
//! sign-in is shown in the running turn of that person's latest conversation on the worker that
//! runs the call, in the question window (`elicitation` event, mode `signin`): a link the
//! person opens in a new window, and "Not now". The bridge keeps the waiting sign-in (its
//! `state` and PKCE verifier) in the credential store, so the authorization server's redirect
//! back to `GET /oauth/callback` may land on any worker sharing that store: the panel hands it
//! to [`complete_sign_in`] with the identity of the person whose browser brought it. Only the
//! principal it was shown to can complete it (anyone else's callback — an attacker's code under
//! someone else's `state` — is refused and changes nothing), once, before it expires; the code
//! is exchanged and the token stored there, and the worker whose call waits sees the sign-in
//! done, tells the page (`signed-in` event) and the call goes on. "Not now", the turn's end or
//! the bridge's sign-in timeout end the wait; the tool call then fails with a message telling
//! the model that the person has to sign in.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;
use toolwright_mcp_bridge::elicitation::ElicitationAnswer;
use toolwright_mcp_bridge::oauth::{
    CallbackError, CredentialStore, RedirectSignIn, SignInRequest, complete_sign_in,
};

use crate::elicit::Asks;

/// The panel's route the authorization server redirects back to.
pub(crate) const CALLBACK_PATH: &str = "/oauth/callback";

/// Where the bridge keeps the waiting sign-ins, for the callback route
/// ([`crate::ChatPanel::mcp_sign_in`]).
#[derive(Default)]
pub(crate) struct SignIns {
    store: Mutex<Option<Arc<dyn CredentialStore>>>,
}

impl SignIns {
    /// Completes the sign-in the callback `query` answers, for `principal` ([`complete_sign_in`]).
    pub(crate) async fn complete(&self, principal: &str, query: &str) -> Result<(), CallbackError> {
        let store = self
            .store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(CallbackError::Unknown)?;
        complete_sign_in(&store, principal, query).await
    }

    pub(crate) fn keep_in(&self, store: Arc<dyn CredentialStore>) {
        *self.store.lock().unwrap_or_else(PoisonError::into_inner) = Some(store);
    }
}

/// The panel's [`RedirectSignIn`]: see the module docs. Get it from
/// [`ChatPanel::mcp_sign_in`](crate::ChatPanel::mcp_sign_in).
#[derive(Clone)]
pub struct PanelSignIn {
    pub(crate) asks: Arc<Asks>,
    pub(crate) redirect_uri: String,
}

impl std::fmt::Debug for PanelSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanelSignIn")
            .field("redirect_uri", &self.redirect_uri)
            .finish_non_exhaustive()
    }
}

/// What the person sees the server as: its host (and port), else the URL.
fn server_name(server: &str) -> String {
    url::Url::parse(server)
        .ok()
        .and_then(|u| {
            u.host_str()
                .map(|h| u.port().map_or(h.to_owned(), |p| format!("{h}:{p}")))
        })
        .unwrap_or_else(|| server.to_owned())
}

#[async_trait::async_trait]
impl RedirectSignIn for PanelSignIn {
    fn redirect_uri(&self) -> String {
        self.redirect_uri.clone()
    }

    async fn sign_in(&self, request: SignInRequest) -> Result<(), String> {
        let server = server_name(&request.server);
        let principal = request.principal.clone();
        let message = if request.again {
            format!(
                "Your sign-in to {server} has ended (revoked or expired). Sign in again to go on."
            )
        } else {
            format!("{server} needs you to sign in to go on.")
        };
        let url = request.authorization_url.clone();
        let link = crate::elicit::url_may_be_link(&url);
        let Some(mut asked) =
            self.asks
                .ask_principal(&principal, &server, &message, "elicitation", |n| {
                    json!({"id": n, "service": server, "message": message, "mode": "signin",
                       "url": url, "link": link, "again": request.again})
                })
        else {
            return Err(format!(
                "{principal} has no answer running in the chat panel to sign in to {server} from; \
                 they have to sign in from a conversation: ask them to try again there"
            ));
        };
        tracing::info!(principal = %principal, session = %asked.session, server = %server,
            "chat panel: asked the person to sign in to an MCP server");
        let declined = || {
            format!(
                "the person chose not to sign in to {server} now; the tool cannot be used until \
                 they sign in (they are asked the next time it is called)"
            )
        };
        let completed = request.completed();
        tokio::pin!(completed);
        let mut answering = true;
        loop {
            tokio::select! {
                done = &mut completed => {
                    let _ = asked.live.send(("signed-in", json!({"id": asked.n, "ok": done.is_ok()})));
                    return done;
                }
                answer = &mut asked.answer, if answering => match answer {
                    // "I opened it": wait for the callback
                    Ok(ElicitationAnswer::Accept(_)) => answering = false,
                    Ok(_) => return Err(declined()),
                    Err(_) => {
                        return Err(format!(
                            "the conversation's answer ended before the person signed in to {server}"
                        ));
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panel_sign_in(asks: &Arc<Asks>) -> PanelSignIn {
        PanelSignIn {
            asks: asks.clone(),
            redirect_uri: "http://127.0.0.1:9/oauth/callback".into(),
        }
    }

    /// Nobody to show it to (no turn of the principal runs here): the sign-in fails at once with
    /// a message, and another principal's running turn is not used.
    #[tokio::test]
    async fn a_sign_in_with_no_turn_of_its_principal_fails_with_a_message() {
        let asks = Arc::new(Asks::default());
        let mut bobs = asks.turn_started("s-bob-0001", "bob");
        let err = panel_sign_in(&asks)
            .sign_in(SignInRequest::new(
                "http://127.0.0.1:8/mcp",
                "alice",
                "http://127.0.0.1:8/authorize?state=S-1",
            ))
            .await
            .unwrap_err();
        assert!(err.contains("alice has no answer running"), "{err}");
        assert!(bobs.rx.try_recv().is_err(), "bob was not asked");
    }

    /// The sign-in goes to the turn of the principal the request names; "Not now" (a decline)
    /// ends the wait with a message for the model.
    #[tokio::test]
    async fn not_now_declines_the_sign_in_of_the_principal_it_was_shown_to() {
        let asks = Arc::new(Asks::default());
        let mut alices = asks.turn_started("s-alice-01", "alice");
        let mut bobs = asks.turn_started("s-bob-0001", "bob");
        let sign_in = panel_sign_in(&asks);
        let waiting = tokio::spawn(async move {
            sign_in
                .sign_in(
                    SignInRequest::new(
                        "http://127.0.0.1:8/mcp",
                        "bob",
                        "http://127.0.0.1:8/authorize?state=S-1",
                    )
                    .again(),
                )
                .await
        });
        let (_, shown) = bobs.rx.recv().await.unwrap();
        assert!(shown["message"].as_str().unwrap().contains("Sign in again"));
        assert!(alices.rx.try_recv().is_err(), "alice was not asked");
        let n = shown["id"].as_u64().unwrap();
        assert!(
            asks.claim("s-bob-0001", n)
                .unwrap()
                .answer(ElicitationAnswer::Decline)
        );
        let err = waiting.await.unwrap().unwrap_err();
        assert!(err.contains("chose not to sign in"), "{err}");
    }
}
