//! # toolwright-tool-system
//!
//! Tools, the registry, the dispatcher, three call protocols and the [`Agent`] that runs the
//! tool loop.
//!
//! * [`Tool`] / [`FnTool`] (T1): a tool is a name, a description, a JSON Schema and an async
//!   function. [`FnTool::typed`] derives the schema from the argument type (`schemars`), so
//!   schema and deserialization always agree. [`to_openai_tool`] gives the API `tools` entry.
//! * [`ToolRegistry`] (T2): register, get, list, execute; it is the built-in [`ToolProvider`].
//! * [`Dispatcher`] (T3, T4): routes every call through its providers (built-ins, skills,
//!   MCP); unknown name → `{"success": false, "error": "Tool not found: NAME"}`; arguments
//!   validated against the schema first; a time limit (default 30 s) that cancels the call;
//!   panics contained; huge results capped. Failures are results for the model, never errors.
//!   Media past the inline limit is kept in a [`BlobStore`](toolwright_core::BlobStore)
//!   ([`FsBlobStore`], set with [`AgentBuilder::blob_store`]) and the model given its reference.
//! * [`ProtocolKind`]: native function calling (T5), the JSON decision (T6) or `<tool_action>`
//!   tags (T7, T8); a model without function calling switches to the JSON one (T9). A protocol
//!   of one's own implements [`protocol::CallProtocol`].
//! * [`Agent`]: the loop, its decisions in a pure state machine, every round appended to a
//!   session of `toolwright-context-engine`; [`Agent::run`] or, streamed, [`Agent::run_stream`].
//! * Approval of tool calls: a call that needs a person's approval ([`Tool::needs_approval`],
//!   [`ToolProvider::needs_approval`], or the agent's [`ApprovalPolicy`]) is held; the run
//!   returns a [`PendingApproval`] kept in the session store, and [`Agent::resume`] goes on
//!   with the person's [`ApprovalDecision`]s, each bound to its session, call and arguments by
//!   an HMAC token (design: `docs/approval.md`).
//!
//! ```
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, ChatStream, FinishReason, ModelError, ModelInfo, response_stream};
//! use toolwright_tool_system::{Agent, LoopEvent};
//! # struct Hello;
//! # #[async_trait]
//! # impl ChatModel for Hello {
//! #     fn info(&self) -> ModelInfo { ModelInfo::new("hello", true) }
//! #     async fn chat(&self, _: ChatRequest) -> Result<ChatResponse, ModelError> { Ok(ChatResponse::new("Hello!", vec![], FinishReason::Stop, None)) }
//! #     async fn stream(&self, r: ChatRequest) -> Result<ChatStream, ModelError> { Ok(response_stream(self.chat(r).await?)) }
//! # }
//! let agent = Agent::builder(Hello).build()?;
//! let mut events = agent.run_stream("s1", "hi");
//! while let Some(event) = events.next().await {
//!     match event {
//!         LoopEvent::TextDelta(t) => print!("{t}"),
//!         LoopEvent::Finished(out) => assert_eq!(out.answer, "Hello!"),
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! ## Approving tool calls
//!
//! ```
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use toolwright_core::{async_trait, ChatModel, ChatRequest, ChatResponse, FinishReason, Message, ModelError, ModelInfo, ToolCall};
//! use serde_json::json;
//! use toolwright_tool_system::{Agent, ApprovalKey, FnTool};
//! # /// Asks to delete a file; answers once it has the result.
//! # struct Demo;
//! # #[async_trait]
//! # impl ChatModel for Demo {
//! #     fn info(&self) -> ModelInfo { ModelInfo::new("demo", true) }
//! #     async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
//! #         Ok(match req.messages.last() {
//! #             Some(Message::Tool { content, .. }) => ChatResponse::new(format!("Result: {content}"), vec![], FinishReason::Stop, None),
//! #             _ => ChatResponse::new("", vec![ToolCall::new("c1", "delete_file", json!({"path": "/tmp/report.txt"}))], FinishReason::ToolCalls, None),
//! #         })
//! #     }
//! # }
//! # let model = Demo;
//! # let secret = "the same secret of 32+ bytes in every process";
//! let agent = Agent::builder(model)
//!     .tool(FnTool::new("delete_file", "Delete a file",
//!         json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
//!         |args, _| async move { Ok(json!({"deleted": args["path"]})) }))
//!     .require_approval("delete_file") // or .require_approval_when("delete_file", |args| ...)
//!     .approval_key(ApprovalKey::new(secret)?) // or ApprovalKey::from_env()? (TOOL_APPROVAL_KEY)
//!     .build()?;
//!
//! let out = agent.run("s1", "Delete /tmp/report.txt").await?;
//! # assert!(out.pending_approval.is_some());
//! if let Some(pending) = out.pending_approval {
//!     for call in &pending.calls {
//!         println!("{} wants to run {} with {}", call.id, call.name, call.arguments); // show as text
//!     }
//!     // Later, after a restart too (`agent.pending_approval("s1")` shows the same calls again):
//!     let out = agent.resume("s1", &[pending.calls[0].approve()]).await?; // or .reject("not that file")
//!     println!("{}", out.answer);
//! #   assert_eq!(out.answer, r#"Result: {"deleted":"/tmp/report.txt"}"#);
//! }
//! # Ok(()) }
//! ```

mod agent;
mod answer;
mod approval;
mod blob;
mod dispatch;
mod event;
mod execute;
mod hooks;
mod machine;
mod nesting;
mod options;
mod prompt;
mod protocols;
mod registry;
mod run;
mod runner;
mod subagent;
mod trace;
mod turn;
mod typed;
mod typed_stream;

pub use agent::{Agent, AgentBuilder};
pub use answer::TypedOutput;
pub use approval::{
    ApprovalDecision, ApprovalError, ApprovalKey, ApprovalPolicy, DecisionRecord, HeldCall,
    PendingApproval,
};
pub use blob::FsBlobStore;
pub use dispatch::{Dispatcher, ToolOutcome};
pub use event::{LoopError, LoopEvent, LoopOutput};
pub use hooks::{CallVerdict, Flow, Guardrail, Hook, HookContext};
pub use prompt::generate_tool_prompt;
pub use protocols::ProtocolKind;
pub use registry::{RegistryError, ToolRegistry};
pub use runner::LoopStream;
pub use subagent::{AgentTool, DEFAULT_MAX_DEPTH};
pub use turn::TurnSections;
pub use typed::{FnTool, to_openai_tool};
pub use typed_stream::TypedLoopStream;

/// For a call protocol of one's own ([`ProtocolKind::Custom`]): how tools are shown to the
/// model and how its answer is read. The three built in are chosen with [`ProtocolKind`].
pub mod protocol {
    pub use crate::prompt::json_decision_prompt;
    pub use crate::protocols::{
        CallProtocol, CallResult, JsonDecisionProtocol, NativeProtocol, PendingCall, Reading,
        ResponseReader, Shown, Step,
    };
}

pub(crate) use toolwright_core::{Tool, ToolContext, ToolError, ToolErrorKind, ToolProvider};
