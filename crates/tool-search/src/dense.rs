//! The dense half of the search: each tool's text for an encoder and its cache key, the
//! tools' vectors, reciprocal-rank fusion with BM25, and "no tool fits".
//!
//! Pure like the rest of the crate: the caller runs the encoder (a `toolwright_core::Embedder`) and
//! hands the vectors in.

use crate::script::Script;
use crate::unserved::{E5_SMALL_ID, UnservedIntents};
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
    /// fallback, with [`BM25_FIRST_WITHIN`].
    pub dense_weight: f32,
    /// How many of the nearest tools the cosine side ranks. Default [`MAX_LIMIT`].
    pub dense_depth: usize,
    /// Language-neutral cosines for CJK-script requests (default on): each tool's vector is
    /// centred on the mean vector of the tools whose [`embedding_text`] is in the same script
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
    /// How [`SearchIndex::fit`] weighs the evidence of [`Fit`]. Default
    /// [`FitModel::linear`]`(0.3)`: the nearest raw cosine plus 0.3 × the lexical share.
    pub fit_model: FitModel,
    /// The bank of requests few catalogs serve that [`Fit::unserved`] compares a request with
    /// (`None`, the default: no such evidence). Only a bank from the index's own encoder means
    /// anything: [`HybridConfig::for_encoder`] sets it for the encoder it was made with.
    pub unserved: Option<&'static UnservedIntents>,
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
            dense_weight: 2.0,
            dense_depth: MAX_LIMIT,
            language_neutral: true,
            fit_model: FitModel::linear(DEFAULT_LEXICAL_FIT_WEIGHT),
            unserved: None,
            no_fit_below: None,
        }
    }
}

/// The "no tool fits" thresholds ([`HybridConfig::no_fit_below`]) for multilingual-e5-small
/// with the default [`HybridConfig`], by catalog size: (tools, threshold). The nearest cosine
/// grows with the number of tools it is the largest of, so one threshold cannot serve a catalog
/// of 30 tools and one of 600. Derived on the mixed-language dev split only: catalogs of each
/// size drawn from its 634 tools (ten per request, always holding the request's right tools),
/// and [`calibrate_no_fit`] at most **1 %** of the answerable requests turned away; between two
/// sizes the threshold follows the logarithm of the size, beyond them the nearest one holds.
/// Kept that low on purpose: a request turned away is worse than a tool too many, and with this
/// encoder the two channels tell few requests no tool serves apart (about 1 in 12 of dev's
/// negatives is turned away at 634 tools).
pub const E5_SMALL_NO_FIT: [(usize, f32); 6] = [
    (16, 0.7960),
    (32, 0.7961),
    (64, 0.8017),
    (128, 0.8061),
    (256, 0.8145),
    (634, 0.8409),
];

/// The threshold of `table` ((tools, threshold), by growing size) for a catalog of `tools`:
/// interpolated on the logarithm of the size, the nearest end beyond the table; `None` for an
/// empty table.
pub fn no_fit_for_size(table: &[(usize, f32)], tools: usize) -> Option<f32> {
    let (first, last) = (table.first()?, table.last()?);
    if tools <= first.0 {
        return Some(first.1);
    }
    if tools >= last.0 {
        return Some(last.1);
    }
    let ln = |n: usize| (n.max(1) as f32).ln();
    table.windows(2).find_map(|w| {
        let ((a, ta), (b, tb)) = (w[0], w[1]);
        (tools >= a && tools <= b && b > a).then(|| {
            let x = (ln(tools) - ln(a)) / (ln(b) - ln(a));
            ta + x * (tb - ta)
        })
    })
}

impl HybridConfig {
    /// The default fusion for a catalog of `tools` tools searched with the encoder whose id
    /// (`Embedder::id` in toolwright-core) is `encoder_id`, with "no tool fits" on when it was
    /// calibrated for that encoder:
    ///
    /// - the embedded multilingual-e5-small ([`E5_SMALL_ID`]): the judge
    ///   [`E5_SMALL_FIT_MODEL`] over both channels and the bank of requests few catalogs serve
    ///   ([`UnservedIntents::e5_small`]), threshold [`E5_SMALL_FIT_BELOW`];
    /// - other weights of multilingual-e5-small (ids starting `multilingual-e5-small`; the
    ///   bank's vectors would not be comparable): the fallback, the nearest cosine and the
    ///   lexical share by catalog size ([`E5_SMALL_NO_FIT`]), which turns away few requests no
    ///   tool serves;
    /// - any other encoder: no threshold (every search returns its best tools): calibrate one
    ///   with [`calibrate_no_fit`] and set it with [`HybridConfig::with_no_fit_below`].
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

/// The lexical weight of the default [`HybridConfig::fit_model`] ([`FitModel::linear`]).
/// Chosen on the mixed-language dev split with multilingual-e5-small: 0.2 to 0.3 stopped the
/// most negatives at the same share of answerable requests turned away (0: a third as many).
pub const DEFAULT_LEXICAL_FIT_WEIGHT: f32 = 0.3;

/// How well a request fits the catalog, from both channels and the bank of requests few
/// catalogs serve: what "no tool fits" is decided on ([`SearchIndex::fit_parts`];
/// [`SearchIndex::fit`] weighs it with [`HybridConfig::fit_model`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Fit {
    /// The nearest tool's raw cosine (not centred: how near the request is to the catalog at
    /// all, language included; on the dev split it told negatives apart better than the
    /// language-neutral one, which only ranks).
    pub dense: f32,
    /// The share of the request's words, weighted by rarity, that BM25's best tool holds
    /// (0 to 1): 1 when it has them all, 0 when no tool shares a word.
    pub lexical: f32,
    /// 1 when the two channels agree: BM25's first tool is among the five tools the cosine
    /// side ranks nearest; else 0 (and 0 when BM25 matched nothing).
    pub agreement: f32,
    /// How much nearer the request is to the bank of requests few catalogs serve
    /// ([`HybridConfig::unserved`]) than to any tool, per script: for each script the catalog
    /// has tools in, the bank's nearest request in that script minus the nearest tool in that
    /// script (raw cosines); the smallest of these. Above 0: some everyday request the catalog
    /// does not serve is nearer than every tool. `None` without a bank of the index's width.
    pub unserved: Option<f32>,
}

impl Fit {
    /// What `model` makes of this evidence for a catalog of `tools` tools: higher fits better
    /// ([`FitModel`]).
    pub fn score(&self, model: &FitModel, tools: usize) -> f32 {
        model.bias
            + model.nearest * self.dense
            + model.lexical * self.lexical
            + model.agreement * self.agreement
            + model.unserved * self.unserved.unwrap_or(0.0)
            + model.log_tools * (tools.max(1) as f32).ln()
    }
}

/// How [`SearchIndex::fit`] weighs the evidence of a [`Fit`]: `bias + nearest × dense +
/// lexical × lexical + agreement × agreement + unserved × unserved + log_tools × ln(tools)`.
/// Higher means a tool fits; [`HybridConfig::no_fit_below`] is compared with it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct FitModel {
    /// A constant.
    pub bias: f32,
    /// Weight of [`Fit::dense`].
    pub nearest: f32,
    /// Weight of [`Fit::lexical`].
    pub lexical: f32,
    /// Weight of [`Fit::agreement`].
    pub agreement: f32,
    /// Weight of [`Fit::unserved`] (0 when there is none).
    pub unserved: f32,
    /// Weight of the natural logarithm of the catalog's size.
    pub log_tools: f32,
}

impl FitModel {
    /// `dense + lexical_weight × lexical`: the nearest cosine and the lexical share only (what
    /// [`E5_SMALL_NO_FIT`] is calibrated for).
    pub const fn linear(lexical_weight: f32) -> Self {
        Self {
            bias: 0.0,
            nearest: 1.0,
            lexical: lexical_weight,
            agreement: 0.0,
            unserved: 0.0,
            log_tools: 0.0,
        }
    }
}

/// The judge of "no tool fits" for the embedded multilingual-e5-small ([`E5_SMALL_ID`]): a
/// logistic model, its score the log-odds that some tool serves the request. Fitted on the
/// mixed-language **dev split only** (173 answerable requests, 24 that no tool serves, and
/// their paraphrases), each in catalogs of 16 to 634 tools drawn from dev's (three per size,
/// always holding the request's right tools), with the bank [`UnservedIntents::e5_small`].
/// The lexical share was left out: with the others in, its weight came out pointing the wrong
/// way (more shared words, less fit), a sign of noise. Cross-validated on dev (8 folds by
/// request): 8–12 % of the requests no tool serves given a tool, 3–5 % of the answerable ones
/// turned away, at every size.
pub const E5_SMALL_FIT_MODEL: FitModel = FitModel {
    bias: -1.2905,
    nearest: 3.6449,
    lexical: 0.0,
    agreement: 2.4346,
    unserved: -152.6538,
    log_tools: -0.8761,
};

/// The threshold on [`E5_SMALL_FIT_MODEL`]'s score: below it, no tool fits. Set on the dev
/// split to turn away 2.5 % of its answerable requests over all catalog sizes, so that the
/// share on requests it has not seen stays under the goal of 5 %: with 173 answerable requests
/// a rate measured at 2.5 % has a one-sided 90 % upper bound (Wilson) of about 4.6 %, where a
/// rate measured at 4 % (the first setting, -0.66) reaches 6.3 %. On dev this lets through
/// 16 % of the requests no tool serves over all sizes (8 % at 634 tools), against 8 % at 4 %.
pub const E5_SMALL_FIT_BELOW: f32 = -1.642;

/// The fewest tools of one script whose own mean a script's vectors are centred on
/// ([`HybridConfig::language_neutral`]); fewer, and they are centred on the whole catalog's.
pub const MIN_SCRIPT_TOOLS: usize = 8;

/// The tools' vectors, L2-normalised, row-major; and the same centred on their script's mean
/// and normalised again ([`HybridConfig::language_neutral`]).
#[derive(Debug, Clone)]
pub(crate) struct Vectors {
    dims: usize,
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
    fn cosines(&self, query: &[f32], script: Script, neutral: Option<Option<&[f32]>>) -> Vec<f32> {
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

/// How sure the cosine side is of its nearest tool, 0 to 1: the nearest cosine's z-score over
/// the catalog's cosines, divided by `sqrt(2 ln N)` (about where the largest of N unrelated
/// scores falls, so a catalog's size does not move it), mapped from
/// [`DENSE_UNSURE_BELOW`]..[`DENSE_SURE_FROM`] onto 0..1. 1 for a catalog under
/// [`DENSE_CONFIDENCE_MIN_TOOLS`] tools (too few cosines for a z-score) or when every cosine is
/// the same.
///
/// The fusion's fallback when the cosine side is unsure: its weight is multiplied by this (at
/// least 0.25, and not when BM25 matched nothing), so BM25's order counts for more on that
/// request. On the mixed-language dev split, requests
/// whose nearest cosine stood out least (the lowest fifth of z-scores) had their right tool in
/// the cosine side's first five 40 % of the time against BM25's 54 %; the most outstanding
/// fifth, 97 %. With the weight scaled, recall@5 on dev rose from 0.80 to 0.82 in a simulation
/// from BM25's first 50 tools (every slice the same or higher; 0.50–0.60 and 0.90–1.00 as
/// bounds within 0.01); in the bench itself dev went from 0.82 (recall@1 0.57) to 0.82 (0.58),
/// and the test split, run once, stayed at 0.75 (0.56) in every slice.
fn dense_confidence(cosines: &[f32]) -> f32 {
    let n = cosines.len();
    if n < DENSE_CONFIDENCE_MIN_TOOLS {
        return 1.0;
    }
    let n_f = n as f64;
    let mean = cosines.iter().map(|&c| f64::from(c)).sum::<f64>() / n_f;
    let var = cosines
        .iter()
        .map(|&c| (f64::from(c) - mean).powi(2))
        .sum::<f64>()
        / n_f;
    if var.is_nan() || var <= 1e-12 {
        return 1.0;
    }
    let top = cosines
        .iter()
        .map(|&c| f64::from(c))
        .fold(f64::NEG_INFINITY, f64::max);
    let ratio = (top - mean) / var.sqrt() / (2.0 * n_f.ln()).sqrt();
    let unsure = f64::from(DENSE_UNSURE_BELOW);
    let sure = f64::from(DENSE_SURE_FROM);
    ((ratio - unsure) / (sure - unsure)).clamp(0.0, 1.0) as f32
}

/// [`dense_confidence`] is 0 at or below this size-scaled z-score of the nearest cosine.
const DENSE_UNSURE_BELOW: f32 = 0.55;
/// [`dense_confidence`] is 1 at or above this size-scaled z-score of the nearest cosine.
const DENSE_SURE_FROM: f32 = 0.95;
/// The fewest tools [`dense_confidence`] judges; under this it is 1.
const DENSE_CONFIDENCE_MIN_TOOLS: usize = 16;

/// BM25's ranking (tool, score; best first) and every tool's cosine fused as `config` says,
/// the cosine side's weight scaled by [`dense_confidence`]: (tool, fused score), best first,
/// ties in tool order; tools neither side credits are left out.
fn fuse(bm25: &[(usize, f32)], cosines: &[f32], config: &HybridConfig) -> Vec<(usize, f32)> {
    let tools = cosines.len();
    let mut fused = vec![0.0f32; tools];
    // With BM25 silent, the cosine order is all there is: keep it whatever its confidence.
    // Never quite 0: the tools only the cosine side finds still follow BM25's.
    let sure = if config.bm25_weight > 0.0 && bm25.iter().any(|b| b.1 > 0.0) {
        dense_confidence(cosines).max(0.25)
    } else {
        1.0
    };
    let dense_weight = config.dense_weight * sure;
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
                fused[i] += dense_weight / (config.k + rank as f32 + 1.0);
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
                    fused[i] += dense_weight * (c - lo) / (hi - lo);
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

/// How far down the fused ranking BM25's first tool may fall: [`BM25_FIRST_WITHIN`]-th place.
///
/// The fusion's fallback when the cosine side is unsure: the cosines may reorder BM25's tools
/// and add their own, but BM25's first tool (the one holding the most of the request's rare
/// words) is never pushed out of the first five. On the mixed-language dev split this lifted
/// English requests' recall@5 from 0.79 to 0.81 and lost nothing elsewhere.
/// Not when BM25's weight is 0 (the cosine order is asked for then).
pub const BM25_FIRST_WITHIN: usize = 5;

/// Raises BM25's first tool to place [`BM25_FIRST_WITHIN`] of `ranked` (best first, ties in
/// index order) when the fusion put it lower: its score becomes the next float above the
/// score at that place, and the list is sorted again. Not when BM25 does not count
/// (`bm25_weight` 0: the cosine order is asked for).
fn keep_bm25_first(ranked: &mut [(usize, f32)], bm25: &[(usize, f32)], config: &HybridConfig) {
    let Some(&(first, _)) = bm25.first() else {
        return;
    };
    if config.bm25_weight <= 0.0 {
        return;
    }
    let slot = BM25_FIRST_WITHIN - 1;
    let Some(at) = ranked.iter().position(|&(i, _)| i == first) else {
        return;
    };
    if at <= slot {
        return;
    }
    let Some(&(_, bar)) = ranked.get(slot) else {
        return;
    };
    ranked[at].1 = next_above(bar);
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
}

/// The smallest float above `x` (finite, non-negative `x`; fused scores are).
fn next_above(x: f32) -> f32 {
    if x.is_finite() && x >= 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        x
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

/// The largest of `cosines`; 0 when there is none.
fn nearest(cosines: &[f32]) -> f32 {
    cosines
        .iter()
        .copied()
        .fold(None, |m: Option<f32>, c| Some(m.map_or(c, |m| m.max(c))))
        .unwrap_or(0.0)
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

    /// How well `query` (whose vector is `query_vector`) fits the catalog: [`Fit::score`] of
    /// [`SearchIndex::fit_parts`] with [`HybridConfig::fit_model`]. What
    /// [`HybridConfig::no_fit_below`] is compared with; an encoder's own scale, so calibrate
    /// per encoder ([`calibrate_no_fit`]).
    pub fn fit(&self, query: &str, query_vector: &[f32]) -> Result<f32, VectorError> {
        Ok(self
            .fit_parts(query, query_vector)?
            .score(&self.hybrid.fit_model, self.len()))
    }

    /// The evidence that some tool serves `query` ([`Fit`]).
    pub fn fit_parts(&self, query: &str, query_vector: &[f32]) -> Result<Fit, VectorError> {
        let cosines = self.cosines(query, query_vector)?;
        let bm25 = self.bm25_ranked(query);
        self.fit_from(query, query_vector, &cosines, &bm25)
    }

    /// [`SearchIndex::fit_parts`] from the ranking cosines and BM25's ranking already at hand.
    fn fit_from(
        &self,
        query: &str,
        query_vector: &[f32],
        cosines: &[f32],
        bm25: &[(usize, f32)],
    ) -> Result<Fit, VectorError> {
        let raw = self.raw_cosines(query_vector)?;
        let agreement = bm25.first().is_some_and(|&(first, _)| {
            let c = cosines.get(first).copied().unwrap_or(f32::NEG_INFINITY);
            cosines.iter().filter(|&&x| x > c).count() < 5
        });
        Ok(Fit {
            dense: nearest(&raw),
            lexical: self.lexical_fit(query),
            agreement: if agreement { 1.0 } else { 0.0 },
            unserved: self.unserved_margin(query_vector, &raw)?,
        })
    }

    /// [`Fit::unserved`]: per script the catalog has tools in, the bank's nearest request in
    /// that script minus the nearest tool in it; the smallest.
    fn unserved_margin(
        &self,
        query_vector: &[f32],
        raw: &[f32],
    ) -> Result<Option<f32>, VectorError> {
        let Some(bank) = self.hybrid.unserved else {
            return Ok(None);
        };
        let Some(vectors) = self.vectors.as_ref() else {
            return Ok(None);
        };
        if vectors.dims != bank.dimensions() || raw.is_empty() {
            return Ok(None);
        }
        let q = normalised(query_vector, vectors.dims, 0)?;
        let mut margin: Option<f32> = None;
        for script in [Script::Latin, Script::Cjk] {
            let tools = raw
                .iter()
                .zip(&self.scripts)
                .filter(|(_, s)| **s == script)
                .map(|(c, _)| *c)
                .fold(None, |m: Option<f32>, c| Some(m.map_or(c, |m| m.max(c))));
            if let (Some(tool), Some(intent)) = (tools, bank.nearest_in(&q, script)) {
                let m = intent - tool;
                margin = Some(margin.map_or(m, |x| x.min(m)));
            }
        }
        Ok(margin)
    }

    /// Every tool's cosine with `query_vector`, not centred.
    fn raw_cosines(&self, query_vector: &[f32]) -> Result<Vec<f32>, VectorError> {
        let vectors = self.vectors.as_ref().ok_or(VectorError::NoVectors)?;
        if vectors.dims == 0 {
            return Ok(Vec::new());
        }
        let q = normalised(query_vector, vectors.dims, 0)?;
        Ok(vectors.cosines(&q, Script::Latin, None))
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
        let high = index.fit("x", &on_topic).unwrap();
        let low = index.fit("x", &vague).unwrap();
        assert!(high > 0.9, "{high}");
        assert!(low < 0.6, "{low}");
        let t = calibrate_no_fit(&[high], &[low], 0.0).unwrap();
        let gated = index.with_hybrid(HybridConfig::default().with_no_fit_below(Some(t)));
        assert_eq!(
            gated.search_hybrid("x", &on_topic, 3).unwrap()[0].name,
            "t3"
        );
        assert!(gated.search_hybrid("x", &vague, 3).unwrap().is_empty());
    }

    #[test]
    fn a_request_whose_words_no_tool_holds_fits_less() {
        let index = index()
            .with_vectors(vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.7, 0.7]])
            .unwrap();
        let v = [0.9, 0.1];
        let held = index.fit_parts("read the file contents", &v).unwrap();
        let none = index.fit_parts("turn off the bedroom lights", &v).unwrap();
        assert!((held.lexical - 1.0).abs() < 1e-6, "{held:?}");
        assert_eq!(none.lexical, 0.0);
        assert_eq!(held.dense, none.dense);
        assert!(
            index.fit("read the file contents", &v).unwrap()
                > index.fit("turn off the bedroom lights", &v).unwrap()
        );
        // Half the words held: between the two.
        let half = index.fit_parts("read the bedroom", &v).unwrap();
        assert!(half.lexical > 0.0 && half.lexical < 1.0, "{half:?}");
        let fit = Fit {
            dense: 1.0,
            lexical: 0.5,
            agreement: 1.0,
            unserved: Some(0.5),
        };
        assert_eq!(fit.score(&FitModel::linear(2.0), 634), 2.0);
        let mut model = FitModel::linear(0.0);
        model.agreement = 1.0;
        model.unserved = -2.0;
        model.log_tools = 1.0;
        assert!((fit.score(&model, 1) - 1.0).abs() < 1e-6);
        assert!((fit.score(&model, 100) - (1.0 + 100f32.ln())).abs() < 1e-5);
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
    fn an_unsure_cosine_side_leaves_the_first_place_to_bm25() {
        // 20 tools; BM25 finds only t12 ("zebra"). Two cosine sides for the same request: one
        // whose nearest tool (t0) hardly stands out (cosines spread evenly), one where t0
        // stands far out.
        let docs: Vec<ToolDoc> = (0..20)
            .map(|i| {
                let words = if i == 12 {
                    "zebra crossing"
                } else {
                    "tool number"
                };
                ToolDoc::new(format!("t{i}"), format!("{words} {i}"))
            })
            .collect();
        let at_angle = |c: f32| vec![c, (1.0 - c * c).max(0.0).sqrt()];
        let even: Vec<Vec<f32>> = (0..20)
            .map(|i| at_angle(1.0 - 2.0 * i as f32 / 19.0))
            .collect();
        let apart: Vec<Vec<f32>> = (0..20)
            .map(|i| at_angle(if i == 0 { 1.0 } else { 0.1 - 0.01 * i as f32 }))
            .collect();
        let config = HybridConfig::default().with_language_neutral(false);
        let q = [1.0, 0.0];
        let first = |vectors: Vec<Vec<f32>>, query: &str| {
            SearchIndex::new(docs.clone())
                .with_vectors(vectors)
                .unwrap()
                .with_hybrid(config)
                .search_hybrid(query, &q, 5)
                .unwrap()[0]
                .name
                .clone()
        };
        assert_eq!(first(even.clone(), "zebra"), "t12");
        assert_eq!(first(apart, "zebra"), "t0");
        // With BM25 silent the cosine order stands, however unsure.
        assert_eq!(first(even.clone(), "zzz"), "t0");
        // The confidence itself: 1 under 16 tools, 0..1 by how far the nearest stands out.
        assert_eq!(dense_confidence(&[0.1, 0.2, 0.3]), 1.0);
        assert_eq!(dense_confidence(&[0.5; 40]), 1.0);
        let spread: Vec<f32> = (0..20).map(|i| i as f32 / 19.0).collect();
        let c = dense_confidence(&spread);
        assert!(c > 0.0 && c < 0.5, "{c}");
        let mut apart = vec![0.0f32; 20];
        apart[3] = 1.0;
        assert_eq!(dense_confidence(&apart), 1.0);
    }

    #[test]
    fn bm25s_first_tool_is_never_pushed_out_of_the_first_five() {
        // BM25 finds only tool 0; the cosines put six other tools nearer.
        let docs: Vec<ToolDoc> = (0..8)
            .map(|i| {
                let words = if i == 0 { "invoice ledger" } else { "other" };
                ToolDoc::new(format!("t{i}"), format!("{words} {i}"))
            })
            .collect();
        let vectors: Vec<Vec<f32>> = (0..8)
            .map(|i| (0..8).map(|j| if j == i { 1.0 } else { 0.0 }).collect())
            .collect();
        let index = SearchIndex::new(docs)
            .with_vectors(vectors)
            .unwrap()
            .with_hybrid(HybridConfig::default().with_weights(0.1, 2.0));
        let q: Vec<f32> = (0..8)
            .map(|j| if j == 0 { 0.0 } else { 1.0 - 0.1 * j as f32 })
            .collect();
        let hits = index.search_hybrid("invoice ledger", &q, 8).unwrap();
        let at = hits.iter().position(|h| h.name == "t0").unwrap();
        assert!(at < BM25_FIRST_WITHIN, "{hits:?}");
        assert!(
            hits.windows(2).all(|w| w[0].score >= w[1].score),
            "{hits:?}"
        );
        // Without a BM25 match nothing is moved.
        let hits = index.search_hybrid("zzz", &q, 3).unwrap();
        assert_eq!(hits[0].name, "t1");
    }

    #[test]
    fn the_no_fit_threshold_follows_the_catalogs_size() {
        let t = |n| no_fit_for_size(&E5_SMALL_NO_FIT, n).unwrap();
        assert_eq!(t(1), E5_SMALL_NO_FIT[0].1);
        assert_eq!(t(100_000), E5_SMALL_NO_FIT[5].1);
        assert_eq!(t(128), E5_SMALL_NO_FIT[3].1);
        let between = t(181); // about halfway between 128 and 256 on the logarithm
        assert!(between > t(128) && between < t(256), "{between}");
        assert!(E5_SMALL_NO_FIT.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!(no_fit_for_size(&[], 10), None);
        assert_eq!(
            HybridConfig::for_encoder("multilingual-e5-small-q4@x", 634).no_fit_below,
            Some(E5_SMALL_NO_FIT[5].1)
        );
        assert_eq!(HybridConfig::for_encoder("other", 634).no_fit_below, None);
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
