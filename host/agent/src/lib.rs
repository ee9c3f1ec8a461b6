//! The agent: the loop that talks to a model and runs tools, and everything it needs.
//!
//! - [`model`]: provider adapters (chat completions, Anthropic Messages, Responses), retries, fallback.

pub mod model;
