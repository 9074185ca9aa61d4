//! The generation loop: prompt → logits → (mask) → sample → token, on a blocking thread.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::constraint::{Constraint, Vocabulary};
use crate::grammar::{Grammar, TOOL_CALL_OPEN};
use crate::tokenizer::{LocalTokenizer, Utf8Stream};
use llm_core::ModelError;

fn candle_err(e: candle_core::Error) -> ModelError {
    ModelError::Inference(e.to_string())
}

fn load_err(e: candle_core::Error) -> ModelError {
    ModelError::ModelLoad(format!("the GGUF weights could not be loaded: {e}"))
}

/// Quant types whose CPU dot product candle 0.11 runs only as scalar code (no AVX path).
fn needs_requant(dtype: GgmlDType, dims: &[usize]) -> bool {
    matches!(dtype, GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1)
        && dims.len() >= 2
        && dims.last().is_some_and(|d| d % 32 == 0)
}

/// The same GGUF in memory with the slow-kernel matrices re-quantized to Q8_0, which has an
/// AVX2 kernel: 4-bit values are exactly representable to within Q8_0's 8-bit step, so the
/// answers barely move, and matmuls run several times faster.
fn requantized(
    content: &gguf_file::Content,
    file: &mut std::fs::File,
    device: &Device,
) -> candle_core::Result<std::io::Cursor<Vec<u8>>> {
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(&str, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let qt = content.tensor(file, name, device)?;
        let qt = if needs_requant(qt.dtype(), qt.shape().dims()) {
            QTensor::quantize(&qt.dequantize(device)?, GgmlDType::Q8_0)?
        } else {
            qt
        };
        tensors.push((name.as_str(), qt));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut mem = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut mem, &metadata, &refs)?;
    mem.set_position(0);
    Ok(mem)
}

/// Sampling settings for one generation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
    pub max_tokens: u32,
    pub repeat_penalty: f32,
    /// Never write the same run of this many tokens twice in one answer (0 = off).
    pub no_repeat_ngram: usize,
    /// Added to the logits of the first token where it opens a tool call (0 = off).
    pub call_bias: f32,
}

/// Timings and counts of one generation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct GenerationStats {
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// Time to process the prompt (one batched forward pass) and pick the first token.
    pub prompt_time: Duration,
    /// Time spent generating after the first token.
    pub generation_time: Duration,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prompt_tokens_per_sec(&self) -> f64 {
        f64::from(self.prompt_tokens) / self.prompt_time.as_secs_f64().max(1e-9)
    }
    /// Generated tokens per second (after the first token).
    pub fn generated_tokens_per_sec(&self) -> f64 {
        f64::from(self.generated_tokens.saturating_sub(1))
            / self.generation_time.as_secs_f64().max(1e-9)
    }
}

/// How a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// End-of-turn token, or the constrained value is complete.
    EndOfTurn,
    /// `max_tokens` reached.
    Length,
    /// The receiver went away.
    Cancelled,
}

pub(crate) struct Engine {
    weights: Mutex<ModelWeights>,
    pub(crate) tokenizer: LocalTokenizer,
    vocab: Vocabulary,
    device: Device,
    pub(crate) name: String,
    pub(crate) context_length: usize,
    pub(crate) load_time: Duration,
}

impl Engine {
    pub(crate) fn load(path: &Path) -> Result<Self, ModelError> {
        let t0 = Instant::now();
        let mut file = std::fs::File::open(path).map_err(|e| {
            ModelError::ModelLoad(format!(
                "cannot open the model file {}: {e}",
                path.display()
            ))
        })?;
        let content = gguf_file::Content::read(&mut file).map_err(|e| {
            ModelError::ModelLoad(format!(
                "{} is not a readable GGUF file: {e}",
                path.display()
            ))
        })?;
        let tokenizer = LocalTokenizer::from_gguf(&content)?;
        let name = content
            .metadata
            .get("general.name")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let context_length = content
            .metadata
            .iter()
            .find(|(k, _)| k.ends_with(".context_length"))
            .and_then(|(_, v)| v.to_u32().ok())
            .unwrap_or(2048) as usize;
        let device = Device::Cpu;
        let weights = if content
            .tensor_infos
            .values()
            .any(|t| needs_requant(t.ggml_dtype, t.shape.dims()))
        {
            let mut mem = requantized(&content, &mut file, &device).map_err(load_err)?;
            let content = gguf_file::Content::read(&mut mem).map_err(load_err)?;
            ModelWeights::from_gguf(content, &mut mem, &device).map_err(load_err)?
        } else {
            ModelWeights::from_gguf(content, &mut file, &device).map_err(load_err)?
        };
        let tokens: Vec<Option<&[u8]>> = (0..tokenizer.vocab_size() as u32)
            .map(|i| tokenizer.token_bytes(i))
            .collect();
        let vocab = Vocabulary::new(&tokens, tokenizer.end_of_turn());
        Ok(Self {
            weights: Mutex::new(weights),
            tokenizer,
            vocab,
            device,
            name,
            context_length,
            load_time: t0.elapsed(),
        })
    }

    /// Generates after `prompt`, calling `emit` with each piece of text; `emit` returns false
    /// to stop. With a grammar, only tokens the grammar allows are sampled, and generation
    /// ends when the value is complete.
    pub(crate) fn generate(
        &self,
        prompt: &[u32],
        sampling: Sampling,
        grammar: Option<&Grammar>,
        alive: &dyn Fn() -> bool,
        emit: &mut dyn FnMut(String) -> bool,
    ) -> Result<(Stop, GenerationStats), ModelError> {
        let mut stats = GenerationStats {
            prompt_tokens: prompt.len() as u32,
            ..GenerationStats::default()
        };
        if prompt.is_empty() {
            return Err(ModelError::Config("the prompt is empty".into()));
        }
        let mut max_tokens = sampling.max_tokens.max(1);
        let mut constraint = grammar.map(|g| Constraint::start(g, &self.vocab));
        if let Some(c) = &constraint {
            // A constrained answer must be able to close: give it at least its shortest form.
            max_tokens = max_tokens.max(c.min_tokens());
        }
        if prompt.len() + max_tokens as usize > self.context_length {
            return Err(ModelError::Config(format!(
                "the prompt ({} tokens) plus max_tokens ({max_tokens}) exceeds the local model's context of {} tokens; shorten the conversation",
                prompt.len(),
                self.context_length
            )));
        }
        let mut weights = self.weights.lock().map_err(|_| {
            ModelError::Inference("the local model is unusable after a crash".into())
        })?;
        weights.clear_kv_cache();
        let t0 = Instant::now();
        let input = Tensor::new(prompt, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(candle_err)?;
        let mut logits = weights
            .forward(&input, 0)
            .and_then(|l| l.squeeze(0))
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(candle_err)?;
        let mut rng = StdRng::seed_from_u64(sampling.seed);
        let end = self.tokenizer.end_of_turn();
        let mut utf8 = Utf8Stream::default();
        let mut recent: Vec<u32> = Vec::new();
        let mut generated: Vec<u32> = Vec::new();
        let mut string_run: Vec<u32> = Vec::new();
        let mut allowed: Vec<u32> = Vec::new();
        let mut gen_start = None;
        let mut pos = prompt.len();
        let stop = loop {
            if !alive() {
                break Stop::Cancelled;
            }
            let left = max_tokens - stats.generated_tokens; // >= 1 here
            // Mask.
            let mask = match &mut constraint {
                // Free text (a plain answer that can no longer become a call): no mask.
                Some(c) if c.is_free() => None,
                Some(c) => {
                    c.mask(left - 1, &mut allowed)?;
                    Some(&allowed)
                }
                None => None,
            };
            if stats.generated_tokens == 0
                && sampling.call_bias != 0.0
                && let Some(allowed) = mask
            {
                for &t in allowed {
                    let opens = self.tokenizer.token_bytes(t).is_some_and(|b| {
                        TOOL_CALL_OPEN.as_bytes().starts_with(b) || b.starts_with(b"<tool")
                    });
                    if opens && let Some(l) = logits.get_mut(t as usize) {
                        *l += sampling.call_bias;
                    }
                }
            }
            // Structure repeats on purpose: the penalty only touches unconstrained text.
            if mask.is_none() {
                apply_repeat_penalty(&mut logits, &recent, sampling.repeat_penalty);
            }
            // The ban covers free text: the whole answer when unconstrained, else the body of
            // the string value being written (structure repeats on purpose, and a ban keyed on
            // it would forbid the right value after a repeated `": "`).
            let free = match &constraint {
                Some(c) => c.in_string().then_some(&string_run),
                None => Some(&generated),
            };
            if let Some(free) = free {
                ban_repeated_ngrams(
                    &mut logits,
                    free,
                    sampling.no_repeat_ngram,
                    mask.map(|v| v.as_slice()),
                );
            }
            let next = sample(&logits, mask.map(|v| v.as_slice()), &sampling, &mut rng);
            stats.generated_tokens += 1;
            if gen_start.is_none() {
                stats.prompt_time = t0.elapsed();
                gen_start = Some(Instant::now());
            }
            if end.contains(&next) {
                break Stop::EndOfTurn;
            }
            let bytes = self.tokenizer.token_bytes(next).unwrap_or_default();
            let text = utf8.push(bytes);
            if !text.is_empty() && !emit(text) {
                break Stop::Cancelled;
            }
            recent.push(next);
            generated.push(next);
            if recent.len() > 64 {
                recent.remove(0);
            }
            if let Some(c) = &mut constraint {
                if c.in_string() {
                    string_run.push(next);
                } else {
                    string_run.clear();
                }
                c.commit(next, bytes)?;
                if c.is_finished() {
                    break Stop::EndOfTurn;
                }
            }
            if stats.generated_tokens >= max_tokens {
                break Stop::Length;
            }
            let input = Tensor::new(&[next], &self.device)
                .and_then(|t| t.unsqueeze(0))
                .map_err(candle_err)?;
            logits = weights
                .forward(&input, pos)
                .and_then(|l| l.squeeze(0))
                .and_then(|l| l.to_vec1::<f32>())
                .map_err(candle_err)?;
            pos += 1;
        };
        let rest = utf8.finish();
        if !rest.is_empty() && stop != Stop::Cancelled {
            emit(rest);
        }
        if let Some(s) = gen_start {
            stats.generation_time = s.elapsed();
        }
        Ok((stop, stats))
    }
}

/// Bans every token that would repeat an `n`-token run already written (HF's
/// `no_repeat_ngram_size`). When a mask is given and it would ban every allowed token, nothing is
/// banned: the grammar's next bytes always win over the ban.
fn ban_repeated_ngrams(logits: &mut [f32], generated: &[u32], n: usize, mask: Option<&[u32]>) {
    if n == 0 || generated.len() < n {
        return;
    }
    let prefix = &generated[generated.len() - (n - 1)..];
    let mut banned: Vec<u32> = generated
        .windows(n)
        .filter(|w| &w[..n - 1] == prefix)
        .map(|w| w[n - 1])
        .collect();
    if banned.is_empty() {
        return;
    }
    banned.sort_unstable();
    banned.dedup();
    if let Some(mask) = mask
        && mask.iter().all(|t| banned.binary_search(t).is_ok())
    {
        return;
    }
    for t in banned {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = f32::NEG_INFINITY;
        }
    }
}

fn apply_repeat_penalty(logits: &mut [f32], recent: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = std::collections::HashSet::new();
    for &t in recent {
        if seen.insert(t)
            && let Some(l) = logits.get_mut(t as usize)
        {
            *l = if *l >= 0.0 {
                *l / penalty
            } else {
                *l * penalty
            };
        }
    }
}

/// Picks the next token: greedy at temperature 0, else temperature + top-p with a seeded RNG.
fn sample(logits: &[f32], allowed: Option<&[u32]>, s: &Sampling, rng: &mut StdRng) -> u32 {
    // Candidates: (id, logit).
    let mut cands: Vec<(u32, f32)> = match allowed {
        Some(ids) => ids
            .iter()
            .filter_map(|&i| logits.get(i as usize).map(|&l| (i, l)))
            .collect(),
        None => logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect(),
    };
    cands.retain(|c| c.1.is_finite());
    if cands.is_empty() {
        return allowed.and_then(|a| a.first().copied()).unwrap_or(0);
    }
    let best = cands
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|c| c.0)
        .unwrap_or(0);
    if s.temperature <= 1e-4 || cands.len() == 1 {
        return best;
    }
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<(u32, f32)> = cands
        .into_iter()
        .map(|(i, l)| (i, ((l - max) / s.temperature).exp()))
        .filter(|c| c.1 > 1e-7) // negligible tail: dropped before the sort
        .collect();
    let total: f32 = probs.iter().map(|c| c.1).sum();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let cut = s.top_p.clamp(0.0, 1.0) * total;
    let mut acc = 0.0;
    let mut keep = 0;
    for c in &probs {
        acc += c.1;
        keep += 1;
        if acc >= cut {
            break;
        }
    }
    probs.truncate(keep.max(1));
    let sum: f32 = probs.iter().map(|c| c.1).sum();
    let mut r = rng.random::<f32>() * sum;
    for c in &probs {
        r -= c.1;
        if r <= 0.0 {
            return c.0;
        }
    }
    probs.last().map(|c| c.0).unwrap_or(best)
}

#[cfg(test)]
mod tests {
    use super::ban_repeated_ngrams;

    fn banned(generated: &[u32], n: usize, mask: Option<&[u32]>) -> Vec<u32> {
        let mut logits = vec![0.0f32; 10];
        ban_repeated_ngrams(&mut logits, generated, n, mask);
        (0..10u32)
            .filter(|&i| logits[i as usize] == f32::NEG_INFINITY)
            .collect()
    }

    #[test]
    fn the_token_that_would_repeat_a_run_is_banned() {
        // "1 2 3 … 1 2" → 3 would repeat "1 2 3".
        assert_eq!(banned(&[1, 2, 3, 4, 1, 2], 3, None), vec![3]);
        // Every earlier continuation of the prefix is banned.
        assert_eq!(banned(&[1, 2, 3, 1, 2, 5, 1, 2], 3, None), vec![3, 5]);
        assert!(banned(&[1, 2, 3, 4, 1, 2], 4, None).is_empty());
        assert!(banned(&[1, 2, 3, 4, 1, 2], 0, None).is_empty());
        assert!(banned(&[1], 3, None).is_empty());
    }

    #[test]
    fn the_grammar_wins_when_the_ban_would_leave_nothing() {
        assert!(banned(&[1, 2, 3, 1, 2], 3, Some(&[3])).is_empty());
        assert_eq!(banned(&[1, 2, 3, 1, 2], 3, Some(&[3, 7])), vec![3]);
    }
}
