//! Sending one request and reading its answer under the provider's [`Timeouts`], and saying
//! precisely what went wrong when something does.
//!
//! - [`send`]: the request with the provider's extra headers, bounded by the total limit; the
//!   response headers must come within `first_byte` of sending (the connection itself within
//!   `connect`, which the HTTP client enforces). A non-2xx status becomes
//!   [`ModelError::Http`] ([`http_error`]) carrying the provider's own message in the usual
//!   JSON shapes ([`error_message`]) and its `Retry-After` ([`retry_after`]).
//! - [`Body`]: the response body as a stream of byte chunks whose first chunk must arrive by
//!   the first-byte deadline and every later one within `idle` of the previous one. It keeps
//!   the first bytes it saw, so a reply that turns out to be an HTML page or an empty stream
//!   can be quoted.
//! - [`classify`]: a transport failure as [`ModelError::Connect`], [`ModelError::Tls`],
//!   [`ModelError::Timeout`] or [`ModelError::Network`].
//!
//! ```ignore
//! let sent = transport::send(provider, &url, http.post(&url).json(&body)).await?;
//! let text = transport::read_text(provider, &url, sent).await?;
//! ```

use std::error::Error as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::time::{Instant, Sleep};

use super::{ModelError, Provider, TimeoutPhase};

/// Bytes of a body kept for quoting.
const HEAD_BYTES: usize = 512;
/// Longest error body read (a misbehaving server could stream forever).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Bytes of a body quoted in messages.
const QUOTED: usize = 160;
/// Longest error body kept in a message when the provider's JSON has no message field.
pub(crate) const MAX_BODY_IN_MESSAGE: usize = 400;

/// A response whose headers arrived, and the deadline for the first byte of its body.
pub(crate) struct Sent {
    pub(crate) response: reqwest::Response,
    pub(crate) first_byte_by: Instant,
}

/// Sends `request` to `url` under the provider's limits; see the module documentation.
pub(crate) async fn send(provider: &Provider, url: &str, request: reqwest::RequestBuilder) -> Result<Sent, ModelError> {
    let limits = provider.timeouts;
    let request = provider
        .extra_headers
        .iter()
        .fold(request, |request, (name, value)| request.header(name.as_str(), value.as_str()))
        .timeout(limits.total);
    let first_byte_by = Instant::now() + limits.first_byte;
    let response = match tokio::time::timeout_at(first_byte_by, request.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => return Err(classify(provider, url, &e)),
        Err(_) => return Err(timeout(provider, url, TimeoutPhase::FirstByte)),
    };
    let status = response.status();
    if status.is_success() {
        return Ok(Sent { response, first_byte_by });
    }
    let retry_after = retry_after(response.headers());
    let content_type = content_type(&response);
    // The body of an error is small; a broken or endless one still leaves the status to report.
    let mut body = Body::new(Sent { response, first_byte_by }, provider);
    let mut bytes = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    Err(http_error(provider, url, status.as_u16(), &text, content_type.as_deref(), retry_after))
}

/// Reads a whole body as text under the first-byte and idle limits.
pub(crate) async fn read_text(provider: &Provider, url: &str, sent: Sent) -> Result<String, ModelError> {
    let mut body = Body::new(sent, provider);
    let mut bytes = Vec::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            // What arrived of a whole body is not an answer yet: nothing partial to show.
            Err(e) => return Err(e.into_model_error(provider, url, !bytes.is_empty())),
        }
    }
    String::from_utf8(bytes).map_err(|e| ModelError::Malformed {
        provider: provider.name.clone(),
        url: url.to_string(),
        message: format!("the body is not UTF-8 text: {}", quote(&String::from_utf8_lossy(e.as_bytes()))),
    })
}

/// The media type of a response, lowercased, without parameters.
pub(crate) fn content_type(response: &reqwest::Response) -> Option<String> {
    let value = response.headers().get(reqwest::header::CONTENT_TYPE)?.to_str().ok()?;
    Some(value.split(';').next().unwrap_or(value).trim().to_ascii_lowercase())
}

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// A limit ran out: the first byte did not come, or the body went silent.
    Timeout(TimeoutPhase),
    /// The connection broke (or the HTTP client's own total limit ran out).
    Transport(reqwest::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout(phase) => write!(f, "{} ran out", phase.key()),
            Self::Transport(e) => write!(f, "{}", error_chain(e)),
        }
    }
}

impl BodyError {
    /// As a [`ModelError`]; `started` when some of the answer had arrived.
    pub(crate) fn into_model_error(self, provider: &Provider, url: &str, started: bool) -> ModelError {
        match self {
            Self::Timeout(phase) => timeout(provider, url, phase),
            Self::Transport(e) if e.is_timeout() => timeout(provider, url, TimeoutPhase::Total),
            Self::Transport(e) => ModelError::Cut {
                provider: provider.name.clone(),
                url: url.to_string(),
                message: format!("the connection broke mid-reply: {}", error_chain(&e)),
                partial: String::new(),
                silent: !started,
            },
        }
    }
}

/// What a [`Body`] has let through so far, readable while an event parser owns the body.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// The first [`HEAD_BYTES`] bytes.
    pub(crate) head: Vec<u8>,
    pub(crate) bytes: usize,
}

/// A response body under the first-byte and idle limits; see the module documentation.
pub(crate) struct Body {
    inner: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    sleep: Pin<Box<Sleep>>,
    idle: Duration,
    started: bool,
    done: bool,
    seen: Arc<Mutex<Seen>>,
}

impl Body {
    pub(crate) fn new(sent: Sent, provider: &Provider) -> Self {
        Self {
            inner: Box::pin(sent.response.bytes_stream()),
            sleep: Box::pin(tokio::time::sleep_until(sent.first_byte_by)),
            idle: provider.timeouts.idle,
            started: false,
            done: false,
            seen: Arc::new(Mutex::new(Seen::default())),
        }
    }

    /// A handle on what went through.
    pub(crate) fn seen(&self) -> Arc<Mutex<Seen>> {
        self.seen.clone()
    }
}

impl Stream for Body {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if !chunk.is_empty() {
                    this.started = true;
                    let mut seen = this.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let room = HEAD_BYTES.saturating_sub(seen.head.len());
                    seen.head.extend_from_slice(&chunk[..room.min(chunk.len())]);
                    seen.bytes += chunk.len();
                    drop(seen);
                    let next = Instant::now() + this.idle;
                    this.sleep.as_mut().reset(next);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.done = true;
                Poll::Ready(Some(Err(BodyError::Transport(e))))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.done = true;
                    let phase = if this.started { TimeoutPhase::Idle } else { TimeoutPhase::FirstByte };
                    Poll::Ready(Some(Err(BodyError::Timeout(phase))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// [`ModelError::Timeout`] for `phase`, with nothing of the answer yet.
pub(crate) fn timeout(provider: &Provider, url: &str, phase: TimeoutPhase) -> ModelError {
    ModelError::Timeout {
        provider: provider.name.clone(),
        url: url.to_string(),
        phase,
        limit: provider.timeouts.of(phase),
        partial: String::new(),
    }
}

/// A failed request as the error it is: configuration, TLS, connection, timeout, or another
/// network failure.
pub(crate) fn classify(provider: &Provider, url: &str, e: &reqwest::Error) -> ModelError {
    let (name, url) = (provider.name.clone(), url.to_string());
    if e.is_builder() {
        return ModelError::Config(format!("cannot build a request to {url} ({name}): {}", error_chain(e)));
    }
    if let Some(tls) = tls_failure(e) {
        let hint = if tls.contains("InvalidContentType") || tls.contains("corrupt message") {
            " (does the server speak TLS on this port? an http:// base_url may be meant)"
        } else if tls.contains("certificate") || tls.contains("Certificate") {
            " (the system does not trust the server's certificate)"
        } else {
            ""
        };
        return ModelError::Tls { provider: name, url, message: format!("{tls}{hint}") };
    }
    if e.is_connect() {
        if e.is_timeout() {
            return timeout(provider, &url, TimeoutPhase::Connect);
        }
        let chain = error_chain(e);
        let hint = if chain.contains("refused") {
            " (is the server running, and is the port in base_url right?)"
        } else if chain.contains("dns error") || chain.contains("failed to lookup") {
            " (the host name does not resolve: check base_url)"
        } else {
            ""
        };
        return ModelError::Connect { provider: name, url, message: format!("{chain}{hint}") };
    }
    if e.is_timeout() {
        return timeout(provider, &url, TimeoutPhase::Total);
    }
    ModelError::Network { provider: name, url, message: error_chain(e) }
}

/// The TLS error under `e`, if the failure was one: rustls reports it wrapped in I/O errors
/// (sometimes an I/O error in an I/O error), whose `source()` skips the wrapped error itself,
/// so each is unwrapped by hand.
fn tls_failure(e: &reqwest::Error) -> Option<String> {
    fn within(err: &(dyn std::error::Error + 'static)) -> Option<String> {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        let inner = err.downcast_ref::<std::io::Error>()?.get_ref()?;
        within(inner)
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(tls) = within(err) {
            return Some(tls);
        }
        source = err.source();
    }
    None
}

/// An error and its sources, `: `-separated, without repeating a source already in the text.
pub(crate) fn error_chain(e: &reqwest::Error) -> String {
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

/// The start of a body, on one line and quoted: `` `<!DOCTYPE html><html>…` ``.
pub(crate) fn quote(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("`{}`", truncate(&line, QUOTED))
}

/// Whether `text` looks like an HTML page rather than an API answer.
pub(crate) fn looks_like_html(text: &str) -> bool {
    let start = text.trim_start().get(..15).unwrap_or(text.trim_start()).to_ascii_lowercase();
    start.starts_with("<!doctype")
        || start.starts_with("<html")
        || start.starts_with("<head")
        || start.starts_with("<body")
}

/// A body that is not what was expected, described: an HTML page (with its title), or its
/// first bytes.
pub(crate) fn describe(text: &str, content_type: Option<&str>) -> String {
    let kind = content_type.map(|t| format!(" ({t})")).unwrap_or_default();
    if text.trim().is_empty() {
        return format!("an empty body{kind}");
    }
    if looks_like_html(text) {
        let title = html_title(text).map(|t| format!(" titled \"{t}\"")).unwrap_or_default();
        return format!("an HTML page{title}{kind}, not an API answer: {}", quote(text));
    }
    format!("{}{kind}", quote(text))
}

/// The `<title>` of an HTML page.
fn html_title(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let title = text.get(start..end)?.split_whitespace().collect::<Vec<_>>().join(" ");
    (!title.is_empty()).then(|| truncate(&title, 80))
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
        } else if looks_like_html(body) {
            format!("{reason}, with {}", describe(body, content_type))
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
    fn bodies_are_described_by_what_they_are() {
        let page =
            "<!DOCTYPE html>\n<html><head><title>Sign in - Corporate Proxy</title></head><body>...</body></html>";
        let text = describe(page, Some("text/html"));
        assert!(text.starts_with("an HTML page titled \"Sign in - Corporate Proxy\" (text/html), not an API answer: `<!DOCTYPE html> <html>"), "{text}");
        assert_eq!(describe("  ", None), "an empty body");
        assert_eq!(describe("hello there", Some("text/plain")), "`hello there` (text/plain)");
        assert!(looks_like_html("  <html>"));
        assert!(!looks_like_html("{\"a\": 1}"));
    }

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
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
