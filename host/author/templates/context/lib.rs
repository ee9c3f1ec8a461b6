//! A talaria context engine: when the prompt nears the model's context window, it keeps the last
//! messages and replaces the rest with a short note of what was dropped.
//!
//! One engine is active at a time (`[context] engine = "{{name}}"` in config.toml). Settings come
//! from `[plugins.{{name}}.config]`: `threshold` (the share of the context window that triggers
//! it, default 0.75) and `keep` (messages kept, default 8).
//!
//! The history it returns must be a valid conversation: it starts with a user message, roles
//! alternate properly, and every tool call is followed by its results. The host checks, and
//! keeps the old history when it is not.

wit_bindgen::generate!({ path: "wit", world: "context-engine-plugin" });

use exports::talaria::plugin::context::{CompressRequest, Compressed, Guest, Status};
use talaria::plugin::config;
use talaria::plugin::log::{Level, log};
use talaria::plugin::types::{Message, Role, SessionInfo};

/// `(threshold, keep)` from the plugin's config, or their defaults.
fn settings() -> (f64, usize) {
    let value = |key: &str| config::get(key).and_then(|raw| serde_json::from_str::<serde_json::Value>(&raw).ok());
    let threshold = value("threshold").and_then(|v| v.as_f64()).unwrap_or(0.75);
    let keep = value("keep").and_then(|v| v.as_u64()).map_or(8, |k| k as usize).max(2);
    (threshold, keep)
}

/// Where the kept part starts: a user message, so the history stays valid (0: keep it all).
fn cut(messages: &[Message], keep: usize) -> usize {
    let start = messages.len().saturating_sub(keep);
    let is_user = |i: &usize| matches!(messages[*i].role, Role::User);
    (start..messages.len()).find(is_user).or_else(|| (0..start).rev().find(is_user)).unwrap_or(0)
}

struct Plugin;

impl Guest for Plugin {
    fn should_compress(status: Status, _session: SessionInfo) -> bool {
        let (threshold, _) = settings();
        status.context_length > 0 && status.prompt_tokens as f64 >= threshold * status.context_length as f64
    }

    fn compress(request: CompressRequest) -> Result<Compressed, String> {
        let (_, keep) = settings();
        let mut messages = request.messages;
        let start = cut(&messages, keep);
        if start == 0 {
            return Ok(Compressed { messages, note: "nothing to compress: the history is already short".into() });
        }
        let first: String = messages
            .iter()
            .find(|m| matches!(m.role, Role::User))
            .map(|m| m.content.chars().take(300).collect())
            .unwrap_or_default();
        let mut note =
            vec![format!("[{start} earlier messages were removed to save room. The conversation began with: {first:?}]")];
        if let Some(focus) = request.focus.filter(|f| !f.is_empty()) {
            note.push(format!("[Focus from now on: {focus}]"));
        }
        if !request.memory_context.is_empty() {
            note.push(format!("[Memory notes on what was removed: {}]", request.memory_context));
        }
        if !request.carry.is_empty() {
            note.push(request.carry);
        }
        let mut kept = messages.split_off(start);
        kept[0].content = format!("{}\n\n{}", note.join("\n"), kept[0].content);
        log(Level::Info, &format!("dropped {start} messages, kept {}", kept.len()));
        let note = format!("dropped {start} earlier messages, kept the last {}", kept.len());
        Ok(Compressed { messages: kept, note })
    }

    fn report(_status: Status, _session: SessionInfo) -> Vec<(String, String)> {
        let (threshold, keep) = settings();
        vec![
            ("threshold".into(), format!("{:.0}% of the context window", threshold * 100.0)),
            ("keeps".into(), format!("the last {keep} messages")),
        ]
    }
}

export!(Plugin);
