//! OpenAI Responses: text and usage, function calls and reasoning items, whole responses, input
//! items, failures, cut streams.

use super::*;

fn completed(output: Value, usage: Value) -> Value {
    json!({"type": "response.completed", "response": {"id": "resp_1", "object": "response", "status": "completed",
        "model": "gpt-resp-2025", "output": output, "usage": usage}})
}

fn responses_usage() -> Value {
    json!({"input_tokens": 40, "output_tokens": 12, "total_tokens": 52,
        "input_tokens_details": {"cached_tokens": 32}, "output_tokens_details": {"reasoning_tokens": 8}})
}

#[tokio::test]
async fn responses_streams_text_and_usage() {
    let message = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "Hello", "annotations": []}]});
    let server = Server::start(vec![Canned::named(&[
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hel"}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "lo"}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": message}),
        completed(json!([message]), responses_usage()),
    ])])
    .await;
    let p = provider(ApiMode::Responses, &server.url, "gpt-4.1");
    let (reply, deltas) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    assert_eq!(deltas, vec![text("Hel"), text("lo")]);
    let (content, tool_calls, reasoning, extra) = assistant(&reply);
    assert_eq!(content, "Hello");
    assert!(tool_calls.is_empty() && reasoning.is_none() && extra.is_none());
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 12,
            cache_read_tokens: 32,
            cache_write_tokens: 0,
            reasoning_tokens: 8,
            estimated: false,
        }
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("completed"));
    assert_eq!(reply.model, "gpt-resp-2025");
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(sent.body["store"], json!(false));
    assert!(sent.body.get("include").is_none(), "gpt-4.1 rejects encrypted reasoning");
}

#[tokio::test]
async fn responses_streams_tool_calls_and_keeps_reasoning_items() {
    let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need a file."}],
        "encrypted_content": "gAAAA-secret"});
    let call_item = |args: &str| json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": args, "status": "completed"});
    let server = Server::start(vec![Canned::named(&[
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "Need a file."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": call_item("")}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": "{\"path\""}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": ":\"a\"}"}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 1, "arguments": "{\"path\":\"a\"}"}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": call_item("{\"path\":\"a\"}")}),
        // An abridged final object: the streamed items stand.
        completed(json!([]), responses_usage()),
    ])])
    .await;
    let p = provider(ApiMode::Responses, &server.url, "o4-mini");
    let (reply, deltas) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    assert_eq!(deltas, vec![Delta::Reasoning("Need a file.".into())]);
    let (content, tool_calls, reasoning_text, extra) = assistant(&reply);
    assert_eq!(content, "");
    assert_eq!(tool_calls, calls(&[("call_1", "read_file", r#"{"path":"a"}"#)]).as_slice());
    assert_eq!(reasoning_text, Some("Need a file."));
    assert_eq!(extra, Some(&json!({"responses_items": [reasoning]})));
    assert_eq!(server.requests()[0].body["include"], json!(["reasoning.encrypted_content"]));
}

#[tokio::test]
async fn responses_reads_a_whole_response() {
    let server = Server::start(vec![Canned::json(
        200,
        json!({"id": "resp_1", "object": "response", "status": "incomplete", "model": "gpt-resp-2025",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Partial"}]},
                {"type": "function_call", "call_id": "call_9", "name": "read_file", "arguments": ""},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 2}}),
    )])
    .await;
    let p = provider(ApiMode::Responses, &server.url, "gpt-4.1");
    let (reply, _) = call(&p, &[Message::user("hi")], false).await;
    let reply = reply.expect("reply");
    let (content, tool_calls, _, _) = assistant(&reply);
    assert_eq!(content, "Partial");
    assert_eq!(tool_calls, calls(&[("call_9", "read_file", "{}")]).as_slice());
    assert_eq!(reply.finish_reason.as_deref(), Some("max_output_tokens"));
    assert!(reply.truncated());
    assert_eq!(server.requests()[0].body["stream"], json!(false));
}

#[tokio::test]
async fn responses_sends_the_history_as_input_items() {
    let server = Server::start(vec![Canned::named(&[completed(
        json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]),
        json!({}),
    )])])
    .await;
    let mut p = provider(ApiMode::Responses, &server.url, "o3");
    p.max_tokens = Some(500);
    let mut messages = history();
    if let Message::Assistant { extra, .. } = &mut messages[1] {
        *extra = Some(json!({"responses_items": [
            {"type": "reasoning", "id": "rs_1", "status": "completed", "summary": [], "encrypted_content": "ENC"},
            {"type": "reasoning", "id": "rs_2", "summary": []},
        ]}));
    }
    let (reply, _) = call(&p, &messages, true).await;
    assert_eq!(assistant(&reply.expect("reply")).0, "ok");
    let expected = json!({
        "model": "o3",
        "instructions": "Be brief.",
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": 500,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Read a and b"}]},
            {"type": "reasoning", "summary": [], "encrypted_content": "ENC"},
            {"type": "function_call", "call_id": "call_a", "name": "read_file", "arguments": "{\"path\":\"a\"}"},
            {"type": "function_call", "call_id": "call_b", "name": "read_file", "arguments": "{\"path\":\"b"},
            {"type": "function_call_output", "call_id": "call_a", "output": "contents of a"},
            {"type": "function_call_output", "call_id": "call_b", "output": "{\"error\":\"invalid arguments: not JSON\"}"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a says hi; b failed"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
        ],
        "tools": [{"type": "function", "name": "read_file", "description": "Read a file", "strict": false,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}],
        "tool_choice": "auto",
    });
    assert_eq!(server.requests()[0].body, expected);
}

#[tokio::test]
async fn responses_errors_failures_and_cut_streams() {
    let server = Server::start(vec![
        Canned::json(
            429,
            json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}),
        )
        .header("retry-after-ms", "250"),
        Canned::text(503, "upstream connect error"),
        Canned::named(&[json!({"type": "response.failed", "response": {"id": "r", "status": "failed", "output": [],
            "error": {"code": "server_error", "message": "The model failed"}}})]),
        Canned::named(&[
            json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null}),
        ]),
        Canned::named(&[
            json!({"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "delta": "Hel"}),
        ])
        .delivered(Delivery::ChunkedCut),
    ])
    .await;
    let p = provider(ApiMode::Responses, &server.url, "gpt-4.1");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert_eq!(
        err,
        Err(ModelError::Http {
            provider: "custom".into(),
            url: format!("{}/responses", server.url),
            status: 429,
            message: "Rate limit reached".into(),
            retry_after: Some(Duration::from_millis(250)),
        })
    );
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Http { status: 503, ref message, .. }) if message == "upstream connect error")
    );
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Http { status: 500, ref message, .. }) if message == "The model failed"),
        "{err:?}"
    );
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(matches!(err, Err(ModelError::Http { status: 429, .. })), "{err:?}");
    let (err, deltas) = call(&p, &[Message::user("hi")], true).await;
    assert!(matches!(err, Err(ModelError::Cut { ref partial, .. }) if partial == "Hel"), "{err:?}");
    assert_eq!(deltas, vec![text("Hel")]);
}
