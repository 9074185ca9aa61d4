//! What a server offers besides tools, through the bridge, from a real server: npm's
//! server-everything (stdio) lists and serves resources, resource templates, prompts with
//! arguments, and completions. A server that offers only tools is never asked for the others.
//! Fails, never skips, when server-everything is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;

use serde_json::Value;
use toolwright_core::{Message, Part};
use toolwright_mcp_bridge::{BridgeError, CompletionOf, McpBridge};

async fn everything() -> McpBridge {
    common::init_tracing();
    let bridge = McpBridge::new();
    bridge.register(common::everything("everything")).unwrap();
    bridge.start("everything").await.unwrap();
    bridge
}

#[tokio::test]
async fn a_servers_resources_are_listed_and_read_as_parts() {
    let bridge = everything().await;
    let resources = bridge.resources("everything").await.unwrap();
    let doc = resources
        .iter()
        .find(|r| r.uri == "demo://resource/static/document/features.md")
        .unwrap_or_else(|| panic!("{resources:#?}"));
    assert_eq!(doc.service, "everything");
    assert_eq!(doc.mime_type.as_deref(), Some("text/markdown"));

    let parts = bridge.read_resource("everything", &doc.uri).await.unwrap();
    let on_disk = std::fs::read_to_string(
        std::path::Path::new(&common::everything_entry())
            .parent()
            .unwrap()
            .join("docs/features.md"),
    )
    .unwrap();
    match parts.as_slice() {
        [Part::Text { text }] => assert_eq!(text, &on_disk),
        other => panic!("{other:?}"),
    }

    let templates = bridge.resource_templates("everything").await.unwrap();
    let uris: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert!(
        uris.contains(&"demo://resource/dynamic/blob/{resourceId}"),
        "{uris:?}"
    );
    // A resource made from the blob template comes back as bytes, named by its URI.
    let uri = "demo://resource/dynamic/blob/3";
    let parts = bridge.read_resource("everything", uri).await.unwrap();
    let media = parts
        .iter()
        .find_map(|p| match p {
            Part::File(m) | Part::Image(m) | Part::Audio(m) => Some(m),
            Part::Text { .. } => None,
            _ => None,
        })
        .unwrap_or_else(|| panic!("no binary part: {parts:?}"));
    assert!(media.size() > 0, "{parts:?}");

    let err = bridge
        .read_resource("everything", "demo://resource/none/such")
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            BridgeError::Request {
                method: "resources/read",
                ..
            }
        ),
        "{err:?}"
    );
    bridge.stop("everything").await.unwrap();
}

#[tokio::test]
async fn a_prompt_is_listed_with_its_arguments_and_got_as_messages() {
    let bridge = everything().await;
    let prompts = bridge.prompts("everything").await.unwrap();
    let args = prompts
        .iter()
        .find(|p| p.name == "args-prompt")
        .unwrap_or_else(|| panic!("{prompts:#?}"));
    let shape: Vec<(&str, bool)> = args
        .arguments
        .iter()
        .map(|a| (a.name.as_str(), a.required))
        .collect();
    assert_eq!(shape, [("city", true), ("state", false)]);

    let filled = BTreeMap::from([
        ("city".to_owned(), "Paris".to_owned()),
        ("state".to_owned(), "Texas".to_owned()),
    ]);
    let messages = bridge
        .get_prompt("everything", "args-prompt", &filled)
        .await
        .unwrap();
    assert_eq!(messages, [Message::user("What's weather in Paris, Texas?")]);

    // Without its required argument the server refuses, and says why.
    let err = bridge
        .get_prompt("everything", "args-prompt", &BTreeMap::new())
        .await
        .unwrap_err();
    match &err {
        BridgeError::Request {
            method: "prompts/get",
            reason,
            ..
        } => assert!(reason.contains("city"), "{reason}"),
        other => panic!("{other:?}"),
    }
    bridge.stop("everything").await.unwrap();
}

#[tokio::test]
async fn a_prompts_argument_is_completed_from_what_was_typed() {
    let bridge = everything().await;
    let values = bridge
        .complete(
            "everything",
            CompletionOf::Prompt("completable-prompt"),
            "department",
            "S",
        )
        .await
        .unwrap();
    assert_eq!(values, ["Sales", "Support"]);
    bridge.stop("everything").await.unwrap();
}

/// The hand-written server offers tools only: asking it for resources, prompts or completions
/// is a typed error that names what is missing, and none of those requests reaches it.
#[tokio::test]
async fn a_server_offering_only_tools_is_never_asked_for_the_rest() {
    common::init_tracing();
    let bridge = McpBridge::new();
    bridge.register(common::own("plain", &["--plain"])).unwrap();
    bridge.start("plain").await.unwrap();
    for (err, feature) in [
        (bridge.resources("plain").await.unwrap_err(), "resources"),
        (
            bridge
                .read_resource("plain", "file:///etc/passwd")
                .await
                .unwrap_err(),
            "resources",
        ),
        (bridge.prompts("plain").await.unwrap_err(), "prompts"),
        (
            bridge
                .complete("plain", CompletionOf::Prompt("p"), "a", "")
                .await
                .unwrap_err(),
            "completions",
        ),
    ] {
        match &err {
            BridgeError::NotOffered {
                service,
                feature: f,
            } => {
                assert_eq!((service.as_str(), *f), ("plain", feature));
                assert_eq!(
                    err.to_string(),
                    format!("MCP service plain does not offer {feature}")
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let seen = bridge
        .call("plain__handshake", serde_json::json!({}))
        .await
        .unwrap()
        .value;
    let seen: Value = serde_json::from_str(seen.as_str().unwrap()).unwrap();
    let methods = seen["methods"].to_string();
    assert!(
        !methods.contains("resources/") && !methods.contains("prompts/"),
        "{methods}"
    );
    assert!(matches!(
        bridge.resources("nobody").await.unwrap_err(),
        BridgeError::UnknownService(_)
    ));
    bridge.stop("plain").await.unwrap();
}
