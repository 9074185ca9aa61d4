//! Prompt reuse and concurrent sessions of the embedded model, on the real model.
//!
//! These tests need the model file. It is fetched once into the user cache (or taken from
//! LOCAL_MODEL_PATH); when that is impossible they FAIL with the reason — they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use toolwright_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, Message, ModelError, ModelInfo,
    async_trait, response_stream,
};
use toolwright_core::{ToolContext, ToolError};
use toolwright_local_model::{GenerationStats, LocalModel};
use toolwright_tool_system::{Agent, FnTool};

mod common;
use common::model_path;

/// The local model as the agent sees it, recording the backend's stats of every request.
struct Recorded {
    inner: LocalModel,
    log: Mutex<Vec<(ChatResponse, GenerationStats)>>,
}

#[async_trait]
impl ChatModel for Recorded {
    fn info(&self) -> ModelInfo {
        self.inner.info()
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let (r, s) = self.inner.chat_with_stats(request).await?;
        self.log.lock().unwrap().push((r.clone(), s));
        Ok(r)
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        Ok(response_stream(self.chat(request).await?))
    }
}

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name
    city: String,
}

async fn tool_loop(reuse: bool) -> (String, Vec<(ChatResponse, GenerationStats)>) {
    // The model's own call comes back in the history as the same tokens it wrote, even where
    // the tokenizer would split the text otherwise (here it writes "B Beijing" in tokens that
    // re-encode differently), so reuse runs through the whole call.
    let m = LocalModel::from_file(model_path()).unwrap().with_seed(1);
    if !reuse {
        m.set_prefix_cache_bytes(0);
    }
    let model = Arc::new(Recorded {
        inner: m,
        log: Mutex::new(Vec::new()),
    });
    let agent = Agent::builder(Arc::clone(&model))
        .tool(FnTool::typed(
            "get_weather",
            "Get current weather for a city",
            |a: WeatherArgs, _: ToolContext| async move {
                Ok::<_, ToolError>(serde_json::json!({"city": a.city, "temp": 22, "sky": "sunny"}))
            },
        ))
        .system_prompt("You are a helpful assistant. Use tools when they help.")
        .build()
        .unwrap();
    let out = agent
        .run("s1", "What's the weather in Beijing?")
        .await
        .unwrap();
    let log = model.log.lock().unwrap().clone();
    (out.answer, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_round_of_a_tool_loop_processes_only_its_new_tokens_and_answers_the_same() {
    let (answer, log) = tool_loop(true).await;
    assert!(log.len() >= 2, "the model did not call the tool: {log:?}");
    assert!(
        !log[0].0.tool_calls.is_empty(),
        "round 1 made no call: {:?}",
        log[0].0
    );
    let (r1, r2) = (&log[0].1, &log[1].1);
    // Round 1 starts cold; round 2 reuses round 1's prompt and its generated call, and
    // processes only what the loop appended (the tool result and the turn markers).
    assert_eq!(r1.prompt_tokens_reused, 0);
    assert!(
        r2.prompt_tokens_reused >= r1.prompt_tokens + r1.generated_tokens.saturating_sub(2),
        "round 2 reused {} of {} tokens; round 1 had {} prompt + {} generated",
        r2.prompt_tokens_reused,
        r2.prompt_tokens,
        r1.prompt_tokens,
        r1.generated_tokens
    );
    let new = r2.prompt_tokens - r1.prompt_tokens - r1.generated_tokens;
    eprintln!(
        "round 1: {} prompt tokens processed, {} generated; round 2: {} prompt tokens, {} reused, {} processed",
        r1.prompt_tokens_processed(),
        r1.generated_tokens,
        r2.prompt_tokens,
        r2.prompt_tokens_reused,
        r2.prompt_tokens_processed()
    );
    assert!(
        r2.prompt_tokens_processed() <= new + 2,
        "round 2 processed {} tokens, only ~{new} are new",
        r2.prompt_tokens_processed()
    );

    let (cold_answer, cold) = tool_loop(false).await;
    assert_eq!(cold[1].1.prompt_tokens_reused, 0, "reuse was off");
    assert_eq!(cold[1].1.prompt_tokens, r2.prompt_tokens);
    assert_eq!(answer, cold_answer);
    let responses = |l: &[(ChatResponse, GenerationStats)]| -> Vec<ChatResponse> {
        l.iter().map(|(r, _)| r.clone()).collect()
    };
    assert_eq!(responses(&log), responses(&cold));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_history_recomputes_from_the_first_differing_token() {
    let m = LocalModel::from_file(model_path()).unwrap().with_seed(3);
    let ask = |msgs: Vec<Message>| {
        let m = m.clone();
        async move {
            m.chat_with_stats(ChatRequest::new(msgs).with_max_tokens(8))
                .await
                .unwrap()
        }
    };
    let a = vec![
        Message::user("My name is Ada. Remember it."),
        Message::assistant("Hello Ada, I will remember."),
        Message::user("What is my name?"),
    ];
    let (first, s1) = ask(a.clone()).await;
    assert_eq!(s1.prompt_tokens_reused, 0);
    // The same conversation again: all but the last token reused, same answer.
    let (again, s2) = ask(a.clone()).await;
    assert_eq!(s2.prompt_tokens_reused, s2.prompt_tokens - 1);
    assert_eq!(again.content, first.content);
    // History trimmed at the front: the system prompt is still shared, the rest recomputed.
    let trimmed = vec![Message::user("What is my name?")];
    let (t, s3) = ask(trimmed.clone()).await;
    assert!(s3.prompt_tokens_reused > 0 && s3.prompt_tokens_reused < s3.prompt_tokens - 3);
    let cold = LocalModel::from_file(model_path()).unwrap().with_seed(3);
    cold.set_prefix_cache_bytes(0);
    let (tc, sc) = cold
        .chat_with_stats(ChatRequest::new(trimmed).with_max_tokens(8))
        .await
        .unwrap();
    assert_eq!(sc.prompt_tokens_reused, 0);
    assert_eq!(t.content, tc.content);
    let c = m.prompt_counters();
    assert_eq!(c.requests, 3);
    assert_eq!(
        c.reused,
        u64::from(s2.prompt_tokens_reused + s3.prompt_tokens_reused)
    );
}

/// What each of four concurrent streams received, in the order all of them received it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_concurrent_sessions_interleave_and_answer_as_they_do_alone() {
    let m = LocalModel::from_file(model_path()).unwrap().with_seed(11);
    m.set_prefix_cache_bytes(0);
    let questions = [
        "Write a short poem about the sea.",
        "Explain what a compiler does.",
        "List some fruits that are red.",
        "Why do cats purr?",
    ];
    let req = |q: &str| {
        ChatRequest::new(vec![Message::user(q)])
            .with_max_tokens(24)
            .with_temperature(0.0)
    };
    // Alone, one after the other.
    let mut alone = Vec::new();
    for q in questions {
        alone.push(m.chat(req(q)).await.unwrap().content);
    }
    // Together: every event is logged as (session, is_finish) in arrival order.
    let order: Arc<Mutex<Vec<(usize, bool)>>> = Arc::default();
    let mut tasks = Vec::new();
    for (i, q) in questions.iter().enumerate() {
        let m = m.clone();
        let order = Arc::clone(&order);
        let r = req(q);
        tasks.push(tokio::spawn(async move {
            let mut s = m.stream(r).await.unwrap();
            let mut text = String::new();
            while let Some(ev) = s.next().await {
                match ev.unwrap() {
                    ChatEvent::TextDelta(t) => {
                        text.push_str(&t);
                        order.lock().unwrap().push((i, false));
                    }
                    ChatEvent::Finish { .. } => order.lock().unwrap().push((i, true)),
                    _ => {}
                }
            }
            text
        }));
    }
    let mut together = Vec::new();
    for t in tasks {
        together.push(t.await.unwrap());
    }
    assert_eq!(together, alone);
    // Nobody waited for another's whole generation: every session's first text arrived
    // before any session finished.
    let order = order.lock().unwrap();
    let first_finish = order.iter().position(|e| e.1).unwrap();
    for i in 0..questions.len() {
        let first_text = order.iter().position(|e| *e == (i, false)).unwrap();
        assert!(
            first_text < first_finish,
            "session {i} produced nothing before another finished: {order:?}"
        );
    }
}

#[test]
fn a_q5_1_file_is_converted_at_load_and_writes_nothing_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    // The default model's Q4_1 matrices run as they are; a Q5_1 file is converted to Q8_0 at
    // load (no cache file: converting is as fast as reading one would be). The Q5_1 copy is
    // written from the default model's values by candle (the oracle, a dev-dependency).
    write_q5_1_copy(&model_path(), &path);
    let a = LocalModel::from_file(&path).unwrap();
    let b = LocalModel::from_file(&path).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ask = |m: &LocalModel| {
        rt.block_on(
            m.clone().with_seed(2).chat(
                ChatRequest::new(vec![Message::user("What is the capital of France?")])
                    .with_max_tokens(12),
            ),
        )
        .unwrap()
        .content
    };
    let answer = ask(&a);
    assert!(!answer.trim().is_empty());
    assert_eq!(ask(&b), answer, "two loads of one file answer alike");
    // (That the converted values are the file's is `every_gguf_type_reads_as_candle_dequantises_it`;
    // a sampled answer is not compared with the Q4_1 source's: a step finer weights move a
    // sampled token.)
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files, ["m.gguf"], "loading wrote beside the model");
}

/// Writes `to`: the GGUF at `from` with every Q4_1 matrix re-quantised to Q5_1.
fn write_q5_1_copy(from: &std::path::Path, to: &std::path::Path) {
    use candle_core::Device;
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    let mut f = std::fs::File::open(from).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let mut tensors = Vec::new();
    for name in ct.tensor_infos.keys() {
        let t = ct.tensor(&mut f, name, &Device::Cpu).unwrap();
        let t = if t.dtype() == GgmlDType::Q4_1 {
            QTensor::quantize(&t.dequantize(&Device::Cpu).unwrap(), GgmlDType::Q5_1).unwrap()
        } else {
            t
        };
        tensors.push((name.as_str(), t));
    }
    let meta: Vec<_> = ct.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let refs: Vec<_> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut out = std::fs::File::create(to).unwrap();
    gguf_file::write(&mut out, &meta, &refs).unwrap();
}
