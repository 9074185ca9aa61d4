//! Every GGUF tensor type into the kernels' three representations, at load, without a cache:
//!
//! | file | kernels | how |
//! |---|---|---|
//! | Q4_1, Q8_0, F32 | the same | as they are |
//! | Q4_0 | Q4_1 | the same nibbles, minimum −8·d: exact |
//! | Q4_K | Q4_1 | each 32-value sub-block is a Q4_1 block (scale d·sc, minimum −dmin·m, the same nibbles): exact, the scales kept in f32 |
//! | Q5_0, Q5_1, Q5_K, Q6_K | Q8_0 | dequantised, then quantised as ggml's `quantize_row_q8_0` (within half an 8-bit step of the 5- or 6-bit value) |
//! | F16, BF16 | F32 | exact |
//!
//! The dequantisers follow ggml's reference `dequantize_row_*` (and give the same values as
//! candle's, which the tests hold them to).

use rayon::prelude::*;

use super::quant::{Q4_1Block, Q8_0Block};
use super::{BLOCK, Repr};
use crate::gguf::GgmlType;

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// ggml's 6-bit scale and minimum `j` (0..8) of a Q4_K / Q5_K super-block.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One block's values appended to `out` (`bytes` is exactly one block of `t`).
fn dequantize_block(t: GgmlType, b: &[u8], out: &mut Vec<f32>) {
    match t {
        GgmlType::F32 => out.push(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        GgmlType::F16 => out.push(f16_at(b, 0)),
        GgmlType::BF16 => out.push(half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        GgmlType::Q4_0 => {
            let d = f16_at(b, 0);
            let qs = &b[2..18];
            out.extend(qs.iter().map(|q| f32::from((q & 15) as i8 - 8) * d));
            out.extend(qs.iter().map(|q| f32::from((q >> 4) as i8 - 8) * d));
        }
        GgmlType::Q4_1 => out.extend(Q4_1Block::parse(b).values()),
        GgmlType::Q8_0 => out.extend(Q8_0Block::parse(b).values()),
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let d = f16_at(b, 0);
            let (m, at) = if t == GgmlType::Q5_1 {
                (Some(f16_at(b, 2)), 4)
            } else {
                (None, 2)
            };
            let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
            let qs = &b[at + 4..at + 20];
            let mut v = [0f32; BLOCK];
            for j in 0..16 {
                let h0 = (((qh >> j) << 4) & 0x10) as u8;
                let h1 = ((qh >> (j + 12)) & 0x10) as u8;
                let (x0, x1) = ((qs[j] & 15) | h0, (qs[j] >> 4) | h1);
                match m {
                    Some(m) => {
                        v[j] = f32::from(x0) * d + m;
                        v[j + 16] = f32::from(x1) * d + m;
                    }
                    None => {
                        v[j] = f32::from(x0 as i8 - 16) * d;
                        v[j + 16] = f32::from(x1 as i8 - 16) * d;
                    }
                }
            }
            out.extend(v);
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            let (d, min) = (f16_at(b, 0), f16_at(b, 2));
            let scales = &b[4..16];
            let (qh, mut ql) = if t == GgmlType::Q5K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            let (mut u1, mut u2) = (1u8, 2u8);
            for j in 0..4 {
                let (sc, m) = scale_min_k4(2 * j, scales);
                let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
                let (sc, m) = scale_min_k4(2 * j + 1, scales);
                let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
                let high = |l: usize, u: u8| qh.map_or(0, |h| if h[l] & u != 0 { 16 } else { 0 });
                let q = &ql[..32];
                out.extend(
                    q.iter()
                        .enumerate()
                        .map(|(l, q)| d1 * f32::from((q & 15) + high(l, u1)) - m1),
                );
                out.extend(
                    q.iter()
                        .enumerate()
                        .map(|(l, q)| d2 * f32::from((q >> 4) + high(l, u2)) - m2),
                );
                ql = &ql[32..];
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        GgmlType::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = f16_at(b, 208);
            let mut y = [0f32; 256];
            for n in 0..2 {
                let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
                let y = &mut y[128 * n..];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) as i8 - 32;
                    let q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                    let s = |k: usize| d * f32::from(sc[is + k] as i8);
                    y[l] = s(0) * f32::from(q1);
                    y[l + 32] = s(2) * f32::from(q2);
                    y[l + 64] = s(4) * f32::from(q3);
                    y[l + 96] = s(6) * f32::from(q4);
                }
            }
            out.extend(y);
        }
    }
}

/// Every value of a tensor of type `t` (its bytes a whole number of blocks).
pub(crate) fn dequantize(t: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let (per, size) = t.block();
    let mut out = Vec::with_capacity(bytes.len() / size * per);
    for b in bytes.chunks_exact(size) {
        dequantize_block(t, b, &mut out);
    }
    out
}

/// ggml's `quantize_row_q8_0_ref` for one block: `d = max|x| / 127` (stored at f16
/// precision), `q = round(x / d)` with the unrounded `d`.
fn q8_0_block(x: &[f32]) -> Q8_0Block {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; BLOCK];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    Q8_0Block {
        d: half::f16::from_f32(d).to_f32(),
        qs,
    }
}

/// A Q4_K super-block as eight Q4_1 blocks.
fn q4k_as_q4_1(b: &[u8], out: &mut Vec<Q4_1Block>) {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    for j in 0..4 {
        let ql = &b[16 + 32 * j..16 + 32 * (j + 1)];
        for (half_, shift) in [(0, 0), (1, 4)] {
            let (sc, m) = scale_min_k4(2 * j + half_, scales);
            let nib = |l: usize| (ql[l] >> shift) & 15;
            let mut qs = [0u8; 16];
            for (i, q) in qs.iter_mut().enumerate() {
                *q = nib(i) | (nib(i + 16) << 4);
            }
            out.push(Q4_1Block {
                d: d * f32::from(sc),
                m: -(min * f32::from(m)),
                qs,
            });
        }
    }
}

/// The representation the kernels keep for a tensor of type `t` (`bytes` checked by the caller).
pub(super) fn repr(t: GgmlType, bytes: &[u8]) -> Repr {
    let (_, size) = t.block();
    match t {
        GgmlType::Q4_1 => Repr::Q4_1(bytes.chunks_exact(size).map(Q4_1Block::parse).collect()),
        GgmlType::Q8_0 => Repr::Q8_0(bytes.chunks_exact(size).map(Q8_0Block::parse).collect()),
        GgmlType::Q4_0 => Repr::Q4_1(
            bytes
                .chunks_exact(size)
                .map(|b| {
                    let d = f16_at(b, 0);
                    let mut qs = [0u8; 16];
                    qs.copy_from_slice(&b[2..18]);
                    Q4_1Block { d, m: -8.0 * d, qs }
                })
                .collect(),
        ),
        GgmlType::Q4K => {
            let mut v = Vec::with_capacity(bytes.len() / size * 8);
            bytes
                .chunks_exact(size)
                .for_each(|b| q4k_as_q4_1(b, &mut v));
            Repr::Q4_1(v)
        }
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => Repr::F32(dequantize(t, bytes)),
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5K | GgmlType::Q6K => {
            // On every thread: a 270M model has ~10⁸ such values.
            Repr::Q8_0(
                bytes
                    .par_chunks_exact(size)
                    .flat_map_iter(|b| {
                        let mut v = Vec::with_capacity(t.block().0);
                        dequantize_block(t, b, &mut v);
                        v.chunks_exact(BLOCK).map(q8_0_block).collect::<Vec<_>>()
                    })
                    .collect(),
            )
        }
    }
}
