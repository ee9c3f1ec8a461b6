//! Script behaviour shared by the routes: order, exhaustion, stalls, cuts, delays, recording,
//! JSON scripts and the auto rule.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{HttpError, MockLlm, Reply, Script, Step};

use crate::support::{eventually, post, read_response, request, sse};

fn chat(stream: bool, content: &str) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": content}]})
}

#[test]
fn steps_are_shared_across_routes_then_exhausted() {
    let mock = MockLlm::start(Script::new([Step::text("one"), Step::text("two")]));
    assert_eq!(mock.remaining(), 2);
    let first = post(mock.addr(), "/v1/chat/completions", &chat(false, "a"));
    assert_eq!(first.json()["choices"][0]["message"]["content"], "one");
    let second = post(mock.addr(), "/v1/messages", &chat(false, "b"));
    assert_eq!(second.json()["content"][0]["text"], "two");
    assert_eq!(mock.remaining(), 0);
    let third = post(mock.addr(), "/v1/chat/completions", &chat(true, "c"));
    assert_eq!(third.status, 500);
    assert_eq!(third.json()["error"]["message"], "mock script exhausted");
    let fourth = post(mock.addr(), "/v1/messages", &chat(false, "d"));
    assert_eq!(fourth.json()["error"]["message"], "mock script exhausted");
    assert_eq!(mock.requests().len(), 4);
}

#[test]
fn repeat_last() {
    let mock = MockLlm::start(Script::new([Step::text("first"), Step::text("again")]).repeat_last(true));
    let texts: Vec<Value> = (0..4)
        .map(|_| {
            post(mock.addr(), "/v1/chat/completions", &chat(false, "x")).json()["choices"][0]["message"]["content"]
                .clone()
        })
        .collect();
    assert_eq!(texts, ["first", "again", "again", "again"]);
}

#[test]
fn requests_are_recorded_with_path_headers_and_body() {
    let mock = MockLlm::start(Script::new([Step::text("hi")]));
    let body = chat(false, "hello");
    post(mock.addr(), "/v1/chat/completions", &body);
    let missing = post(mock.addr(), "/v1/embeddings", &json!({"input": "x"}));
    assert_eq!(missing.status, 404);
    let models = post(mock.addr(), "/v1/chat/completions", &json!("not an object"));
    assert_eq!(models.status, 400);
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("x-api-key"), Some("sk-test"));
    assert_eq!(requests[0].header("Content-Type"), Some("application/json"));
    assert_eq!(requests[0].body, body);
    assert_eq!(requests[0].wire(), Some(talaria_mock_llm::Wire::ChatCompletions));
    assert_eq!(requests[1].path, "/v1/embeddings");
    assert_eq!(requests[2].body, json!("not an object"));
}

#[test]
fn streamed_stall_is_recorded_first_and_counts_the_disconnect() {
    let mock = MockLlm::start(Script::new([Step::stall("still thinking"), Step::text("after")]));
    let mut stream = request(mock.addr(), "POST", "/v1/messages", &chat(true, "x").to_string());
    let mut seen = Vec::new();
    let mut buf = [0; 4096];
    while !String::from_utf8_lossy(&seen).contains(" thinking") {
        let n = stream.read(&mut buf).expect("the stall streams its text");
        assert!(n > 0, "the stall does not end the stream");
        seen.extend_from_slice(&buf[..n]);
    }
    assert_eq!(mock.requests().len(), 1, "recorded before the reply ends");
    stream.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    assert!(stream.read(&mut buf).is_err(), "nothing more comes");
    assert_eq!(mock.disconnects(), 0);
    drop(stream);
    eventually("the disconnect", || mock.disconnects() == 1);
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("event: message_start") && text.contains("\"text\":\"still\""), "{text}");
    assert!(!text.contains("content_block_stop"), "{text}");
    assert_eq!(post(mock.addr(), "/v1/messages", &chat(false, "y")).json()["content"][0]["text"], "after");
}

#[test]
fn unstreamed_stall_sends_nothing_and_counts_the_disconnect() {
    let mock = MockLlm::start(Script::new([Step::stall("x")]));
    let mut stream = request(mock.addr(), "POST", "/v1/responses", &json!({"input": "hi"}).to_string());
    eventually("the request", || mock.requests().len() == 1);
    stream.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    assert!(stream.read(&mut [0; 16]).is_err(), "no response while stalled");
    drop(stream);
    eventually("the disconnect", || mock.disconnects() == 1);
}

#[test]
fn cut_ends_the_stream_without_finishing() {
    let mock = MockLlm::start(Script::new([Step::cut("half an answer"), Step::cut("half an answer")]));
    let raw = read_response(request(mock.addr(), "POST", "/v1/chat/completions", &chat(true, "x").to_string()));
    assert_eq!(raw.status, 200);
    assert!(!raw.complete, "no terminating chunk");
    let events = sse(&raw.body);
    let text: String =
        events.iter().filter_map(|e| e.json()["choices"][0]["delta"]["content"].as_str().map(str::to_owned)).collect();
    assert_eq!(text, "half an answer");
    assert!(!raw.body.contains("[DONE]") && !raw.body.contains("finish_reason\":\"stop"));
    let raw = read_response(request(mock.addr(), "POST", "/v1/responses", &json!({"input": "x"}).to_string()));
    assert!(!raw.complete);
    assert!(serde_json::from_str::<Value>(&raw.body).is_err(), "half a JSON body: {}", raw.body);
}

#[test]
fn delay_then_reply() {
    let mock = MockLlm::start(Script::new([Step::text("late").delayed(150)]));
    let started = Instant::now();
    let raw = post(mock.addr(), "/v1/chat/completions", &chat(false, "x"));
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(raw.json()["choices"][0]["message"]["content"], "late");
}

#[test]
fn json_scripts() {
    let text = r#"{
        "steps": [
            {"reply": {"text": "Let me look.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}},
            {"reply": {"tool_calls": [{"name": "raw", "arguments": "{broken"}, {"name": "noargs"}]}},
            {"error": {"status": 429, "retry_after": 1}},
            {"delay": {"ms": 50, "then": {"reply": {"text": "Done.", "reasoning": "easy", "usage": {"input": 12, "output": 3}}}}},
            {"stall": {"text": "thinking about it"}},
            {"cut": {"text": "half an ans"}}
        ],
        "repeat": true,
        "auto": {"tool": "grep", "args": {"pattern": "x"}}
    }"#;
    let expected = Script::new([
        Reply::text("Let me look.").tool_call("read_file", json!({"path": "a.txt"})).into(),
        Reply::default().tool_call("raw", "{broken").tool_call("noargs", json!({})).into(),
        HttpError::new(429).retry_after(1).into(),
        Step::from(Reply::text("Done.").reasoning("easy").usage(12, 3)).delayed(50),
        Step::stall("thinking about it"),
        Step::cut("half an ans"),
    ])
    .repeat_last(true)
    .auto_tool("grep", json!({"pattern": "x"}));
    assert_eq!(Script::from_json(text).expect("valid script"), expected);

    let bare = Script::from_json(r#"[{"reply": {"text": "hi"}}, {"error": {"status": 500, "message": "boom"}}]"#);
    assert_eq!(
        bare.expect("a bare array"),
        Script::new([Step::text("hi"), HttpError::new(500).message("boom").into()])
    );
    let typo = Script::from_json(r#"[{"reply": {"txt": "hi"}}]"#).expect_err("unknown field");
    assert!(typo.to_string().contains("txt"), "{typo}");

    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), text).expect("write script");
    assert_eq!(Script::load(file.path()).expect("load"), expected);
}

/// A client loop on each route: send, and for every tool call append the call and a result.
fn drive_auto(mock: &MockLlm, path: &str, prompt: &str) -> (Vec<String>, String) {
    let mut history: Vec<Value> = Vec::new();
    let mut calls = Vec::new();
    for _ in 0..50 {
        let body = match path {
            "/v1/chat/completions" => {
                let mut messages =
                    vec![json!({"role": "system", "content": "be brief"}), json!({"role": "user", "content": prompt})];
                messages.extend(history.iter().cloned());
                json!({"model": "m", "messages": messages})
            }
            "/v1/messages" => {
                let mut messages = vec![json!({"role": "user", "content": [{"type": "text", "text": prompt}]})];
                messages.extend(history.iter().cloned());
                json!({"model": "m", "messages": messages})
            }
            _ => {
                let mut input = vec![json!({"role": "user", "content": [{"type": "input_text", "text": prompt}]})];
                input.extend(history.iter().cloned());
                json!({"model": "m", "input": input})
            }
        };
        let reply = post(mock.addr(), path, &body).json();
        let (call, text) = match path {
            "/v1/chat/completions" => {
                let message = &reply["choices"][0]["message"];
                let call = message["tool_calls"][0].clone();
                if !call.is_null() {
                    history.push(message.clone());
                    history.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "file contents"}));
                }
                ((!call.is_null()).then(|| call["function"].clone()), message["content"].clone())
            }
            "/v1/messages" => {
                let content = reply["content"].as_array().cloned().unwrap_or_default();
                let call = content.iter().find(|b| b["type"] == "tool_use").cloned();
                if let Some(call) = &call {
                    history.push(json!({"role": "assistant", "content": content}));
                    history.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "x"}]}));
                }
                let text = content.iter().find(|b| b["type"] == "text").map_or(Value::Null, |b| b["text"].clone());
                (call.map(|c| json!({"name": c["name"], "arguments": c["input"].to_string()})), text)
            }
            _ => {
                let output = reply["output"].as_array().cloned().unwrap_or_default();
                let call = output.iter().find(|i| i["type"] == "function_call").cloned();
                if let Some(call) = &call {
                    history.push(call.clone());
                    history.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": "x"}));
                }
                let text = output
                    .iter()
                    .find(|i| i["type"] == "message")
                    .map_or(Value::Null, |m| m["content"][0]["text"].clone());
                (call, text)
            }
        };
        match call {
            Some(call) => calls.push(format!(
                "{} {}",
                call["name"].as_str().unwrap_or("?"),
                call["arguments"].as_str().unwrap_or("?")
            )),
            None => return (calls, text.as_str().unwrap_or_default().to_owned()),
        }
    }
    panic!("the auto rule never finished");
}

#[test]
fn auto_calls_the_tool_n_times_then_says_done() {
    let mock = MockLlm::start(Script::auto().auto_tool("cat", json!({"path": "f{n}.txt"})));
    let (calls, text) = drive_auto(&mock, "/v1/chat/completions", "please use read_file 3 times.");
    assert_eq!(
        calls,
        [r#"read_file {"path":"f1.txt"}"#, r#"read_file {"path":"f2.txt"}"#, r#"read_file {"path":"f3.txt"}"#]
    );
    assert_eq!(text, "done");
    let (calls, text) = drive_auto(&mock, "/v1/messages", "use the tool 2 times");
    assert_eq!(calls, [r#"cat {"path":"f1.txt"}"#, r#"cat {"path":"f2.txt"}"#]);
    assert_eq!(text, "done");
    let (calls, text) = drive_auto(&mock, "/v1/responses", "use read_file 4 times");
    assert_eq!(calls.len(), 4);
    assert_eq!(text, "done");
    let (calls, text) = drive_auto(&mock, "/v1/responses", "just say something");
    assert!(calls.is_empty());
    assert_eq!(text, "ok");
    assert_eq!(mock.requests().len(), 4 + 3 + 5 + 1);
}

#[test]
fn steps_then_auto() {
    let mock = MockLlm::start(Script::new([Step::text("scripted")]).auto_tool("read_file", json!({})));
    assert_eq!(
        post(mock.addr(), "/v1/chat/completions", &chat(false, "x")).json()["choices"][0]["message"]["content"],
        "scripted"
    );
    assert_eq!(
        post(mock.addr(), "/v1/chat/completions", &chat(false, "x")).json()["choices"][0]["message"]["content"],
        "ok"
    );
}

#[test]
fn tool_call_ids_are_unique_across_requests() {
    let mock = MockLlm::start(Script::new([Step::tool_call("a", json!({})), Step::tool_call("b", json!({}))]));
    let first = post(mock.addr(), "/v1/chat/completions", &chat(false, "x")).json();
    let second = post(mock.addr(), "/v1/messages", &chat(false, "x")).json();
    assert_eq!(first["choices"][0]["message"]["tool_calls"][0]["id"], "call_1");
    assert_eq!(second["content"][0]["id"], "toolu_2");
}
