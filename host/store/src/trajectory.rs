//! Sessions as training trajectories in the ShareGPT layout the reference agent writes: one JSON
//! object per session, `{"conversations": [...], "timestamp", "model", "completed"}`, each turn
//! `{"from": "system"|"human"|"gpt"|"tool", "value": text}`.
//!
//! - The system turn is the prompt the session's model was sent.
//! - A `gpt` turn starts with a `<think>` block (the model's reasoning, or an empty one), then its
//!   text, then one `<tool_call>` block per call holding `{"name", "arguments"}` with the
//!   arguments as a JSON object (malformed ones as `{}`), in the order the model made them.
//! - The results of one batch of calls are one `tool` turn: a `<tool_response>` block per
//!   result, `{"tool_call_id", "name", "content"}`, `content` parsed when it is JSON.
//! - `completed` is whether the session's last message is an answer with no pending call.
//!
//! ```
//! use talaria_protocol::{Message, ToolCall};
//! let messages = vec![
//!     Message::user("list the files"),
//!     Message::Assistant {
//!         content: String::new(),
//!         tool_calls: vec![ToolCall::new("c1", "terminal", r#"{"command":"ls"}"#)],
//!         reasoning: None,
//!         extra: None,
//!     },
//!     Message::tool("c1", "terminal", r#"{"exit_code":0,"output":"a.txt"}"#),
//!     Message::assistant("There is a.txt."),
//! ];
//! let turns = talaria_store::trajectory::conversations("You are talaria.", &messages);
//! assert_eq!(turns.len(), 5);
//! assert_eq!(turns[2]["value"], "<think>\n</think>\n<tool_call>\n{\"name\":\"terminal\",\"arguments\":{\"command\":\"ls\"}}\n</tool_call>");
//! assert!(turns[3]["value"].as_str().unwrap().starts_with("<tool_response>\n{\"tool_call_id\":\"c1\""));
//! ```

use serde_json::{Value, json};
use talaria_protocol::Message;

use crate::sessions::{SessionInfo, StoredMessage};

/// The trajectory of one session, as one JSON object (a line of the JSONL export).
pub fn session(info: &SessionInfo, system_prompt: &str, messages: &[StoredMessage]) -> Value {
    let messages: Vec<Message> = messages.iter().map(|m| m.message.clone()).collect();
    let completed = matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty());
    let timestamp = jiff::Timestamp::from_millisecond(info.started_at).map(|t| t.to_string()).unwrap_or_default();
    json!({
        "conversations": conversations(system_prompt, &messages),
        "timestamp": timestamp,
        "model": info.model,
        "completed": completed,
    })
}

/// The turns of a conversation whose system prompt was `system_prompt`.
pub fn conversations(system_prompt: &str, messages: &[Message]) -> Vec<Value> {
    let mut turns = vec![turn("system", system_prompt.to_string())];
    let mut results: Vec<String> = Vec::new();
    for message in messages {
        if !matches!(message, Message::Tool { .. }) && !results.is_empty() {
            turns.push(turn("tool", std::mem::take(&mut results).join("\n")));
        }
        match message {
            Message::System { content } => turns.push(turn("system", content.clone())),
            Message::User { content, .. } => turns.push(turn("human", content.clone())),
            Message::Assistant { content, tool_calls, reasoning, .. } => {
                let mut value = format!("<think>\n{}</think>\n", reasoning.as_deref().map(think).unwrap_or_default());
                if !content.trim().is_empty() {
                    value.push_str(content.trim_end());
                    value.push('\n');
                }
                for call in tool_calls {
                    let arguments = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    // Keys in the reference's order: name, then arguments.
                    let block = format!("{{\"name\":{},\"arguments\":{arguments}}}", Value::from(call.name.as_str()));
                    value.push_str(&format!("<tool_call>\n{block}\n</tool_call>\n"));
                }
                turns.push(turn("gpt", value.trim_end().to_string()));
            }
            Message::Tool { tool_call_id, name, content, .. } => {
                let parsed = content
                    .trim_start()
                    .starts_with(['{', '['])
                    .then(|| serde_json::from_str::<Value>(content).ok())
                    .flatten()
                    .unwrap_or_else(|| Value::String(content.clone()));
                let block = format!(
                    "{{\"tool_call_id\":{},\"name\":{},\"content\":{parsed}}}",
                    Value::from(tool_call_id.as_str()),
                    Value::from(name.as_str())
                );
                results.push(format!("<tool_response>\n{block}\n</tool_response>"));
            }
        }
    }
    if !results.is_empty() {
        turns.push(turn("tool", results.join("\n")));
    }
    turns
}

/// Reasoning inside `<think>`, ending with a newline.
fn think(reasoning: &str) -> String {
    let text = reasoning.trim();
    if text.is_empty() { String::new() } else { format!("{text}\n") }
}

fn turn(from: &str, value: String) -> Value {
    json!({ "from": from, "value": value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_protocol::ToolCall;

    fn calls(ids: &[(&str, &str, &str)]) -> Message {
        Message::Assistant {
            content: "Let me look.".into(),
            tool_calls: ids.iter().map(|(id, name, args)| ToolCall::new(*id, *name, *args)).collect(),
            reasoning: Some("The user wants two files.".into()),
            extra: None,
        }
    }

    #[test]
    fn a_batch_of_calls_is_one_gpt_turn_and_its_results_one_tool_turn_in_order() {
        let messages = vec![
            Message::user("read a and b"),
            calls(&[("c1", "read_file", r#"{"path":"a"}"#), ("c2", "read_file", "not json")]),
            Message::tool("c1", "read_file", "     1\tA"),
            Message::tool("c2", "read_file", r#"{"error":"no such file"}"#),
            Message::assistant("a says A; b is missing."),
        ];
        let turns = conversations("SYSTEM", &messages);
        let from: Vec<&str> = turns.iter().map(|t| t["from"].as_str().unwrap_or_default()).collect();
        assert_eq!(from, ["system", "human", "gpt", "tool", "gpt"]);
        assert_eq!(turns[0]["value"], "SYSTEM");
        assert_eq!(
            turns[2]["value"],
            "<think>\nThe user wants two files.\n</think>\nLet me look.\n<tool_call>\n{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"read_file\",\"arguments\":{}}\n</tool_call>"
        );
        assert_eq!(
            turns[3]["value"],
            "<tool_response>\n{\"tool_call_id\":\"c1\",\"name\":\"read_file\",\"content\":\"     1\\tA\"}\n</tool_response>\n<tool_response>\n{\"tool_call_id\":\"c2\",\"name\":\"read_file\",\"content\":{\"error\":\"no such file\"}}\n</tool_response>"
        );
        assert_eq!(turns[4]["value"], "<think>\n</think>\na says A; b is missing.");
    }

    #[test]
    fn results_at_the_end_still_make_a_tool_turn() {
        let messages =
            vec![Message::user("go"), calls(&[("c1", "terminal", "{}")]), Message::tool("c1", "terminal", "ok")];
        let turns = conversations("S", &messages);
        assert_eq!(turns.last().map(|t| t["from"].clone()), Some(json!("tool")));
    }
}
