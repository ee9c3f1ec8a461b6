//! Outgoing HTTP requests, to hosts the user granted (`network` capability).
//!
//! The host refuses any other destination; such a refusal arrives as [`Error::Denied`].
//! Redirects are followed (at most [`MAX_REDIRECTS`]); the host re-checks every hop, and a secret
//! placeholder is only ever filled in for the secret's own host.
//!
//! ```ignore
//! use talaria_sdk::http::Request;
//! let page = Request::get("https://example.com/").header("accept", "text/html").send()?;
//! let text = page.text()?;
//! ```

use std::fmt;
use std::io::{Read, Write};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method as WasiMethod, OutgoingBody, OutgoingRequest, Scheme};

/// An HTTP method, for [`Request::new`] (`Method::PUT`, ...).
pub use ::http::Method;

/// Redirects followed before giving up.
pub const MAX_REDIRECTS: usize = 5;

/// Response bodies larger than this are refused unless [`Request::max_body`] raises it.
pub const DEFAULT_MAX_BODY: usize = 10 * 1024 * 1024;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The URL could not be used.
    Url(String),
    /// The host refused the destination: the plugin was not granted it.
    Denied(String),
    /// DNS, connection, TLS or protocol failure.
    Transport(String),
    /// The body was larger than allowed.
    TooLarge(usize),
    /// More than [`MAX_REDIRECTS`] redirects.
    TooManyRedirects,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(m) => write!(f, "bad URL: {m}"),
            Self::Denied(url) => write!(f, "the host refused the request to {url}: its network grants do not allow it"),
            Self::Transport(m) => write!(f, "request failed: {m}"),
            Self::TooLarge(n) => write!(f, "response body is larger than {n} bytes"),
            Self::TooManyRedirects => write!(f, "more than {MAX_REDIRECTS} redirects"),
        }
    }
}

impl std::error::Error for Error {}

/// A request being built.
#[derive(Debug, Clone)]
pub struct Request {
    method: http::Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    max_body: usize,
    follow_redirects: bool,
}

/// A received response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names are lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The URL that answered, after redirects.
    pub url: String,
}

impl Request {
    pub fn new(method: http::Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            follow_redirects: true,
        }
    }

    pub fn get(url: impl Into<String>) -> Self {
        Self::new(http::Method::GET, url)
    }

    pub fn post(url: impl Into<String>) -> Self {
        Self::new(http::Method::POST, url)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// A JSON body with its content type.
    pub fn json<T: serde::Serialize>(self, value: &T) -> Result<Self, serde_json::Error> {
        Ok(self.header("content-type", "application/json").body(serde_json::to_vec(value)?))
    }

    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Return 3xx responses instead of following them.
    pub fn no_redirects(mut self) -> Self {
        self.follow_redirects = false;
        self
    }

    /// Send the request and read the whole response.
    pub fn send(self) -> Result<Response, Error> {
        let mut url = self.url.clone();
        let mut method = self.method.clone();
        let mut body = self.body.clone();
        for _ in 0..=MAX_REDIRECTS {
            let resp = send_once(&method, &url, &self.headers, &body, self.max_body)?;
            let location = resp.header("location").map(str::to_string);
            match (self.follow_redirects, resp.status, location) {
                (true, 301 | 302 | 303 | 307 | 308, Some(location)) => {
                    if resp.status == 303 || (resp.status != 307 && resp.status != 308 && method == http::Method::POST)
                    {
                        method = http::Method::GET;
                        body.clear();
                    }
                    url = join_url(&url, &location)?;
                }
                _ => return Ok(resp),
            }
        }
        Err(Error::TooManyRedirects)
    }
}

impl Response {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body decoded as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// `GET url` and read the response.
pub fn get(url: &str) -> Result<Response, Error> {
    Request::get(url).send()
}

fn send_once(
    method: &http::Method,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    max_body: usize,
) -> Result<Response, Error> {
    let uri: http::Uri = url.parse().map_err(|e| Error::Url(format!("{url}: {e}")))?;
    let scheme = match uri.scheme_str() {
        Some("https") => Scheme::Https,
        Some("http") => Scheme::Http,
        other => return Err(Error::Url(format!("{url}: scheme {other:?} is not http or https"))),
    };
    let authority = uri.authority().ok_or_else(|| Error::Url(format!("{url}: no host")))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());

    let fields: Vec<(String, Vec<u8>)> = headers.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect();
    let fields = Fields::from_list(&fields).map_err(|e| Error::Url(format!("bad header: {e:?}")))?;
    let request = OutgoingRequest::new(fields);
    let unit = |_: ()| Error::Url(format!("{url}: rejected by the request builder"));
    request.set_method(&wit_method(method)).map_err(unit)?;
    request.set_scheme(Some(&scheme)).map_err(unit)?;
    request.set_authority(Some(authority.as_str())).map_err(unit)?;
    request.set_path_with_query(Some(path)).map_err(unit)?;

    let outgoing = request.body().map_err(|()| Error::Transport("request body unavailable".into()))?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| map_error(url, e))?;
    if !body.is_empty() {
        let mut stream = outgoing.write().map_err(|()| Error::Transport("request body stream unavailable".into()))?;
        Write::write_all(&mut stream, body).map_err(|e| Error::Transport(e.to_string()))?;
        Write::flush(&mut stream).map_err(|e| Error::Transport(e.to_string()))?;
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| map_error(url, e))?;

    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(r))) => r,
        Some(Ok(Err(e))) => return Err(map_error(url, e)),
        Some(Err(())) | None => return Err(Error::Transport("response lost".into())),
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), String::from_utf8_lossy(&v).into_owned()))
        .collect();
    let incoming = response.consume().map_err(|()| Error::Transport("response body unavailable".into()))?;
    let mut stream = incoming.stream().map_err(|()| Error::Transport("response body stream unavailable".into()))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = Read::read(&mut stream, &mut chunk).map_err(|e| Error::Transport(e.to_string()))?;
        if n == 0 {
            break;
        }
        if buf.len() + n > max_body {
            return Err(Error::TooLarge(max_body));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Response { status, headers, body: buf, url: url.to_string() })
}

fn wit_method(m: &http::Method) -> WasiMethod {
    match m.as_str() {
        "GET" => WasiMethod::Get,
        "HEAD" => WasiMethod::Head,
        "POST" => WasiMethod::Post,
        "PUT" => WasiMethod::Put,
        "DELETE" => WasiMethod::Delete,
        "PATCH" => WasiMethod::Patch,
        "OPTIONS" => WasiMethod::Options,
        other => WasiMethod::Other(other.to_string()),
    }
}

fn map_error(url: &str, e: ErrorCode) -> Error {
    match e {
        ErrorCode::HttpRequestDenied => Error::Denied(url.to_string()),
        ErrorCode::DnsError(d) => Error::Transport(format!("DNS lookup failed for {url}: {:?}", d.rcode)),
        ErrorCode::ConnectionRefused => Error::Transport(format!("connection refused by {url}")),
        ErrorCode::ConnectionTimeout => Error::Transport(format!("connection to {url} timed out")),
        ErrorCode::InternalError(Some(m)) => Error::Transport(m),
        other => Error::Transport(format!("{other:?}")),
    }
}

/// Resolve a `Location` header against the URL that sent it.
fn join_url(base: &str, location: &str) -> Result<String, Error> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return Ok(location.to_string());
    }
    let uri: http::Uri = base.parse().map_err(|e| Error::Url(format!("{base}: {e}")))?;
    let scheme = uri.scheme_str().unwrap_or("https");
    let authority = uri.authority().map_or("", |a| a.as_str());
    if let Some(rest) = location.strip_prefix("//") {
        return Ok(format!("{scheme}://{rest}"));
    }
    if location.starts_with('/') {
        return Ok(format!("{scheme}://{authority}{location}"));
    }
    let dir = uri.path().rsplit_once('/').map_or("", |(d, _)| d);
    Ok(format!("{scheme}://{authority}{dir}/{location}"))
}

/// `text` as one component of a URL (a path segment, a query value): everything but letters,
/// digits and `-._~` percent-encoded (RFC 3986). Matrix room ids (`!abc:example.org`) need it.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
