//! The tokenizer and chat template, read from the GGUF metadata.
//!
//! `tokenizer.ggml.tokens` + `tokenizer.ggml.merges` give a byte-level BPE (GPT-2 style, the
//! `tokenizers` crate with its pure-Rust `fancy-regex` backend); `tokenizer.ggml.token_type`
//! marks control tokens, which are never produced from user text: the ChatML markers are
//! inserted as ids, so a message that contains the text `<|im_end|>` cannot end its turn.

use std::collections::HashMap;

use candle_core::quantized::gguf_file;
use tokenizers::Tokenizer;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;

use llm_core::ModelError;

fn meta_err(what: impl std::fmt::Display) -> ModelError {
    ModelError::ModelLoad(format!(
        "the GGUF file's tokenizer metadata is unusable: {what}"
    ))
}

/// A byte-level BPE tokenizer plus the ChatML chat template of the model.
#[derive(Clone)]
pub struct LocalTokenizer {
    inner: Tokenizer,
    /// The bytes each token stands for; `None` for control tokens.
    token_bytes: Vec<Option<Vec<u8>>>,
    im_start: u32,
    im_end: u32,
    eos: Option<u32>,
    default_system: Option<String>,
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTokenizer")
            .field("vocab", &self.token_bytes.len())
            .field("im_start", &self.im_start)
            .field("im_end", &self.im_end)
            .finish()
    }
}

/// GPT-2's byte ↔ printable-char map (the inverse of `bytes_to_unicode`).
fn unicode_to_byte() -> HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.iter()
        .zip(cs)
        .filter_map(|(&b, c)| Some((char::from_u32(c)?, u8::try_from(b).ok()?)))
        .collect()
}

fn strings(ct: &gguf_file::Content, key: &str) -> Result<Vec<String>, ModelError> {
    let v = ct
        .metadata
        .get(key)
        .ok_or_else(|| meta_err(format!("`{key}` is missing")))?;
    v.to_vec()
        .map_err(meta_err)?
        .iter()
        .map(|x| x.to_string().cloned().map_err(meta_err))
        .collect()
}

fn id(ct: &gguf_file::Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok())
}

impl LocalTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self, ModelError> {
        let kind = ct
            .metadata
            .get("tokenizer.ggml.model")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if kind != "gpt2" {
            return Err(meta_err(format!(
                "tokenizer.ggml.model is `{kind}`; only byte-level BPE (`gpt2`) is supported"
            )));
        }
        let tokens = strings(ct, "tokenizer.ggml.tokens")?;
        let merges: Vec<(String, String)> = strings(ct, "tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| meta_err(format!("bad merge `{m}`")))
            })
            .collect::<Result<_, _>>()?;
        let types: Vec<u32> = match ct.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(meta_err)?
                .iter()
                .map(|x| x.to_i32().map(|t| t as u32).or_else(|_| x.to_u32()))
                .collect::<Result<_, _>>()
                .map_err(meta_err)?,
            None => vec![1; tokens.len()],
        };
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(meta_err)?;
        let mut inner = Tokenizer::new(bpe);
        // SmolLM / StarCoder style: every digit on its own, then GPT-2 byte-level with its regex.
        let pre = ct
            .metadata
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        let byte_level = ByteLevel::new(false, true, true);
        if matches!(pre.as_str(), "smollm" | "starcoder" | "refact") {
            inner.with_pre_tokenizer(Some(Sequence::new(vec![
                Digits::new(true).into(),
                byte_level.into(),
            ])));
        } else {
            inner.with_pre_tokenizer(Some(byte_level));
        }
        inner.with_decoder(Some(ByteLevel::new(false, true, true)));

        let map = unicode_to_byte();
        let token_bytes: Vec<Option<Vec<u8>>> = tokens
            .iter()
            .zip(types.iter().copied().chain(std::iter::repeat(1)))
            .map(|(t, ty)| {
                // 1 = normal, 6 = byte; 2 unknown, 3 control, 4 user-defined, 5 unused.
                if ty != 1 && ty != 6 {
                    return None;
                }
                t.chars().map(|c| map.get(&c).copied()).collect()
            })
            .collect();
        let find = |s: &str| tokens.iter().position(|t| t == s).map(|i| i as u32);
        let template = ct
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if !template.is_empty() && !template.contains("<|im_start|>") {
            return Err(meta_err(
                "tokenizer.chat_template is not ChatML (<|im_start|>role\\n…<|im_end|>); only ChatML is supported",
            ));
        }
        let (im_start, im_end) = match (find("<|im_start|>"), find("<|im_end|>")) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                return Err(meta_err(
                    "the vocabulary has no <|im_start|>/<|im_end|> tokens",
                ));
            }
        };
        // The template's default system prompt, used when a conversation has none.
        let default_system = template
            .split_once("<|im_start|>system\\n")
            .or_else(|| template.split_once("<|im_start|>system\n"))
            .and_then(|(_, rest)| rest.split_once("<|im_end|>"))
            .map(|(s, _)| s.to_owned())
            .filter(|s| !s.contains('{') && !s.contains('\''));
        Ok(Self {
            inner,
            token_bytes,
            im_start,
            im_end,
            eos: id(ct, "tokenizer.ggml.eos_token_id"),
            default_system,
        })
    }

    /// Token ids of plain text (no special tokens are recognised in it).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::Inference(format!("tokenizer failed: {e}")))?
            .get_ids()
            .to_vec())
    }

    /// The text of token ids; control tokens are left out, bad UTF-8 is replaced.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .filter_map(|&i| self.token_bytes(i))
            .flatten()
            .copied()
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The bytes a token stands for (`None` for control tokens and unknown ids).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.token_bytes.get(id as usize)?.as_deref()
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// Tokens that end an assistant turn.
    pub fn end_of_turn(&self) -> Vec<u32> {
        let mut v = vec![self.im_end];
        if let Some(e) = self.eos
            && e != self.im_end
        {
            v.push(e);
        }
        v
    }

    /// The `<|im_end|>` id.
    pub fn im_end(&self) -> u32 {
        self.im_end
    }

    /// The chat template's default system prompt, if it has one.
    pub fn default_system(&self) -> Option<&str> {
        self.default_system.as_deref()
    }

    /// ChatML prompt ids: `<|im_start|>role\ncontent<|im_end|>\n` per message, then
    /// `<|im_start|>assistant\n`.
    pub fn chat_prompt(&self, turns: &[(&str, &str)]) -> Result<Vec<u32>, ModelError> {
        self.chat_prompt_with(turns, |_| None)
    }

    /// As [`LocalTokenizer::chat_prompt`], taking an assistant turn's content ids from `own`
    /// when it knows them (the tokens the model wrote, which follow `assistant\n` exactly as
    /// they did when it wrote them).
    pub(crate) fn chat_prompt_with(
        &self,
        turns: &[(&str, &str)],
        own: impl Fn(&str) -> Option<Vec<u32>>,
    ) -> Result<Vec<u32>, ModelError> {
        let mut ids = Vec::new();
        let nl = self.encode("\n")?;
        for (role, content) in turns {
            ids.push(self.im_start);
            match (*role == "assistant").then(|| own(content)).flatten() {
                Some(known) => {
                    ids.extend(self.encode("assistant\n")?);
                    ids.extend(known);
                }
                None => ids.extend(self.encode(&format!("{role}\n{content}"))?),
            }
            ids.push(self.im_end);
            ids.extend(&nl);
        }
        ids.push(self.im_start);
        ids.extend(self.encode("assistant\n")?);
        Ok(ids)
    }
}

/// Turns token bytes into text pieces that are whole UTF-8, holding back a split character.
#[derive(Debug, Default)]
pub(crate) struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds bytes; returns the text that is complete so far.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        match std::str::from_utf8(&self.pending) {
            Ok(s) => {
                let out = s.to_owned();
                self.pending.clear();
                out
            }
            Err(e) => {
                let valid = e.valid_up_to();
                if e.error_len().is_some() {
                    // Invalid bytes (not just an unfinished character): replace and move on.
                    let out = String::from_utf8_lossy(&self.pending).into_owned();
                    self.pending.clear();
                    return out;
                }
                let out = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
                self.pending.drain(..valid);
                out
            }
        }
    }
    /// Whatever is left (replaced if incomplete).
    pub(crate) fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}
