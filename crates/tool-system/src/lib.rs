//! # tool-system — Stage 3
//!
//! Tools ([`Tool`]), sources of tools ([`ToolProvider`]), and (being built) the registry,
//! dispatcher, call protocols and the tool loop.

mod tool;

pub use async_trait::async_trait;
pub use tool::{Tool, ToolContext, ToolError, ToolErrorKind, ToolProvider};
