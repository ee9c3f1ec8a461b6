//! OpenAI Chat Completions on /v1/chat/completions.

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};

use crate::support::post;

const PATH: &str = "/v1/chat/completions";

fn request(stream: bool, extra: Value) -> Value {
    let mut body = json!({"model": "gpt-test", "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

#[test]
fn streamed_text_with_usage() {
    let mock = MockLlm::start(Script::new([Reply::text("Hello there, world").usage(11, 7).into()]));
    let raw = post(mock.addr(), PATH, &request(true, json!({"stream_options": {"include_usage": true}})));
    assert_eq!(raw.status, 200);
    assert!(raw.complete);
    let events = raw.events();
    assert!(events.iter().all(|e| e.name.is_none()), "chat completions has no event: lines");
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["id"], "chatcmpl-mock1");
        assert_eq!(chunk["model"], "gpt-test");
        assert!(chunk["created"].is_u64());
        assert!(chunk.get("usage").is_some(), "include_usage puts usage on every chunk: {chunk}");
    }
    let (usage_chunk, choice_chunks) = chunks.split_last().expect("chunks");
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"], json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}));
    let deltas: Vec<&Value> = choice_chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
    assert_eq!(deltas[0], &json!({"role": "assistant", "content": ""}));
    let words: Vec<&str> = deltas[1..].iter().filter_map(|d| d["content"].as_str()).collect();
    assert_eq!(words, ["Hello", " there,", " world"]);
    let finishes: Vec<&Value> = choice_chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).collect();
    assert!(finishes[..finishes.len() - 1].iter().all(|f| f.is_null()));
    assert_eq!(finishes.last(), Some(&&json!("stop")));
    assert!(choice_chunks.iter().all(|c| c["usage"].is_null()));
}

#[test]
fn streamed_two_tool_calls_interleave_by_index() {
    let reply = Reply::text("Checking.")
        .tool_call("read_file", json!({"path": "src/main.rs"}))
        .tool_call("grep", Value::String(r#"{"pattern": "fn main"}"#.into()));
    let mock = MockLlm::start(Script::new([reply.into()]));
    let raw = post(mock.addr(), PATH, &request(true, json!({})));
    let events = raw.events();
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "no usage without include_usage");
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut argument_order = Vec::new();
    for chunk in &chunks {
        let delta = &chunk["choices"][0]["delta"];
        text.push_str(delta["content"].as_str().unwrap_or_default());
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().expect("index on every tool call delta") as usize;
            if let Some(id) = call["id"].as_str() {
                assert_eq!(call["type"], "function");
                assert_eq!(index, calls.len(), "a new call takes the next index");
                let name = call["function"]["name"].as_str().expect("name with the id").to_owned();
                calls.push((id.to_owned(), name, String::new()));
            }
            let piece = call["function"]["arguments"].as_str().expect("arguments");
            if !piece.is_empty() {
                argument_order.push(index);
            }
            calls[index].2.push_str(piece);
        }
    }
    assert_eq!(text, "Checking.");
    assert_eq!(
        calls,
        [
            ("call_1".to_owned(), "read_file".to_owned(), r#"{"path":"src/main.rs"}"#.to_owned()),
            ("call_2".to_owned(), "grep".to_owned(), r#"{"pattern": "fn main"}"#.to_owned()),
        ]
    );
    assert_eq!(argument_order, [0, 1, 0, 1, 0, 1], "argument pieces of the two calls interleave");
    assert_eq!(chunks.last().map(|c| &c["choices"][0]["finish_reason"]), Some(&json!("tool_calls")));
}

#[test]
fn complete_reply_with_reasoning_and_a_tool_call() {
    let reply =
        Reply::text("Let me look.").reasoning("The user wants a file.").tool_call("read_file", json!({"path": "a"}));
    let mock = MockLlm::start(Script::new([Step::text("first"), reply.usage(30, 9).into()]));
    assert_eq!(post(mock.addr(), PATH, &request(false, json!({}))).json()["choices"][0]["message"]["content"], "first");
    let raw = post(mock.addr(), PATH, &request(false, json!({})));
    assert_eq!(raw.status, 200);
    assert_eq!(raw.header("content-type"), Some("application/json"));
    assert!(raw.complete);
    let body = raw.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["id"], "chatcmpl-mock2");
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(
        body["choices"],
        json!([{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me look.",
                "refusal": null,
                "reasoning_content": "The user wants a file.",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}],
            },
            "logprobs": null,
            "finish_reason": "tool_calls",
        }])
    );
    assert_eq!(body["usage"], json!({"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}));
}

#[test]
fn tool_only_reply_has_null_content() {
    let mock = MockLlm::start(Script::new([Step::tool_call("ls", json!({}))]));
    let body = post(mock.addr(), "/chat/completions", &request(false, json!({}))).json();
    assert_eq!(body["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{}");
}

#[test]
fn error_with_retry_after() {
    let mock = MockLlm::start(Script::new([talaria_mock_llm::HttpError::new(429).retry_after(7).into()]));
    let raw = post(mock.addr(), PATH, &request(true, json!({})));
    assert_eq!(raw.status, 429);
    assert_eq!(raw.header("retry-after"), Some("7"));
    assert_eq!(
        raw.json(),
        json!({"error": {"message": "mock error 429", "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
    );
}
