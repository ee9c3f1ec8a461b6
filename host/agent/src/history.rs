//! Keeping a conversation valid for providers: role order and tool-call pairing.
//!
//! History can come back from the store in a shape providers reject: a user message whose answer
//! was interrupted and then another user message, or a tool call whose results never arrived
//! because the process was killed. [`repair`] fixes those before each model call without touching
//! what is stored.
//!
//! ```
//! use talaria_agent::history::{repair, is_valid};
//! use talaria_protocol::Message;
//! let h = vec![Message::user("hi"), Message::user("are you there?")];
//! let fixed = repair(&h);
//! assert!(is_valid(&fixed));
//! assert_eq!(fixed.len(), 1);
//! ```

use std::collections::HashSet;

use talaria_protocol::{Message, Role};

/// The text given for a tool call that never got a result.
pub const MISSING_RESULT: &str = r#"{"error":"no result: the session stopped before this call finished"}"#;

/// A copy of `history` that providers accept: consecutive user messages merged, every tool call
/// followed by exactly one result (missing ones filled with [`MISSING_RESULT`]), results without
/// a call dropped, system messages dropped (the system prompt travels separately), and the first
/// message a user message.
pub fn repair(history: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    let mut open: Vec<(String, String)> = Vec::new(); // calls of the last assistant still without a result
    let mut answered: HashSet<String> = HashSet::new();
    for m in history {
        match m {
            Message::System { .. } => {}
            Message::Tool { tool_call_id, .. } => {
                if let Some(i) = open.iter().position(|(id, _)| id == tool_call_id)
                    && answered.insert(tool_call_id.clone())
                {
                    open.remove(i);
                    out.push(m.clone());
                }
            }
            Message::User { content, images } => {
                close(&mut out, &mut open);
                if let Some(Message::User { content: prev, images: prev_images }) = out.last_mut() {
                    prev.push_str("\n\n");
                    prev.push_str(content);
                    prev_images.extend(images.iter().cloned());
                } else {
                    out.push(m.clone());
                }
            }
            Message::Assistant { tool_calls, .. } => {
                close(&mut out, &mut open);
                if out.is_empty() {
                    out.push(Message::user("(conversation resumed)"));
                }
                open = tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())).collect();
                out.push(m.clone());
            }
        }
    }
    close(&mut out, &mut open);
    out
}

fn close(out: &mut Vec<Message>, open: &mut Vec<(String, String)>) {
    for (id, name) in open.drain(..) {
        out.push(Message::tool(id, name, MISSING_RESULT));
    }
}

/// Whether `history` keeps the role order providers require (see [`repair`]).
pub fn is_valid(history: &[Message]) -> bool {
    let mut prev: Option<Role> = None;
    let mut open: Vec<&str> = Vec::new();
    for m in history {
        let role = m.role();
        let ok = match (prev, role) {
            (_, Role::System) => false,
            (None, r) => r == Role::User,
            (Some(Role::Tool), Role::Tool) => !open.is_empty(),
            (Some(Role::Assistant), Role::Tool) => !open.is_empty(),
            (Some(_), Role::Tool) => false,
            (Some(Role::User), Role::User) => false,
            (Some(_), _) => open.is_empty(),
        };
        if !ok {
            return false;
        }
        match m {
            Message::Tool { tool_call_id, .. } => {
                let Some(i) = open.iter().position(|id| id == tool_call_id) else { return false };
                open.remove(i);
            }
            Message::Assistant { tool_calls, .. } => open = tool_calls.iter().map(|c| c.id.as_str()).collect(),
            Message::System { .. } | Message::User { .. } => {}
        }
        prev = Some(role);
    }
    open.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_protocol::ToolCall;

    fn asst_calls(ids: &[&str]) -> Message {
        Message::Assistant {
            content: String::new(),
            tool_calls: ids
                .iter()
                .map(|id| ToolCall { id: (*id).into(), name: "read_file".into(), arguments: "{}".into() })
                .collect(),
            reasoning: None,
            extra: None,
        }
    }

    #[test]
    fn a_killed_turn_gets_its_missing_results() {
        let h = vec![Message::user("go"), asst_calls(&["a", "b"]), Message::tool("a", "read_file", "ok")];
        let fixed = repair(&h);
        assert!(is_valid(&fixed));
        assert_eq!(fixed.len(), 4);
        assert_eq!(fixed[3].content(), MISSING_RESULT);
        let mut more = fixed.clone();
        more.push(Message::user("again"));
        assert!(is_valid(&repair(&more)));
    }

    #[test]
    fn stray_and_duplicate_results_are_dropped_and_users_merged() {
        let h = vec![
            Message::tool("x", "t", "orphan"),
            Message::user("one"),
            Message::user("two"),
            asst_calls(&["a"]),
            Message::tool("a", "read_file", "ok"),
            Message::tool("a", "read_file", "dup"),
            Message::assistant("done"),
        ];
        let fixed = repair(&h);
        assert!(is_valid(&fixed), "{fixed:?}");
        assert_eq!(fixed[0].content(), "one\n\ntwo");
        assert_eq!(fixed.len(), 4);
    }

    #[test]
    fn validity_checks_pairing() {
        assert!(!is_valid(&[Message::user("a"), asst_calls(&["a"]), Message::user("b")]));
        assert!(!is_valid(&[Message::assistant("hi")]));
        assert!(is_valid(&[Message::user("a"), Message::assistant("b"), Message::user("c")]));
    }
}
