//! Sampling: a server asks the client's model to answer (`sampling/createMessage`), answered
//! through the toolkit's [`ChatModel`] seam — a hosted provider or the embedded local model
//! alike. Offered only when the application sets a [`Sampling`] before the server starts (the
//! capability is declared in `initialize`).
//!
//! A server gets nothing it was not granted: every request is put to the person first (the
//! elicitor, as the server's own questions are; with none attached it is refused) unless the
//! operator turned that off; its token limit is cut to the operator's; more than the allowed
//! number a minute is refused; the model's answer is text only, and a request that brings tools
//! or tool results is refused (this client does not offer tool use in sampling).
//!
//! The 2026-07-28 revision deprecates sampling (SEP-2577, and rmcp with it); servers of the
//! revisions before it, most of those in use, still ask for it.
#![allow(deprecated)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, Role, SamplingMessage, SamplingMessageContentBlock,
};
use toolwright_core::{ChatModel, ChatRequest, FinishReason, Media, Message, Part};

/// How long the model may take over one sampling request.
const ANSWER_LIMIT: Duration = Duration::from_secs(120);
/// Characters of the request shown to the person when asked.
const SHOWN_CHARS: usize = 600;

/// The model servers may sample, and the bounds on them ([`crate::McpBridge::set_sampling`]).
pub struct Sampling {
    model: Arc<dyn ChatModel>,
    max_tokens: u32,
    per_minute: usize,
    ask: bool,
    recent: Mutex<VecDeque<Instant>>,
}

impl std::fmt::Debug for Sampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampling")
            .field("model", &self.model.info().model)
            .field("max_tokens", &self.max_tokens)
            .field("per_minute", &self.per_minute)
            .field("ask", &self.ask)
            .finish()
    }
}

impl Sampling {
    /// Servers' sampling requests answered by `model`: each put to the person first, at most
    /// 1,024 tokens an answer, at most 10 requests a minute across all servers.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        Self {
            model,
            max_tokens: 1024,
            per_minute: 10,
            ask: true,
            recent: Mutex::new(VecDeque::new()),
        }
    }

    /// The most tokens an answer may have (a server's larger `maxTokens` is cut to it).
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n.max(1);
        self
    }

    /// The most requests a minute, across all servers; more are refused.
    pub fn with_rate(mut self, per_minute: usize) -> Self {
        self.per_minute = per_minute;
        self
    }

    /// Answers without putting each request to the person first (for servers the operator
    /// trusts with the model: it spends tokens and sees what the server sends it).
    pub fn without_asking(mut self) -> Self {
        self.ask = false;
        self
    }

    /// One more request now, if the minute's allowance has room.
    fn admit(&self, now: Instant) -> bool {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            recent.pop_front();
        }
        if recent.len() >= self.per_minute {
            return false;
        }
        recent.push_back(now);
        true
    }
}

/// Answers `params` from `service`: within the rate, asked of the person (`ask`: the
/// question as the server's own questions go), then the model's text.
pub(crate) async fn answer<Ask, Asked>(
    sampling: &Sampling,
    ask: Ask,
    service: &str,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, ErrorData>
where
    Ask: FnOnce(ElicitRequestParams) -> Asked,
    Asked: std::future::Future<Output = ElicitResult>,
{
    let refuse = |why: String| {
        tracing::warn!(service = %service, "MCP sampling refused: {why}");
        ErrorData::invalid_request(format!("sampling refused: {why}"), None)
    };
    if params.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(refuse(
            "this client does not offer tools in sampling".into(),
        ));
    }
    let messages = messages(&params).map_err(refuse)?;
    if !sampling.admit(Instant::now()) {
        return Err(refuse(format!(
            "more than {} requests a minute",
            sampling.per_minute
        )));
    }
    let max_tokens = params.max_tokens.clamp(1, sampling.max_tokens);
    if sampling.ask {
        let question = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: question(service, &messages, max_tokens),
            requested_schema: ElicitationSchema::new(Default::default()),
        };
        let answer = ask(question).await;
        if answer.action != ElicitationAction::Accept {
            return Err(refuse("the person did not allow it".into()));
        }
    }
    let mut request = ChatRequest::new(messages).with_max_tokens(max_tokens);
    if let Some(t) = params.temperature {
        request = request.with_temperature(t);
    }
    let response = match tokio::time::timeout(ANSWER_LIMIT, sampling.model.chat(request)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::warn!(service = %service, "MCP sampling: the model failed: {e}");
            return Err(ErrorData::internal_error(
                format!("the client's model failed: {e}"),
                None,
            ));
        }
        Err(_) => {
            return Err(ErrorData::internal_error(
                format!(
                    "the client's model did not answer within {} s",
                    ANSWER_LIMIT.as_secs()
                ),
                None,
            ));
        }
    };
    let stop = match &response.finish_reason {
        FinishReason::Length => "maxTokens",
        _ => "endTurn",
    };
    Ok(CreateMessageResult::new(
        SamplingMessage::assistant_text(response.content),
        sampling.model.info().model,
    )
    .with_stop_reason(stop))
}

/// The request as the toolkit's messages: the server's system prompt first, then its turns;
/// text, images and audio. Anything else is refused with the reason.
fn messages(params: &CreateMessageRequestParams) -> Result<Vec<Message>, String> {
    let mut out = Vec::with_capacity(params.messages.len() + 1);
    if let Some(system) = params.system_prompt.as_deref().filter(|s| !s.is_empty()) {
        out.push(Message::system(system));
    }
    for m in &params.messages {
        let mut text = Vec::new();
        let mut parts = Vec::new();
        for block in m.content.clone().into_vec() {
            match block {
                SamplingMessageContentBlock::Text(t) => text.push(t.text),
                SamplingMessageContentBlock::Image(i) => parts.push(Part::Image(
                    Media::image_base64(&i.data, &i.mime_type).map_err(|e| e.to_string())?,
                )),
                SamplingMessageContentBlock::Audio(a) => parts.push(Part::Audio(
                    Media::base64(&a.data, &a.mime_type).map_err(|e| e.to_string())?,
                )),
                _ => return Err("a tool use or tool result in a sampling message".into()),
            }
        }
        let text = text.join("\n");
        out.push(match m.role {
            Role::User => Message::user_with_parts(text, parts),
            Role::Assistant => Message::assistant(text).with_parts(parts),
        });
    }
    if !out.iter().any(|m| matches!(m, Message::User { .. })) {
        return Err("no user message to answer".into());
    }
    Ok(out)
}

/// What the person is asked: which server, what it sends the model (its end, cut), how long
/// the answer may be.
fn question(service: &str, messages: &[Message], max_tokens: u32) -> String {
    let sent = messages
        .iter()
        .map(|m| match m {
            Message::System { content } => format!("(instructions) {content}"),
            Message::User { content, .. } => content.clone(),
            Message::Assistant { content, .. } => format!("(model) {content}"),
            Message::Tool { content, .. } => content.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let count = sent.chars().count();
    let shown: String = if count > SHOWN_CHARS {
        let tail: String = sent.chars().skip(count - SHOWN_CHARS).collect();
        format!("…{tail}")
    } else {
        sent
    };
    format!(
        "The MCP service {service} asks to use your model (an answer of at most {max_tokens} tokens) on:\n\n{shown}\n\nAllow it?"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_admits_so_many_a_minute_then_again_when_the_minute_has_passed() {
        struct Never;
        #[async_trait::async_trait]
        impl ChatModel for Never {
            fn info(&self) -> toolwright_core::ModelInfo {
                toolwright_core::ModelInfo::new("never", false)
            }
            async fn chat(
                &self,
                _: ChatRequest,
            ) -> Result<toolwright_core::ChatResponse, toolwright_core::ModelError> {
                unreachable!("not asked")
            }
        }
        let s = Sampling::new(Arc::new(Never)).with_rate(2);
        let t0 = Instant::now();
        assert!(s.admit(t0));
        assert!(s.admit(t0 + Duration::from_secs(1)));
        assert!(!s.admit(t0 + Duration::from_secs(2)));
        assert!(!s.admit(t0 + Duration::from_secs(59)));
        assert!(s.admit(t0 + Duration::from_secs(60)));
        assert!(!s.admit(t0 + Duration::from_secs(60)));
        assert!(s.admit(t0 + Duration::from_secs(61)));
    }

    #[test]
    fn the_person_sees_the_service_the_limit_and_the_end_of_a_long_request() {
        let long = "x".repeat(2_000) + "THE END";
        let q = question(
            "everything",
            &[Message::system("be brief"), Message::user(long)],
            100,
        );
        assert!(q.starts_with("The MCP service everything asks"), "{q}");
        assert!(q.contains("at most 100 tokens"), "{q}");
        assert!(q.contains("THE END") && q.contains('…'), "{q}");
        assert!(
            q.chars().count() < SHOWN_CHARS + 200,
            "{}",
            q.chars().count()
        );
    }
}
