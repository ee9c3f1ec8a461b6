//! A memory provider (API 0.2.0) that counts its calls in memory (to show the host keeps its
//! instance) and records what it is told in kv; `prefetch` can be made to panic, hang or fail.
//! Its one tool, `recall`, runs in a fresh instance like any tool.

wit_bindgen::generate!({
    path: "../../../wit/v0.2.0",
    world: "memory-plugin",
});

use std::sync::atomic::{AtomicU32, Ordering};

use exports::talaria::plugin::memory::Guest as Memory;
use exports::talaria::plugin::tools::Guest as Tools;
use talaria::plugin::kv;
use talaria::plugin::types::{CallContext, Message, Role, SessionInfo, ToolError, ToolSpec};

/// Calls this instance has answered.
static CALLS: AtomicU32 = AtomicU32::new(0);

struct Probe;

fn turns() -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for key in kv::list_keys("turn:")? {
        let value = kv::get(&key)?.unwrap_or_default();
        out.push(String::from_utf8_lossy(&value).into_owned());
    }
    Ok(out)
}

fn roles(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl Memory for Probe {
    fn system_prompt_block(session: SessionInfo) -> Result<String, String> {
        Ok(format!("memory for {}: {} turns", session.session_id, turns()?.len()))
    }

    fn prefetch(query: String, session: SessionInfo) -> Result<String, String> {
        let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        match query.as_str() {
            "panic" => panic!("memory panicked on purpose"),
            "hang" => loop {
                std::hint::black_box(());
            },
            "fail" => Err("asked to fail".into()),
            "data" => {
                let dir = std::env::var("PLUGIN_DATA").map_err(|e| format!("PLUGIN_DATA: {e}"))?;
                let file = format!("{dir}/notes.txt");
                std::fs::write(&file, format!("note {n}")).map_err(|e| format!("{file}: {e}"))?;
                std::fs::read_to_string(&file).map_err(|e| format!("{file}: {e}"))
            }
            "" => Ok(String::new()),
            _ => Ok(format!("call {n} in {} for {query}", session.workspace)),
        }
    }

    fn sync_turn(user: String, assistant: String, _session: SessionInfo) -> Result<(), String> {
        let n = turns()?.len();
        kv::set(&format!("turn:{n:04}"), format!("{user} => {assistant}").as_bytes())
    }

    fn on_pre_compress(messages: Vec<Message>, _session: SessionInfo) -> Result<String, String> {
        let extras = messages.iter().filter(|m| !m.extra.is_empty()).count();
        Ok(format!("{} messages ({}), {extras} with extra", messages.len(), roles(&messages)))
    }

    fn on_session_end(messages: Vec<Message>, session: SessionInfo) -> Result<(), String> {
        kv::set(&format!("ended:{}", session.session_id), roles(&messages).as_bytes())
    }

    fn on_memory_write(action: String, target: String, content: String, _session: SessionInfo) -> Result<(), String> {
        kv::set(&format!("write:{action}:{target}"), content.as_bytes())
    }
}

impl Tools for Probe {
    fn list() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "recall".into(),
            description: "What the memory provider recorded, and the calls its instance answered.".into(),
            parameters: r#"{"type":"object","properties":{"key":{"type":"string"}}}"#.into(),
        }]
    }

    fn call(name: String, args: String, _context: CallContext) -> Result<String, ToolError> {
        if name != "recall" {
            return Err(ToolError::UnknownTool(name));
        }
        if let Some(key) = args.split('"').nth(3) {
            let value = kv::get(key).map_err(ToolError::Failed)?.unwrap_or_default();
            return Ok(String::from_utf8_lossy(&value).into_owned());
        }
        let turns = turns().map_err(ToolError::Failed)?;
        Ok(format!("calls={} turns={}", CALLS.load(Ordering::Relaxed), turns.join(" | ")))
    }
}

export!(Probe);
