//! Media from outside (an MCP server's image, a person's upload) is read without panicking,
//! and only what its bytes are is taken as an image.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use toolwright_core::{ContentError, Media, Message, Part, lower_tool_parts, media_tokens};

fn png_header(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(w.to_be_bytes());
    b.extend(h.to_be_bytes());
    b.extend([8, 6, 0, 0, 0]);
    b
}

proptest! {
    #[test]
    fn any_bytes_are_refused_or_read_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for claimed in ["image/png", "image/jpeg", "image/gif", "image/webp"] {
            match Media::image_bytes(&bytes, claimed) {
                Ok(m) => {
                    let _ = m.dimensions();
                    prop_assert!(media_tokens(&Part::Image(m)) > 0);
                }
                Err(ContentError::WrongType { .. } | ContentError::Unaccepted { .. }) => {}
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }

    #[test]
    fn a_png_header_gives_its_size_back(w in 1u32..100_000, h in 1u32..100_000, tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = png_header(w, h);
        bytes.extend(tail);
        let m = Media::image_bytes(&bytes, "image/png").unwrap();
        prop_assert_eq!(m.dimensions(), Some((w, h)));
        prop_assert!(Media::image_bytes(&bytes, "image/jpeg").is_err());
    }

    #[test]
    fn any_text_as_base64_is_refused_or_decoded(text in ".{0,200}") {
        let _ = Media::image_base64(&text, "image/png");
        let _ = Media::base64(&text, "audio/wav");
    }

    #[test]
    fn lowering_keeps_every_message_and_every_part(n_tools in 1usize..5, with_image in proptest::collection::vec(any::<bool>(), 5)) {
        let img = Part::Image(Media::url("image/png", "https://example.com/a.png"));
        let mut history = vec![Message::user("go")];
        let calls = (0..n_tools).map(|i| toolwright_core::ToolCall::new(format!("c{i}"), "t", serde_json::json!({}))).collect();
        history.push(Message::assistant_with_tool_calls("", calls));
        for (i, &has) in with_image.iter().enumerate().take(n_tools) {
            let parts = if has { vec![img.clone()] } else { vec![] };
            history.push(Message::tool_with_parts(format!("c{i}"), "t", "r", parts));
        }
        let images = with_image[..n_tools].iter().filter(|b| **b).count();
        let sent = lower_tool_parts(&history, |_| false);
        // Every tool message stays, in order, right after the call; the images follow them.
        prop_assert_eq!(sent.len(), history.len() + usize::from(images > 0));
        let moved: usize = sent.iter().flat_map(|m| m.parts()).filter(|p| matches!(p, Part::Image(_))).count();
        prop_assert_eq!(moved, images);
        for m in &sent[2..2 + n_tools] {
            prop_assert!(m.parts().is_empty());
        }
    }
}
