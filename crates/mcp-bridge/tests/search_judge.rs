//! A chat model's second look at the tool search's candidates ([`SearchJudge`]), against
//! real parts: this crate's MCP test server as a process over stdio, the judge an OpenAI-
//! compatible model (model-gateway's backend) talking real HTTP to the scripted server on
//! 127.0.0.1. What is checked: what the judge is sent, that its picks lead and the other
//! candidates follow, that "none fits" reaches the searching model as "no tool matched", and
//! that a judge which errs, hangs or answers nonsense leaves the search's own order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::embedders::HashedNgrams;
use common::{init_tracing, own};
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_mcp_bridge::{
    McpBridge, SEARCH_TOOL, SearchJudge, SemanticSearch, ToolSearchConfig,
};

const QUERY: &str = "repeat my message back to me";

async fn started() -> McpBridge {
    init_tracing();
    let b = McpBridge::new();
    b.register(own("misb", &[])).unwrap();
    b.start("misb").await.unwrap();
    // By meaning too (a test-only lexical encoder), so that every tool is a candidate.
    b.set_semantic_search(Some(
        SemanticSearch::new(Arc::new(HashedNgrams)).with_cache_dir(None),
    ));
    b
}

fn judge_on(server: &ScriptedServer) -> SearchJudge {
    let model = toolwright_model_gateway::OpenAiModel::new(
        toolwright_model_gateway::OpenAiConfig::new("judge-mini").with_base_url(server.base_url()),
    )
    .unwrap();
    SearchJudge::new(Arc::new(model))
}

async fn names(b: &McpBridge, limit: usize) -> Vec<String> {
    b.search_tools(QUERY, limit)
        .await
        .into_iter()
        .map(|r| r.tool.exposed_name)
        .collect()
}

#[tokio::test]
async fn m3_a_judge_reorders_the_candidates_and_never_adds_one() {
    let b = started().await;
    let all = b.tools().await.len();
    assert!(all >= 5, "{all} tools");
    let plain = names(&b, 10).await;
    assert_eq!(plain.len(), 10, "{plain:?}");

    let server = ScriptedServer::start().await;
    b.set_search_judge(Some(judge_on(&server).with_candidates(20)));
    // The judge picks the search's last candidate, and a tool that does not exist.
    let last = plain.last().unwrap().clone();
    server.push(Reply::text(
        json!({"tools": [last, "misb__launch_missiles"]}).to_string(),
    ));
    let judged = names(&b, 5).await;

    // What the judge was sent: the request, every candidate once, a strict schema of their names.
    let body = &server.requests()[0].body;
    assert_eq!(body["model"], "judge-mini");
    assert_eq!(body["temperature"], 0.0);
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(user.starts_with(&format!("Request: {QUERY}\n")), "{user}");
    let format = &body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["strict"], true);
    let allowed: Vec<String> =
        format["json_schema"]["schema"]["properties"]["tools"]["items"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
    // Up to 20 candidates (here: every tool the search finds), in the search's order, each once.
    assert!(
        allowed.len() > plain.len() && allowed.len() <= 20,
        "{allowed:?}"
    );
    assert_eq!(&allowed[..plain.len()], &plain[..], "the search's order");
    let catalog: Vec<String> = b
        .tools()
        .await
        .iter()
        .map(|t| t.exposed_name.clone())
        .collect();
    assert!(allowed.iter().all(|n| catalog.contains(n)), "{allowed:?}");
    for name in &allowed {
        let listed = user
            .lines()
            .filter(|l| l.strip_prefix("- ").and_then(|r| r.split(':').next()) == Some(name))
            .count();
        assert_eq!(listed, 1, "{name} in {user}");
    }

    // Its pick leads; the made-up name is nowhere; the others follow in the search's order.
    assert_eq!(judged[0], last, "{judged:?}");
    assert!(!judged.iter().any(|n| n.contains("launch_missiles")));
    let rest: Vec<&String> = plain.iter().filter(|n| **n != last).take(4).collect();
    assert_eq!(judged[1..].iter().collect::<Vec<_>>(), rest);
}

#[tokio::test]
async fn m3_a_judge_that_finds_no_tool_tells_the_searching_model_so() {
    let b = started().await;
    b.set_tool_search(
        ToolSearchConfig::default()
            .with_every_turn(true)
            .with_budget_tokens(0),
    );
    let judge = ScriptedServer::start().await;
    b.set_search_judge(Some(judge_on(&judge)));
    judge.push(Reply::text(r#"{"tools": []}"#));

    // The user's composition: an agent whose model searches, over real HTTP.
    let main = ScriptedServer::start().await;
    main.push(Reply::tool_call(
        "c1",
        SEARCH_TOOL,
        &json!({"query": "turn off the living-room lights"}).to_string(),
    ));
    main.push(Reply::text("No tool can do that."));
    let agent = common::agent_over_http(&main, &b);
    let out = agent
        .run("s", "turn off the living-room lights")
        .await
        .unwrap();
    assert_eq!(out.answer, "No tool can do that.");
    let results = common::tool_results_sent(&main, 1);
    assert_eq!(results[0]["tools"], json!([]), "{results:?}");
    assert!(
        results[0]["next"]
            .as_str()
            .unwrap()
            .starts_with("No MCP tool matched \"turn off the living-room lights\""),
        "{results:?}"
    );
    assert_eq!(judge.request_count(), 1);
    let user = judge.requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(user.contains("turn off the living-room lights"), "{user}");
}

#[tokio::test]
async fn m3_a_judge_that_errs_hangs_or_rambles_leaves_the_searchs_order() {
    let b = started().await;
    let plain = names(&b, 5).await;
    let server = ScriptedServer::start().await;
    b.set_search_judge(Some(
        judge_on(&server).with_timeout(Duration::from_millis(500)),
    ));
    let replies: [(&str, Reply); 4] = [
        ("prose", Reply::text("I would use the echo tool.")),
        (
            "unknown names only",
            Reply::text(r#"{"tools": ["nope__x"]}"#),
        ),
        ("a refused request", Reply::status(400, "bad request")),
        (
            "an answer after the timeout",
            Reply::text(json!({"tools": [plain[4]]}).to_string()).latency(Duration::from_secs(30)),
        ),
    ];
    for (what, reply) in replies {
        server.push(reply);
        let started = tokio::time::Instant::now();
        assert_eq!(names(&b, 5).await, plain, "{what}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what}: the search waited for the judge"
        );
    }
    assert_eq!(server.remaining(), 0);
    // Off again: no request.
    b.set_search_judge(None);
    assert_eq!(names(&b, 5).await, plain);
    assert_eq!(server.request_count(), 4);
}

#[test]
fn the_judges_settings_are_clamped() {
    let model = toolwright_model_gateway::OpenAiModel::new(
        toolwright_model_gateway::OpenAiConfig::new("m").with_base_url("http://127.0.0.1:9/v1"),
    )
    .unwrap();
    let j = SearchJudge::new(Arc::new(model));
    assert_eq!(j.candidates(), 20);
    assert_eq!(j.timeout(), Duration::from_secs(10));
    assert_eq!(j.clone().with_candidates(0).candidates(), 1);
    assert_eq!(
        j.with_candidates(10_000).candidates(),
        toolwright_tool_search::MAX_LIMIT
    );
}
