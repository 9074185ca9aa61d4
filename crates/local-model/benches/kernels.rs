//! The kernels against candle 0.11.1's `QMatMul` on SmolLM2-135M's real matmul shapes
//! (`cargo bench -p toolwright-local-model --bench kernels`): attention 576×576 (q, o; k and v are 192×576),
//! MLP 1536×576 (gate, up) and 576×1536 (down), the lm_head 49152×576; 1 token (decode) and
//! 300 tokens (prompt). `rows×cols` = outputs × inputs, as GGUF stores them.
//!
//! Contenders: candle on the Q8_0 weights the engine re-quantises to today, candle on the
//! file's own Q4_1, our Q4_1 and Q8_0 kernels, and (prompt sizes) f32 weights through candle's
//! `gemm` matmul — the "dequantise for big batches" alternative.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use toolwright_local_model::kernels::{GgmlType, Weight};

fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let dev = Device::Cpu;
    let shapes = [(576, 576), (1536, 576), (576, 1536), (49152, 576)];
    for (rows, cols) in shapes {
        let w = Tensor::from_vec(values(rows * cols, 1, 0.05), (rows, cols), &dev).unwrap();
        let q4 = QTensor::quantize(&w, GgmlDType::Q4_1).unwrap();
        let q8 = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
        let candle_q4 =
            QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q4_1).unwrap()).unwrap();
        let candle_q8 =
            QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap()).unwrap();
        let ours_q4 =
            Weight::from_gguf_bytes(GgmlType::Q4_1, rows, cols, &q4.data().unwrap()).unwrap();
        let ours_q8 =
            Weight::from_gguf_bytes(GgmlType::Q8_0, rows, cols, &q8.data().unwrap()).unwrap();
        // The dequantised Q4_1 values, transposed once for candle's `x · Wᵀ` as a plain matmul.
        let wf = q4
            .dequantize(&dev)
            .unwrap()
            .t()
            .unwrap()
            .contiguous()
            .unwrap();
        // The lm_head only ever sees the last token of a prompt.
        let batches: &[usize] = if rows == 49152 { &[1] } else { &[1, 300] };
        for &tokens in batches {
            let mut g = c.benchmark_group(format!("matmul {rows}x{cols}"));
            g.sample_size(10)
                .warm_up_time(Duration::from_millis(500))
                .measurement_time(Duration::from_secs(2))
                .throughput(Throughput::Elements(tokens as u64));
            let x = values(tokens * cols, 2, 1.0);
            let xt = Tensor::from_slice(&x, (tokens, cols), &dev).unwrap();
            let mut out = vec![0f32; tokens * rows];
            g.bench_function(BenchmarkId::new("candle_q8_0", tokens), |b| {
                b.iter(|| black_box(candle_q8.forward(&xt).unwrap()))
            });
            g.bench_function(BenchmarkId::new("candle_q4_1", tokens), |b| {
                b.iter(|| black_box(candle_q4.forward(&xt).unwrap()))
            });
            g.bench_function(BenchmarkId::new("ours_q4_1", tokens), |b| {
                b.iter(|| ours_q4.matmul(black_box(&x), tokens, &mut out).unwrap())
            });
            g.bench_function(BenchmarkId::new("ours_q8_0", tokens), |b| {
                b.iter(|| ours_q8.matmul(black_box(&x), tokens, &mut out).unwrap())
            });
            if tokens > 1 {
                g.bench_function(BenchmarkId::new("f32_gemm", tokens), |b| {
                    b.iter(|| black_box(xt.matmul(&wf).unwrap()))
                });
            }
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
