//! MCP elicitation in the panel: [`PanelElicitor`] is the [`Elicitor`] to hand to
//! `McpBridge::set_elicitor`. A server's question during a tool call of a panel turn is shown in
//! that turn's SSE stream as an `elicitation` event (the page builds a form of the schema's
//! primitive fields, buttons for enums and booleans, or a link for URL mode — never opened for
//! the person, and a link only when [`url_may_be_link`] says so: the server chooses the URL,
//! and a `javascript:` one would run in the page); `POST /api/sessions/{id}/elicitations/{n}` with `{"action": "accept" | "decline"
//! | "cancel", "content"?}` answers it, once. A turn is registered for questions before its model
//! or any tool runs, so a question asked at a turn's first instant waits for the turn's stream
//! and is shown. A question for a session with no turn running in this panel (or none at all) is
//! declined: nobody could see it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use toolwright_mcp_bridge::elicitation::{
    ElicitationAnswer, ElicitationMode, ElicitationRequest, Elicitor,
};

/// Whether a URL-mode question's URL may become a link in the page: only `https:`, and `http:`
/// to this machine (`127.0.0.1`, `localhost`, `[::1]`), where a local consent page may run.
/// Anything else — `javascript:` (script; the page's policy would not run it either),
/// `data:`, `vbscript:`, `file:`, a relative or unparsable URL — is shown as text.
///
/// The URL is parsed as the browser parses it (WHATWG, the `url` crate): leading and trailing
/// spaces and control characters are dropped, tabs and newlines anywhere removed, the scheme
/// compared case-blind, so ` JaVaScRiPt:…` or `java\tscript:…` are what the browser would
/// take them for. The page checks again with `new URL` before it makes a link.
pub(crate) fn url_may_be_link(url: &str) -> bool {
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    match parsed.scheme() {
        "https" => parsed.host().is_some(),
        "http" => match parsed.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
            Some(url::Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
            None => false,
        },
        _ => false,
    }
}

/// The least time between two progress events of one turn: a server that floods progress
/// costs the page ten updates a second at most.
pub(crate) const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The questions of every session: the running turn's stream, and the questions waiting.
#[derive(Default)]
pub(crate) struct Asks {
    sessions: Mutex<HashMap<String, SessionAsks>>,
    /// Numbers the turns, so a turn that ends late cannot end its successor's questions.
    turns: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct SessionAsks {
    /// The running turn's channel into its SSE stream: the event's name and data.
    live: Option<mpsc::UnboundedSender<(&'static str, Value)>>,
    /// When progress was last shown in this turn (progress is shown at most every
    /// [`PROGRESS_EVERY`], the last step of a call always).
    progress_shown: Option<tokio::time::Instant>,
    /// Which turn `live` is.
    turn: u64,
    /// Whose turn it is (the principal the request came from).
    principal: String,
    /// Questions waiting for the person, by number.
    waiting: HashMap<u64, Claimed>,
    next: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A turn's questions: what its stream shows (`rx`), from the moment it was registered — before
/// the model or any tool of the turn runs, so a question asked at the turn's first instant waits
/// here for the stream instead of being declined. Dropping it ends the turn's questions (the
/// ones still waiting are cancelled).
pub(crate) struct TurnAsks {
    asks: Arc<Asks>,
    session: String,
    turn: u64,
    /// The questions (`elicitation`) and tool progress (`progress`), in the order they came.
    pub(crate) rx: mpsc::UnboundedReceiver<(&'static str, Value)>,
}

impl Drop for TurnAsks {
    fn drop(&mut self) {
        self.asks.turn_ended(&self.session, self.turn);
    }
}

impl Asks {
    /// A turn of `session` starts: its questions go to the returned [`TurnAsks`] until it is
    /// dropped. Call it before the turn's model or tools can run.
    pub(crate) fn turn_started(self: &Arc<Self>, session: &str, principal: &str) -> TurnAsks {
        let (tx, rx) = mpsc::unbounded_channel();
        let turn = self
            .turns
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let mut map = lock(&self.sessions);
        let s = map.entry(session.to_owned()).or_default();
        s.live = Some(tx);
        s.turn = turn;
        principal.clone_into(&mut s.principal);
        TurnAsks {
            asks: self.clone(),
            session: session.to_owned(),
            turn,
            rx,
        }
    }

    /// Turn `turn` of `session` ended: its questions still waiting are cancelled (their senders
    /// dropped). A later turn of the session that started meanwhile keeps its own.
    fn turn_ended(&self, session: &str, turn: u64) {
        let mut map = lock(&self.sessions);
        let Some(s) = map.get_mut(session) else {
            return;
        };
        if s.turn == turn {
            map.remove(session);
        } else {
            s.waiting.retain(|_, q| q.turn != turn);
        }
    }

    /// A tool's progress during `session`'s running turn, shown in its stream (`progress`):
    /// at most one every [`PROGRESS_EVERY`] per turn (a call's last step always), nothing
    /// when no turn of the session runs here.
    pub(crate) fn progress(&self, session: &str, progress: Value, last_step: bool) {
        let mut map = lock(&self.sessions);
        let Some(s) = map.get_mut(session) else {
            return;
        };
        let Some(live) = s.live.clone() else {
            return;
        };
        let now = tokio::time::Instant::now();
        if !last_step && s.progress_shown.is_some_and(|at| now < at + PROGRESS_EVERY) {
            return;
        }
        s.progress_shown = Some(now);
        let _ = live.send(("progress", progress));
    }

    /// Takes question `n` of `session` to answer it (nobody else can from here on); `None`
    /// when there is no such question waiting (answered already, or gone). Dropping the claim
    /// unanswered cancels the question.
    pub(crate) fn claim(&self, session: &str, n: u64) -> Option<Claimed> {
        lock(&self.sessions)
            .get_mut(session)
            .and_then(|s| s.waiting.remove(&n))
    }
}

/// A question put to the person in a running turn ([`Asks::ask_principal`]): the conversation,
/// its number there, the person's answer, and the turn's stream for what follows.
pub(crate) struct Asked<'a> {
    pub(crate) session: String,
    pub(crate) n: u64,
    pub(crate) answer: oneshot::Receiver<ElicitationAnswer>,
    pub(crate) live: mpsc::UnboundedSender<(&'static str, Value)>,
    _waiting: Waiting<'a>,
}

impl Asks {
    /// Asks `principal` in the running turn of their latest conversation on this worker: the
    /// event `(name, event(n))` goes into that turn's stream and the question waits for an
    /// answer like an MCP server's (`POST …/elicitations/{n}`) until the returned [`Asked`] is
    /// dropped. `None` when no turn of theirs runs here.
    pub(crate) fn ask_principal(
        &self,
        principal: &str,
        service: &str,
        message: &str,
        name: &'static str,
        event: impl FnOnce(u64) -> Value,
    ) -> Option<Asked<'_>> {
        let (tx, rx) = oneshot::channel();
        let mut map = lock(&self.sessions);
        let (session, s) = map
            .iter_mut()
            .filter(|(_, s)| s.live.is_some() && s.principal == principal)
            .max_by_key(|(_, s)| s.turn)?;
        let live = s.live.clone()?;
        s.next += 1;
        let n = s.next;
        if live.send((name, event(n))).is_err() {
            return None;
        }
        s.waiting.insert(
            n,
            Claimed {
                tx,
                turn: s.turn,
                service: service.to_owned(),
                message: message.to_owned(),
            },
        );
        let session = session.clone();
        Some(Asked {
            session: session.clone(),
            n,
            answer: rx,
            live,
            _waiting: Waiting {
                asks: self,
                session,
                n,
            },
        })
    }
}

/// A question taken to be answered ([`Asks::claim`]).
pub(crate) struct Claimed {
    tx: oneshot::Sender<ElicitationAnswer>,
    /// The turn it was asked in.
    turn: u64,
    /// The MCP server that asked.
    pub(crate) service: String,
    /// What it asked.
    pub(crate) message: String,
}

impl Claimed {
    /// Gives the asker the answer; `false` when it stopped waiting meanwhile.
    pub(crate) fn answer(self, answer: ElicitationAnswer) -> bool {
        self.tx.send(answer).is_ok()
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
            let Some(live) = map.get_mut(&session).and_then(|s| s.live.clone()) else {
                tracing::info!(service = %request.service, session = %session,
                    "chat panel: an MCP question for a session with no answer running here declined");
                return ElicitationAnswer::Decline;
            };
            let Some(s) = map.get_mut(&session) else {
                return ElicitationAnswer::Decline;
            };
            s.next += 1;
            let n = s.next;
            let (mode, schema, url, link) = match &request.mode {
                ElicitationMode::Form { schema } => ("form", schema.clone(), Value::Null, false),
                ElicitationMode::Url { url } => {
                    ("url", Value::Null, json!(url), url_may_be_link(url))
                }
                _ => return ElicitationAnswer::Decline,
            };
            // `link`: whether the page may make the URL a link (it checks again itself);
            // otherwise it shows the URL as text.
            let event = json!({"id": n, "service": request.service, "message": request.message,
                               "mode": mode, "schema": schema, "url": url, "link": link});
            if live.send(("elicitation", event)).is_err() {
                return ElicitationAnswer::Decline;
            }
            let claimed = Claimed {
                tx,
                turn: s.turn,
                service: request.service.clone(),
                message: request.message.clone(),
            };
            s.waiting.insert(n, claimed);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A question asked before the turn's stream reads it waits for it; a turn that ends after
    /// the next one of its session started leaves the next one's questions alone.
    #[tokio::test]
    async fn a_turns_questions_outlive_an_earlier_turn_that_ends_late() {
        let asks = Arc::new(Asks::default());
        let elicitor = PanelElicitor { asks: asks.clone() };
        let ask = |message: &str| {
            ElicitationRequest::new(
                "planner",
                Some("s-0000001".into()),
                message,
                ElicitationMode::Form {
                    schema: json!({"type": "object", "properties": {}}),
                },
            )
        };
        let first = asks.turn_started("s-0000001", "local");
        let mut second = asks.turn_started("s-0000001", "local");
        drop(first);
        let asking = tokio::spawn({
            let elicitor = elicitor.clone();
            async move { elicitor.elicit(ask("Budget?")).await }
        });
        let shown = second.rx.recv().await;
        assert_eq!(
            shown.as_ref().map(|(_, q)| q["message"].clone()),
            Some(json!("Budget?"))
        );
        let n = shown
            .and_then(|(_, q)| q["id"].as_u64())
            .unwrap_or_default();
        let claimed = asks.claim("s-0000001", n);
        assert!(claimed.is_some_and(|c| c.answer(ElicitationAnswer::Accept(json!({})))));
        assert_eq!(
            asking.await.ok(),
            Some(ElicitationAnswer::Accept(json!({})))
        );
        // the second turn ends: a question now has no turn to be shown in
        drop(second);
        assert_eq!(
            elicitor.elicit(ask("Later?")).await,
            ElicitationAnswer::Decline
        );
    }

    /// only https (and http to this machine) may be a link; everything a hostile
    /// server could use to run script or read files is text.
    #[test]
    fn elicitation_url_may_be_a_link_only_for_https_and_loopback_http() {
        let cases: &[(&str, bool)] = &[
            ("https://example.com/consent", true),
            ("HTTPS://Example.COM/consent?x=1#y", true),
            ("  https://example.com/ ", true),
            ("https://user@example.com/", true),
            ("http://127.0.0.1:8080/cb", true),
            ("http://localhost/cb", true),
            ("http://LOCALHOST:3000/", true),
            ("http://[::1]:9000/", true),
            ("http://example.com/", false),
            ("http://127.0.0.2/", false),
            ("http://localhost.evil.com/", false),
            ("http://127.0.0.1.evil.com/", false),
            ("javascript:alert(1)", false),
            (" JaVaScRiPt:alert(1)", false),
            ("\tjavascript:alert(1)", false),
            ("java\nscript:alert(1)", false),
            ("java\tscript:alert(1)", false),
            ("\u{0}javascript:alert(1)", false),
            ("\u{1f}javascript:alert(1)", false),
            ("JAVASCRIPT://example.com/%0Aalert(1)", false),
            ("data:text/html,<script>alert(1)</script>", false),
            ("vbscript:msgbox(1)", false),
            ("file:///etc/passwd", false),
            ("blob:https://example.com/uuid", false),
            ("ftp://example.com/", false),
            ("//example.com/consent", false),
            ("/consent", false),
            ("example.com", false),
            ("https:", false),
            ("", false),
            ("not a url", false),
        ];
        for (url, want) in cases {
            assert_eq!(url_may_be_link(url), *want, "{url:?}");
        }
    }
}
