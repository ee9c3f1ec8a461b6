//! Find-and-replace for the `patch` tool: an exact match first, then whitespace-tolerant line
//! matches, so that small slips in a model's copy of the text (trailing spaces, indentation,
//! doubled spaces) still apply; then a unified diff of the result.
//!
//! ```ignore
//! let done = patch::apply("fn a() {\n    1\n}\n", "  1\n", "  2\n", false)?;
//! assert_eq!(done.content, "fn a() {\n    2\n}\n"); // re-indented to the file's indentation
//! ```

use std::fmt;

use similar::TextDiff;

/// How loosely a match was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fuzz {
    /// Byte for byte.
    Exact,
    /// Lines equal once trailing whitespace is removed.
    TrailingWhitespace,
    /// Lines equal once leading and trailing whitespace is removed.
    Indentation,
    /// Lines equal once every run of whitespace counts as one space.
    InnerWhitespace,
}

impl fmt::Display for Fuzz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exact => "exact match",
            Self::TrailingWhitespace => "matched ignoring trailing whitespace",
            Self::Indentation => "matched ignoring indentation",
            Self::InnerWhitespace => "matched ignoring whitespace differences",
        })
    }
}

/// A successful replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patched {
    pub content: String,
    pub replacements: usize,
    pub fuzz: Fuzz,
}

/// Why nothing was replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// `old_string` and `new_string` are the same.
    Identical,
    /// `old_string` is empty but the file exists.
    EmptyOld,
    /// No match, not even a loose one. `hint` tells where the first line was seen.
    NotFound { hint: String },
    /// More than one match and `replace_all` was not set.
    Ambiguous { count: usize, lines: Vec<usize>, fuzz: Fuzz },
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Identical => f.write_str("old_string and new_string are identical, so there is nothing to change"),
            Self::EmptyOld => f.write_str(
                "old_string is empty but the file exists; give the text to replace, or use write_file to replace the whole file",
            ),
            Self::NotFound { hint } => {
                write!(f, "old_string was not found in the file, not even ignoring whitespace differences; {hint}")
            }
            Self::Ambiguous { count, lines, fuzz } => {
                let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
                let how = if *fuzz == Fuzz::Exact { String::new() } else { format!(" ({fuzz})") };
                write!(
                    f,
                    "old_string occurs {count} times{how}, starting at lines {}; add surrounding lines to \
                     old_string so it matches once, or set replace_all=true to replace every occurrence",
                    lines.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for PatchError {}

/// Replace `old` with `new` in `content`.
pub fn apply(content: &str, old: &str, new: &str, replace_all: bool) -> Result<Patched, PatchError> {
    if old == new {
        return Err(PatchError::Identical);
    }
    if old.is_empty() {
        return Err(PatchError::EmptyOld);
    }
    // A model writes "\n"; a CRLF file needs "\r\n" for the exact match and in the new text.
    let (old, new) = if content.contains("\r\n") && !old.contains('\r') {
        (old.replace('\n', "\r\n"), new.replace('\n', "\r\n"))
    } else {
        (old.to_string(), new.to_string())
    };

    let starts: Vec<usize> = content.match_indices(old.as_str()).map(|(i, _)| i).collect();
    if !starts.is_empty() {
        check_count(starts.len(), replace_all, Fuzz::Exact, || starts.iter().map(|&s| line_of(content, s)).collect())?;
        let content = if replace_all { content.replace(&old, &new) } else { content.replacen(&old, &new, 1) };
        return Ok(Patched { content, replacements: starts.len(), fuzz: Fuzz::Exact });
    }

    let file = split_lines(content);
    let pattern = pattern_lines(&old);
    if pattern.iter().all(|l| l.trim().is_empty()) {
        return Err(PatchError::NotFound { hint: "old_string holds only whitespace".to_string() });
    }
    for fuzz in [Fuzz::TrailingWhitespace, Fuzz::Indentation, Fuzz::InnerWhitespace] {
        let found = find_lines(&file, &pattern, fuzz);
        if found.is_empty() {
            continue;
        }
        check_count(found.len(), replace_all, fuzz, || found.iter().map(|&i| i + 1).collect())?;
        let keep_newline = !old.ends_with('\n');
        let mut out = content.to_string();
        for &i in found.iter().rev() {
            let first = &file[i];
            let last = &file[i + pattern.len() - 1];
            let end = if keep_newline { last.end } else { last.end_with_newline };
            let replacement = match fuzz {
                Fuzz::Exact | Fuzz::TrailingWhitespace => new.clone(),
                Fuzz::Indentation | Fuzz::InnerWhitespace => {
                    reindent(&new, indent_of_first(&pattern), indent(first.text))
                }
            };
            out.replace_range(first.start..end, &replacement);
        }
        return Ok(Patched { content: out, replacements: found.len(), fuzz });
    }
    Err(PatchError::NotFound { hint: not_found_hint(&file, &pattern) })
}

fn check_count(
    count: usize,
    replace_all: bool,
    fuzz: Fuzz,
    lines: impl FnOnce() -> Vec<usize>,
) -> Result<(), PatchError> {
    if count > 1 && !replace_all {
        let mut lines = lines();
        lines.truncate(20);
        return Err(PatchError::Ambiguous { count, lines, fuzz });
    }
    Ok(())
}

/// A unified diff between two versions of `path`, cut at `max_chars`.
pub fn unified_diff(path: &str, before: &str, after: &str, max_chars: usize) -> String {
    let diff = TextDiff::from_lines(before, after);
    let text = diff.unified_diff().context_radius(3).header(&format!("a/{path}"), &format!("b/{path}")).to_string();
    match text.char_indices().nth(max_chars) {
        None => text,
        Some((cut, _)) => format!("{}\n... (diff truncated; read the file to see the rest)", &text[..cut]),
    }
}

/// One line of the file: byte range of its text (without "\n" or "\r\n") and of its terminator.
struct Line<'a> {
    text: &'a str,
    start: usize,
    end: usize,
    end_with_newline: usize,
}

fn split_lines(content: &str) -> Vec<Line<'_>> {
    let mut lines = Vec::new();
    let mut start = 0;
    for piece in content.split_inclusive('\n') {
        let body = piece.strip_suffix('\n').unwrap_or(piece);
        let body = body.strip_suffix('\r').unwrap_or(body);
        lines.push(Line { text: body, start, end: start + body.len(), end_with_newline: start + piece.len() });
        start += piece.len();
    }
    lines
}

/// The lines of `old_string`; one final newline does not make an extra empty line.
fn pattern_lines(old: &str) -> Vec<&str> {
    let old = old.strip_suffix('\n').unwrap_or(old);
    old.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect()
}

fn normalize(line: &str, fuzz: Fuzz) -> std::borrow::Cow<'_, str> {
    match fuzz {
        Fuzz::Exact => line.into(),
        Fuzz::TrailingWhitespace => line.trim_end().into(),
        Fuzz::Indentation => line.trim().into(),
        Fuzz::InnerWhitespace => line.split_whitespace().collect::<Vec<_>>().join(" ").into(),
    }
}

/// Indices of the first line of each non-overlapping run of file lines matching `pattern`.
fn find_lines(file: &[Line<'_>], pattern: &[&str], fuzz: Fuzz) -> Vec<usize> {
    let wanted: Vec<_> = pattern.iter().map(|l| normalize(l, fuzz)).collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i + wanted.len() <= file.len() {
        if wanted.iter().zip(&file[i..]).all(|(w, line)| *w == normalize(line.text, fuzz)) {
            found.push(i);
            i += wanted.len();
        } else {
            i += 1;
        }
    }
    found
}

fn indent(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

fn indent_of_first<'a>(pattern: &[&'a str]) -> &'a str {
    pattern.iter().find(|l| !l.trim().is_empty()).map_or("", |l| indent(l))
}

/// Move `text` from the model's indentation to the file's: a leading `from` becomes `to`.
fn reindent(text: &str, from: &str, to: &str) -> String {
    if from == to {
        return text.to_string();
    }
    text.split_inclusive('\n')
        .map(|line| match line.strip_prefix(from) {
            Some(rest) if !line.trim().is_empty() => format!("{to}{rest}"),
            _ => line.to_string(),
        })
        .collect()
}

fn line_of(content: &str, byte: usize) -> usize {
    content.as_bytes()[..byte].iter().filter(|&&b| b == b'\n').count() + 1
}

fn not_found_hint(file: &[Line<'_>], pattern: &[&str]) -> String {
    let first = pattern.iter().map(|l| l.trim()).find(|l| !l.is_empty()).unwrap_or("");
    let seen: Vec<String> = file
        .iter()
        .enumerate()
        .filter(|(_, l)| l.text.contains(first))
        .map(|(i, _)| (i + 1).to_string())
        .take(5)
        .collect();
    if seen.is_empty() {
        "even its first line appears nowhere in the file: read the file again with read_file and copy the text exactly"
            .to_string()
    } else {
        format!(
            "its first line appears at line {} but the lines after it differ: read the file again around there \
             with read_file and copy the text exactly",
            seen.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(content: &str, old: &str, new: &str, all: bool) -> Patched {
        match apply(content, old, new, all) {
            Ok(p) => p,
            Err(e) => panic!("patch failed: {e}"),
        }
    }

    #[test]
    fn exact_single_match() {
        let p = ok("let a = 1;\nlet b = 2;\n", "b = 2", "b = 3", false);
        assert_eq!(p.content, "let a = 1;\nlet b = 3;\n");
        assert_eq!((p.replacements, p.fuzz), (1, Fuzz::Exact));
    }

    #[test]
    fn ambiguous_exact_match_is_refused_with_lines() {
        let err = apply("x\ny\nx\n", "x", "z", false).err();
        assert_eq!(err, Some(PatchError::Ambiguous { count: 2, lines: vec![1, 3], fuzz: Fuzz::Exact }));
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("occurs 2 times") && msg.contains("replace_all=true"), "{msg}");
    }

    #[test]
    fn replace_all_replaces_every_occurrence() {
        let p = ok("x\ny\nx\n", "x", "z", true);
        assert_eq!(p.content, "z\ny\nz\n");
        assert_eq!(p.replacements, 2);
    }

    #[test]
    fn trailing_whitespace_in_file_is_tolerated() {
        let p = ok("fn main() {   \n    run();\n}\n", "fn main() {\n    run();\n", "fn main() {\n    go();\n", false);
        assert_eq!(p.content, "fn main() {\n    go();\n}\n");
        assert_eq!(p.fuzz, Fuzz::TrailingWhitespace);
    }

    #[test]
    fn wrong_indentation_is_tolerated_and_new_text_reindented() {
        let file = "impl A {\n    fn f() {\n        one();\n    }\n}\n";
        let p = ok(file, "fn f() {\n    one();\n}", "fn f() {\n    two();\n}", false);
        assert_eq!(p.content, "impl A {\n    fn f() {\n        two();\n    }\n}\n");
        assert_eq!(p.fuzz, Fuzz::Indentation);
    }

    #[test]
    fn inner_whitespace_is_tolerated() {
        let p = ok("let  x =  1;\n", "let x = 1;", "let x = 2;", false);
        assert_eq!(p.content, "let x = 2;\n");
        assert_eq!(p.fuzz, Fuzz::InnerWhitespace);
    }

    #[test]
    fn deleting_whole_lines_removes_their_newlines() {
        let p = ok("a\n  b  \nc\n", "b\n", "", false);
        assert_eq!(p.content, "a\nc\n");
    }

    #[test]
    fn ambiguous_fuzzy_match_is_refused() {
        let err = apply("  a  b\nc\n  a  b\n", "a b", "z", false).err();
        assert_eq!(err, Some(PatchError::Ambiguous { count: 2, lines: vec![1, 3], fuzz: Fuzz::InnerWhitespace }));
    }

    #[test]
    fn crlf_files_keep_crlf() {
        let p = ok("a\r\nb\r\nc\r\n", "a\nb\n", "a\nB\n", false);
        assert_eq!(p.content, "a\r\nB\r\nc\r\n");
        assert_eq!(p.fuzz, Fuzz::Exact);
    }

    #[test]
    fn not_found_points_at_the_first_line() {
        let err = apply("one\ntwo\nthree\n", "two\nfour", "x", false).err();
        let Some(PatchError::NotFound { hint }) = err else { panic!("expected NotFound, got {err:?}") };
        assert!(hint.contains("appears at line 2"), "{hint}");
        let err = apply("one\n", "zzz", "x", false).err();
        let Some(PatchError::NotFound { hint }) = err else { panic!("expected NotFound, got {err:?}") };
        assert!(hint.contains("appears nowhere"), "{hint}");
    }

    #[test]
    fn identical_and_empty_old_are_refused() {
        assert_eq!(apply("a", "a", "a", false), Err(PatchError::Identical));
        assert_eq!(apply("a", "", "b", false), Err(PatchError::EmptyOld));
    }

    #[test]
    fn diff_is_unified_with_headers() {
        let d = unified_diff("src/a.rs", "one\ntwo\n", "one\n2\n", 10_000);
        assert!(d.starts_with("--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1,2 +1,2 @@\n"), "{d}");
        assert!(d.contains("\n-two\n+2\n"), "{d}");
        let cut = unified_diff("x", "a\n", "b\n", 10);
        assert!(cut.ends_with("(diff truncated; read the file to see the rest)"), "{cut}");
    }
}
