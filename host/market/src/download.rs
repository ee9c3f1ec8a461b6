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

use crate::oci;

/// Why fetching failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Message(String),
    #[error("{url}: not found (HTTP 404)")]
    NotFound { url: String },
    #[error(transparent)]
    Oci(#[from] oci::OciError),
}

impl From<String> for FetchError {
    fn from(s: String) -> Self {
        FetchError::Message(s)
    }
}

/// Whether a host is this machine.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// https, or http to loopback.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if parsed.host_str().is_some_and(is_loopback) => Ok(()),
        "http" => Err(format!("`{url}`: plain http is allowed only to this machine; use https")),
        other => Err(format!("`{url}`: `{other}:` URLs are not supported; use https")),
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
pub fn client() -> Result<reqwest::Client, String> {
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
        .map_err(|e| format!("cannot set up the HTTP client: {e}"))
}

/// A request's failure in words: a refused redirect says which hop and why.
fn request_failed(url: &str, e: &reqwest::Error) -> String {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<RedirectRefused>() {
            return format!("{url}: {refused}");
        }
        source = cause.source();
    }
    format!("{url}: {e}")
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
    let response = http.get(url).send().await.map_err(|e| request_failed(url, &e))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(FetchError::NotFound { url: url.to_string() });
    }
    if !status.is_success() {
        return Err(format!("{url}: HTTP {status}").into());
    }
    let total = response.content_length();
    if let Some(len) = total
        && len > max
    {
        return Err(too_large(url, len, max).into());
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("{url}: {e}"))?;
        body.extend_from_slice(&chunk);
        if body.len() as u64 > max {
            return Err(too_large(url, body.len() as u64, max).into());
        }
        progress(body.len() as u64, total);
    }
    Ok(body)
}

pub(crate) fn too_large(url: &str, size: u64, max: u64) -> String {
    format!(
        "{url}: more than {} MiB, over the {} MiB limit for a plugin bundle",
        size / (1024 * 1024),
        max / (1024 * 1024)
    )
}
