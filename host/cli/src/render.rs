//! Rendering the loop's events in a terminal.
//!
//! On a terminal the answer is rendered as markdown while it streams ([`Live`]: tables, lists,
//! highlighted code, wrapping at the width); anywhere else it passes through as the model wrote
//! it. Tool calls get progress lines (with a command's last lines of output, and a coloured diff
//! of each file a call changed). With `answer_to_stdout` off (`chat -q`) the answer is not
//! streamed: the caller prints the final text on stdout, and only progress goes to stderr. While
//! a model request waits for its first token, a [`Waiting`] indicator runs on stderr (a terminal
//! only). A reply whose stream broke is shown marked as cut (it is never kept); one cut off at
//! the output-token limit is announced by the loop's notice and kept.
//!
//! Layout follows whether the output is a terminal; colour is added on top and removed by
//! anstream under `NO_COLOR` (and off a terminal), so `NO_COLOR` changes colour only.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use owo_colors::OwoColorize as _;
use talaria_protocol::{CallOutcome, Decision, Event, FileChange, NoticeLevel, Outcome, TurnEnd};

use crate::live::Live;
use crate::waiting::Waiting;

/// What a turn the user stopped kept: their message, and the `calls` tool calls that had
/// finished, with their results (the model reads them next turn); a reply that had begun
/// (`cut`) was not kept.
fn interrupted_report(calls: usize, cut: bool) -> String {
    let kept = match calls {
        0 => "your message".to_string(),
        n => format!(
            "your message and {} with {}",
            crate::ui::count(n, "tool call", "tool calls"),
            if n == 1 { "its result" } else { "their results" }
        ),
    };
    let lost = if cut { "; the unfinished reply was not" } else { "" };
    format!("interrupted: kept {kept}{lost} (/undo drops what was kept)")
}

/// Turns events into terminal output.
pub struct Renderer {
    /// Stream the answer on stdout (the REPL) or keep stdout for the final answer (`-q`).
    answer_to_stdout: bool,
    /// stdout is a terminal.
    tty_out: bool,
    /// stderr is a terminal: a waiting indicator may run there.
    tty_err: bool,
    /// Colours wanted (`NO_COLOR` unset).
    color: bool,
    /// The answer as rendered markdown (stdout is a terminal and the answer goes there).
    live: Option<Live>,
    /// Plain output: the answer's last line has no line end yet.
    open_line: bool,
    in_reasoning: bool,
    /// Reasoning not yet shown: on a terminal it is shown a line at a time.
    reasoning_line: String,
    show_reasoning: bool,
    waiting: Option<Waiting>,
    /// Text of the current answer was streamed to stdout (shown, so not repeated when cut).
    streamed: bool,
    /// Approvals being asked: when, and for which tool call.
    asking: HashMap<u64, (Instant, String)>,
    /// Time each tool call spent waiting for the user, left out of the duration shown.
    waited: HashMap<String, Duration>,
    /// The workspace, to show changed files by their paths inside it.
    workspace: Option<std::path::PathBuf>,
    /// Usage of the last model call (how full its context was).
    pub last_call: Option<talaria_protocol::Usage>,
    /// Tool calls that finished in this turn (kept, with their results, if it is cut short).
    turn_calls: usize,
    /// Tool calls a remembered approval let through, with the words saying which.
    allowed_by: HashMap<String, String>,
    /// Tool calls running now: their ids, names, and when they started.
    running: Vec<(String, String, Instant)>,
    /// What each running call's command printed so far (its last [`OUTPUT_KEPT`] bytes).
    outputs: HashMap<String, String>,
    /// Command outputs shown folded, whole, with the numbers `/expand` takes (the last
    /// [`FOLDED_KEPT`] of them).
    folded: std::collections::VecDeque<(usize, String)>,
    /// Outputs folded so far in this session.
    folds: usize,
}

/// Bytes of a running command's output the renderer keeps, for what it shows if the call is
/// stopped.
const OUTPUT_KEPT: usize = 8 * 1024;
/// Lines of a running command's output shown under the indicator.
const RUNNING_LINES: usize = 3;
/// Folded outputs kept for `/expand`.
const FOLDED_KEPT: usize = 50;

impl Renderer {
    pub fn new(answer_to_stdout: bool) -> Self {
        let color = crate::ui::color_wanted();
        let tty_out = std::io::stdout().is_terminal();
        Self {
            answer_to_stdout,
            tty_out,
            tty_err: std::io::stderr().is_terminal(),
            color,
            live: (answer_to_stdout && tty_out).then(|| Live::new(color)),
            open_line: false,
            in_reasoning: false,
            reasoning_line: String::new(),
            show_reasoning: true,
            waiting: None,
            streamed: false,
            asking: HashMap::new(),
            waited: HashMap::new(),
            workspace: None,
            last_call: None,
            turn_calls: 0,
            allowed_by: HashMap::new(),
            running: Vec::new(),
            outputs: HashMap::new(),
            folded: std::collections::VecDeque::new(),
            folds: 0,
        }
    }

    /// Show the model's reasoning as it streams (`[terminal] show_reasoning`), or not.
    pub fn with_reasoning(mut self, show: bool) -> Self {
        self.show_reasoning = show;
        self
    }

    /// Show changed files relative to `dir`.
    pub fn with_workspace(mut self, dir: std::path::PathBuf) -> Self {
        self.workspace = Some(dir);
        self
    }

    fn stop_waiting(&mut self) {
        if let Some(mut waiting) = self.waiting.take() {
            waiting.stop();
        }
    }

    /// Whether progress goes to a terminal (a person reads it): marks and previews rather
    /// than plain words.
    pub fn fancy_progress(&self) -> bool {
        if self.answer_to_stdout { self.tty_out } else { self.tty_err }
    }

    /// How long call `call_id` took, `duration_ms` in all, less the time it waited for the
    /// user to answer an approval.
    fn working_ms(&mut self, call_id: &str, duration_ms: u64) -> u64 {
        let waited = self.waited.remove(call_id).unwrap_or_default();
        duration_ms.saturating_sub(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
    }

    /// Print a progress line (stdout in the REPL, stderr for `-q`); styles are dropped where
    /// colour is off.
    pub fn progress(&mut self, text: &str) {
        self.stop_waiting();
        self.end_text();
        self.say(text, !self.answer_to_stdout);
    }

    pub fn handle(&mut self, event: &Event) {
        match event {
            Event::RequestSent { model } => {
                self.stop_waiting();
                if self.tty_err {
                    self.waiting = Some(Waiting::start(model.clone(), self.color));
                }
                return;
            }
            // Usage arrives after the answer; notices (retries) leave the indicator running.
            Event::Usage { usage, .. } => {
                self.last_call = Some(*usage);
                return;
            }
            Event::Notice { level, text } if self.waiting.is_some() => {
                let fancy = self.tty_err;
                if let Some(waiting) = &self.waiting {
                    waiting.interrupt(|| notice(self, *level, text, fancy));
                }
                return;
            }
            // A running command's output goes under the indicator, which keeps running.
            Event::ToolOutput { call_id, text } => {
                self.tool_output(call_id, text);
                return;
            }
            _ => self.stop_waiting(),
        }
        match event {
            Event::TextDelta { text } => self.text(text),
            Event::ReasoningDelta { text } => self.reasoning(text),
            Event::MessageEnd => self.end_text(),
            Event::ToolStarted(t) => {
                let preview = talaria_runtime::visible(&t.preview, usize::MAX);
                let line = if self.fancy_progress() {
                    format!("{} {}", "┊ ⚙".dimmed(), preview.dimmed())
                } else {
                    format!("tool: {preview}")
                };
                self.progress(&line);
                self.running.push((t.call_id.clone(), t.name.clone(), Instant::now()));
                self.show_running();
            }
            // Running again after an approval was asked.
            Event::ToolRunning { .. } => self.show_running(),
            Event::ToolFinished(t) => {
                self.turn_calls += 1;
                self.running.retain(|(id, _, _)| *id != t.call_id);
                let printed = self.outputs.remove(&t.call_id).unwrap_or_default();
                let outcome = t.outcome();
                let took = self.working_ms(&t.call_id, t.duration_ms);
                let mut line = finished_line(&t.name, took, &outcome, self.fancy_progress());
                if let Some(by) = self.allowed_by.remove(&t.call_id) {
                    line.push_str(&format!(" {}", format!("· {by}").dimmed()));
                }
                self.progress(&line);
                if self.fancy_progress() {
                    match &outcome {
                        CallOutcome::Command { output, .. } => self.show_output(output),
                        // Stopped: what its command had printed by then.
                        CallOutcome::Failed(_) if outcome.interrupted() => self.show_output(&printed),
                        _ => {}
                    }
                    for change in &t.changes {
                        let shown = self.shown_path(&change.path);
                        for line in diff_lines(&shown, change, DIFF_LINES) {
                            self.progress(&line);
                        }
                    }
                }
                self.show_running();
            }
            Event::Notice { level, text } => {
                self.end_text();
                notice(self, *level, text, self.fancy_progress());
            }
            // The front door words the answers to its own requests, and the questions; the time
            // an answer took is the user's, not the tool's.
            Event::ApprovalNeeded(a) => {
                self.asking.insert(a.id, (Instant::now(), a.call_id.clone()));
            }
            Event::ApprovalRemembered { call_id, key, decision } => {
                let key = talaria_runtime::visible(key, 200);
                let by = match decision {
                    Decision::Session => format!("allowed by this session's {key}"),
                    _ => format!("allowed by an always rule: {key}"),
                };
                if call_id.is_empty() {
                    self.progress(&format!("┊ {by}").dimmed().to_string());
                } else {
                    self.allowed_by.insert(call_id.clone(), by);
                }
            }
            Event::ApprovalResolved { id, .. } => {
                if let Some((asked, call)) = self.asking.remove(id) {
                    *self.waited.entry(call).or_default() += asked.elapsed();
                }
            }
            Event::Usage { .. }
            | Event::ToolOutput { .. }
            | Event::ClarifyNeeded(_)
            | Event::RequestSent { .. }
            | Event::SessionStarted(_)
            | Event::TurnStarted { .. }
            | Event::Undone { .. }
            | Event::RolledBack { .. }
            | Event::Compacted { .. }
            | Event::ModelChanged { .. }
            | Event::TitleChanged { .. }
            | Event::YoloChanged { .. }
            | Event::Steered { .. }
            | Event::ContextReport { .. }
            | Event::Error { .. }
            | Event::ShutdownComplete => {}
            Event::TurnEnd(end) => {
                self.end_text();
                self.turn_end(end);
                self.streamed = false;
                self.turn_calls = 0;
                self.allowed_by.clear();
                self.running.clear();
                self.outputs.clear();
            }
        }
    }

    /// The indicator for the tool calls running now, with the last lines the latest printed
    /// (on a terminal only).
    fn show_running(&mut self) {
        self.stop_waiting();
        let Some(since) = self.running.iter().map(|(_, _, at)| *at).min() else { return };
        if !self.tty_err {
            return;
        }
        let what = match self.running.as_slice() {
            [(_, name, _)] => format!("{} running…", talaria_runtime::visible(name, 60)),
            many => format!("{} tools running…", many.len()),
        };
        self.waiting = Some(Waiting::since(what, since, self.color));
        if let Some(printed) = self.running.iter().rev().find_map(|(id, _, _)| self.outputs.get(id)) {
            let last = last_lines(printed, RUNNING_LINES);
            crate::screen::update(|f| f.output = last);
        }
    }

    /// Call `call_id`'s command printed `text`: kept, and its last lines shown under the
    /// indicator while the REPL's footer is up.
    fn tool_output(&mut self, call_id: &str, text: &str) {
        let kept = self.outputs.entry(call_id.to_string()).or_default();
        talaria_protocol::keep_output(kept, text, OUTPUT_KEPT);
        if self.waiting.is_some() {
            let last = last_lines(kept, RUNNING_LINES);
            crate::screen::update(|f| f.output = last);
        }
    }

    /// The last lines of a command's output under its progress line; when there are more, the
    /// whole output is kept for `/expand`, whose number the fold line names.
    fn show_output(&mut self, output: &str) {
        let (lines, skipped) = output_preview(output);
        if skipped > 0 {
            self.folds += 1;
            self.folded.push_back((self.folds, output.to_string()));
            if self.folded.len() > FOLDED_KEPT {
                self.folded.pop_front();
            }
            let more = format!("… {} · /expand {}", crate::ui::count(skipped, "more line", "more lines"), self.folds);
            self.progress(&format!("┊   {}", more.dimmed()));
        }
        for line in lines {
            self.progress(&format!("┊   {}", line.dimmed()));
        }
    }

    /// Print folded output number `n` whole.
    ///
    /// # Errors
    /// When no output of that number is kept, saying which are.
    pub fn expand(&mut self, n: usize) -> Result<(), String> {
        let Some((_, output)) = self.folded.iter().find(|(k, _)| *k == n) else {
            return Err(match (self.folded.front(), self.folded.back()) {
                (Some((first, _)), Some((last, _))) => {
                    format!("there is no folded output {n}; the ones kept are {first} to {last}")
                }
                _ => format!("there is no folded output {n}: no command's output was folded in this session"),
            });
        };
        let output = output.clone();
        self.progress(&format!("┊ {}", format!("output {n}, whole:").dimmed()));
        for line in output.lines() {
            self.progress(&format!("┊   {}", talaria_runtime::visible(&line.replace('\t', "    "), usize::MAX)));
        }
        Ok(())
    }

    /// `path` as the user knows it: inside the workspace, relative to it.
    fn shown_path(&self, path: &str) -> String {
        let p = std::path::Path::new(path);
        match self.workspace.as_deref().and_then(|w| p.strip_prefix(w).ok()) {
            Some(rel) => rel.display().to_string(),
            None => path.to_string(),
        }
    }

    fn turn_end(&mut self, end: &TurnEnd) {
        match &end.outcome {
            Outcome::Completed | Outcome::BudgetExhausted | Outcome::Truncated => {}
            Outcome::Interrupted => {
                self.show_cut(&end.partial);
                self.progress_warn(&interrupted_report(self.turn_calls, !end.partial.trim().is_empty()));
            }
            Outcome::Failed(e) => {
                self.progress_error(e);
                self.show_cut(&end.partial);
            }
            Outcome::Refused(why) => self.progress_error(why),
        }
    }

    /// Mark `partial`, a reply cut before its end, as not kept: after it when it was streamed
    /// here, else shown whole, quoted.
    fn show_cut(&self, partial: &str) {
        if partial.trim().is_empty() {
            return;
        }
        if self.answer_to_stdout && self.streamed {
            self.say(&format!("{}", "  [cut: the reply above stops here, and was not kept]".yellow()), false);
        } else {
            let head = "what arrived before the reply was cut off (not kept):";
            self.say(&head.yellow().to_string(), true);
            for line in partial.trim_end().lines() {
                self.say(&format!("  | {}", talaria_runtime::visible(line, 10_000)), true);
            }
            self.say("  [cut]", true);
        }
    }

    fn progress_warn(&self, text: &str) {
        self.say(&format!("{} {}", "warning:".yellow().bold(), crate::ui::fit_err(text, 9)), true);
    }

    /// An error line on stderr.
    pub fn error(&self, text: &str) {
        self.progress_error(text);
    }

    fn progress_error(&self, text: &str) {
        self.say(&format!("{} {}", "error:".red().bold(), crate::ui::fit_err(text, 7)), true);
    }

    /// Write a line to stdout (or stderr), styled where that stream is a terminal and colour is
    /// wanted, above the REPL's footer when it is up.
    pub fn say(&self, text: &str, stderr: bool) {
        let styled = self.color && if stderr { self.tty_err } else { self.tty_out };
        let mut line = if styled { text.to_string() } else { anstream::adapter::strip_str(text).to_string() };
        line.push('\n');
        crate::screen::write(line.as_bytes(), stderr);
    }

    fn reasoning(&mut self, text: &str) {
        if !self.answer_to_stdout || !self.show_reasoning {
            return;
        }
        if !self.in_reasoning {
            self.end_text();
            self.in_reasoning = true;
            self.reasoning_line = "thinking: ".to_string();
        }
        if !self.tty_out {
            // Piped: as it arrives, after the label the first piece takes out.
            put!(std::io::stdout(), "{}{text}", std::mem::take(&mut self.reasoning_line));
            let _ = std::io::stdout().flush();
            return;
        }
        // On a terminal, whole lines: the footer sits below them.
        self.reasoning_line.push_str(text);
        while let Some(nl) = self.reasoning_line.find('\n') {
            let line: String = self.reasoning_line.drain(..=nl).collect();
            self.reasoning_out(line.trim_end_matches('\n'));
        }
    }

    /// One line of reasoning, dim and italic.
    fn reasoning_out(&self, line: &str) {
        let line = talaria_runtime::visible(line, usize::MAX);
        self.say(&line.dimmed().italic().to_string(), false);
    }

    /// Close the reasoning shown so far, if any.
    fn end_reasoning(&mut self) {
        if !self.in_reasoning {
            return;
        }
        self.in_reasoning = false;
        let rest = std::mem::take(&mut self.reasoning_line);
        if self.tty_out {
            if !rest.trim().is_empty() {
                self.reasoning_out(&rest);
            }
        } else {
            putln!(std::io::stdout());
        }
    }

    fn text(&mut self, text: &str) {
        if !self.answer_to_stdout {
            return;
        }
        self.streamed = true;
        self.end_reasoning();
        match &mut self.live {
            Some(live) => {
                draw(live, |live, out, size| live.push(text, out, size));
            }
            None => {
                put!(std::io::stdout(), "{text}");
                let _ = std::io::stdout().flush();
                if let Some(last) = text.chars().last() {
                    self.open_line = last != '\n';
                }
            }
        }
    }

    /// How long until streamed text not drawn yet is due (then call [`Renderer::tick`]).
    pub fn due_in(&self) -> Option<Duration> {
        self.live.as_ref().and_then(Live::due_in)
    }

    /// Draw streamed text that is due.
    pub fn tick(&mut self) {
        if let Some(live) = &mut self.live {
            draw(live, Live::tick);
        }
    }

    /// The terminal was resized: the answer still arriving and the footer are drawn again at its
    /// new size (what is above them stays as it was drawn).
    pub fn resized(&mut self) {
        let redrawn = self.live.as_mut().is_some_and(|live| draw(live, Live::redraw));
        if !redrawn {
            crate::screen::redraw();
        }
    }

    /// Finish a streamed message: render what is left and close the open line.
    pub fn end_text(&mut self) {
        self.end_reasoning();
        if !self.answer_to_stdout || !self.streamed {
            return;
        }
        match &mut self.live {
            Some(live) => {
                draw(live, Live::finish);
            }
            None if self.open_line => {
                putln!(std::io::stdout());
                self.open_line = false;
            }
            None => {}
        }
    }
}

/// Let `step` update the live answer at the terminal's size, and put what it wrote on the screen
/// (a step with nothing to draw leaves the screen, and the REPL's footer, untouched).
fn draw(live: &mut Live, step: impl FnOnce(&mut Live, &mut Vec<u8>, (usize, usize))) -> bool {
    let mut out = Vec::new();
    step(live, &mut out, crate::screen::terminal_size());
    if out.is_empty() {
        return false;
    }
    crate::screen::write(&out, false);
    true
}

/// A notice on stderr; `fancy` (a terminal) marks info notices with the progress bar.
fn notice(out: &Renderer, level: NoticeLevel, text: &str, fancy: bool) {
    let text = talaria_runtime::shown::visible_lines(text);
    match (level, fancy) {
        (NoticeLevel::Warn, _) => out.say(&format!("{} {text}", "warning:".yellow().bold()), true),
        (NoticeLevel::Info, true) => out.say(&format!("┊ {text}").dimmed().to_string(), true),
        (NoticeLevel::Info, false) => out.say(&format!("note: {text}"), true),
    }
}

/// Lines of a diff shown for each changed file; the rest is counted.
const DIFF_LINES: usize = 40;

/// A unified diff of one file a call changed, coloured, at most `max` lines of it; file text
/// is shown with its control characters escaped.
fn diff_lines(shown: &str, change: &FileChange, max: usize) -> Vec<String> {
    let before = change.before.as_deref().unwrap_or_default();
    let after = change.after.as_deref().unwrap_or_default();
    let what = match (&change.before, &change.after) {
        (None, _) => "created",
        (_, None) => "deleted",
        _ => "edited",
    };
    let diff = similar::TextDiff::from_lines(before, after);
    let (mut added, mut removed) = (0, 0);
    for op in diff.ops() {
        for change in diff.iter_changes(op) {
            match change.tag() {
                similar::ChangeTag::Insert => added += 1,
                similar::ChangeTag::Delete => removed += 1,
                similar::ChangeTag::Equal => {}
            }
        }
    }
    let shown = talaria_runtime::visible(shown, 200);
    let mut out =
        vec![format!("┊ {} {} {} {}", what, shown.bold(), format!("+{added}").green(), format!("-{removed}").red())];
    let mut body = Vec::new();
    for hunk in diff.unified_diff().context_radius(2).iter_hunks() {
        body.push(format!("{}", hunk.header().to_string().trim_end().cyan()));
        for change in hunk.iter_changes() {
            let text =
                talaria_runtime::visible(&change.value().trim_end_matches(['\n', '\r']).replace('\t', "    "), 300);
            body.push(match change.tag() {
                similar::ChangeTag::Insert => format!("{}", format!("+{text}").green()),
                similar::ChangeTag::Delete => format!("{}", format!("-{text}").red()),
                similar::ChangeTag::Equal => format!("{}", format!(" {text}").dimmed()),
            });
        }
    }
    let more = body.len().saturating_sub(max);
    body.truncate(max);
    out.extend(body.into_iter().map(|l| format!("┊   {l}")));
    if more > 0 {
        out.push(format!("┊   {}", format!("… {more} more diff lines").dimmed()));
    }
    out
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
        CallOutcome::Failed(_) if outcome.interrupted() => "interrupted".to_string(),
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
/// controls a command could use to repaint the screen escaped (`talaria_runtime::visible`);
/// and how many lines are not shown.
fn output_preview(output: &str) -> (Vec<String>, usize) {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let skipped = lines.len().saturating_sub(OUTPUT_PREVIEW_LINES);
    let shown = lines[skipped..]
        .iter()
        .map(|l| talaria_runtime::visible(&l.replace('\t', "    "), OUTPUT_PREVIEW_CHARS))
        .collect();
    (shown, skipped)
}

/// The last `n` non-blank lines of `text` as printed so far (the last may be unfinished).
fn last_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| (*l).to_string()).collect()
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
            key: String::new(),
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
    fn a_folded_output_is_numbered_and_expands_whole() {
        let mut r = Renderer::new(true);
        assert!(r.expand(1).expect_err("none folded").contains("no command's output was folded"));
        r.show_output("1\n2\n3\n4\n5\n");
        r.show_output("short\n");
        assert_eq!(r.folded.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1], "only a folded output is kept");
        assert!(r.expand(1).is_ok());
        assert_eq!(r.expand(2).expect_err("not kept"), "there is no folded output 2; the ones kept are 1 to 1");
    }

    #[test]
    fn the_output_preview_keeps_the_last_lines_and_no_escape_sequences() {
        let out = "one\n\ntwo\nthree\n\u{1b}[2Jfour\tfive\n";
        assert_eq!(output_preview(out), (vec!["two".into(), "three".into(), "\\x1b[2Jfour    five".into()], 1));
        assert_eq!(output_preview(""), (Vec::new(), 0));
        assert_eq!(output_preview("evil\u{202e}txt.exe").0, ["evil\\u{202e}txt.exe"], "bidi controls too");
    }
}
