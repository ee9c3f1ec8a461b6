//! Reading a streamed answer as server-sent events, and the error shapes providers share:
//! HTTP error bodies with the provider's own message and its `Retry-After`, errors reported
//! inside a stream.
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
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::transport::{self, Body, BodyError, Seen, Sent};
use super::{ModelError, Provider};

/// Longest error body kept in a message when the provider's JSON has no message field.
const MAX_BODY_IN_MESSAGE: usize = 400;

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

/// [`ModelError::Http`] from a status and body: the provider's own message when the body has
/// one, an HTML page described, the status's name for an empty body. A 404 also says what to
/// check: the URL is where the configured `api_mode` posts.
pub(crate) fn http_error(
    provider: &Provider,
    url: &str,
    status: u16,
    body: &str,
    content_type: Option<&str>,
    retry_after: Option<Duration>,
) -> ModelError {
    let reason = reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("no details");
    let said = error_message(body).filter(|m| !m.trim().is_empty());
    let mut message = said.clone().unwrap_or_else(|| {
        let body = body.trim();
        if body.is_empty() {
            reason.to_string()
        } else if let Some(fields) = other_fields(body) {
            format!("{reason}, with an empty message ({fields})")
        } else if transport::looks_like_html(body) {
            format!("{reason}, with {}", transport::describe(body, content_type))
        } else {
            truncate(body, MAX_BODY_IN_MESSAGE)
        }
    });
    let nothing_said = said.is_none() && (body.trim().is_empty() || other_fields(body.trim()).is_some());
    if nothing_said && status >= 500 {
        message.push_str("; the server did not say why: its own log or console tells what failed");
    }
    if status == 404 {
        message.push_str(&format!(
            " (talaria posted to this URL because api_mode is `{}`: check base_url and api_mode)",
            provider.api_mode
        ));
    }
    ModelError::Http { provider: provider.name.clone(), url: url.to_string(), status, message, retry_after }
}

/// The other fields of a JSON error whose message is empty (`type: server_error, code: 500`),
/// so that an error with nothing to say still says something.
fn other_fields(body: &str) -> Option<String> {
    let value: Value = serde_json::from_str(body).ok()?;
    let error = value.get("error").filter(|e| e.is_object()).unwrap_or(&value);
    // Sorted by name: the map's order depends on serde_json's features.
    let mut entries: Vec<(&String, &Value)> = error.as_object()?.iter().collect();
    entries.sort_by_key(|(k, _)| *k);
    let fields: Vec<String> = entries
        .into_iter()
        .filter(|(k, v)| k.as_str() != "message" && !v.is_null() && !v.is_object() && !v.is_array())
        .filter(|(_, v)| v.as_str().is_none_or(|s| !s.trim().is_empty()))
        .map(|(k, v)| format!("{k}: {}", v.as_str().map_or_else(|| v.to_string(), |s| truncate(s, 100))))
        .take(6)
        .collect();
    (!fields.is_empty()).then(|| fields.join(", "))
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

    /// An HTTP 500 with an empty message (llama-cpp-python) still says what happened.
    #[test]
    fn an_error_with_an_empty_message_says_what_there_is() {
        let p = super::super::Provider::preset("ollama", "m", None).expect("preset");
        let body = r#"{"error": {"message": "", "type": "server_error", "code": 500}}"#;
        let e = http_error(&p, "http://127.0.0.1:8080/v1/chat/completions", 500, body, None, None);
        assert_eq!(
            e.to_string(),
            "http://127.0.0.1:8080/v1/chat/completions answered HTTP 500: Internal Server Error, with an empty \
             message (code: 500, type: server_error); the server did not say why: its own log or console tells what failed"
        );
        let e = http_error(&p, "u", 502, "  ", None, None);
        assert_eq!(
            e.to_string(),
            "u answered HTTP 502: Bad Gateway; the server did not say why: its own log or console tells what failed"
        );
        let e = http_error(&p, "u", 400, "", None, None);
        assert_eq!(e.to_string(), "u answered HTTP 400: Bad Request");
    }

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

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
