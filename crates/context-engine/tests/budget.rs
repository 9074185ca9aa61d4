//! C3: token counting and building a request inside a budget.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use toolwright_context_engine::{
    ContextBuilder, ContextError, DropReason, History, TiktokenCounter, TokenizerError,
    counter_for_model,
};
use toolwright_core::{EstimateCounter, Message, REPLY_PRIMING_TOKENS, TokenCounter, ToolCall};

fn call(id: &str) -> ToolCall {
    ToolCall::new(id, "search", json!({"q": id}))
}

fn history(msgs: Vec<Message>) -> History {
    History::from_messages(Arc::new(EstimateCounter), msgs)
}

/// The rules an OpenAI-compatible endpoint enforces: every tool message answers a call of the
/// assistant message right before its run of tool messages, and every call is answered.
fn assert_valid_openai_sequence(msgs: &[Message]) {
    let mut i = 0;
    while i < msgs.len() {
        match &msgs[i] {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                let mut open: HashSet<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
                i += 1;
                while let Some(Message::Tool { tool_call_id, .. }) = msgs.get(i) {
                    assert!(
                        open.remove(tool_call_id.as_str()),
                        "tool message {i} answers no open call: {msgs:#?}"
                    );
                    i += 1;
                }
                assert!(open.is_empty(), "unanswered tool calls {open:?}: {msgs:#?}");
            }
            Message::Tool { .. } => panic!("orphan tool message at {i}: {msgs:#?}"),
            _ => i += 1,
        }
    }
}

#[test]
fn c3_tiktoken_counts_known_openai_models_exactly() {
    let gpt4o = TiktokenCounter::for_model("gpt-4o").unwrap();
    let gpt4 = TiktokenCounter::for_model("gpt-4").unwrap();
    assert_eq!(gpt4o.encoding_name(), "o200k_base");
    assert_eq!(gpt4.encoding_name(), "cl100k_base");
    for m in ["gpt-4.1-mini", "o3-mini", "o1", "openai/gpt-4o-mini"] {
        assert_eq!(
            TiktokenCounter::for_model(m).unwrap().id(),
            "tiktoken/o200k_base",
            "{m}"
        );
    }
    assert_eq!(
        TiktokenCounter::for_model("gpt-3.5-turbo").unwrap().id(),
        "tiktoken/cl100k_base"
    );
    // The OpenAI cookbook's example, and a string where the two encodings differ.
    assert_eq!(gpt4o.count_text("tiktoken is great!"), 6);
    assert_eq!(gpt4.count_text("tiktoken is great!"), 6);
    assert_eq!(gpt4o.count_text("你好世界"), 2);
    assert_eq!(gpt4.count_text("你好世界"), 5);
    // Special-token text in a message is ordinary text, never a control token.
    assert_eq!(gpt4o.count_text("<|endoftext|>"), 7);
    // Framing: 3 per message + role + content.
    assert_eq!(
        gpt4o.count_message(&Message::user("tiktoken is great!")),
        3 + 1 + 6
    );
}

#[test]
fn c3_unknown_models_fall_back_to_a_documented_estimate() {
    assert!(matches!(
        TiktokenCounter::for_model("qwen2.5-7b-instruct"),
        Err(TokenizerError::UnknownModel { .. })
    ));
    let c = counter_for_model("deepseek-chat");
    assert_eq!(c.id(), "estimate/v1");
    assert_eq!(c.count_text("abcdef"), 2);
    assert_eq!(c.count_text("abcdefg"), 3);
    assert_eq!(c.count_text("读取文件"), 4);
    assert_eq!(c.count_text("ab读cd"), 1 + 1 + 1);
    // The estimate errs high for English against the real tokenizer.
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(50);
    let real = TiktokenCounter::o200k_base().unwrap().count_text(&text);
    assert!(
        c.count_text(&text) >= real,
        "{} < {real}",
        c.count_text(&text)
    );
}

#[test]
fn c3_custom_counter_plugs_in_and_cached_counts_follow_its_id() {
    struct Words;
    impl TokenCounter for Words {
        fn id(&self) -> &str {
            "words"
        }
        fn count_text(&self, t: &str) -> usize {
            t.split_whitespace().count()
        }
    }
    let h = History::from_messages(Arc::new(Words), vec![Message::user("one two three")]);
    assert_eq!(h.token_counts(), &[3 + 1 + 3]);
    let by_words = ContextBuilder::new("")
        .with_counter(Arc::new(Words))
        .build(&h)
        .unwrap();
    assert_eq!(by_words.tokens, 7 + REPLY_PRIMING_TOKENS);
    // A builder with another counter recounts instead of trusting the cache.
    let by_estimate = ContextBuilder::new("").build(&h).unwrap();
    let expected = EstimateCounter.count_message(&Message::user("one two three"));
    assert_eq!(by_estimate.tokens, expected + REPLY_PRIMING_TOKENS);
}

#[test]
fn c3_cached_counts_equal_fresh_counts() {
    let counter: Arc<dyn TokenCounter> = Arc::new(TiktokenCounter::o200k_base().unwrap());
    let msgs = vec![
        Message::user("读取文件 please"),
        Message::assistant_with_tool_calls("calling", vec![call("c1")]),
        Message::tool("c1", "search", "result text"),
        Message::assistant("done"),
    ];
    let mut h = History::new(counter.clone());
    h.extend(msgs.clone());
    let b = ContextBuilder::new("base")
        .with_counter(counter)
        .with_budget(10_000);
    assert_eq!(b.build(&h).unwrap(), b.build_messages(&msgs).unwrap());
}

#[test]
fn c3_tool_results_never_orphaned() {
    // Budget fits the newest turn and the tool round's results, but not the tool-call
    // message together with them: the whole round goes.
    let big = "x".repeat(300);
    let h = history(vec![
        Message::user("q1"),
        Message::assistant_with_tool_calls("", vec![call("a"), call("b")]),
        Message::tool("a", "search", &big),
        Message::tool("b", "search", &big),
        Message::assistant("answer 1"),
        Message::user("q2"),
    ]);
    for budget in 0..400 {
        if let Ok(ctx) = ContextBuilder::new("sys").with_budget(budget).build(&h) {
            assert_valid_openai_sequence(&ctx.messages);
            let kept: HashSet<usize> = ctx.kept.iter().copied().collect();
            let round = [1, 2, 3];
            assert!(
                round.iter().all(|i| kept.contains(i)) || round.iter().all(|i| !kept.contains(i)),
                "budget {budget}: round split: {:?}",
                ctx.kept
            );
        }
    }
}

#[test]
fn c3_drops_oldest_turns_first_and_keeps_system_and_newest_user() {
    let h = history(vec![
        Message::user("old question ".repeat(10)),
        Message::assistant("old answer ".repeat(10)),
        Message::user("mid question"),
        Message::assistant("mid answer"),
        Message::user("newest question"),
    ]);
    let b = ContextBuilder::new("You are helpful.");
    let all = b.clone().build(&h).unwrap();
    assert_eq!(all.kept, vec![0, 1, 2, 3, 4]);
    // Just enough for everything but the first two messages.
    let budget = all.tokens - h.token_counts()[0] - h.token_counts()[1];
    let ctx = b.clone().with_budget(budget).build(&h).unwrap();
    assert_eq!(ctx.kept, vec![2, 3, 4]);
    assert_eq!(ctx.dropped_count(DropReason::OverBudget), 2);
    assert_eq!(ctx.tokens, budget);
    assert_eq!(ctx.messages[0], Message::system("You are helpful."));
    assert_eq!(ctx.messages.last(), Some(&Message::user("newest question")));
    // Minimal budget: only the pinned messages.
    let pinned = b.system_prompt();
    let min = EstimateCounter.count_message(&Message::system(pinned))
        + h.token_counts()[4]
        + REPLY_PRIMING_TOKENS;
    let ctx = b.clone().with_budget(min).build(&h).unwrap();
    assert_eq!(ctx.kept, vec![4]);
    assert_eq!(ctx.tokens, min);
}

#[test]
fn c3_newest_user_is_kept_even_when_it_is_a_json_loop_tool_result() {
    let h = history(vec![
        Message::user("find the file"),
        Message::assistant(r#"{"tool": "search", "arguments": {"q": "file"}}"#),
        Message::user("[Tool result for search]\nfound: a.txt"),
    ]);
    let b = ContextBuilder::new("sys");
    let full = b.clone().build(&h).unwrap();
    let ctx = b.with_budget(full.tokens - 1).build(&h).unwrap();
    assert_eq!(ctx.kept.last(), Some(&2));
    assert!(!ctx.kept.contains(&0));
}

#[test]
fn c3_orphan_and_incomplete_tool_messages_in_history_are_dropped() {
    let h = history(vec![
        Message::tool("ghost", "search", "orphan: its call was never stored"),
        Message::user("q1"),
        Message::assistant_with_tool_calls("", vec![call("a"), call("b")]),
        Message::tool("a", "search", "only a answered"),
        Message::user("q2"),
        Message::assistant_with_tool_calls("", vec![call("c")]),
        Message::tool("c", "search", "ok"),
        Message::tool("c", "search", "duplicate answer"),
        Message::assistant("answer"),
    ]);
    let ctx = ContextBuilder::new("sys").build(&h).unwrap();
    assert_valid_openai_sequence(&ctx.messages);
    assert_eq!(ctx.kept, vec![1, 4, 5, 6, 8]);
    assert_eq!(ctx.dropped_count(DropReason::OrphanToolResult), 2); // 0 and 7
    assert_eq!(ctx.dropped_count(DropReason::IncompleteToolRound), 2); // 2 and 3
}

#[test]
fn c3_message_bigger_than_the_budget_is_a_typed_error_when_pinned_and_dropped_otherwise() {
    let huge = "word ".repeat(10_000);
    // The newest user message is pinned: a typed error, no panic.
    let h = history(vec![Message::user("hi"), Message::user(&huge)]);
    let err = ContextBuilder::new("sys")
        .with_budget(500)
        .build(&h)
        .unwrap_err();
    let ContextError::PinnedOverBudget { needed, budget } = err.clone() else {
        panic!("{err:?}")
    };
    assert_eq!(budget, 500);
    assert!(needed > 500);
    assert!(err.to_string().contains("raise the budget"));
    // The system prompt alone too big: same error.
    let h = history(vec![Message::user("hi")]);
    assert!(
        ContextBuilder::new(&huge)
            .with_budget(500)
            .build(&h)
            .is_err()
    );
    // A huge older message is dropped, with everything older than it.
    let h = history(vec![
        Message::user("ancient"),
        Message::assistant(&huge),
        Message::user("recent"),
        Message::assistant("short"),
        Message::user("now"),
    ]);
    let ctx = ContextBuilder::new("sys")
        .with_budget(500)
        .build(&h)
        .unwrap();
    assert_eq!(ctx.kept, vec![2, 3, 4]);
    assert!(ctx.tokens <= 500);
    // Budget zero: an error, not a panic.
    assert!(ContextBuilder::new("").with_budget(0).build(&h).is_err());
    // Empty history, empty prompt: just the reply priming.
    let ctx = ContextBuilder::new("").build(&history(vec![])).unwrap();
    assert!(ctx.messages.is_empty());
    assert_eq!(ctx.tokens, REPLY_PRIMING_TOKENS);
}

#[derive(Debug, Clone)]
enum Event {
    User(usize),
    JsonLoopResult(usize),
    Assistant(usize),
    System(usize),
    ToolRound {
        calls: usize,
        len: usize,
        missing: bool,
        user_between: bool,
    },
    Orphan(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0usize..200).prop_map(Event::User),
        1 => (0usize..200).prop_map(Event::JsonLoopResult),
        3 => (0usize..200).prop_map(Event::Assistant),
        1 => (0usize..50).prop_map(Event::System),
        4 => (1usize..4, 0usize..400, proptest::bool::weighted(0.15), proptest::bool::weighted(0.1))
            .prop_map(|(calls, len, missing, user_between)| Event::ToolRound { calls, len, missing, user_between }),
        1 => (0usize..100).prop_map(Event::Orphan),
    ]
}

fn materialise(events: &[Event]) -> Vec<Message> {
    let mut out = Vec::new();
    for (n, e) in events.iter().enumerate() {
        let text = |len: usize| {
            "lorem ipsum 读 "
                .chars()
                .cycle()
                .take(len)
                .collect::<String>()
        };
        match e {
            Event::User(l) => out.push(Message::user(text(*l))),
            Event::JsonLoopResult(l) => out.push(Message::user(format!(
                "[Tool result for search]\n{}",
                text(*l)
            ))),
            Event::Assistant(l) => out.push(Message::assistant(text(*l))),
            Event::System(l) => out.push(Message::system(text(*l))),
            Event::ToolRound {
                calls,
                len,
                missing,
                user_between,
            } => {
                let ids: Vec<String> = (0..*calls).map(|k| format!("call_{n}_{k}")).collect();
                out.push(Message::assistant_with_tool_calls(
                    text(*len / 4),
                    ids.iter().map(|id| call(id)).collect(),
                ));
                if *user_between {
                    out.push(Message::user("interrupting"));
                }
                let answered = if *missing { calls - 1 } else { *calls };
                for id in ids.iter().rev().take(answered) {
                    out.push(Message::tool(id.as_str(), "search", text(*len)));
                }
            }
            Event::Orphan(l) => out.push(Message::tool(format!("ghost_{n}"), "search", text(*l))),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// For any history and budget: the output is a valid OpenAI sequence, keeps history order,
    /// accounts for every message, fits the budget, and fails only if the pinned messages alone
    /// do not fit.
    #[test]
    fn c3_prop_built_context_is_valid_and_fits_the_budget(
        events in proptest::collection::vec(event(), 0..40),
        base_len in 0usize..300,
        budget in 0usize..3000,
    ) {
        let msgs = materialise(&events);
        let h = history(msgs.clone());
        let base = "b".repeat(base_len);
        let b = ContextBuilder::new(base.clone()).with_budget(budget);

        let counter = EstimateCounter;
        let newest_user = msgs.iter().rposition(|m| matches!(m, Message::User { .. }));
        let mut pinned = REPLY_PRIMING_TOKENS;
        if !base.is_empty() {
            pinned += counter.count_message(&Message::system(base.clone()));
        }
        for (i, m) in msgs.iter().enumerate() {
            if matches!(m, Message::System { .. }) || Some(i) == newest_user {
                pinned += counter.count_message(m);
            }
        }

        match b.build(&h) {
            Err(ContextError::PinnedOverBudget { needed, .. }) => {
                prop_assert!(pinned > budget);
                prop_assert_eq!(needed, pinned);
            }
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
            Ok(ctx) => {
                prop_assert!(pinned <= budget);
                assert_valid_openai_sequence(&ctx.messages);
                prop_assert!(ctx.tokens <= budget);
                let sent: usize = ctx.messages.iter().map(|m| counter.count_message(m)).sum();
                prop_assert_eq!(ctx.tokens, sent + REPLY_PRIMING_TOKENS);
                // Order and identity: system first, then history[kept] in order.
                let offset = usize::from(!base.is_empty());
                prop_assert!(ctx.kept.windows(2).all(|w| w[0] < w[1]));
                for (k, &i) in ctx.kept.iter().enumerate() {
                    prop_assert_eq!(&ctx.messages[k + offset], &msgs[i]);
                }
                if let Some(u) = newest_user {
                    prop_assert!(ctx.kept.contains(&u));
                }
                // Every message is kept or dropped, never both.
                let mut all: Vec<usize> = ctx.kept.clone();
                all.extend(ctx.dropped.iter().map(|d| d.index));
                all.sort_unstable();
                prop_assert_eq!(all, (0..msgs.len()).collect::<Vec<_>>());
                // Oldest first: every message dropped for the budget is older than every kept
                // message that is not pinned.
                let first_kept_unpinned = ctx.kept.iter().copied().find(|&i| {
                    !matches!(msgs[i], Message::System { .. }) && Some(i) != newest_user
                });
                if let Some(k) = first_kept_unpinned {
                    for d in ctx.dropped.iter().filter(|d| d.reason == DropReason::OverBudget) {
                        prop_assert!(d.index < k, "dropped {} newer than kept {}", d.index, k);
                    }
                }
            }
        }
    }
}

/// The estimate's definition, character by character: a CJK character is one token and ends
/// the run before it; every other run of characters is one token per three. (CJK here is the
/// unified ideographs, the only CJK the strategy below generates.)
fn estimate_reference(text: &str) -> usize {
    let (mut tokens, mut run) = (0usize, 0usize);
    for c in text.chars() {
        let cjk = matches!(c as u32, 0x4E00..=0x9FFF);
        if cjk {
            tokens += run.div_ceil(3) + 1;
            run = 0;
        } else {
            run += 1;
        }
    }
    tokens + run.div_ceil(3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C3: the estimate's shortcut for ASCII text (one run, no CJK) counts exactly what the
    /// per-character definition counts, and mixed text is unchanged by it.
    #[test]
    fn c3_estimate_ascii_shortcut_matches_the_definition(
        text in "[ -~]{0,64}|[a-z 你好世界é]{0,64}",
    ) {
        use toolwright_core::TokenCounter;
        prop_assert_eq!(EstimateCounter.count_text(&text), estimate_reference(&text));
    }
}

/// A round is kept when each of its calls is answered once, in any order, however many calls
/// it has (up to 64 the builder tracks them in a bit set, above in a hash set: both ways here);
/// a repeated call id is one call.
#[test]
fn c3_rounds_of_many_calls_and_repeated_ids_are_kept_only_when_every_call_is_answered() {
    for n in [1usize, 2, 63, 64, 65, 130] {
        let ids: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let round = |answered: &[usize]| {
            let mut msgs = vec![
                Message::user("q"),
                Message::assistant_with_tool_calls("", ids.iter().map(|i| call(i)).collect()),
            ];
            msgs.extend(
                answered
                    .iter()
                    .map(|&i| Message::tool(ids[i].as_str(), "search", "r")),
            );
            msgs.push(Message::user("next"));
            ContextBuilder::new("sys").build(&history(msgs)).unwrap()
        };
        let all: Vec<usize> = (0..n).rev().collect();
        let ctx = round(&all);
        assert_valid_openai_sequence(&ctx.messages);
        assert_eq!(ctx.kept.len(), n + 3, "n = {n}");
        let ctx = round(&all[1..]);
        assert_valid_openai_sequence(&ctx.messages);
        assert_eq!(
            ctx.dropped_count(DropReason::IncompleteToolRound),
            n,
            "n = {n}: one call unanswered"
        );
        if n > 1 {
            let mut twice = all.clone();
            twice[1] = twice[0];
            let ctx = round(&twice);
            assert_valid_openai_sequence(&ctx.messages);
            // The second answer to one call ends the round there: the call and its first
            // answer are an incomplete round, the answers after it orphans.
            assert_eq!(
                ctx.dropped_count(DropReason::IncompleteToolRound),
                2,
                "n = {n}"
            );
            assert_eq!(
                ctx.dropped_count(DropReason::OrphanToolResult),
                n - 1,
                "n = {n}"
            );
        }
    }
    let h = history(vec![
        Message::user("q"),
        Message::assistant_with_tool_calls("", vec![call("a"), call("a")]),
        Message::tool("a", "search", "r"),
        Message::user("next"),
    ]);
    let ctx = ContextBuilder::new("sys").build(&h).unwrap();
    assert_eq!(ctx.kept, vec![0, 1, 2, 3]);
}
