//! [`LoopOptions`]: how a tool loop runs. Its setters are written once, in the list at the
//! bottom of this file, which gives both `LoopOptions::with_x` and `AgentBuilder`'s `x` (the
//! agent module expands the same list for its builder: this module names no agent type).

use std::sync::Arc;
use std::time::Duration;

use toolwright_context_engine::TokenCounter;

use crate::approval::{ApprovalKey, ApprovalPolicy};
use crate::machine::DEFAULT_MAX_ITERATIONS;
use crate::protocol::ProtocolKind;
use crate::turn::TurnSections;

/// Default [`LoopOptions::approval_lease`]: 10 minutes.
pub const DEFAULT_APPROVAL_LEASE: Duration = Duration::from_secs(600);

/// How a loop runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoopOptions {
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
        }
    }
}

impl LoopOptions {
    /// Options with the defaults.
    pub fn new() -> Self {
        Self::default()
    }
}

/// One list of settings; each entry becomes `LoopOptions::$with` (here) and `AgentBuilder::$name`
/// (in `agent.rs`): `loop_settings!(callback)` hands the list to `callback!`.
macro_rules! loop_settings {
    ($callback:ident) => {
        $callback! {
            /// Set the base system prompt (tool descriptions of prompt-based protocols are added as a
            /// section after it).
            system_prompt / with_system_prompt(s: impl Into<String>) => |o| o.system_prompt = s.into();
            /// Set the call protocol (default [`ProtocolKind::Auto`]).
            protocol / with_protocol(p: ProtocolKind) => |o| o.protocol = p;
            /// Add a fixed section to the system prompt.
            section / with_section(name: impl Into<String>, text: impl Into<String>) =>
                |o| o.sections.push((name.into(), text.into()));
            /// Add a hook that computes sections from each turn's user message (C2; mcp-bridge's M3).
            turn_sections / with_turn_sections(hook: Arc<dyn TurnSections>) => |o| o.turn_sections.push(hook);
            /// Set the most rounds of tool calls in one run (default 5, 001).
            max_iterations / with_max_iterations(n: usize) => |o| o.max_iterations = n;
            /// Turn the correction round on or off ([`LoopOptions::corrections`]).
            corrections / with_corrections(on: bool) => |o| o.corrections = on;
            /// Turn `<tool_action>` parsing on or off (tag protocol; default on).
            tool_action_parsing / with_tool_action_parsing(on: bool) => |o| o.tool_action_parsing = on;
            /// Set the token budget of each request; the oldest history is trimmed first.
            context_budget / with_context_budget(tokens: usize) => |o| o.context_budget = Some(tokens);
            /// Set the token counter for the budget.
            counter / with_counter(counter: Arc<dyn TokenCounter>) => |o| o.counter = Some(counter);
            /// Every call to tool `name` needs a person's approval (any provider's tool).
            require_approval / with_required_approval(name: impl Into<String>) =>
                |o| o.approval = std::mem::take(&mut o.approval).always(name);
            /// Calls to tool `name` need a person's approval when `predicate` holds for their arguments.
            require_approval_when / with_required_approval_when(
                name: impl Into<String>,
                predicate: impl Fn(&serde_json::Value) -> bool + Send + Sync + 'static
            ) => |o| o.approval = std::mem::take(&mut o.approval).when(name, predicate);
            /// Set the key that signs approval decisions ([`ApprovalKey`]; the same in every process
            /// that serves these sessions).
            approval_key / with_approval_key(key: ApprovalKey) => |o| o.approval_key = Some(key);
            /// Set how long a request that went on with approved calls may take
            /// ([`LoopOptions::approval_lease`]).
            approval_lease / with_approval_lease(lease: Duration) => |o| o.approval_lease = lease;
            /// Set who acts ([`LoopOptions::principal`]): approval tokens are bound to it and
            /// decisions recorded under it.
            principal / with_principal(principal: impl Into<String>) => |o| o.principal = principal.into();
        }
    };
}
pub(crate) use loop_settings;

/// `LoopOptions::$with` for each entry of `loop_settings!`.
macro_rules! loop_options_setters {
    ($( $(#[$doc:meta])* $name:ident / $with:ident ($($arg:ident : $ty:ty),*) => |$o:ident| $body:expr; )*) => {
        impl LoopOptions {
            $( $(#[$doc])* pub fn $with(mut self, $($arg: $ty),*) -> Self {
                let $o = &mut self;
                $body;
                self
            } )*
        }
    };
}

loop_settings!(loop_options_setters);
