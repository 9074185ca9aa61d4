//! JSON extraction and tool-decision parsing never panic on any text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(v) = toolwright_output_control::extract_json(&text) {
        // Whatever was extracted must be found again when it is the whole answer.
        let again = toolwright_output_control::extract_json(&v.to_string());
        assert_eq!(again.ok(), Some(v));
    }
    let _ = toolwright_output_control::parse_tool_decision(&text);
});
