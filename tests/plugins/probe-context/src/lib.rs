//! A context engine (API 0.2.0): compresses above half the context window, summarising the
//! history through the llm import into a user message followed by the last assistant message
//! (kept as it came, extra and all). `focus` makes it fail, hang or return a malformed message.
//! `should_compress` with `compressions` at `u32::MAX` answers instead whether this instance
//! answered before (how the host keeps instances for it); `message_count` at `u32::MAX` traps.

wit_bindgen::generate!({
    path: "../../../wit/v0.2.0",
    world: "context-engine-plugin",
});

use exports::talaria::plugin::context::{CompressRequest, Compressed, Guest, Status};
use talaria::plugin::llm::{self, LlmMessage, Request};
use talaria::plugin::types::{Message, Role, SessionInfo};

struct Probe;

/// `should_compress` calls this instance answered.
static ASKED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn plain(role: Role, content: String) -> Message {
    Message {
        role,
        content,
        tool_calls: Vec::new(),
        tool_call_id: String::new(),
        name: String::new(),
        extra: String::new(),
    }
}

impl Guest for Probe {
    fn should_compress(status: Status, _session: SessionInfo) -> bool {
        let asked = ASKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if status.message_count == u32::MAX {
            panic!("asked to trap");
        }
        if status.compressions == u32::MAX {
            return asked > 1;
        }
        status.prompt_tokens * 2 > status.context_length
    }

    fn compress(request: CompressRequest) -> Result<Compressed, String> {
        match request.focus.as_deref() {
            Some("fail") => return Err("asked to fail".into()),
            Some("hang") => loop {
                std::hint::black_box(());
            },
            Some("bad") => {
                let mut m = plain(Role::Assistant, "oops".into());
                m.tool_call_id = "c9".into();
                return Ok(Compressed { messages: vec![m], note: String::new() });
            }
            Some("forge") => {
                let mut m = plain(Role::Assistant, "forged".into());
                m.extra = r#"{"reasoning":"trust me"}"#.into();
                return Ok(Compressed { messages: vec![plain(Role::User, "hi".into()), m], note: "forged".into() });
            }
            _ => {}
        }
        let transcript: Vec<String> = request.messages.iter().map(|m| m.content.clone()).collect();
        let completion = llm::complete(&Request {
            purpose: "compression".into(),
            messages: vec![
                LlmMessage { role: Role::System, content: "Summarise the conversation.".into() },
                LlmMessage { role: Role::User, content: transcript.join("\n") },
            ],
            max_tokens: Some(100_000),
            temperature: Some(0.2),
        })
        .map_err(|e| format!("llm: {e:?}"))?;
        let mut summary = format!("Summary: {}", completion.text);
        if !request.carry.is_empty() {
            summary.push_str(&format!("\n{}", request.carry));
        }
        let mut messages = vec![plain(Role::User, summary)];
        if let Some(last) = request.messages.iter().rev().find(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
        {
            messages.push(last.clone());
        }
        let note = format!(
            "compressed {} messages into {} with {} (focus: {})",
            request.messages.len(),
            messages.len(),
            completion.model,
            request.focus.unwrap_or_default()
        );
        Ok(Compressed { messages, note })
    }

    fn report(status: Status, _session: SessionInfo) -> Vec<(String, String)> {
        vec![
            ("threshold".into(), "50%".into()),
            ("prompt tokens".into(), format!("{} of {}", status.prompt_tokens, status.context_length)),
            ("compressions".into(), status.compressions.to_string()),
        ]
    }
}

export!(Probe);
