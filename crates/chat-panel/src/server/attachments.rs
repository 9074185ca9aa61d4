//! What a person attaches to a message (checked: type, bytes, size) and the media endpoint that
//! serves a conversation's pictures, sounds and files back to its owner; the types are
//! [`crate::media`]'s.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::guard::{access, check_session_id, not_found, store_failed};
use super::{App, error};
use crate::identity::Principal;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PostBody {
    pub(super) text: String,
    #[serde(default)]
    pub(super) in_reply_to: Option<u64>,
    /// What the person attached (at most [`MAX_ATTACHMENTS`]): pictures, sounds or files
    /// (`images` is the older name of the field).
    #[serde(default, alias = "images")]
    pub(super) attachments: Vec<Upload>,
    /// MCP resources to read into the message (with [`ChatPanel::offer_mcp`](crate::ChatPanel::offer_mcp)).
    #[serde(default)]
    pub(super) resources: Vec<ResourceChoice>,
}

/// A picture, sound or file attached to a message: its bytes in standard base64, the type
/// the browser gave it, and its file name.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Upload {
    media_type: String,
    data: String,
    #[serde(default)]
    name: Option<String>,
}

/// What a message's body may hold beyond [`PanelConfig::max_body_bytes`](crate::PanelConfig):
/// one attachment's base64 (4/3 of its bytes) and its fields; nothing when attaching is off.
pub(super) fn picture_allowance(config: &crate::PanelConfig) -> usize {
    match config.max_image_bytes {
        0 => 0,
        n => n.div_ceil(3).saturating_mul(4).saturating_add(1024),
    }
}

/// Attachments one message may carry.
pub(super) const MAX_ATTACHMENTS: usize = 1;

pub(super) const MALFORMED: &str = "malformed request: expected the JSON object {\"text\": \"...\", \"inReplyTo\": N?, \"attachments\": [{\"mediaType\", \"data\", \"name\"?}]?}";

/// The size of base64 text once decoded.
fn decoded_len(data: &str) -> usize {
    let data = data.trim();
    let pad = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(pad)
}

/// `n` bytes for a person: `5 MiB`, `300 KiB`, `12 bytes`.
fn size_words(n: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= MIB {
        format!("{:.1} MiB", n as f64 / MIB as f64)
    } else if n >= 1024 {
        format!("{} KiB", n.div_ceil(1024))
    } else {
        format!("{n} bytes")
    }
}

/// The attachments as parts, each checked: within `max` bytes, of a type the panel takes
/// ([`crate::media::attachable`]) and whose bytes are that type — a picture as
/// [`Media::image_base64`](toolwright_core::Media::image_base64) checks it, a sound or file by
/// its magic number (text: UTF-8). A picture becomes a [`Part::Image`](toolwright_core::Part),
/// a sound a `Part::Audio`, anything else a `Part::File`. A refusal is the answer, with a
/// sentence for the person that says what to send instead.
#[allow(clippy::result_large_err)] // built once per request and returned straight away
pub(super) fn attachments(
    uploads: Vec<Upload>,
    max: usize,
) -> Result<Vec<toolwright_core::Part>, Response> {
    use crate::MediaKind;
    use toolwright_core::{ContentError, Media, Part};
    if uploads.is_empty() {
        return Ok(Vec::new());
    }
    if max == 0 {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "this panel does not take attachments: send your message without one",
        ));
    }
    if uploads.len() > MAX_ATTACHMENTS {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!("attach at most {MAX_ATTACHMENTS} file to a message"),
        ));
    }
    let mut parts = Vec::with_capacity(uploads.len());
    for u in uploads {
        let size = decoded_len(&u.data);
        let name = u
            .name
            .map(|n| {
                n.chars()
                    .filter(|c| !c.is_control())
                    .take(200)
                    .collect::<String>()
            })
            .filter(|n| !n.trim().is_empty());
        let called = name
            .as_deref()
            .map(|n| format!(" {n:?}"))
            .unwrap_or_default();
        let ty = crate::media::normalized(&u.media_type);
        let kind = crate::media::listed(&ty);
        let what = match kind {
            Some(MediaKind::Image) => "picture",
            Some(MediaKind::Audio) => "sound",
            _ => "file",
        };
        if size > max {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "The {what}{called} is {}; attachments may be at most {}. Send a smaller one.",
                    size_words(size),
                    size_words(max)
                ),
            ));
        }
        let refused = |e: ContentError| {
            let status = match e {
                ContentError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                ContentError::Base64(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            };
            let also = match kind {
                Some(MediaKind::Image) => "Pictures may be PNG, JPEG, GIF or WebP.".to_owned(),
                _ => format!(
                    "Attachments may be {}.",
                    crate::media::attachable().join(", ")
                ),
            };
            error(
                status,
                format!("The {what}{called} was not sent: {e}. {also}"),
            )
        };
        let media = match kind {
            Some(MediaKind::Image) => {
                Media::image_base64(&u.data, &u.media_type).map_err(refused)?
            }
            Some(_) => {
                let m = Media::base64(&u.data, ty.clone()).map_err(&refused)?;
                let agrees = m
                    .decoded()
                    .is_some_and(|b| crate::media::bytes_are(&ty, &b, true));
                if !agrees {
                    return Err(refused(ContentError::WrongType {
                        claimed: ty,
                        found: None,
                    }));
                }
                m
            }
            None => {
                return Err(error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!(
                        "The file{called} was not sent: the panel does not take {:?} files. Attachments may be {}.",
                        u.media_type,
                        crate::media::attachable().join(", ")
                    ),
                ));
            }
        };
        let media = match name {
            Some(n) => media.with_name(n),
            None => media,
        };
        parts.push(match kind {
            Some(MediaKind::Image) => Part::Image(media),
            Some(MediaKind::Audio) => Part::Audio(media),
            _ => Part::File(media),
        });
    }
    Ok(parts)
}

/// A resource a message names (`"resources": [{"service", "uri"}]`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResourceChoice {
    pub(super) service: String,
    pub(super) uri: String,
}

/// A resource's picture, sound or file, checked as an attachment is: within `max` bytes, of a
/// type the panel takes and whose bytes are that type; a refusal names the resource `uri`.
#[allow(clippy::result_large_err)]
pub(super) fn checked_media(
    p: toolwright_core::Part,
    uri: &str,
    max: usize,
) -> Result<toolwright_core::Part, Response> {
    use crate::MediaKind;
    use toolwright_core::Part;
    let (Part::Image(m) | Part::Audio(m) | Part::File(m)) = &p else {
        return Ok(p);
    };
    let size = m.size();
    if size > max {
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The resource {uri} holds {} of {}; attachments may be at most {}.",
                size_words(size),
                m.media_type,
                size_words(max)
            ),
        ));
    }
    let ty = crate::media::normalized(&m.media_type);
    let kind = crate::media::listed(&ty).filter(|_| {
        m.decoded()
            .is_some_and(|b| crate::media::bytes_are(&ty, &b, true))
    });
    let Some(kind) = kind else {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "The resource {uri} holds {:?} content the panel does not take (or whose bytes are not that type). Attachments may be {}.",
                m.media_type,
                crate::media::attachable().join(", ")
            ),
        ));
    };
    let m = m.clone();
    Ok(match kind {
        MediaKind::Image => Part::Image(m),
        MediaKind::Audio => Part::Audio(m),
        MediaKind::File => Part::File(m),
    })
}

/// `GET /api/sessions/{id}/media/{row}-{part}`: picture, sound or file `part` of the
/// conversation's stored message `row` (the `src` of an [`EntryImage`](crate::EntryImage)), as
/// its bytes — to the conversation's owner only (another principal gets the conversation's
/// `404`). A picture is served only when it is an inline PNG, JPEG, GIF or WebP whose bytes are
/// that type, checked again here, `inline`; a sound of a type the panel plays whose bytes are
/// that type `inline` too; anything else as a download (`attachment`), as
/// `application/octet-stream` unless it is a listed file type whose bytes agree
/// ([`crate::media::served_as`]): never SVG, HTML or anything a browser would run. Each with
/// a `sandbox` policy of its own should it be opened as a page; `no-store` and `nosniff` as
/// every `/api/` answer.
pub(super) async fn get_media(
    State(app): State<Arc<App>>,
    axum::Extension(who): axum::Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Response {
    let Ok(Path((id, which))) = path else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected /api/sessions/{id}/media/{row}-{part}",
        );
    };
    if let Err(why) = check_session_id(Ok(Path(id.clone()))) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let no_image = || {
        error(
            StatusCode::NOT_FOUND,
            "no such picture, sound or file in this conversation (use the src of an entry's image)",
        )
    };
    let Some((row, part)) = which
        .split_once('-')
        .and_then(|(r, p)| Some((r.parse::<u64>().ok()?, p.parse::<usize>().ok()?)))
    else {
        return no_image();
    };
    match access(&app, &id, &who).await {
        Ok(true) => {}
        Ok(false) => return not_found(),
        Err(r) => return r,
    }
    let (base, messages) = match app.sessions.rows(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => return not_found(),
        Err(e) => return store_failed(&e),
    };
    let Some(message) = row
        .checked_sub(base + 1)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| messages.get(i))
    else {
        return no_image();
    };
    let media = match message.parts().get(part) {
        Some(toolwright_core::Part::Image(media)) => {
            // a picture is served as one, checked again whole (one of the four types, and the
            // bytes are it), or not at all
            let Some(bytes) = media
                .decoded()
                .filter(|b| toolwright_core::Media::image_bytes(b, &media.media_type).is_ok())
            else {
                tracing::info!(session = %id, row, part, media_type = %media.media_type, "chat panel: a stored picture is not a PNG, JPEG, GIF or WebP of its type; not served");
                return no_image();
            };
            let (content_type, inline) = crate::media::served_as(&media.media_type, &bytes);
            if !inline {
                return no_image();
            }
            return super::blob::contained(bytes, content_type, true);
        }
        Some(toolwright_core::Part::Audio(media) | toolwright_core::Part::File(media)) => media,
        Some(toolwright_core::Part::Resource(r)) => return super::blob::serve(&app, &id, r).await,
        _ => return no_image(),
    };
    let Some(bytes) = media.decoded() else {
        return no_image();
    };
    // a sound the panel plays in place; anything else downloaded, as its type only when it is
    // a listed one and the bytes agree (never as a page or a picture the browser would run)
    let (content_type, inline) = crate::media::served_as(&media.media_type, &bytes);
    super::blob::contained(bytes, content_type, inline)
}
