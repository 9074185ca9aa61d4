//! The calling MCP client as a tool sees it ([`toolwright_core::Caller`]): log lines and
//! progress as notifications, sampling and elicitation as requests to the client.

// MCP logging and sampling are deprecated from protocol 2026-07-28 on (rmcp marks them), and
// still what every client of the earlier revisions uses.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CreateMessageRequestParams, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
    SamplingMessage,
};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use toolwright_core::{Caller, Elicited, LogLevel, ToolError};

use crate::session::SessionState;

/// The most tokens a tool may ask the client's model for in one sampling request.
pub const MAX_SAMPLE_TOKENS: u32 = 16_384;

pub(crate) struct McpCaller {
    pub(crate) peer: Peer<RoleServer>,
    pub(crate) progress_token: Option<ProgressToken>,
    pub(crate) state: Arc<SessionState>,
    /// Whether a request to the client can be answered (a session keeps the connection).
    pub(crate) session: bool,
    pub(crate) timeout: Duration,
}

fn level(l: LogLevel) -> LoggingLevel {
    match l {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        _ => LoggingLevel::Error,
    }
}

impl McpCaller {
    /// Whether the client can be sent a request and answer it: a connection that keeps a
    /// session, on a protocol before 2026-07-28 (which has no server-to-client requests).
    fn can_ask(&self, what: &str) -> Result<(), ToolError> {
        let legacy = self
            .peer
            .peer_info()
            .is_some_and(|i| i.protocol_version.has_initialize());
        if self.session && legacy {
            Ok(())
        } else if self.session {
            Err(ToolError::unavailable(format!(
                "this client cannot be asked to {what} mid-call: protocol 2026-07-28 has no requests from server to client; connect with 2025-11-25 or earlier"
            )))
        } else {
            Err(ToolError::unavailable(format!(
                "this client cannot be asked to {what} mid-call: the server runs stateless HTTP, where it cannot send the client a request; serve over stdio or stateful HTTP (`\"stateful\": true`)"
            )))
        }
    }
}

#[async_trait::async_trait]
impl Caller for McpCaller {
    async fn log(&self, l: LogLevel, message: &str) {
        let l = level(l);
        if !self.state.logs(l) {
            return;
        }
        let sent = self
            .peer
            .notify_logging_message(
                LoggingMessageNotificationParam::new(l, Value::String(message.to_owned()))
                    .with_logger("toolwright"),
            )
            .await;
        if let Err(e) = sent {
            tracing::debug!("log notification not sent: {e}");
        }
    }

    async fn progress(&self, done: f64, total: Option<f64>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut p = ProgressNotificationParam::new(token.clone(), done);
        if let Some(t) = total {
            p = p.with_total(t);
        }
        if let Err(e) = self.peer.notify_progress(p).await {
            tracing::debug!("progress notification not sent: {e}");
        }
    }

    async fn sample(&self, prompt: &str, max_tokens: u32) -> Result<String, ToolError> {
        if max_tokens == 0 || max_tokens > MAX_SAMPLE_TOKENS {
            return Err(ToolError::invalid_arguments(format!(
                "a sampling request may ask for 1 to {MAX_SAMPLE_TOKENS} tokens, not {max_tokens}"
            )));
        }
        self.can_ask("answer with its model")?;
        let supported = self
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.sampling.is_some());
        if !supported {
            return Err(ToolError::unavailable(
                "the client cannot be asked for a model's answer (it did not declare the sampling capability)",
            ));
        }
        let params =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], max_tokens);
        let asked = tokio::time::timeout(self.timeout, self.peer.create_message(params)).await;
        let answer = match asked {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                return Err(ToolError::failed(format!(
                    "the client's model did not answer: {e}"
                )));
            }
            Err(_) => {
                return Err(ToolError::failed(format!(
                    "the client's model did not answer within {} s",
                    self.timeout.as_secs()
                )));
            }
        };
        let text: Vec<String> = answer
            .message
            .content
            .into_vec()
            .into_iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        Ok(text.join("\n"))
    }

    async fn elicit(&self, message: &str, schema: Value) -> Result<Elicited, ToolError> {
        self.can_ask("ask its person")?;
        let supported = self
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.elicitation.is_some());
        if !supported {
            return Err(ToolError::unavailable(
                "the client's person cannot be asked (the client did not declare the elicitation capability)",
            ));
        }
        let schema: ElicitationSchema = serde_json::from_value(schema).map_err(|e| {
            ToolError::invalid_arguments(format!(
                "the question's form is not an MCP elicitation schema (an object of flat properties): {e}"
            ))
        })?;
        let asked = self
            .peer
            .create_elicitation_with_timeout(
                ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: message.to_owned(),
                    requested_schema: schema,
                },
                Some(self.timeout),
            )
            .await
            .map_err(|e| ToolError::failed(format!("the person could not be asked: {e}")))?;
        Ok(match asked.action {
            ElicitationAction::Accept => Elicited::Accept(asked.content.unwrap_or(Value::Null)),
            ElicitationAction::Decline => Elicited::Decline,
            _ => Elicited::Cancel,
        })
    }
}
