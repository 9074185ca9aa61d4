//! Signing in to OAuth-protected MCP servers through the panel: [`PanelSignIn`] is the
//! [`RedirectSignIn`] to build the bridge's OAuth with
//! (`OAuthConfig::with_redirect_sign_in(Arc::new(panel.mcp_sign_in(principal, panel_url)))`).
//!
//! When a tool call needs the person's authorization, the sign-in is shown in the running turn of
//! that principal's latest conversation on this worker, in the question window
//! (`elicitation` event, mode `signin`): a link the person opens in a new window, and "Not now".
//! The authorization server sends the browser back to `GET /oauth/callback`; the panel takes it
//! only for the `state` it is waiting for, and only from the principal it was shown to (an
//! attacker's callback — their own code under someone else's `state`, or any callback from
//! another person — is refused and changes nothing), then hands the URL to the bridge, which
//! checks `state` again, exchanges the code and lets the held call go on. The page gets a
//! `signed-in` event and marks the sign-in done. "Not now", the turn's end or the bridge's
//! sign-in timeout end the wait; the tool call then fails with a message telling the model that
//! the person has to sign in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;
use tokio::sync::oneshot;
use toolwright_mcp_bridge::elicitation::ElicitationAnswer;
use toolwright_mcp_bridge::oauth::{RedirectSignIn, SignInRequest};

use crate::elicit::Asks;

/// The panel's route the authorization server redirects back to.
pub(crate) const CALLBACK_PATH: &str = "/oauth/callback";

/// A sign-in waiting for its callback: whose, in which conversation, and its waiter.
pub(crate) struct Pending {
    pub(crate) principal: String,
    pub(crate) session: String,
    /// The redirect URI the callback came to (the bridge reads the callback as a full URL).
    redirect: String,
    tx: oneshot::Sender<Result<String, String>>,
}

/// The sign-ins waiting for their callback, by `state`.
#[derive(Default)]
pub(crate) struct SignIns {
    pending: Mutex<HashMap<String, Pending>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a callback was not taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No sign-in waits for this `state` (done, declined, its turn ended, or never issued).
    Unknown,
    /// The sign-in is another principal's.
    NotYours,
}

impl SignIns {
    /// The callback `query` (with its `state`) for `principal`: handed to the waiting sign-in,
    /// which is done; refused (and the waiting sign-in left as it was) when it is not theirs.
    pub(crate) fn complete(&self, principal: &str, query: &str) -> Result<String, Refused> {
        let params: HashMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let state = params.get("state").ok_or(Refused::Unknown)?;
        let mut map = lock(&self.pending);
        match map.get(state) {
            None => return Err(Refused::Unknown),
            Some(p) if p.principal != principal => return Err(Refused::NotYours),
            Some(_) => {}
        }
        let pending = map.remove(state).ok_or(Refused::Unknown)?;
        let outcome = match params.get("error") {
            Some(error) => Err(format!(
                "the authorization server answered `{error}`{}",
                params
                    .get("error_description")
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            )),
            None => Ok(format!("{}?{query}", pending.redirect)),
        };
        // the bridge stopped waiting meanwhile: then nothing is signed in
        pending
            .tx
            .send(outcome)
            .map(|()| pending.session)
            .map_err(|_| Refused::Unknown)
    }
}

/// Removes a pending sign-in however its wait ends.
struct Unregister<'a> {
    sign_ins: &'a SignIns,
    state: String,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        lock(&self.sign_ins.pending).remove(&self.state);
    }
}

/// The panel's [`RedirectSignIn`] for one principal: see the module docs. Get it from
/// [`ChatPanel::mcp_sign_in`](crate::ChatPanel::mcp_sign_in).
#[derive(Clone)]
pub struct PanelSignIn {
    pub(crate) asks: Arc<Asks>,
    pub(crate) sign_ins: Arc<SignIns>,
    pub(crate) principal: String,
    pub(crate) redirect_uri: String,
}

impl std::fmt::Debug for PanelSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanelSignIn")
            .field("principal", &self.principal)
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

    async fn sign_in(&self, request: SignInRequest) -> Result<String, String> {
        let server = server_name(&request.server);
        let state = url::Url::parse(&request.authorization_url)
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "state")
                    .map(|(_, v)| v.into_owned())
            })
            .ok_or("the authorization URL has no state to check the callback against")?;
        let message = if request.again {
            format!(
                "Your sign-in to {server} has ended (revoked or expired). Sign in again to go on."
            )
        } else {
            format!("{server} needs you to sign in to go on.")
        };
        let url = request.authorization_url.clone();
        let link = crate::elicit::url_may_be_link(&url);
        let (tx, mut callback) = oneshot::channel();
        // registered before the person can see the link
        let _unregister = Unregister {
            sign_ins: &self.sign_ins,
            state: state.clone(),
        };
        let Some(mut asked) =
            self.asks
                .ask_principal(&self.principal, &server, &message, "elicitation", |n| {
                    json!({"id": n, "service": server, "message": message, "mode": "signin",
                       "url": url, "link": link, "again": request.again})
                })
        else {
            return Err(format!(
                "{} has no answer running in the chat panel to sign in to {server} from; they \
                 have to sign in from a conversation: ask them to try again there",
                self.principal
            ));
        };
        lock(&self.sign_ins.pending).insert(
            state,
            Pending {
                principal: self.principal.clone(),
                session: asked.session.clone(),
                redirect: self.redirect_uri.clone(),
                tx,
            },
        );
        tracing::info!(principal = %self.principal, session = %asked.session, server = %server,
            "chat panel: asked the person to sign in to an MCP server");
        let declined = || {
            format!(
                "the person chose not to sign in to {server} now; the tool cannot be used until \
                 they sign in (they are asked the next time it is called)"
            )
        };
        let mut answering = true;
        loop {
            tokio::select! {
                back = &mut callback => {
                    let back = back.map_err(|_| "the sign-in was abandoned".to_owned())?;
                    let _ = asked.live.send(("signed-in", json!({"id": asked.n, "ok": back.is_ok()})));
                    return back;
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

    fn sign_in_for(asks: &Arc<Asks>, sign_ins: &Arc<SignIns>, principal: &str) -> PanelSignIn {
        PanelSignIn {
            asks: asks.clone(),
            sign_ins: sign_ins.clone(),
            principal: principal.to_owned(),
            redirect_uri: "http://127.0.0.1:9/oauth/callback".into(),
        }
    }

    /// A callback under alice's waiting `state` from bob (an attacker's code, or a link he got
    /// her page to follow — or the other way round) is refused and leaves her sign-in waiting;
    /// hers completes it, once.
    #[tokio::test]
    async fn a_callback_from_another_principal_is_refused_and_changes_nothing() {
        let asks = Arc::new(Asks::default());
        let sign_ins = Arc::new(SignIns::default());
        let mut turn = asks.turn_started("s-alice-01", "alice");
        let alice = sign_in_for(&asks, &sign_ins, "alice");
        let waiting = tokio::spawn(async move {
            alice
                .sign_in(SignInRequest::new(
                    "http://127.0.0.1:8/mcp",
                    "alice",
                    "http://127.0.0.1:8/authorize?client_id=c&state=S-1",
                ))
                .await
        });
        let (name, shown) = turn.rx.recv().await.unwrap();
        assert_eq!(name, "elicitation");
        assert_eq!(shown["mode"], "signin");
        assert_eq!(shown["link"], true);
        assert_eq!(
            sign_ins.complete("bob", "code=evil&state=S-1"),
            Err(Refused::NotYours)
        );
        assert_eq!(
            sign_ins.complete("alice", "code=x&state=S-2"),
            Err(Refused::Unknown)
        );
        assert_eq!(
            sign_ins.complete("alice", "code=good&state=S-1"),
            Ok("s-alice-01".to_owned())
        );
        assert_eq!(
            waiting.await.unwrap(),
            Ok("http://127.0.0.1:9/oauth/callback?code=good&state=S-1".to_owned())
        );
        let (name, done) = turn.rx.recv().await.unwrap();
        assert_eq!((name, done["ok"].clone()), ("signed-in", json!(true)));
        assert_eq!(
            sign_ins.complete("alice", "code=good&state=S-1"),
            Err(Refused::Unknown),
            "once"
        );
    }

    /// Nobody to show it to (no turn of the principal runs here): the sign-in fails at once with
    /// a message, and another principal's running turn is not used.
    #[tokio::test]
    async fn a_sign_in_with_no_turn_of_its_principal_fails_with_a_message() {
        let asks = Arc::new(Asks::default());
        let sign_ins = Arc::new(SignIns::default());
        let _bobs = asks.turn_started("s-bob-0001", "bob");
        let alice = sign_in_for(&asks, &sign_ins, "alice");
        let err = alice
            .sign_in(SignInRequest::new(
                "http://127.0.0.1:8/mcp",
                "alice",
                "http://127.0.0.1:8/authorize?state=S-1",
            ))
            .await
            .unwrap_err();
        assert!(err.contains("has no answer running"), "{err}");
        assert!(lock(&sign_ins.pending).is_empty());
    }

    /// "Not now" (a decline) ends the wait with a message for the model; the state is
    /// forgotten, so a late callback signs nothing in.
    #[tokio::test]
    async fn not_now_declines_the_sign_in_and_forgets_its_state() {
        let asks = Arc::new(Asks::default());
        let sign_ins = Arc::new(SignIns::default());
        let mut turn = asks.turn_started("s-alice-01", "alice");
        let alice = sign_in_for(&asks, &sign_ins, "alice");
        let waiting = tokio::spawn(async move {
            alice
                .sign_in(
                    SignInRequest::new(
                        "http://127.0.0.1:8/mcp",
                        "alice",
                        "http://127.0.0.1:8/authorize?state=S-1",
                    )
                    .again(),
                )
                .await
        });
        let (_, shown) = turn.rx.recv().await.unwrap();
        assert!(shown["message"].as_str().unwrap().contains("Sign in again"));
        let n = shown["id"].as_u64().unwrap();
        assert!(
            asks.claim("s-alice-01", n)
                .unwrap()
                .answer(ElicitationAnswer::Decline)
        );
        let err = waiting.await.unwrap().unwrap_err();
        assert!(err.contains("chose not to sign in"), "{err}");
        assert_eq!(
            sign_ins.complete("alice", "code=late&state=S-1"),
            Err(Refused::Unknown)
        );
    }
}
