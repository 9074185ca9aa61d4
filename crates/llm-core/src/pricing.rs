//! What a run cost: token counts ([`Usage`]) priced from a dated table.
//!
//! The built-in table (`data/prices.json` in this crate) holds the providers' published
//! standard prices on the date it names ([`PriceTable::as_of`]). Prices change: override a
//! model with [`PriceTable::with`], or load a table of your own with [`PriceTable::from_json`].

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::Usage;

/// One model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Price {
    /// Input tokens not read from the cache.
    pub input: f64,
    /// Input tokens read from the cache (the input price when absent).
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// Input tokens written to the cache (the input price when absent).
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Output tokens, reasoning included.
    pub output: f64,
}

impl Price {
    /// Input and output prices per million tokens; cache reads and writes at the input price.
    pub fn new(input: f64, output: f64) -> Self {
        Self {
            input,
            cached_input: None,
            cache_write: None,
            output,
        }
    }
    /// With a price for cache reads.
    pub fn with_cached_input(mut self, price: f64) -> Self {
        self.cached_input = Some(price);
        self
    }
    /// With a price for cache writes.
    pub fn with_cache_write(mut self, price: f64) -> Self {
        self.cache_write = Some(price);
        self
    }
    /// What `usage` costs at these prices, in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let read = usage.cache_read_tokens.min(usage.prompt_tokens);
        let write = usage.cache_write_tokens.min(usage.prompt_tokens - read);
        let fresh = usage.prompt_tokens - read - write;
        let per = |tokens: u32, price: f64| f64::from(tokens) * price / 1e6;
        per(fresh, self.input)
            + per(read, self.cached_input.unwrap_or(self.input))
            + per(write, self.cache_write.unwrap_or(self.input))
            + per(usage.completion_tokens, self.output)
    }
}

/// Why a price table could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "the price table is not valid: {0}. It is JSON: {{\"as_of\": \"YYYY-MM-DD\", \"models\": {{\"name\": {{\"input\": 1.0, \"output\": 2.0}}}}}}"
)]
pub struct PriceError(String);

/// Prices by model name, matched by the longest prefix (`gpt-4o-mini-2024-07-18` is priced as
/// `gpt-4o-mini`, not `gpt-4o`).
///
/// ```
/// use toolwright_core::{Price, PriceTable, Usage};
/// let table = PriceTable::builtin().clone().with("my-model", Price::new(1.0, 2.0));
/// let usage = Usage { prompt_tokens: 1_000_000, completion_tokens: 500_000, total_tokens: 1_500_000, ..Usage::default() };
/// assert_eq!(table.cost("my-model-v2", &usage), Some(2.0));
/// assert!(table.cost("gpt-4o-mini-2024-07-18", &usage).is_some());
/// assert_eq!(table.cost("unknown", &usage), None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    as_of: String,
    models: BTreeMap<String, Price>,
}

impl PriceTable {
    /// The built-in table: the providers' published standard prices on [`PriceTable::as_of`].
    pub fn builtin() -> &'static PriceTable {
        static TABLE: OnceLock<PriceTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            // The file is part of this crate and checked by a test: it always parses.
            Self::from_json(include_str!("../data/prices.json")).unwrap_or_else(|_| Self {
                as_of: String::new(),
                models: BTreeMap::new(),
            })
        })
    }

    /// A table from JSON: `{"as_of": "2025-11-24", "models": {"name": {"input": …, "output": …,
    /// "cached_input": …, "cache_write": …}}}`.
    pub fn from_json(json: &str) -> Result<Self, PriceError> {
        let table: Self = serde_json::from_str(json).map_err(|e| PriceError(e.to_string()))?;
        for (name, p) in &table.models {
            let all = [Some(p.input), p.cached_input, p.cache_write, Some(p.output)];
            if all.into_iter().flatten().any(|v| !v.is_finite() || v < 0.0) {
                return Err(PriceError(format!(
                    "{name}: a price is negative or not a number"
                )));
            }
        }
        Ok(table)
    }

    /// The date the prices were taken on.
    pub fn as_of(&self) -> &str {
        &self.as_of
    }

    /// The same table with `model`'s price set (a new model, or a price that changed).
    pub fn with(mut self, model: impl Into<String>, price: Price) -> Self {
        self.models.insert(model.into(), price);
        self
    }

    /// The price of `model`: the entry whose name is the longest prefix of it.
    pub fn price(&self, model: &str) -> Option<&Price> {
        // Strip a provider path (`models/gemini-2.5-pro`, `openai/gpt-4o`).
        let model = model.rsplit('/').next().unwrap_or(model);
        self.models
            .range(..=model.to_owned())
            .rev()
            .take_while(|(name, _)| model.as_bytes().first() == name.as_bytes().first())
            .find(|(name, _)| model.starts_with(name.as_str()))
            .map(|(_, p)| p)
    }

    /// What `usage` of `model` costs, in US dollars; `None` when the table has no price for it.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|p| p.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_table_parses_and_is_dated() {
        let t = PriceTable::from_json(include_str!("../data/prices.json")).unwrap();
        assert!(t.as_of().len() == 10 && t.models.len() > 10);
        assert_eq!(PriceTable::builtin(), &t);
    }

    #[test]
    fn the_longest_prefix_prices_a_model() {
        let t = PriceTable::builtin();
        assert_eq!(t.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(t.price("gpt-4o-2024-08-06").unwrap().input, 2.50);
        assert_eq!(t.price("models/gemini-2.5-flash-lite").unwrap().input, 0.10);
        assert_eq!(t.price("claude-sonnet-4-5-20250929").unwrap().input, 3.0);
        assert!(t.price("llama3.2").is_none());
    }

    #[test]
    fn cached_and_written_tokens_are_priced_apart() {
        let p = Price::new(3.0, 15.0)
            .with_cached_input(0.3)
            .with_cache_write(3.75);
        let u = Usage {
            prompt_tokens: 1_000_000,
            cache_read_tokens: 600_000,
            cache_write_tokens: 300_000,
            completion_tokens: 100_000,
            ..Usage::default()
        };
        let want = 0.1 * 3.0 + 0.6 * 0.3 + 0.3 * 3.75 + 0.1 * 15.0;
        assert!((p.cost(&u) - want).abs() < 1e-9);
    }

    #[test]
    fn a_table_with_a_negative_price_is_refused() {
        let bad = r#"{"as_of": "2025-01-01", "models": {"m": {"input": -1, "output": 1}}}"#;
        assert!(PriceTable::from_json(bad).is_err());
        assert!(PriceTable::from_json("<html>").is_err());
    }
}
