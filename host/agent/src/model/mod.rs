//! Talking to models: one internal request and reply shape, three wire formats behind it.
//!
//! - [`Provider`]: a resolved endpoint (preset or custom): wire format, base URL, model, key.
//! - [`Client::complete`]: one attempt at one provider, streaming [`Delta`]s as they arrive.
//! - [`Chain`]: retries with jittered backoff, then the fallback providers in order.
//!
//! Wire formats: [`ApiMode::ChatCompletions`] (any OpenAI-compatible endpoint), [`ApiMode::AnthropicMessages`]
//! and [`ApiMode::Responses`] (OpenAI Responses). All convert to and from [`talaria_protocol::Message`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), talaria_agent::model::ModelError> {
//! use talaria_agent::model::{Client, ModelRequest, Provider};
//! use talaria_protocol::Message;
//! let provider = Provider::preset("ollama", "llama3.2", None).expect("known preset");
//! let messages = [Message::user("hello")];
//! let request = ModelRequest { system: "You are helpful.", messages: &messages, tools: &[], stream: true };
//! let reply = Client::new().complete(&provider, &request, &|delta| eprint!("{delta:?}")).await?;
//! println!("{}", reply.message.content());
//! # Ok(()) }
//! ```

use std::time::Duration;

use talaria_protocol::{Message, ToolSpec, Usage};

mod anthropic;
mod chain;
mod chat;
mod client;
mod provider;
mod reply;
mod responses;
mod sse;
#[cfg(test)]
mod tests;

pub use chain::{Chain, ChainState};
pub use provider::{ApiMode, PRESETS, Preset, Provider, ProviderError, ProviderSpec};

/// What one model call sends. `system` goes wherever the wire format puts it.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    /// Stream the answer (deltas arrive through the callback) or take it whole.
    pub stream: bool,
}

/// A piece of a streamed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    Text(String),
    Reasoning(String),
}

/// A complete answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// Always [`Message::Assistant`].
    pub message: Message,
    pub usage: Usage,
    /// The provider's stop reason, as it sent it (`stop`, `tool_calls`, `end_turn`, `length`, ...).
    pub finish_reason: Option<String>,
    /// The model that answered, as the provider named it.
    pub model: String,
}

impl ModelReply {
    /// Whether the answer was cut by the output-token limit (`length` in chat completions,
    /// `max_tokens` in Anthropic Messages, `max_output_tokens` in Responses).
    pub fn truncated(&self) -> bool {
        matches!(self.finish_reason.as_deref(), Some("length" | "max_tokens" | "max_output_tokens"))
    }
}

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The provider answered with an HTTP error.
    #[error("{provider} answered HTTP {status}: {message}")]
    Http { provider: String, status: u16, message: String, retry_after: Option<Duration> },
    /// The provider could not be reached, or the connection broke.
    #[error("cannot reach {provider}: {message}")]
    Network { provider: String, message: String },
    #[error("{provider} did not answer within {secs}s")]
    Timeout { provider: String, secs: u64 },
    /// The answer could not be understood.
    #[error("{provider} sent a reply talaria cannot read: {message}")]
    Protocol { provider: String, message: String },
    /// No text and no tool calls.
    #[error("{provider} sent an empty reply")]
    Empty { provider: String },
    /// The provider is not usable as configured (no key, bad URL).
    #[error("{0}")]
    Config(String),
}

impl ModelError {
    /// Worth retrying on the same provider: 408, 409, 425, 429, 5xx, network, timeout, empty.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Http { status, .. } => matches!(status, 408 | 409 | 425 | 429) || *status >= 500,
            Self::Network { .. } | Self::Timeout { .. } | Self::Empty { .. } => true,
            Self::Protocol { .. } | Self::Config(_) => false,
        }
    }

    /// Move to the next provider at once, without retrying: 401, 403, 404, bad config.
    pub fn is_fatal_for_provider(&self) -> bool {
        match self {
            Self::Http { status, .. } => matches!(status, 401 | 403 | 404),
            Self::Config(_) => true,
            Self::Network { .. } | Self::Timeout { .. } | Self::Protocol { .. } | Self::Empty { .. } => false,
        }
    }
}

/// The HTTP client every model call shares (one connection pool).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}
