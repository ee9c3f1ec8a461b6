//! Where a job's answer goes: a [`Target`], written the way users type it.
//!
//! | Written                       | Means                                                        |
//! |-------------------------------|--------------------------------------------------------------|
//! | `origin`                      | the chat the job was made from ([`Target::Origin`])          |
//! | `local`                       | a file under the home and the run history ([`Target::Local`])|
//! | `telegram`                    | that gateway account's home channel ([`Target::Platform`])   |
//! | `telegram:123456789`          | one chat of that account ([`Target::Chat`])                  |
//! | `slack:C0123ABC:1712345678.1` | one thread of one chat                                       |
//!
//! Account names are letters, digits, `_` and `-`; `origin` and `local` are not account names.
//! Chat and thread ids are percent-decoded, and written back with `:` as `%3A` and `%` as `%25`,
//! so a Matrix room such as `!abc:example.org` is `matrix:!abc%3Aexample.org`.
//!
//! ```
//! use talaria_cron::target::Target;
//!
//! let room: Target = "matrix:!abc%3Aexample.org".parse()?;
//! assert_eq!(
//!     room,
//!     Target::Chat { account: "matrix".into(), chat: "!abc:example.org".into(), thread: None }
//! );
//! assert_eq!(room.to_string(), "matrix:!abc%3Aexample.org");
//! # Ok::<(), talaria_cron::target::TargetError>(())
//! ```

use std::fmt;
use std::str::FromStr;

/// Valid targets, shown in every message about an invalid one.
const EXAMPLES: &str = "Write one of: origin, local, telegram, telegram:123456789, slack:C0123ABC:1712345678.000100";

/// Where a job's answer goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The chat the job was made from (a gateway chat); for jobs made elsewhere it means `Local`.
    Origin,
    /// Saved as a file under the home and in the run history only.
    Local,
    /// A gateway account's home channel (`[gateway.platforms.NAME] home_channel`).
    Platform { account: String },
    /// One chat (and optionally thread) of a gateway account.
    Chat { account: String, chat: String, thread: Option<String> },
}

/// Why a target could not be read. Each message shows valid ones.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("the delivery target is empty. {EXAMPLES}")]
    Empty,
    #[error("{account:?} in {input:?} is not an account name (letters, digits, `_` and `-`). {EXAMPLES}")]
    Account { input: String, account: String },
    #[error("{input:?}: `{name}` takes no chat. {EXAMPLES}")]
    Reserved { input: String, name: String },
    #[error("{input:?} has an empty chat or thread id. {EXAMPLES}")]
    EmptyId { input: String },
    #[error("{input:?} has more than an account, a chat and a thread (write `:` in an id as %3A). {EXAMPLES}")]
    TooManyParts { input: String },
    #[error("{input:?} has a bad percent escape (`%3A` is `:`, `%25` is `%`). {EXAMPLES}")]
    Escape { input: String },
}

impl FromStr for Target {
    type Err = TargetError;

    /// Reads `origin`, `local`, `<account>` or `<account>:<chat>[:<thread>]`.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let text = input.trim();
        let mut parts = text.split(':');
        let account = parts.next().unwrap_or_default();
        let chat = parts.next();
        let thread = parts.next();
        if parts.next().is_some() {
            return Err(TargetError::TooManyParts { input: input.to_owned() });
        }
        if account.is_empty() && chat.is_none() {
            return Err(TargetError::Empty);
        }
        let reserved = || TargetError::Reserved { input: input.to_owned(), name: account.to_owned() };
        match (account, chat) {
            ("origin", None) => return Ok(Target::Origin),
            ("local", None) => return Ok(Target::Local),
            ("origin" | "local", Some(_)) => return Err(reserved()),
            _ => {}
        }
        if account.is_empty() || !account.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(TargetError::Account { input: input.to_owned(), account: account.to_owned() });
        }
        let Some(chat) = chat else { return Ok(Target::Platform { account: account.to_owned() }) };
        let id = |raw: &str| {
            let id = decode(raw).ok_or_else(|| TargetError::Escape { input: input.to_owned() })?;
            if id.is_empty() {
                return Err(TargetError::EmptyId { input: input.to_owned() });
            }
            Ok(id)
        };
        Ok(Target::Chat { account: account.to_owned(), chat: id(chat)?, thread: thread.map(id).transpose()? })
    }
}

impl fmt::Display for Target {
    /// The syntax `Target`'s `FromStr` reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Origin => f.write_str("origin"),
            Target::Local => f.write_str("local"),
            Target::Platform { account } => f.write_str(account),
            Target::Chat { account, chat, thread } => {
                write!(f, "{account}:{}", encode(chat))?;
                match thread {
                    Some(thread) => write!(f, ":{}", encode(thread)),
                    None => Ok(()),
                }
            }
        }
    }
}

/// `id` with `%` written `%25` and `:` written `%3A`.
fn encode(id: &str) -> String {
    id.replace('%', "%25").replace(':', "%3A")
}

/// `raw` with every `%XX` escape decoded; None when an escape is broken or the result is not
/// UTF-8.
fn decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(input: &str) -> Target {
        input.parse().expect(input)
    }

    fn chat(account: &str, chat: &str, thread: Option<&str>) -> Target {
        Target::Chat { account: account.into(), chat: chat.into(), thread: thread.map(Into::into) }
    }

    #[test]
    fn each_form_reads() {
        assert_eq!(read("origin"), Target::Origin);
        assert_eq!(read(" local "), Target::Local);
        assert_eq!(read("telegram"), Target::Platform { account: "telegram".into() });
        assert_eq!(read("work-slack_2"), Target::Platform { account: "work-slack_2".into() });
        assert_eq!(read("telegram:123456789"), chat("telegram", "123456789", None));
        assert_eq!(read("telegram:-100123"), chat("telegram", "-100123", None));
        assert_eq!(read("slack:C0123ABC:1712345678.000100"), chat("slack", "C0123ABC", Some("1712345678.000100")));
        assert_eq!(read("matrix:!abc%3Aexample.org"), chat("matrix", "!abc:example.org", None));
        assert_eq!(read("matrix:!abc%3aexample.org:%2525"), chat("matrix", "!abc:example.org", Some("%25")));
    }

    #[test]
    fn display_round_trips() {
        for target in [
            Target::Origin,
            Target::Local,
            Target::Platform { account: "telegram".into() },
            chat("telegram", "123456789", None),
            chat("slack", "C0123ABC", Some("1712345678.000100")),
            chat("matrix", "!abc:example.org", Some("$event:example.org")),
            chat("odd", "100%:::", Some("%3A")),
            chat("unicode", "chat é 🦀", None),
        ] {
            let written = target.to_string();
            assert_eq!(read(&written), target, "{written}");
        }
        assert_eq!(chat("matrix", "!abc:example.org", None).to_string(), "matrix:!abc%3Aexample.org");
        assert_eq!(chat("odd", "50%", Some("a:b")).to_string(), "odd:50%25:a%3Ab");
    }

    #[test]
    fn bad_targets_are_refused_with_examples() {
        for (input, says) in [
            ("", "empty"),
            ("  ", "empty"),
            ("tele gram", "not an account name"),
            ("télégram:1", "not an account name"),
            (":123", "not an account name"),
            ("origin:123", "takes no chat"),
            ("local:x:y", "takes no chat"),
            ("telegram:", "empty chat or thread"),
            ("slack:C0123ABC:", "empty chat or thread"),
            ("slack::1712345678.000100", "empty chat or thread"),
            ("matrix:!abc:example.org:x", "more than an account"),
            ("matrix:50%", "bad percent escape"),
            ("matrix:%zz", "bad percent escape"),
            ("matrix:%ff", "bad percent escape"),
        ] {
            let message = input.parse::<Target>().expect_err(input).to_string();
            assert!(message.contains(says), "{input:?}: {message}");
            assert!(message.contains("telegram:123456789") && message.contains("origin"), "{input:?}: {message}");
        }
    }
}
