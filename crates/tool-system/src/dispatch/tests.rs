//! The dispatcher's unit tests (a file of their own: `dispatch.rs` stays readable).

use super::*;
use crate::FnTool;
use serde_json::json;

fn dispatcher(tools: Vec<FnTool>) -> Dispatcher {
    let mut r = ToolRegistry::new();
    for t in tools {
        r.register(t).unwrap();
    }
    Dispatcher::from_registry(r)
}

#[test]
fn t4_default_timeout_is_30_seconds() {
    assert_eq!(Dispatcher::new().default_timeout(), Duration::from_secs(30));
    assert_eq!(DEFAULT_TOOL_TIMEOUT, Duration::from_secs(30));
}

#[tokio::test]
async fn t3_unknown_tool_gives_exact_not_found_json() {
    let d = dispatcher(vec![]);
    let out = d.dispatch("xxx", json!({}), ToolContext::new("1")).await;
    let v: Value = serde_json::from_str(&out.content).unwrap();
    assert_eq!(v, json!({"success": false, "error": "Tool not found: xxx"}));
    assert_eq!(out.error, Some(ToolErrorKind::NotFound));
}

/// A provider with a revision is listed again only when its revision moved; then the new
/// list (here a schema that now wants a string) is what calls are checked against. One
/// without a revision is listed before every run, as before.
#[tokio::test]
async fn t3_a_provider_is_listed_again_when_its_revision_moves() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    struct Versioned {
        revision: Option<Arc<AtomicU64>>,
        lists: Arc<AtomicUsize>,
    }
    #[async_trait::async_trait]
    impl ToolProvider for Versioned {
        fn provider_name(&self) -> &str {
            "versioned"
        }
        async fn list(&self) -> Vec<ToolSpec> {
            self.lists.fetch_add(1, Ordering::SeqCst);
            let wants = match &self.revision {
                Some(r) if r.load(Ordering::SeqCst) > 0 => "string",
                _ => "integer",
            };
            let schema =
                json!({"type": "object", "properties": {"x": {"type": wants}}, "required": ["x"]});
            vec![ToolSpec::new("f", "f", schema)]
        }
        fn list_revision(&self) -> Option<u64> {
            self.revision.as_ref().map(|r| r.load(Ordering::SeqCst))
        }
        async fn call(
            &self,
            _: &str,
            _: Value,
            _: ToolContext,
        ) -> Result<toolwright_core::ToolOutput, ToolError> {
            let result: Result<Value, ToolError> = async { Ok(json!("ran")) }.await;
            result.map(toolwright_core::ToolOutput::from)
        }
    }
    let (revision, lists) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicUsize::new(0)));
    let d = Dispatcher::new().with_provider(Arc::new(Versioned {
        revision: Some(Arc::clone(&revision)),
        lists: Arc::clone(&lists),
    }));
    for _ in 0..3 {
        d.refresh().await;
    }
    assert_eq!(
        lists.load(Ordering::SeqCst),
        1,
        "same revision: listed once"
    );
    let out = d
        .dispatch("f", json!({"x": 1}), ToolContext::new("1"))
        .await;
    assert!(out.is_ok(), "{}", out.content);

    revision.store(1, Ordering::SeqCst);
    d.refresh().await;
    assert_eq!(
        lists.load(Ordering::SeqCst),
        2,
        "a new revision: listed again"
    );
    let out = d
        .dispatch("f", json!({"x": 1}), ToolContext::new("2"))
        .await;
    assert_eq!(
        out.error,
        Some(ToolErrorKind::InvalidArguments),
        "{}",
        out.content
    );
    let out = d
        .dispatch("f", json!({"x": "one"}), ToolContext::new("3"))
        .await;
    assert!(out.is_ok(), "{}", out.content);

    let lists = Arc::new(AtomicUsize::new(0));
    let d = Dispatcher::new().with_provider(Arc::new(Versioned {
        revision: None,
        lists: Arc::clone(&lists),
    }));
    for _ in 0..3 {
        d.refresh().await;
    }
    assert_eq!(
        lists.load(Ordering::SeqCst),
        3,
        "no revision: listed every run"
    );
}

/// A provider that panics on a name it does not list: the call is a crashed result, as for
/// a listed tool, never a panic through the loop.
#[tokio::test]
async fn t4_a_provider_panicking_on_an_unlisted_name_is_contained() {
    struct Broken;
    #[async_trait::async_trait]
    impl ToolProvider for Broken {
        fn provider_name(&self) -> &str {
            "broken"
        }
        async fn list(&self) -> Vec<ToolSpec> {
            vec![]
        }
        async fn call(
            &self,
            _: &str,
            _: Value,
            _: ToolContext,
        ) -> Result<toolwright_core::ToolOutput, ToolError> {
            let result: Result<Value, ToolError> = async {
                #[allow(clippy::panic)]
                if true {
                    panic!("secret-path-7781");
                }
                Ok(json!(1))
            }
            .await;
            result.map(toolwright_core::ToolOutput::from)
        }
    }
    let d = Dispatcher::new().with_provider(Arc::new(Broken));
    let out = d
        .dispatch("anything", json!({}), ToolContext::new("1"))
        .await;
    assert_eq!(out.error, Some(ToolErrorKind::Crashed), "{}", out.content);
    assert!(!out.content.contains("secret-path"), "{}", out.content);
}

#[tokio::test]
async fn t3_unlisted_name_is_offered_to_providers_before_not_found() {
    /// Lists nothing now (its service stopped) but still knows its tool names.
    struct Stopped;
    #[async_trait::async_trait]
    impl ToolProvider for Stopped {
        fn provider_name(&self) -> &str {
            "mcp"
        }
        async fn list(&self) -> Vec<ToolSpec> {
            vec![]
        }
        async fn call(
            &self,
            name: &str,
            _: Value,
            _: ToolContext,
        ) -> Result<toolwright_core::ToolOutput, ToolError> {
            let result: Result<Value, ToolError> = async {
                if name == "svc__search" {
                    Err(ToolError::unavailable(
                        "The service svc is not running; try again later.",
                    ))
                } else {
                    Err(ToolError::not_found(name))
                }
            }
            .await;
            result.map(toolwright_core::ToolOutput::from)
        }
    }
    let d = Dispatcher::new().with_provider(Arc::new(Stopped));
    let out = d
        .dispatch("svc__search", json!({}), ToolContext::new("1"))
        .await;
    assert_eq!(out.error, Some(ToolErrorKind::Unavailable));
    assert!(out.content.contains("not running"), "{}", out.content);
    let out = d
        .dispatch("nothing", json!({}), ToolContext::new("2"))
        .await;
    let v: Value = serde_json::from_str(&out.content).unwrap();
    assert_eq!(
        v,
        json!({"success": false, "error": "Tool not found: nothing"})
    );
}

// A tool call runs in place on a current-thread runtime and in a task of its own on a
// multi-thread one (`own_task`): each way contains a panic and cancels a call past its time.
#[tokio::test]
async fn t4_panicking_tool_is_contained() {
    panicking_tool_is_contained().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_panicking_tool_is_contained_in_its_own_task() {
    panicking_tool_is_contained().await;
}

async fn panicking_tool_is_contained() {
    let d = dispatcher(vec![
        FnTool::new("boom", "b", json!({}), |_, _| async {
            #[allow(clippy::panic)]
            if true {
                panic!("kaboom");
            }
            Ok(json!(1))
        }),
        // Panics while making its future, before anything is awaited.
        FnTool::new("early", "e", json!({}), |_, _| {
            #[allow(clippy::panic)]
            if true {
                panic!("kaboom before the future");
            }
            async { Ok(json!(1)) }
        }),
    ]);
    let out = d.dispatch("early", json!({}), ToolContext::new("0")).await;
    assert_eq!(out.error, Some(ToolErrorKind::Crashed), "{}", out.content);
    let out = d.dispatch("boom", json!({}), ToolContext::new("1")).await;
    assert_eq!(out.error, Some(ToolErrorKind::Crashed));
    assert!(out.content.contains("Tool boom crashed"), "{}", out.content);
    assert!(
        !out.content.contains("kaboom"),
        "panic text is for the operator's log only: {}",
        out.content
    );
}

#[tokio::test]
async fn t4_timeout_cancels_the_call() {
    timeout_cancels_the_call().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_timeout_cancels_the_call_in_its_own_task() {
    timeout_cancels_the_call().await;
}

/// On a multi-thread runtime a tool that blocks its thread (not an `.await` in sight) is
/// still answered with a timeout: the call has a task of its own, the loop another thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_a_tool_that_blocks_its_thread_is_timed_out_on_a_multi_thread_runtime() {
    let d = dispatcher(vec![
        FnTool::new("stuck", "s", json!({}), |_, _| async {
            std::thread::sleep(Duration::from_millis(600));
            Ok(json!(1))
        })
        .with_timeout(Duration::from_millis(50)),
    ]);
    let out = d.dispatch("stuck", json!({}), ToolContext::new("1")).await;
    assert_eq!(out.error, Some(ToolErrorKind::Timeout), "{}", out.content);
}

async fn timeout_cancels_the_call() {
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f2 = Arc::clone(&finished);
    let d = dispatcher(vec![
        FnTool::new("slow", "s", json!({}), move |_, _| {
            let f2 = Arc::clone(&f2);
            async move {
                tokio::time::sleep(Duration::from_millis(400)).await;
                f2.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(json!(1))
            }
        })
        .with_timeout(Duration::from_millis(50)),
    ]);
    let out = d.dispatch("slow", json!({}), ToolContext::new("1")).await;
    assert_eq!(out.error, Some(ToolErrorKind::Timeout));
    assert!(out.content.contains("timed out after 50 ms"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !finished.load(std::sync::atomic::Ordering::SeqCst),
        "the call must be cancelled"
    );
}

#[tokio::test]
async fn t4_huge_result_is_capped_with_a_note() {
    let d = dispatcher(vec![FnTool::new("big", "b", json!({}), |_, _| async {
        Ok(json!("é".repeat(100_000)))
    })])
    .with_max_result_bytes(1000);
    let out = d.dispatch("big", json!({}), ToolContext::new("1")).await;
    assert!(out.truncated);
    assert!(out.content.len() <= 1000);
    assert!(
        out.content
            .contains("[truncated: the result was 200000 bytes")
    );
}

#[tokio::test]
async fn t4_schema_invalid_arguments_do_not_run_the_tool() {
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r2 = Arc::clone(&ran);
    let d = dispatcher(vec![FnTool::new(
        "w",
        "w",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        move |_, _| {
            r2.store(true, std::sync::atomic::Ordering::SeqCst);
            async { Ok(json!(1)) }
        },
    )]);
    let out = d
        .dispatch("w", json!({"city": 5}), ToolContext::new("1"))
        .await;
    assert_eq!(out.error, Some(ToolErrorKind::InvalidArguments));
    assert!(out.content.contains("/city"), "{}", out.content);
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test]
async fn t3_operator_detail_never_reaches_the_model() {
    let d = dispatcher(vec![FnTool::new("f", "f", json!({}), |_, _| async {
        Err(ToolError::failed("city not found").with_detail("SECRET-TOKEN-123"))
    })]);
    let out = d.dispatch("f", json!({}), ToolContext::new("1")).await;
    assert_eq!(out.error, Some(ToolErrorKind::Failed));
    assert!(out.content.contains("city not found"));
    assert!(!out.content.contains("SECRET"));
}

fn media(n: usize) -> Part {
    Part::File(toolwright_core::Media::bytes(&vec![0u8; n], "application/octet-stream").unwrap())
}

#[tokio::test]
async fn media_past_the_result_cap_without_a_store_is_named_with_how_to_keep_it() {
    let mut parts = vec![media(600), Part::text("between"), media(300), media(300)];
    let spilled = spill_media(&mut parts, 1000, None).await;
    assert_eq!((spilled.kept, spilled.named.len()), (0, 1));
    assert!(matches!(parts[0], Part::File(_)));
    assert!(matches!(parts[2], Part::File(_)));
    let Part::Text { text } = &parts[3] else {
        panic!("{:?}", parts[3])
    };
    assert!(
        text.contains("300 bytes")
            && text.contains("1000-byte media limit")
            && text.contains("AgentBuilder::blob_store"),
        "{text}"
    );
    let mut small = vec![media(10)];
    let spilled = spill_media(&mut small, 1000, None).await;
    assert_eq!((spilled.kept, spilled.named.len()), (0, 0));
}

#[tokio::test]
async fn media_past_the_result_cap_goes_to_the_store_and_a_full_store_is_said() {
    let dir = tempfile::tempdir().unwrap();
    // Room for the first spilled part, not the second.
    let store = crate::FsBlobStore::open(dir.path(), 400).unwrap();
    let mut parts = vec![media(900), media(300), media(301)];
    let spilled = spill_media(&mut parts, 1000, Some(&store)).await;
    assert_eq!(spilled.kept, 1);
    assert!(matches!(parts[0], Part::File(_)));
    let Part::Resource(r) = &parts[1] else {
        panic!("{:?}", parts[1])
    };
    assert_eq!(
        (r.media_type.as_str(), r.size),
        ("application/octet-stream", Some(300))
    );
    assert_eq!(store.get(&r.uri).await.unwrap().bytes, vec![0u8; 300]);
    let Part::Text { text } = &parts[2] else {
        panic!("{:?}", parts[2])
    };
    assert!(text.contains("blob store is full"), "{text}");
}
