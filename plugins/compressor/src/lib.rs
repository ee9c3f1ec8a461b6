//! The bundled context engine: Hermes' default compressor as a talaria plugin.
//!
//! When the prompt reaches the threshold (half the window by default, never below 64K tokens
//! unless that is above 85% of the window), the host asks for a rewrite: the first messages and
//! a recent tail stay verbatim, large old tool results are cleared, and everything between is
//! replaced by one summary from the auxiliary model, under fixed headings (Goal, Constraints &
//! Preferences, Progress, Key Decisions, Relevant Files, Next Steps, Critical Context). Later
//! passes update that summary. When the model fails, a fixed fallback summary keeps compression
//! working, and the model is left alone for a while (60/300/900 s).
//!
//! Modules: [`config`] (settings), [`plan`] (cut points, token estimates), [`summary`] (prompt,
//! fallback, the summary message), [`sanitize`] (conversation validity), [`backoff`], and
//! [`engine`] (the steps, over a host seam).

pub mod backoff;
pub mod config;
pub mod engine;
pub mod plan;
pub mod sanitize;
mod shim;
pub mod summary;

#[cfg(test)]
mod tests;
