//! Stage 5 demo: the chat panel with an agent that can call `send_message` with quick replies.
//!
//! ```text
//! cargo run -p stage-5                 # serve until Ctrl-C; open the printed address
//! cargo run -p stage-5 -- --smoke      # serve, one real HTTP round trip against itself, exit 0
//! STAGE_DEMO_SECONDS=30 cargo run -p stage-5   # serve for 30 s, then exit 0
//! PANEL_ADDR=127.0.0.1:8080 cargo run -p stage-5   # fixed port (loopback only)
//! PANEL_DB=/tmp/panel.sqlite3 cargo run -p stage-5  # where conversations are kept
//! DATABASE_URL=postgres://USER@127.0.0.1/DB NATS_URL=nats://127.0.0.1:4222 \
//!   PANEL_ADDR=127.0.0.1:8081 cargo run -p stage-5  # one of several workers (docs/workers.md)
//! ```
//!
//! With `OPENAI_API_KEY` / `OPENAI_BASE_URL` (and `OPENAI_MODEL`) set, the agent is that model.
//! Without them it uses the offline scripted model (testkit's ScriptedServer) and says so on
//! its first line. The offline agent asks a question with quick replies on the first message
//! (or when you type "options"), sends hostile quick replies for "xss", breaks the 10-item
//! rule for "eleven" (you see the tool error), and otherwise echoes what you typed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_chat_panel::{AgentBackend, ChatPanel, PanelConfig};
use toolwright_core::ChatModel;
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

fn offline_agent(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let users = messages.iter().filter(|m| m["role"] == "user").count();
    let Some(last) = messages.last() else {
        return Reply::text("(no messages)");
    };
    let call_id = format!("call_{}", messages.len());
    let content = last["content"].as_str().unwrap_or_default().to_owned();
    let ask = |text: &str, replies: &[&str]| {
        let args = json!({"recipient": "user", "text": text, "quickReplies": replies});
        Reply::tool_call(&call_id, "send_message", &args.to_string())
    };
    let streamed = |text: String| {
        Reply::text(text).shape(|s| {
            s.text_chunk = 3;
            s.delay = Duration::from_millis(12);
        })
    };
    if last["role"] == "tool" {
        let v: Value = serde_json::from_str(&content).unwrap_or(Value::Null);
        return if v["success"] == false {
            streamed(format!(
                "The message was not sent: {}",
                v["error"].as_str().unwrap_or("unknown error")
            ))
        } else {
            streamed(
                "I sent you a question above: click an option, or type your own answer.".into(),
            )
        };
    }
    let lower = content.to_lowercase();
    if lower.contains("xss") {
        ask(
            "Hostile options (shown as text)",
            &["<img src=x onerror=alert(1)>", "<script>alert(2)</script>"],
        )
    } else if lower.contains("eleven") {
        ask(
            "Too many options",
            &["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"],
        )
    } else if users == 1 || lower.contains("options") {
        ask(
            "How should I continue with the release?",
            &["Deploy now", "Run the tests first", "Cancel"],
        )
    } else {
        streamed(format!(
            "You said: {content}\n(offline demo model — type \"options\" for quick replies, \"xss\" for hostile ones, \"eleven\" for a rejected call)"
        ))
    }
}

/// One POST against the running panel; prints the SSE events as they arrive and returns them
/// as (event, data).
async fn post(
    client: &reqwest::Client,
    base: &str,
    sid: &str,
    body: Value,
) -> Result<Vec<(String, Value)>, Box<dyn std::error::Error>> {
    use futures::StreamExt;
    let r = client
        .post(format!("{base}api/sessions/{sid}/messages"))
        .json(&body)
        .send()
        .await?;
    let status = r.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", r.text().await?).into());
    }
    let mut body = r.bytes_stream();
    let mut pending = Vec::new();
    let mut events = Vec::new();
    while let Some(chunk) = body.next().await {
        pending.extend_from_slice(&chunk?);
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = pending.drain(..end + 2).collect();
            let mut event = String::new();
            let mut data = String::new();
            for line in String::from_utf8_lossy(&frame).lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if !data.is_empty() {
                let ev = (event, serde_json::from_str(&data).unwrap_or(Value::Null));
                show(std::slice::from_ref(&ev));
                events.push(ev);
            }
        }
    }
    Ok(events)
}

fn show(events: &[(String, Value)]) {
    for (event, d) in events {
        match (event.as_str(), d["kind"].as_str()) {
            ("entry", Some("user")) => println!("   you: {}", d["text"].as_str().unwrap_or("")),
            ("entry", Some("message")) => println!(
                "   message from {}: {}  quick replies: {}",
                d["from"].as_str().unwrap_or("?"),
                d["text"].as_str().unwrap_or(""),
                d["quickReplies"]
            ),
            ("update", Some("tool")) => println!(
                "   tool {} {}: {}",
                d["tool"]["name"].as_str().unwrap_or("?"),
                if d["tool"]["isError"] == true {
                    "failed"
                } else {
                    "done"
                },
                d["tool"]["result"].as_str().unwrap_or("")
            ),
            ("update", Some("message")) => println!(
                "   (quick replies of message {} now answered: chosen {})",
                d["id"], d["chosen"]
            ),
            ("entry", Some("error")) => println!("   error: {}", d["text"].as_str().unwrap_or("")),
            ("delta", _) => {
                use std::io::Write;
                print!("{}", d["text"].as_str().unwrap_or(""));
                let _ = std::io::stdout().flush();
            }
            ("done", _) => println!("\n   [done]"),
            _ => {}
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _traces = demo_support::init_tracing("llm-toolkit-stage-5");
    let smoke = std::env::args().any(|a| a == "--smoke");
    let seconds: Option<u64> = std::env::var("STAGE_DEMO_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let scripted = std::env::args().any(|a| a == "--scripted");
    // DATABASE_URL (PostgreSQL) and NATS_URL (NATS JetStream) switch the stores; with neither
    // set, everything is embedded: SQLite and the in-process bus.
    let env_config = PanelConfig::from_env();
    let bus = env_config.bus().await?;
    let mut _offline = None;
    let model: Arc<dyn ChatModel> = match OpenAiConfig::from_env()? {
        Some(cfg) if !scripted => {
            println!(
                "Stage 5 demo: using the configured provider {} (model {})",
                cfg.base_url, cfg.model
            );
            Arc::new(OpenAiModel::new(cfg)?)
        }
        _ if scripted => {
            let server = ScriptedServer::start().await;
            server.set_recording(false);
            server.respond_with(offline_agent);
            println!(
                "Stage 5 demo (--scripted): using the scripted demo model at {}",
                server.base_url()
            );
            let cfg = OpenAiConfig::new("offline-demo").with_base_url(server.base_url());
            _offline = Some(server);
            Arc::new(OpenAiModel::new(cfg)?)
        }
        _ => {
            println!(
                "Stage 5 demo: no provider configured (OPENAI_API_KEY/OPENAI_BASE_URL unset): using the embedded local model SmolLM2-135M-Instruct (CPU, in process); --scripted uses the scripted demo model instead"
            );
            // Native tool calls: the agent binds send_message like any tool, and the model's
            // decoding is held to its schema (or a plain-text answer) by the model's grammar.
            let started = std::time::Instant::now();
            let model = toolwright_local_model::LocalModel::builder()
                // A fixed seed keeps the demo reproducible; the n-gram ban keeps a small model
                // out of "I am a chatbot. I am a chatbot. …" loops; answers stay short.
                .seed(5)
                .no_repeat_ngram(3)
                .max_tokens(160)
                .build()
                .await?;
            println!(
                "(local model loaded in {:.1} s)",
                started.elapsed().as_secs_f64()
            );
            Arc::new(model)
        }
    };
    // Conversations are kept in SQLite (C4): PANEL_DB, else the default file
    // (~/.local/share/llm-toolkit/chat-panel.sqlite3); --smoke uses a fresh file in the temp dir.
    let db = match std::env::var_os("PANEL_DB") {
        Some(p) => std::path::PathBuf::from(p),
        None if smoke => {
            std::env::temp_dir().join(format!("stage5-smoke-{}.sqlite3", std::process::id()))
        }
        None => toolwright_chat_panel::HistoryStore::default_path(),
    };
    let config = if let toolwright_chat_panel::HistoryStore::Postgres(_) = &env_config.history {
        println!("Conversations are kept in PostgreSQL (DATABASE_URL)");
        env_config
    } else {
        println!(
            "Conversations are kept in {} (set PANEL_DB to choose, or DATABASE_URL for PostgreSQL)",
            db.display()
        );
        env_config.with_history_path(&db)
    };
    let backend = AgentBackend::build(model, bus.clone(), &config, |b| b).await?;
    let panel = ChatPanel::new(backend, bus, config);
    let addr = std::env::var("PANEL_ADDR").unwrap_or_else(|_| "127.0.0.1:0".into());
    let server = panel.serve(&addr).await?;
    println!("Chat panel: {}", server.url());

    if smoke {
        println!("\n--smoke: one real HTTP round trip against the panel");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()?;
        let base = server.url();
        let sid = "stage5-smoke-session";
        println!("1) POST \"hello\"");
        let events = post(&client, &base, sid, json!({"text": "hello"})).await?;
        let question = events
            .iter()
            .find(|(e, d)| e == "entry" && d["kind"] == "message" && d["quickReplies"].is_array())
            .map(|(_, d)| d.clone());
        if let Some(q) = question {
            let choice = q["quickReplies"][1].as_str().unwrap_or("ok").to_owned();
            println!(
                "2) click quick reply {choice:?} (POST with inReplyTo {})",
                q["id"]
            );
            post(
                &client,
                &base,
                sid,
                json!({"text": choice, "inReplyTo": q["id"]}),
            )
            .await?;
        }
        let state: Value = client
            .get(format!("{base}api/sessions/{sid}"))
            .send()
            .await?
            .json()
            .await?;
        let n = state["entries"].as_array().map_or(0, Vec::len);
        println!(
            "3) GET the session: {n} entries kept on the server (a page reload shows the same)"
        );
        server.shutdown().await;
        if std::env::var_os("PANEL_DB").is_none() {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
            }
        }
        println!("smoke round trip OK");
        return Ok(());
    }

    match seconds {
        Some(s) => {
            println!("Serving for {s} s (STAGE_DEMO_SECONDS); Ctrl-C stops earlier.");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(s)) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        None => {
            println!("Open it in a browser. Ctrl-C stops.");
            tokio::signal::ctrl_c().await?;
        }
    }
    server.shutdown().await;
    println!("stopped");
    Ok(())
}
