//! # context-engine — Stage 1
//!
//! Sessions of chat messages (C1), a system prompt composed of a base prompt and per-turn
//! sections (C2), requests built inside a token budget with a real tokenizer where one is known
//! (C3), and durable session stores (C4): [`MemoryStore`], `SqliteStore` (cargo feature
//! `sqlite`, on by default: it compiles SQLite from C) and, with the cargo feature `postgres`,
//! `PostgresStore` for several processes sharing one PostgreSQL database (what each promises:
//! `docs/stores.md`).
//!
//! Token counts: `TokenCounter` and `EstimateCounter` (from `llm-core`, re-exported here)
//! always; the exact tokenizer for OpenAI-family models, `TiktokenCounter`, and
//! `counter_for_model` (it, or the estimate for other models) with the cargo feature
//! `tiktoken`, on by default (its BPE tables are a few MB of the binary: a crate that needs only
//! the estimate and the in-memory store can leave it out with `default-features = false`).
//!
//! Messages are [`toolwright_core::Message`]s. A tool loop needs three things from this crate:
//!
//! 1. load a session's history: [`SessionStore::load`] (or [`SessionStore::load_or_create`]);
//! 2. append a finished round atomically: [`SessionStore::append`];
//! 3. build the messages of one request: [`ContextBuilder::build`] on a [`History`] — or, to
//!    summarise older rounds with a model instead of dropping them, [`Compactor::build`].
//!
//! ```
//! # #[cfg(all(feature = "sqlite", feature = "tiktoken"))]
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use toolwright_context_engine::{counter_for_model, ContextBuilder, History, SessionStore, SqliteStore};
//! use toolwright_core::Message;
//!
//! let dir = tempfile::tempdir()?;
//! let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(dir.path().join("s.db"))?);
//! let session = store.load_or_create("user-1").await?;
//!
//! let counter = counter_for_model("gpt-4o-mini");
//! let mut history = History::from_messages(counter.clone(), session.messages);
//! let round = [Message::user("What is 2 + 2?")];
//! store.append("user-1", &round).await?;          // durable before it is used
//! history.extend(round);
//!
//! let ctx = ContextBuilder::new("You are terse.")
//!     .section("tools", "No tools are available.")
//!     .with_counter(counter)
//!     .with_budget(8_000)
//!     .build(&history)?;
//! assert_eq!(ctx.messages.len(), 2);                  // system + user
//! # Ok(()) }
//! # #[cfg(not(all(feature = "sqlite", feature = "tiktoken")))] fn main() {}
//! ```

mod builder;
mod compaction;
mod history;
mod store;
mod summary;
#[cfg(feature = "tiktoken")]
mod tokens;

pub use builder::{
    BuiltContext, ContextBuilder, ContextError, DropReason, Dropped, SUMMARY_HEADING,
};
pub use compaction::{Compacted, CompactionFallback, Compactor};
pub use history::{History, Session};
pub use store::{
    ChangeFeed, ChangeSender, MemoryStore, SessionStore, StateChange, StoreChange, StoreError,
};
#[cfg(feature = "sqlite")]
pub use store::{Durability, SqliteStore};
#[cfg(feature = "postgres")]
pub use store::{POSTGRES_SCHEMA_VERSION, PostgresStore};
pub use summary::{SUMMARY_STATE_KEY, Summary};
#[cfg(feature = "tiktoken")]
pub use tokens::{TiktokenCounter, TokenizerError, counter_for_model};
