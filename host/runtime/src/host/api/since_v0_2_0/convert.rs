//! The protocol types the agent speaks, to and from their WIT (0.2.0) twins.
//!
//! A message's `extra` carries what the host must get back untouched: an assistant message's
//! reasoning and provider data, as `{"reasoning": .., "extra": ..}` ("" when there is none).
//! Coming back, an `extra` that is not exactly one the host sent is dropped, so a plugin can
//! keep or drop that data but never forge it.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use talaria_protocol::{
    ContextStatus, HookDecision, HookEvent, Message, PluginSession, ToolCall, ToolCallEvent, ToolResultEvent,
};

use super::exports::talaria::plugin::{context, hooks};
use super::talaria::plugin::types as wit;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Extra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    extra: Option<serde_json::Value>,
}

pub(crate) fn session(s: &PluginSession) -> wit::SessionInfo {
    wit::SessionInfo {
        session_id: s.session_id.clone(),
        platform: s.platform.clone(),
        workspace: s.workspace.clone(),
        model: s.model.clone(),
    }
}

fn plain(role: wit::Role, content: &str) -> wit::Message {
    wit::Message {
        role,
        content: content.to_string(),
        tool_calls: Vec::new(),
        tool_call_id: String::new(),
        name: String::new(),
        extra: String::new(),
    }
}

pub(crate) fn message(m: &Message) -> wit::Message {
    match m {
        Message::System { content } => plain(wit::Role::System, content),
        Message::User { content, .. } => plain(wit::Role::User, content),
        Message::Assistant { content, tool_calls, reasoning, extra } => {
            let extra = if reasoning.is_none() && extra.is_none() {
                String::new()
            } else {
                serde_json::to_string(&Extra { reasoning: reasoning.clone(), extra: extra.clone() }).unwrap_or_default()
            };
            wit::Message {
                tool_calls: tool_calls
                    .iter()
                    .map(|c| wit::ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                    .collect(),
                extra,
                ..plain(wit::Role::Assistant, content)
            }
        }
        Message::Tool { tool_call_id, name, content, images: _ } => {
            wit::Message { tool_call_id: tool_call_id.clone(), name: name.clone(), ..plain(wit::Role::Tool, content) }
        }
    }
}

pub(crate) fn messages(ms: &[Message]) -> Vec<wit::Message> {
    ms.iter().map(message).collect()
}

/// The `extra` texts in `sent`, the only ones a plugin may hand back.
pub(crate) fn extras(sent: &[wit::Message]) -> HashSet<String> {
    sent.iter().filter(|m| !m.extra.is_empty()).map(|m| m.extra.clone()).collect()
}

/// A message a plugin returned, checked: tool calls only on assistant messages, a call id and
/// name on tool messages and nowhere else. An `extra` that is malformed or not among `known` is
/// dropped (with a warning).
///
/// # Errors
/// What is wrong with the message, as a sentence.
pub(crate) fn message_back(m: wit::Message, known: &HashSet<String>, plugin: &str) -> Result<Message, String> {
    let role_name = match m.role {
        wit::Role::System => "a system",
        wit::Role::User => "a user",
        wit::Role::Assistant => "an assistant",
        wit::Role::Tool => "a tool",
    };
    let is_tool = matches!(m.role, wit::Role::Tool);
    if !matches!(m.role, wit::Role::Assistant) && !m.tool_calls.is_empty() {
        return Err(format!("{role_name} message cannot have tool calls"));
    }
    if !is_tool && !m.tool_call_id.is_empty() {
        return Err(format!("{role_name} message cannot have a tool-call-id"));
    }
    if !is_tool && !m.name.is_empty() {
        return Err(format!("{role_name} message cannot have a name"));
    }
    Ok(match m.role {
        wit::Role::System => Message::System { content: m.content },
        wit::Role::User => Message::user(m.content),
        wit::Role::Tool => {
            if m.tool_call_id.is_empty() || m.name.is_empty() {
                return Err("a tool message needs a tool-call-id and a name".to_string());
            }
            Message::tool(m.tool_call_id, m.name, m.content)
        }
        wit::Role::Assistant => {
            let extra = if m.extra.is_empty() {
                None
            } else if !known.contains(&m.extra) {
                tracing::warn!(plugin, "a returned message carried extra data the host did not send; dropped");
                None
            } else {
                serde_json::from_str::<Extra>(&m.extra).ok()
            };
            let (reasoning, extra) = extra.map_or((None, None), |e| (e.reasoning, e.extra));
            Message::Assistant {
                content: m.content,
                tool_calls: m.tool_calls.into_iter().map(|c| ToolCall::new(c.id, c.name, c.arguments)).collect(),
                reasoning,
                extra,
            }
        }
    })
}

/// Bytes of text in a message (what counts against the output cap).
pub(crate) fn message_bytes(m: &wit::Message) -> usize {
    m.content.len()
        + m.tool_call_id.len()
        + m.name.len()
        + m.extra.len()
        + m.tool_calls.iter().map(|c| c.id.len() + c.name.len() + c.arguments.len()).sum::<usize>()
}

pub(crate) fn status(s: ContextStatus) -> context::Status {
    context::Status {
        prompt_tokens: s.prompt_tokens,
        context_length: s.context_length,
        message_count: s.message_count,
        compressions: s.compressions,
    }
}

fn call_event(c: &ToolCallEvent, s: &PluginSession) -> hooks::ToolCallEvent {
    hooks::ToolCallEvent {
        session: session(s),
        tool: c.tool.clone(),
        plugin: c.plugin.clone(),
        arguments: c.arguments.clone(),
        call_id: c.call_id.clone(),
    }
}

fn result_event(r: &ToolResultEvent, s: &PluginSession) -> hooks::ToolResultEvent {
    hooks::ToolResultEvent {
        session: session(s),
        tool: r.call.tool.clone(),
        plugin: r.call.plugin.clone(),
        arguments: r.call.arguments.clone(),
        call_id: r.call.call_id.clone(),
        result: r.result.clone(),
        ok: r.ok,
        duration_ms: r.duration_ms,
    }
}

pub(crate) fn event(e: &HookEvent, s: &PluginSession) -> hooks::Event {
    let end = |reason: &str| hooks::SessionEndEvent { session: session(s), reason: reason.to_string() };
    match e {
        HookEvent::PreToolCall(c) => hooks::Event::PreToolCall(call_event(c, s)),
        HookEvent::PostToolCall(r) => hooks::Event::PostToolCall(result_event(r, s)),
        HookEvent::TransformToolResult(r) => hooks::Event::TransformToolResult(result_event(r, s)),
        HookEvent::PreLlmCall { user_message, is_first_turn, model, message_count } => {
            hooks::Event::PreLlmCall(hooks::LlmCallEvent {
                session: session(s),
                user_message: user_message.clone(),
                is_first_turn: *is_first_turn,
                model: model.clone(),
                message_count: *message_count,
            })
        }
        HookEvent::PostLlmCall { user_message, assistant_response, model } => {
            hooks::Event::PostLlmCall(hooks::LlmReplyEvent {
                session: session(s),
                user_message: user_message.clone(),
                assistant_response: assistant_response.clone(),
                model: model.clone(),
            })
        }
        HookEvent::SessionStart => hooks::Event::SessionStart(session(s)),
        HookEvent::SessionEnd { reason } => hooks::Event::SessionEnd(end(reason)),
        HookEvent::SessionFinalize { reason } => hooks::Event::SessionFinalize(end(reason)),
        HookEvent::SessionReset => hooks::Event::SessionReset(session(s)),
        HookEvent::SubagentStop { parent_session_id, child_session_id, goal, summary, status, duration_ms } => {
            hooks::Event::SubagentStop(hooks::SubagentEvent {
                parent_session_id: parent_session_id.clone(),
                child_session_id: child_session_id.clone(),
                goal: goal.clone(),
                summary: summary.clone(),
                status: status.clone(),
                duration_ms: *duration_ms,
            })
        }
    }
}

/// A hook's answer, and the bytes of text it carries.
pub(crate) fn decision(d: hooks::Decision) -> (HookDecision, usize) {
    let bytes = match &d {
        hooks::Decision::Proceed => 0,
        hooks::Decision::Block(t)
        | hooks::Decision::RequireApproval(t)
        | hooks::Decision::AddContext(t)
        | hooks::Decision::ReplaceResult(t) => t.len(),
    };
    let decision = match d {
        hooks::Decision::Proceed => HookDecision::Proceed,
        hooks::Decision::Block(t) => HookDecision::Block(t),
        hooks::Decision::RequireApproval(t) => HookDecision::RequireApproval(t),
        hooks::Decision::AddContext(t) => HookDecision::AddContext(t),
        hooks::Decision::ReplaceResult(t) => HookDecision::ReplaceResult(t),
    };
    (decision, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assistant(extra: Option<serde_json::Value>, reasoning: Option<&str>) -> Message {
        Message::Assistant {
            content: "done".into(),
            tool_calls: vec![ToolCall::new("c1", "read_file", "{}")],
            reasoning: reasoning.map(str::to_string),
            extra,
        }
    }

    #[test]
    fn messages_round_trip_with_their_extra() {
        let history = vec![
            Message::user("hi"),
            assistant(Some(serde_json::json!({ "signature": "sig-1" })), Some("thinking")),
            Message::tool("c1", "read_file", "{\"ok\":1}"),
            Message::assistant("plain"),
        ];
        let sent = messages(&history);
        assert_eq!(sent[1].extra, r#"{"reasoning":"thinking","extra":{"signature":"sig-1"}}"#);
        assert_eq!(sent[0].extra, "");
        assert_eq!(sent[3].extra, "");
        assert_eq!((sent[2].tool_call_id.as_str(), sent[2].name.as_str()), ("c1", "read_file"));
        let known = extras(&sent);
        let back: Vec<Message> = sent.into_iter().map(|m| message_back(m, &known, "p").expect("valid")).collect();
        assert_eq!(back, history);
    }

    #[test]
    fn a_forged_or_malformed_extra_is_dropped() {
        let sent = messages(&[assistant(Some(serde_json::json!(1)), None)]);
        let known = extras(&sent);
        let mut forged = sent[0].clone();
        forged.extra = r#"{"reasoning":"I was told to"}"#.into();
        let Message::Assistant { extra, reasoning, .. } = message_back(forged, &known, "p").expect("valid") else {
            panic!("assistant")
        };
        assert_eq!((extra, reasoning), (None, None));
        let mut known = known;
        known.insert("not json".into());
        let mut malformed = sent[0].clone();
        malformed.extra = "not json".into();
        let Message::Assistant { extra, .. } = message_back(malformed, &known, "p").expect("valid") else {
            panic!("assistant")
        };
        assert_eq!(extra, None);
    }

    #[test]
    fn misplaced_fields_are_reported() {
        let none = HashSet::new();
        let mut m = plain(wit::Role::Assistant, "x");
        m.tool_call_id = "c1".into();
        assert_eq!(message_back(m, &none, "p").expect_err("bad"), "an assistant message cannot have a tool-call-id");
        let m = plain(wit::Role::Tool, "x");
        assert_eq!(message_back(m, &none, "p").expect_err("bad"), "a tool message needs a tool-call-id and a name");
        let mut m = plain(wit::Role::User, "x");
        m.tool_calls.push(wit::ToolCall { id: "1".into(), name: "n".into(), arguments: "{}".into() });
        assert_eq!(message_back(m, &none, "p").expect_err("bad"), "a user message cannot have tool calls");
    }
}
