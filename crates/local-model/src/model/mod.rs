//! The llama and Gemma 3 forward passes over shared, immutable weights and per-sequence KV
//! caches.
//!
//! Adapted from candle-transformers 0.11.1 `models/quantized_llama.rs` (© the candle authors,
//! Apache-2.0 OR MIT): the same GGUF tensor names, hyper-parameters and RoPE conventions. Gemma 3
//! ([`Arch::Gemma3`]) is the same loop with what llama.cpp's `gemma3` graph adds: embeddings
//! scaled by √dim, an RMS norm on every query and key head before RoPE, norms after attention
//! and after the FFN (before each residual add), a GELU (tanh) gated FFN, a head size of its own
//! (`attention.key_length`), and five sliding-window layers (a 512-position window, RoPE base
//! `rope.local_freq_base` = 10 000) to every global one (RoPE base `rope.freq_base`). What
//! differs from candle: the weights ([`Weights`]) hold no state and are shared behind an `Arc`; each
//! sequence owns a [`KvCache`] that can be truncated to a prefix and extended; and one
//! [`Weights::forward`] call runs any number of sequences at once — their rows go through every
//! matmul together (decode is memory-bound, so a batch of rows costs little more than one),
//! while attention stays per sequence.
//!
//! Every row is computed the same way whatever else is in the batch and however the sequence
//! was split into calls (the quantized matmul works row by row; norms, RoPE and attention here
//! are written out with a fixed summation order), so a prompt processed in one piece, in
//! chunks, after a reused prefix, or batched with other sessions gives bit-identical logits.
//!
//! The weights are read from the GGUF file in `load.rs` ([`Weights::from_gguf`]); this file is
//! the forward pass.

use rayon::prelude::*;
use std::sync::Arc;

use crate::gguf::GgufError;
use crate::kernels::{self, KernelError, Weight};

/// The longest position the RoPE tables cover.
const MAX_SEQ_LEN: usize = 8192;

/// Why weights cannot be read or run: one sentence for the operator.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Fault(String);

impl From<GgufError> for Fault {
    fn from(e: GgufError) -> Self {
        Self(e.to_string())
    }
}

impl From<KernelError> for Fault {
    fn from(e: KernelError) -> Self {
        Self(e.to_string())
    }
}

pub(crate) type Result<T> = std::result::Result<T, Fault>;

macro_rules! bail {
    ($($t:tt)*) => {
        return Err(Fault(format!($($t)*)))
    };
}

// After `bail!`, which it uses.
mod load;

/// One weight matrix applied to a batch of rows: the single call site of every matmul of the
/// model, on this crate's kernels ([`crate::kernels`]: 8-bit activations, AVX2 where the CPU
/// has it; every GGUF type is brought to Q4_1, Q8_0 or F32 at load). Each row is computed on
/// its own, so a row's result does not depend on the rest of the batch.
pub(crate) struct Linear(Arc<Weight>);

impl Linear {
    /// `x` is `rows × in_dim`, row-major; returns `rows × out_dim`.
    pub(crate) fn forward(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let mut out = vec![0f32; rows * self.0.rows()];
        self.0.matmul(x, rows, &mut out)?;
        Ok(out)
    }

    /// The output width.
    pub(crate) fn out_dim(&self) -> usize {
        self.0.rows()
    }
}

/// The token embedding table: rows of a kernel weight (shared with the output projection
/// when the model ties them), dequantised one row at a lookup; a width that is not whole
/// 32-value blocks as f32.
enum Embedding {
    Kernel(Arc<Weight>),
    F32(Vec<f32>),
}

impl Embedding {
    /// Appends token `t`'s row (`dim` values; `t` is below the vocabulary size).
    fn push_row(&self, t: usize, dim: usize, out: &mut Vec<f32>) {
        match self {
            Self::Kernel(w) => {
                w.extend_with_row(t, out);
            }
            Self::F32(e) => out.extend_from_slice(&e[t * dim..(t + 1) * dim]),
        }
    }
}

struct Layer {
    /// RoPE table index (see [`Weights::ropes`]) and attention window of this layer.
    rope: usize,
    window: Option<usize>,
    /// Gemma 3's per-head query/key norms and its norms after attention and after the FFN.
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    post_attn_norm: Option<Vec<f32>>,
    post_ffn_norm: Option<Vec<f32>>,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    w_gate: Linear,
    w_down: Linear,
    w_up: Linear,
    attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
}

/// Which forward graph the weights run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arch {
    /// llama and the architectures that share its graph (SmolLM2, Qwen2, …).
    Llama,
    /// Gemma 3 (see the module docs).
    Gemma3,
}

/// The model's shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub arch: Arch,
    pub n_layer: usize,
    pub dim: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
    pub eps: f32,
    pub rope_neox: bool,
}

impl Config {
    fn kv_dim(&self) -> usize {
        self.n_kv_head * self.head_dim
    }
    fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
}

/// `MAX_SEQ_LEN × rope_dim/2` cos and sin tables of one RoPE base.
struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// Computed as candle does (f32 angles: position × theta).
    fn new(rope_dim: usize, base: f32) -> Self {
        let half = rope_dim / 2;
        let theta: Vec<f32> = (0..rope_dim)
            .step_by(2)
            .map(|i| 1f32 / base.powf(i as f32 / rope_dim as f32))
            .collect();
        let mut cos = Vec::with_capacity(MAX_SEQ_LEN * half);
        let mut sin = Vec::with_capacity(MAX_SEQ_LEN * half);
        for p in 0..MAX_SEQ_LEN {
            for &t in &theta {
                let a = p as f32 * t;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Self { cos, sin }
    }
}

/// The weights of a llama-architecture or Gemma 3 model, immutable once loaded.
pub(crate) struct Weights {
    pub cfg: Config,
    embedding: Embedding,
    vocab: usize,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output: Linear,
    /// The RoPE tables the layers use: the global base, then (Gemma 3) the local one.
    ropes: Vec<Rope>,
}

/// The keys and values one sequence has computed, and the tokens they belong to.
#[derive(Clone)]
pub(crate) struct KvCache {
    tokens: Vec<u32>,
    kv_dim: usize,
    /// Per layer, `len × kv_dim` rows.
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl KvCache {
    pub(crate) fn new(cfg: &Config) -> Self {
        Self {
            tokens: Vec::new(),
            kv_dim: cfg.kv_dim(),
            k: vec![Vec::new(); cfg.n_layer],
            v: vec![Vec::new(); cfg.n_layer],
        }
    }

    /// The tokens whose keys and values are cached, in order.
    pub(crate) fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Keeps the first `n` positions.
    pub(crate) fn truncate(&mut self, n: usize) {
        let per = self.kv_dim;
        self.tokens.truncate(n);
        for (k, v) in self.k.iter_mut().zip(&mut self.v) {
            k.truncate(n * per);
            v.truncate(n * per);
        }
    }

    /// A copy of the first `n` positions.
    pub(crate) fn prefix(&self, n: usize) -> Self {
        let n = n.min(self.tokens.len());
        let per = self.kv_dim;
        Self {
            tokens: self.tokens[..n].to_vec(),
            kv_dim: per,
            k: self.k.iter().map(|k| k[..n * per].to_vec()).collect(),
            v: self.v.iter().map(|v| v[..n * per].to_vec()).collect(),
        }
    }

    /// Memory held, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        let f: usize = self.k.iter().chain(&self.v).map(Vec::len).sum();
        f * std::mem::size_of::<f32>() + self.tokens.len() * std::mem::size_of::<u32>()
    }
}

impl Weights {
    /// The vocabulary size (the length of a logits row).
    pub(crate) fn vocab(&self) -> usize {
        self.output.out_dim()
    }

    /// Runs each `(cache, tokens)` item: the tokens are appended to the cache and the logits
    /// after the last of them returned, one row per item. Items must have at least one token.
    /// On error every cache is left as it was.
    pub(crate) fn forward(&self, items: &mut [(&mut KvCache, &[u32])]) -> Result<Vec<Vec<f32>>> {
        let before: Vec<usize> = items.iter().map(|(c, _)| c.len()).collect();
        let r = self.forward_inner(items);
        if r.is_err() {
            for ((c, _), n) in items.iter_mut().zip(before) {
                c.truncate(n);
            }
        }
        r
    }

    fn forward_inner(&self, items: &mut [(&mut KvCache, &[u32])]) -> Result<Vec<Vec<f32>>> {
        let cfg = self.cfg;
        let dim = cfg.dim;
        let kv_dim = cfg.kv_dim();
        let q_dim = cfg.q_dim();
        let gemma = cfg.arch == Arch::Gemma3;
        // Rows: (item, position).
        let mut rows: Vec<(usize, usize)> = Vec::new();
        for (i, (cache, toks)) in items.iter().enumerate() {
            if toks.is_empty() {
                bail!("a forward item has no tokens");
            }
            let start = cache.len();
            if start + toks.len() > MAX_SEQ_LEN {
                bail!("the sequence is longer than {MAX_SEQ_LEN} tokens");
            }
            rows.extend((0..toks.len()).map(|j| (i, start + j)));
        }
        let n = rows.len();
        let mut x = Vec::with_capacity(n * dim);
        for (_, toks) in items.iter() {
            for &t in *toks {
                let t = t as usize;
                if t >= self.vocab {
                    bail!("token {t} is outside the vocabulary of {}", self.vocab);
                }
                self.embedding.push_row(t, dim, &mut x);
            }
        }
        if gemma {
            let scale = (dim as f32).sqrt();
            x.iter_mut().for_each(|v| *v *= scale);
        }
        let mut h = vec![0f32; n * dim];
        for (li, layer) in self.layers.iter().enumerate() {
            rms_norm(&x, &layer.attn_norm, cfg.eps, &mut h);
            let mut q = layer.wq.forward(&h, n)?;
            let mut k = layer.wk.forward(&h, n)?;
            let v = layer.wv.forward(&h, n)?;
            // Per head (the norm's width is the head size).
            if let Some(w) = &layer.q_norm {
                q = normed(&q, w, cfg.eps);
            }
            if let Some(w) = &layer.k_norm {
                k = normed(&k, w, cfg.eps);
            }
            let table = &self.ropes[layer.rope];
            for (r, &(_, pos)) in rows.iter().enumerate() {
                self.rope(table, &mut q[r * q_dim..(r + 1) * q_dim], pos);
                self.rope(table, &mut k[r * kv_dim..(r + 1) * kv_dim], pos);
            }
            for (r, &(i, _)) in rows.iter().enumerate() {
                let c = &mut *items[i].0;
                c.k[li].extend_from_slice(&k[r * kv_dim..(r + 1) * kv_dim]);
                c.v[li].extend_from_slice(&v[r * kv_dim..(r + 1) * kv_dim]);
            }
            let caches: Vec<(&[f32], &[f32])> = items
                .iter()
                .map(|(c, _)| (c.k[li].as_slice(), c.v[li].as_slice()))
                .collect();
            let att = attention(&cfg, &q, &rows, &caches, layer.window);
            let mut o = layer.wo.forward(&att, n)?;
            if let Some(w) = &layer.post_attn_norm {
                o = normed(&o, w, cfg.eps);
            }
            add(&mut x, &o);
            rms_norm(&x, &layer.ffn_norm, cfg.eps, &mut h);
            let mut g = layer.w_gate.forward(&h, n)?;
            let u = layer.w_up.forward(&h, n)?;
            if gemma {
                for (g, u) in g.iter_mut().zip(&u) {
                    *g = gelu_tanh(*g) * u;
                }
            } else {
                for (g, u) in g.iter_mut().zip(&u) {
                    *g = *g / (1.0 + (-*g).exp()) * u;
                }
            }
            let mut d = layer.w_down.forward(&g, n)?;
            if let Some(w) = &layer.post_ffn_norm {
                d = normed(&d, w, cfg.eps);
            }
            add(&mut x, &d);
        }
        // Only the last row of each item needs logits.
        let mut last = Vec::with_capacity(items.len() * dim);
        let mut r = 0;
        for (_, toks) in items.iter() {
            r += toks.len();
            last.extend_from_slice(&x[(r - 1) * dim..r * dim]);
        }
        let mut normed = vec![0f32; last.len()];
        rms_norm(&last, &self.norm, cfg.eps, &mut normed);
        let logits = self.output.forward(&normed, items.len())?;
        for (cache, toks) in items.iter_mut() {
            cache.tokens.extend_from_slice(toks);
        }
        let v = self.vocab();
        Ok(logits.chunks(v).map(<[f32]>::to_vec).collect())
    }

    /// Rotates every head of one row (`n × head_dim`) to position `pos`.
    fn rope(&self, table: &Rope, row: &mut [f32], pos: usize) {
        let hd = self.cfg.head_dim;
        let half = self.cfg.rope_dim / 2;
        let cos = &table.cos[pos * half..(pos + 1) * half];
        let sin = &table.sin[pos * half..(pos + 1) * half];
        for head in row.chunks_exact_mut(hd) {
            for i in 0..half {
                let (a, b) = if self.cfg.rope_neox {
                    (i, i + half)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos[i] - x1 * sin[i];
                head[b] = x0 * sin[i] + x1 * cos[i];
            }
        }
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Row-wise RMS norm, as candle's `rms_norm` computes it.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    let row = |(xr, or): (&[f32], &mut [f32])| {
        let sum2: f32 = xr.iter().map(|v| v * v).sum();
        let m = (sum2 / d as f32 + eps).sqrt();
        for ((o, v), a) in or.iter_mut().zip(xr).zip(w) {
            *o = v / m * a;
        }
    };
    // Rows on their own either way: a prompt's on every thread, a decode step's on this one.
    if x.len() >= 1 << 14 {
        x.par_chunks_exact(d)
            .zip(out.par_chunks_exact_mut(d))
            .for_each(row);
    } else {
        x.chunks_exact(d).zip(out.chunks_exact_mut(d)).for_each(row);
    }
}

/// [`rms_norm`] into a new buffer.
fn normed(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    rms_norm(x, w, eps, &mut out);
    out
}

/// GELU, tanh approximation (`gelu_pytorch_tanh`, ggml's `gelu`).
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
}

/// Causal attention of every (row, head): the row at position `p` attends to its sequence's
/// positions `0..=p`, or with a `window` to the last `window` of them (`p - j < window`, as
/// llama.cpp's sliding-window mask). Returns `rows × n_head × head_dim`.
fn attention(
    cfg: &Config,
    q: &[f32],
    rows: &[(usize, usize)],
    caches: &[(&[f32], &[f32])],
    window: Option<usize>,
) -> Vec<f32> {
    let hd = cfg.head_dim;
    let group = cfg.n_head / cfg.n_kv_head;
    let kv_dim = cfg.kv_dim();
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; rows.len() * cfg.n_head * hd];
    out.par_chunks_mut(hd).enumerate().for_each_init(
        Vec::new,
        |scores: &mut Vec<f32>, (idx, o)| {
            let (r, head) = (idx / cfg.n_head, idx % cfg.n_head);
            let (item, pos) = rows[r];
            let (k, v) = caches[item];
            let kvh = head / group;
            let qh = &q[idx * hd..(idx + 1) * hd];
            let first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
            scores.clear();
            let mut max = f32::NEG_INFINITY;
            for j in first..=pos {
                let s =
                    kernels::dot_f32(qh, &k[j * kv_dim + kvh * hd..j * kv_dim + (kvh + 1) * hd])
                        * scale;
                max = max.max(s);
                scores.push(s);
            }
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            for (j, s) in (first..).zip(scores.iter()) {
                let w = s / sum;
                let vj = &v[j * kv_dim + kvh * hd..j * kv_dim + (kvh + 1) * hd];
                for (a, b) in o.iter_mut().zip(vj) {
                    *a += w * b;
                }
            }
        },
    );
    out
}

#[cfg(test)]
mod tests;
