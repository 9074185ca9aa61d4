//! What servers say between answers: a call's progress, their log messages, a subscribed
//! resource that changed, and lists (tools, resources, prompts) that changed. Each becomes an
//! [`McpNotice`] on the bridge's notice channel ([`McpBridge::notices`](crate::McpBridge::notices)) for the application
//! (the chat panel shows a running call's progress), and a `tracing` event for the traces:
//! progress inside the `tools/call` span of the call it belongs to.
//!
//! Bounded against a server that floods: the channel keeps the newest [`NOTICE_BUFFER`]
//! notices (a slow reader is told how many it missed, never blocks the server), a log
//! message's data is cut at [`MAX_NOTICE_TEXT`] bytes, progress for a token the bridge did not
//! hand out (or for a call already answered) is dropped, and resource subscriptions are
//! bounded per service and per person ([`crate::subscriptions`]).

// Logging is deprecated from the 2026-07-28 revision on (SEP-2577); servers of the revisions
// before it still send log messages, and they are shown.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, NumberOrString, ProgressNotificationParam,
    ProgressToken,
};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;
use tracing::Span;

use crate::subscriptions::Subscriptions;

/// How many notices the channel keeps for a reader that has not read them yet.
pub const NOTICE_BUFFER: usize = 1024;
/// Longest log text a notice carries, in bytes (cut at a character boundary, marked `…`).
pub const MAX_NOTICE_TEXT: usize = 4096;

/// Something a server said between answers ([`McpBridge::notices`](crate::McpBridge::notices)).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum McpNotice {
    /// A running tool call's progress (`notifications/progress`).
    Progress {
        /// The service running the call.
        service: String,
        /// The session of the agent that made the call, when it runs in one.
        session: Option<String>,
        /// The tool, by its name on the server.
        tool: String,
        /// How far along it is; grows with each notice of the call.
        progress: f64,
        /// Where `progress` ends, when the server knows.
        total: Option<f64>,
        /// What it is doing, when the server says.
        message: Option<String>,
    },
    /// A log message (`notifications/message`).
    Log {
        /// The service that logged it.
        service: String,
        /// `debug`, `info`, `notice`, `warning`, `error`, `critical`, `alert` or `emergency`.
        level: String,
        /// The server's logger name, when it gave one.
        logger: Option<String>,
        /// The message: the server's text, or its JSON data written out, at most
        /// [`MAX_NOTICE_TEXT`] bytes.
        text: String,
    },
    /// A resource subscribed to with [`McpBridge::subscribe`](crate::McpBridge::subscribe) changed: read it again.
    ResourceUpdated {
        /// The service.
        service: String,
        /// The resource's URI.
        uri: String,
    },
    /// A list the service offers changed: list it again.
    ListChanged {
        /// The service.
        service: String,
        /// `tools`, `resources` or `prompts`.
        list: &'static str,
    },
}

/// The bridge's notice channel, the progress tokens of calls in flight, and the resources
/// each service is subscribed to.
pub(crate) struct Notices {
    tx: broadcast::Sender<McpNotice>,
    next_token: AtomicU64,
    /// Progress token → the call it belongs to.
    calls: Mutex<HashMap<String, Arc<CallProgress>>>,
    /// Who holds which resource subscription (kept across restarts: subscribed again on
    /// start).
    pub(crate) subscribed: Mutex<Subscriptions>,
    /// Taken while a subscription changes hands and the server is told, so the server's
    /// subscribe and unsubscribe go out in the order the holders came and went.
    pub(crate) subscribing: tokio::sync::Mutex<()>,
}

/// A call in flight that asked for progress.
struct CallProgress {
    service: String,
    session: Option<String>,
    tool: String,
    span: Span,
    /// The last progress reported, as bits (progress must grow: a notice that does not is
    /// dropped, as the spec says it must increase).
    last: AtomicU64,
}

/// A progress token handed out for one call; the token is forgotten when this is dropped (the
/// call answered, failed or was dropped), so later progress for it is ignored.
pub(crate) struct ProgressTicket {
    notices: Arc<Notices>,
    token: String,
}

impl ProgressTicket {
    /// The token to put in the request's `_meta.progressToken`.
    pub(crate) fn token(&self) -> ProgressToken {
        ProgressToken(NumberOrString::String(self.token.clone().into()))
    }
}

impl Drop for ProgressTicket {
    fn drop(&mut self) {
        crate::sync::lock(&self.notices.calls).remove(&self.token);
    }
}

impl Notices {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            tx: broadcast::channel(NOTICE_BUFFER).0,
            next_token: AtomicU64::new(1),
            calls: Mutex::new(HashMap::new()),
            subscribed: Mutex::new(Subscriptions::default()),
            subscribing: tokio::sync::Mutex::new(()),
        })
    }

    /// A progress token for a call of `tool` on `service` whose span is `span`.
    pub(crate) fn ticket(
        self: &Arc<Self>,
        service: &str,
        session: Option<&str>,
        tool: &str,
        span: &Span,
    ) -> ProgressTicket {
        let token = format!(
            "toolwright-{}",
            self.next_token.fetch_add(1, Ordering::Relaxed)
        );
        let call = CallProgress {
            service: service.to_owned(),
            session: session.map(str::to_owned),
            tool: tool.to_owned(),
            span: span.clone(),
            last: AtomicU64::new(f64::NEG_INFINITY.to_bits()),
        };
        crate::sync::lock(&self.calls).insert(token.clone(), Arc::new(call));
        ProgressTicket {
            notices: self.clone(),
            token,
        }
    }

    /// The URIs `service` is subscribed to.
    pub(crate) fn subscriptions_of(&self, service: &str) -> Vec<String> {
        crate::sync::lock(&self.subscribed).uris(service)
    }

    /// Forgets every subscription of `service`.
    pub(crate) fn forget_all(&self, service: &str) {
        crate::sync::lock(&self.subscribed).forget_service(service);
    }

    /// A receiver of every notice sent from now on.
    pub(crate) fn receiver(&self) -> broadcast::Receiver<McpNotice> {
        self.tx.subscribe()
    }

    /// `notifications/resources/updated` from `service`: passed on only for a resource the
    /// service is subscribed to (a server cannot fill the channel with URIs nobody asked for).
    pub(crate) fn resource_updated(&self, service: &str, uri: String) {
        let wanted = crate::sync::lock(&self.subscribed).wanted(service, &uri);
        if !wanted {
            tracing::debug!(
                service,
                "an update of a resource not subscribed to, dropped"
            );
            return;
        }
        tracing::info!(service, uri = %uri, "MCP resource updated");
        self.send(McpNotice::ResourceUpdated {
            service: service.to_owned(),
            uri,
        });
    }

    pub(crate) fn send(&self, notice: McpNotice) {
        // No receiver is no error: nobody listens.
        let _ = self.tx.send(notice);
    }

    /// `notifications/progress` from `service`: passed on when it is for a call of that
    /// service in flight and moves forward.
    pub(crate) fn progress(&self, service: &str, p: ProgressNotificationParam) {
        let token = match &p.progress_token.0 {
            NumberOrString::String(s) => s.to_string(),
            NumberOrString::Number(n) => n.to_string(),
        };
        let Some(call) = crate::sync::lock(&self.calls).get(&token).cloned() else {
            tracing::debug!(
                service,
                "progress for a token of no call in flight, dropped"
            );
            return;
        };
        if call.service != service || !p.progress.is_finite() {
            tracing::debug!(service, "progress for another service's call, dropped");
            return;
        }
        let before = f64::from_bits(call.last.load(Ordering::Relaxed));
        if p.progress <= before {
            return;
        }
        call.last.store(p.progress.to_bits(), Ordering::Relaxed);
        let message = p.message.map(cut);
        tracing::info!(
            parent: &call.span,
            service,
            tool = %call.tool,
            progress = p.progress,
            total = p.total,
            message = message.as_deref().unwrap_or(""),
            "MCP progress"
        );
        self.send(McpNotice::Progress {
            service: service.to_owned(),
            session: call.session.clone(),
            tool: call.tool.clone(),
            progress: p.progress,
            total: p.total.filter(|t| t.is_finite()),
            message,
        });
    }

    /// `notifications/message` from `service`: a `tracing` event at the matching level, and a
    /// notice.
    pub(crate) fn log(&self, service: &str, m: LoggingMessageNotificationParam) {
        let text = cut(match m.data {
            Value::String(s) => s,
            other => other.to_string(),
        });
        let level = level_name(m.level);
        let logger = m.logger.map(cut);
        let logger_field = logger.as_deref().unwrap_or("");
        match m.level {
            LoggingLevel::Debug => {
                tracing::debug!(service, logger = logger_field, "MCP server log: {text}")
            }
            LoggingLevel::Info | LoggingLevel::Notice => {
                tracing::info!(service, logger = logger_field, "MCP server log: {text}")
            }
            LoggingLevel::Warning => {
                tracing::warn!(service, logger = logger_field, "MCP server log: {text}")
            }
            _ => tracing::error!(
                service,
                logger = logger_field,
                level,
                "MCP server log: {text}"
            ),
        }
        self.send(McpNotice::Log {
            service: service.to_owned(),
            level: level.to_owned(),
            logger,
            text,
        });
    }
}

fn level_name(level: LoggingLevel) -> &'static str {
    match level {
        LoggingLevel::Debug => "debug",
        LoggingLevel::Info => "info",
        LoggingLevel::Notice => "notice",
        LoggingLevel::Warning => "warning",
        LoggingLevel::Error => "error",
        LoggingLevel::Critical => "critical",
        LoggingLevel::Alert => "alert",
        LoggingLevel::Emergency => "emergency",
    }
}

/// `text` cut to [`MAX_NOTICE_TEXT`] bytes at a character boundary, marked `…` when cut.
fn cut(mut text: String) -> String {
    if text.len() > MAX_NOTICE_TEXT {
        let mut end = MAX_NOTICE_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(token: &str, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(
            ProgressToken(NumberOrString::String(token.to_owned().into())),
            progress,
        )
    }

    #[test]
    fn progress_reaches_the_channel_only_for_a_call_in_flight_and_only_forward() {
        let notices = Notices::new();
        let mut rx = notices.tx.subscribe();
        let ticket = notices.ticket("svc", Some("s1"), "long", &Span::none());
        let token = match ticket.token().0 {
            NumberOrString::String(s) => s.to_string(),
            NumberOrString::Number(_) => unreachable!(),
        };
        notices.progress("svc", progress(&token, 1.0));
        notices.progress("svc", progress(&token, 1.0)); // not forward
        notices.progress("svc", progress(&token, f64::NAN));
        notices.progress("other", progress(&token, 2.0)); // another service's
        notices.progress("svc", progress("toolwright-999", 2.0)); // no such call
        notices.progress("svc", progress(&token, 2.0));
        drop(ticket);
        notices.progress("svc", progress(&token, 3.0)); // the call is over
        let got: Vec<f64> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|n| match n {
                McpNotice::Progress {
                    progress, session, ..
                } => {
                    assert_eq!(session.as_deref(), Some("s1"));
                    progress
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got, [1.0, 2.0]);
    }

    #[test]
    fn a_long_log_message_is_cut_at_a_character_boundary() {
        let notices = Notices::new();
        let mut rx = notices.tx.subscribe();
        let data = Value::String("日".repeat(MAX_NOTICE_TEXT));
        notices.log(
            "svc",
            LoggingMessageNotificationParam::new(LoggingLevel::Warning, data),
        );
        match rx.try_recv().unwrap() {
            McpNotice::Log { level, text, .. } => {
                assert_eq!(level, "warning");
                assert!(text.len() <= MAX_NOTICE_TEXT + '…'.len_utf8());
                assert!(text.ends_with('…'));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reader_that_falls_behind_loses_the_oldest_and_is_told() {
        let notices = Notices::new();
        let mut rx = notices.tx.subscribe();
        for i in 0..NOTICE_BUFFER + 10 {
            notices.send(McpNotice::ResourceUpdated {
                service: "svc".into(),
                uri: format!("demo://{i}"),
            });
        }
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(10))
        ));
        assert!(
            matches!(rx.try_recv(), Ok(McpNotice::ResourceUpdated { uri, .. }) if uri == "demo://10")
        );
    }
}
