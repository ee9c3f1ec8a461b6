//! The conversation as the agent keeps it: OpenAI-style messages, whatever the provider's wire format.

use serde::{Deserialize, Serialize};

/// One message of a conversation. Role order is the loop's business (see `talaria-agent`): after
/// the system prompt, user and assistant alternate; an assistant message with tool calls is
/// followed by one tool message per call, then by an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
        /// Images sent with the text (to a model that takes them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
    },
    Assistant {
        /// Visible text; empty when the model only called tools.
        #[serde(default)]
        content: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The model's reasoning, when the provider returns it as text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        /// Provider-specific data that must be sent back verbatim on later calls (Anthropic
        /// thinking blocks with signatures, Responses reasoning items). Never shown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        extra: Option<serde_json::Value>,
    },
    Tool {
        tool_call_id: String,
        /// The tool that produced it (Anthropic and Responses do not need it; search and UIs do).
        name: String,
        /// Always a JSON string or text the model can read; errors are `{"error": "..."}`.
        content: String,
        /// Images the tool returned (an MCP tool's image content), sent to a model that takes
        /// images and named in a note to one that does not.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
    },
}

/// An image in a user message or a tool result: its media type (`image/png`, `image/jpeg`, `image/gif`,
/// `image/webp`) and its bytes in standard base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub media_type: String,
    pub data: String,
}

impl Image {
    /// A `data:` URL of the image, as OpenAI's wire formats take it.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.data)
    }
}

/// A call the model asked for. `arguments` is the model's raw JSON text: it may be malformed,
/// and the loop answers that with an error the model can act on.
///
/// `id` is talaria's own name for the call, unique in its session: results, approvals, editors
/// and the store know the call by it. The provider's id is `wire_id`, sent back to the provider
/// only: servers number calls per answer (`call_0`, `call_1` in every answer) or give two calls
/// one id, so their ids cannot tell calls apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
    /// The id the provider gave the call, when it is not `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_id: Option<String>,
}

impl ToolCall {
    /// A call known by `id` everywhere, the provider included.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self { id: id.into(), name: name.into(), arguments: arguments.into(), wire_id: None }
    }

    /// The id the provider knows the call by.
    pub fn wire(&self) -> &str {
        self.wire_id.as_deref().unwrap_or(&self.id)
    }
}

/// Which side spoke, for storage and filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }

    /// The inverse of [`Role::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "system" => Some(Self::System),
            "user" => Some(Self::User),
            "assistant" => Some(Self::Assistant),
            "tool" => Some(Self::Tool),
            _ => None,
        }
    }
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Self::User { content: content.into(), images: Vec::new() }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::System { content: content.into() }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant { content: content.into(), tool_calls: Vec::new(), reasoning: None, extra: None }
    }

    pub fn tool(tool_call_id: impl Into<String>, name: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool { tool_call_id: tool_call_id.into(), name: name.into(), content: content.into(), images: Vec::new() }
    }

    pub fn role(&self) -> Role {
        match self {
            Self::System { .. } => Role::System,
            Self::User { .. } => Role::User,
            Self::Assistant { .. } => Role::Assistant,
            Self::Tool { .. } => Role::Tool,
        }
    }

    /// The text of the message (for tool messages, the result).
    pub fn content(&self) -> &str {
        match self {
            Self::System { content } | Self::User { content, .. } | Self::Tool { content, .. } => content,
            Self::Assistant { content, .. } => content,
        }
    }

    /// The tool calls of an assistant message; empty for every other role.
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            Self::System { .. } | Self::User { .. } | Self::Tool { .. } => &[],
        }
    }
}

/// Tokens one model call (or a whole session) used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens served from the provider's prompt cache (included in `input_tokens`).
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Output tokens spent on reasoning (included in `output_tokens`).
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Some of these counts are talaria's estimates (about 4 characters a token), because the
    /// provider reported no usage (a stream without a usage chunk). Show them as `~N`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// Adds `other`'s counts; the sum is an estimate when either part is.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.estimated |= other.estimated;
    }

    /// `~` when the counts are estimates, else nothing: a prefix for showing a count.
    ///
    /// ```
    /// let usage = talaria_protocol::Usage { input_tokens: 120, estimated: true, ..Default::default() };
    /// assert_eq!(format!("{}{} in", usage.approx(), usage.input_tokens), "~120 in");
    /// ```
    pub fn approx(&self) -> &'static str {
        if self.estimated { "~" } else { "" }
    }
}

/// A count as people write it: `1234567` as `1,234,567` (token counts, limits, sizes).
///
/// ```
/// assert_eq!(talaria_protocol::thousands(1_234_567), "1,234,567");
/// assert_eq!(talaria_protocol::thousands(999), "999");
/// ```
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_openai_style_json() {
        let m = Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall::new("c1", "read_file", "{\"path\":\"a\"}")],
            reasoning: None,
            extra: None,
        };
        let json = serde_json::to_value(&m).expect("json");
        assert_eq!(json["role"], "assistant");
        assert_eq!(json["tool_calls"][0]["name"], "read_file");
        assert_eq!(serde_json::from_value::<Message>(json).expect("back"), m);
        let t: Message =
            serde_json::from_str(r#"{"role":"tool","tool_call_id":"c1","name":"x","content":"{}"}"#).expect("tool");
        assert_eq!(t.role(), Role::Tool);
    }
}
