//! Downloads over HTTP for the marketplace: one client whose redirects are checked, and GET
//! into memory with a size cap.
//!
//! Downloads follow redirects (at most [`MAX_REDIRECTS`]), and every hop is checked before it
//! is followed ([`check_redirect`]): https anywhere; plain http only to a loopback address and
//! only when the download started on loopback; and a download that did not start on this
//! machine is never sent to a loopback or other internal address (see
//! [`talaria_runtime::internal_kind`]). Only address literals and `localhost` names are
//! recognised as internal at a hop: a public name that resolves to an internal address is not.

use futures_util::StreamExt as _;

/// Why a download failed. A message already says what its cause said, so the cause is not
/// given again as the error's source (an `{:#}` chain would repeat it).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Not a URL at all.
    #[error("`{url}` is not a URL: {reason}")]
    BadUrl { url: String, reason: String },
    /// Plain http to another machine.
    #[error("`{url}`: plain http is allowed only to this machine; use https")]
    PlainHttp { url: String },
    /// A scheme downloads do not speak (`ftp:`, `file:`...).
    #[error("`{url}`: `{scheme}:` URLs are not supported; use https")]
    Scheme { url: String, scheme: String },
    /// The HTTP client could not be built (the TLS stack).
    #[error("cannot set up the HTTP client: {0}")]
    Client(reqwest::Error),
    /// A redirect was not followed, naming the hop and why.
    #[error("{url}: {refused}")]
    Redirect { url: String, refused: RedirectRefused },
    /// The request or its body failed on the way (connection, TLS, timeout).
    #[error("{url}: {error}")]
    Network { url: String, error: reqwest::Error },
    #[error("{url}: not found (HTTP 404)")]
    NotFound { url: String },
    /// Any other status than success.
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: reqwest::StatusCode },
    /// More than the caller allows; the rest was not downloaded.
    #[error("{url}: more than {} MiB, over the {} MiB limit for a plugin bundle", mib(*size), mib(*max))]
    TooLarge { url: String, size: u64, max: u64 },
}

/// Whole MiB, for messages.
pub(crate) fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

/// Whether a host is this machine.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// https, or http to loopback.
pub(crate) fn check_url(url: &str) -> Result<(), FetchError> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| FetchError::BadUrl { url: url.to_string(), reason: e.to_string() })?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if parsed.host_str().is_some_and(is_loopback) => Ok(()),
        "http" => Err(FetchError::PlainHttp { url: url.to_string() }),
        other => Err(FetchError::Scheme { url: url.to_string(), scheme: other.to_string() }),
    }
}

/// Most redirects one download follows.
pub const MAX_REDIRECTS: usize = 10;

/// A redirect a download refused to follow, naming the hop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redirect from {from} to {to} refused: {why}")]
pub struct RedirectRefused {
    pub from: String,
    pub to: String,
    pub why: String,
}

/// Whether a download that started at `origin` may follow a redirect from `from` to `to`: https
/// anywhere, except that a download that did not start on this machine is never sent to a
/// loopback or other internal address; plain http only to a loopback address, and only when the
/// download started on loopback.
///
/// # Errors
/// The hop is refused, with why.
pub fn check_redirect(origin: &reqwest::Url, from: &reqwest::Url, to: &reqwest::Url) -> Result<(), RedirectRefused> {
    let refuse = |why: String| RedirectRefused { from: from.to_string(), to: to.to_string(), why };
    let from_loopback = origin.host_str().is_some_and(is_loopback);
    let host = to.host_str().unwrap_or_default();
    let internal = if is_loopback(host) || host.ends_with(".localhost") {
        Some(talaria_runtime::AddressKind::Loopback)
    } else {
        host.trim_start_matches('[').trim_end_matches(']').parse().ok().and_then(talaria_runtime::internal_kind)
    };
    match to.scheme() {
        "https" | "http" => {}
        other => return Err(refuse(format!("`{other}:` URLs are not followed; only https"))),
    }
    if let Some(kind) = internal
        && !from_loopback
    {
        return Err(refuse(format!(
            "a download from {} may not be sent to a {kind} address",
            origin.host_str().unwrap_or("another host")
        )));
    }
    if to.scheme() == "http" && internal != Some(talaria_runtime::AddressKind::Loopback) {
        return Err(refuse("plain http is only allowed to loopback addresses".to_string()));
    }
    Ok(())
}

/// The HTTP client for downloads: every redirect is checked by [`check_redirect`].
///
/// # Errors
/// The TLS stack cannot be set up.
pub fn client() -> Result<reqwest::Client, FetchError> {
    crate::install_crypto();
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let previous = attempt.previous();
        let (Some(origin), Some(from)) = (previous.first(), previous.last()) else {
            return attempt.error("a redirect with no request before it");
        };
        // The first URL is the request itself, not a redirect.
        if previous.len() > MAX_REDIRECTS {
            let why = format!("more than {MAX_REDIRECTS} redirects");
            let refused = RedirectRefused { from: from.to_string(), to: attempt.url().to_string(), why };
            return attempt.error(refused);
        }
        match check_redirect(origin, from, attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(refused) => attempt.error(refused),
        }
    });
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(15))
        .user_agent(concat!("talaria/", env!("CARGO_PKG_VERSION")))
        .redirect(redirects)
        .build()
        .map_err(FetchError::Client)
}

/// A request's failure: a refused redirect says which hop and why.
fn request_failed(url: &str, error: reqwest::Error) -> FetchError {
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<RedirectRefused>() {
            return FetchError::Redirect { url: url.to_string(), refused: refused.clone() };
        }
        source = cause.source();
    }
    FetchError::Network { url: url.to_string(), error }
}

/// GET `url` into memory, refusing more than `max` bytes; `progress` hears the bytes so far.
///
/// # Errors
/// Not found, another HTTP status, a network error, or too large.
pub async fn get(
    http: &reqwest::Client,
    url: &str,
    max: u64,
    progress: &(dyn Fn(u64, Option<u64>) + Send + Sync),
) -> Result<Vec<u8>, FetchError> {
    check_url(url)?;
    let response = http.get(url).send().await.map_err(|e| request_failed(url, e))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(FetchError::NotFound { url: url.to_string() });
    }
    if !status.is_success() {
        return Err(FetchError::Status { url: url.to_string(), status });
    }
    let total = response.content_length();
    if let Some(len) = total
        && len > max
    {
        return Err(FetchError::TooLarge { url: url.to_string(), size: len, max });
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| FetchError::Network { url: url.to_string(), error })?;
        body.extend_from_slice(&chunk);
        if body.len() as u64 > max {
            return Err(FetchError::TooLarge { url: url.to_string(), size: body.len() as u64, max });
        }
        progress(body.len() as u64, total);
    }
    Ok(body)
}
