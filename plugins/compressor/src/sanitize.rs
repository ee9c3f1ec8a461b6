//! What a valid conversation is ([`check`]) and how any list of messages is made into one ([`sanitize`]).
//!
//! Valid: system messages only at the start; then user and assistant alternate; an assistant
//! message with tool calls is followed by exactly one result for each call (any order), and only
//! then by an assistant or user message. The history may start with a user or an assistant message
//! and may end after tool results, but not with calls still unanswered.
//!
//! ```ignore
//! let fixed = sanitize(messages);
//! assert!(check(&fixed).is_ok());
//! ```

use talaria_sdk::message::{Message, Role};

/// The content of a result made up for a call whose result was lost.
pub const LOST_RESULT: &str = r#"{"error":"result lost in compression"}"#;

/// Why `messages` is not a valid conversation, naming the first offending message.
pub fn check(messages: &[Message]) -> Result<(), String> {
    #[derive(PartialEq)]
    enum After {
        Start,
        System,
        User,
        Assistant,
        Results,
    }
    let mut after = After::Start;
    let mut pending: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let bad = |why: &str| Err(format!("message {i} ({:?}): {why}", m.role));
        if m.role != Role::Tool && !pending.is_empty() {
            return bad(&format!("tool calls {pending:?} have no results before it"));
        }
        match m.role {
            Role::System if matches!(after, After::Start | After::System) => after = After::System,
            Role::System => return bad("a system message after the conversation started"),
            Role::User if after == After::User => return bad("two user messages in a row"),
            Role::User => after = After::User,
            Role::Assistant if after == After::Assistant => return bad("two assistant messages in a row"),
            Role::Assistant => {
                pending = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
                after = if pending.is_empty() { After::Assistant } else { After::Results };
            }
            Role::Tool => match pending.iter().position(|id| *id == m.tool_call_id) {
                Some(p) if after == After::Results => {
                    pending.remove(p);
                }
                _ => return bad(&format!("result for call {:?} that is not awaiting one", m.tool_call_id)),
            },
        }
    }
    match pending.is_empty() {
        true => Ok(()),
        false => Err(format!("the last tool calls {pending:?} have no results")),
    }
}

/// Make `messages` valid with the fewest changes: results that answer no open call are dropped
/// (as are repeated ones), calls without a result get [`LOST_RESULT`] after the results that
/// came, consecutive user messages are merged, an assistant message without calls is merged into the assistant message after it, and a system message after the
/// start becomes a user message. `extra` stays with its message; a merge keeps the later one's
/// when both have one.
pub fn sanitize(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut input = messages.into_iter().peekable();
    while let Some(mut m) = input.next() {
        match m.role {
            Role::System if out.iter().all(|o| o.role == Role::System) => out.push(m),
            Role::System => {
                m.role = Role::User;
                push(&mut out, m);
            }
            Role::Tool => {} // answers no call that is open here
            Role::User => push(&mut out, m),
            Role::Assistant if m.tool_calls.is_empty() => push(&mut out, m),
            Role::Assistant => {
                // The calls still waiting for a result: (id, name).
                let mut open: Vec<(String, String)> =
                    m.tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())).collect();
                push(&mut out, m);
                while let Some(result) = input.next_if(|next| next.role == Role::Tool) {
                    if let Some(slot) = open.iter().position(|(id, _)| *id == result.tool_call_id) {
                        open.remove(slot);
                        out.push(result);
                    }
                }
                out.extend(open.into_iter().map(|(id, name)| Message::tool(id, name, LOST_RESULT)));
            }
        }
    }
    out
}

/// Append `m`, merging it into the last message when the roles would repeat.
fn push(out: &mut Vec<Message>, m: Message) {
    match out.last_mut() {
        Some(last)
            if last.role == m.role && matches!(m.role, Role::User | Role::Assistant) && last.tool_calls.is_empty() =>
        {
            merge(last, m);
        }
        _ => out.push(m),
    }
}

fn merge(into: &mut Message, m: Message) {
    into.content = match (into.content.is_empty(), m.content.is_empty()) {
        (_, true) => std::mem::take(&mut into.content),
        (true, false) => m.content,
        (false, false) => format!("{}\n\n{}", into.content, m.content),
    };
    into.tool_calls.extend(m.tool_calls);
    if !m.extra.is_empty() {
        into.extra = m.extra;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_sdk::message::ToolCall;

    fn call(ids: &[&str]) -> Message {
        let mut m = Message::assistant("");
        m.tool_calls =
            ids.iter().map(|id| ToolCall { id: (*id).into(), name: "t".into(), arguments: "{}".into() }).collect();
        m
    }

    #[test]
    fn check_accepts_a_normal_turn() {
        let msgs = vec![
            Message::system("s"),
            Message::user("u"),
            call(&["1", "2"]),
            Message::tool("2", "t", "b"),
            Message::tool("1", "t", "a"),
            Message::assistant("done"),
            Message::user("again"),
            call(&["3"]),
            Message::tool("3", "t", "c"),
            Message::user("interrupted"),
        ];
        assert_eq!(check(&msgs), Ok(()));
    }

    #[test]
    fn check_refuses_broken_orders() {
        let cases: Vec<Vec<Message>> = vec![
            vec![Message::user("a"), Message::user("b")],
            vec![Message::user("a"), Message::assistant("b"), Message::assistant("c")],
            vec![Message::user("a"), Message::tool("1", "t", "x")],
            vec![Message::user("a"), call(&["1"])],
            vec![Message::user("a"), call(&["1"]), Message::user("b")],
            vec![Message::user("a"), call(&["1"]), Message::tool("1", "t", "x"), Message::tool("1", "t", "x")],
            vec![Message::user("a"), Message::system("s")],
        ];
        for msgs in cases {
            assert!(check(&msgs).is_err(), "{msgs:?}");
        }
    }

    #[test]
    fn sanitize_repairs_orphans_and_repeats() {
        let mut first = Message::assistant("a");
        first.extra = "{\"sig\":1}".into();
        let msgs = vec![
            Message::tool("0", "t", "orphan"),
            Message::user("u1"),
            Message::user("u2"),
            first,
            call(&["1", "2"]),
            Message::tool("2", "t", "two"),
            Message::tool("9", "t", "stray"),
            Message::assistant("after"),
        ];
        let out = sanitize(msgs);
        assert_eq!(check(&out), Ok(()));
        let shape: Vec<(Role, &str)> = out.iter().map(|m| (m.role, m.content.as_str())).collect();
        assert_eq!(
            shape,
            [
                (Role::User, "u1\n\nu2"),
                (Role::Assistant, "a"),
                (Role::Tool, "two"),
                (Role::Tool, LOST_RESULT),
                (Role::Assistant, "after"),
            ]
        );
        assert_eq!(out[1].tool_calls.len(), 2);
        assert_eq!(out[1].extra, "{\"sig\":1}");
        assert_eq!(out[3].tool_call_id, "1");
    }
}
