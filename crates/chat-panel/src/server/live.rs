//! The side list kept live: MCP servers' notices that a list changed (tools, resources,
//! prompts) or that a subscribed resource changed, gathered into one [`Changed`] at most every
//! [`MIN_GAP`] ([`coalesce`]) and sent to every open page as a `changed` event of
//! `GET /api/mcp/events` ([`get_events`]); the page lists again. A storm of notices is a
//! `changed` event a second, to every page and in the servers' list requests: the pages'
//! lists within a gap are one listing ([`super::offers`]).

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde::Serialize;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use toolwright_mcp_bridge::McpNotice;

use super::App;
use super::translate::ev;
use crate::identity::Principal;

/// The shortest time between two `changed` events (and between two listings of the servers).
pub(super) const MIN_GAP: Duration = Duration::from_secs(1);
/// Most changes one event names; beyond it, `missed` says "list everything again".
const MAX_NAMED: usize = 32;

/// What changed since the previous event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(super) struct Changed {
    /// Counts the events; 0 before the first.
    pub generation: u64,
    /// The lists that changed: `{"service", "list"}` (`tools`, `resources` or `prompts`).
    pub lists: BTreeSet<ListOf>,
    /// The subscribed resources that changed: `{"service", "uri"}`.
    pub updated: BTreeSet<UpdatedResource>,
    /// More changed than is named (notices were missed, or too many): list everything again.
    pub missed: bool,
}

/// A list of a service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(super) struct ListOf {
    pub service: String,
    pub list: &'static str,
}

/// A subscribed resource of a service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(super) struct UpdatedResource {
    pub service: String,
    pub uri: String,
}

impl Changed {
    /// Adds what `notice` says changed; whether it said anything the side list shows.
    fn add(&mut self, notice: McpNotice) -> bool {
        let named = self.lists.len() + self.updated.len();
        match notice {
            McpNotice::ListChanged { service, list } => {
                if named < MAX_NAMED {
                    self.lists.insert(ListOf { service, list });
                } else {
                    self.missed = true;
                }
                true
            }
            McpNotice::ResourceUpdated { service, uri } => {
                if named < MAX_NAMED {
                    self.updated.insert(UpdatedResource { service, uri });
                } else {
                    self.missed = true;
                }
                true
            }
            // progress and log messages are shown elsewhere
            _ => false,
        }
    }
}

/// Reads `notices` and publishes what changed on `out`: at once when the last event is more
/// than `gap` ago, else once `gap` has passed, with everything said meanwhile. Ends when the
/// bridge's notices end or nobody holds a receiver of `out`.
pub(super) async fn coalesce(
    mut notices: broadcast::Receiver<McpNotice>,
    out: watch::Sender<Changed>,
    gap: Duration,
) {
    use broadcast::error::RecvError;
    let mut last: Option<Instant> = None;
    let mut generation = 0;
    loop {
        let mut changed = Changed::default();
        // the first notice that changes something
        loop {
            let got = tokio::select! {
                got = notices.recv() => got,
                () = out.closed() => return,
            };
            match got {
                Ok(n) => {
                    if changed.add(n) {
                        break;
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(
                        missed = n,
                        "chat panel: MCP notices came faster than read; the side list lists everything again"
                    );
                    changed.missed = true;
                    break;
                }
                Err(RecvError::Closed) => return,
            }
        }
        // what else is said before the gap since the last event has passed
        if let Some(at) = last {
            let until = at + gap;
            loop {
                let got = tokio::select! {
                    got = notices.recv() => got,
                    () = tokio::time::sleep_until(until) => break,
                };
                match got {
                    Ok(n) => {
                        changed.add(n);
                    }
                    Err(RecvError::Lagged(_)) => changed.missed = true,
                    Err(RecvError::Closed) => break,
                }
            }
        }
        generation += 1;
        changed.generation = generation;
        out.send_replace(changed);
        last = Some(Instant::now());
    }
}

/// `GET /api/mcp/events`: an SSE stream of `changed` events (a [`Changed`] as JSON) while the
/// page is open; `404` without [`ChatPanel::offer_mcp`](super::ChatPanel::offer_mcp). A page
/// that reads slowly gets the latest change only.
pub(super) async fn get_events(
    State(app): State<Arc<App>>,
    axum::Extension(_who): axum::Extension<Principal>,
) -> Response {
    let Some(rx) = app.live.get() else {
        return super::error(
            axum::http::StatusCode::NOT_FOUND,
            "this panel offers no MCP resources or prompts (ChatPanel::offer_mcp)",
        );
    };
    let mut rx = rx.clone();
    rx.mark_unchanged();
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        let c = rx.borrow_and_update().clone();
        Some((c, rx))
    })
    .filter_map(|c| async move { ev("changed", &c) })
    .map(Ok::<_, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_changed(service: &str, list: &'static str) -> McpNotice {
        McpNotice::ListChanged {
            service: service.into(),
            list,
        }
    }

    /// Runs the coalescer on a paused clock; the sender of notices and the receiver of events.
    fn start(gap: Duration) -> (broadcast::Sender<McpNotice>, watch::Receiver<Changed>) {
        let (tx, rx) = broadcast::channel(1024);
        let (out, events) = watch::channel(Changed::default());
        tokio::spawn(coalesce(rx, out, gap));
        (tx, events)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_change_is_published_at_once() {
        let (tx, mut events) = start(MIN_GAP);
        tokio::task::yield_now().await;
        tx.send(list_changed("everything", "resources")).unwrap();
        tokio::time::timeout(Duration::from_millis(1), events.changed())
            .await
            .expect("published without waiting for the gap")
            .unwrap();
        let c = events.borrow_and_update().clone();
        assert_eq!(c.generation, 1);
        assert_eq!(
            c.lists.into_iter().collect::<Vec<_>>(),
            [ListOf {
                service: "everything".into(),
                list: "resources"
            }]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_storm_of_notices_is_one_event_a_gap_naming_what_changed() {
        let (tx, mut events) = start(MIN_GAP);
        tokio::task::yield_now().await;
        let started = Instant::now();
        let mut seen = Vec::new();
        // 5 s of a server sending 1000 notices a second, of two lists and a resource
        let storm = tokio::spawn(async move {
            for i in 0..5000u32 {
                let n = match i % 3 {
                    0 => list_changed("a", "tools"),
                    1 => list_changed("b", "prompts"),
                    _ => McpNotice::ResourceUpdated {
                        service: "a".into(),
                        uri: "demo://r/1".into(),
                    },
                };
                let _ = tx.send(n);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tx
        });
        while started.elapsed() < Duration::from_secs(6) {
            match tokio::time::timeout(Duration::from_secs(2), events.changed()).await {
                Ok(Ok(())) => seen.push((started.elapsed(), events.borrow_and_update().clone())),
                _ => break,
            }
        }
        let _tx = storm.await.unwrap();
        // at most one event a gap: 5 s of storm is at most 6 events, never a flood
        assert!(
            (5..=6).contains(&seen.len()),
            "{} events: {:?}",
            seen.len(),
            seen.iter().map(|(t, _)| t).collect::<Vec<_>>()
        );
        for w in seen.windows(2) {
            assert!(w[1].0 - w[0].0 >= MIN_GAP, "{:?} then {:?}", w[0].0, w[1].0);
        }
        // each event after the first gathered everything of its gap
        let (_, second) = &seen[1];
        assert_eq!(second.lists.len(), 2, "{second:?}");
        assert_eq!(second.updated.len(), 1, "{second:?}");
        assert!(!second.missed);
        assert_eq!(
            seen.iter().map(|(_, c)| c.generation).collect::<Vec<_>>(),
            (1..=seen.len() as u64).collect::<Vec<_>>()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn progress_and_log_messages_publish_nothing() {
        let (tx, mut events) = start(MIN_GAP);
        tokio::task::yield_now().await;
        for _ in 0..100 {
            tx.send(McpNotice::Log {
                service: "a".into(),
                level: "info".into(),
                logger: None,
                text: "hello".into(),
            })
            .unwrap();
        }
        assert!(
            tokio::time::timeout(Duration::from_secs(5), events.changed())
                .await
                .is_err(),
            "no event for log messages"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn too_many_changes_or_missed_notices_say_list_everything_again() {
        let mut c = Changed::default();
        for i in 0..(MAX_NAMED + 10) {
            c.add(McpNotice::ResourceUpdated {
                service: "a".into(),
                uri: format!("demo://r/{i}"),
            });
        }
        assert_eq!(c.updated.len(), MAX_NAMED);
        assert!(c.missed);

        // a reader that fell behind the bridge's buffer
        let (tx, rx) = broadcast::channel(4);
        let (out, mut events) = watch::channel(Changed::default());
        for i in 0..10 {
            tx.send(list_changed(&format!("s{i}"), "tools")).unwrap();
        }
        tokio::spawn(coalesce(rx, out, MIN_GAP));
        events.changed().await.unwrap();
        assert!(events.borrow_and_update().missed);
    }

    #[tokio::test(start_paused = true)]
    async fn the_coalescer_ends_when_nobody_listens() {
        let (tx, rx) = broadcast::channel(4);
        let (out, events) = watch::channel(Changed::default());
        let task = tokio::spawn(coalesce(rx, out, MIN_GAP));
        drop(events);
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("ended")
            .unwrap();
        drop(tx);
    }
}
