//! The slash commands, each defined once as a [`Slash`] in [`COMMANDS`]: the REPL's `/help`
//! and dispatch ([`crate::repl`]), the completion ([`crate::lines`]) and what is usable while a
//! turn runs ([`crate::during`]) all come from here: `/q` is [`lookup`]`("q")`, the `exit`
//! command, and [`parse_slash`]`("/title my work")` is `("title", "my work")`.

/// One slash command, defined once: the help, the completion and the dispatch all come from here.
pub struct Slash {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub args: &'static str,
    pub help: &'static str,
    /// Usable while a turn runs.
    pub while_busy: bool,
}

pub const COMMANDS: &[Slash] = &[
    Slash { name: "help", aliases: &["?"], args: "", help: "list these commands", while_busy: true },
    Slash { name: "new", aliases: &["clear"], args: "", help: "start a new session", while_busy: false },
    Slash {
        name: "resume",
        aliases: &[],
        args: "[ID|TITLE|latest]",
        help: "continue a past session (no argument: list recent ones)",
        while_busy: false,
    },
    Slash { name: "sessions", aliases: &[], args: "", help: "list recent sessions", while_busy: false },
    Slash {
        name: "model",
        aliases: &[],
        args: "[PROVIDER:]NAME",
        help: "show or change the model (e.g. /model gpt-4.1, /model anthropic:claude-sonnet-4-5)",
        while_busy: false,
    },
    Slash { name: "tools", aliases: &[], args: "", help: "list the tools the model can call", while_busy: false },
    Slash {
        name: "permissions",
        aliases: &[],
        args: "[remove KEY]",
        help: "list what runs without asking (this session's answers and the always rules), or ask about KEY again",
        while_busy: false,
    },
    Slash {
        name: "expand",
        aliases: &[],
        args: "N",
        help: "show command output N whole (the number a folded output's `… more lines` names)",
        while_busy: true,
    },
    Slash {
        name: "undo",
        aliases: &[],
        args: "",
        help: "forget your last message and everything after it",
        while_busy: false,
    },
    Slash { name: "retry", aliases: &[], args: "", help: "send your last message again", while_busy: false },
    Slash {
        name: "rollback",
        aliases: &[],
        args: "[N] [force]",
        help: "list the files kept before tools changed them, or put them back as before the last N changes",
        while_busy: false,
    },
    Slash {
        name: "prompt",
        aliases: &[],
        args: "SERVER NAME [ARG=VALUE...]",
        help: "send an MCP server's prompt template, filled with its arguments, as your message",
        while_busy: false,
    },
    Slash {
        name: "compress",
        aliases: &[],
        args: "[FOCUS]",
        help: "summarize older messages now to free context (optionally focused on a topic)",
        while_busy: false,
    },
    Slash {
        name: "context",
        aliases: &[],
        args: "",
        help: "how full the context window is, and the context engine's state",
        while_busy: false,
    },
    Slash {
        name: "queue",
        aliases: &[],
        args: "TEXT",
        help: "while a reply runs: send TEXT after it",
        while_busy: true,
    },
    Slash {
        name: "steer",
        aliases: &[],
        args: "TEXT",
        help: "while a reply runs: tell the model TEXT with its next tool result",
        while_busy: true,
    },
    Slash {
        name: "stop",
        aliases: &[],
        args: "",
        help: "interrupt the running turn (or press Ctrl-C)",
        while_busy: true,
    },
    Slash { name: "usage", aliases: &[], args: "", help: "tokens and model calls of this session", while_busy: true },
    Slash { name: "title", aliases: &[], args: "TITLE", help: "name this session", while_busy: false },
    Slash {
        name: "yolo",
        aliases: &[],
        args: "",
        help: "toggle approving dangerous commands without asking",
        while_busy: true,
    },
    Slash { name: "exit", aliases: &["quit", "q"], args: "", help: "leave (or press Ctrl-D)", while_busy: false },
];

/// Find a command by name or alias (`/re` is not a prefix match: completion handles that).
pub fn lookup(name: &str) -> Option<&'static Slash> {
    COMMANDS.iter().find(|c| c.name == name || c.aliases.contains(&name))
}

/// Split `/name rest` into the command and its argument.
pub(crate) fn parse_slash(line: &str) -> Option<(&str, &str)> {
    let body = line.strip_prefix('/')?;
    let (name, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    Some((name, rest.trim()))
}

/// What `/yolo` says: whether approving without asking is now `on`.
pub(crate) fn yolo_state(on: bool) -> String {
    if on {
        "yolo is on: dangerous commands and new hosts go ahead without asking (forbidden commands stay refused)".into()
    } else {
        "yolo is off: dangerous commands and new hosts ask first".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_resolves_and_completes() {
        for c in COMMANDS {
            assert_eq!(lookup(c.name).map(|s| s.name), Some(c.name));
            for a in c.aliases {
                assert_eq!(lookup(a).map(|s| s.name), Some(c.name));
            }
        }
        assert_eq!(parse_slash("/title  my work "), Some(("title", "my work")));
    }
}
