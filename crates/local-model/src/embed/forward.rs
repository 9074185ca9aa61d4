//! The BERT forward of multilingual-e5-small on the crate's own kernels.
//!
//! The file's Q4_0 matrices become the kernels' Q4_1 without loss (same scale `d`, minimum
//! `m = −8·d`, same nibbles) and run as int4 × int8 matmuls. Embeddings are the word row
//! (dequantised from the Q4_0 table on lookup: the 250,037 × 384 table stays 54 MB) plus the
//! position (from 0) plus token type 0, then LayerNorm; each of the 12 post-LN layers is
//! self-attention (12 heads of 32) → add & LayerNorm → FFN 1536 with erf GELU → add &
//! LayerNorm. A text's vector is the mean over all its tokens (`<s>` and `</s>` included),
//! L2-normalised.
//!
//! Texts are not padded: the tokens of a batch are concatenated into one matrix, so every
//! weight is read once per pass for all of them, and attention stays within each text. Every
//! sum runs in a fixed order, so a text's vector does not depend on the batch it is in.

use half::f16;
use rayon::prelude::*;

use super::format::{E5File, E5FormatError, Q4_0_BLOCK, Q4_0_BYTES, Shape};
use crate::kernels::{KernelError, QuantizedActivations, Weight};

/// At most this many tokens go through the layers at once (bounds the activations' memory:
/// about 10 KiB per token).
pub(crate) const TOKENS_PER_PASS: usize = 4096;

/// The one place that names the kernels' block type: a Q4_1 matrix from its GGUF bytes, its
/// rows side by side (every pass of the encoder is a batch of tokens).
fn q4_1_weight(rows: usize, cols: usize, bytes: &[u8]) -> Result<Weight, KernelError> {
    Weight::from_gguf_bytes(crate::kernels::GgmlType::Q4_1, rows, cols, bytes)
        .map(Weight::with_rows_side_by_side)
}

/// Q4_0 blocks (`f16 d`, 16 bytes of nibbles; value `(q − 8)·d`) as Q4_1 blocks (`f16 d`,
/// `f16 m`, the same nibbles; value `q·d + m`) with `m = −8·d`, which is exact in f16 (a
/// power-of-two multiple) unless it overflows; then it is an error, not a rounding.
fn q4_0_to_q4_1(q4_0: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(q4_0.len() / Q4_0_BYTES * 20);
    for b in q4_0.chunks_exact(Q4_0_BYTES) {
        let d = f16::from_le_bytes([b[0], b[1]]);
        let m = f16::from_f32(-8.0 * d.to_f32());
        if !d.is_finite() || m.to_f32() != -8.0 * d.to_f32() {
            return Err(format!(
                "has a block scale {d} whose Q4_1 minimum −8·d is not exact in f16"
            ));
        }
        out.extend_from_slice(&b[..2]);
        out.extend_from_slice(&m.to_le_bytes());
        out.extend_from_slice(&b[2..Q4_0_BYTES]);
    }
    Ok(out)
}

/// A matrix and its bias: `out = x · Wᵀ + b`.
struct Linear {
    w: Weight,
    b: Vec<f32>,
}

impl Linear {
    fn load(f: &E5File, name: &str, rows: usize, cols: usize) -> Result<Self, E5FormatError> {
        let tensor_err = |problem: String| E5FormatError::Tensor {
            name: format!("{name}.w"),
            problem,
        };
        let q4_1 = q4_0_to_q4_1(f.q4_0(&format!("{name}.w"))?).map_err(tensor_err)?;
        let w = q4_1_weight(rows, cols, &q4_1).map_err(|e| tensor_err(e.to_string()))?;
        Ok(Self {
            w,
            b: f.f32(&format!("{name}.b"))?,
        })
    }

    fn apply(&self, x: &QuantizedActivations, out: &mut [f32]) {
        self.w.matmul_quantized(x, out);
        out.par_chunks_mut(self.b.len() * 16).for_each(|rows| {
            for row in rows.chunks_exact_mut(self.b.len()) {
                row.iter_mut().zip(&self.b).for_each(|(o, b)| *o += b);
            }
        });
    }
}

/// LayerNorm weight and bias.
struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

impl Norm {
    fn load(f: &E5File, name: &str) -> Result<Self, E5FormatError> {
        Ok(Self {
            w: f.f32(&format!("{name}.w"))?,
            b: f.f32(&format!("{name}.b"))?,
        })
    }

    /// `x = LayerNorm(x + y)` row by row (`y` absent: `x = LayerNorm(x)`). Mean and variance
    /// in f64, in index order.
    fn apply(&self, x: &mut [f32], y: Option<&[f32]>, eps: f32) {
        let h = self.w.len();
        let eps = f64::from(eps);
        let row = |r: &mut [f32], y: Option<&[f32]>| {
            if let Some(y) = y {
                r.iter_mut().zip(y).for_each(|(a, b)| *a += b);
            }
            let mean = r.iter().map(|&v| f64::from(v)).sum::<f64>() / h as f64;
            let var = r
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / h as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, w), b) in r.iter_mut().zip(&self.w).zip(&self.b) {
                *v = ((f64::from(*v) - mean) * inv) as f32 * w + b;
            }
        };
        // At least 16 rows per job: a short query's norms stay on one thread (a fork costs
        // more than normalising a few rows).
        match y {
            Some(y) => x
                .par_chunks_mut(h)
                .zip(y.par_chunks(h))
                .with_min_len(16)
                .for_each(|(r, y)| row(r, Some(y))),
            None => x
                .par_chunks_mut(h)
                .with_min_len(16)
                .for_each(|r| row(r, None)),
        }
    }
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    ffn_in: Linear,
    ffn_out: Linear,
    out_norm: Norm,
}

/// multilingual-e5-small's weights, ready to run.
pub(crate) struct Encoder {
    shape: Shape,
    /// The word table in its Q4_0 blocks, row after row.
    word: Vec<u8>,
    pos: Vec<f32>,
    /// Token type 0's row.
    type0: Vec<f32>,
    emb_norm: Norm,
    layers: Vec<Layer>,
}

impl Encoder {
    pub fn load(f: &E5File) -> Result<Self, E5FormatError> {
        let s = f.shape;
        let (h, ff) = (s.hidden, s.ffn);
        let layers = (0..s.layers)
            .into_par_iter()
            .map(|l| {
                let lin = |t: &str, rows, cols| Linear::load(f, &format!("l{l}.{t}"), rows, cols);
                Ok(Layer {
                    q: lin("q", h, h)?,
                    k: lin("k", h, h)?,
                    v: lin("v", h, h)?,
                    attn_out: lin("ao", h, h)?,
                    attn_norm: Norm::load(f, &format!("l{l}.aln"))?,
                    ffn_in: lin("fi", ff, h)?,
                    ffn_out: lin("fo", h, ff)?,
                    out_norm: Norm::load(f, &format!("l{l}.oln"))?,
                })
            })
            .collect::<Result<Vec<_>, E5FormatError>>()?;
        let mut type0 = f.f32("emb.type")?;
        type0.truncate(h);
        Ok(Self {
            shape: s,
            word: f.q4_0("emb.word")?.to_vec(),
            pos: f.f32("emb.pos")?,
            type0,
            emb_norm: Norm::load(f, "emb.ln")?,
            layers,
        })
    }

    /// Row `id` of the word table, dequantised into `out`.
    fn word_row(&self, id: u32, out: &mut [f32]) {
        let row_bytes = self.shape.hidden / Q4_0_BLOCK * Q4_0_BYTES;
        let row = &self.word[id as usize * row_bytes..][..row_bytes];
        for (b, o) in row
            .chunks_exact(Q4_0_BYTES)
            .zip(out.chunks_exact_mut(Q4_0_BLOCK))
        {
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            for j in 0..16 {
                o[j] = (f32::from(b[2 + j] & 15) - 8.0) * d;
                o[j + 16] = (f32::from(b[2 + j] >> 4) - 8.0) * d;
            }
        }
    }

    /// One L2-normalised vector per token sequence (each `<s>` … `</s>`, at most 512 ids,
    /// every id in the vocabulary), in order; passes of at most [`TOKENS_PER_PASS`] tokens.
    pub fn embed(&self, seqs: &[Vec<u32>]) -> Vec<Vec<f32>> {
        let mut out = Vec::with_capacity(seqs.len());
        let mut start = 0;
        while start < seqs.len() {
            let mut end = start + 1;
            let mut tokens = seqs[start].len();
            while end < seqs.len() && tokens + seqs[end].len() <= TOKENS_PER_PASS {
                tokens += seqs[end].len();
                end += 1;
            }
            out.extend(self.forward(&seqs[start..end]));
            start = end;
        }
        out
    }

    fn forward(&self, seqs: &[Vec<u32>]) -> Vec<Vec<f32>> {
        let s = self.shape;
        let (h, ff) = (s.hidden, s.ffn);
        // Each token's sequence as a token range.
        let mut spans = Vec::new();
        let mut ranges = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let r = spans.len()..spans.len() + seq.len();
            spans.extend(std::iter::repeat_n(r.clone(), seq.len()));
            ranges.push(r);
        }
        let t = spans.len();
        let ids: Vec<u32> = seqs.iter().flatten().copied().collect();

        let mut x = vec![0f32; t * h];
        x.par_chunks_mut(h).enumerate().for_each(|(i, row)| {
            self.word_row(ids[i], row);
            let p = &self.pos[(i - spans[i].start) * h..][..h];
            for ((v, p), ty) in row.iter_mut().zip(p).zip(&self.type0) {
                *v += p + ty;
            }
        });
        self.emb_norm.apply(&mut x, None, s.eps);

        let (mut q, mut k, mut v) = (vec![0f32; t * h], vec![0f32; t * h], vec![0f32; t * h]);
        let (mut ctx, mut proj) = (vec![0f32; t * h], vec![0f32; t * h]);
        let mut mid = vec![0f32; t * ff];
        for layer in &self.layers {
            let xa = QuantizedActivations::quantize(&x, h);
            layer.q.apply(&xa, &mut q);
            layer.k.apply(&xa, &mut k);
            layer.v.apply(&xa, &mut v);
            attention(&q, &k, &v, &spans, s.heads, &mut ctx);
            layer
                .attn_out
                .apply(&QuantizedActivations::quantize(&ctx, h), &mut proj);
            layer.attn_norm.apply(&mut x, Some(&proj), s.eps);

            layer
                .ffn_in
                .apply(&QuantizedActivations::quantize(&x, h), &mut mid);
            mid.par_chunks_mut(4096).for_each(gelu_slice);
            layer
                .ffn_out
                .apply(&QuantizedActivations::quantize(&mid, ff), &mut proj);
            layer.out_norm.apply(&mut x, Some(&proj), s.eps);
        }

        ranges
            .into_iter()
            .map(|r| {
                let mut sum = vec![0f64; h];
                for row in x[r.start * h..r.end * h].chunks_exact(h) {
                    sum.iter_mut()
                        .zip(row)
                        .for_each(|(s, &v)| *s += f64::from(v));
                }
                // The mean's 1/n cancels in the normalisation.
                let norm = sum.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
                sum.iter().map(|v| (v / norm) as f32).collect()
            })
            .collect()
    }
}

/// Query tokens per unit of attention work: a long text's rows are split over the threads too.
const ATTENTION_ROWS: usize = 64;

/// Scaled dot-product attention of every token over the tokens of its own sequence, all heads;
/// `ctx` row `t` is token `t`'s heads side by side. The work is split into runs of at most
/// [`ATTENTION_ROWS`] query tokens of one sequence; each run transposes its sequence's keys
/// (`kᵀ`, one row per feature) so that a query's scores are `hd` vectorised multiply-adds over
/// the keys rather than one short dot product (and a horizontal sum) per key. Every sum runs in
/// a fixed order, so a token's context does not depend on the batch.
fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    spans: &[std::ops::Range<usize>],
    heads: usize,
    ctx: &mut [f32],
) {
    let h = q.len() / spans.len();
    let hd = h / heads;
    let scale = 1.0 / (hd as f32).sqrt();
    // The runs: (first token, the sequence's token range), each with its rows of `ctx`.
    let mut runs: Vec<(usize, std::ops::Range<usize>, &mut [f32])> = Vec::new();
    let mut rest = ctx;
    let mut t = 0;
    while t < spans.len() {
        let span = spans[t].clone();
        let n = (span.end - t).min(ATTENTION_ROWS);
        let (rows, tail) = rest.split_at_mut(n * h);
        runs.push((t, span, rows));
        rest = tail;
        t += n;
    }
    runs.into_par_iter().for_each(|(t0, span, out)| {
        let l = span.len();
        let mut kt = vec![0f32; h * l];
        for (s, row) in k[span.start * h..span.end * h].chunks_exact(h).enumerate() {
            for (c, &x) in row.iter().enumerate() {
                kt[c * l + s] = x;
            }
        }
        let mut scores = vec![0f32; l];
        for (i, o_row) in out.chunks_exact_mut(h).enumerate() {
            let qt = &q[(t0 + i) * h..][..h];
            for head in 0..heads {
                let at = head * hd;
                scores.fill(0.0);
                for (d, &qd) in qt[at..at + hd].iter().enumerate() {
                    let kd = &kt[(at + d) * l..][..l];
                    scores
                        .iter_mut()
                        .zip(kd)
                        .for_each(|(sc, &kv)| *sc += qd * kv);
                }
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                scores
                    .iter_mut()
                    .for_each(|sc| *sc = exp_fast((*sc - max) * scale));
                let sum: f32 = scores.iter().sum();
                let inv = 1.0 / sum;
                let o = &mut o_row[at..at + hd];
                o.fill(0.0);
                for (s, &p) in span.clone().zip(scores.iter()) {
                    let p = p * inv;
                    let vh = &v[s * h + at..][..hd];
                    o.iter_mut().zip(vh).for_each(|(o, v)| *o += p * v);
                }
            }
        }
    });
}

/// `eˣ` without libm, branch-free so a loop of it vectorises (Cephes' `expf`: `x = n·ln 2 + g`,
/// a degree-7 polynomial for `e^g`, `2ⁿ` from the exponent bits); relative error below 2.5e-7
/// (tested), 0 below −87, NaN stays NaN.
#[inline(always)]
#[allow(clippy::excessive_precision)]
fn exp_fast(x: f32) -> f32 {
    // 1.5 · 2²³: adding it rounds to an integer, which is then its low mantissa bits.
    const SHIFT: f32 = 12_582_912.0;
    let xc = x.clamp(-87.0, 88.0);
    let t = xc * std::f32::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let g = (xc - n * 0.693_359_375) - n * -2.121_944_4e-4;
    let p = ((((1.987_569_15e-4 * g + 1.398_199_95e-3) * g + 8.333_451_9e-3) * g
        + 4.166_579_59e-2)
        * g
        + 1.666_666_55e-1)
        * g
        + 5.000_000_12e-1;
    let e = p * g * g + g + 1.0;
    // n + 127 in the exponent field: 2ⁿ (n ∈ −126..=127, a normal number).
    let two_n = f32::from_bits(t.to_bits().wrapping_sub(0x4B40_0000).wrapping_add(127) << 23);
    let r = e * two_n;
    if x < -87.0 { 0.0 } else { r }
}

/// `erfc(z)` for `z ≥ 0` given an `exp`, relative error below 1.2e-7 with an exact one
/// (Numerical Recipes' Chebyshev fit, `erfcc`), so both GELU tails keep their precision.
// The coefficients as published (rounded to f32 on use).
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn erfc_nonneg(z: f32, exp: impl Fn(f32) -> f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    t * exp(-z * z + poly)
}

/// `erf(x)`, absolute error below 1.2e-7.
#[cfg(test)]
fn erf(x: f32) -> f32 {
    let c = erfc_nonneg(x.abs(), f32::exp);
    if x >= 0.0 { 1.0 - c } else { c - 1.0 }
}

/// GELU with the exact erf: `x·Φ(x) = ½·x·(1 + erf(x/√2))`; for negative `x` through `erfc`,
/// so the small values keep their relative precision.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let c = erfc_nonneg(x.abs() * std::f32::consts::FRAC_1_SQRT_2, exp_fast);
    if x >= 0.0 {
        0.5 * x * (2.0 - c)
    } else {
        0.5 * x * c
    }
}

/// [`gelu`] over a slice, eight lanes at a time where the CPU has AVX2 (the same operations, so
/// the same values, as the scalar loop): it was ~15 % of the encoder's time through libm's `expf`.
fn gelu_slice(c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        return simd.vectorize(
            #[inline(always)]
            || c.iter_mut().for_each(|v| *v = gelu(*v)),
        );
    }
    c.iter_mut().for_each(|v| *v = gelu(*v));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_gelu_match_python_math_erf() {
        // (x, math.erf(x)) from CPython.
        let erfs = [
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (1.5, 0.9661051464753108),
            (2.0, 0.9953222650189527),
            (3.0, 0.9999779095030014),
            (-0.7, -0.6778011938374184),
            (-2.5, -0.999593047982555),
        ];
        for (x, want) in erfs {
            let got = erf(x as f32);
            assert!(
                (f64::from(got) - want).abs() < 2e-7,
                "erf({x}) = {got}, want {want}"
            );
        }
        // (x, 0.5·x·(1 + erf(x/√2))) from CPython, tails included.
        let gelus = [
            (1.0, 0.8413447460685429),
            (-1.0, -0.15865525393145707),
            (3.0, 2.99595030590511),
            (-3.0, -0.004049694094890287),
            (-6.0, -5.919525870226207e-9),
            (0.01, 0.005039893563146316),
        ];
        for (x, want) in gelus {
            let got = f64::from(gelu(x as f32));
            assert!(
                // f32 rounding of x/√2 alone moves erfc by 2·z²·6e-8 relative.
                (got - want).abs() <= 1e-6 * want.abs().max(1e-3),
                "gelu({x}) = {got}, want {want}"
            );
        }
    }

    /// The attention against a plain f64 softmax(q·kᵀ/√d)·v per sequence and head, on texts
    /// shorter and longer than a run of [`ATTENTION_ROWS`] tokens; and a text's rows are the
    /// same bits alone as in a batch.
    #[test]
    fn attention_matches_a_plain_reference_and_ignores_the_batch() {
        let (heads, hd) = (3, 32);
        let h = heads * hd;
        let lens = [1usize, 5, 21, ATTENTION_ROWS + 9];
        let t: usize = lens.iter().sum();
        let mut spans = Vec::new();
        for &n in &lens {
            let r = spans.len()..spans.len() + n;
            spans.extend(std::iter::repeat_n(r, n));
        }
        let (q, k, v) = (
            crate::test_support::values(t * h, 1, 3.0),
            crate::test_support::values(t * h, 2, 3.0),
            crate::test_support::values(t * h, 3, 1.0),
        );
        let mut ctx = vec![f32::NAN; t * h];
        attention(&q, &k, &v, &spans, heads, &mut ctx);
        for i in 0..t {
            let span = spans[i].clone();
            for head in 0..heads {
                let at = head * hd;
                let dot = |s: usize| {
                    (0..hd)
                        .map(|d| f64::from(q[i * h + at + d]) * f64::from(k[s * h + at + d]))
                        .sum::<f64>()
                        / (hd as f64).sqrt()
                };
                let max = span.clone().map(dot).fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = span.clone().map(|s| (dot(s) - max).exp()).collect();
                let z: f64 = w.iter().sum();
                for d in 0..hd {
                    let want: f64 = span
                        .clone()
                        .zip(&w)
                        .map(|(s, p)| p / z * f64::from(v[s * h + at + d]))
                        .sum();
                    let got = f64::from(ctx[i * h + at + d]);
                    assert!(
                        (got - want).abs() < 1e-5,
                        "token {i} head {head} feature {d}: {got} vs {want}"
                    );
                }
            }
        }
        // The last text alone: the same bits.
        let n = lens[3];
        let from = t - n;
        let mut alone = vec![0f32; n * h];
        attention(
            &q[from * h..],
            &k[from * h..],
            &v[from * h..],
            &vec![0..n; n],
            heads,
            &mut alone,
        );
        assert_eq!(alone, ctx[from * h..]);
    }

    #[test]
    fn exp_fast_is_within_a_few_ulps_of_exp() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let want = f64::from(x).exp();
            let rel = (f64::from(exp_fast(x)) - want).abs() / want;
            worst = worst.max(rel);
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp_fast(0.0), 1.0);
        assert_eq!(exp_fast(-100.0), 0.0);
        assert_eq!(exp_fast(f32::NEG_INFINITY), 0.0);
        assert!(exp_fast(f32::NAN).is_nan());
        // The slice form (AVX2 where present) gives the scalar values.
        let mut xs = crate::test_support::values(1000, 4, 8.0);
        let want: Vec<f32> = xs.iter().map(|&x| gelu(x)).collect();
        gelu_slice(&mut xs);
        assert_eq!(xs, want);
    }

    #[test]
    fn q4_0_converts_to_q4_1_without_loss() {
        // d = 0.5 (f16 0x3800), nibbles 0..15 then 15..0.
        let mut b = vec![0x00, 0x38];
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let q41 = q4_0_to_q4_1(&b).unwrap();
        let w = q4_1_weight(1, 32, &q41).unwrap().dequantize();
        let want: Vec<f32> = (0..16)
            .map(|j| (j as f32 - 8.0) * 0.5)
            .chain((0..16).map(|j| ((15 - j) as f32 - 8.0) * 0.5))
            .collect();
        assert_eq!(w, want);
    }
}
