//! Token counting every layer can share: the [`TokenCounter`] trait and an honest estimate
//! ([`EstimateCounter`]) for any model. No tokenizer tables here: a real tokenizer (tiktoken
//! for OpenAI-family models) is `context-engine`'s `TiktokenCounter`, behind its `tiktoken`
//! feature.

use std::fmt;

use crate::{Message, Part};

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
/// [`id`](TokenCounter::id) names the counter; cached counts (context-engine's `History`) are only reused
/// by a builder whose counter has the same id, so two counters that can disagree must have
/// different ids.
///
/// ```
/// use toolwright_core::{Message, TokenCounter};
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
    /// the role, the content, its parts ([`media_tokens`] for media: what providers charge for
    /// an image by its size, not its base64 length), and for tool calls and tool results their
    /// ids, names and arguments plus [`TOOL_CALL_OVERHEAD`] each.
    fn count_message(&self, message: &Message) -> usize {
        let mut n = TOKENS_PER_MESSAGE + 1 + self.count_text(message.content());
        for part in message.parts() {
            n += match part {
                Part::Text { text } => self.count_text(text),
                Part::Reasoning(r) => self.count_text(&r.text),
                Part::CacheBreakpoint(_) => 0,
                Part::Resource(_) => self.count_text(&part.placeholder()),
                Part::Image(_) | Part::Audio(_) | Part::File(_) => media_tokens(part),
            };
        }
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

/// What a provider charges for a piece of media, as their documentation counts it; an
/// over-estimate where they differ, so a budget holds on every wire.
///
/// * Image: the larger of Anthropic's `width × height / 750` (after scaling the long edge to
///   1568 px) and OpenAI's high-detail tiles (`85 + 170` per 512-px tile after scaling to fit
///   2048 px, then the short side to 768 px). An image whose size cannot be read (a URL) counts
///   as the most either charges for one image, 1,600 tokens.
/// * Audio: 10 tokens a second (OpenAI's input audio), the seconds from the size of 16-bit
///   16 kHz mono PCM.
/// * A file: a quarter token a byte, as text of the same size would cost.
///
/// ```
/// use toolwright_core::{media_tokens, Media, Part};
/// let png = |w: u32, h: u32| { let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
///     b.extend(w.to_be_bytes()); b.extend(h.to_be_bytes()); b.extend([8, 6, 0, 0, 0]); b };
/// let big = Part::Image(Media::image_bytes(&png(1024, 1024), "image/png").unwrap());
/// assert_eq!(media_tokens(&big), 1399);
/// let url = Part::Image(Media::url("image/png", "https://example.com/a.png"));
/// assert_eq!(media_tokens(&url), 1600);
/// ```
pub fn media_tokens(part: &Part) -> usize {
    const UNKNOWN_IMAGE: usize = 1600;
    match part {
        Part::Image(m) => match m.dimensions() {
            Some((w, h)) if w > 0 && h > 0 => {
                let (w, h) = (f64::from(w), f64::from(h));
                let scale = (1568.0 / w.max(h)).min(1.0);
                let anthropic = ((w * scale) * (h * scale) / 750.0).ceil();
                let fit = (2048.0 / w.max(h)).min(1.0);
                let (w2, h2) = (w * fit, h * fit);
                let short = (768.0 / w2.min(h2)).min(1.0);
                let tiles = ((w2 * short) / 512.0).ceil() * ((h2 * short) / 512.0).ceil();
                let openai = 85.0 + 170.0 * tiles;
                anthropic.max(openai) as usize
            }
            _ => UNKNOWN_IMAGE,
        },
        Part::Audio(m) => (m.size() / 32_000).max(1) * 10,
        Part::File(m) => m.size() / 4,
        Part::Text { .. } | Part::Reasoning(_) | Part::CacheBreakpoint(_) | Part::Resource(_) => 0,
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
/// use toolwright_core::{EstimateCounter, TokenCounter};
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
