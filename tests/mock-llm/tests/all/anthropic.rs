//! Anthropic Messages on /v1/messages.

use serde_json::{Value, json};
use talaria_mock_llm::{HttpError, MockLlm, Reply, Script};

use crate::support::{Event, post};

const PATH: &str = "/v1/messages";

fn request(stream: bool) -> Value {
    json!({"model": "claude-test", "max_tokens": 1024, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

/// The event names, checking each matches its data's `type`.
fn types(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let name = e.name.clone().expect("every Anthropic event has an event: line");
            assert_eq!(e.json()["type"], name.as_str(), "event name and data type agree");
            name
        })
        .collect()
}

#[test]
fn streamed_thinking_and_text() {
    let reply = Reply::text("Hi there you").reasoning("Say hi back").usage(25, 5);
    let mock = MockLlm::start(Script::new([reply.into()]));
    let raw = post(mock.addr(), PATH, &request(true));
    assert_eq!(raw.status, 200);
    assert!(raw.complete);
    let events = raw.events();
    assert_eq!(
        types(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let data: Vec<Value> = events.iter().map(Event::json).collect();
    assert_eq!(
        data[0]["message"],
        json!({
            "id": "msg_mock1", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1},
        })
    );
    assert_eq!(
        data[2],
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})
    );
    let thinking: String =
        data[3..6].iter().map(|d| d["delta"]["thinking"].as_str().expect("thinking_delta")).collect();
    assert_eq!(thinking, "Say hi back");
    assert!(data[3..6].iter().all(|d| d["delta"]["type"] == "thinking_delta" && d["index"] == 0));
    assert_eq!(data[6]["delta"], json!({"type": "signature_delta", "signature": "mock-signature"}));
    assert_eq!(data[7], json!({"type": "content_block_stop", "index": 0}));
    assert_eq!(
        data[8],
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})
    );
    let text: Vec<&str> = data[9..12]
        .iter()
        .map(|d| {
            assert_eq!(d["index"], 1);
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().expect("text")
        })
        .collect();
    assert_eq!(text, ["Hi", " there", " you"]);
    assert_eq!(data[12], json!({"type": "content_block_stop", "index": 1}));
    assert_eq!(
        data[13],
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 5}})
    );
    assert_eq!(data[14], json!({"type": "message_stop"}));
}

#[test]
fn streamed_two_tool_calls() {
    let reply = Reply::default()
        .tool_call("read_file", json!({"path": "a.txt"}))
        .tool_call("write_file", json!({"path": "b.txt", "content": "x"}));
    let mock = MockLlm::start(Script::new([reply.into()]));
    let events = post(mock.addr(), PATH, &request(true)).events();
    types(&events);
    let mut blocks: Vec<(String, String, String)> = Vec::new();
    let mut open = None;
    for data in events.iter().map(Event::json) {
        match data["type"].as_str() {
            Some("content_block_start") => {
                assert!(open.is_none(), "blocks do not overlap");
                let index = data["index"].as_u64().expect("index") as usize;
                assert_eq!(index, blocks.len());
                let block = &data["content_block"];
                assert_eq!(block["type"], "tool_use");
                assert_eq!(block["input"], json!({}));
                let (id, name) = (block["id"].as_str().expect("id"), block["name"].as_str().expect("name"));
                blocks.push((id.to_owned(), name.to_owned(), String::new()));
                open = Some(index);
            }
            Some("content_block_delta") => {
                assert_eq!(data["index"].as_u64().map(|i| i as usize), open);
                assert_eq!(data["delta"]["type"], "input_json_delta");
                blocks[data["index"].as_u64().expect("index") as usize]
                    .2
                    .push_str(data["delta"]["partial_json"].as_str().expect("partial_json"));
            }
            Some("content_block_stop") => {
                assert_eq!(data["index"].as_u64().map(|i| i as usize), open.take());
            }
            Some("message_delta") => assert_eq!(data["delta"]["stop_reason"], "tool_use"),
            _ => {}
        }
    }
    // The arguments are compared as JSON: key order is serde_json's business.
    let blocks: Vec<(String, String, serde_json::Value)> = blocks
        .into_iter()
        .map(|(id, name, args)| (id, name, serde_json::from_str(&args).expect("the pieces make JSON")))
        .collect();
    assert_eq!(
        blocks,
        [
            ("toolu_1".to_owned(), "read_file".to_owned(), json!({"path": "a.txt"})),
            ("toolu_2".to_owned(), "write_file".to_owned(), json!({"content": "x", "path": "b.txt"})),
        ]
    );
    let pieces = events.iter().filter(|e| e.data.contains("input_json_delta")).count();
    assert_eq!(pieces, 6, "each call's arguments come in three pieces");
}

#[test]
fn complete_message() {
    let reply = Reply::text("Reading.").reasoning("hmm").tool_call("read_file", json!({"path": "a.txt"})).usage(40, 12);
    let mock = MockLlm::start(Script::new([reply.into()]));
    let raw = post(mock.addr(), "/messages", &request(false));
    assert_eq!(raw.status, 200);
    assert_eq!(
        raw.json(),
        json!({
            "id": "msg_mock1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "mock-signature"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}},
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 12},
        })
    );
}

#[test]
fn error_with_retry_after_and_message() {
    let mock = MockLlm::start(Script::new([
        HttpError::new(529).message("Overloaded").retry_after(2).into(),
        HttpError::new(401).into(),
    ]));
    let raw = post(mock.addr(), PATH, &request(true));
    assert_eq!(raw.status, 529);
    assert_eq!(raw.header("retry-after"), Some("2"));
    assert_eq!(raw.json(), json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
    let raw = post(mock.addr(), PATH, &request(false));
    assert_eq!(raw.status, 401);
    assert_eq!(raw.header("retry-after"), None);
    assert_eq!(
        raw.json(),
        json!({"type": "error", "error": {"type": "authentication_error", "message": "mock error 401"}})
    );
}
