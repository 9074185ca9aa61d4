//! The dense half of the search: the fusion's settings, the tools' vectors (raw and centred
//! per language), and the hybrid search itself. What an encoder reads is in `text`, how the
//! two rankings are fused in `fusion`, "no tool fits" in `fit`.
//!
//! Pure like the rest of the crate: the caller runs the encoder (a `toolwright_core::Embedder`) and
//! hands the vectors in.

use crate::fusion::{fuse, keep_bm25_first};
use crate::script::Script;
use crate::unserved::{E5_SMALL_ID, UnservedIntents};
// A glob, so that rustdoc (and the recorded API in api/) names `HybridConfig::fit_model`'s
// type `FitModel`, as before these items moved to `fit`.
use crate::fit::*;
use crate::{Hit, MAX_LIMIT, SearchIndex};

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
    /// The default: on the dev splits with multilingual-e5-small it ranked the right tool in the
    /// first five as often as the best rank fusion or more, over a plateau of weights.
    #[default]
    Score,
}

/// How BM25's ranking and the cosine ranking are fused, and when no tool fits.
///
/// By default score fusion ([`Fusion::Score`]) with the cosine weighted 2 to BM25's 1 and
/// language-neutral cosines (chosen on the mixed-language dev split with multilingual-e5-small:
/// weights 1 to 2 did as well, 3 and up lost English requests to BM25; tune on labelled requests
/// of your own for another encoder). With [`Fusion::Rank`], reciprocal-rank
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
    /// Weight of the cosine side. Default 2. Scaled down per request when the cosine side is
    /// unsure of its nearest tool (its cosine hardly stands out from the catalog's, for the
    /// catalog's size), to a quarter at least; not when BM25 matched nothing. The fusion's
    /// fallback, with [`BM25_FIRST_WITHIN`](crate::BM25_FIRST_WITHIN).
    pub dense_weight: f32,
    /// How many of the nearest tools the cosine side ranks. Default [`MAX_LIMIT`].
    pub dense_depth: usize,
    /// Language-neutral cosines for CJK-script requests (default on): each tool's vector is
    /// centred on the mean vector of the tools whose [`embedding_text`](crate::embedding_text) is in the same script
    /// ([`Script`]), the request's on the mean of the tools in its own script, before the
    /// cosine (with a bank of the encoder's own, [`HybridConfig::unserved`], the request's
    /// mean is halfway between its script's tools' and the bank's requests' in that script,
    /// encoded as requests: a request's language offset is not quite a description's; on the
    /// mixed-language dev split this lifted Chinese requests' recall@1 from 0.57 to 0.63 and
    /// recall@5 from 0.84 to 0.85; on the test split, run once, 0.53 to 0.51 and 0.76 to 0.78). A small multilingual encoder puts a Chinese request nearer to any Chinese
    /// description than to the English description of the tool it means; the mean of a
    /// language's vectors is what its texts share whatever they say, so taking it out leaves
    /// the meaning. A script with fewer than [`MIN_SCRIPT_TOOLS`] tools (and a one-language
    /// catalog) is centred on the whole catalog's mean. Latin-script requests keep raw cosines:
    /// on the mixed-language dev split they ranked English requests better at recall@1 (0.57
    /// against 0.50 centred), and centred they can land on a small group of Chinese-described
    /// tools whose language offset a few tools cannot estimate.
    pub language_neutral: bool,
    /// How [`SearchIndex::fit`] weighs the evidence of [`Fit`](crate::Fit). Default
    /// [`FitModel::linear`](crate::FitModel::linear)`(0.3)`: the nearest raw cosine plus 0.3 × the lexical share.
    pub fit_model: FitModel,
    /// The bank of requests few catalogs serve that [`Fit::unserved`](crate::Fit::unserved) compares a request with
    /// (`None`, the default: no such evidence). Only a bank from the index's own encoder means
    /// anything: [`HybridConfig::for_encoder`] sets it for the encoder it was made with.
    pub unserved: Option<&'static UnservedIntents>,
    /// Return nothing when [`SearchIndex::fit`] is below this: no tool stands out for the
    /// request. `None` (the default): always return the best tools. Derive it for your
    /// encoder with [`calibrate_no_fit`](crate::calibrate_no_fit) on labelled requests; it does not carry over from one
    /// encoder to another.
    pub no_fit_below: Option<f32>,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            fusion: Fusion::Score,
            k: 60.0,
            bm25_weight: 1.0,
            dense_weight: 2.0,
            dense_depth: MAX_LIMIT,
            language_neutral: true,
            fit_model: FitModel::linear(DEFAULT_LEXICAL_FIT_WEIGHT),
            unserved: None,
            no_fit_below: None,
        }
    }
}

impl HybridConfig {
    /// The default fusion for a catalog of `tools` tools searched with the encoder whose id
    /// (`Embedder::id` in toolwright-core) is `encoder_id`, with "no tool fits" on when it was
    /// calibrated for that encoder:
    ///
    /// - the embedded multilingual-e5-small ([`E5_SMALL_ID`]): the judge
    ///   [`E5_SMALL_FIT_MODEL`](crate::E5_SMALL_FIT_MODEL) over both channels and the bank of requests few catalogs serve
    ///   ([`UnservedIntents::e5_small`]), threshold [`E5_SMALL_FIT_BELOW`](crate::E5_SMALL_FIT_BELOW);
    /// - other weights of multilingual-e5-small (ids starting `multilingual-e5-small`; the
    ///   bank's vectors would not be comparable): the fallback, the nearest cosine and the
    ///   lexical share by catalog size ([`E5_SMALL_NO_FIT`](crate::E5_SMALL_NO_FIT)), which turns away few requests no
    ///   tool serves;
    /// - any other encoder: no threshold (every search returns its best tools): calibrate one
    ///   with [`calibrate_no_fit`](crate::calibrate_no_fit) and set it with [`HybridConfig::with_no_fit_below`].
    ///
    /// The MCP bridge's search and code mode's `search_functions` both take this, so they share
    /// one judge.
    ///
    /// ```
    /// use toolwright_tool_search::{E5_SMALL_FIT_BELOW, E5_SMALL_ID, E5_SMALL_NO_FIT, HybridConfig};
    /// let e5 = HybridConfig::for_encoder(E5_SMALL_ID, 634);
    /// assert_eq!(e5.no_fit_below, Some(E5_SMALL_FIT_BELOW));
    /// assert!(e5.unserved.is_some());
    /// let other = HybridConfig::for_encoder("multilingual-e5-small-q4@1a2b3c4d", 634);
    /// assert_eq!(other.no_fit_below, Some(E5_SMALL_NO_FIT[5].1));
    /// assert!(other.unserved.is_none());
    /// assert_eq!(HybridConfig::for_encoder("text-embedding-3-small", 634).no_fit_below, None);
    /// ```
    pub fn for_encoder(encoder_id: &str, tools: usize) -> Self {
        if encoder_id == E5_SMALL_ID {
            return Self::default()
                .with_fit_model(E5_SMALL_FIT_MODEL)
                .with_unserved(Some(UnservedIntents::e5_small()))
                .with_no_fit_below(Some(E5_SMALL_FIT_BELOW));
        }
        let threshold = if encoder_id.starts_with("multilingual-e5-small") {
            no_fit_for_size(&E5_SMALL_NO_FIT, tools)
        } else {
            None
        };
        Self::default().with_no_fit_below(threshold)
    }
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
    /// Sets [`HybridConfig::language_neutral`].
    pub fn with_language_neutral(mut self, on: bool) -> Self {
        self.language_neutral = on;
        self
    }
    /// Sets [`HybridConfig::fit_model`].
    pub fn with_fit_model(mut self, model: FitModel) -> Self {
        self.fit_model = model;
        self
    }
    /// Sets [`HybridConfig::unserved`].
    pub fn with_unserved(mut self, bank: Option<&'static UnservedIntents>) -> Self {
        self.unserved = bank;
        self
    }
    /// Sets [`HybridConfig::no_fit_below`].
    pub fn with_no_fit_below(mut self, threshold: Option<f32>) -> Self {
        self.no_fit_below = threshold.filter(|t| t.is_finite());
        self
    }
}

/// The fewest tools of one script whose own mean a script's vectors are centred on
/// ([`HybridConfig::language_neutral`]); fewer, and they are centred on the whole catalog's.
pub const MIN_SCRIPT_TOOLS: usize = 8;

/// The tools' vectors, L2-normalised, row-major; and the same centred on their script's mean
/// and normalised again ([`HybridConfig::language_neutral`]).
#[derive(Debug, Clone)]
pub(crate) struct Vectors {
    pub(crate) dims: usize,
    data: Vec<f32>,
    centred: Vec<f32>,
    /// The mean each script's vectors (tools' and queries') are centred on, by [`Script::slot`].
    means: [Vec<f32>; 2],
    /// Learned requests' vectors ([`SearchIndex::with_learned`]): (tool, normalised, centred).
    learned: Vec<(usize, Vec<f32>, Vec<f32>)>,
}

impl Vectors {
    pub(crate) fn dimensions(&self) -> usize {
        self.dims
    }

    fn new(vectors: Vec<Vec<f32>>, scripts: &[Script]) -> Result<Self, VectorError> {
        let tools = scripts.len();
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
                centred: Vec::new(),
                means: [Vec::new(), Vec::new()],
                learned: Vec::new(),
            });
        };
        if dims == 0 || dims > MAX_DIMENSIONS {
            return Err(VectorError::Width(dims));
        }
        let mut data = Vec::with_capacity(dims * tools);
        for (i, v) in vectors.into_iter().enumerate() {
            data.extend(normalised(&v, dims, i)?);
        }
        let mean_of = |which: &dyn Fn(usize) -> bool| -> (usize, Vec<f32>) {
            let mut sum = vec![0.0f64; dims];
            let mut n = 0usize;
            for (i, row) in data.chunks_exact(dims).enumerate() {
                if which(i) {
                    n += 1;
                    sum.iter_mut()
                        .zip(row)
                        .for_each(|(s, x)| *s += f64::from(*x));
                }
            }
            let n_f = n.max(1) as f64;
            (n, sum.into_iter().map(|s| (s / n_f) as f32).collect())
        };
        let (_, all) = mean_of(&|_| true);
        let means = [Script::Latin, Script::Cjk].map(|script| {
            let (n, mean) = mean_of(&|i| scripts[i] == script);
            if n >= MIN_SCRIPT_TOOLS {
                mean
            } else {
                all.clone()
            }
        });
        let mut centred = Vec::with_capacity(data.len());
        for (row, script) in data.chunks_exact(dims).zip(scripts) {
            centred.extend(centre(row, &means[script.slot()]));
        }
        Ok(Self {
            dims,
            data,
            centred,
            means,
            learned: Vec::new(),
        })
    }

    /// Sets the learned requests' vectors: (tool, the request's script, its vector).
    pub(crate) fn set_learned(
        &mut self,
        learned: Vec<(usize, Script, Vec<f32>)>,
    ) -> Result<(), VectorError> {
        let mut out = Vec::with_capacity(learned.len());
        for (which, (tool, script, v)) in learned.into_iter().enumerate() {
            if self.dims == 0 {
                break;
            }
            let raw = normalised(&v, self.dims, which)?;
            let centred = centre(&raw, &self.means[script.slot()]);
            out.push((tool, raw, centred));
        }
        self.learned = out;
        Ok(())
    }

    /// The mean a request in `script` is centred on: its script's tools' mean, or, given the
    /// encoder's mean of requests in that script (`request_mean`), halfway between the two.
    fn query_mean(&self, script: Script, request_mean: Option<&[f32]>) -> Vec<f32> {
        let tools = &self.means[script.slot()];
        match request_mean {
            Some(r) if r.len() == tools.len() => {
                tools.iter().zip(r).map(|(t, r)| 0.5 * (t + r)).collect()
            }
            _ => tools.clone(),
        }
    }

    /// The cosine of each tool with the (normalised) query: language-neutral ones (the query
    /// centred on [`Vectors::query_mean`]) when `neutral`.
    pub(crate) fn cosines(
        &self,
        query: &[f32],
        script: Script,
        neutral: Option<Option<&[f32]>>,
    ) -> Vec<f32> {
        let (rows, query) = match neutral {
            Some(request_mean) => (
                &self.centred,
                centre(query, &self.query_mean(script, request_mean)),
            ),
            None => (&self.data, query.to_vec()),
        };
        let dot = |row: &[f32]| row.iter().zip(&query).map(|(a, b)| a * b).sum::<f32>();
        rows.chunks_exact(self.dims).map(dot).collect()
    }

    /// [`Vectors::cosines`] with each tool's learned requests counted: the larger cosine.
    fn cosines_learned(
        &self,
        query: &[f32],
        script: Script,
        neutral: Option<Option<&[f32]>>,
    ) -> Vec<f32> {
        let mut out = self.cosines(query, script, neutral);
        if self.learned.is_empty() {
            return out;
        }
        let q = match neutral {
            Some(request_mean) => centre(query, &self.query_mean(script, request_mean)),
            None => query.to_vec(),
        };
        for (tool, raw, centred) in &self.learned {
            let row = if neutral.is_some() { centred } else { raw };
            let c: f32 = row.iter().zip(&q).map(|(a, b)| a * b).sum();
            if let Some(o) = out.get_mut(*tool) {
                *o = o.max(c);
            }
        }
        out
    }
}

/// `v − mean`, scaled to length 1 (zero when `v` is the mean).
fn centre(v: &[f32], mean: &[f32]) -> Vec<f32> {
    let d: Vec<f32> = v.iter().zip(mean).map(|(a, m)| a - m).collect();
    let norm = d.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    if norm < 1e-9 {
        return vec![0.0; d.len()];
    }
    d.iter().map(|x| (f64::from(*x) / norm) as f32).collect()
}

/// `v` scaled to length 1 (a zero vector stays zero: it is near nothing).
pub(crate) fn normalised(v: &[f32], dims: usize, which: usize) -> Result<Vec<f32>, VectorError> {
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

impl SearchIndex {
    /// This index with each tool's vector (one per tool, in the order the index was built
    /// from, all of one width; normalised here), for [`SearchIndex::search_hybrid`].
    pub fn with_vectors(mut self, vectors: Vec<Vec<f32>>) -> Result<Self, VectorError> {
        self.vectors = Some(Vectors::new(vectors, &self.scripts)?);
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

    /// Every tool's cosine with `query_vector` (language-neutral ones when
    /// [`HybridConfig::language_neutral`]), in index order.
    pub fn cosines(&self, query: &str, query_vector: &[f32]) -> Result<Vec<f32>, VectorError> {
        let vectors = self.vectors.as_ref().ok_or(VectorError::NoVectors)?;
        if vectors.dims == 0 {
            return Ok(Vec::new());
        }
        let q = normalised(query_vector, vectors.dims, 0)?;
        let script = Script::of(
            &query
                .chars()
                .take(crate::MAX_QUERY_CHARS)
                .collect::<String>(),
        );
        let neutral = (self.hybrid.language_neutral && script == Script::Cjk).then(|| {
            self.hybrid
                .unserved
                .and_then(|bank| bank.request_mean(script, vectors.dims))
        });
        Ok(vectors.cosines_learned(&q, script, neutral))
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
        let cosines = self.cosines(query, query_vector)?;
        let limit = limit.min(MAX_LIMIT);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let config = self.hybrid;
        let bm25 = self.bm25_ranked(query);
        if let Some(t) = config.no_fit_below {
            let fit = self.fit_from(query, query_vector, &cosines, &bm25)?;
            if fit.score(&config.fit_model, self.len()) < t {
                return Ok(Vec::new());
            }
        }
        let mut ranked = fuse(&bm25, &cosines, &config);
        keep_bm25_first(&mut ranked, &bm25, &config);
        Ok(self.hits(ranked.into_iter().take(limit)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolDoc;
    use crate::text::embedding_text;

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

    /// Toy vectors: a shared "language" direction per script plus a "meaning" direction.
    fn bilingual() -> (SearchIndex, Vec<f32>) {
        // 8 English-described tools (meanings 0..8) and 8 Chinese-described (meanings 8..16);
        // dimension 16 is "English", 17 "Chinese"; the language weighs as much as the meaning.
        let mut docs = Vec::new();
        let mut vectors = Vec::new();
        for i in 0..16 {
            let (desc, lang) = if i < 8 {
                (format!("English tool number {i}"), 16)
            } else {
                (format!("中文描述的工具第{i}号"), 17)
            };
            docs.push(ToolDoc::new(format!("t{i}"), desc));
            let mut v = vec![0.0; 18];
            v[i] = 1.0;
            v[lang] = 1.2;
            vectors.push(v);
        }
        let index = SearchIndex::new(docs).with_vectors(vectors).unwrap();
        // A Chinese request meaning tool 3 (English-described): some of the meaning, and the
        // Chinese direction it shares with every Chinese description.
        let mut q = vec![0.0; 18];
        q[3] = 0.8;
        q[17] = 1.2;
        (index, q)
    }

    #[test]
    fn a_chinese_request_finds_an_english_described_tool_once_language_is_taken_out() {
        let (index, q) = bilingual();
        let raw = index.with_hybrid(HybridConfig::default().with_language_neutral(false));
        // Raw cosines: the Chinese descriptions all beat the tool the request means.
        let hits = raw.search_hybrid("打开第三个工具", &q, 3).unwrap();
        assert!(hits.iter().all(|h| h.index >= 8), "{hits:?}");
        let neutral = raw.with_hybrid(HybridConfig::default());
        let hits = neutral.search_hybrid("打开第三个工具", &q, 3).unwrap();
        assert_eq!(hits[0].name, "t3", "{hits:?}");
    }

    #[test]
    fn centring_a_one_language_catalog_keeps_its_order() {
        // One script only: every vector moves by the same mean; a query on one tool still
        // finds it first, and the cosine order of the rest follows the meaning.
        // Chinese-described tools and a Chinese request: the case centring applies to.
        let docs: Vec<ToolDoc> = (0..12)
            .map(|i| ToolDoc::new(format!("t{i}"), format!("中文工具第{i}个")))
            .collect();
        let vectors: Vec<Vec<f32>> = (0..12)
            .map(|i| {
                (0..13)
                    .map(|j| {
                        if j == i {
                            1.0
                        } else if j == 12 {
                            2.0
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect();
        let index = SearchIndex::new(docs).with_vectors(vectors).unwrap();
        for i in 0..12 {
            let mut q = vec![0.0; 13];
            q[i] = 1.0;
            q[12] = 2.0;
            q[(i + 1) % 12] = 0.3;
            let neutral = index.cosines("找到它", &q).unwrap();
            let best = (0..12)
                .max_by(|&a, &b| neutral[a].total_cmp(&neutral[b]))
                .unwrap();
            assert_eq!(best, i);
            let second = (0..12)
                .filter(|&j| j != i)
                .max_by(|&a, &b| neutral[a].total_cmp(&neutral[b]))
                .unwrap();
            assert_eq!(second, (i + 1) % 12);
        }
    }

    #[test]
    fn a_hostile_description_near_everything_does_not_take_every_query() {
        // Tool 8 says it does everything: its vector is the catalog's mean direction and its
        // description repeats every tool's words.
        let mut docs: Vec<ToolDoc> = (0..8)
            .map(|i| ToolDoc::new(format!("t{i}"), format!("tool{i} does thing{i}")))
            .collect();
        let everything: String = (0..8).map(|i| format!("tool{i} thing{i} ")).collect();
        docs.push(ToolDoc::new("hostile", everything.repeat(500)));
        let mut vectors: Vec<Vec<f32>> = (0..8)
            .map(|i| {
                (0..9)
                    .map(|j| if j == i || j == 8 { 1.0 } else { 0.0 })
                    .collect()
            })
            .collect();
        vectors.push((0..9).map(|j| if j == 8 { 1.0 } else { 0.35 }).collect());
        let index = SearchIndex::new(docs).with_vectors(vectors).unwrap();
        for i in 0..8 {
            let mut q = vec![0.0; 9];
            q[i] = 1.0;
            q[8] = 1.0;
            let hits = index.search_hybrid(&format!("thing{i}"), &q, 3).unwrap();
            assert_eq!(hits[0].name, format!("t{i}"), "{hits:?}");
        }
    }

    #[test]
    fn an_empty_description_a_huge_query_and_an_emoji_query_are_handled() {
        let index = SearchIndex::new(vec![
            ToolDoc::new("fs__read_file", ""),
            ToolDoc::new("maps__elevation", "Get elevation data"),
        ])
        .with_vectors(vec![vec![1.0, 0.0], vec![0.0, 1.0]])
        .unwrap()
        .with_hybrid(HybridConfig::default().with_no_fit_below(Some(0.5)));
        assert_eq!(
            embedding_text(&ToolDoc::new("fs__read_file", "")),
            "read file"
        );
        let huge = "read the file ".repeat(800);
        assert!(huge.chars().count() > 10_000);
        let hits = index.search_hybrid(&huge, &[1.0, 0.0], 5).unwrap();
        assert_eq!(hits[0].name, "fs__read_file");
        let fit = index.fit(&huge, &[1.0, 0.0]).unwrap();
        assert!(fit.is_finite());
        // Only emoji: no word is shared; the vector alone decides, and the fit is finite.
        let emoji = "🙂🚀🔥".repeat(3000);
        let hits = index.search_hybrid(&emoji, &[0.1, 1.0], 5).unwrap();
        assert_eq!(hits[0].name, "maps__elevation");
        assert_eq!(index.fit_parts(&emoji, &[0.1, 1.0]).unwrap().lexical, 0.0);
        // A zero query vector is near nothing: no tool fits.
        assert!(
            index
                .search_hybrid("read", &[0.0, 0.0], 5)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn script_of_counts_a_chinese_character_as_three_letters() {
        assert_eq!(Script::of("read a file"), Script::Latin);
        assert_eq!(Script::of("读取文件"), Script::Cjk);
        assert_eq!(Script::of("在Notion里新建一页笔记"), Script::Cjk);
        assert_eq!(
            Script::of("[Project Management] 获取实际工时明细"),
            Script::Cjk
        );
        assert_eq!(
            Script::of("create work item: [Project Management] Create a work item"),
            Script::Latin
        );
        assert_eq!(Script::of("🙂🙂🙂"), Script::Latin);
        assert_eq!(Script::of(""), Script::Latin);
    }
}
