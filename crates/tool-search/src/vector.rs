//! The vectors handed in: their bounds, why they are refused, and their normalisation.

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
    /// [`SearchIndex::search_hybrid`](crate::SearchIndex::search_hybrid) or [`SearchIndex::fit`](crate::SearchIndex::fit) on an index without vectors.
    #[error(
        "this index has no tool vectors: build it with SearchIndex::with_vectors, or use SearchIndex::search (BM25 alone)"
    )]
    NoVectors,
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
