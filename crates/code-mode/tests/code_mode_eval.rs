//! the evaluation cannot rot. A few of its tasks (the ones over the in-process
//! tools and server-everything, which the workspace's test dependencies install) run in both
//! modes through the real agent, the recording proxy and the scripted model; the answers must
//! pass their checks and code mode must use fewer model calls. The real-model path (the
//! `OPENAI_*` variables) is the same code with another upstream: the second test points it at
//! a scripted server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// reqwest on rustls with ring: `toolwright_model_gateway::ensure_crypto_provider` before a client.
extern crate reqwest_ring as reqwest;

mod eval;

use eval::{Mode, Player};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_mode_eval_tasks_pass_in_both_modes_and_code_mode_needs_fewer_model_calls() {
    let tasks = eval::tasks::without_npm_extras();
    assert!(tasks.len() >= 4, "{}", tasks.len());
    // The tasks with at least two dependent steps, where code mode is meant to save calls.
    let multi: Vec<&str> = tasks
        .iter()
        .filter(|t| t.steps >= 2)
        .map(|t| t.id)
        .collect();
    assert!(multi.len() >= 3, "{multi:?}");
    let player = Player::scripted().await;
    let native = eval::run_mode(&player, &tasks, Mode::Native).await.unwrap();
    let code = eval::run_mode(&player, &tasks, Mode::Code).await.unwrap();
    let printed = eval::run_mode(&player, &tasks, Mode::CodePrinted)
        .await
        .unwrap();
    let described = eval::run_mode(&player, &tasks, Mode::CodeDescribeFirst)
        .await
        .unwrap();
    for r in native.iter().chain(&code).chain(&printed).chain(&described) {
        assert!(
            r.outcome.is_ok(),
            "{} ({}): {:?}; answer {:?}",
            r.task,
            r.mode.name(),
            r.outcome,
            r.answer
        );
        assert!(r.prompt_tokens > 0 && r.model_calls >= 1, "{r:?}");
    }
    for ((n, c), p) in native.iter().zip(&code).zip(&printed) {
        assert_eq!(n.task, c.task);
        // Code mode: one script whose final_answer is the reply.
        assert_eq!(c.model_calls, 1, "{c:?}");
        // Without final_answer: the script, then the answer from what it printed.
        assert_eq!(p.model_calls, 2, "{p:?}");
        assert!(c.prompt_tokens < p.prompt_tokens, "{c:?} vs {p:?}");
        // Native: one round per dependent step, then the answer.
        assert_eq!(n.model_calls, n.steps + 1, "{n:?}");
        if multi.contains(&n.task) {
            assert!(p.model_calls < n.model_calls, "{n:?} vs {p:?}");
            // Fewer prompt tokens too, though with these 4 tools a code-mode request's `tools`
            // is bigger than native's (run_code's preamble and describe_function).
            assert!(p.prompt_tokens < n.prompt_tokens, "{n:?} vs {p:?}");
        }
    }
    let sum = tasks
        .iter()
        .find(|t| t.id == "population_sum_with_get_sum")
        .unwrap();
    assert_eq!(
        eval::functions_called(&sum.script),
        ["everything__get_sum", "country_info"]
    );
    // Describing first: one round of describe_function for the script's functions, then the
    // script, whose final_answer is the reply.
    for d in &described {
        assert_eq!(d.model_calls, 2, "{d:?}");
    }
    let table = eval::report(&native, &code, &[printed, described]);
    assert!(
        table.contains(&format!("**{}/{}**", tasks.len(), tasks.len())),
        "{table}"
    );
}

/// The path a real model takes (a `Player::Real`, as `Player::from_env` builds it; the proxy
/// forwarding the key and the server's headers) works end to end; here the "real" model is a
/// scripted server that refuses the first request once (429) and answers every other with text,
/// so each run ends after one answer with no tool use and the checks fail — as they would for a
/// model that does not use the tools; the refused request counts as a model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_mode_eval_the_real_model_path_goes_through_the_proxy_with_the_key() {
    let upstream = testkit::ScriptedServer::start().await;
    // The first request is refused once with a Retry-After (the proxy passes the header on, the
    // gateway waits and retries), then every request gets text.
    upstream.push(testkit::Reply::status(429, "slow down").retry_after("0"));
    upstream.respond_with(|_| testkit::Reply::text("I would rather not use tools."));
    // What `Player::from_env` builds from OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL
    // (`OpenAiConfig::from_env`, tested in model-gateway; setting the variables here would
    // need `unsafe`, which the workspace forbids).
    let player = Player::Real(
        toolwright_model_gateway::OpenAiConfig::new("eval-model")
            .with_base_url(upstream.base_url())
            .with_api_key("sk-eval-test"),
    );
    assert!(player.is_real(), "{}", player.describe());
    assert!(
        player
            .describe()
            .starts_with("eval-model at http://127.0.0.1:")
    );
    let tasks: Vec<_> = eval::tasks::without_npm_extras()
        .into_iter()
        .take(2)
        .collect();
    let code = eval::run_mode(&player, &tasks, Mode::Code).await.unwrap();
    assert_eq!(code[0].model_calls, 2, "{:?}", code[0]);
    assert_eq!(code[1].model_calls, 1, "{:?}", code[1]);
    for r in &code {
        assert_eq!(r.answer, "I would rather not use tools.");
        assert!(r.outcome.is_err(), "{r:?}");
    }
    let sent = upstream.requests();
    // The refused request, its retry, and the second task's request.
    assert_eq!(sent.len(), 3);
    for s in &sent {
        assert_eq!(s.headers["authorization"], "Bearer sk-eval-test");
        assert_eq!(s.body["model"], "eval-model");
        assert_eq!(s.body["tools"][0]["function"]["name"], "run_code");
    }
    // What the proxy counted is what the model's server received.
    let received: usize = sent.iter().map(|s| eval::request_tokens(&s.body)).sum();
    assert_eq!(
        received,
        code.iter().map(|r| r.prompt_tokens).sum::<usize>()
    );
    let table = eval::report(&code, &code, &[]);
    assert!(table.contains("**0/2**"), "{table}");

    // The proxy passes the model server's status and headers back (Retry-After included).
    upstream.push(testkit::Reply::status(429, "slow down").retry_after("7"));
    let proxy = eval::proxy::Proxy::start(upstream.base_url()).await;
    toolwright_model_gateway::ensure_crypto_provider();
    let r = reqwest::Client::new()
        .post(format!("{}/chat/completions", proxy.base_url()))
        .header("content-type", "application/json")
        .body(r#"{"model": "m", "messages": []}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    assert!(r.text().await.unwrap().contains("slow down"));
    assert_eq!(proxy.requests().len(), 1);
}

/// No task's check passes an answer that gives no facts, and a real model's formatting
/// (emphasis, thousands separators, case) does not fail a right one.
#[test]
fn code_mode_eval_checks_reject_evasive_answers_and_ignore_formatting() {
    let fixture = eval::fixture::create().unwrap();
    let tasks = eval::tasks::all();
    assert!(tasks.len() >= 20, "{}", tasks.len());
    for t in &tasks {
        for evasive in ["", "Done.", "I could not find out."] {
            assert!(
                (t.check)(evasive, fixture.path()).is_err(),
                "{} passes {evasive:?}",
                t.id
            );
        }
    }
    assert_eq!(
        eval::tasks::normalise("**Total**: 2,503 `Bytes`"),
        "total: 2503 bytes"
    );
    let weather = tasks
        .iter()
        .find(|t| t.id == "weather_warmest_and_coldest")
        .unwrap();
    assert!((weather.check)("…so: **Warmest: Cairo**, coldest: OSLO", fixture.path()).is_ok());
    assert!((weather.check)("warmest: Rome, coldest: Oslo", fixture.path()).is_err());
}
