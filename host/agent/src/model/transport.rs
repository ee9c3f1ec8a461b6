//! Sending one request and reading its answer under the provider's [`Timeouts`], and saying
//! precisely what went wrong when something does.
//!
//! - [`send`]: the request with the provider's extra headers, bounded by the total limit; the
//!   response headers must come within `first_byte` of sending (the connection itself within
//!   `connect`, which the HTTP client enforces). A non-2xx status becomes
//!   [`ModelError::Http`] carrying the provider's own message and its `Retry-After`.
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
use tokio::time::{Instant, Sleep};

use super::{ModelError, Provider, TimeoutPhase, sse};

/// Bytes of a body kept for quoting.
const HEAD_BYTES: usize = 512;
/// Longest error body read (a misbehaving server could stream forever).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Bytes of a body quoted in messages.
const QUOTED: usize = 160;

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
    let retry_after = sse::retry_after(response.headers());
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
    Err(sse::http_error(provider, url, status.as_u16(), &text, content_type.as_deref(), retry_after))
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
    format!("`{}`", sse::truncate(&line, QUOTED))
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
    (!title.is_empty()).then(|| sse::truncate(&title, 80))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
