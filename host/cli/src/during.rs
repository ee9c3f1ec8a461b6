//! What a line typed while a turn runs means: an answer to the approval or question waiting, a
//! command usable mid-turn (`/stop`, `/yolo`), or a message for the `[terminal] busy_input`
//! policy. The keys themselves are read by [`crate::busy`].

use talaria_core::config::BusyInput as BusyPolicy;
use talaria_protocol::{Decision, Op};

use crate::render::Renderer;
use crate::repl::{lookup, parse_slash, yolo_state};
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
        BusyPolicy::Interrupt => "type a message: Enter stops this reply and sends it (/queue, /steer) · Ctrl-C stops",
        BusyPolicy::Queue => "type a message: Enter queues it for after this reply (/steer) · Ctrl-C stops",
        BusyPolicy::Steer => "type a message: Enter tells the model now (/queue) · Ctrl-C stops",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_is_answered_by_a_key_or_a_word_and_anything_else_denies() {
        assert_eq!(decision("A"), Decision::Always);
        assert_eq!(decision(" yes "), Decision::Once);
        assert_eq!(decision("s"), Decision::Session);
        assert_eq!(decision(""), Decision::Deny);
        assert_eq!(decision("sure"), Decision::Deny);
    }
}
