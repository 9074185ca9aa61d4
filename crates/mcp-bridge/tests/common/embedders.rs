//! Embedders behind [`toolwright_core::Embedder`] for tests and the evaluation's plumbing ONLY.
//!
//! [`HashedNgrams`] is a real, deterministic encoder, but a lexical one: words, character
//! trigrams and Chinese character bigrams hashed into 384 dimensions. It knows nothing of
//! meaning; it exists so that the hybrid path (encode the catalog, encode the query, fuse,
//! calibrate "no tool fits") runs end to end before the real encoder (multilingual-e5-small,
//! `local-model`) is merged. **Its figures are never the product's.**

use std::sync::atomic::{AtomicUsize, Ordering};

use toolwright_core::{EmbedKind, Embedder, ModelError, async_trait};

/// See the module docs: a lexical test encoder, not a model.
pub struct HashedNgrams;

const DIMS: usize = 384;

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF)
}

impl HashedNgrams {
    /// The vector of one text (L2-normalised; zero for a text with no feature).
    pub fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0f32; DIMS];
        let mut add = |feature: String, weight: f32| {
            let h = fnv(&feature);
            let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
            v[(h % DIMS as u64) as usize] += sign * weight;
        };
        let lower = text.to_lowercase();
        let mut word = String::new();
        let mut cjk: Vec<char> = Vec::new();
        let flush_word = |w: &mut String, add: &mut dyn FnMut(String, f32)| {
            if !w.is_empty() {
                add(format!("w:{w}"), 1.0);
                let padded: Vec<char> = format!("#{w}#").chars().collect();
                for t in padded.windows(3) {
                    add(format!("t:{}", t.iter().collect::<String>()), 0.5);
                }
                w.clear();
            }
        };
        let flush_cjk = |c: &mut Vec<char>, add: &mut dyn FnMut(String, f32)| {
            for ch in c.iter() {
                add(format!("c:{ch}"), 0.5);
            }
            for b in c.windows(2) {
                add(format!("b:{}{}", b[0], b[1]), 1.0);
            }
            c.clear();
        };
        for ch in lower.chars() {
            if is_cjk(ch) {
                flush_word(&mut word, &mut add);
                cjk.push(ch);
            } else if ch.is_alphanumeric() {
                flush_cjk(&mut cjk, &mut add);
                word.push(ch);
            } else {
                flush_word(&mut word, &mut add);
                flush_cjk(&mut cjk, &mut add);
            }
        }
        flush_word(&mut word, &mut add);
        flush_cjk(&mut cjk, &mut add);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

#[async_trait]
impl Embedder for HashedNgrams {
    fn id(&self) -> &str {
        "test-only-hashed-ngrams-384"
    }
    fn dimensions(&self) -> usize {
        DIMS
    }
    async fn embed(&self, texts: &[String], _: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts.iter().map(|t| Self::vector(t)).collect())
    }
}

/// Wraps an embedder and counts the texts it was asked to encode, per kind.
pub struct Counting<E> {
    pub inner: E,
    pub documents: AtomicUsize,
    pub queries: AtomicUsize,
    /// Every document text encoded, in order.
    pub seen: std::sync::Mutex<Vec<String>>,
}

impl<E> Counting<E> {
    pub fn new(inner: E) -> Self {
        Self {
            inner,
            documents: AtomicUsize::new(0),
            queries: AtomicUsize::new(0),
            seen: std::sync::Mutex::new(Vec::new()),
        }
    }
    pub fn documents(&self) -> usize {
        self.documents.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<E: Embedder> Embedder for Counting<E> {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }
    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
        match kind {
            EmbedKind::Document => {
                self.documents.fetch_add(texts.len(), Ordering::SeqCst);
                self.seen.lock().unwrap().extend(texts.iter().cloned());
            }
            EmbedKind::Query => {
                self.queries.fetch_add(texts.len(), Ordering::SeqCst);
            }
        }
        self.inner.embed(texts, kind).await
    }
}

/// An embedder that always fails: the bridge must fall back to BM25.
pub struct Broken;

#[async_trait]
impl Embedder for Broken {
    fn id(&self) -> &str {
        "broken"
    }
    fn dimensions(&self) -> usize {
        DIMS
    }
    async fn embed(&self, _: &[String], _: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
        Err(ModelError::Inference(
            "the test encoder is broken on purpose".into(),
        ))
    }
}
