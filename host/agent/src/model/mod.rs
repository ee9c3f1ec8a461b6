//! Talking to models: one internal request and reply shape, three wire formats behind it.
//!
//! - [`Provider`]: a resolved endpoint (preset or custom): wire format, base URL, model, key.
//! - [`Client::complete`]: one attempt at one provider, streaming [`Delta`]s as they arrive.
//! - [`Chain`]: retries with jittered backoff, then the fallback providers in order.
//! - [`ModelError`]: what went wrong, precisely enough to decide whether a retry can help and
//!   to tell the user which URL did what.
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
pub(crate) use reply::new_call_id;
mod responses;
mod sse;
#[cfg(test)]
mod tests;
mod transport;

pub use chain::{Chain, ChainState};
pub use client::http_client;
pub use provider::{
    ApiMode, PRESETS, Preset, Provider, ProviderError, ProviderSpec, TimeoutPhase, Timeouts, ToolChoice,
    WHOLE_REPLY_MAX_TOKENS, takes_images,
};

/// What one model call sends. `system` goes wherever the wire format puts it.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [std::sync::Arc<ToolSpec>],
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
    /// As the provider reported it, or estimated (and marked so) when it reported none.
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
        reply::is_truncation(self.finish_reason.as_deref())
    }
}

/// Why a model call failed. Every message names the URL that was tried and says what
/// happened there: no connection, a TLS failure, an HTTP status, a reply that is not what the
/// wire format promises (quoted), a stream cut before its end, or a limit that ran out (named
/// by its configuration key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// No connection: the name does not resolve, nothing listens, the network is unreachable.
    #[error("cannot connect to {url}: {message}")]
    Connect { provider: String, url: String, message: String },
    /// The TLS handshake failed (a certificate the system does not trust, a server that does
    /// not speak TLS on that port, ...).
    #[error("TLS handshake with {url} failed: {message}")]
    Tls { provider: String, url: String, message: String },
    /// The provider answered with an HTTP error.
    #[error("{url} answered HTTP {status}: {message}{}", http_hint(*status))]
    Http { provider: String, url: String, status: u16, message: String, retry_after: Option<Duration> },
    /// A limit of [`Timeouts`] ran out. `partial` is what had arrived of a streamed answer.
    #[error("{}", timeout_message(url, *phase, *limit))]
    Timeout { provider: String, url: String, phase: TimeoutPhase, limit: Duration, partial: String },
    /// The answer is not what the wire format promises (an HTML page, JSON without choices, a
    /// stream that is not server-sent events); the message quotes its first bytes.
    #[error("{url} sent a reply talaria cannot read: {message}")]
    Malformed { provider: String, url: String, message: String },
    /// The streamed answer stopped before its end: the connection broke or the server closed
    /// it early. `partial` is what had arrived; `silent` when no event arrived at all.
    #[error("the reply from {url} was cut off: {message}")]
    Cut { provider: String, url: String, message: String, partial: String, silent: bool },
    /// The connection failed in some other way before an answer arrived.
    #[error("the connection to {url} failed: {message}")]
    Network { provider: String, url: String, message: String },
    /// A complete answer with no text and no tool calls.
    #[error("{url} sent an empty reply: {message}")]
    Empty { provider: String, url: String, message: String },
    /// The provider is not usable as configured (no key, bad URL).
    #[error("{0}")]
    Config(String),
}

/// What to check after a status that means the key was refused (said where the error is shown,
/// not in the shorter notice of a fallback).
fn http_hint(status: u16) -> &'static str {
    match status {
        401 => {
            " (the API key was refused or missing: check it in ~/.talaria/.env, under the variable that `key_env` names in [model], or the provider's usual one such as OPENAI_API_KEY)"
        }
        403 => " (the API key is not allowed this: check that its account may use this model)",
        _ => "",
    }
}

fn timeout_message(url: &str, phase: TimeoutPhase, limit: Duration) -> String {
    let limit = provider::seconds(limit);
    let key = phase.key();
    match phase {
        TimeoutPhase::Connect => format!("cannot connect to {url}: no connection within {limit} ({key})"),
        TimeoutPhase::FirstByte => format!("no reply from {url} within {limit} ({key})"),
        TimeoutPhase::Idle => format!("the reply from {url} stopped: nothing arrived for {limit} ({key})"),
        TimeoutPhase::Total => format!("the reply from {url} took longer than {limit} ({key})"),
    }
}

impl ModelError {
    /// Worth retrying on the same provider: 408, 409, 425, 429, 5xx, connection failures,
    /// timeouts, cut streams, empty answers. Never another 4xx, a TLS failure or a reply
    /// talaria cannot read: those come back the same.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Http { status, .. } => matches!(status, 408 | 409 | 425 | 429) || *status >= 500,
            Self::Connect { .. }
            | Self::Network { .. }
            | Self::Timeout { .. }
            | Self::Cut { .. }
            | Self::Empty { .. } => true,
            Self::Tls { .. } | Self::Malformed { .. } | Self::Config(_) => false,
        }
    }

    /// Move to the next provider at once, without retrying: 401, 403, 404, TLS failures, bad
    /// configuration.
    pub fn is_fatal_for_provider(&self) -> bool {
        match self {
            Self::Http { status, .. } => matches!(status, 401 | 403 | 404),
            Self::Tls { .. } | Self::Config(_) => true,
            Self::Connect { .. }
            | Self::Network { .. }
            | Self::Timeout { .. }
            | Self::Malformed { .. }
            | Self::Cut { .. }
            | Self::Empty { .. } => false,
        }
    }

    /// Whether the server had accepted the request when this failure ended it, and may still
    /// be working on it: a first-byte, idle or total limit ran out. Sending it again would
    /// queue the same generation behind the first on a server that does not stop when the
    /// client leaves, so the chain does so only for a provider with
    /// [`Provider::retry_timeouts`]. (A first-byte limit shorter than the connect limit can
    /// also end a connection that was never made; it is counted here too.)
    pub fn may_still_run(&self) -> bool {
        match self {
            Self::Timeout { phase, .. } => match phase {
                TimeoutPhase::FirstByte | TimeoutPhase::Idle | TimeoutPhase::Total => true,
                TimeoutPhase::Connect => false,
            },
            Self::Connect { .. }
            | Self::Tls { .. }
            | Self::Http { .. }
            | Self::Malformed { .. }
            | Self::Cut { .. }
            | Self::Network { .. }
            | Self::Empty { .. }
            | Self::Config(_) => false,
        }
    }

    /// At most this many retries for this kind of failure, below the chain's own limit: a
    /// server that closed a stream without a word, or answered with nothing, usually does the
    /// same again (llama.cpp servers do for requests they cannot serve), so it gets one retry.
    pub fn retry_limit(&self) -> Option<u32> {
        match self {
            Self::Cut { silent: true, .. } | Self::Empty { .. } => Some(1),
            Self::Cut { silent: false, .. }
            | Self::Connect { .. }
            | Self::Tls { .. }
            | Self::Http { .. }
            | Self::Timeout { .. }
            | Self::Malformed { .. }
            | Self::Network { .. }
            | Self::Config(_) => None,
        }
    }

    /// What had arrived of a streamed answer before it failed (shown marked as cut, never
    /// kept); empty for failures before the answer began.
    pub fn partial(&self) -> &str {
        match self {
            Self::Cut { partial, .. } | Self::Timeout { partial, .. } => partial,
            Self::Connect { .. }
            | Self::Tls { .. }
            | Self::Http { .. }
            | Self::Malformed { .. }
            | Self::Network { .. }
            | Self::Empty { .. }
            | Self::Config(_) => "",
        }
    }

    /// This error with `text` as the part of the answer that had arrived.
    pub(crate) fn with_partial(mut self, text: &str) -> Self {
        match &mut self {
            Self::Cut { partial, .. } | Self::Timeout { partial, .. } => *partial = text.to_string(),
            Self::Connect { .. }
            | Self::Tls { .. }
            | Self::Http { .. }
            | Self::Malformed { .. }
            | Self::Network { .. }
            | Self::Empty { .. }
            | Self::Config(_) => {}
        }
        self
    }
}

/// The HTTP client every model call shares (one connection pool per connect limit).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// Clients for providers with another connect limit, by that limit.
    others: std::sync::Arc<std::sync::Mutex<Vec<(Duration, reqwest::Client)>>>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}
