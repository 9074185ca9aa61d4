#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

pub mod scripted;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use testkit::ScriptedServer;
use toolwright_context_engine::{MemoryStore, SessionStore};
use toolwright_core::{Message, ToolError};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel, RetryPolicy};
use toolwright_tool_system::{Agent, FnTool};

pub fn model(server: &ScriptedServer) -> OpenAiModel {
    OpenAiModel::new(
        OpenAiConfig::new("m")
            .with_base_url(server.base_url())
            .with_retry(RetryPolicy::none()),
    )
    .unwrap()
}

pub fn model_without_fc(server: &ScriptedServer) -> OpenAiModel {
    OpenAiModel::new(
        OpenAiConfig::new("m")
            .with_base_url(server.base_url())
            .with_retry(RetryPolicy::none())
            .with_function_calling(false),
    )
    .unwrap()
}

pub fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

/// get_weather that counts its calls.
pub fn weather(counter: Arc<AtomicUsize>) -> FnTool {
    FnTool::new(
        "get_weather",
        "Get current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        move |args, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok(json!({"temp": 22, "city": args["city"]})) }
        },
    )
}

/// The usual native-protocol setup: an agent over `server` with [`weather`], its call counter,
/// and the store it writes to.
pub fn weather_agent(server: &ScriptedServer) -> (Agent, Arc<AtomicUsize>, Arc<MemoryStore>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = store();
    let agent = Agent::builder(model(server))
        .tool(weather(calls.clone()))
        .store(store.clone())
        .build()
        .unwrap();
    (agent, calls, store)
}

pub fn failing(name: &str, message: &str) -> FnTool {
    let message = message.to_owned();
    FnTool::new(
        name,
        "always fails",
        json!({"type": "object", "properties": {}}),
        move |_, _| {
            let m = message.clone();
            async move { Err(ToolError::failed(m).with_detail("operator-only detail")) }
        },
    )
}

/// The messages of the n-th request (0-based).
pub fn sent_messages(server: &ScriptedServer, n: usize) -> Vec<Value> {
    server.requests()[n].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The `tool` messages of the n-th request.
pub fn sent_tool_messages(server: &ScriptedServer, n: usize) -> Vec<Value> {
    sent_messages(server, n)
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect()
}

/// Loads the session and checks that every assistant tool call is answered by exactly one
/// tool message right after it, in order; returns the messages.
pub async fn checked_session(store: &dyn SessionStore, id: &str) -> Vec<Message> {
    let messages = store.load(id).await.unwrap().messages;
    let mut i = 0;
    while i < messages.len() {
        let calls = messages[i].tool_calls();
        if !calls.is_empty() {
            let mut seen = HashSet::new();
            for (k, call) in calls.iter().enumerate() {
                match messages.get(i + 1 + k) {
                    Some(Message::Tool { tool_call_id, .. }) => {
                        assert_eq!(
                            tool_call_id, &call.id,
                            "results out of order at {i}: {messages:#?}"
                        );
                        assert!(seen.insert(tool_call_id.clone()), "duplicate result");
                    }
                    other => panic!(
                        "call {} has no result (found {other:?}) in {messages:#?}",
                        call.id
                    ),
                }
            }
            i += 1 + calls.len();
        } else {
            assert!(
                !matches!(messages[i], Message::Tool { .. }),
                "orphan tool message at {i}: {messages:#?}"
            );
            i += 1;
        }
    }
    messages
}

/// Log lines written on this thread while it is alive (tokio's test runtime is
/// single-threaded, so the loop and its tool tasks log here). One global subscriber routes each
/// thread's lines to that thread's capture: scoped subscribers race on tracing's global
/// callsite cache when tests run in parallel.
pub struct Logs {
    buf: Arc<std::sync::Mutex<Vec<u8>>>,
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Arc<std::sync::Mutex<Vec<u8>>>>> =
        const { std::cell::RefCell::new(None) };
}

struct ThreadWriter;

impl std::io::Write for ThreadWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(buf) = &*c.borrow() {
                buf.lock().unwrap().extend_from_slice(b);
            }
        });
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Starts capturing this thread's log lines, every level from DEBUG up.
    pub fn capture() -> Self {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| ThreadWriter)
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .finish();
            tracing::subscriber::set_global_default(subscriber).unwrap();
        });
        let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
        CAPTURE.with(|c| *c.borrow_mut() = Some(buf.clone()));
        Self { buf }
    }
    /// Everything logged on this thread so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}
