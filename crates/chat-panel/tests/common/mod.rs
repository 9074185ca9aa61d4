//! Shared by the integration tests: a panel over the offline scripted model.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_chat_panel::{AgentBackend, ChatPanel, PanelConfig, PanelServer};
use toolwright_messaging::MessageBus;
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

pub const OPTIONS: [&str; 3] = ["Deploy now", "Run the tests first", "Cancel"];
pub const HOSTILE: [&str; 2] = ["<img src=x onerror=alert(1)>", "<script>alert(2)</script>"];

/// The offline agent: on the first user message (or one saying "options") it asks with
/// quick replies via send_message; "xss" sends hostile quick replies; "eleven" breaks the
/// 10-item rule; after a tool result it says what happened; otherwise it echoes, streamed.
pub fn demo_responder(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let users = messages.iter().filter(|m| m["role"] == "user").count();
    let Some(last) = messages.last() else {
        return Reply::text("(no messages)");
    };
    let call_id = format!("call_{}", messages.len());
    let content = last["content"].as_str().unwrap_or_default().to_owned();
    let send = |text: &str, replies: Vec<String>| {
        let args = json!({"recipient": "user", "text": text, "quickReplies": replies});
        Reply::tool_call(&call_id, "send_message", &args.to_string())
    };
    match last["role"].as_str() {
        Some("tool") => {
            let v: Value = serde_json::from_str(&content).unwrap_or(Value::Null);
            if v["success"] == false {
                Reply::text(format!(
                    "The message was not sent: {}",
                    v["error"].as_str().unwrap_or("unknown error")
                ))
            } else {
                Reply::text(
                    "I sent you a question above: click an option, or type your own answer.",
                )
                .shape(|s| s.delay = Duration::from_millis(2))
            }
        }
        _ => {
            let lower = content.to_lowercase();
            if lower.contains("xss") {
                send(
                    "Hostile options",
                    HOSTILE.iter().map(|s| (*s).to_owned()).collect(),
                )
            } else if lower.contains("eleven") {
                send("Too many", (1..=11).map(|i| i.to_string()).collect())
            } else if users == 1 || lower.contains("options") {
                send(
                    "How should I continue with the release?",
                    OPTIONS.iter().map(|s| (*s).to_owned()).collect(),
                )
            } else {
                Reply::text(format!("You said: {content}")).shape(|s| {
                    s.text_chunk = 3;
                    s.delay = Duration::from_millis(2);
                })
            }
        }
    }
}

pub struct Fixture {
    pub model: ScriptedServer,
    pub panel: PanelServer,
    /// The panel's MCP elicitor (hand it to a bridge).
    pub panel_elicitor: toolwright_chat_panel::PanelElicitor,
    pub bus: MessageBus,
    /// Holds the SQLite session store.
    pub dir: tempfile::TempDir,
    /// The panel itself (what an operator holds: `sign_out`, `elicitor`).
    pub chat: ChatPanel,
}

impl Fixture {
    pub fn url(&self) -> String {
        self.panel.url()
    }
}

pub async fn start_with(
    config: PanelConfig,
    responder: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> Fixture {
    start_with_agent(config, responder, |b| b).await
}

/// A gated tool for the approval tests: `delete_file {"path"}`, held for the person's approval.
pub fn with_gated_delete(
    b: toolwright_tool_system::AgentBuilder,
) -> toolwright_tool_system::AgentBuilder {
    b.tool(toolwright_tool_system::FnTool::new(
        "delete_file",
        "Delete a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args, _| async move { Ok(json!({"deleted": args["path"]})) },
    ))
    .require_approval("delete_file")
    .approval_key(toolwright_tool_system::ApprovalKey::new([42u8; 32]).unwrap())
}

/// The model of the approval tests: asked anything, it calls `delete_file` on a path whose
/// name is HTML; after the call's result it says what happened.
pub fn delete_responder(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    if last["role"] == "tool" {
        let content = last["content"].as_str().unwrap_or_default();
        if content.contains("declined") {
            Reply::text("OK, I kept the file.")
        } else {
            Reply::text("Deleted the file.")
        }
    } else {
        Reply::tool_call(
            &format!("call-{}", messages.len()),
            "delete_file",
            r#"{"path": "<b>notes</b>.txt"}"#,
        )
    }
}

/// A panel whose agent is built with `configure` on top of the default one.
pub async fn start_with_agent(
    config: PanelConfig,
    responder: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    configure: impl FnOnce(toolwright_tool_system::AgentBuilder) -> toolwright_tool_system::AgentBuilder,
) -> Fixture {
    start_with_agent_on(config, responder, configure, "127.0.0.1:0").await
}

/// [`start_with_agent`], serving on `addr`.
pub async fn start_with_agent_on(
    config: PanelConfig,
    responder: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    configure: impl FnOnce(toolwright_tool_system::AgentBuilder) -> toolwright_tool_system::AgentBuilder,
    addr: &str,
) -> Fixture {
    let model = ScriptedServer::start().await;
    model.respond_with(responder);
    let dir = tempfile::tempdir().expect("tempdir");
    serve_fixture(model, MessageBus::new(), dir, config, configure, addr).await
}

/// A panel over `model`, `bus` and the history file in `dir`, served on `addr`.
async fn serve_fixture(
    model: ScriptedServer,
    bus: MessageBus,
    dir: tempfile::TempDir,
    config: PanelConfig,
    configure: impl FnOnce(toolwright_tool_system::AgentBuilder) -> toolwright_tool_system::AgentBuilder,
    addr: &str,
) -> Fixture {
    let mut cfg = OpenAiConfig::new("scripted");
    cfg.base_url = model.base_url();
    let llm = OpenAiModel::new(cfg).expect("model");
    let config = config.with_history_path(dir.path().join("panel.sqlite3"));
    let backend = AgentBackend::build(llm, bus.clone(), &config, configure)
        .await
        .expect("agent");
    let chat = ChatPanel::new(backend, bus.clone(), config);
    let panel_elicitor = chat.elicitor();
    let panel = chat.serve(addr).await.expect("serve");
    Fixture {
        model,
        panel,
        panel_elicitor,
        bus,
        dir,
        chat,
    }
}

impl Fixture {
    /// The panel restarted: this one shut down, a new one with `config` over the same history
    /// file, model and bus, its agent built with `configure`.
    pub async fn restart(
        self,
        config: PanelConfig,
        configure: impl FnOnce(
            toolwright_tool_system::AgentBuilder,
        ) -> toolwright_tool_system::AgentBuilder,
    ) -> Fixture {
        let Fixture {
            model,
            panel,
            bus,
            dir,
            ..
        } = self;
        panel.shutdown().await;
        serve_fixture(model, bus, dir, config, configure, "127.0.0.1:0").await
    }
}

/// Sends `request`, with `body` as JSON when given: the status and the whole body (a turn's
/// stream read to its end, within 30 s).
pub async fn send(mut request: reqwest::RequestBuilder, body: Option<Value>) -> (u16, String) {
    if let Some(b) = body {
        request = request.json(&b);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let text = tokio::time::timeout(Duration::from_secs(30), r.text())
        .await
        .expect("the response ends")
        .unwrap();
    (status, text)
}

pub async fn start() -> Fixture {
    start_with(PanelConfig::default(), demo_responder).await
}

/// Parses an SSE body into (event, data) pairs.
pub fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|frame| {
            let mut event = String::from("message");
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim_start().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            (!data.is_empty()).then(|| {
                (
                    event,
                    serde_json::from_str(&data).unwrap_or(Value::String(data)),
                )
            })
        })
        .collect()
}

/// The panel of a child process: the scripted model at `CHAT_PANEL_MODEL_URL`, the bus the
/// config names, served on 127.0.0.1:0 (warnings to stderr). The caller prints its address.
#[allow(dead_code)] // used by the tests that run the panel as a process
pub async fn serve_child_panel(config: PanelConfig) -> PanelServer {
    serve_child_panel_with(config, |b| b).await
}

/// [`serve_child_panel`] with an agent built with `configure` on top of the default one.
#[allow(dead_code)] // used by the tests that run the panel as a process
pub async fn serve_child_panel_with(
    config: PanelConfig,
    configure: impl FnOnce(toolwright_tool_system::AgentBuilder) -> toolwright_tool_system::AgentBuilder,
) -> PanelServer {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("toolwright_chat_panel=warn")
        .with_writer(std::io::stderr)
        .try_init();
    let mut cfg = OpenAiConfig::new("scripted");
    cfg.base_url = std::env::var("CHAT_PANEL_MODEL_URL").unwrap();
    let model = OpenAiModel::new(cfg).unwrap();
    let bus = config.bus().await.unwrap();
    let backend = AgentBackend::build(model, bus.clone(), &config, configure)
        .await
        .unwrap();
    ChatPanel::new(backend, bus, config)
        .serve("127.0.0.1:0")
        .await
        .unwrap()
}

/// Starts a panel child process (`command`, which must make the child print
/// `listening ADDR` as its first line) with piped stdin and stdout; returns it and its address.
#[allow(dead_code)] // used by the tests that run the panel as a process
pub fn spawn_panel(
    command: &mut std::process::Command,
) -> (std::process::Child, std::net::SocketAddr) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("the panel process did not start: {line:?}"))
        .parse()
        .unwrap();
    (child, addr)
}

/// The test loop of the binaries that run without libtest (they re-run themselves as a child
/// process): runs each test whose name contains `filter`, prints libtest's lines, exits 1 when one
/// failed.
#[allow(dead_code)] // used by the tests that run the panel as a process
pub fn run_tests(tests: &[(&str, fn())], filter: Option<&str>) {
    let mut failed = Vec::new();
    let mut ran = 0;
    for &(name, test) in tests {
        if filter.is_some_and(|f| !name.contains(f)) {
            continue;
        }
        ran += 1;
        eprintln!("test {name} ...");
        match std::panic::catch_unwind(test) {
            Ok(()) => eprintln!("test {name} ... ok"),
            Err(_) => {
                eprintln!("test {name} ... FAILED");
                failed.push(name);
            }
        }
    }
    eprintln!(
        "test result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}

/// `GET {base}/api/sessions/{sid}`: the conversation as the panel at `base` shows it.
#[allow(dead_code)] // used by the tests that read a session's state
pub async fn session_state(base: &str, sid: &str) -> serde_json::Value {
    let base = base.trim_end_matches('/');
    reqwest::Client::new()
        .get(format!("{base}/api/sessions/{sid}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A service's message to the principal `alice`: "Invoice 42 is ready" from
/// `billing-bot`, with the quick replies "Pay now" and "Later".
pub async fn invoice_for_alice(bus: &MessageBus) {
    let q =
        toolwright_messaging::QuickReplies::new(vec!["Pay now".into(), "Later".into()]).unwrap();
    bus.send(
        toolwright_messaging::OutgoingMessage::new(
            "billing-bot",
            toolwright_chat_panel::person_address("alice"),
            "Invoice 42 is ready",
        )
        .with_quick_replies(q),
    )
    .await
    .unwrap();
}

/// A tool's picture for the picture tests: a 96×64 PNG chart (`tests/fixtures/media`).
pub const CHART_PNG: &[u8] = include_bytes!("../fixtures/media/chart-96x64.png");
/// The person's picture for the picture tests: a 24×16 PNG checkerboard.
pub const CHECKS_PNG: &[u8] = include_bytes!("../fixtures/media/checks-24x16.png");

/// A tool that answers a line of JSON and pictures: `draw_chart` ([`CHART_PNG`]).
pub struct PictureTool {
    pub name: &'static str,
    pub parts: Vec<toolwright_core::Part>,
}

#[toolwright_core::async_trait]
impl toolwright_core::Tool for PictureTool {
    fn spec(&self) -> toolwright_core::ToolSpec {
        toolwright_core::ToolSpec::new(
            self.name,
            "Draw a picture",
            json!({"type": "object", "properties": {}}),
        )
    }
    async fn call(
        &self,
        _args: Value,
        _ctx: toolwright_core::ToolContext,
    ) -> Result<toolwright_core::ToolOutput, toolwright_core::ToolError> {
        let mut out = toolwright_core::ToolOutput::new(json!({"drawn": self.name}));
        for p in &self.parts {
            out = out.with_part(p.clone());
        }
        Ok(out)
    }
}

/// The agent with `draw_chart`, answering [`CHART_PNG`].
pub fn with_chart_tool(
    b: toolwright_tool_system::AgentBuilder,
) -> toolwright_tool_system::AgentBuilder {
    let chart = toolwright_core::Media::image_bytes(CHART_PNG, "image/png")
        .unwrap()
        .with_name("chart.png");
    b.tool(PictureTool {
        name: "draw_chart",
        parts: vec![toolwright_core::Part::Image(chart)],
    })
}

/// A message's text on the Chat Completions wire: its `content` string, or the text parts of
/// its content array.
pub fn wire_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The data URLs of a message's images on the Chat Completions wire.
pub fn wire_images(m: &Value) -> Vec<String> {
    m["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["image_url"]["url"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The model of the picture tests: after a tool's result (the tool message, or the user
/// message after it that carries the tool's media) it says "Here is the chart."; a user
/// message with a picture gets "I see a picture." and one naming a chart calls `draw_chart`
/// (or any tool named in `call <name>`); anything else is echoed.
pub fn picture_responder(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let n = messages.len();
    let Some(last) = messages.last() else {
        return Reply::text("(no messages)");
    };
    let after_tool = last["role"] == "tool"
        || (last["role"] == "user" && n >= 2 && messages[n - 2]["role"] == "tool");
    if after_tool {
        return Reply::text("Here is the chart.");
    }
    if !wire_images(last).is_empty() {
        return Reply::text("I see a picture.");
    }
    let text = wire_text(last);
    if let Some(name) = text.strip_prefix("call ") {
        return Reply::tool_call(&format!("call_{n}"), name.trim(), "{}");
    }
    if text.contains("chart") {
        return Reply::tool_call(&format!("call_{n}"), "draw_chart", "{}");
    }
    Reply::text(format!("You said: {text}"))
}

/// A model that reads text only: a request with a person's picture is refused before
/// anything is generated (`ModelError::Unsupported`), as the embedded local model does.
pub struct TextOnly(pub OpenAiModel);

impl TextOnly {
    fn refuse(req: &toolwright_core::ChatRequest) -> Result<(), toolwright_core::ModelError> {
        let picture = req.messages.iter().any(|m| {
            matches!(m, toolwright_core::Message::User { .. })
                && m.parts()
                    .iter()
                    .any(|p| matches!(p, toolwright_core::Part::Image(_)))
        });
        if picture {
            return Err(toolwright_core::ModelError::Unsupported {
                part: "image",
                backend: "a text-only test model".into(),
            });
        }
        Ok(())
    }
}

#[toolwright_core::async_trait]
impl toolwright_core::ChatModel for TextOnly {
    fn info(&self) -> toolwright_core::ModelInfo {
        self.0.info()
    }
    async fn chat(
        &self,
        req: toolwright_core::ChatRequest,
    ) -> Result<toolwright_core::ChatResponse, toolwright_core::ModelError> {
        Self::refuse(&req)?;
        self.0.chat(req).await
    }
    async fn stream(
        &self,
        req: toolwright_core::ChatRequest,
    ) -> Result<toolwright_core::ChatStream, toolwright_core::ModelError> {
        Self::refuse(&req)?;
        self.0.stream(req).await
    }
}

/// A panel whose model reads text only ([`TextOnly`]) over the scripted `responder`.
pub async fn start_text_only(
    config: PanelConfig,
    responder: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> Fixture {
    let model = ScriptedServer::start().await;
    model.respond_with(responder);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = OpenAiConfig::new("scripted");
    cfg.base_url = model.base_url();
    let llm = TextOnly(OpenAiModel::new(cfg).expect("model"));
    let bus = MessageBus::new();
    let config = config.with_history_path(dir.path().join("panel.sqlite3"));
    let backend = AgentBackend::build(llm, bus.clone(), &config, |b| b)
        .await
        .expect("agent");
    let chat = ChatPanel::new(backend, bus.clone(), config);
    let panel_elicitor = chat.elicitor();
    let panel = chat.serve("127.0.0.1:0").await.expect("serve");
    Fixture {
        model,
        panel,
        panel_elicitor,
        bus,
        dir,
        chat,
    }
}

/// One second of a 440 Hz tone, 8 kHz 16-bit mono PCM, as a WAV file: a sound every browser
/// plays.
pub fn tone_wav() -> Vec<u8> {
    let rate: u32 = 8000;
    let samples: Vec<i16> = (0..rate)
        .map(|i| ((i as f64 * 440.0 * std::f64::consts::TAU / rate as f64).sin() * 8000.0) as i16)
        .collect();
    let data_len = (samples.len() * 2) as u32;
    let mut w = Vec::with_capacity(44 + data_len as usize);
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + data_len).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes()); // PCM
    w.extend_from_slice(&1u16.to_le_bytes()); // mono
    w.extend_from_slice(&rate.to_le_bytes());
    w.extend_from_slice(&(rate * 2).to_le_bytes());
    w.extend_from_slice(&2u16.to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&data_len.to_le_bytes());
    for s in samples {
        w.extend_from_slice(&s.to_le_bytes());
    }
    w
}

/// A small PDF (one empty page).
pub const REPORT_PDF: &[u8] = b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n";

/// The data URL of inline media on the Chat Completions wire: the files (`file.file_data`,
/// with `file.filename`) and sounds (`input_audio`) of a message.
pub fn wire_files(m: &Value) -> Vec<(String, String)> {
    m["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| match p["type"].as_str() {
                    Some("file") => Some((
                        p["file"]["filename"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        p["file"]["file_data"].as_str()?.to_owned(),
                    )),
                    Some("input_audio") => Some((
                        format!("audio/{}", p["input_audio"]["format"].as_str()?),
                        p["input_audio"]["data"].as_str()?.to_owned(),
                    )),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}
