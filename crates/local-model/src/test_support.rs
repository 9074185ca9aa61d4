//! Helpers the crate's unit tests share (kernels, the chat model's forward, the encoder's).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use candle_core::Device;
use candle_core::quantized::QTensor;

/// Deterministic pseudo-random values in [-scale, scale].
pub(crate) fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A candle tensor's values as candle dequantises them, flattened.
pub(crate) fn candle_values(q: &QTensor) -> Vec<f32> {
    q.dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

/// The largest `|a[i] − b[i]|`.
pub(crate) fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// `env` when set, else `source` fetched into the user's cache; a test that cannot get it
/// fails with the reason, it never skips.
pub(crate) fn fetched(env: &str, source: crate::ModelSource) -> std::path::PathBuf {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return p.into();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = crate::default_cache_dir().expect("no cache dir");
    rt.block_on(crate::ensure_model(&source, &dir))
        .unwrap_or_else(|e| panic!("the model tests need {}: {e}", source.file_name))
}
