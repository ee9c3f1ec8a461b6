//! Terminal output: styled only when stdout/stderr is a terminal and NO_COLOR is unset
//! (anstream strips styles otherwise), errors and warnings on stderr.

use std::io::IsTerminal as _;

use crate::wrap::join_within;
pub use crate::wrap::wrap_after;
use owo_colors::OwoColorize as _;
use talaria_runtime::shown::visible_lines;

/// `error: MESSAGE` on stderr, wrapped at word boundaries on a terminal.
pub fn error(message: &str) {
    putln!(anstream::stderr(), "{} {}", "error:".red().bold(), fit_err(message, 7));
}

/// `warning: MESSAGE` on stderr, wrapped at word boundaries on a terminal.
pub fn warn(message: &str) {
    putln!(anstream::stderr(), "{} {}", "warning:".yellow().bold(), fit_err(message, 9));
}

/// `note: MESSAGE` on stderr, wrapped at word boundaries on a terminal.
pub fn note(message: &str) {
    putln!(anstream::stderr(), "{} {}", "note:".cyan().bold(), fit_err(message, 6));
}

/// `text` for stderr after a prefix of `indent` columns: its controls shown escaped, and broken
/// at words for the terminal's width when stderr is one.
pub fn fit_err(text: &str, indent: usize) -> String {
    let text = visible_lines(text);
    if std::io::stderr().is_terminal() { wrap(&text, crate::screen::terminal_size().0, indent) } else { text }
}

/// `text` for stdout: wrapped as [`wrap_after`] says at the terminal's width when stdout is a
/// terminal, as it is otherwise (a pipe gets whole lines).
pub fn fit(text: &str, indent: usize, first: usize) -> String {
    if std::io::stdout().is_terminal() {
        wrap_after(text, crate::screen::terminal_size().0, indent, first)
    } else {
        text.to_string()
    }
}

/// `parts` joined by `sep` for stdout, a part that would go past the terminal's width starting
/// a row of its own, indented by `indent` (a pipe gets them on one line).
pub fn fit_joined(parts: &[String], sep: &str, indent: usize) -> String {
    if !std::io::stdout().is_terminal() {
        return parts.join(sep);
    }
    join_within(parts, sep, indent, crate::screen::terminal_size().0)
}

/// [`wrap_after`] for text printed after a prefix of `indent` columns (`note: `).
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    wrap_after(text, width, indent, indent)
}

/// Every line of `text` wrapped at `width`, its continuation rows indented two columns past
/// the line's own indent; lines behind a bar (`│`, a proposed command as written) are left
/// whole.
pub fn wrap_block(text: &str, width: usize) -> String {
    text.split('\n')
        .map(|line| {
            let plain = anstream::adapter::strip_str(line).to_string();
            let lead = plain.len() - plain.trim_start().len();
            if plain.trim_start().starts_with('│') {
                line.to_string()
            } else {
                let (spaces, rest) = line.split_at(line.len() - line.trim_start().len());
                format!("{spaces}{}", wrap_after(rest, width, lead + 2, lead))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether colour is wanted: `NO_COLOR` unset or empty (no-color.org). Whether a stream is a
/// terminal is the caller's question.
pub fn color_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `n` and the noun in the form that goes with it: "1 model call", "2 model calls".
pub fn count<N: std::fmt::Display + PartialEq + From<u8>>(n: N, one: &str, many: &str) -> String {
    let word = if n == N::from(1) { one } else { many };
    format!("{n} {word}")
}

/// Rows as aligned columns; the header row is bold. Cells are plain text: whatever controls
/// they hold are shown escaped ([`talaria_runtime::shown`]).
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| talaria_runtime::visible(c, usize::MAX)).collect()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i == last { c.clone() } else { format!("{c:<w$}", w = widths[i]) })
            .collect::<Vec<_>>()
            .join("  ")
    };
    putln!(anstream::stdout(), "{}", line(header.iter().map(|h| h.to_string()).collect()).bold());
    for row in &rows {
        putln!(anstream::stdout(), "{}", line(row.clone()));
    }
}

/// Text from outside (a file, the model, a tool, a plugin) for stdout: on a terminal its
/// control characters are shown escaped, never obeyed; piped, it goes as it is, so a script (or
/// `git apply`) gets the bytes.
pub fn for_stdout(text: &str) -> std::borrow::Cow<'_, str> {
    use std::io::IsTerminal as _;
    if std::io::stdout().is_terminal() && talaria_runtime::shown::needs_escaping(text, true) {
        talaria_runtime::shown::visible_lines(text).into()
    } else {
        text.into()
    }
}

/// The first line of a description, cut to `max` characters, its controls shown escaped.
pub fn first_line(text: &str, max: usize) -> String {
    talaria_runtime::visible(text.lines().next().unwrap_or_default(), max)
}

/// `path` with the home directory written `~`.
pub fn tilde(path: &std::path::Path) -> String {
    match std::env::var_os("HOME").map(std::path::PathBuf::from) {
        Some(home) if !home.as_os_str().is_empty() => match path.strip_prefix(&home) {
            Ok(rest) if rest.as_os_str().is_empty() => "~".into(),
            Ok(rest) => format!("~/{}", rest.display()),
            Err(_) => path.display().to_string(),
        },
        _ => path.display().to_string(),
    }
}

/// `text` as one shell word: bare when it is plain, else in single quotes.
pub fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=".contains(c));
    if plain { text.to_string() } else { format!("'{}'", text.replace('\'', "'\\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_wrap_at_spaces_with_their_indent() {
        assert_eq!(wrap("one two three four", 14, 6), "one two\n      three\n      four");
        assert_eq!(wrap("a\nb c", 80, 2), "a\n  b c", "the text's own breaks are kept");
        assert_eq!(wrap("unbreakable-word-here x", 10, 2), "unbreakable-word-here\n  x");
        let styled = format!("{} once {} no", "[y]".bold(), "[n]".bold());
        assert_eq!(anstream::adapter::strip_str(&wrap_after(&styled, 12, 2, 0)).to_string(), "[y] once [n]\n  no");
        let block = "⚠ q:\n  │ a very long command that stays whole\n  Allow? [y] once [s] session";
        assert_eq!(
            wrap_block(block, 20),
            "⚠ q:\n  │ a very long command that stays whole\n  Allow? [y] once\n    [s] session"
        );
    }

    #[test]
    fn parts_that_do_not_fit_start_a_row_of_their_own() {
        let parts = ["model", "context 1%", "turn 12 in"].map(String::from);
        assert_eq!(join_within(&parts, " · ", 2, 80), "model · context 1% · turn 12 in");
        assert_eq!(join_within(&parts, " · ", 2, 20), "model · context 1%\n  turn 12 in");
    }

    #[test]
    fn shell_words() {
        assert_eq!(super::shell_quote("0193-abc"), "0193-abc");
        assert_eq!(super::shell_quote("Trip to Lisbon"), "'Trip to Lisbon'");
        assert_eq!(super::shell_quote("it's $HOME"), "'it'\\''s $HOME'");
    }
}
