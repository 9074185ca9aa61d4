//! The dense half of the search: each tool's text for an encoder and its cache key, the
//! tools' vectors, reciprocal-rank fusion with BM25, and "no tool fits".
//!
//! Pure like the rest of the crate: the caller runs the encoder (a `toolwright_core::Embedder`) and
//! hands the vectors in.

use crate::{Hit, MAX_LIMIT, SearchIndex, ToolDoc};

/// The widest vector accepted (multilingual-e5-small: 384; hosted models: up to 3,072).
pub const MAX_DIMENSIONS: usize = 8_192;

/// Why vectors were refused. Each says what to hand in instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VectorError {
    /// Not one vector per tool.
    #[error(
        "{got} vectors for {tools} tools: give one vector per tool, in the order the index was built from"
    )]
    Count {
        /// Vectors given.
        got: usize,
        /// Tools in the index.
        tools: usize,
    },
    /// A vector of another width than the first one (or than the tools' for a query).
    #[error(
        "a vector of {got} dimensions where {expected} were expected: every vector must come from the same encoder"
    )]
    Dimensions {
        /// The width expected.
        expected: usize,
        /// The width given.
        got: usize,
    },
    /// Empty vectors, or wider than [`MAX_DIMENSIONS`].
    #[error("vectors of {0} dimensions: give 1 to {MAX_DIMENSIONS}")]
    Width(usize),
    /// A NaN or infinite component.
    #[error("vector {0} has a NaN or infinite component: check the encoder's output")]
    NotFinite(usize),
    /// [`SearchIndex::search_hybrid`] or [`SearchIndex::fit`] on an index without vectors.
    #[error(
        "this index has no tool vectors: build it with SearchIndex::with_vectors, or use SearchIndex::search (BM25 alone)"
    )]
    NoVectors,
}

/// How [`SearchIndex::search_hybrid`] combines BM25 and the cosines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fusion {
    /// Reciprocal rank: a tool scores `bm25_weight / (k + its BM25 rank)` plus
    /// `dense_weight / (k + its cosine rank)`. Scale-free.
    Rank,
    /// Scores: `bm25_weight × its BM25 score / the query's best BM25 score` plus
    /// `dense_weight × its cosine min-max scaled over the catalog` (the nearest tool 1, the
    /// farthest 0). Keeps how far apart the tools are, which ranks throw away; `k` is unused.
    /// The default: on the dev split with multilingual-e5-small it ranked the right tool first
    /// as often as the best rank fusion and had the best MRR, over a plateau of weights.
    #[default]
    Score,
}

/// How BM25's ranking and the cosine ranking are fused, and when no tool fits.
///
/// By default score fusion ([`Fusion::Score`]) with the cosine weighted 3 to BM25's 1 (chosen
/// on the evaluation's dev split with multilingual-e5-small; weights 1.5 to 4 did as well: tune on
/// labelled requests of your own for another encoder). With [`Fusion::Rank`], reciprocal-rank
/// fusion: a tool scores `bm25_weight / (k + its BM25 rank)` plus
/// `dense_weight / (k + its cosine rank)` (ranks from 1; a tool BM25 did not match adds nothing
/// from BM25, and only the `dense_depth` nearest tools add from the cosine side). Ranks, not
/// scores, are fused, because BM25 scores and cosines are on unrelated scales.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct HybridConfig {
    /// Score or rank fusion. Default [`Fusion::Score`].
    pub fusion: Fusion,
    /// RRF's `k` ([`Fusion::Rank`] only): larger flattens the difference between ranks.
    /// Default 60 (the RRF paper's; on the dev split k from 5 to 60 scored alike).
    pub k: f32,
    /// Weight of BM25's ranking. Default 1.
    pub bm25_weight: f32,
    /// Weight of the cosine side. Default 3.
    pub dense_weight: f32,
    /// How many of the nearest tools the cosine side ranks. Default [`MAX_LIMIT`].
    pub dense_depth: usize,
    /// Return nothing when [`SearchIndex::fit`] is below this: no tool stands out for the
    /// request. `None` (the default): always return the best tools. Derive it for your
    /// encoder with [`calibrate_no_fit`] on labelled requests; it does not carry over from one
    /// encoder to another.
    pub no_fit_below: Option<f32>,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            fusion: Fusion::Score,
            k: 60.0,
            bm25_weight: 1.0,
            dense_weight: 3.0,
            dense_depth: MAX_LIMIT,
            no_fit_below: None,
        }
    }
}

impl HybridConfig {
    /// Sets [`HybridConfig::fusion`].
    pub fn with_fusion(mut self, fusion: Fusion) -> Self {
        self.fusion = fusion;
        self
    }
    /// Sets `k` (at least 1).
    pub fn with_k(mut self, k: f32) -> Self {
        self.k = if k.is_finite() { k.max(1.0) } else { 60.0 };
        self
    }
    /// Sets the two rankings' weights (each at least 0).
    pub fn with_weights(mut self, bm25: f32, dense: f32) -> Self {
        let clean = |w: f32| if w.is_finite() { w.max(0.0) } else { 1.0 };
        self.bm25_weight = clean(bm25);
        self.dense_weight = clean(dense);
        self
    }
    /// Sets how many nearest tools the cosine side ranks (1..=[`MAX_LIMIT`]).
    pub fn with_dense_depth(mut self, depth: usize) -> Self {
        self.dense_depth = depth.clamp(1, MAX_LIMIT);
        self
    }
    /// Sets [`HybridConfig::no_fit_below`].
    pub fn with_no_fit_below(mut self, threshold: Option<f32>) -> Self {
        self.no_fit_below = threshold.filter(|t| t.is_finite());
        self
    }
}

/// What an encoder reads for one tool: the words of its own name (the part after the last
/// `__`, `snake_case`, `kebab-case` and `camelCase` split, lower-cased) and the first sentence
/// of its description (at most [`EMBED_SENTENCE_CHARS`] characters):
/// `fs__read_text_file` "Read a file. As text." → `read text file: Read a file`.
///
/// Short on purpose: mean pooling over a whole description blurs the one sentence that
/// says what a tool does; on the dev split the short text raised the encoder's own recall@1
/// from 0.30 to 0.53, and it is a fifth of the tokens to encode. The same tool always gives the
/// same text: hash it with [`text_hash`] for the vector cache.
pub fn embedding_text(doc: &ToolDoc) -> String {
    let own = doc.name.rsplit("__").next().unwrap_or(&doc.name);
    let words = name_words(own);
    let first = first_sentence(&doc.description, EMBED_SENTENCE_CHARS);
    match (words.is_empty(), first.is_empty()) {
        (_, true) => words,
        (true, false) => first,
        (false, false) => format!("{words}: {first}"),
    }
}

/// The most characters of a tool's name, and of its description's first sentence, that
/// [`embedding_text`] keeps.
pub const EMBED_SENTENCE_CHARS: usize = 200;

/// The words of a code name: `_`, `-`, `.` and whitespace as spaces, a space where a lower-case
/// letter or a digit meets an upper-case one (`getFileInfo` → `get file info`), lower-cased;
/// at most [`EMBED_SENTENCE_CHARS`] characters.
fn name_words(name: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if out.chars().count() >= EMBED_SENTENCE_CHARS {
            break;
        }
        if c == '_' || c == '-' || c == '.' || c.is_whitespace() {
            if !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            out.push(' ');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_lowercase());
    }
    collapse(&out, EMBED_SENTENCE_CHARS)
}

/// The first sentence of `s` — up to a `.`, `!` or `?` followed by whitespace or the end, a
/// `。`, `！` or `？`, or a line break — whitespace collapsed, at most `max` characters.
pub(crate) fn first_sentence(s: &str, max: usize) -> String {
    let s = s.trim();
    let mut end = s.len();
    for (i, c) in s.char_indices() {
        let stop = match c {
            '。' | '！' | '？' | '\n' | '\r' => true,
            '.' | '!' | '?' => s[i + c.len_utf8()..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace),
            _ => false,
        };
        if stop {
            end = i;
            break;
        }
    }
    collapse(&s[..end], max)
}

/// A stable 64-bit hash of `text` (FNV-1a over its UTF-8 bytes): the same on every platform and
/// in every version, so a vector cached under it stays valid as long as the text is the same.
pub fn text_hash(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The threshold for [`HybridConfig::no_fit_below`] from the [`SearchIndex::fit`] of labelled
/// requests: `answerable` (a tool serves them) and `unanswerable` (none does). It is the
/// highest threshold that turns away at most `max_answerable_loss` (a fraction, e.g. `0.02`) of
/// the answerable requests, placed halfway to the next lower fit so that it does not sit on a
/// measured value. `None` when `answerable` holds no finite fit.
///
/// ```
/// use toolwright_tool_search::calibrate_no_fit;
/// let answerable = [3.1, 4.0, 5.2, 3.6];
/// let unanswerable = [1.9, 2.4, 3.3];
/// let t = calibrate_no_fit(&answerable, &unanswerable, 0.0).unwrap();
/// assert!(t > 2.4 && t < 3.1); // keeps every answerable one, turns away two of three
/// ```
pub fn calibrate_no_fit(
    answerable: &[f32],
    unanswerable: &[f32],
    max_answerable_loss: f32,
) -> Option<f32> {
    let mut yes: Vec<f32> = answerable
        .iter()
        .copied()
        .filter(|f| f.is_finite())
        .collect();
    if yes.is_empty() {
        return None;
    }
    yes.sort_by(f32::total_cmp);
    let loss = if max_answerable_loss.is_finite() {
        max_answerable_loss.clamp(0.0, 1.0)
    } else {
        0.0
    };
    // Requests strictly below the threshold are turned away: at most `allowed` answerable ones.
    let allowed = ((loss * yes.len() as f32).floor() as usize).min(yes.len() - 1);
    let keep = yes[allowed];
    let below = yes
        .iter()
        .chain(unanswerable.iter())
        .copied()
        .filter(|f| f.is_finite() && *f < keep)
        .max_by(f32::total_cmp);
    Some(match below {
        Some(b) => b + (keep - b) / 2.0,
        None => keep,
    })
}

/// The first `max` characters of `s`, whitespace runs as one space, trimmed.
fn collapse(s: &str, max: usize) -> String {
    let mut out = String::new();
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() >= max {
            break;
        }
    }
    out.chars().take(max).collect()
}

/// The tools' vectors, L2-normalised, row-major.
#[derive(Debug, Clone)]
pub(crate) struct Vectors {
    dims: usize,
    data: Vec<f32>,
}

impl Vectors {
    pub(crate) fn dimensions(&self) -> usize {
        self.dims
    }

    fn new(vectors: Vec<Vec<f32>>, tools: usize) -> Result<Self, VectorError> {
        if vectors.len() != tools {
            return Err(VectorError::Count {
                got: vectors.len(),
                tools,
            });
        }
        // No tool: no width to hold queries to; every query is near nothing.
        let Some(dims) = vectors.first().map(Vec::len) else {
            return Ok(Self {
                dims: 0,
                data: Vec::new(),
            });
        };
        if dims == 0 || dims > MAX_DIMENSIONS {
            return Err(VectorError::Width(dims));
        }
        let mut data = Vec::with_capacity(dims * tools);
        for (i, v) in vectors.into_iter().enumerate() {
            data.extend(normalised(&v, dims, i)?);
        }
        Ok(Self { dims, data })
    }

    /// The cosine of each tool with the (normalised) query.
    fn cosines(&self, query: &[f32]) -> Vec<f32> {
        self.data
            .chunks_exact(self.dims)
            .map(|row| row.iter().zip(query).map(|(a, b)| a * b).sum())
            .collect()
    }
}

/// BM25's ranking (tool, score; best first) and every tool's cosine fused as `config` says:
/// (tool, fused score), best first, ties in tool order; tools neither side credits are left out.
fn fuse(bm25: &[(usize, f32)], cosines: &[f32], config: &HybridConfig) -> Vec<(usize, f32)> {
    let tools = cosines.len();
    let mut fused = vec![0.0f32; tools];
    let mut near: Vec<(usize, f32)> = cosines.iter().copied().enumerate().collect();
    near.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    near.truncate(config.dense_depth);
    match config.fusion {
        Fusion::Rank => {
            for (rank, &(i, _)) in bm25.iter().enumerate() {
                if let Some(f) = fused.get_mut(i) {
                    *f += config.bm25_weight / (config.k + rank as f32 + 1.0);
                }
            }
            for (rank, &(i, _)) in near.iter().enumerate() {
                fused[i] += config.dense_weight / (config.k + rank as f32 + 1.0);
            }
        }
        Fusion::Score => {
            let best = bm25.iter().map(|b| b.1).fold(0.0f32, f32::max);
            if best > 0.0 {
                for &(i, s) in bm25 {
                    if let Some(f) = fused.get_mut(i) {
                        *f += config.bm25_weight * (s.max(0.0) / best);
                    }
                }
            }
            let hi = cosines.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let lo = cosines.iter().copied().fold(f32::INFINITY, f32::min);
            if hi - lo > 1e-6 {
                for &(i, c) in &near {
                    fused[i] += config.dense_weight * (c - lo) / (hi - lo);
                }
            }
        }
    }
    let mut ranked: Vec<(usize, f32)> = fused
        .into_iter()
        .enumerate()
        .filter(|(_, s)| *s > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
}

/// `v` scaled to length 1 (a zero vector stays zero: it is near nothing).
fn normalised(v: &[f32], dims: usize, which: usize) -> Result<Vec<f32>, VectorError> {
    if v.len() != dims {
        return Err(VectorError::Dimensions {
            expected: dims,
            got: v.len(),
        });
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(VectorError::NotFinite(which));
    }
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return Ok(vec![0.0; dims]);
    }
    Ok(v.iter().map(|x| (f64::from(*x) / norm) as f32).collect())
}

/// How far the best of `cosines` stands out: (best − mean) / standard deviation; 0 when all are
/// equal or there are fewer than two.
fn stand_out(cosines: &[f32]) -> f32 {
    if cosines.len() < 2 {
        return 0.0;
    }
    let n = cosines.len() as f64;
    let mean = cosines.iter().map(|c| f64::from(*c)).sum::<f64>() / n;
    let var = cosines
        .iter()
        .map(|c| (f64::from(*c) - mean).powi(2))
        .sum::<f64>()
        / n;
    let best = cosines.iter().copied().fold(f32::MIN, f32::max);
    let sd = var.sqrt();
    // Cosines are in [-1, 1]: a spread under 1e-5 is rounding, not a difference.
    if sd < 1e-5 {
        return 0.0;
    }
    ((f64::from(best) - mean) / sd) as f32
}

impl SearchIndex {
    /// This index with each tool's vector (one per tool, in the order the index was built
    /// from, all of one width; normalised here), for [`SearchIndex::search_hybrid`].
    pub fn with_vectors(mut self, vectors: Vec<Vec<f32>>) -> Result<Self, VectorError> {
        self.vectors = Some(Vectors::new(vectors, self.names.len())?);
        Ok(self)
    }

    /// This index with `config` for [`SearchIndex::search_hybrid`].
    pub fn with_hybrid(mut self, config: HybridConfig) -> Self {
        self.hybrid = config;
        self
    }

    /// The fusion settings in force.
    pub fn hybrid(&self) -> HybridConfig {
        self.hybrid
    }

    /// Whether the index holds tool vectors.
    pub fn has_vectors(&self) -> bool {
        self.vectors.is_some()
    }

    /// How far the tool nearest to `query_vector` stands out from the catalog: its cosine's
    /// z-score among all tools' cosines. High when one tool is clearly about the request; low
    /// when every tool is about as near (a request nothing serves). What
    /// [`HybridConfig::no_fit_below`] is compared with; an encoder's own scale, so calibrate
    /// per encoder ([`calibrate_no_fit`]).
    pub fn fit(&self, query_vector: &[f32]) -> Result<f32, VectorError> {
        Ok(stand_out(&self.cosines(query_vector)?))
    }

    fn cosines(&self, query_vector: &[f32]) -> Result<Vec<f32>, VectorError> {
        let vectors = self.vectors.as_ref().ok_or(VectorError::NoVectors)?;
        if vectors.dims == 0 {
            return Ok(Vec::new());
        }
        let q = normalised(query_vector, vectors.dims, 0)?;
        Ok(vectors.cosines(&q))
    }

    /// The best `limit` tools (at most [`MAX_LIMIT`]) for `query`, whose vector from the same
    /// encoder as the tools' is `query_vector`: BM25's ranking and the cosine ranking fused by
    /// reciprocal rank ([`HybridConfig`]), best first, ties in index order. Empty when
    /// [`HybridConfig::no_fit_below`] is set and [`SearchIndex::fit`] is under it.
    pub fn search_hybrid(
        &self,
        query: &str,
        query_vector: &[f32],
        limit: usize,
    ) -> Result<Vec<Hit>, VectorError> {
        let cosines = self.cosines(query_vector)?;
        let limit = limit.min(MAX_LIMIT);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let config = self.hybrid;
        if let Some(t) = config.no_fit_below
            && stand_out(&cosines) < t
        {
            return Ok(Vec::new());
        }
        let ranked = fuse(&self.bm25_ranked(query), &cosines, &config);
        Ok(self.hits(ranked.into_iter().take(limit)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> SearchIndex {
        SearchIndex::new(vec![
            ToolDoc::new("fs__read_file", "Read the complete contents of a file"),
            ToolDoc::new("maps__elevation", "Get elevation data for locations"),
            ToolDoc::new("git__stash", "Save local changes away"),
        ])
    }

    #[test]
    fn vectors_are_checked() {
        assert_eq!(
            index().with_vectors(vec![vec![1.0]; 2]).err(),
            Some(VectorError::Count { got: 2, tools: 3 })
        );
        assert_eq!(
            index()
                .with_vectors(vec![vec![1.0, 0.0], vec![1.0], vec![0.0, 1.0]])
                .err(),
            Some(VectorError::Dimensions {
                expected: 2,
                got: 1
            })
        );
        assert_eq!(
            index().with_vectors(vec![vec![]; 3]).err(),
            Some(VectorError::Width(0))
        );
        assert_eq!(
            index()
                .with_vectors(vec![vec![1.0], vec![f32::NAN], vec![1.0]])
                .err(),
            Some(VectorError::NotFinite(1))
        );
        assert_eq!(
            index().search_hybrid("file", &[1.0], 3).err(),
            Some(VectorError::NoVectors)
        );
        let with = index()
            .with_vectors(vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.0, 0.0]])
            .unwrap();
        assert_eq!(
            with.search_hybrid("file", &[1.0, 0.0, 0.0], 3).err(),
            Some(VectorError::Dimensions {
                expected: 2,
                got: 3
            })
        );
    }

    #[test]
    fn dense_finds_what_bm25_cannot_and_bm25_still_counts() {
        let rank = HybridConfig::default()
            .with_fusion(Fusion::Rank)
            .with_weights(1.0, 1.0);
        let index = index()
            .with_hybrid(rank)
            .with_vectors(vec![
                vec![1.0, 0.0, 0.0],
                vec![0.0, 1.0, 0.0],
                vec![0.0, 0.0, 1.0],
            ])
            .unwrap();
        // No shared word: BM25 finds nothing, the vector finds the elevation tool.
        assert!(index.search("how high is Everest", 5).is_empty());
        let hits = index
            .search_hybrid("how high is Everest", &[0.1, 0.9, 0.2], 5)
            .unwrap();
        assert_eq!(hits[0].name, "maps__elevation");
        assert_eq!(hits.len(), 3);
        // Agreeing rankings put the tool first by a clear margin.
        let hits = index
            .search_hybrid("read a file", &[0.9, 0.1, 0.1], 5)
            .unwrap();
        assert_eq!(hits[0].name, "fs__read_file");
        assert!(hits[0].score > 2.0 * hits[1].score);
        // A BM25-only weighting gives BM25's order.
        let bm25_only = index.with_hybrid(rank.with_weights(1.0, 0.0));
        let hits = bm25_only
            .search_hybrid("read a file", &[0.0, 0.0, 1.0], 5)
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].name, "fs__read_file");
    }

    #[test]
    fn score_fusion_keeps_the_gaps_that_rank_fusion_drops() {
        // BM25: tool 0 far ahead of tool 1; cosines: tool 1 just nearer than tool 0.
        let bm25 = [(0, 10.0), (1, 1.0)];
        let cosines = [0.89, 0.9, 0.5];
        let score = HybridConfig::default()
            .with_fusion(Fusion::Score)
            .with_weights(1.0, 1.0);
        let fused = fuse(&bm25, &cosines, &score);
        // Tool 0: 1 + 0.39/0.4; tool 1: 0.1 + 1; tool 2 (farthest, no word): 0, left out.
        assert_eq!(fused.iter().map(|f| f.0).collect::<Vec<_>>(), [0, 1]);
        assert!((fused[0].1 - 1.975).abs() < 1e-5, "{fused:?}");
        assert!((fused[1].1 - 1.1).abs() < 1e-5, "{fused:?}");
        // Ranks alone: 1st + 2nd against 2nd + 1st, a tie (index order); tool 2 still counts.
        let fused = fuse(&bm25, &cosines, &score.with_fusion(Fusion::Rank));
        assert_eq!(fused.iter().map(|f| f.0).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(fused[0].1, fused[1].1);
        // All cosines equal: the cosine side says nothing; BM25's order stands.
        let fused = fuse(&bm25, &[0.5; 3], &score);
        assert_eq!(fused.iter().map(|f| f.0).collect::<Vec<_>>(), [0, 1]);
        // A BM25 index past the cosines (a caller's mistake) is ignored, not a panic.
        assert_eq!(fuse(&[(7, 1.0)], &[], &score), []);
        assert_eq!(HybridConfig::default().fusion, Fusion::Score);
    }

    #[test]
    fn no_fit_turns_away_a_request_that_no_tool_stands_out_for() {
        let tools: Vec<ToolDoc> = (0..10)
            .map(|i| ToolDoc::new(format!("t{i}"), format!("tool number {i}")))
            .collect();
        let vectors: Vec<Vec<f32>> = (0..10)
            .map(|i| (0..10).map(|j| if i == j { 1.0 } else { 0.1 }).collect())
            .collect();
        let index = SearchIndex::new(tools).with_vectors(vectors).unwrap();
        let on_topic: Vec<f32> = (0..10).map(|j| if j == 3 { 1.0 } else { 0.1 }).collect();
        let vague = vec![0.3; 10];
        let high = index.fit(&on_topic).unwrap();
        let low = index.fit(&vague).unwrap();
        assert!(high > 2.0, "{high}");
        assert!(low < 0.5, "{low}");
        let t = calibrate_no_fit(&[high], &[low], 0.0).unwrap();
        let gated = index.with_hybrid(HybridConfig::default().with_no_fit_below(Some(t)));
        assert_eq!(
            gated.search_hybrid("x", &on_topic, 3).unwrap()[0].name,
            "t3"
        );
        assert!(gated.search_hybrid("x", &vague, 3).unwrap().is_empty());
    }

    #[test]
    fn embedding_text_is_the_names_words_and_the_first_sentence() {
        let doc = ToolDoc::new("fs__read_text_file", "Read   a file.\n\nAs text.")
            .with_group("fs", "Files")
            .with_parameters([("path", "Where the file is"), ("head", "")]);
        assert_eq!(embedding_text(&doc), "read text file: Read a file");
        let doc = ToolDoc::new("everything__getTinyImage", "Returns the MCP_TINY_IMAGE");
        assert_eq!(
            embedding_text(&doc),
            "get tiny image: Returns the MCP_TINY_IMAGE"
        );
        // A dot inside a word ("v1.2") does not end the sentence; a line break does.
        let doc = ToolDoc::new("x-y.z", "Use v1.2 of the API!?\nSecond line");
        assert_eq!(embedding_text(&doc), "x y z: Use v1.2 of the API!");
        // Chinese full stops end it too; a name or a description alone is the text.
        let doc = ToolDoc::new("截图", "截取页面。然后保存");
        assert_eq!(embedding_text(&doc), "截图: 截取页面");
        assert_eq!(embedding_text(&ToolDoc::new("a_b", "")), "a b");
        assert_eq!(embedding_text(&ToolDoc::new("__", "Hi.")), "Hi");
        // Bounded whatever the lengths.
        let doc = ToolDoc::new("x".repeat(10_000), "word ".repeat(10_000));
        assert!(embedding_text(&doc).chars().count() <= 2 * EMBED_SENTENCE_CHARS + 2);
    }

    #[test]
    fn text_hash_is_fnv1a_and_stable() {
        // The FNV-1a 64 test vectors: the hash must never change (it keys cached vectors).
        assert_eq!(text_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(text_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(text_hash("foobar"), 0x8594_4171_f739_67e8);
        assert_ne!(text_hash("read file"), text_hash("read files"));
    }

    #[test]
    fn calibration_edges() {
        assert_eq!(calibrate_no_fit(&[], &[1.0], 0.0), None);
        assert_eq!(calibrate_no_fit(&[f32::NAN], &[], 0.0), None);
        // Nothing below: the lowest answerable one.
        assert_eq!(calibrate_no_fit(&[2.0, 3.0], &[], 0.0), Some(2.0));
        // Half may go: the threshold sits between the 1st and 2nd answerable.
        assert_eq!(calibrate_no_fit(&[1.0, 3.0, 4.0, 5.0], &[], 0.5), Some(3.5));
    }
}
