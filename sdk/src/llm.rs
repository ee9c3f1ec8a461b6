//! Auxiliary model completions (needs the `llm` capability): summaries, recall, classification.
//!
//! The host answers with the operator's `[auxiliary]` model, or the main model when none is set.
//! The plugin never sees a key or an address, and the call's time counts against the plugin's
//! deadline, so ask for short answers.
//!
//! ```ignore
//! use talaria_sdk::llm::{self, Request};
//!
//! let request = Request::new("compression")
//!     .system("Summarise the conversation for the assistant that continues it.")
//!     .user(transcript)
//!     .max_tokens(800);
//! let summary = llm::complete(&request)?.text;
//! ```

use std::fmt;

use crate::__bindings::talaria::plugin::llm as host;
use crate::message::Role;

/// A completion request being built.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// What the completion is for, e.g. `compression`; shown in the host's logs and usage.
    pub purpose: String,
    /// `System` (first only), `User` or `Assistant`; the host refuses `Tool`.
    pub messages: Vec<(Role, String)>,
    /// Longest answer wanted, in tokens; the host caps it.
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

impl Request {
    /// An empty request for `purpose`.
    pub fn new(purpose: impl Into<String>) -> Self {
        Self { purpose: purpose.into(), messages: Vec::new(), max_tokens: None, temperature: None }
    }

    /// Add a system message (put it first).
    pub fn system(self, text: impl Into<String>) -> Self {
        self.message(Role::System, text)
    }

    /// Add a user message.
    pub fn user(self, text: impl Into<String>) -> Self {
        self.message(Role::User, text)
    }

    /// Add an assistant message (an example answer, or an earlier turn).
    pub fn assistant(self, text: impl Into<String>) -> Self {
        self.message(Role::Assistant, text)
    }

    /// The longest answer wanted, in tokens.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sampling temperature.
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }

    fn message(mut self, role: Role, text: impl Into<String>) -> Self {
        self.messages.push((role, text.into()));
        self
    }

    fn to_wit(&self) -> host::Request {
        host::Request {
            purpose: self.purpose.clone(),
            messages: self
                .messages
                .iter()
                .map(|(role, content)| host::LlmMessage { role: role.to_wit(), content: content.clone() })
                .collect(),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
        }
    }
}

/// A model's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    /// The model that answered.
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why a completion failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LlmError {
    /// The `llm` capability is not granted, or the plugin used up its calls; the text says which.
    Denied(String),
    /// The request was malformed (a tool message, no messages, ...).
    Invalid(String),
    /// Every configured model failed (after retries); the text says why.
    Failed(String),
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied(m) => write!(f, "model call refused: {m}"),
            Self::Invalid(m) => write!(f, "invalid model request: {m}"),
            Self::Failed(m) => write!(f, "model call failed: {m}"),
        }
    }
}

impl std::error::Error for LlmError {}

/// Ask the auxiliary model and wait for the whole answer.
///
/// # Errors
///
/// [`LlmError::Denied`] without the `llm` grant, [`LlmError::Invalid`] for a request the host
/// refuses, [`LlmError::Failed`] when no model answered.
pub fn complete(request: &Request) -> Result<Completion, LlmError> {
    match host::complete(&request.to_wit()) {
        Ok(c) => Ok(Completion {
            text: c.text,
            model: c.model,
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
        }),
        Err(host::LlmError::Denied(m)) => Err(LlmError::Denied(m)),
        Err(host::LlmError::Invalid(m)) => Err(LlmError::Invalid(m)),
        Err(host::LlmError::Failed(m)) => Err(LlmError::Failed(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_keeps_order_and_options() {
        let r = Request::new("compression").system("s").user("u").assistant("a").max_tokens(100).temperature(0.2);
        assert_eq!(r.purpose, "compression");
        assert_eq!(
            r.messages,
            vec![(Role::System, "s".to_string()), (Role::User, "u".to_string()), (Role::Assistant, "a".to_string())]
        );
        let w = r.to_wit();
        assert_eq!((w.max_tokens, w.temperature, w.messages.len()), (Some(100), Some(0.2), 3));
        assert!(matches!(w.messages[0].role, crate::__bindings::talaria::plugin::types::Role::System));
    }

    #[test]
    fn errors_read_as_sentences() {
        assert_eq!(LlmError::Denied("no grant".into()).to_string(), "model call refused: no grant");
    }
}
