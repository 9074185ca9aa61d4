//! CPU matmul kernels for the local model's quantized weights.
//!
//! A [`Weight`] is one `out × in` matrix of the GGUF (`Q4_1` and `Q8_0` kept in their own bits;
//! any other type dequantised to f32), and [`Weight::matmul`] computes `out = x · Wᵀ` for
//! `tokens` rows of activations at once:
//!
//! * **decode** (few tokens, memory-bound): the weights are read in their own 4- or 8-bit blocks
//!   and dotted with the activations quantised to 8 bits per 32-value block (as llama.cpp's
//!   `q4_1 × q8_1`), with AVX2 where the CPU has it (detected at run time) and a portable
//!   fallback that computes the same sums; the output rows are split over the rayon pool.
//! * **prefill** (≥ [`PREFILL_MIN_TOKENS`] tokens, compute-bound): the same int8 blocks, tiled
//!   [`TOKEN_TILE`] tokens at a time so every unpacked weight block is used for several tokens;
//!   the tokens are split over the rayon pool (below [`ROW_SPLIT_MAX_TOKENS`] per thread, the
//!   output rows, as at decode). A token's sums do not depend on the split.
//!
//! ```
//! use toolwright_local_model::kernels::{GgmlType, Weight};
//! // A 64 × 96 weight (64 outputs, 96 inputs) in Q8_0 (each 32 values: an f16 scale, then
//! // 32 signed bytes), two tokens of input.
//! let block: Vec<u8> = half::f16::from_f32(0.01).to_le_bytes().into_iter()
//!     .chain((0..32).map(|i| (i as i8 - 16) as u8)).collect();
//! let bytes = block.repeat(64 * 96 / 32);
//! let w = Weight::from_gguf_bytes(GgmlType::Q8_0, 64, 96, &bytes)?;
//! let x = vec![0.5f32; 2 * 96];
//! let mut out = vec![0f32; 2 * 64];
//! w.matmul(&x, 2, &mut out)?;
//! assert_eq!((w.rows(), w.cols()), (64, 96));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod convert;
mod quant;
mod rows8;
#[cfg(target_arch = "x86_64")]
mod x86;

use rayon::prelude::*;

pub use crate::gguf::GgmlType;
pub(crate) use convert::dequantize;

pub use quant::QuantizedActivations;
use quant::{Q4_1Block, Q8_0Block};
use rows8::Rows8;

/// Values per quantisation block (ggml's `QK`).
pub const BLOCK: usize = 32;
/// From this many tokens on, [`Weight::matmul`] splits the tokens (not the output rows) over
/// the threads.
pub const PREFILL_MIN_TOKENS: usize = 8;
/// Below this many tokens per thread, [`Weight::matmul`] splits the output rows over the threads
/// instead (each thread all the tokens): a 12-token query split by token tiles of
/// [`TOKEN_TILE`] gave one thread 8 tokens and the other 4.
pub const ROW_SPLIT_MAX_TOKENS: usize = 64;
/// Tokens processed together against one unpacked weight block.
pub const TOKEN_TILE: usize = 4;

/// Why a weight cannot be built or a matmul cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelError {
    /// The tensor is not a 2-D matrix whose rows are whole quantisation blocks.
    #[error(
        "a matmul weight must be 2-D with a multiple of {BLOCK} columns, got shape {0:?}; load the matrix as f32 instead"
    )]
    Shape(Vec<usize>),
    /// The GGUF bytes do not have the size the shape and type call for.
    #[error(
        "the {dtype} weight of shape {shape:?} has {got} bytes, expected {want}; the GGUF file is damaged, fetch it again"
    )]
    Bytes {
        /// The tensor's type.
        dtype: String,
        /// The tensor's shape.
        shape: Vec<usize>,
        /// Bytes found.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
    /// `x` or `out` do not have `tokens × cols` / `tokens × rows` values.
    #[error(
        "matmul of {tokens} tokens against a {rows}×{cols} weight needs x of {want_x} and out of {want_out} values, got {got_x} and {got_out}"
    )]
    Len {
        /// Tokens asked for.
        tokens: usize,
        /// Weight rows (outputs).
        rows: usize,
        /// Weight columns (inputs).
        cols: usize,
        /// Length of `x` given.
        got_x: usize,
        /// Length of `out` given.
        got_out: usize,
        /// Length `x` needs.
        want_x: usize,
        /// Length `out` needs.
        want_out: usize,
    },
}

#[derive(Debug, Clone)]
enum Repr {
    Q4_1(Vec<Q4_1Block>),
    /// Q4_1 with eight rows side by side ([`Weight::with_rows_side_by_side`]).
    Q4_1x8(Vec<Rows8>),
    Q8_0(Vec<Q8_0Block>),
    F32(Vec<f32>),
}

/// One weight matrix (`rows` outputs × `cols` inputs, row-major as in GGUF) ready for
/// [`Weight::matmul`]. Cheap to share behind an `Arc`; `matmul` takes `&self`, so several
/// sessions can use one weight at once.
#[derive(Debug, Clone)]
pub struct Weight {
    rows: usize,
    cols: usize,
    repr: Repr,
}

impl Weight {
    /// Builds a weight from the raw bytes of a GGUF tensor of type `dtype` and shape
    /// `(rows, cols)`. Q4_1, Q8_0 and F32 are kept as they are; Q4_0 and Q4_K become Q4_1
    /// exactly; Q5_0, Q5_1, Q5_K and Q6_K become Q8_0 (within half an 8-bit step); F16 and
    /// BF16 become F32.
    pub fn from_gguf_bytes(
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Self, KernelError> {
        if !cols.is_multiple_of(BLOCK.max(dtype.block().0)) || rows == 0 || cols == 0 {
            return Err(KernelError::Shape(vec![rows, cols]));
        }
        let want = rows
            .checked_mul(cols)
            .and_then(|n| dtype.bytes_for(n))
            .ok_or_else(|| KernelError::Shape(vec![rows, cols]))?;
        if bytes.len() != want {
            return Err(KernelError::Bytes {
                dtype: format!("{dtype:?}"),
                shape: vec![rows, cols],
                got: bytes.len(),
                want,
            });
        }
        Ok(Self {
            rows,
            cols,
            repr: convert::repr(dtype, bytes),
        })
    }

    /// An f32 weight of shape `(rows, cols)`, row-major.
    pub fn from_f32(rows: usize, cols: usize, values: Vec<f32>) -> Result<Self, KernelError> {
        if rows == 0 || cols == 0 || values.len() != rows * cols {
            return Err(KernelError::Shape(vec![rows, cols]));
        }
        Ok(Self {
            rows,
            cols,
            repr: Repr::F32(values),
        })
    }

    /// The same weight with a Q4_1 matrix's rows regrouped eight at a time (when its rows are a
    /// multiple of eight; otherwise unchanged): the same values and memory, about twice as fast
    /// for batches of tokens (one integer-to-float step per block for eight rows), slower for
    /// one token at a time. For the sentence encoder, whose every pass is a batch.
    pub(crate) fn with_rows_side_by_side(self) -> Self {
        match self.repr {
            Repr::Q4_1(b) if self.rows.is_multiple_of(rows8::ROWS) => Self {
                repr: Repr::Q4_1x8(rows8::interleave(&b, self.cols / BLOCK)),
                ..self
            },
            repr => Self { repr, ..self },
        }
    }

    /// Output features (rows of the matrix).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (columns of the matrix).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes the weight holds in memory.
    pub fn size_in_bytes(&self) -> usize {
        match &self.repr {
            Repr::Q4_1(b) => std::mem::size_of_val(b.as_slice()),
            Repr::Q4_1x8(b) => std::mem::size_of_val(b.as_slice()),
            Repr::Q8_0(b) => std::mem::size_of_val(b.as_slice()),
            Repr::F32(v) => 4 * v.len(),
        }
    }

    /// The weight as f32 values, row-major (what tests compare the kernels against).
    pub fn dequantize(&self) -> Vec<f32> {
        match &self.repr {
            Repr::Q4_1(b) => b.iter().flat_map(Q4_1Block::values).collect(),
            Repr::Q4_1x8(_) => {
                let mut out = Vec::with_capacity(self.rows * self.cols);
                for r in 0..self.rows {
                    self.extend_with_row(r, &mut out);
                }
                out
            }
            Repr::Q8_0(b) => b.iter().flat_map(Q8_0Block::values).collect(),
            Repr::F32(v) => v.clone(),
        }
    }

    /// Appends row `r` as f32 values (the same values [`Weight::dequantize`] gives) to `out`:
    /// an embedding lookup without a dequantised copy of the whole table. `None` when `r` is
    /// not a row.
    pub fn extend_with_row(&self, r: usize, out: &mut Vec<f32>) -> Option<()> {
        if r >= self.rows {
            return None;
        }
        let nb = self.cols / BLOCK;
        match &self.repr {
            Repr::Q4_1(b) => b[r * nb..(r + 1) * nb]
                .iter()
                .for_each(|b| out.extend_from_slice(&b.values())),
            Repr::Q4_1x8(b) => {
                let g = r / rows8::ROWS;
                b[g * nb..(g + 1) * nb].iter().for_each(|b| {
                    out.extend_from_slice(&rows8::row_block(b, r % rows8::ROWS).values())
                })
            }
            Repr::Q8_0(b) => b[r * nb..(r + 1) * nb]
                .iter()
                .for_each(|b| out.extend_from_slice(&b.values())),
            Repr::F32(v) => out.extend_from_slice(&v[r * self.cols..(r + 1) * self.cols]),
        }
        Some(())
    }

    /// `out[t][r] = Σ_c x[t][c] · W[r][c]` for `t < tokens`: `x` is `tokens × cols`, `out` is
    /// `tokens × rows`, both row-major. Quantised weights dot 8-bit-quantised activations
    /// (relative error ~1e-2 of the row's magnitude, as llama.cpp); f32 weights are exact.
    pub fn matmul(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), KernelError> {
        let (want_x, want_out) = (tokens * self.cols, tokens * self.rows);
        if x.len() != want_x || out.len() != want_out {
            return Err(KernelError::Len {
                tokens,
                rows: self.rows,
                cols: self.cols,
                got_x: x.len(),
                got_out: out.len(),
                want_x,
                want_out,
            });
        }
        if tokens == 0 {
            return Ok(());
        }
        let q = QuantizedActivations::quantize(x, self.cols);
        self.matmul_quantized(&q, out);
        Ok(())
    }

    /// As [`Weight::matmul`] with activations already quantised (one quantisation shared by
    /// the weights that read the same input, e.g. q, k and v).
    pub fn matmul_quantized(&self, q: &QuantizedActivations, out: &mut [f32]) {
        let tokens = q.tokens();
        debug_assert_eq!(q.cols(), self.cols);
        debug_assert_eq!(out.len(), tokens * self.rows);
        let rows = self.rows;
        let threads = rayon::current_num_threads().max(1);
        if tokens >= PREFILL_MIN_TOKENS && tokens >= threads * ROW_SPLIT_MAX_TOKENS {
            // Tokens split over the threads, TOKEN_TILE at a time against each weight row.
            let per = tokens.div_ceil(threads * TOKEN_TILE) * TOKEN_TILE;
            out.par_chunks_mut(per * rows)
                .enumerate()
                .for_each(|(i, chunk)| {
                    let t0 = i * per;
                    let n = chunk.len() / rows;
                    self.rows_into(q, t0, n, 0, chunk, rows);
                });
        } else {
            // Output rows split over the threads (decode: the weights are the traffic; a short
            // prompt: every thread gets the same share, which whole token tiles cannot give).
            // Whole groups of eight rows (the side-by-side layout's unit).
            let chunk_rows = if rows * self.cols >= 1 << 16 {
                rows.div_ceil(threads)
                    .next_multiple_of(rows8::ROWS)
                    .min(rows)
            } else {
                rows
            };
            if tokens == 1 {
                out.par_chunks_mut(chunk_rows)
                    .enumerate()
                    .for_each(|(i, chunk)| self.rows_into(q, 0, 1, i * chunk_rows, chunk, rows));
            } else {
                // A few tokens (concurrent sessions' decode steps, a short prompt or query): each
                // thread takes a slice of the rows for all the tokens, so every weight block it
                // reads serves them all, then the slices are put in place.
                let parts: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(chunk_rows))
                    .into_par_iter()
                    .map(|i| {
                        let r0 = i * chunk_rows;
                        let n = chunk_rows.min(rows - r0);
                        let mut part = vec![0f32; tokens * n];
                        self.rows_into(q, 0, tokens, r0, &mut part, n);
                        (r0, part)
                    })
                    .collect();
                for (r0, part) in parts {
                    let n = part.len() / tokens;
                    for (t, src) in part.chunks_exact(n).enumerate() {
                        out[t * rows + r0..t * rows + r0 + n].copy_from_slice(src);
                    }
                }
            }
        }
    }

    /// Fills `out` (`n` tokens from `t0`, each with `out.len() / n` rows starting at `r0`;
    /// `stride` values apart) from the quantised activations.
    fn rows_into(
        &self,
        q: &QuantizedActivations,
        t0: usize,
        n: usize,
        r0: usize,
        out: &mut [f32],
        stride: usize,
    ) {
        match &self.repr {
            Repr::Q4_1(b) => tiles(b, dot_q4_1, self.cols, q, t0, n, r0, out, stride),
            Repr::Q4_1x8(b) => {
                let nr = if n == 1 { out.len() } else { stride };
                rows8::rows_into(b, self.cols / BLOCK, q, t0, n, r0, nr, out, stride)
            }
            Repr::Q8_0(b) => tiles(b, dot_q8_0, self.cols, q, t0, n, r0, out, stride),
            Repr::F32(w) => {
                let cols = self.cols;
                let nr = if n == 1 { out.len() } else { stride };
                for t in 0..n {
                    let xt = q.source(t0 + t);
                    for r in r0..r0 + nr {
                        out[t * stride + (r - r0)] = dot_f32(&w[r * cols..(r + 1) * cols], xt);
                    }
                }
            }
        }
    }
}

type DotFn<B> = fn(&[B], &QuantizedActivations, usize, usize, &mut [f32; TOKEN_TILE]);

/// The tile loop of one block type: `TOKEN_TILE` tokens at a time against each weight row.
#[allow(clippy::too_many_arguments)]
fn tiles<B>(
    blocks: &[B],
    dot: DotFn<B>,
    cols: usize,
    q: &QuantizedActivations,
    t0: usize,
    n: usize,
    r0: usize,
    out: &mut [f32],
    stride: usize,
) {
    let nr = if n == 1 { out.len() } else { stride };
    let nb = cols / BLOCK;
    let mut t = 0;
    while t < n {
        let tile = (n - t).min(TOKEN_TILE);
        for r in r0..r0 + nr {
            let mut acc = [0f32; TOKEN_TILE];
            dot(&blocks[r * nb..(r + 1) * nb], q, t0 + t, tile, &mut acc);
            for (j, a) in acc[..tile].iter().enumerate() {
                out[(t + j) * stride + (r - r0)] = *a;
            }
        }
        t += tile;
    }
}

/// A dot product with a fixed summation order (eight partial sums, then the lanes in order,
/// then the remainder): the compiler vectorises it without reassociation flags, and the model's
/// attention uses it too.
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut s = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            s[i] += x[i] * y[i];
        }
    }
    s.iter().sum::<f32>() + ra.iter().zip(rb).map(|(x, y)| x * y).sum::<f32>()
}

fn dot_q4_1(
    w: &[Q4_1Block],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = x86::v3() {
        return x86::dot_q4_1(simd, w, q, t, tile, acc);
    }
    quant::dot_q4_1(w, q, t, tile, acc)
}

fn dot_q8_0(
    w: &[Q8_0Block],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = x86::v3() {
        return x86::dot_q8_0(simd, w, q, t, tile, acc);
    }
    quant::dot_q8_0(w, q, t, tile, acc)
}

/// The portable kernels alone (what the SIMD ones are checked against), for tests and benches.
#[doc(hidden)]
pub fn matmul_portable(w: &Weight, x: &[f32], tokens: usize) -> Vec<f32> {
    let q = QuantizedActivations::quantize(x, w.cols);
    let nb = w.cols / BLOCK;
    let mut out = vec![0f32; tokens * w.rows];
    for t in 0..tokens {
        for r in 0..w.rows {
            let mut acc = [0f32; TOKEN_TILE];
            match &w.repr {
                Repr::Q4_1(b) => quant::dot_q4_1(&b[r * nb..(r + 1) * nb], &q, t, 1, &mut acc),
                Repr::Q4_1x8(b) => {
                    let g = r / rows8::ROWS;
                    let mut acc8 = [[0f32; rows8::ROWS]; TOKEN_TILE];
                    rows8::dot_portable(&b[g * nb..(g + 1) * nb], &q, t, 1, &mut acc8);
                    acc[0] = acc8[0][r % rows8::ROWS];
                }
                Repr::Q8_0(b) => quant::dot_q8_0(&b[r * nb..(r + 1) * nb], &q, t, 1, &mut acc),
                Repr::F32(v) => acc[0] = dot_f32(&v[r * w.cols..(r + 1) * w.cols], q.source(t)),
            }
            out[t * w.rows + r] = acc[0];
        }
    }
    out
}

#[cfg(test)]
mod tests;
