//! The embedding seam: texts in, vectors out. Tool search's dense half ranks tools by the
//! cosine of these vectors; an embedded encoder (`local-model`'s) or an OpenAI-compatible
//! `/v1/embeddings` endpoint (`model-gateway`'s) implement it, and so can your own.

use crate::{ModelError, async_trait};

/// What a text is to the encoder. Retrieval models trained on pairs (e5, bge, gte…) encode a
/// search request and the documents searched with different prefixes or instructions; an
/// encoder without that distinction ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmbedKind {
    /// A request to search with (e5: `"query: "`).
    Query,
    /// A document to be found (e5: `"passage: "`): a tool's name, description and parameters.
    Document,
}

/// Texts → vectors, one per text, in order, each [`Embedder::dimensions`] wide. The vectors
/// need not be normalised; callers compare them by cosine.
///
/// ```
/// use toolwright_core::{async_trait, EmbedKind, Embedder, ModelError};
/// /// Counts of a few letters: a toy, but a whole encoder.
/// struct Letters;
/// #[async_trait]
/// impl Embedder for Letters {
///     fn id(&self) -> &str { "letters-v1" }
///     fn dimensions(&self) -> usize { 3 }
///     async fn embed(&self, texts: &[String], _: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
///         Ok(texts.iter().map(|t| ['a', 'e', 'o'].iter()
///             .map(|c| t.matches(*c).count() as f32).collect()).collect())
///     }
/// }
/// # futures::executor::block_on(async {
/// let v = Letters.embed(&["banana".into()], EmbedKind::Query).await.unwrap();
/// assert_eq!(v, vec![vec![3.0, 0.0, 0.0]]);
/// # });
/// ```
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Names the encoder and its weights (e.g. `"multilingual-e5-small-q4@1571fc98"`, or the
    /// endpoint's model name). Cached vectors are keyed by it: change it when the vectors
    /// would change.
    fn id(&self) -> &str;

    /// The width of every vector.
    fn dimensions(&self) -> usize;

    /// One vector per text, in order. An empty `texts` gives an empty answer.
    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError>;
}
