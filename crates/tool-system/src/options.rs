//! [`LoopOptions`]: how a tool loop runs, as [`crate::AgentBuilder`]'s setters leave it.

use std::sync::Arc;
use std::time::Duration;

use toolwright_context_engine::Compactor;
use toolwright_core::{ChatModel, PriceTable, TokenCounter};

use crate::answer::AnswerShape;
use crate::approval::{ApprovalKey, ApprovalPolicy};
use crate::dispatch::Dispatcher;
use crate::hooks::{DEFAULT_HOOK_TIMEOUT, Guardrail, Hook};
use crate::machine::DEFAULT_MAX_ITERATIONS;
use crate::protocols::ProtocolKind;
use crate::turn::TurnSections;

/// Default [`LoopOptions::approval_lease`]: 10 minutes.
pub(crate) const DEFAULT_APPROVAL_LEASE: Duration = Duration::from_secs(600);

/// How a loop runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub(crate) struct LoopOptions {
    /// The base system prompt (tool descriptions of prompt-based protocols are added as a section).
    pub system_prompt: String,
    /// The call protocol (default: [`ProtocolKind::Auto`]).
    pub protocol: ProtocolKind,
    /// The most rounds of tool calls in one run (default 5, T5/001): the response after the
    /// last round that still asks for tools ends the run with its text and a warning.
    pub max_iterations: usize,
    /// An unreadable answer (a broken JSON decision) is sent back once with a request to fix
    /// it (default `false`: it is taken as the plain answer, as 001's fallback says).
    pub corrections: bool,
    /// 000's `enableToolActionParsing` for the tag protocol (default true).
    pub tool_action_parsing: bool,
    /// The request's token budget (default: unlimited); trims the oldest history first.
    pub context_budget: Option<usize>,
    /// Token counter for the budget (default: `toolwright_context_engine::counter_for_model` of the model).
    pub counter: Option<Arc<dyn TokenCounter>>,
    /// Fixed extra sections of the system prompt, `(name, text)`, after the tool section.
    pub sections: Vec<(String, String)>,
    /// Hooks computing sections from each turn's user message (C2; e.g. mcp-bridge's M3).
    pub turn_sections: Vec<Arc<dyn TurnSections>>,
    /// The agent's own approval rules (default none: tools and providers decide).
    pub approval: ApprovalPolicy,
    /// The key that signs approval decisions (default: a random key for this process, with a
    /// warning when first used; see [`ApprovalKey`]).
    pub approval_key: Option<ApprovalKey>,
    /// How long a request that went on with approved calls may take to record their round
    /// (default 10 minutes). A round found still running past it — the process stopped, the
    /// request was dropped — is put to the person again, each call marked as possibly run. Set
    /// it above your slowest round of approved calls.
    pub approval_lease: Duration,
    /// Who acts in this run: an opaque id — a login's subject, a user name — or empty
    /// (the default) for a program with one person. The approval tokens a run hands out are
    /// bound to it, a decision is accepted only from it ([`ApprovalError::OtherPrincipal`]
    /// otherwise), and each decision is recorded under it ([`crate::DecisionRecord`]). Set it
    /// per request ([`crate::Agent::acting_as`]) from what authenticated the request.
    ///
    /// [`ApprovalError::OtherPrincipal`]: crate::ApprovalError::OtherPrincipal
    pub principal: String,
    /// The prices a run's cost is counted at (default: [`PriceTable::builtin`]).
    pub prices: Option<Arc<PriceTable>>,
    /// The shape the final answer must take (set per run by `Agent::run_as`; default none).
    pub answer: Option<AnswerShape>,
    /// Hooks called at each model and tool call, in this order.
    pub hooks: Vec<Arc<dyn Hook>>,
    /// Checks of the person's message, in this order.
    pub input_guardrails: Vec<Arc<dyn Guardrail>>,
    /// Checks of the final answer, in this order.
    pub output_guardrails: Vec<Arc<dyn Guardrail>>,
    /// How long one call of a hook or guardrail may take (default 10 s).
    pub hook_timeout: Duration,
    /// The agents this one can hand the conversation to, by their tool's name.
    pub handoffs: Vec<Arc<Handoff>>,
    /// Summarises older rounds past a token mark instead of only dropping them (default none:
    /// past [`LoopOptions::context_budget`] the oldest history is dropped).
    pub compaction: Option<Compactor>,
}

/// The most handoffs in one turn; a handoff past them is refused (the model answers itself).
pub(crate) const MAX_HANDOFFS: usize = 4;

/// An agent the conversation can be handed to: what its runs need.
#[derive(Clone)]
pub(crate) struct Handoff {
    /// The name of the tool that hands off to it.
    pub name: String,
    pub model: Arc<dyn ChatModel>,
    pub dispatcher: Arc<Dispatcher>,
    pub options: LoopOptions,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Default for LoopOptions {
    fn default() -> Self {
        Self {
            system_prompt: String::new(),
            protocol: ProtocolKind::Auto,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            corrections: false,
            tool_action_parsing: true,
            context_budget: None,
            counter: None,
            sections: Vec::new(),
            turn_sections: Vec::new(),
            approval: ApprovalPolicy::new(),
            approval_key: None,
            approval_lease: DEFAULT_APPROVAL_LEASE,
            principal: String::new(),
            prices: None,
            answer: None,
            hooks: Vec::new(),
            input_guardrails: Vec::new(),
            output_guardrails: Vec::new(),
            hook_timeout: DEFAULT_HOOK_TIMEOUT,
            handoffs: Vec::new(),
            compaction: None,
        }
    }
}
