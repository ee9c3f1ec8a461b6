//! The transport every adapter shares: sending a request under the provider's time limits,
//! turning HTTP failures into [`ModelError`]s that carry the provider's own message and its
//! `Retry-After`, and reading a streamed answer as server-sent events with an idle timeout.
//!
//! SSE framing is left to `eventsource-stream`; adapters only see [`Events::next`] yield parsed
//! events (`event:` name and `data:` payload), each within [`Provider::idle_timeout`] of the last.
//!
//! ```ignore
//! let response = sse::send(provider, http.post(url).json(&body), true).await?;
//! let mut events = sse::Events::new(response, provider);
//! while let Some(event) = events.next().await {
//!     let event = event?;
//!     // event.event, event.data
//! }
//! ```

use std::error::Error as _;
use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::{ModelError, Provider};

/// Longest error body kept in a message when the provider's JSON has no message field.
const MAX_BODY_IN_MESSAGE: usize = 400;

/// Sends `request` with the provider's extra headers and total timeout. A streamed request must
/// also see its response headers within the idle timeout. A non-2xx answer becomes
/// [`ModelError::Http`].
pub(crate) async fn send(
    provider: &Provider,
    request: reqwest::RequestBuilder,
    stream: bool,
) -> Result<reqwest::Response, ModelError> {
    let request = provider
        .extra_headers
        .iter()
        .fold(request, |request, (name, value)| request.header(name.as_str(), value.as_str()))
        .timeout(provider.timeout);
    let sent = if stream {
        match tokio::time::timeout(provider.idle_timeout, request.send()).await {
            Ok(sent) => sent,
            Err(_) => return Err(idle_timeout(provider)),
        }
    } else {
        request.send().await
    };
    let response = sent.map_err(|e| transport_error(provider, &e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after(response.headers());
    // The body of an error is small; a broken read still leaves the status to report.
    let body = response.text().await.unwrap_or_default();
    Err(http_error(provider, status.as_u16(), &body, retry_after))
}

/// What a provider answered: an event stream, or one JSON body.
pub(crate) enum Answer {
    Stream(Events),
    Whole(Value),
}

/// Sends `request` (asking for an event stream when `stream`, see [`send`]) and takes the answer
/// in whichever form the provider chose.
pub(crate) async fn exchange(
    provider: &Provider,
    request: reqwest::RequestBuilder,
    stream: bool,
) -> Result<Answer, ModelError> {
    let request = if stream { request.header(reqwest::header::ACCEPT, "text/event-stream") } else { request };
    let response = send(provider, request, stream).await?;
    if stream && is_event_stream(&response) {
        return Ok(Answer::Stream(Events::new(response, provider)));
    }
    Ok(Answer::Whole(read_json(provider, response).await?))
}

/// Whether the response is an SSE stream (some servers answer a streamed request with plain JSON,
/// typically for errors or when they do not stream at all).
pub(crate) fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| ct.to_ascii_lowercase().contains("text/event-stream"))
}

/// Reads a whole JSON body.
pub(crate) async fn read_json(provider: &Provider, response: reqwest::Response) -> Result<Value, ModelError> {
    let body = response.text().await.map_err(|e| transport_error(provider, &e))?;
    serde_json::from_str(&body).map_err(|e| ModelError::Protocol {
        provider: provider.name.clone(),
        message: format!("the body is not JSON ({e}): {}", truncate(body.trim(), 200)),
    })
}

/// Parses one SSE `data:` payload as JSON.
pub(crate) fn parse_data(provider: &Provider, event: &Event) -> Result<Value, ModelError> {
    serde_json::from_str(&event.data).map_err(|e| ModelError::Protocol {
        provider: provider.name.clone(),
        message: format!("an event is not JSON ({e}): {}", truncate(event.data.trim(), 200)),
    })
}

type RawEvents = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

/// The events of a streamed answer. Dropping it closes the connection.
pub(crate) struct Events {
    inner: RawEvents,
    provider: String,
    idle: Duration,
    total: Duration,
}

impl Events {
    pub(crate) fn new(response: reqwest::Response, provider: &Provider) -> Self {
        Self {
            inner: Box::pin(response.bytes_stream().eventsource()),
            provider: provider.name.clone(),
            idle: provider.idle_timeout,
            total: provider.timeout,
        }
    }

    /// The next event; `None` when the server closed the stream (cleanly or not: a stream that
    /// ends without its closing event is the adapter's to report).
    pub(crate) async fn next(&mut self) -> Option<Result<Event, ModelError>> {
        let item = match tokio::time::timeout(self.idle, self.inner.next()).await {
            Ok(item) => item?,
            Err(_) => {
                return Some(Err(ModelError::Timeout { provider: self.provider.clone(), secs: self.idle.as_secs() }));
            }
        };
        Some(item.map_err(|e| match e {
            EventStreamError::Transport(e) if e.is_timeout() => {
                ModelError::Timeout { provider: self.provider.clone(), secs: self.total.as_secs() }
            }
            EventStreamError::Transport(e) => ModelError::Network {
                provider: self.provider.clone(),
                message: format!("the connection broke mid-answer: {}", error_chain(&e)),
            },
            EventStreamError::Utf8(e) => ModelError::Protocol {
                provider: self.provider.clone(),
                message: format!("the stream is not UTF-8: {e}"),
            },
            EventStreamError::Parser(e) => ModelError::Protocol {
                provider: self.provider.clone(),
                message: format!("the stream is not server-sent events: {e}"),
            },
        }))
    }
}

/// The error for a stream that stopped before its closing event.
pub(crate) fn cut_short(provider: &Provider, expected: &str) -> ModelError {
    ModelError::Network {
        provider: provider.name.clone(),
        message: format!("the connection broke: the stream ended before {expected}"),
    }
}

fn idle_timeout(provider: &Provider) -> ModelError {
    ModelError::Timeout { provider: provider.name.clone(), secs: provider.idle_timeout.as_secs() }
}

/// Maps a reqwest failure: timeouts, unreachable hosts, broken connections, bad configuration.
pub(crate) fn transport_error(provider: &Provider, e: &reqwest::Error) -> ModelError {
    let name = provider.name.clone();
    if e.is_builder() {
        ModelError::Config(format!("cannot build a request to {} ({}): {}", provider.base_url, name, error_chain(e)))
    } else if e.is_timeout() {
        ModelError::Timeout { provider: name, secs: provider.timeout.as_secs() }
    } else if e.is_connect() {
        ModelError::Network {
            provider: name,
            message: format!("cannot connect to {}: {}", provider.base_url, error_chain(e)),
        }
    } else {
        ModelError::Network { provider: name, message: error_chain(e) }
    }
}

/// An error and its sources, `: `-separated, without repeating a source already in the text.
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// [`ModelError::Http`] from a status and body: the provider's own message when the body has one.
pub(crate) fn http_error(provider: &Provider, status: u16, body: &str, retry_after: Option<Duration>) -> ModelError {
    let message = error_message(body).unwrap_or_else(|| {
        let body = body.trim();
        if body.is_empty() {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no details")
                .to_string()
        } else {
            truncate(body, MAX_BODY_IN_MESSAGE)
        }
    });
    ModelError::Http { provider: provider.name.clone(), status, message, retry_after }
}

/// The message in an error body: `{"error": {"message"}}` (OpenAI, Anthropic, OpenRouter),
/// `{"error": "..."}` (Ollama), `{"message"}`, `{"detail"}`, or a list of those (Gemini).
pub(crate) fn error_message(body: &str) -> Option<String> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let value = match &value {
        Value::Array(items) => items.first()?,
        other => other,
    };
    message_of(value.get("error").unwrap_or(value))
}

/// The message of an error object (or string), with OpenRouter's upstream details when present.
pub(crate) fn message_of(error: &Value) -> Option<String> {
    if let Some(text) = error.as_str() {
        return Some(text.to_string());
    }
    let mut message = ["message", "detail", "error"].iter().find_map(|k| error.get(*k)?.as_str())?.to_string();
    if let Some(meta) = error.get("metadata") {
        let raw = meta.get("raw").map(|raw| raw.as_str().map_or_else(|| raw.to_string(), str::to_string));
        match (meta.get("provider_name").and_then(Value::as_str), raw) {
            (Some(name), Some(raw)) => message.push_str(&format!(" ({name}: {})", truncate(&raw, 300))),
            (None, Some(raw)) => message.push_str(&format!(" ({})", truncate(&raw, 300))),
            (Some(name), None) => message.push_str(&format!(" ({name})")),
            (None, None) => {}
        }
    }
    Some(message)
}

/// The wait a provider asks for: `retry-after-ms` (OpenAI), else `Retry-After` in seconds or as
/// an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let when = jiff::fmt::rfc2822::DateTimeParser::new().parse_timestamp(value).ok()?;
    let wait = when.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

/// An error reported inside a 200 stream (or a failed Responses object) as [`ModelError::Http`]:
/// a numeric `code` is the status; known string codes map to the status the provider uses for
/// them over HTTP; anything else counts as a server error (500), which is retried.
pub(crate) fn stream_error(provider: &Provider, error: &Value) -> ModelError {
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
    ModelError::Http { provider: provider.name.clone(), status: status.unwrap_or(500), message, retry_after: None }
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

/// `text` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn error_messages_come_from_the_usual_json_shapes() {
        assert_eq!(
            error_message(r#"{"error":{"message":"Rate limit reached","type":"x"}}"#).as_deref(),
            Some("Rate limit reached")
        );
        assert_eq!(error_message(r#"{"error":"model 'x' not found"}"#).as_deref(), Some("model 'x' not found"));
        assert_eq!(error_message(r#"{"detail":"Not Found"}"#).as_deref(), Some("Not Found"));
        assert_eq!(error_message(r#"[{"error":{"code":400,"message":"bad"}}]"#).as_deref(), Some("bad"));
        assert_eq!(
            error_message(
                r#"{"error":{"message":"Provider returned error","code":429,
                    "metadata":{"raw":"slow down","provider_name":"Groq"}}}"#
            )
            .as_deref(),
            Some("Provider returned error (Groq: slow down)")
        );
        assert_eq!(error_message("<html>bad gateway</html>"), None);
    }

    #[test]
    fn retry_after_in_seconds_milliseconds_and_dates() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h), Some(Duration::ZERO), "a date in the past means now");
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let text = jiff::fmt::rfc2822::DateTimePrinter::new().timestamp_to_rfc9110_string(&later).expect("date");
        h.insert("retry-after", HeaderValue::from_str(&text).expect("header"));
        let wait = retry_after(&h).expect("date parsed");
        assert!(wait > Duration::from_secs(110) && wait <= Duration::from_secs(120), "{wait:?}");
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn stream_errors_map_codes_to_statuses() {
        let p = super::super::Provider::preset("ollama", "m", None).expect("preset");
        let e = stream_error(&p, &serde_json::json!({"type": "overloaded_error", "message": "Overloaded"}));
        assert!(matches!(e, ModelError::Http { status: 529, ref message, .. } if message == "Overloaded"), "{e:?}");
        let e = stream_error(&p, &serde_json::json!({"code": 429, "message": "slow"}));
        assert!(matches!(e, ModelError::Http { status: 429, .. }), "{e:?}");
        let e = stream_error(&p, &serde_json::json!({"code": "weird", "message": "boom"}));
        assert!(matches!(e, ModelError::Http { status: 500, ref message, .. } if message == "weird: boom"), "{e:?}");
        assert!(e.is_transient());
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
