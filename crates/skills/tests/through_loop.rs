//! 000 "调度 Skills 工具": a `<tool_action>` whose name matches a loaded skill is routed by the
//! dispatcher to the skills sandbox, and its result goes back to the model — end to end over
//! real HTTP through the tool loop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use testkit::{Reply, ScriptedServer};
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};
use toolwright_sandbox::SandboxConfig;
use toolwright_skills::SkillsProvider;
use toolwright_tool_system::{Agent, ProtocolKind};

#[tokio::test]
async fn s1_t3_tag_call_to_a_skill_is_dispatched_to_the_sandbox_and_answered() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text(
        "我来调用技能。<tool_action name=\"echo\"><text value=\"你好, sandbox\" /></tool_action>",
    ));
    server.push(Reply::text("The skill echoed your text."));
    let model = OpenAiModel::new(OpenAiConfig::new("m").with_base_url(server.base_url())).unwrap();
    let root = crate_dir().join("tests/fixtures/skills");
    let (provider, errors) = SkillsProvider::load(
        root,
        SandboxConfig::default().with_timeout(Duration::from_secs(10)),
    );
    // Only restrictions (the hostile `greedy` fixture asks for ungranted things); nothing refused.
    assert!(
        errors
            .iter()
            .all(|e| e.outcome == toolwright_skills::LoadOutcome::Restricted),
        "{errors:?}"
    );
    let agent = Agent::builder(model)
        .provider(Arc::new(provider))
        .protocol(ProtocolKind::Tag)
        .build()
        .unwrap();
    let out = agent.run("s1", "Please echo 你好, sandbox").await.unwrap();
    assert_eq!(out.answer, "The skill echoed your text.");

    // The second request carries the sandbox's result as a tool message.
    let second = &server.requests()[1].body["messages"];
    let tool_msg = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message in {second}"));
    let result: Value = serde_json::from_str(tool_msg["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["echo"]["text"], "你好, sandbox");
    assert_ne!(result["uid"], 0, "ran in the sandbox, not as the agent");
    // The first request's system prompt described the skill as a tool.
    assert!(
        server.requests()[0].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("echo")
    );
}

#[tokio::test]
async fn s2_t4_a_hostile_skill_gives_the_model_an_error_and_the_loop_goes_on() {
    let server = ScriptedServer::start().await;
    server.push(Reply::text("<tool_action name=\"firehose\"></tool_action>"));
    server.push(Reply::text("That skill failed; sorry."));
    let model = OpenAiModel::new(OpenAiConfig::new("m").with_base_url(server.base_url())).unwrap();
    let root = crate_dir().join("tests/fixtures/skills");
    let (provider, _) = SkillsProvider::load(root, SandboxConfig::default());
    let agent = Agent::builder(model)
        .provider(Arc::new(provider))
        .protocol(ProtocolKind::Tag)
        .build()
        .unwrap();
    let out = agent.run("s2", "flood me").await.unwrap();
    assert_eq!(out.answer, "That skill failed; sorry.");
    let second = server.requests()[1].body["messages"].to_string();
    assert!(second.contains("output exceeded 1 MiB"), "{second}");
}

/// This crate's directory, read at run time: a build reused from another checkout (a shared
/// target dir) would otherwise look for fixtures in that checkout.
fn crate_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}
