//! Byte-level BPE (GPT-2 style: SmolLM2, StarCoder, Llama 3), the crate's own (the
//! `tokenizers` crate was a large share of every demo's cold build; it stays the tests' oracle).
//!
//! Encoding a text:
//! 1. user-defined tokens (GGUF token type 4) are cut out of it, the leftmost first and the
//!    longest of those starting there (as `tokenizers` matches added tokens); control tokens
//!    (`<|im_start|>`, …) are never recognised in text;
//! 2. for the `smollm`/`starcoder`/`refact` pre-tokenizers every digit (`char::is_numeric`, as
//!    `tokenizers`' `Digits` splits) stands alone;
//! 3. each piece is split as GPT-2's regex does,
//!    `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, written out by
//!    hand ([`split`]) with the regex crate's own Unicode tables for `\p{L}`, `\p{N}` and `\s`;
//! 4. each word's bytes become GPT-2's printable characters, which are merged, the pair of
//!    lowest merge rank first (the leftmost on a tie), until no adjacent pair has a merge.

use std::cmp::{Ordering, Reverse};
use std::collections::HashMap;
use std::sync::OnceLock;

use crate::merge::merge;

/// GPT-2's `bytes_to_unicode`: every byte as a printable character (`Ġ` for a space).
pub(crate) fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        out[b as usize] = char::from_u32(c).unwrap_or('\0');
    }
    out
}

/// Sorted, disjoint ranges of a Unicode class, from regex-syntax's tables (the ones the regex
/// crate, and so `tokenizers`' fancy-regex, matches with).
struct Class(Vec<(char, char)>);

impl Class {
    fn of(pattern: &str) -> Self {
        let ranges = match regex_syntax::parse(pattern).map(|h| h.into_kind()) {
            Ok(regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(c))) => {
                c.ranges().iter().map(|r| (r.start(), r.end())).collect()
            }
            // A fixed pattern of a fixed regex-syntax: not reached.
            _ => Vec::new(),
        };
        Self(ranges)
    }

    fn contains(&self, c: char) -> bool {
        self.0
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    Ordering::Less
                } else if lo > c {
                    Ordering::Greater
                } else {
                    Ordering::Equal
                }
            })
            .is_ok()
    }
}

struct Classes {
    letter: Class,
    number: Class,
    space: Class,
}

fn classes() -> &'static Classes {
    static C: OnceLock<Classes> = OnceLock::new();
    C.get_or_init(|| Classes {
        letter: Class::of(r"\p{L}"),
        number: Class::of(r"\p{N}"),
        space: Class::of(r"\s"),
    })
}

fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphabetic()
    } else {
        classes().letter.contains(c)
    }
}

fn is_number(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        classes().number.contains(c)
    }
}

fn is_space(c: char) -> bool {
    if c.is_ascii() {
        matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
    } else {
        classes().space.contains(c)
    }
}

/// `[^\s\p{L}\p{N}]`
fn is_other(c: char) -> bool {
    !is_space(c) && !is_letter(c) && !is_number(c)
}

/// The end of the longest run of `class` from `at` (`at` itself when `s[at]` is not in it).
fn run(s: &str, at: usize, class: fn(char) -> bool) -> usize {
    s[at..]
        .char_indices()
        .find(|&(_, c)| !class(c))
        .map_or(s.len(), |(i, _)| at + i)
}

/// The length of GPT-2's regex match at `at` (`at < s.len()`): the first alternative that
/// matches there, each as the backtracking regex takes it.
fn match_at(s: &str, at: usize) -> usize {
    let rest = &s[at..];
    // 's|'t|'re|'ve|'m|'ll|'d  (case-sensitive)
    if let Some(after) = rest.strip_prefix('\'') {
        for c in ["s", "t", "re", "ve", "m", "ll", "d"] {
            if after.starts_with(c) {
                return 1 + c.len();
            }
        }
    }
    // ` ?X+` for X in \p{L}, \p{N}, [^\s\p{L}\p{N}]: the optional space, then a run of X.
    let after_space = if rest.starts_with(' ') { at + 1 } else { at };
    for class in [is_letter, is_number, is_other] {
        let end = run(s, after_space, class);
        if end > after_space {
            return end - at;
        }
        // Without the space: the run at `at` itself (a space is in none of the three classes).
    }
    // \s+(?!\S): the whitespace run, less its last character when a non-space follows it and
    // the run is longer than one; else \s+: the whole run.
    let end = run(s, at, is_space);
    if end < s.len() {
        let last = s[at..end].chars().next_back().map_or(0, char::len_utf8);
        if end - at > last {
            return end - at - last;
        }
    }
    end - at
}

/// GPT-2's regex split of one piece of text.
pub(crate) fn split(s: &str) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= s.len() {
            return None;
        }
        let len = match_at(s, at).max(s[at..].chars().next().map_or(1, char::len_utf8));
        let word = &s[at..at + len];
        at += len;
        Some(word)
    })
}

/// The pieces before the regex: every digit on its own when `digits` (`tokenizers`' `Digits`
/// with `individual_digits`, which splits on `char::is_numeric`).
fn digit_pieces(s: &str, digits: bool) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= s.len() {
            return None;
        }
        let rest = &s[at..];
        let len = if !digits {
            rest.len()
        } else {
            match rest.chars().next() {
                Some(c) if c.is_numeric() => c.len_utf8(),
                _ => rest
                    .char_indices()
                    .find(|&(_, c)| c.is_numeric())
                    .map_or(rest.len(), |(i, _)| i),
            }
        };
        at += len;
        Some(&rest[..len])
    })
}

/// A byte-level BPE vocabulary with its merges.
#[derive(Clone)]
pub(crate) struct Bpe {
    /// The id of each byte's printable character (`None`: not in the vocabulary).
    byte_ids: [Option<u32>; 256],
    /// `(left, right)` → `(rank, merged)`.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// User-defined tokens matched in raw text (longest first).
    specials: Vec<(String, u32)>,
    /// Every digit on its own before the regex (SmolLM's and StarCoder's pre-tokenizer).
    digits: bool,
}

impl Bpe {
    /// From the vocabulary (GPT-2 printable characters), the merges (`"left right"`, by rank),
    /// the user-defined tokens to match in text, and whether digits stand alone.
    pub(crate) fn new(
        tokens: &[String],
        merges: &[String],
        user_defined: Vec<(String, u32)>,
        digits: bool,
    ) -> Result<Self, String> {
        // A repeated token or merge: the last one counts (as `tokenizers` builds its maps).
        let vocab: HashMap<&str, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i as u32))
            .collect();
        let chars = byte_chars();
        let mut byte_ids = [None; 256];
        for (b, c) in chars.iter().enumerate() {
            byte_ids[b] = vocab.get(c.encode_utf8(&mut [0; 4]) as &str).copied();
        }
        let mut map = HashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            let (a, b) = m
                .split_once(' ')
                .ok_or_else(|| format!("bad merge `{m}`"))?;
            let id = |t: &str| {
                vocab
                    .get(t)
                    .copied()
                    .ok_or_else(|| format!("merge `{m}`: `{t}` is not in the vocabulary"))
            };
            map.insert((id(a)?, id(b)?), (rank as u32, id(&format!("{a}{b}"))?));
        }
        let mut specials: Vec<(String, u32)> = user_defined
            .into_iter()
            .filter(|(t, _)| !t.is_empty())
            .collect();
        // Longest first; a stable sort keeps the vocabulary order among equal lengths.
        specials.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        Ok(Self {
            byte_ids,
            merges: map,
            specials,
            digits,
        })
    }

    /// Token ids of plain text.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut rest = text;
        while !rest.is_empty() {
            // The leftmost user-defined token (the longest there), if any.
            let next = self
                .specials
                .iter()
                .filter_map(|(t, id)| rest.find(t.as_str()).map(|at| (at, t.len(), *id)))
                .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)));
            let (plain, special) = match next {
                Some((at, len, id)) => (&rest[..at], Some((id, at + len))),
                None => (rest, None),
            };
            for piece in digit_pieces(plain, self.digits) {
                for word in split(piece) {
                    self.word(word.as_bytes(), &mut out);
                }
            }
            match special {
                Some((id, end)) => {
                    out.push(id);
                    rest = &rest[end..];
                }
                None => break,
            }
        }
        out
    }

    /// The merged ids of one word's bytes: the pair of lowest merge rank first.
    fn word(&self, bytes: &[u8], out: &mut Vec<u32>) {
        let ids = bytes
            .iter()
            .filter_map(|&b| self.byte_ids[b as usize])
            .collect();
        out.extend(merge(ids, |l, r| {
            self.merges
                .get(&(l, r))
                .map(|&(rank, merged)| (Reverse(rank), merged))
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&str> {
        split(s).collect()
    }

    #[test]
    fn the_regex_split_by_hand() {
        assert_eq!(
            words("Hello world, it's 2024!"),
            ["Hello", " world", ",", " it", "'s", " 2024", "!"]
        );
        // \s+(?!\S): a whitespace run before a word leaves its last space to the word.
        assert_eq!(words("a   b"), ["a", "  ", " b"]);
        // Only a space (not a tab) joins the word after it.
        assert_eq!(words("a \n\tb"), ["a", " \n", "\t", "b"]);
        // A single space before a non-space, not followed by a letter, is its own \s+.
        assert_eq!(words("a\n b"), ["a", "\n", " b"]);
        // At the end: the whole run.
        assert_eq!(words("end  \n"), ["end", "  \n"]);
        assert_eq!(words("x 'll"), ["x", " '", "ll"]);
        assert_eq!(words("你好 世界🙂"), ["你好", " 世界", "🙂"]);
        assert_eq!(words("  "), ["  "]);
    }

    #[test]
    fn digits_stand_alone_before_the_regex() {
        let p: Vec<&str> = digit_pieces("ab 12c", true).collect();
        assert_eq!(p, ["ab ", "1", "2", "c"]);
        let p: Vec<&str> = digit_pieces("ab 12c", false).collect();
        assert_eq!(p, ["ab 12c"]);
    }

    fn tiny(merges: &[&str], user_defined: &[&str]) -> (Bpe, Vec<String>) {
        let mut tokens: Vec<String> = ["a", "b", "c", "Ġ", "ab", "bc", "Ġa"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let mut ud = Vec::new();
        for t in user_defined {
            ud.push((t.to_string(), tokens.len() as u32));
            tokens.push(t.to_string());
        }
        let merges: Vec<String> = merges.iter().map(|m| m.to_string()).collect();
        (Bpe::new(&tokens, &merges, ud, true).unwrap(), tokens)
    }

    fn texts(ids: &[u32], tokens: &[String]) -> Vec<String> {
        ids.iter().map(|&i| tokens[i as usize].clone()).collect()
    }

    #[test]
    fn merges_go_by_rank_not_by_position() {
        let (bpe, tokens) = tiny(&["b c", "a b", "Ġ a"], &[]);
        assert_eq!(texts(&bpe.encode("abc"), &tokens), ["a", "bc"]);
        // `a b` (rank 0) before `Ġ a` (rank 2), though `Ġ a` is further left.
        let (bpe, tokens) = tiny(&["a b", "b c", "Ġ a"], &[]);
        assert_eq!(
            texts(&bpe.encode("abc ab"), &tokens),
            ["ab", "c", "Ġ", "ab"]
        );
        // A merge whose result is not a token is refused at load.
        let refused = Bpe::new(&tokens, &["c c".to_string()], Vec::new(), false);
        assert!(refused.is_err());
    }

    #[test]
    fn user_defined_tokens_are_cut_out_first_longest_first() {
        // (SmolLM2's GGUF has no user-defined tokens: the oracle test cannot cover this path.)
        let (bpe, tokens) = tiny(&["a b"], &["<x>", "<x>y"]);
        assert_eq!(
            texts(&bpe.encode("ab<x>a<x>yb"), &tokens),
            ["ab", "<x>", "a", "<x>y", "b"]
        );
        // Leftmost first: `<x>` at 0 wins over `<x>y` later.
        assert_eq!(texts(&bpe.encode("<x><x>y"), &tokens), ["<x>", "<x>y"]);
    }

    #[test]
    fn byte_chars_are_gpt2s() {
        let c = byte_chars();
        assert_eq!(c[b' ' as usize], 'Ġ');
        assert_eq!(c[b'\n' as usize], 'Ċ');
        assert_eq!(c[b'A' as usize], 'A');
        assert_eq!(c[0], 'Ā');
        let mut all = c.to_vec();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 256);
    }
}
