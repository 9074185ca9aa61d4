//! Property tests: chunking invariance of the streaming parser (O6), no panics (O3–O6, O1),
//! JSON extraction round trips (O1).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::Value;
use toolwright_output_control::{
    StreamParser, TagEvent, TagOptions, extract_json, parse_tool_actions_with, parse_tool_decision,
};

/// Fragments that combine into valid, broken and cut-off tags, with multi-byte text.
const FRAGMENTS: &[&str] = &[
    "<tool_action",
    "<tool_action name=\"vector-search\">",
    "<tool_action name='a'>",
    "<tool_action name=\"x\"/>",
    " name=\"",
    "name",
    "=",
    "\"",
    "'",
    "\"\"",
    ">",
    "/>",
    "<query value=\"test\" />",
    "<q value='中&amp;文'/>",
    "<q value=\"1\"></q>",
    "</q>",
    "<q",
    " value=",
    "</tool_action>",
    "</tool_action",
    "<",
    "</",
    "<tool",
    "思考: 我需要搜索...",
    "接下来...",
    "中",
    "😀",
    " ",
    "\n",
    "\t",
    "&quot;",
    "&#x4E2D;",
    "a",
    "```xml\n",
    "```",
    "value",
];

fn tagish_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40).prop_map(|v| v.concat()),
        1 => any::<String>(),
        1 => "[<>a-z_=\"' /\n中]{0,80}",
    ]
}

/// Splits `s` at char boundaries picked from `cuts` (as fractions of the length).
fn split_at_cuts<'a>(s: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| {
            let mut i = if s.is_empty() { 0 } else { c % (s.len() + 1) };
            while !s.is_char_boundary(i) {
                i -= 1;
            }
            i
        })
        .collect();
    points.push(0);
    points.push(s.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| &s[w[0]..w[1]]).collect()
}

fn merged(events: impl IntoIterator<Item = TagEvent>) -> Vec<TagEvent> {
    let mut out: Vec<TagEvent> = Vec::new();
    for e in events {
        if let (TagEvent::Text(t), Some(TagEvent::Text(prev))) = (&e, out.last_mut()) {
            prev.push_str(t);
            continue;
        }
        if matches!(&e, TagEvent::Text(t) if t.is_empty()) {
            continue;
        }
        out.push(e);
    }
    out
}

fn streamed(chunks: &[&str], opts: TagOptions) -> Vec<TagEvent> {
    let mut p = StreamParser::with_options(opts);
    let mut all = Vec::new();
    for c in chunks {
        all.extend(p.push(c));
    }
    all.extend(p.finish());
    merged(all)
}

/// The raw text of every event but actions, concatenated.
fn non_action_text(events: &[TagEvent]) -> String {
    events
        .iter()
        .map(|e| match e {
            TagEvent::Text(t)
            | TagEvent::Unclosed { text: t }
            | TagEvent::Oversized { text: t } => t.as_str(),
            _ => "",
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn o6_prop_any_chunking_equals_whole_text(
        s in tagish_text(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let opts = TagOptions::default();
        let whole = parse_tool_actions_with(&s, opts);
        let chunks = split_at_cuts(&s, &cuts);
        prop_assert_eq!(streamed(&chunks, opts), merged(whole));
    }

    #[test]
    fn o6_prop_any_chunking_equals_whole_text_with_small_tag_limit(
        s in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..60).prop_map(|v| v.concat()),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
    ) {
        let opts = TagOptions { max_tag_bytes: 64, ..TagOptions::default() };
        let whole = parse_tool_actions_with(&s, opts);
        let chunks = split_at_cuts(&s, &cuts);
        prop_assert_eq!(streamed(&chunks, opts), merged(whole));
    }

    #[test]
    fn o6_prop_byte_by_char_stream_equals_whole_text(s in tagish_text()) {
        let opts = TagOptions::default();
        let chunks: Vec<String> = s.chars().map(String::from).collect();
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        prop_assert_eq!(streamed(&refs, opts), merged(parse_tool_actions_with(&s, opts)));
    }

    #[test]
    fn o5_prop_text_is_never_lost_when_no_tag_can_close(raw in tagish_text()) {
        // Without a closing marker no action can complete, so every byte comes back as text.
        let s = raw.replace("</tool_action", "</X").replace("/>", "/ >");
        let events = parse_tool_actions_with(&s, TagOptions::default());
        prop_assert_eq!(non_action_text(&events), s);
    }

    #[test]
    fn o6_prop_parser_never_panics_on_arbitrary_input(
        chunks in prop::collection::vec(any::<String>(), 0..8),
        max in 0usize..300,
    ) {
        let opts = TagOptions { max_tag_bytes: max, ..TagOptions::default() };
        let mut p = StreamParser::with_options(opts);
        for c in &chunks {
            let _ = p.push(c);
            prop_assert!(p.held_bytes() <= opts.max_tag_bytes.max(64) + 3);
        }
        let _ = p.finish();
    }

    #[test]
    fn o7_prop_disabled_returns_input_unchanged(s in tagish_text(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let off = TagOptions { enabled: false, ..TagOptions::default() };
        let chunks = split_at_cuts(&s, &cuts);
        let events = streamed(&chunks, off);
        prop_assert_eq!(non_action_text(&events), s.clone());
        prop_assert!(events.iter().all(|e| matches!(e, TagEvent::Text(_))));
    }

    #[test]
    fn o1_prop_extract_json_never_panics(s in prop_oneof![
        any::<String>(),
        "[{}\\[\\]\":,0-9a-z ` \n]{0,120}",
        prop::collection::vec(prop::sample::select(&["{", "}", "[", "]", "\"", ":", ",", "```json\n", "```\n", "1", "null", " ", "中", "\\"][..]), 0..60).prop_map(|v| v.concat()),
    ]) {
        let _ = extract_json(&s);
        let _ = parse_tool_decision(&s);
    }

    #[test]
    fn o1_prop_extract_json_finds_any_object_amid_prose(
        v in json_object(),
        before in "[a-zA-Z 中文。，!?\n]{0,40}",
        after in "[a-zA-Z 中文。，!?\n]{0,40}",
        fenced in any::<bool>(),
    ) {
        let body = serde_json::to_string_pretty(&v).unwrap();
        let text = if fenced {
            format!("{before}\n```json\n{body}\n```\n{after}")
        } else {
            format!("{before}{body}{after}")
        };
        prop_assert_eq!(extract_json(&text).unwrap(), v);
    }
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z中{}\\[\\]\"` ]{0,10}".prop_map(Value::String),
    ]
}

fn json_object() -> impl Strategy<Value = Value> {
    let value = json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z_]{1,6}", value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}
