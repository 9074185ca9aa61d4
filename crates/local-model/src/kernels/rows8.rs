//! Q4_1 weights with eight rows side by side, for batches (the sentence encoder).
//!
//! [`Q4_1Block`]s are dotted one row at a time: every 32 products cost an integer dot, its
//! horizontal conversion to f32 and a scaled add. Here a [`Rows8`] block holds one 32-value block
//! of eight consecutive rows, its nibbles laid out so that one vector register holds four
//! values of each of the eight rows; a token's four matching activation bytes are broadcast to
//! all eight rows. The 8 × 32 integer products of a block then sum in 16-bit lanes (no overflow:
//! ≤ 8 · 2 · 15 · 127 = 30,480) and become f32 once for the eight rows, so the float work per
//! block is one conversion, one scaled add and one minimum term for eight rows instead of for
//! one. Same bits as the Q4_1 blocks (no loss), same memory.
//!
//! The sum of a row and token is, block after block: `acc += (Σ q_w·q_x) · (d_w · d_x)`, then
//! `acc += m_w · s_x`, whatever the tile or the split: a token's outputs do not depend on the
//! batch.

use super::quant::{Q4_1Block, QuantizedActivations};
use super::{BLOCK, TOKEN_TILE};

// The block layout lives beside Q4_1's in `quant.rs`, so the x86 kernel and this module both
// read it from there (no import circle between them).
pub(crate) use super::quant::{ROWS, Rows8};

/// Q4_1 blocks (`rows` a multiple of [`ROWS`], `nb` blocks per row, row-major) regrouped: block
/// `g · nb + i` holds block `i` of rows `8·g .. 8·g + 8`.
pub(crate) fn interleave(blocks: &[Q4_1Block], nb: usize) -> Vec<Rows8> {
    let groups = blocks.len() / nb / ROWS;
    let mut out = Vec::with_capacity(groups * nb);
    for g in 0..groups {
        for i in 0..nb {
            let mut b8 = Rows8 {
                qs: [[0; 32]; 4],
                d: [0.0; ROWS],
                m: [0.0; ROWS],
            };
            for r in 0..ROWS {
                let b = &blocks[(g * ROWS + r) * nb + i];
                b8.d[r] = b.d;
                b8.m[r] = b.m;
                for v in 0..4 {
                    b8.qs[v][4 * r..4 * r + 4].copy_from_slice(&b.qs[4 * v..4 * v + 4]);
                }
            }
            out.push(b8);
        }
    }
    out
}

/// Row `r` (0..8) of a [`Rows8`] block as the Q4_1 block it came from.
pub(crate) fn row_block(b: &Rows8, r: usize) -> Q4_1Block {
    let mut qs = [0u8; 16];
    for v in 0..4 {
        qs[4 * v..4 * v + 4].copy_from_slice(&b.qs[v][4 * r..4 * r + 4]);
    }
    Q4_1Block {
        d: b.d[r],
        m: b.m[r],
        qs,
    }
}

/// Fills `out` for `n` tokens from `t0` and the `nr` rows from `r0` (both multiples of
/// [`ROWS`]), `stride` values between tokens: [`TOKEN_TILE`] tokens at a time against each
/// group of eight rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows_into(
    w: &[Rows8],
    nb: usize,
    q: &QuantizedActivations,
    t0: usize,
    n: usize,
    r0: usize,
    nr: usize,
    out: &mut [f32],
    stride: usize,
) {
    let mut t = 0;
    while t < n {
        let tile = (n - t).min(TOKEN_TILE);
        for g in r0 / ROWS..(r0 + nr) / ROWS {
            let mut acc = [[0f32; ROWS]; TOKEN_TILE];
            dot(&w[g * nb..(g + 1) * nb], q, t0 + t, tile, &mut acc);
            for (j, a) in acc[..tile].iter().enumerate() {
                let at = (t + j) * stride + g * ROWS - r0;
                out[at..at + ROWS].copy_from_slice(a);
            }
        }
        t += tile;
    }
}

fn dot(
    w: &[Rows8],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [[f32; ROWS]; TOKEN_TILE],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = super::x86::v3() {
        return super::x86::dot_rows8(simd, w, q, t, tile, acc);
    }
    dot_portable(w, q, t, tile, acc)
}

/// The scalar kernel: the same integer sums, the same f32 order (unfused).
pub(crate) fn dot_portable(
    w: &[Rows8],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [[f32; ROWS]; TOKEN_TILE],
) {
    for (j, a) in acc.iter_mut().enumerate().take(tile) {
        let (xq, xd) = q.token(t + j);
        for ((b, xq), xd) in w.iter().zip(xq).zip(xd) {
            for (r, a) in a.iter_mut().enumerate() {
                let mut i = 0i32;
                for v in 0..4 {
                    for k in 0..4 {
                        let byte = b.qs[v][4 * r + k];
                        i += i32::from(byte & 15) * i32::from(xq[4 * v + k]);
                        i += i32::from(byte >> 4) * i32::from(xq[BLOCK / 2 + 4 * v + k]);
                    }
                }
                *a += i as f32 * (b.d[r] * xd[0]);
                *a += b.m[r] * xd[1];
            }
        }
    }
}
