//! An answer running on this worker: its lease, its questions, and the loop's events turned
//! into the page's events.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use toolwright_tool_system::LoopEvent;

use super::App;
use super::events::{Out, Rows};
use super::translate::{ev, live_entry, translate};
use crate::lease::{self};
use crate::state::{Entry, EntryKind, record_run};

/// What a turn runs with: the session's lease held by this worker, the last stored row before
/// it, its questions (registered before `events` was started) and its answer slot.
pub(super) struct Turn {
    pub(super) id: String,
    pub(super) lease: String,
    pub(super) before: u64,
    pub(super) asks: crate::elicit::TurnAsks,
    pub(super) permit: OwnedSemaphorePermit,
}

/// Runs `events` as the session's answer and streams it as SSE: the stored rows after
/// `turn.before` as they are stored, and what streams live — its questions among them, from
/// the first one asked.
pub(super) fn start_turn(
    app: Arc<App>,
    turn: Turn,
    events: crate::backend::EventStream,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(256);
    app.sessions.set_running(&turn.id, true);
    tokio::spawn(run_turn(app, turn, events, tx));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Clears the lease however the turn ends (a panic, a dropped task): the next answer may start.
pub(super) struct TurnGuard {
    app: Arc<App>,
    id: String,
    lease: Option<String>,
}

impl TurnGuard {
    async fn end(mut self) {
        if let Some(l) = self.lease.take() {
            lease::release(self.app.sessions.store(), &self.id, &l).await;
        }
        self.app.sessions.set_running(&self.id, false);
        self.app.sessions.touch(&self.id);
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.app.sessions.set_running(&self.id, false);
        if let Some(l) = self.lease.take() {
            let app = self.app.clone();
            let id = self.id.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { lease::release(app.sessions.store(), &id, &l).await });
            }
        }
    }
}

#[allow(clippy::too_many_lines)] // one match over the loop's events
pub(super) async fn run_turn(
    app: Arc<App>,
    turn: Turn,
    mut events: crate::backend::EventStream,
    tx: mpsc::Sender<Event>,
) {
    let Turn {
        id: session_id,
        lease: held,
        before,
        asks: mut turn_asks,
        permit,
    } = turn;
    let mut guard = TurnGuard {
        app: app.clone(),
        id: session_id.clone(),
        lease: Some(held),
    };
    let mut out = Out::channel(tx, app.config.write_stall_timeout);
    let mut rows = Rows::new(before, true);
    let deadline = tokio::time::Instant::now() + app.config.turn_timeout;
    let ttl = app.config.turn_lease;
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + ttl / 3, ttl / 3);
    // the person's message is shown once stored, even while the model has not answered yet
    let poll = app.config.follow_poll;
    let mut look = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // MCP servers' questions (elicitation) and tools' progress during this turn come in here; registered before
    // the turn started, they end when `turn_asks` is dropped, with this task
    let asks = &mut turn_asks.rx;
    let mut ended = false;
    // The error entry shown live when the answer failed: kept in the store too (below), so a
    // reload or another worker shows it instead of the person's message with no reply.
    let mut failed: Option<Entry> = None;
    let mut streaming = false; // the previous event was text
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout_at(deadline, events.next()) => n,
            Some((name, data)) = asks.recv() => {
                out.send(ev(name, &data)).await;
                continue;
            }
            _ = look.tick(), if !streaming => {
                rows.flush(&app, &session_id, &mut out).await;
                continue;
            }
            _ = renew.tick() => {
                let Some(current) = guard.lease.clone() else { continue };
                match lease::renew(app.sessions.store(), &session_id, &current, ttl).await {
                    Ok(Some(v)) => guard.lease = Some(v),
                    Ok(None) => {
                        // It expired and another worker closed the answer: stop writing.
                        tracing::warn!(session = %session_id, "chat panel: this worker's lease on the answer was lost; stopping it");
                        guard.lease = None;
                        let e = live_entry(EntryKind::Error, "This answer was stopped: the server running it was too slow to keep it and another one closed it.");
                        out.send(ev("entry", &e)).await;
                        ended = true;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(session = %session_id, error = %e, "chat panel: could not renew the answer's lease; retrying");
                    }
                }
                continue;
            }
        };
        let next = match next {
            Ok(n) => n,
            Err(_) => {
                let secs = app.config.turn_timeout.as_secs();
                let e = live_entry(
                    EntryKind::Error,
                    format!("The answer took longer than {secs} s and was stopped."),
                );
                out.send(ev("entry", &e)).await;
                failed = Some(e);
                ended = true;
                break;
            }
        };
        let Some(event) = next else { break };
        let text = matches!(event, LoopEvent::TextDelta(_));
        if !(text && streaming) {
            // what was stored since (the person's message, a finished round) goes first
            rows.flush(&app, &session_id, &mut out).await;
            app.sessions.touch(&session_id);
        }
        streaming = text;
        if let LoopEvent::Failed(err) = &event {
            tracing::warn!(session = %session_id, error = %err, "chat panel: the answer failed");
        }
        let step = translate(&mut rows.live, event);
        ended |= step.ended;
        if let Some(run) = step.run {
            // the answer's rows are stored (flushed above): its summary goes on its last entry
            let row = rows.after();
            if let Err(e) = record_run(app.sessions.store(), &session_id, row, run).await {
                tracing::warn!(session = %session_id, error = %e, "chat panel: could not record the answer's run summary");
            }
            if let Some(mut last) = rows.lowest.clone() {
                last.replaces = None;
                last.run = Some(run);
                out.send(ev("update", &last)).await;
            }
        }
        if step.failed.is_some() {
            failed = step.failed;
        }
        for e in &step.emit {
            out.send(e.sse()).await;
        }
    }
    drop(events);
    if !ended {
        let e = live_entry(EntryKind::Error, "The answer ended unexpectedly.");
        out.send(ev("entry", &e)).await;
        failed = Some(e);
    }
    if let Some(e) = failed
        && guard.lease.is_some()
    {
        match lease::close_failed(app.sessions.store(), &session_id, &e.text).await {
            // the stored row takes the live entry's place on this page
            Ok(true) => rows.live.provisional = Some(e.id),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(session = %session_id, error = %err, "chat panel: could not store that the answer failed");
            }
        }
    }
    rows.flush(&app, &session_id, &mut out).await;
    if let Err(e) = app
        .sessions
        .trim_history(&session_id, app.config.max_history_messages)
        .await
    {
        tracing::warn!(session = %session_id, error = %e, "chat panel: could not trim a long conversation");
    }
    // the session takes a new message from here on, even if this page is slow to read the tail
    guard.end().await;
    drop(permit);
    out.send(ev("done", &json!({}))).await;
}
