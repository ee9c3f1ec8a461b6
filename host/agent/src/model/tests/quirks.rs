//! Real servers' ways: llama-cpp-python's streaming shapes and what it refuses, answers cut at
//! the output-token limit in every wire format, streams without usage.

use super::*;

/// A tool-call chunk as llama-cpp-python streams it: id, type and name repeated in every
/// chunk, the legacy `function_call` beside `tool_calls`.
fn llama_call(index: u64, id: &str, name: &str, piece: &str) -> Value {
    let function = json!({"name": name, "arguments": piece});
    chunk(json!({"role": "assistant", "content": null, "function_call": function,
        "tool_calls": [{"index": index, "id": id, "type": "function", "function": function}]}))
}

#[tokio::test]
async fn llama_cpp_tool_call_chunks_with_repeated_ids_and_names_make_one_call_each() {
    let server = Server::start(vec![Canned::sse(&[
        llama_call(0, "call_1", "read_file", "{\"pa"),
        llama_call(0, "call_1", "read_file", "th\": \"a"),
        llama_call(0, "call_1", "read_file", ".txt\"}"),
        llama_call(1, "call_2", "list_dir", "{}"),
        finish("tool_calls"),
        json!("[DONE]"),
    ])])
    .await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "smollm");
    let (reply, _) = call(&p, &[Message::user("hi")], true).await;
    let reply = reply.expect("reply");
    let (_, tool_calls, _, _) = assistant(&reply);
    assert_eq!(
        tool_calls,
        calls(&[("call_1", "read_file", r#"{"path": "a.txt"}"#), ("call_2", "list_dir", "{}")]).as_slice()
    );
    assert!(reply.usage.estimated, "no usage chunk: the counts are estimates");
}

#[tokio::test]
async fn assistant_tool_call_messages_carry_empty_string_content_never_null() {
    let server = Server::start(vec![ok_chat("ok")]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let (reply, _) = call(&p, &history(), true).await;
    reply.expect("reply");
    let body = &server.requests()[0].body;
    let messages = body["messages"].as_array().expect("messages");
    assert!(messages.iter().all(|m| m["content"].is_string()), "every content is a string: {body}");
    assert_eq!(messages[2]["content"], json!(""));
}

#[tokio::test]
async fn tool_choice_is_sent_with_tools_as_configured_in_each_wire_format() {
    let cases = [
        (ToolChoice::Auto, json!("auto"), json!({"type": "auto"})),
        (ToolChoice::Required, json!("required"), json!({"type": "any"})),
        (ToolChoice::None, json!("none"), json!({"type": "none"})),
        (ToolChoice::Off, Value::Null, Value::Null),
    ];
    let messages = [Message::user("hi")];
    let tools = tools();
    for (choice, openai, anthropic) in cases {
        for mode in [ApiMode::ChatCompletions, ApiMode::Responses, ApiMode::AnthropicMessages] {
            let mut p = provider(mode, "http://127.0.0.1:9/v1", "m");
            p.tool_choice = choice;
            let request = ModelRequest { system: "", messages: &messages, tools: &tools, stream: true };
            let body = match mode {
                ApiMode::ChatCompletions => crate::model::chat::request_body(&p, &request),
                ApiMode::Responses => crate::model::responses::request_body(&p, &request),
                ApiMode::AnthropicMessages => crate::model::anthropic::request_body(&p, &request),
            };
            let want = if mode == ApiMode::AnthropicMessages { &anthropic } else { &openai };
            assert_eq!(body.get("tool_choice").unwrap_or(&Value::Null), want, "{choice:?} in {mode}");
            let bare = ModelRequest { tools: &[], ..request };
            let body = crate::model::chat::request_body(&p, &bare);
            assert!(body.get("tool_choice").is_none(), "no tools, no tool_choice");
        }
    }
}

#[tokio::test]
async fn answers_cut_at_the_output_token_limit_are_recognised_in_every_format() {
    let anthropic = Canned::json(
        200,
        json!({"type": "message", "model": "claude", "stop_reason": "max_tokens",
            "content": [{"type": "text", "text": "Once upon a"}], "usage": {"input_tokens": 5, "output_tokens": 3}}),
    );
    let responses = Canned::json(
        200,
        json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "model": "gpt",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "Once upon a"}]}]}),
    );
    let chat = Canned::sse(&[chunk(json!({"content": "Once upon a"})), finish("length"), json!("[DONE]")]);
    for (mode, canned) in
        [(ApiMode::ChatCompletions, chat), (ApiMode::AnthropicMessages, anthropic), (ApiMode::Responses, responses)]
    {
        let server = Server::start(vec![canned]).await;
        let p = provider(mode, &server.url, "m");
        let (reply, _) = call(&p, &[Message::user("tell a story")], true).await;
        let reply = reply.expect("a cut answer is still an answer");
        assert!(reply.truncated(), "{mode}: {:?}", reply.finish_reason);
        assert_eq!(reply.message.content(), "Once upon a", "{mode}");
    }
}

#[tokio::test]
async fn a_limit_spent_before_any_answer_says_which_limit() {
    let server = Server::start(vec![Canned::sse(&[
        chunk(json!({"reasoning_content": "Let me think about this at great length"})),
        finish("length"),
        json!("[DONE]"),
    ])])
    .await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "m");
    p.max_tokens = Some(16);
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    let text = err.expect_err("nothing usable").to_string();
    assert!(
        text.ends_with(
            "sent an empty reply: the output-token limit (16; `max_tokens` under [model]) ran out before any answer \
             (stop reason `length`, all of it spent on reasoning)"
        ),
        "{text}"
    );
}

/// A whole chat-completions answer saying `text`, stopped for `reason`.
fn whole_chat(text: &str, reason: &str) -> Canned {
    Canned::json(
        200,
        json!({"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": text}, "finish_reason": reason}]}),
    )
}

#[tokio::test]
async fn a_whole_reply_is_bounded_without_max_tokens_and_a_streamed_one_is_left_to_the_server() {
    // llama-cpp-python sends no limit of its own: a whole reply asked for without one could run
    // for minutes, and goes on running after the client gives up.
    let server = Server::start(vec![whole_chat("ok", "stop"), ok_chat("ok"), whole_chat("ok", "stop")]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "m");
    for stream in [false, true] {
        let (reply, _) = call(&p, &[Message::user("hi")], stream).await;
        reply.expect("reply");
    }
    p.max_tokens = Some(20_000);
    call(&p, &[Message::user("hi")], false).await.0.expect("reply");
    let sent: Vec<Value> = server.requests().iter().map(|r| r.body["max_tokens"].clone()).collect();
    assert_eq!(sent, [json!(WHOLE_REPLY_MAX_TOKENS), Value::Null, json!(20_000)], "whole, streamed, configured");
    assert_eq!(WHOLE_REPLY_MAX_TOKENS, 4096);

    let whole = json!({"type": "response", "id": "r1", "object": "response", "status": "completed", "model": "m",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]});
    let server = Server::start(vec![Canned::json(200, whole)]).await;
    let p = provider(ApiMode::Responses, &server.url, "m");
    call(&p, &[Message::user("hi")], false).await.0.expect("reply");
    assert_eq!(server.requests()[0].body["max_output_tokens"], json!(WHOLE_REPLY_MAX_TOKENS));

    // Anthropic requires a limit and always had one.
    let whole = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1}});
    let server = Server::start(vec![Canned::json(200, whole)]).await;
    let p = provider(ApiMode::AnthropicMessages, &server.url, "claude");
    call(&p, &[Message::user("hi")], false).await.0.expect("reply");
    assert_eq!(server.requests()[0].body["max_tokens"], json!(8192));
}

#[tokio::test]
async fn a_whole_reply_that_spends_the_default_limit_names_it() {
    let server = Server::start(vec![whole_chat("", "length")]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let (err, _) = call(&p, &[Message::user("hi")], false).await;
    let text = err.expect_err("nothing usable").to_string();
    assert!(text.contains("the output-token limit (4096; `max_tokens` under [model]) ran out"), "{text}");
}

/// Issue 36, finding 6: an image a tool returned goes to a model that takes images, in each
/// format's own shape, after the tool's text; a model that takes none gets a note instead.
#[test]
fn images_from_tools_reach_a_vision_model_and_are_named_to_any_other() {
    let image = talaria_protocol::Image { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() };
    let url = "data:image/png;base64,iVBORw0KGgo=";
    let messages = [
        Message::user("draw"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall::new("c1", "mcp__img__tiny_png", "{}"), ToolCall::new("c2", "read_file", "{}")],
            reasoning: None,
            extra: None,
        },
        Message::Tool {
            tool_call_id: "c1".into(),
            name: "mcp__img__tiny_png".into(),
            content: "[image, image/png, attached]".into(),
            images: vec![image],
        },
        Message::tool("c2", "read_file", "text"),
        Message::assistant("a red square"),
    ];
    for vision in [true, false] {
        for mode in [ApiMode::ChatCompletions, ApiMode::Responses, ApiMode::AnthropicMessages] {
            let mut p = provider(mode, "http://127.0.0.1:9/v1", "m");
            p.vision = vision;
            let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: false };
            let body = match mode {
                ApiMode::ChatCompletions => crate::model::chat::request_body(&p, &request),
                ApiMode::Responses => crate::model::responses::request_body(&p, &request),
                ApiMode::AnthropicMessages => crate::model::anthropic::request_body(&p, &request),
            };
            let text = body.to_string();
            if !vision {
                assert!(!text.contains("iVBORw0KGgo"), "{mode}: {body}");
                assert!(text.contains("not shown: m does not take images") && text.contains("vision = true"), "{body}");
                continue;
            }
            assert!(!text.contains("not shown"), "{mode}: {body}");
            match mode {
                ApiMode::ChatCompletions => {
                    // Both results first (a tool message holds text), then the image.
                    let m = body["messages"].as_array().expect("messages");
                    let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap_or_default()).collect();
                    assert_eq!(roles, ["user", "assistant", "tool", "tool", "user", "assistant"], "{body}");
                    assert_eq!(m[4]["content"][1]["text"], "mcp__img__tiny_png (call c1):");
                    assert_eq!(m[4]["content"][2], json!({"type": "image_url", "image_url": {"url": url}}));
                }
                ApiMode::Responses => {
                    let items = body["input"].as_array().expect("input");
                    let result = items.iter().find(|i| i["type"] == "function_call_output").expect("a result");
                    let output = &result["output"];
                    assert_eq!(output[0], json!({"type": "input_text", "text": "[image, image/png, attached]"}));
                    assert_eq!(output[1], json!({"type": "input_image", "image_url": url}));
                }
                ApiMode::AnthropicMessages => {
                    let result = &body["messages"][2]["content"][0];
                    assert_eq!(result["tool_use_id"], "c1");
                    assert_eq!(
                        result["content"][1],
                        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
                    );
                }
            }
        }
    }
}
