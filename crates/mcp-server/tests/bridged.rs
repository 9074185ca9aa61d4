//! A bridged MCP server's tools served on: `toolwright-mcp` over HTTP whose config names an
//! `mcpServers` file, whose one server is `toolwright-mcp` itself over stdio with the demo
//! tools. The bridge's own `require_approval` holds a call, and the outer client is asked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::BufRead;

use common::{Answer, Person, connect_http, text};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().unwrap().clone())
}

/// Stops the outer server on drop.
struct Outer(std::process::Child);

impl Drop for Outer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_bridged_servers_tools_are_served_with_its_approval_rules() {
    let bin = env!("CARGO_BIN_EXE_toolwright-mcp");
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("inner.json");
    std::fs::write(&inner, json!({"tools": ["demo"]}).to_string()).unwrap();
    std::fs::write(
        dir.path().join("servers.json"),
        json!({"mcpServers": {"demo": {
            "command": bin,
            "args": ["serve", "--config", inner, "--stdio"],
            "require_approval": {"always": ["transfer"]}
        }}})
        .to_string(),
    )
    .unwrap();
    let outer = dir.path().join("outer.json");
    std::fs::write(
        &outer,
        json!({"mcpConfig": "servers.json", "http": {"listen": "127.0.0.1:0"}}).to_string(),
    )
    .unwrap();
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--config"])
        .arg(&outer)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _outer = Outer(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();

    let person = Person::new(Answer::Approve);
    let client = connect_http(&url, person.clone()).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    let echo = names
        .iter()
        .find(|n| n.ends_with("echo"))
        .unwrap_or_else(|| panic!("{names:?}"));
    let transfer = names
        .iter()
        .find(|n| n.ends_with("transfer"))
        .unwrap_or_else(|| panic!("{names:?}"));

    let r = client
        .call_tool(call(echo, json!({"text": "through the bridge"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "through the bridge", "{r:?}");
    assert_eq!(person.questions(), 0);

    let r = client
        .call_tool(call(transfer, json!({"to": "ann", "amount": 5})))
        .await
        .unwrap();
    assert_eq!(
        person.questions(),
        1,
        "the bridge's require_approval holds the call"
    );
    assert!(text(&r).contains("demo-0001"), "{}", text(&r));
}
