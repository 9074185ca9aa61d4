//! An agent with a compactor: past the mark, older rounds are summarised by the named model
//! and later requests carry the summary instead of them, while the store keeps every message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::scripted::{Scripted, call, text};
use serde_json::{Value, json};
use toolwright_context_engine::{Compactor, MemoryStore, SessionStore};
use toolwright_core::{ChatModel, Message};
use toolwright_tool_system::{Agent, FnTool};

fn lookup() -> FnTool {
    FnTool::new(
        "lookup",
        "Look a word up",
        json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}),
        |args: Value, _| async move { Ok(json!({"meaning": format!("{} means blue", args["word"])})) },
    )
}

/// Every tool message a request holds follows an assistant message that made its call.
fn pairs_intact(messages: &[Message]) -> bool {
    let mut called = std::collections::HashSet::new();
    for m in messages {
        match m {
            Message::Assistant { tool_calls, .. } => {
                called.extend(tool_calls.iter().map(|c| c.id.clone()));
            }
            Message::Tool { tool_call_id, .. } if !called.contains(tool_call_id) => return false,
            _ => {}
        }
    }
    true
}

#[tokio::test]
async fn a_long_session_is_summarised_and_later_requests_carry_the_summary() {
    let filler = "and then we talked at length about the weather, the trains and lunch ".repeat(6);
    let mut replies = vec![
        call("c1", "lookup", json!({"word": "AZURE"})),
        text("AZURE means blue."),
    ];
    replies.extend((0..11).map(|i| text(&format!("noted {i}"))));
    let model = Scripted::new(replies);
    let summariser = Scripted::new(
        (0..12)
            .map(|_| text("Summary: the code word is AZURE, which means blue."))
            .collect(),
    );
    let store = Arc::new(MemoryStore::new());
    let summariser_model: Arc<dyn ChatModel> = Arc::new(summariser.clone());
    let agent = Agent::builder(model.clone())
        .tool(lookup())
        .store(store.clone())
        .context_budget(900)
        .compaction(Compactor::new(summariser_model, 600).keep_recent(200))
        .build()
        .unwrap();
    agent.run("s", "look up the code word AZURE").await.unwrap();
    for i in 0..11 {
        agent
            .run("s", &format!("turn {i}: {filler}"))
            .await
            .unwrap();
    }

    assert!(
        !summariser.requests().is_empty(),
        "the summariser was asked"
    );
    // The tool round (call and result) was shown to the summariser together.
    let first = &summariser.requests()[0];
    let shown = serde_json::to_string(&first.messages).unwrap();
    assert!(
        shown.contains("AZURE") && shown.contains("means blue"),
        "{shown}"
    );
    let requests = model.requests();
    let last = requests.last().unwrap();
    let Message::System { content } = &last.messages[0] else {
        panic!("a system message first: {:?}", last.messages[0])
    };
    assert!(content.contains("the code word is AZURE"), "{content}");
    assert!(
        !last
            .messages
            .iter()
            .any(|m| matches!(m, Message::Tool { .. })),
        "the summarised tool round is not sent again"
    );
    for r in &requests {
        assert!(pairs_intact(&r.messages), "{:?}", r.messages);
    }
    // Nothing stored was lost: 1 + 2 + 1 + 1 for the tool turn, 2 per later turn.
    let stored = store.load_or_create("s").await.unwrap().messages;
    assert_eq!(stored.len(), 4 + 2 * 11);
}
