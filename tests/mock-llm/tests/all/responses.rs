//! OpenAI Responses on /v1/responses.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use talaria_mock_llm::{HttpError, MockLlm, Reply, Script};

use crate::support::{Event, post};

const PATH: &str = "/v1/responses";

fn request(stream: bool) -> Value {
    json!({"model": "gpt-resp", "stream": stream, "input": [{"role": "user", "content": "hi"}]})
}

/// The data of each event, checking the event name matches `type` and the sequence numbers count
/// up from 0.
fn data(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let data = e.json();
            assert_eq!(Some(data["type"].as_str().expect("type")), e.name.as_deref(), "event name and type agree");
            assert_eq!(data["sequence_number"], i as u64);
            data
        })
        .collect()
}

#[test]
fn streamed_text_and_two_tool_calls() {
    let reply = Reply::text("On it now")
        .tool_call("read_file", json!({"path": "a.txt"}))
        .tool_call("ls", json!({"dir": "."}))
        .usage(50, 20);
    let mock = MockLlm::start(Script::new([reply.into()]));
    let raw = post(mock.addr(), PATH, &request(true));
    assert_eq!(raw.status, 200);
    assert!(raw.complete);
    let data = data(&raw.events());
    let kinds: Vec<&str> = data.iter().map(|d| d["type"].as_str().expect("type")).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(data[0]["response"]["status"], "in_progress");
    assert_eq!(data[0]["response"]["id"], "resp_mock1");
    assert_eq!(data[0]["response"]["output"], json!([]));
    let mut text = String::new();
    let mut arguments: BTreeMap<String, String> = BTreeMap::new();
    let mut added = Vec::new();
    for d in &data {
        match d["type"].as_str() {
            Some("response.output_text.delta") => {
                assert_eq!((d["item_id"].as_str(), d["output_index"].as_u64()), (Some("msg_mock1"), Some(0)));
                assert_eq!(d["content_index"], 0);
                text.push_str(d["delta"].as_str().expect("delta"));
            }
            Some("response.function_call_arguments.delta") => {
                let item = d["item_id"].as_str().expect("item_id").to_owned();
                arguments.entry(item).or_default().push_str(d["delta"].as_str().expect("delta"));
            }
            Some("response.output_item.added") => added.push(d["item"].clone()),
            _ => {}
        }
    }
    assert_eq!(text, "On it now");
    assert_eq!(
        arguments,
        BTreeMap::from([
            ("fc_1".to_owned(), r#"{"path":"a.txt"}"#.to_owned()),
            ("fc_2".to_owned(), r#"{"dir":"."}"#.to_owned())
        ])
    );
    assert_eq!(
        added[1],
        json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "", "status": "in_progress"})
    );
    let completed = &data[data.len() - 1]["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(
        completed["output"],
        json!([
            {"type": "message", "id": "msg_mock1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "On it now", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
             "arguments": "{\"path\":\"a.txt\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "ls",
             "arguments": "{\"dir\":\".\"}", "status": "completed"},
        ])
    );
    assert_eq!(
        completed["usage"],
        json!({"input_tokens": 50, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 70})
    );
}

#[test]
fn streamed_reasoning_summary() {
    let mock = MockLlm::start(Script::new([Reply::text("ok").reasoning("short thought").into()]));
    let data = data(&post(mock.addr(), PATH, &request(true)).events());
    let summary: String = data
        .iter()
        .filter(|d| d["type"] == "response.reasoning_summary_text.delta")
        .map(|d| {
            assert_eq!((d["item_id"].as_str(), d["output_index"].as_u64()), (Some("rs_mock1"), Some(0)));
            d["delta"].as_str().expect("delta")
        })
        .collect();
    assert_eq!(summary, "short thought");
    let output = &data[data.len() - 1]["response"]["output"];
    assert_eq!(
        output[0],
        json!({"type": "reasoning", "id": "rs_mock1", "summary": [{"type": "summary_text", "text": "short thought"}]})
    );
    assert_eq!(output[1]["content"][0]["text"], "ok");
}

#[test]
fn complete_response() {
    let reply = Reply::text("Done.").tool_call("read_file", "not json {").usage(3, 4);
    let mock = MockLlm::start(Script::new([reply.into()]));
    let raw = post(mock.addr(), "/responses", &request(false));
    assert_eq!(raw.status, 200);
    let body = raw.json();
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["model"], "gpt-resp");
    assert_eq!(
        body["output"],
        json!([
            {"type": "message", "id": "msg_mock1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Done.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
             "arguments": "not json {", "status": "completed"},
        ])
    );
    assert_eq!(body["usage"]["total_tokens"], 7);
}

#[test]
fn error_body_raw_and_provider_style() {
    let mock = MockLlm::start(Script::new([
        HttpError::new(502).body("<html>bad gateway</html>").into(),
        HttpError::new(500).into(),
    ]));
    let raw = post(mock.addr(), PATH, &request(false));
    assert_eq!((raw.status, raw.body.as_str()), (502, "<html>bad gateway</html>"));
    assert_eq!(raw.header("content-type"), Some("text/html"));
    let raw = post(mock.addr(), PATH, &request(false));
    assert_eq!(raw.status, 500);
    assert_eq!(
        raw.json(),
        json!({"error": {"message": "mock error 500", "type": "server_error", "param": null, "code": null}})
    );
}
