//! Shaping a command's output for the model: terminal escapes removed, progress-bar redraws
//! collapsed, stdout and stderr joined, and long output cut in the middle (the end of a build log
//! is where the errors are), then the JSON answer.
//!
//! ```ignore
//! let report = Report::new(out.exit_code, &out.stdout, &out.stderr, out.timed_out, out.truncated);
//! report.to_json() // {"exit_code":0,"output":"...","timed_out":false,"truncated":false}
//! ```

use serde::Serialize;

/// Characters of output returned at most.
pub const MAX_OUTPUT_CHARS: usize = 50_000;
/// Of those, how many come from the start; the rest come from the end.
const HEAD_CHARS: usize = 20_000;

/// The tool's answer, serialised in this field order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub exit_code: Option<i32>,
    pub output: String,
    pub timed_out: bool,
    pub truncated: bool,
}

impl Report {
    /// Build the answer from what the host returned; `truncated` is the host's own flag.
    pub fn new(exit_code: Option<i32>, stdout: &str, stderr: &str, timed_out: bool, truncated: bool) -> Self {
        let joined = join(&clean(stdout), &clean(stderr));
        let (output, cut) = cut_middle(&joined, MAX_OUTPUT_CHARS, HEAD_CHARS);
        Self { exit_code, output, timed_out, truncated: truncated || cut }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"cannot encode the result: {e}\"}}"))
    }
}

/// stdout, then stderr on a line of its own.
fn join(stdout: &str, stderr: &str) -> String {
    match (stdout.is_empty(), stderr.is_empty()) {
        (_, true) => stdout.to_string(),
        (true, false) => stderr.to_string(),
        (false, false) if stdout.ends_with('\n') => format!("{stdout}{stderr}"),
        (false, false) => format!("{stdout}\n{stderr}"),
    }
}

/// What a terminal would show: ANSI escape sequences removed, CRLF as LF, and a line redrawn
/// with carriage returns (progress bars) reduced to its last state.
pub fn clean(text: &str) -> String {
    let text = strip_ansi(text);
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        out.push_str(line.rsplit('\r').next().unwrap_or(line));
    }
    out
}

/// Remove CSI (`ESC [ ... final`), OSC (`ESC ] ... BEL` or `ESC ] ... ESC \`) and two-byte
/// escape sequences.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                // Parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            // Other escapes (ESC =, ESC 7, ...): the escape and the byte after it.
            Some(_) | None => {}
        }
    }
    out
}

/// `text` when it has at most `max` characters; else its first `head` and last `max - head`
/// characters around a note saying how much was left out. The flag says whether it was cut.
pub fn cut_middle(text: &str, max: usize, head: usize) -> (String, bool) {
    let total = text.chars().count();
    if total <= max {
        return (text.to_string(), false);
    }
    let tail = max.saturating_sub(head);
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text.char_indices().nth(total - tail).map_or(text.len(), |(i, _)| i);
    let omitted = total - head - tail;
    let out = format!(
        "{}\n... [{omitted} characters omitted; redirect the output to a file and search it to see everything] ...\n{}",
        &text[..head_end],
        &text[tail_start..]
    );
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_documented_shape() {
        let r = Report::new(Some(0), "hello\n", "", false, false);
        assert_eq!(r.to_json(), r#"{"exit_code":0,"output":"hello\n","timed_out":false,"truncated":false}"#);
        let r = Report::new(None, "", "command timed out after 1s and was killed", true, false);
        assert_eq!(
            r.to_json(),
            r#"{"exit_code":null,"output":"command timed out after 1s and was killed","timed_out":true,"truncated":false}"#
        );
    }

    #[test]
    fn stdout_comes_before_stderr_on_its_own_line() {
        assert_eq!(Report::new(Some(1), "out", "err\n", false, false).output, "out\nerr\n");
        assert_eq!(Report::new(Some(1), "out\n", "err", false, false).output, "out\nerr");
        assert_eq!(Report::new(Some(1), "", "err", false, false).output, "err");
    }

    #[test]
    fn host_truncation_flag_is_kept() {
        assert!(Report::new(Some(0), "x", "", false, true).truncated);
    }

    #[test]
    fn ansi_sequences_are_removed() {
        assert_eq!(strip_ansi("\u{1b}[1;31merror\u{1b}[0m: bad"), "error: bad");
        assert_eq!(strip_ansi("\u{1b}]0;title\u{7}text"), "text");
        assert_eq!(strip_ansi("\u{1b}]8;;http://x\u{1b}\\link\u{1b}]8;;\u{1b}\\"), "link");
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn progress_redraws_keep_the_last_state() {
        assert_eq!(clean("Downloading 10%\rDownloading 50%\rDownloading 100%\ndone\r\n"), "Downloading 100%\ndone\n");
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let text: String = (0..100).map(|i| format!("{i:03}\n")).collect(); // 400 chars
        let (out, cut) = cut_middle(&text, 40, 16);
        assert!(cut);
        assert!(out.starts_with("000\n001\n002\n003\n\n... [360 characters omitted;"), "{out}");
        assert!(out.ends_with("094\n095\n096\n097\n098\n099\n"), "{out}");
        assert_eq!(cut_middle("short", 40, 16), ("short".to_string(), false));
    }

    #[test]
    fn cutting_respects_char_boundaries() {
        let (out, cut) = cut_middle("ééééé", 4, 2);
        assert!(cut);
        assert!(out.starts_with("éé\n") && out.ends_with("\néé"), "{out}");
    }

    #[test]
    fn over_long_output_is_flagged_truncated() {
        let big = "y".repeat(MAX_OUTPUT_CHARS + 1);
        let r = Report::new(Some(0), &big, "", false, false);
        assert!(r.truncated);
        assert!(r.output.contains("1 characters omitted"));
    }
}
