//! A model's search query (the `mcp_search_tools` argument) never panics the tool search, and
//! its answer is bounded and ranked, whatever the text.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toolwright_tool_search::{SearchIndex, ToolDoc};

fn index() -> &'static SearchIndex {
    static INDEX: OnceLock<SearchIndex> = OnceLock::new();
    INDEX.get_or_init(|| {
        SearchIndex::new(vec![
            ToolDoc::new("fs__read_file", "Read the complete contents of a file."),
            ToolDoc::new("fs__list_directory", "List files and directories in a path.")
                .with_group("fs", "本地文件系统")
                .with_keywords(["文件", "files"]),
            ToolDoc::new("web__navigate", "Navigate the browser to a URL."),
            ToolDoc::new("time__now", "Get the current time in a timezone."),
        ])
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let limit = data.first().map_or(5, |b| usize::from(*b % 16));
    let hits = index().search(&text, limit);
    assert!(hits.len() <= limit);
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    // Any text as a tool's own description indexes without panicking.
    let _ = SearchIndex::new(vec![ToolDoc::new(text.as_ref(), text.as_ref())]).search("file", 3);
});
