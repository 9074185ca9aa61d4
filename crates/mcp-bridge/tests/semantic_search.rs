//! Search by meaning in the bridge, against a real MCP server process (this crate's test
//! server over stdio): the tools' vectors are encoded once per tool text, a `list_changed`
//! re-encodes only the changed tools, a restart reads them from the cache file, a failing
//! encoder leaves BM25 answering, and `list_revision` holds while the catalog does.
//!
//! The encoders are the test-only ones of tests/common/embedders.rs (a lexical hashed one,
//! counted): what is checked is the plumbing, not the quality of a model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::embedders::{Broken, Counting, HashedNgrams};
use common::{init_tracing, own};
use serde_json::json;
use tokio::time::Instant;
use toolwright_core::ToolProvider;
use toolwright_mcp_bridge::{McpBridge, SemanticSearch};

async fn started() -> McpBridge {
    init_tracing();
    let b = McpBridge::new();
    b.register(own("misb", &[])).unwrap();
    b.start("misb").await.unwrap();
    b
}

/// Adds a tool on the server (which sends `notifications/tools/list_changed`) and waits until
/// the catalog has it.
async fn add_tool(b: &McpBridge, name: &str) {
    b.call("misb__add_tool", json!({"name": name}))
        .await
        .map(|o| o.value)
        .unwrap();
    let exposed = format!("misb__{name}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !b.tools().await.iter().any(|t| t.exposed_name == exposed) {
        assert!(Instant::now() < deadline, "list_changed not picked up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn m1_list_changed_re_encodes_only_the_changed_tools_and_a_restart_none() {
    let dir = tempfile::tempdir().unwrap();
    let encoder = Arc::new(Counting::new(HashedNgrams));
    let b = started().await;
    b.set_semantic_search(Some(
        SemanticSearch::new(encoder.clone()).with_cache_dir(Some(dir.path().to_path_buf())),
    ));
    let n = b.tools().await.len();
    assert!(n >= 5, "{n} tools");

    let hits = b.search_tools("repeat my message", 5).await;
    assert_eq!(hits[0].tool.exposed_name, "misb__echo", "{hits:?}");
    assert_eq!(
        encoder.documents(),
        n,
        "the first search encodes every tool"
    );
    b.search_tools("add two numbers", 5).await;
    assert_eq!(
        encoder.documents(),
        n,
        "an unchanged catalog encodes nothing"
    );

    add_tool(&b, "weather").await;
    let hits = b.search_tools("weather", 5).await;
    assert_eq!(hits[0].tool.exposed_name, "misb__weather", "{hits:?}");
    assert_eq!(encoder.documents(), n + 1, "only the new tool is encoded");
    let last = encoder.seen.lock().unwrap().last().cloned().unwrap();
    assert!(last.starts_with("weather"), "{last}");
    b.stop("misb").await.unwrap();

    // A restart (a new bridge, the same cache directory): every vector comes from the file.
    let again = Arc::new(Counting::new(HashedNgrams));
    let b = started().await;
    b.set_semantic_search(Some(
        SemanticSearch::new(again.clone()).with_cache_dir(Some(dir.path().to_path_buf())),
    ));
    let hits = b.search_tools("repeat my message", 5).await;
    assert_eq!(hits[0].tool.exposed_name, "misb__echo");
    assert_eq!(again.documents(), 0, "a restart encodes nothing");
    assert_eq!(again.queries.load(std::sync::atomic::Ordering::SeqCst), 1);
    b.stop("misb").await.unwrap();
}

#[tokio::test]
async fn m4_a_failing_encoder_leaves_the_search_to_bm25() {
    let b = started().await;
    let words: Vec<String> = b
        .search_tools("echo the message", 5)
        .await
        .into_iter()
        .map(|h| h.tool.exposed_name)
        .collect();
    assert!(!words.is_empty());
    b.set_semantic_search(Some(
        SemanticSearch::new(Arc::new(Broken)).with_cache_dir(None),
    ));
    let fallback: Vec<String> = b
        .search_tools("echo the message", 5)
        .await
        .into_iter()
        .map(|h| h.tool.exposed_name)
        .collect();
    assert_eq!(fallback, words);
    // The search tool's call answers as before.
    let answer = b
        .call(
            toolwright_mcp_bridge::SEARCH_TOOL,
            json!({"query": "echo the message"}),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(answer["tools"][0]["name"], json!(words[0]), "{answer}");
    b.stop("misb").await.unwrap();
}

#[tokio::test]
async fn m1_list_revision_holds_until_the_catalog_changes() {
    let b = started().await;
    let before = b.list().await.len();
    let r1 = b
        .list_revision()
        .expect("a revision once the catalog is built");
    assert_eq!(b.list_revision(), Some(r1), "nothing changed");
    add_tool(&b, "weather").await;
    let r2 = b.list_revision().expect("the catalog was just built again");
    assert_ne!(r1, r2);
    assert_eq!(b.list().await.len(), before + 1);
    b.stop("misb").await.unwrap();
    // A stopped service changes the catalog: no stale revision.
    assert_ne!(b.list_revision(), Some(r2));
}

/// What a turn shows is built once per catalog and search settings (not on every request,
/// which made a run over 360 tools hundreds of times the bare loop), so it must follow every
/// change of either: a service's new trigger keyword, a tool a `list_changed` added, new search
/// settings, a stopped service.
#[tokio::test]
async fn m3_a_turns_view_follows_the_keywords_the_catalog_and_the_search_settings() {
    use toolwright_tool_system::TurnSections;
    let b = started().await;
    let section = |text: &'static str| {
        let b = b.clone();
        async move {
            let s: String = b.sections(text).await.into_iter().map(|(_, t)| t).collect();
            s
        }
    };
    let plain = "what is the forecast for tomorrow";
    assert_eq!(
        section(plain).await,
        "",
        "no keyword, a small catalog: M3 shows nothing"
    );
    assert!(
        b.advertised(&toolwright_core::TurnInfo::new(plain))
            .await
            .is_empty()
    );

    b.update(
        "misb",
        toolwright_mcp_bridge::ServiceUpdate::default().trigger_keywords(["forecast"]),
    )
    .await
    .unwrap();
    let listed = section(plain).await;
    assert!(listed.contains("misb__echo"), "{listed}");
    assert!(!listed.contains("misb__weather"), "{listed}");

    add_tool(&b, "weather").await;
    let listed = section(plain).await;
    assert!(listed.contains("misb__weather"), "{listed}");
    let explicit = section("please use misb__weather now").await;
    assert!(explicit.contains("misb__weather"), "{explicit}");

    b.set_tool_search(toolwright_mcp_bridge::ToolSearchConfig::default().with_budget_tokens(0));
    let searching = section(plain).await;
    assert!(
        searching.contains(toolwright_mcp_bridge::SEARCH_TOOL),
        "{searching}"
    );
    assert!(!searching.contains("misb__echo"), "{searching}");
    let offered: Vec<String> = b
        .advertised(&toolwright_core::TurnInfo::new(plain))
        .await
        .into_iter()
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(
        offered,
        [
            toolwright_mcp_bridge::SEARCH_TOOL,
            toolwright_mcp_bridge::DESCRIBE_TOOL
        ]
    );
    b.set_tool_search(toolwright_mcp_bridge::ToolSearchConfig::default());
    assert!(section(plain).await.contains("misb__weather"));

    b.stop("misb").await.unwrap();
    let stopped = section("please use misb__weather now").await;
    assert!(!stopped.contains("- misb__weather"), "{stopped}");
    assert!(
        b.advertised(&toolwright_core::TurnInfo::new(plain))
            .await
            .is_empty()
    );
}
