//! The tokenizer and chat template, read from the GGUF metadata.
//!
//! Two tokenizers, as `tokenizer.ggml.model` says:
//! * `gpt2`: `tokenizer.ggml.tokens` + `tokenizer.ggml.merges` give a byte-level BPE (GPT-2
//!   style, the crate's own [`Bpe`], held to the `tokenizers` crate's ids by the tests);
//! * `llama`: a SentencePiece vocabulary with scores and `<0xNN>` byte-fallback tokens (Gemma,
//!   Llama 2, Mistral), tokenized by [`Spm`] exactly as llama.cpp's SPM tokenizer does
//!   (pinned by a fixture of llama.cpp's ids in the tests).
//!
//! `tokenizer.ggml.token_type` marks control tokens, which are never produced from user text:
//! the turn markers (ChatML's `<|im_start|>`/`<|im_end|>`, Gemma's
//! `<start_of_turn>`/`<end_of_turn>`) are inserted as ids, so a message that contains the text
//! of a marker cannot end its turn.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::bpe::{Bpe, byte_chars};
use crate::gguf::Content;
use crate::merge::merge;

use toolwright_core::ModelError;

fn meta_err(what: impl std::fmt::Display) -> ModelError {
    ModelError::ModelLoad(format!(
        "the GGUF file's tokenizer metadata is unusable: {what}"
    ))
}

/// The model's tokenizer plus its chat template (ChatML or Gemma turns).
#[derive(Clone)]
pub struct LocalTokenizer {
    inner: Inner,
    /// The bytes each token stands for; `None` for control tokens.
    token_bytes: Vec<Option<Vec<u8>>>,
    template: Template,
    eos: Option<u32>,
    default_system: Option<String>,
}

#[derive(Clone)]
enum Inner {
    Bpe(Box<Bpe>),
    Spm(Box<Spm>),
}

/// How turns are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Template {
    /// `<|im_start|>role\ncontent<|im_end|>\n`, then `<|im_start|>assistant\n`.
    ChatMl { im_start: u32, im_end: u32 },
    /// `<bos><start_of_turn>user\ncontent<end_of_turn>\n`, then `<start_of_turn>model\n`; no
    /// system role (its text opens the first user turn), `assistant` is `model`.
    Gemma { bos: u32, start: u32, end: u32 },
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTokenizer")
            .field("vocab", &self.token_bytes.len())
            .field("template", &self.template)
            .finish()
    }
}

/// GPT-2's printable char → byte map (the inverse of `bytes_to_unicode`).
fn unicode_to_byte() -> HashMap<char, u8> {
    byte_chars()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

fn strings(ct: &Content, key: &str) -> Result<Vec<String>, ModelError> {
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

fn id(ct: &Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok())
}

/// The byte-level BPE (`gpt2`) tokenizer and each token's bytes.
#[allow(clippy::type_complexity)]
fn bpe(
    ct: &Content,
    tokens: &[String],
    types: &[u32],
) -> Result<(Inner, Vec<Option<Vec<u8>>>), ModelError> {
    let merges = strings(ct, "tokenizer.ggml.merges")?;
    // SmolLM / StarCoder style: every digit on its own, then GPT-2 byte-level with its regex.
    let pre = ct
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    let digits = matches!(pre.as_str(), "smollm" | "starcoder" | "refact");
    let user_defined = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (t, ty))| **ty == USER_DEFINED && !EOG_TEXTS.contains(&t.as_str()))
        .map(|(i, (t, _))| (t.clone(), i as u32))
        .collect();
    let inner = Bpe::new(tokens, &merges, user_defined, digits).map_err(meta_err)?;

    let map = unicode_to_byte();
    let token_bytes: Vec<Option<Vec<u8>>> = tokens
        .iter()
        .zip(types.iter().copied().chain(std::iter::repeat(NORMAL)))
        .map(|(t, ty)| {
            // 1 = normal, 6 = byte; 2 unknown, 3 control, 4 user-defined, 5 unused. A
            // user-defined token is matched in text as its text, so it decodes to that text.
            match ty {
                NORMAL | BYTE => t.chars().map(|c| map.get(&c).copied()).collect(),
                USER_DEFINED if !EOG_TEXTS.contains(&t.as_str()) => Some(t.clone().into_bytes()),
                _ => None,
            }
        })
        .collect();
    Ok((Inner::Bpe(Box::new(inner)), token_bytes))
}

/// A SentencePiece vocabulary tokenized as llama.cpp's `llm_tokenizer_spm` does: user-defined
/// tokens are cut out of the text first (longest first); in the rest spaces become `▁` and,
/// starting from single characters, the adjacent pair whose concatenation is the
/// highest-scoring vocabulary piece is merged (the leftmost on a tie) until no pair is a piece;
/// a character that is no piece is written as its UTF-8 bytes (`<0xNN>` tokens).
#[derive(Clone)]
pub(crate) struct Spm {
    /// Pieces that merging may produce (normal and user-defined tokens).
    pieces: HashMap<String, u32>,
    scores: Vec<f32>,
    /// User-defined tokens matched in raw text, longest first.
    specials: Vec<(String, u32)>,
    bytes: [Option<u32>; 256],
    add_space_prefix: bool,
}

/// A piece's score, in `f32`'s total order: the higher merges first.
#[derive(Clone, Copy, PartialEq)]
struct Score(f32);

impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Score {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl Spm {
    fn new(ct: &Content, tokens: &[String], types: &[u32]) -> Result<Self, ModelError> {
        let scores: Vec<f32> = match ct.metadata.get("tokenizer.ggml.scores") {
            Some(v) => v
                .to_vec()
                .map_err(meta_err)?
                .iter()
                .map(|x| x.to_f32())
                .collect::<Result<_, _>>()
                .map_err(meta_err)?,
            None => return Err(meta_err("`tokenizer.ggml.scores` is missing")),
        };
        if scores.len() != tokens.len() || types.len() != tokens.len() {
            return Err(meta_err("tokens, scores and token types differ in length"));
        }
        let mut pieces = HashMap::with_capacity(tokens.len());
        let mut specials = Vec::new();
        let mut bytes = [None; 256];
        for (i, (t, &ty)) in tokens.iter().zip(types).enumerate() {
            let i = i as u32;
            match ty {
                NORMAL => {
                    pieces.entry(t.clone()).or_insert(i);
                }
                USER_DEFINED if !EOG_TEXTS.contains(&t.as_str()) => {
                    pieces.entry(t.clone()).or_insert(i);
                    if !t.is_empty() {
                        specials.push((t.clone(), i));
                    }
                }
                BYTE => {
                    if let Some(b) = t
                        .strip_prefix("<0x")
                        .and_then(|h| h.strip_suffix('>'))
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                    {
                        bytes[b as usize] = Some(i);
                    }
                }
                _ => {}
            }
        }
        // Longest first; a stable sort keeps the vocabulary order among equal lengths.
        specials.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        let add_space_prefix = ct
            .metadata
            .get("tokenizer.ggml.add_space_prefix")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(true);
        Ok(Self {
            pieces,
            scores,
            specials,
            bytes,
            add_space_prefix,
        })
    }

    /// The bytes of every token: `▁` is a space, `<0xNN>` its byte, a user-defined token its
    /// text; control, unknown and unused tokens have none.
    fn token_bytes(&self, tokens: &[String], types: &[u32]) -> Vec<Option<Vec<u8>>> {
        tokens
            .iter()
            .zip(types)
            .enumerate()
            .map(|(i, (t, &ty))| match ty {
                NORMAL => Some(t.replace('\u{2581}', " ").into_bytes()),
                USER_DEFINED if !EOG_TEXTS.contains(&t.as_str()) => Some(t.clone().into_bytes()),
                BYTE => self
                    .bytes
                    .iter()
                    .position(|&b| b == Some(i as u32))
                    .map(|b| vec![b as u8]),
                _ => None,
            })
            .collect()
    }

    /// Token ids of plain text.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        // Cut the user-defined tokens out, longest first, as llama.cpp's partition does.
        enum Frag<'a> {
            Raw(&'a str),
            Tok(u32),
        }
        let mut frags = vec![Frag::Raw(text)];
        for (piece, id) in &self.specials {
            if !text.contains(piece.as_str()) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len());
            for f in frags {
                match f {
                    Frag::Raw(mut s) => {
                        while let Some(at) = s.find(piece.as_str()) {
                            if at > 0 {
                                next.push(Frag::Raw(&s[..at]));
                            }
                            next.push(Frag::Tok(*id));
                            s = &s[at + piece.len()..];
                        }
                        if !s.is_empty() {
                            next.push(Frag::Raw(s));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        let mut out = Vec::new();
        let mut prev_special = true;
        for f in frags {
            match f {
                Frag::Tok(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Frag::Raw(s) => {
                    let mut t = String::with_capacity(s.len() + 3);
                    if self.add_space_prefix && prev_special {
                        t.push('\u{2581}');
                    }
                    t.push_str(&s.replace(' ', "\u{2581}"));
                    self.merge(&t, &mut out);
                    prev_special = false;
                }
            }
        }
        out
    }

    /// The score-ordered merge of one escaped fragment: symbols are byte ranges `(start, len)`
    /// of `text`, one a character to begin with.
    fn merge(&self, text: &str, out: &mut Vec<u32>) {
        let chars = text
            .char_indices()
            .map(|(start, c)| (start, c.len_utf8()))
            .collect();
        let pieces = merge(chars, |(start, len), (r_start, r_len)| {
            let id = *self.pieces.get(&text[start..r_start + r_len])?;
            Some((Score(self.scores[id as usize]), (start, len + r_len)))
        });
        for (start, len) in pieces {
            let piece = &text[start..start + len];
            match self.pieces.get(piece) {
                Some(&id) => out.push(id),
                None => out.extend(piece.bytes().filter_map(|b| self.bytes[b as usize])),
            }
        }
    }
}

fn types_of(ct: &Content, n: usize) -> Result<Vec<u32>, ModelError> {
    match ct.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(meta_err)?
            .iter()
            .map(|x| x.to_i32().map(|t| t as u32).or_else(|_| x.to_u32()))
            .collect::<Result<_, _>>()
            .map_err(meta_err),
        None => Ok(vec![NORMAL; n]),
    }
}

/// GGUF token types (`tokenizer.ggml.token_type`).
const NORMAL: u32 = 1;
const USER_DEFINED: u32 = 4;
const BYTE: u32 = 6;

/// Texts llama.cpp treats as control tokens whatever their type says (end-of-generation
/// markers that some conversions mark user-defined, e.g. Gemma's `</s>`).
const EOG_TEXTS: &[&str] = &[
    "</s>",
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<|end_of_text|>",
];

impl LocalTokenizer {
    /// Reads the tokenizer of a GGUF model file (its metadata only, not the weights).
    ///
    /// ```no_run
    /// let tok = toolwright_local_model::LocalTokenizer::from_file("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let ids = tok.encode("Hello")?;
    /// # Ok::<(), toolwright_core::ModelError>(())
    /// ```
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let err = |e: &dyn std::fmt::Display| {
            ModelError::ModelLoad(format!(
                "cannot read the tokenizer of {}: {e}",
                path.display()
            ))
        };
        let f = std::fs::File::open(path).map_err(|e| err(&e))?;
        let ct = Content::read(&mut std::io::BufReader::with_capacity(1 << 20, f))
            .map_err(|e| err(&e))?;
        Self::from_gguf(&ct)
    }

    /// Builds the tokenizer from a GGUF file's metadata.
    pub(crate) fn from_gguf(ct: &Content) -> Result<Self, ModelError> {
        let kind = ct
            .metadata
            .get("tokenizer.ggml.model")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        let tokens = strings(ct, "tokenizer.ggml.tokens")?;
        let types = types_of(ct, tokens.len())?;
        let (inner, token_bytes) = match kind.as_str() {
            "gpt2" => bpe(ct, &tokens, &types)?,
            "llama" => {
                let spm = Spm::new(ct, &tokens, &types)?;
                let bytes = spm.token_bytes(&tokens, &types);
                (Inner::Spm(Box::new(spm)), bytes)
            }
            _ => {
                return Err(meta_err(format!(
                    "tokenizer.ggml.model is `{kind}`; only byte-level BPE (`gpt2`) and SentencePiece (`llama`) are supported"
                )));
            }
        };
        let find = |s: &str| tokens.iter().position(|t| t == s).map(|i| i as u32);
        let template_text = ct
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        let arch = ct
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        // The template the GGUF names; without one, the turn markers of the architecture.
        let gemma = if template_text.is_empty() {
            arch.starts_with("gemma")
        } else if template_text.contains("<start_of_turn>") {
            true
        } else if template_text.contains("<|im_start|>") {
            false
        } else {
            return Err(meta_err(
                "tokenizer.chat_template is neither ChatML (<|im_start|>role\\n…<|im_end|>) nor Gemma's (<start_of_turn>role\\n…<end_of_turn>); only those two are supported",
            ));
        };
        let template = if gemma {
            match (
                find("<start_of_turn>"),
                find("<end_of_turn>"),
                id(ct, "tokenizer.ggml.bos_token_id"),
            ) {
                (Some(start), Some(end), Some(bos)) => Template::Gemma { bos, start, end },
                _ => {
                    return Err(meta_err(
                        "the vocabulary has no <start_of_turn>/<end_of_turn> tokens or no BOS id",
                    ));
                }
            }
        } else {
            match (find("<|im_start|>"), find("<|im_end|>")) {
                (Some(im_start), Some(im_end)) => Template::ChatMl { im_start, im_end },
                _ => {
                    return Err(meta_err(
                        "the vocabulary has no <|im_start|>/<|im_end|> tokens",
                    ));
                }
            }
        };
        // The template's default system prompt, used when a conversation has none.
        let default_system = template_text
            .split_once("<|im_start|>system\\n")
            .or_else(|| template_text.split_once("<|im_start|>system\n"))
            .and_then(|(_, rest)| rest.split_once("<|im_end|>"))
            .map(|(s, _)| s.to_owned())
            .filter(|s| !s.contains('{') && !s.contains('\''));
        Ok(Self {
            inner,
            token_bytes,
            template,
            eos: id(ct, "tokenizer.ggml.eos_token_id"),
            default_system,
        })
    }

    /// Token ids of plain text (no control tokens are recognised in it).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        match &self.inner {
            Inner::Bpe(b) => Ok(b.encode(text)),
            Inner::Spm(s) => Ok(s.encode(text)),
        }
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

    /// Tokens that end an assistant turn: the turn's closing marker, and the EOS token.
    pub fn end_of_turn(&self) -> Vec<u32> {
        let close = self.im_end();
        let mut v = vec![close];
        if let Some(e) = self.eos
            && e != close
        {
            v.push(e);
        }
        v
    }

    /// The marker that closes a turn: `<|im_end|>` (ChatML) or `<end_of_turn>` (Gemma).
    pub fn im_end(&self) -> u32 {
        match self.template {
            Template::ChatMl { im_end, .. } => im_end,
            Template::Gemma { end, .. } => end,
        }
    }

    /// The chat template's default system prompt, if it has one.
    pub fn default_system(&self) -> Option<&str> {
        self.default_system.as_deref()
    }

    /// The prompt ids of `(role, content)` turns (roles `system`, `user`, `assistant`), ready
    /// for the assistant's answer, in the model's template:
    /// * ChatML: `<|im_start|>role\ncontent<|im_end|>\n` per turn, then `<|im_start|>assistant\n`;
    /// * Gemma: `<bos>`, then `<start_of_turn>role\ncontent<end_of_turn>\n` per turn with
    ///   `assistant` written `model` and contents trimmed, then `<start_of_turn>model\n`. Gemma
    ///   has no system role: as its own template does, the system text opens the next user turn
    ///   (`system\n\nuser`), or stands as a user turn of its own when no user turn follows.
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
        match self.template {
            Template::ChatMl { im_start, im_end } => {
                for (role, content) in turns {
                    ids.push(im_start);
                    match (*role == "assistant").then(|| own(content)).flatten() {
                        Some(known) => {
                            ids.extend(self.encode("assistant\n")?);
                            ids.extend(known);
                        }
                        None => ids.extend(self.encode(&format!("{role}\n{content}"))?),
                    }
                    ids.push(im_end);
                    ids.extend(&nl);
                }
                ids.push(im_start);
                ids.extend(self.encode("assistant\n")?);
            }
            Template::Gemma { bos, start, end } => {
                ids.push(bos);
                // A turn: its text encoded, or (`known`) the model's own tokens after `model\n`.
                let turn = |ids: &mut Vec<u32>,
                            role: &str,
                            content: &str,
                            known: Option<Vec<u32>>|
                 -> Result<(), ModelError> {
                    ids.push(start);
                    match known {
                        Some(known) => {
                            ids.extend(self.encode(&format!("{role}\n"))?);
                            ids.extend(known);
                        }
                        None => ids.extend(self.encode(&format!("{role}\n{}", content.trim()))?),
                    }
                    ids.push(end);
                    ids.extend(&nl);
                    Ok(())
                };
                let mut system: Option<String> = None;
                for (role, content) in turns {
                    match *role {
                        "system" => {
                            let s = system.get_or_insert_with(String::new);
                            if !s.is_empty() {
                                s.push_str("\n\n");
                            }
                            s.push_str(content.trim());
                        }
                        "user" => match system.take() {
                            Some(s) => turn(
                                &mut ids,
                                "user",
                                &format!("{s}\n\n{}", content.trim()),
                                None,
                            )?,
                            None => turn(&mut ids, "user", content, None)?,
                        },
                        other => {
                            if let Some(s) = system.take() {
                                turn(&mut ids, "user", &s, None)?;
                            }
                            let known = (other == "assistant" && content.trim() == *content)
                                .then(|| own(content))
                                .flatten();
                            let role = if other == "assistant" { "model" } else { other };
                            turn(&mut ids, role, content, known)?;
                        }
                    }
                }
                if let Some(s) = system.take() {
                    turn(&mut ids, "user", &s, None)?;
                }
                ids.push(start);
                ids.extend(self.encode("model\n")?);
            }
        }
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
