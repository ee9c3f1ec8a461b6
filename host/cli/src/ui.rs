//! Terminal output: styled only when stdout/stderr is a terminal and NO_COLOR is unset
//! (anstream strips styles otherwise), errors and warnings on stderr.

use owo_colors::OwoColorize as _;
pub use talaria_author::ui::{error, note, warn};

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
    #[test]
    fn shell_words() {
        assert_eq!(super::shell_quote("0193-abc"), "0193-abc");
        assert_eq!(super::shell_quote("Trip to Lisbon"), "'Trip to Lisbon'");
        assert_eq!(super::shell_quote("it's $HOME"), "'it'\\''s $HOME'");
    }
}
