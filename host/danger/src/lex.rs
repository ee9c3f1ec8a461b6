//! Splitting a command line into simple commands.
//!
//! [`lex`] cuts a line at `;`, `&&`, `||`, `|`, `&`, newlines and parentheses, takes the
//! redirections out of each part ([`Simple::writes`], [`Simple::reads`], [`Simple::input`]) and
//! collects the bodies of substitutions (`$(...)`, backticks, `<(...)`, `>(...)`) so that they are
//! checked as command lines of their own. Quoted text is kept as written: [`super::word::split`]
//! turns a simple command's text into words afterwards.
//!
//! It is deliberately forgiving: it never fails, and what it cannot pair up (an unclosed `$(`)
//! runs to the end of the line. The caller refuses lines whose quoting does not parse before
//! calling it.

/// One simple command: its text with quotes intact and redirections removed.
#[derive(Debug, Default)]
pub(super) struct Simple {
    /// The command's words, as written.
    pub raw: String,
    /// Targets of output redirections (`>`, `>>`, `>|`, `&>`, `2>`), as written.
    pub writes: Vec<String>,
    /// Sources of input redirections (`<`), as written.
    pub reads: Vec<String>,
    /// What a here-doc or here-string feeds it (the text, unexpanded).
    pub input: Option<String>,
    /// Its output goes to the next simple command (`|`, `|&`).
    pub piped_out: bool,
    /// It runs in the background (`&`).
    pub background: bool,
    /// The bodies of the substitutions in its words, redirections and here-docs: command lines
    /// that run before it.
    pub subs: Vec<String>,
}

/// How a simple command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Plain,
    Pipe,
    Background,
}

/// Splits a command line into simple commands; the bodies of substitutions go to the command that
/// contains them ([`Simple::subs`]) and also stay in its text.
pub(super) fn lex(line: &str) -> Vec<Simple> {
    let c: Vec<char> = line.chars().collect();
    let (mut out, mut cur) = (Vec::new(), Simple::default());
    let mut heredocs: Vec<Heredoc> = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let (next, after) = (c.get(i + 1).copied(), c.get(i + 2).copied());
        match (c[i], next) {
            ('\\', _) => {
                // A backslash-newline joins lines; any other escaped char stays for the word splitter.
                let escaped = if next == Some('\n') { " ".to_string() } else { text(&c, i, i + 2) };
                cur.raw.push_str(&escaped);
                i += 2;
            }
            ('$', Some('\'')) => {
                let close = ansi_end(&c, i + 1);
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('\'', _) => {
                let close = find(&c, i + 1, '\'');
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('"', _) => {
                let close = double_end(&c, i, &mut cur.subs);
                cur.raw.push_str(&text(&c, i, close));
                i = close;
            }
            ('`', _) => {
                let close = tick_end(&c, i);
                cur.subs.push(text(&c, i + 1, close));
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('$' | '<' | '>', Some('(')) => {
                let close = paren_end(&c, i + 1);
                cur.subs.push(text(&c, i + 2, close));
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('$', Some('{')) => {
                let close = brace_end(&c, i + 1);
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('#', _) if cur.raw.is_empty() || cur.raw.ends_with(char::is_whitespace) => i = find(&c, i, '\n'),
            (';' | '\n' | '(' | ')', _) => {
                end(&mut cur, &mut out, End::Plain);
                i += 1;
                if c[i - 1] == '\n' {
                    i = heredoc_bodies(&c, i, &mut heredocs, &mut out);
                }
            }
            ('&', Some('&')) | ('|', Some('|')) => {
                end(&mut cur, &mut out, End::Plain);
                i += 2;
            }
            ('&', Some('>')) => i += 1, // `&>file`: the `>` arm reads the target
            ('&', _) => {
                end(&mut cur, &mut out, End::Background);
                i += 1;
            }
            ('|', _) => {
                end(&mut cur, &mut out, End::Pipe);
                i += if next == Some('&') { 2 } else { 1 };
            }
            ('>', _) => {
                let kept = cur.raw.trim_end_matches(|d: char| d.is_ascii_digit()).len();
                if cur.raw[..kept].is_empty() || cur.raw[..kept].ends_with(char::is_whitespace) {
                    cur.raw.truncate(kept); // the `2` of `2>`
                }
                let mut j = i + 1 + usize::from(matches!(next, Some('>' | '|')));
                let dup = c.get(j) == Some(&'&');
                j += usize::from(dup);
                let (target, k) = read_word(&c, j, &mut cur.subs);
                if !(dup && (target == "-" || target.chars().all(|d| d.is_ascii_digit()))) {
                    cur.writes.push(target);
                }
                i = k;
            }
            ('<', Some('<')) if after == Some('<') => {
                let (word, k) = read_word(&c, i + 3, &mut cur.subs);
                cur.input = Some(unquote(&word));
                i = k;
            }
            ('<', Some('<')) => {
                let strip = after == Some('-');
                let (delim, k) = read_word(&c, i + 2 + usize::from(strip), &mut cur.subs);
                let expands = !delim.contains(['\'', '"', '\\']);
                heredocs.push(Heredoc { delim: unquote(&delim), strip, expands, at: out.len() });
                cur.input = Some(String::new());
                i = k;
            }
            ('<', _) => {
                let dup = next == Some('&');
                let (source, k) = read_word(&c, i + 1 + usize::from(dup), &mut cur.subs);
                if !(dup && (source == "-" || source.chars().all(|d| d.is_ascii_digit()))) {
                    cur.reads.push(source);
                }
                i = k;
            }
            (ch, _) => {
                cur.raw.push(ch);
                i += 1;
            }
        }
    }
    end(&mut cur, &mut out, End::Plain);
    out
}

/// A here-doc whose body starts on the next line.
struct Heredoc {
    delim: String,
    /// `<<-`: leading tabs are stripped.
    strip: bool,
    /// The delimiter is unquoted, so substitutions in the body run.
    expands: bool,
    /// The simple command it feeds (its index in the output).
    at: usize,
}

/// Ends the current simple command.
fn end(cur: &mut Simple, out: &mut Vec<Simple>, how: End) {
    let done = std::mem::take(cur);
    let empty = done.raw.trim().is_empty() && done.writes.is_empty() && done.reads.is_empty() && done.subs.is_empty();
    if !empty || done.input.is_some() {
        out.push(Simple { piped_out: how == End::Pipe, background: how == End::Background, ..done });
    }
}

/// Reads the bodies of the here-docs opened on the line that just ended at `i`.
fn heredoc_bodies(c: &[char], mut i: usize, pending: &mut Vec<Heredoc>, out: &mut [Simple]) -> usize {
    for doc in pending.drain(..) {
        let mut body = String::new();
        while i < c.len() {
            let eol = find(c, i, '\n');
            let line = text(c, i, eol);
            i = eol + 1;
            if (if doc.strip { line.trim_start_matches('\t') } else { &line }) == doc.delim {
                break;
            }
            body.push_str(&line);
            body.push('\n');
        }
        if let Some(simple) = out.get_mut(doc.at) {
            if doc.expands {
                substitutions(&body, &mut simple.subs);
            }
            simple.input = Some(body);
        }
    }
    i
}

/// The substitutions in text that expands like a double-quoted string (an unquoted here-doc).
fn substitutions(body: &str, subs: &mut Vec<String>) {
    let c: Vec<char> = body.chars().collect();
    let mut j = 0;
    while j < c.len() {
        match c[j] {
            '\\' => j += 2,
            '`' => {
                let close = tick_end(&c, j);
                subs.push(text(&c, j + 1, close));
                j = close + 1;
            }
            '$' if c.get(j + 1) == Some(&'(') => {
                let close = paren_end(&c, j + 1);
                subs.push(text(&c, j + 2, close));
                j = close + 1;
            }
            _ => j += 1,
        }
    }
}

/// A here-doc delimiter or here-string without its quotes (as written when it does not parse).
fn unquote(word: &str) -> String {
    shell_words::split(word).ok().and_then(|w| w.into_iter().next()).unwrap_or_else(|| word.to_string())
}

/// The chars `c[from..to]`, clamped to the line.
pub(super) fn text(c: &[char], from: usize, to: usize) -> String {
    c[from.min(c.len())..to.min(c.len())].iter().collect()
}

/// Index of the next `ch` at or after `from`, or the line's length.
pub(super) fn find(c: &[char], from: usize, ch: char) -> usize {
    (from..c.len()).find(|&j| c[j] == ch).unwrap_or(c.len())
}

/// Index of the `'` closing the ANSI-C string (`$'...'`) whose opening quote is at `open`.
pub(super) fn ansi_end(c: &[char], open: usize) -> usize {
    let mut j = open + 1;
    while j < c.len() && c[j] != '\'' {
        j += if c[j] == '\\' { 2 } else { 1 };
    }
    j.min(c.len())
}

/// Index just past the `"` closing the string opened at `open` (the line's length when it is
/// never closed); substitutions inside go to `subs`.
pub(super) fn double_end(c: &[char], open: usize, subs: &mut Vec<String>) -> usize {
    double_close(c, open, subs).map_or(c.len(), |close| close + 1)
}

/// Index of the `"` closing the string opened at `open`, if any; substitutions inside go to `subs`.
pub(super) fn double_close(c: &[char], open: usize, subs: &mut Vec<String>) -> Option<usize> {
    let mut j = open + 1;
    while j < c.len() {
        match c[j] {
            '\\' => j += 2,
            '"' => return Some(j),
            '`' => {
                let close = tick_end(c, j);
                subs.push(text(c, j + 1, close));
                j = close + 1;
            }
            '$' if c.get(j + 1) == Some(&'(') => {
                let close = paren_end(c, j + 1);
                subs.push(text(c, j + 2, close));
                j = close + 1;
            }
            '$' if c.get(j + 1) == Some(&'{') => j = brace_end(c, j + 1) + 1,
            _ => j += 1,
        }
    }
    None
}

/// Index of the backtick closing the one at `open`.
pub(super) fn tick_end(c: &[char], open: usize) -> usize {
    let mut j = open + 1;
    while j < c.len() && c[j] != '`' {
        j += if c[j] == '\\' { 2 } else { 1 };
    }
    j.min(c.len())
}

/// Index of the `)` matching the `(` at `open`, skipping quoted text.
pub(super) fn paren_end(c: &[char], open: usize) -> usize {
    let (mut depth, mut j) = (0usize, open);
    while j < c.len() {
        match c[j] {
            '\\' => j += 1,
            '\'' => j = find(c, j + 1, '\''),
            '"' => j = double_end(c, j, &mut Vec::new()) - 1,
            '(' => depth += 1,
            ')' if depth <= 1 => return j,
            ')' => depth -= 1,
            _ => {}
        }
        j += 1;
    }
    c.len()
}

/// Index of the `}` closing the parameter expansion whose `{` is at `open` (`${a:-${b}}`).
pub(super) fn brace_end(c: &[char], open: usize) -> usize {
    let (mut depth, mut j) = (0usize, open);
    while j < c.len() {
        match c[j] {
            '\\' => j += 1,
            '\'' => j = find(c, j + 1, '\''),
            '"' => j = double_end(c, j, &mut Vec::new()) - 1,
            '$' if c.get(j + 1) == Some(&'(') => j = paren_end(c, j + 1),
            '{' => depth += 1,
            '}' if depth <= 1 => return j,
            '}' => depth -= 1,
            _ => {}
        }
        j += 1;
    }
    c.len()
}

/// The word starting at `from` (after blanks), as written, and the index after it; substitutions
/// in it go to `subs`.
fn read_word(c: &[char], from: usize, subs: &mut Vec<String>) -> (String, usize) {
    let start = (from..c.len()).find(|&j| c[j] != ' ' && c[j] != '\t').unwrap_or(c.len());
    let mut j = start;
    while j < c.len() {
        match c[j] {
            ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => break,
            '\'' => j = find(c, j + 1, '\'') + 1,
            '"' => j = double_end(c, j, subs),
            '`' => {
                let close = tick_end(c, j);
                subs.push(text(c, j + 1, close));
                j = close + 1;
            }
            '$' if c.get(j + 1) == Some(&'(') => {
                let close = paren_end(c, j + 1);
                subs.push(text(c, j + 2, close));
                j = close + 1;
            }
            '$' if c.get(j + 1) == Some(&'{') => j = brace_end(c, j + 1) + 1,
            '\\' => j += 2,
            _ => j += 1,
        }
    }
    (text(c, start, j), j.min(c.len()))
}
