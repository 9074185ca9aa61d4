//! A judge model's answer (its second look at the tool search's candidates) never panics
//! the reader, and what is read back is only candidates, each once, whatever the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolwright_tool_search::judge::{Verdict, read};

const NAMES: [&str; 4] = ["fs__read_file", "maps__elevation", "git__stash", "读取__文件"];

fuzz_target!(|data: &[u8]| {
    let answer = String::from_utf8_lossy(data);
    if let Some(Verdict::Picks(picks)) = read(&answer, &NAMES) {
        assert!(!picks.is_empty());
        assert!(picks.iter().all(|&i| i < NAMES.len()));
        let mut seen = picks.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), picks.len());
    }
});
