//! The panel over real HTTP, without a browser: the message flow (Q10–Q15 on the server side),
//! bad input, a client that disconnects mid-stream, and 200 concurrent SSE clients.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::{OPTIONS, sse_events, start, start_with};
use serde_json::{Value, json};
use testkit::Reply;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolwright_chat_panel::PanelConfig;

const SID: &str = "test-session-0001";

async fn post(client: &reqwest::Client, base: &str, sid: &str, body: Value) -> (u16, String) {
    let r = client
        .post(format!("{base}api/sessions/{sid}/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

fn entries_of(state: &Value, kind: &str) -> Vec<Value> {
    state["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

#[tokio::test]
async fn q10_q12_q13_q15_message_flow_over_http() {
    let fx = start().await;
    let c = reqwest::Client::new();
    let base = fx.url();

    // first message: the agent calls send_message with quick replies; all of it streams back
    let (status, body) = post(&c, &base, SID, json!({"text": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    let events = sse_events(&body);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.first(), Some(&"entry"));
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let tool = events
        .iter()
        .find(|(e, d)| e == "update" && d["kind"] == "tool")
        .expect("tool result update");
    assert_eq!(tool.1["tool"]["name"], "send_message");
    assert_eq!(tool.1["tool"]["isError"], false);
    let msg = events
        .iter()
        .find(|(e, d)| e == "entry" && d["kind"] == "message")
        .expect("bus message entry");
    assert_eq!(msg.1["quickReplies"], json!(OPTIONS), "Q11: order kept");
    assert!(
        events.iter().any(|(e, _)| e == "delta"),
        "the answer streams as deltas"
    );

    // the state has the message with unanswered quick replies
    let s = common::session_state(&base, SID).await;
    let m = &entries_of(&s, "message")[0];
    assert_eq!(m["quickReplies"], json!(OPTIONS));
    assert_eq!(m["answered"], false);
    let mid = m["id"].as_u64().unwrap();

    // Q12/Q13: a click sends the option as the reply and answers that message
    let (status, body) = post(
        &c,
        &base,
        SID,
        json!({"text": OPTIONS[1], "inReplyTo": mid}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let ev = sse_events(&body);
    assert!(
        ev.iter()
            .any(|(e, d)| e == "update" && d["id"] == mid && d["answered"] == true)
    );
    let s = common::session_state(&base, SID).await;
    let m = entries_of(&s, "message")
        .into_iter()
        .find(|e| e["id"] == mid)
        .unwrap();
    assert_eq!(
        (m["answered"].clone(), m["chosen"].clone()),
        (json!(true), json!(OPTIONS[1]))
    );
    let users = entries_of(&s, "user");
    assert_eq!(users.last().unwrap()["text"], OPTIONS[1]);
    // the model got the clicked text as the user's reply
    let last_req = fx.model.requests().last().unwrap().body.clone();
    assert!(last_req.to_string().contains(OPTIONS[1]));

    // Q15: a typed reply answers an open set too (no choice recorded)
    post(&c, &base, SID, json!({"text": "show me options"})).await;
    let s = common::session_state(&base, SID).await;
    let open: Vec<Value> = entries_of(&s, "message")
        .into_iter()
        .filter(|e| e["answered"] == false)
        .collect();
    assert_eq!(open.len(), 1);
    post(&c, &base, SID, json!({"text": "something else entirely"})).await;
    let s = common::session_state(&base, SID).await;
    assert!(
        entries_of(&s, "message")
            .iter()
            .all(|e| e["answered"] == true)
    );
    let typed = entries_of(&s, "message")
        .into_iter()
        .find(|e| e["id"] == open[0]["id"])
        .unwrap();
    assert!(typed.get("chosen").is_none());
    // Q14: the typed text went through and was answered
    assert!(
        entries_of(&s, "assistant").last().unwrap()["text"]
            .as_str()
            .unwrap()
            .contains("something else entirely")
    );
}

#[tokio::test]
async fn tool_errors_are_visible_entries() {
    let fx = start().await;
    let c = reqwest::Client::new();
    post(&c, &fx.url(), SID, json!({"text": "hello"})).await;
    let (_, body) = post(&c, &fx.url(), SID, json!({"text": "eleven please"})).await;
    let ev = sse_events(&body);
    let tool = ev
        .iter()
        .find(|(e, d)| e == "update" && d["kind"] == "tool")
        .unwrap();
    assert_eq!(tool.1["tool"]["isError"], true);
    let result = tool.1["tool"]["result"].as_str().unwrap();
    // the tool-system dispatcher checks the schema before the tool runs (the tool checks again
    // itself, see messaging's q3 tests); either way the error names the field and the rule
    assert!(
        result.contains("quickReplies") && result.contains("at most 10"),
        "{result}"
    );
    assert!(result.contains("\"success\":false"), "{result}");
    let s = common::session_state(&fx.url(), SID).await;
    assert!(
        entries_of(&s, "message").len() == 1,
        "nothing was delivered for the invalid call"
    );
}

#[tokio::test]
async fn bad_input_oversized_is_413_json() {
    // pictures off: a message's body is held to max_body_bytes (16 KiB)
    let fx = start_with(
        PanelConfig::default().with_max_image_bytes(0),
        common::demo_responder,
    )
    .await;
    let c = reqwest::Client::new();
    let big = "x".repeat(20 * 1024);
    let (status, body) = post(&c, &fx.url(), SID, json!({"text": big})).await;
    assert_eq!(status, 413);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"], "request body is larger than 16384 bytes");
    let long = "y".repeat(5000);
    let (status, body) = post(&c, &fx.url(), SID, json!({"text": long})).await;
    assert_eq!(status, 413);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["error"],
        "text has 5000 characters; at most 4000 are allowed"
    );
    // a huge body announced by content-length, sent raw
    let r = c
        .post(format!("{}api/sessions/{SID}/messages", fx.url()))
        .header("content-type", "application/json")
        .body(vec![b' '; 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert!(r.json::<Value>().await.unwrap()["error"].is_string());
    // still serving
    let (status, _) = post(&c, &fx.url(), SID, json!({"text": "hello"})).await;
    assert_eq!(status, 200);
    // with pictures (the default, 5 MiB): the body may also hold one picture's base64, no more
    let fx = start().await;
    let limit = 16 * 1024 + (5 * 1024 * 1024usize).div_ceil(3) * 4 + 1024;
    let r = c
        .post(format!("{}api/sessions/{SID}/messages", fx.url()))
        .header("content-type", "application/json")
        .body(vec![b' '; limit + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        format!("request body is larger than {limit} bytes")
    );
    // and the text is still held to its own limit
    let (status, body) = post(&c, &fx.url(), SID, json!({"text": big})).await;
    assert_eq!(status, 413);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["error"],
        "text has 20480 characters; at most 4000 are allowed"
    );
}

#[tokio::test]
async fn bad_input_malformed_is_400_json() {
    let fx = start().await;
    let c = reqwest::Client::new();
    let url = format!("{}api/sessions/{SID}/messages", fx.url());
    for (body, expect) in [
        ("not json", "malformed request"),
        ("{\"text\": 5}", "malformed request"),
        ("{\"txt\": \"hi\"}", "malformed request"),
        (
            "{\"text\": \"hi\", \"inReplyTo\": \"x\"}",
            "malformed request",
        ),
        ("{\"text\": \"   \"}", "text is empty"),
        ("", "malformed request"),
        ("[1,2]", "malformed request"),
    ] {
        let r = c
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
        assert_eq!(r.headers()["content-type"], "application/json");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"].as_str().unwrap().starts_with(expect),
            "{body}: {v}"
        );
    }
    for bad in [
        "short",
        "has%20space",
        "x".repeat(65).as_str(),
        "%3Cscript%3E12345",
    ] {
        let r = c
            .get(format!("{}api/sessions/{bad}", fx.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"].as_str().unwrap().starts_with("bad session id"),
            "{v}"
        );
    }
    let r = c.get(format!("{}nope", fx.url())).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "no such endpoint"
    );
    assert_eq!(
        c.get(format!("{}healthz", fx.url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "ok"
    );
}

#[tokio::test]
async fn second_message_while_answering_is_409() {
    let fx = start_with(PanelConfig::default(), |_| {
        Reply::text("slow answer").latency(Duration::from_millis(600))
    })
    .await;
    let c = reqwest::Client::new();
    let base = fx.url();
    let first = tokio::spawn({
        let (c, base) = (c.clone(), base.clone());
        async move { post(&c, &base, SID, json!({"text": "one"})).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = post(&c, &base, SID, json!({"text": "two"})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("an answer is still running"));
    assert_eq!(first.await.unwrap().0, 200);
    // afterwards the session takes messages again
    let (status, _) = post(&c, &base, SID, json!({"text": "three"})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn client_disconnect_mid_stream_server_stays_up() {
    let fx = start_with(PanelConfig::default(), |_| {
        Reply::text("a long streamed answer that keeps going for a while").shape(|s| {
            s.text_chunk = 2;
            s.delay = Duration::from_millis(20);
        })
    })
    .await;
    let addr = fx.panel.addr();
    for round in 0..3 {
        let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = json!({"text": format!("go {round}")}).to_string();
        let req = format!(
            "POST /api/sessions/{SID}/messages HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(req.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 2048];
        let mut got = String::new();
        while !got.contains("event: delta") {
            let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "closed early: {got}");
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        drop(sock); // gone mid-stream
        // the answer still completes into the session, and the session frees up
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let s = common::session_state(&fx.url(), SID).await;
            let done = s["busy"] == false
                && entries_of(&s, "assistant").len() == round + 1
                && entries_of(&s, "assistant").last().unwrap()["text"]
                    == "a long streamed answer that keeps going for a while";
            if done {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the answer never completed: {s}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // the next request works
    let c = reqwest::Client::new();
    let (status, body) = post(&c, &fx.url(), SID, json!({"text": "after"})).await;
    assert_eq!(status, 200);
    assert!(body.contains("event: done"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_sse_clients_all_answered() {
    let fx = start().await;
    fx.model.set_recording(false);
    let base = fx.url();
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (c, base) = (c.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let sid = format!("load-client-{i:04}");
            let (status, body) = post(&c, &base, &sid, json!({"text": "hello"})).await;
            (sid, status, body)
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(tasks))
        .await
        .expect("200 clients did not finish within 120 s");
    for r in all {
        let (sid, status, body) = r.unwrap();
        assert_eq!(status, 200, "{sid}: {body}");
        let ev = sse_events(&body);
        assert!(
            ev.iter().any(|(e, d)| e == "entry"
                && d["kind"] == "message"
                && d["quickReplies"] == json!(OPTIONS)),
            "{sid}: {body}"
        );
        assert_eq!(ev.last().unwrap().0, "done", "{sid}");
    }
    // still up
    let (status, _) = post(&c, &base, SID, json!({"text": "hello"})).await;
    assert_eq!(status, 200);
}

/// a call held for approval survives a restart of the panel (same SQLite history,
/// same approval key): the new server shows the same pending call with a fresh token, and
/// deciding there finishes the turn. A malformed or empty decision is a 400.
#[tokio::test]
async fn approval_pending_survives_a_panel_restart() {
    let fx = common::start_with_agent(
        PanelConfig::default(),
        common::delete_responder,
        common::with_gated_delete,
    )
    .await;
    let c = reqwest::Client::new();
    let (status, body) = post(&c, &fx.url(), SID, json!({"text": "delete my notes"})).await;
    assert_eq!(status, 200);
    let events = sse_events(&body);
    let (_, pending) = events
        .iter()
        .find(|(e, _)| e == "approval")
        .unwrap_or_else(|| panic!("no approval event: {body}"));
    assert_eq!(pending["calls"][0]["name"], "delete_file");
    assert_eq!(
        pending["calls"][0]["arguments"],
        json!({"path": "<b>notes</b>.txt"})
    );

    // The panel restarts on the same history file.
    let fx = fx
        .restart(PanelConfig::default(), common::with_gated_delete)
        .await;
    let base = fx.url();
    let s = common::session_state(&base, SID).await;
    let call = s["pending"]["calls"][0].clone();
    assert_eq!(call["name"], "delete_file", "{s}");
    assert_eq!(call["id"], pending["calls"][0]["id"]);

    for bad in [
        json!({"decisions": []}),
        json!({"decisions": "yes"}),
        json!({"x": 1}),
    ] {
        let r = c
            .post(format!("{base}api/sessions/{SID}/approvals"))
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
    }
    let r = c
        .post(format!("{base}api/sessions/{SID}/approvals"))
        .json(&json!({"decisions": [{"call_id": call["id"], "token": call["token"], "approved": true}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().await.unwrap();
    assert!(
        sse_events(&body)
            .iter()
            .any(|(e, d)| e == "update"
                && d["tool"]["result"] == r#"{"deleted":"<b>notes</b>.txt"}"#),
        "the approved call ran: {body}"
    );
    let s = common::session_state(&base, SID).await;
    assert_eq!(s["pending"], Value::Null);
    let answers: Vec<Value> = entries_of(&s, "assistant")
        .iter()
        .map(|e| e["text"].clone())
        .collect();
    assert!(answers.contains(&json!("Deleted the file.")), "{s}");
    fx.panel.shutdown().await;
}

/// A failed answer is kept like any other (never silence): the person sees the
/// error live, a reload shows it after their message (from the store, so any worker shows it),
/// and the conversation goes on.
#[tokio::test]
async fn q13_a_failed_answer_is_stored_and_shown_after_a_reload() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let failed_once = AtomicBool::new(false);
    let fx = start_with(PanelConfig::default(), move |body| {
        if failed_once.swap(true, Ordering::SeqCst) {
            common::demo_responder(body)
        } else {
            Reply::status(400, "the provider refused the request")
        }
    })
    .await;
    let c = reqwest::Client::new();
    let (status, body) = post(&c, &fx.url(), SID, json!({"text": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    let events = sse_events(&body);
    let live = events
        .iter()
        .find(|(e, d)| e == "entry" && d["kind"] == "error")
        .unwrap_or_else(|| panic!("no live error entry: {body}"));
    let text = live.1["text"].as_str().unwrap().to_owned();
    let stored = events
        .iter()
        .find(|(e, d)| e == "entry" && d["kind"] == "assistant")
        .unwrap_or_else(|| panic!("the failure was not stored: {body}"));
    assert_eq!(stored.1["text"], text.as_str());
    assert_eq!(stored.1["replaces"], live.1["id"], "{body}");

    let s = common::session_state(&fx.url(), SID).await;
    let entries = s["entries"].as_array().unwrap();
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["user", "assistant"], "{s}");
    assert_eq!(entries[1]["text"], text.as_str());

    let (status, body) = post(&c, &fx.url(), SID, json!({"text": "hello again"})).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !sse_events(&body)
            .iter()
            .any(|(e, d)| e == "entry" && d["kind"] == "error"),
        "{body}"
    );
    let s = common::session_state(&fx.url(), SID).await;
    assert!(entries_of(&s, "assistant").len() >= 2, "{s}");
}

/// Every `/api/` answer — conversation text, approval tokens, streams, errors, and the request
/// checks' refusals (`401`, `403`) — says `Cache-Control: no-store` (no cache, shared or the
/// browser's, keeps it) and `X-Content-Type-Options: nosniff` (never read as another type).
#[tokio::test]
async fn every_api_answer_is_kept_by_no_cache_and_never_sniffed() {
    let fx = start().await;
    let base = fx.url();
    let c = reqwest::Client::new();
    let (s, _) = post(&c, &base, SID, json!({"text": "hello"})).await;
    assert_eq!(s, 200);
    let conv = format!("{base}api/sessions/{SID}");
    let requests = vec![
        ("state", c.get(&conv)),
        (
            "a message (its stream)",
            c.post(format!("{conv}/messages"))
                .json(&json!({"text": "again"})),
        ),
        (
            "a malformed message",
            c.post(format!("{conv}/messages")).json(&json!(["no"])),
        ),
        (
            "an answer to no question",
            c.post(format!("{conv}/elicitations/9"))
                .json(&json!({"action": "decline"})),
        ),
        ("a new conversation", c.post(format!("{base}api/sessions"))),
        ("the inbox", c.get(format!("{base}api/inbox"))),
        ("no such endpoint", c.get(format!("{base}api/nothing-here"))),
        ("a wrong method", c.delete(&conv)),
        (
            "a cross-site request (refused by the request checks)",
            c.get(&conv).header("sec-fetch-site", "cross-site"),
        ),
    ];
    for (what, request) in requests {
        let r = request.send().await.unwrap();
        let h = r.headers().clone();
        assert_eq!(
            h["cache-control"],
            "no-store",
            "{what} ({}): {h:?}",
            r.status()
        );
        assert_eq!(h["x-content-type-options"], "nosniff", "{what}: {h:?}");
        let _ = r.text().await;
    }
    // the events stream (its headers only: it does not end)
    let r = c.get(format!("{conv}/events")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    drop(r);
    // a refused caller's 401
    let elsewhere: std::net::IpAddr = "10.0.0.7".parse().unwrap();
    let guarded = start_with(
        PanelConfig::default().with_authenticator(
            toolwright_chat_panel::identity::TrustedProxyHeader::new(
                "x-forwarded-user",
                [elsewhere],
            )
            .unwrap(),
        ),
        common::demo_responder,
    )
    .await;
    let r = c
        .post(format!("{}api/sessions", guarded.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
}

/// The media endpoint: a conversation's pictures to its owner only — another principal gets
/// the very `404` of a conversation that does not exist —, and only PNG, JPEG, GIF or WebP
/// whose bytes are that type: a tool's SVG, or HTML stored as `image/png`, is never served.
#[tokio::test]
async fn the_media_endpoint_serves_the_owner_only_and_never_svg_or_html() {
    use base64::Engine as _;
    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let svg = b"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>";
    let html = b"<html><script>alert(2)</script></html>";
    let fx = common::start_with_agent(
        PanelConfig::default().with_authenticator(
            toolwright_chat_panel::identity::TrustedProxyHeader::new(
                "x-forwarded-user",
                [loopback],
            )
            .unwrap(),
        ),
        common::picture_responder,
        |b| {
            b.tool(common::PictureTool {
                name: "draw_svg",
                parts: vec![
                    toolwright_core::Part::Image(
                        toolwright_core::Media::bytes(svg, "image/svg+xml").unwrap(),
                    ),
                    toolwright_core::Part::Image(
                        toolwright_core::Media::bytes(html, "image/png").unwrap(),
                    ),
                ],
            })
        },
    )
    .await;
    let base = fx.url();
    let c = reqwest::Client::new();
    let as_who = |who: &str, r: reqwest::RequestBuilder| r.header("x-forwarded-user", who);
    let made: Value = as_who("alice", c.post(format!("{base}api/sessions")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = made["sessionId"].as_str().unwrap().to_owned();
    let picture = base64::engine::general_purpose::STANDARD.encode(common::CHECKS_PNG);
    let (s, body) = common::send(
        as_who(
            "alice",
            c.post(format!("{base}api/sessions/{sid}/messages")),
        ),
        Some(json!({"text": "see", "images": [{"mediaType": "image/png", "data": picture}]})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = common::send(
        as_who(
            "alice",
            c.post(format!("{base}api/sessions/{sid}/messages")),
        ),
        Some(json!({"text": "call draw_svg"})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let state: Value = as_who("alice", c.get(format!("{base}api/sessions/{sid}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let srcs: Vec<Value> = state["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["images"].as_array().cloned().unwrap_or_default())
        .collect();
    // the person's picture has a src; the tool's SVG and its HTML-as-PNG have none, only a line
    assert_eq!(srcs.len(), 3, "{state}");
    let src = format!("/api/sessions/{sid}/media/1-0");
    assert_eq!(srcs[0]["src"], json!(src), "{state}");
    assert_eq!(srcs[0]["width"], json!(24));
    assert!(
        srcs[1].get("src").is_none() && srcs[2].get("src").is_none(),
        "{state}"
    );
    assert!(
        srcs[1]["text"].as_str().unwrap().contains("image/svg+xml"),
        "{state}"
    );
    let url = format!("{}{src}", base.trim_end_matches('/'));
    // alice: her picture's bytes, as a PNG
    let r = as_who("alice", c.get(&url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.headers()["content-disposition"], "inline");
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert_eq!(&r.bytes().await.unwrap()[..], common::CHECKS_PNG);
    // bob: exactly what a conversation that does not exist answers
    let nobody = url.replace(&sid, "ffffffffffffffffffffffffffffffff");
    let theirs = as_who("bob", c.get(&url)).send().await.unwrap();
    let none = as_who("bob", c.get(&nobody)).send().await.unwrap();
    assert_eq!(
        (theirs.status().as_u16(), none.status().as_u16()),
        (404, 404)
    );
    assert_eq!(theirs.text().await.unwrap(), none.text().await.unwrap());
    // nobody signed in
    assert_eq!(c.get(&url).send().await.unwrap().status(), 401);
    // nothing else in the conversation is served, whatever the reference: no SVG, no HTML
    for row in 0..=8 {
        for part in 0..=2 {
            if (row, part) == (1, 0) {
                continue;
            }
            let u = format!("{base}api/sessions/{sid}/media/{row}-{part}");
            let r = as_who("alice", c.get(&u)).send().await.unwrap();
            assert_eq!(r.status(), 404, "{row}-{part}");
            let text = r.text().await.unwrap();
            assert!(!text.contains("<svg") && !text.contains("<html"), "{text}");
        }
    }
    for bad in ["x", "1", "1-", "-0", "1-0-0", "99999999999999999999-0"] {
        let u = format!("{base}api/sessions/{sid}/media/{bad}");
        let r = as_who("alice", c.get(&u)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{bad}");
    }
    // the page may load pictures from the panel only
    let page = c.get(&base).send().await.unwrap();
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("img-src 'self';"), "{csp}");
    assert!(!csp.contains("data:") && !csp.contains("blob:"), "{csp}");
}

/// A file a tool gave by reference is served from the agent's blob store to the conversation's
/// owner only — another principal, an unknown reference and a hostile one get `404` —, with
/// the media type it was stored as, never run: HTML is an `attachment` under a `sandbox`
/// policy and `nosniff`; a picture of its type is shown inline.
#[tokio::test]
async fn a_file_kept_by_reference_is_served_to_its_owner_only_and_never_run() {
    use toolwright_core::{BLOB_URI_PREFIX, BlobStore, Part, ResourceRef};
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(
        toolwright_tool_system::FsBlobStore::open(dir.path(), 1 << 20).unwrap(),
    );
    let html = b"<html><script>alert(1)</script></html>";
    let page = store.put(html, "text/html").await.unwrap();
    let chart = store.put(common::CHART_PNG, "image/png").await.unwrap();
    let unknown = ResourceRef::new(
        format!("{BLOB_URI_PREFIX}{}", "0".repeat(64)),
        "image/png",
        5,
    );
    let hostile = ResourceRef::new(
        format!("{BLOB_URI_PREFIX}../../etc/passwd"),
        "text/plain",
        5,
    );
    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let tool_store = store.clone();
    let fx = common::start_with_agent(
        PanelConfig::default().with_authenticator(
            toolwright_chat_panel::identity::TrustedProxyHeader::new(
                "x-forwarded-user",
                [loopback],
            )
            .unwrap(),
        ),
        common::picture_responder,
        move |b| {
            b.blob_store(tool_store).tool(common::PictureTool {
                name: "fetch_files",
                parts: vec![
                    Part::Resource(chart),
                    Part::Resource(page.with_name("page.html")),
                    Part::Resource(unknown),
                    Part::Resource(hostile),
                ],
            })
        },
    )
    .await;
    let base = fx.url();
    let c = reqwest::Client::new();
    let as_who = |who: &str, r: reqwest::RequestBuilder| r.header("x-forwarded-user", who);
    let made: Value = as_who("alice", c.post(format!("{base}api/sessions")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = made["sessionId"].as_str().unwrap().to_owned();
    let (s, body) = common::send(
        as_who(
            "alice",
            c.post(format!("{base}api/sessions/{sid}/messages")),
        ),
        Some(json!({"text": "call fetch_files"})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let state: Value = as_who("alice", c.get(format!("{base}api/sessions/{sid}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let files: Vec<Value> = state["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["images"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(files.len(), 4, "{state}");
    let src = |i: usize| {
        let s = files[i]["src"].as_str().unwrap();
        format!("{}{s}", base.trim_end_matches('/'))
    };
    assert!(
        files[0].get("link").is_none(),
        "a picture is shown: {state}"
    );
    assert_eq!(files[1]["link"], json!(true), "a page is a link: {state}");
    assert!(
        files[3].get("src").is_none(),
        "a hostile reference is only named: {state}"
    );

    // alice: the picture inline, as its type
    let r = as_who("alice", c.get(src(0))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert_eq!(r.headers()["content-disposition"], "inline");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(&r.bytes().await.unwrap()[..], common::CHART_PNG);
    // the HTML: its bytes, but as a download of no type, which cannot run
    let r = as_who("alice", c.get(src(1))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    assert_eq!(r.headers()["content-disposition"], "attachment");
    assert_eq!(
        r.headers()["content-security-policy"],
        "default-src 'none'; sandbox"
    );
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(&r.bytes().await.unwrap()[..], html);
    // bob: what a conversation that does not exist answers
    for i in [0, 1] {
        let r = as_who("bob", c.get(src(i))).send().await.unwrap();
        assert_eq!(r.status(), 404);
        assert!(!r.text().await.unwrap().contains("<html"));
    }
    // a well-formed reference the store does not hold, and the hostile one by its place
    assert_eq!(
        as_who("alice", c.get(src(2)))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let hostile_at = format!("{}-3", src(0).strip_suffix("-0").unwrap());
    let r = as_who("alice", c.get(&hostile_at)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(!r.text().await.unwrap().contains("root:"));
}
