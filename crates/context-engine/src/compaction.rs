//! [`Compactor`]: past a token mark, older rounds are summarised by a model into a stored
//! [`Summary`] that later requests carry instead of those rounds; the rounds stay in the store.

use std::sync::Arc;
use std::time::Duration;

use toolwright_core::{ChatModel, ChatRequest, Message};

use crate::builder::{BuiltContext, ContextBuilder, ContextError, Piece, split};
use crate::history::History;
use crate::store::{SessionStore, StateChange, StoreError};
use crate::summary::{SUMMARY_STATE_KEY, Summary};

/// Why a compaction did not produce a new summary. The request is then built as without
/// compaction (with the previous summary, if any): the oldest rounds are dropped to fit the
/// budget, and the conversation goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompactionFallback {
    /// The summarising model returned an error.
    #[error(
        "the summarising model failed ({detail}); older rounds were dropped instead — check that \
         model, or name another with `Compactor::new`"
    )]
    ModelFailed {
        /// The model's error.
        detail: String,
    },
    /// The summarising model did not answer in time.
    #[error(
        "the summarising model did not answer within {timeout:?}; older rounds were dropped \
         instead — raise `Compactor::timeout` or use a faster model"
    )]
    TimedOut {
        /// The timeout.
        timeout: Duration,
    },
    /// The summary is longer than its budget.
    #[error(
        "the summary needs {tokens} tokens but its budget is {budget}; older rounds were dropped \
         instead — raise `Compactor::summary_budget` or use a model that follows length limits"
    )]
    OverBudget {
        /// The summary's tokens.
        tokens: usize,
        /// `Compactor::summary_budget`.
        budget: usize,
    },
    /// The summarising model answered with no text.
    #[error("the summarising model returned no text; older rounds were dropped instead")]
    Empty,
    /// The stored summary could not be read, or the new one could not be written (another
    /// writer changed it meanwhile, or the store failed).
    #[error(
        "the session's summary could not be read or stored ({detail}); older rounds were \
         dropped instead — check the session store"
    )]
    Store {
        /// What went wrong.
        detail: String,
    },
}

/// One request built by [`Compactor::build`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Compacted {
    /// The request's messages (the summary, if any, is in the system message).
    pub context: BuiltContext,
    /// The summary the request carries, if any (just made, or stored earlier).
    pub summary: Option<Summary>,
    /// Set when a compaction was due but fell back to dropping, and why.
    pub fallback: Option<CompactionFallback>,
}

/// Summarises older rounds with a model once the part of the history not yet summarised
/// passes a token mark.
///
/// [`build`](Self::build) reads the session's stored [`Summary`] (state slot
/// [`SUMMARY_STATE_KEY`]), and when the system prompt plus the unsummarised history exceed the
/// mark, asks the model to fold the older rounds — together with the previous summary — into a
/// new one, keeping the newest `keep_recent` tokens of rounds verbatim. The cut falls between
/// rounds, so a tool call is never separated from its result. The new summary is stored by
/// compare-and-set beside the session; the messages themselves are never changed or removed.
/// A model that fails, answers after [`timeout`](Self::timeout), or writes more than
/// [`summary_budget`](Self::summary_budget) tokens leaves the previous summary in place and the
/// request is trimmed as without compaction; the typed reason is returned in
/// [`Compacted::fallback`] (and is the caller's to log).
#[derive(Clone)]
pub struct Compactor {
    model: Arc<dyn ChatModel>,
    mark: usize,
    keep_recent: usize,
    summary_budget: usize,
    timeout: Duration,
}

impl std::fmt::Debug for Compactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compactor")
            .field("model", &self.model.info().model)
            .field("mark", &self.mark)
            .field("keep_recent", &self.keep_recent)
            .field("summary_budget", &self.summary_budget)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What the summarising model is asked to do.
const INSTRUCTIONS: &str = "You summarise a conversation between a user and an assistant that \
uses tools, so the assistant can continue it without the full transcript. Keep every fact, \
name, number, decision, tool result that matters and open task; merge the previous summary, if \
given. Write plain text only.";

impl Compactor {
    /// Summarises with `model` (the agent's own or another) once a request would need more
    /// than `mark` tokens without trimming. Defaults: keep the newest `mark / 2` tokens of rounds
    /// verbatim, a summary budget of `mark / 4` tokens, a 60-second timeout.
    pub fn new(model: Arc<dyn ChatModel>, mark: usize) -> Self {
        Self {
            model,
            mark,
            keep_recent: mark / 2,
            summary_budget: mark / 4,
            timeout: Duration::from_secs(60),
        }
    }

    /// Tokens of the newest rounds kept verbatim at each compaction.
    pub fn keep_recent(mut self, tokens: usize) -> Self {
        self.keep_recent = tokens;
        self
    }

    /// The most tokens a summary may have (also the request's `max_tokens`).
    pub fn summary_budget(mut self, tokens: usize) -> Self {
        self.summary_budget = tokens;
        self
    }

    /// How long the summarising model may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Builds one request for `session` from `builder` and the session's `history`,
    /// summarising first when due (see the type's documentation).
    ///
    /// # Errors
    /// [`ContextError::PinnedOverBudget`] as [`ContextBuilder::build`]. Failures of the model
    /// or the store are never errors: see [`Compacted::fallback`].
    pub async fn build(
        &self,
        builder: &ContextBuilder,
        history: &History,
        store: &dyn SessionStore,
        session: &str,
    ) -> Result<Compacted, ContextError> {
        let (stored, previous) = match store.get_state(session, SUMMARY_STATE_KEY).await {
            Ok(None) => (None, None),
            Ok(Some(json)) => match serde_json::from_str::<Summary>(&json) {
                Ok(s) => (Some(json), Some(s)),
                Err(e) => {
                    let fallback = CompactionFallback::Store {
                        detail: format!("the stored summary is not readable: {e}"),
                    };
                    return finish(builder, history, None, Some(fallback));
                }
            },
            Err(e) => {
                let fallback = CompactionFallback::Store {
                    detail: e.to_string(),
                };
                return finish(builder, history, None, Some(fallback));
            }
        };
        let with_previous = match &previous {
            Some(s) => builder.clone().with_summary(s.clone()),
            None => builder.clone(),
        };
        let untrimmed = with_previous
            .clone()
            .with_budget(usize::MAX)
            .build(history)?;
        if untrimmed.tokens <= self.mark {
            return finish(builder, history, previous, None);
        }
        let covers = previous.as_ref().map_or(0, |s| s.covers);
        let cut = self.cut(history, covers);
        if cut <= covers {
            // Only the newest rounds are left unsummarised: trimming handles the rest.
            return finish(builder, history, previous, None);
        }
        let outcome = self
            .summarise(history, previous.as_ref(), covers, cut)
            .await
            .and_then(|text| {
                let tokens = builder.counter().count_text(&text);
                if tokens > self.summary_budget {
                    Err(CompactionFallback::OverBudget {
                        tokens,
                        budget: self.summary_budget,
                    })
                } else {
                    Ok(Summary::new(cut, text))
                }
            });
        let summary = match outcome {
            Ok(s) => s,
            Err(fallback) => return finish(builder, history, previous, Some(fallback)),
        };
        let json = serde_json::to_string(&summary).map_err(|e| e.to_string());
        let written = match &json {
            Ok(json) => store
                .append_with_state(
                    session,
                    &[],
                    StateChange::new(SUMMARY_STATE_KEY, stored.as_deref(), Some(json)),
                )
                .await
                .map_err(|e: StoreError| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        match written {
            Ok(Some(_)) => finish(builder, history, Some(summary), None),
            Ok(None) => finish(
                builder,
                history,
                previous,
                Some(CompactionFallback::Store {
                    detail: "another writer changed the summary meanwhile".into(),
                }),
            ),
            Err(detail) => finish(
                builder,
                history,
                previous,
                Some(CompactionFallback::Store { detail }),
            ),
        }
    }

    /// Where the new summary ends: the start of the oldest of the newest rounds that fit in
    /// `keep_recent` tokens (a round boundary; pinned messages do not count).
    fn cut(&self, history: &History, covers: usize) -> usize {
        let counts = history.token_counts();
        let mut kept = 0usize;
        let mut cut = history.len();
        for p in split(history.messages()).iter().rev() {
            let (s, e) = match *p {
                Piece::Pinned(_) => continue,
                Piece::Unit(s, e) | Piece::Invalid(s, e, _) => (s, e),
            };
            if e <= covers {
                break;
            }
            let t = counts[s..e].iter().sum::<usize>();
            if kept.saturating_add(t) > self.keep_recent {
                return if s < covers { covers } else { e };
            }
            kept += t;
            cut = s;
        }
        cut.max(covers)
    }

    async fn summarise(
        &self,
        history: &History,
        previous: Option<&Summary>,
        from: usize,
        to: usize,
    ) -> Result<String, CompactionFallback> {
        let mut transcript = String::new();
        if let Some(p) = previous {
            transcript.push_str("Previous summary:\n");
            transcript.push_str(&p.text);
            transcript.push_str("\n\nConversation since:\n");
        }
        for m in &history.messages()[from..to] {
            render(m, &mut transcript);
        }
        let mut request = ChatRequest::new(vec![
            Message::system(format!(
                "{INSTRUCTIONS} Use at most {} tokens.",
                self.summary_budget
            )),
            Message::user(transcript),
        ]);
        request.max_tokens = Some(u32::try_from(self.summary_budget).unwrap_or(u32::MAX));
        match tokio::time::timeout(self.timeout, self.model.chat(request)).await {
            Err(_) => Err(CompactionFallback::TimedOut {
                timeout: self.timeout,
            }),
            Ok(Err(e)) => Err(CompactionFallback::ModelFailed {
                detail: e.to_string(),
            }),
            Ok(Ok(r)) if r.content.trim().is_empty() => Err(CompactionFallback::Empty),
            Ok(Ok(r)) => Ok(r.content.trim().to_owned()),
        }
    }
}

/// One message as transcript text for the summariser (tool calls and results as text, so the
/// request is valid for any model).
fn render(m: &Message, out: &mut String) {
    use std::fmt::Write;
    match m {
        Message::System { content } => {
            let _ = writeln!(out, "[system] {content}");
        }
        Message::User { content, .. } => {
            let _ = writeln!(out, "[user] {content}");
        }
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            if !content.is_empty() {
                let _ = writeln!(out, "[assistant] {content}");
            }
            for c in tool_calls {
                let _ = writeln!(out, "[assistant calls {}] {}", c.name, c.arguments);
            }
        }
        Message::Tool { name, content, .. } => {
            let _ = writeln!(out, "[result of {name}] {content}");
        }
    }
}

fn finish(
    builder: &ContextBuilder,
    history: &History,
    summary: Option<Summary>,
    fallback: Option<CompactionFallback>,
) -> Result<Compacted, ContextError> {
    let context = match &summary {
        Some(s) => builder.clone().with_summary(s.clone()).build(history)?,
        None => builder.build(history)?,
    };
    Ok(Compacted {
        context,
        summary,
        fallback,
    })
}
