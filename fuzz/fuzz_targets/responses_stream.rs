//! The OpenAI Responses stream parser (the backend's own file, included as it is): any bytes
//! read as lines of event JSON never panic it, it says Finish or an error at the end, and
//! nothing follows a Finish. The same bytes as a response's `output` array never panic the
//! whole-response reader.
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

#[path = "../../crates/model-gateway/src/responses/events.rs"]
mod events;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolwright_core::ChatEvent;

fuzz_target!(|data: &[u8]| {
    let mut parser = events::StreamParser::new();
    let mut out = Vec::new();
    let mut failed = false;
    for line in data.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let before = out.len();
        let finished = parser.is_finished();
        if parser.on_event(&v, &mut out).is_err() {
            failed = true;
            break;
        }
        assert!(!finished || out.len() == before, "events after the end");
    }
    let end = parser.on_end();
    let finished = out.iter().any(|e| matches!(e, ChatEvent::Finish { .. }));
    assert!(failed || finished || end.is_err());
    if let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(data) {
        let _ = events::read_output(&items);
    }
});
