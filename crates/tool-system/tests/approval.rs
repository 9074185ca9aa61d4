//! tool calls held for a person's approval, over real HTTP (the scripted
//! OpenAI-compatible server), with the memory and SQLite session stores.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_context_engine::{
    MemoryStore, Session, SessionStore, SqliteStore, StateChange, StoreError,
};
use toolwright_core::{Message, Tool, ToolContext, ToolError, ToolProvider, ToolSpec};
use toolwright_tool_system::{
    Agent, ApprovalDecision, ApprovalError, ApprovalKey, DecisionRecord, FnTool, LoopError,
    LoopEvent, PendingApproval, ProtocolKind,
};

const DECLINED_NO_RETRY: &str = "Do not retry it unless the user asks.";

fn key() -> ApprovalKey {
    ApprovalKey::new([42u8; 32]).unwrap()
}

type Deleted = Arc<Mutex<Vec<String>>>;

/// delete_file that records the paths it deleted.
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

struct Setup {
    agent: Agent,
    deleted: Deleted,
    weather: Arc<AtomicUsize>,
}

/// An agent whose `delete_file` needs approval (by the agent's policy: the tool itself does
/// not know) and whose `get_weather` needs none.
fn setup(server: &ScriptedServer, store: Arc<dyn SessionStore>, protocol: ProtocolKind) -> Setup {
    let deleted = Deleted::default();
    let weather_calls = Arc::new(AtomicUsize::new(0));
    let model = match protocol {
        ProtocolKind::Native => model(server),
        _ => model_without_fc(server),
    };
    let agent = Agent::builder(model)
        .tool(delete_file(deleted.clone()))
        .tool(weather(weather_calls.clone()))
        .require_approval("delete_file")
        .approval_key(key())
        .protocol(protocol)
        .store(store)
        .build()
        .unwrap();
    Setup {
        agent,
        deleted,
        weather: weather_calls,
    }
}

fn deleted(s: &Setup) -> Vec<String> {
    s.deleted.lock().unwrap().clone()
}

fn pending(out: &toolwright_tool_system::LoopOutput) -> PendingApproval {
    out.pending_approval
        .clone()
        .unwrap_or_else(|| panic!("the run should wait for approval: {out:?}"))
}

fn approval_error(r: Result<toolwright_tool_system::LoopOutput, LoopError>) -> ApprovalError {
    match r {
        Err(LoopError::Approval(e)) => e,
        other => panic!("expected a refused decision, got {other:?}"),
    }
}

fn declined(reason: &str) -> Value {
    json!({"success": false, "error": format!("The user declined this call: {reason}. {DECLINED_NO_RETRY}")})
}

/// The result the n-th request carries for call `id` (a tool message; for the JSON
/// protocol, the user message `[Tool result for NAME]`, which names no id).
fn result_in_request(server: &ScriptedServer, n: usize, id: &str) -> Value {
    let messages = sent_messages(server, n);
    let tool: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .collect();
    let text = match tool.as_slice() {
        [one] => one["content"].as_str().unwrap().to_owned(),
        [] => {
            let last_user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
            let text = last_user["content"].as_str().unwrap();
            text.strip_prefix("[Tool result for delete_file]\n")
                .unwrap_or_else(|| panic!("no result for {id} in {messages:#?}"))
                .to_owned()
        }
        _ => panic!("call {id} has more than one result: {messages:#?}"),
    };
    serde_json::from_str(&text).unwrap()
}

async fn state(store: &dyn SessionStore) -> Option<String> {
    store.get_state("s", APPROVAL_STATE_KEY).await.unwrap()
}

/// Scripts `delete_file` calls in the protocol's own form.
fn delete_reply(protocol: &ProtocolKind, id: &str, path: &str) -> Reply {
    match protocol {
        ProtocolKind::Native => {
            Reply::tool_call(id, "delete_file", &json!({"path": path}).to_string())
                .with_content("Deleting it.")
        }
        ProtocolKind::JsonDecision => {
            Reply::text(json!({"tool": "delete_file", "arguments": {"path": path}}).to_string())
        }
        _ => Reply::text(format!(
            "Deleting it.<tool_action name=\"delete_file\"><path value=\"{path}\" /></tool_action>"
        )),
    }
}

fn final_reply(protocol: &ProtocolKind, text: &str) -> Reply {
    match protocol {
        ProtocolKind::JsonDecision => Reply::text(json!({"tool": null, "reply": text}).to_string()),
        _ => Reply::text(text),
    }
}

/// Reject one held call, then approve the next: the model gets the decline for the first
/// call's id, the second runs, the history is whole rounds throughout.
async fn reject_then_approve(protocol: ProtocolKind) {
    let server = ScriptedServer::start().await;
    server.push(delete_reply(&protocol, "c1", "/tmp/a"));
    server.push(delete_reply(&protocol, "c2", "/tmp/b"));
    server.push(final_reply(&protocol, "Deleted /tmp/b only."));
    let store = store();
    let s = setup(&server, store.clone(), protocol.clone());

    let out = s.agent.run("s", "clean up").await.unwrap();
    let first = pending(&out);
    // What the person saw with the call (the JSON protocol shows nothing of a call decision).
    let shown = match protocol {
        ProtocolKind::JsonDecision => "",
        _ => "Deleting it.",
    };
    assert_eq!((first.text.as_str(), out.answer.as_str()), (shown, shown));
    assert_eq!(first.calls.len(), 1);
    assert_eq!(first.calls[0].name, "delete_file");
    assert_eq!(first.calls[0].arguments, json!({"path": "/tmp/a"}));
    assert_eq!(server.request_count(), 1);
    assert!(deleted(&s).is_empty(), "nothing runs before the decision");
    // Only whole rounds in the history: the held round lives in the state slot.
    assert_eq!(
        store.load("s").await.unwrap().messages,
        vec![Message::user("clean up")]
    );
    assert!(state(&*store).await.is_some());

    let out = s
        .agent
        .resume("s", &[first.calls[0].reject("not that one")])
        .await
        .unwrap();
    let second = pending(&out);
    assert_eq!(second.calls[0].arguments, json!({"path": "/tmp/b"}));
    assert_eq!(server.request_count(), 2);
    assert_eq!(
        result_in_request(&server, 1, &first.calls[0].id),
        declined("not that one")
    );
    assert!(deleted(&s).is_empty());

    let out = s
        .agent
        .resume("s", &[second.calls[0].approve()])
        .await
        .unwrap();
    assert!(!out.is_pending());
    assert_eq!(out.answer, "Deleted /tmp/b only.");
    assert_eq!(deleted(&s), vec!["/tmp/b"]);
    assert_eq!(
        result_in_request(&server, 2, &second.calls[0].id),
        json!({"deleted": "/tmp/b"})
    );
    assert_eq!(out.iterations, 3);
    assert!(state(&*store).await.is_none());
    assert!(s.agent.pending_approval("s").await.unwrap().is_none());
    checked_session(&*store, "s").await;
}

/// The state slot where a held round waits (what a tampering store would change).
const APPROVAL_STATE_KEY: &str = "tool-system.approval";

#[tokio::test]
async fn approval_reject_then_approve_native() {
    reject_then_approve(ProtocolKind::Native).await;
}

#[tokio::test]
async fn approval_reject_then_approve_json_decision() {
    reject_then_approve(ProtocolKind::JsonDecision).await;
}

#[tokio::test]
async fn approval_reject_then_approve_tag() {
    reject_then_approve(ProtocolKind::Tag).await;
}

#[tokio::test]
async fn approval_approve_runs_the_held_call_and_the_loop_continues() {
    let server = ScriptedServer::start().await;
    server.push(delete_reply(&ProtocolKind::Native, "c1", "/tmp/a"));
    server.push(Reply::text("Deleted /tmp/a."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let out = s.agent.run("s", "delete /tmp/a").await.unwrap();
    assert_eq!(out.answer, "Deleting it.");
    assert_eq!(out.iterations, 1);
    assert_eq!(out.new_messages, vec![Message::user("delete /tmp/a")]);
    let p = pending(&out);
    assert_eq!(p.session_id, "s");
    assert_eq!(p.text, "Deleting it.");
    assert_eq!(p.calls[0].id, "c1");
    // A reloaded page sees the same pending approval, tokens included.
    assert_eq!(
        s.agent.pending_approval("s").await.unwrap(),
        Some(p.clone())
    );

    let out = s.agent.resume("s", &[p.calls[0].approve()]).await.unwrap();
    assert_eq!(out.answer, "Deleted /tmp/a.");
    assert_eq!(out.iterations, 2);
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert_eq!(
        result_in_request(&server, 1, "c1"),
        json!({"deleted": "/tmp/a"})
    );
    // the request carries the assistant call right before its result
    let msgs = sent_messages(&server, 1);
    assert_eq!(msgs[msgs.len() - 2]["tool_calls"][0]["id"], "c1");
    let session = checked_session(&*store, "s").await;
    assert_eq!(session.len(), 4);
    assert_eq!(out.new_messages, session[1..].to_vec());
}

#[tokio::test]
async fn approval_three_parallel_calls_each_get_exactly_one_result_native() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "delete_file", r#"{"path":"/tmp/a"}"#),
        ("c2", "delete_file", r#"{"path":"/tmp/b"}"#),
        ("c3", "get_weather", r#"{"city":"Paris"}"#),
    ]));
    server.push(Reply::text("Deleted /tmp/a; kept /tmp/b; Paris is 22°C."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);

    let out = s
        .agent
        .run("s", "tidy up and check the weather")
        .await
        .unwrap();
    let p = pending(&out);
    let ids: Vec<&str> = p.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2"], "only the gated calls wait");
    // The call that needs no approval ran at once, not held back by the others.
    assert_eq!(s.weather.load(Ordering::SeqCst), 1);
    assert!(deleted(&s).is_empty());

    // Each held call is decided on its own: one decision leaves the other pending.
    let out = s.agent.resume("s", &[p.calls[0].approve()]).await.unwrap();
    let rest = pending(&out);
    assert_eq!(rest.calls.len(), 1);
    assert_eq!(rest.calls[0].id, "c2");
    assert_eq!(
        rest.calls[0].token, p.calls[1].token,
        "the other token stays valid"
    );
    assert!(
        deleted(&s).is_empty(),
        "approved calls run once all are decided"
    );
    assert_eq!(server.request_count(), 1);
    assert_eq!(
        store.load("s").await.unwrap().messages.len(),
        1,
        "no half round in the history"
    );

    let out = s
        .agent
        .resume("s", &[p.calls[1].reject("keep it")])
        .await
        .unwrap();
    assert_eq!(out.answer, "Deleted /tmp/a; kept /tmp/b; Paris is 22°C.");
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert_eq!(
        s.weather.load(Ordering::SeqCst),
        1,
        "the ungated call ran once"
    );

    // The provider's next request: three results, each call id exactly once, in call order.
    let tools = sent_tool_messages(&server, 1);
    let ids: Vec<&str> = tools
        .iter()
        .map(|t| t["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert_eq!(
        result_in_request(&server, 1, "c1"),
        json!({"deleted": "/tmp/a"})
    );
    assert_eq!(result_in_request(&server, 1, "c2"), declined("keep it"));
    assert_eq!(
        result_in_request(&server, 1, "c3"),
        json!({"temp": 22, "city": "Paris"})
    );
    let session = checked_session(&*store, "s").await;
    assert_eq!(session[1].tool_calls().len(), 3);
}

#[tokio::test]
async fn approval_survives_a_restart_between_the_call_and_the_decision_sqlite() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "delete_file", r#"{"path":"/tmp/a"}"#),
        ("c2", "get_weather", r#"{"city":"Paris"}"#),
    ]));
    server.push(Reply::text("Done."));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");

    let before = {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let s = setup(&server, store, ProtocolKind::Native);
        let out = s
            .agent
            .run("s", "delete /tmp/a, weather in Paris")
            .await
            .unwrap();
        assert_eq!(s.weather.load(Ordering::SeqCst), 1);
        pending(&out)
        // the agent and the store (its connection and worker thread) end here
    };

    // Another process: a new store over the same file, a new agent with the same key.
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    assert_eq!(
        s.agent.pending_approval("s").await.unwrap(),
        Some(before.clone())
    );
    // The decision made on the token handed out before the restart is accepted.
    let out = s
        .agent
        .resume("s", &[before.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "Done.");
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert_eq!(
        s.weather.load(Ordering::SeqCst),
        0,
        "the result from before the restart is kept, not run again"
    );
    assert_eq!(
        result_in_request(&server, 1, "c1"),
        json!({"deleted": "/tmp/a"})
    );
    assert_eq!(
        result_in_request(&server, 1, "c2"),
        json!({"temp": 22, "city": "Paris"})
    );
    checked_session(&*store, "s").await;
    assert!(state(&*store).await.is_none());
}

#[tokio::test]
async fn approval_forged_swapped_and_tampered_decisions_are_refused_and_change_nothing() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "delete_file", r#"{"path":"/tmp/a"}"#),
        ("c2", "delete_file", r#"{"path":"/home"}"#),
    ]));
    server.push(Reply::text("Done."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let p = pending(&s.agent.run("s", "delete").await.unwrap());
    let before = state(&*store).await;
    let c1 = &p.calls[0];

    // A forged token: one hex digit of the MAC changed.
    let mut forged = c1.token.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let e = approval_error(
        s.agent
            .resume("s", &[ApprovalDecision::approve("c1", forged)])
            .await,
    );
    assert_eq!(
        e,
        ApprovalError::BadToken {
            call_id: "c1".into()
        }
    );
    // Made up from nothing.
    let e = approval_error(
        s.agent
            .resume("s", &[ApprovalDecision::approve("c1", "approve-please")])
            .await,
    );
    assert_eq!(
        e,
        ApprovalError::BadToken {
            call_id: "c1".into()
        }
    );
    // The token shown for one call (c1: /tmp/a) used to approve another (c2: /home).
    let e = approval_error(
        s.agent
            .resume("s", &[ApprovalDecision::approve("c2", c1.token.clone())])
            .await,
    );
    assert_eq!(
        e,
        ApprovalError::BadToken {
            call_id: "c2".into()
        }
    );
    // A call that is not held.
    let e = approval_error(
        s.agent
            .resume("s", &[ApprovalDecision::approve("c9", c1.token.clone())])
            .await,
    );
    assert_eq!(
        e,
        ApprovalError::UnknownCall {
            call_id: "c9".into()
        }
    );
    // Another session.
    let e = approval_error(s.agent.resume("other", &[c1.approve()]).await);
    assert_eq!(
        e,
        ApprovalError::NothingPending {
            session: "other".into()
        }
    );
    // One good decision in a batch with a bad one: the whole batch is refused.
    let e = approval_error(
        s.agent
            .resume(
                "s",
                &[
                    c1.approve(),
                    ApprovalDecision::approve("c2", c1.token.clone()),
                ],
            )
            .await,
    );
    assert_eq!(
        e,
        ApprovalError::BadToken {
            call_id: "c2".into()
        }
    );
    let e = approval_error(s.agent.resume("s", &[c1.approve(), c1.reject("no")]).await);
    assert_eq!(
        e,
        ApprovalError::DuplicateDecision {
            call_id: "c1".into()
        }
    );
    assert_eq!(
        approval_error(s.agent.resume("s", &[]).await),
        ApprovalError::NoDecisions
    );
    assert_eq!(
        state(&*store).await,
        before,
        "refused decisions change nothing"
    );

    // The arguments swapped under a valid token (the stored call now deletes /home): the
    // token was made over /tmp/a, so the approval does not carry over.
    let raw = before.clone().unwrap();
    let swapped = raw.replace("/tmp/a", "/etc");
    assert_ne!(raw, swapped);
    store
        .append_with_state(
            "s",
            &[],
            StateChange::new(APPROVAL_STATE_KEY, Some(&raw), Some(&swapped)),
        )
        .await
        .unwrap()
        .unwrap();
    // The stored run is sealed: the swap breaks the seal before any token is looked at.
    let e = approval_error(s.agent.resume("s", &[c1.approve()]).await);
    assert_eq!(
        e,
        ApprovalError::SealBroken {
            session: "s".into()
        }
    );
    assert_eq!(state(&*store).await.as_deref(), Some(swapped.as_str()));
    // Written without a seal (as before runs were sealed), it is read as pending only, and
    // the token made over /tmp/a does not carry over to /etc.
    let bare = unsealed(&swapped);
    store
        .append_with_state(
            "s",
            &[],
            StateChange::new(APPROVAL_STATE_KEY, Some(&swapped), Some(&bare)),
        )
        .await
        .unwrap()
        .unwrap();
    let e = approval_error(s.agent.resume("s", &[c1.approve()]).await);
    assert_eq!(
        e,
        ApprovalError::BadToken {
            call_id: "c1".into()
        }
    );
    assert!(deleted(&s).is_empty());
    assert_eq!(server.request_count(), 1);
}

/// The stored run inside a sealed value, without its seal (as runs were stored before).
fn unsealed(raw: &str) -> String {
    let v: Value = serde_json::from_str(raw).unwrap();
    assert!(v["seal"].is_string(), "a sealed value: {raw}");
    v["stored"].to_string()
}

#[tokio::test]
async fn approval_replayed_and_repeated_decisions_are_refused() {
    let server = ScriptedServer::start().await;
    // The model asks twice with the same call id and arguments (ids repeat across responses
    // on some servers): the first decision must not approve the second call.
    server.push(Reply::tool_calls(&[
        ("c1", "delete_file", r#"{"path":"/tmp/a"}"#),
        ("c2", "delete_file", r#"{"path":"/tmp/b"}"#),
    ]));
    server.push(Reply::tool_call(
        "c1",
        "delete_file",
        r#"{"path":"/tmp/a"}"#,
    ));
    server.push(Reply::text("Done."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let first = pending(&s.agent.run("s", "delete").await.unwrap());

    // A second click on a decided call (another tab, a double click) is refused.
    let out = s
        .agent
        .resume("s", &[first.calls[0].approve()])
        .await
        .unwrap();
    assert!(out.is_pending());
    let e = approval_error(s.agent.resume("s", &[first.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::AlreadyDecided {
            call_id: "c1".into()
        }
    );
    let e = approval_error(
        s.agent
            .resume("s", &[first.calls[0].reject("changed my mind")])
            .await,
    );
    assert_eq!(
        e,
        ApprovalError::AlreadyDecided {
            call_id: "c1".into()
        }
    );

    let out = s
        .agent
        .resume("s", &[first.calls[1].reject("")])
        .await
        .unwrap();
    let second = pending(&out);
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert_eq!(second.calls[0].id, "c1");
    assert_ne!(
        second.calls[0].token, first.calls[0].token,
        "a fresh nonce per pending state"
    );

    // The old decision for c1, replayed against the new pending state, is refused.
    let before = state(&*store).await;
    let e = approval_error(s.agent.resume("s", &[first.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::Stale {
            call_id: "c1".into()
        }
    );
    assert_eq!(state(&*store).await, before);
    assert_eq!(deleted(&s), vec!["/tmp/a"], "the replay ran nothing");

    let out = s
        .agent
        .resume("s", &[second.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "Done.");
    // Replayed once nothing is pending.
    let e = approval_error(s.agent.resume("s", &[second.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::NothingPending {
            session: "s".into()
        }
    );
    assert_eq!(deleted(&s), vec!["/tmp/a", "/tmp/a"]);
    // The reject without a reason reached the model as the plain decline.
    assert_eq!(
        result_in_request(&server, 1, "c2"),
        json!({"success": false, "error": format!("The user declined this call. {DECLINED_NO_RETRY}")})
    );
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn approval_two_tabs_deciding_at_once_run_the_call_once_sqlite() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call(
        "c1",
        "delete_file",
        r#"{"path":"/tmp/a"}"#,
    ));
    server.push(Reply::text("Done."));
    server.push(Reply::text("(a second continuation must not happen)"));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let p = pending(&s.agent.run("s", "delete").await.unwrap());
    let d = [p.calls[0].approve()];
    let (a, b) = tokio::join!(s.agent.resume("s", &d), s.agent.resume("s", &d));
    let (ok, refused) = match (a, b) {
        (Ok(out), Err(e)) | (Err(e), Ok(out)) => (out, e),
        other => panic!("exactly one decision must win: {other:?}"),
    };
    assert_eq!(ok.answer, "Done.");
    assert!(
        matches!(
            refused,
            LoopError::Approval(
                ApprovalError::Running { .. } | ApprovalError::NothingPending { .. }
            )
        ),
        "{refused:?}"
    );
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert_eq!(server.request_count(), 2);
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn approval_a_new_message_closes_the_held_round_without_running_it() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "delete_file", r#"{"path":"/tmp/a"}"#),
        ("c2", "get_weather", r#"{"city":"Paris"}"#),
    ]));
    server.push(Reply::text("OK, I left the file alone."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let p = pending(&s.agent.run("s", "delete /tmp/a").await.unwrap());

    let out = s.agent.run("s", "never mind").await.unwrap();
    assert_eq!(out.answer, "OK, I left the file alone.");
    assert!(deleted(&s).is_empty());
    let closed = result_in_request(&server, 1, "c1");
    assert!(
        closed["error"]
            .as_str()
            .unwrap()
            .starts_with("Not run: the user sent a new message"),
        "{closed}"
    );
    assert_eq!(
        result_in_request(&server, 1, "c2"),
        json!({"temp": 22, "city": "Paris"})
    );
    let session = checked_session(&*store, "s").await;
    assert_eq!(session[4], Message::user("never mind"));
    assert_eq!(
        out.new_messages.len(),
        5,
        "closing round, user message, answer"
    );
    let e = approval_error(s.agent.resume("s", &[p.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::NothingPending {
            session: "s".into()
        }
    );
}

#[tokio::test]
async fn approval_an_unreadable_stored_state_fails_closed() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call(
        "c1",
        "delete_file",
        r#"{"path":"/tmp/a"}"#,
    ));
    server.push(Reply::text("Hello again."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let p = pending(&s.agent.run("s", "delete").await.unwrap());
    let raw = state(&*store).await.unwrap();
    // Damaged: the status says the calls run, while one is undecided.
    let damaged = raw.replace("\"pending\"", "\"running\"");
    let damaged_bare = unsealed(&damaged);
    let bad_values = [
        damaged.as_str(),
        &raw[..raw.len() - 1],
        damaged_bare.as_str(),
        "{\"v\":1",
        "not json at all",
    ];
    for bad in bad_values {
        let now = state(&*store).await.unwrap();
        store
            .append_with_state(
                "s",
                &[],
                StateChange::new(APPROVAL_STATE_KEY, Some(&now), Some(bad)),
            )
            .await
            .unwrap()
            .unwrap();
        // a sealed value changed or cut short breaks its seal; an unsealed one is read, and
        // a run marked running with an undecided call does not hold together
        let sealed = bad.starts_with("{\"seal\"");
        let e = approval_error(s.agent.resume("s", &[p.calls[0].approve()]).await);
        assert!(
            if sealed {
                matches!(e, ApprovalError::SealBroken { .. })
            } else {
                matches!(e, ApprovalError::Unreadable { .. })
            },
            "{bad}: {e:?}"
        );
        let e = s.agent.pending_approval("s").await.unwrap_err();
        assert!(
            matches!(
                e,
                LoopError::Approval(
                    ApprovalError::SealBroken { .. } | ApprovalError::Unreadable { .. }
                )
            ),
            "{e:?}"
        );
        assert!(deleted(&s).is_empty(), "an unreadable state is never run");
    }
    // A new message sets it aside (nothing of it runs, nothing is lost) and the session goes on.
    let out = s.agent.run("s", "hello").await.unwrap();
    assert_eq!(out.answer, "Hello again.");
    assert!(state(&*store).await.is_none());
    let aside = store
        .get_state("s", "tool-system.approval.set-aside")
        .await
        .unwrap();
    assert_eq!(aside.as_deref(), Some("not json at all"));
    assert!(deleted(&s).is_empty());
    checked_session(&*store, "s").await;
}

/// Pays; its provider gates payments above 100 (a provider-level gate, as an MCP service
/// configured "approval per tool" is).
struct Payments {
    paid: Arc<Mutex<Vec<f64>>>,
}

#[toolwright_core::async_trait]
impl ToolProvider for Payments {
    fn provider_name(&self) -> &str {
        "payments"
    }
    async fn list(&self) -> Vec<ToolSpec> {
        vec![ToolSpec::new(
            "pay",
            "Pay an amount",
            json!({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}),
        )]
    }
    async fn call(
        &self,
        name: &str,
        args: Value,
        _: ToolContext,
    ) -> Result<toolwright_core::ToolOutput, ToolError> {
        let result: Result<Value, ToolError> = async {
            match name {
                "pay" => {
                    let amount = args["amount"].as_f64().unwrap_or(0.0);
                    self.paid.lock().unwrap().push(amount);
                    Ok(json!({"paid": amount}))
                }
                other => Err(ToolError::not_found(other)),
            }
        }
        .await;
        result.map(toolwright_core::ToolOutput::from)
    }
    fn needs_approval(&self, name: &str, args: &Value) -> bool {
        name == "pay" && args["amount"].as_f64().is_none_or(|a| a > 100.0)
    }
}

/// Sends mail; the tool itself says every call needs approval.
struct SendMail {
    sent: Arc<AtomicUsize>,
}

#[toolwright_core::async_trait]
impl Tool for SendMail {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "send_mail",
            "Send an email",
            json!({"type": "object", "properties": {"to": {"type": "string"}}}),
        )
    }
    async fn call(
        &self,
        _args: Value,
        _ctx: ToolContext,
    ) -> Result<toolwright_core::ToolOutput, ToolError> {
        let result: Result<Value, ToolError> = async {
            self.sent.fetch_add(1, Ordering::SeqCst);
            Ok(json!("sent"))
        }
        .await;
        result.map(toolwright_core::ToolOutput::from)
    }
    fn needs_approval(&self, _args: &Value) -> bool {
        true
    }
}

#[tokio::test]
async fn approval_gates_from_a_provider_predicate_and_from_the_tool_itself() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("p1", "pay", r#"{"amount": 5}"#),
        ("p2", "pay", r#"{"amount": 500}"#),
        ("m1", "send_mail", r#"{"to": "a@example.com"}"#),
    ]));
    server.push(Reply::text("Paid 5; the rest was declined."));
    let paid = Arc::new(Mutex::new(Vec::new()));
    let sent = Arc::new(AtomicUsize::new(0));
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(SendMail { sent: sent.clone() })
        .provider(Arc::new(Payments { paid: paid.clone() }))
        .approval_key(key())
        .store(store.clone())
        .build()
        .unwrap();
    let p = pending(&agent.run("s", "pay and mail").await.unwrap());
    let held: Vec<(&str, &Value)> = p
        .calls
        .iter()
        .map(|c| (c.id.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        held,
        [
            ("p2", &json!({"amount": 500})),
            ("m1", &json!({"to": "a@example.com"}))
        ]
    );
    assert_eq!(
        *paid.lock().unwrap(),
        vec![5.0],
        "the small payment needs no approval"
    );
    let out = agent
        .resume("s", &[p.calls[0].reject("too much"), p.calls[1].reject("")])
        .await
        .unwrap();
    assert_eq!(out.answer, "Paid 5; the rest was declined.");
    assert_eq!(*paid.lock().unwrap(), vec![5.0]);
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    assert_eq!(result_in_request(&server, 1, "p2"), declined("too much"));
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn approval_predicate_on_arguments_from_the_agent_builder() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "get_weather", r#"{"city":"Paris"}"#),
        ("c2", "get_weather", r#"{"city":"Pyongyang"}"#),
    ]));
    server.push(Reply::text("Paris only."));
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model(&server))
        .tool(weather(calls.clone()))
        .require_approval_when("get_weather", |args| args["city"] != "Paris")
        .approval_key(key())
        .build()
        .unwrap();
    let p = pending(&agent.run("s", "weather").await.unwrap());
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.calls[0].arguments, json!({"city": "Pyongyang"}));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    agent.resume("s", &[p.calls[0].reject("no")]).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn approval_tag_protocol_keeps_later_tags_waiting_until_the_decision() {
    let server = ScriptedServer::start().await;
    // Tags run in order (000): a held first call holds back the second, which needs no
    // approval and runs right after the first once it is decided.
    server.push(Reply::text(
        "<tool_action name=\"delete_file\"><path value=\"/tmp/a\" /></tool_action>\
         <tool_action name=\"get_weather\"><city value=\"Paris\" /></tool_action>",
    ));
    server.push(Reply::text("Done."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Tag);
    let p = pending(&s.agent.run("s", "go").await.unwrap());
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.calls[0].name, "delete_file");
    assert_eq!(s.weather.load(Ordering::SeqCst), 0, "the later tag waits");
    let out = s.agent.resume("s", &[p.calls[0].approve()]).await.unwrap();
    assert_eq!(out.answer, "Done.");
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert_eq!(s.weather.load(Ordering::SeqCst), 1);
    let tools = sent_tool_messages(&server, 1);
    assert_eq!(tools.len(), 2);
    let session = checked_session(&*store, "s").await;
    assert_eq!(session[1].tool_calls().len(), 2);
}

#[tokio::test]
async fn approval_streams_show_the_pending_state_and_the_resumed_calls() {
    let server = ScriptedServer::start().await;
    server.push(delete_reply(&ProtocolKind::Native, "c1", "/tmp/a"));
    server.push(Reply::text("Deleted."));
    let s = setup(&server, store(), ProtocolKind::Native);
    let events: Vec<LoopEvent> = s.agent.run_stream("s", "delete").collect().await;
    let held = events
        .iter()
        .find_map(|e| match e {
            LoopEvent::ApprovalRequired(p) => Some(p.clone()),
            _ => None,
        })
        .expect("an ApprovalRequired event");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, LoopEvent::ToolCallStarted { .. })),
        "a held call is not started"
    );
    match events.last() {
        Some(LoopEvent::Finished(out)) => assert_eq!(out.pending_approval, Some(held.clone())),
        other => panic!("{other:?}"),
    }
    // What a UI sends back, as JSON.
    let wire = serde_json::to_string(&vec![held.calls[0].approve()]).unwrap();
    let decisions: Vec<ApprovalDecision> = serde_json::from_str(&wire).unwrap();
    let events: Vec<LoopEvent> = s.agent.resume_stream("s", decisions).collect().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, LoopEvent::ToolCallStarted { id, .. } if id == "c1"))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, LoopEvent::ToolResult { id, is_error: false, .. } if id == "c1"))
    );
    match events.last() {
        Some(LoopEvent::Finished(out)) => assert_eq!(out.answer, "Deleted."),
        other => panic!("{other:?}"),
    }
}

/// A store that keeps messages but no state slots (the trait's optional part).
#[derive(Default)]
struct NoSlots(MemoryStore);

#[toolwright_core::async_trait]
impl SessionStore for NoSlots {
    async fn create(&self, id: &str) -> Result<(), StoreError> {
        self.0.create(id).await
    }
    async fn load(&self, id: &str) -> Result<Session, StoreError> {
        self.0.load(id).await
    }
    async fn append(&self, id: &str, round: &[Message]) -> Result<u64, StoreError> {
        self.0.append(id, round).await
    }
    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.0.list().await
    }
    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.0.delete(id).await
    }
}

#[tokio::test]
async fn approval_with_a_store_without_state_slots_a_gated_call_is_not_run() {
    let server = ScriptedServer::start().await;
    server.push(delete_reply(&ProtocolKind::Native, "c1", "/tmp/a"));
    server.push(Reply::text("I could not ask you."));
    let store = Arc::new(NoSlots::default());
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let out = s.agent.run("s", "delete").await.unwrap();
    assert!(!out.is_pending());
    assert_eq!(out.answer, "I could not ask you.");
    assert!(deleted(&s).is_empty());
    let r = result_in_request(&server, 1, "c1");
    assert_eq!(r["success"], false);
    assert!(r["error"].as_str().unwrap().starts_with("Not run"), "{r}");
    checked_session(&*store, "s").await;
}

/// A backend that answers with two calls of one id (the HTTP backend merges such calls, so this
/// one speaks through the `ChatModel` seam directly).
struct SameIdTwice;

#[toolwright_core::async_trait]
impl toolwright_core::ChatModel for SameIdTwice {
    fn info(&self) -> toolwright_core::ModelInfo {
        toolwright_core::ModelInfo::new("same-id", true)
    }
    async fn chat(
        &self,
        req: toolwright_core::ChatRequest,
    ) -> Result<toolwright_core::ChatResponse, toolwright_core::ModelError> {
        use toolwright_core::{ChatResponse, FinishReason, ToolCall};
        Ok(match req.messages.last() {
            Some(Message::Tool { .. }) => {
                ChatResponse::new("I could not delete it.", vec![], FinishReason::Stop, None)
            }
            _ => ChatResponse::new(
                "",
                vec![
                    ToolCall::new("dup", "delete_file", json!({"path": "/tmp/a"})),
                    ToolCall::new("dup", "get_weather", json!({"city": "Paris"})),
                ],
                FinishReason::ToolCalls,
                None,
            ),
        })
    }
}

#[tokio::test]
async fn approval_two_calls_with_one_id_fail_closed_and_the_gated_one_is_not_run() {
    // A decision names its call by id: with two calls of one id it could not say which.
    let deleted = Deleted::default();
    let store = store();
    let agent = Agent::builder(SameIdTwice)
        .tool(delete_file(deleted.clone()))
        .tool(weather(Arc::default()))
        .require_approval("delete_file")
        .approval_key(key())
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "delete").await.unwrap();
    assert!(!out.is_pending());
    assert_eq!(out.answer, "I could not delete it.");
    assert!(deleted.lock().unwrap().is_empty());
    let messages = store.load("s").await.unwrap().messages;
    let results: Vec<&Message> = messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .collect();
    assert_eq!(results.len(), 2, "one result per call");
    match results[0] {
        Message::Tool { content, .. } => assert!(content.contains("Not run"), "{content}"),
        other => panic!("{other:?}"),
    }
    assert!(state(&*store).await.is_none());
}

#[tokio::test]
async fn approval_without_a_key_holds_with_a_process_key_and_warns() {
    let logs = Logs::capture();
    let server = ScriptedServer::start().await;
    server.push(delete_reply(&ProtocolKind::Native, "c1", "/tmp/a"));
    server.push(Reply::text("Deleted."));
    let deleted = Deleted::default();
    let agent = Agent::builder(model(&server))
        .tool(delete_file(deleted.clone()))
        .require_approval("delete_file")
        .build()
        .unwrap();
    let p = pending(&agent.run("s", "delete").await.unwrap());
    assert!(
        logs.text().contains("no approval key was set"),
        "{}",
        logs.text()
    );
    // Within the process, the random key verifies; an agent with another key does not.
    let other = Agent::builder(model(&server))
        .tool(delete_file(deleted.clone()))
        .store(agent.store().clone())
        .approval_key(key())
        .build()
        .unwrap();
    let e = approval_error(other.resume("s", &[p.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::SealBroken {
            session: "s".into()
        }
    );
    let out = agent.resume("s", &[p.calls[0].approve()]).await.unwrap();
    assert_eq!(out.answer, "Deleted.");
    assert_eq!(*deleted.lock().unwrap(), vec!["/tmp/a"]);
}

#[tokio::test]
async fn approval_a_round_cut_off_while_running_is_asked_again_after_its_lease() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call(
        "c1",
        "slow_delete",
        r#"{"path":"/tmp/a"}"#,
    ));
    server.push(Reply::text("Deleted."));
    let runs = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Notify::new());
    let tool = {
        let (runs, started) = (runs.clone(), started.clone());
        FnTool::new(
            "slow_delete",
            "Delete a file, slowly",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            move |args, _| {
                let first = runs.fetch_add(1, Ordering::SeqCst) == 0;
                let started = started.clone();
                async move {
                    if first {
                        started.notify_one();
                        std::future::pending::<()>().await; // cut off below
                    }
                    Ok(json!({"deleted": args["path"]}))
                }
            },
        )
    };
    let store = store();
    let agent = Agent::builder(model(&server))
        .tool(tool)
        .require_approval("slow_delete")
        .approval_key(key())
        .approval_lease(std::time::Duration::from_millis(800))
        .store(store.clone())
        .build()
        .unwrap();
    let p = pending(&agent.run("s", "delete").await.unwrap());
    assert!(!p.calls[0].maybe_ran);

    // The request going on with the approval stops while the call runs (a crash, a dropped
    // request): its round stays claimed.
    let approve = [p.calls[0].approve()];
    tokio::select! {
        r = agent.resume("s", &approve) => panic!("the call should hang: {r:?}"),
        () = started.notified() => {}
    }
    // Within the claim's lease it counts as running: not shown, not decided twice.
    assert_eq!(agent.pending_approval("s").await.unwrap(), None);
    let e = approval_error(agent.resume("s", &[p.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::Running {
            session: "s".into()
        }
    );

    // The lease runs out.
    let raw = state(&*store).await.unwrap();
    assert!(raw.contains("\"status\":\"running\""), "{raw}");
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;

    // The person is asked again, told that the call may have run; older tokens are stale.
    let again = agent
        .pending_approval("s")
        .await
        .unwrap()
        .expect("asked again");
    assert_eq!(again.calls.len(), 1);
    assert!(again.calls[0].maybe_ran);
    assert_ne!(again.calls[0].token, p.calls[0].token);
    let e = approval_error(agent.resume("s", &[p.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::Stale {
            call_id: "c1".into()
        }
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let out = agent
        .resume("s", &[again.calls[0].approve()])
        .await
        .unwrap();
    assert_eq!(out.answer, "Deleted.");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    checked_session(&*store, "s").await;
}

/// a token is bound to the principal it was shown to — alice's token presented by
/// bob is refused and changes nothing — and each decision is recorded with who made it, when,
/// and the exact arguments, in the session's store (after the round is gone, and after a
/// restart for SQLite).
async fn who_decided(store: Arc<dyn SessionStore>, reopen: impl Fn() -> Arc<dyn SessionStore>) {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "delete_file", r#"{"path":"/tmp/a"}"#),
        ("c2", "delete_file", r#"{"path":"/tmp/b"}"#),
    ]));
    server.push(Reply::text("Deleted /tmp/a."));
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let alice = s.agent.acting_as("alice");
    let bob = s.agent.acting_as("bob");
    let p = pending(&alice.run("s", "clean up").await.unwrap());
    let before = state(&*store).await;

    // alice's token, copied into bob's account
    let e = approval_error(bob.resume("s", &[p.calls[0].approve()]).await);
    assert_eq!(
        e,
        ApprovalError::OtherPrincipal {
            call_id: "c1".into()
        }
    );
    assert!(
        e.to_string().contains("someone else") && !e.to_string().contains("alice"),
        "says what happened, not whose it was: {e}"
    );
    assert_eq!(state(&*store).await, before, "nothing changed");
    assert!(deleted(&s).is_empty());
    assert!(
        DecisionRecord::log(&**bob.store(), "s")
            .await
            .unwrap()
            .is_empty()
    );
    // the agent without a principal is someone else too
    let e = approval_error(s.agent.resume("s", &[p.calls[0].approve()]).await);
    assert!(matches!(e, ApprovalError::OtherPrincipal { .. }), "{e:?}");
    // what bob is shown has tokens of his own, which do not work for alice
    let bobs = bob.pending_approval("s").await.unwrap().unwrap();
    assert_ne!(bobs.calls[0].token, p.calls[0].token);
    let e = approval_error(alice.resume("s", &[bobs.calls[1].reject("")]).await);
    assert!(matches!(e, ApprovalError::OtherPrincipal { .. }), "{e:?}");

    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // alice declines one, then approves the other: two records, in order
    let out = alice
        .resume("s", &[p.calls[1].reject("keep b")])
        .await
        .unwrap();
    let p2 = pending(&out);
    let log = DecisionRecord::log(&**alice.store(), "s").await.unwrap();
    assert_eq!(
        log.len(),
        1,
        "recorded while the round is still held: {log:?}"
    );
    let out = alice.resume("s", &[p2.calls[0].approve()]).await.unwrap();
    assert_eq!(out.answer, "Deleted /tmp/a.");
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert!(state(&*store).await.is_none(), "the round is recorded");
    let t1 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;

    let store = reopen();
    let log = DecisionRecord::log(&*store, "s").await.unwrap();
    assert_eq!(log.len(), 2, "{log:?}");
    let (declined, approved) = (&log[0], &log[1]);
    assert_eq!(
        (
            declined.call_id.as_str(),
            declined.approved,
            declined.reason.as_deref()
        ),
        ("c2", false, Some("keep b"))
    );
    assert_eq!(
        (
            approved.call_id.as_str(),
            approved.tool.as_str(),
            approved.approved
        ),
        ("c1", "delete_file", true)
    );
    assert_eq!(approved.arguments, json!({"path": "/tmp/a"}));
    assert_eq!(declined.arguments, json!({"path": "/tmp/b"}));
    for r in &log {
        assert_eq!(r.principal, "alice");
        assert!(
            (t0..=t1).contains(&r.at_ms),
            "{} not in {t0}..={t1}",
            r.at_ms
        );
        assert_eq!(r.round, log[0].round, "one pending state");
    }
    assert!(declined.at_ms <= approved.at_ms);
    checked_session(&*store, "s").await;
}

#[tokio::test]
async fn approval_a_token_copied_to_another_principal_is_refused_and_the_record_names_who_decided()
{
    let memory: Arc<dyn SessionStore> = store();
    let again = memory.clone();
    who_decided(memory, move || again.clone()).await;
}

#[tokio::test]
async fn approval_who_decided_is_kept_in_sqlite_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let first: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&path).unwrap());
    who_decided(first, move || Arc::new(SqliteStore::open(&path).unwrap())).await;
}

/// A held round as the first stored format wrote it (a hand-built snapshot: protocol name,
/// the person's message, two counters, the response, the calls), literally.
const FIRST_FORMAT: &str = r#"{"v":1,"status":"pending","nonce":"5f0c3a9e21b47d8e5f0c3a9e21b47d8e","protocol":"native","user_text":"weather, then delete /tmp/a","model_calls":1,"tool_rounds":1,"content":"Deleting it.","answer":"Deleting it.","text":"Deleting it.","native":true,"steps":[{"kind":"text","text":"Deleting it."},{"kind":"calls","calls":[{"id":"c0","name":"get_weather","arguments":{"city":"Paris"},"state":{"is":"done","content":"{\"temp\":22}","is_error":false}},{"id":"c1","name":"delete_file","arguments":{"path":"/tmp/a"},"state":{"is":"held","maybe_ran":false}}]}],"lease_until_ms":null}"#;

#[tokio::test]
async fn approval_a_run_held_in_the_first_stored_format_still_resumes() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("Sunny, and /tmp/a is gone."));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let user = [Message::user("weather, then delete /tmp/a")];
    store.load_or_create("s").await.unwrap();
    let change = StateChange::new(APPROVAL_STATE_KEY, None, Some(FIRST_FORMAT));
    store.append_with_state("s", &user, change).await.unwrap();

    let p = s.agent.pending_approval("s").await.unwrap().expect("held");
    assert_eq!(p.text, "Deleting it.");
    assert_eq!(p.calls.len(), 1);
    assert_eq!(
        (p.calls[0].id.as_str(), &p.calls[0].arguments),
        ("c1", &json!({"path": "/tmp/a"}))
    );
    let out = s.agent.resume("s", &[p.calls[0].approve()]).await.unwrap();
    assert_eq!(out.answer, "Sunny, and /tmp/a is gone.");
    assert_eq!(
        out.iterations, 2,
        "the stored count of model calls carries on"
    );
    assert_eq!(deleted(&s), vec!["/tmp/a"]);
    assert_eq!(
        s.weather.load(Ordering::SeqCst),
        0,
        "a call with its result is not run again"
    );
    assert_eq!(result_in_request(&server, 0, "c0"), json!({"temp": 22}));
    assert_eq!(
        result_in_request(&server, 0, "c1"),
        json!({"deleted": "/tmp/a"})
    );
    assert!(state(&*store).await.is_none());
    let session = checked_session(&*store, "s").await;
    assert_eq!(session.len(), 5, "{session:#?}");
    assert_eq!(DecisionRecord::log(&*store, "s").await.unwrap().len(), 1);
}

#[tokio::test]
async fn approval_a_run_stored_by_a_newer_version_is_a_typed_error_and_is_kept() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("never asked"));
    let store = store();
    let s = setup(&server, store.clone(), ProtocolKind::Native);
    let newer = r#"{"v":3,"status":"pending","nonce":"ab","run":{"something":"new"}}"#;
    let change = StateChange::new(APPROVAL_STATE_KEY, None, Some(newer));
    store.load_or_create("s").await.unwrap();
    store
        .append_with_state("s", &[Message::user("hi")], change)
        .await
        .unwrap();
    let want = ApprovalError::NewerVersion {
        session: "s".into(),
        found: 3,
        supported: 2,
    };
    let decision = ApprovalDecision::approve("c1", "ab.00");
    assert_eq!(approval_error(s.agent.resume("s", &[decision]).await), want);
    assert!(matches!(
        s.agent.pending_approval("s").await,
        Err(LoopError::Approval(e)) if e == want
    ));
    // a new message does not drop what a newer version holds
    assert_eq!(approval_error(s.agent.run("s", "hello").await), want);
    assert_eq!(state(&*store).await.as_deref(), Some(newer));
    assert_eq!(server.request_count(), 0);
}

/// What the loop learned before the stop is not lost across it: a repeat, after the approval,
/// of an idempotent call that ran before the hold is answered from its earlier result (and the
/// model is then asked for an answer) — resumed by another agent over the same store, as a
/// second worker would.
#[tokio::test]
async fn approval_a_resumed_run_still_answers_a_repeat_from_its_earlier_result() {
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_calls(&[
        ("c1", "get_weather", r#"{"city":"Paris"}"#),
        ("c2", "delete_file", r#"{"path":"/tmp/a"}"#),
    ]));
    server.push(Reply::tool_call("c3", "get_weather", r#"{"city":"Paris"}"#));
    server.push(Reply::text("Sunny in Paris; /tmp/a is gone."));
    let store = store();
    let weather_calls = Arc::new(AtomicUsize::new(0));
    let deleted = Deleted::default();
    let worker = || {
        Agent::builder(model(&server))
            .tool(weather(weather_calls.clone()).idempotent())
            .tool(delete_file(deleted.clone()))
            .require_approval("delete_file")
            .approval_key(key())
            .store(store.clone())
            .build()
            .unwrap()
    };
    let p = pending(
        &worker()
            .run("s", "weather, then delete /tmp/a")
            .await
            .unwrap(),
    );
    assert_eq!(weather_calls.load(Ordering::SeqCst), 1);

    let out = worker().resume("s", &[p.calls[0].approve()]).await.unwrap();
    assert_eq!(out.answer, "Sunny in Paris; /tmp/a is gone.");
    assert_eq!(deleted.lock().unwrap().clone(), vec!["/tmp/a"]);
    assert_eq!(
        weather_calls.load(Ordering::SeqCst),
        1,
        "the repeat after the approval was answered from the earlier result"
    );
    assert_eq!(server.requests()[2].body["tool_choice"], "none");
    assert_eq!(out.iterations, 3);
    checked_session(&*store, "s").await;
}
