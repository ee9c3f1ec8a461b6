//! Reading a streamed answer as server-sent events, and the errors a provider reports inside a
//! stream ([`stream_error`]; an HTTP error status is [`transport`]'s).
//!
//! SSE framing is left to `eventsource-stream` over a [`transport::Body`] (so the first-byte and
//! idle limits hold); adapters only see [`Events::next`] yield parsed events (`event:` name and
//! `data:` payload). A stream that ends without a single event is reported here: as an HTML
//! page or other body quoted ([`ModelError::Malformed`]), as the provider's JSON error, or as a
//! stream closed without a word ([`ModelError::Cut`], `silent`).
//!
//! ```ignore
//! let url = provider.url("chat/completions");
//! match sse::exchange(provider, &url, http.post(&url).json(&body), true).await? {
//!     sse::Answer::Stream(mut events) => while let Some(event) = events.next().await {
//!         let event = event?; // event.event, event.data
//!     },
//!     sse::Answer::Whole(json) => { /* a server that did not stream */ }
//! }
//! ```

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::transport::{self, Body, BodyError, MAX_BODY_IN_MESSAGE, Seen, Sent, message_of, truncate};
use super::{ModelError, Provider};

/// What a provider answered: an event stream, or one JSON body.
pub(crate) enum Answer {
    Stream(Box<Events>),
    Whole(Value),
}

/// Sends `request` to `url` (asking for an event stream when `stream`) and takes the answer in
/// whichever form the provider chose.
pub(crate) async fn exchange(
    provider: &Provider,
    url: &str,
    request: reqwest::RequestBuilder,
    stream: bool,
) -> Result<Answer, ModelError> {
    let request = if stream { request.header(reqwest::header::ACCEPT, "text/event-stream") } else { request };
    let sent = transport::send(provider, url, request).await?;
    let content_type = transport::content_type(&sent.response);
    if stream && content_type.as_deref().is_none_or(|ct| ct.contains("text/event-stream")) {
        return Ok(Answer::Stream(Box::new(Events::new(sent, provider, url))));
    }
    Ok(Answer::Whole(read_json(provider, url, sent, content_type.as_deref()).await?))
}

/// Reads a whole JSON body; anything else is [`ModelError::Malformed`], quoted.
async fn read_json(
    provider: &Provider,
    url: &str,
    sent: Sent,
    content_type: Option<&str>,
) -> Result<Value, ModelError> {
    let body = transport::read_text(provider, url, sent).await?;
    serde_json::from_str(&body).map_err(|e| {
        let what = transport::describe(&body, content_type);
        let message = if transport::looks_like_html(&body) || body.trim().is_empty() {
            format!("{what}; is base_url right?")
        } else {
            format!("the body is not JSON ({e}): {what}")
        };
        ModelError::Malformed { provider: provider.name.clone(), url: url.to_string(), message }
    })
}

/// Parses one SSE `data:` payload as JSON.
pub(crate) fn parse_data(provider: &Provider, url: &str, event: &Event) -> Result<Value, ModelError> {
    serde_json::from_str(&event.data).map_err(|e| ModelError::Malformed {
        provider: provider.name.clone(),
        url: url.to_string(),
        message: format!("an event is not JSON ({e}): {}", transport::quote(&event.data)),
    })
}

type RawEvents = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError>>> + Send>>;

/// The events of a streamed answer. Dropping it closes the connection.
pub(crate) struct Events {
    inner: RawEvents,
    provider: Provider,
    url: String,
    seen: Arc<Mutex<Seen>>,
    events: usize,
    ended: bool,
}

impl Events {
    pub(crate) fn new(sent: Sent, provider: &Provider, url: &str) -> Self {
        let body = Body::new(sent, provider);
        let seen = body.seen();
        Self {
            inner: Box::pin(body.eventsource()),
            provider: provider.clone(),
            url: url.to_string(),
            seen,
            events: 0,
            ended: false,
        }
    }

    /// The URL the stream comes from.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The next event; `None` when the server closed the stream after at least one event
    /// (cleanly or not: a stream that ends without its closing event is the adapter's to
    /// report). A stream that ends before any event is an error here.
    pub(crate) async fn next(&mut self) -> Option<Result<Event, ModelError>> {
        if self.ended {
            return None;
        }
        let item = match self.inner.next().await {
            Some(item) => item,
            None => {
                self.ended = true;
                return (self.events == 0).then(|| Err(self.no_events()));
            }
        };
        let (provider, url) = (&self.provider, self.url.as_str());
        match item {
            Ok(event) => {
                self.events += 1;
                Some(Ok(event))
            }
            Err(e) => {
                self.ended = true;
                Some(Err(match e {
                    EventStreamError::Transport(e) => e.into_model_error(provider, url, self.events > 0),
                    EventStreamError::Utf8(e) => ModelError::Malformed {
                        provider: provider.name.clone(),
                        url: url.to_string(),
                        message: format!("the stream is not UTF-8 text: {e}"),
                    },
                    EventStreamError::Parser(e) => ModelError::Malformed {
                        provider: provider.name.clone(),
                        url: url.to_string(),
                        message: format!("the stream is not server-sent events ({e}): {}", self.head_quoted()),
                    },
                }))
            }
        }
    }

    fn head(&self) -> String {
        let seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&seen.head).into_owned()
    }

    fn head_quoted(&self) -> String {
        transport::describe(&self.head(), None)
    }

    /// The error for a stream that ended before its first event.
    fn no_events(&self) -> ModelError {
        let head = self.head();
        let (provider, url) = (&self.provider, self.url.as_str());
        let only_comments = head.lines().all(|line| line.trim().is_empty() || line.starts_with(':'));
        if only_comments {
            let pings = if head.trim().is_empty() { "" } else { " (only keep-alive comments)" };
            return ModelError::Cut {
                provider: provider.name.clone(),
                url: url.to_string(),
                message: format!(
                    "the server closed the stream without sending any event{pings}; llama-cpp-python's server does \
                     this when it fails inside a streamed reply (with tools, say): `stream = false` under [agent] \
                     may avoid it"
                ),
                partial: String::new(),
                silent: true,
            };
        }
        if let Some(error) = serde_json::from_str::<Value>(head.trim()).ok().and_then(|v| v.get("error").cloned()) {
            return stream_error(provider, url, &error);
        }
        let message = if transport::looks_like_html(&head) {
            format!("{}; is base_url right?", transport::describe(&head, None))
        } else {
            format!("the answer is not an event stream: {}", transport::describe(&head, None))
        };
        ModelError::Malformed { provider: provider.name.clone(), url: url.to_string(), message }
    }
}

/// The error for a stream that stopped before its closing event, with what had arrived.
pub(crate) fn cut_short(provider: &Provider, url: &str, expected: &str, partial: &str) -> ModelError {
    let got = if partial.is_empty() {
        String::new()
    } else {
        format!(" after {} characters of the answer", partial.chars().count())
    };
    ModelError::Cut {
        provider: provider.name.clone(),
        url: url.to_string(),
        message: format!("the stream ended before {expected}{got}"),
        partial: partial.to_string(),
        silent: false,
    }
}

/// An error reported inside a 200 stream (or a failed Responses object) as [`ModelError::Http`]:
/// a numeric `code` is the status; known string codes map to the status the provider uses for
/// them over HTTP; anything else counts as a server error (500), which is retried.
pub(crate) fn stream_error(provider: &Provider, url: &str, error: &Value) -> ModelError {
    let code = error.get("code").or_else(|| error.get("type"));
    let status = match code {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u16::try_from(n).ok()).filter(|n| (400..600).contains(n)),
        Some(Value::String(s)) => {
            s.parse::<u16>().ok().filter(|n| (400..600).contains(n)).or_else(|| status_for_code(s))
        }
        _ => None,
    };
    let mut message = message_of(error).unwrap_or_else(|| truncate(&error.to_string(), MAX_BODY_IN_MESSAGE));
    if status.is_none()
        && let Some(code) = code.and_then(Value::as_str)
        && !message.contains(code)
    {
        message = format!("{code}: {message}");
    }
    ModelError::Http {
        provider: provider.name.clone(),
        url: url.to_string(),
        status: status.unwrap_or(500),
        message,
        retry_after: None,
    }
}

/// The HTTP status a provider uses for an error type it also reports in-stream.
fn status_for_code(code: &str) -> Option<u16> {
    Some(match code {
        "invalid_request_error" | "invalid_prompt" | "context_length_exceeded" | "bad_request" => 400,
        "authentication_error" | "invalid_api_key" => 401,
        "permission_error" | "billing_error" => 403,
        "not_found_error" | "model_not_found" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => 429,
        "api_error" | "server_error" | "internal_error" | "internal_server_error" => 500,
        "overloaded_error" | "overloaded" | "server_is_overloaded" => 529,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_errors_map_codes_to_statuses() {
        let p = super::super::Provider::preset("ollama", "m", None).expect("preset");
        let e = stream_error(&p, "u", &serde_json::json!({"type": "overloaded_error", "message": "Overloaded"}));
        assert!(matches!(e, ModelError::Http { status: 529, ref message, .. } if message == "Overloaded"), "{e:?}");
        let e = stream_error(&p, "u", &serde_json::json!({"code": 429, "message": "slow"}));
        assert!(matches!(e, ModelError::Http { status: 429, .. }), "{e:?}");
        let e = stream_error(&p, "u", &serde_json::json!({"code": "weird", "message": "boom"}));
        assert!(matches!(e, ModelError::Http { status: 500, ref message, .. } if message == "weird: boom"), "{e:?}");
        assert!(e.is_transient());
    }
}
