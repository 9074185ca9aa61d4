//! Resources, prompts, completions, subscriptions and tools that talk back to the client
//! (log lines, progress, sampling, elicitation), driven by rmcp's client over 127.0.0.1 HTTP,
//! stateful and stateless.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, deprecated)]

mod common;

use common::RecordingClient;

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams, LoggingLevel,
    NumberOrString, ProgressToken, ReadResourceRequestParams, Reference, RequestMetaObject,
    ResourceContents, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use toolwright_mcp_server::demo::{ConformancePrompts, ConformanceResources};
use toolwright_mcp_server::rmcp_model::Resource;
use toolwright_mcp_server::{HttpOptions, McpServer, OfferError, Resources};
use toolwright_tool_system::Dispatcher;

fn conformance_server() -> McpServer {
    let d = Dispatcher::from_registry(toolwright_mcp_server::demo::conformance_tools().unwrap());
    McpServer::builder(Arc::new(d))
        .resources(ConformanceResources)
        .prompts(ConformancePrompts)
        .max_subscriptions(3)
        .build()
}

async fn serve(server: &McpServer, stateful: bool) -> String {
    let router = server
        .router(HttpOptions::default().stateful(stateful))
        .unwrap();
    format!("http://{}/mcp", common::serve(router).await)
}

async fn connect(
    url: &str,
    client: RecordingClient,
) -> RunningService<RoleClient, RecordingClient> {
    common::tls();
    client
        .serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .expect("connect")
}

fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().unwrap().clone())
}

fn read(uri: &str) -> ReadResourceRequestParams {
    ReadResourceRequestParams::new(uri)
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn code(e: rmcp::ServiceError) -> i32 {
    match e {
        rmcp::ServiceError::McpError(e) => e.code.0,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_client_lists_and_reads_resources_and_templates() {
    let server = conformance_server();
    let client = connect(&serve(&server, true).await, RecordingClient::default()).await;
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.resources.unwrap().subscribe, Some(true));
    assert!(caps.prompts.is_some() && caps.completions.is_some() && caps.logging.is_some());

    let listed = client.list_all_resources().await.unwrap();
    let uris: Vec<_> = listed.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&"test://static-text") && uris.contains(&"test://static-binary"));
    let templates = client.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "test://template/{id}/data");

    let text = client
        .read_resource(read("test://static-text"))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents {
        text, mime_type, ..
    } = &text.contents[0]
    else {
        panic!("expected text")
    };
    assert_eq!(text, "This is the content of the static text resource.");
    assert_eq!(mime_type.as_deref(), Some("text/plain"));
    let png = client
        .read_resource(read("test://static-binary"))
        .await
        .unwrap();
    let ResourceContents::BlobResourceContents { blob, .. } = &png.contents[0] else {
        panic!("expected a blob")
    };
    assert!(blob.starts_with("iVBORw0KGgo"));
    let data = client
        .read_resource(read("test://template/42/data"))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &data.contents[0] else {
        panic!("expected text")
    };
    assert_eq!(serde_json::from_str::<Value>(text).unwrap()["id"], "42");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_unknown_uri_is_a_resource_not_found_error() {
    let server = conformance_server();
    let client = connect(&serve(&server, false).await, RecordingClient::default()).await;
    let e = client
        .read_resource(read("test://nowhere"))
        .await
        .unwrap_err();
    assert_eq!(code(e), -32002);
    let e = client
        .read_resource(read("test://template/1/2/data"))
        .await
        .unwrap_err();
    assert_eq!(code(e), -32002);
}

#[tokio::test]
async fn prompts_are_listed_and_filled_with_their_arguments() {
    let server = conformance_server();
    let client = connect(&serve(&server, false).await, RecordingClient::default()).await;
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts.len(), 4);
    let filled = client
        .get_prompt(
            GetPromptRequestParams::new("test_prompt_with_arguments")
                .with_arguments(args(json!({"arg1": "hello", "arg2": "world"}))),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&filled.messages).unwrap();
    assert_eq!(
        v[0]["content"]["text"],
        "Prompt with arguments: arg1='hello', arg2='world'"
    );
    let embedded = client
        .get_prompt(
            GetPromptRequestParams::new("test_prompt_with_embedded_resource")
                .with_arguments(args(json!({"resourceUri": "test://x"}))),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&embedded.messages).unwrap();
    assert_eq!(v[0]["content"]["type"], "resource");
    assert_eq!(v[0]["content"]["resource"]["uri"], "test://x");
    let image = client
        .get_prompt(GetPromptRequestParams::new("test_prompt_with_image"))
        .await
        .unwrap();
    let v = serde_json::to_value(&image.messages).unwrap();
    assert_eq!(v[0]["content"]["type"], "image");

    // A missing argument and an unknown prompt are invalid params.
    let e = client
        .get_prompt(
            GetPromptRequestParams::new("test_prompt_with_arguments")
                .with_arguments(args(json!({"arg1": "only one"}))),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), -32602);
    let e = client
        .get_prompt(GetPromptRequestParams::new("no_such_prompt"))
        .await
        .unwrap_err();
    assert_eq!(code(e), -32602);
}

#[tokio::test]
async fn arguments_complete_and_an_unknown_argument_is_refused() {
    let server = conformance_server();
    let client = connect(&serve(&server, false).await, RecordingClient::default()).await;
    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("test_prompt_with_arguments"),
            rmcp::model::ArgumentInfo::new("arg1", "par"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, ["paris", "park", "party"]);
    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_resource("test://template/{id}/data"),
            rmcp::model::ArgumentInfo::new("id", "4"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, ["456"]);
    for (r, arg) in [
        (Reference::for_prompt("test_prompt_with_arguments"), "arg9"),
        (Reference::for_resource("test://template/{id}/data"), "name"),
        (Reference::for_prompt("no_such_prompt"), "arg1"),
    ] {
        let e = client
            .complete(CompleteRequestParams::new(
                r,
                rmcp::model::ArgumentInfo::new(arg, ""),
            ))
            .await
            .unwrap_err();
        assert_eq!(code(e), -32602, "{arg}");
    }
}

#[tokio::test]
async fn a_subscriber_is_told_of_updates_until_it_unsubscribes() {
    let server = conformance_server();
    let watcher = RecordingClient::default();
    let client = connect(&serve(&server, true).await, watcher.clone()).await;
    client
        .subscribe(SubscribeRequestParams::new("test://watched-resource"))
        .await
        .unwrap();
    assert_eq!(
        server
            .notify_resource_updated("test://watched-resource")
            .await,
        1
    );
    assert_eq!(
        server.notify_resource_updated("test://static-text").await,
        0
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        *watcher.updated.lock().unwrap(),
        ["test://watched-resource"]
    );
    client
        .unsubscribe(UnsubscribeRequestParams::new("test://watched-resource"))
        .await
        .unwrap();
    assert_eq!(
        server
            .notify_resource_updated("test://watched-resource")
            .await,
        0
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_subscription_storm_is_bounded_per_session() {
    let server = conformance_server(); // at most 3 per session
    let client = connect(&serve(&server, true).await, RecordingClient::default()).await;
    for i in 0..3 {
        let uri = format!("test://template/{i}/data");
        client
            .subscribe(SubscribeRequestParams::new(uri.clone()))
            .await
            .unwrap();
        // the same one again is no new subscription
        client
            .subscribe(SubscribeRequestParams::new(uri))
            .await
            .unwrap();
    }
    let e = client
        .subscribe(SubscribeRequestParams::new("test://template/3/data"))
        .await
        .unwrap_err();
    assert_eq!(code(e), -32600);
    // an unknown URI cannot be watched
    let e = client
        .subscribe(SubscribeRequestParams::new("test://nowhere"))
        .await
        .unwrap_err();
    assert_eq!(code(e), -32002);
    // another session has its own allowance, and a closed session is forgotten
    let other = connect(&serve(&server, true).await, RecordingClient::default()).await;
    other
        .subscribe(SubscribeRequestParams::new("test://template/0/data"))
        .await
        .unwrap();
    assert_eq!(
        server
            .notify_resource_updated("test://template/0/data")
            .await,
        2
    );
    client.cancel().await.unwrap();
    other.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        server
            .notify_resource_updated("test://template/0/data")
            .await,
        0
    );
}

#[tokio::test]
async fn a_stateless_server_refuses_a_subscription_and_says_how_to_get_one() {
    let server = conformance_server();
    let client = connect(&serve(&server, false).await, RecordingClient::default()).await;
    let e = client
        .subscribe(SubscribeRequestParams::new("test://watched-resource"))
        .await
        .unwrap_err();
    let rmcp::ServiceError::McpError(e) = e else {
        panic!("expected a JSON-RPC error")
    };
    assert!(e.message.contains("stateful"), "{}", e.message);
}

/// Says it is 1 GiB; or, when `lies`, claims nothing and answers 4 KiB.
struct Huge {
    lies: bool,
}

#[async_trait::async_trait]
impl Resources for Huge {
    async fn list(&self) -> Vec<Resource> {
        vec![Resource::new("big://file", "file").with_size(1 << 30)]
    }
    async fn read(&self, uri: &str, max_bytes: usize) -> Result<Vec<ResourceContents>, OfferError> {
        if !self.lies && (1u64 << 30) > max_bytes as u64 {
            return Err(OfferError::TooLarge {
                uri: uri.into(),
                size: 1 << 30,
                limit: max_bytes,
            });
        }
        Ok(vec![ResourceContents::text("x".repeat(4096), uri)])
    }
}

#[tokio::test]
async fn a_resource_larger_than_the_limit_is_refused_with_a_typed_error() {
    for lies in [false, true] {
        let d = Dispatcher::new();
        let server = McpServer::builder(Arc::new(d))
            .resources(Huge { lies })
            .max_resource_bytes(1024)
            .build();
        let client = connect(&serve(&server, false).await, RecordingClient::default()).await;
        let e = client.read_resource(read("big://file")).await.unwrap_err();
        let rmcp::ServiceError::McpError(e) = e else {
            panic!("expected a JSON-RPC error")
        };
        assert_eq!(e.code.0, -32603);
        assert!(e.message.contains("1024"), "{}", e.message);
        assert!(e.message.contains("max_resource_bytes"), "{}", e.message);
    }
}

#[tokio::test]
async fn a_server_without_resources_or_prompts_does_not_offer_them() {
    let d = Dispatcher::from_registry(toolwright_mcp_server::demo::tools().unwrap());
    let server = McpServer::builder(Arc::new(d)).build();
    let client = connect(&serve(&server, false).await, RecordingClient::default()).await;
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert!(caps.resources.is_none() && caps.prompts.is_none() && caps.completions.is_none());
    let e = client.list_resources(None).await.unwrap_err();
    assert_eq!(code(e), -32601);
}

#[tokio::test]
async fn a_tool_logs_and_reports_progress_to_the_client_at_its_level() {
    for stateful in [true, false] {
        let server = conformance_server();
        let seen = RecordingClient::default();
        let client = connect(&serve(&server, stateful).await, seen.clone()).await;
        client
            .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
            .await
            .unwrap();
        client
            .call_tool(call("test_tool_with_logging", json!({})))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            *seen.logs.lock().unwrap(),
            [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed"
            ],
            "stateful: {stateful}"
        );

        let mut request = call("test_tool_with_progress", json!({}));
        request.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
            NumberOrString::String("p1".into()),
        )));
        client.call_tool(request).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(*seen.progress.lock().unwrap(), [0.0, 50.0, 100.0]);
        client.cancel().await.unwrap();
    }
    // Above the lines' level, nothing is sent (the level is the session's).
    let server = conformance_server();
    let seen = RecordingClient::default();
    let client = connect(&serve(&server, true).await, seen.clone()).await;
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Warning))
        .await
        .unwrap();
    client
        .call_tool(call("test_tool_with_logging", json!({})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(seen.logs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_tool_asks_the_clients_model_and_person_over_a_session() {
    let server = conformance_server();
    let seen = RecordingClient::default();
    let client = connect(&serve(&server, true).await, seen.clone()).await;
    let r = client
        .call_tool(call("test_sampling", json!({"prompt": "two plus two?"})))
        .await
        .unwrap();
    assert_eq!(common::text(&r), "LLM response: you asked: two plus two?");

    let r = client
        .call_tool(call("test_elicitation", json!({"message": "who are you?"})))
        .await
        .unwrap();
    assert!(common::text(&r).contains("ann@example.com"), "{r:?}");
    let r = client
        .call_tool(call("test_elicitation_sep1330_enums", json!({})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let r = client
        .call_tool(call("test_elicitation_sep1034_defaults", json!({})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let asked = seen.asked.lock().unwrap().clone();
    assert_eq!(asked[0]["message"], "who are you?");
    // The forms reach the client as the tool wrote them: enum variants and defaults intact.
    let enums = &asked[1]["requestedSchema"]["properties"];
    assert_eq!(enums["legacyEnum"]["enumNames"][0], "Option One");
    assert_eq!(enums["titledSingle"]["oneOf"][0]["const"], "value1");
    assert_eq!(
        enums["titledMulti"]["items"]["anyOf"][1]["title"],
        "Second Choice"
    );
    let defaults = &asked[2]["requestedSchema"]["properties"];
    assert_eq!(defaults["score"]["default"], 95.5);
    assert_eq!(defaults["verified"]["default"], true);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_tool_cannot_ask_the_client_without_a_session_or_the_capability() {
    let server = conformance_server();
    let client = connect(&serve(&server, false).await, RecordingClient::default()).await;
    let r = client
        .call_tool(call("test_sampling", json!({"prompt": "hi"})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(common::text(&r).contains("stateful"), "{r:?}");

    let client = connect(
        &serve(&server, true).await,
        RecordingClient {
            cannot_sample: true,
            ..RecordingClient::default()
        },
    )
    .await;
    let r = client
        .call_tool(call("test_sampling", json!({"prompt": "hi"})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(common::text(&r).contains("sampling capability"), "{r:?}");
}

#[tokio::test]
async fn stateful_http_gives_a_session_and_resumable_sse_streams_and_stateless_does_not() {
    use reqwest_ring as reqwest;
    common::tls();
    let post = |url: &str| {
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    let server = conformance_server();

    let stateless = serve(&server, false).await;
    let r = post(&stateless).body(init.clone()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("mcp-session-id").is_none());

    let url = serve(&server, true).await;
    let r = post(&url).body(init).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    drop(r);
    let r = post(&url)
        .header("mcp-session-id", &session)
        .body(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = post(&url)
        .header("mcp-session-id", &session)
        .body(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "test_reconnection", "arguments": {}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = tokio::time::timeout(Duration::from_secs(10), r.text())
        .await
        .unwrap()
        .unwrap();
    // First a priming event (an id, a retry interval, no data), then the answer.
    let first = body.split("\n\n").next().unwrap();
    assert!(first.contains("id:") && first.contains("retry:"), "{body}");
    assert!(body.contains("Reconnection test completed"), "{body}");
}
