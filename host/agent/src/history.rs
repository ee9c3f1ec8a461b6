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

use std::collections::HashMap;

use talaria_protocol::{Image, Message, Role};

/// The text given for a tool call that never got a result.
pub const MISSING_RESULT: &str = r#"{"error":"no result: the session stopped before this call finished"}"#;

/// A copy of `history` that providers accept: consecutive user messages merged, every tool call
/// followed by exactly one result (missing ones filled with [`MISSING_RESULT`]), results without
/// a call dropped, system messages dropped (the system prompt travels separately), and the first
/// message a user message.
///
/// A result answers the first still-open call of the assistant message just before it that has
/// its id. Ids are compared only within one assistant message, so an id used again in a later
/// one, or two calls sharing one (stored before talaria named calls itself), lose nothing.
pub fn repair(history: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    let mut open: Vec<(String, String)> = Vec::new(); // calls of the last assistant still without a result
    for m in history {
        match m {
            Message::System { .. } => {}
            Message::Tool { tool_call_id, .. } => {
                if let Some(i) = open.iter().position(|(id, _)| id == tool_call_id) {
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

/// `history` (already [`repair`]ed) as the provider knows it: each call under the provider's id
/// (`wire_id`) and each result under its call's. When a provider gave two calls of one answer the
/// same id, the second goes under talaria's own, so the provider can still tell them apart.
pub fn for_wire(history: Vec<Message>) -> Vec<Message> {
    let mut names: Vec<(String, String)> = Vec::new(); // talaria's id -> the wire's, for the last assistant
    history
        .into_iter()
        .map(|mut m| {
            match &mut m {
                Message::Assistant { tool_calls, .. } => {
                    names.clear();
                    for call in tool_calls.iter_mut() {
                        let Some(wire) = call.wire_id.take() else { continue };
                        if !names.iter().any(|(_, w)| *w == wire) {
                            names.push((call.id.clone(), wire.clone()));
                            call.id = wire;
                        }
                    }
                }
                Message::Tool { tool_call_id, .. } => {
                    if let Some((_, wire)) = names.iter().find(|(id, _)| id == tool_call_id) {
                        tool_call_id.clone_from(wire);
                    }
                }
                Message::System { .. } | Message::User { .. } => {}
            }
            m
        })
        .collect()
}

fn close(out: &mut Vec<Message>, open: &mut Vec<(String, String)>) {
    for (id, name) in open.drain(..) {
        out.push(Message::tool(id, name, MISSING_RESULT));
    }
}

/// Give the calls in `to` the provider's ids, and the results the images, they had in `from`:
/// a plugin (a context engine) hands back calls with talaria's ids only and results as text.
pub fn keep_host_fields(from: &[Message], to: &mut [Message]) {
    let wire: HashMap<&str, &str> = from
        .iter()
        .flat_map(Message::tool_calls)
        .filter_map(|c| Some((c.id.as_str(), c.wire_id.as_deref()?)))
        .collect();
    let images: HashMap<&str, &Vec<Image>> = from
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, images, .. } if !images.is_empty() => Some((tool_call_id.as_str(), images)),
            _ => None,
        })
        .collect();
    for m in to {
        match m {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls.iter_mut().filter(|c| c.wire_id.is_none()) {
                    call.wire_id = wire.get(call.id.as_str()).map(|w| (*w).to_string());
                }
            }
            Message::Tool { tool_call_id, images: kept, .. } if kept.is_empty() => {
                if let Some(found) = images.get(tool_call_id.as_str()) {
                    kept.clone_from(found);
                }
            }
            _ => {}
        }
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
            tool_calls: ids.iter().map(|id| ToolCall::new(*id, "read_file", "{}")).collect(),
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
    fn an_id_used_again_or_shared_keeps_every_result() {
        // Stored before talaria named calls itself: `call_0` in every answer, and two calls of
        // one answer sharing `x`.
        let h = vec![
            Message::user("go"),
            asst_calls(&["call_0"]),
            Message::tool("call_0", "read_file", "first"),
            asst_calls(&["call_0", "call_1"]),
            Message::tool("call_0", "read_file", "second"),
            Message::tool("call_1", "read_file", "third"),
            asst_calls(&["x", "x"]),
            Message::tool("x", "read_file", "fourth"),
            Message::tool("x", "read_file", "fifth"),
            Message::assistant("done"),
        ];
        let fixed = repair(&h);
        assert!(is_valid(&fixed), "{fixed:?}");
        let results: Vec<&str> = fixed.iter().filter(|m| m.role() == Role::Tool).map(Message::content).collect();
        assert_eq!(results, ["first", "second", "third", "fourth", "fifth"]);
    }

    #[test]
    fn the_wire_gets_the_providers_ids_and_tells_shared_ones_apart() {
        let call =
            |id: &str, wire: &str| ToolCall { wire_id: Some(wire.to_string()), ..ToolCall::new(id, "read_file", "{}") };
        let asst =
            |calls| Message::Assistant { content: String::new(), tool_calls: calls, reasoning: None, extra: None };
        let h = vec![
            Message::user("go"),
            asst(vec![call("t1", "call_0"), call("t2", "call_0"), ToolCall::new("t3", "read_file", "{}")]),
            Message::tool("t1", "read_file", "a"),
            Message::tool("t2", "read_file", "b"),
            Message::tool("t3", "read_file", "c"),
            asst(vec![call("t4", "call_0")]),
            Message::tool("t4", "read_file", "d"),
        ];
        let wire = for_wire(repair(&h));
        assert!(is_valid(&wire), "{wire:?}");
        let Message::Assistant { tool_calls, .. } = &wire[1] else { panic!("{wire:?}") };
        let ids: Vec<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_0", "t2", "t3"]);
        assert!(tool_calls.iter().all(|c| c.wire_id.is_none()));
        let results: Vec<(&str, &str)> = wire
            .iter()
            .filter_map(|m| match m {
                Message::Tool { tool_call_id, content, .. } => Some((tool_call_id.as_str(), content.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(results, [("call_0", "a"), ("t2", "b"), ("t3", "c"), ("call_0", "d")]);
    }

    #[test]
    fn validity_checks_pairing() {
        assert!(!is_valid(&[Message::user("a"), asst_calls(&["a"]), Message::user("b")]));
        assert!(!is_valid(&[Message::assistant("hi")]));
        assert!(is_valid(&[Message::user("a"), Message::assistant("b"), Message::user("c")]));
    }
}
