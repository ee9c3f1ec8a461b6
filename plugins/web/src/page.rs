//! Turning a fetched response into text a model can read: which content types are accepted, how
//! the body is decoded, HTML to markdown (readability extraction first, the whole page when that
//! finds no article), and the final layout with the title, the URL and a cut at `max_chars`.
//!
//! ```ignore
//! let kind = page::classify(resp.header("content-type"), &resp.body)?;
//! let text = page::decode(&resp.body, page::charset(resp.header("content-type"), &resp.body));
//! let doc = page::to_markdown(&text, &resp.url);
//! let out = page::render(doc.title.as_deref(), &resp.url, &doc.markdown, 50_000);
//! ```

use std::fmt::Write as _;

use dom_query::Document;
use dom_smoothie::{Config, Readability, TextMode};

/// Readability output shorter than this (in characters) is taken as "no article found".
const MIN_ARTICLE_CHARS: usize = 200;

/// Elements left out when a whole page is converted.
const SKIP_TAGS: &[&str] =
    &["script", "style", "meta", "head", "noscript", "template", "svg", "iframe", "nav", "footer", "form", "button"];

/// How a response body is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Converted to markdown.
    Html,
    /// Passed through: text/*, JSON, XML, JavaScript.
    Text,
}

/// The media type without parameters, lower case (`text/html; charset=utf-8` -> `text/html`).
pub fn media_type(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Decide how to handle a body, or name the content type that cannot be read.
pub fn classify(content_type: Option<&str>, body: &[u8]) -> Result<Kind, String> {
    let media = content_type.map(media_type).unwrap_or_default();
    match media.as_str() {
        "text/html" | "application/xhtml+xml" => Ok(Kind::Html),
        "application/json"
        | "application/xml"
        | "application/javascript"
        | "application/x-javascript"
        | "application/ecmascript" => Ok(Kind::Text),
        m if m.starts_with("text/") || m.ends_with("+json") || m.ends_with("+xml") => Ok(Kind::Text),
        "" | "application/octet-stream" | "binary/octet-stream" => sniff(body).ok_or_else(|| {
            let named = if media.is_empty() { "no content type".to_string() } else { media.clone() };
            format!("{named} and the body does not look like text")
        }),
        other => Err(other.to_string()),
    }
}

/// Guess the kind of an untyped body from its first kilobyte.
fn sniff(body: &[u8]) -> Option<Kind> {
    let head = &body[..body.len().min(1024)];
    if head.contains(&0) {
        return None;
    }
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let start = text.trim_start();
    if start.starts_with("<!doctype html") || start.starts_with("<html") || text.contains("<body") {
        Some(Kind::Html)
    } else if text.chars().filter(|&c| c == char::REPLACEMENT_CHARACTER).count() * 10 > text.chars().count() {
        None
    } else {
        Some(Kind::Text)
    }
}

/// The charset named by the content type or, for HTML, a `<meta charset>` near the start.
pub fn charset(content_type: Option<&str>, body: &[u8]) -> Option<String> {
    let from_header = content_type.and_then(|ct| find_charset(&ct.to_ascii_lowercase()));
    from_header.or_else(|| {
        let head = String::from_utf8_lossy(&body[..body.len().min(2048)]).to_ascii_lowercase();
        find_charset(&head)
    })
}

fn find_charset(text: &str) -> Option<String> {
    let at = text.find("charset=")? + "charset=".len();
    let value: String = text[at..]
        .trim_start_matches(['"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        .collect();
    (!value.is_empty()).then_some(value)
}

/// The body as text. UTF-8 (invalid bytes replaced) unless the charset is Latin-1 or
/// Windows-1252, which are mapped exactly; other charsets are read as UTF-8.
pub fn decode(body: &[u8], charset: Option<String>) -> String {
    match charset.as_deref() {
        Some("iso-8859-1" | "latin1" | "latin-1" | "iso8859-1" | "windows-1252" | "cp1252" | "us-ascii" | "ascii")
            if std::str::from_utf8(body).is_err() =>
        {
            body.iter().map(|&b| windows_1252(b)).collect()
        }
        _ => String::from_utf8_lossy(body).into_owned(),
    }
}

/// One Windows-1252 byte (a superset of Latin-1's printable range, as browsers read Latin-1).
fn windows_1252(b: u8) -> char {
    const HIGH: [char; 32] = [
        '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8d}', 'Ž', '\u{8f}', '\u{90}', '‘',
        '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9d}', 'ž', 'Ÿ',
    ];
    match b {
        0x80..=0x9f => HIGH[usize::from(b - 0x80)],
        _ => char::from(b),
    }
}

/// A page converted to markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markdown {
    pub title: Option<String>,
    pub markdown: String,
}

/// Convert HTML to markdown: the main article when readability finds one, else the whole page
/// without navigation, scripts and forms. `url` makes relative links absolute.
pub fn to_markdown(html: &str, url: &str) -> Markdown {
    let config = Config { text_mode: TextMode::Markdown, ..Config::default() };
    let readability =
        Readability::new(html, Some(url), Some(config.clone())).or_else(|_| Readability::new(html, None, Some(config)));
    if let Ok(mut readability) = readability
        && let Ok(article) = readability.parse()
    {
        let markdown = tidy(&article.text_content);
        if markdown.chars().count() >= MIN_ARTICLE_CHARS {
            let title = Some(article.title.trim().to_string()).filter(|t| !t.is_empty());
            return Markdown { title, markdown };
        }
    }
    let doc = Document::from(html);
    let title = doc.select("title").text().trim().to_string();
    let body = doc.select("body");
    let markdown = match body.nodes().first() {
        Some(node) => node.md(Some(SKIP_TAGS)),
        None => doc.md(Some(SKIP_TAGS)),
    };
    Markdown { title: Some(collapse_spaces(&title)).filter(|t| !t.is_empty()), markdown: tidy(&markdown) }
}

/// Trailing spaces removed, runs of blank lines cut to one, ends trimmed.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

fn collapse_spaces(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A short single-line excerpt of an error page, for failure messages.
pub fn excerpt(kind: Option<Kind>, text: &str, url: &str, max_chars: usize) -> String {
    let plain = match kind {
        Some(Kind::Html) => to_markdown(text, url).markdown,
        _ => text.to_string(),
    };
    let flat = collapse_spaces(&plain);
    match flat.char_indices().nth(max_chars) {
        None => flat,
        Some((cut, _)) => format!("{}…", &flat[..cut]),
    }
}

/// The tool's answer: title and final URL, a blank line, then `body` cut at `max_chars`.
pub fn render(title: Option<&str>, url: &str, body: &str, max_chars: usize) -> String {
    let mut out = String::new();
    if let Some(title) = title {
        let _ = writeln!(out, "Title: {title}");
    }
    let _ = writeln!(out, "URL: {url}");
    out.push('\n');
    match body.char_indices().nth(max_chars) {
        None => out.push_str(body),
        Some((cut, _)) => {
            let total = body.chars().count();
            out.push_str(&body[..cut]);
            let _ = write!(
                out,
                "\n\n[... truncated: showing {max_chars} of {total} characters; call again with a larger max_chars to read more]"
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARTICLE: &str = r#"<!DOCTYPE html><html><head><title>Ferris Facts | Crab Blog</title>
        <style>body { color: red }</style><script>var tracking = 1;</script></head>
        <body><nav><a href="/">Home</a> <a href="/about">About</a></nav>
        <article><h1>Ferris Facts</h1>
        <p>Ferris is the unofficial mascot of the Rust programming language. The crab first appeared
        in community art and quickly became a beloved symbol of the language and its community.</p>
        <p>Many people draw Ferris in many different styles. See the <a href="/gallery">gallery</a>
        for a collection of drawings submitted by readers from all over the world, every one unique.</p>
        <h2>Origins</h2>
        <p>The name is a pun on ferrous, meaning containing iron, which is what rust is made from.
        This wordplay is typical of the humour found throughout the Rust community and its projects.</p>
        </article><footer>Copyright 2026</footer></body></html>"#;

    #[test]
    fn article_becomes_markdown_without_chrome() {
        let md = to_markdown(ARTICLE, "https://crabs.example/posts/ferris");
        assert_eq!(md.title.as_deref(), Some("Ferris Facts | Crab Blog"));
        assert!(md.markdown.contains("## Origins"), "{}", md.markdown);
        assert!(md.markdown.contains("unofficial mascot of the Rust"), "{}", md.markdown);
        assert!(md.markdown.contains("[gallery](https://crabs.example/gallery)"), "{}", md.markdown);
        assert!(!md.markdown.contains("tracking"), "{}", md.markdown);
        assert!(!md.markdown.contains("color: red"), "{}", md.markdown);
        assert!(!md.markdown.contains("Copyright"), "{}", md.markdown);
    }

    #[test]
    fn short_pages_fall_back_to_the_whole_body() {
        let html = "<html><head><title> Tiny\n page </title></head><body><nav>menu</nav>\
                    <h1>Hello</h1><ul><li>one</li><li>two</li></ul><script>x()</script></body></html>";
        let md = to_markdown(html, "https://example.com/");
        assert_eq!(md.title.as_deref(), Some("Tiny page"));
        assert!(md.markdown.contains("# Hello"), "{}", md.markdown);
        assert!(md.markdown.contains("- one"), "{}", md.markdown);
        assert!(!md.markdown.contains("menu"), "{}", md.markdown);
        assert!(!md.markdown.contains("x()"), "{}", md.markdown);
    }

    #[test]
    fn content_types_are_classified() {
        assert_eq!(classify(Some("text/html; charset=UTF-8"), b""), Ok(Kind::Html));
        assert_eq!(classify(Some("application/xhtml+xml"), b""), Ok(Kind::Html));
        assert_eq!(classify(Some("text/plain"), b""), Ok(Kind::Text));
        assert_eq!(classify(Some("application/json"), b""), Ok(Kind::Text));
        assert_eq!(classify(Some("application/ld+json"), b""), Ok(Kind::Text));
        assert_eq!(classify(Some("application/rss+xml"), b""), Ok(Kind::Text));
        assert_eq!(classify(Some("application/pdf"), b"%PDF"), Err("application/pdf".to_string()));
        assert_eq!(classify(Some("image/png"), b""), Err("image/png".to_string()));
    }

    #[test]
    fn untyped_bodies_are_sniffed() {
        assert_eq!(classify(None, b"  <!DOCTYPE html><html></html>"), Ok(Kind::Html));
        assert_eq!(classify(None, b"just some words"), Ok(Kind::Text));
        assert!(classify(Some("application/octet-stream"), b"\x89PNG\0\0").is_err_and(|e| e.contains("octet-stream")));
        assert!(classify(None, b"\0\x01").is_err_and(|e| e.contains("no content type")));
    }

    #[test]
    fn charsets_from_header_or_meta() {
        assert_eq!(charset(Some("text/html; charset=ISO-8859-1"), b""), Some("iso-8859-1".to_string()));
        assert_eq!(charset(Some("text/html"), b"<meta charset=\"windows-1252\">"), Some("windows-1252".to_string()));
        assert_eq!(charset(Some("text/html"), b"<p>hi</p>"), None);
    }

    #[test]
    fn latin1_is_decoded_and_utf8_is_trusted() {
        assert_eq!(decode(b"caf\xe9 \x80", Some("iso-8859-1".to_string())), "café €");
        // A page that says Latin-1 but is valid UTF-8 is read as UTF-8.
        assert_eq!(decode("café".as_bytes(), Some("iso-8859-1".to_string())), "café");
        assert_eq!(decode(b"ok \xff", None), "ok \u{fffd}");
    }

    #[test]
    fn render_puts_title_and_url_first_and_cuts() {
        assert_eq!(render(Some("T"), "https://x/", "body", 100), "Title: T\nURL: https://x/\n\nbody");
        assert_eq!(render(None, "https://x/", "body", 100), "URL: https://x/\n\nbody");
        let cut = render(None, "https://x/", "abcdefghij", 4);
        assert_eq!(
            cut,
            "URL: https://x/\n\nabcd\n\n[... truncated: showing 4 of 10 characters; call again with a larger max_chars to read more]"
        );
    }

    #[test]
    fn excerpts_are_flat_and_short() {
        let html =
            "<html><head><title>404</title></head><body><h1>Not   Found</h1>\n<p>No such page.</p></body></html>";
        assert_eq!(excerpt(Some(Kind::Html), html, "https://x/", 100), "# Not Found No such page.");
        assert_eq!(excerpt(Some(Kind::Text), "a\n\nb c d", "https://x/", 3), "a b…");
    }

    #[test]
    fn tidy_collapses_blank_runs() {
        assert_eq!(tidy("\n\na  \n\n\n\nb\n\n"), "a\n\nb");
    }
}
