//! Token counting: a [`TokenCounter`] trait, a real tokenizer for OpenAI-family models
//! ([`TiktokenCounter`]) and an honest estimate for every other model ([`EstimateCounter`]).

use std::fmt;
use std::sync::{Arc, OnceLock};

use llm_core::Message;
use tiktoken_rs::CoreBPE;
use tiktoken_rs::tokenizer::Tokenizer;

/// Framing tokens of one chat message, as OpenAI documents for current models
/// (`<|start|>{role}<|message|>…<|end|>`: 3 tokens plus the role's own token).
pub const TOKENS_PER_MESSAGE: usize = 3;

/// Tokens the API adds once per request to prime the reply (`<|start|>assistant<|message|>`).
pub const REPLY_PRIMING_TOKENS: usize = 3;

/// Extra framing tokens counted for each tool call of an assistant message and for the
/// `tool_call_id`/`name` fields of a tool message. OpenAI does not document how tool calls are
/// rendered; this is a small, deliberate over-estimate.
pub const TOOL_CALL_OVERHEAD: usize = 3;

/// Counts tokens. Implement it to plug in your own tokenizer (for example a Hugging Face
/// tokenizer for Qwen or Llama).
///
/// [`id`](TokenCounter::id) names the counter; cached counts ([`crate::History`]) are only reused
/// by a builder whose counter has the same id, so two counters that can disagree must have
/// different ids.
///
/// ```
/// use context_engine::TokenCounter;
/// use llm_core::Message;
///
/// /// One token per whitespace-separated word.
/// struct Words;
/// impl TokenCounter for Words {
///     fn id(&self) -> &str { "words" }
///     fn count_text(&self, text: &str) -> usize { text.split_whitespace().count() }
/// }
/// // 3 framing + 1 role + 2 words
/// assert_eq!(Words.count_message(&Message::user("hello world")), 6);
/// ```
pub trait TokenCounter: Send + Sync {
    /// A stable name for this counter and its configuration, e.g. `"tiktoken/o200k_base"`.
    fn id(&self) -> &str;

    /// Tokens of a piece of text.
    fn count_text(&self, text: &str) -> usize;

    /// Tokens one message costs in a request: framing ([`TOKENS_PER_MESSAGE`]), one token for
    /// the role, the content, and for tool calls and tool results their ids, names and
    /// arguments plus [`TOOL_CALL_OVERHEAD`] each.
    fn count_message(&self, message: &Message) -> usize {
        let mut n = TOKENS_PER_MESSAGE + 1 + self.count_text(message.content());
        match message {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    n += TOOL_CALL_OVERHEAD
                        + self.count_text(&call.id)
                        + self.count_text(&call.name)
                        + json_tokens(&|text| self.count_text(text), &call.arguments);
                }
            }
            Message::Tool {
                tool_call_id, name, ..
            } => {
                n += TOOL_CALL_OVERHEAD + self.count_text(tool_call_id) + self.count_text(name);
            }
            _ => {}
        }
        n
    }
}

/// The tokens of a JSON value's text (a call's arguments), written into a buffer each thread
/// reuses instead of a new string per message.
fn json_tokens(count_text: &dyn Fn(&str) -> usize, value: &serde_json::Value) -> usize {
    use std::cell::RefCell;
    use std::fmt::Write;
    thread_local!(static TEXT: RefCell<String> = const { RefCell::new(String::new()) });
    TEXT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut text) => {
            text.clear();
            let _ = write!(text, "{value}");
            let n = count_text(&text);
            if text.capacity() > 64 * 1024 {
                *text = String::new(); // one huge call does not keep its memory
            }
            n
        }
        // A counter whose count_text counts a message again (re-entered): its own string.
        Err(_) => count_text(&value.to_string()),
    })
}

impl fmt::Debug for dyn TokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenCounter({})", self.id())
    }
}

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
/// use context_engine::{TiktokenCounter, TokenCounter};
/// let counter = TiktokenCounter::for_model("gpt-4o-mini")?;
/// assert_eq!(counter.id(), "tiktoken/o200k_base");
/// assert_eq!(counter.count_text("hello world"), 2);
/// assert!(TiktokenCounter::for_model("qwen2.5-7b-instruct").is_err());
/// # Ok::<(), context_engine::TokenizerError>(())
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

/// An estimate for models without a known tokenizer (Qwen, Llama, DeepSeek, GLM…).
///
/// Rule: every CJK character (Han, kana, Hangul, CJK and full-width punctuation) counts as one
/// token; every other run of characters counts as `ceil(chars / 3)` tokens. Real BPE tokenizers
/// give about 4 characters of English per token and 1–1.5 CJK characters per token, so this
/// errs on the high side for English and Chinese, which is the safe side for a budget. It can
/// under-count scripts that tokenise poorly (e.g. Thai, Devanagari) and long runs of digits or
/// symbols: plug in the model's own tokenizer through [`TokenCounter`] when precision matters.
///
/// ```
/// use context_engine::{EstimateCounter, TokenCounter};
/// let c = EstimateCounter;
/// assert_eq!(c.count_text("hello world"), 4);   // 11 chars / 3, rounded up
/// assert_eq!(c.count_text("你好世界"), 4);        // one per CJK character
/// assert_eq!(c.count_text(""), 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EstimateCounter;

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF       // Hangul Jamo
        | 0x2E80..=0x2FDF     // CJK radicals
        | 0x3000..=0x303F     // CJK symbols and punctuation
        | 0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3100..=0x31FF     // Bopomofo, Hangul compatibility, Katakana ext.
        | 0x3400..=0x4DBF     // CJK ext. A
        | 0x4E00..=0x9FFF     // CJK unified ideographs
        | 0xAC00..=0xD7AF     // Hangul syllables
        | 0xF900..=0xFAFF     // CJK compatibility ideographs
        | 0xFF00..=0xFFEF     // full-width forms
        | 0x20000..=0x3134F   // CJK ext. B–G
    )
}

impl TokenCounter for EstimateCounter {
    fn id(&self) -> &str {
        "estimate/v1"
    }

    fn count_text(&self, text: &str) -> usize {
        // ASCII has no CJK: one run of `len` characters (the check is vectorised).
        if text.is_ascii() {
            return text.len().div_ceil(3);
        }
        let mut tokens = 0;
        let mut run = 0usize;
        for c in text.chars() {
            if is_cjk(c) {
                tokens += run.div_ceil(3) + 1;
                run = 0;
            } else {
                run += 1;
            }
        }
        tokens + run.div_ceil(3)
    }
}

/// The best counter for a model name: [`TiktokenCounter`] for OpenAI-family models, otherwise
/// [`EstimateCounter`]. Never fails: if tiktoken's tables cannot be loaded, it falls back to the
/// estimate as well.
///
/// ```
/// use context_engine::counter_for_model;
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
