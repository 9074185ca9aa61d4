//! The Anthropic stream parser never panics on any event sequence, and always ends exactly
//! once: with `Finish` after `message_stop`, or with one error, as its last item.
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libfuzzer_sys::fuzz_target;
use toolwright_core::ChatEvent;
use toolwright_model_gateway::anthropic::parse_sse_events;

fuzz_target!(|data: &[u8]| {
    // The input is SSE text: events separated by blank lines, `event:` and `data:` lines.
    let text = String::from_utf8_lossy(data);
    let events: Vec<(&str, String)> = text
        .split("\n\n")
        .map(|block| {
            let mut name = "";
            let mut payload = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim_start();
                } else if let Some(v) = line.strip_prefix("data:") {
                    if !payload.is_empty() {
                        payload.push('\n');
                    }
                    payload.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            (name, payload)
        })
        .collect();
    let out = parse_sse_events(events.iter().map(|(e, d)| (*e, d.as_str())));
    let ends = out
        .iter()
        .filter(|e| matches!(e, Ok(ChatEvent::Finish { .. }) | Err(_)))
        .count();
    assert_eq!(ends, 1);
    assert!(matches!(out.last(), Some(Ok(ChatEvent::Finish { .. }) | Err(_))));
    if matches!(out.last(), Some(Ok(ChatEvent::Finish { .. }))) {
        assert!(events.iter().any(|(_, d)| d.contains("message_stop")));
    }
});
