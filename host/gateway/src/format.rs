//! The agent's markdown as each platform shows it, split at the platform's message limit.
//!
//! Answers are CommonMark (with tables and strikethrough); platforms each take something else:
//! Telegram a small HTML subset, Matrix HTML (beside a plain body), Slack its own `mrkdwn`,
//! Discord markdown without tables. [`render`] converts one answer; [`split`] first cuts the
//! answer into pieces that fit the limit once converted, on the best boundary it finds (between
//! blocks, then lines, then words), never inside a code block's fence: a code block cut in two
//! is closed and reopened.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// What a platform's messages are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Telegram's `parse_mode=HTML` subset.
    TelegramHtml,
    /// Matrix `org.matrix.custom.html`.
    MatrixHtml,
    /// Slack `mrkdwn`.
    Slack,
    /// Discord markdown (no tables).
    Discord,
    /// No markup at all.
    Plain,
}

/// `markdown` converted for `format`.
pub fn render(markdown: &str, format: Format) -> String {
    if format == Format::Discord && !has_table(markdown) {
        return markdown.trim_end().to_string();
    }
    let mut w = Writer { format, out: String::new(), lists: Vec::new(), link: Vec::new(), table: None };
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(markdown, options) {
        w.event(event);
    }
    let out = w.out.trim_end();
    if format == Format::MatrixHtml { html_breaks(out) } else { out.to_string() }
}

/// Line ends as `<br>` outside `<pre>` blocks: HTML ignores them, Matrix clients show HTML.
fn html_breaks(html: &str) -> String {
    let mut out = String::with_capacity(html.len() + 16);
    let mut rest = html;
    while let Some(start) = rest.find("<pre>") {
        out.push_str(&rest[..start].replace('\n', "<br>"));
        let end = rest[start..].find("</pre>").map_or(rest.len(), |e| start + e + "</pre>".len());
        out.push_str(&rest[start..end]);
        rest = &rest[end..];
    }
    out.push_str(&rest.replace('\n', "<br>"));
    out
}

fn has_table(markdown: &str) -> bool {
    Parser::new_ext(markdown, Options::ENABLE_TABLES).any(|e| matches!(e, Event::Start(Tag::Table(_))))
}

struct Writer {
    format: Format,
    out: String,
    /// Each open list's next number (`None`: bullets).
    lists: Vec<Option<u64>>,
    /// Open links' addresses.
    link: Vec<String>,
    /// A table being gathered: rows of cells, drawn as aligned text in a code block.
    table: Option<Vec<Vec<String>>>,
}

impl Writer {
    fn html(&self) -> bool {
        matches!(self.format, Format::TelegramHtml | Format::MatrixHtml)
    }

    /// Text escaped for the format.
    fn text(&mut self, t: &str) {
        if let Some(rows) = &mut self.table {
            if let Some(cell) = rows.last_mut().and_then(|r| r.last_mut()) {
                cell.push_str(t);
            }
            return;
        }
        match self.format {
            Format::TelegramHtml | Format::MatrixHtml | Format::Slack => self.out.push_str(&escape(t)),
            Format::Discord | Format::Plain => self.out.push_str(t),
        }
    }

    fn raw(&mut self, s: &str) {
        if self.table.is_none() {
            self.out.push_str(s);
        }
    }

    fn block_end(&mut self) {
        if self.table.is_none() && !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push_str(if self.out.ends_with('\n') { "\n" } else { "\n\n" });
        }
    }

    fn mark(&self, html: &'static str, slack: &'static str, discord: &'static str) -> &'static str {
        match self.format {
            Format::TelegramHtml | Format::MatrixHtml => html,
            Format::Slack => slack,
            Format::Discord => discord,
            Format::Plain => "",
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => self.text(&t),
            Event::Code(t) => {
                let (open, close) = if self.html() {
                    ("<code>", "</code>")
                } else if self.format == Format::Plain {
                    ("", "")
                } else {
                    ("`", "`")
                };
                self.raw(open);
                self.text(&t);
                self.raw(close);
            }
            Event::Html(t) | Event::InlineHtml(t) => self.text(&t),
            // A single line end is kept as one: in a chat, people mean the line break they
            // wrote (markdown would join the lines with a space).
            Event::SoftBreak | Event::HardBreak => {
                self.raw(if self.format == Format::MatrixHtml { "<br>" } else { "\n" });
            }
            Event::Rule => {
                self.raw("———");
                self.block_end();
            }
            Event::TaskListMarker(done) => self.text(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(n) => self.text(&format!("[{n}]")),
            Event::InlineMath(t) | Event::DisplayMath(t) => self.text(&t),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph | Tag::HtmlBlock | Tag::MetadataBlock(_) => {}
            Tag::Heading { level, .. } => {
                let open = match (self.format, level) {
                    (Format::MatrixHtml, HeadingLevel::H1) => "<h1>",
                    (Format::MatrixHtml, HeadingLevel::H2) => "<h2>",
                    (Format::MatrixHtml, _) => "<h3>",
                    _ => self.mark("<b>", "*", "**"),
                };
                self.raw(open);
            }
            Tag::BlockQuote(_) => self.raw(self.mark("<blockquote>", "> ", "> ")),
            Tag::CodeBlock(kind) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().unwrap_or_default().to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                let open = match self.format {
                    Format::TelegramHtml | Format::MatrixHtml if !lang.is_empty() => {
                        format!("<pre><code class=\"language-{}\">", escape(&lang))
                    }
                    Format::TelegramHtml | Format::MatrixHtml => "<pre><code>".to_string(),
                    Format::Slack => "```\n".to_string(),
                    Format::Discord => format!("```{lang}\n"),
                    Format::Plain => String::new(),
                };
                self.raw(&open);
            }
            Tag::List(start) => {
                if !self.out.is_empty() && !self.out.ends_with('\n') {
                    self.raw("\n");
                }
                self.lists.push(start);
            }
            Tag::Item => {
                let depth = self.lists.len().saturating_sub(1);
                let bullet = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let b = format!("{n}. ");
                        *n += 1;
                        b
                    }
                    _ => "• ".to_string(),
                };
                self.raw(&format!("{}{bullet}", "  ".repeat(depth)));
            }
            Tag::Emphasis => self.raw(self.mark("<i>", "_", "*")),
            Tag::Strong => self.raw(self.mark("<b>", "*", "**")),
            Tag::Strikethrough => self.raw(self.mark("<s>", "~", "~~")),
            Tag::Link { dest_url, .. } => {
                let url = dest_url.to_string();
                // Only web and mail addresses become links: a `javascript:` one from a model
                // that read a hostile page must not reach a chat client as a link.
                let lower = url.to_ascii_lowercase();
                if !["http://", "https://", "mailto:"].iter().any(|s| lower.starts_with(s)) {
                    self.link.push(String::new());
                    return;
                }
                match self.format {
                    Format::TelegramHtml | Format::MatrixHtml => self.raw(&format!("<a href=\"{}\">", escape(&url))),
                    Format::Slack => self.raw(&format!("<{}|", escape(&url))),
                    Format::Discord => self.raw("["),
                    Format::Plain => {}
                }
                self.link.push(url);
            }
            Tag::Image { dest_url, .. } => self.link.push(dest_url.to_string()),
            Tag::Table(_) => self.table = Some(Vec::new()),
            Tag::TableHead | Tag::TableRow => {
                if let Some(rows) = &mut self.table {
                    rows.push(Vec::new());
                }
            }
            Tag::TableCell => {
                if let Some(row) = self.table.as_mut().and_then(|r| r.last_mut()) {
                    row.push(String::new());
                }
            }
            Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::Superscript
            | Tag::Subscript => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock | TagEnd::MetadataBlock(_) => self.block_end(),
            TagEnd::Heading(level) => {
                let close = match (self.format, level) {
                    (Format::MatrixHtml, HeadingLevel::H1) => "</h1>",
                    (Format::MatrixHtml, HeadingLevel::H2) => "</h2>",
                    (Format::MatrixHtml, _) => "</h3>",
                    _ => self.mark("</b>", "*", "**"),
                };
                self.raw(close);
                self.block_end();
            }
            TagEnd::BlockQuote(_) => {
                let trimmed = self.out.trim_end().len();
                self.out.truncate(trimmed);
                self.raw(self.mark("</blockquote>", "", ""));
                self.block_end();
            }
            TagEnd::CodeBlock => {
                if !self.out.ends_with('\n') {
                    self.raw("\n");
                }
                let close = match self.format {
                    Format::TelegramHtml | Format::MatrixHtml => "</code></pre>",
                    Format::Slack | Format::Discord => "```",
                    Format::Plain => "",
                };
                if close.is_empty() {
                    let trimmed = self.out.trim_end().len();
                    self.out.truncate(trimmed);
                }
                self.raw(close);
                self.block_end();
            }
            TagEnd::List(_) => {
                self.lists.pop();
                if self.lists.is_empty() {
                    self.block_end();
                }
            }
            TagEnd::Item => {
                if !self.out.ends_with('\n') {
                    self.raw("\n");
                }
            }
            TagEnd::Emphasis => self.raw(self.mark("</i>", "_", "*")),
            TagEnd::Strong => self.raw(self.mark("</b>", "*", "**")),
            TagEnd::Strikethrough => self.raw(self.mark("</s>", "~", "~~")),
            TagEnd::Link => {
                let url = self.link.pop().unwrap_or_default();
                if url.is_empty() {
                    return;
                }
                match self.format {
                    Format::TelegramHtml | Format::MatrixHtml => self.raw("</a>"),
                    Format::Slack => self.raw(">"),
                    Format::Discord => self.raw(&format!("](<{url}>)")),
                    Format::Plain => self.raw(&format!(" ({url})")),
                }
            }
            TagEnd::Image => {
                let url = self.link.pop().unwrap_or_default();
                self.text(&format!(" ({url})"));
            }
            TagEnd::Table => {
                let rows = self.table.take().unwrap_or_default();
                self.table_as_code(&rows);
            }
            TagEnd::TableHead | TagEnd::TableRow | TagEnd::TableCell => {}
            TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::Superscript
            | TagEnd::Subscript => {}
        }
    }

    /// A table as aligned columns in a code block (no platform here draws markdown tables).
    fn table_as_code(&mut self, rows: &[Vec<String>]) {
        let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
        let width = |c: usize| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols).map(width).collect();
        let mut text = String::new();
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<String> =
                (0..cols).map(|c| format!("{:<w$}", row.get(c).map_or("", String::as_str), w = widths[c])).collect();
            text.push_str(cells.join("  ").trim_end());
            text.push('\n');
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                text.push_str(&rule.join("  "));
                text.push('\n');
            }
        }
        let (open, close) = match self.format {
            Format::TelegramHtml | Format::MatrixHtml => ("<pre>", "</pre>"),
            Format::Slack | Format::Discord => ("```\n", "```"),
            Format::Plain => ("", ""),
        };
        self.out.push_str(open);
        if self.html() || self.format == Format::Slack {
            self.out.push_str(&escape(&text));
        } else {
            self.out.push_str(&text);
        }
        self.out.push_str(close);
        self.block_end();
    }
}

/// `&`, `<` and `>` as entities (what Telegram's HTML, Matrix HTML and Slack's mrkdwn need).
fn escape(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `markdown` cut into pieces that each fit `limit` characters once rendered for `format`,
/// rendered. Blocks stay whole when they fit; a longer one is cut between lines, then words,
/// and a code block cut in two is closed and reopened with its fence.
pub fn split(markdown: &str, format: Format, limit: usize) -> Vec<String> {
    let limit = limit.max(64);
    let fits = |md: &str| render(md, format).chars().count() <= limit;
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    for block in blocks(markdown) {
        let joined = if current.is_empty() { block.clone() } else { format!("{current}\n\n{block}") };
        if fits(&joined) {
            current = joined;
            continue;
        }
        if !current.is_empty() {
            pieces.push(std::mem::take(&mut current));
        }
        if fits(&block) {
            current = block;
        } else {
            let mut parts = cut(&block, &fits);
            current = parts.pop().unwrap_or_default();
            pieces.extend(parts);
        }
    }
    if !current.trim().is_empty() {
        pieces.push(current);
    }
    pieces.iter().map(|p| render(p, format)).filter(|p| !p.is_empty()).collect()
}

/// The blocks of `markdown`: split at blank lines outside code fences.
fn blocks(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut fence: Option<String> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if let Some(f) = &fence {
            if trimmed.starts_with(f.as_str())
                && trimmed.trim_start_matches(f.chars().next().unwrap_or('`')).trim().is_empty()
            {
                fence = None;
            }
        } else if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let c = trimmed.chars().next().unwrap_or('`');
            fence = Some(trimmed.chars().take_while(|x| *x == c).collect());
        } else if trimmed.is_empty() {
            if !current.trim().is_empty() {
                out.push(std::mem::take(&mut current).trim_end().to_string());
            }
            current.clear();
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.trim().is_empty() {
        out.push(current.trim_end().to_string());
    }
    out
}

/// One block too long for a message, cut into pieces that fit: by lines (a code block's lines
/// each piece wrapped in the block's fences), a line too long by words, a word by characters.
fn cut(block: &str, fits: &dyn Fn(&str) -> bool) -> Vec<String> {
    let first = block.lines().next().unwrap_or_default().trim_start();
    let fenced = first.starts_with("```") || first.starts_with("~~~");
    let (open, close, body): (String, String, Vec<&str>) = if fenced {
        let lines: Vec<&str> = block.lines().collect();
        let inner = lines[1..lines.len().saturating_sub(1).max(1)].to_vec();
        let fence: String = first.chars().take_while(|c| *c == '`' || *c == '~').collect();
        (format!("{first}\n"), format!("\n{fence}"), inner)
    } else {
        (String::new(), String::new(), block.lines().collect())
    };
    let wrap = |s: &str| format!("{open}{s}{close}");
    let mut out = Vec::new();
    let mut current = String::new();
    let units: Vec<String> =
        body.iter()
            .flat_map(|line| {
                if fits(&wrap(line)) { vec![(*line).to_string()] } else { words(line, &|w: &str| fits(&wrap(w))) }
            })
            .collect();
    for unit in units {
        let joined = if current.is_empty() { unit.clone() } else { format!("{current}\n{unit}") };
        if fits(&wrap(&joined)) || current.is_empty() {
            current = joined;
        } else {
            out.push(wrap(&current));
            current = unit;
        }
    }
    if !current.is_empty() {
        out.push(wrap(&current));
    }
    out
}

/// A line too long for a message, as pieces that fit: cut between words, a word by characters.
fn words(line: &str, fits: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for word in line.split(' ') {
        let joined = if current.is_empty() { word.to_string() } else { format!("{current} {word}") };
        if fits(&joined) {
            current = joined;
            continue;
        }
        if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        if fits(word) {
            current = word.to_string();
        } else {
            let mut part = String::new();
            for c in word.chars() {
                part.push(c);
                if !fits(&part) {
                    part.pop();
                    out.push(std::mem::take(&mut part));
                    part.push(c);
                }
            }
            current = part;
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = "## Result\n\nThe **build** passed, see [the log](https://ci.test/1?a=1&b=2).\n\n- `cargo test` <ok>\n- _fast_ and ~~slow~~\n\n```rust\nfn main() {}\n```\n\n| a | b |\n|---|---|\n| 1 | 22 |\n";

    #[test]
    fn telegram_gets_its_html_subset_escaped() {
        assert_eq!(
            render(ANSWER, Format::TelegramHtml),
            "<b>Result</b>\n\nThe <b>build</b> passed, see <a href=\"https://ci.test/1?a=1&amp;b=2\">the log</a>.\n\n\
             • <code>cargo test</code> &lt;ok&gt;\n• <i>fast</i> and <s>slow</s>\n\n\
             <pre><code class=\"language-rust\">fn main() {}\n</code></pre>\n\n<pre>a  b\n-  --\n1  22\n</pre>"
        );
    }

    #[test]
    fn slack_gets_mrkdwn_and_discord_keeps_markdown_but_not_tables() {
        let slack = render(ANSWER, Format::Slack);
        assert!(
            slack.starts_with("*Result*\n\nThe *build* passed, see <https://ci.test/1?a=1&amp;b=2|the log>."),
            "{slack}"
        );
        assert!(slack.contains("• `cargo test` &lt;ok&gt;\n• _fast_ and ~slow~"), "{slack}");
        let discord = render(ANSWER, Format::Discord);
        assert!(discord.contains("```\na  b\n-  --\n1  22\n```"), "a table as text: {discord}");
        assert!(discord.contains("**build**"), "{discord}");
        assert_eq!(render("just **md**", Format::Discord), "just **md**");
        let matrix = render("# Title\n\nhi", Format::MatrixHtml);
        assert_eq!(matrix, "<h1>Title</h1><br><br>hi");
        let code = render("a\nb\n\n```\nx\ny\n```\n\nc", Format::MatrixHtml);
        assert_eq!(code, "a<br>b<br><br><pre><code>x\ny\n</code></pre><br><br>c", "line ends kept in code");
        let sly = render("[click](javascript:alert(1)) <script>x</script>", Format::MatrixHtml);
        assert_eq!(sly, "click &lt;script&gt;x&lt;/script&gt;", "no script link, no raw HTML");
    }

    #[test]
    fn a_single_line_break_is_kept_on_every_platform() {
        let md = "first line\nsecond line\n\nnext *paragraph*\nits end";
        assert_eq!(render(md, Format::TelegramHtml), "first line\nsecond line\n\nnext <i>paragraph</i>\nits end");
        assert_eq!(render(md, Format::MatrixHtml), "first line<br>second line<br><br>next <i>paragraph</i><br>its end");
        assert_eq!(render(md, Format::Plain), "first line\nsecond line\n\nnext paragraph\nits end");
        assert_eq!(render(md, Format::Slack), "first line\nsecond line\n\nnext _paragraph_\nits end");
        assert_eq!(render(md, Format::Discord), md);
        let table = format!("{md}\n\n| a |\n|---|\n| 1 |");
        assert!(
            render(&table, Format::Discord).starts_with("first line\nsecond line\n\n"),
            "{}",
            render(&table, Format::Discord)
        );
        // `/help`'s lines stay lines.
        for line in ["/new: start a new conversation", "/help: this list"] {
            assert!(
                render("Commands:\n/new: start a new conversation\n/help: this list", Format::TelegramHtml)
                    .lines()
                    .any(|l| l == line),
                "{line}"
            );
        }
    }

    #[test]
    fn long_answers_are_split_on_boundaries_within_the_limit() {
        let para = |n: usize| format!("paragraph {n} {}", "word ".repeat(20).trim_end());
        let code: String = (0..40).map(|i| format!("let line_{i} = {i};\n")).collect();
        let md = format!("{}\n\n{}\n\n```rust\n{code}```\n\n{}", para(1), para(2), para(3));
        let parts = split(&md, Format::TelegramHtml, 300);
        assert!(parts.len() > 3, "{parts:#?}");
        for p in &parts {
            assert!(p.chars().count() <= 300, "{} chars: {p}", p.chars().count());
            assert_eq!(p.matches("<pre>").count(), p.matches("</pre>").count(), "code reopened and closed: {p}");
        }
        let all = parts.join("\n");
        for i in 0..40 {
            assert!(all.contains(&format!("let line_{i} = {i};")), "line {i} kept");
        }
        assert!(parts[0].starts_with("paragraph 1"), "{}", parts[0]);
        let one_word = split(&"x".repeat(1000), Format::Plain, 100);
        assert_eq!(one_word.len(), 10);
        assert!(one_word.iter().all(|p| p.len() == 100));
    }
}
