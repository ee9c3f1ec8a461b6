//! `Mode::Strict`: requests judged and streams shaped as llama-cpp-python's server does them;
//! answers cut at the output-token limit in every format; steps that hang or stream nothing.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_mock_llm::{HttpError, Mode, Reply, Script, Step, strict};

use crate::support::{eventually, post, request};

const PATH: &str = "/v1/chat/completions";

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}])
}

#[test]
fn null_content_is_refused_with_a_500_without_using_a_step() {
    let mock = Mode::Strict.start(Script::new([Step::text("ok")]));
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "done"},
    ]});
    let raw = post(mock.addr(), PATH, &body);
    assert_eq!(raw.status, 500);
    let message = raw.json()["error"]["message"].as_str().expect("message").to_owned();
    assert!(message.contains("Input should be a valid string") && message.contains("messages.1.content"), "{message}");
    assert_eq!(mock.remaining(), 1, "refused before the model ran");
    let mut fixed = body.clone();
    fixed["messages"][1]["content"] = json!("");
    assert_eq!(post(mock.addr(), PATH, &fixed).status, 200, "an empty string is accepted");
    // The normal mode serves the same request.
    let normal = Mode::Normal.start(Script::new([Step::text("ok")]));
    assert_eq!(post(normal.addr(), PATH, &body).status, 200);
}

#[test]
fn tools_without_tool_choice_are_hidden_from_the_model() {
    let step = || Step::tool_call("read_file", json!({"path": "a"}));
    let mock = Mode::Strict.start(Script::new([step(), step()]));
    let ask = |choice: Option<&str>| {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "read a"}], "tools": tools()});
        if let Some(choice) = choice {
            body["tool_choice"] = json!(choice);
        }
        post(mock.addr(), PATH, &body).json()["choices"][0]["message"].clone()
    };
    let hidden = ask(None);
    assert_eq!(hidden["content"], strict::HIDDEN_TOOLS);
    assert!(hidden.get("tool_calls").is_none());
    let seen = ask(Some("auto"));
    assert_eq!(seen["tool_calls"][0]["function"]["name"], "read_file");
}

#[test]
fn streamed_tool_calls_repeat_ids_and_names_carry_function_call_and_no_usage() {
    let reply = Reply::default().tool_call("read_file", json!({"path": "src/main.rs"}));
    let mock = Mode::Strict.start(Script::new([reply.into()]));
    let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}, "tool_choice": "auto",
        "tools": tools(), "messages": [{"role": "user", "content": "read"}]});
    let raw = post(mock.addr(), PATH, &body);
    let events = raw.events();
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "no usage, whatever stream_options asks");
    let call_chunks: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["delta"]).filter(|d| d["tool_calls"].is_array()).collect();
    assert!(call_chunks.len() >= 2, "arguments in pieces");
    let mut arguments = String::new();
    for delta in &call_chunks {
        let call = &delta["tool_calls"][0];
        assert_eq!((call["id"].as_str(), call["type"].as_str()), (Some("call_0"), Some("function")), "{delta}");
        assert_eq!(call["function"]["name"], "read_file", "the name in every chunk");
        assert_eq!(delta["function_call"]["name"], "read_file", "the legacy field beside it");
        assert_eq!(delta["function_call"]["arguments"], call["function"]["arguments"]);
        arguments.push_str(call["function"]["arguments"].as_str().expect("piece"));
    }
    assert_eq!(arguments, r#"{"path":"src/main.rs"}"#);
}

#[test]
fn each_answer_numbers_its_calls_from_zero_unless_the_script_names_them() {
    let two = Reply::default().tool_call("read_file", json!({"path": "a"})).tool_call("list_dir", json!({}));
    let shared = Reply::default().tool_call_with_id("same", "read_file", json!({"path": "a"})).tool_call_with_id(
        "same",
        "read_file",
        json!({"path": "b"}),
    );
    let mock = Mode::Strict.start(Script::new([two.clone().into(), two.into(), shared.into()]));
    let body = json!({"model": "m", "tool_choice": "auto", "tools": tools(), "messages": [{"role": "user", "content": "read"}]});
    let ids = || {
        let answer = post(mock.addr(), PATH, &body).json();
        let calls = answer["choices"][0]["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
        calls.iter().map(|c| c["id"].as_str().unwrap_or_default().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(ids(), ["call_0", "call_1"]);
    assert_eq!(ids(), ["call_0", "call_1"], "numbered again in the next answer");
    assert_eq!(ids(), ["same", "same"]);
}

#[test]
fn a_truncated_reply_ends_as_each_format_says() {
    let cut = || Step::from(Reply::text("Once upon a").truncated());
    let mock = Mode::Strict.start(Script::new([cut(), cut(), cut(), cut()]));
    let chat = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "story"}]});
    let events = post(mock.addr(), PATH, &chat).events();
    let finish = events[events.len() - 2].json();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let whole = post(mock.addr(), PATH, &json!({"model": "m", "messages": [{"role": "user", "content": "story"}]}));
    assert_eq!(whole.json()["choices"][0]["finish_reason"], "length");
    let anthropic = post(mock.addr(), "/v1/messages", &json!({"model": "m", "max_tokens": 5, "messages": []}));
    assert_eq!(anthropic.json()["stop_reason"], "max_tokens");
    let responses = post(mock.addr(), "/v1/responses", &json!({"model": "m", "input": "story"}));
    let body = responses.json();
    assert_eq!(
        (body["status"].as_str(), body["incomplete_details"]["reason"].as_str()),
        (Some("incomplete"), Some("max_output_tokens"))
    );
}

#[test]
fn hang_never_answers_and_empty_stream_sends_only_pings() {
    let mock = Mode::Normal.start(Script::new([Step::hang(), Step::empty_stream(2)]));
    {
        let mut stream = request(mock.addr(), "POST", PATH, &json!({"model": "m", "messages": []}).to_string());
        stream.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
        let mut buf = [0u8; 64];
        let read = std::io::Read::read(&mut stream, &mut buf);
        assert!(read.is_err(), "nothing at all comes back: {read:?}");
    }
    eventually("the hang to count the client going away", || mock.disconnects() == 1);
    let raw = post(mock.addr(), PATH, &json!({"model": "m", "stream": true, "messages": []}));
    assert_eq!(raw.status, 200);
    assert_eq!(raw.header("content-type"), Some("text/event-stream"));
    assert_eq!(raw.body, ": ping\n\n: ping\n\n");
}

#[test]
fn a_verbatim_error_body_may_name_its_content_type() {
    let error = HttpError::new(400).body("").content_type("text/event-stream");
    let mock = Mode::Normal.start(Script::new([error.into()]));
    let raw = post(mock.addr(), PATH, &json!({"model": "m", "stream": true, "messages": []}));
    assert_eq!((raw.status, raw.header("content-type"), raw.body.as_str()), (400, Some("text/event-stream"), ""));
}
