//! The media the panel takes from a person and serves back, in one place: which types, how
//! their bytes are checked, and how each is served (shown in place, or downloaded).
//!
//! Pictures and sounds are shown in the page (`<img>`, `<audio controls>`) only when their type
//! is one of [`IMAGE_TYPES`] or [`AUDIO_TYPES`] and their bytes begin as that type does;
//! everything else is a file the person downloads: `Content-Disposition: attachment`, served as
//! its type when it is one of [`FILE_TYPES`] and its bytes agree, as
//! `application/octet-stream` otherwise — an HTML page or an SVG a tool calls a picture is
//! never given to the browser as something it would render or run.

use axum::http::HeaderValue;
use serde::Serialize;

/// The pictures the panel shows and a person may attach.
pub(crate) const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The sounds the panel plays (`<audio controls>`) and a person may attach.
pub(crate) const AUDIO_TYPES: [&str; 6] = [
    "audio/mpeg",
    "audio/wav",
    "audio/ogg",
    "audio/webm",
    "audio/flac",
    "audio/mp4",
];

/// The files (other than pictures and sounds) a person may attach, and the ones the panel
/// serves as their own type (always as a download).
pub(crate) const FILE_TYPES: [&str; 5] = [
    "application/pdf",
    "text/plain",
    "text/markdown",
    "text/csv",
    "application/json",
];

/// What kind of media an entry shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum MediaKind {
    /// A picture, shown in place.
    Image,
    /// A sound, played in place (`<audio controls>`).
    Audio,
    /// A file, a link the person downloads.
    File,
}

/// `ty` lower-cased, without parameters, with the common aliases mapped to the listed name
/// (`image/jpg`, `audio/mp3`, `audio/x-wav`, …).
pub(crate) fn normalized(ty: &str) -> String {
    let t = ty
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match t.as_str() {
        "image/jpg" => "image/jpeg".into(),
        "audio/mp3" | "audio/mpeg3" | "audio/x-mpeg" => "audio/mpeg".into(),
        "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => "audio/wav".into(),
        "audio/x-flac" => "audio/flac".into(),
        "audio/x-m4a" | "audio/m4a" | "audio/aac" => "audio/mp4".into(),
        "text/x-markdown" => "text/markdown".into(),
        _ => t,
    }
}

/// The kind a normalized type is listed as; `None` when it is in no list.
pub(crate) fn listed(ty: &str) -> Option<MediaKind> {
    if IMAGE_TYPES.contains(&ty) {
        Some(MediaKind::Image)
    } else if AUDIO_TYPES.contains(&ty) {
        Some(MediaKind::Audio)
    } else if FILE_TYPES.contains(&ty) {
        Some(MediaKind::File)
    } else {
        None
    }
}

/// Every type a person may attach, pictures first (what the page offers and says).
pub(crate) fn attachable() -> Vec<&'static str> {
    IMAGE_TYPES
        .iter()
        .chain(&AUDIO_TYPES)
        .chain(&FILE_TYPES)
        .copied()
        .collect()
}

/// Whether `bytes` are what the listed type `ty` (normalized) says: its magic number, or for
/// text UTF-8 without NUL. `whole`: the bytes are all of it (else a beginning, whose last
/// character may be cut).
pub(crate) fn bytes_are(ty: &str, bytes: &[u8], whole: bool) -> bool {
    let at = |i: usize, magic: &[u8]| bytes.get(i..i + magic.len()) == Some(magic);
    match ty {
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" => {
            toolwright_core::Media::image_bytes(&bytes[..bytes.len().min(64)], ty).is_ok()
        }
        "audio/mpeg" => at(0, b"ID3") || (bytes.len() > 1 && bytes[0] == 0xFF && bytes[1] >= 0xE0),
        "audio/wav" => at(0, b"RIFF") && at(8, b"WAVE"),
        "audio/ogg" => at(0, b"OggS"),
        "audio/webm" => at(0, &[0x1A, 0x45, 0xDF, 0xA3]),
        "audio/flac" => at(0, b"fLaC"),
        "audio/mp4" => at(4, b"ftyp"),
        "application/pdf" => at(0, b"%PDF-"),
        "text/plain" | "text/markdown" | "text/csv" | "application/json" => {
            !bytes.contains(&0)
                && match std::str::from_utf8(bytes) {
                    Ok(_) => true,
                    Err(e) => !whole && e.error_len().is_none(),
                }
        }
        _ => false,
    }
}

/// The kind an entry shows media of type `ty` as, from its first bytes: a picture or a sound
/// only when its type is listed as one and its bytes agree, else a file.
pub(crate) fn shown_as(ty: &str, head: &[u8]) -> MediaKind {
    let t = normalized(ty);
    match listed(&t) {
        Some(k @ (MediaKind::Image | MediaKind::Audio)) if bytes_are(&t, head, false) => k,
        _ => MediaKind::File,
    }
}

/// How the panel serves the whole `bytes` stored as `ty`: its `Content-Type` and whether it
/// is shown in place (`inline`: a listed picture or sound whose bytes agree) or downloaded
/// (`attachment`). A listed file whose bytes agree keeps its type; anything else is
/// `application/octet-stream`.
pub(crate) fn served_as(ty: &str, bytes: &[u8]) -> (HeaderValue, bool) {
    let t = normalized(ty);
    let Some(kind) = listed(&t).filter(|_| bytes_are(&t, bytes, true)) else {
        return (HeaderValue::from_static("application/octet-stream"), false);
    };
    let content_type = if t.starts_with("text/") {
        format!("{t}; charset=utf-8")
    } else {
        t
    };
    match HeaderValue::from_str(&content_type) {
        Ok(v) => (v, kind != MediaKind::File),
        Err(_) => (HeaderValue::from_static("application/octet-stream"), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = include_bytes!("../tests/fixtures/media/checks-24x16.png");

    #[test]
    fn html_and_svg_are_downloads_of_no_type_whatever_they_claim() {
        let html = b"<html><script>alert(1)</script></html>";
        let svg = b"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>";
        for (ty, bytes) in [
            ("text/html", &html[..]),
            ("image/svg+xml", &svg[..]),
            ("image/png", &svg[..]),
            ("audio/mpeg", &html[..]),
            ("application/pdf", &html[..]),
            ("text/plain; charset=utf-8", &[0u8, 1, 2][..]),
        ] {
            let (ct, inline) = served_as(ty, bytes);
            assert_eq!(ct, "application/octet-stream", "{ty}");
            assert!(!inline, "{ty}");
        }
        assert_eq!(shown_as("image/png", svg), MediaKind::File);
        assert_eq!(shown_as("audio/wav", html), MediaKind::File);
    }

    #[test]
    fn a_listed_type_whose_bytes_agree_keeps_its_type() {
        assert_eq!(
            served_as("image/png", PNG),
            (HeaderValue::from_static("image/png"), true)
        );
        let wav = b"RIFF\x24\0\0\0WAVEfmt ";
        assert_eq!(
            served_as("audio/x-wav", wav),
            (HeaderValue::from_static("audio/wav"), true)
        );
        assert_eq!(shown_as("audio/wav", wav), MediaKind::Audio);
        assert_eq!(
            served_as("application/pdf", b"%PDF-1.4\n"),
            (HeaderValue::from_static("application/pdf"), false)
        );
        assert_eq!(
            served_as("text/csv", "a,b\n1,é\n".as_bytes()),
            (HeaderValue::from_static("text/csv; charset=utf-8"), false)
        );
    }

    #[test]
    fn text_cut_mid_character_is_text_only_as_a_beginning() {
        let cut = &"é".as_bytes()[..1];
        assert!(bytes_are("text/plain", cut, false));
        assert!(!bytes_are("text/plain", cut, true));
    }
}
