//! The SSE side: the events stream that follows a stored conversation ([`follow`]), the rows
//! it sends ([`Rows`]) and where events go ([`Out`]).

use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use toolwright_core::Message;

use super::App;
use super::translate::{Live, ev};
use crate::lease::{self};
use crate::state::{Entry, EntryKind, rows_from_history};

/// Follows a conversation's stored rows after `after` until the client goes: woken by the
/// store's change feed (every worker's changes), else every `follow_poll`. While an answer runs
/// it also reads every `follow_poll`, to notice a lease that expired (a dead worker's answer is
/// then closed as interrupted). An idle stream with a feed costs no reads at all.
///
/// It is the response body itself — no task, no channel: an idle stream is this state and the
/// connection. A page that stops reading stops being polled, and the connection's write-stall
/// timeout (`net.rs`) closes it; a page that goes drops it.
pub(super) fn follow(
    app: Arc<App>,
    id: String,
    who: crate::identity::Principal,
    after: u64,
) -> impl futures::Stream<Item = Event> + Send {
    let state = Follow {
        app,
        id,
        who,
        owned: None,
        rows: Rows::new(after, false),
        busy: None,
        out: Out::queue(),
        live: None,
        woken: None,
        again: true,
    };
    futures::stream::unfold(state, |mut f| async move {
        loop {
            if let Some(e) = f.out.pop() {
                return Some((e, f));
            }
            if !f.again {
                f.wait().await;
            }
            f.again = f.read().await;
            if f.owned == Some(false) {
                return None;
            }
        }
    })
}

/// An events stream between reads.
pub(super) struct Follow {
    app: Arc<App>,
    id: String,
    /// Who follows: the conversation must be theirs, checked once it exists.
    who: crate::identity::Principal,
    /// Whether the conversation is `who`'s (`None`: not known yet; `Some(false)` ends the
    /// stream).
    owned: Option<bool>,
    rows: Rows,
    /// Whether an answer runs, as last sent.
    busy: Option<bool>,
    /// Events read and not yet sent.
    out: Out,
    /// Whether the store has a change feed (asked on the first read).
    live: Option<bool>,
    /// Registered before the last read: a change committed during the read still wakes us.
    woken: Option<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
    /// Read again without waiting.
    again: bool,
}

impl Follow {
    /// Reads what is new; true when it should read again at once (the conversation was just
    /// opened on this worker: listen, then read again).
    pub(super) async fn read(&mut self) -> bool {
        let app = &self.app;
        if self.live.is_none() {
            self.live = Some(app.feed().await);
        }
        let wake = app.sessions.changed(&self.id);
        self.woken = wake.map(|n| {
            let mut n = Box::pin(n.notified_owned());
            n.as_mut().enable();
            n
        });
        match app.sessions.find(&self.id).await {
            Ok(true) if self.owned.is_none() => {
                // created after the stream started: by whom?
                self.owned = Some(super::guard::access(app, &self.id, &self.who).await.is_ok());
                return self.owned == Some(true);
            }
            Ok(true) => {
                // the rows and the lease in one read
                let (base, messages, turn) = match app.sessions.rows_and_turn(&self.id).await {
                    Ok(Some(r)) => r,
                    Ok(None) => return false,
                    Err(e) => {
                        tracing::warn!(session = %self.id, error = %e, "chat panel: the events stream could not read the conversation");
                        return false;
                    }
                };
                let stale = turn.as_deref().is_some_and(lease::expired);
                match lease::running_from(app.sessions.store(), &self.id, turn).await {
                    Ok(b) if self.busy != Some(b) => {
                        self.busy = Some(b);
                        self.out.send(ev("turn", &json!({"busy": b}))).await;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(session = %self.id, error = %e, "chat panel: could not read whether an answer runs")
                    }
                }
                if stale {
                    // closing the expired answer may have stored a row: read it too
                    self.rows.flush(app, &self.id, &mut self.out).await;
                } else {
                    self.rows
                        .send(&self.id, base, &messages, &mut self.out)
                        .await;
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(session = %self.id, error = %e, "chat panel: the events stream could not read the conversation")
            }
        }
        self.woken.is_none() && app.sessions.changed(&self.id).is_some()
    }

    /// Waits for a change, or for the timer when the stream needs one.
    pub(super) async fn wait(&mut self) {
        let timer = self.live != Some(true) || self.woken.is_none() || self.busy != Some(false);
        let poll = self.app.config.follow_poll;
        tokio::select! {
            () = async {
                match self.woken.as_mut() {
                    Some(n) => n.as_mut().await,
                    None => std::future::pending().await,
                }
            } => {
                // An answer's changes come in bursts (its lease and the person's message, its
                // round and the lease's release): one read after a short pause sees the burst.
                tokio::time::sleep(COALESCE).await;
            }
            () = tokio::time::sleep(poll), if timer => {}
        }
    }
}

/// How long a woken events stream waits before it reads, so that changes committed together
/// are read once (measured: a turn wakes a following stream 4 times).
pub(super) const COALESCE: Duration = Duration::from_millis(15);

/// Sends a conversation's stored rows after the last one sent.
pub(super) struct Rows {
    after: u64,
    /// `entry`/`update` events one by one (the answer's own stream) or one `row` event per row
    /// (the events stream).
    split: bool,
    /// What the page was shown live and is not stored yet.
    pub(super) live: Live,
    /// The stored entry sent last that is lowest on the page (the highest id): an answer's run
    /// summary goes on it.
    pub(super) lowest: Option<Entry>,
}

impl Rows {
    pub(super) fn new(after: u64, split: bool) -> Self {
        Self {
            after,
            split,
            live: Live::default(),
            lowest: None,
        }
    }

    /// The last stored row sent.
    pub(super) fn after(&self) -> u64 {
        self.after
    }

    pub(super) async fn flush(&mut self, app: &App, id: &str, out: &mut Out) {
        match app.sessions.rows(id).await {
            Ok(Some((base, messages))) => self.send(id, base, &messages, out).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "chat panel: could not read the stored conversation");
            }
        }
    }

    /// Sends the rows of `messages` (the first is row `base + 1`) after the last one sent.
    pub(super) async fn send(&mut self, id: &str, base: u64, messages: &[Message], out: &mut Out) {
        let rows = rows_from_history(id, base, messages);
        let after = self.after;
        for r in rows.into_iter().filter(|r| r.row > after) {
            let mut events = r.events;
            for (name, e) in &mut events {
                if let Some(t) = &e.tool {
                    self.live.stored_calls.insert(t.call_id.clone());
                }
                if *name != "entry" {
                    continue;
                }
                match e.kind {
                    EntryKind::Assistant => {
                        e.replaces = self.live.provisional.take();
                        self.live.text_ahead = e.replaces.is_none();
                    }
                    EntryKind::Tool => {
                        e.replaces = e
                            .tool
                            .as_ref()
                            .and_then(|t| self.live.live_tools.remove(&t.call_id))
                            .map(|l| l.id);
                    }
                    _ => {}
                }
            }
            for (_, e) in &events {
                if self.lowest.as_ref().is_none_or(|l| e.id >= l.id) {
                    self.lowest = Some(e.clone());
                }
            }
            let id_of_row = r.row.to_string();
            if self.split {
                let n = events.len();
                for (i, (name, e)) in events.iter().enumerate() {
                    let event = ev(name, e);
                    out.send(if i + 1 == n {
                        event.map(|x| x.id(id_of_row.clone()))
                    } else {
                        event
                    })
                    .await;
                }
            } else {
                let list: Vec<Value> = events
                    .iter()
                    .map(|(name, e)| json!({"event": name, "entry": e}))
                    .collect();
                out.send(
                    ev("row", &json!({"row": r.row, "events": list}))
                        .map(|x| x.id(id_of_row.clone())),
                )
                .await;
            }
            self.after = r.row;
        }
    }
}

/// Sends to the page while it listens; after a disconnect the answer still completes into the
/// session state (a reload shows it).
pub(super) struct Out {
    to: To,
    gone: bool,
    stall: Duration,
}

/// Where [`Out`] sends.
pub(super) enum To {
    /// An answer's own stream: the answer runs in its own task and goes on into the session
    /// after the page stops listening.
    Channel(mpsc::Sender<Event>),
    /// An events stream, which is the response body: events wait here until it is polled.
    Queue(std::collections::VecDeque<Event>),
}

impl Out {
    pub(super) fn channel(tx: mpsc::Sender<Event>, stall: Duration) -> Self {
        Self {
            to: To::Channel(tx),
            gone: false,
            stall,
        }
    }

    pub(super) fn queue() -> Self {
        Self {
            to: To::Queue(std::collections::VecDeque::new()),
            gone: false,
            stall: Duration::ZERO,
        }
    }

    /// The next queued event.
    pub(super) fn pop(&mut self) -> Option<Event> {
        match &mut self.to {
            To::Queue(q) => q.pop_front(),
            To::Channel(_) => None,
        }
    }

    pub(super) async fn send(&mut self, e: Option<Event>) {
        let (false, Some(e)) = (self.gone, e) else {
            return;
        };
        let tx = match &mut self.to {
            To::Queue(q) => return q.push_back(e),
            To::Channel(tx) => tx,
        };
        match tx.send_timeout(e, self.stall).await {
            Ok(()) => {}
            Err(mpsc::error::SendTimeoutError::Closed(_)) => {
                tracing::debug!("the page stopped listening; the answer goes on into the session");
                self.gone = true;
            }
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                tracing::warn!(
                    write_stall_timeout_ms = self.stall.as_millis() as u64,
                    "chat panel: the page stopped reading the answer; it goes on into the session"
                );
                self.gone = true;
            }
        }
    }
}
