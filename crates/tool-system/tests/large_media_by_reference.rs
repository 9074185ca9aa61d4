//! A tool result's media past the inline limit goes to the agent's blob store, and the model
//! is given its reference; without a store, or with a full one, the call still gives the model
//! a result it can act on.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use base64::Engine as _;
use common::scripted::{Scripted, call, text};
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_context_engine::SessionStore;
use toolwright_core::{
    BLOB_URI_PREFIX, BlobError, BlobStore, Media, MediaSource, Message, Part, ResourceRef, Tool,
    ToolContext, ToolError, ToolOutput, ToolSpec, async_trait,
};
use toolwright_tool_system::{Agent, FsBlobStore};

const MIB: usize = 1024 * 1024;

/// A 30 MiB PNG (a real header, then filler): past the 20 MiB a result may send inline.
fn big_png() -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x10\0\0\0\x10\0\x08\x06\0\0\0".to_vec();
    png.extend((0..30 * MIB - png.len()).map(|i| (i % 251) as u8));
    png
}

/// A screenshot tool that returns `png` as its image. `Media::image_bytes` refuses more than
/// the inline limit, so media this large is built by its fields, as a tool that produces it
/// would.
struct Screenshot(Arc<Vec<u8>>);

#[async_trait]
impl Tool for Screenshot {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "screenshot",
            "Take a screenshot",
            json!({"type": "object", "properties": {}}),
        )
    }
    async fn call(&self, _: Value, _: ToolContext) -> Result<ToolOutput, ToolError> {
        let mut image = Media::url("image/png", "");
        image.source = MediaSource::Base64 {
            data: base64::engine::general_purpose::STANDARD.encode(&*self.0),
        };
        Ok(ToolOutput::new(json!("captured")).with_part(Part::Image(image.with_name("page.png"))))
    }
}

fn screenshot(png: Arc<Vec<u8>>) -> Screenshot {
    Screenshot(png)
}

/// The parts of the tool message in the model's second request.
fn tool_parts(model: &Scripted) -> Vec<Part> {
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one tool round, then the answer");
    let tool = requests[1]
        .messages
        .iter()
        .find(|m| matches!(m, Message::Tool { .. }))
        .expect("the second request holds the tool result");
    assert_eq!(tool.content(), "captured");
    tool.parts().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_mib_image_is_kept_in_the_store_and_the_next_request_holds_its_reference() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FsBlobStore::open(dir.path().join("blobs"), 64 * MIB as u64).unwrap());
    let png = Arc::new(big_png());
    let model = Scripted::new(vec![call("c1", "screenshot", json!({})), text("done")]);
    let sessions = common::store();
    let agent = Agent::builder(model.clone())
        .tool(screenshot(png.clone()))
        .store(sessions.clone())
        .blob_store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "Show me the page").await.unwrap();
    assert_eq!(out.answer, "done");

    let parts = tool_parts(&model);
    let [Part::Resource(r)] = parts.as_slice() else {
        panic!("expected one resource part, got {parts:?}");
    };
    assert_eq!(r.media_type, "image/png");
    assert_eq!(r.size, Some(30 * MIB as u64));
    assert_eq!(r.name.as_deref(), Some("page.png"));
    let hash = ResourceRef::blob_hash(&r.uri).unwrap();
    // The file is there, holding the same bytes after its media type line.
    let file = std::fs::read(dir.path().join("blobs").join(hash)).unwrap();
    assert_eq!(&file[..10], b"image/png\n");
    assert!(file[10..] == png[..], "the stored bytes are the tool's");
    let back = store.get(&r.uri).await.unwrap();
    assert_eq!(back.media_type, "image/png");
    assert!(back.bytes == *png);

    // The session keeps the reference, not 40 MB of base64.
    let stored = sessions.load("s").await.unwrap().messages;
    let kept = serde_json::to_string(&stored).unwrap();
    assert!(
        kept.contains(&r.uri) && kept.len() < 10_000,
        "{} bytes",
        kept.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_reads_the_reference_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FsBlobStore::open(dir.path(), 64 * MIB as u64).unwrap());
    let server = ScriptedServer::start().await;
    server.push(Reply::tool_call("c1", "screenshot", "{}"));
    server.push(Reply::text("done"));
    let agent = Agent::builder(common::model(&server))
        .tool(screenshot(Arc::new(big_png())))
        .blob_store(store)
        .build()
        .unwrap();
    assert_eq!(agent.run("s", "Show me").await.unwrap().answer, "done");
    let tool = &common::sent_tool_messages(&server, 1)[0];
    let content = tool["content"].as_str().unwrap();
    assert!(
        content.starts_with(
            "captured\n[resource image/png \"page.png\", 31457280 bytes at toolwright-blob:sha256:"
        ),
        "{content}"
    );
    let body = server.requests()[1].body.to_string();
    assert!(body.len() < 10_000, "no bytes sent: {} bytes", body.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_store_the_image_is_named_with_how_to_keep_it() {
    let model = Scripted::new(vec![call("c1", "screenshot", json!({})), text("done")]);
    let agent = Agent::builder(model.clone())
        .tool(screenshot(Arc::new(big_png())))
        .build()
        .unwrap();
    assert_eq!(agent.run("s", "Show me").await.unwrap().answer, "done");
    let parts = tool_parts(&model);
    let [Part::Text { text }] = parts.as_slice() else {
        panic!("expected one text part, got {parts:?}");
    };
    assert!(
        text.starts_with("[image image/png \"page.png\", 31457280 bytes not shown]")
            && text.contains("AgentBuilder::blob_store"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_is_said_to_the_model_and_the_call_still_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FsBlobStore::open(dir.path(), MIB as u64).unwrap());
    let model = Scripted::new(vec![call("c1", "screenshot", json!({})), text("done")]);
    let agent = Agent::builder(model.clone())
        .tool(screenshot(Arc::new(big_png())))
        .blob_store(store.clone())
        .build()
        .unwrap();
    let out = agent.run("s", "Show me").await.unwrap();
    assert_eq!(out.answer, "done");
    let parts = tool_parts(&model);
    let [Part::Text { text }] = parts.as_slice() else {
        panic!("expected one text part, got {parts:?}");
    };
    assert!(
        text.contains(
            "the blob store is full: 31457280 more bytes would pass its 1048576-byte bound"
        ),
        "{text}"
    );
    assert_eq!(store.used(), 0);
    // The typed error behind that line.
    let err = store.put(&big_png(), "image/png").await.unwrap_err();
    assert!(
        matches!(err, BlobError::Full { limit, .. } if limit == MIB as u64),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_and_unknown_references_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("passwd"), "root:x:0:0").unwrap();
    let store = FsBlobStore::open(dir.path().join("blobs"), MIB as u64).unwrap();
    for hostile in [
        "../../etc/passwd".to_owned(),
        "/etc/passwd".to_owned(),
        dir.path().join("passwd").display().to_string(),
        format!("{BLOB_URI_PREFIX}../passwd"),
        format!("{BLOB_URI_PREFIX}%2e%2e%2fpasswd"),
    ] {
        let err = store.get(&hostile).await.unwrap_err();
        assert!(
            matches!(err, BlobError::BadReference { .. }),
            "{hostile}: {err:?}"
        );
    }
    let unknown = format!("{BLOB_URI_PREFIX}{}", "ab".repeat(32));
    assert!(matches!(
        store.get(&unknown).await,
        Err(BlobError::NotFound { .. })
    ));
}
