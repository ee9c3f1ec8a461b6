//! Commands people type in a chat: `/new`, `/stop`, `/status`, `/approve`, `/deny`, `/help`.
//! They are handled by the gateway at once, even while the agent works, and never reach the
//! model. Telegram appends the bot's name in groups (`/stop@talaria_bot`): a command addressed to
//! another bot is not ours. A message that addresses the bot may name it first, as chat apps
//! write a mention (`talaria-bot: /approve`, `@talaria_bot /stop`, `<@U123> /status`):
//! [`command_text`] finds the command after it.

/// A chat command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Start a new session for this chat.
    New,
    /// Interrupt the running turn.
    Stop,
    /// What the agent is doing, and the session's usage.
    Status,
    /// Answer the waiting approval: allow it (admins only), optionally for the session.
    Approve {
        session: bool,
    },
    /// Answer the waiting approval: refuse it (admins only).
    Deny,
    /// List the files kept before tools changed them, or put back the last N changes
    /// (admins only); `force` overwrites files changed since.
    Rollback {
        steps: Option<u32>,
        force: bool,
    },
    Help,
    /// A command written wrong: how to write it.
    Usage(&'static str),
}

/// How to answer an approval.
pub const APPROVE_USAGE: &str =
    "Answer with /approve (this once), /approve session (for the rest of this session) or /deny.";

/// The command in `text`, a message that `addressed` the bot: `text` itself, or what follows a
/// mention of the bot written before it (a word or a name ending in `:` or `,`, or an `@name`
/// or `<@id>`). `None` when nothing in it is a command.
pub fn command_text(text: &str, addressed: bool) -> Option<&str> {
    let text = text.trim();
    if text.starts_with('/') {
        return Some(text);
    }
    if !addressed {
        return None;
    }
    let at = text.find(" /")?;
    let (mention, rest) = (text[..at].trim(), text[at..].trim_start());
    let named = mention.chars().count() <= 64
        && !mention.contains('\n')
        && (mention.ends_with(':')
            || mention.ends_with(',')
            || (!mention.contains(char::is_whitespace) && (mention.starts_with('@') || mention.starts_with("<@"))));
    named.then_some(rest)
}

/// The command `text` is, for the bot named `bot` (without `@`); `None` when it is a message
/// for the agent (or a command for another bot).
pub fn parse(text: &str, bot: &str) -> Option<Command> {
    let text = text.trim();
    let rest = text.strip_prefix('/')?;
    let (word, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let (name, to) = word.split_once('@').map_or((word, None), |(n, b)| (n, Some(b)));
    if to.is_some_and(|b| !b.eq_ignore_ascii_case(bot)) {
        return None;
    }
    let arg = arg.trim().to_ascii_lowercase();
    Some(match name.to_ascii_lowercase().as_str() {
        "new" | "reset" => Command::New,
        "stop" => Command::Stop,
        "status" => Command::Status,
        "approve" => match arg.as_str() {
            "" | "once" => Command::Approve { session: false },
            "session" => Command::Approve { session: true },
            _ => Command::Usage(APPROVE_USAGE),
        },
        "deny" => Command::Deny,
        "rollback" => {
            let words: Vec<&str> = arg.split_whitespace().collect();
            Command::Rollback {
                steps: words.iter().find_map(|w| w.parse::<u32>().ok()).filter(|n| *n > 0),
                force: words.contains(&"force"),
            }
        }
        "help" | "start" => Command::Help,
        _ => return None,
    })
}

/// What `/help` answers.
pub const HELP: &str = "Write to me as to a person. Commands: /new starts over, /stop interrupts me, /status says \
what I am doing, /approve or /deny answers a question about a risky action (admins only), /rollback [N] lists or \
undoes my last file changes (admins only), /help shows this.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_recognised_for_this_bot_only() {
        assert_eq!(parse("/stop", "talaria_bot"), Some(Command::Stop));
        assert_eq!(parse("  /NEW ", "talaria_bot"), Some(Command::New));
        assert_eq!(parse("/stop@Talaria_Bot", "talaria_bot"), Some(Command::Stop));
        assert_eq!(parse("/stop@other_bot", "talaria_bot"), None, "for another bot");
        assert_eq!(parse("/approve session", "b"), Some(Command::Approve { session: true }));
        assert_eq!(parse("/rollback", "b"), Some(Command::Rollback { steps: None, force: false }));
        assert_eq!(parse("/rollback 2 force", "b"), Some(Command::Rollback { steps: Some(2), force: true }));
        assert_eq!(parse("/approve", "b"), Some(Command::Approve { session: false }));
        assert_eq!(parse("/start", "b"), Some(Command::Help));
        assert_eq!(parse("/usr/bin/env is a path", "b"), None, "not a command, a message");
        assert_eq!(parse("please /stop", "b"), None);
        assert_eq!(parse("what does /stop do?", "b"), None);
        assert_eq!(parse("/approve sesion", "b"), Some(Command::Usage(APPROVE_USAGE)), "not approved once");
    }

    #[test]
    fn a_command_after_a_mention_of_the_bot_is_found() {
        assert_eq!(command_text("talaria-bot: /approve", true), Some("/approve"));
        assert_eq!(command_text("Talaria Bot, /approve session", true), Some("/approve session"));
        assert_eq!(command_text("@talaria_bot /stop", true), Some("/stop"));
        assert_eq!(command_text("<@U123> /status", true), Some("/status"));
        assert_eq!(command_text(" /help ", false), Some("/help"));
        // Not addressed, or words before it: a message.
        assert_eq!(command_text("talaria-bot: /approve", false), None);
        assert_eq!(command_text("please /stop", true), None);
        assert_eq!(command_text("what does /stop do?", true), None);
        assert_eq!(command_text("hello there: /new", true), Some("/new"));
        assert_eq!(command_text("tell me\nbot: /stop", true), None);
    }
}
