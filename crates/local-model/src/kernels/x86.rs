//! AVX2 + FMA kernels (x86-64-v3), selected at run time; safe code through `pulp`'s feature
//! tokens, which compile the closure with the CPU features it proved present.

use pulp::bytemuck::cast;
use pulp::x86::V3;
use std::arch::x86_64::{__m128i, __m256, __m256i};

use super::TOKEN_TILE;
use super::quant::{Q4_1Block, Q8_0Block, QuantizedActivations, ROWS, Rows8};

/// One token's quantised blocks and their `[d, s]` scales.
type TokenBlocks<'a> = (&'a [[i8; 32]], &'a [[f32; 2]]);

/// The AVX2 + FMA token when this CPU has those features (checked once, then cached by pulp).
#[inline]
pub(crate) fn v3() -> Option<V3> {
    V3::try_new()
}

#[inline(always)]
fn hsum(simd: V3, v: __m256) -> f32 {
    let a: [f32; 8] = cast(v);
    let _ = simd;
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
}

/// Q4_1 weights × quantised activations, `tile` tokens from `t`; the same sums as
/// `quant::dot_q4_1` (integer products exact, f32 accumulation in another order). Each token's
/// sum is computed the same way whatever the tile, so a row's result does not depend on the
/// batch.
pub(crate) fn dot_q4_1(
    simd: V3,
    w: &[Q4_1Block],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    // The tile size as a constant: the accumulators then live in registers.
    match tile {
        4 => q4_1_tile::<4>(simd, w, q, t, acc),
        3 => q4_1_tile::<3>(simd, w, q, t, acc),
        2 => q4_1_tile::<2>(simd, w, q, t, acc),
        _ => q4_1_tile::<1>(simd, w, q, t, acc),
    }
}

#[inline(always)]
fn q4_1_tile<const N: usize>(
    simd: V3,
    w: &[Q4_1Block],
    q: &QuantizedActivations,
    t: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    simd.vectorize(
        #[inline(always)]
        || {
            let mask = simd.avx._mm256_set1_epi8(0x0F);
            let ones = simd.avx._mm256_set1_epi16(1);
            let mut vacc = [simd.avx._mm256_setzero_ps(); N];
            let mut macc = [0f32; N];
            let toks: [TokenBlocks; N] = std::array::from_fn(|j| q.token(t + j));
            for (i, b) in w.iter().enumerate() {
                let lo: __m128i = cast(b.qs);
                let hi = simd.sse2._mm_srli_epi16::<4>(lo);
                let wv = simd
                    .avx2
                    ._mm256_and_si256(simd.avx._mm256_set_m128i(hi, lo), mask);
                for j in 0..N {
                    let (xq, xd) = toks[j];
                    let xv: __m256i = cast(xq[i]);
                    let p = simd.avx2._mm256_maddubs_epi16(wv, xv);
                    let p = simd
                        .avx
                        ._mm256_cvtepi32_ps(simd.avx2._mm256_madd_epi16(p, ones));
                    let scale = simd.avx._mm256_set1_ps(b.d * xd[i][0]);
                    vacc[j] = simd.fma._mm256_fmadd_ps(p, scale, vacc[j]);
                    macc[j] += b.m * xd[i][1];
                }
            }
            for j in 0..N {
                acc[j] = hsum(simd, vacc[j]) + macc[j];
            }
        },
    )
}

/// Q8_0 weights × quantised activations, `tile` tokens from `t`.
pub(crate) fn dot_q8_0(
    simd: V3,
    w: &[Q8_0Block],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    match tile {
        4 => q8_0_tile::<4>(simd, w, q, t, acc),
        3 => q8_0_tile::<3>(simd, w, q, t, acc),
        2 => q8_0_tile::<2>(simd, w, q, t, acc),
        _ => q8_0_tile::<1>(simd, w, q, t, acc),
    }
}

#[inline(always)]
fn q8_0_tile<const N: usize>(
    simd: V3,
    w: &[Q8_0Block],
    q: &QuantizedActivations,
    t: usize,
    acc: &mut [f32; TOKEN_TILE],
) {
    simd.vectorize(
        #[inline(always)]
        || {
            let ones = simd.avx._mm256_set1_epi16(1);
            let mut vacc = [simd.avx._mm256_setzero_ps(); N];
            let toks: [TokenBlocks; N] = std::array::from_fn(|j| q.token(t + j));
            for (i, b) in w.iter().enumerate() {
                let wv: __m256i = cast(b.qs);
                // maddubs wants unsigned × signed: |w| × (x with w's sign).
                let wabs = simd.avx2._mm256_abs_epi8(wv);
                for j in 0..N {
                    let (xq, xd) = toks[j];
                    let xv: __m256i = cast(xq[i]);
                    let xs = simd.avx2._mm256_sign_epi8(xv, wv);
                    let p = simd.avx2._mm256_maddubs_epi16(wabs, xs);
                    let p = simd
                        .avx
                        ._mm256_cvtepi32_ps(simd.avx2._mm256_madd_epi16(p, ones));
                    let scale = simd.avx._mm256_set1_ps(b.d * xd[i][0]);
                    vacc[j] = simd.fma._mm256_fmadd_ps(p, scale, vacc[j]);
                }
            }
            for j in 0..N {
                acc[j] = hsum(simd, vacc[j]);
            }
        },
    )
}

/// [`Rows8`] blocks × quantised activations: eight rows for `tile` tokens from `t` (see
/// `rows8`; the same sums as `rows8::dot_portable`, fused).
pub(crate) fn dot_rows8(
    simd: V3,
    w: &[Rows8],
    q: &QuantizedActivations,
    t: usize,
    tile: usize,
    acc: &mut [[f32; ROWS]; TOKEN_TILE],
) {
    match tile {
        4 => rows8_tile::<4>(simd, w, q, t, acc),
        3 => rows8_tile::<3>(simd, w, q, t, acc),
        2 => rows8_tile::<2>(simd, w, q, t, acc),
        _ => rows8_tile::<1>(simd, w, q, t, acc),
    }
}

#[inline(always)]
fn rows8_tile<const N: usize>(
    simd: V3,
    w: &[Rows8],
    q: &QuantizedActivations,
    t: usize,
    acc: &mut [[f32; ROWS]; TOKEN_TILE],
) {
    simd.vectorize(
        #[inline(always)]
        || {
            let mask = simd.avx._mm256_set1_epi8(0x0F);
            let ones = simd.avx._mm256_set1_epi16(1);
            let mut vacc = [simd.avx._mm256_setzero_ps(); N];
            let toks: [TokenBlocks; N] = std::array::from_fn(|j| q.token(t + j));
            for (i, b) in w.iter().enumerate() {
                // Group g's four values of each row: the low nibbles of qs[g] (values 4g..),
                // then the high nibbles (values 16 + 4g..).
                let mut wv = [simd.avx._mm256_setzero_si256(); 8];
                for v in 0..4 {
                    let raw: __m256i = cast(b.qs[v]);
                    wv[v] = simd.avx2._mm256_and_si256(raw, mask);
                    wv[v + 4] = simd
                        .avx2
                        ._mm256_and_si256(simd.avx2._mm256_srli_epi16::<4>(raw), mask);
                }
                let d: __m256 = cast(b.d);
                let m: __m256 = cast(b.m);
                for j in 0..N {
                    let (xq, xd) = toks[j];
                    // The token's 32 bytes as eight 4-byte groups, each broadcast to the rows.
                    let xw: [i32; 8] = cast(xq[i]);
                    let mut s = simd
                        .avx2
                        ._mm256_maddubs_epi16(wv[0], simd.avx._mm256_set1_epi32(xw[0]));
                    for g in 1..8 {
                        let p = simd
                            .avx2
                            ._mm256_maddubs_epi16(wv[g], simd.avx._mm256_set1_epi32(xw[g]));
                        s = simd.avx2._mm256_add_epi16(s, p);
                    }
                    let isum = simd.avx2._mm256_madd_epi16(s, ones);
                    let scale = simd.avx._mm256_mul_ps(d, simd.avx._mm256_set1_ps(xd[i][0]));
                    vacc[j] =
                        simd.fma
                            ._mm256_fmadd_ps(simd.avx._mm256_cvtepi32_ps(isum), scale, vacc[j]);
                    vacc[j] =
                        simd.fma
                            ._mm256_fmadd_ps(m, simd.avx._mm256_set1_ps(xd[i][1]), vacc[j]);
                }
            }
            for j in 0..N {
                acc[j] = cast(vacc[j]);
            }
        },
    )
}
