//! MCP elicitation in the panel (#27): [`PanelElicitor`] is the [`Elicitor`] to hand to
//! `McpBridge::set_elicitor`. A server's question during a tool call of a panel turn is shown in
//! that turn's SSE stream as an `elicitation` event (the page builds a form of the schema's
//! primitive fields, buttons for enums and booleans, or a link for URL mode — never opened for
//! the person); `POST /api/sessions/{id}/elicitations/{n}` with `{"action": "accept" | "decline"
//! | "cancel", "content"?}` answers it, once. A question for a session with no turn running in
//! this panel (or none at all) is declined: nobody could see it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use mcp_bridge::elicitation::{ElicitationAnswer, ElicitationMode, ElicitationRequest, Elicitor};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// The questions of every session: the running turn's stream, and the questions waiting.
#[derive(Default)]
pub(crate) struct Asks {
    sessions: Mutex<HashMap<String, SessionAsks>>,
}

#[derive(Default)]
struct SessionAsks {
    /// The running turn's channel into its SSE stream.
    live: Option<mpsc::UnboundedSender<Value>>,
    /// Questions waiting for the person, by number.
    waiting: HashMap<u64, oneshot::Sender<ElicitationAnswer>>,
    next: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Asks {
    /// A turn of `session` starts: questions go to `tx` until [`Asks::turn_ended`].
    pub(crate) fn turn_started(&self, session: &str, tx: mpsc::UnboundedSender<Value>) {
        lock(&self.sessions)
            .entry(session.to_owned())
            .or_default()
            .live = Some(tx);
    }

    /// The turn ended: questions still waiting are cancelled (their senders dropped).
    pub(crate) fn turn_ended(&self, session: &str) {
        lock(&self.sessions).remove(session);
    }

    /// The person's answer to question `n` of `session`; `false` when there is no such
    /// question waiting (answered already, or gone).
    pub(crate) fn answer(&self, session: &str, n: u64, answer: ElicitationAnswer) -> bool {
        let tx = lock(&self.sessions)
            .get_mut(session)
            .and_then(|s| s.waiting.remove(&n));
        tx.is_some_and(|tx| tx.send(answer).is_ok())
    }
}

/// The panel's [`Elicitor`]: see the module docs. Get it from `ChatPanel::elicitor`.
#[derive(Clone)]
pub struct PanelElicitor {
    pub(crate) asks: Arc<Asks>,
}

impl std::fmt::Debug for PanelElicitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanelElicitor").finish_non_exhaustive()
    }
}

/// Removes a question when its asker stops waiting (answered, timed out, call cancelled).
struct Waiting<'a> {
    asks: &'a Asks,
    session: String,
    n: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(s) = lock(&self.asks.sessions).get_mut(&self.session) {
            s.waiting.remove(&self.n);
        }
    }
}

#[async_trait::async_trait]
impl Elicitor for PanelElicitor {
    async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer {
        let Some(session) = request.session.clone() else {
            tracing::info!(service = %request.service, "chat panel: an MCP question with no session declined");
            return ElicitationAnswer::Decline;
        };
        let (tx, rx) = oneshot::channel();
        let n = {
            let mut map = lock(&self.asks.sessions);
            let Some(s) = map.get_mut(&session) else {
                return ElicitationAnswer::Decline;
            };
            let Some(live) = s.live.clone() else {
                return ElicitationAnswer::Decline;
            };
            s.next += 1;
            let n = s.next;
            let (mode, schema, url) = match &request.mode {
                ElicitationMode::Form { schema } => ("form", schema.clone(), Value::Null),
                ElicitationMode::Url { url } => ("url", Value::Null, json!(url)),
                _ => return ElicitationAnswer::Decline,
            };
            let event = json!({"id": n, "service": request.service, "message": request.message,
                               "mode": mode, "schema": schema, "url": url});
            if live.send(event).is_err() {
                return ElicitationAnswer::Decline;
            }
            s.waiting.insert(n, tx);
            n
        };
        let _waiting = Waiting {
            asks: &self.asks,
            session,
            n,
        };
        // A dropped sender (the turn ended) is a cancel; the bridge's own limit cancels too.
        rx.await.unwrap_or(ElicitationAnswer::Cancel)
    }
}
