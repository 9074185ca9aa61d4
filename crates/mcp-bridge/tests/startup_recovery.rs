//! items 2 and 3: startup off the critical path (background start, a bounded wait only
//! for a turn that needs the service, `autostart: false`, `disabled`, `enabled_tools` /
//! `disabled_tools`) and recovery (a crashed server restarted on the next call that needs it,
//! with its process group reaped), against real server processes and a real HTTP model server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{SERVER, assert_group_gone, everything, live_in_group, own};
use serde_json::json;
use testkit::{Reply, ScriptedServer};
use toolwright_mcp_bridge::{BridgeError, McpBridge, ServiceConfig, ServiceStatus};
use toolwright_tool_system::Agent;

fn agent(server: &ScriptedServer, bridge: &McpBridge) -> Agent {
    let model = toolwright_model_gateway::OpenAiModel::new(
        toolwright_model_gateway::OpenAiConfig::new("gpt-4o").with_base_url(server.base_url()),
    )
    .unwrap();
    Agent::builder(model)
        .provider(Arc::new(bridge.clone()))
        .turn_sections(Arc::new(bridge.clone()))
        .system_prompt("You are helpful.")
        .build()
        .unwrap()
}

/// The system prompt of recorded request `i`.
fn system_of(server: &ScriptedServer, i: usize) -> String {
    server.requests()[i].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A server that hangs for 60 s at start: a turn that does not need it completes while it is
/// still starting (it never waited for it); a turn that needs it gets the friendly message once
/// its startup timeout has passed, and the conversation goes on; nothing of the server is left.
#[tokio::test]
async fn m4_a_server_hanging_at_start_delays_no_normal_turn_and_an_mcp_turn_only_by_its_startup_timeout()
 {
    let bridge = McpBridge::new();
    bridge
        .register(
            // 5 s: far more than a scripted turn takes, even on a loaded 2-core machine, so the
            // normal turn below ends while the server is still starting.
            own("slow", &["--startup-delay-ms", "60000"])
                .with_startup_timeout(Duration::from_secs(5))
                .with_trigger_keywords(["slowthing"]),
        )
        .unwrap();
    assert_eq!(bridge.start_in_background().unwrap(), vec!["slow"]);
    assert_eq!(bridge.status("slow").unwrap(), ServiceStatus::Starting);

    let server = ScriptedServer::start().await;
    let agent = agent(&server, &bridge);
    server.push(Reply::text("Hello there."));
    let out = agent.run("s", "hi, how are you?").await.unwrap();
    assert_eq!(out.answer, "Hello there.");
    // The turn is over and the server is still starting: the turn did not wait for it.
    assert_eq!(bridge.status("slow").unwrap(), ServiceStatus::Starting);
    assert!(!system_of(&server, 0).contains("MCP"));

    // A turn that needs it waits for it, at most its startup timeout, then goes on with the
    // friendly message in place of the tools.
    server.push(Reply::text("The slow service is unavailable right now."));
    let out = agent
        .run("s", "use slowthing to look something up")
        .await
        .unwrap();
    assert_eq!(out.answer, "The slow service is unavailable right now.");
    let system = system_of(&server, 1);
    assert!(
        system.contains("no running MCP service offers it right now"),
        "{system}"
    );
    let ServiceStatus::Error(reason) = bridge.status("slow").unwrap() else {
        panic!("{:?}", bridge.status("slow"));
    };
    assert!(reason.contains("within 5000 ms"), "{reason}");
    // A call of one of its tools gets the unavailable message (not a hang, not a panic).
    let e = bridge
        .call("slow__echo", json!({"text": "x"}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert!(e.message.contains("not running"), "{}", e.message);
    // Nothing of the hung server is left running.
    let pids: Vec<i32> = live_children_running(&SERVER);
    assert!(pids.is_empty(), "left running: {pids:?}");
}

/// Processes whose command line starts with `program`, from /proc.
fn live_children_running(program: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let first = cmd.split(|b| *b == 0).next().unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
        if first == program.as_bytes() && !zombie && cmd_has(&cmd, "60000") {
            out.push(pid);
        }
    }
    out
}

fn cmd_has(cmd: &[u8], word: &str) -> bool {
    cmd.split(|b| *b == 0).any(|a| a == word.as_bytes())
}

/// server-everything over stdio is killed (SIGKILL to its whole group) between two calls: the
/// second call restarts it and succeeds, and no process of the first one is left.
#[tokio::test]
async fn m4_a_crashed_stdio_server_is_restarted_by_the_next_call_and_its_group_reaped() {
    let bridge = McpBridge::new();
    bridge.register(everything("everything")).unwrap();
    bridge.start("everything").await.unwrap();
    let first = bridge
        .call("everything__echo", json!({"message": "one"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(first.to_string().contains("one"), "{first}");
    let pgid = bridge.pid("everything").unwrap();
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // The monitor notices the exit and reaps the group.
    for _ in 0..100 {
        if matches!(
            bridge.status("everything").unwrap(),
            ServiceStatus::Error(_)
        ) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        matches!(
            bridge.status("everything").unwrap(),
            ServiceStatus::Error(_)
        ),
        "{:?}",
        bridge.status("everything")
    );
    assert_group_gone(pgid).await;

    let second = bridge
        .call("everything__echo", json!({"message": "two"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(second.to_string().contains("two"), "{second}");
    assert_eq!(bridge.status("everything").unwrap(), ServiceStatus::Running);
    let new_pgid = bridge.pid("everything").unwrap();
    assert_ne!(new_pgid, pgid);
    assert!(live_in_group(pgid).is_empty());
    bridge.stop("everything").await.unwrap();
    assert_group_gone(new_pgid).await;
}

/// A server that crashes on every start is tried a bounded number of times with backoff, then
/// left in `error` with its last error until the operator starts it.
#[tokio::test]
async fn m4_restarts_are_bounded_and_back_off() {
    let bridge = McpBridge::new();
    bridge
        .register(
            ServiceConfig::new("broken", "/nonexistent/mcp-server")
                .with_startup_timeout(Duration::from_secs(2)),
        )
        .unwrap();
    assert!(bridge.start("broken").await.is_err());
    // Within the backoff window a call does not start it again: it answers at once.
    let e = bridge
        .call("broken__x", json!({}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert!(e.message.contains("not running"), "{}", e.message);
    let ServiceStatus::Error(reason) = bridge.status("broken").unwrap() else {
        panic!()
    };
    assert!(reason.contains("cannot run"), "{reason}");
}

/// `autostart: false` starts on first use; `disabled: true` never starts (kept in the config);
/// `enabled_tools` / `disabled_tools` filter what is offered.
#[tokio::test]
async fn m4_autostart_disabled_and_tool_filters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    let entry = common::everything_entry();
    std::fs::write(
        &path,
        json!({"mcpServers": {
            "lazy": {"command": "node", "args": [entry, "stdio"], "autostart": false,
                     "enabled_tools": ["echo", "get-sum"], "startup_timeout_sec": 30},
            "off": {"command": "node", "args": [entry, "stdio"], "disabled": true},
            "remote": {"url": "http://127.0.0.1:9/mcp", "autostart": false, "my_key": 1}
        }})
        .to_string(),
    )
    .unwrap();
    let bridge = McpBridge::with_config_file(&path).unwrap();
    // Neither is started with the bridge.
    assert!(bridge.start_in_background().unwrap().is_empty());
    assert_eq!(bridge.status("lazy").unwrap(), ServiceStatus::Stopped);
    assert!(matches!(
        bridge.start("off").await,
        Err(BridgeError::Disabled(_))
    ));
    assert!(bridge.tools().await.is_empty());
    // The first call that needs `lazy` starts it.
    let out = bridge
        .call("lazy__echo", json!({"message": "hi"}))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(out.to_string().contains("hi"), "{out}");
    let names: Vec<String> = bridge
        .tools()
        .await
        .into_iter()
        .map(|t| t.exposed_name)
        .collect();
    assert_eq!(names, ["lazy__echo", "lazy__get-sum"]);
    let e = bridge
        .call("lazy__get-env", json!({}))
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert!(
        e.message.contains("not found") || e.message.contains("Tool not found"),
        "{}",
        e.message
    );
    assert_eq!(bridge.status("off").unwrap(), ServiceStatus::Stopped);
    bridge.stop_all().await;
    // Saved back: both entries and the url entry as they were.
    bridge.register(ServiceConfig::new("new", "x")).unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["mcpServers"]["off"]["disabled"], true);
    assert_eq!(saved["mcpServers"]["lazy"]["autostart"], false);
    assert_eq!(saved["mcpServers"]["lazy"]["startup_timeout_sec"], 30);
    assert_eq!(saved["mcpServers"]["remote"]["my_key"], 1);
}
