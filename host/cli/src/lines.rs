//! Where the REPL's lines come from: at a terminal, a line editor with history, slash-command
//! and `@file` completion, and bracketed paste; otherwise plain lines from stdin.

use std::io::{BufRead as _, IsTerminal as _};

use reedline::{
    Color, ColumnarMenu, Completer, DefaultHinter, EditCommand, EditMode, Emacs, FileBackedHistory, KeyCode,
    KeyModifiers, MenuBuilder, Prompt, PromptEditMode, PromptHistorySearch, Reedline, ReedlineEvent, ReedlineMenu,
    ReedlineRawEvent, Signal, Span, Suggestion, default_emacs_keybindings,
};

use crate::slash::COMMANDS;
use crate::{Ctx, ui};

/// Completes slash commands at the start of the line, and `@path` mentions of workspace files
/// anywhere in it.
pub(crate) struct SlashCompleter {
    workspace: std::path::PathBuf,
}

impl Completer for SlashCompleter {
    fn complete(&mut self, line: &str, pos: usize) -> reedline::CompletionResult {
        let line = &line[..pos.min(line.len())];
        let mut out = Vec::new();
        let word_start = line.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        if let Some(typed) = line[word_start..].strip_prefix('@') {
            for value in crate::mentions::complete(&self.workspace, typed) {
                let dir = value.ends_with('/');
                out.push(Suggestion {
                    value,
                    span: Span::new(word_start, pos),
                    append_whitespace: !dir,
                    ..Suggestion::default()
                });
            }
            return reedline::CompletionResult::fresh(out);
        }
        if let Some(typed) = line.strip_prefix('/')
            && !typed.contains(char::is_whitespace)
        {
            for c in COMMANDS {
                if c.name.starts_with(typed) {
                    out.push(Suggestion {
                        value: format!("/{}", c.name),
                        description: Some(c.help.to_string()),
                        span: Span::new(0, pos),
                        append_whitespace: !c.args.is_empty(),
                        ..Suggestion::default()
                    });
                }
            }
        }
        reedline::CompletionResult::fresh(out)
    }
}

struct ChatPrompt;

impl Prompt for ChatPrompt {
    fn render_prompt_left(&self) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn render_prompt_right(&self) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn render_prompt_indicator(&self, _: PromptEditMode) -> std::borrow::Cow<'_, str> {
        "› ".into()
    }
    fn render_prompt_multiline_indicator(&self) -> std::borrow::Cow<'_, str> {
        "· ".into()
    }
    fn render_prompt_history_search_indicator(&self, search: PromptHistorySearch) -> std::borrow::Cow<'_, str> {
        format!("(search: {}) ", search.term).into()
    }
}

/// A paste of more lines than this is shown as a placeholder (`[pasted 50 lines #1]`) and sent
/// whole.
const PASTE_SHOWN_LINES: usize = 10;

/// Pastes held back from the line being edited, by their placeholder's number.
type Held = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// The editing keys, with long pastes put in the line as placeholders ([`PASTE_SHOWN_LINES`]).
struct Pasting {
    keys: Emacs,
    held: Held,
}

impl EditMode for Pasting {
    fn parse_event(&mut self, event: ReedlineRawEvent) -> ReedlineEvent {
        let event: crossterm::event::Event = event.into();
        if let crossterm::event::Event::Paste(body) = &event {
            let body = body.replace("\r\n", "\n").replace('\r', "\n");
            let lines = body.trim_end_matches('\n').lines().count();
            if lines > PASTE_SHOWN_LINES {
                let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                held.push(body);
                return ReedlineEvent::Edit(vec![EditCommand::InsertString(placeholder(lines, held.len()))]);
            }
        }
        match ReedlineRawEvent::try_from(event) {
            Ok(raw) => self.keys.parse_event(raw),
            Err(()) => ReedlineEvent::None,
        }
    }

    fn edit_mode(&self) -> PromptEditMode {
        self.keys.edit_mode()
    }
}

/// What stands in the line for held paste number `n` of `lines` lines.
fn placeholder(lines: usize, n: usize) -> String {
    format!("[pasted {lines} lines #{n}]")
}

/// `line` with the placeholders of `held` pastes put back as the text pasted.
fn unfold(line: &str, held: &[String]) -> String {
    let mut line = line.to_string();
    for (i, body) in held.iter().enumerate() {
        let lines = body.trim_end_matches('\n').lines().count();
        line = line.replacen(&placeholder(lines, i + 1), body.trim_end_matches('\n'), 1);
    }
    line
}

/// Where lines come from: the line editor on a terminal, plain stdin otherwise.
pub(crate) enum Lines {
    Editor(Option<Box<Reedline>>, Held),
    Plain,
}

pub(crate) enum Input {
    Line(String),
    /// Ctrl-C at the prompt: clear and ask again.
    Cancelled,
    Eof,
    /// The terminal is gone (a read failed with EIO).
    HungUp,
}

impl Lines {
    pub(crate) fn new(ctx: &Ctx) -> Self {
        if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
            return Self::Plain;
        }
        let mut keys = default_emacs_keybindings();
        // Ctrl-J puts a new line in the message, as Alt-Enter does (Enter sends it).
        keys.add_binding(
            KeyModifiers::CONTROL,
            KeyCode::Char('j'),
            ReedlineEvent::Edit(vec![EditCommand::InsertNewline]),
        );
        keys.add_binding(
            KeyModifiers::NONE,
            KeyCode::Tab,
            ReedlineEvent::UntilFound(vec![ReedlineEvent::Menu("completion_menu".into()), ReedlineEvent::MenuNext]),
        );
        let held = Held::default();
        let mut editor = Reedline::create()
            .with_completer(Box::new(SlashCompleter { workspace: ctx.workspace.clone() }))
            .with_menu(ReedlineMenu::EngineCompleter(Box::new(ColumnarMenu::default().with_name("completion_menu"))))
            // A suggestion from history is drawn dimmer than what is typed (reedline's own
            // light grey is brighter than most terminals' text).
            .with_hinter(Box::new(DefaultHinter::default().with_style(Color::DarkGray.normal())))
            // One match completes at once; several complete as far as they agree.
            .with_quick_completions(true)
            .with_partial_completions(true)
            .with_edit_mode(Box::new(Pasting { keys: Emacs::new(keys), held: held.clone() }))
            // A paste arrives whole, newlines and all, as one message to send with Enter.
            .use_bracketed_paste(true)
            .with_ansi_colors(ui::color_wanted());
        match FileBackedHistory::with_file(1_000, ctx.home.join("chat_history")) {
            Ok(h) => editor = editor.with_history(Box::new(h)),
            Err(e) => ui::warn(&format!("line history is off: {e}")),
        }
        Self::Editor(Some(Box::new(editor)), held)
    }

    /// The next line; an editor starts with `prefill` typed.
    pub(crate) async fn next(&mut self, prefill: String) -> Input {
        match self {
            Self::Plain => {
                let read = tokio::task::spawn_blocking(|| {
                    let mut line = String::new();
                    std::io::stdin().lock().read_line(&mut line).map(|n| (n, line))
                })
                .await;
                match read {
                    Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => Input::HungUp,
                    Ok(Ok((0, _))) | Ok(Err(_)) | Err(_) => Input::Eof,
                    Ok(Ok((_, line))) => Input::Line(line.trim_end_matches(['\n', '\r']).to_string()),
                }
            }
            Self::Editor(slot, held) => {
                let Some(mut editor) = slot.take() else { return Input::Eof };
                if !prefill.is_empty() {
                    editor.run_edit_commands(&[EditCommand::InsertString(prefill)]);
                }
                let joined = tokio::task::spawn_blocking(move || {
                    let signal = editor.read_line(&ChatPrompt);
                    (editor, signal)
                })
                .await;
                let Ok((editor, signal)) = joined else { return Input::Eof };
                *slot = Some(editor);
                let pasted = std::mem::take(&mut *held.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
                match signal {
                    Ok(Signal::Success(line)) => Input::Line(unfold(&line, &pasted)),
                    Ok(Signal::CtrlC) => Input::Cancelled,
                    Err(e) if e.raw_os_error() == Some(libc::EIO) => Input::HungUp,
                    Ok(Signal::CtrlD) | Err(_) => Input::Eof,
                    Ok(_) => Input::Cancelled,
                }
            }
        }
    }

    pub(crate) fn interactive(&self) -> bool {
        matches!(self, Self::Editor(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_paste_is_a_placeholder_that_is_sent_whole() {
        let held = Held::default();
        let mut mode = Pasting { keys: Emacs::new(default_emacs_keybindings()), held: held.clone() };
        let paste = |body: &str| ReedlineRawEvent::try_from(crossterm::event::Event::Paste(body.into())).expect("raw");
        let long: String = (1..=50).map(|i| format!("line {i}\r\n")).collect();
        let ReedlineEvent::Edit(edits) = mode.parse_event(paste(&long)) else { panic!("an edit") };
        assert!(matches!(&edits[..], [EditCommand::InsertString(s)] if s == "[pasted 50 lines #1]"), "{edits:?}");
        let ReedlineEvent::Edit(edits) = mode.parse_event(paste("a\nb")) else { panic!("an edit") };
        assert!(matches!(&edits[..], [EditCommand::InsertString(s)] if s == "a\nb"), "a short paste goes in as it is");
        let sent = unfold("see [pasted 50 lines #1] please", &held.lock().expect("lock"));
        assert!(sent.starts_with("see line 1\nline 2\n") && sent.ends_with("line 50 please"), "{sent}");
    }

    #[test]
    fn slash_commands_complete_from_the_registry() {
        let got = SlashCompleter { workspace: std::env::temp_dir() }.complete("/re", 3);
        let names: Vec<String> = match got {
            reedline::CompletionResult::Fresh { suggestions, .. } => {
                suggestions.iter().map(|s| s.value.clone()).collect()
            }
            _ => Vec::new(),
        };
        assert_eq!(names, ["/resume", "/retry"]);
    }
}
