//! Requests that tool catalogs seldom serve, and how near a request is to them: the evidence
//! "no tool fits" weighs most ([`crate::Fit::unserved`]).
//!
//! A small encoder's nearest cosine alone cannot tell "turn off the lights" from "read
//! notes.txt" in a catalog of developer tools: every request has some tool at 0.80–0.87. What
//! does tell them apart is whether the request is nearer to a bank of everyday-assistant
//! requests (smart home, phone, alarms, music, rides, tickets, food, paying people, fitness) than
//! to any tool. The bank is encoded like the tools (as documents), so a catalog that does serve
//! one of these requests (a smart-home server beside the rest) wins the comparison with its own
//! tool; it is compared per script (an English intent with the catalog's English-described
//! tools, a Chinese one with its Chinese-described tools), so a Chinese request is not pulled
//! toward the bank's Chinese half by language alone.

use std::sync::OnceLock;

use crate::script::Script;

/// The bank's requests, one a line: 35 in English, the same 35 in Chinese.
const TEXTS: &str = include_str!("unserved-intents.txt");

/// Their vectors from multilingual-e5-small at 4 bits ([`E5_SMALL_ID`]), encoded as documents,
/// little-endian `f32`, 384 per request, in the order of the text file.
const E5_SMALL_VECTORS: &[u8] = include_bytes!("unserved-intents.e5-small-q4.f32");

/// The mean of the same requests' vectors encoded as requests (queries, not documents), per
/// script: the English 35's, then the Chinese 35's; little-endian `f32`, 384 each. What a
/// request's vector shares with every request in its language, whatever it asks
/// ([`UnservedIntents::request_mean`]).
const E5_SMALL_REQUEST_MEANS: &[u8] =
    include_bytes!("unserved-intents.e5-small-q4.request-means.f32");

/// The id (`Embedder::id` in toolwright-core) of the encoder the bank's vectors and
/// [`crate::E5_SMALL_FIT_MODEL`] come from: multilingual-e5-small at 4 bits whose weights' SHA-256
/// starts `1571fc98`. Another encoder, or other weights, gets no bank (the vectors would not be
/// comparable) and falls back to [`crate::E5_SMALL_NO_FIT`] or to no threshold.
pub const E5_SMALL_ID: &str = "multilingual-e5-small-q4@1571fc98";

const E5_SMALL_DIMENSIONS: usize = 384;

/// Requests few catalogs serve, each with its vector from one encoder and its script.
#[derive(Debug, PartialEq)]
pub struct UnservedIntents {
    encoder_id: &'static str,
    dims: usize,
    texts: Vec<&'static str>,
    scripts: Vec<Script>,
    /// By [`Script::slot`]: the mean of the bank's requests in that script, encoded as
    /// requests (empty when not known).
    request_means: [Vec<f32>; 2],
    /// Row-major, each row of length 1.
    vectors: Vec<f32>,
}

impl UnservedIntents {
    /// The bank for multilingual-e5-small ([`E5_SMALL_ID`]), parsed once.
    pub fn e5_small() -> &'static Self {
        static BANK: OnceLock<UnservedIntents> = OnceLock::new();
        BANK.get_or_init(|| {
            let texts: Vec<&'static str> = TEXTS
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let floats: Vec<f32> = E5_SMALL_VECTORS
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let dims = E5_SMALL_DIMENSIONS;
            // The two files are written together (crates/tool-search/scripts/
            // write_unserved_vectors.py); a mismatch keeps as many rows as both hold.
            let rows = texts.len().min(floats.len() / dims);
            let mut vectors = Vec::with_capacity(rows * dims);
            for row in floats.chunks_exact(dims).take(rows) {
                let norm = row
                    .iter()
                    .map(|x| f64::from(*x).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let ok = norm.is_finite() && norm > 0.0;
                vectors.extend(row.iter().map(|x| {
                    if ok {
                        (f64::from(*x) / norm) as f32
                    } else {
                        0.0
                    }
                }));
            }
            let texts: Vec<&'static str> = texts.into_iter().take(rows).collect();
            let means: Vec<f32> = E5_SMALL_REQUEST_MEANS
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let mean = |slot: usize| -> Vec<f32> {
                means
                    .get(slot * dims..(slot + 1) * dims)
                    .filter(|m| m.iter().all(|x| x.is_finite()))
                    .map(<[f32]>::to_vec)
                    .unwrap_or_default()
            };
            Self {
                encoder_id: E5_SMALL_ID,
                dims,
                request_means: [mean(0), mean(1)],
                scripts: texts.iter().map(|t| Script::of(t)).collect(),
                texts,
                vectors,
            }
        })
    }

    /// The id of the encoder the vectors come from.
    pub fn encoder_id(&self) -> &str {
        self.encoder_id
    }

    /// The requests, in the bank's order.
    pub fn texts(&self) -> &[&'static str] {
        &self.texts
    }

    /// The width of the vectors.
    pub fn dimensions(&self) -> usize {
        self.dims
    }

    /// The largest cosine of the (unit) `query` with the bank's requests in `script`; `None`
    /// when the widths differ or the bank has none in that script.
    /// The mean of the bank's requests in `script`, encoded as requests: where the encoder puts
    /// a request in that language before what it asks. `None` when not known or of another
    /// width than `dims`.
    pub(crate) fn request_mean(&self, script: Script, dims: usize) -> Option<&[f32]> {
        let m = &self.request_means[script.slot()];
        (m.len() == dims && dims > 0).then_some(m.as_slice())
    }

    pub(crate) fn nearest_in(&self, query: &[f32], script: Script) -> Option<f32> {
        if query.len() != self.dims || self.dims == 0 {
            return None;
        }
        self.vectors
            .chunks_exact(self.dims)
            .zip(&self.scripts)
            .filter(|(_, s)| **s == script)
            .map(|(row, _)| row.iter().zip(query).map(|(a, b)| a * b).sum::<f32>())
            .fold(None, |m: Option<f32>, c| Some(m.map_or(c, |m| m.max(c))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_e5_bank_holds_one_unit_vector_per_request_in_both_scripts() {
        let bank = UnservedIntents::e5_small();
        assert_eq!(bank.texts().len(), 70);
        assert_eq!(bank.vectors.len(), 70 * 384);
        for row in bank.vectors.chunks_exact(384) {
            let norm: f32 = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-3, "{norm}");
        }
        let zh = bank.scripts.iter().filter(|s| **s == Script::Cjk).count();
        assert_eq!(zh, 35);
        // A request is nearest to itself.
        let first = bank.vectors[..384].to_vec();
        let near = bank.nearest_in(&first, Script::Latin).unwrap();
        assert!((near - 1.0).abs() < 1e-3);
        // Another width is not compared.
        assert_eq!(bank.nearest_in(&[1.0, 0.0], Script::Latin), None);
        // Both scripts' request means are there, and differ (the language offset).
        let en = bank.request_mean(Script::Latin, 384).unwrap();
        let zh = bank.request_mean(Script::Cjk, 384).unwrap();
        assert!(en.iter().zip(zh).any(|(a, b)| (a - b).abs() > 1e-3));
        assert_eq!(bank.request_mean(Script::Cjk, 2), None);
    }
}
