//! Where the REPL's lines come from: at a terminal, a line editor with history, slash-command
//! and `@file` completion, and bracketed paste; otherwise plain lines from stdin.

use std::io::{BufRead as _, IsTerminal as _};

use reedline::{
    ColumnarMenu, Completer, DefaultHinter, EditCommand, Emacs, FileBackedHistory, KeyCode, KeyModifiers, MenuBuilder,
    Prompt, PromptEditMode, PromptHistorySearch, Reedline, ReedlineEvent, ReedlineMenu, Signal, Span, Suggestion,
    default_emacs_keybindings,
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

/// Where lines come from: the line editor on a terminal, plain stdin otherwise.
pub(crate) enum Lines {
    Editor(Option<Box<Reedline>>),
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
        let mut editor = Reedline::create()
            .with_completer(Box::new(SlashCompleter { workspace: ctx.workspace.clone() }))
            .with_menu(ReedlineMenu::EngineCompleter(Box::new(ColumnarMenu::default().with_name("completion_menu"))))
            .with_hinter(Box::new(DefaultHinter::default()))
            // One match completes at once; several complete as far as they agree.
            .with_quick_completions(true)
            .with_partial_completions(true)
            .with_edit_mode(Box::new(Emacs::new(keys)))
            // A paste arrives whole, newlines and all, as one message to send with Enter.
            .use_bracketed_paste(true)
            .with_ansi_colors(ui::color_wanted());
        match FileBackedHistory::with_file(1_000, ctx.home.join("chat_history")) {
            Ok(h) => editor = editor.with_history(Box::new(h)),
            Err(e) => ui::warn(&format!("line history is off: {e}")),
        }
        Self::Editor(Some(Box::new(editor)))
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
            Self::Editor(slot) => {
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
                match signal {
                    Ok(Signal::Success(line)) => Input::Line(line),
                    Ok(Signal::CtrlC) => Input::Cancelled,
                    Err(e) if e.raw_os_error() == Some(libc::EIO) => Input::HungUp,
                    Ok(Signal::CtrlD) | Err(_) => Input::Eof,
                    Ok(_) => Input::Cancelled,
                }
            }
        }
    }

    pub(crate) fn interactive(&self) -> bool {
        matches!(self, Self::Editor(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
