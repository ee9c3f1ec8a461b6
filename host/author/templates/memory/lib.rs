//! A talaria memory provider: it keeps each finished turn and recalls the earlier ones that share
//! words with the user's new message.
//!
//! One provider is active at a time (`[memory] provider = "{{name}}"` in config.toml). The host
//! keeps one instance alive across calls, but anything that must outlive it goes in kv.
//! `wit/plugin.wit` is the contract; `wit_bindgen::generate!` turns the `memory` and `tools`
//! exports into the two `Guest` traits below. A host call that talaria refuses returns `Err`
//! with talaria's message: pass it on with `?`.

wit_bindgen::generate!({ path: "wit", world: "memory-plugin" });

use std::collections::BTreeSet;

use exports::talaria::plugin::{memory, tools};
use serde::{Deserialize, Serialize};
use talaria::plugin::kv;
use talaria::plugin::log::{Level, log};
use talaria::plugin::types::{CallContext, Message, SessionInfo, ToolError, ToolSpec};

/// Words too common to say two messages are about the same thing.
const COMMON: &[&str] =
    &["the", "and", "for", "are", "but", "not", "you", "your", "with", "this", "that", "what", "have", "was", "were", "from", "they", "them", "about", "into"];
/// At most this many earlier turns are recalled for one message.
const RECALLED: usize = 3;

/// One finished turn, as kept in kv (JSON under `turn/NNNNNNNNNNNN`).
#[derive(Serialize, Deserialize)]
struct Turn {
    user: String,
    assistant: String,
    session: String,
}

fn words(text: &str) -> BTreeSet<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| w.len() > 2 && !COMMON.contains(w))
        .map(str::to_string)
        .collect()
}

struct Plugin;

impl memory::Guest for Plugin {
    fn system_prompt_block(_session: SessionInfo) -> Result<String, String> {
        Ok(String::new())
    }

    fn prefetch(query: String, _session: SessionInfo) -> Result<String, String> {
        let wanted = words(&query);
        if wanted.is_empty() {
            return Ok(String::new());
        }
        let mut scored = Vec::new();
        for (key, value) in kv::list_with_values("turn/")? {
            let turn: Turn = serde_json::from_slice(&value).map_err(|e| format!("{key} is not a turn: {e}"))?;
            let shared = words(&format!("{} {}", turn.user, turn.assistant)).intersection(&wanted).count();
            if shared > 0 {
                scored.push((shared, key, turn));
            }
        }
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        if scored.is_empty() {
            return Ok(String::new());
        }
        let lines: Vec<String> = scored
            .iter()
            .take(RECALLED)
            .map(|(_, _, t)| {
                let answer: String = t.assistant.chars().take(200).collect();
                format!("- the user said: {} (you answered: {answer})", t.user)
            })
            .collect();
        log(Level::Debug, &format!("recalled {} turns", lines.len()));
        Ok(format!("From earlier conversations:\n{}", lines.join("\n")))
    }

    fn sync_turn(user: String, assistant: String, session: SessionInfo) -> Result<(), String> {
        // One key per turn, numbered by an atomic counter: two talaria processes never collide.
        let n = kv::increment("turns", 1)?;
        let turn = Turn { user, assistant, session: session.session_id };
        let value = serde_json::to_vec(&turn).map_err(|e| e.to_string())?;
        kv::set(&format!("turn/{n:012}"), &value)
    }

    fn on_pre_compress(_messages: Vec<Message>, _session: SessionInfo) -> Result<String, String> {
        Ok(String::new())
    }

    fn on_session_end(_messages: Vec<Message>, _session: SessionInfo) -> Result<(), String> {
        Ok(())
    }

    fn on_memory_write(_action: String, _target: String, _content: String, _session: SessionInfo) -> Result<(), String> {
        Ok(())
    }
}

/// A memory provider may offer tools too; this one offers none.
impl tools::Guest for Plugin {
    fn list() -> Vec<ToolSpec> {
        Vec::new()
    }

    fn call(name: String, _args_json: String, _context: CallContext) -> Result<String, ToolError> {
        Err(ToolError::UnknownTool(name))
    }
}

export!(Plugin);
