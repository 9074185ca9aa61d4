//! The forward pass held to its oracles: candle's quantized llama (SmolLM2) and llama.cpp's
//! greedy tokens (Gemma 3), and bit-identical logits however a sequence is split or batched.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use super::load::matrix;
use super::*;
use crate::gguf::Content;
use crate::test_support::{candle_values, fetched, max_diff};
use crate::tokenizer::LocalTokenizer;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;

/// candle's copy of a GGUF with the matrices `pick` chooses re-quantised to Q8_0 by candle.
fn candle_requantized(bytes: &[u8], pick: impl Fn(GgmlDType) -> bool) -> Vec<u8> {
    let dev = &Device::Cpu;
    let mut r = std::io::Cursor::new(bytes);
    let content = gguf_file::Content::read(&mut r).unwrap();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(&str, QTensor)> = Vec::new();
    for name in names {
        let qt = content.tensor(&mut r, name, dev).unwrap();
        let qt = if pick(qt.dtype()) && qt.shape().dims().len() == 2 {
            QTensor::quantize(&qt.dequantize(dev).unwrap(), GgmlDType::Q8_0).unwrap()
        } else {
            qt
        };
        tensors.push((name.as_str(), qt));
    }
    let metadata: Vec<_> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<_> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut mem = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut mem, &metadata, &refs).unwrap();
    mem.into_inner()
}

/// Our weights of a GGUF file's bytes.
fn ours(bytes: &[u8]) -> Weights {
    let mut r = std::io::Cursor::new(bytes);
    let ct = Content::read(&mut r).unwrap();
    Weights::from_gguf(&ct, &mut r).unwrap()
}

/// candle's quantized llama of a GGUF file's bytes.
fn theirs(bytes: &[u8]) -> ModelWeights {
    let mut r = std::io::Cursor::new(bytes);
    let ct = gguf_file::Content::read(&mut r).unwrap();
    ModelWeights::from_gguf(ct, &mut r, &Device::Cpu).unwrap()
}

/// The default model (LOCAL_MODEL_PATH, else fetched into the cache).
fn model_path() -> std::path::PathBuf {
    fetched(
        "LOCAL_MODEL_PATH",
        crate::ModelSource::smollm2_135m_instruct(),
    )
}

/// The model file's bytes, the tokenizer and a chat prompt.
fn setup() -> (Vec<u8>, LocalTokenizer, Vec<u32>) {
    let path = model_path();
    let bytes = std::fs::read(&path).unwrap();
    let tok = LocalTokenizer::from_file(&path).unwrap();
    let prompt = tok
        .chat_prompt(&[
            ("system", "You are a helpful assistant."),
            (
                "user",
                "Name three colours of the rainbow and say why the sky is blue.",
            ),
        ])
        .unwrap();
    (bytes, tok, prompt)
}

fn argmax(l: &[f32]) -> u32 {
    l.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap()
}

/// candle's logits after `tokens` (from position `pos`).
fn candle_step(m: &mut ModelWeights, tokens: &[u32], pos: usize) -> Vec<f32> {
    let x = Tensor::new(tokens, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    m.forward(&x, pos)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn the_forward_gives_the_same_greedy_tokens_as_candles_quantized_llama() {
    let (bytes, _, prompt) = setup();
    let ours = ours(&bytes);
    let mut theirs_q4 = theirs(&bytes);
    // The yardstick: candle on the same weights converted to Q8_0 (what this engine ran
    // before its own kernels) differs from candle on the Q4_1 file by `noise`.
    let mut theirs_q8 = theirs(&candle_requantized(&bytes, |d| d == GgmlDType::Q4_1));
    let theirs = &mut theirs_q4;

    // Greedy with ours; candle is fed the same tokens (teacher forcing) and must agree
    // on every step's choice except a near-tie.
    let steps = 32;
    let mut cache = KvCache::new(&ours.cfg);
    let mut l = ours
        .forward(&mut [(&mut cache, &prompt)])
        .unwrap()
        .remove(0);
    let mut c = candle_step(theirs, &prompt, 0);
    let mut c8 = candle_step(&mut theirs_q8, &prompt, 0);
    let (mut ties, mut worst, mut noise) = (0, 0f32, 0f32);
    let mut chosen = Vec::new();
    for (step, pos) in (prompt.len()..).enumerate().take(steps) {
        let t = argmax(&l);
        chosen.push(t);
        let best = argmax(&c);
        worst = worst.max(max_diff(&l, &c));
        noise = noise.max(max_diff(&c8, &c));
        if t != best {
            let gap = c[best as usize] - c[t as usize];
            assert!(
                gap < 0.25,
                "step {step}: we chose {t}, candle {best} by {gap}"
            );
            ties += 1;
        }
        l = ours.forward(&mut [(&mut cache, &[t])]).unwrap().remove(0);
        c = candle_step(theirs, &[t], pos);
        c8 = candle_step(&mut theirs_q8, &[t], pos);
    }
    eprintln!(
        "max logit difference {worst} (candle on Q8_0-converted weights: {noise}); near-ties decided differently: {ties}; prompt {prompt:?}, greedy {chosen:?}"
    );
    assert!(ties <= 3, "{ties} of {steps} steps chose another token");
    assert!(
        worst < noise + 0.1,
        "logits differ by up to {worst}, the Q8_0 conversion's own difference is {noise}"
    );
}

#[test]
fn chunks_a_reused_prefix_and_batching_give_bit_identical_logits() {
    let (bytes, tok, prompt) = setup();
    bit_identical(bytes, &tok, &prompt);
}

#[test]
fn gemma3_chunks_a_reused_prefix_and_batching_give_bit_identical_logits() {
    let (bytes, tok, prompt) = gemma_setup();
    bit_identical(bytes, &tok, &prompt);
}

/// Gemma 3 270M (LOCAL_GEMMA_PATH, else fetched into the cache), converted as the engine
/// loads it; its tokenizer; the oracle fixture's prompt.
fn gemma_setup() -> (Vec<u8>, LocalTokenizer, Vec<u32>) {
    let path = fetched("LOCAL_GEMMA_PATH", crate::ModelSource::gemma3_270m());
    let tok = LocalTokenizer::from_file(&path).unwrap();
    (
        std::fs::read(&path).unwrap(),
        tok,
        oracle_ids(&oracle()["prompt"]),
    )
}

fn oracle() -> serde_json::Value {
    serde_json::from_str(include_str!(
        "../../tests/fixtures/gemma3_270m_llama_cpp.json"
    ))
    .unwrap()
}

fn oracle_ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Greedy decoding against llama.cpp's (the fixture: its 24 greedy tokens after the prompt,
/// with its top-5 logits at each step). Fed llama.cpp's tokens (teacher forcing), our choice
/// must be llama.cpp's except on a near-tie, and our logits of llama.cpp's top five must be
/// close to its values (the Q5_0 matrices run as Q8_0 here, and llama.cpp rounds
/// activations and GELU through f16 tables: a small, not a structural, difference).
#[test]
fn gemma3_forward_gives_llama_cpps_greedy_tokens() {
    let (bytes, _, prompt) = gemma_setup();
    let w = ours(&bytes);
    assert_eq!(w.cfg.arch, Arch::Gemma3);
    let o = oracle();
    let steps = o["greedy"].as_array().unwrap();
    let mut cache = KvCache::new(&w.cfg);
    let mut l = w.forward(&mut [(&mut cache, &prompt)]).unwrap().remove(0);
    let (mut ties, mut worst, mut sum) = (0, 0f32, 0f32);
    for (i, step) in steps.iter().enumerate() {
        let want = step["token"].as_u64().unwrap() as u32;
        let top: Vec<(u32, f32)> = step["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
            .collect();
        let here = top
            .iter()
            .map(|&(t, v)| (l[t as usize] - v).abs())
            .fold(0f32, f32::max);
        worst = worst.max(here);
        sum += here;
        let got = argmax(&l);
        if got != want {
            let gap = l[got as usize] - l[want as usize];
            let theirs = top.iter().find(|p| p.0 == got).map(|p| top[0].1 - p.1);
            assert!(
                gap < 0.25 && theirs.is_some_and(|g| g < 0.25),
                "step {i}: we chose {got}, llama.cpp {want} (our gap {gap}, theirs {theirs:?})"
            );
            ties += 1;
        }
        l = w.forward(&mut [(&mut cache, &[want])]).unwrap().remove(0);
    }
    let mean = sum / steps.len() as f32;
    eprintln!(
        "difference from llama.cpp's top-5 logits: largest {worst}, mean of the steps' largest {mean}; near-ties decided differently: {ties}"
    );
    // Measured (2026-11-23): all 24 choices equal (step 19 is a three-way near-tie within
    // 0.25 that we also decide as llama.cpp does); largest 1.58 on the two flat steps whose
    // best logit is negative, 0.1-0.5 elsewhere, mean 0.37 — and the same size with the
    // original Q5_0 matrices (1.26, mean 0.33), so it is llama.cpp's f16 keys, values and
    // GELU table, not the conversion. A structural error (a missing norm, the wrong RoPE)
    // changes the tokens and moves logits by whole units.
    assert!(
        ties <= 2,
        "{ties} of {} steps chose another token",
        steps.len()
    );
    assert!(
        worst < 2.0,
        "logits differ from llama.cpp's by up to {worst}"
    );
    assert!(
        mean < 0.6,
        "logits differ from llama.cpp's by {mean} on average"
    );
}

#[test]
fn gemma3_q8_0_embedding_rows_equal_candles_dequantisation() {
    let (bytes, _, _) = gemma_setup();
    let mut r = std::io::Cursor::new(bytes);
    let ct = gguf_file::Content::read(&mut r).unwrap();
    let t = ct
        .tensor(&mut r, "token_embd.weight", &Device::Cpu)
        .unwrap();
    assert_eq!(t.dtype(), GgmlDType::Q8_0);
    let dim = t.shape().dims2().unwrap().1;
    let all = candle_values(&t);
    // Kept in its Q8_0 blocks (262,144 × 640 would take 671 MB as f32), one row expanded
    // per token looked up.
    let ct = Content::read(&mut r).unwrap();
    let e = matrix(&ct, &mut r, "token_embd.weight").unwrap();
    for tok in [0usize, 2, 106, 1000, 262_143] {
        let mut row = Vec::new();
        e.extend_with_row(tok, &mut row).unwrap();
        assert_eq!(row, all[tok * dim..(tok + 1) * dim], "row {tok}");
    }
    assert!(e.extend_with_row(262_144, &mut Vec::new()).is_none());
}

fn bit_identical(bytes: Vec<u8>, tok: &LocalTokenizer, prompt: &[u32]) {
    let w = ours(&bytes);
    let whole = {
        let mut c = KvCache::new(&w.cfg);
        w.forward(&mut [(&mut c, prompt)]).unwrap().remove(0)
    };
    // In three chunks.
    let mut c = KvCache::new(&w.cfg);
    let (a, rest) = prompt.split_at(7);
    let (b, d) = rest.split_at(rest.len() / 2);
    w.forward(&mut [(&mut c, a)]).unwrap();
    w.forward(&mut [(&mut c, b)]).unwrap();
    let chunked = w.forward(&mut [(&mut c, d)]).unwrap().remove(0);
    assert_eq!(chunked, whole);
    // From a copied prefix, after a different continuation was truncated away.
    let mut p = c.prefix(10);
    let other = tok.encode("something else entirely").unwrap();
    w.forward(&mut [(&mut p, &other)]).unwrap();
    p.truncate(10);
    assert_eq!(p.tokens(), &prompt[..10]);
    let reused = w.forward(&mut [(&mut p, &prompt[10..])]).unwrap().remove(0);
    assert_eq!(reused, whole);
    // Batched with another sequence, one token at a time for the last five.
    let mut x = KvCache::new(&w.cfg);
    let mut y = KvCache::new(&w.cfg);
    let n = prompt.len() - 5;
    let other = tok
        .encode("A different conversation about cooking pasta.")
        .unwrap();
    w.forward(&mut [(&mut x, &prompt[..n]), (&mut y, &other)])
        .unwrap();
    let mut last = Vec::new();
    for i in n..prompt.len() {
        let mut out = w
            .forward(&mut [(&mut y, &[42]), (&mut x, &prompt[i..i + 1])])
            .unwrap();
        last = out.remove(1);
    }
    assert_eq!(last, whole);
    assert_eq!(x.tokens(), prompt);
}
