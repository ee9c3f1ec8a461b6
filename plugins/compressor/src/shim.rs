//! Stand-ins for the talaria-sdk 0.2.0 types until that SDK lands; same names, same fields.

pub mod message {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Role {
        System,
        User,
        Assistant,
        Tool,
    }

    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ToolCall {
        pub id: String,
        pub name: String,
        pub arguments: String,
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Message {
        pub role: Role,
        pub content: String,
        pub tool_calls: Vec<ToolCall>,
        pub tool_call_id: String,
        pub name: String,
        pub extra: String,
    }

    impl Message {
        fn of(role: Role, text: impl Into<String>) -> Self {
            Self {
                role,
                content: text.into(),
                tool_calls: Vec::new(),
                tool_call_id: String::new(),
                name: String::new(),
                extra: String::new(),
            }
        }
        pub fn user(text: impl Into<String>) -> Self {
            Self::of(Role::User, text)
        }
        pub fn assistant(text: impl Into<String>) -> Self {
            Self::of(Role::Assistant, text)
        }
        pub fn system(text: impl Into<String>) -> Self {
            Self::of(Role::System, text)
        }
        pub fn tool(call_id: impl Into<String>, name: impl Into<String>, text: impl Into<String>) -> Self {
            Self { tool_call_id: call_id.into(), name: name.into(), ..Self::of(Role::Tool, text) }
        }
        pub fn is_tool_call(&self) -> bool {
            !self.tool_calls.is_empty()
        }
    }

    #[derive(Debug, Clone, Default)]
    pub struct Session {
        pub session_id: String,
        pub platform: String,
        pub workspace: String,
        pub model: String,
    }
}

pub mod llm {
    use super::message::Role;

    #[derive(Debug, Clone)]
    pub struct Request {
        pub purpose: String,
        pub messages: Vec<(Role, String)>,
        pub max_tokens: Option<u32>,
        pub temperature: Option<f32>,
    }

    impl Request {
        pub fn new(purpose: impl Into<String>) -> Self {
            Self { purpose: purpose.into(), messages: Vec::new(), max_tokens: None, temperature: None }
        }
        pub fn system(mut self, text: impl Into<String>) -> Self {
            self.messages.push((Role::System, text.into()));
            self
        }
        pub fn user(mut self, text: impl Into<String>) -> Self {
            self.messages.push((Role::User, text.into()));
            self
        }
        pub fn max_tokens(mut self, n: u32) -> Self {
            self.max_tokens = Some(n);
            self
        }
    }

    #[derive(Debug, Clone)]
    pub struct Completion {
        pub text: String,
        pub model: String,
        pub input_tokens: u64,
        pub output_tokens: u64,
    }

    #[derive(Debug, Clone)]
    pub enum LlmError {
        Denied(String),
        Invalid(String),
        Failed(String),
    }
}

pub mod context {
    use super::message::{Message, Session};

    #[derive(Debug, Clone, Copy, Default)]
    pub struct Status {
        pub prompt_tokens: u64,
        pub context_length: u64,
        pub message_count: u32,
        pub compressions: u32,
    }

    pub struct CompressRequest {
        pub messages: Vec<Message>,
        pub focus: Option<String>,
        pub status: Status,
        pub force: bool,
        pub memory_context: String,
        pub carry: String,
        pub session: Session,
    }

    pub struct Compressed {
        pub messages: Vec<Message>,
        pub note: String,
    }
}
