//! Stage 1 demo: a multi-turn session with tool calls saved to SQLite (in a temp dir), the
//! store reopened as after a restart, and the history trimmed to a small token budget —
//! printing what was kept and what was dropped, and why. The trimmed request is then answered by
//! a real model (the configured provider, else the embedded local model), and the answer is
//! saved as the next round.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use toolwright_context_engine::{
    ContextBuilder, History, SessionStore, SqliteStore, counter_for_model,
};
use toolwright_core::{ChatRequest, Message, ToolCall};

fn preview(m: &Message) -> String {
    let text: String = m.content().chars().take(48).collect();
    let calls: Vec<&str> = m.tool_calls().iter().map(|c| &*c.name).collect();
    let role = format!("{:?}", m.role()).to_lowercase();
    if calls.is_empty() {
        format!("{role:<9} {text:?}")
    } else {
        format!("{role:<9} {text:?} calls {calls:?}")
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("context-engine-stage-1-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("sessions.db");
    let (model, which) = demo_support::demo_model().await?;
    println!("Stage 1 demo: {which}");
    println!("Session store at {}", path.display());

    // 1) A multi-turn session, one atomic round at a time.
    {
        let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&path)?);
        store.create("demo").await?;
        for turn in 1..=4 {
            let call_id = format!("call_{turn}");
            store
                .append(
                    "demo",
                    &[Message::user(format!(
                        "Turn {turn}: summarise report {turn}."
                    ))],
                )
                .await?;
            let round = [
                Message::assistant_with_tool_calls(
                    "",
                    vec![ToolCall::new(
                        &call_id,
                        "read_file",
                        json!({"path": format!("report-{turn}.txt")}),
                    )],
                ),
                Message::tool(
                    &call_id,
                    "read_file",
                    format!("Report {turn}: sales rose by {turn}0%. ").repeat(6),
                ),
                Message::assistant(format!("Report {turn} says sales rose by {turn}0%.")),
            ];
            let len = store.append("demo", &round).await?;
            println!("  appended turn {turn}: session now holds {len} messages");
        }
        // The JSON-decision loop (002) feeds tool results back as a user message.
        store
            .append(
                "demo",
                &[Message::user(
                    "[Tool result for calendar]\nNext review: Friday.",
                )],
            )
            .await?;
        store
            .append(
                "demo",
                &[Message::user("Which report had the best growth?")],
            )
            .await?;
    } // store dropped: as if the process ended

    // 2) Reopen, as after a restart.
    let store = SqliteStore::open(&path)?;
    let session = store.load("demo").await?;
    println!(
        "\nReopened: session {:?} has {} messages:",
        session.id,
        session.messages.len()
    );
    for (i, m) in session.messages.iter().enumerate() {
        println!("  [{i:2}] {}", preview(m));
    }

    // 3) Build one request inside a small budget.
    const MODEL: &str = "gpt-4o-mini";
    let counter = counter_for_model(MODEL);
    let history = History::from_messages(counter.clone(), session.messages);
    let builder = ContextBuilder::new("You are a concise analyst.")
        .section("tools", "Tools: read_file(path) returns a file's text.")
        .with_counter(counter.clone())
        .with_budget(300);
    let ctx = builder.build(&history)?;
    println!(
        "\nBuilt for {MODEL} (counter {}), budget {} tokens: {} tokens used",
        counter.id(),
        ctx.budget,
        ctx.tokens
    );
    println!("Sent to the model:");
    for m in &ctx.messages {
        println!("  {}", preview(m));
    }
    println!("Kept history indices: {:?}", ctx.kept);
    println!("Dropped ({}):", ctx.dropped.len());
    for d in &ctx.dropped {
        println!("  [{:2}] {:?}, {} tokens", d.index, d.reason, d.tokens);
    }

    // 4) A budget too small for the system prompt and the newest question: a typed error.
    match builder.clone().with_budget(20).build(&history) {
        Err(e) => println!("\nWith a 20-token budget: {e}"),
        Ok(_) => return Err("a 20-token budget should not fit".into()),
    }

    // 5) The trimmed request, answered for real; the answer is saved as the next round.
    let answer = model
        .chat(ChatRequest::new(ctx.messages.clone()).with_max_tokens(96))
        .await?;
    println!(
        "\nThe model's answer to the trimmed request: {:?}",
        answer.content
    );
    let len = store
        .append("demo", &[Message::assistant(answer.content)])
        .await?;
    println!("Saved as the next round: the session now holds {len} messages");

    drop(store);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
