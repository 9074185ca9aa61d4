//! Streaming tag parser: never panics, holds at most the tag limit, and gives the same events
//! for any chunking as the whole-text parser.
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libfuzzer_sys::fuzz_target;
use toolwright_output_control::{StreamParser, TagEvent, TagOptions, parse_tool_actions_with};

fn merged(events: impl IntoIterator<Item = TagEvent>) -> Vec<TagEvent> {
    let mut out: Vec<TagEvent> = Vec::new();
    for e in events {
        if let (TagEvent::Text(t), Some(TagEvent::Text(prev))) = (&e, out.last_mut()) {
            prev.push_str(t);
            continue;
        }
        out.push(e);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // First 4 bytes: options and chunk sizes; the rest: the model's text.
    if data.len() < 4 {
        return;
    }
    let (head, body) = data.split_at(4);
    let text = String::from_utf8_lossy(body);
    let opts = TagOptions {
        enabled: head[0] & 0x80 == 0,
        max_tag_bytes: 64 + usize::from(head[1]) * 4,
    };
    let sizes = [usize::from(head[2] % 17) + 1, usize::from(head[3] % 255) + 1];

    let mut p = StreamParser::with_options(opts);
    let mut events = Vec::new();
    let mut i = 0;
    let mut k = 0;
    while i < text.len() {
        let mut j = (i + sizes[k % 2]).min(text.len());
        while !text.is_char_boundary(j) {
            j += 1;
        }
        events.extend(p.push(&text[i..j]));
        assert!(p.held_bytes() <= opts.max_tag_bytes + 3);
        i = j;
        k += 1;
    }
    events.extend(p.finish());
    assert_eq!(merged(events), merged(parse_tool_actions_with(&text, opts)));
});
