//! Tests of the whole engine through a fake host: property tests over random valid histories
//! ([`props`]) and examples of the prompt, updates, backoff and reports ([`examples`]).

mod examples;
mod props;

use std::collections::BTreeMap;

use crate::engine::Host;
use talaria_sdk::context::{CompressRequest, Status};
use talaria_sdk::llm::{Completion, LlmError, Request};
use talaria_sdk::message::{Message, Session, ToolCall};

/// What the fake auxiliary model answers.
#[derive(Debug, Clone)]
pub enum Answer {
    Text(String),
    Fail(String),
}

/// The host seam played by the test: a scripted model, a map for kv, a settable clock.
pub struct FakeHost {
    pub answer: Answer,
    pub requests: Vec<Request>,
    pub kv: BTreeMap<String, Vec<u8>>,
    pub now: u64,
    pub warnings: Vec<String>,
}

impl FakeHost {
    pub fn answering(text: &str) -> Self {
        Self::with(Answer::Text(text.to_string()))
    }

    pub fn failing(why: &str) -> Self {
        Self::with(Answer::Fail(why.to_string()))
    }

    pub fn with(answer: Answer) -> Self {
        Self { answer, requests: Vec::new(), kv: BTreeMap::new(), now: 1_700_000_000, warnings: Vec::new() }
    }

    /// The user prompt of the last request.
    pub fn last_prompt(&self) -> &str {
        let request = self.requests.last().expect("the model was asked");
        &request.messages.last().expect("a user message").1
    }
}

impl Host for FakeHost {
    fn complete(&mut self, request: &Request) -> Result<Completion, LlmError> {
        self.requests.push(request.clone());
        match &self.answer {
            Answer::Text(text) => {
                Ok(Completion { text: text.clone(), model: "fake".into(), input_tokens: 1, output_tokens: 1 })
            }
            Answer::Fail(why) => Err(LlmError::Failed(why.clone())),
        }
    }

    fn now(&self) -> u64 {
        self.now
    }

    fn kv_get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.kv.get(key).cloned()
    }

    fn kv_set(&mut self, key: &str, value: &[u8]) {
        self.kv.insert(key.to_string(), value.to_vec());
    }

    fn kv_delete(&mut self, key: &str) {
        self.kv.remove(key);
    }

    fn warn(&mut self, message: &str) {
        self.warnings.push(message.to_string());
    }
}

/// A summary in the requested shape.
pub const GOOD_SUMMARY: &str = "## Goal\nShip the parser.\n## Constraints & Preferences\nNone\n## Progress\n### Done\n\
- lexer\n### In Progress\n- parser\n### Blocked\nNone\n## Key Decisions\nNone\n## Relevant Files\n- src/lex.rs\n\
## Next Steps\n- finish parse()\n## Critical Context\nNone";

pub fn request(messages: Vec<Message>, context_length: u64) -> CompressRequest {
    CompressRequest {
        messages,
        focus: None,
        status: Status { prompt_tokens: context_length, context_length, message_count: 0, compressions: 0 },
        force: false,
        memory_context: String::new(),
        carry: String::new(),
        session: Session { session_id: "s1".into(), ..Session::default() },
    }
}

pub fn call(ids: &[&str], name: &str, arguments: &str) -> Message {
    let mut m = Message::assistant("");
    m.tool_calls = ids
        .iter()
        .map(|id| ToolCall { id: (*id).to_string(), name: name.to_string(), arguments: arguments.to_string() })
        .collect();
    m
}

/// A plain history of `turns` user/assistant turns, each with one tool call.
pub fn history(turns: usize) -> Vec<Message> {
    let mut msgs = Vec::new();
    for i in 0..turns {
        msgs.push(Message::user(format!("request {i}: please look at src/file{i}.rs")));
        let id = format!("call_{i}");
        msgs.push(call(&[&id], "read_file", &format!("{{\"path\":\"src/file{i}.rs\"}}")));
        msgs.push(Message::tool(id, "read_file", format!("contents of file {i} ").repeat(40)));
        msgs.push(Message::assistant(format!("file {i} looks fine")));
    }
    msgs
}
