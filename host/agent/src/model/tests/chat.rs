//! Chat completions: streamed text, reasoning and usage, parallel tool calls, whole answers, the
//! exact request body, errors, cut streams.

use super::*;

fn chat_usage() -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": {
        "prompt_tokens": 10, "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 3}, "completion_tokens_details": {"reasoning_tokens": 2}}})
}

#[tokio::test]
async fn chat_streams_text_reasoning_and_usage() {
    let server = Server::start(vec![Canned::sse(&[
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"reasoning_content": "Think"})),
        chunk(json!({"content": "Hel"})),
        chunk(json!({"content": "lo"})),
        finish("stop"),
        chat_usage(),
        json!("[DONE]"),
    ])])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    let (reply, deltas) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    assert_eq!(deltas, vec![Delta::Reasoning("Think".into()), text("Hel"), text("lo")]);
    let (content, tool_calls, reasoning, extra) = assistant(&reply);
    assert_eq!((content, reasoning), ("Hello", Some("Think")));
    assert!(tool_calls.is_empty());
    assert_eq!(extra, None, "reasoning_content is replayed only with tool calls");
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 3,
            cache_write_tokens: 0,
            reasoning_tokens: 2,
            estimated: false
        }
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(reply.model, "gpt-test-2025");
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(sent.body["stream"], json!(true));
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn chat_assembles_two_parallel_tool_calls_from_pieces() {
    let tc = |v: Value| chunk(json!({"tool_calls": [v]}));
    let server = Server::start(vec![Canned::sse(&[
        chunk(json!({"role": "assistant", "content": null})),
        tc(json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": ""}})),
        tc(json!({"index": 0, "function": {"arguments": "{\"pa"}})),
        tc(json!({"index": 1, "id": "call_b", "type": "function", "function": {"name": "list_dir", "arguments": ""}})),
        tc(json!({"index": 0, "function": {"arguments": "th\":\"a\"}"}})),
        tc(json!({"index": 1, "function": {"arguments": "{\"dir\":"}})),
        tc(json!({"index": 1, "function": {"arguments": "\".\"}"}})),
        finish("tool_calls"),
        json!("[DONE]"),
    ])])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    let (reply, deltas) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    assert!(deltas.is_empty());
    let (content, tool_calls, _, _) = assistant(&reply);
    assert_eq!(content, "");
    assert_eq!(
        tool_calls,
        calls(&[("call_a", "read_file", r#"{"path":"a"}"#), ("call_b", "list_dir", r#"{"dir":"."}"#)]).as_slice()
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert!(reply.usage.estimated, "no usage chunk: estimated, and marked so");
    assert!(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0, "{:?}", reply.usage);
}

#[tokio::test]
async fn chat_replays_reasoning_content_with_tool_calls() {
    let server = Server::start(vec![Canned::sse(&[
        chunk(json!({"reasoning_content": "need a file"})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "read_file", "arguments": "{}"}}]})),
        finish("tool_calls"),
        json!("[DONE]"),
    ])])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "deepseek");
    let (reply, _) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    let (_, _, _, extra) = assistant(&reply);
    assert_eq!(extra, Some(&json!({"chat_fields": {"reasoning_content": "need a file"}})));
    // ... and the field goes back verbatim on the next request.
    let body = crate::model::chat::request_body(
        &p,
        &ModelRequest { system: "", messages: &[reply.message], tools: &[], stream: false },
    );
    assert_eq!(body["messages"][0]["reasoning_content"], json!("need a file"));
}

#[tokio::test]
async fn chat_reads_a_whole_answer() {
    let server = Server::start(vec![Canned::json(
        200,
        json!({"id": "x", "object": "chat.completion", "model": "gpt-test-2025",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Reading.",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"x\"}"}}]}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}}),
    )])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    let (reply, deltas) = call(&p, &[Message::user("hi")], false).await;
    let reply = reply.expect("reply");
    assert!(deltas.is_empty(), "no deltas when not streaming");
    let (content, tool_calls, _, _) = assistant(&reply);
    assert_eq!(content, "Reading.");
    assert_eq!(tool_calls, calls(&[("call_1", "read_file", r#"{"path":"x"}"#)]).as_slice());
    assert_eq!((reply.usage.input_tokens, reply.usage.output_tokens), (7, 4));
    assert_eq!(server.requests()[0].body["stream"], json!(false));
    assert!(server.requests()[0].body.get("stream_options").is_none());
}

#[tokio::test]
async fn chat_sends_the_history_as_openai_messages() {
    let server =
        Server::start(vec![Canned::sse(&[chunk(json!({"content": "ok"})), finish("stop"), json!("[DONE]")])]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    p.max_tokens = Some(1000);
    let (reply, _) = call(&p, &history(), true).await;
    reply.expect("reply");
    let expected = json!({
        "model": "gpt-test",
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": 1000,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Read a and b"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b"}},
            ]},
            {"role": "tool", "tool_call_id": "call_a", "content": "contents of a"},
            {"role": "tool", "tool_call_id": "call_b", "content": "{\"error\":\"invalid arguments: not JSON\"}"},
            {"role": "assistant", "content": "a says hi; b failed"},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
        "tool_choice": "auto",
    });
    assert_eq!(server.requests()[0].body, expected);
}

#[tokio::test]
async fn chat_http_errors_carry_the_provider_message_and_retry_after() {
    let server = Server::start(vec![
        Canned::json(429, json!({"error": {"message": "Rate limit reached for gpt-test", "type": "requests"}}))
            .header("retry-after", "7"),
        Canned::text(500, "<html>Internal Server Error</html>"),
        Canned::text(502, ""),
    ])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    let err = err.expect_err("429");
    assert_eq!(
        err,
        ModelError::Http {
            provider: "custom".into(),
            url: format!("{}/chat/completions", server.url),
            status: 429,
            message: "Rate limit reached for gpt-test".into(),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
    assert!(err.is_transient());
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert_eq!(
        err.expect_err("500"),
        ModelError::Http {
            provider: "custom".into(),
            url: format!("{}/chat/completions", server.url),
            status: 500,
            message: "Internal Server Error, with an HTML page (text/html), not an API answer: \
                      `<html>Internal Server Error</html>`"
                .into(),
            retry_after: None
        }
    );
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Http { status: 502, ref message, .. })
            if message == "Bad Gateway; the server did not say why: its own log or console tells what failed"),
        "{err:?}"
    );
}

#[tokio::test]
async fn chat_stream_cut_before_done_is_a_cut_with_its_partial_answer() {
    let events = [chunk(json!({"content": "Hel"}))];
    let server = Server::start(vec![
        Canned::sse(&events).delivered(Delivery::UntilClose),
        Canned::sse(&events).delivered(Delivery::ChunkedCut),
    ])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    for delivery in ["clean close", "broken chunked body"] {
        let (err, deltas) = call(&p, &[Message::user("hi")], true).await;
        let err = err.expect_err(delivery);
        assert!(matches!(err, ModelError::Cut { silent: false, .. }), "{delivery}: {err:?}");
        assert_eq!(err.partial(), "Hel", "{delivery}");
        assert!(err.to_string().starts_with(&format!("the reply from {}/chat/completions was cut off", server.url)));
        assert!(err.is_transient());
        assert_eq!(deltas, vec![text("Hel")], "{delivery}");
    }
}

#[tokio::test]
async fn chat_error_inside_a_stream_and_empty_answers() {
    let server = Server::start(vec![
        Canned::sse(&[
            chunk(json!({"content": "par"})),
            json!({"error": {"code": 502, "message": "upstream died", "metadata": {"provider_name": "X"}}}),
        ]),
        Canned::sse(&[chunk(json!({"content": ""})), finish("stop"), json!("[DONE]")]),
        Canned::json(200, json!({"error": {"message": "model overloaded", "code": "server_error"}})),
    ])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Http { status: 502, ref message, .. }) if message == "upstream died (X)"),
        "{err:?}"
    );
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Empty { ref message, .. }) if message == "no text and no tool calls (stop reason `stop`)"),
        "{err:?}"
    );
    let (err, _) = call(&p, &[Message::user("hi")], false).await;
    assert!(matches!(err, Err(ModelError::Http { status: 500, .. })), "{err:?}");
}

#[tokio::test]
async fn chat_json_answer_to_a_streamed_request_is_still_shown() {
    let server = Server::start(vec![Canned::json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}]}),
    )])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    let (reply, deltas) = call(&p, &[Message::user("hi")], true).await;
    assert_eq!(assistant(&reply.expect("reply")).0, "whole");
    assert_eq!(deltas, vec![text("whole")]);
}
