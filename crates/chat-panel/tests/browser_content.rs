//! Sounds and files in the panel, in a real headless Chromium (chromedriver + fantoccini): a
//! tool's sound plays in place and its files are download links, served safely (an HTML page
//! or an SVG a hostile tool hands over is never rendered or run); a person's attached file
//! reaches the model as a file part.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `cargo xtask test` installs them), or `CHROME_BIN` / `CHROMEDRIVER`.
//! Missing browser = failing test, never a skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "common/browser.rs"]
mod chrome;
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use chrome::{BROWSER_LOCK, Browser};
use serde_json::{Value, json};
use toolwright_core::{Media, Part};

/// A listener on 127.0.0.1 that counts the connections made to it: the hostile files call it
/// home if the browser ever runs them.
async fn tripwire() -> (String, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            h.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (format!("http://{addr}"), hits)
}

/// The agent with `record`: a tool answering a sound, a PDF, and what a hostile tool would
/// hand over — a web page as a file, an SVG calling itself a PNG, and an SVG as itself — each
/// of which calls `home` if run.
fn with_record_tool(
    home: &str,
) -> impl FnOnce(toolwright_tool_system::AgentBuilder) -> toolwright_tool_system::AgentBuilder {
    let page = format!(
        "<!doctype html><script>fetch('{home}/html-script')</script><img src='{home}/html-img'>"
    );
    let svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' onload=\"fetch('{home}/svg-onload')\"><script>fetch('{home}/svg-script')</script><image href='{home}/svg-image'/></svg>"
    );
    let parts = vec![
        Part::Audio(
            Media::bytes(&common::tone_wav(), "audio/wav")
                .unwrap()
                .with_name("tone.wav"),
        ),
        Part::File(
            Media::bytes(common::REPORT_PDF, "application/pdf")
                .unwrap()
                .with_name("report.pdf"),
        ),
        Part::File(
            Media::bytes(page.as_bytes(), "text/html")
                .unwrap()
                .with_name("page.html"),
        ),
        Part::Image(
            Media::bytes(svg.as_bytes(), "image/png")
                .unwrap()
                .with_name("not-a.png"),
        ),
        Part::Image(
            Media::bytes(svg.as_bytes(), "image/svg+xml")
                .unwrap()
                .with_name("drawing.svg"),
        ),
    ];
    move |b| {
        b.tool(common::PictureTool {
            name: "record",
            parts,
        })
    }
}

/// `[kind, text, href]` of the media shown in entries matching `css`: `audio` (its name line),
/// `file` (the link's words), `img`, or `line` (named, not served).
async fn shown_media(b: &Browser, css: &str) -> Value {
    b.js(&format!(
        "return Array.from(document.querySelectorAll({css:?} + ' .images > *')).map(e =>
           e.classList.contains('audio') ? ['audio', e.textContent, e.querySelector('audio').getAttribute('src')]
           : e.tagName === 'A' ? ['file', e.textContent, e.getAttribute('href')]
           : e.tagName === 'IMG' ? ['img', e.alt, e.getAttribute('src')]
           : ['line', e.textContent, null]);"
    ))
    .await
}

#[tokio::test]
async fn a_tools_sound_plays_and_its_files_download_and_a_hostile_page_or_svg_never_runs() {
    let _one = BROWSER_LOCK.lock().await;
    let (home, hits) = tripwire().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        with_record_tool(&home),
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    b.type_and_send("call record").await;
    b.wait_for_text(".entry-assistant .text", "Here is the chart.", false)
        .await;
    b.idle().await;
    // the sound: the browser's player, its one second read from the served WAV
    let played = "Array.from(document.querySelectorAll('.entry-tool .images audio')).some(a => a.readyState >= 1 && Math.abs(a.duration - 1) < 0.01)";
    b.wait_until("the tool's sound, its length read", played)
        .await;
    let shown = shown_media(&b, ".entry-tool").await;
    let kinds: Vec<&str> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m[0].as_str().unwrap())
        .collect();
    // the sound, the two files as links, the two SVGs named in a line: no picture shown
    assert_eq!(kinds, ["audio", "file", "file", "line", "line"], "{shown}");
    assert!(
        shown[0][1]
            .as_str()
            .unwrap()
            .starts_with("tone.wav (audio/wav, 16 KiB)"),
        "{shown}"
    );
    assert_eq!(
        shown[1][1],
        json!(format!(
            "report.pdf (application/pdf, {} bytes)",
            common::REPORT_PDF.len()
        ))
    );
    assert!(
        shown[2][1]
            .as_str()
            .unwrap()
            .starts_with("page.html (text/html,"),
        "{shown}"
    );
    // the PDF opens in a new tab; the others are downloads
    let targets = b
        .js("return Array.from(document.querySelectorAll('.entry-tool a.file-link')).map(a => [a.target, a.hasAttribute('download')]);")
        .await;
    assert_eq!(targets, json!([["_blank", false], ["", true]]));

    // what the panel serves for each part of the tool's message: the sound in place, the PDF
    // as a PDF download, the page as bytes of no type to download, and neither SVG at all
    let base = fx.url().trim_end_matches('/').to_owned();
    let get = |src: String| {
        let url = format!("{base}{src}");
        async move { reqwest::get(url).await.unwrap() }
    };
    let audio = get(shown[0][2].as_str().unwrap().to_owned()).await;
    let h = audio.headers().clone();
    assert_eq!(h["content-type"], "audio/wav");
    assert_eq!(h["content-disposition"], "inline");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(&audio.bytes().await.unwrap()[..], &common::tone_wav()[..]);
    let pdf = get(shown[1][2].as_str().unwrap().to_owned()).await;
    let h = pdf.headers().clone();
    assert_eq!(h["content-type"], "application/pdf");
    assert_eq!(h["content-disposition"], "attachment");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(&pdf.bytes().await.unwrap()[..], common::REPORT_PDF);
    let page_src = shown[2][2].as_str().unwrap().to_owned();
    let page = get(page_src.clone()).await;
    let h = page.headers().clone();
    assert_eq!(h["content-type"], "application/octet-stream");
    assert_eq!(h["content-disposition"], "attachment");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["content-security-policy"], "default-src 'none'; sandbox");
    // every part of the tool's message (and past it): never served as a page or an SVG
    let (row, _) = page_src
        .rsplit('/')
        .next()
        .unwrap()
        .split_once('-')
        .unwrap();
    let sid = b.session_id().await;
    let mut served = Vec::new();
    for k in 0..8 {
        let r = get(format!("/api/sessions/{sid}/media/{row}-{k}")).await;
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        served.push((r.status().as_u16(), ct));
    }
    for (status, ct) in &served {
        assert!(
            !ct.contains("html") && !ct.contains("svg") && !ct.contains("xml"),
            "{served:?}"
        );
        assert!(*status == 200 || *status == 404, "{served:?}");
    }
    // the two SVG pictures: not served at all
    assert_eq!(served[3].0, 404, "{served:?}");
    assert_eq!(served[4].0, 404, "{served:?}");

    // the person opens the page's link, and goes to each media address by hand: nothing runs
    b.js("document.querySelectorAll('.entry-tool a.file-link')[1].click(); return 1;")
        .await;
    for k in 0..5 {
        let url = format!("{base}/api/sessions/{sid}/media/{row}-{k}");
        let _ = tokio::time::timeout(Duration::from_secs(10), b.client.goto(&url)).await;
    }
    b.open(&fx).await;
    b.wait_until(
        "the tool's sound after a reload",
        "document.querySelectorAll('.entry-tool .images audio').length === 1",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the hostile page or SVG ran in the browser"
    );
    b.close().await;
}

/// A file `bytes` saved as `name` in a fresh directory, for the page's file picker.
fn attachment(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

/// The last user message the model was sent.
fn last_user(fx: &common::Fixture) -> Value {
    let sent = fx.model.requests().last().unwrap().body.clone();
    sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap()
        .clone()
}

#[tokio::test]
async fn an_attached_file_and_sound_reach_the_model_as_parts_and_other_types_are_refused() {
    let _one = BROWSER_LOCK.lock().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    let b = Browser::start().await;
    b.open(&fx).await;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);

    // a PDF: a file part, with its name, on the wire; a download link in the conversation
    let (_d1, pdf) = attachment("report.pdf", common::REPORT_PDF);
    b.attach(&pdf).await;
    b.wait_until(
        "the attached file's name",
        "document.getElementById('attached').textContent.startsWith('report.pdf')",
    )
    .await;
    b.type_and_send("summarise this").await;
    b.wait_for_text(".entry-assistant .text", "You said: summarise this", false)
        .await;
    b.idle().await;
    let user = last_user(&fx);
    assert_eq!(common::wire_text(&user), "summarise this");
    assert_eq!(
        common::wire_files(&user),
        [(
            "report.pdf".to_owned(),
            format!("data:application/pdf;base64,{}", b64(common::REPORT_PDF))
        )],
        "{user}"
    );
    let shown = b
        .js("return Array.from(document.querySelectorAll('.entry-user a.file-link')).map(a => a.textContent);")
        .await;
    assert_eq!(
        shown,
        json!([format!(
            "report.pdf (application/pdf, {} bytes)",
            common::REPORT_PDF.len()
        )])
    );

    // a WAV: a sound part (the wire's input_audio), played in the conversation
    let wav = common::tone_wav();
    let (_d2, tone) = attachment("tone.wav", &wav);
    b.attach(&tone).await;
    b.wait_until(
        "the attached sound's name",
        "document.getElementById('attached').textContent.startsWith('tone.wav')",
    )
    .await;
    b.type_and_send("hear this").await;
    b.wait_for_text(".entry-assistant .text", "You said: hear this", false)
        .await;
    b.idle().await;
    assert_eq!(
        common::wire_files(&last_user(&fx)),
        [("audio/wav".to_owned(), b64(&wav))]
    );
    b.wait_until(
        "the person's sound, its length read",
        "Array.from(document.querySelectorAll('.entry-user .images audio')).some(a => a.readyState >= 1 && Math.abs(a.duration - 1) < 0.01)",
    )
    .await;

    // a web page: refused in the page, with the types it takes; nothing is sent
    let before = fx.model.request_count();
    let (_d3, html) = attachment("page.html", b"<script>alert(1)</script>");
    b.attach(&html).await;
    b.wait_until(
        "the refusal of a web page",
        "Array.from(document.querySelectorAll('.entry-error .text')).some(e => e.textContent.includes('page.html') && e.textContent.includes('application/pdf'))",
    )
    .await;
    assert_eq!(
        b.js("return document.getElementById('attached').hidden;")
            .await,
        json!(true)
    );
    // and by the server, for a client that did not check: a type it does not take, or bytes
    // that are not the type claimed
    let sid = b.session_id().await;
    let url = format!("{}api/sessions/{sid}/messages", fx.url());
    let body = |ty: &str, bytes: &[u8]| json!({"text": "see", "attachments": [{"mediaType": ty, "name": "x", "data": b64(bytes)}]});
    for (what, body, says) in [
        (
            "HTML",
            body("text/html", b"<script>alert(1)</script>"),
            "does not take \"text/html\"",
        ),
        (
            "HTML called a PDF",
            body("application/pdf", b"<script>alert(1)</script>"),
            "not a application/pdf",
        ),
        (
            "a page called a sound",
            body("audio/mpeg", b"<script>alert(1)</script>"),
            "not a audio/mpeg",
        ),
    ] {
        let (s, text) = common::send(reqwest::Client::new().post(&url), Some(body)).await;
        assert_eq!(s, 415, "{what}: {text}");
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

/// npm's server-everything over stdio, started.
async fn everything() -> toolwright_mcp_bridge::McpBridge {
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
    bridge
}

#[tokio::test]
async fn a_real_servers_resource_and_prompt_are_offered_in_the_panel_and_reach_the_model() {
    let _one = BROWSER_LOCK.lock().await;
    let bridge = everything().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    fx.chat.offer_mcp(&bridge);
    let b = Browser::start().await;
    b.open(&fx).await;
    b.wait_until("the offers list", "document.body.dataset.offers === '1'")
        .await;
    let doc = "demo://resource/static/document/features.md";
    let prompts = b
        .js("return Array.from(document.querySelectorAll('#prompts button')).map(b => b.dataset.prompt);")
        .await;
    assert!(
        prompts
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "completable-prompt"),
        "{prompts}"
    );

    // a resource chosen goes with the next message: the model reads its text
    b.click(&format!("#resources button[data-uri={doc:?}]"))
        .await;
    b.wait_until(
        "the chosen resource",
        "!document.getElementById('chosen').hidden",
    )
    .await;
    b.type_and_send("what does it say").await;
    b.wait_for_text(".entry-assistant .text", "You said: what does it say", true)
        .await;
    b.idle().await;
    let on_disk = std::fs::read_to_string(
        testkit::npm_mcp_server("server-everything")
            .unwrap()
            .parent()
            .unwrap()
            .join("docs/features.md"),
    )
    .unwrap();
    let user = last_user(&fx);
    let text = common::wire_text(&user);
    assert!(
        text.starts_with(&format!(
            "what does it say [resource {doc} from everything]\n"
        )),
        "{text}"
    );
    assert!(text.ends_with(&on_disk), "the whole document: {text}");
    // the conversation names it under the person's text; the choice is cleared
    let named = b
        .js("return Array.from(document.querySelectorAll('.entry-user .image-text')).map(e => e.textContent);")
        .await;
    assert_eq!(named, json!([format!("[resource {doc} from everything]")]));
    assert_eq!(
        b.js("return document.getElementById('chosen').hidden;")
            .await,
        json!(true)
    );

    // a prompt: its arguments asked for, the server's completions offered as they are typed
    b.click("#prompts button[data-prompt='completable-prompt']")
        .await;
    b.wait_until(
        "the prompt's form",
        "document.querySelectorAll('#prompt-form input').length === 2",
    )
    .await;
    b.js("const i = document.querySelector('#prompt-form input[name=department]'); i.value = 'S'; i.dispatchEvent(new Event('input')); return 1;")
        .await;
    b.wait_until(
        "the completions of 'S'",
        "Array.from(document.querySelectorAll('#prompt-form datalist')[0].options).map(o => o.value).join() === 'Sales,Support'",
    )
    .await;
    b.js("document.querySelector('#prompt-form input[name=department]').value = 'Sales'; document.querySelector('#prompt-form input[name=name]').value = 'Eve'; return 1;")
        .await;
    b.click("#prompt-form .use-prompt").await;
    let promoted = "Please promote Eve to the head of the Sales team.";
    b.wait_until(
        "the prompt in the input",
        &format!("document.getElementById('input').value === {promoted:?}"),
    )
    .await;
    b.click("#send").await;
    b.wait_for_text(
        ".entry-assistant .text",
        &format!("You said: {promoted}"),
        false,
    )
    .await;
    b.idle().await;

    // a prompt without its required argument: the server's reason, shown
    b.click("#prompts button[data-prompt='args-prompt']").await;
    b.wait_until(
        "the prompt's form",
        "document.querySelector('#prompt-form').dataset.prompt === 'args-prompt' && !document.querySelector('#prompt-form').hidden",
    )
    .await;
    b.click("#prompt-form .use-prompt").await;
    b.wait_until(
        "the refusal naming the argument",
        "Array.from(document.querySelectorAll('.entry-error .text')).some(e => e.textContent.includes('args-prompt') && e.textContent.includes('city'))",
    )
    .await;

    // a binary resource (server-everything's blob template): a file part named by its URI
    let sid = b.session_id().await;
    let url = format!("{}api/sessions/{sid}/messages", fx.url());
    let blob = "demo://resource/dynamic/blob/3";
    let one = json!({"service": "everything", "uri": blob});
    let (s, text) = common::send(
        reqwest::Client::new().post(&url),
        Some(json!({"text": "and this", "resources": [one]})),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let files = common::wire_files(&last_user(&fx));
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].0, blob);
    let data = files[0].1.strip_prefix("data:text/plain;base64,").unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    assert!(
        String::from_utf8(bytes)
            .unwrap()
            .starts_with("Resource 3: This is a base64 blob"),
        "{data}"
    );
    // more than three resources in one message: refused, nothing runs
    let before = fx.model.request_count();
    let (s, text) = common::send(
        reqwest::Client::new().post(&url),
        Some(json!({"text": "all of them", "resources": [one, one, one, one]})),
    )
    .await;
    assert_eq!(s, 400, "{text}");
    assert!(text.contains("at most 3 resources"), "{text}");
    assert_eq!(fx.model.request_count(), before);
    b.close().await;

    // a panel that does not offer them: 404, and no list in the page
    let plain = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    for path in ["api/mcp", "api/mcp/events"] {
        let r = reqwest::get(format!("{}{path}", plain.url()))
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    let body = json!({"text": "hi", "resources": [{"service": "everything", "uri": doc}]});
    let url = format!("{}api/sessions/conv-00000001/messages", plain.url());
    let (s, text) = common::send(reqwest::Client::new().post(&url), Some(body)).await;
    assert_eq!(s, 404, "{text}");
    assert_eq!(plain.model.request_count(), 0);
    bridge.stop("everything").await.unwrap();
}

/// The person's switch for learning from their requests: shown when the bridge learns from
/// use, off until they say yes, kept for their principal, and saying no again is kept too.
#[tokio::test]
async fn a_person_turns_learning_from_their_requests_on_and_off_in_the_panel() {
    let _one = BROWSER_LOCK.lock().await;
    let bridge = toolwright_mcp_bridge::McpBridge::new();
    bridge
        .set_learn_from_use(Some(toolwright_mcp_bridge::LearnFromUse::new(100)))
        .await
        .unwrap();
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    fx.chat.offer_mcp(&bridge);
    let b = Browser::start().await;
    b.open(&fx).await;
    b.wait_until("the offers list", "document.body.dataset.offers === '1'")
        .await;
    let shown = b
        .js("return [document.getElementById('learn-consent-row').hidden, document.getElementById('learn-consent').checked];")
        .await;
    assert_eq!(shown, json!([false, false]), "shown, and off by default");
    assert_eq!(bridge.learning_consent("local").await.unwrap(), Some(false));

    b.click("#learn-consent").await;
    b.wait_until(
        "the kept yes",
        "document.body.dataset.learnConsent === 'true'",
    )
    .await;
    assert_eq!(bridge.learning_consent("local").await.unwrap(), Some(true));
    // a reload shows what was kept
    b.open(&fx).await;
    b.wait_until("the offers list", "document.body.dataset.offers === '1'")
        .await;
    assert_eq!(
        b.js("return document.getElementById('learn-consent').checked;")
            .await,
        json!(true)
    );
    b.click("#learn-consent").await;
    b.wait_until(
        "the kept no",
        "document.body.dataset.learnConsent === 'false'",
    )
    .await;
    assert_eq!(bridge.learning_consent("local").await.unwrap(), Some(false));

    // without learning the switch is not shown, and the route says why
    bridge.set_learn_from_use(None).await.unwrap();
    b.open(&fx).await;
    b.wait_until("the offers list", "document.body.dataset.offers === '1'")
        .await;
    assert_eq!(
        b.js("return document.getElementById('learn-consent-row').hidden;")
            .await,
        json!(true)
    );
    b.js("fetch('/api/mcp/learning', {method: 'POST', headers: {'content-type': 'application/json'}, body: '{\"consents\": true}'}).then(async r => { document.body.dataset.refused = r.status + ' ' + (await r.json()).error; }); return 1;")
        .await;
    b.wait_until("the refusal", "!!document.body.dataset.refused")
        .await;
    let refused = b.js("return document.body.dataset.refused;").await;
    assert!(
        refused.as_str().unwrap().starts_with("404 ")
            && refused.as_str().unwrap().contains("does not learn"),
        "{refused}"
    );
    b.close().await;
}

/// A resource template in the panel: the person fills server-everything's text template with a
/// value the server suggests, reads the resource and sends it — its text reaches the model.
/// Values the template does not take, and a resource larger than a message may carry, are
/// refused with a sentence the page shows.
#[tokio::test]
async fn a_person_fills_a_resource_template_with_a_completion_and_the_resource_reaches_the_model() {
    let _one = BROWSER_LOCK.lock().await;
    let bridge = everything().await;
    // the blob template's few dozen bytes are more than this panel's attachments may be
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default().with_max_image_bytes(16),
        common::picture_responder,
        |b| b,
    )
    .await;
    fx.chat.offer_mcp(&bridge);
    let b = Browser::start().await;
    b.open(&fx).await;
    b.wait_until("the offers list", "document.body.dataset.offers === '1'")
        .await;
    let text_template = "demo://resource/dynamic/text/{resourceId}";
    b.click(&format!(
        "#templates button[data-template={text_template:?}]"
    ))
    .await;
    b.wait_until(
        "the template's form",
        "document.querySelectorAll('#template-form input[name=resourceId]').length === 1",
    )
    .await;
    // typed: the server's completion offered; chosen
    b.js("const i = document.querySelector('#template-form input[name=resourceId]'); i.value = '7'; i.dispatchEvent(new Event('input')); return 1;")
        .await;
    b.wait_until(
        "the completion of '7'",
        "Array.from(document.querySelector('#template-form datalist').options).map(o => o.value).join() === '7'",
    )
    .await;
    b.js("const i = document.querySelector('#template-form input[name=resourceId]'); i.value = document.querySelector('#template-form datalist').options[0].value; return 1;")
        .await;
    b.click("#template-form .read-template").await;
    let uri = "demo://resource/dynamic/text/7";
    b.wait_until(
        "the resource read and chosen",
        &format!("document.getElementById('template-form').dataset.read === {uri:?} && !document.getElementById('chosen').hidden"),
    )
    .await;
    let preview = b
        .js("return document.querySelector('#template-form .preview').textContent;")
        .await;
    assert!(
        preview
            .as_str()
            .unwrap()
            .contains("Resource 7: This is a plaintext resource"),
        "{preview}"
    );
    b.type_and_send("what does it say").await;
    b.wait_for_text(".entry-assistant .text", "You said: what does it say", true)
        .await;
    b.idle().await;
    let text = common::wire_text(&last_user(&fx));
    assert!(
        text.starts_with(&format!(
            "what does it say [resource {uri} from everything]\nResource 7: This is a plaintext resource created at"
        )),
        "{text}"
    );

    // refused, each with its reason in the page, nothing chosen and nothing sent
    let before = fx.model.request_count();
    for (value, reason) in [("", "fill in \"resourceId\""), ("..", "does not make")] {
        b.js(&format!("document.querySelector('#template-form input[name=resourceId]').value = {value:?}; return 1;"))
            .await;
        b.click("#template-form .read-template").await;
        b.wait_until(
            &format!("the refusal of {value:?}"),
            &format!("Array.from(document.querySelectorAll('.entry-error .text')).some(e => e.textContent.includes({reason:?}))"),
        )
        .await;
    }
    assert_eq!(
        b.js("return document.getElementById('chosen').hidden;")
            .await,
        json!(true)
    );
    let post = |body: Value| {
        let url = format!("{}api/mcp/template", fx.url());
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (s, text) = post(json!({"service": "everything",
        "uriTemplate": "demo://resource/dynamic/blob/{resourceId}", "arguments": {"resourceId": "3"}}))
    .await;
    assert_eq!(
        s, 413,
        "a binary resource larger than an attachment: {text}"
    );
    assert!(text.contains("attachments may be at most"), "{text}");
    let (s, text) = post(
        json!({"service": "everything", "uriTemplate": "demo://elsewhere/{x}",
        "arguments": {"x": "1"}}),
    )
    .await;
    assert_eq!(s, 404, "a template the server does not offer: {text}");
    let (s, text) = post(
        json!({"service": "everything", "uriTemplate": text_template,
        "arguments": {"resourceId": "1", "path": "/etc"}}),
    )
    .await;
    assert_eq!(s, 400, "a name the template lacks: {text}");
    assert!(text.contains("it takes resourceId"), "{text}");
    // completing asks for exactly one of a prompt and a template
    let r = reqwest::Client::new()
        .post(format!("{}api/mcp/complete", fx.url()))
        .json(
            &json!({"service": "everything", "prompt": "p", "uriTemplate": text_template,
                      "argument": "resourceId", "value": "1"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(fx.model.request_count(), before);
    b.close().await;
    bridge.stop("everything").await.unwrap();
}

/// The side list kept live: a tool of server-everything registers a resource, the server says
/// its resource list changed, and the open page lists it without a reload; a subscribed
/// resource the server says changed is marked.
#[tokio::test]
async fn a_servers_list_changed_shows_the_new_resource_in_the_open_page_without_a_reload() {
    let _one = BROWSER_LOCK.lock().await;
    let bridge = everything().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    fx.chat.offer_mcp(&bridge);
    let b = Browser::start().await;
    b.open(&fx).await;
    b.wait_until("the offers list", "document.body.dataset.offers === '1'")
        .await;
    // the page is this one throughout: a reload would lose the mark
    b.js("window.notReloaded = true; return 1;").await;
    let new = "demo://resource/session/notes.txt.gz";
    assert_eq!(
        b.js(&format!(
            "return !!document.querySelector('#resources button[data-uri={new:?}]');"
        ))
        .await,
        json!(false)
    );
    bridge
        .call(
            "everything__gzip-file-as-resource",
            json!({"name": "notes.txt.gz", "data": "data:text/plain,hello", "outputType": "resourceLink"}),
        )
        .await
        .unwrap();
    b.wait_until(
        "the new resource in the list",
        &format!("!!document.querySelector('#resources button[data-uri={new:?}]')"),
    )
    .await;
    assert_eq!(
        b.js("return window.notReloaded === true;").await,
        json!(true)
    );

    // a subscribed resource that changed is marked (server-everything says so every 5 s)
    let doc = "demo://resource/static/document/features.md";
    bridge.subscribe("everything", doc).await.unwrap();
    bridge
        .call("everything__toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    b.wait_until(
        "the changed resource marked",
        &format!(
            "document.querySelector('#resources button[data-uri={doc:?}]').dataset.updated === '1'"
        ),
    )
    .await;
    assert_eq!(
        b.js("return window.notReloaded === true;").await,
        json!(true)
    );
    b.close().await;
    bridge.stop("everything").await.unwrap();
}

/// A storm of list changes from a real server reaches twenty open pages as at most one
/// `changed` event a second each, naming what changed: server-everything registers a resource
/// 30 times in a row, each time saying its resource list changed.
#[tokio::test]
async fn a_storm_of_list_changes_is_at_most_one_event_a_second_to_each_page() {
    use futures::StreamExt as _;
    let bridge = everything().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    fx.chat.offer_mcp(&bridge);
    let client = reqwest::Client::new();
    let mut pages = Vec::new();
    for _ in 0..20 {
        let r = client
            .get(format!("{}api/mcp/events", fx.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        pages.push(r.bytes_stream());
    }
    let started = std::time::Instant::now();
    for i in 0..30 {
        bridge
            .call(
                "everything__gzip-file-as-resource",
                json!({"name": format!("storm-{i}.gz"), "data": "data:text/plain,x", "outputType": "resourceLink"}),
            )
            .await
            .unwrap();
    }
    let storm = started.elapsed();
    // what each page heard until a second after the storm's last notice could be sent
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    let mut heard = Vec::new();
    for page in &mut pages {
        let mut text = String::new();
        while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(until, page.next()).await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let events: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect();
        heard.push(events);
    }
    let elapsed = started.elapsed();
    let most = elapsed.as_secs_f64().floor() as usize + 1;
    for events in &heard {
        assert!(
            !events.is_empty() && events.len() <= most,
            "30 notices in {storm:?}: {} events in {elapsed:?} (at most {most})",
            events.len()
        );
        assert!(
            events
                .iter()
                .all(|e| e["lists"] == json!([{"service": "everything", "list": "resources"}])),
            "{events:?}"
        );
    }
    eprintln!(
        "30 list_changed notices in {storm:?}: {} events to each of 20 pages in {elapsed:?}",
        heard[0].len()
    );
    bridge.stop("everything").await.unwrap();
}

/// The person watches a resource from the side list: the server then says when it changes and
/// the page marks it, the watch shows again after a reload, and the person's unwatch leaves
/// the application's own subscription to the same resource with the server.
#[tokio::test]
async fn a_person_watches_a_resource_sees_it_change_and_their_unwatch_leaves_the_applications() {
    use toolwright_mcp_bridge::{McpNotice, Subscriber};
    let _one = BROWSER_LOCK.lock().await;
    let bridge = everything().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    fx.chat.offer_mcp(&bridge);
    let person = Subscriber::Person("local".into()); // the principal of a panel without sign-in
    let doc = "demo://resource/static/document/features.md";
    let watch = format!("#resources button.watch[data-watch-uri={doc:?}]");
    let b = Browser::start().await;
    b.open(&fx).await;
    b.wait_until("the offers list", "document.body.dataset.offers === '1'")
        .await;
    assert_eq!(
        b.js(&format!(
            "return document.querySelector('{watch}').getAttribute('aria-pressed');"
        ))
        .await,
        json!("false")
    );
    b.click(&watch).await;
    b.wait_until(
        "the watch switched on",
        &format!("document.querySelector('{watch}').getAttribute('aria-pressed') === 'true'"),
    )
    .await;
    assert_eq!(
        bridge.subscriptions_of(&person),
        vec![("everything".to_owned(), doc.to_owned())]
    );

    // the server says the watched resource changed (every 5 s once asked to), the page marks it
    bridge
        .call("everything__toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    b.wait_until(
        "the watched resource marked changed",
        &format!(
            "document.querySelector('#resources button[data-uri={doc:?}]').dataset.updated === '1'"
        ),
    )
    .await;

    // after a reload the page still shows it watched
    b.open(&fx).await;
    b.wait_until(
        "the offers list again",
        "document.body.dataset.offers === '1'",
    )
    .await;
    b.wait_until(
        "the watch shown after a reload",
        &format!("document.querySelector('{watch}').getAttribute('aria-pressed') === 'true'"),
    )
    .await;

    // the application holds the same resource; the person stops watching
    bridge.subscribe("everything", doc).await.unwrap();
    let mut rx = bridge.notices();
    b.click(&watch).await;
    b.wait_until(
        "the watch switched off",
        &format!("document.querySelector('{watch}').getAttribute('aria-pressed') === 'false'"),
    )
    .await;
    assert!(bridge.subscriptions_of(&person).is_empty());
    // the server was not told to unsubscribe: its next update comes before any unsubscribe log
    let seen = tokio::time::timeout(Duration::from_secs(12), async {
        loop {
            match rx.recv().await.unwrap() {
                n @ McpNotice::ResourceUpdated { .. } => return n,
                n @ McpNotice::Log { .. } if format!("{n:?}").contains("Unsubscribe") => return n,
                _ => {}
            }
        }
    })
    .await
    .expect("no update or unsubscribe within 12 s");
    assert!(
        matches!(&seen, McpNotice::ResourceUpdated { uri, .. } if uri == doc),
        "the person's unwatch ended the application's subscription: {seen:?}"
    );
    b.close().await;
    bridge.stop("everything").await.unwrap();
}

/// `POST /api/mcp/watch` over HTTP: the person's watches are listed in `GET /api/mcp`,
/// bounded per person with a sentence saying what to do, and bad input is refused.
#[tokio::test]
async fn a_persons_watches_are_listed_bounded_and_checked() {
    let bridge = everything().await;
    let fx = common::start_with_agent(
        toolwright_chat_panel::PanelConfig::default(),
        common::picture_responder,
        |b| b,
    )
    .await;
    fx.chat.offer_mcp(&bridge);
    let client = reqwest::Client::new();
    let watch = |uri: String, on: bool| {
        client
            .post(format!("{}api/mcp/watch", fx.url()))
            .json(&json!({"service": "everything", "uri": uri, "watch": on}))
            .send()
    };
    let most = toolwright_mcp_bridge::MAX_PERSON_SUBSCRIPTIONS;
    for i in 0..most {
        let r = watch(format!("demo://resource/dynamic/text/{i}"), true)
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let j: Value = r.json().await.unwrap();
        assert_eq!(j["watched"].as_array().unwrap().len(), i + 1);
    }
    let r = watch("demo://resource/dynamic/text/more".into(), true)
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let j: Value = r.json().await.unwrap();
    assert!(
        j["error"]
            .as_str()
            .unwrap()
            .contains("stop watching one first"),
        "{j}"
    );
    // unwatching makes room
    let r = watch("demo://resource/dynamic/text/0".into(), false)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = watch("demo://resource/dynamic/text/more".into(), true)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let listed: Value = client
        .get(format!("{}api/mcp", fx.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let watched = listed["watched"].as_array().unwrap();
    assert_eq!(watched.len(), most);
    assert!(
        watched.contains(
            &json!({"service": "everything", "uri": "demo://resource/dynamic/text/more"})
        )
    );
    assert!(
        !watched
            .contains(&json!({"service": "everything", "uri": "demo://resource/dynamic/text/0"}))
    );
    // bad input
    assert_eq!(watch(String::new(), true).await.unwrap().status(), 400);
    assert_eq!(watch("x".repeat(5000), true).await.unwrap().status(), 400);
    let r = client
        .post(format!("{}api/mcp/watch", fx.url()))
        .json(&json!({"service": "nobody", "uri": "a://b", "watch": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .post(format!("{}api/mcp/watch", fx.url()))
        .json(&json!({"service": "everything", "uri": "a://b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    bridge.stop("everything").await.unwrap();
}
