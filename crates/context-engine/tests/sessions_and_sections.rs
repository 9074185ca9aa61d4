//! C1 (sessions of every message kind) and C2 (system prompt sections outside history).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::json;
use toolwright_context_engine::{
    ContextBuilder, History, MemoryStore, Session, SessionStore, SqliteStore,
};
use toolwright_core::{EstimateCounter, Message, Role, ToolCall};

fn every_kind() -> Vec<Message> {
    vec![
        Message::system("session-level instruction"),
        Message::user("Weather in 北京 and Paris?"),
        Message::assistant_with_tool_calls(
            "Let me check.",
            vec![
                ToolCall::new("call_1", "weather", json!({"city": "北京"})),
                ToolCall::new(
                    "call_2",
                    "weather",
                    json!({"city": "Paris", "units": ["c"]}),
                ),
            ],
        ),
        Message::tool("call_1", "weather", r#"{"temp": 22}"#),
        Message::tool("call_2", "weather", "18°C"),
        Message::assistant("北京 22°C, Paris 18°C."),
        Message::user("[Tool result for search]\nfound: a.txt\nb.txt"),
        Message::assistant(""),
    ]
}

async fn roundtrip(store: &dyn SessionStore) {
    store.create("c1").await.unwrap();
    let msgs = every_kind();
    store.append("c1", &msgs[..2]).await.unwrap();
    store.append("c1", &msgs[2..5]).await.unwrap();
    store.append("c1", &msgs[5..]).await.unwrap();
    let s = store.load("c1").await.unwrap();
    assert_eq!(
        s,
        Session {
            id: "c1".into(),
            messages: msgs
        }
    );
    let roles: Vec<Role> = s.messages.iter().map(Message::role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant,
            Role::User,
            Role::Assistant
        ]
    );
}

#[tokio::test]
async fn c1_memory_session_keeps_every_message_kind_in_order() {
    roundtrip(&MemoryStore::new()).await;
}

#[tokio::test]
async fn c1_sqlite_session_keeps_every_message_kind_in_order() {
    let dir = tempfile::tempdir().unwrap();
    roundtrip(&SqliteStore::open(dir.path().join("s.db")).unwrap()).await;
    // And after reopening the file.
    let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
    assert_eq!(store.load("c1").await.unwrap().messages, every_kind());
}

#[test]
fn c1_history_keeps_messages_and_counts_aligned() {
    let mut h = History::new(Arc::new(EstimateCounter));
    h.extend(every_kind());
    assert_eq!(h.len(), 8);
    assert_eq!(h.messages(), every_kind().as_slice());
    assert_eq!(h.token_counts().len(), 8);
    assert!(h.token_counts().iter().all(|&n| n >= 4));
}

#[test]
fn c2_sections_are_composed_into_one_system_message_in_stable_order() {
    let h = History::from_messages(Arc::new(EstimateCounter), vec![Message::user("hi")]);
    let b = ContextBuilder::new("You are an agent.")
        .section("tools", "Tools: search(q)")
        .section("mcp", "MCP: fs.read — reads a file")
        .section("tools", "Tools: search(q), fetch(url)"); // replaced in place
    let ctx = b.build(&h).unwrap();
    assert_eq!(ctx.messages.len(), 2);
    assert_eq!(
        ctx.messages[0],
        Message::system(
            "You are an agent.\n\nTools: search(q), fetch(url)\n\nMCP: fs.read — reads a file"
        )
    );
    assert_eq!(ctx.messages[1], Message::user("hi"));
}

#[test]
fn c2_empty_sections_are_omitted() {
    let b = ContextBuilder::new("base")
        .section("tools", "")
        .section("mcp", "  \n")
        .section("memory", "remember X");
    assert_eq!(b.system_prompt(), "base\n\nremember X");
    assert_eq!(
        ContextBuilder::new("").section("x", " ").system_prompt(),
        ""
    );
    // No base and no sections: no system message at all.
    let h = History::from_messages(Arc::new(EstimateCounter), vec![Message::user("hi")]);
    let ctx = ContextBuilder::new("")
        .section("tools", "")
        .build(&h)
        .unwrap();
    assert_eq!(ctx.messages, vec![Message::user("hi")]);
}

#[tokio::test]
async fn c2_sections_are_per_turn_and_never_stored_as_history() {
    let store = MemoryStore::new();
    let session = store.load_or_create("s").await.unwrap();
    let mut h = History::from_messages(Arc::new(EstimateCounter), session.messages);
    let round = [Message::user("turn 1")];
    store.append("s", &round).await.unwrap();
    h.extend(round);

    let base = ContextBuilder::new("base");
    let turn1 = base
        .clone()
        .section("mcp", "MCP: fs.read")
        .build(&h)
        .unwrap();
    assert!(turn1.messages[0].content().contains("MCP: fs.read"));

    let round = [Message::assistant("answer 1"), Message::user("turn 2")];
    store.append("s", &round).await.unwrap();
    h.extend(round);
    let turn2 = base.clone().without_section("mcp").build(&h).unwrap();
    assert_eq!(turn2.messages[0], Message::system("base"));
    // Neither the store nor the history holds a section.
    let stored = store.load("s").await.unwrap().messages;
    assert!(stored.iter().all(|m| !m.content().contains("MCP")));
    assert_eq!(stored.len(), 3);
    assert_eq!(h.len(), 3);
    // The section's tokens are counted into the budget.
    assert!(
        turn1.tokens
            > base
                .build(&History::from_messages(
                    Arc::new(EstimateCounter),
                    vec![Message::user("turn 1")]
                ))
                .unwrap()
                .tokens
    );
}
