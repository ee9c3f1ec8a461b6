//! Markdown as terminal lines: CommonMark with tables, task lists and strikethrough (parsed by
//! pulldown-cmark), code blocks highlighted by syntect, paragraphs wrapped at the width on word
//! boundaries, links as terminal hyperlinks where the terminal shows them.
//!
//! Without colour (`NO_COLOR`) the layout stays (wrapping, list bullets, indentation, table
//! borders) and no style sequence is written: headings keep their `#`, inline code its
//! backticks, and a link shows its address after its text.

use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::OnceLock;

use pulldown_cmark::{Alignment, CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use syntect::easy::HighlightLines;
use syntect::highlighting::{HighlightState, Theme, ThemeSet};
use syntect::parsing::{ParseState, SyntaxSet};
use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

/// How to draw.
#[derive(Debug, Clone, Copy)]
pub struct Look {
    /// Columns available.
    pub width: usize,
    /// Colours and styles (SGR sequences); off under `NO_COLOR`.
    pub color: bool,
    /// Links as OSC 8 hyperlinks (needs `color`), else `text (address)`.
    pub hyperlinks: bool,
    /// 24-bit colour for highlighted code, else the nearest of 256.
    pub truecolor: bool,
}

impl Look {
    /// Plain text at `width`: the layout without a single escape sequence.
    pub fn plain(width: usize) -> Self {
        Self { width, color: false, hyperlinks: false, truecolor: false }
    }

    /// In colour, with hyperlinks and 24-bit colour where this process's terminal says it has
    /// them (the caller decided colour is wanted).
    pub fn terminal(width: usize) -> Self {
        let env = |k: &str| std::env::var(k).unwrap_or_default();
        let colorterm = env("COLORTERM");
        let truecolor = colorterm.contains("truecolor") || colorterm.contains("24bit");
        let term = env("TERM");
        let hyperlinks = term != "dumb"
            && (std::env::var_os("VTE_VERSION").is_some()
                || std::env::var_os("WT_SESSION").is_some()
                || ["iTerm.app", "WezTerm", "vscode", "ghostty", "Hyper", "tmux"]
                    .contains(&env("TERM_PROGRAM").as_str())
                || ["kitty", "alacritty", "foot", "wezterm", "ghostty"].iter().any(|t| term.contains(t)));
        Self { width, color: true, hyperlinks, truecolor }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Style {
    bold: bool,
    italic: bool,
    underline: bool,
    strike: bool,
    dim: bool,
    fg: Option<Fg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fg {
    /// One of the 8 basic colours (30 + n).
    Basic(u8),
    Rgb(u8, u8, u8),
}

const YELLOW: Fg = Fg::Basic(3);
const BLUE: Fg = Fg::Basic(4);
const CYAN: Fg = Fg::Basic(6);

impl Style {
    fn sgr(self, look: &Look) -> String {
        let mut codes: Vec<String> = Vec::new();
        if self.bold {
            codes.push("1".into());
        }
        if self.dim {
            codes.push("2".into());
        }
        if self.italic {
            codes.push("3".into());
        }
        if self.underline {
            codes.push("4".into());
        }
        if self.strike {
            codes.push("9".into());
        }
        match self.fg {
            Some(Fg::Basic(n)) => codes.push(format!("{}", 30 + n)),
            Some(Fg::Rgb(r, g, b)) if look.truecolor => codes.push(format!("38;2;{r};{g};{b}")),
            Some(Fg::Rgb(r, g, b)) => codes.push(format!("38;5;{}", to_256(r, g, b))),
            None => {}
        }
        if codes.is_empty() { String::new() } else { format!("\x1b[{}m", codes.join(";")) }
    }
}

/// The 6×6×6 cube entry nearest to an RGB colour.
fn to_256(r: u8, g: u8, b: u8) -> u8 {
    let level = |c: u8| (u16::from(c) * 5 + 127) / 255;
    u8::try_from(16 + 36 * level(r) + 6 * level(g) + level(b)).unwrap_or(15)
}

/// A run of text in one style.
#[derive(Debug, Clone)]
struct Piece {
    text: String,
    style: Style,
    link: Option<Rc<str>>,
}

/// A word: pieces with no space between them, and its width in columns.
struct Word {
    pieces: Vec<Piece>,
    width: usize,
    /// A line break is forced before it (a hard break).
    break_before: bool,
}

/// What surrounds a line: a quote's bar or a list item's bullet (then its indent).
enum Container {
    Quote,
    Item { bullet: String, used: bool },
}

struct Table {
    aligns: Vec<Alignment>,
    rows: Vec<Vec<Vec<Piece>>>,
    header_rows: usize,
}

/// Render `markdown` to lines (without line ends) for a terminal of `look.width` columns,
/// taking the highlighting of code blocks seen before from `highlights` (and adding this text's):
/// a block that grew, or is drawn again at another width, is highlighted only from its first new
/// line.
pub fn render(markdown: &str, look: &Look, highlights: &mut Highlights) -> Vec<String> {
    let mut r = Render::new(*look, std::mem::take(highlights));
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_GFM;
    for event in Parser::new_ext(markdown, options) {
        r.event(event);
    }
    r.flush();
    while r.out.last().is_some_and(String::is_empty) {
        r.out.pop();
    }
    *highlights = r.highlights;
    r.out
}

struct Render {
    look: Look,
    out: Vec<String>,
    containers: Vec<Container>,
    /// Each open list's next number (`None`: bullets).
    lists: Vec<Option<u64>>,
    inline: Vec<Piece>,
    styles: Vec<Style>,
    link: Option<(Rc<str>, usize)>,
    heading: Option<HeadingLevel>,
    code: Option<(String, String)>,
    table: Option<Table>,
    /// A blank line goes before the next block.
    gap: bool,
    hard_break: bool,
    highlights: Highlights,
}

impl Render {
    fn new(look: Look, highlights: Highlights) -> Self {
        Self {
            look,
            out: Vec::new(),
            containers: Vec::new(),
            lists: Vec::new(),
            inline: Vec::new(),
            styles: vec![Style::default()],
            link: None,
            heading: None,
            code: None,
            table: None,
            gap: false,
            hard_break: false,
            highlights,
        }
    }

    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, change: impl FnOnce(&mut Style)) {
        let mut s = self.style();
        change(&mut s);
        self.styles.push(s);
    }

    fn text(&mut self, text: &str, style: Style) {
        if text.is_empty() {
            return;
        }
        let link = self.link.as_ref().map(|(l, _)| l.clone());
        let text = if self.hard_break {
            self.hard_break = false;
            format!("\n{text}")
        } else {
            text.to_string()
        };
        self.inline.push(Piece { text, style, link });
    }

    fn event(&mut self, event: Event<'_>) {
        if let Some((_, code)) = &mut self.code {
            match event {
                Event::Text(t) => code.push_str(&t),
                Event::End(TagEnd::CodeBlock) => self.end_code(),
                _ => {}
            }
            return;
        }
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => self.text(&t, self.style()),
            Event::Code(t) => {
                let mut s = self.style();
                if self.look.color {
                    s.fg = Some(YELLOW);
                    self.text(&t, s);
                } else {
                    self.text(&format!("`{t}`"), s);
                }
            }
            Event::InlineMath(t) | Event::DisplayMath(t) => self.text(&t, self.style()),
            Event::Html(t) | Event::InlineHtml(t) => {
                let t = t.trim_end_matches('\n').to_string();
                self.text(&t, self.style());
            }
            Event::FootnoteReference(name) => self.text(&format!("[^{name}]"), self.style()),
            Event::SoftBreak => self.text(" ", self.style()),
            Event::HardBreak => self.hard_break = true,
            Event::Rule => {
                self.block_start();
                let width = self.look.width.saturating_sub(self.prefix_width()).clamp(3, 80);
                let rule = "─".repeat(width);
                let style = Style { dim: true, ..Style::default() };
                let piece = Piece { text: rule, style, link: None };
                self.emit(vec![piece]);
                self.gap = true;
            }
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }, self.style()),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.block_start(),
            Tag::Heading { level, .. } => {
                self.block_start();
                self.heading = Some(level);
                let n = heading_number(level);
                self.push_style(|s| {
                    s.bold = true;
                    s.underline = n == 1;
                    s.italic = n >= 3;
                });
                if !self.look.color {
                    self.text(&format!("{} ", "#".repeat(n)), Style::default());
                }
            }
            Tag::BlockQuote(_) => {
                self.block_start();
                self.containers.push(Container::Quote);
            }
            Tag::CodeBlock(kind) => {
                self.block_start();
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().unwrap_or_default().to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((lang, String::new()));
            }
            Tag::List(start) => {
                self.flush();
                if self.lists.is_empty() {
                    self.block_start();
                }
                self.lists.push(start);
            }
            Tag::Item => {
                self.flush();
                let depth = self.lists.len().saturating_sub(1);
                let bullet = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let b = format!("{n}. ");
                        *n += 1;
                        b
                    }
                    _ if self.look.color => ["• ", "◦ ", "▪ "][depth % 3].to_string(),
                    _ => "- ".to_string(),
                };
                self.containers.push(Container::Item { bullet, used: false });
                self.gap = false;
            }
            Tag::Table(aligns) => {
                self.block_start();
                self.table = Some(Table { aligns, rows: Vec::new(), header_rows: 0 });
            }
            Tag::TableHead => {
                if let Some(t) = &mut self.table {
                    t.rows.push(Vec::new());
                    t.header_rows = 1;
                }
                self.push_style(|s| s.bold = true);
            }
            Tag::TableRow => {
                if let Some(t) = &mut self.table {
                    t.rows.push(Vec::new());
                }
            }
            Tag::TableCell => self.inline.clear(),
            Tag::Emphasis => self.push_style(|s| s.italic = true),
            Tag::Strong => self.push_style(|s| s.bold = true),
            Tag::Strikethrough => {
                self.push_style(|s| s.strike = true);
                if !self.look.color {
                    self.text("~~", Style::default());
                }
            }
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                self.link = Some((Rc::from(dest_url.as_ref()), self.inline.len()));
                let color = self.look.color;
                self.push_style(|s| {
                    if color {
                        s.underline = true;
                        s.fg = Some(BLUE);
                    }
                });
            }
            Tag::FootnoteDefinition(name) => {
                self.block_start();
                self.text(&format!("[^{name}]: "), self.style());
            }
            Tag::HtmlBlock | Tag::MetadataBlock(_) => self.block_start(),
            Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::Superscript
            | Tag::Subscript => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock | TagEnd::FootnoteDefinition | TagEnd::MetadataBlock(_) => {
                self.flush();
                self.gap = true;
            }
            TagEnd::Heading(_) => {
                self.styles.pop();
                self.flush();
                self.heading = None;
                self.gap = true;
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.containers.pop();
                self.gap = true;
            }
            TagEnd::CodeBlock => self.end_code(),
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
                self.gap = true;
            }
            TagEnd::Item => {
                self.flush();
                self.containers.pop();
                self.gap = false;
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    self.draw_table(&t);
                }
                self.gap = true;
            }
            TagEnd::TableHead => {
                self.styles.pop();
            }
            TagEnd::TableRow => {}
            TagEnd::TableCell => {
                let cell = std::mem::take(&mut self.inline);
                if let Some(row) = self.table.as_mut().and_then(|t| t.rows.last_mut()) {
                    row.push(cell);
                }
            }
            TagEnd::Emphasis | TagEnd::Strong => {
                self.styles.pop();
            }
            TagEnd::Strikethrough => {
                self.styles.pop();
                if !self.look.color {
                    self.text("~~", Style::default());
                }
            }
            TagEnd::Link | TagEnd::Image => {
                self.styles.pop();
                if let Some((url, at)) = self.link.take() {
                    let shown: String =
                        self.inline[at.min(self.inline.len())..].iter().map(|p| p.text.as_str()).collect();
                    let osc = self.look.color && self.look.hyperlinks;
                    if shown.is_empty() {
                        self.text(&url, self.style());
                    } else if !osc && shown.trim() != url.as_ref() && !url.starts_with('#') {
                        let style = Style { dim: self.look.color, ..Style::default() };
                        self.inline.push(Piece { text: format!(" ({url})"), style, link: None });
                    }
                    if !osc {
                        for p in &mut self.inline[at..] {
                            p.link = None;
                        }
                    }
                }
            }
            TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::Superscript
            | TagEnd::Subscript => {}
        }
    }

    /// Before a block: finish the text so far, and leave a blank line after the last block.
    fn block_start(&mut self) {
        self.flush();
        let in_fresh_item = matches!(self.containers.last(), Some(Container::Item { used: false, .. }));
        if self.gap && !self.out.is_empty() && !in_fresh_item {
            let prefix = self.prefix(true);
            self.out.push(join(&prefix, &self.look).trim_end().to_string());
        }
        self.gap = false;
    }

    /// The pieces a line starts with; `blank` takes no bullet (a gap line).
    fn prefix(&mut self, blank: bool) -> Vec<Piece> {
        let color = self.look.color;
        let mut out = Vec::new();
        for c in &mut self.containers {
            match c {
                Container::Quote => {
                    let bar = if color { "│ " } else { "> " };
                    out.push(Piece { text: bar.into(), style: Style { dim: true, ..Style::default() }, link: None });
                }
                Container::Item { bullet, used } => {
                    let text = if *used || blank {
                        " ".repeat(bullet.width())
                    } else {
                        *used = true;
                        bullet.clone()
                    };
                    let style = Style { fg: color.then_some(CYAN), ..Style::default() };
                    out.push(Piece { text, style, link: None });
                }
            }
        }
        out
    }

    fn prefix_width(&self) -> usize {
        self.containers
            .iter()
            .map(|c| match c {
                Container::Quote => 2,
                Container::Item { bullet, .. } => bullet.width(),
            })
            .sum()
    }

    fn emit(&mut self, pieces: Vec<Piece>) {
        let mut line = self.prefix(false);
        line.extend(pieces);
        let text = join(&line, &self.look);
        self.out.push(text);
    }

    /// Wrap and emit the inline text gathered so far.
    fn flush(&mut self) {
        if self.inline.is_empty() {
            return;
        }
        let pieces = std::mem::take(&mut self.inline);
        let width = self.look.width.saturating_sub(self.prefix_width()).max(10);
        for line in wrap(&pieces, width) {
            self.emit(line);
        }
    }

    fn end_code(&mut self) {
        let Some((lang, code)) = self.code.take() else { return };
        let fence = Style { dim: true, ..Style::default() };
        let piece = |text: String, style: Style| Piece { text, style, link: None };
        self.emit(vec![piece(format!("```{lang}"), fence)]);
        if self.look.color {
            let mut highlights = std::mem::take(&mut self.highlights);
            let (done, partial) = highlights.highlight(&lang, &code);
            for line in done.iter().chain(&partial) {
                self.emit(line.clone());
            }
            self.highlights = highlights;
        } else {
            let code = code.strip_suffix('\n').unwrap_or(&code);
            for line in code.split('\n') {
                self.emit(vec![piece(clean(line), Style::default())]);
            }
        }
        self.emit(vec![piece("```".into(), fence)]);
        self.gap = true;
    }

    fn draw_table(&mut self, t: &Table) {
        let cols = t.rows.iter().map(Vec::len).max().unwrap_or(0);
        if cols == 0 {
            return;
        }
        let natural: Vec<usize> = (0..cols)
            .map(|c| t.rows.iter().filter_map(|r| r.get(c)).map(|cell| text_width(cell)).max().unwrap_or(0).max(1))
            .collect();
        // Borders and padding: "│ " before each cell, " │" after the last.
        let room = self.look.width.saturating_sub(self.prefix_width() + 3 * cols + 1).max(cols);
        let mut widths = natural.clone();
        while widths.iter().sum::<usize>() > room {
            let Some((widest, _)) = widths.iter().enumerate().max_by_key(|(_, w)| **w) else { break };
            if widths[widest] <= 1 {
                break;
            }
            widths[widest] -= 1;
        }
        let border = Style { dim: self.look.color, ..Style::default() };
        let rule = |left: &str, mid: &str, right: &str| {
            let mut s = left.to_string();
            for (i, w) in widths.iter().enumerate() {
                s.push_str(&"─".repeat(w + 2));
                s.push_str(if i + 1 == widths.len() { right } else { mid });
            }
            Piece { text: s, style: border, link: None }
        };
        self.emit(vec![rule("┌", "┬", "┐")]);
        for (n, row) in t.rows.iter().enumerate() {
            let cells: Vec<Vec<Vec<Piece>>> = (0..cols)
                .map(|c| {
                    let mut cell = row.get(c).cloned().unwrap_or_default();
                    if n < t.header_rows {
                        for p in &mut cell {
                            p.style.bold = self.look.color;
                        }
                    }
                    wrap(&cell, widths[c])
                })
                .collect();
            let height = cells.iter().map(Vec::len).max().unwrap_or(1).max(1);
            for line in 0..height {
                let mut pieces = Vec::new();
                for (c, cell) in cells.iter().enumerate() {
                    pieces.push(Piece { text: "│ ".into(), style: border, link: None });
                    let content = cell.get(line).cloned().unwrap_or_default();
                    let pad = widths[c].saturating_sub(text_width(&content));
                    let (before, after) = match t.aligns.get(c) {
                        Some(Alignment::Right) => (pad, 0),
                        Some(Alignment::Center) => (pad / 2, pad - pad / 2),
                        _ => (0, pad),
                    };
                    pieces.push(Piece { text: " ".repeat(before), style: Style::default(), link: None });
                    pieces.extend(content);
                    pieces.push(Piece { text: " ".repeat(after + 1), style: Style::default(), link: None });
                }
                pieces.push(Piece { text: "│".into(), style: border, link: None });
                self.emit(pieces);
            }
            if n + 1 == t.header_rows && t.rows.len() > t.header_rows {
                self.emit(vec![rule("├", "┼", "┤")]);
            }
        }
        self.emit(vec![rule("└", "┴", "┘")]);
    }
}

fn heading_number(level: HeadingLevel) -> usize {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

fn text_width(pieces: &[Piece]) -> usize {
    pieces.iter().map(|p| p.text.width()).sum()
}

/// Controls in model text made visible (an answer must not move the cursor or recolour the
/// screen); tabs become spaces.
fn clean(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() || matches!(c, '\u{200e}'..='\u{202e}' | '\u{2066}'..='\u{2069}')) {
        return text.to_string();
    }
    talaria_runtime::visible(&text.replace('\t', "    "), usize::MAX)
}

/// Lines of styled pieces into strings, with style sequences when `look.color`.
fn join(pieces: &[Piece], look: &Look) -> String {
    let mut out = String::new();
    let mut link: Option<&Rc<str>> = None;
    for p in pieces {
        if p.text.is_empty() {
            continue;
        }
        if look.color && look.hyperlinks && p.link.as_ref() != link {
            if link.is_some() {
                out.push_str("\x1b]8;;\x1b\\");
            }
            if let Some(url) = &p.link {
                let _ = write!(out, "\x1b]8;;{}\x1b\\", clean(url).replace(['\x1b', '\x07'], ""));
            }
            link = p.link.as_ref();
        }
        let sgr = if look.color { p.style.sgr(look) } else { String::new() };
        out.push_str(&sgr);
        out.push_str(&clean(&p.text));
        if !sgr.is_empty() {
            out.push_str("\x1b[0m");
        }
    }
    if link.is_some() {
        out.push_str("\x1b]8;;\x1b\\");
    }
    out
}

/// Greedy word wrap of styled pieces into lines of at most `width` columns; a word longer than
/// a line is broken where it must be. A piece text's `\n` forces a break.
fn wrap(pieces: &[Piece], width: usize) -> Vec<Vec<Piece>> {
    let width = width.max(1);
    let words = words(pieces);
    let mut lines: Vec<Vec<Piece>> = Vec::new();
    let mut line: Vec<Piece> = Vec::new();
    let mut used = 0;
    for word in words {
        if word.break_before || (used > 0 && used + 1 + word.width > width) {
            lines.push(std::mem::take(&mut line));
            used = 0;
        }
        if used > 0 {
            let style = line.last().map(|p: &Piece| p.style).unwrap_or_default();
            let style = Style { strike: false, underline: false, ..style };
            line.push(Piece { text: " ".into(), style, link: None });
            used += 1;
        }
        if word.width <= width - used {
            used += word.width;
            line.extend(word.pieces);
            continue;
        }
        // Longer than a whole line: break it by characters.
        for piece in word.pieces {
            let mut part = String::new();
            for c in piece.text.chars() {
                let w = c.width().unwrap_or(0);
                if used + w > width && used > 0 {
                    if !part.is_empty() {
                        line.push(Piece { text: std::mem::take(&mut part), ..piece.clone() });
                    }
                    lines.push(std::mem::take(&mut line));
                    used = 0;
                }
                part.push(c);
                used += w;
            }
            if !part.is_empty() {
                line.push(Piece { text: part, ..piece.clone() });
            }
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// Split pieces into words at whitespace; pieces touching without space form one word.
fn words(pieces: &[Piece]) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::new();
    let mut current: Option<Word> = None;
    let mut break_next = false;
    for p in pieces {
        let mut run = String::new();
        let flush_run = |run: &mut String, current: &mut Option<Word>, break_next: &mut bool| {
            if run.is_empty() {
                return;
            }
            let w = current.get_or_insert_with(|| Word {
                pieces: Vec::new(),
                width: 0,
                break_before: std::mem::take(break_next),
            });
            w.width += run.width();
            w.pieces.push(Piece { text: std::mem::take(run), style: p.style, link: p.link.clone() });
        };
        for c in p.text.chars() {
            if c.is_whitespace() {
                flush_run(&mut run, &mut current, &mut break_next);
                if let Some(w) = current.take() {
                    words.push(w);
                }
                if c == '\n' {
                    break_next = true;
                }
            } else {
                run.push(c);
            }
        }
        flush_run(&mut run, &mut current, &mut break_next);
    }
    if let Some(w) = current.take() {
        words.push(w);
    }
    words
}

fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_newlines)
}

fn theme() -> &'static Theme {
    static THEME: OnceLock<Theme> = OnceLock::new();
    THEME.get_or_init(|| {
        let mut set = ThemeSet::load_defaults();
        set.themes.remove("base16-ocean.dark").unwrap_or_default()
    })
}

/// Load the highlighter's syntaxes and theme now (a thread at start-up calls this, so the
/// first code block does not wait for them).
pub fn warm_up() {
    let _ = syntaxes();
    let _ = theme();
}

/// Code blocks highlighted so far, with the highlighter's state after each one's last complete
/// line, so highlighting a block again (it grew, or the width changed) starts where it stopped.
/// A streamed block of n lines is then highlighted once, not once per redraw.
#[derive(Default)]
pub struct Highlights {
    /// The most recently highlighted blocks, the newest last.
    blocks: Vec<Highlighted>,
}

/// Blocks [`Highlights`] keeps: a few answers' worth of code blocks still on the way.
const BLOCKS_KEPT: usize = 4;

struct Highlighted {
    lang: String,
    /// The complete lines highlighted, each with its line end.
    code: String,
    lines: Vec<Vec<Piece>>,
    /// The highlighter after `code`.
    state: (HighlightState, ParseState),
}

impl Highlights {
    /// `code` highlighted as `lang` (plain when the language is unknown), one line each: the
    /// complete lines (kept for next time), then the last one if it has no line end yet. Empty
    /// code is one empty line.
    fn highlight(&mut self, lang: &str, code: &str) -> (&[Vec<Piece>], Vec<Vec<Piece>>) {
        let set = syntaxes();
        // The longest block seen before that this one continues.
        let seen = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.lang == lang && code.starts_with(&b.code))
            .max_by_key(|(_, b)| b.code.len())
            .map(|(i, _)| i);
        let mut block = match seen {
            Some(i) => self.blocks.remove(i),
            None => {
                let syntax = set.find_syntax_by_token(lang).unwrap_or_else(|| set.find_syntax_plain_text());
                let fresh = HighlightLines::new(syntax, theme()).state();
                Highlighted { lang: lang.to_string(), code: String::new(), lines: Vec::new(), state: fresh }
            }
        };
        let rest = &code[block.code.len()..];
        let (complete, partial) = match rest.rfind('\n') {
            Some(end) => rest.split_at(end + 1),
            None => ("", rest),
        };
        let (h, p) = block.state;
        let mut lines = HighlightLines::from_state(theme(), h, p);
        for line in complete.split_inclusive('\n') {
            block.lines.push(pieces(&mut lines, line, set));
        }
        block.code.push_str(complete);
        block.state = lines.state();
        let mut last = Vec::new();
        if !partial.is_empty() || block.lines.is_empty() {
            let (h, p) = block.state.clone();
            last.push(pieces(&mut HighlightLines::from_state(theme(), h, p), &format!("{partial}\n"), set));
        }
        if self.blocks.len() >= BLOCKS_KEPT {
            self.blocks.remove(0);
        }
        self.blocks.push(block);
        let kept = self.blocks.last().map_or(&[][..], |b| &b.lines[..]);
        (kept, last)
    }
}

/// One line (with its line end) highlighted, the highlighter moved past it.
fn pieces(lines: &mut HighlightLines<'_>, line: &str, set: &SyntaxSet) -> Vec<Piece> {
    match lines.highlight_line(line, set) {
        Ok(regions) => regions
            .into_iter()
            .map(|(s, text)| {
                let c = s.foreground;
                let style = Style { fg: Some(Fg::Rgb(c.r, c.g, c.b)), ..Style::default() };
                Piece { text: text.trim_end_matches('\n').to_string(), style, link: None }
            })
            .collect(),
        Err(_) => vec![Piece { text: line.trim_end_matches('\n').to_string(), style: Style::default(), link: None }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(md: &str, width: usize) -> Vec<String> {
        render(md, &Look::plain(width), &mut Highlights::default())
    }

    #[test]
    fn a_table_is_drawn_with_borders_and_aligned_columns() {
        let md = "| name | size |\n|:-----|-----:|\n| a.rs | 12 |\n| lib.rs | 3400 |\n";
        assert_eq!(
            plain(md, 80),
            [
                "┌────────┬──────┐",
                "│ name   │ size │",
                "├────────┼──────┤",
                "│ a.rs   │   12 │",
                "│ lib.rs │ 3400 │",
                "└────────┴──────┘",
            ]
        );
    }

    #[test]
    fn a_wide_table_wraps_its_cells_to_fit() {
        let md = "| k | text |\n|---|---|\n| 1 | one two three four five six seven eight nine ten |\n";
        let lines = plain(md, 30);
        assert!(lines.iter().all(|l| l.width() <= 30), "{lines:#?}");
        assert!(lines.len() > 5, "the long cell takes several lines: {lines:#?}");
        let text: String = lines.join(" ");
        for w in ["one", "five", "ten"] {
            assert!(text.contains(w), "{w} kept: {lines:#?}");
        }
    }

    #[test]
    fn paragraphs_wrap_on_word_boundaries() {
        let md = "The quick brown fox jumps over the lazy dog and keeps on running far away.";
        let lines = plain(md, 20);
        assert_eq!(lines, ["The quick brown fox", "jumps over the lazy", "dog and keeps on", "running far away."]);
    }

    #[test]
    fn lists_keep_bullets_numbers_and_hanging_indents() {
        let md = "- first item that is long enough to wrap\n- second\n  - nested\n\n1. one\n2. two\n";
        assert_eq!(
            plain(md, 24),
            ["- first item that is", "  long enough to wrap", "- second", "  - nested", "", "1. one", "2. two"]
        );
    }

    #[test]
    fn without_colour_there_is_no_escape_but_the_marks_stay() {
        let md = "# Title\n\nSome *soft* and **strong** text, `code`, ~~gone~~ and [a link](https://x.test/a).\n\n> quoted\n\n```rust\nfn main() {}\n```\n";
        let lines = plain(md, 80);
        let all = lines.join("\n");
        assert!(!all.contains('\x1b'), "{all:?}");
        assert_eq!(
            lines,
            [
                "# Title",
                "",
                "Some soft and strong text, `code`, ~~gone~~ and a link (https://x.test/a).",
                "",
                "> quoted",
                "",
                "```rust",
                "fn main() {}",
                "```",
            ]
        );
    }

    #[test]
    fn colour_styles_and_highlights_code() {
        let look = Look { width: 80, color: true, hyperlinks: true, truecolor: false };
        let lines =
            render("**bold** [site](https://x.test)\n\n```rust\nlet x = 1;\n```\n", &look, &mut Highlights::default());
        assert!(lines[0].contains("\x1b[1mbold\x1b[0m"), "{:?}", lines[0]);
        assert!(lines[0].contains("\x1b]8;;https://x.test\x1b\\"), "a hyperlink: {:?}", lines[0]);
        assert!(!lines[0].contains("(https://x.test)"), "the address is in the link, not repeated");
        assert!(lines[3].contains("\x1b[38;5;"), "highlighted: {:?}", lines[3]);
        assert!(strip(&lines[3]).contains("let x = 1;"));
    }

    #[test]
    fn a_code_block_highlighted_as_it_grows_matches_it_highlighted_whole() {
        // A comment and a string over several lines: each line's colours hang on those before.
        let md = "```rust\n/* a comment\n   over lines */\nlet s = \"a string\nover lines\";\nfn main() { let x = 1; }\n```\n";
        let look = Look { width: 80, color: true, hyperlinks: false, truecolor: true };
        let whole = render(md, &look, &mut Highlights::default());
        let mut highlights = Highlights::default();
        let mut grown = Vec::new();
        for end in 1..=md.len() {
            grown = render(&md[..end], &look, &mut highlights);
        }
        assert_eq!(grown, whole);
        assert_ne!(strip(&whole[2]), whole[2], "highlighted: {:?}", whole[2]);
        // At another width the block is not highlighted again: what was kept is the same.
        let narrow = render(md, &Look { width: 40, ..look }, &mut highlights);
        assert_eq!(narrow, whole, "code lines are not wrapped by the renderer");
        let rust: Vec<_> = highlights.blocks.iter().filter(|b| b.lang == "rust").collect();
        assert_eq!(rust.len(), 1, "one block kept for the one block");
        assert_eq!(rust[0].code, md["```rust\n".len()..md.len() - "```\n".len()]);
        assert_eq!(rust[0].lines.len(), 5);
        assert!(highlights.blocks.len() <= BLOCKS_KEPT);
    }

    #[test]
    fn model_text_cannot_send_escape_sequences() {
        let lines = plain("hello \u{1b}[2J world and \u{202e}txt", 80);
        assert_eq!(lines, ["hello \\x1b[2J world and \\u{202e}txt"]);
        let code = plain("```\nx\u{1b}]0;title\u{7}\n```", 80);
        assert_eq!(code[1], "x\\x1b]0;title\\x07");
    }

    /// The text of a line without its style sequences.
    pub(crate) fn strip(line: &str) -> String {
        let mut out = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() || d == '\\' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Fuzzed: any text renders at any width, and without colour no control character of it
    /// reaches the terminal (an escape is shown, never sent).
    #[test]
    fn fuzz_the_renderer() {
        let color = Look { width: 60, color: true, hyperlinks: true, truecolor: false };
        talaria_fuzz::text("markdown", |md| {
            for width in [1, 17, 80] {
                for line in render(md, &Look::plain(width), &mut Highlights::default()) {
                    assert!(!line.chars().any(char::is_control), "a control character reached the terminal: {line:?}");
                }
            }
            let _ = render(md, &color, &mut Highlights::default());
        });
    }
}
