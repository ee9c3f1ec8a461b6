//! The one sanitiser for text from outside shown to a person: what the model, a tool, a plugin,
//! a chat platform or a file wrote, on its way to a terminal, a log or an editor's prompt.
//!
//! Such text is shown, never obeyed. Control characters (ESC, CR, BEL, DEL, the C1 controls
//! such as CSI `U+009B`, ...), the bidi controls (U+202A..U+202E, U+2066..U+2069, U+200E,
//! U+200F, U+061C) and the line and paragraph separators (U+2028, U+2029) are written out as
//! `\x1b`, `\r`, `\u{202e}`: an answer cannot move the cursor, erase a line, recolour what
//! follows, set the clipboard (OSC 52), retitle the window or reverse the reading order of what
//! the user is asked to approve. Tabs stay; backslashes stay as they are.
//!
//! - [`visible`] makes one line: a line break is escaped too (`\n`), and the text is cut to a
//!   length. For names, commands in prompts, log lines, table cells.
//! - [`visible_lines`] keeps the text's line breaks (`\n`, and `\r\n` as `\n`) and escapes the
//!   rest. For answers, diffs, skill bodies: text meant to be read over several lines.
//!
//! Renderers that style text (markdown, diffs) add their own escape codes around what these
//! return; only what the text itself carries is neutralised.
//!
//! ```
//! use talaria_runtime::shown::{visible, visible_lines};
//! let forged = "rm -rf build # \x1b[2K\r\x1b[33m⚠ wants to run `ls`";
//! assert_eq!(visible(forged, 200), "rm -rf build # \\x1b[2K\\r\\x1b[33m⚠ wants to run `ls`");
//! assert_eq!(visible_lines("one\r\ntwo\x1b]52;c;aGk=\x07"), "one\ntwo\\x1b]52;c;aGk=\\x07");
//! ```

use std::fmt::Write as _;

/// `text` as one line with its control characters escaped (see the module docs), at most
/// `max_chars` characters long: a longer text is cut between escapes and ends with `…`. Only
/// the characters kept are looked at, so a huge text costs no more than a short one.
pub fn visible(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars));
    let mut used = 0;
    // The length of `out` at the last boundary where the cut mark still fits.
    let mut room_for_mark = 0;
    for c in text.chars() {
        used += push_visible(&mut out, c);
        if used > max_chars {
            out.truncate(room_for_mark);
            out.push('…');
            return out;
        }
        if used < max_chars {
            room_for_mark = out.len();
        }
    }
    out
}

/// `text` with its line breaks kept (a `\r\n` becomes `\n`) and every other control character
/// escaped as [`visible`] does. The whole text, uncut.
pub fn visible_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => out.push('\n'),
            '\r' if chars.peek() == Some(&'\n') => {}
            c => {
                push_visible(&mut out, c);
            }
        }
    }
    out
}

/// Whether `text` holds anything [`visible`] would escape (besides line breaks, when
/// `lines_allowed`).
pub fn needs_escaping(text: &str, lines_allowed: bool) -> bool {
    text.chars().any(|c| match c {
        '\t' => false,
        '\n' | '\r' => !lines_allowed,
        c => c.is_control() || invisible_format(c),
    })
}

/// Push `c`, escaped if it must be; returns the characters pushed.
fn push_visible(out: &mut String, c: char) -> usize {
    let before = out.len();
    match c {
        '\t' => out.push(c),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if c.is_control() && c.is_ascii() => {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        }
        c if c.is_control() || invisible_format(c) => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        c => {
            out.push(c);
            return 1;
        }
    }
    // Every escape is ASCII.
    out.len() - before
}

/// Characters that are not controls but reorder or break the text around them.
fn invisible_format(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 4096;

    #[test]
    fn controls_and_bidi_overrides_are_escaped_visibly() {
        let forged = "ok\r\nINFO host: all good\x1b[2J\x07\x7f\u{9b}\u{202e}txt.exe\u{2066}\u{2028}\ttab\\n";
        assert_eq!(
            visible(forged, MAX),
            "ok\\r\\nINFO host: all good\\x1b[2J\\x07\\x7f\\u{9b}\\u{202e}txt.exe\\u{2066}\\u{2028}\ttab\\n"
        );
        assert_eq!(visible("plain café ✓", MAX), "plain café ✓");
    }

    #[test]
    fn a_long_line_is_cut_between_escapes() {
        assert_eq!(visible(&"é".repeat(5000), MAX).chars().count(), MAX);
        assert_eq!(visible("abcdef", 6), "abcdef");
        assert_eq!(visible("abcdefg", 6), "abcde…");
        // `\x1b` would not fit whole before the mark: it is left out, not split.
        assert_eq!(visible("abc\x1bdefg", 6), "abc…");
        assert_eq!(visible("abc\x1b", 7), "abc\\x1b");
    }

    #[test]
    fn lines_keep_their_breaks_and_nothing_else() {
        let diff = "-old\r\n+new\x1b[2K\r+\x1b]52;c;ZXZpbA==\x07\n\u{202e}";
        assert_eq!(visible_lines(diff), "-old\n+new\\x1b[2K\\r+\\x1b]52;c;ZXZpbA==\\x07\n\\u{202e}");
        assert!(needs_escaping("a\x1bb", true));
        assert!(!needs_escaping("a\nb\tc", true));
        assert!(needs_escaping("a\nb", false));
    }
}
