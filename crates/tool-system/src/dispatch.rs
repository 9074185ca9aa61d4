//! The dispatcher (T3, T4): one entry point for every tool call, whatever provides the tool.

use foldhash::{HashMap, HashMapExt};
use futures::FutureExt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use toolwright_core::{
    BlobStore, DEFAULT_MAX_RESULT_BYTES, Part, ToolOutput, ToolSpec, TurnInfo, cap_result as cap,
};
use toolwright_output_control::Validator;
use tracing::Instrument;

use crate::registry::{ToolRegistry, schema_problems};
use crate::{ToolContext, ToolError, ToolErrorKind, ToolProvider};

/// Default time limit of one tool call (000): 30 s.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of media one tool result sends inline (20 MiB, what a provider takes in one
/// request's image or file); media past it is kept in the blob store, or named in a text part.
pub(crate) const MAX_RESULT_MEDIA_BYTES: usize = toolwright_core::MAX_INLINE_MEDIA_BYTES;

/// What [`spill_media`] did with a result's media past the limit.
#[derive(Default)]
struct Spilled {
    /// Parts kept in the blob store, a [`Part::Resource`] in their place.
    kept: usize,
    /// Parts named in a text part instead (no store, or the store refused them), with why.
    named: Vec<String>,
}

/// Keeps a result's media within `limit` bytes in all, in order. A part that would pass it is
/// written to `store` and replaced by a [`Part::Resource`] naming it (URI, media type, size);
/// with no store, or when the store refuses it, by a text part naming it and why.
async fn spill_media(parts: &mut [Part], limit: usize, store: Option<&dyn BlobStore>) -> Spilled {
    let mut used = 0usize;
    let mut spilled = Spilled::default();
    for p in parts.iter_mut() {
        let media = match p {
            Part::Image(m) | Part::Audio(m) | Part::File(m) => m,
            _ => continue,
        };
        let size = media.size();
        if used + size <= limit {
            used += size;
            continue;
        }
        let over = format!("over the {limit}-byte media limit of one tool result");
        let why = match (store, media.decoded()) {
            (None, _) => {
                format!("{over}; the agent has no blob store to keep it (AgentBuilder::blob_store)")
            }
            (Some(_), None) => format!("{over}, and its base64 is invalid"),
            (Some(store), Some(bytes)) => match store.put(&bytes, &media.media_type).await {
                Ok(mut r) => {
                    r.name = media.name.clone();
                    *p = Part::Resource(r);
                    spilled.kept += 1;
                    continue;
                }
                Err(e) => format!("{over}, and the blob store could not keep it: {e}"),
            },
        };
        *p = Part::text(format!("{} ({why})", p.placeholder()));
        spilled.named.push(why);
    }
    spilled
}

/// The result of one call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// The text given to the model: the tool's JSON result, or
    /// `{"success": false, "error": ...}` on failure; capped in size.
    pub content: String,
    /// `None` on success, else why the call failed.
    pub error: Option<ToolErrorKind>,
    /// Whether `content` was cut to the size cap.
    pub truncated: bool,
    /// The turn's answer, when the tool said this result is it
    /// ([`ToolProvider::final_answer`]); capped like `content`.
    pub answer: Option<String>,
    /// Images, audio or files the tool returned after its text ([`ToolOutput::parts`]).
    pub parts: Vec<Part>,
}

impl ToolOutcome {
    /// Whether the call succeeded.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

struct Route {
    provider: usize,
    spec: ToolSpec,
    /// Compiled at the tool's first call, not at listing: an agent over hundreds of MCP tools
    /// pays only for the schemas of the tools it calls. `None` when the schema does not
    /// compile (the tool then runs unchecked; logged).
    validator: std::sync::OnceLock<Option<Validator>>,
}

impl Route {
    fn validator(&self) -> Option<&Validator> {
        self.validator.get_or_init(|| compile(&self.spec)).as_ref()
    }
}

/// Routes calls to [`ToolProvider`]s (built-ins, skills, MCP) with schema validation, a
/// per-call time limit, panic containment and a result size cap. Failures become results
/// the model can act on; operator detail goes to `tracing` only.
///
/// ```
/// use std::sync::Arc;
/// use toolwright_tool_system::{Dispatcher, FnTool, ToolRegistry};
/// use toolwright_core::{ToolContext};
/// use serde_json::json;
/// let mut registry = ToolRegistry::new();
/// registry.register(FnTool::new("add", "Add two numbers",
///     json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
///     |x, _| async move { Ok(json!(x["a"].as_f64().unwrap_or(0.0) + x["b"].as_f64().unwrap_or(0.0))) }))?;
/// let dispatcher = Dispatcher::new().with_provider(Arc::new(registry));
/// # let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
/// rt.block_on(async {
///     let ok = dispatcher.dispatch("add", json!({"a": 1, "b": 2}), ToolContext::new("c1")).await;
///     assert_eq!(ok.content, "3.0");
///     let missing = dispatcher.dispatch("nope", json!({}), ToolContext::new("c2")).await;
///     assert_eq!(missing.content, r#"{"success":false,"error":"Tool not found: nope"}"#);
///     let invalid = dispatcher.dispatch("add", json!({"a": "x"}), ToolContext::new("c3")).await;
///     assert!(!invalid.is_ok());
/// });
/// # Ok::<(), toolwright_tool_system::RegistryError>(())
/// ```
pub struct Dispatcher {
    providers: Vec<Arc<dyn ToolProvider>>,
    routes: RwLock<Arc<HashMap<String, Arc<Route>>>>,
    /// Each provider's [`ToolProvider::list_revision`] when the table was last made from their
    /// lists (empty before the first time).
    revisions: RwLock<Vec<Option<u64>>>,
    default_timeout: Duration,
    max_result_bytes: usize,
    /// Handed to every call whose context has none ([`Dispatcher::with_approval_gate`]).
    approval_gate: Option<toolwright_core::ApprovalGate>,
    /// Where media past the inline limit is kept ([`Dispatcher::with_blob_store`]).
    blob_store: Option<Arc<dyn BlobStore>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field(
                "providers",
                &self
                    .providers
                    .iter()
                    .map(|p| p.provider_name())
                    .collect::<Vec<_>>(),
            )
            .field("default_timeout", &self.default_timeout)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("blob_store", &self.blob_store.is_some())
            .finish()
    }
}

impl Default for Dispatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl Dispatcher {
    /// A dispatcher with no providers, a 30 s default time limit and a 64 KiB result cap.
    pub fn new() -> Self {
        Self {
            providers: Vec::new(),
            routes: RwLock::new(Arc::new(HashMap::new())),
            revisions: RwLock::new(Vec::new()),
            default_timeout: DEFAULT_TOOL_TIMEOUT,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            approval_gate: None,
            blob_store: None,
        }
    }

    /// Where a result's media past the inline limit (20 MiB in all per result) is kept: each
    /// such part is written to `store` and the model is given a [`Part::Resource`] with its
    /// URI, media type and size instead of the bytes. Without a store such media is named in
    /// a text part and its bytes are dropped. [`crate::AgentBuilder::blob_store`] sets it.
    pub fn with_blob_store(mut self, store: Arc<dyn BlobStore>) -> Self {
        self.blob_store = Some(store);
        self
    }

    /// The approval rules of the agent this dispatcher runs calls for: every call whose
    /// [`ToolContext`] carries no gate gets this one, so that a tool which calls other tools
    /// (code mode) refuses what the agent would hold. [`crate::AgentBuilder::build`] sets it
    /// from the agent's policy and its tools' own `needs_approval`.
    pub fn with_approval_gate(mut self, gate: toolwright_core::ApprovalGate) -> Self {
        self.approval_gate = Some(gate);
        self
    }

    /// Whether any provider says a call of `name` with `args` needs approval (routing aside:
    /// what an approval gate asks).
    pub(crate) fn providers_need_approval(&self) -> impl Fn(&str, &Value) -> bool + use<> {
        let providers = self.providers.clone();
        move |name, args| providers.iter().any(|p| p.needs_approval(name, args))
    }

    /// A dispatcher over one registry of built-in tools.
    pub fn from_registry(registry: ToolRegistry) -> Self {
        Self::new().with_provider(Arc::new(registry))
    }

    /// Adds a provider. When two providers have a tool of the same name, the first added wins.
    pub fn with_provider(mut self, provider: Arc<dyn ToolProvider>) -> Self {
        self.providers.push(provider);
        self
    }

    /// The time limit for tools that set none.
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// The most bytes of a result given to the model (at least 256).
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes.max(256);
        self
    }

    /// The blob store media past the inline limit is kept in ([`with_blob_store`](Self::with_blob_store)),
    /// for those who serve it back (the chat panel).
    pub fn blob_store(&self) -> Option<&Arc<dyn BlobStore>> {
        self.blob_store.as_ref()
    }

    /// The time limit for tools that set none.
    pub fn default_timeout(&self) -> Duration {
        self.default_timeout
    }

    /// Every tool of every provider (first provider wins on a name clash), refreshing the
    /// routing table. Schemas are compiled at a tool's first call and reused while they are unchanged.
    pub async fn specs(&self) -> Vec<ToolSpec> {
        self.refresh_listing(true).await
    }

    /// Refreshes the routing table (every listed tool routes, advertised or not) and gives
    /// nothing back: what a run does before its first round.
    pub(crate) async fn refresh(&self) {
        if self.lists_unchanged() {
            return;
        }
        self.refresh_listing(false).await;
    }

    /// Whether every provider says, by its revision, that its list is the one the table was
    /// made from.
    fn lists_unchanged(&self) -> bool {
        let known = match self.revisions.read() {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        };
        known.len() == self.providers.len()
            && self
                .providers
                .iter()
                .zip(known.iter())
                .all(|(p, k)| k.is_some() && p.list_revision() == *k)
    }

    /// The work of [`specs`](Self::specs); the list is collected only when `want`ed or when
    /// the table is rebuilt.
    async fn refresh_listing(&self, want: bool) -> Vec<ToolSpec> {
        // Read before listing: a provider that changes meanwhile shows a newer revision next time.
        let revisions: Vec<Option<u64>> =
            self.providers.iter().map(|p| p.list_revision()).collect();
        let mut lists = Vec::with_capacity(self.providers.len());
        for p in &self.providers {
            lists.push(p.list().await);
        }
        let old = self.table();
        // The usual case: the same tools as last time. The table stays as it is (no new map,
        // no keys copied); it is rebuilt only when a list changed.
        let unchanged = {
            let mut seen = 0;
            lists.iter().enumerate().all(|(provider, list)| {
                list.iter().all(|spec| {
                    seen += 1;
                    old.get(&*spec.name)
                        .is_some_and(|r| r.provider == provider && r.spec == *spec)
                })
            }) && seen == old.len()
        };
        if unchanged {
            self.set_revisions(revisions);
            return if want {
                lists.into_iter().flatten().collect()
            } else {
                Vec::new()
            };
        }
        let mut table: HashMap<String, Arc<Route>> = HashMap::new();
        let mut specs = Vec::new();
        for (provider, list) in lists.into_iter().enumerate() {
            for spec in list {
                if table.contains_key(&*spec.name) {
                    tracing::warn!(tool = %spec.name, provider = self.providers[provider].provider_name(),
                        "tool name already provided by an earlier provider; this one is hidden");
                    continue;
                }
                let route = match old.get(&*spec.name) {
                    Some(r) if r.provider == provider && r.spec == spec => Arc::clone(r),
                    _ => Arc::new(Route {
                        provider,
                        validator: std::sync::OnceLock::new(),
                        spec: spec.clone(),
                    }),
                };
                specs.push(spec);
                table.insert(route.spec.name.to_string(), route);
            }
        }
        if let Ok(mut w) = self.routes.write() {
            *w = Arc::new(table);
        }
        self.set_revisions(revisions);
        specs
    }

    fn set_revisions(&self, revisions: Vec<Option<u64>>) {
        match self.revisions.write() {
            Ok(mut w) => *w = revisions,
            Err(p) => *p.into_inner() = revisions,
        }
    }

    /// The tools to show the model in one request of `turn`: each provider's
    /// [`ToolProvider::advertised`] list, first provider winning on a name clash. Calls route
    /// by [`Dispatcher::specs`], so a tool that is listed but not advertised still runs.
    pub async fn advertised(&self, turn: &TurnInfo) -> Vec<ToolSpec> {
        if let [only] = self.providers.as_slice() {
            return only.advertised(turn).await;
        }
        let mut specs: Vec<ToolSpec> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for p in &self.providers {
            for spec in p.advertised(turn).await {
                // Linear in the tool count: providers may show hundreds of tools.
                if seen.insert(spec.name.clone()) {
                    specs.push(spec);
                }
            }
        }
        specs
    }

    /// Whether every provider shows the same tools in every round of a turn
    /// ([`ToolProvider::advertises_the_same_every_round`]): a run then asks once.
    pub(crate) fn advertises_the_same_every_round(&self) -> bool {
        self.providers
            .iter()
            .all(|p| p.advertises_the_same_every_round())
    }

    /// Whether the tool that a call to `name` routes to declared itself idempotent.
    pub fn is_idempotent(&self, name: &str) -> bool {
        self.table()
            .get(name)
            .is_some_and(|r| self.providers[r.provider].idempotent(name))
    }

    /// Whether a call to `name` with `args` needs a person's approval
    /// ([`ToolProvider::needs_approval`] of the provider it routes to). A name no provider lists
    /// is asked of every provider (any of them may still run it): fail closed.
    pub fn needs_approval(&self, name: &str, args: &Value) -> bool {
        match self.table().get(name) {
            Some(r) => self.providers[r.provider].needs_approval(name, args),
            None => self.providers.iter().any(|p| p.needs_approval(name, args)),
        }
    }

    fn table(&self) -> Arc<HashMap<String, Arc<Route>>> {
        match self.routes.read() {
            Ok(r) => Arc::clone(&r),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    async fn route(&self, name: &str) -> Option<Arc<Route>> {
        if let Some(r) = self.table().get(name) {
            return Some(Arc::clone(r));
        }
        // Not seen yet (or the tool list changed): refresh once.
        self.specs().await;
        self.table().get(name).cloned()
    }

    /// Runs one call: route, validate, run under the time limit (in a task of its own on a
    /// multi-thread runtime, in place on a current-thread one), contain a panic, cap the result.
    /// Never fails: every failure is a result for the model.
    pub async fn dispatch(&self, name: &str, args: Value, ctx: ToolContext) -> ToolOutcome {
        self.dispatch_under(None, name, args, ctx).await
    }

    /// [`dispatch`](Self::dispatch), the call's span a child of `parent` (the loop's run span).
    pub(crate) async fn dispatch_under(
        &self,
        parent: Option<&tracing::Span>,
        name: &str,
        args: Value,
        mut ctx: ToolContext,
    ) -> ToolOutcome {
        if ctx.approval_gate.is_none() {
            ctx.approval_gate.clone_from(&self.approval_gate);
        }
        let span = crate::trace::tool_span(parent, name, &ctx.call_id, &args);
        // The span is entered where something in it runs or logs: the tool's call (an MCP
        // request made there is its child) and the warnings below. Not around the routing and
        // the wait: entering an enabled span costs a registry lookup each way, every poll.
        let result = self.try_dispatch(name, args, ctx, &span).await;
        let outcome = match result {
            Ok(ToolOutput {
                value, mut parts, ..
            }) => {
                let spilled = spill_media(
                    &mut parts,
                    MAX_RESULT_MEDIA_BYTES,
                    self.blob_store.as_deref(),
                )
                .await;
                if spilled.kept > 0 || !spilled.named.is_empty() {
                    let _in_span = span.enter();
                    if spilled.kept > 0 {
                        tracing::info!(
                            tool = name,
                            parts = spilled.kept,
                            cap = MAX_RESULT_MEDIA_BYTES,
                            "tool result media over the cap kept in the blob store"
                        );
                    }
                    for why in &spilled.named {
                        tracing::warn!(tool = name, why = %why,
                            "tool result media over the cap named instead of sent");
                    }
                }
                let answer = self.table().get(name).and_then(|r| {
                    self.providers[r.provider]
                        .final_answer(name, &value)
                        .map(|a| cap(a, self.max_result_bytes).0)
                });
                let text = match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let (content, truncated) = cap(text, self.max_result_bytes);
                if truncated {
                    let _in_span = span.enter();
                    tracing::warn!(
                        tool = name,
                        cap = self.max_result_bytes,
                        "tool result truncated"
                    );
                }
                ToolOutcome {
                    content,
                    error: None,
                    truncated,
                    answer,
                    parts,
                }
            }
            Err(e) => {
                let _in_span = span.enter();
                tracing::warn!(tool = name, kind = ?e.kind, message = %e.message,
                    detail = e.detail.as_deref().unwrap_or(""), "tool call failed");
                let (content, truncated) =
                    cap(e.to_model_json().to_string(), self.max_result_bytes);
                ToolOutcome {
                    content,
                    error: Some(e.kind),
                    truncated,
                    answer: None,
                    parts: Vec::new(),
                }
            }
        };
        crate::trace::tool_done(&span, outcome.error, &outcome.content);
        outcome
    }

    async fn try_dispatch(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
        span: &tracing::Span,
    ) -> Result<ToolOutput, ToolError> {
        let Some(route) = self.route(name).await else {
            return self
                .call_unlisted(name, args, ctx)
                .instrument(span.clone())
                .await;
        };
        let provider = Arc::clone(&self.providers[route.provider]);
        if let Some(v) = route.validator() {
            v.validate(&args)
                .map_err(|e| provider.invalid_arguments(name, &schema_problems(&e)))?;
        }
        let timeout = provider.timeout(name).unwrap_or(self.default_timeout);
        if !own_task() {
            // A current-thread runtime: a task of its own would protect nothing (a tool that
            // blocks its thread blocks the only one either way) and costs a spawn, a schedule
            // and a join per call. The call runs in place.
            let call = async { provider.call(name, args, ctx).await };
            return in_place(name, timeout, crate::trace::in_span(span, call)).await;
        }
        let tool_name = name.to_owned();
        // Aborted when this future is dropped (the loop was cancelled) or the time is up.
        // The task carries the tool call's span: an MCP request made in it is its child.
        // The task also carries where it runs among sub-agents: a sub-agent called in it sees
        // its path, and the run it answers to.
        let nest = crate::nesting::current();
        let mut task = AbortOnDrop(tokio::spawn(
            crate::nesting::within(
                nest,
                async move { provider.call(&tool_name, args, ctx).await },
            )
            .instrument(span.clone()),
        ));
        match tokio::time::timeout(timeout, &mut task.0).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(crashed(name, join.is_panic().then(|| join.into_panic()))),
            Err(_) => {
                task.0.abort();
                Err(ToolError::timeout(name, timeout))
            }
        }
    }
}

impl Dispatcher {
    /// A name no provider lists right now is still offered to each provider in turn: one may
    /// know it (an MCP service that stopped answers "not running", which helps the model more
    /// than "not found"). The first answer other than NotFound wins; with none, the 000 error.
    async fn call_unlisted(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        for provider in &self.providers {
            let timeout = provider.timeout(name).unwrap_or(self.default_timeout);
            let call = async { provider.call(name, args.clone(), ctx.clone()).await };
            match in_place(name, timeout, call).await {
                Err(e) if e.kind == ToolErrorKind::NotFound => continue,
                result => return result,
            }
        }
        Err(ToolError::not_found(name))
    }
}

/// Runs a call in this task under `timeout`: a panic is a crashed result (also one raised
/// while the call makes its future, when `call` is an `async` block that makes it), and a call
/// past its time is dropped, which cancels it.
async fn in_place(
    name: &str,
    timeout: Duration,
    call: impl std::future::Future<Output = Result<ToolOutput, ToolError>>,
) -> Result<ToolOutput, ToolError> {
    match tokio::time::timeout(timeout, std::panic::AssertUnwindSafe(call).catch_unwind()).await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => Err(crashed(name, Some(panic))),
        Err(_) => Err(ToolError::timeout(name, timeout)),
    }
}

/// The error of a call that panicked (or whose task was cancelled, `None`). The panic text is
/// the operator's (it may hold paths, data, secrets); the model gets a plain sentence it can
/// act on.
fn crashed(name: &str, panic: Option<Box<dyn std::any::Any + Send>>) -> ToolError {
    let detail = match panic {
        Some(p) => format!("panicked: {}", panic_text(p)),
        None => "the task was cancelled".to_owned(),
    };
    ToolError::new(
        ToolErrorKind::Crashed,
        format!(
            "Tool {name} crashed and was stopped; try another approach or tell the user it failed."
        ),
    )
    .with_detail(detail)
}

/// Whether a tool call runs in a task of its own: on a multi-thread runtime, so that a tool
/// that blocks its thread (a synchronous sleep, a blocking client) is still timed out and the
/// loop goes on on another thread.
fn own_task() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread)
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<ToolOutput, ToolError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn compile(spec: &ToolSpec) -> Option<Validator> {
    match Validator::new(&spec.parameters) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(tool = %spec.name, error = %e, "tool schema does not compile; its arguments are not checked");
            None
        }
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "the tool panicked".to_owned()
    }
}

#[cfg(test)]
mod tests;
