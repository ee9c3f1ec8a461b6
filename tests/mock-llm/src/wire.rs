//! The three wire formats the mock speaks, chosen by the request path.
//!
//! Each format renders one [`Answer`] either as a JSON body or as a list of server-sent events:
//! [`chat`] (OpenAI Chat Completions, `data:` lines ending in `data: [DONE]`), [`anthropic`]
//! (Anthropic Messages, `event:` + `data:` lines) and [`responses`] (OpenAI Responses, `event:` +
//! `data:` lines with a `sequence_number`).

mod anthropic;
mod chat;
mod responses;

use serde_json::{Value, json};

use crate::Mode;
use crate::script::Usage;

/// A model route, and so the wire format of the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/messages`
    AnthropicMessages,
    /// `POST /v1/responses`
    Responses,
}

impl Wire {
    /// The format served at `path`, with or without the `/v1` prefix.
    pub fn from_path(path: &str) -> Option<Self> {
        let path = path.strip_prefix("/v1").unwrap_or(path);
        match path.trim_end_matches('/') {
            "/chat/completions" => Some(Self::ChatCompletions),
            "/messages" => Some(Self::AnthropicMessages),
            "/responses" => Some(Self::Responses),
            _ => None,
        }
    }

    /// The complete (non-streamed) reply body.
    pub(crate) fn json(self, answer: &Answer<'_>) -> Value {
        match self {
            Self::ChatCompletions => chat::json(answer),
            Self::AnthropicMessages => anthropic::json(answer),
            Self::Responses => responses::json(answer),
        }
    }

    /// The streamed reply. `include_usage` is Chat Completions' `stream_options.include_usage`.
    pub(crate) fn sse(self, answer: &Answer<'_>, include_usage: bool, mode: Mode) -> Sse {
        match self {
            Self::ChatCompletions => chat::sse(answer, include_usage, mode),
            Self::AnthropicMessages => anthropic::sse(answer),
            Self::Responses => responses::sse(answer),
        }
    }

    /// The provider-style error body for HTTP `status`.
    pub(crate) fn error_body(self, status: u16, message: &str) -> Value {
        match self {
            Self::ChatCompletions | Self::Responses => {
                let (kind, code) = match status {
                    401 => ("invalid_request_error", json!("invalid_api_key")),
                    403 => ("permission_error", Value::Null),
                    404 => ("invalid_request_error", json!("model_not_found")),
                    429 => ("requests", json!("rate_limit_exceeded")),
                    500.. => ("server_error", Value::Null),
                    _ => ("invalid_request_error", Value::Null),
                };
                json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            }
            Self::AnthropicMessages => {
                let kind = match status {
                    401 => "authentication_error",
                    403 => "permission_error",
                    404 => "not_found_error",
                    413 => "request_too_large",
                    429 => "rate_limit_error",
                    529 => "overloaded_error",
                    500.. => "api_error",
                    _ => "invalid_request_error",
                };
                json!({"type": "error", "error": {"type": kind, "message": message}})
            }
        }
    }
}

/// Everything a reply needs, in wire-neutral form.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    /// The request's number (1-based), for message and response ids.
    pub id: usize,
    /// Unix seconds.
    pub created: u64,
    /// The model named in the request.
    pub model: &'a str,
    pub text: &'a str,
    pub reasoning: Option<&'a str>,
    pub calls: Vec<Call>,
    pub usage: Usage,
    /// Cut at the output-token limit.
    pub truncated: bool,
}

/// A tool call with its server-wide number (1-based), which makes its ids, unless it has one.
#[derive(Debug)]
pub(crate) struct Call {
    pub n: u64,
    /// The id the script (or the strict mode's per-answer numbering) gave it.
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

/// Server-sent events, one string each, and how many of them a stalled or cut stream sends.
#[derive(Debug, Default)]
pub(crate) struct Sse {
    pub events: Vec<String>,
    /// The events up to the last text delta (or the opening events when there is no text).
    pub partial: usize,
}

impl Sse {
    /// An event with only a `data:` line.
    fn data(&mut self, data: &Value) {
        self.events.push(format!("data: {data}\n\n"));
    }

    /// An event with an `event:` line.
    fn event(&mut self, name: &str, data: &Value) {
        self.events.push(format!("event: {name}\ndata: {data}\n\n"));
    }

    /// A stalled or cut stream ends after the events so far.
    fn mark(&mut self) {
        self.partial = self.events.len();
    }
}

/// `text` in word-sized deltas, each word with the whitespace before it ("a b" → "a", " b").
pub(crate) fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev_space = true;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if space && !prev_space && i > start {
            out.push(&text[start..i]);
            start = i;
        }
        prev_space = space;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Tool-call arguments in three pieces (two when they are two characters, one when shorter).
pub(crate) fn pieces(arguments: &str) -> Vec<&str> {
    let bounds: Vec<usize> = arguments.char_indices().map(|(i, _)| i).collect();
    let parts = bounds.len().clamp(1, 3);
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..parts {
        let end = bounds[bounds.len() * k / parts];
        out.push(&arguments[start..end]);
        start = end;
    }
    out.push(&arguments[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_their_leading_whitespace() {
        assert_eq!(words("Hello there,  world\nbye"), ["Hello", " there,", "  world", "\nbye"]);
        assert_eq!(words(" lead"), [" lead"]);
        assert!(words("").is_empty());
    }

    #[test]
    fn arguments_come_in_pieces() {
        assert_eq!(pieces(r#"{"path":"a"}"#), [r#"{"pa"#, r#"th":"#, r#""a"}"#]);
        assert_eq!(pieces("{}"), ["{", "}"]);
        assert_eq!(pieces(""), [""]);
        assert_eq!(pieces("ééé"), ["é", "é", "é"]);
    }

    #[test]
    fn routes_with_and_without_v1() {
        assert_eq!(Wire::from_path("/v1/chat/completions"), Some(Wire::ChatCompletions));
        assert_eq!(Wire::from_path("/messages"), Some(Wire::AnthropicMessages));
        assert_eq!(Wire::from_path("/v1/responses"), Some(Wire::Responses));
        assert_eq!(Wire::from_path("/v1/embeddings"), None);
    }
}
