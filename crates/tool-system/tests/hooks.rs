//! Hooks before and after model and tool calls, and input/output guardrails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::scripted::{Scripted, call, text};
use serde_json::{Value, json};
use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_core::{ChatRequest, ChatResponse, Message, async_trait};
use toolwright_tool_system::protocol::{PendingCall, Reading};
use toolwright_tool_system::{
    Agent, AgentBuilder, CallVerdict, Flow, FnTool, Guardrail, Hook, HookContext, LoopError,
};

/// `echo` returns its arguments and records every call.
fn echo(seen: Arc<Mutex<Vec<Value>>>) -> FnTool {
    FnTool::new(
        "echo",
        "Echo the arguments",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        move |args, _| {
            seen.lock().unwrap().push(args.clone());
            async move { Ok(args) }
        },
    )
}

struct Setup {
    model: Scripted,
    store: Arc<MemoryStore>,
    seen: Arc<Mutex<Vec<Value>>>,
}

fn builder(replies: Vec<ChatResponse>) -> (AgentBuilder, Setup) {
    let model = Scripted::new(replies);
    let store = Arc::new(MemoryStore::new());
    let seen = Arc::default();
    let b = Agent::builder(model.clone())
        .tool(echo(Arc::clone(&seen)))
        .store(store.clone());
    (b, Setup { model, store, seen })
}

fn echo_then_answer() -> Vec<ChatResponse> {
    vec![call("c1", "echo", json!({"text": "hi"})), text("done")]
}

/// A hook that answers `verdict` before each tool call and logs what it saw.
struct BeforeTool {
    name: &'static str,
    verdict: CallVerdict,
    log: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Hook for BeforeTool {
    fn name(&self) -> &str {
        self.name
    }
    async fn before_tool(&self, _: HookContext<'_>, call: &PendingCall) -> CallVerdict {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} {}", self.name, call.arguments));
        self.verdict.clone()
    }
}

fn before(name: &'static str, verdict: CallVerdict, log: &Arc<Mutex<Vec<String>>>) -> BeforeTool {
    BeforeTool {
        name,
        verdict,
        log: Arc::clone(log),
    }
}

#[tokio::test]
async fn hooks_run_in_order_and_each_sees_the_arguments_the_one_before_rewrote() {
    let log = Arc::default();
    let (b, s) = builder(echo_then_answer());
    let agent = b
        .hook(before(
            "first",
            CallVerdict::Rewrite(json!({"text": "HI"})),
            &log,
        ))
        .hook(before("second", CallVerdict::Continue, &log))
        .build()
        .unwrap();
    let out = agent.run("s", "say hi").await.unwrap();
    assert_eq!(out.answer, "done");
    assert_eq!(
        *log.lock().unwrap(),
        vec![r#"first {"text":"hi"}"#, r#"second {"text":"HI"}"#]
    );
    // the tool ran with the rewritten arguments; the history keeps the model's call
    assert_eq!(*s.seen.lock().unwrap(), vec![json!({"text": "HI"})]);
    let Message::Assistant { tool_calls, .. } = &out.new_messages[1] else {
        panic!("{:?}", out.new_messages)
    };
    assert_eq!(tool_calls[0].arguments, json!({"text": "hi"}));
}

#[tokio::test]
async fn a_refused_call_does_not_run_and_the_model_reads_why_and_the_hooks_after_are_not_asked() {
    let log = Arc::default();
    let (b, s) = builder(echo_then_answer());
    let agent = b
        .hook(before(
            "guard",
            CallVerdict::Refuse("echo is switched off; answer without it".into()),
            &log,
        ))
        .hook(before("never", CallVerdict::Continue, &log))
        .build()
        .unwrap();
    let out = agent.run("s", "say hi").await.unwrap();
    assert_eq!(out.answer, "done");
    assert!(s.seen.lock().unwrap().is_empty(), "the tool did not run");
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "the second hook was not asked"
    );
    let sent = format!("{:?}", s.model.requests()[1].messages);
    assert!(sent.contains("echo is switched off"), "{sent}");
}

#[tokio::test]
async fn a_hook_that_stops_before_a_tool_ends_the_run_and_records_no_half_round() {
    let log = Arc::default();
    let (b, s) = builder(echo_then_answer());
    let agent = b
        .hook(before(
            "stopper",
            CallVerdict::Stop("over budget".into()),
            &log,
        ))
        .build()
        .unwrap();
    let err = agent.run("s", "say hi").await.unwrap_err();
    let LoopError::Stopped { by, reason } = &err else {
        panic!("{err}")
    };
    assert_eq!((by.as_str(), reason.as_str()), ("stopper", "over budget"));
    assert!(s.seen.lock().unwrap().is_empty());
    // only the person's message is stored: no call without its result
    let session = s.store.load_or_create("s").await.unwrap();
    assert_eq!(session.messages, vec![Message::user("say hi")]);
}

/// Counts model calls before and after; stops after the `stop_after`-th response.
struct Watch {
    before: AtomicUsize,
    after: AtomicUsize,
    stop_after: usize,
}

#[async_trait]
impl Hook for Watch {
    fn name(&self) -> &str {
        "watch"
    }
    async fn before_model(&self, _: HookContext<'_>, request: &ChatRequest) -> Flow {
        assert!(!request.messages.is_empty());
        self.before.fetch_add(1, Ordering::SeqCst);
        Flow::Continue
    }
    async fn after_model(&self, _: HookContext<'_>, _: &Reading) -> Flow {
        let n = self.after.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.stop_after {
            Flow::Stop("seen enough".into())
        } else {
            Flow::Continue
        }
    }
}

#[tokio::test]
async fn model_hooks_see_every_call_and_can_stop_the_run() {
    let watch = Arc::new(Watch {
        before: AtomicUsize::new(0),
        after: AtomicUsize::new(0),
        stop_after: 99,
    });
    struct Shared(Arc<Watch>);
    #[async_trait]
    impl Hook for Shared {
        fn name(&self) -> &str {
            "watch"
        }
        async fn before_model(&self, c: HookContext<'_>, r: &ChatRequest) -> Flow {
            self.0.before_model(c, r).await
        }
        async fn after_model(&self, c: HookContext<'_>, r: &Reading) -> Flow {
            self.0.after_model(c, r).await
        }
    }
    let (b, _) = builder(echo_then_answer());
    let agent = b.hook(Shared(Arc::clone(&watch))).build().unwrap();
    agent.run("s", "say hi").await.unwrap();
    assert_eq!(watch.before.load(Ordering::SeqCst), 2);
    assert_eq!(watch.after.load(Ordering::SeqCst), 2);

    let (b, s) = builder(echo_then_answer());
    let stopper = Watch {
        before: AtomicUsize::new(0),
        after: AtomicUsize::new(0),
        stop_after: 1,
    };
    let err = b.hook(stopper).build().unwrap().run("s", "say hi").await;
    assert!(matches!(err, Err(LoopError::Stopped { .. })), "{err:?}");
    assert!(
        s.seen.lock().unwrap().is_empty(),
        "stopped before the call ran"
    );
}

struct Panics;
#[async_trait]
impl Hook for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    async fn after_tool(&self, _: HookContext<'_>, _: &PendingCall, _: &str, _: bool) -> Flow {
        panic!("hook bug")
    }
}

struct Hangs;
#[async_trait]
impl Hook for Hangs {
    fn name(&self) -> &str {
        "hangs"
    }
    async fn before_model(&self, _: HookContext<'_>, _: &ChatRequest) -> Flow {
        futures::future::pending().await
    }
}

#[tokio::test]
async fn a_hook_that_panics_or_hangs_fails_the_run_with_a_typed_error() {
    let (b, s) = builder(echo_then_answer());
    let err = b.hook(Panics).build().unwrap().run("s", "hi").await;
    let Err(LoopError::HookFailed { hook, problem }) = err else {
        panic!("{err:?}")
    };
    assert_eq!(hook, "panics");
    assert!(problem.contains("hook bug"), "{problem}");
    assert_eq!(
        s.seen.lock().unwrap().len(),
        1,
        "the call ran, then the hook"
    );

    let (b, s) = builder(echo_then_answer());
    let started = std::time::Instant::now();
    let err = b
        .hook(Hangs)
        .hook_timeout(Duration::from_millis(50))
        .build()
        .unwrap()
        .run("s", "hi")
        .await;
    let Err(LoopError::HookFailed { hook, problem }) = err else {
        panic!("{err:?}")
    };
    assert_eq!(hook, "hangs");
    assert!(problem.contains("did not answer"), "{problem}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(s.model.requests().is_empty(), "the model was never called");
}

struct Forbid(&'static str);
#[async_trait]
impl Guardrail for Forbid {
    fn name(&self) -> &str {
        "forbid"
    }
    async fn check(&self, text: &str) -> Result<(), String> {
        if text.contains(self.0) {
            Err(format!("mentions {}", self.0))
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn an_input_guardrail_trips_before_anything_is_stored_or_sent() {
    let (b, s) = builder(echo_then_answer());
    let agent = b.input_guardrail(Forbid("password")).build().unwrap();
    let err = agent.run("s", "my password is hunter2").await.unwrap_err();
    let LoopError::GuardrailTripped { guardrail, reason } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (guardrail.as_str(), reason.as_str()),
        ("forbid", "mentions password")
    );
    assert!(s.model.requests().is_empty());
    assert!(
        s.store
            .load_or_create("s")
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    // a message that passes runs as usual
    assert_eq!(agent.run("s", "say hi").await.unwrap().answer, "done");
}

#[tokio::test]
async fn an_output_guardrail_trips_on_the_final_answer_which_is_not_recorded() {
    let (b, s) = builder(vec![
        call("c1", "echo", json!({"text": "hi"})),
        text("the secret is 42"),
    ]);
    let agent = b.output_guardrail(Forbid("secret")).build().unwrap();
    let err = agent.run("s", "tell me").await.unwrap_err();
    assert!(matches!(err, LoopError::GuardrailTripped { .. }), "{err}");
    let stored = s.store.load_or_create("s").await.unwrap().messages;
    assert_eq!(stored.len(), 3, "person, call, result: {stored:?}");
    assert!(!format!("{stored:?}").contains("secret is"));
}
