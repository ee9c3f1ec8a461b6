//! Where to cut the history: the head kept verbatim, the middle to summarize, the tail kept verbatim.
//!
//! Token counts here are estimates: a quarter of the characters of a message's content and of its
//! tool calls' names and arguments (no per-message overhead). They only steer the cut points.
//!
//! ```ignore
//! let plan = Plan::new(&messages, &Config::default(), 200_000);
//! let (head, middle, tail) = (plan.head(), plan.middle(), plan.tail(messages.len()));
//! ```

use std::ops::Range;

use crate::config::Config;
use crate::summary::is_summary;
use talaria_sdk::message::{Message, Role};

/// Tool results at most this long (in characters) are never cleared.
pub const CLEAR_OVER_CHARS: usize = 200;

/// Estimated tokens of one message: characters / 4, rounded up.
pub fn estimate(message: &Message) -> u64 {
    let calls: usize = message.tool_calls.iter().map(|c| c.name.chars().count() + c.arguments.chars().count()).sum();
    (message.content.chars().count() + calls).div_ceil(4) as u64
}

/// Estimated tokens of several messages.
pub fn estimate_all(messages: &[Message]) -> u64 {
    messages.iter().map(estimate).sum()
}

/// The cut points of one compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The head is `0..head_end`: leading system messages, `protect_first_n` more, and the rest of
    /// a tool-call group the last of them opened; it stops before an earlier summary.
    pub head_end: usize,
    /// The tail is `tail_start..`; it never starts inside a tool-call group and never holds a summary.
    pub tail_start: usize,
    /// The earlier summary in the middle, if any (the latest one when there are several).
    pub previous: Option<usize>,
    /// Large tool results before this index are old: cleared. It is the tail's start, or earlier:
    /// results among the last `3 × protect_last_n` messages stay (as in Hermes), so the summary
    /// model sees the recent ones.
    pub clear_before: usize,
}

impl Plan {
    /// Plan the cuts for `messages` in a window of `context_length` tokens.
    pub fn new(messages: &[Message], config: &Config, context_length: u64) -> Self {
        let n = messages.len();
        let role = |i: usize| messages[i].role;
        let lead = messages.iter().take_while(|m| m.role == Role::System).count();

        let mut head_end = (lead + config.protect_first_n).min(n);
        while head_end < n && role(head_end) == Role::Tool {
            head_end += 1;
        }
        if let Some(i) = (lead..head_end).find(|&i| is_summary(&messages[i])) {
            head_end = i;
        }

        // Walk back from the end: at least protect_last_n messages, then more while they fit the budget.
        let budget = config.tail_budget(context_length);
        let (mut tail_start, mut tokens) = (n, 0);
        for i in (head_end..n).rev() {
            let t = estimate(&messages[i]);
            if n - i > config.protect_last_n && tokens + t > budget {
                break;
            }
            tokens += t;
            tail_start = i;
        }
        // The user's latest request is never summarized away.
        let last_user = (head_end..n).rev().find(|&i| role(i) == Role::User && !is_summary(&messages[i]));
        if let Some(u) = last_user {
            tail_start = tail_start.min(u);
        }
        // Never start with results whose call would be summarized.
        while tail_start > head_end && tail_start < n && role(tail_start) == Role::Tool {
            tail_start -= 1;
        }
        // An earlier summary is replaced, never kept beside the new one: it and what it answers go
        // to the middle.
        if let Some(s) = (tail_start..n).rev().find(|&i| is_summary(&messages[i])) {
            tail_start = s + 1;
            while tail_start < n && role(tail_start) == Role::Tool {
                tail_start += 1;
            }
        }

        // If the summary could not stand alone between head and tail (see `summary_role`), the
        // tail takes one more step back when that helps and leaves something to summarize, so the
        // summary is not merged into a kept message (above all, not into the user's request).
        if tail_start < n && tail_start > head_end {
            let role = summary_role(head_end.checked_sub(1).map(|i| &messages[i]), Some(&messages[tail_start]));
            if role == messages[tail_start].role {
                let mut t = tail_start - 1;
                while t > head_end && messages[t].role == Role::Tool {
                    t -= 1;
                }
                let fits = messages[t].role != role && messages[t].role != Role::Tool && !is_summary(&messages[t]);
                if t > head_end && fits && (head_end..t).any(|i| !is_summary(&messages[i])) {
                    tail_start = t;
                }
            }
        }

        let previous = (head_end..tail_start).rev().find(|&i| is_summary(&messages[i]));
        let clear_before = tail_start.min(n.saturating_sub(config.protect_last_n.saturating_mul(3)));
        Self { head_end, tail_start, previous, clear_before }
    }

    /// The indices of the middle.
    pub fn middle(&self) -> Range<usize> {
        self.head_end..self.tail_start.max(self.head_end)
    }

    /// Whether the middle holds anything besides an earlier summary.
    pub fn has_work(&self) -> bool {
        self.middle().any(|i| Some(i) != self.previous)
    }
}

/// The role of the summary message between `before` (the head's last message) and `after` (the
/// tail's first): a user message after an assistant message or at the start, an assistant message
/// after a user one; after tool results, whichever the tail does not start with. When `after` has
/// that role anyway, the summary goes in front of its text.
pub fn summary_role(before: Option<&Message>, after: Option<&Message>) -> Role {
    let next = after.map(|m| m.role);
    match before.map(|m| m.role) {
        Some(Role::User) => Role::Assistant,
        Some(Role::Tool) if next == Some(Role::User) => Role::Assistant,
        Some(Role::Tool | Role::Assistant | Role::System) | None => Role::User,
    }
}

/// Replace tool results longer than [`CLEAR_OVER_CHARS`] with a short marker. Returns how many.
pub fn clear_tool_results(messages: &mut [Message]) -> usize {
    let mut cleared = 0;
    for m in messages.iter_mut().filter(|m| m.role == Role::Tool) {
        let chars = m.content.chars().count();
        if chars > CLEAR_OVER_CHARS {
            m.content = format!("[tool result cleared to save context: {chars} chars]");
            cleared += 1;
        }
    }
    cleared
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_sdk::message::ToolCall;

    fn call(id: &str) -> Message {
        let mut m = Message::assistant("");
        m.tool_calls.push(ToolCall { id: id.into(), name: "read_file".into(), arguments: "{}".into() });
        m
    }

    fn cfg(first: usize, last: usize) -> Config {
        Config { protect_first_n: first, protect_last_n: last, tail_ratio: 0.0, ..Config::default() }
    }

    #[test]
    fn estimate_counts_content_and_calls() {
        let mut m = call("1");
        m.content = "abcd".into();
        assert_eq!(estimate(&m), 4); // 4 + 9 ("read_file") + 2 ("{}") = 15 chars -> 4 tokens
        assert_eq!(estimate(&Message::user("")), 0);
        assert_eq!(estimate(&Message::user("é")), 1);
    }

    #[test]
    fn head_takes_the_whole_tool_group() {
        let msgs = vec![Message::user("u"), call("1"), Message::tool("1", "read_file", "r"), Message::assistant("a")];
        let plan = Plan::new(&msgs, &cfg(2, 0), 100_000);
        assert_eq!(plan.head_end, 3);
    }

    #[test]
    fn tail_moves_back_to_the_call_and_keeps_the_last_user_message() {
        let mut msgs = vec![Message::user("u0"), Message::assistant("a0")];
        for i in 0..5 {
            msgs.push(Message::user(format!("u{i}")));
            msgs.push(call(&i.to_string()));
            msgs.push(Message::tool(i.to_string(), "read_file", "r"));
        }
        // protect_last_n = 1 would start the tail on a tool result; it moves back to its call, then
        // to the user message before it.
        let plan = Plan::new(&msgs, &cfg(1, 1), 100_000);
        assert_eq!(plan.head_end, 1);
        assert_eq!(plan.tail_start, msgs.len() - 3);
        assert_eq!(msgs[plan.tail_start].content, "u4");
    }

    #[test]
    fn earlier_summary_in_head_or_tail_goes_to_the_middle() {
        let summary = Message::user("[talaria context summary #1: 9 earlier messages were compressed]\n\nx");
        let msgs =
            vec![Message::user("u"), Message::assistant("a"), summary, Message::assistant("b"), Message::user("c")];
        let plan = Plan::new(&msgs, &cfg(3, 10), 100_000);
        assert_eq!((plan.head_end, plan.tail_start, plan.previous, plan.clear_before), (2, 3, Some(2), 0));
        assert!(!plan.has_work());
    }

    #[test]
    fn clears_only_long_results() {
        let mut msgs = vec![Message::tool("1", "t", "x".repeat(200)), Message::tool("2", "t", "x".repeat(201))];
        assert_eq!(clear_tool_results(&mut msgs), 1);
        assert_eq!(msgs[0].content.len(), 200);
        assert_eq!(msgs[1].content, "[tool result cleared to save context: 201 chars]");
    }
}
