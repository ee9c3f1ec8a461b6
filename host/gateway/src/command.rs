//! Commands people type in a chat: `/new`, `/stop`, `/status`, `/approve`, `/deny`, `/help`.
//! They are handled by the gateway at once, even while the agent works, and never reach the
//! model. Telegram appends the bot's name in groups (`/stop@talaria_bot`): a command addressed to
//! another bot is not ours.

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
        "approve" => Command::Approve { session: arg == "session" },
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
    }
}
