//! A call held for a person inside a sub-agent (an agent called as a tool) or inside an agent
//! the conversation was handed to: it surfaces in the top run's pending approval by its path,
//! the top run holds with it, and the person's decision given to the top run resumes the
//! sub-agent there and then the caller.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};

use common::scripted::{Scripted, call, text};
use serde_json::{Value, json};
use toolwright_context_engine::{MemoryStore, SessionStore, StateChange};
use toolwright_core::{Message, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, async_trait};
use toolwright_tool_system::{
    Agent, ApprovalError, ApprovalKey, DecisionRecord, FnTool, LoopError, LoopOutput,
    PendingApproval,
};

const SLOT: &str = "tool-system.approval";

type Deleted = Arc<Mutex<Vec<String>>>;

fn key() -> ApprovalKey {
    ApprovalKey::new([9u8; 32]).unwrap()
}

fn delete_file(deleted: Deleted) -> FnTool {
    FnTool::new(
        "delete_file",
        "Delete a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        move |args, _| {
            let path = args["path"].as_str().unwrap_or("").to_owned();
            deleted.lock().unwrap().push(path.clone());
            async move { Ok(json!({"deleted": path})) }
        },
    )
}

fn pending(out: &LoopOutput) -> PendingApproval {
    out.pending_approval
        .clone()
        .unwrap_or_else(|| panic!("the run should wait for approval: {out:?}"))
}

struct Nested {
    lead: Agent,
    lead_model: Scripted,
    inner_model: Scripted,
    inner_store: Arc<MemoryStore>,
    store: Arc<MemoryStore>,
    deleted: Deleted,
}

/// A lead agent whose tool `researcher` is a sub-agent that deletes a file (held for
/// approval) and then answers.
fn nested(inner_replies: Vec<toolwright_core::ChatResponse>) -> Nested {
    let deleted = Deleted::default();
    let inner_model = Scripted::new(inner_replies);
    let inner_store = Arc::new(MemoryStore::new());
    let researcher = Agent::builder(inner_model.clone())
        .tool(delete_file(deleted.clone()))
        .require_approval("delete_file")
        .store(inner_store.clone())
        .build()
        .unwrap();
    let lead_model = Scripted::new(vec![
        call("c1", "researcher", json!({"input": "Clean up /tmp/a"})),
        text("The researcher cleaned up."),
    ]);
    let store = Arc::new(MemoryStore::new());
    let lead = Agent::builder(lead_model.clone())
        .tool(researcher.as_tool("researcher", "Cleans up"))
        .approval_key(key())
        .store(store.clone())
        .build()
        .unwrap();
    Nested {
        lead,
        lead_model,
        inner_model,
        inner_store,
        store,
        deleted,
    }
}

fn cleanup_script() -> Vec<toolwright_core::ChatResponse> {
    vec![
        call("r1", "delete_file", json!({"path": "/tmp/a"})),
        text("Deleted /tmp/a."),
    ]
}

async fn slot(store: &dyn SessionStore, session: &str) -> Option<String> {
    store.get_state(session, SLOT).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_held_call_surfaces_in_the_top_run_and_is_resumed_through_it() {
    let n = nested(cleanup_script());
    let out = n.lead.run("s", "Tidy up").await.unwrap();
    let held = pending(&out);
    assert_eq!(held.calls.len(), 1);
    assert_eq!(held.calls[0].id, "researcher/r1");
    assert_eq!(held.calls[0].name, "delete_file");
    assert_eq!(held.calls[0].arguments, json!({"path": "/tmp/a"}));
    assert!(n.deleted.lock().unwrap().is_empty(), "nothing ran yet");
    assert_eq!(
        n.lead_model.requests().len(),
        1,
        "the lead holds, not re-asked"
    );
    // the whole run, the sub-agent's inside it, is kept in the top session only
    assert!(slot(&*n.store, "s").await.is_some());
    assert!(slot(&*n.inner_store, "s/researcher/c1").await.is_none());
    assert_eq!(
        n.lead.pending_approval("s").await.unwrap().unwrap().calls[0].id,
        "researcher/r1"
    );

    // the decision goes to the top run, on another agent over the same store (another worker)
    let again = nested(Vec::new());
    let worker2 = Agent::builder(n.lead_model.clone())
        .tool(
            Agent::builder(n.inner_model.clone())
                .tool(delete_file(n.deleted.clone()))
                .require_approval("delete_file")
                .store(n.inner_store.clone())
                .build()
                .unwrap()
                .as_tool("researcher", "Cleans up"),
        )
        .approval_key(key())
        .store(n.store.clone())
        .build()
        .unwrap();
    drop(again);
    let out = worker2
        .resume("s", &[held.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "The researcher cleaned up.");
    assert_eq!(*n.deleted.lock().unwrap(), ["/tmp/a"]);
    assert_eq!(
        out.iterations, 2,
        "the lead's two model calls, before and after the hold"
    );
    // the sub-agent went on with its run: its second request has the delete's result
    let inner = n.inner_model.requests();
    assert_eq!(inner.len(), 2);
    assert!(format!("{:?}", inner[1].messages.last()).contains("deleted"));
    // the lead's model read the sub-agent's answer
    let lead = n.lead_model.requests();
    assert!(format!("{:?}", lead[1].messages.last()).contains("Deleted /tmp/a."));
    // both sessions are whole rounds; the slot is cleared; the decision is on record by path
    let top = n.store.load_or_create("s").await.unwrap().messages;
    assert_eq!(top.len(), 4, "{top:?}");
    let sub = n
        .inner_store
        .load_or_create("s/researcher/c1")
        .await
        .unwrap()
        .messages;
    assert_eq!(sub.len(), 4, "person, call, result, answer: {sub:?}");
    assert!(matches!(&sub[2], Message::Tool { content, .. } if content.contains("/tmp/a")));
    assert!(slot(&*n.store, "s").await.is_none());
    let log = DecisionRecord::log(&*n.store, "s").await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].call_id, "researcher/r1");
    assert!(log[0].approved);
}

#[tokio::test]
async fn a_declined_call_in_a_sub_agent_is_told_to_it_and_the_caller_goes_on() {
    let n = nested(vec![
        call("r1", "delete_file", json!({"path": "/tmp/a"})),
        text("The user did not want /tmp/a deleted."),
    ]);
    let held = pending(&n.lead.run("s", "Tidy up").await.unwrap());
    let out = n
        .lead
        .resume("s", &[held.calls[0].reject("keep it")])
        .await
        .unwrap();
    assert_eq!(out.answer, "The researcher cleaned up.");
    assert!(n.deleted.lock().unwrap().is_empty());
    let told = format!("{:?}", n.inner_model.requests()[1].messages.last());
    assert!(
        told.contains("declined") && told.contains("keep it"),
        "{told}"
    );
}

#[tokio::test]
async fn a_sub_agent_that_holds_twice_holds_the_top_run_twice() {
    let n = nested(vec![
        call("r1", "delete_file", json!({"path": "/tmp/a"})),
        call("r2", "delete_file", json!({"path": "/tmp/b"})),
        text("Deleted both."),
    ]);
    let first = pending(&n.lead.run("s", "Tidy up").await.unwrap());
    let out = n
        .lead
        .resume("s", &[first.calls[0].approve()])
        .await
        .unwrap();
    let second = pending(&out);
    assert_eq!(second.calls[0].id, "researcher/r2");
    assert_ne!(first.calls[0].token, second.calls[0].token);
    // the first decision's token is for the earlier pending state
    let replay = n.lead.resume("s", &[first.calls[0].approve()]).await;
    assert!(
        matches!(
            replay,
            Err(LoopError::Approval(
                ApprovalError::UnknownCall { .. } | ApprovalError::Stale { .. }
            ))
        ),
        "{replay:?}"
    );
    let out = n
        .lead
        .resume("s", &[second.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "The researcher cleaned up.");
    assert_eq!(*n.deleted.lock().unwrap(), ["/tmp/a", "/tmp/b"]);
    assert_eq!(n.lead_model.requests().len(), 2);
}

#[tokio::test]
async fn a_decision_for_a_nested_call_must_name_its_path_and_carry_its_token() {
    let n = nested(cleanup_script());
    let held = pending(&n.lead.run("s", "Tidy up").await.unwrap());
    let token = held.calls[0].token.clone();
    let bare = toolwright_tool_system::ApprovalDecision::approve("r1", token.clone());
    assert!(matches!(
        n.lead.resume("s", &[bare]).await,
        Err(LoopError::Approval(ApprovalError::UnknownCall { .. }))
    ));
    let mut forged = token.into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
    let forged = toolwright_tool_system::ApprovalDecision::approve(
        "researcher/r1",
        String::from_utf8(forged).unwrap(),
    );
    assert!(matches!(
        n.lead.resume("s", &[forged]).await,
        Err(LoopError::Approval(ApprovalError::BadToken { .. }))
    ));
    assert!(n.deleted.lock().unwrap().is_empty());
    assert_eq!(n.lead.pending_approval("s").await.unwrap(), Some(held));
}

/// Rewrites the stored run of session `s` with `f`, written without its seal (as runs were
/// stored before they were sealed, which is read as pending only).
async fn rewrite(store: &MemoryStore, f: impl Fn(&mut Value)) {
    let raw = slot(store, "s").await.unwrap();
    let sealed: Value = serde_json::from_str(&raw).unwrap();
    let mut v = sealed["stored"].clone();
    f(&mut v);
    let changed = v.to_string();
    let change = StateChange::new(SLOT, Some(&raw), Some(&changed));
    store
        .append_with_state("s", &[], change)
        .await
        .unwrap()
        .unwrap();
}

fn nested_run(v: &mut Value) -> &mut Value {
    v.pointer_mut("/run/round/steps/0/calls/0/state/run")
        .expect("a nested run in the stored value")
}

#[tokio::test]
async fn a_nested_run_from_a_newer_version_is_a_typed_error_and_is_kept() {
    let n = nested(cleanup_script());
    let held = pending(&n.lead.run("s", "Tidy up").await.unwrap());
    rewrite(&n.store, |v| {
        let inner = nested_run(v);
        inner["v"] = json!(99);
        inner["from_the_future"] = json!(true);
    })
    .await;
    let kept = slot(&*n.store, "s").await;
    for r in [
        n.lead
            .resume("s", &[held.calls[0].approve()])
            .await
            .map(|_| ()),
        n.lead.pending_approval("s").await.map(|_| ()),
        n.lead.run("s", "something else").await.map(|_| ()),
    ] {
        assert!(
            matches!(
                r,
                Err(LoopError::Approval(ApprovalError::NewerVersion {
                    found: 99,
                    ..
                }))
            ),
            "{r:?}"
        );
    }
    assert_eq!(slot(&*n.store, "s").await, kept, "kept as it is");
    assert!(n.deleted.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_tampered_nested_run_is_unreadable_and_nothing_of_it_runs() {
    let n = nested(cleanup_script());
    let held = pending(&n.lead.run("s", "Tidy up").await.unwrap());
    rewrite(&n.store, |v| {
        nested_run(v)["round"]["steps"][0]["calls"][0]["state"] = json!({"is": "new"});
    })
    .await;
    let r = n.lead.resume("s", &[held.calls[0].approve()]).await;
    assert!(
        matches!(
            r,
            Err(LoopError::Approval(ApprovalError::Unreadable { .. }))
        ),
        "{r:?}"
    );
    assert!(n.deleted.lock().unwrap().is_empty());
    // a new message closes it: the session stays whole rounds and readable
    let out = n.lead.run("s", "Never mind").await.unwrap();
    assert_eq!(out.answer, "The researcher cleaned up.");
    let top = n.store.load_or_create("s").await.unwrap().messages;
    assert_eq!(top.len(), 3, "the two messages and the answer: {top:?}");
    assert!(slot(&*n.store, "s").await.is_none());
}

#[tokio::test]
async fn a_held_run_in_an_agent_handed_to_is_resumed_through_the_first_agent() {
    let deleted = Deleted::default();
    let billing_model = Scripted::new(vec![
        call("b1", "delete_file", json!({"path": "/tmp/invoice"})),
        text("Billing: the old invoice is gone."),
    ]);
    let billing = Agent::builder(billing_model.clone())
        .tool(delete_file(deleted.clone()))
        .require_approval("delete_file")
        .approval_key(key())
        .build()
        .unwrap();
    let triage_model = Scripted::new(vec![call("h1", "to_billing", json!({}))]);
    let store = Arc::new(MemoryStore::new());
    let triage = Agent::builder(triage_model.clone())
        .handoff(&billing, "to_billing", "Billing questions")
        .approval_key(key())
        .store(store.clone())
        .build()
        .unwrap();
    let held = pending(&triage.run("s", "Drop my old invoice").await.unwrap());
    assert_eq!(held.calls[0].id, "b1");
    let out = triage
        .resume("s", &[held.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "Billing: the old invoice is gone.");
    assert_eq!(*deleted.lock().unwrap(), ["/tmp/invoice"]);
    assert_eq!(
        triage_model.requests().len(),
        1,
        "triage is not asked again"
    );
    assert_eq!(
        billing_model.requests().len(),
        2,
        "billing went on with its run"
    );
    // an agent without that handoff cannot resume it, and the run is kept
    let other = Agent::builder(Scripted::new(Vec::new()))
        .approval_key(key())
        .store(store.clone())
        .build()
        .unwrap();
    let third = Scripted::new(vec![call("h2", "to_billing", json!({}))]);
    let billing_again = Agent::builder(Scripted::new(vec![call(
        "b2",
        "delete_file",
        json!({"path": "/tmp/x"}),
    )]))
    .tool(delete_file(deleted.clone()))
    .require_approval("delete_file")
    .build()
    .unwrap();
    let triage2 = Agent::builder(third)
        .handoff(&billing_again, "to_billing", "Billing questions")
        .approval_key(key())
        .store(store.clone())
        .build()
        .unwrap();
    let held = pending(&triage2.run("s2", "Drop it").await.unwrap());
    let r = other.resume("s2", &[held.calls[0].approve()]).await;
    assert!(
        matches!(r, Err(LoopError::HandoffGone { ref name }) if name == "to_billing"),
        "{r:?}"
    );
    assert_eq!(*deleted.lock().unwrap(), ["/tmp/invoice"]);
}

#[tokio::test]
async fn a_nested_call_flipped_to_approved_in_the_store_breaks_the_seal_and_does_not_run() {
    let n = nested(cleanup_script());
    let held = pending(&n.lead.run("s", "Tidy up").await.unwrap());
    let raw = slot(&*n.store, "s").await.unwrap();
    let flipped = raw.replace(r#"{"is":"held","maybe_ran":false}"#, r#"{"is":"approved"}"#);
    assert_ne!(raw, flipped);
    let change = StateChange::new(SLOT, Some(&raw), Some(&flipped));
    n.store
        .append_with_state("s", &[], change)
        .await
        .unwrap()
        .unwrap();
    let e = n.lead.resume("s", &[held.calls[0].approve()]).await;
    assert!(
        matches!(
            e,
            Err(LoopError::Approval(ApprovalError::SealBroken { .. }))
        ),
        "{e:?}"
    );
    assert!(n.deleted.lock().unwrap().is_empty());
    assert_eq!(
        slot(&*n.store, "s").await.as_deref(),
        Some(flipped.as_str()),
        "kept"
    );

    // written without a seal, the flip counts for nothing: the call is held for the person
    let bare: Value = serde_json::from_str(&flipped).unwrap();
    let bare = bare["stored"].to_string();
    let change = StateChange::new(SLOT, Some(&flipped), Some(&bare));
    n.store
        .append_with_state("s", &[], change)
        .await
        .unwrap()
        .unwrap();
    let again = n.lead.pending_approval("s").await.unwrap().unwrap();
    assert_eq!(again.calls.len(), 1);
    assert_eq!(again.calls[0].id, "researcher/r1");
    assert!(n.deleted.lock().unwrap().is_empty());
    let out = n
        .lead
        .resume("s", &[again.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "The researcher cleaned up.");
    assert_eq!(*n.deleted.lock().unwrap(), ["/tmp/a"]);
}

/// A tool that calls the sub-agent in turn, as a code-mode script does, under a call id of its
/// own.
struct Script(toolwright_tool_system::AgentTool);

#[async_trait]
impl Tool for Script {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new("script", "Runs a script", json!({"type": "object"}))
    }
    async fn call(&self, _args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let mut inner = ToolContext::new(format!("{}.1", ctx.call_id));
        inner.session_id = ctx.session_id.clone();
        self.0
            .call(json!({"input": "Clean up /tmp/a"}), inner)
            .await
    }
}

#[tokio::test]
async fn a_sub_agent_called_by_a_tool_in_turn_does_not_hold_the_run_and_its_call_does_not_run() {
    let deleted = Deleted::default();
    let researcher = Agent::builder(Scripted::new(cleanup_script()))
        .tool(delete_file(deleted.clone()))
        .require_approval("delete_file")
        .build()
        .unwrap();
    let lead_model = Scripted::new(vec![
        call("c1", "script", json!({})),
        text("The script could not clean up."),
    ]);
    let lead = Agent::builder(lead_model.clone())
        .tool(Script(researcher.as_tool("researcher", "Cleans up")))
        .approval_key(key())
        .build()
        .unwrap();
    let out = lead.run("s", "Tidy up").await.unwrap();
    assert!(out.pending_approval.is_none(), "{out:?}");
    assert_eq!(out.answer, "The script could not clean up.");
    assert!(deleted.lock().unwrap().is_empty());
    let told = format!("{:?}", lead_model.requests()[1].messages.last());
    assert!(told.contains("cannot be asked for here"), "{told}");
}

/// In a protocol that runs a response's calls one after another (here the JSON decision
/// protocol reading a response of native calls), a call after a sub-agent's call that holds
/// waits for the person too, as it does after a call held directly: it runs only once the
/// held call is decided, after the sub-agent went on.
#[tokio::test]
async fn in_order_calls_after_a_sub_agent_that_holds_wait_for_the_decision() {
    let deleted = Deleted::default();
    let researcher = Agent::builder(Scripted::new(cleanup_script()))
        .tool(delete_file(deleted.clone()))
        .require_approval("delete_file")
        .build()
        .unwrap();
    let noted = deleted.clone();
    let note = FnTool::new(
        "note",
        "Writes a note",
        json!({"type": "object"}),
        move |_, _| {
            noted.lock().unwrap().push("note".into());
            async { Ok(json!("noted")) }
        },
    );
    let both = toolwright_core::ChatResponse::new(
        "",
        vec![
            toolwright_core::ToolCall::new("c1", "researcher", json!({"input": "Clean up /tmp/a"})),
            toolwright_core::ToolCall::new("c2", "note", json!({})),
        ],
        toolwright_core::FinishReason::ToolCalls,
        None,
    );
    let lead_model = Scripted::new(vec![both, text("Cleaned up and noted.")]);
    let lead = Agent::builder(lead_model.clone())
        .protocol(toolwright_tool_system::ProtocolKind::JsonDecision)
        .tool(researcher.as_tool("researcher", "Cleans up"))
        .tool(note)
        .approval_key(key())
        .build()
        .unwrap();
    let held = pending(&lead.run("s", "Tidy up and note it").await.unwrap());
    assert_eq!(held.calls.len(), 1);
    assert_eq!(held.calls[0].id, "researcher/r1");
    assert!(
        deleted.lock().unwrap().is_empty(),
        "the call after the held sub-agent waits: {:?}",
        deleted.lock().unwrap()
    );
    let out = lead.resume("s", &[held.calls[0].approve()]).await.unwrap();
    assert_eq!(out.answer, "Cleaned up and noted.");
    assert_eq!(*deleted.lock().unwrap(), ["/tmp/a", "note"]);
    let told = format!("{:?}", lead_model.requests()[1].messages);
    assert!(told.contains("noted"), "{told}");
}
