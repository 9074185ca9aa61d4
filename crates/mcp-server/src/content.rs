//! A dispatcher's [`ToolOutcome`] as an MCP `CallToolResult`.

use rmcp::model::{CallToolResult, ContentBlock, Resource, ResourceContents};
use toolwright_core::{Media, MediaSource, Part};
use toolwright_tool_system::ToolOutcome;

/// The result's text first, then its parts: images and audio as MCP image and audio content
/// (inline base64) or, given by URL, as resource links; files as embedded resources; media
/// kept by reference ([`Part::Resource`]) as resource links.
pub(crate) fn to_call_result(outcome: ToolOutcome) -> CallToolResult {
    if outcome.error.is_some() {
        return CallToolResult::error(vec![ContentBlock::text(outcome.content)]);
    }
    // An empty text before media says nothing: left out.
    let mut blocks = Vec::new();
    if !outcome.content.is_empty() || outcome.parts.is_empty() {
        blocks.push(ContentBlock::text(outcome.content));
    }
    for (i, part) in outcome.parts.into_iter().enumerate() {
        let block = match part {
            Part::Text { text } => ContentBlock::text(text),
            Part::Image(m) => media(m, i, ContentBlock::image),
            Part::Audio(m) => media(m, i, ContentBlock::audio),
            Part::File(m) => file(m, i),
            // Media kept by reference goes as a link to it, with its size when known.
            Part::Resource(r) => {
                let mut block = link(r.uri, r.name, r.media_type, i);
                if let ContentBlock::ResourceLink(l) = &mut block {
                    l.size = r.size;
                }
                block
            }
            // What a model thought and cache marks are not results.
            _ => continue,
        };
        blocks.push(block);
    }
    CallToolResult::success(blocks)
}

fn media(m: Media, i: usize, inline: fn(String, String) -> ContentBlock) -> ContentBlock {
    match m.source {
        MediaSource::Base64 { data } => inline(data, m.media_type),
        MediaSource::Url { url } => link(url, m.name, m.media_type, i),
    }
}

fn link(url: String, name: Option<String>, media_type: String, i: usize) -> ContentBlock {
    let mut r = Resource::new(url, name.unwrap_or_else(|| format!("part-{i}")));
    r.mime_type = Some(media_type);
    ContentBlock::resource_link(r)
}

fn file(m: Media, i: usize) -> ContentBlock {
    let name = m.name.clone().unwrap_or_else(|| format!("part-{i}"));
    match m.source {
        MediaSource::Base64 { data } => {
            ContentBlock::resource(ResourceContents::BlobResourceContents {
                uri: format!("toolwright://result/{name}"),
                mime_type: Some(m.media_type),
                blob: data,
                meta: None,
            })
        }
        MediaSource::Url { url } => link(url, Some(name), m.media_type, i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;
    use toolwright_core::{ResourceRef, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
    use toolwright_tool_system::{Dispatcher, ToolRegistry};

    struct Kept;

    #[toolwright_core::async_trait]
    impl Tool for Kept {
        fn spec(&self) -> ToolSpec {
            ToolSpec::new("kept", "Keep a file", json!({"type": "object"}))
        }
        async fn call(
            &self,
            _: serde_json::Value,
            _: ToolContext,
        ) -> Result<ToolOutput, ToolError> {
            let r = ResourceRef::new("toolwright-blob:sha256:ab", "application/pdf", 31_457_280)
                .with_name("report.pdf");
            Ok(ToolOutput::new(json!("kept")).with_part(Part::Resource(r)))
        }
    }

    #[tokio::test]
    async fn media_kept_by_reference_goes_as_a_resource_link_with_its_size() {
        let mut registry = ToolRegistry::new();
        registry.register(Kept).unwrap();
        let d = Dispatcher::new().with_provider(Arc::new(registry));
        let outcome = d.dispatch("kept", json!({}), ToolContext::new("c1")).await;
        let result = to_call_result(outcome);
        let Some(ContentBlock::ResourceLink(l)) = result.content.get(1) else {
            panic!("expected a resource link: {result:?}");
        };
        assert_eq!(l.uri, "toolwright-blob:sha256:ab");
        assert_eq!(l.name, "report.pdf");
        assert_eq!(l.mime_type.as_deref(), Some("application/pdf"));
        assert_eq!(l.size, Some(31_457_280));
    }
}
