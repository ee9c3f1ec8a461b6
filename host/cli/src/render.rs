//! Rendering the loop's events in a terminal.
//!
//! The answer streams as it arrives; on a terminal each finished line is redrawn with light
//! markdown styling (headings, bold, inline code, code blocks, bullets). Tool calls get one
//! progress line each. With `answer_to_stdout` off (`chat -q`) the answer is not streamed: the
//! caller prints the final text on stdout, and only progress goes to stderr. While a model
//! request waits for its first token, a [`Waiting`] indicator runs on stderr (a terminal only).
//! A reply whose stream broke is shown marked as cut (it is never kept); one cut off at the
//! output-token limit is announced by the loop's notice and kept.

use std::io::Write as _;

use owo_colors::OwoColorize as _;
use talaria_protocol::{Event, NoticeLevel, Outcome, TurnEnd};

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
                let took = format!("{}ms", t.duration_ms);
                let line = match (self.fancy_progress(), t.ok) {
                    (true, true) => format!("{} {} {}", "┊ ✓".green(), t.name, took.dimmed()),
                    (true, false) => format!("{} {} {} {}", "┊ ✗".red(), t.name, took.dimmed(), t.preview.red()),
                    (false, true) => format!("done: {} ({took})", t.name),
                    (false, false) => format!("failed: {} ({took}): {}", t.name, t.preview),
                };
                self.progress(&line);
            }
            Event::Notice { level, text } => {
                self.end_text();
                notice(*level, text, self.progress_fancy);
            }
            // The front door words the answers to its own requests, and the questions.
            Event::Usage { .. }
            | Event::ApprovalNeeded(_)
            | Event::ApprovalResolved { .. }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_spans_lose_their_markers() {
        let styled = inline("run `cargo test` and **then** push");
        assert!(!styled.contains('`') && !styled.contains("**"), "{styled}");
        assert!(styled.contains("cargo test") && styled.contains("then"));
        assert_eq!(inline("a ` lone tick"), "a ` lone tick");
    }
}
