//! Constrained decoding at generation time: [llguidance] computes which tokens may come next,
//! and the hand-written [`Grammar`] follows the same bytes to keep the budget.
//!
//! The grammar is compiled once from the schemas ([`Grammar::tool_call`],
//! [`Grammar::from_schema`]) and handed to llguidance as a Lark grammar of the same language
//! ([`Grammar::lark`]). Each step:
//!
//! - While the tokens left after this one are at least [`Grammar::reach`] (the largest
//!   shortest-completion of any state reachable from here), every token llguidance allows
//!   leaves a value that still fits, so its mask is the answer (tens of µs).
//! - Closer to the end, the budget keeper decides alone: the grammar's own token-trie walk,
//!   which keeps only tokens after which the value can still close within the tokens left. It
//!   cannot be stuck: from any state the next byte of a shortest completion is a one-byte token
//!   that fits. llguidance follows every token either way, so it takes over again as soon as
//!   the rest of the value is short (a long string closed, the last key begun).
//!
//! So a started call always closes within `max_tokens`, and what llguidance allows is never
//! something the grammar rejects (property-tested in `grammar/walks.rs`).
//!
//! [llguidance]: https://github.com/guidance-ai/llguidance

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use crate::grammar::{Grammar, MaskCache, State, TokenTrie};
use toolwright_core::ModelError;

/// A model's vocabulary, prepared once for both engines.
pub(crate) struct Vocabulary {
    /// llguidance's view (`None` if it could not be built: the keeper then masks every step).
    factory: Option<ParserFactory>,
    trie: TokenTrie,
    /// Tokens that end the answer.
    end: Vec<u32>,
    size: usize,
}

impl Vocabulary {
    /// `tokens[id]` = the token's bytes, `None` for control tokens; `end` = end-of-turn tokens.
    pub(crate) fn new(tokens: &[Option<&[u8]>], end: Vec<u32>) -> Self {
        let trie = TokenTrie::new(
            tokens
                .iter()
                .enumerate()
                .filter_map(|(i, b)| b.map(|b| (i as u32, b))),
        );
        // Control tokens as llguidance's specials: never part of a value.
        let words: Vec<Vec<u8>> = tokens
            .iter()
            .enumerate()
            .map(|(i, b)| match b {
                Some(b) if !b.is_empty() => b.to_vec(),
                _ => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(format!("<|special_{i}|>").as_bytes());
                    w
                }
            })
            .collect();
        let eos = end.first().copied().unwrap_or(0);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(TokTrie::from(
            &TokRxInfo::new(words.len() as u32, eos),
            &words,
        )));
        let factory = match ParserFactory::new_simple(&env) {
            Ok(mut f) => {
                f.quiet();
                Some(f)
            }
            Err(e) => {
                tracing::warn!("llguidance is unavailable, the grammar masks alone: {e}");
                None
            }
        };
        Self {
            factory,
            trie,
            end,
            size: tokens.len(),
        }
    }
}

/// One constrained generation: start, then per token [`Constraint::mask`] and
/// [`Constraint::commit`].
pub(crate) struct Constraint<'a> {
    grammar: &'a Grammar,
    vocab: &'a Vocabulary,
    state: State,
    /// `None` in free text, or if llguidance could not take the grammar or a token (the keeper
    /// then masks alone).
    matcher: Option<Matcher>,
    cache: MaskCache,
    /// The last mask came from llguidance.
    #[cfg(test)]
    from_llguidance: bool,
}

impl<'a> Constraint<'a> {
    /// The state before the first token.
    pub(crate) fn start(grammar: &'a Grammar, vocab: &'a Vocabulary) -> Self {
        let matcher = vocab.factory.as_ref().and_then(|f| {
            let parser = grammar
                .lark()
                .map_err(|e| e.0)
                .and_then(|g| {
                    f.create_parser(TopLevelGrammar::from_lark(g))
                        .map_err(|e| e.to_string())
                })
                .inspect_err(|e| {
                    tracing::warn!("llguidance rejected the grammar, the grammar masks alone: {e}")
                })
                .ok()?;
            Some(Matcher::new(Ok(parser)))
        });
        Self {
            grammar,
            vocab,
            state: grammar.start(),
            matcher,
            cache: MaskCache::default(),
            #[cfg(test)]
            from_llguidance: false,
        }
    }

    /// The fewest tokens a whole answer takes (every byte is at most one token).
    pub(crate) fn min_tokens(&self) -> u32 {
        self.grammar.distance(&self.state).saturating_add(1)
    }

    /// Free text that nothing constrains any more: no mask is needed.
    pub(crate) fn is_free(&self) -> bool {
        self.grammar.is_free(&self.state)
    }

    /// Inside the body of a string value (or text): the model's own words, not structure.
    pub(crate) fn in_string(&self) -> bool {
        self.grammar.in_string(&self.state)
    }

    /// The value is complete and nothing may extend it.
    pub(crate) fn is_finished(&self) -> bool {
        self.grammar.is_finished(&self.state)
    }

    /// The tokens that may come next into `out` (cleared first), with at most `left` tokens
    /// after this one: the value can always close within them. End-of-turn tokens are
    /// included where the value is whole.
    pub(crate) fn mask(&mut self, left: u32, out: &mut Vec<u32>) -> Result<(), ModelError> {
        out.clear();
        // Far from the end of the budget llguidance's mask is the answer; near it, the keeper's.
        let far = left >= self.grammar.reach(&self.state);
        let from_llg = match &mut self.matcher {
            Some(m) if far => match m.compute_mask() {
                Ok(v) => {
                    v.iter_set_entries(|i| {
                        if i < self.vocab.size && !self.vocab.end.contains(&(i as u32)) {
                            out.push(i as u32);
                        }
                    });
                    true
                }
                Err(e) => {
                    tracing::warn!("llguidance failed, the grammar masks alone: {e}");
                    self.matcher = None;
                    false
                }
            },
            _ => false,
        };
        if !from_llg {
            out.clear();
            self.cache
                .allowed(&self.vocab.trie, self.grammar, &self.state, left, out);
        }
        #[cfg(test)]
        {
            self.from_llguidance = from_llg;
        }
        if self.grammar.can_end(&self.state) {
            out.extend(&self.vocab.end);
        }
        if out.is_empty() {
            return Err(ModelError::Inference(
                "constrained decoding reached a state with no allowed token".into(),
            ));
        }
        Ok(())
    }

    /// The last mask came from llguidance (not the budget keeper).
    #[cfg(test)]
    pub(crate) fn masked_by_llguidance(&self) -> bool {
        self.from_llguidance
    }

    /// Where the grammar is.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// `token` (with these bytes) was written.
    pub(crate) fn commit(&mut self, token: u32, bytes: &[u8]) -> Result<(), ModelError> {
        self.state = self.grammar.feed_bytes(&self.state, bytes);
        if self.state.is_dead() {
            return Err(ModelError::Inference(format!(
                "constrained decoding: token {token} left the grammar"
            )));
        }
        if self.grammar.is_free(&self.state) {
            self.matcher = None; // plain text from here on: nothing to mask
        }
        if let Some(m) = &mut self.matcher
            && let Err(e) = m.consume_token(token)
        {
            tracing::warn!("llguidance did not take token {token}, the grammar masks alone: {e}");
            self.matcher = None;
        }
        Ok(())
    }
}
