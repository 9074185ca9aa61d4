//! Which tokens a state allows: every token's bytes in a trie ([`TokenTrie`]), walked once per
//! mask, dropping whole dead subtrees; and the masks remembered by state ([`MaskCache`]).

use super::Grammar;
use super::state::{Frame, State};

impl Grammar {
    /// `state` with what cannot change the next token's mask forgotten: inside a string that
    /// has reached `minLength` and is more than `slack` characters from `maxLength`, its length
    /// so far does not matter (no token is longer than `slack` bytes).
    fn mask_key(&self, state: &State, slack: u32) -> State {
        let mut key = state.clone();
        for stack in &mut key.stacks {
            for f in stack.iter_mut() {
                if let Frame::Str {
                    open: true,
                    len,
                    min,
                    max,
                    ..
                } = f
                    && *len >= *min
                    && len.saturating_add(slack) <= *max
                {
                    *len = *min;
                }
            }
        }
        key
    }
}

/// Masks already computed for one grammar, by state: inside a long string every token asks the
/// same question, and the walk of the whole vocabulary costs far more than a lookup.
#[derive(Debug)]
pub struct MaskCache {
    masks: std::collections::HashMap<State, Vec<(u32, u32)>>,
    /// Tokens stored over all masks.
    stored: usize,
    /// Most tokens kept over all masks; the cache starts over when full.
    capacity: usize,
}

impl Default for MaskCache {
    /// 2M tokens (8 bytes each: 16 MB). A string-body mask holds most of the vocabulary
    /// (~49k tokens for SmolLM2).
    fn default() -> Self {
        Self::with_capacity(2_000_000)
    }
}

impl MaskCache {
    /// A cache keeping at most `capacity` tokens over all masks.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            masks: std::collections::HashMap::new(),
            stored: 0,
            capacity,
        }
    }

    /// Tokens currently stored over all masks.
    #[cfg(test)]
    fn stored(&self) -> usize {
        self.stored
    }

    /// The same as [`TokenTrie::allowed`], remembered.
    pub fn allowed(
        &mut self,
        trie: &TokenTrie,
        g: &Grammar,
        state: &State,
        budget: u32,
        out: &mut Vec<u32>,
    ) {
        let within = |found: &[(u32, u32)], out: &mut Vec<u32>| {
            out.extend(
                found
                    .iter()
                    .filter(|&&(_, d)| d <= budget)
                    .map(|&(id, _)| id),
            );
        };
        let key = g.mask_key(state, trie.depth);
        if let Some(found) = self.masks.get(&key) {
            within(found, out);
            return;
        }
        let mut found = Vec::new();
        trie.walk(0, g, state, &mut found);
        within(&found, out);
        if self.stored + found.len() > self.capacity {
            self.masks.clear();
            self.stored = 0;
        }
        self.stored += found.len();
        self.masks.insert(key, found);
    }
}

/// All tokens' bytes in a trie, so a mask is one walk that drops whole dead subtrees.
#[derive(Debug, Clone, Default)]
pub struct TokenTrie {
    /// children[n] = (byte, child) sorted by byte.
    children: Vec<Vec<(u8, u32)>>,
    token: Vec<Option<u32>>,
    /// The longest token, in bytes.
    depth: u32,
}

impl TokenTrie {
    /// A trie of `(id, bytes)`; empty byte strings are skipped.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a [u8])>) -> Self {
        let mut t = Self {
            children: vec![Vec::new()],
            token: vec![None],
            depth: 0,
        };
        for (id, bytes) in tokens {
            if bytes.is_empty() {
                continue;
            }
            let mut n = 0usize;
            for &b in bytes {
                n = match t.children[n].binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => t.children[n][i].1 as usize,
                    Err(i) => {
                        let new = t.children.len();
                        t.children.push(Vec::new());
                        t.token.push(None);
                        t.children[n].insert(i, (b, new as u32));
                        new
                    }
                };
            }
            t.token[n] = Some(id);
            t.depth = t.depth.max(bytes.len() as u32);
        }
        t
    }

    /// Tokens whose bytes the grammar accepts from `state` and that leave at most `budget`
    /// bytes to complete the value: one walk of the trie. (The engine asks through
    /// [`MaskCache`], which remembers masks by state; this uncached form is what the cache is
    /// tested against.)
    #[cfg(test)]
    pub fn allowed(&self, g: &Grammar, state: &State, budget: u32, out: &mut Vec<u32>) {
        let mut found = Vec::new();
        self.walk(0, g, state, &mut found);
        out.extend(
            found
                .into_iter()
                .filter(|&(_, d)| d <= budget)
                .map(|(id, _)| id),
        );
    }

    /// Every token the grammar accepts from `state`, with the bytes left to complete after it.
    fn walk(&self, n: usize, g: &Grammar, state: &State, out: &mut Vec<(u32, u32)>) {
        for &(b, child) in &self.children[n] {
            let next = g.feed(state, b);
            if next.is_dead() {
                continue;
            }
            if let Some(id) = self.token[child as usize] {
                out.push((id, g.distance(&next)));
            }
            self.walk(child as usize, g, &next, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mask_cache_stays_within_its_capacity_and_still_answers() {
        let g = Grammar::from_schema(&json!({"type":"string","maxLength":400})).unwrap();
        // A 300-byte token: string states within 300 characters of the cap stay distinct, so
        // the cache fills and has to start over many times.
        let mut vocab: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        vocab.push(vec![b'a'; 300]);
        let trie = TokenTrie::new(
            vocab
                .iter()
                .enumerate()
                .map(|(i, t)| (i as u32, t.as_slice())),
        );
        let mut cache = MaskCache::with_capacity(1000);
        let mut state = g.start();
        for b in std::iter::once(b'"').chain(std::iter::repeat_n(b'a', 399)) {
            let (mut cached, mut walked) = (Vec::new(), Vec::new());
            cache.allowed(&trie, &g, &state, 1000, &mut cached);
            trie.allowed(&g, &state, 1000, &mut walked);
            assert_eq!(cached, walked);
            assert!(cache.stored() <= 1000, "{}", cache.stored());
            state = g.feed(&state, b);
        }
    }

    #[test]
    fn trie_mask_respects_budget() {
        let g = Grammar::from_schema(&json!({"type":"boolean"})).unwrap();
        let toks: Vec<(u32, &[u8])> =
            vec![(0, b"t"), (1, b"true"), (2, b"f"), (3, b"x"), (4, b"tr")];
        let trie = TokenTrie::new(toks);
        let mut out = Vec::new();
        trie.allowed(&g, &g.start(), 10, &mut out);
        out.sort();
        assert_eq!(out, vec![0, 1, 2, 4]);
        out.clear();
        // With only 3 bytes of budget left after this token, "f" (4 more) is not allowed.
        trie.allowed(&g, &g.start(), 3, &mut out);
        out.sort();
        assert_eq!(out, vec![0, 1, 4]);
    }
}
