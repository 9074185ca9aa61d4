//! [`ContextBuilder`]: the messages of one request from a base prompt, per-turn sections and a
//! history, inside a token budget (C2, C3).

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, OnceLock};

use toolwright_core::{EstimateCounter, Message, REPLY_PRIMING_TOKENS, TokenCounter, ToolCall};

use crate::history::History;
use crate::summary::Summary;

/// The line that introduces a conversation summary in the system message.
pub const SUMMARY_HEADING: &str =
    "Summary of the earlier conversation (the messages it covers are not repeated below):";

/// Why the budget cannot be met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// The messages that are never dropped (the system prompt with its sections, system
    /// messages stored in the history, and the newest user message) alone exceed the budget.
    #[error(
        "the system prompt (with its sections) and the newest user message need {needed} tokens \
         but the budget is {budget}; raise the budget, shorten the system prompt or drop a \
         section, or shorten or split that user message"
    )]
    PinnedOverBudget {
        /// Tokens of the pinned messages plus the reply priming.
        needed: usize,
        /// The budget.
        budget: usize,
    },
}

/// Why a history message was left out of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// Trimmed to fit the budget (oldest first).
    OverBudget,
    /// A tool message that does not directly follow an assistant message calling its
    /// `tool_call_id` (its call was lost, or it is a duplicate answer).
    OrphanToolResult,
    /// An assistant message with tool calls that are not all answered by the tool messages
    /// right after it, together with those partial answers. Providers reject such sequences.
    IncompleteToolRound,
    /// Covered by the conversation summary the request carries instead
    /// ([`ContextBuilder::with_summary`]); the message itself stays in the history and the store.
    Summarized,
}

/// One history message left out of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dropped {
    /// Its index in the history.
    pub index: usize,
    /// Why.
    pub reason: DropReason,
    /// Its token count.
    pub tokens: usize,
}

/// The messages of one request and what was left out.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BuiltContext {
    /// The composed system message (if any), then the kept history messages in order.
    pub messages: Vec<Message>,
    /// Tokens of `messages` plus the reply priming ([`REPLY_PRIMING_TOKENS`]).
    pub tokens: usize,
    /// The budget it was built for.
    pub budget: usize,
    /// History indices that were kept, ascending.
    pub kept: Vec<usize>,
    /// History messages that were left out, ascending by index.
    pub dropped: Vec<Dropped>,
}

impl BuiltContext {
    /// How many history messages were dropped for `reason`.
    pub fn dropped_count(&self, reason: DropReason) -> usize {
        self.dropped.iter().filter(|d| d.reason == reason).count()
    }
}

/// Builds the messages of one request (C2, C3).
///
/// * **System prompt.** The base prompt and the named sections, in the order the sections were
///   first added, non-blank parts joined by a blank line, become one system message at the
///   front. Section names only identify sections (setting a name again replaces its text in
///   place); they are not rendered. Sections live in the builder, never in the history: set
///   them per turn (tool descriptions of the call protocol, MCP level-1 descriptions).
/// * **Budget.** Tokens of all messages plus [`REPLY_PRIMING_TOKENS`] stay within
///   [`with_budget`](Self::with_budget) (default: unlimited). Set it to the model's context
///   window minus the tokens reserved for the answer and for the `tools` field.
/// * **Pinned.** The system prompt, system messages stored in the history and the newest user
///   message are always kept; if they alone do not fit, [`ContextError::PinnedOverBudget`].
/// * **Trimming.** Everything else is grouped into units — a user message, a plain assistant
///   message, or an assistant message with tool calls together with the tool messages right
///   after it that answer every call — and the newest units are kept while they fit: oldest
///   units are dropped first, and the kept history is always a contiguous newest part. A unit
///   bigger than the remaining budget is dropped with everything older (documented, never an
///   error).
/// * **Validity.** Tool messages that answer no preceding call, and tool-call rounds missing a
///   result, are never sent (see [`DropReason`]), so the output is a valid OpenAI sequence.
///
/// ```
/// use std::sync::Arc;
/// use toolwright_context_engine::{ContextBuilder, History};
/// use toolwright_core::{EstimateCounter};
/// use toolwright_core::{Message, Role, ToolCall};
///
/// let mut history = History::new(Arc::new(EstimateCounter));
/// history.push(Message::user("a long question from long ago ".repeat(20)));
/// history.push(Message::assistant("an equally long answer ".repeat(20)));
/// history.push(Message::user("Weather in Paris?"));
/// history.push(Message::assistant_with_tool_calls(
///     "",
///     vec![ToolCall::new("c1", "weather", serde_json::json!({"city": "Paris"}))],
/// ));
/// history.push(Message::tool("c1", "weather", "18°C, cloudy"));
///
/// let builder = ContextBuilder::new("You are a helpful assistant.")
///     .section("tools", "weather(city): current weather")
///     .with_budget(120);
/// let ctx = builder.build(&history)?;
/// assert_eq!(ctx.messages[0].role(), Role::System);
/// assert!(ctx.messages[0].content().ends_with("weather(city): current weather"));
/// assert_eq!(ctx.kept, vec![2, 3, 4]);            // the old turn did not fit
/// assert_eq!(ctx.dropped.len(), 2);
/// assert!(ctx.tokens <= 120);
/// # Ok::<(), toolwright_context_engine::ContextError>(())
/// ```
#[derive(Clone)]
pub struct ContextBuilder {
    base: String,
    sections: Vec<(String, String)>,
    budget: usize,
    counter: Arc<dyn TokenCounter>,
    summary: Option<Summary>,
    /// The composed system message and its token count, computed on first build.
    system: OnceLock<(Option<Message>, usize)>,
}

impl std::fmt::Debug for ContextBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextBuilder")
            .field("base", &self.base)
            .field("sections", &self.sections)
            .field("budget", &self.budget)
            .field("counter", &self.counter.id())
            .field("summary", &self.summary)
            .finish()
    }
}

/// A piece of the history, as the trimmer sees it.
pub(crate) enum Piece {
    /// Never dropped.
    Pinned(usize),
    /// Kept or dropped as a whole: `start..end`.
    Unit(usize, usize),
    /// Never sent: `start..end`.
    Invalid(usize, usize, DropReason),
}

impl ContextBuilder {
    /// A builder with this base system prompt, no sections, no budget limit and
    /// [`EstimateCounter`]. An empty base with no sections means no system message.
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into(),
            sections: Vec::new(),
            budget: usize::MAX,
            counter: estimate(),
            summary: None,
            system: OnceLock::new(),
        }
    }

    /// Carries `summary` instead of the history messages it covers: its text is appended to
    /// the system message (after the sections, under the heading [`SUMMARY_HEADING`]), and the
    /// covered messages (`0..summary.covers`) are left out as [`DropReason::Summarized`] —
    /// except pinned ones (system messages, the newest user message), which are always sent.
    /// A tool-call round that starts before `covers` and ends after it is not covered. The
    /// history is not changed. [`crate::Compactor`] makes and stores summaries.
    pub fn with_summary(mut self, summary: Summary) -> Self {
        self.summary = Some(summary);
        self.system = OnceLock::new();
        self
    }

    /// Sets the section `name` (replacing its text, keeping its place) or adds it at the end.
    /// Blank text omits the section.
    pub fn section(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        let (name, text) = (name.into(), text.into());
        match self.sections.iter_mut().find(|(n, _)| *n == name) {
            Some((_, t)) => *t = text,
            None => self.sections.push((name, text)),
        }
        self.system = OnceLock::new();
        self
    }

    /// Removes the section `name`, if present.
    pub fn without_section(mut self, name: &str) -> Self {
        self.sections.retain(|(n, _)| n != name);
        self.system = OnceLock::new();
        self
    }

    /// The token budget of the whole request.
    pub fn with_budget(mut self, tokens: usize) -> Self {
        self.budget = tokens;
        self
    }

    /// The token counter (see `counter_for_model`, feature `tiktoken`, for the best one for a
    /// model).
    pub fn with_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = counter;
        self.system = OnceLock::new();
        self
    }

    /// The budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The counter.
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// The composed system prompt: base and non-blank sections joined by a blank line.
    /// With a summary, its text follows under [`SUMMARY_HEADING`].
    pub fn system_prompt(&self) -> String {
        let summary = self
            .summary
            .as_ref()
            .map(|s| format!("{SUMMARY_HEADING}\n{}", s.text));
        std::iter::once(self.base.as_str())
            .chain(self.sections.iter().map(|(_, t)| t.as_str()))
            .chain(summary.as_deref())
            .filter(|t| !t.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    fn system_message(&self) -> &(Option<Message>, usize) {
        self.system.get_or_init(|| {
            let prompt = self.system_prompt();
            if prompt.is_empty() {
                (None, 0)
            } else {
                let m = Message::system(prompt);
                let n = self.counter.count_message(&m);
                (Some(m), n)
            }
        })
    }

    /// Builds the request's messages from a [`History`], using its cached counts when its
    /// counter has the same id as the builder's (otherwise each message is recounted).
    ///
    /// # Errors
    /// [`ContextError::PinnedOverBudget`] when the system prompt and the newest user message do
    /// not fit.
    pub fn build(&self, history: &History) -> Result<BuiltContext, ContextError> {
        if history.counter().id() == self.counter.id() {
            let counts = history.token_counts();
            self.build_with(history.messages(), &|i| counts[i])
        } else {
            self.build_messages(history.messages())
        }
    }

    /// Builds from plain messages, counting every message with the builder's counter (with a
    /// real tokenizer that is O(total text); prefer [`build`](Self::build) in a loop).
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_messages(&self, history: &[Message]) -> Result<BuiltContext, ContextError> {
        let counts: Vec<usize> = history
            .iter()
            .map(|m| self.counter.count_message(m))
            .collect();
        self.build_with(history, &|i| counts[i])
    }

    fn build_with(
        &self,
        history: &[Message],
        count: &dyn Fn(usize) -> usize,
    ) -> Result<BuiltContext, ContextError> {
        let (system, system_tokens) = self.system_message();
        let covers = self.summary.as_ref().map_or(0, |s| s.covers);
        let pieces: Vec<Piece> = split(history)
            .into_iter()
            .map(|p| match p {
                Piece::Unit(s, e) | Piece::Invalid(s, e, _) if e <= covers => {
                    Piece::Invalid(s, e, DropReason::Summarized)
                }
                p => p,
            })
            .collect();

        let mut needed = REPLY_PRIMING_TOKENS.saturating_add(*system_tokens);
        for p in &pieces {
            if let Piece::Pinned(i) = p {
                needed = needed.saturating_add(count(*i));
            }
        }
        if needed > self.budget {
            return Err(ContextError::PinnedOverBudget {
                needed,
                budget: self.budget,
            });
        }

        // Keep the newest units while they fit; stop at the first that does not: the units
        // kept are those that start at `from` or later.
        let mut total = needed;
        let mut from = 0;
        for p in pieces.iter().rev() {
            if let Piece::Unit(start, end) = *p {
                let t = (start..end).fold(0usize, |a, i| a.saturating_add(count(i)));
                if total.saturating_add(t) > self.budget {
                    from = end;
                    break;
                }
                total += t;
            }
        }

        let mut dropped = Vec::new();
        let mut kept = Vec::with_capacity(history.len());
        for p in &pieces {
            let (start, end, reason) = match *p {
                Piece::Pinned(i) => {
                    kept.push(i);
                    continue;
                }
                Piece::Unit(s, e) if s >= from => {
                    kept.extend(s..e);
                    continue;
                }
                Piece::Unit(s, e) => (s, e, DropReason::OverBudget),
                Piece::Invalid(s, e, r) => (s, e, r),
            };
            dropped.extend((start..end).map(|index| Dropped {
                index,
                reason,
                tokens: count(index),
            }));
        }

        let mut messages = Vec::with_capacity(kept.len() + 1);
        messages.extend(system.iter().cloned());
        messages.extend(kept.iter().map(|&i| history[i].clone()));
        Ok(BuiltContext {
            messages,
            tokens: total,
            budget: self.budget,
            kept,
            dropped,
        })
    }
}

/// The counter of a builder given none: one estimate shared by all (it holds no state), so
/// that a builder made per request allocates none.
fn estimate() -> Arc<dyn TokenCounter> {
    static ESTIMATE: LazyLock<Arc<dyn TokenCounter>> = LazyLock::new(|| Arc::new(EstimateCounter));
    Arc::clone(&ESTIMATE)
}

/// Splits a history into pinned messages, atomic units and invalid runs, in order.
pub(crate) fn split(history: &[Message]) -> Vec<Piece> {
    let newest_user = history
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }));
    let mut pieces = Vec::with_capacity(history.len());
    let mut i = 0;
    while i < history.len() {
        match &history[i] {
            Message::System { .. } => pieces.push(Piece::Pinned(i)),
            Message::User { .. } if Some(i) == newest_user => pieces.push(Piece::Pinned(i)),
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                let mut open = OpenCalls::new(tool_calls);
                let mut end = i + 1;
                while let Some(Message::Tool { tool_call_id, .. }) = history.get(end) {
                    if !open.answer(tool_call_id) {
                        break;
                    }
                    end += 1;
                }
                pieces.push(if open.is_empty() {
                    Piece::Unit(i, end)
                } else {
                    Piece::Invalid(i, end, DropReason::IncompleteToolRound)
                });
                i = end;
                continue;
            }
            Message::Tool { .. } => {
                pieces.push(Piece::Invalid(i, i + 1, DropReason::OrphanToolResult));
            }
            _ => pieces.push(Piece::Unit(i, i + 1)),
        }
        i += 1;
    }
    pieces
}

/// The calls of one assistant message not answered yet, by id (a repeated id is one call).
/// Up to 64 calls (every real round) it is a bit set over the message's own list and
/// allocates nothing; above, a hash set.
enum OpenCalls<'a> {
    Few(&'a [ToolCall], u64),
    Many(HashSet<&'a str>),
}

impl<'a> OpenCalls<'a> {
    fn new(calls: &'a [ToolCall]) -> Self {
        if calls.len() > 64 {
            return Self::Many(calls.iter().map(|c| c.id.as_str()).collect());
        }
        let mut open = 0u64;
        for (j, c) in calls.iter().enumerate() {
            if !calls[..j].iter().any(|earlier| earlier.id == c.id) {
                open |= 1 << j;
            }
        }
        Self::Few(calls, open)
    }

    /// Marks the call `id` answered; false when no open call has that id.
    fn answer(&mut self, id: &str) -> bool {
        match self {
            Self::Many(set) => set.remove(id),
            Self::Few(calls, open) => {
                let found = calls
                    .iter()
                    .enumerate()
                    .find(|(j, c)| *open & (1 << j) != 0 && c.id == id);
                match found {
                    Some((j, _)) => {
                        *open &= !(1 << j);
                        true
                    }
                    None => false,
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Self::Many(set) => set.is_empty(),
            Self::Few(_, open) => *open == 0,
        }
    }
}
