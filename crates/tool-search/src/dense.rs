//! The dense half of the search (#41): each tool's text for an encoder and its cache key, the
//! tools' vectors, reciprocal-rank fusion with BM25, and "no tool fits".
//!
//! Pure like the rest of the crate: the caller runs the encoder (an `llm_core::Embedder`) and
//! hands the vectors in.

use crate::{Hit, MAX_LIMIT, SearchIndex, ToolDoc};

/// The widest vector accepted (multilingual-e5-small: 384; hosted models: up to 3,072).
pub const MAX_DIMENSIONS: usize = 8_192;

/// How many characters of a tool's description the encoder reads (its first ~120 tokens: a
/// small encoder reads at most 512 tokens, and the first sentences say what a tool does).
const EMBED_DESCRIPTION_CHARS: usize = 600;
/// How many parameters, and how many characters of each one's description, the encoder reads.
const EMBED_PARAMETERS: usize = 12;
const EMBED_PARAMETER_CHARS: usize = 80;

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

/// How BM25's ranking and the cosine ranking are fused, and when no tool fits.
///
/// Reciprocal-rank fusion: a tool scores `bm25_weight / (k + its BM25 rank)` plus
/// `dense_weight / (k + its cosine rank)` (ranks from 1; a tool BM25 did not match adds nothing
/// from BM25, and only the `dense_depth` nearest tools add from the cosine side). Ranks, not
/// scores, are fused, because BM25 scores and cosines are on unrelated scales.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct HybridConfig {
    /// RRF's `k`: larger flattens the difference between ranks. Default 60 (the value of the
    /// RRF paper, not tuned here: tune it on the dev split with the encoder in use).
    pub k: f32,
    /// Weight of BM25's ranking. Default 1.
    pub bm25_weight: f32,
    /// Weight of the cosine ranking. Default 1.
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
            k: 60.0,
            bm25_weight: 1.0,
            dense_weight: 1.0,
            dense_depth: MAX_LIMIT,
            no_fit_below: None,
        }
    }
}

impl HybridConfig {
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

/// What an encoder reads for one tool: its name with the separators as spaces (`fs__read_file`
/// → `fs read file`), its group when the name does not already say it, the first
/// 600 characters of its description, and its parameters' names with the first 80 characters
/// of each description (at most 12). Whitespace is collapsed. The same tool always gives the
/// same text: hash it with [`text_hash`] for the vector cache.
pub fn embedding_text(doc: &ToolDoc) -> String {
    let name = humanize(&doc.name);
    let mut out = name.clone();
    let group = collapse(&doc.group, 200);
    if !group.is_empty() && !name.to_lowercase().contains(&group.to_lowercase()) {
        out = format!("{group}: {out}");
    }
    let description = collapse(&doc.description, EMBED_DESCRIPTION_CHARS);
    let description = description.trim_end_matches(['.', '。']);
    if !description.is_empty() {
        out.push_str(". ");
        out.push_str(description);
    }
    let parameters: Vec<String> = doc
        .parameters
        .iter()
        .take(EMBED_PARAMETERS)
        .filter_map(|(n, d)| {
            let n = collapse(n, 64);
            let d = collapse(d, EMBED_PARAMETER_CHARS);
            match (n.is_empty(), d.is_empty()) {
                (true, _) => None,
                (false, true) => Some(n),
                (false, false) => Some(format!("{n} ({d})")),
            }
        })
        .collect();
    if !parameters.is_empty() {
        out.push_str(". Parameters: ");
        out.push_str(&parameters.join(", "));
    }
    out
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
/// use tool_search::calibrate_no_fit;
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

/// `snake_case`, `kebab-case` and `a__b` separators as single spaces.
fn humanize(name: &str) -> String {
    let spaced: String = name
        .chars()
        .take(200)
        .map(|c| if c == '_' || c == '-' { ' ' } else { c })
        .collect();
    collapse(&spaced, 200)
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
        let mut fused = vec![0.0f32; self.names.len()];
        let mut touched = vec![false; self.names.len()];
        for (rank, (i, _)) in self.bm25_ranked(query).into_iter().enumerate() {
            fused[i] += config.bm25_weight / (config.k + rank as f32 + 1.0);
            touched[i] = true;
        }
        let mut near: Vec<(usize, f32)> = cosines.into_iter().enumerate().collect();
        near.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for (rank, (i, _)) in near.into_iter().take(config.dense_depth).enumerate() {
            fused[i] += config.dense_weight / (config.k + rank as f32 + 1.0);
            touched[i] = true;
        }
        let mut ranked: Vec<(usize, f32)> = fused
            .into_iter()
            .enumerate()
            .filter(|(i, s)| touched[*i] && *s > 0.0)
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
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
        let index = index()
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
        let bm25_only = index.with_hybrid(HybridConfig::default().with_weights(1.0, 0.0));
        let hits = bm25_only
            .search_hybrid("read a file", &[0.0, 0.0, 1.0], 5)
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].name, "fs__read_file");
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
    fn embedding_text_reads_name_description_and_parameters() {
        let doc = ToolDoc::new("fs__read_text_file", "Read   a file.\n\nAs text.")
            .with_group("fs", "Files")
            .with_parameters([("path", "Where the file is"), ("head", "")]);
        assert_eq!(
            embedding_text(&doc),
            "fs read text file. Read a file. As text. Parameters: path (Where the file is), head"
        );
        // The group is said when the name does not say it.
        let doc = ToolDoc::new("create_issue", "Open an issue").with_group("github", "");
        assert_eq!(embedding_text(&doc), "github: create issue. Open an issue");
        // Bounded whatever the description's length.
        let doc = ToolDoc::new("x", "word ".repeat(10_000))
            .with_parameters((0..100).map(|i| (format!("p{i}"), "d ".repeat(1000))));
        assert!(embedding_text(&doc).chars().count() < 3_000);
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
