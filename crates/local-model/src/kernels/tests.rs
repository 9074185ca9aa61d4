#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use proptest::prelude::*;

use super::*;
use crate::test_support::{candle_values, values};

/// candle's type for ours.
fn candle_type(t: GgmlType) -> GgmlDType {
    match t {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::F16 => GgmlDType::F16,
        GgmlType::BF16 => GgmlDType::BF16,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q4K => GgmlDType::Q4K,
        GgmlType::Q5K => GgmlDType::Q5K,
        GgmlType::Q6K => GgmlDType::Q6K,
    }
}

/// `w` quantised by candle (the oracle's quantiser): its bytes and candle's dequantisation.
fn candle_quantized(dtype: GgmlType, rows: usize, cols: usize, w: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let t = Tensor::from_slice(w, (rows, cols), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&t, candle_type(dtype)).unwrap();
    (q.data().unwrap().into_owned(), candle_values(&q))
}

fn weight(dtype: GgmlType, rows: usize, cols: usize, w: &[f32]) -> Weight {
    let (bytes, _) = candle_quantized(dtype, rows, cols, w);
    Weight::from_gguf_bytes(dtype, rows, cols, &bytes).unwrap()
}

/// The plain reference: f32 weights (dequantised) times f32 activations, in f64.
fn reference(w: &Weight, x: &[f32], tokens: usize) -> Vec<f32> {
    let (rows, cols) = (w.rows(), w.cols());
    let wf = w.dequantize();
    let mut out = vec![0f32; tokens * rows];
    for t in 0..tokens {
        for r in 0..rows {
            out[t * rows + r] = (0..cols)
                .map(|c| f64::from(wf[r * cols + c]) * f64::from(x[t * cols + c]))
                .sum::<f64>() as f32;
        }
    }
    out
}

/// Activation quantisation moves each product by ≤ d_x/2 · |w|: the bound over a row.
fn bound(w: &Weight, x: &[f32], tokens: usize, t: usize, r: usize) -> f32 {
    let cols = w.cols();
    let wf = w.dequantize();
    let _ = tokens;
    let mut e = 0f32;
    for b in 0..cols / BLOCK {
        let xs = &x[t * cols + b * BLOCK..t * cols + (b + 1) * BLOCK];
        let d = xs.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let ws: f32 = wf[r * cols + b * BLOCK..r * cols + (b + 1) * BLOCK]
            .iter()
            .map(|v| v.abs())
            .sum();
        e += d / 2.0 * ws;
    }
    e * 1.01 + 1e-4
}

/// The size of the terms a row's dot product sums: Σ (|w| + the block's largest |w|) · |x|
/// (a Q4_1 block's offset `m` is at most its largest value).
fn magnitude(w: &Weight, x: &[f32], t: usize, r: usize) -> f32 {
    let cols = w.cols();
    let wf = w.dequantize();
    let row = &wf[r * cols..(r + 1) * cols];
    let xt = &x[t * cols..(t + 1) * cols];
    row.chunks_exact(BLOCK)
        .zip(xt.chunks_exact(BLOCK))
        .map(|(wb, xb)| {
            let wmax = wb.iter().fold(0f32, |m, v| m.max(v.abs()));
            wb.iter()
                .zip(xb)
                .map(|(a, b)| (a.abs() + wmax) * b.abs())
                .sum::<f32>()
        })
        .sum()
}

fn check(w: &Weight, x: &[f32], tokens: usize) {
    let mut out = vec![f32::NAN; tokens * w.rows()];
    w.matmul(x, tokens, &mut out).unwrap();
    let want = reference(w, x, tokens);
    let portable = matmul_portable(w, x, tokens);
    for t in 0..tokens {
        for r in 0..w.rows() {
            let i = t * w.rows() + r;
            let b = bound(w, x, tokens, t, r);
            assert!(
                (out[i] - want[i]).abs() <= b,
                "token {t} row {r}: kernel {} vs reference {} (bound {b})",
                out[i],
                want[i]
            );
            // SIMD and portable kernels: the same integer sums, f32 order differs only — an
            // error relative to the size of the terms summed (which may cancel), not the result.
            let tol = 1e-5 * magnitude(w, x, t, r) + 1e-6;
            assert!(
                (out[i] - portable[i]).abs() <= tol,
                "token {t} row {r}: kernel {} vs portable {}",
                out[i],
                portable[i]
            );
        }
    }
}

#[test]
fn q4_1_and_q8_0_match_the_reference_at_decode_and_prefill_sizes() {
    for dtype in [GgmlType::Q4_1, GgmlType::Q8_0] {
        for (rows, cols) in [(64, 576), (192, 576), (576, 1536)] {
            let w = weight(dtype, rows, cols, &values(rows * cols, 1, 0.1));
            for tokens in [1, 3, PREFILL_MIN_TOKENS, 37] {
                check(&w, &values(tokens * cols, 2 + tokens as u64, 2.0), tokens);
            }
        }
    }
}

/// Whichever way a matmul is split (rows or token tiles over the threads, by its size), every
/// token's outputs are bit for bit those of the token alone: the encoder's vectors and the
/// chat model's logits must not depend on the batch.
#[test]
fn a_tokens_outputs_do_not_depend_on_the_batch_or_its_split() {
    let big = rayon::current_num_threads().max(1) * ROW_SPLIT_MAX_TOKENS + 3;
    for dtype in [GgmlType::Q4_1, GgmlType::Q8_0] {
        let (rows, cols) = (96, 384);
        let w = weight(dtype, rows, cols, &values(rows * cols, 7, 0.1));
        for tokens in [2, 5, PREFILL_MIN_TOKENS, 12, 37, big] {
            let x = values(tokens * cols, 40 + tokens as u64, 2.0);
            let mut out = vec![0f32; tokens * rows];
            w.matmul(&x, tokens, &mut out).unwrap();
            for t in 0..tokens {
                let mut alone = vec![0f32; rows];
                w.matmul(&x[t * cols..(t + 1) * cols], 1, &mut alone)
                    .unwrap();
                assert_eq!(
                    out[t * rows..(t + 1) * rows],
                    alone[..],
                    "{dtype:?}, token {t} of {tokens}"
                );
            }
        }
        // And both splits against the reference.
        check(&w, &values(big * cols, 3, 2.0), big);
    }
}

/// Q4_1 rows side by side (the encoder's layout): the same values, the same bounds against the
/// reference, the plain Q4_1 kernel's results up to f32 order, batch-independent outputs; rows
/// that are not a multiple of eight keep the plain layout.
#[test]
fn q4_1_rows_side_by_side_match_the_plain_layout() {
    let big = rayon::current_num_threads().max(1) * ROW_SPLIT_MAX_TOKENS + 3;
    // (192, 384): the rows split in two chunks of whole groups; (8, 32): the token split too.
    for (rows, cols) in [(8, 32), (192, 384), (32, 1536)] {
        let plain = weight(GgmlType::Q4_1, rows, cols, &values(rows * cols, 21, 0.1));
        let w8 = plain.clone().with_rows_side_by_side();
        assert!(matches!(w8.repr, Repr::Q4_1x8(_)));
        assert_eq!(w8.dequantize(), plain.dequantize());
        assert_eq!(w8.size_in_bytes(), plain.size_in_bytes());
        let mut row = Vec::new();
        w8.extend_with_row(rows - 1, &mut row).unwrap();
        assert_eq!(row, plain.dequantize()[(rows - 1) * cols..]);
        for tokens in [1, 3, 12, if rows == 8 { big } else { 37 }] {
            let x = values(tokens * cols, 60 + tokens as u64, 2.0);
            check(&w8, &x, tokens);
            let (mut a, mut b) = (vec![0f32; tokens * rows], vec![0f32; tokens * rows]);
            w8.matmul(&x, tokens, &mut a).unwrap();
            plain.matmul(&x, tokens, &mut b).unwrap();
            for t in 0..tokens {
                for r in 0..rows {
                    let i = t * rows + r;
                    let tol = 1e-5 * magnitude(&plain, &x, t, r) + 1e-6;
                    assert!((a[i] - b[i]).abs() <= tol, "{rows}x{cols} t{t} r{r}");
                }
                let mut alone = vec![0f32; rows];
                w8.matmul(&x[t * cols..(t + 1) * cols], 1, &mut alone)
                    .unwrap();
                assert_eq!(
                    a[t * rows..(t + 1) * rows],
                    alone[..],
                    "token {t} of {tokens}"
                );
            }
        }
    }
    let odd = weight(GgmlType::Q4_1, 12, 64, &values(12 * 64, 5, 0.1)).with_rows_side_by_side();
    assert!(matches!(odd.repr, Repr::Q4_1(_)));
}

#[test]
fn f32_and_f16_weights_are_exact_up_to_rounding() {
    let (rows, cols) = (40, 96);
    let v = values(rows * cols, 5, 1.0);
    let x = values(3 * cols, 6, 1.0);
    let f32w = Weight::from_f32(rows, cols, v.clone()).unwrap();
    let f16w = weight(GgmlType::F16, rows, cols, &v);
    for w in [f32w, f16w] {
        let mut out = vec![0f32; 3 * rows];
        w.matmul(&x, 3, &mut out).unwrap();
        let want = reference(&w, &x, 3);
        for (a, b) in out.iter().zip(&want) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }
}

#[test]
fn q4_1_bits_are_read_as_ggml_lays_them_out() {
    // One block by hand: d = 0.5, m = -1, values 0..15 in the low nibbles and 15..0 in the high.
    let mut bytes = Vec::new();
    bytes.extend(half::f16::from_f32(0.5).to_le_bytes());
    bytes.extend(half::f16::from_f32(-1.0).to_le_bytes());
    bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let w = Weight::from_gguf_bytes(GgmlType::Q4_1, 1, 32, &bytes).unwrap();
    let want: Vec<f32> = (0..16)
        .map(|j| 0.5 * j as f32 - 1.0)
        .chain((0..16).map(|j| 0.5 * (15 - j) as f32 - 1.0))
        .collect();
    assert_eq!(w.dequantize(), want);
    // And candle reads the same bits the same way.
    let t = QTensor::quantize(
        &Tensor::from_slice(&want, (1, 32), &Device::Cpu).unwrap(),
        GgmlDType::Q4_1,
    )
    .unwrap();
    assert_eq!(
        Weight::from_gguf_bytes(GgmlType::Q4_1, 1, 32, &t.data().unwrap())
            .unwrap()
            .dequantize(),
        want
    );
    // x = e_j picks value j (a one-hot block quantises without error; its scale and sum are
    // kept at f16 precision, as ggml keeps them).
    for j in 0..32 {
        let mut x = vec![0f32; 32];
        x[j] = 1.0;
        let mut out = [0f32];
        w.matmul(&x, 1, &mut out).unwrap();
        assert!(
            (out[0] - want[j]).abs() < 1e-3 * (1.0 + want[j].abs()), // f16: 11 bits
            "{j}: {} vs {}",
            out[0],
            want[j]
        );
    }
}

/// Every type the reader knows, quantised by candle: our dequantisation gives candle's values
/// (the same bits read the same way), and the weight the kernels keep is those values exactly
/// (Q4_K: the same nibbles and scales), to f32 rounding (Q4_0), or within half a Q8_0 step.
#[test]
fn every_gguf_type_reads_as_candle_dequantises_it() {
    let (rows, cols) = (6, 512);
    let v = values(rows * cols, 11, 0.8);
    for t in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ] {
        let (bytes, theirs) = candle_quantized(t, rows, cols, &v);
        assert_eq!(dequantize(t, &bytes), theirs, "{t:?}: dequantised values");
        let kept = Weight::from_gguf_bytes(t, rows, cols, &bytes)
            .unwrap()
            .dequantize();
        for (b, (k, want)) in kept.chunks(BLOCK).zip(theirs.chunks(BLOCK)).enumerate() {
            let amax = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            let tol = match t {
                GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5K | GgmlType::Q6K => {
                    // Half a step of 8 bits, plus the step's own f16 rounding (2⁻¹¹) times
                    // the largest code, 127: as ggml's Q8_0.
                    amax / 127.0 * (0.5 + 127.0 / 2048.0) * 1.001 + 1e-7
                }
                GgmlType::Q4_0 => amax * 1e-6,
                _ => 0.0,
            };
            for (a, w) in k.iter().zip(want) {
                assert!((a - w).abs() <= tol, "{t:?} block {b}: kept {a}, value {w}");
            }
        }
    }
}

#[test]
fn bad_shapes_and_lengths_are_typed_errors() {
    assert!(matches!(
        Weight::from_gguf_bytes(GgmlType::Q4_1, 2, 33, &[0; 40]),
        Err(KernelError::Shape(_))
    ));
    assert!(matches!(
        Weight::from_gguf_bytes(GgmlType::Q4_1, 2, 32, &[0; 39]),
        Err(KernelError::Bytes {
            want: 40,
            got: 39,
            ..
        })
    ));
    let w = Weight::from_gguf_bytes(GgmlType::Q8_0, 2, 32, &[0; 68]).unwrap();
    let mut out = [0f32; 2];
    let e = w.matmul(&[0.0; 31], 1, &mut out).unwrap_err();
    assert!(matches!(
        e,
        KernelError::Len {
            want_x: 32,
            got_x: 31,
            ..
        }
    ));
    assert!(e.to_string().contains("2×32"));
    // K-quants need whole 256-value super-blocks per row.
    assert!(matches!(
        Weight::from_gguf_bytes(GgmlType::Q4K, 1, 96, &[0; 54]),
        Err(KernelError::Shape(_))
    ));
    // Zero tokens: nothing to do, not an error.
    w.matmul(&[], 0, &mut []).unwrap();
}

#[test]
fn zero_nan_and_extreme_activations_do_not_panic() {
    let w = weight(GgmlType::Q4_1, 8, 64, &values(8 * 64, 9, 1.0));
    let mut out = [0f32; 8];
    w.matmul(&[0.0; 64], 1, &mut out).unwrap();
    assert!(out.iter().all(|v| v.abs() < 1e-6));
    let mut x = values(64, 3, 1.0);
    x[5] = f32::NAN;
    x[40] = f32::MAX;
    w.matmul(&x, 1, &mut out).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn kernels_match_the_reference_on_any_shape(
        q8 in any::<bool>(),
        rows in 1usize..70,
        blocks in 1usize..10,
        tokens in 1usize..14,
        wscale in 1e-3f32..4.0,
        xscale in 1e-3f32..50.0,
        seed in any::<u64>(),
    ) {
        let cols = blocks * BLOCK;
        let dtype = if q8 { GgmlType::Q8_0 } else { GgmlType::Q4_1 };
        let w = weight(dtype, rows, cols, &values(rows * cols, seed, wscale));
        check(&w, &values(tokens * cols, seed ^ 0x5555, xscale), tokens);
    }
}
