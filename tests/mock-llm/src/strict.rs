//! [`Mode::Strict`](crate::Mode::Strict): Chat Completions requests judged the way
//! llama-cpp-python's OpenAI-compatible server judges them (checked against the real server,
//! `--chat_format chatml-function-calling`; see /work/shared/reference/peers.md):
//!
//! - a message whose `content` is `null` is refused with HTTP 500 and the server's pydantic
//!   message ("Input should be a valid string"); `""` is accepted;
//! - tools offered without `tool_choice` (or with `"none"`) never reach the model: a scripted
//!   tool step is answered with the text [`HIDDEN_TOOLS`] instead.
//!
//! The streaming shapes of that server live with the Chat Completions wire (`wire::chat`).

use serde_json::{Value, json};

/// What the model "says" when the script wanted a tool call but the tools were hidden.
pub const HIDDEN_TOOLS: &str =
    "(strict mock: tools offered without tool_choice are hidden from the model, so it cannot call one)";

/// The server's error body when it refuses `body`, if it does.
pub(crate) fn refusal(body: &Value) -> Option<Value> {
    let messages = body.get("messages").and_then(Value::as_array)?;
    let (index, message) = messages.iter().enumerate().find(|(_, m)| m.get("content").is_some_and(Value::is_null))?;
    let role = message.get("role").and_then(Value::as_str).unwrap_or("unknown");
    let kind = match role {
        "assistant" => "ChatCompletionRequestAssistantMessage",
        "user" => "ChatCompletionRequestUserMessage",
        "system" => "ChatCompletionRequestSystemMessage",
        "tool" => "ChatCompletionRequestToolMessage",
        _ => "ChatCompletionRequestMessage",
    };
    let message = format!(
        "1 validation error for {kind}\ncontent\n  Input should be a valid string \
         [type=string_type, input_value=None, input_type=NoneType] (messages.{index}.content, role {role})"
    );
    Some(json!({"error": {"message": message, "type": "internal_server_error", "param": null, "code": null}}))
}

/// Whether the request offers tools the model will not see.
pub(crate) fn tools_hidden(body: &Value) -> bool {
    let offers = body.get("tools").and_then(Value::as_array).is_some_and(|tools| !tools.is_empty());
    let choice = body.get("tool_choice");
    offers && (choice.is_none_or(Value::is_null) || choice.and_then(Value::as_str) == Some("none"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_content_is_refused_and_empty_text_is_not() {
        let body = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": []},
        ]});
        let refused = refusal(&body).expect("refused");
        let message = refused["error"]["message"].as_str().expect("message");
        assert!(message.contains("Input should be a valid string") && message.contains("messages.1.content"));
        let fine = json!({"messages": [{"role": "assistant", "content": "", "tool_calls": []}]});
        assert_eq!(refusal(&fine), None);
    }

    #[test]
    fn tools_need_a_tool_choice_to_be_seen() {
        let tools = json!([{"type": "function", "function": {"name": "x"}}]);
        assert!(tools_hidden(&json!({"tools": tools})));
        assert!(tools_hidden(&json!({"tools": tools, "tool_choice": "none"})));
        assert!(!tools_hidden(&json!({"tools": tools, "tool_choice": "auto"})));
        assert!(!tools_hidden(&json!({"tools": tools, "tool_choice": "required"})));
        assert!(!tools_hidden(&json!({"tools": []})));
    }
}
