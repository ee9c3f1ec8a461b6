//! The bundled `web` plugin: `web_fetch` gets a URL and returns readable markdown.
//!
//! The request goes through the SDK's HTTP client (wasi:http), so the host decides which hosts
//! are reachable: the manifest asks for any public host, and the host refuses loopback and
//! private addresses for such a wildcard grant. The conversion lives in `page`.
//!
//! ```text
//! web_fetch {"url": "https://example.com/"}
//! Title: Example Domain
//! URL: https://example.com/
//!
//! # Example Domain
//! ...
//! ```

mod page;

use serde::Deserialize;
use talaria_sdk::http::{self, Request};
use talaria_sdk::{Context, JsonSchema, ToolError, export_tools};

const USER_AGENT: &str = "talaria-web/0.1";
const ACCEPT: &str = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,text/*;q=0.8,*/*;q=0.5";
const DEFAULT_MAX_CHARS: usize = 50_000;
const MAX_MAX_CHARS: usize = 200_000;
/// Characters of an error page quoted in a failure.
const ERROR_EXCERPT_CHARS: usize = 300;

#[derive(Deserialize, JsonSchema)]
struct WebFetchArgs {
    /// Absolute http or https URL to fetch.
    url: String,
    /// Most characters of page text to return; longer pages are cut with a note. Default 50000,
    /// at most 200000.
    max_chars: Option<usize>,
}

fn web_fetch(args: WebFetchArgs, _ctx: &Context) -> Result<String, ToolError> {
    let url = check_url(&args.url)?;
    let max_chars = args.max_chars.unwrap_or(DEFAULT_MAX_CHARS).min(MAX_MAX_CHARS);
    if max_chars == 0 {
        return Err(ToolError::invalid("max_chars must be at least 1 (default 50000)"));
    }
    let resp = Request::get(url)
        .header("user-agent", USER_AGENT)
        .header("accept", ACCEPT)
        .send()
        .map_err(|e| fetch_error(url, &e))?;

    let content_type = resp.header("content-type");
    let kind = page::classify(content_type, &resp.body);
    let text = page::decode(&resp.body, page::charset(content_type, &resp.body));
    if !resp.is_success() {
        let excerpt = page::excerpt(kind.ok(), &text, &resp.url, ERROR_EXCERPT_CHARS);
        let reason = ::http::StatusCode::from_u16(resp.status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
        return Err(ToolError::failed(format!(
            "GET {} answered HTTP {} {reason}: {}",
            resp.url,
            resp.status,
            if excerpt.is_empty() { "(empty body)" } else { excerpt.as_str() }
        )));
    }
    let kind = kind.map_err(|what| {
        ToolError::failed(format!(
            "{} is {what}, which web_fetch cannot read: it reads HTML, plain text, JSON and XML",
            resp.url
        ))
    })?;
    Ok(match kind {
        page::Kind::Html => {
            let doc = page::to_markdown(&text, &resp.url);
            page::render(doc.title.as_deref(), &resp.url, &doc.markdown, max_chars)
        }
        page::Kind::Text => page::render(None, &resp.url, &text, max_chars),
    })
}

/// The URL trimmed, if it is an absolute http(s) URL.
fn check_url(url: &str) -> Result<&str, ToolError> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(ToolError::invalid(format!(
            "url {url:?} is not absolute: write it with its scheme, e.g. https://{url}"
        )));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(ToolError::invalid(format!(
            "url scheme {scheme:?} is not supported: use an http:// or https:// URL"
        )));
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err(ToolError::invalid(format!("url {url:?} has no host name")));
    }
    Ok(url)
}

fn fetch_error(url: &str, e: &http::Error) -> ToolError {
    match e {
        http::Error::Url(_) => ToolError::invalid(e.to_string()),
        http::Error::Denied(_) => ToolError::failed(format!(
            "{e}. web_fetch may reach public hosts only: loopback, private-network and link-local addresses are refused"
        )),
        http::Error::TooLarge(_) => ToolError::failed(format!("cannot fetch {url}: {e}")),
        http::Error::Transport(_) | http::Error::TooManyRedirects => {
            ToolError::failed(format!("cannot fetch {url}: {e}"))
        }
    }
}

export_tools! {
    /// Fetch a web page (HTTP GET) and return its content as readable text. HTML is reduced to
    /// the main article and converted to markdown (links kept, scripts and navigation dropped);
    /// plain text, JSON and XML are returned as they are; other content types (PDF, images,
    /// archives) are refused. The answer starts with "Title: ..." (when the page has one) and
    /// "URL: ..." (the final URL after redirects), then a blank line and the content, cut at
    /// max_chars (default 50000) with a note. Only public hosts are reachable. A non-2xx answer
    /// is an error quoting the status and the start of the body.
    web_fetch,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_absolute_http() {
        assert_eq!(check_url("  https://example.com/a ").ok(), Some("https://example.com/a"));
        assert_eq!(check_url("HTTP://example.com").ok(), Some("HTTP://example.com"));
        assert!(
            matches!(check_url("example.com"), Err(ToolError::InvalidArgs(m)) if m.contains("https://example.com"))
        );
        assert!(matches!(check_url("ftp://example.com"), Err(ToolError::InvalidArgs(m)) if m.contains("\"ftp\"")));
        assert!(matches!(check_url("https:///path"), Err(ToolError::InvalidArgs(m)) if m.contains("no host")));
    }

    #[test]
    fn denied_requests_explain_the_public_only_rule() {
        let e = fetch_error("http://127.0.0.1/", &http::Error::Denied("http://127.0.0.1/".into()));
        assert!(
            matches!(&e, ToolError::Failed(m) if m.contains("public hosts only") && m.contains("127.0.0.1")),
            "{e:?}"
        );
        let e = fetch_error("https://x.example/", &http::Error::Transport("DNS lookup failed".into()));
        assert_eq!(e, ToolError::failed("cannot fetch https://x.example/: request failed: DNS lookup failed"));
    }
}
