//! What a line typed while a turn runs means: an answer to the approval or question waiting, a
//! command usable mid-turn (`/stop`, `/yolo`), or a message for the `[terminal] busy_input`
//! policy. The keys themselves are read by [`crate::busy`]. And how an approval or a question
//! is put to the person ([`approval_prompt`], [`question_prompt`]).

use owo_colors::OwoColorize as _;
use talaria_core::config::BusyInput as BusyPolicy;
use talaria_protocol::{ApprovalKind, ApprovalNeeded, ClarifyNeeded, Decision, Op};
use talaria_runtime::shown::{needs_escaping, visible};

use crate::render::Renderer;
use crate::slash::{lookup, parse_slash, yolo_state};
use crate::ui;

#[derive(Default)]
pub(crate) enum Waiting {
    #[default]
    None,
    Approval(u64),
    Question(u64, Vec<String>),
}

/// Messages typed while a turn runs, and what becomes of them. Enter hands a line to the
/// `[terminal] busy_input` policy: `interrupt` (the default) stops the turn and sends it in its
/// place, `queue` sends it after the turn, `steer` tells the running turn (the model reads it
/// with the next tool result; if none comes, it is sent after the turn). `/queue TEXT` and
/// `/steer TEXT` choose for one message. Whatever was queued is not sent when the user stops the
/// turn (Ctrl-C, /stop): it goes back into the input line.
#[derive(Default)]
pub(crate) struct Busy {
    pub(crate) waiting: Waiting,
    /// To send after the turn, in order.
    pub(crate) queued: Vec<String>,
    /// Sent to the running turn, not yet delivered.
    pub(crate) steering: Vec<String>,
    /// The turn is being stopped to send this.
    pub(crate) interrupt_with: Option<String>,
}

impl Busy {
    /// A line typed with no question waiting.
    pub(crate) fn typed_line(
        &mut self,
        line: String,
        policy: BusyPolicy,
        r: &mut Renderer,
        submit: &talaria_core::Submitter,
        yolo: &std::cell::Cell<bool>,
    ) {
        let text = line.trim();
        if text.is_empty() {
            return;
        }
        let (policy, text) = match parse_slash(text) {
            Some(("stop", _)) => {
                submit.submit(Op::Interrupt);
                return r.progress("stopping…");
            }
            Some(("yolo", _)) => {
                yolo.set(!yolo.get());
                submit.submit(Op::SetYolo { on: yolo.get() });
                return r.progress(&yolo_state(yolo.get()));
            }
            Some(("expand", n)) => {
                let shown = n.trim().parse().map_err(|_| "usage: /expand N".to_string()).and_then(|n| r.expand(n));
                if let Err(e) = shown {
                    r.progress(&e);
                }
                return;
            }
            Some(("queue", rest)) if !rest.is_empty() => (BusyPolicy::Queue, rest.to_string()),
            Some(("steer", rest)) if !rest.is_empty() => (BusyPolicy::Steer, rest.to_string()),
            Some((name, _)) if lookup(name).is_some_and(|c| !c.while_busy) || matches!(name, "queue" | "steer") => {
                r.progress(&format!("/{name} waits until the reply is done (or /stop it)"));
                return self.queued.push(text.to_string());
            }
            Some(_) => return self.queued.push(text.to_string()),
            None => (policy, text.to_string()),
        };
        match policy {
            BusyPolicy::Queue => self.queued.push(text),
            BusyPolicy::Steer => {
                submit.submit(Op::Steer { text: text.clone() });
                self.steering.push(text);
            }
            BusyPolicy::Interrupt => {
                if let Some(earlier) = self.interrupt_with.replace(text) {
                    self.queued.insert(0, earlier);
                } else {
                    submit.submit(Op::Interrupt);
                }
            }
        }
    }

    /// The footer's lines for what waits.
    pub(crate) fn pending(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = &self.interrupt_with {
            out.push(format!("↳ stopping the reply to send: {}", ui::first_line(t, 70)));
        }
        out.extend(self.steering.iter().map(|t| format!("↳ for the model's next step: {}", ui::first_line(t, 70))));
        out.extend(self.queued.iter().map(|t| format!("↳ queued: {}", ui::first_line(t, 70))));
        out
    }
}

/// The footer's hint under a running turn.
pub(crate) fn busy_hint(policy: BusyPolicy) -> &'static str {
    match policy {
        BusyPolicy::Interrupt => {
            "type a message: Enter stops this reply and sends it (/queue, /steer) · Esc or Ctrl-C stops"
        }
        BusyPolicy::Queue => "type a message: Enter queues it for after this reply (/steer) · Esc or Ctrl-C stops",
        BusyPolicy::Steer => "type a message: Enter tells the model now (/queue) · Esc or Ctrl-C stops",
    }
}

/// An approval's answer: a key or a word; anything else (Enter too) denies.
pub(crate) fn decision(answer: &str) -> Decision {
    match answer.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => Decision::Once,
        "s" | "session" => Decision::Session,
        "a" | "always" => Decision::Always,
        _ => Decision::Deny,
    }
}

pub(crate) fn describe(d: Decision) -> &'static str {
    match d {
        Decision::Once => "allowed once",
        Decision::Session => "allowed for this session",
        Decision::Always => "allowed from now on (saved in config.toml)",
        Decision::Deny => "denied",
    }
}

/// Most characters of a plugin's name, a host or a reason in a prompt.
const MAX_NAME_CHARS: usize = 200;

/// The question asked before a dangerous command, a connection, a job or a skill.
///
/// What the model or a plugin proposed is shown on lines of its own below the question, every
/// control character escaped (an escape code in a command cannot erase or restyle the line
/// that names it), with its real size; the question and its keys are the host's own words.
pub(crate) fn approval_prompt(a: &ApprovalNeeded) -> String {
    let plugin = visible(&a.plugin, MAX_NAME_CHARS);
    let reason = visible(&a.reason, MAX_NAME_CHARS);
    let (question, shown) = match a.kind {
        ApprovalKind::Command => (format!("{plugin} wants to run this command ({reason}):"), Some(&a.command)),
        ApprovalKind::Network => {
            (format!("plugin '{plugin}' wants to connect to {} ({reason}).", visible(&a.command, MAX_NAME_CHARS)), None)
        }
        ApprovalKind::Schedule => (format!("the agent wants to schedule this job ({reason}):"), Some(&a.command)),
        ApprovalKind::McpTool => {
            (format!("{plugin} wants to call `{}` ({reason}).", visible(&a.command, MAX_NAME_CHARS)), None)
        }
        ApprovalKind::Skill => {
            (format!("the agent wants to {} ({reason}).", visible(&a.command, MAX_NAME_CHARS)), None)
        }
    };
    let mut text = format!("{} {question}", "⚠".yellow());
    if let Some(body) = shown {
        text.push_str(&proposed(body));
    }
    if let Some((session, always)) = scope(a) {
        text.push_str(&format!("\n  {} {session}", "[s]".bold()));
        text.push_str(&format!("\n  {} {always}", "[a]".bold()));
    }
    text.push_str(&format!(
        "\n  Allow? {} once  {} this session  {} always  {} no   (Enter: no; no answer in {}s: no)",
        "[y]".bold(),
        "[s]".bold(),
        "[a]".bold(),
        "[n]".bold(),
        a.timeout_secs
    ));
    text
}

/// What `s` and `a` would allow from then on without asking, in words, when the answer is
/// remembered under a key: every command of the same kind, or every connection to the host.
fn scope(a: &ApprovalNeeded) -> Option<(String, String)> {
    if a.key.is_empty() {
        return None;
    }
    let key = visible(&a.key, MAX_NAME_CHARS);
    let what = match a.key.strip_prefix("net:") {
        Some(host) => format!("every connection to {}", visible(host, MAX_NAME_CHARS)),
        None => format!("every `{key}` command ({})", visible(&a.reason, MAX_NAME_CHARS)),
    };
    Some((
        format!("this session: {what}, without asking"),
        format!("always: the same in every session, saved in config.toml as `{key}`"),
    ))
}

/// A proposed command or job under its question: each line behind a bar, escaped, then its size
/// (and, when it held any, that control characters are shown as `\x..`).
fn proposed(body: &str) -> String {
    let mut text = String::new();
    let lines: Vec<&str> = body.split('\n').collect();
    for line in &lines {
        text.push_str(&format!("\n  {} {}", "│".dimmed(), visible(line, usize::MAX)));
    }
    let mut size = format!(
        "{}, {}",
        ui::count(lines.len(), "line", "lines"),
        ui::count(body.chars().count(), "character", "characters")
    );
    if needs_escaping(body, true) {
        size.push_str("; it holds control characters, shown escaped as \\x.. or \\u{..}");
    }
    text.push_str(&format!("\n  {}", format!("({size})").dimmed()));
    text
}

/// A question the model asks, with its numbered choices.
pub(crate) fn question_prompt(q: &ClarifyNeeded) -> String {
    let mut text = format!("{} {}", "?".cyan().bold(), talaria_runtime::shown::visible_lines(&q.question));
    for (i, c) in q.choices.iter().enumerate() {
        text.push_str(&format!("\n  {}. {}", i + 1, visible(c, 500)));
    }
    text.push_str("\n  (type your answer and press Enter)");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_cannot_erase_or_restyle_its_own_approval_line() {
        let command = "rm -rf build # \x1b[2K\r\x1b[33m⚠\x1b[39m terminal wants to run `ls -la` — lists files.\x1b[8m";
        let a = ApprovalNeeded {
            id: 1,
            kind: ApprovalKind::Command,
            plugin: "terminal".into(),
            command: command.into(),
            reason: "recursive delete".into(),
            timeout_secs: 60,
            call_id: String::new(),
            key: "rm-recursive".into(),
        };
        let text = anstream::adapter::strip_str(&approval_prompt(&a)).to_string();
        assert_eq!(
            text.lines().take(3).collect::<Vec<_>>(),
            [
                "⚠ terminal wants to run this command (recursive delete):",
                "  │ rm -rf build # \\x1b[2K\\r\\x1b[33m⚠\\x1b[39m terminal wants to run `ls -la` — lists files.\\x1b[8m",
                "  (1 line, 81 characters; it holds control characters, shown escaped as \\x.. or \\u{..})",
            ]
        );
        assert_eq!(
            text.lines().skip(3).take(2).collect::<Vec<_>>(),
            [
                "  [s] this session: every `rm-recursive` command (recursive delete), without asking",
                "  [a] always: the same in every session, saved in config.toml as `rm-recursive`",
            ],
            "what s and a allow is said before the key is pressed"
        );
    }

    #[test]
    fn an_approval_is_answered_by_a_key_or_a_word_and_anything_else_denies() {
        assert_eq!(decision("A"), Decision::Always);
        assert_eq!(decision(" yes "), Decision::Once);
        assert_eq!(decision("s"), Decision::Session);
        assert_eq!(decision(""), Decision::Deny);
        assert_eq!(decision("sure"), Decision::Deny);
    }
}
