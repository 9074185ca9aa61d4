//! Tool search as a user composes it: an `Agent` over an `McpBridge` whose
//! services list the real tool definitions of many MCP servers (recorded `tools/list` output,
//! crates/tool-search/fixtures/tools.json, each served over stdio by this crate's test server),
//! talking to the OpenAI-compatible backend over real HTTP. Past the token budget a turn shows
//! one search tool instead of the list; the model searches, the hits become callable, the call
//! runs. Checked in the requests the provider receives, in all three call protocols.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::search::{SearchTurn, big_bridge, local_search_turn, search_turn};
use serde_json::json;
use toolwright_mcp_bridge::{DESCRIBE_TOOL, SEARCH_TOOL, ToolSearchConfig};
use toolwright_tool_system::ProtocolKind;

#[tokio::test]
async fn m3_tool_search_native_shows_one_search_tool_then_the_hits() {
    let SearchTurn { first, full, .. } = search_turn(ProtocolKind::Native).await;
    println!("tool search, native: first request {first} tokens; every full schema {full}");
    assert!(first * 10 <= full, "{first} vs {full}");
}

#[tokio::test]
async fn m3_tool_search_json_decision_shows_one_search_tool_then_the_hits() {
    let SearchTurn { first, full, .. } = search_turn(ProtocolKind::JsonDecision).await;
    println!("tool search, json: first request {first} tokens; every full schema {full}");
    assert!(first * 10 <= full, "{first} vs {full}");
}

#[tokio::test]
async fn m3_tool_search_tag_shows_one_search_tool_then_the_hits() {
    let SearchTurn { first, full, .. } = search_turn(ProtocolKind::Tag).await;
    println!("tool search, tag: first request {first} tokens; every full schema {full}");
    assert!(first * 10 <= full, "{first} vs {full}");
}

/// Under the budget nothing changes: a keyword turn for one small service lists its tools.
/// Over it (a budget of 0 here), the same turn searches; a Chinese query finds an English tool.
#[tokio::test]
async fn m3_tool_search_only_past_the_budget() {
    let b = big_bridge(ToolSearchConfig::default()).await;
    use toolwright_mcp_bridge::IntentRecognizer;
    let intent = b
        .recognizer()
        .await
        .recognize("ask the everything server for something")
        .unwrap();
    let section = b.prompt_section(&intent).await.unwrap();
    assert!(section.contains("everything__echo"), "{section}");
    assert!(!section.contains(SEARCH_TOOL), "{section}");
    // with the whole catalog past the budget, a turn with no MCP intent (no trigger
    // keyword) still gets the search tool, by default; it shows nothing once that is off (M3).
    let section = b
        .prompt_section(&toolwright_mcp_bridge::Intent::Normal)
        .await
        .unwrap();
    assert!(section.contains(SEARCH_TOOL), "{section}");
    assert!(!section.contains("everything__echo"), "{section}");
    let turn = toolwright_core::TurnInfo::new("plan my afternoon");
    let offered: Vec<String> = b
        .advertised_tools(&turn)
        .await
        .into_iter()
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(offered, [SEARCH_TOOL, DESCRIBE_TOOL]);
    b.set_tool_search(ToolSearchConfig::default().with_search_past_budget(false));
    assert_eq!(
        b.prompt_section(&toolwright_mcp_bridge::Intent::Normal)
            .await,
        None
    );
    assert!(b.advertised_tools(&turn).await.is_empty());

    b.set_tool_search(ToolSearchConfig::default().with_budget_tokens(0));
    let section = b.prompt_section(&intent).await.unwrap();
    assert!(section.contains(SEARCH_TOOL), "{section}");
    assert!(!section.contains("everything__echo"), "{section}");

    let hits = b.search_tools("把这段文字原样返回给我", 5).await;
    assert!(
        hits.iter()
            .any(|h| h.tool.exposed_name == "everything__echo"),
        "{:?}",
        hits.iter()
            .map(|h| &h.tool.exposed_name)
            .collect::<Vec<_>>()
    );
    // A bad query is a message the model can act on, never a failure of the turn.
    let err = b
        .call(SEARCH_TOOL, json!({"limit": 3}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert!(err.message.contains("query"), "{}", err.message);
    let err = b
        .call(SEARCH_TOOL, json!({"query": "x", "limit": 500}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert!(err.message.contains("limit"), "{}", err.message);
    let none = b
        .call(SEARCH_TOOL, json!({"query": "zzqx qqzz"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(none["tools"], json!([]), "{none}");
    for name in b.services().into_iter().map(|s| s.config.name) {
        b.stop(&name).await.unwrap();
    }
}

/// The same search turn decided by the embedded local model (SmolLM2-135M, native calls under
/// its grammar): its first request binds only the search and describe tools, and the prompt it
/// reads (counted by its own tokenizer) is at most a tenth of what every full schema would take.
/// What a 135M model then does is its own choice; the run must end with an answer either way.
#[tokio::test]
async fn m3_tool_search_on_the_local_model() {
    let b = big_bridge(ToolSearchConfig::default().with_every_turn(true)).await;
    let turn = local_search_turn(&b).await;
    let (first, _) = &turn.seen[0];
    let bound: Vec<&str> = first.tools.iter().map(|t| &*t.name).collect();
    assert_eq!(bound, [SEARCH_TOOL, DESCRIBE_TOOL]);
    let system = match &first.messages[0] {
        toolwright_core::Message::System { content } => content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(system.contains("too many to list"), "{system}");
    println!(
        "tool search, local model: first request {} prompt tokens; every full schema {}; {} requests; answer {:?}",
        turn.first,
        turn.full,
        turn.seen.len(),
        turn.answer
    );
    assert!(
        turn.first > 0 && turn.first * 10 <= turn.full,
        "{} vs {}",
        turn.first,
        turn.full
    );
    // When the model searched, the result reached it as a tool message and the hits were bound.
    for (req, _) in turn.seen.iter().skip(1) {
        if req.messages.iter().any(
            |m| matches!(m, toolwright_core::Message::Tool { name, .. } if name == SEARCH_TOOL),
        ) {
            assert!(req.tools.len() > 2, "{:?}", req.tools);
        }
    }
    for name in b.services().into_iter().map(|s| s.config.name) {
        b.stop(&name).await.unwrap();
    }
}
