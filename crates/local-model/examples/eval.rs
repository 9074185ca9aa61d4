//! A small, rerunnable evaluation of the local model as a tool-calling model:
//! `cargo run -p toolwright-local-model --release --example eval [-- --variant NAME] [--limit N]`.
//!
//! 32 prompts (English and Chinese) over four scripted tools. Each prompt is one loop turn as
//! tool-system runs it: the request with the tools bound (`tool_choice` auto); the model's call
//! is checked, then the scripted result of the *expected* call is given back as a tool message
//! and the model answers (a repeated call gets `tool_choice` none, as the loop does).
//!
//! - **decision**: the right tool, schema-valid arguments, and the argument the prompt names
//!   (the city, the zone, the numbers, the currencies).
//! - **faithfulness**: the final answer states at least one of the result's facts and
//!   contradicts none (no other sky word, no negated fact like "not sunny" / "不是晴").
//!
//! Variants (`--variant`, default all): greedy, greedy with a logit bias of 3 or 6 for opening
//! a call on an answer's first token (`LocalModelBuilder::call_bias`), the builder's default
//! temperature 0.3, an application system prompt (the Stage 3 demo's), and the n-gram ban. `LOCAL_MODEL_PATH` runs
//! another GGUF, `LOCAL_MODEL=gemma3-270m` the built-in Gemma 3 270M. Prints a Markdown table for docs/local-model.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use serde_json::{Value, json};
use toolwright_core::{ChatModel, ChatRequest, Message, ToolCall, ToolChoice, ToolSpec};
use toolwright_local_model::LocalModel;

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "Get the current weather for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}),
        ),
        ToolSpec::new(
            "get_time",
            "Get the current local time in a city.",
            json!({"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}),
        ),
        ToolSpec::new(
            "calculator",
            "Add, subtract, multiply or divide two numbers.",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}, "op": {"type": "string", "enum": ["add", "sub", "mul", "div"]}}, "required": ["a", "b", "op"]}),
        ),
        ToolSpec::new(
            "exchange_rate",
            "Get the exchange rate from one currency to another (ISO codes like USD, EUR, CNY).",
            json!({"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}, "required": ["from", "to"]}),
        ),
    ]
}

/// One prompt: what the user says, the call it needs, the scripted result, the facts an answer
/// should state (any one counts) and words that would contradict the result.
struct Case {
    prompt: &'static str,
    tool: &'static str,
    /// Each must appear (case-insensitively) in some argument value.
    arg_has: &'static [&'static str],
    args: Value,
    result: Value,
    facts: &'static [&'static str],
    contradictions: &'static [&'static str],
}

const NOT_SUNNY: &[&str] = &[
    "not sunny",
    "isn't sunny",
    "rain",
    "cloudy",
    "snow",
    "不是晴",
    "不晴",
    "下雨",
    "阴",
];
const NOT_RAINY: &[&str] = &[
    "not rain",
    "isn't rain",
    "sunny",
    "no rain",
    "不下雨",
    "没有雨",
    "晴",
];
const NOT_CLOUDY: &[&str] = &["not cloudy", "sunny", "rain", "不是阴", "晴", "下雨"];

fn weather(city: &str, sky: &str, temp: i32) -> Value {
    json!({"city": city, "sky": sky, "temp_c": temp})
}

fn cases() -> Vec<Case> {
    let w = |prompt: &'static str,
             arg: &'static [&'static str],
             city: &str,
             sky: &'static str,
             temp: i32| {
        let (facts, contra): (&'static [&'static str], &'static [&'static str]) = match sky {
            "sunny" => (&["sunny", "晴", "sun"], NOT_SUNNY),
            "rainy" => (&["rain", "雨"], NOT_RAINY),
            _ => (&["cloud", "阴", "多云"], NOT_CLOUDY),
        };
        Case {
            prompt,
            tool: "get_weather",
            arg_has: arg,
            args: json!({"city": city}),
            result: weather(city, sky, temp),
            facts,
            contradictions: contra,
        }
    };
    let t = |prompt: &'static str,
             arg: &'static [&'static str],
             city: &str,
             time: &'static str,
             facts: &'static [&'static str]| Case {
        prompt,
        tool: "get_time",
        arg_has: arg,
        args: json!({"city": city}),
        result: json!({"city": city, "time": time}),
        facts,
        contradictions: &[],
    };
    let c = |prompt: &'static str,
             a: f64,
             b: f64,
             op: &str,
             r: &'static [&'static str],
             result: f64| Case {
        prompt,
        tool: "calculator",
        arg_has: &[],
        args: json!({"a": a, "b": b, "op": op}),
        result: json!({"result": result}),
        facts: r,
        contradictions: &[],
    };
    let x = |prompt: &'static str,
             from: &'static str,
             to: &'static str,
             rate: f64,
             facts: &'static [&'static str]| Case {
        prompt,
        tool: "exchange_rate",
        arg_has: &[],
        args: json!({"from": from, "to": to}),
        result: json!({"from": from, "to": to, "rate": rate}),
        facts,
        contradictions: &[],
    };
    vec![
        w(
            "What's the weather in Beijing?",
            &["beijing"],
            "Beijing",
            "sunny",
            22,
        ),
        w(
            "Is it sunny in Paris today?",
            &["paris"],
            "Paris",
            "sunny",
            18,
        ),
        w(
            "How's the weather in London right now?",
            &["london"],
            "London",
            "rainy",
            12,
        ),
        w(
            "Do I need an umbrella in Tokyo?",
            &["tokyo"],
            "Tokyo",
            "rainy",
            16,
        ),
        w(
            "Tell me the weather for Berlin.",
            &["berlin"],
            "Berlin",
            "cloudy",
            9,
        ),
        w(
            "Weather in New York please.",
            &["new york"],
            "New York",
            "sunny",
            25,
        ),
        w(
            "What is the temperature in Sydney?",
            &["sydney"],
            "Sydney",
            "sunny",
            27,
        ),
        w(
            "Is it raining in Seattle?",
            &["seattle"],
            "Seattle",
            "rainy",
            11,
        ),
        w(
            "北京天气怎么样？",
            &["北京", "beijing"],
            "北京",
            "sunny",
            22,
        ),
        w(
            "上海今天下雨吗？",
            &["上海", "shanghai"],
            "上海",
            "rainy",
            19,
        ),
        w(
            "帮我查一下广州的天气。",
            &["广州", "guangzhou"],
            "广州",
            "cloudy",
            28,
        ),
        w(
            "深圳现在天气如何？",
            &["深圳", "shenzhen"],
            "深圳",
            "sunny",
            30,
        ),
        t(
            "What time is it in Tokyo?",
            &["tokyo"],
            "Tokyo",
            "21:05",
            &["21:05", "9:05"],
        ),
        t(
            "What's the time in London now?",
            &["london"],
            "London",
            "13:05",
            &["13:05", "1:05"],
        ),
        t(
            "Current time in New York?",
            &["new york"],
            "New York",
            "08:05",
            &["08:05", "8:05"],
        ),
        t(
            "Tell me the local time in Paris.",
            &["paris"],
            "Paris",
            "14:05",
            &["14:05", "2:05"],
        ),
        t(
            "东京现在几点？",
            &["东京", "tokyo"],
            "东京",
            "21:05",
            &["21:05", "21点"],
        ),
        t(
            "伦敦现在几点了？",
            &["伦敦", "london"],
            "伦敦",
            "13:05",
            &["13:05", "13点"],
        ),
        c("What is 12.5 times 4?", 12.5, 4.0, "mul", &["50"], 50.0),
        c("Add 17 and 25.", 17.0, 25.0, "add", &["42"], 42.0),
        c(
            "What is 100 divided by 8?",
            100.0,
            8.0,
            "div",
            &["12.5"],
            12.5,
        ),
        c("Subtract 9 from 30.", 30.0, 9.0, "sub", &["21"], 21.0),
        c(
            "How much is 7 multiplied by 6?",
            7.0,
            6.0,
            "mul",
            &["42"],
            42.0,
        ),
        c("计算 15 加 27。", 15.0, 27.0, "add", &["42"], 42.0),
        c("36 除以 4 等于多少？", 36.0, 4.0, "div", &["9"], 9.0),
        c("8 乘以 9 是多少？", 8.0, 9.0, "mul", &["72"], 72.0),
        x(
            "How many euros is one US dollar?",
            "USD",
            "EUR",
            0.92,
            &["0.92"],
        ),
        x(
            "What's the exchange rate from EUR to USD?",
            "EUR",
            "USD",
            1.09,
            &["1.09"],
        ),
        x(
            "Convert US dollars to Chinese yuan: what's the rate?",
            "USD",
            "CNY",
            7.12,
            &["7.12"],
        ),
        x(
            "Exchange rate from GBP to EUR?",
            "GBP",
            "EUR",
            1.17,
            &["1.17"],
        ),
        x("美元兑人民币的汇率是多少？", "USD", "CNY", 7.12, &["7.12"]),
        x("欧元换美元的汇率是多少？", "EUR", "USD", 1.09, &["1.09"]),
    ]
}

/// The decision is right: the expected tool, arguments valid for its schema, and carrying what
/// the prompt named.
fn decision_ok(case: &Case, call: &ToolCall, spec: &ToolSpec) -> bool {
    if call.name != case.tool {
        return false;
    }
    let valid = jsonschema::validator_for(&spec.parameters)
        .map(|v| v.is_valid(&call.arguments))
        .unwrap_or(false);
    let text = call.arguments.to_string().to_lowercase();
    let named = case.arg_has.is_empty() || case.arg_has.iter().any(|a| text.contains(a));
    // Numbers and codes must match exactly where the case gives them.
    let exact = match case.tool {
        "calculator" => {
            ["a", "b", "op"]
                .iter()
                .all(|k| match (call.arguments.get(*k), case.args.get(*k)) {
                    (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
                    (Some(x), Some(y)) => x == y,
                    _ => false,
                })
        }
        "exchange_rate" => ["from", "to"].iter().all(|k| {
            call.arguments
                .get(*k)
                .and_then(Value::as_str)
                .map(str::to_uppercase)
                == case.args.get(*k).and_then(Value::as_str).map(str::to_owned)
        }),
        _ => true,
    };
    valid && named && exact
}

fn faithful(case: &Case, answer: &str) -> bool {
    let a = answer.to_lowercase();
    let states = case.facts.iter().any(|f| a.contains(&f.to_lowercase()));
    let contradicts = case
        .contradictions
        .iter()
        .any(|c| a.contains(&c.to_lowercase()));
    states && !contradicts
}

struct Variant {
    name: &'static str,
    temperature: f32,
    ngram: usize,
    /// A system message of the application's (else the model's default system prompt).
    system: Option<&'static str>,
    call_bias: f32,
}

const fn variant(
    name: &'static str,
    temperature: f32,
    ngram: usize,
    system: Option<&'static str>,
    call_bias: f32,
) -> Variant {
    Variant {
        name,
        temperature,
        ngram,
        system,
        call_bias,
    }
}

const DEMO_SYSTEM: &str = "You are a helpful assistant. Use tools when they help.";

const VARIANTS: &[Variant] = &[
    variant("greedy", 0.0, 0, None, 0.0),
    variant("greedy+bias3", 0.0, 0, None, 3.0),
    variant("greedy+bias6", 0.0, 0, None, 6.0),
    variant("t0.3+bias6", 0.3, 0, None, 6.0),
    variant("greedy+bias6+system", 0.0, 0, Some(DEMO_SYSTEM), 6.0),
    variant("greedy+bias6+ngram3", 0.0, 3, None, 6.0),
];

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let only = arg("--variant");
    let limit: usize = arg("--limit")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    let verbose = args.iter().any(|a| a == "--verbose");
    let base = LocalModel::builder().build().await.unwrap();
    let name = base.info().model;
    let tools = tools();
    let cases: Vec<Case> = cases().into_iter().take(limit).collect();
    println!(
        "model: {name}; {} prompts ({} Chinese); {} tools",
        cases.len(),
        cases.iter().filter(|c| !c.prompt.is_ascii()).count(),
        tools.len()
    );
    println!();
    println!("| model | variant | decision accuracy | faithfulness | seconds |");
    println!("|---|---|---|---|---|");
    for v in VARIANTS
        .iter()
        .filter(|v| only.as_deref().is_none_or(|o| o == v.name))
    {
        let model = base
            .clone()
            .with_seed(1)
            .with_no_repeat_ngram(v.ngram)
            .with_call_bias(v.call_bias);
        let started = Instant::now();
        let (mut decided, mut faithful_n) = (0, 0);
        for case in &cases {
            let mut start: Vec<Message> = v.system.map(Message::system).into_iter().collect();
            start.push(Message::user(case.prompt));
            let req = ChatRequest::new(start.clone())
                .with_tools(tools.clone())
                .with_temperature(v.temperature)
                .with_max_tokens(96);
            let r = model.chat(req).await.unwrap();
            let spec = tools.iter().find(|t| *t.name == *case.tool).unwrap();
            let ok = r
                .tool_calls
                .first()
                .is_some_and(|c| decision_ok(case, c, spec));
            decided += usize::from(ok);
            // The expected call and its scripted result, then the answer.
            let call = ToolCall::new("call_1", case.tool, case.args.clone());
            let mut history = start;
            history.push(Message::assistant_with_tool_calls("", vec![call]));
            history.push(Message::tool("call_1", case.tool, case.result.to_string()));
            let ask = |history: Vec<Message>, choice: Option<ToolChoice>| {
                let mut req = ChatRequest::new(history)
                    .with_tools(tools.clone())
                    .with_temperature(v.temperature)
                    .with_max_tokens(64);
                if let Some(c) = choice {
                    req = req.with_tool_choice(c);
                }
                req
            };
            let mut a = model.chat(ask(history.clone(), None)).await.unwrap();
            if !a.tool_calls.is_empty() {
                // The loop's answer to a call after the result: no more tools, answer.
                history.push(a.to_message());
                for c in &a.tool_calls {
                    history.push(Message::tool(
                        c.id.clone(),
                        c.name.clone(),
                        case.result.to_string(),
                    ));
                }
                a = model
                    .chat(ask(history, Some(ToolChoice::None)))
                    .await
                    .unwrap();
            }
            let f = faithful(case, &a.content);
            faithful_n += usize::from(f);
            if verbose {
                println!(
                    "  [{}{}] {} → {:?} | {:?}",
                    if ok { "D" } else { "-" },
                    if f { "F" } else { "-" },
                    case.prompt,
                    r.tool_calls.first().map(|c| (&c.name, &c.arguments)),
                    a.content
                );
            }
        }
        println!(
            "| {name} | {} | {decided}/{n} ({:.0}%) | {faithful_n}/{n} ({:.0}%) | {:.0} |",
            v.name,
            100.0 * decided as f64 / cases.len() as f64,
            100.0 * faithful_n as f64 / cases.len() as f64,
            started.elapsed().as_secs_f64(),
            n = cases.len()
        );
    }
}
