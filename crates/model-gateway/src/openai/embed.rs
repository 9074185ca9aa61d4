//! Texts → vectors through an OpenAI-compatible `POST {base}/embeddings`: OpenAI, Ollama,
//! llama.cpp's server (`--embeddings`), vLLM, DashScope — the dense half of tool search when a
//! user prefers a hosted or served encoder to the embedded one.

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use serde_json::{Value, json};
use toolwright_core::{EmbedKind, Embedder};

use super::{OpenAiConfig, client, map_error};
use crate::ModelError;

/// An [`Embedder`] over an OpenAI-compatible embeddings endpoint, with the chat backend's
/// retries (429, 5xx, connection errors), timeouts and typed errors.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolwright_core::ModelError> {
/// use toolwright_core::{EmbedKind, Embedder};
/// use toolwright_model_gateway::{OpenAiConfig, OpenAiEmbedder};
/// // Ollama serving an e5 model: it needs e5's prefixes; the width is asked of the server once.
/// let cfg = OpenAiConfig::new("jeffh/intfloat-multilingual-e5-small:f16")
///     .with_base_url("http://127.0.0.1:11434/v1");
/// let e = OpenAiEmbedder::detect(cfg).await?.with_prefixes("query: ", "passage: ");
/// let v = e.embed(&["切换到分支 main".to_owned()], EmbedKind::Query).await?;
/// assert_eq!(v[0].len(), e.dimensions());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OpenAiEmbedder {
    client: Client<OpenAIConfig>,
    config: OpenAiConfig,
    id: String,
    dimensions: usize,
    query_prefix: String,
    document_prefix: String,
    batch: usize,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("id", &self.id)
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

/// Texts per request when not set: within every server's limit we know of (OpenAI takes 2,048).
const DEFAULT_BATCH: usize = 64;

impl OpenAiEmbedder {
    /// An embedder of `config.model` whose vectors are `dimensions` wide (every answer is
    /// checked against it).
    pub fn new(config: OpenAiConfig, dimensions: usize) -> Result<Self, ModelError> {
        if config.model.trim().is_empty() {
            return Err(ModelError::Config(
                "the embedding model's name is empty: OpenAiConfig::new(model)".into(),
            ));
        }
        if dimensions == 0 {
            return Err(ModelError::Config(
                "an embedding is at least one number wide; use OpenAiEmbedder::detect to ask the server".into(),
            ));
        }
        Ok(Self {
            client: client(&config)?,
            id: format!("openai-compatible:{}@{}", config.model, config.base_url),
            config,
            dimensions,
            query_prefix: String::new(),
            document_prefix: String::new(),
            batch: DEFAULT_BATCH,
        })
    }

    /// An embedder whose width is asked of the server (one short text embedded now).
    pub async fn detect(config: OpenAiConfig) -> Result<Self, ModelError> {
        let mut e = Self::new(config, 1)?;
        let v = e.request(&["dimensions".to_owned()]).await?;
        e.dimensions = v.first().map_or(0, Vec::len);
        if e.dimensions == 0 {
            return Err(ModelError::malformed(
                "embedding",
                "the server answered an empty vector",
                "",
            ));
        }
        Ok(e)
    }

    /// Text put before every query and every document: what retrieval models trained with
    /// prefixes expect (e5: `"query: "`, `"passage: "`; bge: an instruction before queries).
    pub fn with_prefixes(mut self, query: impl Into<String>, document: impl Into<String>) -> Self {
        self.query_prefix = query.into();
        self.document_prefix = document.into();
        self
    }

    /// Texts per request (default 64); more texts are sent in several requests.
    pub fn with_batch_size(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// One request: the vectors of `input`, in order, each checked.
    async fn request(&self, input: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let body = json!({
            "model": self.config.model,
            "input": input,
            "encoding_format": "float",
        });
        let embeddings = self.client.embeddings();
        let call = embeddings.create_byot::<Value, Value>(body);
        let value = tokio::time::timeout(self.config.deadline, call)
            .await
            .map_err(|_| ModelError::Timeout(self.config.deadline))?
            .map_err(|e| map_error(&self.config, e))?;
        parse(
            &value,
            input.len(),
            (self.dimensions > 1).then_some(self.dimensions),
        )
    }
}

/// The `data` of an embeddings response, ordered by `index`: `n` vectors, each `width` wide
/// when given, all of one width.
fn parse(value: &Value, n: usize, width: Option<usize>) -> Result<Vec<Vec<f32>>, ModelError> {
    let raw = || value.to_string();
    let bad = |detail: String| ModelError::malformed("embedding response", detail, &raw());
    let data = value["data"]
        .as_array()
        .ok_or_else(|| bad("no `data` array".into()))?;
    if data.len() != n {
        return Err(bad(format!("{} vectors for {n} texts", data.len())));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for (i, item) in data.iter().enumerate() {
        // Servers answer in order; `index` says so when present.
        let at = item["index"].as_u64().map_or(i, |x| x as usize);
        let v: Vec<f32> = item["embedding"]
            .as_array()
            .ok_or_else(|| {
                bad(format!(
                    "item {i} has no `embedding` array (base64 is not asked for)"
                ))
            })?
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(format!("item {i} holds a value that is not a number")))?;
        let want = width.or_else(|| out.iter().flatten().next().map(Vec::len));
        if v.is_empty() || want.is_some_and(|w| w != v.len()) {
            return Err(bad(format!(
                "item {i} is {} wide, expected {}",
                v.len(),
                want.unwrap_or(1)
            )));
        }
        match out.get_mut(at) {
            Some(slot @ None) => *slot = Some(v),
            _ => return Err(bad(format!("index {at} is out of range or repeated"))),
        }
    }
    Ok(out.into_iter().flatten().collect())
}

#[async_trait::async_trait]
impl Embedder for OpenAiEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
        let prefix = match kind {
            EmbedKind::Query => &self.query_prefix,
            EmbedKind::Document => &self.document_prefix,
        };
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch) {
            let input: Vec<String> = chunk.iter().map(|t| format!("{prefix}{t}")).collect();
            out.extend(self.request(&input).await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_response_is_ordered_by_index_and_checked() {
        let v = json!({"data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1.0, 0.0]},
        ]});
        assert_eq!(
            parse(&v, 2, Some(2)).unwrap(),
            [vec![1.0, 0.0], vec![0.0, 1.0]]
        );
        for (bad, n, w) in [
            (json!({"data": [{"index": 0, "embedding": [1.0]}]}), 2, None),
            (
                json!({"data": [{"index": 0, "embedding": [1.0, 2.0]}]}),
                1,
                Some(3),
            ),
            (
                json!({"data": [{"index": 0, "embedding": "AAAA"}]}),
                1,
                None,
            ),
            (
                json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]}),
                2,
                None,
            ),
            (
                json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [2.0, 3.0]}]}),
                2,
                None,
            ),
            (json!({"data": [{"index": 0, "embedding": []}]}), 1, None),
            (json!({"error": "nope"}), 1, None),
        ] {
            assert!(
                matches!(parse(&bad, n, w), Err(ModelError::Malformed { .. })),
                "{bad}"
            );
        }
    }
}
