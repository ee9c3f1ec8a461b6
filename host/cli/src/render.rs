//! Rendering the loop's events in a terminal.
//!
//! The answer streams as it arrives; on a terminal each finished line is redrawn with light
//! markdown styling (headings, bold, inline code, code blocks, bullets). Tool calls get one
//! progress line each. With `answer_to_stdout` off (`chat -q`) the answer is not streamed: the
//! caller prints the final text on stdout, and only progress goes to stderr. While a model
//! request waits for its first token, a [`Waiting`] indicator runs on stderr (a terminal only).
//! A reply whose stream broke is shown marked as cut (it is never kept); one cut off at the
//! output-token limit is announced by the loop's notice and kept.

use std::collections::HashMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use owo_colors::OwoColorize as _;
use talaria_protocol::{CallOutcome, Event, NoticeLevel, Outcome, TurnEnd};

use crate::waiting::Waiting;

/// Turns events into terminal output.
pub struct Renderer {
    /// Stream the answer on stdout (the REPL) or keep stdout for the final answer (`-q`).
    answer_to_stdout: bool,
    /// Styles and line redraws (stdout is a terminal and NO_COLOR is unset).
    fancy: bool,
    progress_fancy: bool,
    line: String,
    in_code: bool,
    in_reasoning: bool,
    text_started: bool,
    show_reasoning: bool,
    /// stderr is a terminal: a waiting indicator may run there.
    indicator: bool,
    waiting: Option<Waiting>,
    /// Text of the current answer was streamed to stdout (shown, so not repeated when cut).
    streamed: bool,
    /// Approvals being asked: when, and for which tool call.
    asking: HashMap<u64, (Instant, String)>,
    /// Time each tool call spent waiting for the user, left out of the duration shown.
    waited: HashMap<String, Duration>,
}

impl Renderer {
    pub fn new(answer_to_stdout: bool) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let tty = |t: bool| t && !no_color;
        Self {
            answer_to_stdout,
            fancy: tty(std::io::IsTerminal::is_terminal(&std::io::stdout())),
            progress_fancy: tty(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            line: String::new(),
            in_code: false,
            in_reasoning: false,
            text_started: false,
            show_reasoning: true,
            indicator: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            waiting: None,
            streamed: false,
            asking: HashMap::new(),
            waited: HashMap::new(),
        }
    }

    fn stop_waiting(&mut self) {
        if let Some(mut waiting) = self.waiting.take() {
            waiting.stop();
        }
    }

    /// Whether progress output is styled.
    pub fn fancy_progress(&self) -> bool {
        if self.answer_to_stdout { self.fancy } else { self.progress_fancy }
    }

    /// How long call `call_id` took, `duration_ms` in all, less the time it waited for the
    /// user to answer an approval.
    fn working_ms(&mut self, call_id: &str, duration_ms: u64) -> u64 {
        let waited = self.waited.remove(call_id).unwrap_or_default();
        duration_ms.saturating_sub(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
    }

    /// Whether progress goes to a terminal (a person reads it), coloured or not.
    fn progress_on_terminal(&self) -> bool {
        if self.answer_to_stdout { std::io::IsTerminal::is_terminal(&std::io::stdout()) } else { self.indicator }
    }

    /// Print a progress line (stdout in the REPL, stderr for `-q`).
    pub fn progress(&mut self, text: &str) {
        self.stop_waiting();
        self.end_text();
        if self.answer_to_stdout {
            putln!(std::io::stdout(), "{text}");
        } else {
            putln!(std::io::stderr(), "{text}");
        }
    }

    pub fn handle(&mut self, event: &Event) {
        match event {
            Event::RequestSent { model } => {
                self.stop_waiting();
                if self.indicator {
                    self.waiting = Some(Waiting::start(model.clone(), self.progress_fancy));
                }
                return;
            }
            // Usage arrives after the answer; notices (retries) leave the indicator running.
            Event::Usage { .. } => return,
            Event::Notice { level, text } if self.waiting.is_some() => {
                let fancy = self.progress_fancy;
                if let Some(waiting) = &self.waiting {
                    waiting.interrupt(|| notice(*level, text, fancy));
                }
                return;
            }
            _ => self.stop_waiting(),
        }
        match event {
            Event::TextDelta { text } => self.text(text),
            Event::ReasoningDelta { text } => self.reasoning(text),
            Event::MessageEnd => self.end_text(),
            Event::ToolStarted(t) => {
                let line = if self.fancy_progress() {
                    format!("{} {}", "┊ ⚙".dimmed(), t.preview.dimmed())
                } else {
                    format!("tool: {}", t.preview)
                };
                self.progress(&line);
            }
            Event::ToolFinished(t) => {
                let outcome = t.outcome();
                let took = self.working_ms(&t.call_id, t.duration_ms);
                let line = finished_line(&t.name, took, &outcome, self.fancy_progress());
                self.progress(&line);
                if let CallOutcome::Command { output, .. } = &outcome
                    && self.progress_on_terminal()
                {
                    for line in output_preview(output) {
                        let line = if self.fancy_progress() { format!("{}", line.dimmed()) } else { line };
                        self.progress(&format!("┊   {line}"));
                    }
                }
            }
            Event::Notice { level, text } => {
                self.end_text();
                notice(*level, text, self.progress_fancy);
            }
            // The front door words the answers to its own requests, and the questions; the time
            // an answer took is the user's, not the tool's.
            Event::ApprovalNeeded(a) => {
                self.asking.insert(a.id, (Instant::now(), a.call_id.clone()));
            }
            Event::ApprovalResolved { id, .. } => {
                if let Some((asked, call)) = self.asking.remove(id) {
                    *self.waited.entry(call).or_default() += asked.elapsed();
                }
            }
            Event::Usage { .. }
            | Event::ClarifyNeeded(_)
            | Event::RequestSent { .. }
            | Event::SessionStarted(_)
            | Event::TurnStarted { .. }
            | Event::Undone { .. }
            | Event::Compacted { .. }
            | Event::ModelChanged { .. }
            | Event::TitleChanged { .. }
            | Event::YoloChanged { .. }
            | Event::ContextReport { .. }
            | Event::Error { .. }
            | Event::ShutdownComplete => {}
            Event::TurnEnd(end) => {
                self.end_text();
                self.turn_end(end);
                self.streamed = false;
            }
        }
    }

    fn turn_end(&mut self, end: &TurnEnd) {
        match &end.outcome {
            Outcome::Completed | Outcome::BudgetExhausted | Outcome::Truncated => {}
            Outcome::Interrupted => self.progress_warn("interrupted; nothing of the unfinished reply was kept"),
            Outcome::Failed(e) => {
                self.progress_error(e);
                if end.partial.trim().is_empty() {
                    return;
                }
                if self.answer_to_stdout && self.streamed {
                    self.progress_warn("the reply above was cut off before its end; it was not kept");
                } else {
                    let head = "what arrived before the reply was cut off (not kept):";
                    if self.progress_fancy {
                        putln!(std::io::stderr(), "{}", head.yellow());
                    } else {
                        putln!(std::io::stderr(), "{head}");
                    }
                    for line in end.partial.trim_end().lines() {
                        putln!(std::io::stderr(), "  | {line}");
                    }
                    putln!(std::io::stderr(), "  [cut]");
                }
            }
        }
    }

    fn progress_warn(&self, text: &str) {
        if self.progress_fancy {
            putln!(std::io::stderr(), "{} {text}", "warning:".yellow().bold());
        } else {
            putln!(std::io::stderr(), "warning: {text}");
        }
    }

    fn progress_error(&self, text: &str) {
        if self.progress_fancy {
            putln!(std::io::stderr(), "{} {text}", "error:".red().bold());
        } else {
            putln!(std::io::stderr(), "error: {text}");
        }
    }

    fn reasoning(&mut self, text: &str) {
        if !self.answer_to_stdout || !self.show_reasoning {
            return;
        }
        if !self.in_reasoning {
            self.end_text();
            self.in_reasoning = true;
            if self.fancy {
                put!(std::io::stdout(), "{}", "thinking: ".dimmed().italic());
            } else {
                put!(std::io::stdout(), "thinking: ");
            }
        }
        if self.fancy {
            put!(std::io::stdout(), "{}", text.dimmed().italic());
        } else {
            put!(std::io::stdout(), "{text}");
        }
        let _ = std::io::stdout().flush();
    }

    fn text(&mut self, text: &str) {
        if !self.answer_to_stdout {
            return;
        }
        self.streamed = true;
        if self.in_reasoning {
            putln!(std::io::stdout());
            self.in_reasoning = false;
        }
        self.text_started = true;
        let mut rest = text;
        while let Some(nl) = rest.find('\n') {
            let (piece, after) = rest.split_at(nl);
            self.line.push_str(piece);
            if self.fancy {
                put!(std::io::stdout(), "{piece}");
                self.redraw_line();
            } else {
                putln!(std::io::stdout(), "{piece}");
            }
            self.line.clear();
            rest = &after[1..];
        }
        if !rest.is_empty() {
            self.line.push_str(rest);
            put!(std::io::stdout(), "{rest}");
        }
        let _ = std::io::stdout().flush();
    }

    /// The current line is complete: redraw it styled, if it fit on one terminal row.
    fn redraw_line(&mut self) {
        let width = terminal_width();
        let line = std::mem::take(&mut self.line);
        if line.chars().count() < width {
            put!(std::io::stdout(), "\r\x1b[2K{}", self.style(&line));
        }
        putln!(std::io::stdout());
        self.line = line;
    }

    fn style(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            self.in_code = !self.in_code;
            return line.dimmed().to_string();
        }
        if self.in_code {
            return line.cyan().to_string();
        }
        if let Some(h) = trimmed.strip_prefix('#') {
            let h = h.trim_start_matches('#').trim_start();
            return h.bold().underline().to_string();
        }
        let (bullet, body) = match trimmed.strip_prefix("- ").or_else(|| trimmed.strip_prefix("* ")) {
            Some(body) => (format!("{}• ", &line[..line.len() - trimmed.len()]), body),
            None => (String::new(), line),
        };
        format!("{bullet}{}", inline(body))
    }

    /// Finish a streamed message: close the open line.
    pub fn end_text(&mut self) {
        if self.in_reasoning {
            putln!(std::io::stdout());
            self.in_reasoning = false;
        }
        if self.answer_to_stdout && !self.line.is_empty() {
            if self.fancy {
                self.redraw_line();
            } else {
                putln!(std::io::stdout());
            }
            self.line.clear();
        }
        self.in_code = false;
        if self.text_started {
            let _ = std::io::stdout().flush();
            self.text_started = false;
        }
    }
}

/// A notice on stderr, styled when `fancy`.
fn notice(level: NoticeLevel, text: &str, fancy: bool) {
    match (level, fancy) {
        (NoticeLevel::Warn, true) => putln!(std::io::stderr(), "{} {text}", "warning:".yellow().bold()),
        (NoticeLevel::Warn, false) => putln!(std::io::stderr(), "warning: {text}"),
        (NoticeLevel::Info, true) => putln!(std::io::stderr(), "{}", format!("┊ {text}").dimmed()),
        (NoticeLevel::Info, false) => putln!(std::io::stderr(), "note: {text}"),
    }
}

/// `**bold**` and `` `code` `` spans.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    loop {
        let next_code = rest.find('`');
        let next_bold = rest.find("**");
        match (next_code, next_bold) {
            (Some(c), b) if b.is_none_or(|b| c < b) => {
                let Some(end) = rest[c + 1..].find('`') else { break };
                out.push_str(&rest[..c]);
                out.push_str(&(&rest[c + 1..c + 1 + end]).yellow().to_string());
                rest = &rest[c + 2 + end..];
            }
            (_, Some(b)) => {
                let Some(end) = rest[b + 2..].find("**") else { break };
                out.push_str(&rest[..b]);
                out.push_str(&(&rest[b + 2..b + 2 + end]).bold().to_string());
                rest = &rest[b + 4 + end..];
            }
            _ => break,
        }
    }
    out.push_str(rest);
    out
}

fn terminal_width() -> usize {
    #[allow(unsafe_code)]
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; failure leaves it zeroed.
    let cols = unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) == 0 { ws.ws_col } else { 0 }
    };
    if cols == 0 { 80 } else { usize::from(cols) }
}

/// Lines of a command's output shown under its progress line.
const OUTPUT_PREVIEW_LINES: usize = 3;
/// Characters of each such line.
const OUTPUT_PREVIEW_CHARS: usize = 120;

/// The line that says tool call `name` finished: its mark, how it went and how long it took.
fn finished_line(name: &str, took_ms: u64, outcome: &CallOutcome, fancy: bool) -> String {
    let took = duration(took_ms);
    let what = match outcome {
        CallOutcome::Done | CallOutcome::Command { exit_code: Some(0), .. } => String::new(),
        CallOutcome::Command { exit_code: Some(code), .. } => format!("exit {code}"),
        CallOutcome::Command { exit_code: None, timed_out: true, .. } => "killed: timed out".to_string(),
        CallOutcome::Command { exit_code: None, timed_out: false, .. } => "killed".to_string(),
        CallOutcome::Failed(text) => talaria_runtime::visible(text.lines().next().unwrap_or_default(), 200),
    };
    match (fancy, outcome.failed()) {
        (true, false) => format!("{} {name} {}", "┊ ✓".green(), took.dimmed()),
        (true, true) => format!("{} {name} {} {}", "┊ ✗".red(), took.dimmed(), what.red()),
        (false, false) => format!("done: {name} ({took})"),
        (false, true) => format!("failed: {name} ({took}): {what}"),
    }
}

/// `ms` as a person reads it: `12ms`, `1.5s`, `2m05s`.
fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
    }
}

/// The last few non-blank lines of a command's output, each cut to fit a line, with the
/// controls a command could use to repaint the screen escaped (`talaria_runtime::visible`).
fn output_preview(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let skipped = lines.len().saturating_sub(OUTPUT_PREVIEW_LINES);
    let mut shown: Vec<String> = lines[skipped..]
        .iter()
        .map(|l| talaria_runtime::visible(&l.replace('\t', "    "), OUTPUT_PREVIEW_CHARS))
        .collect();
    if skipped > 0 {
        shown.insert(0, format!("… {skipped} more line{}", if skipped == 1 { "" } else { "s" }));
    }
    shown
}

#[cfg(test)]
mod tests {
    use talaria_protocol::{ApprovalNeeded, ToolFinished};

    use super::*;

    fn finished(ok: bool, result: &str) -> ToolFinished {
        ToolFinished {
            call_id: "c1".into(),
            name: "terminal".into(),
            ok,
            preview: String::new(),
            result: result.into(),
            duration_ms: 1500,
            changes: Vec::new(),
        }
    }

    #[test]
    fn a_command_that_fails_is_marked_failed_with_its_exit_code() {
        let t = finished(true, r#"{"exit_code":3,"output":"1\n2\n","timed_out":false}"#);
        assert_eq!(finished_line(&t.name, t.duration_ms, &t.outcome(), false), "failed: terminal (1.5s): exit 3");
        let t = finished(true, r#"{"exit_code":0,"output":"ok\n","timed_out":false}"#);
        assert_eq!(finished_line(&t.name, t.duration_ms, &t.outcome(), false), "done: terminal (1.5s)");
        let t = finished(true, r#"{"exit_code":null,"output":"","timed_out":true}"#);
        assert_eq!(
            finished_line(&t.name, t.duration_ms, &t.outcome(), false),
            "failed: terminal (1.5s): killed: timed out"
        );
    }

    #[test]
    fn time_spent_waiting_for_an_approval_is_not_the_tools() {
        let mut r = Renderer::new(false);
        let asked = ApprovalNeeded {
            id: 7,
            kind: talaria_protocol::ApprovalKind::Command,
            plugin: "terminal".into(),
            command: "rm -rf build".into(),
            reason: "deletes files".into(),
            timeout_secs: 60,
            call_id: "c1".into(),
        };
        r.handle(&Event::ApprovalNeeded(asked));
        std::thread::sleep(std::time::Duration::from_millis(60));
        r.handle(&Event::ApprovalResolved { id: 7, decision: talaria_protocol::Decision::Once });
        let shown = r.working_ms("c1", 100);
        assert!(shown <= 40, "100 ms in all, at least 60 of them waiting: shown {shown}");
        assert_eq!(r.working_ms("c1", 100), 100, "counted once");
        assert_eq!(r.working_ms("c2", 5), 5, "another call never waited");
    }

    #[test]
    fn a_refusal_is_shown_in_words_not_as_the_json_for_the_model() {
        let t = finished(false, r#"{"error":"denied: the user refused `rm -rf build`"}"#);
        assert_eq!(
            finished_line(&t.name, t.duration_ms, &t.outcome(), false),
            "failed: terminal (1.5s): denied: the user refused `rm -rf build`"
        );
    }

    #[test]
    fn the_output_preview_keeps_the_last_lines_and_no_escape_sequences() {
        let out = "one\n\ntwo\nthree\n\u{1b}[2Jfour\tfive\n";
        assert_eq!(output_preview(out), vec!["… 1 more line", "two", "three", "\\x1b[2Jfour    five"]);
        assert!(output_preview("").is_empty());
        assert_eq!(output_preview("evil\u{202e}txt.exe"), vec!["evil\\u{202e}txt.exe"], "bidi controls too");
    }

    #[test]
    fn inline_spans_lose_their_markers() {
        let styled = inline("run `cargo test` and **then** push");
        assert!(!styled.contains('`') && !styled.contains("**"), "{styled}");
        assert!(styled.contains("cargo test") && styled.contains("then"));
        assert_eq!(inline("a ` lone tick"), "a ` lone tick");
    }
}
