//! Against a real MCP server that no one on this team wrote: the official
//! `@modelcontextprotocol/server-everything` from npm, over stdio with node. Fails (never
//! skips) when it is not installed: run `cargo xtask test`, which installs it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{assert_group_gone, everything, init_tracing};
use serde_json::json;
use toolwright_core::ToolErrorKind;
use toolwright_mcp_bridge::IntentChain;
use toolwright_mcp_bridge::{McpBridge, ServiceStatus};

async fn bridge() -> McpBridge {
    init_tracing();
    let b = McpBridge::new();
    b.register(everything("everything").with_trigger_keywords(["回显", "echo back"]))
        .unwrap();
    b.start("everything").await.unwrap();
    b
}

#[tokio::test]
async fn m1_server_everything_initialize_and_list_tools() {
    let b = bridge().await;
    assert_eq!(b.status("everything").unwrap(), ServiceStatus::Running);
    let tools = b.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    for expected in ["echo", "get-sum", "get-env", "get-structured-content"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let sum = tools.iter().find(|t| t.name == "get-sum").unwrap();
    assert_eq!(sum.exposed_name, "everything__get-sum");
    assert_eq!(sum.input_schema["type"], "object");
    assert!(sum.input_schema["properties"]["a"].is_object());
    // Every schema is an object schema with properties (get-env has no parameters).
    for t in &tools {
        assert!(
            t.input_schema["properties"].is_object(),
            "{}: {}",
            t.name,
            t.input_schema
        );
    }
    let pid = b.pid("everything").unwrap();
    b.stop("everything").await.unwrap();
    assert_group_gone(pid).await;
}

#[tokio::test]
async fn m4_server_everything_echo_and_structured_arguments() {
    let b = bridge().await;
    let echo = b
        .call("everything__echo", json!({"message": "你好 MCP"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(echo, json!("Echo: 你好 MCP"));
    let sum = b
        .call("everything__get-sum", json!({"a": 2, "b": 40}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(sum.as_str().unwrap().contains("42"), "{sum}");
    // Structured content comes back as JSON, not text.
    let weather = b
        .call(
            "everything__get-structured-content",
            json!({"location": "New York"}),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(weather.is_object(), "{weather}");
    assert!(weather.get("temperature").is_some(), "{weather}");
    // The server validates its arguments: a wrong type is an error for the model, not a crash.
    let bad = b
        .call("everything__get-sum", json!({"a": "two", "b": 40}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert!(
        matches!(
            bad.kind,
            ToolErrorKind::InvalidArguments | ToolErrorKind::Failed
        ),
        "{bad:?}"
    );
    assert_eq!(b.status("everything").unwrap(), ServiceStatus::Running);
    let pid = b.pid("everything").unwrap();
    b.stop("everything").await.unwrap();
    assert_group_gone(pid).await;
}

#[tokio::test]
async fn m4_server_everything_gets_no_agent_secrets() {
    let b = bridge().await;
    let env = b
        .call("everything__get-env", json!({}))
        .await
        .map(|o| o.value)
        .unwrap();
    let env: serde_json::Value = serde_json::from_str(env.as_str().unwrap()).unwrap();
    let keys: Vec<&String> = env.as_object().unwrap().keys().collect();
    assert!(env.get("PATH").is_some());
    for k in &keys {
        assert!(
            toolwright_mcp_bridge::INHERITED_ENV.contains(&k.as_str()),
            "the server got {k} from the agent: {keys:?}"
        );
    }
    let pid = b.pid("everything").unwrap();
    b.stop("everything").await.unwrap();
    assert_group_gone(pid).await;
}

#[tokio::test]
async fn m3_server_everything_level1_section() {
    let b = bridge().await;
    let chain = IntentChain::standard(b.recognizer().await);
    let section = b
        .prompt_section(&chain.recognize("用 echo 工具 说你好"))
        .await
        .unwrap();
    assert!(section.contains("- everything__echo: "), "{section}");
    assert!(
        !section.contains("get-sum") && !section.contains("\"properties\""),
        "{section}"
    );
    let by_keyword = b
        .prompt_section(&chain.recognize("请回显这句话"))
        .await
        .unwrap();
    assert!(by_keyword.contains("everything__get-sum"), "{by_keyword}");
    let pid = b.pid("everything").unwrap();
    b.stop("everything").await.unwrap();
    assert_group_gone(pid).await;
}

/// The dispatcher checks get-sum's arguments against the server's own schema before the call;
/// the bridge words the error with that full schema. Through a real run: the scripted OpenAI
/// server, the `Agent` loop, server-everything over stdio.
#[tokio::test]
async fn m4_server_everything_invalid_arguments_under_the_agent_carry_the_schema() {
    let b = bridge().await;
    let schema = b
        .tools()
        .await
        .into_iter()
        .find(|t| t.name == "get-sum")
        .unwrap()
        .input_schema;
    let server = testkit::ScriptedServer::start().await;
    server.push(testkit::Reply::tool_call(
        "call_1",
        "everything__get-sum",
        r#"{"a": "two", "b": 40}"#,
    ));
    server.push(testkit::Reply::text("Which numbers?"));
    let agent = common::agent_over_http(&server, &b);
    agent.run("s", "调用 get-sum 算 two 加 40").await.unwrap();
    let sent = common::tool_results_sent(&server, 1);
    assert_eq!(sent.len(), 1);
    let result = &sent[0];
    assert_eq!(result["success"], false);
    let e = result["error"].as_str().unwrap();
    assert!(
        e.starts_with("Invalid arguments for everything__get-sum: ") && e.contains("/a"),
        "{e}"
    );
    assert!(e.contains(&schema.to_string()), "the full schema: {e}");
    let pid = b.pid("everything").unwrap();
    b.stop("everything").await.unwrap();
    assert_group_gone(pid).await;
}

/// server-everything's image tool through a real run: the image arrives as a PNG part of
/// the tool's result and reaches the next Chat Completions request as an image, in the user
/// message that follows the tool results and names the call (that wire's tool messages hold
/// text only).
#[tokio::test]
async fn a_real_servers_image_reaches_the_model_as_an_image() {
    let b = bridge().await;
    let out = b
        .call("everything__get-tiny-image", json!({}))
        .await
        .unwrap();
    assert!(
        out.value.as_str().unwrap().contains("Here's the image"),
        "{:?}",
        out.value
    );
    let [toolwright_core::Part::Image(image)] = out.parts.as_slice() else {
        panic!("one image part: {:?}", out.parts)
    };
    assert_eq!(image.media_type, "image/png");
    assert_eq!(image.dimensions(), Some((20, 20)));

    let server = testkit::ScriptedServer::start().await;
    server.push(testkit::Reply::tool_call(
        "call_1",
        "everything__get-tiny-image",
        "{}",
    ));
    server.push(testkit::Reply::text("It is the MCP logo."));
    let agent = common::agent_over_http(&server, &b);
    agent
        .run("s", "echo back the tiny image tool's picture")
        .await
        .unwrap();
    let messages = server.requests()[1].body["messages"].clone();
    let messages = messages.as_array().unwrap();
    let tool_at = messages.iter().position(|m| m["role"] == "tool").unwrap();
    let after = &messages[tool_at + 1];
    assert_eq!(after["role"], "user", "{after}");
    assert!(
        after["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`call_1`"),
        "{after}"
    );
    let url = after["content"][1]["image_url"]["url"].as_str().unwrap();
    assert!(
        url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{url}"
    );
    let pid = b.pid("everything").unwrap();
    b.stop("everything").await.unwrap();
    assert_group_gone(pid).await;
}
