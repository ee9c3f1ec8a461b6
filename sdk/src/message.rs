//! The conversation as memory providers, context engines and hooks see it: [`Message`]s with a
//! [`Role`], the [`ToolCall`]s an assistant made, and the [`Session`] a call concerns.
//!
//! ```
//! use talaria_sdk::message::{Message, Role};
//!
//! let history = vec![Message::user("What is in Cargo.toml?"), Message::assistant("A workspace.")];
//! assert_eq!(history[0].role, Role::User);
//! assert!(!history[1].is_tool_call());
//! ```

use crate::__bindings::talaria::plugin::types as wit;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool call an assistant message made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The model's raw JSON arguments (possibly malformed).
    pub arguments: String,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Assistant messages: the tool calls it made, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Tool messages: the id of the call this answers ("" otherwise).
    pub tool_call_id: String,
    /// Tool messages: the tool's name ("" otherwise).
    pub name: String,
    /// Host data (reasoning, provider signatures) as JSON, "" when none. Keep it with its
    /// message, or drop it with the message; never edit it.
    pub extra: String,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: String::new(),
            name: String::new(),
            extra: String::new(),
        }
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, text)
    }

    /// An assistant message without tool calls.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, text)
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, text)
    }

    /// A tool's result, answering the call `call_id` to the tool `name`.
    pub fn tool(call_id: impl Into<String>, name: impl Into<String>, text: impl Into<String>) -> Self {
        Self { tool_call_id: call_id.into(), name: name.into(), ..Self::new(Role::Tool, text) }
    }

    /// An assistant message that called tools (its results follow it).
    pub fn is_tool_call(&self) -> bool {
        self.role == Role::Assistant && !self.tool_calls.is_empty()
    }
}

/// The session a call concerns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Session {
    pub session_id: String,
    /// Where it runs: `cli`, `acp`, `gateway`, `cron` or `subagent`.
    pub platform: String,
    /// Absolute path of the session's working directory.
    pub workspace: String,
    /// The main model's name.
    pub model: String,
}

// Conversions to and from the component types. They stay crate-private so the generated types
// never show in the public API.

impl Role {
    pub(crate) fn from_wit(role: wit::Role) -> Self {
        match role {
            wit::Role::System => Self::System,
            wit::Role::User => Self::User,
            wit::Role::Assistant => Self::Assistant,
            wit::Role::Tool => Self::Tool,
        }
    }

    pub(crate) fn to_wit(self) -> wit::Role {
        match self {
            Self::System => wit::Role::System,
            Self::User => wit::Role::User,
            Self::Assistant => wit::Role::Assistant,
            Self::Tool => wit::Role::Tool,
        }
    }
}

impl Message {
    pub(crate) fn from_wit(m: wit::Message) -> Self {
        Self {
            role: Role::from_wit(m.role),
            content: m.content,
            tool_calls: m
                .tool_calls
                .into_iter()
                .map(|c| ToolCall { id: c.id, name: c.name, arguments: c.arguments })
                .collect(),
            tool_call_id: m.tool_call_id,
            name: m.name,
            extra: m.extra,
        }
    }

    pub(crate) fn into_wit(self) -> wit::Message {
        wit::Message {
            role: self.role.to_wit(),
            content: self.content,
            tool_calls: self
                .tool_calls
                .into_iter()
                .map(|c| wit::ToolCall { id: c.id, name: c.name, arguments: c.arguments })
                .collect(),
            tool_call_id: self.tool_call_id,
            name: self.name,
            extra: self.extra,
        }
    }

    pub(crate) fn list_from_wit(messages: Vec<wit::Message>) -> Vec<Self> {
        messages.into_iter().map(Self::from_wit).collect()
    }
}

impl Session {
    pub(crate) fn from_wit(s: wit::SessionInfo) -> Self {
        Self { session_id: s.session_id, platform: s.platform, workspace: s.workspace, model: s.model }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_set_role_and_tool_fields() {
        let t = Message::tool("call_1", "read_file", "ok");
        assert_eq!(
            (t.role, t.tool_call_id.as_str(), t.name.as_str(), t.content.as_str()),
            (Role::Tool, "call_1", "read_file", "ok")
        );
        assert_eq!(Message::system("s").role, Role::System);
        let mut a = Message::assistant("");
        assert!(!a.is_tool_call());
        a.tool_calls.push(ToolCall { id: "c".into(), name: "n".into(), arguments: "{}".into() });
        assert!(a.is_tool_call());
        let mut u = Message::user("hi");
        u.tool_calls = a.tool_calls.clone();
        assert!(!u.is_tool_call(), "only assistant messages make tool calls");
    }

    #[test]
    fn messages_survive_the_component_types() {
        let mut m = Message::assistant("calling");
        m.tool_calls.push(ToolCall { id: "c1".into(), name: "search".into(), arguments: "{\"q\":1}".into() });
        m.extra = "{\"reasoning\":\"r\"}".into();
        for msg in [m, Message::tool("c1", "search", "found"), Message::user("u"), Message::system("s")] {
            assert_eq!(Message::from_wit(msg.clone().into_wit()), msg);
        }
    }
}
