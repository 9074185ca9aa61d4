//! The generation loop: prompt → logits → (mask) → sample → token, on a blocking thread.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::constraint::{Constraint, Vocabulary};
use crate::gguf::Content;
use crate::grammar::{Grammar, TOOL_CALL_OPEN};
use crate::model::{Fault, KvCache, Weights};
use crate::tokenizer::{LocalTokenizer, Utf8Stream};
use toolwright_core::ModelError;

fn load_err(e: Fault) -> ModelError {
    ModelError::ModelLoad(format!("the GGUF weights could not be loaded: {e}"))
}

/// The default memory bound of the prompt cache ([`PrefixStore`]): 256 MiB.
pub(crate) const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;

/// Most prompt tokens one sequence puts through one batched step, so that a long prompt does
/// not hold up the other sessions' decoding for its whole length.
const PREFILL_CHUNK: usize = 128;

/// How long the scheduler waits for the other active sessions' next step before running a
/// batch without them.
const GATHER: Duration = Duration::from_millis(3);

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
    /// Of those, the tokens whose keys and values were reused from an earlier request with the
    /// same beginning (not processed again). `prompt_tokens - prompt_tokens_reused` were
    /// processed.
    pub prompt_tokens_reused: u32,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// Time to process the prompt (its new part) and pick the first token.
    pub prompt_time: Duration,
    /// Time spent generating after the first token.
    pub generation_time: Duration,
}

impl GenerationStats {
    /// Prompt tokens actually processed (not reused).
    pub fn prompt_tokens_processed(&self) -> u32 {
        self.prompt_tokens - self.prompt_tokens_reused
    }
    /// Processed prompt tokens per second.
    pub fn prompt_tokens_per_sec(&self) -> f64 {
        f64::from(self.prompt_tokens_processed()) / self.prompt_time.as_secs_f64().max(1e-9)
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

/// Cumulative prompt counts of one loaded model, over all its requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromptCounters {
    /// Generations started.
    pub requests: u64,
    /// Prompt tokens processed by the model.
    pub processed: u64,
    /// Prompt tokens taken from the prompt cache instead.
    pub reused: u64,
}

/// The tokens the model wrote for its recent turns, by their text. When the history sends a turn
/// back with exactly that text, the prompt carries the model's own tokens: re-encoding the text
/// may split it into other tokens (a grammar-guided call often is), which would end prefix
/// reuse inside that turn and show the model a spelling of its words it never wrote.
#[derive(Default)]
struct OwnTurns {
    entries: std::collections::VecDeque<(String, Vec<u32>)>,
}

impl OwnTurns {
    /// Turns remembered (the oldest is forgotten first).
    const CAPACITY: usize = 256;

    fn remember(&mut self, text: String, tokens: Vec<u32>) {
        if text.is_empty() || tokens.is_empty() {
            return;
        }
        self.entries.retain(|(t, _)| *t != text);
        if self.entries.len() == Self::CAPACITY {
            self.entries.pop_front();
        }
        self.entries.push_back((text, tokens));
    }

    fn get(&self, text: &str) -> Option<&[u32]> {
        self.entries
            .iter()
            .rev()
            .find(|(t, _)| t == text)
            .map(|(_, v)| v.as_slice())
    }
}

/// The KV caches of recent sequences, bounded in bytes, least recently used evicted first.
/// A new prompt starts from a copy of the longest common token prefix of any entry.
struct PrefixStore {
    entries: Vec<(KvCache, u64)>,
    clock: u64,
    budget: usize,
}

impl PrefixStore {
    /// A copy of the longest cached prefix of `prompt`, leaving at least one token to process.
    fn lookup(&mut self, prompt: &[u32]) -> Option<KvCache> {
        let limit = prompt.len().saturating_sub(1);
        let (best, n) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, (c, _))| {
                let n = c
                    .tokens()
                    .iter()
                    .zip(prompt)
                    .take_while(|(a, b)| a == b)
                    .count();
                (i, n.min(limit))
            })
            .max_by_key(|&(i, n)| (n, self.entries[i].1))?;
        if n == 0 {
            return None;
        }
        self.clock += 1;
        self.entries[best].1 = self.clock;
        Some(self.entries[best].0.prefix(n))
    }

    fn insert(&mut self, cache: KvCache) {
        let bytes = cache.bytes();
        if bytes == 0 || bytes > self.budget {
            return;
        }
        // An entry the new one extends says nothing the new one does not.
        self.entries
            .retain(|(c, _)| !cache.tokens().starts_with(c.tokens()));
        self.clock += 1;
        self.entries.push((cache, self.clock));
        self.evict();
    }

    fn set_budget(&mut self, bytes: usize) {
        self.budget = bytes;
        self.evict();
    }

    /// Drops the least recently used entries until the rest fit the budget.
    fn evict(&mut self) {
        let mut total: usize = self.entries.iter().map(|(c, _)| c.bytes()).sum();
        while total > self.budget {
            let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].1) else {
                break;
            };
            total -= self.entries.swap_remove(oldest).0.bytes();
        }
    }
}

type StepReply = Result<(KvCache, Vec<f32>), ModelError>;

/// One sequence's request to the scheduler: put `tokens` through the model after `cache`.
struct Job {
    cache: KvCache,
    tokens: Vec<u32>,
    done: usize,
    reply: mpsc::Sender<StepReply>,
}

/// The thread that runs the model: it takes every sequence's pending step and runs them as one
/// batch (prompts in chunks of [`PREFILL_CHUNK`]), so sessions decode together instead of one
/// waiting for another's whole generation.
fn scheduler(weights: Arc<Weights>, rx: mpsc::Receiver<Job>, active: Arc<AtomicUsize>) {
    let mut pending: Vec<Job> = Vec::new();
    loop {
        if pending.is_empty() {
            match rx.recv() {
                Ok(j) => pending.push(j),
                Err(_) => return,
            }
        }
        // Gather: whatever is queued, and briefly the other active sessions' next steps.
        let deadline = Instant::now() + GATHER;
        loop {
            while let Ok(j) = rx.try_recv() {
                pending.push(j);
            }
            let now = Instant::now();
            if pending.len() >= active.load(Ordering::Acquire) || now >= deadline {
                break;
            }
            match rx.recv_timeout(deadline - now) {
                Ok(j) => pending.push(j),
                Err(_) => break,
            }
        }
        let ends: Vec<usize> = pending
            .iter()
            .map(|j| (j.done + PREFILL_CHUNK).min(j.tokens.len()))
            .collect();
        let mut items: Vec<(&mut KvCache, &[u32])> = pending
            .iter_mut()
            .zip(&ends)
            .map(|(j, &e)| (&mut j.cache, &j.tokens[j.done..e]))
            .collect();
        // On a worker of the thread pool the kernels split their work over: the forward's
        // many parallel sections then start as cheap local joins, not as jobs injected from
        // outside the pool and waited for (one wake-up per matmul).
        match rayon::scope(|_| weights.forward(&mut items)) {
            Ok(logits) => {
                let mut next = Vec::with_capacity(pending.len());
                for ((mut j, e), l) in pending.drain(..).zip(ends).zip(logits) {
                    j.done = e;
                    if j.done == j.tokens.len() {
                        let _ = j.reply.send(Ok((j.cache, l)));
                    } else {
                        next.push(j);
                    }
                }
                pending = next;
            }
            Err(e) => {
                let msg = e.to_string();
                for j in pending.drain(..) {
                    let _ = j.reply.send(Err(ModelError::Inference(msg.clone())));
                }
            }
        }
    }
}

/// Counts a sequence as active (the scheduler waits for its steps) while alive.
struct ActiveGuard<'a>(&'a AtomicUsize);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the constraint vocabulary is built from (owned, for the thread that builds it).
struct VocabSource {
    tokens: Vec<Option<Vec<u8>>>,
    end: Vec<u32>,
}

impl VocabSource {
    fn build(&self) -> Vocabulary {
        let tokens: Vec<Option<&[u8]>> = self.tokens.iter().map(|t| t.as_deref()).collect();
        Vocabulary::new(&tokens, self.end.clone())
    }
}

pub(crate) struct Engine {
    weights: Arc<Weights>,
    jobs: Mutex<mpsc::Sender<Job>>,
    active: Arc<AtomicUsize>,
    prefix: Mutex<PrefixStore>,
    own_turns: Mutex<OwnTurns>,
    counters: Mutex<PromptCounters>,
    pub(crate) tokenizer: LocalTokenizer,
    /// Built on a thread of its own from load on (llguidance's token trie takes a third of the
    /// load time); the first constrained request waits for it if it is not ready yet.
    vocab: Arc<OnceLock<Vocabulary>>,
    vocab_source: Arc<VocabSource>,
    pub(crate) name: String,
    pub(crate) context_length: usize,
    pub(crate) load_time: Duration,
}

impl Engine {
    pub(crate) fn load(path: &Path, prefix_cache_bytes: usize) -> Result<Self, ModelError> {
        let t0 = Instant::now();
        let open_err = |e: std::io::Error| {
            ModelError::ModelLoad(format!(
                "cannot open the model file {}: {e}",
                path.display()
            ))
        };
        // Buffered: the GGUF header is thousands of small reads (every token and merge string).
        let mut file = std::io::BufReader::with_capacity(
            1 << 20,
            std::fs::File::open(path).map_err(open_err)?,
        );
        let content = Content::read(&mut file).map_err(|e| {
            ModelError::ModelLoad(format!(
                "{} is not a readable GGUF file: {e}",
                path.display()
            ))
        })?;
        let weights = Weights::from_gguf(&content, &mut file).map_err(load_err)?;
        let t_weights = t0.elapsed();
        let tokenizer = LocalTokenizer::from_gguf(&content)?;
        let t_tok = t0.elapsed();
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
        let vocab_source = Arc::new(VocabSource {
            tokens: (0..tokenizer.vocab_size() as u32)
                .map(|i| tokenizer.token_bytes(i).map(<[u8]>::to_vec))
                .collect(),
            end: tokenizer.end_of_turn(),
        });
        let vocab = Arc::new(OnceLock::new());
        {
            let (vocab, source) = (Arc::clone(&vocab), Arc::clone(&vocab_source));
            // If the thread cannot start, the first constrained request builds it.
            let _ = std::thread::Builder::new()
                .name("local-model-vocabulary".into())
                .spawn(move || {
                    vocab.get_or_init(|| source.build());
                });
        }
        tracing::debug!(
            weights = ?t_weights,
            tokenizer = ?(t_tok - t_weights),
            rest = ?(t0.elapsed() - t_tok),
            "local model loaded"
        );
        let weights = Arc::new(weights);
        let active = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let (w, a) = (Arc::clone(&weights), Arc::clone(&active));
        std::thread::Builder::new()
            .name("local-model".into())
            .spawn(move || scheduler(w, rx, a))
            .map_err(|e| ModelError::ModelLoad(format!("cannot start the model thread: {e}")))?;
        Ok(Self {
            weights,
            jobs: Mutex::new(tx),
            active,
            prefix: Mutex::new(PrefixStore {
                entries: Vec::new(),
                clock: 0,
                budget: prefix_cache_bytes,
            }),
            own_turns: Mutex::new(OwnTurns::default()),
            counters: Mutex::new(PromptCounters::default()),
            tokenizer,
            vocab,
            vocab_source,
            name,
            context_length,
            load_time: t0.elapsed(),
        })
    }

    /// The prompt ids of `turns`, with the model's own tokens for the assistant turns it wrote.
    pub(crate) fn prompt(&self, turns: &[(&str, &str)]) -> Result<Vec<u32>, ModelError> {
        let own = self.own_turns.lock().map_err(|_| {
            ModelError::Inference("the local model's turn memory is poisoned".into())
        })?;
        self.tokenizer
            .chat_prompt_with(turns, |text| own.get(text).map(<[u32]>::to_vec))
    }

    /// Changes the prompt cache's memory bound (0 turns reuse off), evicting what no longer fits.
    pub(crate) fn set_prefix_cache_bytes(&self, bytes: usize) {
        if let Ok(mut p) = self.prefix.lock() {
            p.set_budget(bytes);
        }
    }

    /// Cumulative prompt counts.
    pub(crate) fn counters(&self) -> PromptCounters {
        self.counters.lock().map(|c| *c).unwrap_or_default()
    }

    /// Puts `tokens` through the model after `cache` on the scheduler thread; returns the
    /// extended cache and the logits after the last token.
    fn step(&self, cache: KvCache, tokens: Vec<u32>) -> Result<(KvCache, Vec<f32>), ModelError> {
        let stopped = || ModelError::Inference("the local model's thread has stopped".into());
        let (reply, rx) = mpsc::channel();
        let job = Job {
            cache,
            tokens,
            done: 0,
            reply,
        };
        self.jobs
            .lock()
            .map_err(|_| stopped())?
            .send(job)
            .map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
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
        let mut constraint = grammar
            .map(|g| Constraint::start(g, self.vocab.get_or_init(|| self.vocab_source.build())));
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
        let _active = {
            self.active.fetch_add(1, Ordering::AcqRel);
            ActiveGuard(&self.active)
        };
        let t0 = Instant::now();
        let mut cache = self
            .prefix
            .lock()
            .ok()
            .and_then(|mut p| p.lookup(prompt))
            .unwrap_or_else(|| KvCache::new(&self.weights.cfg));
        let reused = cache.len();
        stats.prompt_tokens_reused = reused as u32;
        if let Ok(mut c) = self.counters.lock() {
            c.requests += 1;
            c.reused += reused as u64;
            c.processed += (prompt.len() - reused) as u64;
        }
        let (c, mut logits) = self.step(cache, prompt[reused..].to_vec())?;
        cache = c;
        let mut rng = StdRng::seed_from_u64(sampling.seed);
        let end = self.tokenizer.end_of_turn();
        let mut utf8 = Utf8Stream::default();
        let mut recent: Vec<u32> = Vec::new();
        let mut generated: Vec<u32> = Vec::new();
        let mut string_run: Vec<u32> = Vec::new();
        let mut allowed: Vec<u32> = Vec::new();
        let mut gen_start = None;
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
            let (c, l) = self.step(cache, vec![next])?;
            cache = c;
            logits = l;
        };
        if let Ok(mut p) = self.prefix.lock() {
            p.insert(cache);
        }
        if stop == Stop::EndOfTurn
            && let Ok(text) = String::from_utf8(
                generated
                    .iter()
                    .flat_map(|&t| {
                        self.tokenizer
                            .token_bytes(t)
                            .unwrap_or_default()
                            .iter()
                            .copied()
                    })
                    .collect(),
            )
            && let Ok(mut own) = self.own_turns.lock()
        {
            own.remember(text, generated);
        }
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
