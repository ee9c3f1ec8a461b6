//! The summary: the prompt that asks the auxiliary model for it, the fallback text when the model
//! cannot answer, and the message that carries it in the new history.
//!
//! A summary message starts with a marker line, `[talaria context summary #N: M earlier messages
//! were compressed]`, so the next compression recognises it and asks the model to update it
//! instead of summarizing from scratch. When the summary had to be merged into a kept message
//! (to keep roles alternating), [`END_LINE`] separates it from that message's own text.
//!
//! ```ignore
//! let text = prompt(&middle, previous, Some("the parser"), "", 200_000);
//! let message = content(2, 48, "## Goal\n...", "- [ ] ship it");
//! assert!(message.starts_with("[talaria context summary #2: 48 earlier messages were compressed]"));
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;

use talaria_sdk::message::{Message, Role};

/// How every summary message starts.
pub const MARKER: &str = "[talaria context summary";
/// Ends a summary merged into a kept message; that message's own text follows.
pub const END_LINE: &str = "[end of context summary]";
/// The heading of the carried text (the unfinished todo list).
pub const CARRY_HEADING: &str = "## Open Todo List";
/// The second line of every summary message, for the main model.
const INTRO: &str = "Earlier turns of this conversation were replaced by this summary. \
Continue the work from it; do not redo what it lists as done.";

/// The headings the summary is written under, in order.
pub const HEADINGS: [&str; 10] = [
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Relevant Files",
    "## Next Steps",
    "## Critical Context",
];

/// Instructions for the auxiliary model.
pub const SYSTEM: &str = "You write the working summary that replaces the older part of a \
conversation between a user and an AI agent that uses tools. The agent will continue from your \
summary alone, so keep every fact it needs: the user's goals and requirements in their own words \
where it matters, exact file paths, commands, identifiers, values, error messages, and decisions \
with their reasons. Do not invent anything. Write only the summary, in Markdown, under exactly \
these headings in this order, writing \"None\" under a heading with nothing to say:";

/// Clip limits, in characters, for one transcript entry.
const USER_CHARS: usize = 6_000;
const ASSISTANT_CHARS: usize = 3_000;
const RESULT_CHARS: usize = 1_500;
const ARGUMENT_CHARS: usize = 600;

/// Whether a message is a summary this engine wrote.
pub fn is_summary(message: &Message) -> bool {
    matches!(message.role, Role::User | Role::Assistant) && message.content.starts_with(MARKER)
}

/// An earlier summary, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Previous<'a> {
    /// The summary itself, without marker, intro or carried todo list.
    pub body: &'a str,
    /// Messages it says it replaced.
    pub compressed: u64,
    /// The text of the kept message it was merged into ("" when it stood alone).
    pub rest: &'a str,
}

impl<'a> Previous<'a> {
    pub fn parse(content: &'a str) -> Self {
        let (first, after) = content.split_once('\n').unwrap_or((content, ""));
        let compressed = first
            .split_once(": ")
            .map(|(_, s)| s.chars().take_while(char::is_ascii_digit).collect::<String>())
            .and_then(|digits| digits.parse().ok())
            .unwrap_or(0);
        let (mut body, rest) = match after.split_once(&format!("\n{END_LINE}")) {
            Some((body, rest)) => (body, rest.trim_start_matches('\n')),
            None => (after, ""),
        };
        body = body.trim_start();
        body = body.strip_prefix(INTRO).unwrap_or(body);
        if let Some(i) = body.rfind(&format!("\n{CARRY_HEADING}\n")) {
            body = &body[..i];
        }
        Self { body: body.trim(), compressed, rest }
    }
}

/// The content of a summary message: marker line, intro, summary, then `carry` under its heading.
pub fn content(number: u32, compressed: u64, summary: &str, carry: &str) -> String {
    let mut out =
        format!("{MARKER} #{number}: {compressed} earlier messages were compressed]\n{INTRO}\n\n{}", summary.trim());
    if !carry.trim().is_empty() {
        let _ = write!(out, "\n\n{CARRY_HEADING}\n{carry}");
    }
    out
}

/// Put the summary in front of a kept message's text.
pub fn merged(summary: &str, kept: &str) -> String {
    match kept.is_empty() {
        true => summary.to_string(),
        false => format!("{summary}\n\n{END_LINE}\n\n{kept}"),
    }
}

/// The summary's answer budget: 20% of the tokens it replaces, at least 2,000, at most 5% of the
/// window or 12,000 (the ceiling wins for windows under 40,000 tokens, down to 256).
pub fn budget(replaced_tokens: u64, context_length: u64) -> u32 {
    let ceiling = if context_length == 0 { 12_000 } else { (context_length / 20).clamp(256, 12_000) };
    (replaced_tokens / 5).clamp(2_000.min(ceiling), ceiling) as u32
}

/// The user prompt for the auxiliary model. `previous` is the index in `middle` of an earlier
/// summary, which the model then updates with the other messages.
pub fn prompt(
    middle: &[Message],
    previous: Option<usize>,
    focus: Option<&str>,
    memory: &str,
    context_length: u64,
) -> String {
    let mut out = String::new();
    let template = HEADINGS.join("\n");
    match previous {
        Some(i) => {
            let earlier = Previous::parse(&middle[i].content);
            let _ = write!(
                out,
                "UPDATE the existing summary below with the newer conversation turns that follow it. \
                 Keep what is still true, move finished work to Done, record new decisions, files \
                 and problems, and drop what no longer matters. Return the whole updated summary.\n\n\
                 <previous-summary>\n{}\n</previous-summary>\n\n",
                earlier.body
            );
        }
        None => out.push_str("Summarize the following conversation turns.\n\n"),
    }
    let _ = write!(out, "Use exactly these headings:\n{template}\n\n");
    if let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        let _ = write!(
            out,
            "The user asked to focus the summary on: {focus}\nGive that topic the most detail; keep the rest brief.\n\n"
        );
    }
    if !memory.trim().is_empty() {
        let _ = write!(
            out,
            "Notes from the memory provider about these turns:\n<memory>\n{}\n</memory>\n\n",
            memory.trim()
        );
    }
    let tag = if previous.is_some() { "newer-turns" } else { "turns" };
    let cap =
        if context_length == 0 { 400_000 } else { (context_length.saturating_mul(2)).clamp(20_000, 400_000) as usize };
    let _ = write!(out, "<{tag}>\n{}\n</{tag}>", clip(&transcript(middle, previous), cap));
    out
}

/// The middle as text: one entry per message, tool calls with their (clipped) arguments, results clipped.
pub fn transcript(middle: &[Message], previous: Option<usize>) -> String {
    let mut entries = Vec::new();
    for (i, m) in middle.iter().enumerate() {
        let text: &str = if Some(i) == previous { Previous::parse(&m.content).rest } else { &m.content };
        match m.role {
            Role::System => entries.push(format!("SYSTEM: {}", clip(text, USER_CHARS))),
            Role::User => entries.push(format!("USER: {}", clip(text, USER_CHARS))),
            Role::Assistant => {
                let mut entry = String::new();
                if !text.trim().is_empty() {
                    entry = format!("ASSISTANT: {}", clip(text, ASSISTANT_CHARS));
                }
                for call in &m.tool_calls {
                    if !entry.is_empty() {
                        entry.push('\n');
                    }
                    let _ = write!(
                        entry,
                        "ASSISTANT CALLS {} ({}): {}",
                        call.name,
                        call.id,
                        clip(&call.arguments, ARGUMENT_CHARS)
                    );
                }
                if !entry.is_empty() {
                    entries.push(entry);
                }
            }
            Role::Tool => {
                entries.push(format!("TOOL RESULT {} ({}): {}", m.name, m.tool_call_id, clip(text, RESULT_CHARS)))
            }
        }
    }
    entries.join("\n\n")
}

/// The summary used when the model cannot write one: how many messages went, the last request
/// among them, the files their tool calls named, and the earlier summary if there was one.
pub fn fallback(middle: &[Message], previous: Option<usize>, removed: usize) -> String {
    let mut out = format!(
        "The automatic summary was not available, so {removed} earlier messages were removed without \
         a proper summary. If details from before matter, ask the user or re-read the files."
    );
    let last_request = middle.iter().rev().find(|m| m.role == Role::User && !is_summary(m));
    if let Some(m) = last_request {
        out.push_str("\n\nThe last user request among them:\n");
        for line in clip(m.content.trim(), 600).lines() {
            let _ = writeln!(out, "> {line}");
        }
        out.truncate(out.trim_end().len());
    }
    let files = mentioned_files(middle);
    if !files.is_empty() {
        out.push_str("\n\nFiles named in their tool calls:");
        for f in &files {
            let _ = write!(out, "\n- {}", clip(f, 200));
        }
    }
    if let Some(i) = previous {
        let earlier = Previous::parse(&middle[i].content);
        if !earlier.body.is_empty() {
            let _ = write!(out, "\n\nThe summary of the turns before them:\n\n{}", earlier.body);
        }
    }
    out
}

/// File paths in the tool-call arguments of `messages`: string values (or lists of them) under
/// keys that name a path, file or directory. First mention first, at most 30.
pub fn mentioned_files(messages: &[Message]) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    let is_path_key = |k: &str| {
        let k = k.to_ascii_lowercase();
        k.contains("path") || k.contains("file") || k == "dir" || k == "directory" || k == "cwd"
    };
    for call in messages.iter().flat_map(|m| &m.tool_calls) {
        let Ok(serde_json::Value::Object(args)) = serde_json::from_str::<serde_json::Value>(&call.arguments) else {
            continue;
        };
        // Sorted by key whatever order serde_json keeps (`preserve_order` may be on in a build).
        let mut args: Vec<_> = args.iter().collect();
        args.sort_unstable_by_key(|(k, _)| k.as_str());
        for (key, value) in args {
            if !is_path_key(key) {
                continue;
            }
            let values = match value {
                serde_json::Value::String(s) => vec![s.as_str()],
                serde_json::Value::Array(items) => items.iter().filter_map(|v| v.as_str()).collect(),
                _ => Vec::new(),
            };
            for v in values.into_iter().map(str::trim).filter(|v| !v.is_empty()) {
                if files.len() < 30 && !files.iter().any(|f| f == v) {
                    files.push(v.to_string());
                }
            }
        }
    }
    files
}

/// `text` cut to at most about `max` characters: two thirds from the start, one third from the end.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    let total = text.chars().count();
    if total <= max {
        return Cow::Borrowed(text);
    }
    let head = max * 2 / 3;
    let tail = max - head;
    let byte = |chars: usize| text.char_indices().nth(chars).map_or(text.len(), |(i, _)| i);
    let (start, end) = (byte(head), byte(total - tail));
    Cow::Owned(format!("{}\n[… {} chars clipped …]\n{}", &text[..start], total - head - tail, &text[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_sdk::message::ToolCall;

    #[test]
    fn content_round_trips_through_parse() {
        let c = content(3, 57, "## Goal\nship it\n", "- [ ] tests\n- [ ] docs");
        assert!(c.starts_with("[talaria context summary #3: 57 earlier messages were compressed]\n"));
        assert!(c.ends_with("## Open Todo List\n- [ ] tests\n- [ ] docs"));
        let p = Previous::parse(&c);
        assert_eq!(p, Previous { body: "## Goal\nship it", compressed: 57, rest: "" });

        let m = merged(&c, "the user's own words");
        let p = Previous::parse(&m);
        assert_eq!(p, Previous { body: "## Goal\nship it", compressed: 57, rest: "the user's own words" });
    }

    #[test]
    fn budget_is_clamped() {
        assert_eq!(budget(1_000, 200_000), 2_000);
        assert_eq!(budget(50_000, 200_000), 10_000);
        assert_eq!(budget(500_000, 200_000), 10_000); // 5% of the window
        assert_eq!(budget(500_000, 1_000_000), 12_000);
        assert_eq!(budget(500_000, 32_000), 1_600); // small window: the ceiling wins
        assert_eq!(budget(0, 1_000), 256);
    }

    #[test]
    fn clip_keeps_both_ends_on_char_boundaries() {
        assert_eq!(clip("short", 10), "short");
        let long = "é".repeat(30) + &"z".repeat(30);
        let c = clip(&long, 30);
        assert!(c.starts_with(&"é".repeat(20)));
        assert!(c.ends_with(&"z".repeat(10)));
        assert!(c.contains("[… 30 chars clipped …]"));
    }

    #[test]
    fn files_come_from_path_like_arguments() {
        let mut m = Message::assistant("");
        for (id, args) in [
            ("1", r#"{"path":"src/a.rs","limit":3}"#),
            ("2", r#"{"paths":["src/b.rs","src/a.rs"],"file_path":"c.txt"}"#),
            ("3", "not json"),
        ] {
            m.tool_calls.push(ToolCall { id: id.into(), name: "x".into(), arguments: args.into() });
        }
        // Keys are visited in sorted order: file_path before paths.
        assert_eq!(mentioned_files(&[m]), ["src/a.rs", "c.txt", "src/b.rs"]);
    }
}
