//! Tests of the model adapters against a loopback HTTP server ([`server`]) that answers with
//! canned bytes: one file per wire format (streamed text with usage, streamed tool calls, whole
//! answers, the exact request body, HTTP errors, cut streams), one for the chain (retries,
//! fallback, notices), one for the transport (cancellation, timeouts, start-up cost).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_protocol::{Message, ToolCall, ToolSpec, Usage};

use super::*;
use server::{Canned, Delivery, Server};

mod anthropic;
mod chain;
mod chat;
mod faults;
mod quirks;
mod responses;
mod server;
mod transport;

fn provider(api_mode: ApiMode, url: &str, model: &str) -> Provider {
    let spec = ProviderSpec {
        provider: Some("custom".into()),
        model: model.into(),
        base_url: Some(url.into()),
        api_mode: Some(api_mode),
        key_env: Some("TEST_KEY".into()),
        ..ProviderSpec::default()
    };
    Provider::resolve(spec, |_| Some("sk-test".into())).expect("provider")
}

/// Collects deltas.
#[derive(Default, Clone)]
struct Deltas(Arc<Mutex<Vec<Delta>>>);

impl Deltas {
    fn push(&self, d: Delta) {
        self.0.lock().expect("lock").push(d);
    }
    fn all(&self) -> Vec<Delta> {
        self.0.lock().expect("lock").clone()
    }
}

fn text(s: &str) -> Delta {
    Delta::Text(s.into())
}

fn tools() -> Vec<std::sync::Arc<ToolSpec>> {
    vec![std::sync::Arc::new(ToolSpec {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        plugin: "files".into(),
        annotations: Default::default(),
    })]
}

/// system prompt + user, assistant with two tool calls, two tool results, assistant, user.
fn history() -> Vec<Message> {
    vec![
        Message::user("Read a and b"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                ToolCall::new("call_a", "read_file", r#"{"path":"a"}"#),
                ToolCall::new("call_b", "read_file", r#"{"path":"b"#),
            ],
            reasoning: None,
            extra: None,
        },
        Message::tool("call_a", "read_file", "contents of a"),
        Message::tool("call_b", "read_file", r#"{"error":"invalid arguments: not JSON"}"#),
        Message::assistant("a says hi; b failed"),
        Message::user("thanks"),
    ]
}

async fn call(provider: &Provider, messages: &[Message], stream: bool) -> (Result<ModelReply, ModelError>, Vec<Delta>) {
    let deltas = Deltas::default();
    let sink = deltas.clone();
    let tools = tools();
    let request = ModelRequest { system: "Be brief.", messages, tools: &tools, stream };
    let result = Client::new().complete(provider, &request, &move |d| sink.push(d)).await;
    (result, deltas.all())
}

/// The reply's parts, its tool calls as the provider named them (each call's own id, talaria's,
/// checked to be unique first).
fn assistant(reply: &ModelReply) -> (&str, Vec<ToolCall>, Option<&str>, Option<&Value>) {
    match &reply.message {
        Message::Assistant { content, tool_calls, reasoning, extra } => {
            let ours: std::collections::HashSet<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ours.len(), tool_calls.len(), "talaria's ids are unique: {tool_calls:?}");
            let as_sent = tool_calls.iter().map(|c| ToolCall::new(c.wire(), &c.name, &c.arguments)).collect();
            (content.as_str(), as_sent, reasoning.as_deref(), extra.as_ref())
        }
        other => panic!("not an assistant message: {other:?}"),
    }
}

fn calls(pairs: &[(&str, &str, &str)]) -> Vec<ToolCall> {
    pairs.iter().map(|(id, name, args)| ToolCall::new(*id, *name, *args)).collect()
}

/// One chat-completions chunk with `delta`.
fn chunk(delta: Value) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-test-2025", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-test-2025", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// A streamed chat-completions answer saying `text`.
fn ok_chat(text: &str) -> Canned {
    Canned::sse(&[chunk(json!({"content": text})), finish("stop"), json!("[DONE]")])
}
