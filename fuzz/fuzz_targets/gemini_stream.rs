//! Gemini's stream reader: never panics on any bytes, whether read as a stream of events (split
//! at blank lines, as server-sent events are) or as one whole answer; a stream that ends
//! without a `finishReason` is an error, never a `Finish`.
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The backend's wire, compiled as it is (it depends on serde_json and toolwright-core only).
#[allow(dead_code, unused_imports)]
#[path = "../../crates/model-gateway/src/gemini/wire.rs"]
mod wire;

use libfuzzer_sys::fuzz_target;
use toolwright_core::ChatEvent;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut reader = wire::Reader::new();
    let mut out = Vec::new();
    let mut failed = false;
    for event in text.split("\n\n") {
        let payload = event.strip_prefix("data: ").unwrap_or(event);
        if reader.push_data(payload, &mut out).is_err() {
            failed = true;
            break;
        }
    }
    if !failed {
        match reader.finish(true, &mut out) {
            Ok(()) => assert!(matches!(out.last(), Some(ChatEvent::Finish { .. }))),
            Err(_) => assert!(!out.iter().any(|e| matches!(e, ChatEvent::Finish { .. }))),
        }
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
        let _ = wire::parse_response(&v);
    }
});
