//! Q10–Q15 in a real headless Chromium driven over WebDriver (chromedriver + fantoccini).
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `cargo xtask test` installs them), or `CHROME_BIN` / `CHROMEDRIVER`.
//! Missing browser = failing test, never a skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "common/browser.rs"]
mod chrome;
mod common;
#[path = "common/oidc.rs"]
mod oidc;

use std::path::PathBuf;
use std::time::Duration;

use chrome::{BROWSER_LOCK, Browser};
use common::{Fixture, HOSTILE, OPTIONS, start};
use fantoccini::Locator;
use serde_json::{Value, json};

fn labels(b: &[(String, bool)]) -> Vec<&str> {
    b.iter().map(|(t, _)| t.as_str()).collect()
}

/// Opens the panel and says hello; the offline agent answers with a send_message carrying OPTIONS.
async fn with_question() -> (Fixture, Browser) {
    let fx = start().await;
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("hello").await;
    b.wait_until(
        "the quick replies",
        "document.querySelectorAll('.entry-message .quick-reply').length === 3",
    )
    .await;
    b.idle().await;
    (fx, b)
}

#[tokio::test]
async fn q10_q11_quick_replies_are_buttons_under_the_message_in_order() {
    let _one = BROWSER_LOCK.lock().await;
    let (_fx, b) = with_question().await;
    let buttons = b.buttons(0).await;
    assert_eq!(labels(&buttons), OPTIONS, "Q11: in array order");
    assert!(buttons.iter().all(|(_, disabled)| !disabled));
    // Q10: under the message text, inside the message's entry
    let below = b
        .js("const m = document.querySelector('.entry-message');
             const t = m.querySelector('.text').getBoundingClientRect();
             const r = m.querySelector('.quick-replies').getBoundingClientRect();
             return [m.querySelector('.text').textContent, r.top >= t.bottom];")
        .await;
    assert_eq!(
        below,
        json!(["How should I continue with the release?", true])
    );
    // tool activity is visible: which tool ran and its result
    let tool = b
        .js("const t = document.querySelector('.entry-tool'); return t ? t.textContent : null;")
        .await;
    let tool = tool.as_str().unwrap();
    assert!(tool.contains("Tool send_message — done"), "{tool}");
    assert!(tool.contains("\"success\":true"), "{tool}");
    // streamed answer after the tool
    let answer = b.js("return Array.from(document.querySelectorAll('.entry-assistant .text')).map(e => e.textContent);").await;
    assert_eq!(
        answer,
        json!(["I sent you a question above: click an option, or type your own answer."])
    );
    b.close().await;
}

#[tokio::test]
async fn q12_q13_click_sends_the_option_and_disables_all_buttons_of_that_message() {
    let _one = BROWSER_LOCK.lock().await;
    let (fx, b) = with_question().await;
    let before = fx.model.request_count();
    let second = b
        .client
        .find_all(Locator::Css(".entry-message .quick-reply"))
        .await
        .unwrap();
    second[1].click().await.unwrap();
    // Q13: every button of that message is disabled at once
    let buttons = b.buttons(0).await;
    assert_eq!(
        buttons.iter().map(|(_, d)| *d).collect::<Vec<_>>(),
        [true, true, true]
    );
    b.idle().await;
    // Q12: the option's text went out as the person's reply, and the agent answered it
    let users = b.js("return Array.from(document.querySelectorAll('.entry-user .text')).map(e => e.textContent);").await;
    assert_eq!(users, json!(["hello", OPTIONS[1]]));
    assert!(fx.model.request_count() > before);
    let sent = fx.model.requests().last().unwrap().body.to_string();
    assert!(sent.contains(OPTIONS[1]), "the model got the clicked text");
    let last = b.js("const a = document.querySelectorAll('.entry-assistant .text'); return a[a.length-1].textContent;").await;
    assert_eq!(last, json!(format!("You said: {}", OPTIONS[1])));
    // clicking a disabled button does nothing
    let n = fx.model.request_count();
    let _ = b
        .js("document.querySelectorAll('.entry-message .quick-reply')[0].click(); return 1;")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fx.model.request_count(), n);
    b.close().await;
}

#[tokio::test]
async fn q14_q15_typing_stays_possible_and_a_typed_reply_disables_the_buttons() {
    let _one = BROWSER_LOCK.lock().await;
    let (_fx, b) = with_question().await;
    // Q14: the text box works while quick replies are offered
    assert_eq!(
        b.js("return document.getElementById('input').disabled;")
            .await,
        json!(false)
    );
    b.type_and_send("Neither, wait until Monday").await;
    // Q15: the typed reply disables that message's buttons
    let buttons = b.buttons(0).await;
    assert!(buttons.iter().all(|(_, d)| *d), "{buttons:?}");
    b.idle().await;
    let users = b.js("return Array.from(document.querySelectorAll('.entry-user .text')).map(e => e.textContent);").await;
    assert_eq!(users, json!(["hello", "Neither, wait until Monday"]));
    // none marked chosen: it was typed
    assert_eq!(
        b.js("return document.querySelectorAll('.quick-reply.chosen').length;")
            .await,
        json!(0)
    );
    b.close().await;
}

#[tokio::test]
async fn q13_reload_keeps_the_conversation_and_answered_state() {
    let _one = BROWSER_LOCK.lock().await;
    let (_fx, b) = with_question().await;
    // ask again to get a second, still open set, then answer the first by click
    b.type_and_send("more options please").await;
    b.wait_until(
        "second set",
        "document.querySelectorAll('.entry-message').length === 2",
    )
    .await;
    b.idle().await;
    // clicking in the second (open) message answers it; the first was answered by the typed text
    let all = b
        .client
        .find_all(Locator::Css(".entry-message"))
        .await
        .unwrap();
    let btns = all[1].find_all(Locator::Css(".quick-reply")).await.unwrap();
    btns[2].click().await.unwrap();
    b.idle().await;
    let before = b
        .js("return document.getElementById('log').innerText;")
        .await;
    b.client.refresh().await.unwrap();
    b.wait_until("reload", "document.body.dataset.ready === '1'")
        .await;
    let after = b
        .js("return document.getElementById('log').innerText;")
        .await;
    assert_eq!(before, after, "the same conversation after a reload");
    for nth in 0..2 {
        let buttons = b.buttons(nth).await;
        assert_eq!(labels(&buttons), OPTIONS);
        assert!(
            buttons.iter().all(|(_, d)| *d),
            "set {nth} stays disabled after reload: {buttons:?}"
        );
    }
    let chosen = b.js("return Array.from(document.querySelectorAll('.quick-reply.chosen')).map(b => b.textContent);").await;
    assert_eq!(chosen, json!([OPTIONS[2]]));
    // a fresh session id (New chat) starts empty; the old one is still on the server
    b.client
        .find(Locator::Id("new-chat"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_until(
        "empty log",
        "document.querySelectorAll('.entry').length === 0",
    )
    .await;
    b.close().await;
}

#[tokio::test]
async fn q10_hostile_quick_replies_render_as_text() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = start().await;
    let b = Browser::start().await;
    b.open(&fx).await;
    // the page would show an alert or load an image if it put model text in as HTML
    b.type_and_send("hello").await;
    b.idle().await;
    b.type_and_send("xss please").await;
    b.wait_until(
        "the hostile set",
        "document.querySelectorAll('.entry-message').length === 2",
    )
    .await;
    b.idle().await;
    let buttons = b.buttons(1).await;
    assert_eq!(labels(&buttons), HOSTILE);
    assert_eq!(
        b.js("return document.getElementsByTagName('img').length;")
            .await,
        json!(0)
    );
    assert_eq!(
        b.js("return document.querySelectorAll('#log script').length;")
            .await,
        json!(0)
    );
    assert!(
        b.client.get_alert_text().await.is_err(),
        "no alert may be open"
    );
    // the tool entry shows the arguments as text too
    let args = b.js("const a = document.querySelectorAll('.entry-tool pre.args'); return a[a.length-1].textContent;").await;
    assert!(
        args.as_str()
            .unwrap()
            .contains("<img src=x onerror=alert(1)>")
    );
    // clicking a hostile option sends it as plain text
    let _ = b.js("document.querySelectorAll('.entry-message')[1].querySelector('.quick-reply').click(); return 1;").await;
    b.idle().await;
    let users = b.js("return Array.from(document.querySelectorAll('.entry-user .text')).map(e => e.textContent);").await;
    assert_eq!(users[2], json!(HOSTILE[0]));
    assert_eq!(
        b.js("return document.getElementsByTagName('img').length;")
            .await,
        json!(0)
    );
    assert!(
        b.client.get_alert_text().await.is_err(),
        "no alert may be open"
    );
    b.close().await;
}

#[tokio::test]
async fn screenshot_of_the_panel_for_the_docs() {
    let _one = BROWSER_LOCK.lock().await;
    let (_fx, b) = with_question().await;
    b.type_and_send("eleven options, please").await;
    b.idle().await;
    b.type_and_send("options").await;
    b.idle().await;
    let png = b.client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let out = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../docs/chat-panel.png");
    std::fs::write(&out, &png).unwrap();
    b.close().await;
}

/// The attacker's page (served from another port, so another origin): it tries every way a
/// page can post to the panel without CORS permission — a `no-cors` fetch with `text/plain`
/// (the report's reproduction), a `no-cors` fetch claiming JSON, a CORS fetch with JSON
/// (needs a preflight) and an auto-submitted form — then marks itself done.
fn attacker_page(panel: &str) -> String {
    format!(
        r#"<!doctype html><html><body><form id="f" method="POST" target="sink"
  action="{panel}api/sessions/victim-session-01/messages" enctype="text/plain">
<input name='{{"text":"form","x":"' value='"}}'></form><iframe name="sink"></iframe>
<script>
const url = "{panel}api/sessions/victim-session-01/messages";
const tries = [
  fetch(url, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: '{{"text":"hi"}}'}}),
  fetch(url, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "application/json"}}, body: '{{"text":"hi"}}'}}),
  fetch(url, {{method: "POST", headers: {{"Content-Type": "application/json"}}, body: '{{"text":"hi"}}'}}),
  fetch("{panel}api/sessions/victim-session-01"),
];
document.getElementById("f").submit();
Promise.allSettled(tries).then(r => {{
  window.results = r.map(x => x.status === "fulfilled" ? ("fulfilled:" + x.value.type + ":" + x.value.status) : "rejected");
  setTimeout(() => {{ document.body.dataset.done = "1"; }}, 1500);
}});
</script></body></html>"#
    )
}

#[tokio::test]
async fn a_cross_origin_page_in_chromium_cannot_run_a_turn() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = start().await;
    // the attacker's site: another port on the same machine is another origin
    let page = attacker_page(&fx.url());
    let attacker = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let attacker_url = format!("http://{}/", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, attacker).await });
    let b = Browser::start().await;
    b.client.goto(&attacker_url).await.unwrap();
    b.wait_until("the attack to finish", "document.body.dataset.done === '1'")
        .await;
    let results = b.js("return window.results;").await;
    b.close().await;
    server.abort();
    // nothing ran: no model call, and the victim session is empty
    assert_eq!(fx.model.request_count(), 0, "a turn ran: {results}");
    let v: Value = reqwest::get(format!("{}api/sessions/victim-session-01", fx.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["entries"], json!([]), "{results}");
    // the page could not read anything either (opaque or failed)
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert!(
        results
            .iter()
            .all(|r| r == "rejected" || r == "fulfilled:opaque:0"),
        "{results:?}"
    );
}

/// a call held for approval shows the tool and its arguments as text with Approve /
/// Reject buttons; a click disables them at once and resumes the turn over SSE; a reload shows
/// the same pending call; a decision sent twice (a second tab) changes nothing.
#[tokio::test]
async fn approval_buttons_resume_the_turn_and_survive_a_reload() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::delete_responder,
        common::with_gated_delete,
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("please delete my notes").await;
    b.wait_until(
        "the approval box",
        "document.querySelectorAll('.entry-approval button.approve').length === 1",
    )
    .await;
    b.idle().await;
    // The arguments are text: the HTML in the path is shown, never rendered.
    let shown = b
        .js("const a = document.querySelector('.entry-approval');
             return [a.textContent, a.querySelectorAll('b').length];")
        .await;
    assert!(
        shown[0].as_str().unwrap().contains("delete_file"),
        "{shown}"
    );
    assert!(
        shown[0].as_str().unwrap().contains("<b>notes</b>.txt"),
        "{shown}"
    );
    assert_eq!(shown[1], json!(0), "no element built from the arguments");
    let model_calls = fx.model.request_count();

    // A reload shows the same pending call (from the store).
    b.open(&fx).await;
    b.wait_until(
        "the approval box after a reload",
        "document.querySelectorAll('.entry-approval button.approve').length === 1",
    )
    .await;
    // The token the page holds, for the second-tab check below.
    let sid = b.session_id().await;
    let client = reqwest::Client::new();
    let base = fx.url().trim_end_matches('/').to_owned();
    let state = common::session_state(&base, &sid).await;
    let call = state["pending"]["calls"][0].clone();
    assert_eq!(call["name"], "delete_file", "{state}");

    // Approve: both buttons disabled at once; the call runs, the agent answers.
    b.click(".entry-approval button.approve").await;
    let disabled = b
        .js("return Array.from(document.querySelectorAll('.entry-approval button')).map(x => x.disabled);")
        .await;
    assert!(
        disabled
            .as_array()
            .is_none_or(|a| a.iter().all(|d| d == &json!(true))),
        "{disabled}"
    );
    b.wait_for_text(".entry-assistant .text", "Deleted the file.", false)
        .await;
    b.idle().await;
    assert_eq!(
        b.js("return document.querySelectorAll('.entry-approval').length;")
            .await,
        json!(0)
    );
    let tool = b
        .js("const t = document.querySelector('.entry-tool'); return t ? t.textContent : null;")
        .await;
    assert!(
        tool.as_str().unwrap().contains("delete_file — done"),
        "{tool}"
    );
    assert_eq!(fx.model.request_count(), model_calls + 1);

    // A second tab sends the same decision: refused, nothing runs again.
    let res = client
        .post(format!("{base}/api/sessions/{sid}/approvals"))
        .json(&json!({"decisions": [{"call_id": call["id"], "token": call["token"], "approved": true}]}))
        .send()
        .await
        .unwrap();
    let body = res.text().await.unwrap();
    let events = common::sse_events(&body);
    assert!(
        events
            .iter()
            .any(|(e, d)| e == "entry" && d["kind"] == "error"),
        "{body}"
    );
    assert_eq!(
        fx.model.request_count(),
        model_calls + 1,
        "nothing ran again"
    );

    // Reject on the next turn: the model is told and says so.
    b.type_and_send("delete it again").await;
    b.wait_until(
        "the second approval box",
        "document.querySelectorAll('.entry-approval button.reject').length === 1",
    )
    .await;
    b.idle().await;
    b.click(".entry-approval button.reject").await;
    b.wait_for_text(".entry-assistant .text", "OK, I kept the file.", false)
        .await;
    let sent = fx.model.requests().last().unwrap().body.to_string();
    assert!(sent.contains("The user declined this call"), "{sent}");
    b.close().await;
}

/// A call held inside a sub-agent (`Agent::as_tool`) is the person's to decide in the panel:
/// the top run holds with the call listed by its path (`researcher/…`), the page shows its
/// Approve button, and a click resumes the sub-agent there and then the top agent's answer.
#[tokio::test]
async fn a_sub_agents_held_call_is_approved_in_the_panel_and_both_agents_go_on() {
    let _one = BROWSER_LOCK.lock().await;
    // The sub-agent has a model of its own: asked, it deletes; after the result it says so.
    let inner = testkit::ScriptedServer::start().await;
    inner.respond_with(common::delete_responder);
    let mut cfg = toolwright_model_gateway::OpenAiConfig::new("scripted");
    cfg.base_url = inner.base_url();
    let researcher = toolwright_tool_system::Agent::builder(
        toolwright_model_gateway::OpenAiModel::new(cfg).unwrap(),
    )
    .tool(toolwright_tool_system::FnTool::new(
        "delete_file",
        "Delete a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args, _| async move { Ok(json!({"deleted": args["path"]})) },
    ))
    .require_approval("delete_file")
    .build()
    .unwrap();
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        |body: &Value| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let last = messages.last().cloned().unwrap_or(Value::Null);
            if last["role"] == "tool" {
                testkit::Reply::text("The researcher tidied up.")
            } else {
                testkit::Reply::tool_call("c1", "researcher", r#"{"input": "delete my notes"}"#)
            }
        },
        move |b| {
            b.tool(researcher.as_tool("researcher", "Tidies up files"))
                .approval_key(toolwright_tool_system::ApprovalKey::new([42u8; 32]).unwrap())
        },
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("tidy up my notes").await;
    b.wait_until(
        "the sub-agent's approval box",
        "document.querySelectorAll('.entry-approval button.approve').length === 1",
    )
    .await;
    b.idle().await;
    let sid = b.session_id().await;
    let base = fx.url().trim_end_matches('/').to_owned();
    let state = common::session_state(&base, &sid).await;
    let call = state["pending"]["calls"][0].clone();
    assert_eq!(call["name"], "delete_file", "{state}");
    assert!(
        call["id"]
            .as_str()
            .unwrap_or_default()
            .starts_with("researcher/"),
        "the held call is listed by its path: {state}"
    );
    let shown = b
        .js("return document.querySelector('.entry-approval').textContent;")
        .await;
    assert!(shown.as_str().unwrap().contains("delete_file"), "{shown}");
    let top_calls = fx.model.request_count();

    b.click(".entry-approval button.approve").await;
    b.wait_for_text(".entry-assistant .text", "The researcher tidied up.", false)
        .await;
    // The sub-agent went on from its held call (asked once more, after the deletion), then
    // the top agent (asked once more, after the sub-agent's answer).
    assert_eq!(inner.request_count(), 2);
    let last_inner = inner.requests().last().unwrap().body.to_string();
    assert!(last_inner.contains("deleted"), "{last_inner}");
    assert_eq!(fx.model.request_count(), top_calls + 1);
    b.close().await;
}

/// MCP elicitation in the panel: server-everything's `trigger-elicitation-request`, called by the
/// agent during a turn, asks the person; the page shows a form of the schema's fields (buttons
/// for the booleans and enums), the person fills in a name and accepts, and the server gets it
/// (it echoes the answer in the tool's result). A second answer to the same question is a 404.
#[tokio::test]
async fn elicitation_form_in_the_panel_answers_server_everything() {
    let _one = BROWSER_LOCK.lock().await;
    let entry = testkit::npm_mcp_server("server-everything").unwrap();
    let bridge = toolwright_mcp_bridge::McpBridge::new();
    bridge
        .register(
            toolwright_mcp_bridge::ServiceConfig::new("everything", "node")
                .with_args([entry.to_string_lossy().into_owned(), "stdio".into()])
                .with_call_timeout(Duration::from_secs(60))
                .with_startup_timeout(Duration::from_secs(30)),
        )
        .unwrap();
    bridge.start("everything").await.unwrap();
    let provider = std::sync::Arc::new(bridge.clone());
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        |body: &Value| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let last = messages.last().cloned().unwrap_or(Value::Null);
            if last["role"] == "tool" {
                testkit::Reply::text("Thanks for answering.")
            } else {
                testkit::Reply::tool_call("e1", "everything__trigger-elicitation-request", "{}")
            }
        },
        move |b| b.provider(provider),
    )
    .await;
    bridge.set_elicitor(
        std::sync::Arc::new(fx.panel_elicitor.clone()),
        Duration::from_secs(60),
    );
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("ask me something").await;
    b.wait_until(
        "the question form",
        "document.querySelectorAll('.entry-elicitation input[name=name]').length === 1",
    )
    .await;
    let form = b
        .js("const f = document.querySelector('.entry-elicitation');
             return [f.textContent, f.querySelectorAll('[data-field=check] button').length,
                     f.querySelectorAll('[data-field=untitledSingleSelectEnum] button').length];")
        .await;
    assert!(
        form[0].as_str().unwrap().contains("Please provide inputs"),
        "{form}"
    );
    assert_eq!(form[1], json!(2), "a boolean is two buttons: {form}");
    assert!(form[2].as_u64().unwrap() >= 2, "an enum is buttons: {form}");
    let name = b
        .client
        .find(Locator::Css(".entry-elicitation input[name=name]"))
        .await
        .unwrap();
    name.send_keys("Ada Lovelace").await.unwrap();
    b.click(".entry-elicitation button.accept").await;
    b.wait_for_text(".entry-assistant .text", "Thanks for answering.", false)
        .await;
    let tool = b
        .js("const t = document.querySelector('.entry-tool'); return t ? t.textContent : null;")
        .await;
    assert!(tool.as_str().unwrap().contains("Ada Lovelace"), "{tool}");
    // The question was answered once: answering again is refused.
    let sid = b.session_id().await;
    let res = reqwest::Client::new()
        .post(format!(
            "{}/api/sessions/{}/elicitations/1",
            fx.url().trim_end_matches('/'),
            sid
        ))
        .json(&json!({"action": "decline"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
    b.close().await;
    bridge.stop("everything").await.unwrap();
}

/// An MCP tool's progress in the panel: server-everything's `trigger-long-running-operation`,
/// called by the agent during a turn, reports each step; the page shows the running tool with a
/// bar and "N of 3" while the answer runs, and takes it away when the answer is done.
#[tokio::test]
async fn a_running_mcp_tools_progress_shows_under_the_answer_until_it_ends() {
    let _one = BROWSER_LOCK.lock().await;
    let entry = testkit::npm_mcp_server("server-everything").unwrap();
    let bridge = toolwright_mcp_bridge::McpBridge::new();
    bridge
        .register(
            toolwright_mcp_bridge::ServiceConfig::new("everything", "node")
                .with_args([entry.to_string_lossy().into_owned(), "stdio".into()])
                .with_call_timeout(Duration::from_secs(60))
                .with_startup_timeout(Duration::from_secs(30)),
        )
        .unwrap();
    bridge.start("everything").await.unwrap();
    let provider = std::sync::Arc::new(bridge.clone());
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        |body: &Value| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let last = messages.last().cloned().unwrap_or(Value::Null);
            if last["role"] == "tool" {
                testkit::Reply::text("The long job is done.")
            } else {
                testkit::Reply::tool_call(
                    "p1",
                    "everything__trigger-long-running-operation",
                    r#"{"duration": 6, "steps": 3}"#,
                )
            }
        },
        move |b| b.provider(provider),
    )
    .await;
    fx.chat.show_progress(&bridge);
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("run the long job").await;
    b.wait_until(
        "the tool's progress",
        "(() => { const p = document.querySelector('.entry-progress'); \
          return !!p && / of 3/.test(p.textContent); })()",
    )
    .await;
    let shown = b
        .js("const p = document.querySelector('.entry-progress');
             return [p.textContent, p.querySelector('progress').max];")
        .await;
    assert!(
        shown[0]
            .as_str()
            .unwrap()
            .contains("Running trigger-long-running-operation (everything)"),
        "{shown}"
    );
    assert_eq!(shown[1], json!(3), "{shown}");
    b.wait_for_text(".entry-assistant .text", "The long job is done.", false)
        .await;
    b.wait_until(
        "the progress taken away",
        "document.querySelectorAll('.entry-progress').length === 0",
    )
    .await;
    b.close().await;
    bridge.stop("everything").await.unwrap();
}

/// The URLs a hostile MCP server puts in URL-mode questions, and one honest one.
const ELICITATION_URLS: [&str; 4] = [
    "javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    " JaVaScRiPt:alert(1)",
    "https://example.com/consent",
];

/// Hostile elicitation URLs in the panel: URL-mode questions (asked by an in-process tool of the agent
/// through the panel's own elicitor, for the running session) whose URL is `javascript:`,
/// `data:` or a spaced, mixed-case `javascript:` are shown as text — no `<a>`, no attribute
/// holding them, nothing run even when the text is clicked — and only the `https:` one is a
/// link, to exactly that address. The server decides first (`url_may_be_link`, sent as
/// `link`), the page checks again with `new URL`.
#[tokio::test]
async fn elicitation_url_in_the_panel_is_a_link_only_for_https() {
    use std::sync::{Arc, OnceLock};

    use toolwright_mcp_bridge::elicitation::{ElicitationMode, ElicitationRequest, Elicitor};

    let _one = BROWSER_LOCK.lock().await;
    let slot: Arc<OnceLock<toolwright_chat_panel::PanelElicitor>> = Arc::default();
    let for_tool = slot.clone();
    // Asks the four questions at once, for the session of the call, and reports the answers.
    let tool = toolwright_tool_system::FnTool::new(
        "open_pages",
        "Asks the person to open pages",
        json!({"type": "object", "properties": {}}),
        move |_args, ctx: toolwright_core::ToolContext| {
            let slot = for_tool.clone();
            async move {
                let elicitor = slot
                    .get()
                    .cloned()
                    .ok_or_else(|| toolwright_core::ToolError::failed("no elicitor yet"))?;
                let asks = ELICITATION_URLS.iter().enumerate().map(|(i, url)| {
                    let request = ElicitationRequest::new(
                        "hostile",
                        ctx.session_id.clone(),
                        format!("Question {i}"),
                        ElicitationMode::Url {
                            url: (*url).to_owned(),
                        },
                    );
                    let elicitor = elicitor.clone();
                    async move { elicitor.elicit(request).await }
                });
                let answers = futures::future::join_all(asks).await;
                Ok(json!(format!("{answers:?}")))
            }
        },
    )
    .with_timeout(Duration::from_secs(120));
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        |body: &Value| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let last = messages.last().cloned().unwrap_or(Value::Null);
            if last["role"] == "tool" {
                testkit::Reply::text("Thanks.")
            } else {
                testkit::Reply::tool_call("u1", "open_pages", "{}")
            }
        },
        move |b| b.tool(tool),
    )
    .await;
    slot.set(fx.panel_elicitor.clone()).unwrap();
    let b = Browser::start().await;
    b.open(&fx).await;
    // Whatever ran in the page would have to call these (an alert in a new tab would not; the
    // WebDriver alert check and the window count below see that).
    let _ = b
        .js("window.__alerts = 0; window.alert = () => { window.__alerts++; }; return 1;")
        .await;
    b.type_and_send("open the pages").await;
    b.wait_until(
        "the four questions",
        "document.querySelectorAll('.entry-elicitation').length === 4",
    )
    .await;
    let shown = b
        .js(
            "return Array.from(document.querySelectorAll('.entry-elicitation')).map(q => [
               q.querySelector('.text').textContent,
               Array.from(q.querySelectorAll('a')).map(a => a.getAttribute('href')),
               Array.from(q.querySelectorAll('.url-text')).map(e => e.textContent)]);",
        )
        .await;
    let shown = shown.as_array().unwrap();
    assert_eq!(shown.len(), 4, "{shown:?}");
    for (i, url) in ELICITATION_URLS.iter().enumerate() {
        let q = shown
            .iter()
            .find(|q| q[0] == json!(format!("Question {i}")))
            .unwrap_or_else(|| panic!("question {i} is shown: {shown:?}"));
        if url.starts_with("https:") {
            assert_eq!(q[1], json!([url]), "the https URL is a link to it: {q}");
            assert_eq!(q[2], json!([]), "{q}");
        } else {
            assert_eq!(q[1], json!([]), "{url:?} is no link: {q}");
            assert_eq!(
                q[2],
                json!([url]),
                "{url:?} is shown as text, as it is: {q}"
            );
        }
    }
    // No attribute anywhere holds a script URL, and there is one link in all.
    let attrs = b
        .js("return Array.from(document.querySelectorAll('*'))
               .flatMap(e => Array.from(e.attributes).map(a => a.value))
               .filter(v => /javascript:|data:|alert/i.test(v.replace(/[\\s\\u0000-\\u001f]/g, '')));")
        .await;
    assert_eq!(attrs, json!([]), "attributes holding a hostile URL");
    assert_eq!(
        b.js("return document.querySelectorAll('a').length;").await,
        json!(1)
    );
    // Clicking the text of the hostile ones runs nothing.
    let texts = b
        .client
        .find_all(Locator::Css(".entry-elicitation .url-text"))
        .await
        .unwrap();
    assert_eq!(texts.len(), 3);
    for t in texts {
        t.click().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        b.client.get_alert_text().await.is_err(),
        "no alert may be open"
    );
    assert_eq!(b.js("return window.__alerts;").await, json!(0));
    assert_eq!(b.client.windows().await.unwrap().len(), 1, "no tab opened");
    // The person declines all four: the tool ends and the turn with it.
    for _ in 0..4 {
        b.click(".entry-elicitation button.decline:not(:disabled)")
            .await;
    }
    b.wait_for_text(".entry-assistant .text", "Thanks.", false)
        .await;
    let sent = fx.model.requests().last().unwrap().body.to_string();
    assert!(
        sent.contains("[Decline, Decline, Decline, Decline]"),
        "the tool got the four answers: {sent}"
    );
    b.close().await;
}

/// Runs `fetch(path, init)` in the page (its own origin, its own cookie); `[status, body]`.
async fn page_fetch(b: &Browser, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let v = b
        .client
        .execute(
            "const [method, path, body] = arguments;
             const ctl = new AbortController();
             const init = { method, signal: ctl.signal };
             if (body !== null) {
               init.headers = { 'content-type': 'application/json' };
               init.body = JSON.stringify(body);
             }
             return fetch(path, init).then(async r => {
               // a stream that was let through would never end: read only what is not one
               const text = r.headers.get('content-type') === 'text/event-stream'
                 ? '(an event stream)' : await r.text();
               ctl.abort();
               return [r.status, text];
             });",
            vec![json!(method), json!(path), body.unwrap_or(Value::Null)],
        )
        .await
        .unwrap();
    (
        u16::try_from(v[0].as_u64().unwrap()).unwrap(),
        v[1].as_str().unwrap().to_owned(),
    )
}

/// Identity in a real browser: two people sign in at the test's OpenID provider, each in
/// a browser of their own (own profile, own cookies). Alice starts a conversation and the agent
/// asks her to approve a call; Bob, in his page, tries every endpoint of her conversation —
/// reading it, following its events, writing in it, approving with her token, answering a
/// question in it — and gets 404 each time, learning nothing; alice approves in her page and
/// the recorded decision names her.
#[tokio::test]
async fn browser_a_and_b_each_see_only_their_own_and_the_record_names_a() {
    let _one = BROWSER_LOCK.lock().await;
    let op = oidc::Provider::start().await;
    let fx = oidc::panel_with_login(&op).await;
    let base = fx.url();

    // alice: the page sends her to /login, the provider, /callback, and back to the page
    op.sign_in_as("alice");
    let a = Browser::start().await;
    a.open_signed_in(&base).await;
    // a fresh page's id was never given out: nothing to show, and no error either
    assert_eq!(
        a.js("return document.querySelectorAll('.entry').length;")
            .await,
        json!(0)
    );
    a.type_and_send("please delete my notes").await;
    a.wait_until(
        "alice's approval box",
        "document.querySelectorAll('.entry-approval button.approve').length === 1",
    )
    .await;
    a.idle().await;
    let sid = a.session_id().await;
    let (s, mine) = page_fetch(&a, "GET", &format!("/api/sessions/{sid}"), None).await;
    assert_eq!(s, 200, "{mine}");
    let mine: Value = serde_json::from_str(&mine).unwrap();
    let call = mine["pending"]["calls"][0].clone();
    assert_eq!(call["name"], "delete_file", "{mine}");
    let token = call["token"].as_str().unwrap().to_owned();
    let approve = json!({"decisions": [{"call_id": call["id"], "token": token, "approved": true}]});
    // the elicitation endpoint, checked by alice: her conversation has no question waiting
    let question = format!("/api/sessions/{sid}/elicitations/1");
    let (s, not_waiting) =
        page_fetch(&a, "POST", &question, Some(json!({"action": "decline"}))).await;
    assert_eq!(s, 404, "{not_waiting}");
    assert!(not_waiting.contains("no such question"), "{not_waiting}");

    // bob, in a browser of his own
    op.sign_in_as("bob");
    let b = Browser::start().await;
    b.open_signed_in(&base).await;
    b.type_and_send("hello").await;
    b.wait_until(
        "bob's approval box",
        "document.querySelectorAll('.entry-approval button.approve').length === 1",
    )
    .await;
    b.idle().await;
    let his = b.session_id().await;
    assert_ne!(his, sid);
    let shown = b
        .js("return document.getElementById('log').innerText;")
        .await;
    assert!(
        !shown.as_str().unwrap().contains("please delete my notes"),
        "bob's page shows only his conversation: {shown}"
    );
    let conv = format!("/api/sessions/{sid}");
    for (what, method, path, body) in [
        ("read it", "GET", conv.clone(), None),
        ("follow its events", "GET", format!("{conv}/events"), None),
        (
            "write in it",
            "POST",
            format!("{conv}/messages"),
            Some(json!({"text": "delete everything"})),
        ),
        (
            "approve with alice's token",
            "POST",
            format!("{conv}/approvals"),
            Some(approve.clone()),
        ),
        (
            "answer a question in it",
            "POST",
            question.clone(),
            Some(json!({"action": "accept", "content": {}})),
        ),
    ] {
        let (s, text) = page_fetch(&b, method, &path, body).await;
        assert_eq!(s, 404, "bob may not {what}: {text}");
        assert!(
            text.contains("no such conversation")
                && !text.contains(&token)
                && !text.contains("notes")
                && !text.contains("alice"),
            "bob learns nothing when he tries to {what}: {text}"
        );
    }
    // the copied token decides nothing in his own conversation either
    let (_, text) = page_fetch(
        &b,
        "POST",
        &format!("/api/sessions/{his}/approvals"),
        Some(approve),
    )
    .await;
    assert!(!text.contains("\"deleted\""), "{text}");
    let model_calls = fx.model.request_count();

    // alice's call still waits; she approves in her page
    a.open_signed_in(&base).await;
    a.wait_until(
        "alice's approval box after bob's tries",
        "document.querySelectorAll('.entry-approval button.approve').length === 1",
    )
    .await;
    a.click(".entry-approval button.approve").await;
    a.wait_for_text(".entry-assistant .text", "Deleted the file.", false)
        .await;
    a.idle().await;
    assert_eq!(
        fx.model.request_count(),
        model_calls + 1,
        "her call ran once"
    );
    let (s, after) = page_fetch(&a, "GET", &conv, None).await;
    assert_eq!(s, 200, "{after}");
    let after: Value = serde_json::from_str(&after).unwrap();
    let decisions = after["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{after}");
    assert_eq!(decisions[0]["principal"], "alice", "{after}");
    assert_eq!(decisions[0]["tool"], "delete_file");
    assert_eq!(decisions[0]["approved"], true);
    // and it is still hers alone
    let (s, text) = page_fetch(&b, "GET", &conv, None).await;
    assert_eq!(s, 404, "{text}");
    let (s, his_state) = page_fetch(&b, "GET", &format!("/api/sessions/{his}"), None).await;
    assert_eq!(s, 200, "{his_state}");
    let his_state: Value = serde_json::from_str(&his_state).unwrap();
    assert_eq!(his_state["decisions"], json!([]), "{his_state}");
    assert_eq!(his_state["pending"]["calls"][0]["name"], "delete_file");
    b.close().await;
    a.close().await;
}

/// Messages to a person, in the page: a service's message to alice (`person:alice` on the bus) is in her
/// Inbox — the header button — with its quick replies, and her click answers it there; bob's
/// Inbox is his own, without her message, and hers answers him 404.
#[tokio::test]
async fn browser_the_inbox_button_shows_what_was_addressed_to_that_person_only() {
    let _one = BROWSER_LOCK.lock().await;
    let op = oidc::Provider::start().await;
    let fx = oidc::panel_with_login(&op).await;
    let base = fx.url();
    common::invoice_for_alice(&fx.bus).await;

    op.sign_in_as("alice");
    let a = Browser::start().await;
    a.open_signed_in(&base).await;
    a.click("#inbox").await;
    a.wait_for_text(".entry-message .text", "Invoice 42 is ready", false)
        .await;
    assert_eq!(labels(&a.buttons(0).await), ["Pay now", "Later"]);
    let inbox = a.session_id().await;
    assert!(inbox.starts_with("inbox-"), "{inbox}");
    a.click(".entry-message .quick-reply").await;
    a.wait_until(
        "the quick replies answered",
        "Array.from(document.querySelectorAll('.entry-message .quick-reply')).every(b => b.disabled)",
    )
    .await;
    a.idle().await;
    let (s, state) = page_fetch(&a, "GET", &format!("/api/sessions/{inbox}"), None).await;
    assert_eq!(s, 200, "{state}");
    let state: Value = serde_json::from_str(&state).unwrap();
    let asked = state["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["text"] == "Invoice 42 is ready")
        .cloned()
        .unwrap();
    assert_eq!(asked["chosen"], "Pay now", "{asked}");

    op.sign_in_as("bob");
    let b = Browser::start().await;
    b.open_signed_in(&base).await;
    b.click("#inbox").await;
    b.wait_until(
        "bob's inbox",
        "(localStorage.getItem('chatPanelSession') || '').startsWith('inbox-')",
    )
    .await;
    let his = b.session_id().await;
    assert_ne!(his, inbox);
    let shown = b
        .js("return document.getElementById('log').innerText;")
        .await;
    assert!(
        !shown.as_str().unwrap().contains("Invoice 42"),
        "bob's inbox is his: {shown}"
    );
    let (s, text) = page_fetch(&b, "GET", &format!("/api/sessions/{inbox}"), None).await;
    assert_eq!(s, 404, "{text}");
    b.close().await;
    a.close().await;
}

/// Records every Content-Security-Policy violation of a page in `window.__csp`, from before the
/// page's first script runs.
const RECORD_CSP_VIOLATIONS: &str = "window.__csp = [];
document.addEventListener('securitypolicyviolation',
  e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI), true);";

/// The page's Content-Security-Policy allows no inline script or style (`script-src 'self';
/// style-src 'self'`): the page has no `<script>` or `<style>` of its own, no event-handler or
/// `style` attribute, and its script and style come from `/app.js` and `/app.css`. In Chromium
/// the page still does its work — a message, the agent's quick replies, a click on one, the
/// streamed answer, a reload, a new chat — without a single violation reported, and the policy
/// is in force: an inline script put in the page is refused (and reported).
#[tokio::test]
async fn the_page_runs_with_no_inline_script_or_style_allowed_and_no_violation() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = start().await;
    let r = reqwest::get(fx.url()).await.unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(!csp.contains("unsafe-eval"), "{csp}");
    let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
    for d in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
    ] {
        assert!(directives.contains(&d), "{d} in {csp}");
    }
    let html = r.text().await.unwrap();
    assert!(!html.contains("<style"), "{html}");
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script src=\"/app.js\"></script>").count(),
        "no inline script: {html}"
    );
    assert!(html.contains("<link rel=\"stylesheet\" href=\"/app.css\">"));
    assert!(!html.contains(" style="), "{html}");
    for handler in [
        " onclick=",
        " onload=",
        " onsubmit=",
        " onerror=",
        " oninput=",
    ] {
        assert!(!html.contains(handler), "{handler} in {html}");
    }
    for (path, kind) in [("app.js", "text/javascript"), ("app.css", "text/css")] {
        let r = reqwest::get(format!("{}{path}", fx.url())).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}: {h:?}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
    }

    let b = Browser::start().await;
    b.before_every_page(RECORD_CSP_VIOLATIONS).await;
    b.open(&fx).await;
    // the style came from /app.css (the page is a column, the buttons have the accent colour)
    let styled = b
        .js("return [getComputedStyle(document.body).display,
                     getComputedStyle(document.getElementById('send')).backgroundColor];")
        .await;
    assert_eq!(styled, json!(["flex", "rgb(47, 111, 222)"]), "{styled}");
    b.type_and_send("hello").await;
    b.wait_until(
        "the quick replies",
        "document.querySelectorAll('.entry-message .quick-reply').length === 3",
    )
    .await;
    b.idle().await;
    let options = b
        .client
        .find_all(Locator::Css(".entry-message .quick-reply"))
        .await
        .unwrap();
    options[1].click().await.unwrap();
    b.wait_for_text(
        ".entry-assistant .text",
        &format!("You said: {}", OPTIONS[1]),
        false,
    )
    .await;
    b.idle().await;
    let users = b.js("return Array.from(document.querySelectorAll('.entry-user .text')).map(e => e.textContent);").await;
    assert_eq!(users, json!(["hello", OPTIONS[1]]));
    // a reload shows the conversation again, a new chat starts empty
    b.open(&fx).await;
    b.wait_for_text(".entry-user .text", OPTIONS[1], false)
        .await;
    b.click("#new-chat").await;
    b.wait_until(
        "an empty log",
        "document.querySelectorAll('.entry').length === 0",
    )
    .await;
    assert_eq!(
        b.js("return window.__csp;").await,
        json!([]),
        "no violation while the page worked"
    );
    // the policy is in force (and the violations are seen): an inline script is refused
    let _ = b
        .js("const s = document.createElement('script');
             s.textContent = 'window.__inline = 1;';
             document.body.append(s);
             return 1;")
        .await;
    b.wait_until("the violation report", "window.__csp.length > 0")
        .await;
    let seen = b
        .js("return [window.__inline === undefined, window.__csp];")
        .await;
    assert_eq!(
        seen[0],
        json!(true),
        "the inline script did not run: {seen}"
    );
    assert!(
        seen[1][0].as_str().unwrap().starts_with("script-src"),
        "{seen}"
    );
    b.close().await;
}

/// A form question whose schema has `default`s shows them filled in — the text, email, date,
/// integer and number boxes hold theirs, the default of a boolean, an enum (with `enumNames` or
/// without), a titled enum (`oneOf`) and the defaults of the multi-selects (`items.enum`,
/// `items.anyOf`) are the chosen buttons, marked so (`aria-pressed`, and another colour) — and
/// Accept without a change sends exactly those values; a field without a default is left out.
#[tokio::test]
async fn an_elicitation_forms_defaults_are_shown_filled_in_and_sent_as_shown() {
    use std::sync::{Arc, OnceLock};

    use toolwright_mcp_bridge::elicitation::{ElicitationMode, ElicitationRequest, Elicitor};

    let _one = BROWSER_LOCK.lock().await;
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "title": "Name", "default": "Ada"},
        "email": {"type": "string", "format": "email", "default": "ada@example.com"},
        "day": {"type": "string", "format": "date", "default": "2024-05-01"},
        "count": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
        "ratio": {"type": "number", "default": 0.5},
        "agree": {"type": "boolean", "default": true},
        "color": {"type": "string", "enum": ["red", "green", "blue"], "default": "green"},
        "pet": {"type": "string", "enum": ["p1", "p2"], "enumNames": ["Cat", "Dog"], "default": "p2"},
        "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"},
                                             {"const": "h2", "title": "Wonder Woman"}],
                 "default": "h2"},
        "tools": {"type": "array", "items": {"type": "string", "enum": ["saw", "drill", "plane"]},
                  "default": ["saw", "plane"]},
        "fish": {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"},
                                                      {"const": "f2", "title": "Trout"}]},
                 "default": ["f2"]},
        "note": {"type": "string", "title": "Anything else"}
    }});
    let defaults = json!({"name": "Ada", "email": "ada@example.com", "day": "2024-05-01",
        "count": 3, "ratio": 0.5, "agree": true, "color": "green", "pet": "p2", "hero": "h2",
        "tools": ["saw", "plane"], "fish": ["f2"]});
    let slot: Arc<OnceLock<toolwright_chat_panel::PanelElicitor>> = Arc::default();
    let for_tool = slot.clone();
    let asked = schema.clone();
    let tool = toolwright_tool_system::FnTool::new(
        "ask_preferences",
        "Asks the person for their preferences",
        json!({"type": "object", "properties": {}}),
        move |_args, ctx: toolwright_core::ToolContext| {
            let (slot, schema) = (for_tool.clone(), asked.clone());
            async move {
                let elicitor = slot
                    .get()
                    .cloned()
                    .ok_or_else(|| toolwright_core::ToolError::failed("no elicitor yet"))?;
                let request = ElicitationRequest::new(
                    "settings",
                    ctx.session_id.clone(),
                    "Your preferences?",
                    ElicitationMode::Form { schema },
                );
                Ok(json!(format!("{:?}", elicitor.elicit(request).await)))
            }
        },
    )
    .with_timeout(Duration::from_secs(120));
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        |body: &Value| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            if messages.last().is_some_and(|m| m["role"] == "tool") {
                testkit::Reply::text("Thanks.")
            } else {
                testkit::Reply::tool_call("p1", "ask_preferences", "{}")
            }
        },
        move |b| b.tool(tool),
    )
    .await;
    slot.set(fx.panel_elicitor.clone()).unwrap();
    let b = Browser::start().await;
    b.before_every_page(RECORD_CSP_VIOLATIONS).await;
    b.open(&fx).await;
    b.type_and_send("set me up").await;
    b.wait_until(
        "the question form",
        "document.querySelectorAll('.entry-elicitation input[name=name]').length === 1",
    )
    .await;
    let boxes = b
        .js("const f = document.querySelector('.entry-elicitation');
             return Object.fromEntries(Array.from(f.querySelectorAll('input'))
               .map(i => [i.name, [i.type, i.value]]));")
        .await;
    assert_eq!(
        boxes,
        json!({"name": ["text", "Ada"], "email": ["email", "ada@example.com"],
               "day": ["date", "2024-05-01"], "count": ["number", "3"],
               "ratio": ["number", "0.5"], "note": ["text", ""]}),
        "{boxes}"
    );
    let chosen = b
        .js("const f = document.querySelector('.entry-elicitation');
             return Object.fromEntries(Array.from(f.querySelectorAll('[data-field]')).map(row => [
               row.dataset.field,
               Array.from(row.querySelectorAll('button.chosen')).map(b => b.textContent)]));")
        .await;
    assert_eq!(
        chosen,
        json!({"agree": ["Yes"], "color": ["green"], "pet": ["Dog"], "hero": ["Wonder Woman"],
               "tools": ["saw", "plane"], "fish": ["Trout"]}),
        "{chosen}"
    );
    // marked for everyone: pressed, and another colour than the choices not made
    let marked = b
        .js("const row = document.querySelector('.entry-elicitation [data-field=color]');
             const [red, green] = row.querySelectorAll('button');
             return [red.getAttribute('aria-pressed'), green.getAttribute('aria-pressed'),
                     getComputedStyle(red).backgroundColor !== getComputedStyle(green).backgroundColor];")
        .await;
    assert_eq!(marked, json!(["false", "true", true]), "{marked}");
    b.click(".entry-elicitation button.accept").await;
    b.wait_for_text(".entry-assistant .text", "Thanks.", false)
        .await;
    b.idle().await;
    // what the person was shown is what was answered, and recorded
    let sid = b.session_id().await;
    let state = common::session_state(fx.url().trim_end_matches('/'), &sid).await;
    let answer = state["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "answer")
        .cloned()
        .unwrap_or_else(|| panic!("the answer is recorded: {state}"));
    assert_eq!(answer["action"], "accept", "{answer}");
    assert_eq!(answer["content"], defaults, "{answer}");
    let sent = fx.model.requests().last().unwrap().body.to_string();
    assert!(sent.contains("Accept("), "the tool got the answer: {sent}");
    assert_eq!(b.js("return window.__csp;").await, json!([]));
    b.close().await;
}

/// A picture `bytes` saved as `name` in a fresh directory, for the page's file picker.
fn picture_file(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

/// `[naturalWidth, naturalHeight, src]` of each picture loaded in entries matching `css`.
async fn loaded_pictures(b: &Browser, css: &str) -> Value {
    b.js(&format!(
        "return Array.from(document.querySelectorAll({css:?} + ' .images img'))
           .map(i => [i.complete ? i.naturalWidth : 0, i.complete ? i.naturalHeight : 0, i.getAttribute('src')]);"
    ))
    .await
}

#[tokio::test]
async fn a_tools_picture_shows_in_the_conversation_and_after_a_reload() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        common::with_chart_tool,
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("draw the chart").await;
    b.wait_for_text(".entry-assistant .text", "Here is the chart.", false)
        .await;
    b.idle().await;
    let loaded = "Array.from(document.querySelectorAll('.entry-tool .images img')).some(i => i.complete && i.naturalWidth === 96)";
    b.wait_until("the tool's picture, decoded", loaded).await;
    let shown = loaded_pictures(&b, ".entry-tool").await;
    let sid = b.session_id().await;
    let src = shown[0][2].as_str().unwrap().to_owned();
    assert_eq!(shown[0][1], json!(64), "{shown}");
    assert!(
        src.starts_with(&format!("/api/sessions/{sid}/media/")),
        "served by the panel, not inline: {src}"
    );
    // the model was given the picture with the tool's result
    let sent = fx.model.requests().last().unwrap().body.clone();
    let images: Vec<String> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(common::wire_images)
        .collect();
    assert_eq!(images.len(), 1, "{sent}");
    assert!(images[0].starts_with("data:image/png;base64,"));
    // the endpoint serves the very bytes, as a PNG that is never sniffed or kept
    let r = reqwest::get(format!("{}{}", fx.url().trim_end_matches('/'), src))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "image/png");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["content-disposition"], "inline");
    assert_eq!(h["cache-control"], "no-store");
    assert_eq!(&r.bytes().await.unwrap()[..], common::CHART_PNG);
    // a reload shows it again, from the store
    b.open(&fx).await;
    b.wait_until("the tool's picture after a reload", loaded)
        .await;
    b.close().await;
}

/// server-everything (npm, over stdio through the bridge) returns its tiny PNG; the page shows
/// it with the tool's result, and the screenshot goes to the docs.
#[tokio::test]
async fn a_real_mcp_servers_picture_shows_in_the_conversation() {
    let _one = BROWSER_LOCK.lock().await;
    let entry = testkit::npm_mcp_server("server-everything").unwrap_or_else(|e| panic!("{e}"));
    let bridge = toolwright_mcp_bridge::McpBridge::new();
    bridge
        .register(
            toolwright_mcp_bridge::ServiceConfig::new("everything", "node")
                .with_args([entry.to_string_lossy().into_owned(), "stdio".into()])
                .with_startup_timeout(Duration::from_secs(30)),
        )
        .unwrap();
    bridge.start("everything").await.unwrap();
    let provider = std::sync::Arc::new(bridge.clone());
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        move |b| b.provider(provider),
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("call everything__get-tiny-image").await;
    b.wait_for_text(".entry-assistant .text", "Here is the chart.", false)
        .await;
    b.idle().await;
    let loaded = "Array.from(document.querySelectorAll('.entry-tool .images img')).some(i => i.complete && i.naturalWidth === 20)";
    b.wait_until("server-everything's picture, decoded", loaded)
        .await;
    let shown = loaded_pictures(&b, ".entry-tool").await;
    assert_eq!(shown[0][1], json!(20), "{shown}");
    let png = b.client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let out = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../docs/images/panel-mcp-picture.png");
    std::fs::write(&out, &png).unwrap();
    b.close().await;
    bridge.stop("everything").await.unwrap();
}

#[tokio::test]
async fn an_attached_picture_reaches_the_model_as_an_image_part_and_shows() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    let (_dir, path) = picture_file("checks.png", common::CHECKS_PNG);
    b.attach(&path).await;
    b.wait_until(
        "the attached picture's name",
        "document.getElementById('attached').textContent.startsWith('checks.png')",
    )
    .await;
    b.type_and_send("What is in this picture?").await;
    b.wait_for_text(".entry-assistant .text", "I see a picture.", false)
        .await;
    b.idle().await;
    // on the wire: the person's text, then the picture as an image part with its bytes
    let sent = fx.model.requests().last().unwrap().body.clone();
    let user = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap()
        .clone();
    assert_eq!(common::wire_text(&user), "What is in this picture?");
    let want = {
        use base64::Engine as _;
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(common::CHECKS_PNG)
        )
    };
    assert_eq!(common::wire_images(&user), [want], "{user}");
    // in the conversation: the person's text and picture, and the attachment is cleared
    b.wait_until(
        "the person's picture, decoded",
        "Array.from(document.querySelectorAll('.entry-user .images img')).some(i => i.complete && i.naturalWidth === 24)",
    )
    .await;
    let user_text = b
        .js("return document.querySelector('.entry-user .text').textContent;")
        .await;
    assert_eq!(user_text, json!("What is in this picture?"));
    assert_eq!(
        b.js("return document.getElementById('attached').hidden;")
            .await,
        json!(true)
    );
    // the next message goes without it
    b.type_and_send("thanks").await;
    b.wait_for_text(".entry-assistant .text", "You said: thanks", false)
        .await;
    let last = fx.model.requests().last().unwrap().body.clone();
    let last_user = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap()
        .clone();
    assert!(common::wire_images(&last_user).is_empty(), "{last_user}");
    b.close().await;
}

#[tokio::test]
async fn a_lying_or_oversized_picture_is_refused_with_a_message_and_nothing_runs() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default().with_max_image_bytes(2048),
        common::picture_responder,
        |b| b,
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    // a PNG named .jpg: the browser calls it image/jpeg; the server finds it is not
    let (_d1, lying) = picture_file("holiday.jpg", common::CHECKS_PNG);
    b.attach(&lying).await;
    b.wait_until(
        "the attached picture's name",
        "document.getElementById('attached').textContent.startsWith('holiday.jpg')",
    )
    .await;
    b.type_and_send("look at this").await;
    b.idle().await;
    b.wait_until(
        "the refusal",
        "Array.from(document.querySelectorAll('.entry-error .text')).some(e => e.textContent.includes('look like image/png'))",
    )
    .await;
    let said = b
        .js("return Array.from(document.querySelectorAll('.entry-error .text')).map(e => e.textContent);")
        .await;
    assert!(
        said[0].as_str().unwrap().contains("holiday.jpg")
            && said[0].as_str().unwrap().contains("not a image/jpeg"),
        "{said}"
    );
    assert_eq!(fx.model.request_count(), 0, "nothing reached the model");
    assert_eq!(
        b.js("return document.getElementById('input').value;").await,
        json!("look at this"),
        "the text comes back, to send with another picture"
    );
    b.js("document.getElementById('input').value = ''; return 1;")
        .await;
    // too large: refused in the page before it is sent
    let mut big = common::CHECKS_PNG.to_vec();
    big.resize(3000, 0);
    let (_d2, oversized) = picture_file("big.png", &big);
    b.attach(&oversized).await;
    b.wait_until(
        "the size refusal",
        "Array.from(document.querySelectorAll('.entry-error .text')).some(e => e.textContent.includes('at most 2 KiB'))",
    )
    .await;
    assert_eq!(
        b.js("return document.getElementById('attached').hidden;")
            .await,
        json!(true),
        "nothing stays attached"
    );
    // the conversation goes on
    b.type_and_send("hello").await;
    b.wait_for_text(".entry-assistant .text", "You said: hello", false)
        .await;
    // and the server refuses what a page did not check, with the same kind of sentence
    let sid = b.session_id().await;
    let url = format!("{}api/sessions/{sid}/messages", fx.url());
    let png = |bytes: &[u8], ty: &str| {
        use base64::Engine as _;
        json!({"text": "see", "images": [{"mediaType": ty, "name": "x",
            "data": base64::engine::general_purpose::STANDARD.encode(bytes)}]})
    };
    let before = fx.model.request_count();
    for (what, body, status, says) in [
        ("too large", png(&big, "image/png"), 413, "at most 2 KiB"),
        (
            "a lying type",
            png(common::CHECKS_PNG, "image/gif"),
            415,
            "not a image/gif",
        ),
        (
            "SVG",
            png(
                b"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>",
                "image/svg+xml",
            ),
            415,
            "does not take \"image/svg+xml\"",
        ),
    ] {
        let (s, text) = common::send(reqwest::Client::new().post(&url), Some(body)).await;
        assert_eq!(s, status, "{what}: {text}");
        let said: Value = serde_json::from_str(&text).unwrap();
        assert!(
            said["error"].as_str().unwrap().contains(says),
            "{what}: {text}"
        );
    }
    assert_eq!(
        fx.model.request_count(),
        before,
        "nothing reached the model"
    );
    b.close().await;
}

#[tokio::test]
async fn a_model_that_cannot_see_pictures_says_so_and_the_conversation_goes_on() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = common::start_text_only(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    let (_dir, path) = picture_file("checks.png", common::CHECKS_PNG);
    b.attach(&path).await;
    b.wait_until(
        "the attached picture's name",
        "document.getElementById('attached').textContent.startsWith('checks.png')",
    )
    .await;
    b.type_and_send("what is this?").await;
    b.wait_until(
        "the plain refusal",
        "Array.from(document.querySelectorAll('.entry-error .text, .entry-assistant .text')).some(e => e.textContent.startsWith('The assistant cannot look at pictures.'))",
    )
    .await;
    b.idle().await;
    assert_eq!(fx.model.request_count(), 0, "refused before generating");
    // the next message is answered: the earlier picture goes to the model as a line of text
    b.type_and_send("then just say hello").await;
    b.wait_for_text(
        ".entry-assistant .text",
        "You said: then just say hello",
        false,
    )
    .await;
    let sent = fx.model.requests().last().unwrap().body.to_string();
    assert!(
        sent.contains("[image image/png \\\"checks.png\\\""),
        "the earlier picture is named: {sent}"
    );
    assert!(!sent.contains("data:image/png"), "{sent}");
    // a reload shows the picture, the refusal and the answer
    b.open(&fx).await;
    b.wait_until(
        "the person's picture after a reload",
        "Array.from(document.querySelectorAll('.entry-user .images img')).some(i => i.complete && i.naturalWidth === 24)",
    )
    .await;
    b.close().await;
}

/// Waits until the page shows the answer's reasoning folded above its text, and its cost.
async fn reasoning_and_cost_shown(b: &Browser) {
    b.wait_until(
        "the folded reasoning",
        "(() => { const d = document.querySelector('.entry-assistant details.reasoning');
           return !!d && !d.open && d.querySelector('.reasoning-text').textContent === '2 and 2 make 4.'
             && d.compareDocumentPosition(d.parentElement.querySelector('.text')) === Node.DOCUMENT_POSITION_FOLLOWING; })()",
    )
    .await;
    b.wait_until(
        "the run summary",
        "Array.from(document.querySelectorAll('.entry-assistant .run')).some(e => e.textContent === '1,200 tokens in (1,000 cached) · 80 out (30 reasoning) · $0.0017')",
    )
    .await;
}

/// A streamed answer as a reasoning model's compatible server sends it: its reasoning
/// (`reasoning_content`), then `text`, then usage with cached and reasoning tokens.
fn thinking_answer(reasoning: &str, text: &str) -> testkit::Reply {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "r1", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let usage = json!({"id": "r1", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
        "choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280,
        "prompt_tokens_details": {"cached_tokens": 1000},
        "completion_tokens_details": {"reasoning_tokens": 30}}});
    let events = [
        chunk(
            json!({"role": "assistant", "reasoning_content": reasoning}),
            Value::Null,
        ),
        chunk(json!({"content": text}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage,
    ];
    let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    testkit::Reply::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body,
    }
}

#[tokio::test]
async fn reasoning_shows_folded_above_the_answer_and_each_answer_its_cost() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        |_: &Value| thinking_answer("2 and 2 make 4.", "The answer is 4."),
        // $2 a million tokens in, $0.50 cached, $10 out: 200×2 + 1000×0.5 + 80×10 = $0.0017
        |b| {
            b.prices(toolwright_core::PriceTable::builtin().clone().with(
                "scripted",
                toolwright_core::Price::new(2.0, 10.0).with_cached_input(0.5),
            ))
        },
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("what is 2 + 2?").await;
    b.wait_for_text(".entry-assistant .text", "The answer is 4.", false)
        .await;
    b.idle().await;
    reasoning_and_cost_shown(&b).await;
    // a reload shows both, from the store
    b.open(&fx).await;
    reasoning_and_cost_shown(&b).await;
    b.close().await;
}
