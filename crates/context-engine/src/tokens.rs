//! A real tokenizer for OpenAI-family models ([`TiktokenCounter`]) and [`counter_for_model`],
//! which picks it or the estimate (feature `tiktoken`). The [`TokenCounter`] trait and the
//! estimate itself ([`EstimateCounter`]) live in `llm-core`, so a crate that needs only the
//! estimate depends on the bottom crate alone.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tiktoken_rs::CoreBPE;
use tiktoken_rs::tokenizer::Tokenizer;
use toolwright_core::{EstimateCounter, TokenCounter};

/// Why no tokenizer could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// No tiktoken encoding is known for this model.
    #[error(
        "no tiktoken encoding is known for model `{model}`; use `counter_for_model` (which falls \
         back to `EstimateCounter`) or plug in your own `TokenCounter`"
    )]
    UnknownModel {
        /// The model name as given.
        model: String,
    },
    /// The embedded BPE data could not be loaded (a broken build of `tiktoken-rs`).
    #[error(
        "the embedded `{encoding}` BPE could not be loaded ({detail}); rebuild with a working \
         tiktoken-rs, or use `EstimateCounter`"
    )]
    Load {
        /// The encoding's name.
        encoding: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// The tiktoken encodings this crate can load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    O200k,
    O200kHarmony,
    Cl100k,
    P50k,
    P50kEdit,
    R50k,
}

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Self::O200k => "o200k_base",
            Self::O200kHarmony => "o200k_harmony",
            Self::Cl100k => "cl100k_base",
            Self::P50k => "p50k_base",
            Self::P50kEdit => "p50k_edit",
            Self::R50k => "r50k_base",
        }
    }

    fn id(self) -> &'static str {
        match self {
            Self::O200k => "tiktoken/o200k_base",
            Self::O200kHarmony => "tiktoken/o200k_harmony",
            Self::Cl100k => "tiktoken/cl100k_base",
            Self::P50k => "tiktoken/p50k_base",
            Self::P50kEdit => "tiktoken/p50k_edit",
            Self::R50k => "tiktoken/r50k_base",
        }
    }

    fn load(self) -> Result<CoreBPE, String> {
        let loaded = match self {
            Self::O200k => tiktoken_rs::o200k_base(),
            Self::O200kHarmony => tiktoken_rs::o200k_harmony(),
            Self::Cl100k => tiktoken_rs::cl100k_base(),
            Self::P50k => tiktoken_rs::p50k_base(),
            Self::P50kEdit => tiktoken_rs::p50k_edit(),
            Self::R50k => tiktoken_rs::r50k_base(),
        };
        loaded.map_err(|e| e.to_string())
    }

    /// The BPE, loaded once per process on first use and shared by every counter.
    /// The BPE files are compiled into `tiktoken-rs`; nothing is downloaded.
    fn bpe(self) -> Result<&'static CoreBPE, TokenizerError> {
        type Slot = OnceLock<Result<CoreBPE, String>>;
        static O200K: Slot = OnceLock::new();
        static O200K_HARMONY: Slot = OnceLock::new();
        static CL100K: Slot = OnceLock::new();
        static P50K: Slot = OnceLock::new();
        static P50K_EDIT: Slot = OnceLock::new();
        static R50K: Slot = OnceLock::new();
        let slot: &Slot = match self {
            Self::O200k => &O200K,
            Self::O200kHarmony => &O200K_HARMONY,
            Self::Cl100k => &CL100K,
            Self::P50k => &P50K,
            Self::P50kEdit => &P50K_EDIT,
            Self::R50k => &R50K,
        };
        slot.get_or_init(|| self.load())
            .as_ref()
            .map_err(|detail| TokenizerError::Load {
                encoding: self.name(),
                detail: detail.clone(),
            })
    }
}

/// Strips a routing prefix such as `openai/` or `azure/` from a model name.
fn bare_model_name(model: &str) -> &str {
    let model = model.trim();
    model.rsplit('/').next().unwrap_or(model)
}

fn encoding_for_model(model: &str) -> Option<Encoding> {
    let bare = bare_model_name(model).to_ascii_lowercase();
    Some(match tiktoken_rs::tokenizer::get_tokenizer(&bare)? {
        Tokenizer::O200kBase => Encoding::O200k,
        Tokenizer::O200kHarmony => Encoding::O200kHarmony,
        Tokenizer::Cl100kBase => Encoding::Cl100k,
        Tokenizer::P50kBase => Encoding::P50k,
        Tokenizer::P50kEdit => Encoding::P50kEdit,
        Tokenizer::R50kBase | Tokenizer::Gpt2 => Encoding::R50k,
    })
}

/// Exact token counts for OpenAI-family models with tiktoken (`o200k_base` for gpt-4o, gpt-4.1,
/// gpt-5 and the o-series; `cl100k_base` for gpt-4 and gpt-3.5).
///
/// The BPE tables are embedded in the binary (no network) and loaded once per process, on the
/// first constructor call for that encoding (a few hundred milliseconds); later counters share
/// them. Cloning is cheap.
///
/// ```
/// use toolwright_context_engine::{TiktokenCounter};
/// use toolwright_core::{TokenCounter};
/// let counter = TiktokenCounter::for_model("gpt-4o-mini")?;
/// assert_eq!(counter.id(), "tiktoken/o200k_base");
/// assert_eq!(counter.count_text("hello world"), 2);
/// assert!(TiktokenCounter::for_model("qwen2.5-7b-instruct").is_err());
/// # Ok::<(), toolwright_context_engine::TokenizerError>(())
/// ```
#[derive(Clone)]
pub struct TiktokenCounter {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl fmt::Debug for TiktokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TiktokenCounter")
            .field("encoding", &self.encoding.name())
            .finish()
    }
}

impl TiktokenCounter {
    /// The counter for an OpenAI model name (a routing prefix like `openai/` is ignored).
    ///
    /// # Errors
    /// [`TokenizerError::UnknownModel`] when tiktoken has no encoding for the model.
    pub fn for_model(model: &str) -> Result<Self, TokenizerError> {
        let encoding = encoding_for_model(model).ok_or_else(|| TokenizerError::UnknownModel {
            model: model.to_owned(),
        })?;
        Self::with_encoding(encoding)
    }

    /// The `o200k_base` encoding (gpt-4o, gpt-4.1, gpt-5, o1/o3/o4).
    ///
    /// # Errors
    /// [`TokenizerError::Load`] only if the embedded tables are broken.
    pub fn o200k_base() -> Result<Self, TokenizerError> {
        Self::with_encoding(Encoding::O200k)
    }

    /// The `cl100k_base` encoding (gpt-4, gpt-3.5-turbo).
    ///
    /// # Errors
    /// [`TokenizerError::Load`] only if the embedded tables are broken.
    pub fn cl100k_base() -> Result<Self, TokenizerError> {
        Self::with_encoding(Encoding::Cl100k)
    }

    fn with_encoding(encoding: Encoding) -> Result<Self, TokenizerError> {
        Ok(Self {
            encoding,
            bpe: encoding.bpe()?,
        })
    }

    /// The encoding's name, e.g. `"o200k_base"`.
    pub fn encoding_name(&self) -> &'static str {
        self.encoding.name()
    }
}

impl TokenCounter for TiktokenCounter {
    fn id(&self) -> &str {
        self.encoding.id()
    }

    fn count_text(&self, text: &str) -> usize {
        // Special-token text inside messages is sent as ordinary text, so count it as such.
        self.bpe.count_ordinary(text)
    }
}

/// The best counter for a model name: [`TiktokenCounter`] for OpenAI-family models, otherwise
/// [`EstimateCounter`]. Never fails: if tiktoken's tables cannot be loaded, it falls back to the
/// estimate as well.
///
/// ```
/// use toolwright_context_engine::counter_for_model;
/// assert_eq!(counter_for_model("gpt-4o").id(), "tiktoken/o200k_base");
/// assert_eq!(counter_for_model("gpt-4").id(), "tiktoken/cl100k_base");
/// assert_eq!(counter_for_model("qwen2.5-72b-instruct").id(), "estimate/v1");
/// ```
pub fn counter_for_model(model: &str) -> Arc<dyn TokenCounter> {
    match TiktokenCounter::for_model(model) {
        Ok(c) => Arc::new(c),
        Err(_) => Arc::new(EstimateCounter),
    }
}
