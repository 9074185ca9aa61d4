//! Media an MCP server or a person sends: the image check (magic number, claimed type, size)
//! and the header reader behind `Media::dimensions` never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolwright_core::{Media, Part, media_tokens};

fuzz_target!(|data: &[u8]| {
    for claimed in ["image/png", "image/jpeg", "image/gif", "image/webp", "image/jpg"] {
        if let Ok(m) = Media::image_bytes(data, claimed) {
            let _ = m.dimensions();
            let _ = media_tokens(&Part::Image(m));
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Media::image_base64(text, "image/png").map(|m| m.dimensions());
        let _ = Media::base64(text, "audio/wav").map(|m| m.size());
    }
});
