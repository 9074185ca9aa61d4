//! stateless panel workers. Two real `chat-panel` worker processes (this test
//! binary started again in worker mode) on different ports over one PostgreSQL database
//! (`TEST_DATABASE_URL`, set by `cargo xtask test`), the scripted model, and a real SSE client
//! reading `GET /api/sessions/{id}/events` over HTTP: a conversation starts on worker A,
//! continues on worker B, A is SIGKILLed mid-answer, the SSE stream reconnects to B with
//! `Last-Event-ID`; every message row in PostgreSQL is counted (none lost, none doubled) and
//! every row reached the SSE client exactly once.
//!
//! `harness = false`: `main` runs the tests one after another (a name given on the command line
//! selects those containing it); with `PANEL_WORKER_CHILD` set, it is a worker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "common/browser.rs"]
mod chrome;
mod common;
#[path = "common/fleet.rs"]
mod fleet;
#[path = "common/oidc.rs"]
mod oidc;
/// context-engine's PostgreSQL test helpers: a fresh database, and a TCP proxy that takes the
/// database away and brings it back.
#[path = "../../context-engine/tests/common/mod.rs"]
mod pg;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Reply, ScriptedServer};
use toolwright_chat_panel::{AgentBackend, ChatPanel, HistoryStore, PanelConfig, PanelError};
use toolwright_context_engine::StoreError;
use toolwright_model_gateway::{OpenAiConfig, OpenAiModel};

use fleet::{
    INTERRUPTED_START, Worker, fault_env, kill_broker, pg_connect, post, runtime, start_broker,
    stored_texts,
};

const PG_ENV: &str = "TEST_DATABASE_URL";

fn main() {
    if std::env::var_os(fleet::CHILD).is_some() {
        return fleet::worker_child();
    }
    let tests: [(&str, fn()); 11] = [
        (
            "workers_a_conversation_stays_its_owners_on_both_workers",
            workers_a_conversation_stays_its_owners_on_both_workers,
        ),
        (
            "workers_the_page_follows_the_conversation_on_any_worker_and_reconnects_with_last_event_id",
            workers_the_page_follows_the_conversation_on_any_worker_and_reconnects_with_last_event_id,
        ),
        (
            "workers_nats_the_panels_ack_wait_reaches_the_group_consumer",
            workers_nats_the_panels_ack_wait_reaches_the_group_consumer,
        ),
        (
            "workers_nats_a_worker_killed_between_taking_and_storing_a_message_another_stores_it_once",
            workers_nats_a_worker_killed_between_taking_and_storing_a_message_another_stores_it_once,
        ),
        (
            "workers_broker_down_mid_conversation_typed_errors_then_nothing_lost",
            workers_broker_down_mid_conversation_typed_errors_then_nothing_lost,
        ),
        (
            "workers_an_idle_stream_is_woken_by_the_store_feed_not_a_timer",
            workers_an_idle_stream_is_woken_by_the_store_feed_not_a_timer,
        ),
        (
            "workers_database_down_mid_conversation_is_503_then_the_conversation_goes_on_nothing_lost",
            workers_database_down_mid_conversation_is_503_then_the_conversation_goes_on_nothing_lost,
        ),
        (
            "workers_nats_a_message_from_another_process_is_stored_once_and_shown_on_every_worker",
            workers_nats_a_message_from_another_process_is_stored_once_and_shown_on_every_worker,
        ),
        (
            "workers_two_processes_kill_mid_turn_sse_resumes_on_the_other_no_row_lost_or_doubled",
            workers_two_processes_kill_mid_turn_sse_resumes_on_the_other_no_row_lost_or_doubled,
        ),
        (
            "workers_config_unreachable_database_is_a_typed_error",
            workers_config_unreachable_database_is_a_typed_error,
        ),
        (
            "workers_config_unreachable_broker_is_a_typed_error",
            workers_config_unreachable_broker_is_a_typed_error,
        ),
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    common::run_tests(&tests, filter.as_deref());
}

/// The PostgreSQL server's URL, or a failure saying how to get one (never a silent pass).
fn pg_base_url() -> String {
    match std::env::var(PG_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "{PG_ENV} is not set, so the two-worker test cannot run: run `cargo xtask test` (it \
             starts a private PostgreSQL on 127.0.0.1 and sets it), or `cargo xtask with-services \
             cargo test -p toolwright-chat-panel --test workers`, or set {PG_ENV}=postgres://USER@HOST:PORT/postgres \
             for a server where USER may create databases"
        ),
    }
}

/// A fresh database `name` on the test server; its URL.
async fn fresh_database(name: &str) -> String {
    fleet::fresh_database_on(&pg_base_url(), name).await
}

/// One SSE event as the client read it.
#[derive(Debug, Clone)]
struct SseEvent {
    event: String,
    id: Option<String>,
    data: Value,
}

/// A real SSE client on `GET {base}api/sessions/{sid}/events`, sending `Last-Event-ID` when
/// given; its events arrive on the channel until the connection ends.
fn sse_client(
    base: &str,
    sid: &str,
    last_event_id: Option<&str>,
) -> tokio::sync::mpsc::UnboundedReceiver<SseEvent> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut req = reqwest::Client::new()
        .get(format!("{base}api/sessions/{sid}/events"))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    tokio::spawn(async move {
        let Ok(res) = req.send().await else { return };
        assert_eq!(res.status(), 200);
        let mut body = res.bytes_stream();
        let mut buf = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
            while let Some(i) = buf.find("\n\n") {
                let frame = buf[..i].to_owned();
                buf.drain(..i + 2);
                let (mut event, mut id, mut data) = ("message".to_owned(), None, String::new());
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                if tx.send(SseEvent { event, id, data }).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Reads `rx` until a `row` event satisfies `done`; all `row` events read, by row.
async fn rows_until(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<SseEvent>,
    seen: &mut Vec<SseEvent>,
    done: impl Fn(&SseEvent) -> bool,
) {
    let wait = async {
        while let Some(e) = rx.recv().await {
            let stop = e.event == "row" && done(&e);
            if e.event == "row" {
                seen.push(e);
            }
            if stop {
                return;
            }
        }
        panic!("the SSE stream ended before the expected row; got {seen:#?}");
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("the expected row never came; got {seen:#?}"));
}

fn row_has(e: &SseEvent, kind: &str, text: &str) -> bool {
    e.data["events"].as_array().is_some_and(|a| {
        a.iter().any(|x| {
            x["event"] == "entry"
                && x["entry"]["kind"] == kind
                && x["entry"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(text))
        })
    })
}

/// The model: on the first message it asks with quick replies (send_message); after a tool
/// result it says so; a message with "slow" is answered only after a minute (the worker is
/// killed before); otherwise it echoes.
fn responder(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let content = last["content"].as_str().unwrap_or_default().to_owned();
    let users = messages.iter().filter(|m| m["role"] == "user").count();
    if last["role"] == "tool" {
        return Reply::text("I sent you a question above.");
    }
    if content.starts_with("ask") {
        let args = json!({"recipient": "user", "text": format!("Question for {content}"),
            "quickReplies": ["Yes", "No"]});
        return Reply::tool_call(
            &format!("call_{}", messages.len()),
            "send_message",
            &args.to_string(),
        );
    }
    if content.contains("slow") {
        return Reply::text("too late").latency(Duration::from_secs(60));
    }
    if users == 1 {
        let args = json!({"recipient": "user", "text": "How should I continue?",
            "quickReplies": common::OPTIONS});
        return Reply::tool_call(
            &format!("call_{}", messages.len()),
            "send_message",
            &args.to_string(),
        );
    }
    Reply::text(format!("You said: {content}"))
}

/// Streams on B follow a conversation that goes on on A, with B's timer at 10 minutes: every
/// row A stores reaches B's stream through PostgreSQL's change feed (LISTEN/NOTIFY), in order,
/// once — so an idle stream needs no reads of its own, and 10,000 of them cost the database
/// nothing until something changes.
fn workers_an_idle_stream_is_woken_by_the_store_feed_not_a_timer() {
    runtime().block_on(async {
        let url = fresh_database("chat_panel_feed").await;
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let a = Worker::start_with_poll(&model, &url, Duration::from_secs(600));
        let b = Worker::start_with_poll(&model, &url, Duration::from_secs(600));
        let c = reqwest::Client::new();
        let sid = "feed-woken-session";
        let (status, body) = post(&c, &a.url(), sid, "hello").await;
        assert_eq!(status, 200, "{body}");
        let mut on_b = sse_client(&b.url(), sid, None);
        let mut seen = Vec::new();
        rows_until(&mut on_b, &mut seen, |e| {
            row_has(e, "assistant", "I sent you a question")
        })
        .await;
        // B's stream is idle now; the conversation goes on on A, twice
        for text in ["first", "second"] {
            let (status, body) = post(&c, &a.url(), sid, text).await;
            assert_eq!(status, 200, "{body}");
            let said = format!("You said: {text}");
            let woken = tokio::time::timeout(
                Duration::from_secs(20),
                rows_until(&mut on_b, &mut seen, |e| row_has(e, "assistant", &said)),
            )
            .await;
            assert!(
                woken.is_ok(),
                "B's stream was not woken for {text:?}: {seen:#?}"
            );
        }
        let ids: Vec<u64> = seen
            .iter()
            .map(|e| e.id.as_deref().unwrap().parse().unwrap())
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "rows out of order or doubled: {ids:?}"
        );
    });
}

fn workers_two_processes_kill_mid_turn_sse_resumes_on_the_other_no_row_lost_or_doubled() {
    runtime().block_on(async {
        let url = fresh_database("chat_panel_workers").await;
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let a = Worker::start(&model, &url);
        let b = Worker::start(&model, &url);
        assert_ne!(a.addr, b.addr);
        let c = reqwest::Client::new();
        let sid = "two-workers-session";
        let (a_url, b_url) = (a.url(), b.url());

        // 1. the conversation starts on A; the person's browser follows it on A
        let (status, body) = post(&c, &a_url, sid, "hello").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("event: done"), "{body}");
        let mut on_a = sse_client(&a_url, sid, None);
        let mut seen = Vec::new();
        rows_until(&mut on_a, &mut seen, |e| {
            row_has(e, "assistant", "I sent you a question")
        })
        .await;

        // 2. it goes on on B: the quick reply offered on A is answered there
        let (status, body) = post(&c, &b_url, sid, common::OPTIONS[1]).await;
        assert_eq!(status, 200, "{body}");
        let said = format!("You said: {}", common::OPTIONS[1]);
        assert!(body.contains(&said), "{body}");
        rows_until(&mut on_a, &mut seen, |e| row_has(e, "assistant", &said)).await;
        let state_b = common::session_state(&b_url, sid).await;
        let question = state_b["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "message")
            .cloned()
            .unwrap_or_else(|| panic!("no question on B: {state_b}"));
        assert_eq!(question["answered"], true);
        assert_eq!(question["chosen"], common::OPTIONS[1]);

        // 3. a slow answer starts on A; once the person's message is stored, A is killed
        let c2 = c.clone();
        let a_post = a_url.clone();
        // (its response is cut when A dies: whatever arrived is kept)
        let slow = tokio::spawn(async move {
            let r = c2
                .post(format!("{a_post}api/sessions/{sid}/messages"))
                .json(&json!({"text": "slow please"}))
                .send()
                .await
                .unwrap();
            let mut body = r.bytes_stream();
            let mut got = String::new();
            while let Some(Ok(chunk)) = body.next().await {
                got.push_str(&String::from_utf8_lossy(&chunk));
            }
            got
        });
        rows_until(&mut on_a, &mut seen, |e| row_has(e, "user", "slow please")).await;
        a.kill();
        let killed = std::time::Instant::now();
        // A's stream ends with A
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(e) = on_a.recv().await {
                if e.event == "row" {
                    seen.push(e);
                }
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "the stream from the killed worker did not end"
        );
        let posted = slow.await.unwrap();
        assert!(
            !posted.contains("event: done"),
            "A's answer cannot have finished: {posted:?}"
        );
        let last_id = seen.last().and_then(|e| e.id.clone()).unwrap();

        // 4. the browser reconnects to B with Last-Event-ID: the interrupted answer is closed
        //    with a stored message (A's lease expires), then the conversation goes on on B
        let mut on_b = sse_client(&b_url, sid, Some(&last_id));
        rows_until(&mut on_b, &mut seen, |e| {
            row_has(e, "assistant", INTERRUPTED_START)
        })
        .await;
        // (reported, not asserted: the lease is 1.5 s, renewed every 0.5 s)
        eprintln!(
            "workers: the interrupted answer was closed on B {} ms after A was killed",
            killed.elapsed().as_millis()
        );
        let (status, body) = post(&c, &b_url, sid, "after the crash").await;
        assert_eq!(status, 200, "{body}");
        rows_until(&mut on_b, &mut seen, |e| {
            row_has(e, "assistant", "You said: after the crash")
        })
        .await;

        // 5. every message row in PostgreSQL, once each, in order
        let db = pg_connect(&url).await;
        let rows = db
            .query(
                "SELECT seq, message FROM ce_messages WHERE session_id = $1 ORDER BY seq",
                &[&sid],
            )
            .await
            .unwrap();
        let stored: Vec<Value> = rows
            .iter()
            .map(|r| serde_json::from_str(r.get::<_, &str>(1)).unwrap())
            .collect();
        let seqs: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(
            seqs,
            (0..stored.len() as i64).collect::<Vec<_>>(),
            "no gaps"
        );
        let summary: Vec<String> = stored
            .iter()
            .map(|m| {
                let role = m["role"].as_str().unwrap_or("?");
                let text = m["content"].as_str().unwrap_or_default();
                let calls = m["tool_calls"].as_array().map_or(0, Vec::len);
                format!(
                    "{role}:{calls}:{}",
                    text.chars().take(48).collect::<String>()
                )
            })
            .collect();
        let expected = [
            "user:0:hello".to_owned(),
            "assistant:1:".to_owned(),
            format!(
                "tool:0:{}",
                stored[2]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .take(48)
                    .collect::<String>()
            ),
            "assistant:0:I sent you a question above.".to_owned(),
            format!("user:0:{}", common::OPTIONS[1]),
            format!("assistant:0:{said}"),
            "user:0:slow please".to_owned(),
            format!(
                "assistant:0:{}",
                "The answer to your last message was interrupted: the server handling it stopped, or could not save it"
                    .chars()
                    .take(48)
                    .collect::<String>()
            ),
            "user:0:after the crash".to_owned(),
            "assistant:0:You said: after the crash".to_owned(),
        ];
        assert_eq!(
            summary, expected,
            "every message stored once, in order: {stored:#?}"
        );
        assert!(
            stored[2]["content"]
                .as_str()
                .is_some_and(|c| c.contains("\"success\":true")),
            "{}",
            stored[2]
        );

        // 6. the SSE client got every row exactly once, across both workers
        let mut by_row: BTreeMap<u64, usize> = BTreeMap::new();
        for e in &seen {
            let id: u64 = e.id.as_deref().unwrap().parse().unwrap();
            assert_eq!(e.data["row"], id, "the event id is its row");
            *by_row.entry(id).or_default() += 1;
        }
        let expected_rows: Vec<u64> = (1..=stored.len() as u64).collect();
        assert_eq!(
            by_row.keys().copied().collect::<Vec<_>>(),
            expected_rows,
            "every stored row reached the client: {seen:#?}"
        );
        assert!(by_row.values().all(|n| *n == 1), "no row twice: {by_row:?}");
        drop(b);
    });
}

/// A load balancer in front of the workers: a TCP proxy on 127.0.0.1 that sends each new
/// connection to the worker it currently points at, and keeps what the browser sent on the
/// connections to the events stream (to see its `Last-Event-ID`).
struct Balancer {
    addr: SocketAddr,
    target: std::sync::Arc<std::sync::Mutex<SocketAddr>>,
    events_requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    async fn start(target: SocketAddr) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target = std::sync::Arc::new(std::sync::Mutex::new(target));
        let events_requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (t, log) = (target.clone(), events_requests.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let upstream = *t.lock().unwrap();
                let log = log.clone();
                conns.spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return; // the worker is gone: the browser sees the connection close
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n @ 1..) = cr.read(&mut buf).await {
                            let head = String::from_utf8_lossy(&buf[..n]);
                            if head.starts_with("GET /api/sessions/") && head.contains("/events") {
                                log.lock().unwrap().push(head.into_owned());
                            }
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = sw.shutdown().await;
                    };
                    let down = async move {
                        let _ = tokio::io::copy(&mut sr, &mut cw).await;
                        let _ = cw.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
            }
        });
        Self {
            addr,
            target,
            events_requests,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// New connections go to `to` from now on.
    fn point_at(&self, to: SocketAddr) {
        *self.target.lock().unwrap() = to;
    }

    fn events_requests(&self) -> Vec<String> {
        self.events_requests.lock().unwrap().clone()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The chat page itself (real Chromium) behind a load balancer in front of two workers: it shows
/// rows another worker stores as they are stored (its events stream, woken by the store's
/// feed); when its worker is SIGKILLed mid-answer and the balancer sends the reconnect to the
/// other worker, the browser's own `EventSource` reconnects with `Last-Event-ID`, the
/// interrupted answer's message appears, and the conversation goes on — the page then shows
/// every stored entry exactly once, in the stored order.
fn workers_the_page_follows_the_conversation_on_any_worker_and_reconnects_with_last_event_id() {
    runtime().block_on(async {
        let url = fresh_database("chat_panel_page").await;
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let a = Worker::start(&model, &url);
        let b = Worker::start(&model, &url);
        let (a_addr, b_url) = (a.addr, b.url());
        let lb = Balancer::start(a_addr).await;
        let browser = chrome::Browser::start().await;
        let c = reqwest::Client::new();

        // 1. the person writes on the page (served by A); the agent asks with quick replies
        browser.open_url(&lb.url()).await;
        let sid = browser.session_id().await;
        // (a conversation that has not started is not followed: no stream read on a timer)
        assert!(
            lb.events_requests().is_empty(),
            "{:?}",
            lb.events_requests()
        );
        browser.type_and_send("hello").await;
        browser
            .wait_until(
                "the agent's question",
                "document.querySelectorAll('.entry-message .quick-reply').length === 3",
            )
            .await;
        browser.idle().await;

        // 2. the same conversation goes on on B, not through the page: the page shows B's rows
        //    as B stores them (the old page showed them only after a reload)
        let (status, body) = post(&c, &b_url, &sid, "ask from elsewhere").await;
        assert_eq!(status, 200, "{body}");
        browser.wait_for_text(".entry-message .text", "Question for ask from elsewhere", false).await;

        // 3. a slow answer starts on A from the page; once the person's message shows (stored),
        //    the balancer turns to B and A is killed
        browser.type_and_send("slow please").await;
        browser.wait_for_text(".entry-user .text", "slow please", false).await;
        let before_kill = lb.events_requests().len();
        lb.point_at(b.addr);
        a.kill();

        // 4. the page's EventSource reconnects (through the balancer: to B) with Last-Event-ID;
        //    B closes the dead worker's answer with a stored message, which the page shows
        browser
            .wait_for_text(".entry-assistant .text", INTERRUPTED_START, true)
            .await;
        let reconnects = lb.events_requests()[before_kill..].to_vec();
        let last_event_ids: Vec<u64> = reconnects
            .iter()
            .filter_map(|head| {
                head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("last-event-id")
                        .then(|| v.trim().parse().ok())
                        .flatten()
                })
            })
            .collect();
        assert!(
            !last_event_ids.is_empty(),
            "the browser reconnected without Last-Event-ID: {reconnects:#?}"
        );

        // 5. the conversation goes on on B, from the page
        browser.type_and_send("after the crash").await;
        browser.wait_for_text(".entry-assistant .text", "You said: after the crash", false).await;
        browser.idle().await;

        // 6. the page shows every stored entry once, in the stored order (entries of its own —
        //    negative ids — are the page's notes, like the lost connection's)
        let stored = common::session_state(&b_url, &sid).await;
        let stored: Vec<(String, String)> = stored["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["id"].to_string(),
                    format!("{}: {}", e["kind"].as_str().unwrap(), e["text"].as_str().unwrap_or_default()),
                )
            })
            .collect();
        let shown: Vec<(String, String)> = serde_json::from_value(
            browser
                .js("return Array.from(document.querySelectorAll('#log > .entry'))
                       .filter(e => e.dataset.id && !e.dataset.id.startsWith('-'))
                       .map(e => [e.dataset.id, e.className.split(' ')[1].slice(6) + ': ' +
                         ((e.querySelector('.text') || e.querySelector('.who') || {}).textContent || '')]);")
                .await,
        )
        .unwrap();
        let stored_ids: Vec<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
        let shown_ids: Vec<&str> = shown.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            shown_ids, stored_ids,
            "the page shows each stored entry once, in order:\nshown {shown:#?}\nstored {stored:#?}"
        );
        let rows = pg_connect(&url)
            .await
            .query(
                "SELECT count(*) FROM ce_messages WHERE session_id = $1 AND message LIKE '%interrupted%'",
                &[&sid],
            )
            .await
            .unwrap();
        assert_eq!(rows[0].get::<_, i64>(0), 1, "one interrupted message stored");
        browser.close().await;
        drop(b);
    });
}

/// Two workers over PostgreSQL and NATS (`NATS_URL` from `TEST_NATS_URL`, set by `cargo xtask
/// test`): a message another process sends to the person on the broker is stored by the worker
/// that receives it, once, and every worker's events stream shows it with its quick replies.
fn workers_nats_a_message_from_another_process_is_stored_once_and_shown_on_every_worker() {
    let nats = match std::env::var("TEST_NATS_URL") {
        Ok(u) if !u.trim().is_empty() => u,
        _ => panic!(
            "TEST_NATS_URL is not set, so the broker part of the workers test cannot run: run \
             `cargo xtask test` (it starts nats-server on 127.0.0.1 and sets it), or set \
             TEST_NATS_URL=nats://127.0.0.1:PORT for a nats-server started with -js"
        ),
    };
    runtime().block_on(async {
        let url = fresh_database("chat_panel_workers_nats").await;
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let a = Worker::start_with_broker(&model, &url, Some(&nats));
        let b = Worker::start_with_broker(&model, &url, Some(&nats));
        let c = reqwest::Client::new();
        // a fresh id per run: the broker keeps its streams between runs
        let sid = format!(
            "nats-workers-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        let (status, body) = post(&c, &a.url(), &sid, "hello").await;
        assert_eq!(status, 200, "{body}");
        let mut on_a = sse_client(&a.url(), &sid, None);
        let mut on_b = sse_client(&b.url(), &sid, None);
        let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
        rows_until(&mut on_b, &mut seen_b, |e| {
            row_has(e, "assistant", "I sent you a question")
        })
        .await;

        let bus = toolwright_messaging::MessageBus::connect_nats(&nats).await.unwrap();
        let to = toolwright_chat_panel::user_address(&sid);
        let q = toolwright_messaging::QuickReplies::new(vec!["Yes".into(), "No".into()]).unwrap();
        let first = toolwright_messaging::OutgoingMessage::new("ops-bot", to.clone(), "Deploy finished?")
            .with_quick_replies(q);
        bus.send(first.clone()).await.unwrap();
        bus.send(first).await.unwrap(); // the same message again: dropped by its id
        bus.send(toolwright_messaging::OutgoingMessage::new(
            "ops-bot",
            to,
            "second note",
        ))
        .await
        .unwrap();
        let from_bot = |e: &SseEvent, text: &str| {
            e.data["events"].as_array().is_some_and(|a| {
                a.iter().any(|x| {
                    x["entry"]["kind"] == "message"
                        && x["entry"]["from"] == "ops-bot"
                        && x["entry"]["text"] == text
                })
            })
        };
        for (rx, seen) in [(&mut on_a, &mut seen_a), (&mut on_b, &mut seen_b)] {
            // in either order: each worker pulls from the recipient's consumer, so the one that
            // got the first message may store it after the other stored the second
            for text in ["Deploy finished?", "second note"] {
                if !seen.iter().any(|e| from_bot(e, text)) {
                    rows_until(rx, seen, |e| from_bot(e, text)).await;
                }
            }
            let asked = seen
                .iter()
                .filter(|e| from_bot(e, "Deploy finished?"))
                .collect::<Vec<_>>();
            assert_eq!(asked.len(), 1, "shown once on each worker: {seen:#?}");
        }
        let shown = seen_b
            .iter()
            .flat_map(|e| e.data["events"].as_array().cloned().unwrap_or_default())
            .find(|x| x["entry"]["text"] == "Deploy finished?")
            .unwrap();
        assert_eq!(shown["entry"]["quickReplies"], json!(["Yes", "No"]));

        let db = pg_connect(&url).await;
        let rows = db
            .query(
                "SELECT message FROM ce_messages WHERE session_id = $1 ORDER BY seq",
                &[&sid],
            )
            .await
            .unwrap();
        let texts: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        let count = |needle: &str| texts.iter().filter(|t| t.contains(needle)).count();
        // each message: its call (assistant) and its result (tool), once
        assert_eq!(count("Deploy finished?"), 1, "{texts:#?}");
        assert_eq!(count("second note"), 1, "{texts:#?}");
        assert_eq!(count("deliveredFrom"), 2, "{texts:#?}");
        assert_eq!(
            texts.len(),
            4 + 4,
            "the first turn's 4 rows and 2 pairs: {texts:#?}"
        );

        // addressed to a principal (here `local`, the one person without
        // authentication), not to a conversation id: both workers give the same inbox, the
        // message is stored in it once and shows on both
        let note = format!("Nightly backup done ({sid})");
        bus.send(toolwright_messaging::OutgoingMessage::new(
            "ops-bot",
            toolwright_chat_panel::person_address("local"),
            note.clone(),
        ))
        .await
        .unwrap();
        let inbox = async |base: &str| {
            let r = c.get(format!("{base}api/inbox")).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()["sessionId"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let on_a = inbox(&a.url()).await;
        assert_eq!(inbox(&b.url()).await, on_a, "one inbox on every worker");
        for w in [&a, &b] {
            wait_for("the note in the inbox", async || {
                common::session_state(&w.url(), &on_a).await["entries"]
                    .as_array()
                    .is_some_and(|es| es.iter().any(|e| e["text"] == note.as_str()))
            })
            .await;
        }
        let stored = db
            .query(
                "SELECT count(*) FROM ce_messages WHERE session_id = $1 AND message LIKE '%' || $2 || '%'",
                &[&on_a, &note],
            )
            .await
            .unwrap();
        assert_eq!(stored[0].get::<_, i64>(0), 1, "stored once");
        drop((a, b));
    });
}

/// The shared broker's URL (`TEST_NATS_URL`), or a failure saying how to get one.
fn nats_url() -> String {
    match std::env::var("TEST_NATS_URL") {
        Ok(u) if !u.trim().is_empty() => u,
        _ => panic!(
            "TEST_NATS_URL is not set, so the broker part of the workers test cannot run: run \
             `cargo xtask test` (it starts nats-server on 127.0.0.1 and sets it), or set \
             TEST_NATS_URL=nats://127.0.0.1:PORT for a nats-server started with -js"
        ),
    }
}

/// Polls `f` (every 50 ms, at most 60 s: a hang guard, not a speed check) until it is true.
async fn wait_for(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !f().await {
        assert!(
            std::time::Instant::now() < deadline,
            "waited 60 s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// At least once through the panel ("no message may be lost when one dies"): worker A takes
/// a person's message from the bus but cannot store it (its database is away, so it retries,
/// holding the message unconfirmed) and is SIGKILLed. Worker B, started after, gets the message
/// from the broker (after `ack_wait`) and stores it — once; a message sent after it is stored
/// once too, and nothing comes twice. With the bus acknowledging on hand-out (before this change)
/// the message died with A and B never stored it.
fn workers_nats_a_worker_killed_between_taking_and_storing_a_message_another_stores_it_once() {
    let nats = nats_url();
    runtime().block_on(async {
        let direct = pg::pg_database("chat_panel_workers_ack").await;
        let mut proxy = pg::Proxy::start(pg::pg_addr(&direct)).await;
        let via_proxy = pg::with_db(
            &format!("postgres://postgres@{}/postgres", proxy.addr),
            "ce_chat_panel_workers_ack",
        );
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let a = Worker::start_with_broker(&model, &via_proxy, Some(&nats));
        // a fresh id per run: the broker keeps its streams between runs
        let sid = format!(
            "ack-workers-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        let to = toolwright_chat_panel::user_address(&sid);
        let bus = toolwright_messaging::MessageBus::connect_nats(&nats)
            .await
            .unwrap();
        let send = |text: &str| {
            let m = toolwright_messaging::OutgoingMessage::new("ops-bot", to.clone(), text);
            let bus = bus.clone();
            async move { bus.send(m).await.unwrap() }
        };
        // a message's text is in its stored call (the result says `deliveredFrom`)
        let count =
            |texts: &[String], needle: &str| texts.iter().filter(|t| t.contains(needle)).count();
        // A takes and stores while its database is there
        send("warm-up").await;
        wait_for("A stores the first message", async || {
            count(&stored_texts(&direct, &sid).await, "warm-up") == 1
        })
        .await;

        // the group's consumer: wait until A's is the only pull request waiting (a request of a
        // worker of an earlier test may linger at the broker for up to 10 s), so A takes the next
        let js = async_nats::jetstream::new(async_nats::connect(&nats).await.unwrap());
        let stream = js.get_stream("LLMTK_BUS").await.unwrap();
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            stream.get_consumer("group-user").await.unwrap();
        wait_for("only A waits for the group's messages", async || {
            consumer.info().await.unwrap().num_waiting == 1
        })
        .await;
        proxy.down().await;
        let d = send("taken then killed").await;
        wait_for("A takes the message", async || {
            let info = consumer.info().await.unwrap();
            info.delivered.stream_sequence >= d.id && info.num_ack_pending == 1
        })
        .await;
        // A retries storing, holding the message (it cannot reach its database)
        tokio::time::sleep(Duration::from_millis(500)).await;
        a.kill();
        let b = Worker::start_with_broker(&model, &direct, Some(&nats));
        wait_for("B stores the message A took", async || {
            count(&stored_texts(&direct, &sid).await, "taken then killed") == 1
        })
        .await;
        send("sent after").await;
        wait_for("B stores the next message", async || {
            count(&stored_texts(&direct, &sid).await, "sent after") == 1
        })
        .await;
        let texts = stored_texts(&direct, &sid).await;
        for needle in ["warm-up", "taken then killed", "sent after"] {
            assert_eq!(count(&texts, needle), 1, "{needle} stored once: {texts:#?}");
        }
        // each message: its call (assistant) and its result (tool)
        assert_eq!(texts.len(), 6, "{texts:#?}");
        let info = consumer.info().await.unwrap();
        assert_eq!(info.num_ack_pending, 0, "every message confirmed");
        drop(b);
    });
}

/// `PanelConfig::broker_ack_wait` (`NATS_ACK_WAIT_MS`) is what the broker waits for a worker
/// that took a person's message: the group consumer of the `user` family gets it when a panel's
/// bus subscribes — also when the consumer was left by an earlier worker with another value.
fn workers_nats_the_panels_ack_wait_reaches_the_group_consumer() {
    let nats = nats_url();
    runtime().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&nats).await.unwrap());
        let ack_wait_now = async || -> Option<Duration> {
            let stream = js.get_stream("LLMTK_BUS").await.ok()?;
            let mut c: async_nats::jetstream::consumer::PullConsumer =
                stream.get_consumer("group-user").await.ok()?;
            Some(c.info().await.ok()?.config.ack_wait)
        };
        for ms in [2500, 3500] {
            let config = PanelConfig::default()
                .with_memory_history()
                .with_broker_url(&nats)
                .with_broker_ack_wait(Duration::from_millis(ms));
            let bus = config.bus().await.unwrap();
            let inbox = bus.subscribe_group("user").unwrap();
            wait_for(
                &format!("the group consumer's ack_wait at {ms} ms"),
                async || ack_wait_now().await == Some(Duration::from_millis(ms)),
            )
            .await;
            drop(inbox);
        }
        // back to the default for the tests after this one
        let bus = PanelConfig::default()
            .with_memory_history()
            .with_broker_url(&nats)
            .bus()
            .await
            .unwrap();
        let inbox = bus.subscribe_group("user").unwrap();
        wait_for("the default ack_wait again", async || {
            ack_wait_now().await == Some(Duration::from_secs(10))
        })
        .await;
        drop(inbox);
    });
}

/// The broker goes away mid-conversation (SIGKILL) and comes back, with a worker on
/// PostgreSQL + NATS: while it is down the model's `send_message` gets a typed "unavailable"
/// result it can act on and the turn completes, and another process's send fails with a typed
/// error; once it is back the worker's bus reconnects by itself, the agent's messages go out
/// again, another process's message is stored once — and every row is there once, in order.
fn workers_broker_down_mid_conversation_typed_errors_then_nothing_lost() {
    let broker = fault_env("TEST_NATS_FAULT_URL");
    runtime().block_on(async {
        let url = fresh_database("chat_panel_broker_fault").await;
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let a = Worker::start_with_broker(&model, &url, Some(&broker));
        let c = reqwest::Client::new();
        let sid = format!(
            "broker-fault-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        let bus = toolwright_messaging::MessageBus::connect_nats(&broker)
            .await
            .unwrap();
        let to = toolwright_chat_panel::user_address(&sid);

        // 1. up: the agent's message and another process's message both arrive
        let (status, body) = post(&c, &a.url(), &sid, "ask one").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("Question for ask one"), "{body}");
        bus.send(toolwright_messaging::OutgoingMessage::new(
            "ops-bot",
            to.clone(),
            "note before",
        ))
        .await
        .unwrap();

        // 2. down: typed errors, the conversation goes on
        kill_broker();
        let (status, body) = post(&c, &a.url(), &sid, "ask two").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("event: done"), "the turn completes: {body}");
        let e = bus
            .send(toolwright_messaging::OutgoingMessage::new(
                "ops-bot",
                to.clone(),
                "note lost?",
            ))
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                toolwright_messaging::BusError::BrokerUnavailable { .. }
                    | toolwright_messaging::BusError::NotConfirmed { .. }
            ),
            "{e:?}"
        );
        // the model got a typed "unavailable" result for that call, not a success
        let msgs: Vec<Value> = stored_texts(&url, &sid)
            .await
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        let asked = msgs
            .iter()
            .position(|m| m["role"] == "user" && m["content"] == "ask two")
            .unwrap();
        let result = msgs[asked..]
            .iter()
            .find(|m| m["role"] == "tool")
            .unwrap_or_else(|| panic!("no result for the call while down: {msgs:#?}"));
        let said = result["content"].as_str().unwrap_or_default();
        assert!(
            said.contains("unavailable") || said.contains("did not confirm"),
            "{said}"
        );
        assert!(!said.contains("\"success\":true"), "{said}");

        // 3. back: the worker reconnects by itself; sends work again
        start_broker();
        let port = broker.rsplit(':').next().unwrap().to_owned();
        let up = std::time::Instant::now();
        while std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
            assert!(
                up.elapsed() < Duration::from_secs(20),
                "the broker did not start again"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("broker back after {:?}", up.elapsed());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut k = 0;
        loop {
            k += 1;
            let (status, body) = post(&c, &a.url(), &sid, &format!("ask again {k}")).await;
            assert_eq!(status, 200, "{body}");
            let texts = stored_texts(&url, &sid).await;
            let last_result = texts
                .iter()
                .filter_map(|t| serde_json::from_str::<Value>(t).ok())
                .rfind(|m| m["role"] == "tool");
            if last_result.is_some_and(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("\"success\":true"))
            }) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the worker's bus never came back: {texts:#?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        loop {
            match bus
                .send(toolwright_messaging::OutgoingMessage::new(
                    "ops-bot",
                    to.clone(),
                    "note after",
                ))
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the test's bus never came back: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let texts = loop {
            let texts = stored_texts(&url, &sid).await;
            if texts.iter().any(|t| t.contains("note after")) {
                break texts;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "\"note after\" was never stored: {texts:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let count = |needle: &str| texts.iter().filter(|t| t.contains(needle)).count();
        // each note: its call and its result, once; the one sent while down was refused
        assert_eq!(count("note before"), 1, "{texts:#?}");
        assert_eq!(count("note after"), 1, "{texts:#?}");
        assert_eq!(count("note lost?"), 0, "{texts:#?}");
        // every person's message once, in the order sent
        let users: Vec<String> = texts
            .iter()
            .filter_map(|t| serde_json::from_str::<Value>(t).ok())
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect();
        let mut expected = vec!["ask one".to_owned(), "ask two".to_owned()];
        expected.extend((1..=k).map(|i| format!("ask again {i}")));
        assert_eq!(users, expected);
        drop(a);
    });
}

/// The database goes away mid-conversation (a proxy in front of it refuses and cuts every
/// connection) and comes back: while it is away the panel answers `503` with a JSON error (the
/// store's typed `Unreachable` in the log) and stores nothing; once it is back the conversation
/// goes on in the same worker, every earlier row there once.
fn workers_database_down_mid_conversation_is_503_then_the_conversation_goes_on_nothing_lost() {
    runtime().block_on(async {
        let direct = pg::pg_database("chat_panel_db_fault").await;
        let mut proxy = pg::Proxy::start(pg::pg_addr(&direct)).await;
        let via_proxy = pg::with_db(
            &format!("postgres://postgres@{}/postgres", proxy.addr),
            "ce_chat_panel_db_fault",
        );
        let model = ScriptedServer::start().await;
        model.respond_with(responder);
        let mut cfg = OpenAiConfig::new("scripted");
        cfg.base_url = model.base_url();
        let config = PanelConfig::default().with_database_url(&via_proxy);
        let bus = config.bus().await.unwrap();
        let backend =
            AgentBackend::build(OpenAiModel::new(cfg).unwrap(), bus.clone(), &config, |b| b)
                .await
                .unwrap();
        let panel = ChatPanel::new(backend, bus, config)
            .serve("127.0.0.1:0")
            .await
            .unwrap();
        let c = reqwest::Client::new();
        let sid = "db-fault-session";
        let (status, body) = post(&c, &panel.url(), sid, "hello").await;
        assert_eq!(status, 200, "{body}");

        proxy.down().await;
        let (status, body) = post(&c, &panel.url(), sid, "while the database is away").await;
        assert_eq!(status, 503, "{body}");
        let err: Value = serde_json::from_str(&body).unwrap();
        assert!(
            err["error"]
                .as_str()
                .is_some_and(|e| e.contains("try again")),
            "{body}"
        );
        let state = c
            .get(format!("{}api/sessions/{sid}", panel.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(state.status(), 503);

        proxy.up().await;
        let (status, body) = post(&c, &panel.url(), sid, "back again").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("You said: back again"), "{body}");

        let db = pg_connect(&direct).await;
        let rows = db
            .query(
                "SELECT message FROM ce_messages WHERE session_id = $1 ORDER BY seq",
                &[&sid],
            )
            .await
            .unwrap();
        let texts: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        assert_eq!(
            texts.len(),
            6,
            "the first turn's 4 rows and the last turn's 2: {texts:#?}"
        );
        assert!(texts[0].contains("\"hello\""), "{texts:#?}");
        assert!(texts[4].contains("back again"), "{texts:#?}");
        assert!(
            !texts
                .iter()
                .any(|t| t.contains("while the database is away"))
        );
        let busy: Value = c
            .get(format!("{}api/sessions/{sid}", panel.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(busy["busy"], false, "no lease left behind");
        panel.shutdown().await;
    });
}

/// Item 4: a `DATABASE_URL` nobody answers at is a typed error at start, saying what to do.
fn workers_config_unreachable_database_is_a_typed_error() {
    runtime().block_on(async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(); // closed again: nothing listens there
        let history = HistoryStore::Postgres(format!(
            "postgres://postgres@127.0.0.1:{port}/postgres?connect_timeout=2"
        ));
        assert!(history.is_shared());
        let err = history.open().await.map(|_| ()).unwrap_err();
        assert!(
            matches!(err, PanelError::Store(StoreError::Unreachable { .. })),
            "{err:?}"
        );
        assert!(err.to_string().contains("DATABASE_URL"), "{err}");
        let bad = HistoryStore::Postgres("postgres://[oops".into());
        assert!(matches!(
            bad.open().await.map(|_| ()).unwrap_err(),
            PanelError::Store(StoreError::InvalidUrl { .. })
        ));
    });
}

/// Item 4: a `NATS_URL` nobody answers at is a typed error at start, saying what to do.
fn workers_config_unreachable_broker_is_a_typed_error() {
    runtime().block_on(async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = PanelConfig::default().with_broker_url(format!("nats://127.0.0.1:{port}"));
        let err = config.bus().await.map(|_| ()).unwrap_err();
        assert!(matches!(err, PanelError::Broker { .. }), "{err:?}");
        assert!(err.to_string().contains("NATS_URL"), "{err}");
        // neither set: embedded, as before
        let embedded = PanelConfig::default();
        assert!(!embedded.history.is_shared());
        assert!(embedded.broker.is_none());
        assert!(embedded.bus().await.is_ok());
    });
}

/// `method url` with `Authorization: Bearer token` (none without one) and a JSON body: the
/// status and the whole body (a turn's stream read to its end).
async fn as_bearer(
    token: Option<&str>,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> (u16, String) {
    let mut r = reqwest::Client::new().request(method, url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    common::send(r, body).await
}

/// Identity with two workers: both verify bearer tokens of the same issuer (the test's OpenID
/// provider, its JWKS over HTTP) over one PostgreSQL. Alice's conversation, started on worker 1
/// and waiting for her approval, is read, approved (with the token worker 1 gave her) and
/// continued on worker 2, and stays hers: Bob gets 404 on every endpoint of it on both workers,
/// before and after; the decision recorded names her; no token, no access.
fn workers_a_conversation_stays_its_owners_on_both_workers() {
    use reqwest::Method;
    runtime().block_on(async {
        let url = fresh_database("chat_panel_identity").await;
        let op = oidc::Provider::start().await;
        let model = ScriptedServer::start().await;
        model.respond_with(common::delete_responder);
        let w1 = Worker::start_with_identity(&model, &url, &op.issuer);
        let w2 = Worker::start_with_identity(&model, &url, &op.issuer);
        let alice = oidc::signed_token(&op.issuer, "alice", None);
        let bob = oidc::signed_token(&op.issuer, "bob", None);
        let a = Some(alice.as_str());
        let b = Some(bob.as_str());

        let (s, body) =
            as_bearer(a, Method::POST, &format!("{}api/sessions", w1.url()), None).await;
        assert_eq!(s, 200, "{body}");
        let sid = serde_json::from_str::<Value>(&body).unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        let on = |w: &Worker| format!("{}api/sessions/{sid}", w.url());
        let (s, body) = as_bearer(
            a,
            Method::POST,
            &format!("{}/messages", on(&w1)),
            Some(json!({"text": "delete my notes"})),
        )
        .await;
        assert_eq!(s, 200, "{body}");
        let events = common::sse_events(&body);
        let (_, pending) = events
            .iter()
            .find(|(e, _)| e == "approval")
            .unwrap_or_else(|| panic!("no approval event on worker 1: {body}"));
        let call_id = pending["calls"][0]["id"].as_str().unwrap().to_owned();
        let token = pending["calls"][0]["token"].as_str().unwrap().to_owned();
        let approve =
            json!({"decisions": [{"call_id": call_id, "token": token, "approved": true}]});

        // Bob, and nobody at all, on either worker
        let refused = async |when: &str| {
            for w in [&w1, &w2] {
                let conv = on(w);
                for (what, method, url, body) in [
                    ("read", Method::GET, conv.clone(), None),
                    ("follow", Method::GET, format!("{conv}/events"), None),
                    (
                        "write",
                        Method::POST,
                        format!("{conv}/messages"),
                        Some(json!({"text": "mine now"})),
                    ),
                    (
                        "approve",
                        Method::POST,
                        format!("{conv}/approvals"),
                        Some(approve.clone()),
                    ),
                    (
                        "answer",
                        Method::POST,
                        format!("{conv}/elicitations/1"),
                        Some(json!({"action": "decline"})),
                    ),
                ] {
                    let (s, text) = as_bearer(b, method.clone(), &url, body.clone()).await;
                    assert_eq!(s, 404, "{when}: bob may not {what} on {}: {text}", w.url());
                    assert!(
                        text.contains("no such conversation")
                            && !text.contains("notes")
                            && !text.contains(&token),
                        "{when}: {what} on {}: {text}",
                        w.url()
                    );
                    let (s, text) = as_bearer(None, method, &url, body).await;
                    assert_eq!(
                        s,
                        401,
                        "{when}: {what} without a token on {}: {text}",
                        w.url()
                    );
                }
            }
        };
        refused("while the call waits").await;

        // alice reads it on worker 2: the same call waits
        let (s, body) = as_bearer(a, Method::GET, &on(&w2), None).await;
        assert_eq!(s, 200, "{body}");
        let state: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            state["pending"]["calls"][0]["id"],
            json!(call_id),
            "{state}"
        );
        assert_eq!(state["decisions"], json!([]), "{state}");
        // and approves it there, with the token worker 1 handed out
        let (s, body) = as_bearer(
            a,
            Method::POST,
            &format!("{}/approvals", on(&w2)),
            Some(approve.clone()),
        )
        .await;
        assert_eq!(s, 200, "{body}");
        assert!(
            body.contains("Deleted the file."),
            "the call ran on worker 2: {body}"
        );
        // and goes on there: the next turn is hers too (a new call held for her)
        let (s, body) = as_bearer(
            a,
            Method::POST,
            &format!("{}/messages", on(&w2)),
            Some(json!({"text": "and the backup"})),
        )
        .await;
        assert_eq!(s, 200, "{body}");
        assert!(
            common::sse_events(&body)
                .iter()
                .any(|(e, _)| e == "approval"),
            "{body}"
        );
        refused("after she went on on worker 2").await;
        // both workers show her the same record: one decision, hers
        for w in [&w1, &w2] {
            let (s, body) = as_bearer(a, Method::GET, &on(w), None).await;
            assert_eq!(s, 200, "{body}");
            let state: Value = serde_json::from_str(&body).unwrap();
            let decisions = state["decisions"].as_array().unwrap();
            assert_eq!(decisions.len(), 1, "on {}: {state}", w.url());
            assert_eq!(decisions[0]["principal"], "alice");
            assert_eq!(decisions[0]["callId"], json!(call_id));
            assert_eq!(decisions[0]["approved"], true);
            assert_eq!(
                state["pending"]["calls"].as_array().map(Vec::len),
                Some(1),
                "{state}"
            );
        }
        // the turn she continued on worker 2 is stored
        let rows = stored_texts(&url, &sid).await;
        assert!(
            rows.iter().any(|r| r.contains("and the backup")),
            "{rows:?}"
        );
    });
}
