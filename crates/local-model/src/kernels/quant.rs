//! Block formats and the portable (scalar) kernels; the SIMD kernels compute the same sums.

use rayon::prelude::*;

use super::{BLOCK, TOKEN_TILE};

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

fn f16_round(v: f32) -> f32 {
    half::f16::from_f32(v).to_f32()
}

/// Rows per [`Rows8`] block (the encoder's layout, `rows8.rs`).
pub(crate) const ROWS: usize = 8;

/// One 32-value block of eight consecutive rows. `qs[v]` byte `4·r + b` is row `r`'s Q4_1 byte
/// `4·v + b`: its low nibble is value `4·v + b`, its high nibble value `16 + 4·v + b`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rows8 {
    pub qs: [[u8; 32]; 4],
    pub d: [f32; ROWS],
    pub m: [f32; ROWS],
}

/// ggml's `block_q4_1` (`d: f16, m: f16, qs: [u8; 16]`; value `j` is `d·(qs[j] & 15) + m`,
/// value `j + 16` is `d·(qs[j] >> 4) + m`), with the scales widened to f32 once at load.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Q4_1Block {
    pub d: f32,
    pub m: f32,
    pub qs: [u8; 16],
}

impl Q4_1Block {
    pub fn parse(b: &[u8]) -> Self {
        let mut qs = [0u8; 16];
        qs.copy_from_slice(&b[4..20]);
        Self {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qs,
        }
    }

    pub fn values(&self) -> [f32; BLOCK] {
        let mut v = [0f32; BLOCK];
        for j in 0..16 {
            v[j] = self.d * f32::from(self.qs[j] & 15) + self.m;
            v[j + 16] = self.d * f32::from(self.qs[j] >> 4) + self.m;
        }
        v
    }
}

/// ggml's `block_q8_0` (`d: f16, qs: [i8; 32]`; value `j` is `d·qs[j]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Q8_0Block {
    pub d: f32,
    pub qs: [i8; BLOCK],
}

impl Q8_0Block {
    pub fn parse(b: &[u8]) -> Self {
        let mut qs = [0i8; BLOCK];
        for (q, &v) in qs.iter_mut().zip(&b[2..34]) {
            *q = v as i8;
        }
        Self {
            d: f16_at(b, 0),
            qs,
        }
    }

    pub fn values(&self) -> [f32; BLOCK] {
        self.qs.map(|q| self.d * f32::from(q))
    }
}

/// From this many activation values on, quantisation is split over the threads.
const PARALLEL_MIN_VALUES: usize = 1 << 14;

/// `x.round()` (half away from zero, C's `roundf`) for `|x| < 2²³`, NaN → 0, without the
/// call to libm's `roundf` that `f32::round` is on x86-64's baseline (no SSE4.1): it was ~5 %
/// of the sentence encoder's time. `x − trunc(x)` is exact in that range, so this is `roundf`
/// exactly.
#[inline]
fn round_small(x: f32) -> i32 {
    let i = x as i32;
    let f = x - i as f32;
    i + i32::from(f >= 0.5) - i32::from(f <= -0.5)
}

/// One 32-value block: `d = max|x| / 127`, `q = round(x / d)`, and `[d, d·Σq]` at f16
/// precision, as ggml's q8_1 stores them (and candle's): the same sums as llama.cpp and candle,
/// not only the same scheme.
fn quantize_block(b: &[f32]) -> ([i8; BLOCK], [f32; 2]) {
    let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0i8; BLOCK];
    let mut sum = 0i32;
    for (o, v) in q.iter_mut().zip(b) {
        // |v·id| ≤ 127 (NaN → 0): the cast cannot wrap.
        *o = round_small(v * id) as i8;
        sum += i32::from(*o);
    }
    (q, [f16_round(d), f16_round(d * sum as f32)])
}

/// Activations quantised for the kernels: per token and 32-value block, `d = max|x| / 127`,
/// `q = round(x / d)` and `s = d · Σq`, `d` and `s` kept at f16 precision (llama.cpp's `q8_1`),
/// plus the f32 source.
#[derive(Debug, Clone, Default)]
pub struct QuantizedActivations {
    cols: usize,
    tokens: usize,
    pub(crate) qs: Vec<[i8; BLOCK]>,
    /// `[d, s]` per block.
    pub(crate) ds: Vec<[f32; 2]>,
    source: Vec<f32>,
}

impl QuantizedActivations {
    /// Quantises `x` (`tokens × cols`, row-major; `cols` a multiple of 32, which
    /// [`super::Weight`] guarantees for its own `cols`).
    pub fn quantize(x: &[f32], cols: usize) -> Self {
        let tokens = x.len().checked_div(cols).unwrap_or(0);
        // A prompt's activations are quantised on every thread; a decode step's few blocks on
        // this one (the same values either way: each block on its own).
        let (qs, ds): (Vec<[i8; BLOCK]>, Vec<[f32; 2]>) = if x.len() >= PARALLEL_MIN_VALUES {
            x.par_chunks_exact(BLOCK).map(quantize_block).unzip()
        } else {
            x.chunks_exact(BLOCK).map(quantize_block).unzip()
        };
        Self {
            cols,
            tokens,
            qs,
            ds,
            source: x.to_vec(),
        }
    }

    /// Tokens (rows of the input).
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Values per token.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Token `t`'s f32 values.
    pub(crate) fn source(&self, t: usize) -> &[f32] {
        &self.source[t * self.cols..(t + 1) * self.cols]
    }

    /// Token `t`'s blocks.
    pub(crate) fn token(&self, t: usize) -> (&[[i8; BLOCK]], &[[f32; 2]]) {
        let nb = self.cols / BLOCK;
        (
            &self.qs[t * nb..(t + 1) * nb],
            &self.ds[t * nb..(t + 1) * nb],
        )
    }
}

/// `acc[j] = Σ_blocks d_w·d_x·Σ q_w·q_x + m_w·s_x` for tokens `t..t + tile`.
pub(crate) fn dot_q4_1(
    w: &[Q4_1Block],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    for (j, a) in acc.iter_mut().enumerate().take(tile) {
        let (xq, xd) = q.token(t + j);
        let mut sum = 0f32;
        for ((b, xq), xd) in w.iter().zip(xq).zip(xd) {
            let mut i = 0i32;
            for k in 0..16 {
                i += i32::from(b.qs[k] & 15) * i32::from(xq[k]);
                i += i32::from(b.qs[k] >> 4) * i32::from(xq[k + 16]);
            }
            sum += b.d * xd[0] * i as f32 + b.m * xd[1];
        }
        *a = sum;
    }
}

/// `acc[j] = Σ_blocks d_w·d_x·Σ q_w·q_x` for tokens `t..t + tile`.
pub(crate) fn dot_q8_0(
    w: &[Q8_0Block],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    for (j, a) in acc.iter_mut().enumerate().take(tile) {
        let (xq, xd) = q.token(t + j);
        let mut sum = 0f32;
        for ((b, xq), xd) in w.iter().zip(xq).zip(xd) {
            let i: i32 =
                b.qs.iter()
                    .zip(xq)
                    .map(|(&a, &c)| i32::from(a) * i32::from(c))
                    .sum();
            sum += b.d * xd[0] * i as f32;
        }
        *a = sum;
    }
}

#[cfg(test)]
mod tests {
    use super::round_small;

    #[test]
    fn round_small_is_roundf() {
        let mut cases = vec![
            0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 126.5, -126.5, 127.0, -127.0,
        ];
        cases.extend([0.49999997f32, -0.49999997, 1.4999999, 0.50000006, 126.49999]);
        cases.extend(crate::test_support::values(10_000, 9, 127.0));
        for x in cases {
            assert_eq!(round_small(x), x.round() as i32, "{x}");
        }
        assert_eq!(round_small(f32::NAN), 0);
    }
}
