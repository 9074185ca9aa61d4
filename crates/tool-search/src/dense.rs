//! The dense half of the search: the fusion's settings, the tools' vectors (raw and centred
//! per language), and the hybrid search itself. What an encoder reads is in `text`, how the
//! two rankings are fused in `fusion`, "no tool fits" in `fit`.
//!
//! Pure like the rest of the crate: the caller runs the encoder (a `toolwright_core::Embedder`) and
//! hands the vectors in.

use crate::config::HybridConfig;
use crate::fusion::{fuse, keep_bm25_first};
use crate::script::Script;
use crate::vector::{MAX_DIMENSIONS, VectorError, normalised};
use crate::{Hit, MAX_LIMIT, SearchIndex};

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
    /// reciprocal rank ([`HybridConfig`]), best first, ties in BM25's order, then index order. Empty when
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
    use crate::config::Fusion;
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
