//! An agent as another agent's tool: its own model, instructions and tools; refused when it
//! would reach itself or nest too deep; its trace under the caller's tool call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex, OnceLock};

use common::scripted::{Scripted, call, text};
use serde_json::{Value, json};
use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_core::{Message, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, async_trait};
use toolwright_tool_system::{Agent, AgentTool, FnTool};

fn lookup() -> FnTool {
    FnTool::new(
        "lookup",
        "Look a fact up",
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        |args, _| async move {
            Ok(json!({"fact": format!("{} is 42", args["q"].as_str().unwrap_or(""))}))
        },
    )
}

/// The text of the last message of a request.
fn last_text(m: &[Message]) -> String {
    format!("{:?}", m.last().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_answers_with_its_own_model_instructions_tools_and_session() {
    let inner_model = Scripted::new(vec![
        call("r1", "lookup", json!({"q": "the answer"})),
        text("The answer is 42 (looked up)."),
    ]);
    let inner_store = Arc::new(MemoryStore::new());
    let researcher = Agent::builder(inner_model.clone())
        .system_prompt("You are a careful researcher.")
        .tool(lookup())
        .store(inner_store.clone())
        .build()
        .unwrap();
    let lead_model = Scripted::new(vec![
        call("c1", "researcher", json!({"input": "What is the answer?"})),
        text("My researcher says 42."),
    ]);
    let lead = Agent::builder(lead_model.clone())
        .tool(researcher.as_tool("researcher", "Finds facts"))
        .build()
        .unwrap();

    let out = lead.run("s", "What is the answer?").await.unwrap();
    assert_eq!(out.answer, "My researcher says 42.");
    // the lead's model read the sub-agent's answer as the tool's result
    let second = lead_model.requests()[1].messages.clone();
    assert!(
        last_text(&second).contains("The answer is 42 (looked up)."),
        "{second:?}"
    );
    // the sub-agent ran with its own instructions and tools, in a session of its own
    let first = &inner_model.requests()[0];
    assert_eq!(first.tools.len(), 1);
    assert_eq!(first.tools[0].name.as_ref(), "lookup");
    assert!(format!("{:?}", first.messages[0]).contains("careful researcher"));
    let kept = inner_store.load_or_create("s/researcher/c1").await.unwrap();
    assert_eq!(
        kept.messages.len(),
        4,
        "person, call, result, answer: {:?}",
        kept.messages
    );
}

/// A tool filled in after the agent that holds it is built: lets an agent hold itself.
struct Late(Arc<OnceLock<AgentTool>>);

#[async_trait]
impl Tool for Late {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "researcher",
            "Finds facts",
            json!({"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}),
        )
    }
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.0.get().unwrap().call(args, ctx).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_that_calls_itself_is_refused_and_the_run_goes_on() {
    // one model for both levels: top asks itself, the inner run asks itself again (refused),
    // the inner run answers, the top run answers
    let model = Scripted::new(vec![
        call("c1", "researcher", json!({"input": "dig"})),
        call("c2", "researcher", json!({"input": "dig deeper"})),
        text("inner done"),
        text("top done"),
    ]);
    let cell = Arc::new(OnceLock::new());
    let agent = Agent::builder(model.clone())
        .tool(Late(Arc::clone(&cell)))
        .build()
        .unwrap();
    cell.set(agent.as_tool("researcher", "Finds facts"))
        .unwrap();

    let out = agent.run("s", "go").await.unwrap();
    assert_eq!(out.answer, "top done");
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let refused = last_text(&requests[2].messages);
    assert!(
        refused.contains("Refused") && refused.contains("researcher → researcher"),
        "{refused}"
    );
    assert!(last_text(&requests[3].messages).contains("inner done"));
}

#[tokio::test]
async fn sub_agents_past_the_depth_limit_are_refused() {
    let deepest = Agent::builder(Scripted::new(vec![text("never asked")]))
        .build()
        .unwrap();
    let middle_model = Scripted::new(vec![
        call("m1", "deepest", json!({"input": "x"})),
        text("middle done"),
    ]);
    let middle = Agent::builder(middle_model.clone())
        .tool(deepest.as_tool("deepest", "d").max_depth(1))
        .build()
        .unwrap();
    let lead = Agent::builder(Scripted::new(vec![
        call("c1", "middle", json!({"input": "x"})),
        text("lead done"),
    ]))
    .tool(middle.as_tool("middle", "m"))
    .build()
    .unwrap();
    assert_eq!(lead.run("s", "go").await.unwrap().answer, "lead done");
    let refused = last_text(&middle_model.requests()[1].messages);
    assert!(
        refused.contains("at most 1 deep") && refused.contains("middle → deepest"),
        "{refused}"
    );
}

/// Each new span's name and its ancestors' names, innermost first.
#[derive(Clone, Default)]
struct Scopes(Arc<Mutex<Vec<Vec<String>>>>);

impl<S> tracing_subscriber::Layer<S> for Scopes
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let span = ctx.span(id).unwrap();
        let chain = span.scope().map(|s| s.name().to_owned()).collect();
        self.0.lock().unwrap().push(chain);
    }
}

#[tokio::test]
async fn the_sub_agent_run_span_nests_under_the_callers_tool_call() {
    use tracing_subscriber::layer::SubscriberExt;
    let scopes = Scopes::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(scopes.clone()));
    // Another test of this binary, running at once with no subscriber, may have cached its
    // callsites as of no interest to anyone: ask them again now that this one listens.
    tracing::callsite::rebuild_interest_cache();
    let researcher = Agent::builder(Scripted::new(vec![text("42")]))
        .build()
        .unwrap();
    let lead = Agent::builder(Scripted::new(vec![
        call("c1", "researcher", json!({"input": "x"})),
        text("done"),
    ]))
    .tool(researcher.as_tool("researcher", "r"))
    .build()
    .unwrap();
    lead.run("s", "go").await.unwrap();
    let runs: Vec<Vec<String>> = scopes
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c[0] == "invoke_agent")
        .cloned()
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0], vec!["invoke_agent"]);
    assert_eq!(
        runs[1],
        vec!["invoke_agent", "execute_tool", "invoke_agent"]
    );
}
