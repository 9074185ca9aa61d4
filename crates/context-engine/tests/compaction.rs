//! Compaction that summarises: a scripted summarising model behind `ChatModel`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use toolwright_context_engine::{
    BuiltContext, CompactionFallback, Compactor, ContextBuilder, DropReason, History, MemoryStore,
    SUMMARY_STATE_KEY, SessionStore,
};
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, EstimateCounter, FinishReason, Message, ModelError,
    ModelInfo, ToolCall,
};

/// How the scripted summariser behaves.
#[derive(Clone, Copy)]
enum Script {
    /// Keeps the previous summary's lines and every transcript line that says "remember".
    Faithful,
    Fails,
    Hangs,
    /// Answers far more than any budget.
    Rambles,
}

struct Summariser {
    script: Script,
    calls: AtomicUsize,
    requests: Mutex<Vec<ChatRequest>>,
}

impl Summariser {
    fn new(script: Script) -> Arc<Self> {
        Arc::new(Self {
            script,
            calls: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait::async_trait]
impl ChatModel for Summariser {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("scripted-summariser", false)
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().unwrap().push(request.clone());
        let transcript = request.messages.last().unwrap().content().to_owned();
        let text = match self.script {
            Script::Fails => return Err(ModelError::Inference("scripted failure".into())),
            Script::Hangs => std::future::pending().await,
            Script::Rambles => "and then ".repeat(2_000),
            Script::Faithful => {
                let (previous, since) = match transcript.strip_prefix("Previous summary:\n") {
                    Some(rest) => rest
                        .split_once("\n\nConversation since:\n")
                        .expect("the previous summary is followed by the conversation since"),
                    None => ("", transcript.as_str()),
                };
                let mut lines: Vec<String> = previous
                    .lines()
                    .filter(|l| l.starts_with("- "))
                    .map(str::to_owned)
                    .collect();
                for l in since.lines().filter(|l| l.contains("remember")) {
                    lines.push(format!("- {l}"));
                }
                format!(
                    "The user asked about the weather in many cities.\n{}",
                    lines.join("\n")
                )
            }
        };
        Ok(ChatResponse::new(text, vec![], FinishReason::Stop, None))
    }
}

/// Round `i` of a chat with a weather tool: the user's question (pinned while newest), then the
/// call, its result and the answer. Round 3 holds a fact the user asks to remember.
fn question(i: usize) -> Message {
    if i == 3 {
        Message::user("Please remember: the deploy code is KESTREL-42.")
    } else {
        Message::user(format!(
            "Question {i}: what is the weather in city number {i} today?"
        ))
    }
}

fn answer(i: usize) -> Vec<Message> {
    vec![
        Message::assistant_with_tool_calls(
            "",
            vec![ToolCall::new(
                format!("c{i}"),
                "weather",
                serde_json::json!({"city": i}),
            )],
        ),
        Message::tool(
            format!("c{i}"),
            "weather",
            format!("{i} degrees, cloudy, light wind from the west, humidity {i}0 percent"),
        ),
        Message::assistant(format!("It is {i} degrees and cloudy in city number {i}.")),
    ]
}

/// Every tool message directly follows (in its run of tool messages) the assistant message
/// that made its call, and every call of an assistant message is answered right after it.
fn assert_calls_and_results_paired(ctx: &BuiltContext) {
    let m = &ctx.messages;
    let mut i = 0;
    while i < m.len() {
        match &m[i] {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                let mut open: Vec<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
                let mut j = i + 1;
                while let Some(Message::Tool { tool_call_id, .. }) = m.get(j) {
                    let pos = open.iter().position(|id| id == tool_call_id);
                    let pos =
                        pos.unwrap_or_else(|| panic!("result {tool_call_id} without its call"));
                    open.remove(pos);
                    j += 1;
                }
                assert!(open.is_empty(), "calls {open:?} sent without their results");
                i = j;
            }
            Message::Tool { tool_call_id, .. } => panic!("result {tool_call_id} without its call"),
            _ => i += 1,
        }
    }
}

const BUDGET: usize = 2_000;

fn builder() -> ContextBuilder {
    ContextBuilder::new("You answer weather questions with the weather tool.")
        .section("tools", "weather(city): the current weather")
        .with_budget(BUDGET)
}

#[tokio::test]
async fn tokens_per_request_stay_flat_over_sixty_rounds_and_the_summary_keeps_old_facts() {
    let store = MemoryStore::new();
    store.create("s").await.unwrap();
    let model = Summariser::new(Script::Faithful);
    let compactor = Compactor::new(model.clone(), 1_000)
        .keep_recent(400)
        .summary_budget(300);
    let mut history = History::new(Arc::new(EstimateCounter));
    let mut tokens = Vec::new();
    let mut last = None;
    for i in 0..60 {
        let q = [question(i)];
        store.append("s", &q).await.unwrap();
        history.extend(q);
        let built = compactor
            .build(&builder(), &history, &store, "s")
            .await
            .unwrap();
        assert_eq!(built.fallback, None, "round {i}");
        assert_calls_and_results_paired(&built.context);
        assert_eq!(
            built.context.dropped_count(DropReason::OverBudget),
            0,
            "round {i}: compaction, not dropping, kept the request in budget"
        );
        tokens.push(built.context.tokens);
        last = Some(built);
        let a = answer(i);
        store.append("s", &a).await.unwrap();
        history.extend(a);
    }

    // Without compaction the same session grows without bound.
    let uncompacted = ContextBuilder::new("").build(&history).unwrap().tokens;
    let late = &tokens[20..];
    let (lo, hi) = (*late.iter().min().unwrap(), *late.iter().max().unwrap());
    println!(
        "tokens per request: round 10 {}, 20 {}, 40 {}, 59 {}; rounds 20-59 min {lo} max {hi}; \
         whole history {uncompacted}; summariser calls {}",
        tokens[10],
        tokens[20],
        tokens[40],
        tokens[59],
        model.calls.load(Ordering::SeqCst)
    );
    assert!(
        hi <= 1_000 + 300,
        "requests stay under mark + summary budget: {hi}"
    );
    assert!(hi - lo < 500, "flat: rounds 20-59 between {lo} and {hi}");
    assert!(
        tokens[59] <= tokens[20] + 300,
        "{} vs {}",
        tokens[59],
        tokens[20]
    );
    assert!(uncompacted > 4 * hi, "whole history {uncompacted} vs {hi}");
    assert!(
        model.calls.load(Ordering::SeqCst) >= 5,
        "summarised again and again"
    );

    // The fact from round 3 is long summarised, yet the last request carries it.
    let last = last.unwrap();
    let system = last.context.messages[0].content();
    assert!(system.contains("KESTREL-42"), "{system}");
    assert!(
        !last.context.messages[1..]
            .iter()
            .any(|m| m.content().contains("KESTREL-42")),
        "the round itself is not sent again"
    );
    assert!(last.context.dropped_count(DropReason::Summarized) > 150);
    let summary = last.summary.unwrap();
    assert!(summary.covers > 150);

    // Nothing stored is lost: every round is in the store, the summary beside them.
    let session = store.load("s").await.unwrap();
    assert_eq!(session.messages.len(), 240);
    assert_eq!(session.messages, history.messages());
    let stored = store
        .get_state("s", SUMMARY_STATE_KEY)
        .await
        .unwrap()
        .unwrap();
    assert!(stored.contains("KESTREL-42"));
}

async fn run_until_due(script: Script, timeout: Duration) -> (Vec<CompactionFallback>, usize) {
    let store = MemoryStore::new();
    store.create("s").await.unwrap();
    let compactor = Compactor::new(Summariser::new(script), 800)
        .keep_recent(300)
        .summary_budget(200)
        .timeout(timeout);
    let mut history = History::new(Arc::new(EstimateCounter));
    let mut fallbacks = Vec::new();
    let mut over_budget_drops = 0;
    for i in 0..30 {
        let q = [question(i)];
        store.append("s", &q).await.unwrap();
        history.extend(q);
        let built = compactor
            .build(&builder(), &history, &store, "s")
            .await
            .unwrap();
        assert!(built.context.tokens <= BUDGET);
        assert_calls_and_results_paired(&built.context);
        assert_eq!(built.summary, None);
        assert_eq!(built.context.dropped_count(DropReason::Summarized), 0);
        over_budget_drops = built.context.dropped_count(DropReason::OverBudget);
        fallbacks.extend(built.fallback);
        let a = answer(i);
        store.append("s", &a).await.unwrap();
        history.extend(a);
    }
    assert_eq!(store.load("s").await.unwrap().messages.len(), 120);
    assert_eq!(store.get_state("s", SUMMARY_STATE_KEY).await.unwrap(), None);
    (fallbacks, over_budget_drops)
}

#[tokio::test]
async fn a_failing_summariser_falls_back_to_dropping_with_a_typed_reason() {
    let (fallbacks, dropped) = run_until_due(Script::Fails, Duration::from_secs(5)).await;
    assert!(!fallbacks.is_empty());
    assert!(fallbacks.iter().all(|f| matches!(f, CompactionFallback::ModelFailed { detail } if detail.contains("scripted failure"))));
    assert!(dropped > 0, "the oldest rounds were dropped to fit");
}

#[tokio::test]
async fn a_hanging_summariser_is_cut_off_by_the_timeout_and_falls_back() {
    let (fallbacks, dropped) = run_until_due(Script::Hangs, Duration::from_millis(20)).await;
    assert!(!fallbacks.is_empty());
    assert!(fallbacks.iter().all(|f| *f
        == CompactionFallback::TimedOut {
            timeout: Duration::from_millis(20)
        }));
    assert!(dropped > 0);
}

#[tokio::test]
async fn a_summary_over_its_budget_is_refused_and_falls_back() {
    let (fallbacks, dropped) = run_until_due(Script::Rambles, Duration::from_secs(5)).await;
    assert!(!fallbacks.is_empty());
    assert!(fallbacks.iter().all(
        |f| matches!(f, CompactionFallback::OverBudget { tokens, budget: 200 } if *tokens > 200)
    ));
    assert!(fallbacks[0].to_string().contains("summary_budget"));
    assert!(dropped > 0);
}

#[tokio::test]
async fn the_summariser_sees_tool_calls_with_their_results_and_is_asked_for_a_bounded_summary() {
    let store = MemoryStore::new();
    store.create("s").await.unwrap();
    let model = Summariser::new(Script::Faithful);
    let compactor = Compactor::new(model.clone(), 600)
        .keep_recent(200)
        .summary_budget(150);
    let mut history = History::new(Arc::new(EstimateCounter));
    for i in 0..12 {
        history.push(question(i));
        history.extend(answer(i));
    }
    history.push(question(12));
    store.append("s", history.messages()).await.unwrap();
    let built = compactor
        .build(&builder(), &history, &store, "s")
        .await
        .unwrap();
    assert_eq!(built.fallback, None);
    let covers = built.summary.unwrap().covers;
    // The cut falls between rounds: the covered part ends with a round's last message.
    assert!(
        matches!(history.messages()[covers - 1], Message::Assistant { ref tool_calls, .. } if tool_calls.is_empty())
    );
    let requests = model.requests.lock().unwrap();
    assert_eq!(requests[0].max_tokens, Some(150));
    let transcript = requests[0].messages[1].content();
    assert!(transcript.contains("[assistant calls weather] {\"city\":0}"));
    assert!(transcript.contains("[result of weather] 0 degrees"));
}

fn message_strategy() -> impl Strategy<Value = Vec<Vec<Message>>> {
    // Rounds: a user question, or a tool round with 1-3 calls (sometimes a result missing or
    // an orphan result), or a plain answer; sizes vary so cuts land everywhere.
    let round =
        (0u8..5, 1usize..4, 1usize..60, any::<bool>()).prop_map(|(kind, calls, len, odd)| {
            let text = "word ".repeat(len);
            match kind {
                0 | 1 => vec![Message::user(text)],
                2 => vec![Message::assistant(text)],
                _ => {
                    let id = |j: usize| format!("t{len}-{j}-{calls}");
                    let mut r = vec![Message::assistant_with_tool_calls(
                        "",
                        (0..calls)
                            .map(|j| ToolCall::new(id(j), "f", serde_json::json!({})))
                            .collect(),
                    )];
                    let answered = if odd && kind == 3 { calls - 1 } else { calls };
                    for j in 0..answered {
                        r.push(Message::tool(id(j), "f", text.clone()));
                    }
                    if odd && kind == 4 {
                        r.push(Message::tool("orphan", "f", "stray"));
                    }
                    r
                }
            }
        });
    prop::collection::vec(round, 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn no_request_ever_holds_a_tool_result_without_its_call_or_a_call_without_its_result(
        rounds in message_strategy(),
        mark in 100usize..900,
        keep in 0usize..400,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let store = MemoryStore::new();
            store.create("s").await.unwrap();
            let compactor = Compactor::new(Summariser::new(Script::Faithful), mark)
                .keep_recent(keep)
                .summary_budget(200);
            let builder = ContextBuilder::new("base").with_budget(BUDGET);
            let mut history = History::new(Arc::new(EstimateCounter));
            for round in rounds {
                store.append("s", &round).await.unwrap();
                history.extend(round);
                let Ok(built) = compactor.build(&builder, &history, &store, "s").await else {
                    continue; // the pinned messages alone do not fit: a typed error
                };
                assert_calls_and_results_paired(&built.context);
                assert!(built.context.tokens <= BUDGET);
                let accounted = built.context.kept.len() + built.context.dropped.len();
                assert_eq!(accounted, history.len(), "every message is kept or accounted for");
            }
            assert_eq!(store.load("s").await.unwrap().messages, history.messages());
        });
    }
}
