//! The merge loop both tokenizers share: a word's symbols in a row; the adjacent pair that
//! merges first (by priority, the leftmost of equals) is merged, again and again, until no
//! adjacent pair merges. The byte-level BPE ranks a pair by its merge rank (`bpe.rs`),
//! SentencePiece by the score of the piece the pair makes (`tokenizer.rs`).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Merges adjacent `symbols` until no adjacent pair merges; returns the symbols left, in order.
///
/// `pair(left, right)` says whether the two merge: `None`, or the merge's priority (the highest
/// is merged first; of equal ones, the leftmost) and the symbol the two become. A merged symbol
/// must differ from the left one it replaces and from any symbol its right neighbour was, as a
/// longer token or a longer piece of text does: that is how an outdated pair is told apart.
pub(crate) fn merge<S, P>(symbols: Vec<S>, pair: impl Fn(S, S) -> Option<(P, S)>) -> Vec<S>
where
    S: Copy + PartialEq,
    P: Ord,
{
    let n = symbols.len();
    let mut row: Vec<Link<S>> = symbols
        .into_iter()
        .enumerate()
        .map(|(i, sym)| Link {
            sym,
            live: true,
            prev: i.checked_sub(1),
            next: (i + 1 < n).then_some(i + 1),
        })
        .collect();
    let candidate = |row: &[Link<S>], left: usize, right: usize| {
        let seen = (row[left].sym, row[right].sym);
        pair(seen.0, seen.1).map(|(priority, merged)| Candidate {
            priority,
            left,
            right,
            seen,
            merged,
        })
    };
    let mut queue: BinaryHeap<Candidate<P, S>> =
        (1..n).filter_map(|i| candidate(&row, i - 1, i)).collect();
    while let Some(c) = queue.pop() {
        let (l, r) = (&row[c.left], &row[c.right]);
        // Outdated: a side was merged since (into its neighbour, or with the next one).
        if !l.live || !r.live || l.next != Some(c.right) || (l.sym, r.sym) != c.seen {
            continue;
        }
        let after = r.next;
        row[c.left].sym = c.merged;
        row[c.left].next = after;
        row[c.right].live = false;
        if let Some(nx) = after {
            row[nx].prev = Some(c.left);
        }
        if let Some(p) = row[c.left].prev {
            queue.extend(candidate(&row, p, c.left));
        }
        if let Some(nx) = after {
            queue.extend(candidate(&row, c.left, nx));
        }
    }
    row.into_iter().filter(|s| s.live).map(|s| s.sym).collect()
}

/// One symbol of the row, linked to its live neighbours.
struct Link<S> {
    sym: S,
    /// `false` once merged into its left neighbour.
    live: bool,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A possible merge of the symbols at `left` and `right`, as they were when it was found.
struct Candidate<P, S> {
    priority: P,
    left: usize,
    right: usize,
    seen: (S, S),
    merged: S,
}

impl<P: Ord, S> PartialEq for Candidate<P, S> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl<P: Ord, S> Eq for Candidate<P, S> {}
impl<P: Ord, S> PartialOrd for Candidate<P, S> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<P: Ord, S> Ord for Candidate<P, S> {
    /// The max-heap pops the highest priority first, then the leftmost.
    fn cmp(&self, o: &Self) -> Ordering {
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.left.cmp(&self.left))
    }
}

#[cfg(test)]
mod tests {
    use super::merge;

    /// Merges `word` (one symbol a character) by `rules`: `(left, right, merged, priority)`.
    fn run(word: &str, rules: &[(&'static str, &'static str, &'static str, u32)]) -> Vec<String> {
        let symbols: Vec<String> = word.chars().map(String::from).collect();
        // Symbols as indices into a table that grows with every merged text.
        let table = std::cell::RefCell::new(symbols.clone());
        let ids = (0..symbols.len()).collect();
        let left = merge(ids, |l: usize, r: usize| {
            let (a, b) = (table.borrow()[l].clone(), table.borrow()[r].clone());
            let &(_, _, m, p) = rules.iter().find(|(x, y, _, _)| *x == a && *y == b)?;
            let mut t = table.borrow_mut();
            let id = t.iter().position(|s| s == m).unwrap_or_else(|| {
                t.push(m.to_owned());
                t.len() - 1
            });
            Some((p, id))
        });
        let t = table.borrow();
        left.into_iter().map(|i| t[i].clone()).collect()
    }

    #[test]
    fn the_highest_priority_first_then_the_leftmost() {
        let rules = [("a", "b", "ab", 1), ("b", "c", "bc", 2)];
        assert_eq!(run("abc", &rules), ["a", "bc"]);
        let rules = [("a", "a", "aa", 1)];
        assert_eq!(run("aaa", &rules), ["aa", "a"]);
        assert_eq!(run("aaaa", &rules), ["aa", "aa"]);
        assert_eq!(run("", &rules), Vec::<String>::new());
        assert_eq!(run("x", &rules), ["x"]);
    }

    #[test]
    fn merged_symbols_merge_again_and_outdated_pairs_are_dropped() {
        // `b c` first; the `a b` found before it is outdated (`b` is `bc` now) and must not
        // merge `a` with `bc` into `ab`; `a bc` does.
        let rules = [
            ("a", "b", "ab", 2),
            ("b", "c", "bc", 3),
            ("a", "bc", "abc", 1),
        ];
        assert_eq!(run("abc", &rules), ["abc"]);
        let rules = [("a", "a", "aa", 2), ("aa", "aa", "aaaa", 1)];
        assert_eq!(run("aaaaa", &rules), ["aaaa", "a"]);
    }
}
