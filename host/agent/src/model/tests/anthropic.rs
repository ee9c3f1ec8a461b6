//! Anthropic Messages: thinking, text and usage, tool use from JSON pieces, whole messages, merged
//! tool results, errors, cut streams.

use super::*;

fn message_start(usage: Value) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-test-2025", "content": [], "stop_reason": null, "usage": usage}})
}

fn block_start(index: u64, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn block_delta(index: u64, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn block_stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn message_end(stop_reason: &str, output_tokens: u64) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
        json!({"type": "message_stop"}),
    ]
}

#[tokio::test]
async fn anthropic_streams_thinking_text_and_usage() {
    let [delta, stop] = message_end("end_turn", 7);
    let server = Server::start(vec![Canned::named(&[
        message_start(json!({"input_tokens": 20, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5, "output_tokens": 1})),
        block_start(0, json!({"type": "thinking", "thinking": "", "signature": ""})),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "think."})),
        block_delta(0, json!({"type": "signature_delta", "signature": "SIG=="})),
        block_stop(0),
        json!({"type": "ping"}),
        block_start(1, json!({"type": "text", "text": ""})),
        block_delta(1, json!({"type": "text_delta", "text": "Hel"})),
        block_delta(1, json!({"type": "text_delta", "text": "lo"})),
        block_stop(1),
        delta,
        stop,
    ])])
    .await;
    let p = provider(ApiMode::AnthropicMessages, &server.url, "claude-test");
    let (reply, deltas) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    assert_eq!(
        deltas,
        vec![Delta::Reasoning("Let me ".into()), Delta::Reasoning("think.".into()), text("Hel"), text("lo")]
    );
    let (content, tool_calls, reasoning, extra) = assistant(&reply);
    assert_eq!((content, reasoning), ("Hello", Some("Let me think.")));
    assert!(tool_calls.is_empty());
    assert_eq!(
        extra,
        Some(&json!({"anthropic_thinking": [{"type": "thinking", "thinking": "Let me think.", "signature": "SIG=="}]}))
    );
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 125,
            output_tokens: 7,
            cache_read_tokens: 100,
            cache_write_tokens: 5,
            reasoning_tokens: 0,
            estimated: false,
        }
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("end_turn"));
    assert_eq!(reply.model, "claude-test-2025");
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("sk-test"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
}

#[tokio::test]
async fn anthropic_assembles_tool_use_from_json_pieces() {
    let [delta, stop] = message_end("tool_use", 30);
    let server = Server::start(vec![Canned::named(&[
        message_start(json!({"input_tokens": 50, "output_tokens": 1})),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": "Reading both."})),
        block_stop(0),
        block_start(1, json!({"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {}})),
        block_delta(1, json!({"type": "input_json_delta", "partial_json": ""})),
        block_delta(1, json!({"type": "input_json_delta", "partial_json": "{\"path\": "})),
        block_delta(1, json!({"type": "input_json_delta", "partial_json": "\"a\"}"})),
        block_stop(1),
        block_start(2, json!({"type": "tool_use", "id": "toolu_b", "name": "list_dir", "input": {}})),
        block_stop(2),
        delta,
        stop,
    ])])
    .await;
    let p = provider(ApiMode::AnthropicMessages, &server.url, "claude-test");
    let (reply, _) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    let (content, tool_calls, reasoning, extra) = assistant(&reply);
    assert_eq!(content, "Reading both.");
    assert_eq!(
        tool_calls,
        calls(&[("toolu_a", "read_file", r#"{"path": "a"}"#), ("toolu_b", "list_dir", "{}")]).as_slice()
    );
    assert_eq!((reasoning, extra), (None, None));
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!((reply.usage.input_tokens, reply.usage.output_tokens), (50, 30));
}

#[tokio::test]
async fn anthropic_reads_a_whole_message() {
    let server = Server::start(vec![Canned::json(
        200,
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-2025",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "S"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "x"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 9, "output_tokens": 3, "cache_read_input_tokens": 1}}),
    )])
    .await;
    let p = provider(ApiMode::AnthropicMessages, &server.url, "claude-test");
    let (reply, deltas) = call(&p, &[Message::user("hi")], false).await;
    let reply = reply.expect("reply");
    assert!(deltas.is_empty());
    let (content, tool_calls, reasoning, extra) = assistant(&reply);
    assert_eq!((content, reasoning), ("Let me look.", Some("hmm")));
    assert_eq!(tool_calls, calls(&[("toolu_1", "read_file", r#"{"path":"x"}"#)]).as_slice());
    assert_eq!(
        extra,
        Some(&json!({"anthropic_thinking": [
            {"type": "thinking", "thinking": "hmm", "signature": "S"},
            {"type": "redacted_thinking", "data": "opaque"},
        ]}))
    );
    assert_eq!((reply.usage.input_tokens, reply.usage.cache_read_tokens), (10, 1));
    assert_eq!(server.requests()[0].body["stream"], json!(false));
}

#[tokio::test]
async fn anthropic_merges_tool_results_into_one_user_message() {
    let [delta, stop] = message_end("end_turn", 1);
    let server = Server::start(vec![Canned::named(&[
        message_start(json!({"input_tokens": 1})),
        block_start(0, json!({"type": "text", "text": "ok"})),
        block_stop(0),
        delta,
        stop,
    ])])
    .await;
    let p = provider(ApiMode::AnthropicMessages, &server.url, "claude-test");
    let mut messages = history();
    // The first assistant turn thought before calling tools; its thinking goes back first.
    if let Message::Assistant { extra, reasoning, .. } = &mut messages[1] {
        *reasoning = Some("plan".into());
        *extra = Some(json!({"anthropic_thinking": [{"type": "thinking", "thinking": "plan", "signature": "S1"}]}));
    }
    // Two user messages in a row (a steer after the results) must merge too.
    messages.insert(4, Message::user("also check c"));
    let (reply, _) = call(&p, &messages, true).await;
    assert_eq!(assistant(&reply.expect("reply")).0, "ok");
    let cache = json!({"type": "ephemeral"});
    let expected = json!({
        "model": "claude-test",
        "max_tokens": 8192,
        "stream": true,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": cache}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read a and b"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": "S1"},
                {"type": "tool_use", "id": "call_a", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "call_b", "name": "read_file", "input": {"_raw": "{\"path\":\"b"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "contents of a"},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "{\"error\":\"invalid arguments: not JSON\"}", "is_error": true},
                {"type": "text", "text": "also check c", "cache_control": cache},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "a says hi; b failed"}]},
            {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": cache}]},
        ],
        "tools": [{"name": "read_file", "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}],
        "tool_choice": {"type": "auto"},
    });
    assert_eq!(server.requests()[0].body, expected);
}

#[tokio::test]
async fn anthropic_errors_over_http_and_in_the_stream() {
    let server = Server::start(vec![
        Canned::json(429, json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}))
            .header("retry-after", "12"),
        Canned::json(529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        Canned::named(&[
            message_start(json!({"input_tokens": 1})),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]),
        Canned::named(&[message_start(json!({"input_tokens": 1})), block_start(0, json!({"type": "text", "text": ""})),
            block_delta(0, json!({"type": "text_delta", "text": "Hel"}))])
        .delivered(Delivery::UntilClose),
    ])
    .await;
    let p = provider(ApiMode::AnthropicMessages, &server.url, "claude-test");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert_eq!(
        err,
        Err(ModelError::Http {
            provider: "custom".into(),
            url: format!("{}/messages", server.url),
            status: 429,
            message: "Number of request tokens has exceeded your per-minute rate limit".into(),
            retry_after: Some(Duration::from_secs(12)),
        })
    );
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(matches!(err, Err(ModelError::Http { status: 529, .. })), "{err:?}");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Http { status: 529, ref message, .. }) if message == "Overloaded"),
        "{err:?}"
    );
    let (err, deltas) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Cut { ref message, ref partial, silent: false, .. })
            if message.contains("message_stop") && partial == "Hel"),
        "{err:?}"
    );
    assert_eq!(deltas, vec![text("Hel")]);
}
