//! Code mode with the real parts: the skills sandbox (bubblewrap), the real
//! dispatcher with real tools, and the agent over real HTTP with the scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolwright_code_mode::{
    CodeLimits, CodeModeBuilder, CodeModeProvider, DESCRIBE_FUNCTION, RUN_CODE, SEARCH_FUNCTIONS,
};
use toolwright_core::{
    Message, Tool, ToolContext, ToolError, ToolErrorKind, ToolProvider, ToolSpec, TurnInfo,
};
use toolwright_sandbox::SandboxConfig;
use toolwright_tool_system::{ApprovalPolicy, Dispatcher, FnTool, ToolRegistry};

/// Deletes nothing; needs a person's approval (as a real deleting tool would).
struct DeleteFile;

#[async_trait::async_trait]
impl Tool for DeleteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "delete_file",
            "Delete a file.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        )
    }
    async fn call(
        &self,
        _args: Value,
        _ctx: ToolContext,
    ) -> Result<toolwright_core::ToolOutput, ToolError> {
        let result: Result<Value, ToolError> =
            async { Err(ToolError::failed("must never run from a script")) }.await;
        result.map(toolwright_core::ToolOutput::from)
    }
    fn needs_approval(&self, _args: &Value) -> bool {
        true
    }
}

struct Fixture {
    provider: CodeModeProvider,
    /// Calls that reached a tool's body, by any tool.
    ran: Arc<AtomicUsize>,
    temp: tempfile::TempDir,
}

/// The tools scripts get: weather and add (plain), slow (200 ms limit), big (over the 2 KiB
/// cap of this dispatcher), delete_file (needs approval), transfer (the agent's policy gates it).
fn tools(ran: &Arc<AtomicUsize>) -> Dispatcher {
    let mut r = ToolRegistry::new();
    let count = |ran: &Arc<AtomicUsize>| {
        let ran = Arc::clone(ran);
        move || {
            ran.fetch_add(1, Ordering::SeqCst);
        }
    };
    let c = count(ran);
    r.register(FnTool::new(
        "get-weather",
        "Get the current weather for a city. Degrees Celsius; made up.",
        json!({"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}),
        move |args, _| {
            c();
            async move {
                let city = args["city"].as_str().unwrap_or_default().to_owned();
                Ok(json!({"city": city, "temp": city.len() * 3}))
            }
        },
    ))
    .unwrap();
    let c = count(ran);
    r.register(FnTool::new(
        "add",
        "Add two numbers.",
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        move |args, _| {
            c();
            async move { Ok(json!(args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0))) }
        },
    ))
    .unwrap();
    let c = count(ran);
    r.register(
        FnTool::new(
            "slow",
            "Take a long time.",
            json!({"type": "object"}),
            move |_, _| {
                c();
                async {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    Ok(json!("late"))
                }
            },
        )
        .with_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let c = count(ran);
    r.register(FnTool::new(
        "big",
        "Return a lot of text.",
        json!({"type": "object"}),
        move |_, _| {
            c();
            async { Ok(json!({"rows": "row ".repeat(10_000)})) }
        },
    ))
    .unwrap();
    r.register(DeleteFile).unwrap();
    let c = count(ran);
    r.register(FnTool::new(
        "transfer",
        "Send money.",
        json!({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}),
        move |_, _| {
            c();
            async { Ok(json!("sent")) }
        },
    ))
    .unwrap();
    Dispatcher::from_registry(r).with_max_result_bytes(2048)
}

/// Code mode over `tools` as `with` configures it; its sandbox's temporary files go in a
/// directory of its own, removed when the returned guard is dropped.
fn code_over(
    tools: Dispatcher,
    with: impl FnOnce(CodeModeBuilder) -> CodeModeBuilder,
) -> (CodeModeProvider, tempfile::TempDir) {
    let temp = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::default();
    config.temp_root = Some(temp.path().to_path_buf());
    let builder = CodeModeProvider::builder(Arc::new(tools)).sandbox_config(config);
    let provider = with(builder).build().unwrap_or_else(|e| panic!("{e}"));
    (provider, temp)
}

/// An agent with code mode only, over the scripted model, keeping its sessions in memory.
fn code_agent(
    code: CodeModeProvider,
    server: &testkit::ScriptedServer,
) -> (
    toolwright_tool_system::Agent,
    Arc<toolwright_context_engine::MemoryStore>,
) {
    use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};
    let model = OpenAiModel::new(OpenAiConfig::new("m").with_base_url(server.base_url())).unwrap();
    let store = Arc::new(toolwright_context_engine::MemoryStore::new());
    let agent = toolwright_tool_system::Agent::builder(model)
        .provider(Arc::new(code))
        .store(store.clone())
        .build()
        .unwrap();
    (agent, store)
}

fn fixture(limits: CodeLimits) -> Fixture {
    let ran = Arc::new(AtomicUsize::new(0));
    let (provider, temp) = code_over(tools(&ran), |b| {
        b.limits(limits)
            .approval_policy(ApprovalPolicy::new().when("transfer", |a| {
                a["amount"].as_f64().unwrap_or(f64::INFINITY) > 100.0
            }))
    });
    let p = provider.sandbox().protections();
    assert!(p.container.is_some(), "these tests need bubblewrap: {p}");
    Fixture {
        provider,
        ran,
        temp,
    }
}

impl Fixture {
    async fn run(&self, code: &str) -> Result<Value, ToolError> {
        self.provider
            .call(RUN_CODE, json!({"code": code}), ToolContext::new("c1"))
            .await
            .map(|o| o.value)
    }

    /// Only the runner's directory is left in the temp root once the containers made ahead
    /// are stopped (a dropped call is cleaned up on a blocking thread: within 10 s).
    async fn assert_clean(&self) {
        self.provider.sandbox().stop_ready();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left: Vec<String> = std::fs::read_dir(self.temp.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with("code-mode-runner-"))
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "left behind: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn short() -> CodeLimits {
    CodeLimits::default().with_time_limit(Duration::from_secs(4))
}

#[tokio::test]
async fn code_mode_a_script_calls_two_tools_and_the_model_gets_only_what_it_printed() {
    let f = fixture(short());
    let out = f
        .run(
            "a = get_weather(city='Paris')\nb = get_weather('Oslo')\ns = add(a=a['temp'], b=b['temp'])\nprint(f\"{a['city']} {a['temp']}, {b['city']} {b['temp']}, sum {s}\")\n",
        )
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(out["printed"], "Paris 15, Oslo 12, sum 27.0\n", "{out}");
    assert_eq!(
        out["calls"],
        json!([
            {"tool": "get-weather", "ok": true},
            {"tool": "get-weather", "ok": true},
            {"tool": "add", "ok": true}
        ])
    );
    assert!(out.get("note").is_none(), "{out}");
    assert_eq!(f.ran.load(Ordering::SeqCst), 3);
    // The tools' own results never reach the model: only the printed line.
    assert!(!out.to_string().contains("\"temp\""), "{out}");
    // Threads of a script may call tools at the same time: each gets its own answer.
    let out = f
        .run(
            "import threading
r = {}
def w(k):
    r[k] = [add(a=k, b=i) for i in range(3)]
ts = [threading.Thread(target=w, args=(k,)) for k in (10, 20)]
for t in ts: t.start()
for t in ts: t.join()
print(r[10], r[20])
",
        )
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(out["printed"], "[10.0, 11.0, 12.0] [20.0, 21.0, 22.0]\n");
}

#[tokio::test]
async fn code_mode_tools_are_typed_functions_with_level1_lines_and_full_docs_on_demand() {
    let f = fixture(short());
    let specs = f.provider.advertised(&TurnInfo::new("hi")).await;
    let names: Vec<&str> = specs.iter().map(|s| &*s.name).collect();
    assert_eq!(names, [RUN_CODE, DESCRIBE_FUNCTION]);
    let d = &specs[0].description;
    assert!(
        d.contains("- get_weather(city: str): Get the current weather for a city.\n"),
        "{d}"
    );
    assert!(
        d.contains("- add(a: float, b: float): Add two numbers."),
        "{d}"
    );
    assert!(
        !d.contains("made up"),
        "level 2 stays out of the description: {d}"
    );
    let full = f
        .provider
        .call(
            DESCRIBE_FUNCTION,
            json!({"name": "get_weather"}),
            ToolContext::new("d1"),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    let full = full.as_str().unwrap();
    assert!(
        full.starts_with("def get_weather(city: str) -> Any:"),
        "{full}"
    );
    assert!(full.contains("Degrees Celsius; made up."), "{full}");
    assert!(full.contains("city (str): City name"), "{full}");
    let missing = f
        .provider
        .call(
            DESCRIBE_FUNCTION,
            json!({"name": "nope"}),
            ToolContext::new("d2"),
        )
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert_eq!(missing.kind, ToolErrorKind::InvalidArguments);
    assert!(missing.message.contains("get_weather"), "{missing:?}");
    // In a script, help() shows the same full description.
    let out = f.run("print(get_weather.__doc__)").await.unwrap();
    assert!(
        out["printed"].as_str().unwrap().contains("City name"),
        "{out}"
    );
}

#[tokio::test]
async fn code_mode_nested_timeout_cap_schema_and_approval_reach_the_script_as_typed_errors() {
    let f = fixture(short());
    let out = f
        .run(r#"
try:
    slow()
except ToolTimeout as e:
    print("timeout", e.kind, e.tool, "timed out after 200 ms" in e.message, isinstance(e, ToolError))
try:
    big()
except ResultTooLarge as e:
    print("cap", e.kind, len(e.partial) <= 2048, "truncated" in e.partial)
try:
    get_weather(city=5)
except InvalidArguments as e:
    print("schema", e.kind, "/city" in e.message)
try:
    delete_file(path="/etc/passwd")
except ApprovalRequired as e:
    print("approval", "directly" in e.message)
try:
    transfer(amount=500)
except ApprovalRequired as e:
    print("policy", e.kind)
print("small transfer", transfer(amount=5))
"#)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        out["printed"],
        "timeout timeout slow True True\ncap result_too_large True True\nschema invalid_arguments True\napproval True\npolicy approval_required\nsmall transfer sent\n",
        "{out}"
    );
    assert_eq!(
        out["calls"],
        json!([
            {"tool": "slow", "error": "timeout"},
            {"tool": "big", "error": "result_too_large"},
            {"tool": "get-weather", "error": "invalid_arguments"},
            {"tool": "delete_file", "error": "approval_required"},
            {"tool": "transfer", "error": "approval_required"},
            {"tool": "transfer", "ok": true}
        ])
    );
    // slow and big ran; the invalid call, delete_file and the big transfer did not.
    assert_eq!(f.ran.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn code_mode_call_limit_is_enforced() {
    let f = fixture(short().with_max_calls(3));
    let out = f
        .run("n = 0\ntry:\n    for i in range(10):\n        add(a=i, b=1)\n        n += 1\nexcept CallLimitExceeded as e:\n    print(n, e.kind, 'limit of 3' in e.message)\n")
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(out["printed"], "3 call_limit True\n");
    assert_eq!(out["calls"].as_array().unwrap().len(), 4, "{out}");
    assert_eq!(f.ran.load(Ordering::SeqCst), 3);
    // A script that ignores the error and goes on is stopped.
    let err = f
        .run("for i in range(10):\n    try:\n        add(a=i, b=1)\n    except ToolError:\n        pass\nprint('never')\n")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(
        err.message
            .contains("went on calling tools after reaching its limit of 3 calls"),
        "{err:?}"
    );
    assert!(!err.message.contains("never"), "{err:?}");
    assert_eq!(f.ran.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn code_mode_an_endless_loop_is_stopped_with_a_clear_message() {
    let f = fixture(CodeLimits::default().with_time_limit(Duration::from_secs(2)));
    let err = f
        .run("print('starting', flush=True)\nget_weather(city='Rome')\nwhile True:\n    pass\n")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Timeout, "{err:?}");
    assert!(
        err.message
            .starts_with("The script was stopped after 2 s, its time limit"),
        "{err:?}"
    );
    assert!(err.message.contains("starting"), "{err:?}");
    assert!(err.message.contains("\"tool\":\"get-weather\""), "{err:?}");
    f.assert_clean().await;
    // The next script runs as usual.
    let out = f.run("print('fine')").await.unwrap();
    assert_eq!(out["printed"], "fine\n");

    // With more time than CPU, the CPU limit stops it first.
    let f = fixture(
        CodeLimits::default()
            .with_time_limit(Duration::from_secs(20))
            .with_cpu_seconds(1),
    );
    let err = f.run("while True:\n    pass\n").await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Crashed, "{err:?}");
    assert!(
        err.message.starts_with(
            "The script's Python process was killed (it may have reached its CPU or memory limit)."
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn code_mode_printed_output_is_capped_and_a_flood_is_stopped() {
    let f = fixture(short().with_output(256, 64 << 10));
    let out = f.run("print('y' * 1000)").await.unwrap();
    assert_eq!(out["printed"].as_str().unwrap().len(), 256);
    let note = out["note"].as_str().unwrap();
    assert!(
        note.contains("printed 1001 bytes; the first 256 are shown"),
        "{note}"
    );
    let err = f
        .run("while True:\n    print('x' * 100)\n")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(
        err.message
            .contains("stopped: it printed more than 64 KiB (an output flood)"),
        "{err:?}"
    );
    assert!(err.message.len() < 2048, "{}", err.message.len());
    // Writing around print, straight to the process's descriptors, is bounded too.
    let err = f
        .run("import os\nwhile True:\n    os.write(1, b'z' * 65536)\n")
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("to its process's stderr (an output flood)"),
        "{err:?}"
    );
    f.assert_clean().await;
}

#[tokio::test]
async fn code_mode_a_script_error_is_reported_with_its_line_and_what_it_printed() {
    let f = fixture(short());
    let err = f
        .run("print('before')\nx = add(a=1, b=2)\n1 / 0\n")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    for needed in [
        "The script raised an error",
        "line 3",
        "ZeroDivisionError",
        "before",
        "{\"tool\":\"add\",\"ok\":true}",
    ] {
        assert!(err.message.contains(needed), "{needed}: {}", err.message);
    }
    assert!(!err.message.contains("runner.py"), "{}", err.message);
    let err = f.run("def f(:\n").await.unwrap_err();
    assert!(err.message.contains("SyntaxError"), "{err:?}");
}

/// The attacks of the skills sandbox's hostile tests, written as one script.
#[tokio::test]
async fn s2_code_mode_a_hostile_script_is_contained() {
    let f = fixture(short());
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        r#"
import os, socket
def attempt(what, f):
    try:
        print(what, "OPEN", repr(f())[:40])
    except Exception as e:
        print(what, "refused", type(e).__name__)
attempt("shadow", lambda: open("/etc/shadow").read())
attempt("passwd", lambda: open("/etc/passwd").read())
attempt("host file", lambda: open({secret:?}).read())
attempt("workspace", lambda: os.listdir("/work/wt-code"))
attempt("root home", lambda: os.listdir("/root"))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=1))
attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
found = 0
for pid in range(1, 70000):
    try:
        os.kill(pid, 0)
        found += 1
    except ProcessLookupError:
        pass
    except PermissionError:
        found += 1
print("pids", found)
print("proc", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
"#
    );
    let out = f.run(&script).await.unwrap_or_else(|e| panic!("{e:?}"));
    let printed = out["printed"].as_str().unwrap();
    for refused in [
        "shadow refused",
        "passwd refused",
        "host file refused",
        "workspace refused",
        "root home refused",
        "tcp refused",
        "dns refused",
    ] {
        assert!(printed.contains(refused), "{refused}: {printed}");
    }
    assert!(!printed.contains("TOP-SECRET"), "{printed}");
    // The script is PID 1 of its own namespace and sees nothing else: not the agent.
    assert!(printed.contains("pids 1\n"), "{printed}");
    assert!(printed.contains("proc [1]\n"), "{printed}");
    assert!(
        listener.accept().is_err(),
        "the host's listener must get no connection"
    );

    // A fork bomb: bounded by the process limit, stopped by the time limit with the rest.
    let err = f
        .run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Timeout, "{err:?}");
    f.assert_clean().await;
    let out = f
        .run("print(get_weather(city='Lima')['temp'])")
        .await
        .unwrap();
    assert_eq!(out["printed"], "12\n");
}

/// A full agent run over real HTTP with the scripted model: the model calls `run_code`, gets
/// the printed text, answers; the session stores the script (the call's arguments) and the
/// call list (its result). A second turn's script loops forever: it is stopped with a clear
/// message and the conversation goes on.
#[tokio::test]
async fn code_mode_an_agent_runs_a_script_and_the_conversation_goes_on() {
    use testkit::{Reply, ScriptedServer};

    let ran = Arc::new(AtomicUsize::new(0));
    let (code, _temp) = code_over(tools(&ran), |b| {
        b.limits(CodeLimits::default().with_time_limit(Duration::from_secs(2)))
    });
    let server = ScriptedServer::start().await;
    let script = "for c in ['Paris', 'Oslo']:\n    print(c, get_weather(city=c)['temp'])\n";
    server.push(Reply::tool_call(
        "call_1",
        RUN_CODE,
        &json!({"code": script}).to_string(),
    ));
    server.push(Reply::text("Paris is warmer (15 vs 12)."));
    server.push(Reply::tool_call(
        "call_2",
        RUN_CODE,
        &json!({"code": "while True:\n    pass\n"}).to_string(),
    ));
    server.push(Reply::text("My script took too long; I stopped."));
    let (agent, store) = code_agent(code, &server);

    let out = agent
        .run("s1", "Which is warmer, Paris or Oslo?")
        .await
        .unwrap();
    assert_eq!(out.answer, "Paris is warmer (15 vs 12).");
    let requests = server.requests();
    // The first request offered run_code with the functions in its description.
    let tools = requests[0].body["tools"].to_string();
    assert!(tools.contains("get_weather(city: str): Get"), "{tools}");
    let tool_msg = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    let result: Value = serde_json::from_str(tool_msg["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["printed"], "Paris 15\nOslo 12\n");

    let out = agent.run("s1", "And now loop forever").await.unwrap();
    assert_eq!(out.answer, "My script took too long; I stopped.");
    let last = server.requests().last().unwrap().body["messages"].to_string();
    assert!(
        last.contains("The script was stopped after 2 s, its time limit"),
        "{last}"
    );

    // What the session keeps: the scripts as the calls' arguments, the call lists as results.
    use toolwright_context_engine::SessionStore;
    let session = store.load("s1").await.unwrap();
    let scripts: Vec<String> = session
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.first().map(|c| {
                assert_eq!(c.name, RUN_CODE);
                c.arguments["code"].as_str().unwrap().to_owned()
            }),
            _ => None,
        })
        .collect();
    assert_eq!(scripts, [script, "while True:\n    pass\n"]);
    let results: Vec<&str> = session
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results[0].contains(
            r#""calls":[{"tool":"get-weather","ok":true},{"tool":"get-weather","ok":true}]"#
        ),
        "{}",
        results[0]
    );
    assert!(results[1].contains("Tool calls: []"), "{}", results[1]);
}

/// A tool span seen: its tool, and the tool of its parent span.
type Seen = (String, Option<String>);

/// The `execute_tool` spans the dispatchers open.
#[derive(Clone, Default)]
struct ToolSpans(Arc<std::sync::Mutex<Vec<Seen>>>);

#[derive(Clone)]
struct ToolName(String);

impl<S> tracing_subscriber::Layer<S> for ToolSpans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Visit(Option<String>);
        impl tracing::field::Visit for Visit {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "gen_ai.tool.name" {
                    self.0 = Some(value.to_owned());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut v = Visit(None);
        attrs.record(&mut v);
        let (Some(tool), Some(span)) = (v.0, ctx.span(id)) else {
            return;
        };
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<ToolName>().map(|t| t.0.clone()));
        span.extensions_mut().insert(ToolName(tool.clone()));
        self.0.lock().unwrap().push((tool, parent));
    }
}

/// Each call a script makes is traced as a tool call of its own, inside `run_code`'s span.
#[tokio::test]
async fn code_mode_each_nested_call_has_its_own_tool_span_inside_run_codes() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = ToolSpans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let f = fixture(short());
    let outer = Dispatcher::new().with_provider(Arc::new(f.provider));
    let out = outer
        .dispatch(
            RUN_CODE,
            json!({"code": "print(add(a=1, b=2), get_weather(city='Oslo')['temp'])"}),
            ToolContext::new("c1"),
        )
        .await;
    assert!(out.is_ok(), "{}", out.content);
    let seen = spans.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (RUN_CODE.to_owned(), None),
            ("add".to_owned(), Some(RUN_CODE.to_owned())),
            ("get-weather".to_owned(), Some(RUN_CODE.to_owned())),
        ]
    );
}

#[tokio::test]
async fn code_mode_final_answer_ends_the_script_with_the_reply() {
    let f = fixture(short().with_output(256, 4096));
    // It ends the script even inside `except Exception`, and only the first call counts.
    let out = f
        .run("try:\n    final_answer('Paris: ' + str(get_weather(city='Paris')['temp']))\nexcept Exception:\n    print('swallowed')\nprint('after')\n")
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(out["answer"], "Paris: 15", "{out}");
    assert_eq!(out["printed"], "", "nothing ran after final_answer: {out}");
    assert_eq!(
        f.provider.final_answer(RUN_CODE, &out).as_deref(),
        Some("Paris: 15")
    );
    assert_eq!(f.provider.final_answer("describe_function", &out), None);
    // A value that is not text is given as JSON text.
    let out = f.run("final_answer({'sum': add(a=1, b=2)})").await.unwrap();
    assert_eq!(out["answer"], r#"{"sum": 3.0}"#);
    // A script without final_answer gives no reply: the model reads what it printed.
    let out = f.run("print('just looking')").await.unwrap();
    assert!(out.get("answer").is_none());
    assert_eq!(f.provider.final_answer(RUN_CODE, &out), None);
    // A reply longer than the model may be shown is not the reply; the note says why.
    let out = f.run("final_answer('x' * 1000)").await.unwrap();
    assert!(out.get("answer").is_none(), "{out}");
    assert!(out["answer_cut"].as_str().unwrap().len() <= 256);
    assert!(
        out["note"]
            .as_str()
            .unwrap()
            .contains("final_answer() got 1000 bytes"),
        "{out}"
    );
    // A script that raises after swallowing it is a failed script, not a reply.
    let e = f
        .run("try:\n    final_answer('early')\nexcept BaseException:\n    pass\nraise ValueError('late')\n")
        .await
        .unwrap_err();
    assert!(e.message.contains("ValueError: late"), "{}", e.message);
    // The description tells the model about it.
    let spec = f.provider.list().await.remove(0);
    assert!(spec.description.contains("final_answer(text)"));
    f.assert_clean().await;
}

#[tokio::test]
async fn code_mode_final_answer_can_be_turned_off() {
    let ran = Arc::new(AtomicUsize::new(0));
    let (provider, _temp) = code_over(tools(&ran), |b| b.limits(short()).final_answer(false));
    let spec = provider.list().await.remove(0);
    assert!(!spec.description.contains("final_answer"));
    let e = provider
        .call(
            RUN_CODE,
            json!({"code": "final_answer('x')"}),
            ToolContext::new("c1"),
        )
        .await
        .map(|o| o.value)
        .unwrap_err();
    assert!(
        e.message
            .contains("NameError: name 'final_answer' is not defined"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn code_mode_a_script_that_calls_final_answer_ends_the_turn_in_one_model_call() {
    use testkit::{Reply, ScriptedServer};

    let ran = Arc::new(AtomicUsize::new(0));
    let (code, _temp) = code_over(tools(&ran), |b| b.limits(short()));
    let server = ScriptedServer::start().await;
    let script = "t = {c: get_weather(city=c)['temp'] for c in ['Paris', 'Oslo']}\nw = max(t, key=t.get)\nfinal_answer(f'{w} is warmer ({t[\"Paris\"]} vs {t[\"Oslo\"]}).')\n";
    server.push(Reply::tool_call(
        "call_1",
        RUN_CODE,
        &json!({"code": script}).to_string(),
    ));
    server.push(Reply::text("Glad to help."));
    let (agent, store) = code_agent(code, &server);
    let out = agent
        .run("s1", "Which is warmer, Paris or Oslo?")
        .await
        .unwrap();
    assert_eq!(out.answer, "Paris is warmer (15 vs 12).");
    assert_eq!(out.iterations, 1);
    assert_eq!(server.requests().len(), 1, "one model call for the turn");
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    // The session keeps the script, its result, and the reply; the next turn sends them.
    use toolwright_context_engine::SessionStore;
    let session = store.load("s1").await.unwrap().messages;
    assert_eq!(session.len(), 4, "{session:?}");
    assert_eq!(
        session[3],
        Message::assistant("Paris is warmer (15 vs 12).")
    );
    agent.run("s1", "Thanks").await.unwrap();
    let sent = server.requests()[1].body["messages"].clone();
    let n = sent.as_array().unwrap().len();
    assert_eq!(sent[n - 2]["content"], "Paris is warmer (15 vs 12).");
}

/// The 360 real tool definitions of 28 MCP servers (tool-search's fixture) as echoing tools,
/// named `server__tool` as the bridge names them.
fn many_tools(ran: &Arc<AtomicUsize>) -> Dispatcher {
    let fixture: Value =
        serde_json::from_str(include_str!("../../tool-search/fixtures/tools.json")).unwrap();
    let mut r = ToolRegistry::new();
    for server in fixture["servers"].as_array().unwrap() {
        for tool in server["tools"].as_array().unwrap() {
            let name = format!(
                "{}__{}",
                server["name"].as_str().unwrap(),
                tool["name"].as_str().unwrap()
            );
            let ran = Arc::clone(ran);
            let echo = name.clone();
            r.register(FnTool::new(
                name,
                tool["description"].as_str().unwrap_or_default(),
                tool["inputSchema"].clone(),
                move |args, _| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    let echo = echo.clone();
                    async move { Ok(json!({"tool": echo, "args": args})) }
                },
            ))
            .unwrap();
        }
    }
    Dispatcher::from_registry(r)
}

#[tokio::test]
async fn code_mode_with_hundreds_of_tools_run_code_lists_the_turns_matches_and_search_finds_the_rest()
 {
    let ran = Arc::new(AtomicUsize::new(0));
    let (provider, _temp) = code_over(many_tools(&ran), |b| b.limits(short()));
    let listed_all = provider.list().await;
    let all = &listed_all[0].description;
    assert!(
        all.contains("- time__get_current_time("),
        "list() keeps every function"
    );
    assert_eq!(
        &*listed_all[2].name, SEARCH_FUNCTIONS,
        "over the budget the search tool routes"
    );

    let turn = TurnInfo::new("What time is it in Tokyo right now?");
    let shown = provider.advertised(&turn).await;
    let names: Vec<&str> = shown.iter().map(|s| &*s.name).collect();
    assert_eq!(names, [RUN_CODE, DESCRIBE_FUNCTION, SEARCH_FUNCTIONS]);
    let run_code = &shown[0].description;
    let lines = run_code.lines().filter(|l| l.starts_with("- ")).count();
    assert_eq!(lines, 8, "{run_code}");
    assert!(run_code.contains("- time__get_current_time("), "{run_code}");
    assert!(
        run_code.contains("There are 360 functions; listed are the 8"),
        "{run_code}"
    );
    assert!(
        run_code.len() * 10 < all.len(),
        "{} bytes vs {} for the whole list",
        run_code.len(),
        all.len()
    );
    // Chinese finds it too.
    let zh = provider.advertised(&TurnInfo::new("截图这个网页")).await;
    assert!(
        zh[0].description.contains("screenshot"),
        "{}",
        zh[0].description
    );

    // The search tool finds a function the turn's list did not show; a script calls it.
    let found = provider
        .call(
            SEARCH_FUNCTIONS,
            json!({"query": "list the pods of a kubernetes cluster", "limit": 3}),
            ToolContext::new("c1"),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    let found = found.as_str().unwrap();
    assert_eq!(found.lines().count(), 3, "{found}");
    assert!(found.contains("kubernetes__"), "{found}");
    assert!(
        !run_code.contains("kubernetes__"),
        "not listed for the time question"
    );
    let out = provider
        .call(
            RUN_CODE,
            json!({"code": "print(kubernetes__kubectl_get(resourceType='pods')['tool'])"}),
            ToolContext::new("c2"),
        )
        .await
        .map(|o| o.value)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(out["printed"], "kubernetes__kubectl_get\n");
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    // Bad arguments are the model's to fix; no match says so.
    for bad in [
        json!({}),
        json!({"query": " "}),
        json!({"query": "x", "limit": 0}),
    ] {
        let e = provider
            .call(SEARCH_FUNCTIONS, bad.clone(), ToolContext::new("c3"))
            .await
            .map(|o| o.value)
            .unwrap_err();
        assert_eq!(
            e.kind,
            toolwright_core::ToolErrorKind::InvalidArguments,
            "{bad}"
        );
    }
    let none = provider
        .call(
            SEARCH_FUNCTIONS,
            json!({"query": "zzqx"}),
            ToolContext::new("c4"),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(
        none.as_str().unwrap().starts_with("No function fits"),
        "{none}"
    );
}

#[tokio::test]
async fn code_mode_under_the_search_budget_every_function_is_listed() {
    let f = fixture(short());
    let shown = f.provider.advertised(&TurnInfo::new("anything")).await;
    let names: Vec<&str> = shown.iter().map(|s| &*s.name).collect();
    assert_eq!(names, [RUN_CODE, DESCRIBE_FUNCTION]);
    assert!(!shown[0].description.contains("There are"));
    assert_eq!(shown, f.provider.list().await);
}

/// the safe path is the default. The operator gates `wire` on the agent
/// (`require_approval`) and builds code mode over the same tools *without* giving it that
/// policy. A script's call to `wire` is still refused with `approval_required` — the agent's
/// rules come with the call (`ToolContext::approval_gate`) — and `wire` never runs. Only an
/// operator who says so (`inherit_agent_approvals(false)`) lets scripts make that call.
#[tokio::test]
async fn code_mode_forgetting_the_agents_approval_policy_cannot_open_its_gate() {
    use testkit::{Reply, ScriptedServer};
    use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

    async fn turn(inherit: bool) -> (usize, Value) {
        let wired = Arc::new(AtomicUsize::new(0));
        let mut r = ToolRegistry::new();
        let w = Arc::clone(&wired);
        r.register(FnTool::new(
            "wire",
            "Send money to an account.",
            json!({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}),
            move |_args, _ctx| {
                w.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!("sent")) }
            },
        ))
        .unwrap();
        // Code mode over the tools, with no approval policy of its own.
        let (code, _temp) = code_over(Dispatcher::from_registry(r), |b| {
            b.inherit_agent_approvals(inherit)
        });
        let server = ScriptedServer::start().await;
        let script = "try:\n    print(wire(amount=5))\nexcept ToolError as e:\n    print(e.kind)\n";
        server.push(Reply::tool_call(
            "call_1",
            RUN_CODE,
            &json!({"code": script}).to_string(),
        ));
        server.push(Reply::text("done"));
        let model =
            OpenAiModel::new(OpenAiConfig::new("m").with_base_url(server.base_url())).unwrap();
        let agent = toolwright_tool_system::Agent::builder(model)
            .provider(Arc::new(code))
            .require_approval("wire")
            .build()
            .unwrap();
        let out = agent.run("s1", "pay 5").await.unwrap();
        assert_eq!(out.answer, "done");
        let requests = server.requests();
        let tool_msg = requests[1].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .cloned()
            .unwrap();
        let result: Value = serde_json::from_str(tool_msg["content"].as_str().unwrap()).unwrap();
        (wired.load(Ordering::SeqCst), result)
    }

    let (ran, result) = turn(true).await;
    assert_eq!(ran, 0, "the gated tool never runs from a script: {result}");
    assert_eq!(result["printed"], "approval_required\n", "{result}");
    assert_eq!(
        result["calls"],
        json!([{"tool": "wire", "error": "approval_required"}]),
        "{result}"
    );

    let (ran, result) = turn(false).await;
    assert_eq!(ran, 1, "the operator said scripts may: {result}");
    assert_eq!(result["printed"], "sent\n", "{result}");
}

/// in code mode: without bubblewrap, building code mode is refused with the
/// sandbox's message (what to install, which option accepts the weaker boundary).
#[test]
fn s2_code_mode_without_bubblewrap_is_refused_with_what_to_install() {
    let temp = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::default();
    config.temp_root = Some(temp.path().to_path_buf());
    config.bwrap_path = Some(temp.path().join("no-such-bwrap"));
    let err = CodeModeProvider::builder(Arc::new(Dispatcher::new()))
        .sandbox_config(config)
        .build()
        .expect_err("no container and no weaker boundary accepted: refused");
    let text = err.to_string();
    for needed in [
        "apt-get install bubblewrap",
        "allow_without_container(true)",
    ] {
        assert!(text.contains(needed), "{needed} missing from: {text}");
    }
}

/// in code mode: under the accepted fallback (no container), a script still runs
/// as PID 1 of a PID namespace of its own: its `kill(pid, 0)` scan over every pid finds only
/// itself, never the agent or any other host process. (Where not even that namespace can be
/// made, the sandbox refuses unless `allow_host_pids(true)`: the skills sandbox's
/// `s2_fallback_without_root_where_user_namespaces_are_refused_says_so`.)
#[tokio::test]
async fn s2_code_mode_under_the_accepted_fallback_finds_no_host_pid() {
    let ran = Arc::new(AtomicUsize::new(0));
    let temp = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::default()
        .with_container(false)
        .allow_without_container(true);
    config.temp_root = Some(temp.path().to_path_buf());
    let code = CodeModeProvider::builder(Arc::new(tools(&ran)))
        .sandbox_config(config)
        .limits(short())
        .build()
        .unwrap_or_else(|e| panic!("the fallback with a PID namespace of its own: {e}"));
    let p = code.sandbox().protections();
    assert!(p.container.is_none(), "{p}");
    assert!(p.pid_namespace, "{p}");
    let script = format!(
        r#"
import os
found = []
for pid in range(1, {pid_max}):
    try:
        os.kill(pid, 0)
        found.append(pid)
    except ProcessLookupError:
        pass
    except PermissionError:
        found.append(pid)
print("found", found)
"#,
        // past every pid the host has now (the agent's among them)
        pid_max = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .max()
            .unwrap()
            + 1_000
    );
    let out = code
        .call(RUN_CODE, json!({"code": script}), ToolContext::new("c1"))
        .await
        .map(|o| o.value)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let printed = out["printed"].as_str().unwrap();
    assert_eq!(printed, "found [1]\n", "{out}");
    assert!(
        !printed.contains(&format!(" {},", std::process::id())),
        "{printed}"
    );
}

/// A test-only encoder: a vector of concept counts over a fixed table of words in English
/// and Chinese (plus a constant component, so that no text is the zero vector). Real in that
/// it maps texts to vectors by what they mention; a toy next to a model. Counts what it encodes.
struct Concepts {
    documents: AtomicUsize,
    fail: bool,
    /// The id it reports: an encoder's id picks its calibrated "no tool fits" judge.
    id: &'static str,
}

const CONCEPTS: &[&[&str]] = &[
    &["elevation", "altitude", "high above sea", "海拔"],
    &["screenshot", "截图"],
    &["current time", "几点"],
    &["train ticket", "火车票"],
];

#[async_trait::async_trait]
impl toolwright_core::Embedder for Concepts {
    fn id(&self) -> &str {
        self.id
    }
    fn dimensions(&self) -> usize {
        CONCEPTS.len() + 1
    }
    async fn embed(
        &self,
        texts: &[String],
        kind: toolwright_core::EmbedKind,
    ) -> Result<Vec<Vec<f32>>, toolwright_core::ModelError> {
        if self.fail {
            return Err(toolwright_core::ModelError::Inference(
                "broken on purpose".into(),
            ));
        }
        if kind == toolwright_core::EmbedKind::Document {
            self.documents.fetch_add(texts.len(), Ordering::SeqCst);
        }
        Ok(texts
            .iter()
            .map(|t| {
                let t = t.to_lowercase();
                let mut v: Vec<f32> = CONCEPTS
                    .iter()
                    .map(|words| words.iter().filter(|w| t.contains(*w)).count() as f32)
                    .collect();
                v.push(0.1);
                v
            })
            .collect())
    }
}

#[tokio::test]
async fn code_mode_search_functions_finds_by_meaning_with_an_embedder() {
    let ran = Arc::new(AtomicUsize::new(0));
    let encoder = Arc::new(Concepts {
        documents: AtomicUsize::new(0),
        fail: false,
        id: "test-only-concepts",
    });
    let (provider, _temp) = code_over(many_tools(&ran), |b| {
        b.limits(short()).embedder(encoder.clone())
    });
    let search = |q: &'static str| {
        let provider = &provider;
        async move {
            provider
                .call(
                    SEARCH_FUNCTIONS,
                    json!({"query": q, "limit": 3}),
                    ToolContext::new("s"),
                )
                .await
                .map(|o| o.value)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    // No word of the request is in the tool's name or description.
    let found = search("how high above sea level is Denver").await;
    assert!(found.contains("google_maps__maps_elevation"), "{found}");
    assert_eq!(encoder.documents.load(Ordering::SeqCst), 360);
    let found = search("丹佛的海拔").await;
    assert!(found.contains("google_maps__maps_elevation"), "{found}");
    assert_eq!(
        encoder.documents.load(Ordering::SeqCst),
        360,
        "the functions are encoded once"
    );

    // Without the encoder, BM25 alone does not find it for the English request; a failing
    // encoder gives BM25's answer, not an error.
    let (plain, _t1) = code_over(many_tools(&ran), |b| b.limits(short()));
    let (broken, _t2) = code_over(many_tools(&ran), |b| {
        b.limits(short()).embedder(Arc::new(Concepts {
            documents: AtomicUsize::new(0),
            fail: true,
            id: "test-only-concepts",
        }))
    });
    let args = json!({"query": "how high above sea level is Denver", "limit": 3});
    let words = plain
        .call(SEARCH_FUNCTIONS, args.clone(), ToolContext::new("p"))
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(
        !words.as_str().unwrap().contains("maps_elevation"),
        "{words}"
    );
    let fallback = broken
        .call(SEARCH_FUNCTIONS, args, ToolContext::new("b"))
        .await
        .map(|o| o.value)
        .unwrap();
    assert_eq!(fallback, words);
}

#[tokio::test]
async fn code_mode_search_functions_says_no_function_fits_with_the_bridges_judge() {
    // An encoder reporting multilingual-e5-small's id gets that encoder's calibrated "no tool
    // fits" judge, the same as the MCP bridge's search (HybridConfig::for_encoder). Here its
    // vectors are the test concepts: a request for a train ticket is near no function.
    let ran = Arc::new(AtomicUsize::new(0));
    let (provider, _temp) = code_over(many_tools(&ran), |b| {
        b.limits(short()).embedder(Arc::new(Concepts {
            documents: AtomicUsize::new(0),
            fail: false,
            id: "multilingual-e5-small-q4@test-double",
        }))
    });
    let search = |q: &'static str| {
        let provider = &provider;
        async move {
            provider
                .call(SEARCH_FUNCTIONS, json!({"query": q}), ToolContext::new("s"))
                .await
                .map(|o| o.value)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let none = search("帮我订一张去上海的火车票").await;
    assert!(none.starts_with("No function fits"), "{none}");
    let found = search("how high above sea level is Denver").await;
    assert!(found.contains("google_maps__maps_elevation"), "{found}");
    // Without a calibrated judge (another encoder id), the best functions come back anyway.
    let (open, _t) = code_over(many_tools(&ran), |b| {
        b.limits(short()).embedder(Arc::new(Concepts {
            documents: AtomicUsize::new(0),
            fail: false,
            id: "test-only-concepts",
        }))
    });
    let some = open
        .call(
            SEARCH_FUNCTIONS,
            json!({"query": "帮我订一张去上海的火车票"}),
            ToolContext::new("o"),
        )
        .await
        .map(|o| o.value)
        .unwrap();
    assert!(!some.as_str().unwrap().starts_with("No function"), "{some}");
}
