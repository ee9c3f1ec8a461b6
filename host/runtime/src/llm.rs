//! The `llm` import: plugins granted `llm` ask the host for an auxiliary model completion (a
//! summary, a recall query). The runtime checks the request and counts the calls; the model is
//! the embedder's business, behind [`LlmBackend`] (the CLI implements it over the agent's model
//! chain). The plugin never sees a key or an address.
//!
//! ```
//! use talaria_runtime::{BoxFuture, LlmBackend, LlmCompletion, LlmRequest};
//! struct Canned;
//! impl LlmBackend for Canned {
//!     fn complete<'a>(&'a self, _plugin: &'a str, request: LlmRequest) -> BoxFuture<'a, Result<LlmCompletion, String>> {
//!         Box::pin(async move {
//!             Ok(LlmCompletion { text: format!("{} messages", request.messages.len()), model: "canned".into(), input_tokens: 1, output_tokens: 1 })
//!         })
//!     }
//! }
//! # let _: std::sync::Arc<dyn LlmBackend> = std::sync::Arc::new(Canned);
//! ```

use std::future::Future;
use std::pin::Pin;

use talaria_protocol::Role;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Longest answer a plugin may ask for, in tokens.
pub const MAX_LLM_TOKENS: u32 = 16_384;
/// Completions one plugin call (one hook event, one compression, ...) may ask for.
pub const MAX_LLM_CALLS: u32 = 8;

/// Answers plugins' completion requests.
pub trait LlmBackend: Send + Sync {
    /// Complete `request` for `plugin`. `Err` is a sentence saying why every model failed.
    fn complete<'a>(&'a self, plugin: &'a str, request: LlmRequest) -> BoxFuture<'a, Result<LlmCompletion, String>>;
}

/// A checked request: at least one message, `system` only first, no `tool` messages, and
/// `max_tokens` within [`MAX_LLM_TOKENS`].
#[derive(Debug, Clone, PartialEq)]
pub struct LlmRequest {
    /// What the completion is for, e.g. `compression`; for logs and usage.
    pub purpose: String,
    pub messages: Vec<(Role, String)>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmCompletion {
    pub text: String,
    /// The model that answered.
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why a plugin's completion request is malformed ([`LlmRequest::checked`]); the message is a
/// sentence for the plugin.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("a completion request needs at least one message")]
    NoMessages,
    /// Message `index` has the `tool` role.
    #[error("message {index}: `tool` messages cannot be sent; use system, user and assistant")]
    ToolMessage { index: usize },
    /// Message `index` (not the first) has the `system` role.
    #[error("message {index}: a system message may only come first")]
    LateSystem { index: usize },
    /// The temperature is not a number from 0 to 2.
    #[error("temperature {temperature} is not between 0 and 2")]
    Temperature { temperature: f32 },
}

impl LlmRequest {
    /// Check a request as a plugin made it and cap its `max_tokens`.
    ///
    /// # Errors
    /// Why the request is malformed, as a [`RequestError`].
    pub fn checked(mut self) -> Result<Self, RequestError> {
        if self.messages.is_empty() {
            return Err(RequestError::NoMessages);
        }
        for (index, (role, _)) in self.messages.iter().enumerate() {
            match role {
                Role::Tool => return Err(RequestError::ToolMessage { index }),
                Role::System if index > 0 => return Err(RequestError::LateSystem { index }),
                Role::System | Role::User | Role::Assistant => {}
            }
        }
        if let Some(temperature) = self.temperature
            && !(temperature.is_finite() && (0.0..=2.0).contains(&temperature))
        {
            return Err(RequestError::Temperature { temperature });
        }
        self.max_tokens = Some(self.max_tokens.unwrap_or(MAX_LLM_TOKENS).clamp(1, MAX_LLM_TOKENS));
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(messages: &[(Role, &str)]) -> LlmRequest {
        LlmRequest {
            purpose: "test".into(),
            messages: messages.iter().map(|(r, t)| (*r, t.to_string())).collect(),
            max_tokens: Some(1_000_000),
            temperature: None,
        }
    }

    #[test]
    fn requests_are_checked_and_capped() {
        let ok = req(&[(Role::System, "be brief"), (Role::User, "hi")]).checked().expect("valid");
        assert_eq!(ok.max_tokens, Some(MAX_LLM_TOKENS));
        let empty = req(&[]).checked().expect_err("empty");
        assert_eq!(empty, RequestError::NoMessages);
        assert_eq!(empty.to_string(), "a completion request needs at least one message");
        let tool = req(&[(Role::User, "a"), (Role::Tool, "b")]).checked().expect_err("tool");
        assert_eq!(tool, RequestError::ToolMessage { index: 1 });
        assert_eq!(tool.to_string(), "message 1: `tool` messages cannot be sent; use system, user and assistant");
        let system = req(&[(Role::User, "a"), (Role::System, "b")]).checked().expect_err("system");
        assert_eq!(system, RequestError::LateSystem { index: 1 });
        assert_eq!(system.to_string(), "message 1: a system message may only come first");
        let mut hot = req(&[(Role::User, "a")]);
        hot.temperature = Some(f32::NAN);
        let hot = hot.checked().expect_err("nan");
        assert!(matches!(hot, RequestError::Temperature { temperature } if temperature.is_nan()), "{hot:?}");
        assert!(hot.to_string().contains("not between 0 and 2"), "{hot}");
    }
}
