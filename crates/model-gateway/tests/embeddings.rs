//! The OpenAI-compatible embeddings backend ("or any OpenAI-compatible
//! `/v1/embeddings` endpoint"), proved over real HTTP against the scripted server on 127.0.0.1:
//! the request body a provider receives, the order of the answer, batching, retries and typed
//! errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use testkit::{EMBEDDING_WIDTH, Reply, ScriptedServer, scripted_embedding};
use toolwright_core::{EmbedKind, Embedder, ModelError};
use toolwright_model_gateway::{OpenAiConfig, OpenAiEmbedder, RetryPolicy};

fn config(server: &ScriptedServer) -> OpenAiConfig {
    OpenAiConfig::new("e5-small")
        .with_base_url(server.base_url())
        .with_api_key("sk-test")
        .with_retry(
            RetryPolicy::default()
                .with_base_delay(Duration::from_millis(5))
                .with_max_delay(Duration::from_millis(20)),
        )
        .with_timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn embeddings_reach_the_server_as_openai_asks_and_come_back_in_order() {
    let server = ScriptedServer::start().await;
    let e = OpenAiEmbedder::detect(config(&server))
        .await
        .unwrap()
        .with_prefixes("query: ", "passage: ")
        .with_batch_size(2);
    assert_eq!(
        e.dimensions(),
        EMBEDDING_WIDTH,
        "the width is asked of the server"
    );
    let docs: Vec<String> = ["read a file", "list a folder", "切换到分支"]
        .map(String::from)
        .to_vec();
    let v = e.embed(&docs, EmbedKind::Document).await.unwrap();
    // The server lists its vectors last to first; they come back in the texts' order.
    let want: Vec<Vec<f32>> = docs
        .iter()
        .map(|d| scripted_embedding(&format!("passage: {d}")))
        .collect();
    assert_eq!(v, want);
    let q = e
        .embed(&["find a file".into()], EmbedKind::Query)
        .await
        .unwrap();
    assert_eq!(q, [scripted_embedding("query: find a file")]);
    assert!(e.embed(&[], EmbedKind::Query).await.unwrap().is_empty());
    // What the provider received: the probe, two batches (2 + 1) and the query.
    let bodies: Vec<_> = server
        .requests()
        .into_iter()
        .map(|r| (r.body, r.headers))
        .collect();
    assert_eq!(bodies.len(), 4);
    assert_eq!(bodies[1].0["model"], "e5-small");
    assert_eq!(bodies[1].0["encoding_format"], "float");
    assert_eq!(
        bodies[1].0["input"],
        serde_json::json!(["passage: read a file", "passage: list a folder"])
    );
    assert_eq!(
        bodies[2].0["input"],
        serde_json::json!(["passage: 切换到分支"])
    );
    assert_eq!(bodies[1].1["authorization"], "Bearer sk-test");
}

#[tokio::test]
async fn embeddings_retry_a_429_and_report_a_4xx_and_a_bad_answer_as_typed_errors() {
    let server = ScriptedServer::start().await;
    let e = OpenAiEmbedder::new(config(&server), EMBEDDING_WIDTH).unwrap();
    server.push(Reply::status(429, "slow down").retry_after("0"));
    let v = e.embed(&["x".into()], EmbedKind::Query).await.unwrap();
    assert_eq!(v, [scripted_embedding("x")], "the 429 was retried");
    server.push(Reply::status(400, "model not found"));
    let err = e.embed(&["x".into()], EmbedKind::Query).await.unwrap_err();
    assert!(matches!(err, ModelError::Api { status: 400, .. }), "{err}");
    // A server whose vectors are not the promised width.
    let narrow = OpenAiEmbedder::new(config(&server), 3).unwrap();
    let err = narrow
        .embed(&["x".into()], EmbedKind::Query)
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Malformed { .. }), "{err}");
    server.push(Reply::Raw {
        status: 200,
        content_type: "application/json".into(),
        body: r#"{"data": [{"index": 0, "embedding": "AAAA"}]}"#.into(),
    });
    let err = e.embed(&["x".into()], EmbedKind::Query).await.unwrap_err();
    assert!(matches!(err, ModelError::Malformed { .. }), "{err}");
    assert!(OpenAiEmbedder::new(config(&server), 0).is_err());
}
