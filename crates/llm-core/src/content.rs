//! Content beyond text: images, audio, files, a model's reasoning, and cache breakpoints.
//!
//! A [`Message`](crate::Message) keeps its text in `content` and everything else in `parts`,
//! in order after the text. The enums are exhaustive on purpose: every backend maps every
//! part, or answers [`ModelError::Unsupported`](crate::ModelError::Unsupported) naming the
//! part and itself; nothing is dropped silently.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The largest media a message may carry inline: 20 MiB of decoded bytes (the most any of
/// the providers accept for one inline image or file). Larger media go by URL.
pub const MAX_INLINE_MEDIA_BYTES: usize = 20 * 1024 * 1024;

/// One piece of a message beyond its text.
///
/// ```
/// use toolwright_core::{Media, Message, Part};
/// let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R',
///            0, 0, 0, 2, 0, 0, 0, 3, 8, 6, 0, 0, 0];
/// let image = Media::image_bytes(&png, "image/png").unwrap();
/// assert_eq!(image.dimensions(), Some((2, 3)));
/// let m = Message::user_with_parts("What is in this picture?", vec![Part::Image(image)]);
/// assert_eq!(m.parts().len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
// Exhaustive on purpose: every backend maps every part or says it cannot.
pub enum Part {
    /// More text, placed between other parts (a message's leading text is its `content`).
    Text {
        /// The text.
        text: String,
    },
    /// A picture.
    Image(Media),
    /// A sound.
    Audio(Media),
    /// A document or any other file (PDF, text, …).
    File(Media),
    /// Media kept elsewhere, by reference (a blob store's URI, an MCP resource link): every
    /// wire gives the model its [`placeholder`](Part::placeholder) line — the URI, media type
    /// and size — never the bytes.
    Resource(crate::ResourceRef),
    /// What a model thought before it answered, kept so that it can be sent back to the
    /// provider that made it (and to no other).
    Reasoning(Reasoning),
    /// The conversation up to here is worth caching (a provider's cache breakpoint).
    CacheBreakpoint(CacheTtl),
}

impl Part {
    /// A short name of the part's kind (`"image"`, `"reasoning"`, …), for errors and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::Image(_) => "image",
            Self::Audio(_) => "audio",
            Self::File(_) => "file",
            Self::Resource(_) => "resource",
            Self::Reasoning(_) => "reasoning",
            Self::CacheBreakpoint(_) => "cache breakpoint",
        }
    }

    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The line a text-only wire or model is given in place of this part: names what was
    /// left out (kind, media type, size, file name), never its bytes.
    pub fn placeholder(&self) -> String {
        match self {
            Self::Text { text } => text.clone(),
            Self::Image(m) | Self::Audio(m) | Self::File(m) => {
                let name = m
                    .name
                    .as_deref()
                    .map(|n| format!(" {n:?}"))
                    .unwrap_or_default();
                let size = match &m.source {
                    MediaSource::Base64 { data } => format!(", {} bytes", decoded_len(data)),
                    MediaSource::Url { url } => format!(" at {url}"),
                };
                format!("[{} {}{name}{size} not shown]", self.kind(), m.media_type)
            }
            Self::Resource(r) => {
                let name = r
                    .name
                    .as_deref()
                    .map(|n| format!(" {n:?}"))
                    .unwrap_or_default();
                let size = r.size.map(|s| format!(", {s} bytes")).unwrap_or_default();
                format!("[resource {}{name}{size} at {}]", r.media_type, r.uri)
            }
            Self::Reasoning(_) | Self::CacheBreakpoint(_) => String::new(),
        }
    }
}

/// A piece of media: what it is and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Media {
    /// Its IANA media type (`image/png`, `audio/wav`, `application/pdf`).
    pub media_type: String,
    /// Its bytes, inline or by URL.
    pub source: MediaSource,
    /// A file name, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Where a piece of media's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MediaSource {
    /// Inline, standard base64 (with padding).
    Base64 {
        /// The encoded bytes.
        data: String,
    },
    /// At a URL the provider fetches.
    Url {
        /// The URL.
        url: String,
    },
}

/// Why media could not be taken into a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContentError {
    /// More bytes than [`MAX_INLINE_MEDIA_BYTES`].
    #[error(
        "the {media_type} is {size} bytes, over the {limit}-byte limit for inline media; send a smaller file or a URL"
    )]
    TooLarge {
        /// Its claimed media type.
        media_type: String,
        /// Its size in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not what the media type says.
    #[error(
        "the bytes are not a {claimed}{found}; send the file with its true media type",
        found = found.as_deref().map(|f| format!(" (they look like {f})")).unwrap_or_default()
    )]
    WrongType {
        /// The media type it was sent as.
        claimed: String,
        /// What the bytes look like, when known.
        found: Option<String>,
    },
    /// Not valid base64.
    #[error("the media's base64 is invalid: {0}; encode it with standard base64")]
    Base64(String),
    /// A media type this kind of part does not take.
    #[error("{media_type:?} is not a {kind} media type; use one of {accepted}")]
    Unaccepted {
        /// The part's kind.
        kind: &'static str,
        /// The media type given.
        media_type: String,
        /// What is accepted.
        accepted: &'static str,
    },
}

/// The image types every provider takes.
const IMAGE_TYPES: &str = "image/png, image/jpeg, image/gif, image/webp";

impl Media {
    /// Media at a URL.
    pub fn url(media_type: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            media_type: media_type.into(),
            source: MediaSource::Url { url: url.into() },
            name: None,
        }
    }

    /// Inline media from its bytes, checked against [`MAX_INLINE_MEDIA_BYTES`].
    pub fn bytes(bytes: &[u8], media_type: impl Into<String>) -> Result<Self, ContentError> {
        Self::bytes_within(bytes, media_type, MAX_INLINE_MEDIA_BYTES)
    }

    fn bytes_within(
        bytes: &[u8],
        media_type: impl Into<String>,
        limit: usize,
    ) -> Result<Self, ContentError> {
        let media_type = media_type.into();
        if bytes.len() > limit {
            return Err(ContentError::TooLarge {
                media_type,
                size: bytes.len(),
                limit,
            });
        }
        Ok(Self {
            media_type,
            source: MediaSource::Base64 {
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
            name: None,
        })
    }

    /// An inline image: its bytes must be a PNG, JPEG, GIF or WebP and be the type claimed
    /// (a lying media type is refused, not passed on to fail at the provider).
    pub fn image_bytes(bytes: &[u8], media_type: &str) -> Result<Self, ContentError> {
        Self::image_bytes_within(bytes, media_type, MAX_INLINE_MEDIA_BYTES)
    }

    fn image_bytes_within(
        bytes: &[u8],
        media_type: &str,
        limit: usize,
    ) -> Result<Self, ContentError> {
        let claimed = media_type.trim().to_ascii_lowercase();
        let claimed = if claimed == "image/jpg" {
            "image/jpeg".to_owned()
        } else {
            claimed
        };
        if !IMAGE_TYPES.split(", ").any(|t| t == claimed) {
            return Err(ContentError::Unaccepted {
                kind: "image",
                media_type: media_type.into(),
                accepted: IMAGE_TYPES,
            });
        }
        let found = sniff_image(bytes);
        if found != Some(claimed.as_str()) {
            return Err(ContentError::WrongType {
                claimed,
                found: found.map(str::to_owned),
            });
        }
        Self::bytes_within(bytes, claimed, limit)
    }

    /// Inline media from base64 text (as MCP servers send it), checked to decode and to fit
    /// [`MAX_INLINE_MEDIA_BYTES`]. An image goes through [`Media::image_base64`] instead.
    pub fn base64(data: &str, media_type: impl Into<String>) -> Result<Self, ContentError> {
        Self::base64_within(data, media_type, MAX_INLINE_MEDIA_BYTES)
    }

    /// An inline image from base64 text (as MCP servers send it), checked like
    /// [`Media::image_bytes`].
    pub fn image_base64(data: &str, media_type: &str) -> Result<Self, ContentError> {
        Self::image_base64_within(data, media_type, MAX_INLINE_MEDIA_BYTES)
    }

    /// Media of a tool's result from base64 text, checked like [`Media::base64`] (or, for an
    /// `image/…` type, [`Media::image_base64`]) but against `limit` instead of
    /// [`MAX_INLINE_MEDIA_BYTES`]: a tool (an MCP server's screenshot) may hand over more than
    /// a model request may carry inline. Such media never goes on a wire as it is: the agent's
    /// dispatcher keeps what passes the inline limit in its blob store and gives the model the
    /// reference (`AgentBuilder::blob_store`), or names it in the text without a store.
    ///
    /// ```
    /// use toolwright_core::{MAX_INLINE_MEDIA_BYTES, Media};
    /// use base64::Engine as _;
    /// let big = vec![7u8; MAX_INLINE_MEDIA_BYTES + 1];
    /// let data = base64::engine::general_purpose::STANDARD.encode(&big);
    /// assert!(Media::base64(&data, "audio/wav").is_err());
    /// let m = Media::tool_result_base64(&data, "audio/wav", 32 * 1024 * 1024).unwrap();
    /// assert_eq!(m.size(), MAX_INLINE_MEDIA_BYTES + 1);
    /// ```
    pub fn tool_result_base64(
        data: &str,
        media_type: &str,
        limit: usize,
    ) -> Result<Self, ContentError> {
        if media_type.trim().to_ascii_lowercase().starts_with("image/") {
            Self::image_base64_within(data, media_type, limit)
        } else {
            Self::base64_within(data, media_type, limit)
        }
    }

    fn base64_within(
        data: &str,
        media_type: impl Into<String>,
        limit: usize,
    ) -> Result<Self, ContentError> {
        let media_type = media_type.into();
        if data.len() / 4 * 3 > limit + 3 {
            return Err(ContentError::TooLarge {
                media_type,
                size: decoded_len(data),
                limit,
            });
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| ContentError::Base64(e.to_string()))?;
        Self::bytes_within(&bytes, media_type, limit)
    }

    fn image_base64_within(
        data: &str,
        media_type: &str,
        limit: usize,
    ) -> Result<Self, ContentError> {
        if data.len() / 4 * 3 > limit + 3 {
            return Err(ContentError::TooLarge {
                media_type: media_type.into(),
                size: decoded_len(data),
                limit,
            });
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| ContentError::Base64(e.to_string()))?;
        Self::image_bytes_within(&bytes, media_type, limit)
    }

    /// The same media with a file name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The decoded bytes of inline media; `None` for a URL or invalid base64.
    pub fn decoded(&self) -> Option<Vec<u8>> {
        match &self.source {
            MediaSource::Base64 { data } => {
                base64::engine::general_purpose::STANDARD.decode(data).ok()
            }
            MediaSource::Url { .. } => None,
        }
    }

    /// The size of inline media in bytes (0 for a URL).
    pub fn size(&self) -> usize {
        match &self.source {
            MediaSource::Base64 { data } => decoded_len(data),
            MediaSource::Url { .. } => 0,
        }
    }

    /// Width and height of an inline PNG, JPEG, GIF or WebP image, read from its header.
    pub fn dimensions(&self) -> Option<(u32, u32)> {
        let MediaSource::Base64 { data } = &self.source else {
            return None;
        };
        // The headers that carry the size are in the first few kilobytes (JPEG's SOF may
        // follow EXIF data, so allow 64 KiB).
        let head = &data[..data.len().min(87_384) / 4 * 4];
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(head)
            .ok()?;
        image_dimensions(&bytes)
    }
}

/// The messages as a wire that cannot carry some parts in a tool message sends them: each
/// run of tool results keeps the parts `carries` accepts, and the others follow the run in
/// one user message that names the call each came from. Every wire lowers the same way.
///
/// ```
/// use toolwright_core::{lower_tool_parts, Media, Message, Part, ToolCall};
/// let shot = Part::Image(Media::url("image/png", "https://example.com/a.png"));
/// let history = vec![
///     Message::user("Screenshot the page"),
///     Message::assistant_with_tool_calls("", vec![ToolCall::new("c1", "shoot", serde_json::json!({}))]),
///     Message::tool_with_parts("c1", "shoot", "done", vec![shot.clone()]),
/// ];
/// let sent = lower_tool_parts(&history, |_| false);
/// assert_eq!(sent.len(), 4);
/// assert!(sent[2].parts().is_empty());
/// assert!(sent[3].parts()[0].placeholder().contains("`c1`"));
/// assert_eq!(sent[3].parts()[1], shot);
/// ```
pub fn lower_tool_parts(
    messages: &[crate::Message],
    carries: impl Fn(&Part) -> bool,
) -> Vec<crate::Message> {
    use crate::Message;
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut moved: Vec<Part> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m {
            Message::Tool {
                tool_call_id,
                name,
                content,
                parts,
            } if parts.iter().any(|p| !carries(p)) => {
                let (kept, lowered): (Vec<Part>, Vec<Part>) =
                    parts.iter().cloned().partition(|p| carries(p));
                moved.push(Part::text(format!(
                    "The result of call `{tool_call_id}` ({name}) came with:"
                )));
                moved.extend(lowered);
                out.push(Message::tool_with_parts(
                    tool_call_id.clone(),
                    name.clone(),
                    content.clone(),
                    kept,
                ));
            }
            other => out.push(other.clone()),
        }
        let run_ends = !matches!(messages.get(i + 1), Some(Message::Tool { .. }));
        if run_ends && !moved.is_empty() {
            out.push(Message::user_with_parts("", std::mem::take(&mut moved)));
        }
    }
    out
}

/// The decoded length of base64 text.
fn decoded_len(data: &str) -> usize {
    let pad = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(pad)
}

/// The image type the bytes' magic number says.
fn sniff_image(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if b.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

fn be16(b: &[u8], at: usize) -> Option<u32> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?) as u32)
}
fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le16(b: &[u8], at: usize) -> Option<u32> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as u32)
}
fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 3)?;
    Some(s[0] as u32 | (s[1] as u32) << 8 | (s[2] as u32) << 16)
}

/// Width and height from an image's header; `None` when it cannot be read.
fn image_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    match sniff_image(b)? {
        "image/png" => Some((be32(b, 16)?, be32(b, 20)?)),
        "image/gif" => Some((le16(b, 6)?, le16(b, 8)?)),
        "image/webp" => match b.get(12..16)? {
            b"VP8 " => Some((le16(b, 26)? & 0x3fff, le16(b, 28)? & 0x3fff)),
            b"VP8L" => {
                let v = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
                Some(((v & 0x3fff) + 1, ((v >> 14) & 0x3fff) + 1))
            }
            b"VP8X" => Some((le24(b, 24)? + 1, le24(b, 27)? + 1)),
            _ => None,
        },
        _ => {
            // JPEG: walk the segments to a start-of-frame marker.
            let mut i = 2;
            while i + 9 < b.len() {
                if b[i] != 0xff {
                    return None;
                }
                let marker = b[i + 1];
                if marker == 0xff {
                    i += 1;
                    continue;
                }
                let len = be16(b, i + 2)? as usize;
                let is_sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
                if is_sof {
                    return Some((be16(b, i + 7)?, be16(b, i + 5)?));
                }
                i += 2 + len;
            }
            None
        }
    }
}

/// A model's reasoning, as its provider gave it.
///
/// Kept with the round in every session store and sent back only to `provider`: a signature
/// or encrypted content means nothing to another provider, and some reject it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reasoning {
    /// The backend that made it, as its [`Reasoning::provider`] tag (`"anthropic"`,
    /// `"openai-responses"`, `"gemini"`, `"openai-chat"`).
    pub provider: String,
    /// What kind of reasoning this is.
    pub kind: ReasoningKind,
    /// The readable text or summary (empty when the provider gave none).
    #[serde(default)]
    pub text: String,
    /// The provider's signature over it, replayed unchanged (Anthropic's `signature`,
    /// Gemini's `thoughtSignature`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Opaque content only the provider can read, replayed unchanged (OpenAI's
    /// `encrypted_content`, Anthropic's `redacted_thinking` data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<String>,
    /// The provider's id for it (OpenAI's reasoning item id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool call it belongs to, when the provider ties it to one (Gemini signs calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

impl Reasoning {
    /// Reasoning of `kind` made by `provider`, with its text.
    pub fn new(provider: impl Into<String>, kind: ReasoningKind, text: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            kind,
            text: text.into(),
            signature: None,
            encrypted: None,
            id: None,
            call_id: None,
        }
    }
    /// With the provider's signature.
    pub fn with_signature(mut self, signature: impl Into<String>) -> Self {
        self.signature = Some(signature.into());
        self
    }
    /// With opaque encrypted content.
    pub fn with_encrypted(mut self, encrypted: impl Into<String>) -> Self {
        self.encrypted = Some(encrypted.into());
        self
    }
    /// With the provider's id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    /// Tied to tool call `call_id`.
    pub fn with_call_id(mut self, call_id: impl Into<String>) -> Self {
        self.call_id = Some(call_id.into());
        self
    }
}

/// What kind of reasoning a [`Reasoning`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningKind {
    /// The model's thinking, as written.
    Full,
    /// A summary of it (OpenAI's reasoning summaries).
    Summary,
    /// Withheld by the provider: only `encrypted` (or a signature) is left.
    Redacted,
}

/// How long a provider keeps a cache entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheTtl {
    /// The provider's default (five minutes at Anthropic).
    #[default]
    Short,
    /// An hour, where the provider offers it.
    Long,
}

/// Where cache breakpoints go in a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CachePolicy {
    /// The backend places them at the ends of the stable parts (tools, system, the rounds
    /// before this one, see [`ChatRequest::stable_prefix`](crate::ChatRequest::stable_prefix))
    /// and at the end of the request, besides any [`Part::CacheBreakpoint`] in the messages;
    /// at most as many as the provider allows (four at Anthropic), hand-placed ones first.
    #[default]
    Auto,
    /// Only the [`Part::CacheBreakpoint`]s in the messages.
    Manual,
    /// No cache control at all, and no cache key.
    Off,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        b.extend(w.to_be_bytes());
        b.extend(h.to_be_bytes());
        b.extend([8, 6, 0, 0, 0]);
        b
    }

    #[test]
    fn an_image_is_measured_from_its_header() {
        let m = Media::image_bytes(&png(800, 600), "image/png").unwrap();
        assert_eq!(m.dimensions(), Some((800, 600)));
        let gif = b"GIF89a\x40\x01\xf0\x00\0\0";
        assert_eq!(image_dimensions(gif), Some((320, 240)));
        let jpeg = [
            0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0, 0xff, 0xc0, 0, 11, 8, 0, 50, 0, 100, 3, 0, 0,
        ];
        assert_eq!(image_dimensions(&jpeg), Some((100, 50)));
    }

    #[test]
    fn an_image_with_a_lying_media_type_is_refused() {
        let err = Media::image_bytes(&png(1, 1), "image/jpeg").unwrap_err();
        assert_eq!(
            err,
            ContentError::WrongType {
                claimed: "image/jpeg".into(),
                found: Some("image/png".into())
            }
        );
        assert!(matches!(
            Media::image_bytes(b"<svg/>", "image/svg+xml"),
            Err(ContentError::Unaccepted { .. })
        ));
        assert!(matches!(
            Media::image_bytes(b"not an image", "image/png"),
            Err(ContentError::WrongType { found: None, .. })
        ));
    }

    #[test]
    fn media_over_the_inline_limit_is_refused_before_decoding() {
        let big = "A".repeat((MAX_INLINE_MEDIA_BYTES / 3 + 10) * 4);
        assert!(matches!(
            Media::image_base64(&big, "image/png"),
            Err(ContentError::TooLarge { .. })
        ));
        let mut bytes = png(1, 1);
        bytes.resize(MAX_INLINE_MEDIA_BYTES + 1, 0);
        assert!(matches!(
            Media::image_bytes(&bytes, "image/png"),
            Err(ContentError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_placeholder_names_what_was_left_out() {
        let m = Media::image_bytes(&png(1, 1), "image/png")
            .unwrap()
            .with_name("shot.png");
        let line = Part::Image(m).placeholder();
        assert_eq!(line, "[image image/png \"shot.png\", 29 bytes not shown]");
    }

    #[test]
    fn parts_round_trip_through_json() {
        let parts = vec![
            Part::text("see"),
            Part::Image(Media::url("image/png", "https://example.com/a.png")),
            Part::Reasoning(
                Reasoning::new("anthropic", ReasoningKind::Full, "hmm").with_signature("sig"),
            ),
            Part::CacheBreakpoint(CacheTtl::Long),
        ];
        let json = serde_json::to_string(&parts).unwrap();
        let back: Vec<Part> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, parts);
    }
}
