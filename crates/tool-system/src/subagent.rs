//! An [`Agent`] as a [`Tool`] of another agent ([`Agent::as_tool`]), and the path of sub-agents
//! a call runs under, which bounds their nesting and refuses a sub-agent reached again while it
//! runs.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use toolwright_core::{ToolOutput, ToolSpec};

use crate::nesting;
use crate::{Agent, Tool, ToolContext, ToolError};

/// Default [`AgentTool::max_depth`]: 3 sub-agents nested.
pub const DEFAULT_MAX_DEPTH: usize = 3;

/// An agent that another agent calls as a tool: the caller's model gives it a request
/// (`{"input": "..."}`), it runs with its own instructions, tools, model and round limit, and
/// its answer is the tool's result. Made by [`Agent::as_tool`].
///
/// Each call is a run of its own, in the session `{caller's session}/{name}/{call id}` of the
/// sub-agent's store (the whole exchange is kept there; the caller's history gets the answer
/// only). Its trace nests under the caller's tool call. A sub-agent reached again while it
/// runs (an agent calling itself, directly or through others) or past [`max_depth`] nested
/// sub-agents is refused without running: the caller's model gets an error result saying so.
/// A sub-agent's call that needs approval holds the caller's run too: the held call shows in
/// the top run's [`PendingApproval`](crate::PendingApproval) by its path (`researcher/call_2`),
/// the sub-agent's run is kept inside the caller's, and resuming the top run with the person's
/// decisions resumes the sub-agent there and then the caller. Called outside an agent's run,
/// or by a tool in turn (a code-mode script), there is no run to hold: the held call is not
/// run and the result says so.
///
/// [`max_depth`]: AgentTool::max_depth
#[derive(Debug, Clone)]
pub struct AgentTool {
    agent: Agent,
    name: String,
    description: String,
    max_depth: usize,
}

impl AgentTool {
    /// At most `depth` sub-agents nested under the top run, this one included (default
    /// [`DEFAULT_MAX_DEPTH`]; at least 1).
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth.max(1);
        self
    }

    /// The refusal of a call under `path`, if it must be refused.
    fn refusal(&self, path: &[String]) -> Option<ToolError> {
        let chain = || {
            let mut c = path.to_vec();
            c.push(self.name.clone());
            c.join(" → ")
        };
        if path.contains(&self.name) {
            return Some(ToolError::failed(format!(
                "Refused: sub-agent {} is already running in this chain ({}); an agent cannot call itself. Answer with what you have.",
                self.name,
                chain()
            )));
        }
        if path.len() >= self.max_depth {
            return Some(ToolError::failed(format!(
                "Refused: sub-agents nest at most {} deep ({}). Answer with what you have.",
                self.max_depth,
                chain()
            )));
        }
        None
    }
}

#[async_trait::async_trait]
impl Tool for AgentTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            self.name.clone(),
            self.description.clone(),
            json!({
                "type": "object",
                "properties": {"input": {"type": "string", "description": "What to ask, with everything the agent needs to know"}},
                "required": ["input"]
            }),
        )
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let input = args["input"].as_str().unwrap_or_default();
        let nest = nesting::current().unwrap_or_default();
        if let Some(refused) = self.refusal(&nest.path) {
            tracing::warn!(agent = %self.name, path = ?nest.path, "a sub-agent call was refused");
            return Err(refused);
        }
        let mut inner = nest.path.to_vec();
        inner.push(self.name.clone());
        let session = format!(
            "{}/{}/{}",
            ctx.session_id.as_deref().unwrap_or(""),
            self.name,
            ctx.call_id
        );
        let inner: Arc<[String]> = Arc::from(inner);
        // The sub-agent acts for the person its caller acts for (its calls, its approvals).
        let acting;
        let agent = match &ctx.principal {
            Some(p) if p != self.agent.principal() => {
                acting = self.agent.acting_as(p.as_str());
                &acting
            }
            _ => &self.agent,
        };
        // Called as one of a run's calls (not by a tool in turn): a held run goes up to that
        // run, and comes back decided.
        let exchange = nest.exchange.filter(|x| x.serves(&ctx.call_id));
        let run = match &exchange {
            Some(exchange) => {
                let resumed = exchange.take_resume(&ctx.call_id);
                let held_up = Mutex::new(None);
                let run = agent.run_nested(&session, input, resumed, &held_up);
                let out = nesting::under(inner, run).await;
                let held = held_up.into_inner().unwrap_or_else(PoisonError::into_inner);
                if let (Ok(out), Some(held)) = (&out, held) {
                    exchange.put_held(&ctx.call_id, held);
                    let n = out.pending_approval.as_ref().map_or(0, |p| p.calls.len());
                    return Ok(Value::String(format!(
                        "Sub-agent {} waits for the user's approval of {n} call(s).",
                        self.name
                    ))
                    .into());
                }
                out
            }
            None => nesting::under(inner, agent.run(&session, input)).await,
        };
        match run {
            Ok(out) if out.is_pending() => Err(ToolError::failed(format!(
                "Sub-agent {} wants to run a call that needs a person's approval, which cannot be asked for here; that call was not run. Do it yourself or tell the user.",
                self.name
            ))),
            Ok(out) => Ok(Value::String(out.answer).into()),
            Err(e) => Err(ToolError::failed(format!(
                "Sub-agent {} failed: {e}",
                self.name
            ))),
        }
    }
}

impl Agent {
    /// This agent as a tool of another agent ([`AgentTool`]): `name` and `description` are
    /// what the other agent's model sees.
    ///
    /// ```
    /// # fn demo(researcher: toolwright_tool_system::Agent, model: impl toolwright_core::ChatModel + 'static) -> Result<(), Box<dyn std::error::Error>> {
    /// use toolwright_tool_system::Agent;
    /// let lead = Agent::builder(model)
    ///     .tool(researcher.as_tool("researcher", "Finds facts and cites them"))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn as_tool(&self, name: impl Into<String>, description: impl Into<String>) -> AgentTool {
        AgentTool {
            agent: self.clone(),
            name: name.into(),
            description: description.into(),
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}
