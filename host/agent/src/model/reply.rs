//! What an adapter collected from one answer, and how it becomes a [`ModelReply`].
//!
//! Each wire format fills a [`Collected`] (from stream events or a whole JSON body) and calls
//! [`Collected::finish`], which applies the rules common to all formats: an answer with no text
//! and no tool calls is [`ModelError::Empty`], every tool call gets talaria's own id (the
//! provider's kept as its `wire_id`), reasoning is kept
//! only when there is some. [`estimated_usage`] stands in for the usage of a provider that
//! reported none.

use serde_json::Value;
use talaria_protocol::{Image, Message, ToolCall, Usage};

use super::{ModelError, ModelReply, ModelRequest, Provider};

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
    pub(crate) fn finish(mut self, provider: &Provider, url: &str) -> Result<ModelReply, ModelError> {
        if let Some(nameless) = self.tool_calls.iter().position(|call| call.name.trim().is_empty()) {
            return Err(ModelError::Malformed {
                provider: provider.name.clone(),
                url: url.to_string(),
                message: format!("tool call #{} has no function name", nameless + 1),
            });
        }
        if self.text.trim().is_empty() && self.tool_calls.is_empty() {
            let reason = self.finish_reason.as_deref().unwrap_or("none given");
            let message = if is_truncation(self.finish_reason.as_deref()) {
                let limit = provider.max_tokens.map_or_else(|| "the server's default".to_string(), |n| n.to_string());
                format!(
                    "the output-token limit ({limit}; `max_tokens` under [model]) ran out before any answer \
                     (stop reason `{reason}`{})",
                    if self.reasoning.is_empty() { "" } else { ", all of it spent on reasoning" }
                )
            } else {
                format!("no text and no tool calls (stop reason `{reason}`)")
            };
            return Err(ModelError::Empty { provider: provider.name.clone(), url: url.to_string(), message });
        }
        // talaria's own id for every call; the provider's is kept for the wire only.
        for call in &mut self.tool_calls {
            let wire = std::mem::replace(&mut call.id, new_call_id());
            call.wire_id = (!wire.trim().is_empty()).then_some(wire);
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

/// Whether a stop reason says the output-token limit cut the answer.
pub(crate) fn is_truncation(reason: Option<&str>) -> bool {
    matches!(reason, Some("length" | "max_tokens" | "max_output_tokens"))
}

/// Usage estimated at 4 characters a token, marked as an estimate: the request's system
/// prompt, tool schemas and messages in, the answer's text, reasoning and tool calls out.
pub(crate) fn estimated_usage(request: &ModelRequest<'_>, answer: &Message) -> Usage {
    let tools = serde_json::to_string(request.tools).map_or(0, |t| t.len());
    let input: usize = request.system.len() + tools + request.messages.iter().map(message_chars).sum::<usize>();
    let output = message_chars(answer)
        + match answer {
            Message::Assistant { reasoning: Some(r), .. } => r.len(),
            _ => 0,
        };
    let tokens = |chars: usize| u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX);
    Usage { input_tokens: tokens(input), output_tokens: tokens(output), estimated: true, ..Usage::default() }
}

/// Characters of a message as the model sees it (content, tool calls, a little framing).
fn message_chars(message: &Message) -> usize {
    match message {
        Message::Assistant { content, tool_calls, .. } => {
            content.len() + tool_calls.iter().map(|c| c.name.len() + c.arguments.len() + 16).sum::<usize>()
        }
        other => other.content().len() + 8,
    }
}

/// talaria's id for a tool call: unique in its session, whatever the provider numbered it.
pub(crate) fn new_call_id() -> String {
    format!("call_{:016x}", fastrand::u64(..))
}

/// A tool result's text as `provider` gets it: with a note naming the images it returned when
/// the model does not take images (a model that does gets them beside the text).
pub(crate) fn tool_text<'a>(provider: &Provider, content: &'a str, images: &[Image]) -> std::borrow::Cow<'a, str> {
    if images.is_empty() || provider.vision {
        return content.into();
    }
    let kinds: Vec<&str> = images.iter().map(|i| i.media_type.as_str()).collect();
    let (n, them) = (crate::images::counted(images.len()), if images.len() == 1 { "it" } else { "them" });
    format!(
        "{content}\n[The tool returned {n} ({}), not shown: {} does not take images, as far as talaria knows. \
         Tell the user; if the model does take images, they can set vision = true under [model] in config.toml \
         and ask again to see {them}.]",
        kinds.join(", "),
        provider.model
    )
    .into()
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
