//! The code-mode evaluation, rerunnable:
//! `cargo run -p toolwright-code-mode --example code_mode_eval` (a binary: it prints, asserts nothing;
//! an example rather than a bench because it measures calls and tokens, not time, so the
//! test profile's build is enough).
//!
//! 23 multi-step tasks over the project's own tools (in-process get_weather, country_info,
//! exchange_rate) and real MCP servers from npm (filesystem, memory, server-everything's
//! get-sum), each run by a real `Agent` over real HTTP in native tool calling and in code mode.
//! The model is the scripted server playing a competent model's moves in each mode, or — when
//! `OPENAI_BASE_URL` / `OPENAI_API_KEY` (and optionally `OPENAI_MODEL`) are set — that real
//! model. Prints the side-by-side table (model calls, prompt tokens in o200k_base over the
//! exact request bodies, results), totals and ratios. Arguments: task ids to run only those;
//! `--answers` prints each final answer; `--show-tools` prints what each mode shows the model.
//!
//! Needs bubblewrap, node and the npm servers (crates/code-mode/install-eval-deps.sh).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/eval/mod.rs"]
mod eval;

use eval::{Mode, Player};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let show_answers = args.iter().any(|a| a == "--answers");
    let only: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let tasks: Vec<_> = eval::tasks::all()
        .into_iter()
        .filter(|t| only.is_empty() || only.iter().any(|o| *o == t.id))
        .collect();
    if args.iter().any(|a| a == "--show-tools") {
        let env = eval::Env::start(eval::Needs {
            fs: true,
            memory: true,
            everything: true,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        for mode in [Mode::Native, Mode::Code] {
            println!("== {} ==", mode.name());
            for t in env.shown_tools(mode).await.unwrap() {
                let json = serde_json::json!({"name": t.name, "description": t.description, "parameters": t.parameters});
                println!(
                    "{} ({} tokens as JSON)\n{}\n",
                    t.name,
                    eval::tokens(&json.to_string()),
                    t.description
                );
                if let Some((head, list)) = t.description.split_once("\nFunctions") {
                    let lines = list.lines().filter(|l| l.starts_with("- ")).count();
                    println!(
                        "  run_code's description: preamble {} tokens, function list {} tokens ({lines} functions), of which \" -> Any\" {} tokens\n",
                        eval::tokens(head),
                        eval::tokens(list),
                        eval::tokens(list) - eval::tokens(&list.replace(" -> Any", "")),
                    );
                }
            }
        }
        env.stop().await;
        return;
    }
    let player = Player::from_env().await.unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{} tasks, model: {}; tokens: o200k_base over each request's messages + tools JSON",
        tasks.len(),
        player.describe()
    );
    let native = eval::run_mode(&player, &tasks, Mode::Native)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let code = eval::run_mode(&player, &tasks, Mode::Code)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A real model chooses for itself whether to describe first and whether to end with
    // final_answer: one code-mode run is enough.
    let mut extra = Vec::new();
    if !player.is_real() {
        for mode in [Mode::CodePrinted, Mode::CodeDescribeFirst] {
            extra.push(
                eval::run_mode(&player, &tasks, mode)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
    }
    for r in native.iter().chain(&code).chain(extra.iter().flatten()) {
        if let Err(why) = &r.outcome {
            println!(
                "FAIL {} ({}): {why}\n  answer: {:?}",
                r.task,
                r.mode.name(),
                r.answer
            );
        } else if show_answers {
            println!("ok {} ({}): {:?}", r.task, r.mode.name(), r.answer);
        }
    }
    println!("\n{}", eval::report(&native, &code, &extra));
}
