//! Reading text files a window of lines at a time, with line numbers, without holding the whole
//! file in memory.
//!
//! ```ignore
//! let Some(text) = read::sniff(File::open(path)?)? else { return Err(binary) };
//! let page = read::render(text, 1, 500)?; // "     1\tfirst line\n..."
//! ```

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Cursor, Read};

/// Lines shown when the model gives no limit.
pub const DEFAULT_LIMIT: usize = 500;
/// Most lines shown in one call.
pub const MAX_LIMIT: usize = 2000;
/// Longer lines are cut to this many characters.
pub const MAX_LINE_CHARS: usize = 2000;
/// A NUL byte in this many leading bytes marks a file as binary.
pub const SNIFF_BYTES: usize = 8192;

/// Why a window could not be rendered.
#[derive(Debug)]
pub enum ReadError {
    /// `offset` lies past the last line.
    PastEnd {
        offset: usize,
        total: usize,
    },
    Io(io::Error),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// A buffered reader over `reader`, or `None` when its first [`SNIFF_BYTES`] contain a NUL byte.
pub fn sniff<R: Read>(reader: R) -> io::Result<Option<impl BufRead>> {
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    let mut reader = reader;
    (&mut reader).take(SNIFF_BYTES as u64).read_to_end(&mut head)?;
    if head.contains(&0) {
        return Ok(None);
    }
    Ok(Some(BufReader::new(Cursor::new(head).chain(reader))))
}

/// Lines `offset..offset + limit` (1-based) as `"{n:>6}\t{line}"`, followed by a note telling how
/// to continue when more lines remain.
pub fn render<R: BufRead>(mut reader: R, offset: usize, limit: usize) -> Result<String, ReadError> {
    let offset = offset.max(1);
    let last_wanted = offset.saturating_add(limit).saturating_sub(1);
    let mut out = String::new();
    let mut buf = Vec::new();
    let mut total = 0usize;
    while total < last_wanted {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        total += 1;
        if total >= offset {
            let _ = writeln!(out, "{total:>6}\t{}", display_line(&buf));
        }
    }
    if total == last_wanted {
        total += count_lines(&mut reader)?;
    }
    if total == 0 {
        return Ok("(the file is empty)".to_string());
    }
    if offset > total {
        return Err(ReadError::PastEnd { offset, total });
    }
    if last_wanted < total {
        let _ = write!(out, "... (file has {total} lines; continue with offset={})", last_wanted + 1);
    } else if out.ends_with('\n') {
        out.pop();
    }
    Ok(out)
}

/// One raw line without its terminator, cut at [`MAX_LINE_CHARS`] characters.
fn display_line(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let text = String::from_utf8_lossy(raw);
    truncate_chars(&text, MAX_LINE_CHARS)
}

/// `text` cut to `max` characters, with a marker saying how long it was.
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => {
            format!("{} … [line truncated: {} characters]", &text[..cut], text.chars().count())
        }
    }
}

/// Lines left in `reader`; a last line without a newline counts.
fn count_lines<R: BufRead>(reader: &mut R) -> io::Result<usize> {
    let mut lines = 0;
    let mut pending = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let newlines = chunk.iter().filter(|&&b| b == b'\n').count();
        lines += newlines;
        pending = chunk.last() != Some(&b'\n');
        let len = chunk.len();
        reader.consume(len);
    }
    Ok(lines + usize::from(pending))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str, offset: usize, limit: usize) -> String {
        match render(Cursor::new(text.as_bytes()), offset, limit) {
            Ok(s) => s,
            Err(e) => panic!("render failed: {e:?}"),
        }
    }

    #[test]
    fn numbers_lines_right_aligned_with_tab() {
        assert_eq!(page("foo\nbar\n", 1, 500), "     1\tfoo\n     2\tbar");
        assert_eq!(page("no newline at end", 1, 500), "     1\tno newline at end");
    }

    #[test]
    fn window_and_continuation_note() {
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            page(&text, 3, 2),
            "     3\tline 3\n     4\tline 4\n... (file has 10 lines; continue with offset=5)"
        );
        // The last window has no note.
        assert_eq!(page(&text, 9, 5), "     9\tline 9\n    10\tline 10");
        // A window ending exactly on the last line has none either.
        assert_eq!(page(&text, 9, 2), "     9\tline 9\n    10\tline 10");
    }

    #[test]
    fn counts_a_final_line_without_newline() {
        assert_eq!(page("a\nb\nc", 1, 1), "     1\ta\n... (file has 3 lines; continue with offset=2)");
    }

    #[test]
    fn past_end_is_an_error_naming_the_length() {
        match render(Cursor::new(b"a\nb\n".as_slice()), 5, 10) {
            Err(ReadError::PastEnd { offset: 5, total: 2 }) => {}
            other => panic!("expected PastEnd, got {other:?}"),
        }
    }

    #[test]
    fn empty_file_says_so() {
        assert_eq!(page("", 1, 500), "(the file is empty)");
    }

    #[test]
    fn crlf_is_not_shown() {
        assert_eq!(page("a\r\nb\r\n", 1, 10), "     1\ta\n     2\tb");
    }

    #[test]
    fn long_lines_are_cut_with_marker() {
        let long = "x".repeat(MAX_LINE_CHARS + 5);
        let out = page(&long, 1, 1);
        assert!(out.starts_with(&format!("     1\t{}", "x".repeat(MAX_LINE_CHARS))));
        assert!(out.ends_with(&format!("… [line truncated: {} characters]", MAX_LINE_CHARS + 5)));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé … [line truncated: 5 characters]");
        assert_eq!(truncate_chars("héllo", 5), "héllo");
    }

    #[test]
    fn sniff_refuses_nul_and_keeps_text_whole() {
        assert!(matches!(sniff(Cursor::new(b"ab\0cd".to_vec())), Ok(None)));
        let mut text = String::new();
        let reader = sniff(Cursor::new(b"hello\nworld".to_vec())).ok().flatten();
        let Some(mut reader) = reader else { panic!("text file sniffed as binary") };
        reader.read_to_string(&mut text).ok();
        assert_eq!(text, "hello\nworld");
    }

    #[test]
    fn sniff_only_looks_at_the_head() {
        let mut bytes = vec![b'a'; SNIFF_BYTES];
        bytes.push(0);
        assert!(matches!(sniff(Cursor::new(bytes)), Ok(Some(_))));
    }
}
