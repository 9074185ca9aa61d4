//! Tests named by requirement ID (O1–O7); `grep -r o6_ crates/` finds the proof of O6.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use toolwright_output_control::{
    DecisionError, JsonError, SchemaError, StreamParser, TagEvent, TagOptions, ToolAction,
    ToolDecision, Validator, extract_json, parse_as, parse_tool_actions, parse_tool_actions_with,
    parse_tool_decision, validate,
};

// ---------- helpers ----------

fn action(name: &str, args: &[(&str, &str)]) -> TagEvent {
    TagEvent::Action(ToolAction {
        name: name.into(),
        arguments: args
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect(),
    })
}

fn text(s: &str) -> TagEvent {
    TagEvent::Text(s.into())
}

/// Streams `chunks`, merging adjacent text, including `finish`.
fn stream(chunks: &[&str]) -> Vec<TagEvent> {
    stream_with(chunks, TagOptions::default())
}

fn stream_with(chunks: &[&str], opts: TagOptions) -> Vec<TagEvent> {
    let mut p = StreamParser::with_options(opts);
    let mut out = Vec::new();
    for c in chunks {
        out.extend(p.push(c));
    }
    out.extend(p.finish());
    merge(out)
}

fn merge(events: Vec<TagEvent>) -> Vec<TagEvent> {
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

fn actions(events: &[TagEvent]) -> Vec<&ToolAction> {
    events
        .iter()
        .filter_map(|e| match e {
            TagEvent::Action(a) => Some(a),
            _ => None,
        })
        .collect()
}

/// Every split of `s` into up to three chunks at char boundaries gives `expected`.
fn assert_all_splits(s: &str, expected: &[TagEvent]) {
    let cuts: Vec<usize> = (0..=s.len()).filter(|i| s.is_char_boundary(*i)).collect();
    for (ai, &a) in cuts.iter().enumerate() {
        for &b in &cuts[ai..] {
            let got = stream(&[&s[..a], &s[a..b], &s[b..]]);
            assert_eq!(got, expected, "split at {a}, {b} of {s:?}");
        }
    }
}

// ---------- O1: JSON extraction and schema validation ----------

#[test]
fn o1_extracts_bare_json() {
    assert_eq!(extract_json(r#" {"a": 1} "#).unwrap(), json!({"a": 1}));
    assert_eq!(extract_json("[1, 2]").unwrap(), json!([1, 2]));
    assert_eq!(extract_json("42").unwrap(), json!(42));
}

#[test]
fn o1_extracts_from_json_fence_amid_prose() {
    let t = "好的，下面是结果：\n```json\n{\"city\": \"北京\", \"days\": [1, 2]}\n```\n希望有帮助！{not json}";
    assert_eq!(
        extract_json(t).unwrap(),
        json!({"city": "北京", "days": [1, 2]})
    );
}

#[test]
fn o1_extracts_from_fence_without_language_and_unclosed_fence() {
    assert_eq!(
        extract_json("Here:\n```\n{\"a\": true}\n```").unwrap(),
        json!({"a": true})
    );
    assert_eq!(
        extract_json("Here:\n```json\n{\"a\": true}\n").unwrap(),
        json!({"a": true})
    );
}

#[test]
fn o1_prefers_json_fence_over_other_fence() {
    let t = "```\n{\"example\": 1}\n```\nanswer:\n```json\n{\"real\": 2}\n```";
    assert_eq!(extract_json(t).unwrap(), json!({"real": 2}));
}

#[test]
fn o1_extracts_object_from_prose_with_text_after() {
    let t = r#"I will call it now {"tool": "x", "arguments": {"q": "a}b"}} and then wait."#;
    assert_eq!(
        extract_json(t).unwrap(),
        json!({"tool": "x", "arguments": {"q": "a}b"}})
    );
}

#[test]
fn o1_skips_braces_in_prose_before_the_object() {
    let t = r#"Use {curly} braces [see 1] like this: {"ok": 1}"#;
    assert_eq!(extract_json(t).unwrap(), json!({"ok": 1}));
}

#[test]
fn o1_no_json_is_not_found_with_advice() {
    for t in ["", "   ", "just words", "中文回答，没有 JSON"] {
        let e = extract_json(t).unwrap_err();
        assert_eq!(e, JsonError::NotFound, "{t:?}");
        assert!(e.to_string().contains("reply with a single JSON object"));
    }
}

#[test]
fn o1_malformed_json_names_position_and_fix() {
    let e = extract_json("```json\n{\"a\": 1,}\n```").unwrap_err();
    match &e {
        JsonError::Malformed { line, column, .. } => {
            assert_eq!((*line, *column), (1, 9));
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    assert!(e.to_string().contains("no trailing commas"));
    assert_eq!(e.to_string().matches("line 1").count(), 1, "{e}");
}

#[test]
fn o1_truncated_json_is_reported_as_cut_off() {
    let e = extract_json("结果：{\"tool\": \"search\", \"arguments\": {\"q\": \"ru").unwrap_err();
    assert!(matches!(e, JsonError::Truncated { .. }), "{e:?}");
    assert!(e.to_string().contains("cut off"));
}

fn weather_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"enum": ["c", "f"]},
            "opts": {"type": "object", "properties": {"lang": {"type": "string"}}}
        },
        "required": ["city", "days"],
        "additionalProperties": false
    })
}

#[test]
fn o1_validate_accepts_valid_value() {
    validate(
        &json!({"city": "北京", "days": 3, "unit": "c"}),
        &weather_schema(),
    )
    .unwrap();
}

#[test]
fn o1_validate_lists_every_violation_with_path_and_rule() {
    let v = json!({"days": 9, "unit": "k", "opts": {"lang": 5}, "extra": 1});
    let err = validate(&v, &weather_schema()).unwrap_err();
    let mut got: Vec<(String, String)> = err
        .violations()
        .iter()
        .map(|v| (v.path.clone(), v.keyword.clone()))
        .collect();
    got.sort();
    let want: Vec<(String, String)> = [
        ("", "additionalProperties"),
        ("", "required"),
        ("/days", "maximum"),
        ("/opts/lang", "type"),
        ("/unit", "enum"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(got, want);
    let msg = err.to_string();
    assert!(msg.contains("\"city\" is missing"), "{msg}");
    assert!(
        msg.contains("at /days: is 9, but must be at most 7"),
        "{msg}"
    );
    assert!(
        msg.contains("must be of type string, but is an integer"),
        "{msg}"
    );
    assert!(msg.contains("\"extra\"; remove them"), "{msg}");
}

#[test]
fn o1_for_model_is_a_short_reprompt_naming_path_and_rule() {
    let err = validate(&json!({"city": "", "days": 2}), &weather_schema()).unwrap_err();
    let m = err.for_model();
    assert!(
        m.starts_with("Your JSON does not match the required schema:"),
        "{m}"
    );
    assert!(
        m.contains("at /city: is too short: must have at least 1 characters [minLength]"),
        "{m}"
    );
    assert!(m.ends_with("Send the corrected JSON only, with every problem above fixed."));
}

#[test]
fn o1_validator_is_compiled_once_and_reused() {
    let v = Validator::new(&weather_schema()).unwrap();
    for days in 1..=7 {
        v.validate(&json!({"city": "x", "days": days})).unwrap();
    }
    assert!(v.validate(&json!({"city": "x", "days": 0})).is_err());
    assert!(v.validate(&json!("not an object")).is_err());
}

#[test]
fn o1_invalid_schema_is_reported_not_panicked() {
    let bad = json!({"type": "no-such-type"});
    let err = validate(&json!(1), &bad).unwrap_err();
    assert!(matches!(err, SchemaError::InvalidSchema(_)), "{err:?}");
    assert!(err.violations().is_empty());
    assert!(Validator::new(&json!({"minimum": "ten"})).is_err());
}

#[derive(serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
struct Weather {
    city: String,
    days: u8,
    #[serde(default)]
    unit: Option<String>,
}

#[test]
fn o1_parse_as_typed_from_chatty_text() {
    let w: Weather = parse_as("当然！\n```json\n{\"city\": \"上海\", \"days\": 2}\n```").unwrap();
    assert_eq!(
        w,
        Weather {
            city: "上海".into(),
            days: 2,
            unit: None
        }
    );
}

#[test]
fn o1_parse_as_reports_schema_violation_for_model() {
    let err = parse_as::<Weather>(r#"{"city": 5, "days": 300}"#).unwrap_err();
    let m = err.for_model();
    assert!(m.contains("at /city"), "{m}");
    assert!(m.contains("at /days"), "{m}");
    let err = parse_as::<Weather>("no json at all").unwrap_err();
    assert!(err.to_string().contains("contains no JSON"));
}

#[test]
fn o1_validator_for_type_parses_repeatedly() {
    let v = Validator::for_type::<Weather>().unwrap();
    let w: Weather = v.parse(r#"{"city": "a", "days": 1, "unit": "c"}"#).unwrap();
    assert_eq!(w.unit.as_deref(), Some("c"));
    assert!(v.parse::<Weather>(r#"{"city": "a"}"#).is_err());
}

// ---------- O2: tool decisions (002) and tool_call (004) ----------

#[test]
fn o2_002_call_shape() {
    let d =
        parse_tool_decision(r#"{"tool": "get_weather", "arguments": {"city": "北京"}}"#).unwrap();
    assert_eq!(
        d,
        ToolDecision::Call {
            name: "get_weather".into(),
            arguments: json!({"city": "北京"})
        }
    );
}

#[test]
fn o2_002_reply_shape() {
    let d = parse_tool_decision(r#"{"tool": null, "reply": "北京今天晴。"}"#).unwrap();
    assert_eq!(
        d,
        ToolDecision::Reply {
            text: "北京今天晴。".into()
        }
    );
    let d = parse_tool_decision(r#"{"reply": "only a reply"}"#).unwrap();
    assert_eq!(
        d,
        ToolDecision::Reply {
            text: "only a reply".into()
        }
    );
}

#[test]
fn o2_002_decision_from_fenced_chatty_reply() {
    let t = "Let me check the weather for you.\n\n```json\n{\n  \"tool\": \"get_weather\",\n  \"arguments\": {\"city\": \"Beijing\"}\n}\n```\n\nI'll report back.";
    let d = parse_tool_decision(t).unwrap();
    assert_eq!(
        d,
        ToolDecision::Call {
            name: "get_weather".into(),
            arguments: json!({"city": "Beijing"})
        }
    );
}

#[test]
fn o2_004_tool_call_shape_with_content_beside() {
    let t = r#"{"content": "我来调用工具", "tool_call": {"name": "fs.read", "arguments": {"path": "/tmp/a"}}}"#;
    assert_eq!(
        parse_tool_decision(t).unwrap(),
        ToolDecision::Call {
            name: "fs.read".into(),
            arguments: json!({"path": "/tmp/a"})
        }
    );
}

#[test]
fn o2_004_tool_call_null_is_reply_or_content() {
    assert_eq!(
        parse_tool_decision(r#"{"tool_call": null, "reply": "hi"}"#).unwrap(),
        ToolDecision::Reply { text: "hi".into() }
    );
    assert_eq!(
        parse_tool_decision(r#"{"tool_call": null, "content": "hello"}"#).unwrap(),
        ToolDecision::Reply {
            text: "hello".into()
        }
    );
}

#[test]
fn o2_arguments_as_json_string_are_parsed() {
    let d = parse_tool_decision(r#"{"tool": "s", "arguments": "{\"q\": \"rust\", \"n\": 2}"}"#)
        .unwrap();
    assert_eq!(
        d,
        ToolDecision::Call {
            name: "s".into(),
            arguments: json!({"q": "rust", "n": 2})
        }
    );
    let d = parse_tool_decision(r#"{"tool_call": {"name": "s", "arguments": "{}"}}"#).unwrap();
    assert_eq!(
        d,
        ToolDecision::Call {
            name: "s".into(),
            arguments: json!({})
        }
    );
}

#[test]
fn o2_missing_or_null_arguments_are_empty_object() {
    for t in [
        r#"{"tool": "now"}"#,
        r#"{"tool": "now", "arguments": null}"#,
        r#"{"tool_call": {"name": "now"}}"#,
    ] {
        assert_eq!(
            parse_tool_decision(t).unwrap(),
            ToolDecision::Call {
                name: "now".into(),
                arguments: json!({})
            },
            "{t}"
        );
    }
}

#[test]
fn o2_bad_arguments_say_how_to_fix() {
    let e = parse_tool_decision(r#"{"tool": "s", "arguments": [1, 2]}"#).unwrap_err();
    assert!(matches!(e, DecisionError::BadArguments { .. }));
    assert!(e.to_string().contains("are an array"), "{e}");
    assert!(
        e.to_string()
            .contains("\"arguments\" must be a JSON object")
    );
    let e = parse_tool_decision(r#"{"tool": "s", "arguments": "{q: 1}"}"#).unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
    let e = parse_tool_decision(r#"{"tool": "s", "arguments": "[1]"}"#).unwrap_err();
    assert!(e.to_string().contains("holding an array"), "{e}");
}

#[test]
fn o2_bad_tool_name_says_how_to_fix() {
    let e = parse_tool_decision(r#"{"tool": "  ", "arguments": {}}"#).unwrap_err();
    assert_eq!(
        e,
        DecisionError::BadToolName {
            field: "tool",
            problem: "empty".into()
        }
    );
    let e = parse_tool_decision(r#"{"tool": 7}"#).unwrap_err();
    assert!(
        e.to_string().contains("a number instead of a string"),
        "{e}"
    );
    let e = parse_tool_decision(r#"{"tool_call": {"arguments": {}}}"#).unwrap_err();
    assert!(e.to_string().contains("tool_call.name"), "{e}");
    let e = parse_tool_decision(r#"{"tool_call": "search"}"#).unwrap_err();
    assert!(e.to_string().contains("not an object"), "{e}");
}

#[test]
fn o2_reply_missing_or_wrong_type_is_an_error() {
    let e = parse_tool_decision(r#"{"tool": null}"#).unwrap_err();
    assert!(matches!(e, DecisionError::MissingReply { .. }), "{e:?}");
    let e = parse_tool_decision(r#"{"tool": null, "reply": 3}"#).unwrap_err();
    assert!(e.to_string().contains("not a string"), "{e}");
    let e = parse_tool_decision(r#"{"answer": "x"}"#).unwrap_err();
    assert_eq!(e, DecisionError::NoDecision);
}

#[test]
fn o2_non_object_ambiguous_and_prose_are_errors() {
    assert_eq!(
        parse_tool_decision("[1]").unwrap_err(),
        DecisionError::NotAnObject { found: "an array" }
    );
    assert_eq!(
        parse_tool_decision(r#"{"tool": "a", "tool_call": {"name": "b"}}"#).unwrap_err(),
        DecisionError::Ambiguous
    );
    let e = parse_tool_decision("北京今天晴，无需调用工具。").unwrap_err();
    assert_eq!(e, DecisionError::Json(JsonError::NotFound));
    assert!(e.for_model().contains("Reply with the JSON only"));
}

// ---------- O3: one tag, name and arguments ----------

#[test]
fn o3_example_with_newlines() {
    let t = "<tool_action name=\"vector-search\">\n  <query value=\"读取文件\" />\n  <limit value=\"5\" />\n</tool_action>";
    assert_eq!(
        parse_tool_actions(t),
        vec![action(
            "vector-search",
            &[("query", "读取文件"), ("limit", "5")]
        )]
    );
}

#[test]
fn o3_entities_decoded_in_values_and_name() {
    let t = r#"<tool_action name="a&amp;b"><q value="&quot;x&quot; &lt;y&gt; &apos;z&apos; &#20013;&#x6587; &bogus;"/></tool_action>"#;
    assert_eq!(
        parse_tool_actions(t),
        vec![action("a&b", &[("q", "\"x\" <y> 'z' 中文 &bogus;")])]
    );
}

#[test]
fn o3_either_quote_style() {
    let t = r#"<tool_action name='s'><q value='say "hi"'/><r value="it's"/></tool_action>"#;
    assert_eq!(
        parse_tool_actions(t),
        vec![action("s", &[("q", "say \"hi\""), ("r", "it's")])]
    );
}

#[test]
fn o3_whitespace_and_newlines_anywhere() {
    let t = "<tool_action\n\tname =\n 'x'\r\n >\n\n<q\n value\n=\n\"a\nb\"\n/>  <r value = \"\" / >\n</tool_action\n>";
    // `/ >` is not a self-closing end: the tag is malformed, so it is text.
    assert_eq!(parse_tool_actions(t), vec![text(t)]);
    let t = "<tool_action\n\tname =\n 'x'\r\n >\n\n<q\n value\n=\n\"a\nb\"\n/>  <r value = \"\" />\n</tool_action\n>";
    assert_eq!(
        parse_tool_actions(t),
        vec![action("x", &[("q", "a\nb"), ("r", "")])]
    );
}

#[test]
fn o3_chinese_everywhere() {
    let t = "前文<tool_action name=\"搜索\"><关键词 value=\"读取文件\"/><数量 value='五'/></tool_action>后文";
    assert_eq!(
        parse_tool_actions(t),
        vec![
            text("前文"),
            action("搜索", &[("关键词", "读取文件"), ("数量", "五")]),
            text("后文")
        ]
    );
}

#[test]
fn o3_self_closing_call_and_closed_params() {
    assert_eq!(
        parse_tool_actions(r#"<tool_action name="now"/>"#),
        vec![action("now", &[])]
    );
    let t = r#"<tool_action name="s"><q value="1"></q><r value="2">  </r></tool_action>"#;
    assert_eq!(
        parse_tool_actions(t),
        vec![action("s", &[("q", "1"), ("r", "2")])]
    );
}

#[test]
fn o3_repeated_param_last_wins() {
    let t = r#"<tool_action name="s"><q value="1"/><q value="2"/></tool_action>"#;
    assert_eq!(parse_tool_actions(t), vec![action("s", &[("q", "2")])]);
}

#[test]
fn o3_malformed_tags_are_text() {
    for t in [
        r#"<tool_action>no name</tool_action>"#,
        r#"<tool_action name="">empty</tool_action>"#,
        r#"<tool_action name="  "></tool_action>"#,
        r#"<tool_action id="1" name="x"></tool_action>"#,
        r#"<tool_action name="x">free text inside</tool_action>"#,
        r#"<tool_action name="x"><q/></tool_action>"#,
        r#"<tool_action name="x"><q val="1"/></tool_action>"#,
        r#"<tool_action name=x></tool_action>"#,
        r#"<tool_action name="x"></tool_actio>"#,
        r#"<tool_action name="x"><q value="1"></r></tool_action>"#,
        r#"<tool_actionname="x"></tool_action>"#,
        r#"< tool_action name="x"></tool_action>"#,
        "<tool_action name=\"x\"><q value=\"1\"/>中</tool_action>",
    ] {
        assert_eq!(parse_tool_actions(t), vec![text(t)], "{t}");
    }
}

#[test]
fn o3_stray_angle_brackets_are_text() {
    let t = "if a < b && c<d then <b>bold</b> <tool <tool_act <3";
    assert_eq!(parse_tool_actions(t), vec![text(t)]);
}

// ---------- O4: several tags in order ----------

#[test]
fn o4_several_tags_parsed_in_order_with_text_between() {
    let t = "先搜索：<tool_action name=\"a\"><q value=\"1\"/></tool_action>\n再读取：<tool_action name=\"b\"><p value=\"x\"/></tool_action>\n最后<tool_action name=\"c\"/>。";
    assert_eq!(
        parse_tool_actions(t),
        vec![
            text("先搜索："),
            action("a", &[("q", "1")]),
            text("\n再读取："),
            action("b", &[("p", "x")]),
            text("\n最后"),
            action("c", &[]),
            text("。")
        ]
    );
}

#[test]
fn o4_adjacent_tags_each_returned_on_its_own() {
    let one = r#"<tool_action name="t"><i value="1"/></tool_action>"#;
    let t = one.repeat(3);
    let ev = parse_tool_actions(&t);
    assert_eq!(ev.len(), 3);
    assert!(ev.iter().all(|e| *e == action("t", &[("i", "1")])));
}

#[test]
fn o4_broken_tag_then_real_tag_finds_the_real_one() {
    let t = "<tool_action name=\"a\"><q value=\"1\"/>\n<tool_action name=\"b\"><q value=\"2\"/></tool_action>";
    assert_eq!(
        parse_tool_actions(t),
        vec![
            text("<tool_action name=\"a\"><q value=\"1\"/>\n"),
            action("b", &[("q", "2")])
        ]
    );
    let t = "<tool_action name=\"a\" <tool_action name=\"b\"/>";
    assert_eq!(
        parse_tool_actions(t),
        vec![text("<tool_action name=\"a\" "), action("b", &[])]
    );
}

#[test]
fn o4_tag_inside_code_fence_is_a_call() {
    // Decision (see crate docs): fences do not hide calls.
    let t = "我将调用：\n```xml\n<tool_action name=\"vector-search\">\n  <query value=\"test\" />\n</tool_action>\n```\n";
    assert_eq!(
        parse_tool_actions(t),
        vec![
            text("我将调用：\n```xml\n"),
            action("vector-search", &[("query", "test")]),
            text("\n```\n")
        ]
    );
}

#[test]
fn o4_quoting_the_format_without_running_it() {
    // Escaped or unfinished examples in an explanation never run.
    let t = "The format is `&lt;tool_action name=\"NAME\"&gt;` and ```\n<tool_action name=\"NAME\">\n```";
    let ev = parse_tool_actions(t);
    assert!(actions(&ev).is_empty(), "{ev:?}");
    // A complete quoted example *is* a call (documented); its placeholder name makes the
    // dispatcher answer "Tool not found", which the model sees.
    let t = "Example: `<tool_action name=\"NAME\"></tool_action>`";
    assert_eq!(actions(&parse_tool_actions(t))[0].name, "NAME");
}

// ---------- O5: an unclosed tag never runs ----------

#[test]
fn o5_unclosed_tag_never_executes() {
    let t = "看看<tool_action name=\"rm\"><path value=\"/\"/>";
    assert_eq!(
        parse_tool_actions(t),
        vec![
            text("看看"),
            TagEvent::Unclosed {
                text: "<tool_action name=\"rm\"><path value=\"/\"/>".into()
            }
        ]
    );
}

#[test]
fn o5_stream_waits_until_the_tag_closes() {
    let mut p = StreamParser::new();
    assert_eq!(p.push("a<tool_action name=\"x\">"), vec![text("a")]);
    assert!(p.push("<q value=\"1\"/>").is_empty());
    assert!(p.push("</tool_act").is_empty());
    assert_eq!(p.push("ion>"), vec![action("x", &[("q", "1")])]);
    assert!(p.finish().is_empty());
}

#[test]
fn o5_cut_off_at_end_of_stream_is_flagged_unclosed() {
    for cut in [
        "<tool_action",
        "<tool_action name=\"x",
        "<tool_action name=\"x\"><q value=\"中",
        "<tool_action name=\"x\"></tool_action",
    ] {
        let mut p = StreamParser::new();
        assert!(p.push(cut).is_empty(), "{cut}");
        assert_eq!(
            p.finish(),
            vec![TagEvent::Unclosed { text: cut.into() }],
            "{cut}"
        );
    }
}

#[test]
fn o5_prefix_of_the_opener_at_end_is_plain_text() {
    let mut p = StreamParser::new();
    assert_eq!(p.push("x <tool_ac"), vec![text("x ")]);
    assert_eq!(p.held_bytes(), 8);
    assert_eq!(p.finish(), vec![text("<tool_ac")]);
}

#[test]
fn o5_oversized_tag_is_released_and_flagged() {
    let opts = TagOptions {
        max_tag_bytes: 100,
        ..TagOptions::default()
    };
    let big = format!(
        "<tool_action name=\"x\"><q value=\"{}\"/></tool_action>后",
        "数".repeat(200)
    );
    let mut p = StreamParser::with_options(opts);
    let mut events = Vec::new();
    for ch in big.chars() {
        events.extend(p.push(ch.encode_utf8(&mut [0; 4])));
        // The limit, plus at most 3 bytes to finish a character.
        assert!(p.held_bytes() <= 103, "held {}", p.held_bytes());
    }
    events.extend(p.finish());
    let events = merge(events);
    match &events[0] {
        TagEvent::Oversized { text } => {
            assert!(text.len() >= 100 && text.len() <= 103, "{}", text.len());
            assert!(big.starts_with(text.as_str()));
        }
        other => panic!("expected Oversized, got {other:?}"),
    }
    assert!(actions(&events).is_empty());
    assert_eq!(events.len(), 2);
    assert_eq!(parse_tool_actions_with(&big, opts), events);
}

// ---------- O6: streaming ----------

#[test]
fn o6_three_chunk_example() {
    let mut p = StreamParser::new();
    assert_eq!(
        p.push("思考: 我需要搜索...<tool_action name=\""),
        vec![text("思考: 我需要搜索...")]
    );
    assert_eq!(p.push("vector-search\"><query value=\"test\""), vec![]);
    assert_eq!(
        p.push("\" /></tool_action>接下来..."),
        vec![
            action("vector-search", &[("query", "test")]),
            text("接下来...")
        ]
    );
    assert_eq!(p.finish(), vec![]);
}

#[test]
fn o6_doubled_closing_quote_of_the_spec_example_is_tolerated() {
    let t = r#"<tool_action name="a""><q value="1""/><r value='2''></r></tool_action>"#;
    assert_eq!(
        parse_tool_actions(t),
        vec![action("a", &[("q", "1"), ("r", "2")])]
    );
    let t = r#"<tool_action name="a"><q value="1"x"/></tool_action>"#;
    assert_eq!(parse_tool_actions(t), vec![text(t)]);
}

#[test]
fn o6_plain_chunk_is_emitted_at_once() {
    let mut p = StreamParser::new();
    for c in ["Hello, ", "世界！", "no tags here > at all", ""] {
        let ev = p.push(c);
        if c.is_empty() {
            assert!(ev.is_empty());
        } else {
            assert_eq!(ev, vec![text(c)]);
        }
        assert_eq!(p.held_bytes(), 0);
    }
}

#[test]
fn o6_only_a_possible_tag_suffix_is_held() {
    let mut p = StreamParser::new();
    assert_eq!(p.push("abc <tool"), vec![text("abc ")]);
    assert_eq!(p.held_bytes(), 5);
    assert_eq!(p.push("box>"), vec![text("<toolbox>")]);
    assert_eq!(p.held_bytes(), 0);
    assert_eq!(p.push("a <b> c <"), vec![text("a <b> c ")]);
    assert_eq!(p.held_bytes(), 1);
    assert_eq!(p.push(" x"), vec![text("< x")]);
}

#[test]
fn o6_cross_chunk_tag_is_buffered() {
    let s = "前<tool_action name=\"vector-search\"><query value=\"test\" /></tool_action>后";
    let mut p = StreamParser::new();
    let mut events = Vec::new();
    for ch in s.chars() {
        events.extend(p.push(ch.encode_utf8(&mut [0; 4])));
    }
    events.extend(p.finish());
    assert_eq!(
        merge(events),
        vec![
            text("前"),
            action("vector-search", &[("query", "test")]),
            text("后")
        ]
    );
}

#[test]
fn o6_every_split_point_gives_the_same_events() {
    let s = "思考: 我需要搜索...<tool_action name=\"vector-search\"><query value=\"te&amp;st\" /></tool_action>接下来...";
    assert_all_splits(
        s,
        &[
            text("思考: 我需要搜索..."),
            action("vector-search", &[("query", "te&st")]),
            text("接下来..."),
        ],
    );
}

#[test]
fn o6_every_split_of_a_malformed_tag_gives_the_same_text() {
    let s = "a<tool_action name=\"x\"><q value=\"1\"/> oops 中文 <tool_action name='y'/>";
    assert_all_splits(
        s,
        &[
            text("a<tool_action name=\"x\"><q value=\"1\"/> oops 中文 "),
            action("y", &[]),
        ],
    );
}

#[test]
fn o6_rescan_from_inner_tag_held_across_chunks() {
    let got = stream(&[
        "<tool_action name=\"a\"><q value=\"1\"/><tool_action",
        " name=\"b\"></tool_action>",
    ]);
    assert_eq!(
        got,
        vec![
            text("<tool_action name=\"a\"><q value=\"1\"/>"),
            action("b", &[])
        ]
    );
}

#[test]
fn o6_text_once_emitted_is_never_taken_back() {
    // Everything emitted before the tag is a prefix of the final text, chunk after chunk.
    let chunks = [
        "Result: a",
        " < b ",
        "<tool_action name=\"x\"> <q value=\"1\"/> nope",
        " end",
    ];
    let mut p = StreamParser::new();
    let mut shown = String::new();
    for c in chunks {
        for e in p.push(c) {
            match e {
                TagEvent::Text(t) => shown.push_str(&t),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(p.finish().is_empty());
    assert_eq!(shown, chunks.concat());
}

#[test]
fn o6_push_with_borrows_and_matches_push() {
    let s = "x<tool_action name=\"a\"><q value=\"1\"/></tool_action>y<";
    let mut p = StreamParser::new();
    let mut got = Vec::new();
    p.push_with(s, |e| got.push(e.into_owned()));
    p.finish_with(|e| got.push(e.into_owned()));
    assert_eq!(merge(got), stream(&[s]));
}

// ---------- O7: parsing disabled ----------

#[test]
fn o7_disabled_stream_is_all_text() {
    let off = TagOptions {
        enabled: false,
        ..TagOptions::default()
    };
    let chunks = [
        "思考: 我需要搜索...<tool_action name=\"",
        "vector-search\"><query value=\"test\"",
        "\" /></tool_action>接下来...",
    ];
    let mut p = StreamParser::with_options(off);
    for c in chunks {
        assert_eq!(p.push(c), vec![text(c)]);
        assert_eq!(p.held_bytes(), 0);
    }
    assert!(p.finish().is_empty());
}

#[test]
fn o7_disabled_whole_text_and_unclosed_are_text() {
    let off = TagOptions {
        enabled: false,
        ..TagOptions::default()
    };
    let t = "<tool_action name=\"a\"/> and <tool_action name=\"b\">";
    assert_eq!(parse_tool_actions_with(t, off), vec![text(t)]);
    assert_eq!(
        stream_with(&["<tool_action name=\"b\">"], off),
        vec![text("<tool_action name=\"b\">")]
    );
}

#[test]
fn o7_enabled_by_default() {
    assert!(TagOptions::default().enabled);
    assert!(StreamParser::new().options().enabled);
    assert_eq!(
        parse_tool_actions("<tool_action name=\"a\"/>"),
        vec![action("a", &[])]
    );
}
