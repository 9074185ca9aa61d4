//! The hybrid search's settings: how the two rankings are fused, and "no tool fits".

use crate::MAX_LIMIT;
// A glob, so that rustdoc (and the recorded API in api/) names `HybridConfig::fit_model`'s
// type `FitModel`, as before these items moved to `fit`.
use crate::fit::*;
use crate::unserved::{E5_SMALL_ID, UnservedIntents};

/// How [`SearchIndex::search_hybrid`](crate::SearchIndex::search_hybrid) combines BM25 and the cosines.
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
    /// How many of the nearest tools the cosine side ranks. Default [`MAX_LIMIT`](crate::MAX_LIMIT).
    pub dense_depth: usize,
    /// Language-neutral cosines for CJK-script requests (default on): each tool's vector is
    /// centred on the mean vector of the tools whose [`embedding_text`](crate::embedding_text) is in the same script
    /// ([`Script`](crate::Script)), the request's on the mean of the tools in its own script, before the
    /// cosine (with a bank of the encoder's own, [`HybridConfig::unserved`], the request's
    /// mean is halfway between its script's tools' and the bank's requests' in that script,
    /// encoded as requests: a request's language offset is not quite a description's; on the
    /// mixed-language dev split this lifted Chinese requests' recall@1 from 0.57 to 0.63 and
    /// recall@5 from 0.84 to 0.85; on the test split, run once, 0.53 to 0.51 and 0.76 to 0.78). A small multilingual encoder puts a Chinese request nearer to any Chinese
    /// description than to the English description of the tool it means; the mean of a
    /// language's vectors is what its texts share whatever they say, so taking it out leaves
    /// the meaning. A script with fewer than [`MIN_SCRIPT_TOOLS`](crate::MIN_SCRIPT_TOOLS) tools (and a one-language
    /// catalog) is centred on the whole catalog's mean. Latin-script requests keep raw cosines:
    /// on the mixed-language dev split they ranked English requests better at recall@1 (0.57
    /// against 0.50 centred), and centred they can land on a small group of Chinese-described
    /// tools whose language offset a few tools cannot estimate.
    pub language_neutral: bool,
    /// How [`SearchIndex::fit`](crate::SearchIndex::fit) weighs the evidence of [`Fit`](crate::Fit). Default
    /// [`FitModel::linear`](crate::FitModel::linear)`(0.3)`: the nearest raw cosine plus 0.3 × the lexical share.
    pub fit_model: FitModel,
    /// The bank of requests few catalogs serve that [`Fit::unserved`](crate::Fit::unserved) compares a request with
    /// (`None`, the default: no such evidence). Only a bank from the index's own encoder means
    /// anything: [`HybridConfig::for_encoder`] sets it for the encoder it was made with.
    pub unserved: Option<&'static UnservedIntents>,
    /// Return nothing when [`SearchIndex::fit`](crate::SearchIndex::fit) is below this: no tool stands out for the
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
    /// Sets how many nearest tools the cosine side ranks (1..=[`MAX_LIMIT`](crate::MAX_LIMIT)).
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
