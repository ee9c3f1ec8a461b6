//! What an adapter collected from one answer, and how it becomes a [`ModelReply`].
//!
//! Each wire format fills a [`Collected`] (from stream events or a whole JSON body) and calls
//! [`Collected::finish`], which applies the rules common to all formats: an answer with no text
//! and no tool calls is [`ModelError::Empty`], tool calls without an id get one, reasoning is kept
//! only when there is some.

use serde_json::Value;
use talaria_protocol::{Message, ToolCall, Usage};

use super::{ModelError, ModelReply, Provider};

#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub extra: Option<Value>,
    pub usage: Usage,
    pub finish_reason: Option<String>,
    pub model: Option<String>,
}

impl Collected {
    pub(crate) fn finish(mut self, provider: &Provider) -> Result<ModelReply, ModelError> {
        if let Some(nameless) = self.tool_calls.iter().position(|call| call.name.trim().is_empty()) {
            return Err(ModelError::Protocol {
                provider: provider.name.clone(),
                message: format!("tool call #{} has no function name", nameless + 1),
            });
        }
        if self.text.trim().is_empty() && self.tool_calls.is_empty() {
            return Err(ModelError::Empty { provider: provider.name.clone() });
        }
        for call in &mut self.tool_calls {
            if call.id.trim().is_empty() {
                call.id = new_call_id();
            }
        }
        let reasoning = (!self.reasoning.trim().is_empty()).then_some(self.reasoning);
        Ok(ModelReply {
            message: Message::Assistant {
                content: self.text,
                tool_calls: self.tool_calls,
                reasoning,
                extra: self.extra,
            },
            usage: self.usage,
            finish_reason: self.finish_reason,
            model: self.model.filter(|m| !m.is_empty()).unwrap_or_else(|| provider.model.clone()),
        })
    }
}

/// An id for a tool call the provider sent without one (some local servers do).
pub(crate) fn new_call_id() -> String {
    format!("call_{:016x}", fastrand::u64(..))
}

/// A JSON string as text, anything else (an object from a lenient server) serialised.
pub(crate) fn as_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A token count at `path`, 0 when absent or null.
pub(crate) fn count(value: &Value, path: &[&str]) -> u64 {
    path.iter().try_fold(value, |v, key| v.get(*key)).and_then(Value::as_u64).unwrap_or(0)
}
