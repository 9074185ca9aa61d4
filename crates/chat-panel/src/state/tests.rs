//! The conversation state's unit tests.

use super::*;
use crate::user_address;
use toolwright_core::{Media, Part};
use toolwright_messaging::{OutgoingMessage, QuickReplies};

fn ask(call: &str, text: &str, replies: &[&str]) -> [Message; 2] {
    [
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: call.into(),
                name: "send_message".into(),
                arguments: json!({"recipient": "user", "text": text, "quickReplies": replies}),
            }],
            parts: Vec::new(),
        },
        Message::Tool {
            tool_call_id: call.into(),
            name: "send_message".into(),
            content: r#"{"success":true}"#.into(),
            parts: Vec::new(),
        },
    ]
}

async fn wait_rows(store: &dyn SessionStore, id: &str, n: usize) -> Vec<Message> {
    for _ in 0..200 {
        let m = store.load(id).await.unwrap().messages;
        if m.len() >= n {
            return m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("{id} never reached {n} stored messages");
}

#[tokio::test]
async fn bus_rows_are_kept_for_their_retention_then_go() {
    let store = toolwright_context_engine::MemoryStore::new();
    let memory = BusMemory {
        max_age: std::time::Duration::from_millis(800),
        max_ids: 2,
    };
    let msg = |id: &str| {
        let m = OutgoingMessage::new("ops-bot", "user:conv-0001", id).with_msg_id(id);
        BusMessage::from_payload(&json!({
            "id": 1, "msgId": m.msg_id, "from": m.from, "to": m.to, "text": m.text
        }))
        .unwrap()
    };
    let remembered = || async {
        let v = store.get_state("conv-0001", BUS_SEEN_KEY).await.unwrap();
        let seen: Vec<(String, u64)> = serde_json::from_str(&v.unwrap()).unwrap();
        seen.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
    };
    let count = || async { store.load("conv-0001").await.unwrap().messages.len() };

    store_person_message(&store, &msg("m-1"), memory).await;
    assert_eq!(
        (count().await, remembered().await),
        (2, vec!["m-1".to_owned()])
    );
    // a repeat within the retention is stored once
    store_person_message(&store, &msg("m-1"), memory).await;
    assert_eq!(count().await, 2);
    // past the retention the next message stored takes the old id away
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    store_person_message(&store, &msg("m-2"), memory).await;
    assert_eq!(
        (count().await, remembered().await),
        (4, vec!["m-2".to_owned()])
    );
    // and beyond max_ids the oldest go
    store_person_message(&store, &msg("m-3"), memory).await;
    store_person_message(&store, &msg("m-4"), memory).await;
    assert_eq!(remembered().await, ["m-3", "m-4"]);
    assert_eq!(count().await, 8);
    // one slot per conversation, none per message (the previous version's)
    assert_eq!(
        store
            .get_state("conv-0001", "chat-panel.bus.m-4")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn q10_a_bus_message_from_another_sender_is_stored_and_shown_with_its_quick_replies() {
    let bus = MessageBus::new();
    let store: Arc<dyn SessionStore> = Arc::new(toolwright_context_engine::MemoryStore::new());
    let sessions = Sessions::new(bus.clone(), store.clone(), false, 10);
    sessions.find_or_create("sid-0001", "local").await.unwrap();
    let q = QuickReplies::new(vec!["A".into(), "B".into()]).unwrap();
    bus.send(
        OutgoingMessage::new("ops-bot", user_address("sid-0001"), "pick").with_quick_replies(q),
    )
    .await
    .unwrap();
    // the panel's own agent's messages are shown from its stored call, not stored again
    bus.send(OutgoingMessage::new(
        AGENT_SENDER,
        user_address("sid-0001"),
        "own",
    ))
    .await
    .unwrap();
    let msgs = wait_rows(&*store, "sid-0001", 2).await;
    let entries = entries_from_history("sid-0001", 0, &msgs);
    let shown: Vec<_> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::Message)
        .collect();
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].quick_replies, ["A", "B"]);
    assert_eq!(shown[0].from.as_deref(), Some("ops-bot"));
    assert!(!shown[0].answered);
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert_eq!(store.load("sid-0001").await.unwrap().messages.len(), 2);
}

#[test]
fn q13_q15_a_reply_answers_open_sets_and_records_a_choice_only_when_it_is_an_option() {
    let mut msgs: Vec<Message> = ask("c1", "pick", &["A", "B"]).into();
    msgs.push(Message::user("B"));
    msgs.extend(ask("c2", "again", &["A"]));
    msgs.push(Message::user("something else"));
    let e = entries_from_history("s", 0, &msgs);
    let asked: Vec<&Entry> = e.iter().filter(|e| e.kind == EntryKind::Message).collect();
    assert!(asked[0].answered && asked[0].chosen.as_deref() == Some("B"));
    assert!(asked[1].answered && asked[1].chosen.is_none());
    // the update of the answered set is in the user's row
    let rows = rows_from_history("s", 0, &msgs);
    let user_row = rows.iter().find(|r| r.row == 3).unwrap();
    assert_eq!(user_row.events[0].0, "update");
    assert_eq!(user_row.events[1].1.kind, EntryKind::User);
}

#[test]
fn workers_entry_ids_and_rows_come_from_stored_positions() {
    let mut msgs = vec![Message::user("hi")];
    msgs.extend(ask("c1", "pick", &["A"]));
    msgs.push(Message::assistant("done"));
    let rows = rows_from_history("s", 10, &msgs);
    let numbers: Vec<u64> = rows.iter().map(|r| r.row).collect();
    assert_eq!(numbers, [11, 12, 13, 14]);
    assert_eq!(rows[0].events[0].1.id, 11 * ROW_SLOTS);
    assert_eq!(rows[1].events[0].1.kind, EntryKind::Tool);
    // the tool result row updates the call's entry and shows the message
    assert_eq!(rows[2].events[0].0, "update");
    assert_eq!(rows[2].events[0].1.id, 12 * ROW_SLOTS);
    assert_eq!(rows[2].events[1].1.id, 13 * ROW_SLOTS);
    // the same rows on another worker give the same entries
    assert_eq!(
        entries_from_history("s", 10, &msgs),
        entries_from_history("s", 10, &msgs.clone())
    );
    assert!(live_id() >= LIVE_IDS);
}

#[tokio::test]
async fn sessions_are_capped_evicted_history_is_freed_and_get_never_creates() {
    let bus = MessageBus::new();
    let store: Arc<dyn SessionStore> = Arc::new(toolwright_context_engine::MemoryStore::new());
    let sessions = Sessions::new(bus.clone(), store.clone(), false, 2);
    assert!(!sessions.find("aaaaaaaa").await.unwrap());
    assert!(
        store.list().await.unwrap().is_empty(),
        "a lookup created nothing"
    );
    sessions.find_or_create("aaaaaaaa", "local").await.unwrap();
    assert!(bus.is_subscribed("user:aaaaaaaa"));
    store
        .append("aaaaaaaa", &[Message::user("hello")])
        .await
        .unwrap();
    sessions.find_or_create("bbbbbbbb", "local").await.unwrap();
    sessions.find_or_create("cccccccc", "local").await.unwrap();
    {
        let map = sessions.map.lock().unwrap();
        assert_eq!(map.len(), 2);
        assert!(
            !map.contains_key("aaaaaaaa"),
            "least recently used went first"
        );
    }
    assert_eq!(
        store.list().await.unwrap(),
        ["bbbbbbbb", "cccccccc"],
        "its history was deleted from the store"
    );
}

#[tokio::test]
async fn workers_a_shared_store_is_never_trimmed_or_evicted_from() {
    let bus = MessageBus::new();
    let store: Arc<dyn SessionStore> = Arc::new(toolwright_context_engine::MemoryStore::new());
    let sessions = Sessions::new(bus, store.clone(), true, 1);
    sessions.find_or_create("aaaaaaaa", "local").await.unwrap();
    sessions.find_or_create("bbbbbbbb", "local").await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["aaaaaaaa", "bbbbbbbb"]);
    for i in 0..10 {
        store
            .append(
                "bbbbbbbb",
                &[Message::user(format!("q{i}")), Message::assistant("a")],
            )
            .await
            .unwrap();
    }
    sessions.trim_history("bbbbbbbb", 4).await.unwrap();
    assert_eq!(store.load("bbbbbbbb").await.unwrap().messages.len(), 20);
}

#[tokio::test]
async fn c4_a_conversation_is_rebuilt_from_the_store() {
    let bus = MessageBus::new();
    let store: Arc<dyn SessionStore> = Arc::new(toolwright_context_engine::MemoryStore::new());
    store.create("restored1").await.unwrap();
    let mut round = vec![Message::user("hello")];
    round.extend(ask("c1", "pick", &["A", "B"]));
    round.extend([
        Message::assistant("I asked you above."),
        Message::user("B"),
        Message::assistant("You chose B."),
    ]);
    store.append("restored1", &round).await.unwrap();
    let sessions = Sessions::new(bus, store.clone(), false, 10);
    assert!(sessions.find("restored1").await.unwrap());
    let (base, msgs) = load_rows(&*store, "restored1").await.unwrap().unwrap();
    let entries = entries_from_history("restored1", base, &msgs);
    let kinds: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::User,
            EntryKind::Tool,
            EntryKind::Message,
            EntryKind::Assistant,
            EntryKind::User,
            EntryKind::Assistant
        ]
    );
    let m = &entries[2];
    assert_eq!(m.quick_replies, ["A", "B"]);
    assert!(m.answered);
    assert_eq!(m.chosen.as_deref(), Some("B"));
    assert_eq!(
        entries[1].tool.as_ref().unwrap().result.as_deref(),
        Some(r#"{"success":true}"#)
    );
}

#[tokio::test]
async fn stored_history_is_trimmed_to_whole_turns_and_row_numbers_go_on() {
    let bus = MessageBus::new();
    let store: Arc<dyn SessionStore> = Arc::new(toolwright_context_engine::MemoryStore::new());
    let sessions = Sessions::new(bus, store.clone(), false, 10);
    sessions.find_or_create("long-one", "local").await.unwrap();
    for i in 0..50 {
        store
            .append(
                "long-one",
                &[
                    Message::user(format!("q{i}")),
                    Message::assistant(format!("a{i}")),
                ],
            )
            .await
            .unwrap();
    }
    sessions.trim_history("long-one", 9).await.unwrap();
    let (base, left) = load_rows(&*store, "long-one").await.unwrap().unwrap();
    assert_eq!(left.len(), 8, "whole turns, starting at a user message");
    assert_eq!(left[0], Message::user("q46"));
    assert_eq!(left[7], Message::assistant("a49"));
    assert_eq!(base, 92, "the 93rd message keeps its row number");
    assert_eq!(rows_from_history("long-one", base, &left)[0].row, 93);
}

/// A PNG header of `w`×`h` (enough for the type and the size to be read).
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(w.to_be_bytes());
    b.extend(h.to_be_bytes());
    b.extend([8, 6, 0, 0, 0]);
    b
}

#[test]
fn pictures_of_the_person_and_of_a_tool_are_entries_images_served_by_the_panel() {
    let shot = Media::image_bytes(&png(800, 600), "image/png").unwrap();
    let svg = Media::bytes(b"<svg onload='alert(1)'/>", "image/svg+xml").unwrap();
    let lying = Media::bytes(b"<html></html>", "image/png").unwrap();
    let away = Media::url("image/png", "https://example.com/a.png");
    let history = vec![
        Message::user_with_parts("look", vec![Part::Image(shot.clone())]),
        Message::assistant_with_tool_calls("", vec![ToolCall::new("c1", "shoot", json!({}))]),
        Message::tool_with_parts(
            "c1",
            "shoot",
            "{}",
            vec![
                Part::text("a line"),
                Part::Image(shot),
                Part::Image(svg),
                Part::Image(lying),
                Part::Image(away),
            ],
        ),
    ];
    let entries = entries_from_history("conv-0001", 4, &history);
    let user = &entries[0];
    assert_eq!(user.kind, EntryKind::User);
    assert_eq!(
        user.images,
        [EntryImage {
            kind: crate::MediaKind::Image,
            src: Some("/api/sessions/conv-0001/media/5-0".into()),
            media_type: "image/png".into(),
            name: None,
            size: Some(29),
            width: Some(800),
            height: Some(600),
            text: "[image image/png, 29 bytes not shown]".into(),
            link: false,
        }]
    );
    let tool = &entries[1];
    assert_eq!(tool.kind, EntryKind::Tool);
    let srcs: Vec<Option<&str>> = tool.images.iter().map(|i| i.src.as_deref()).collect();
    // the row is the tool message's (7), the part its place among the message's parts
    assert_eq!(
        srcs,
        [Some("/api/sessions/conv-0001/media/7-1"), None, None, None]
    );
    assert!(tool.images[3].text.contains("https://example.com/a.png"));
}

#[test]
fn media_kept_by_reference_is_served_by_the_panel_only_from_its_blob_store() {
    let blob = |hex: &str, ty: &str| {
        Part::Resource(toolwright_core::ResourceRef::new(
            format!("{}{}", toolwright_core::BLOB_URI_PREFIX, hex.repeat(32)),
            ty,
            31_457_280,
        ))
    };
    let history = vec![
        Message::user("shoot"),
        Message::assistant_with_tool_calls("", vec![ToolCall::new("c1", "shoot", json!({}))]),
        Message::tool_with_parts(
            "c1",
            "shoot",
            "{}",
            vec![
                blob("ab", "image/png"),
                blob("cd", "application/pdf"),
                Part::Resource(toolwright_core::ResourceRef::link(
                    "file:///etc/passwd",
                    "text/plain",
                )),
            ],
        ),
    ];
    let entries = entries_from_history("conv-0001", 0, &history);
    let tool = entries.iter().find(|e| e.kind == EntryKind::Tool).unwrap();
    let shown: Vec<(Option<&str>, bool)> = tool
        .images
        .iter()
        .map(|i| (i.src.as_deref(), i.link))
        .collect();
    assert_eq!(
        shown,
        [
            (Some("/api/sessions/conv-0001/media/3-0"), false),
            (Some("/api/sessions/conv-0001/media/3-1"), true),
            (None, false),
        ]
    );
    assert!(tool.images[1].text.contains("31457280 bytes"));
    assert!(tool.images[2].text.contains("file:///etc/passwd"));
}

#[test]
fn reasoning_goes_with_the_answer_and_before_calls_made_without_text() {
    let thought = |t: &str| {
        Part::Reasoning(toolwright_core::Reasoning::new(
            "openai-chat",
            toolwright_core::ReasoningKind::Full,
            t,
        ))
    };
    let redacted = Part::Reasoning(
        toolwright_core::Reasoning::new("anthropic", toolwright_core::ReasoningKind::Redacted, "")
            .with_encrypted("opaque"),
    );
    let history = vec![
        Message::user("hi"),
        Message::assistant_with_tool_calls("", vec![ToolCall::new("c1", "look", json!({}))])
            .with_parts(vec![thought("I should look first.")]),
        Message::tool("c1", "look", "{}"),
        Message::assistant("Done.").with_parts(vec![thought("It worked."), thought("Say so.")]),
        Message::assistant("Again.").with_parts(vec![redacted]),
    ];
    let entries = entries_from_history("conv-0001", 0, &history);
    let shape: Vec<(EntryKind, &str, Option<&str>)> = entries
        .iter()
        .map(|e| (e.kind, e.text.as_str(), e.reasoning.as_deref()))
        .collect();
    assert_eq!(
        shape,
        [
            (EntryKind::User, "hi", None),
            (EntryKind::Reasoning, "", Some("I should look first.")),
            (EntryKind::Tool, "look", None),
            (EntryKind::Assistant, "Done.", Some("It worked.\n\nSay so.")),
            (EntryKind::Assistant, "Again.", None),
        ]
    );
}

#[tokio::test]
async fn a_run_summary_is_kept_per_answer_and_shown_on_its_last_entry() {
    let store = toolwright_context_engine::MemoryStore::new();
    store.create("conv-0001").await.unwrap();
    let usage = |p: u32| toolwright_core::Usage {
        prompt_tokens: p,
        completion_tokens: 5,
        total_tokens: p + 5,
        ..Default::default()
    };
    let first = RunSummary::of(Some(usage(100)), Some(0.002)).unwrap();
    let second = RunSummary::of(Some(usage(300)), Some(f64::NAN)).unwrap();
    assert_eq!(
        second.cost_usd, None,
        "a price that is not a number is not shown"
    );
    assert_eq!(RunSummary::of(None, Some(1.0)), None);
    record_run(&store, "conv-0001", 2, first).await.unwrap();
    record_run(&store, "conv-0001", 4, second).await.unwrap();
    let history = vec![
        Message::user("a"),
        Message::assistant("A"),
        Message::user("b"),
        Message::assistant("B"),
    ];
    let mut entries = entries_from_history("conv-0001", 0, &history);
    let slot = store.get_state("conv-0001", RUNS_KEY).await.unwrap();
    attach_runs(&mut entries, &read_runs(slot.as_deref()));
    let runs: Vec<Option<u32>> = entries
        .iter()
        .map(|e| e.run.map(|r| r.prompt_tokens))
        .collect();
    assert_eq!(runs, [None, Some(100), None, Some(300)]);
    // the same row again replaces its summary; a slot that cannot be read shows none
    record_run(&store, "conv-0001", 4, first).await.unwrap();
    let slot = store.get_state("conv-0001", RUNS_KEY).await.unwrap();
    assert_eq!(read_runs(slot.as_deref()).len(), 2);
    assert!(read_runs(Some("not json")).is_empty());
}
