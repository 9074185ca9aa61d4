//! Bounded benchmark of the embedded local model (`cargo bench -p toolwright-local-model --bench local`):
//! load time, prompt tokens/s, generated tokens/s (free text, constrained tool calls, a long
//! constrained string).
//! Prints a Markdown table for docs/benchmarks.md, with a llama.cpp column measured in the same
//! run on the same GGUF by `benches/baseline.py` where llama-cpp-python is installed
//! (`pip install llama-cpp-python==0.3.36`); where it is not, the column says so and the bench
//! still runs. `LLAMA_BASELINE=0` skips it on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use serde_json::json;
use toolwright_core::{ChatRequest, Message, ResponseFormat, ToolChoice, ToolSpec};
use toolwright_local_model::{LocalModel, ModelSource, default_cache_dir, ensure_model};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that is not "local" skips this target.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"local".contains(a.as_str()))
    {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let path = match std::env::var_os("LOCAL_MODEL_PATH") {
        Some(p) => p.into(),
        None => rt
            .block_on(ensure_model(
                &ModelSource::smollm2_135m_instruct(),
                &default_cache_dir().unwrap(),
            ))
            .unwrap_or_else(|e| panic!("cannot fetch the model: {e}")),
    };
    let runs = 5;

    let mut loads = Vec::new();
    let mut model = None;
    for _ in 0..runs {
        let t = Instant::now();
        let m = LocalModel::from_file(&path).unwrap();
        loads.push(t.elapsed().as_secs_f64() * 1e3);
        model = Some(m);
        // The constraint vocabulary is built on a thread of its own after load returns (~100
        // ms): let it finish, so it does not share the cores with the next load measured.
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let model = model.unwrap().with_seed(7);
    // Every run repeats its prompt: without this the prompt cache would answer it from memory
    // and the prompt figure would count only the few tokens actually processed.
    model.set_prefix_cache_bytes(0);

    // Prompt processing: a ~300-token prompt, one generated token.
    let long = "The quick brown fox jumps over the lazy dog while the tools report weather, time and sums. ".repeat(16);
    let mut prompt_tps = Vec::new();
    let mut prompt_len = 0;
    for _ in 0..runs {
        let req = ChatRequest::new(vec![Message::user(long.clone())]).with_max_tokens(1);
        let (_, s) = rt.block_on(model.chat_with_stats(req)).unwrap();
        prompt_len = s.prompt_tokens;
        prompt_tps.push(s.prompt_tokens_per_sec());
    }

    // Free generation: 128 tokens.
    let mut gen_tps = Vec::new();
    let mut gen_len = 0;
    for i in 0..runs {
        let req = ChatRequest::new(vec![Message::user(
            "Write a long, detailed story about a lighthouse keeper.",
        )])
        .with_temperature(0.7)
        .with_max_tokens(128);
        let (_, s) = rt
            .block_on(model.clone().with_seed(i).chat_with_stats(req))
            .unwrap();
        gen_len = s.generated_tokens;
        gen_tps.push(s.generated_tokens_per_sec());
    }

    // Free text after the ~300-token prompt: the same context length as the tool call below,
    // which is what a constrained call's speed compares with (attention grows with it).
    let mut long_gen_tps = Vec::new();
    for i in 0..runs {
        let req = ChatRequest::new(vec![Message::user(format!(
            "{long}\nWrite a long story about the fox."
        ))])
        .with_temperature(0.7)
        .with_max_tokens(32);
        let (_, s) = rt
            .block_on(model.clone().with_seed(i).chat_with_stats(req))
            .unwrap();
        long_gen_tps.push(s.generated_tokens_per_sec());
    }

    // Native tool calls over three tools, the call required (mask computed every token).
    let tools = vec![
        ToolSpec::new(
            "get_weather",
            "Weather for a city.",
            json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}),
        ),
        ToolSpec::new(
            "get_time",
            "Time in a zone.",
            json!({"type":"object","properties":{"timezone":{"type":"string"}},"required":["timezone"]}),
        ),
        ToolSpec::new(
            "calculator",
            "Two-number arithmetic.",
            json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"},"op":{"enum":["add","sub","mul","div"]}},"required":["a","b","op"]}),
        ),
    ];
    let mut json_tps = Vec::new();
    let mut json_tokens = Vec::new();
    for i in 0..runs {
        // The default max_tokens (512), as the tool loop sends it: a call ends itself.
        let req = ChatRequest::new(vec![Message::user("What's the weather in Paris?")])
            .with_tools(tools.clone())
            .with_tool_choice(ToolChoice::Required);
        let (_, s) = rt
            .block_on(model.clone().with_seed(i).chat_with_stats(req))
            .unwrap();
        json_tokens.push(f64::from(s.generated_tokens));
        json_tps.push(s.generated_tokens_per_sec());
    }

    // A long constrained string value: the mask of a string body is looked up, not walked.
    let mut str_tps = Vec::new();
    let mut str_tokens = Vec::new();
    for i in 0..runs {
        let req = ChatRequest::new(vec![Message::user(
            "Write a long, detailed story about a lighthouse keeper.",
        )])
        .with_response_format(ResponseFormat::JsonSchema {
            name: "story".into(),
            schema: json!({"type":"object","properties":{"story":{"type":"string","minLength":1,"maxLength":600}},"required":["story"]}),
            strict: true,
        })
        .with_temperature(0.7)
        .with_max_tokens(128);
        let (_, s) = rt
            .block_on(model.clone().with_seed(i).chat_with_stats(req))
            .unwrap();
        str_tokens.push(f64::from(s.generated_tokens));
        str_tps.push(s.generated_tokens_per_sec());
    }

    let base = baseline(&path, runs);
    let col = |key: &str, unit: &str, prec: usize| match &base {
        Ok(v) => v
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .map(|x| format!("{x:.prec$} {unit}"))
            .unwrap_or_else(|| "—".into()),
        Err(_) => "skipped".into(),
    };
    let ratio = |ours: f64, key: &str, higher_is_better: bool| match &base {
        Ok(v) => v
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .map(|b| {
                let r = if higher_is_better { ours / b } else { b / ours };
                format!("{r:.2}×")
            })
            .unwrap_or_else(|| "—".into()),
        Err(_) => "—".into(),
    };
    let (load, ptps, gtps) = (median(loads), median(prompt_tps), median(gen_tps));
    println!(
        "| metric | this project, median of {runs} | llama.cpp (2 threads) | speed vs llama.cpp |"
    );
    println!("|---|---|---|---|");
    println!(
        "| load (GGUF → weights, tokenizer; the constraint vocabulary follows on its own thread) | {load:.0} ms | {} | {} |",
        col("load_ms", "ms", 0),
        ratio(load, "load_ms", false)
    );
    println!(
        "| prompt processing ({prompt_len}-token prompt) | {ptps:.0} tok/s | {} | {} |",
        col("prompt_tps", "tok/s", 0),
        ratio(ptps, "prompt_tps", true)
    );
    println!(
        "| generation, free text ({gen_len} tokens) | {gtps:.1} tok/s | {} | {} |",
        col("gen_tps", "tok/s", 1),
        ratio(gtps, "gen_tps", true)
    );
    println!(
        "| generation, free text after the {prompt_len}-token prompt (32 tokens) | {:.1} tok/s | — | — |",
        median(long_gen_tps)
    );
    println!(
        "| generation, constrained tool call (~{:.0} tokens, ~330-token prompt) | {:.1} tok/s | — | — |",
        median(json_tokens),
        median(json_tps)
    );
    println!(
        "| generation, constrained long string value (~{:.0} tokens) | {:.1} tok/s | — | — |",
        median(str_tokens),
        median(str_tps)
    );
    match &base {
        Ok(v) => println!(
            "\nllama.cpp: llama-cpp-python {} ({} prompt tokens with its tokenizer), same GGUF, same run.",
            v.get("llama_cpp").and_then(|x| x.as_str()).unwrap_or("?"),
            v.get("prompt_tokens")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        ),
        Err(why) => println!("\nllama.cpp column skipped: {why}"),
    }
}

/// Runs `benches/baseline.py` on the same GGUF; `Err` says why there is no llama.cpp column.
fn baseline(path: &std::path::Path, runs: u64) -> Result<serde_json::Value, String> {
    if std::env::var("LLAMA_BASELINE").is_ok_and(|v| v == "0") {
        return Err("LLAMA_BASELINE=0".into());
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/baseline.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(path)
        .args(["--runs", &runs.to_string(), "--threads", "2"])
        .output()
        .map_err(|e| format!("python3 could not be run ({e}); install Python 3 and `pip install llama-cpp-python==0.3.36`"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err
            .lines()
            .last()
            .unwrap_or("baseline.py failed")
            .to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("baseline.py printed no JSON: {e}"))
}
