//! Anthropic Messages (`POST {base_url}/messages`, `x-api-key`, `anthropic-version: 2023-06-01`).
//!
//! Mapping from the OpenAI-style history:
//! - the system prompt (and any `System` message in the history) goes top-level in `system`;
//! - messages are lists of content blocks, and consecutive messages of one role are merged
//!   (Anthropic rejects two user messages in a row): the tool results after an assistant turn
//!   become ONE user message of `tool_result` blocks; a result that is exactly `{"error": ...}`
//!   is marked `is_error`;
//! - assistant tool calls become `tool_use` blocks whose `input` is the parsed arguments. Stored
//!   arguments that are not a JSON object are replayed as `{"_raw": "<the text>"}` (an empty
//!   string as `{}`): `input` must be an object, and the model should see what it actually sent,
//!   which the tool error it got back refers to;
//! - thinking blocks, kept with their signatures in the assistant's `extra` as
//!   `{"anthropic_thinking": [blocks]}`, are replayed first in its content; their text is also
//!   in `reasoning`;
//! - `max_tokens` is required: [`Provider::max_tokens`] or 8192;
//! - prompt caching: `cache_control` breakpoints on the system prompt (which caches the tools
//!   too) and on the last block of each of the last two user messages, so a tool loop reads
//!   the previous call's prefix from the cache.
//!
//! `Usage::input_tokens` is Anthropic's `input_tokens` plus cache reads and cache writes, which
//! Anthropic counts apart.

use serde_json::{Value, json};
use talaria_protocol::{Image, Message, ToolCall, Usage};

use super::chat::emit_whole;
use super::reply::{Collected, as_text, tool_text};
use super::sse::{self, Events};
use super::transport;
use super::{Delta, ModelError, ModelReply, ModelRequest, Provider, ToolChoice};

/// `anthropic-version` sent with every request.
pub(crate) const VERSION: &str = "2023-06-01";
/// `max_tokens` when the provider sets none.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 8192;

pub(crate) async fn complete(
    http: &reqwest::Client,
    provider: &Provider,
    request: &ModelRequest<'_>,
    on_delta: &(dyn Fn(Delta) + Send + Sync),
) -> Result<ModelReply, ModelError> {
    let url = provider.url("messages");
    let mut builder = http.post(&url).header("anthropic-version", VERSION).json(&request_body(provider, request));
    if let Some(key) = &provider.api_key {
        builder = builder.header("x-api-key", key);
    }
    let body = match sse::exchange(provider, &url, builder, request.stream).await? {
        sse::Answer::Stream(events) => return read_stream(provider, *events, on_delta).await?.finish(provider, &url),
        sse::Answer::Whole(body) => body,
    };
    let collected = parse_message(provider, &url, &body)?;
    if request.stream {
        emit_whole(&collected, on_delta);
    }
    collected.finish(provider, &url)
}

pub(crate) fn request_body(provider: &Provider, request: &ModelRequest<'_>) -> Value {
    let mut system: Vec<&str> = Vec::new();
    if !request.system.is_empty() {
        system.push(request.system);
    }
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in request.messages {
        let (role, blocks) = match message {
            Message::System { content } => {
                system.push(content);
                continue;
            }
            Message::User { content, images } => {
                let mut blocks: Vec<Value> = text_block(content).into_iter().collect();
                blocks.extend(images.iter().map(image_block));
                ("user", blocks)
            }
            Message::Assistant { content, tool_calls, reasoning: _, extra } => {
                ("assistant", assistant_blocks(content, tool_calls, extra.as_ref()))
            }
            Message::Tool { tool_call_id, name: _, content, images } => {
                ("user", vec![tool_result(provider, tool_call_id, content, images)])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    for (_, blocks) in messages.iter_mut().rev().filter(|(role, _)| *role == "user").take(2) {
        if let Some(Value::Object(block)) = blocks.last_mut() {
            block.insert("cache_control".into(), json!({"type": "ephemeral"}));
        }
    }
    let messages: Vec<Value> =
        messages.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
    let mut body = json!({
        "model": provider.model,
        "max_tokens": provider.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
        "stream": request.stream,
    });
    if !system.is_empty() {
        body["system"] = json!([{"type": "text", "text": system.join("\n\n"), "cache_control": {"type": "ephemeral"}}]);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters}))
            .collect();
        match provider.tool_choice {
            ToolChoice::Auto => body["tool_choice"] = json!({"type": "auto"}),
            ToolChoice::Required => body["tool_choice"] = json!({"type": "any"}),
            ToolChoice::None => body["tool_choice"] = json!({"type": "none"}),
            ToolChoice::Off => {}
        }
    }
    body
}

fn image_block(image: &Image) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}})
}

/// A text block, or nothing for empty text (Anthropic rejects empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn assistant_blocks(content: &str, tool_calls: &[ToolCall], extra: Option<&Value>) -> Vec<Value> {
    let thinking = extra.and_then(|e| e.get("anthropic_thinking")).and_then(Value::as_array);
    let mut blocks: Vec<Value> = thinking
        .into_iter()
        .flatten()
        .filter(|b| matches!(b.get("type").and_then(Value::as_str), Some("thinking" | "redacted_thinking")))
        .cloned()
        .collect();
    blocks.extend(text_block(content));
    blocks.extend(tool_calls.iter().map(
        |call| json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(&call.arguments)}),
    ));
    blocks
}

/// The `input` object for stored arguments; see the module documentation.
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ => json!({"_raw": arguments}),
    }
}

fn tool_result(provider: &Provider, tool_use_id: &str, content: &str, images: &[Image]) -> Value {
    let text = tool_text(provider, content, images);
    let mut block = json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": text});
    if provider.vision && !images.is_empty() {
        let mut blocks: Vec<Value> = text_block(&text).into_iter().collect();
        blocks.extend(images.iter().map(image_block));
        block["content"] = Value::Array(blocks);
    }
    let is_error = serde_json::from_str::<Value>(content)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.len() == 1 && o.contains_key("error")))
        .unwrap_or(false);
    if is_error {
        block["is_error"] = json!(true);
    }
    block
}

/// One content block of the answer.
#[derive(Debug)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
        input: Value,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking(Value),
    /// Server tools, citations and anything newer: not part of the reply.
    Other,
}

impl Block {
    fn from_start(block: &Value) -> Self {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => Block::Text(as_text(block.get("text"))),
            Some("tool_use") => Block::ToolUse {
                id: as_text(block.get("id")),
                name: as_text(block.get("name")),
                json: String::new(),
                input: block.get("input").cloned().unwrap_or(Value::Null),
            },
            Some("thinking") => {
                Block::Thinking { thinking: as_text(block.get("thinking")), signature: as_text(block.get("signature")) }
            }
            Some("redacted_thinking") => Block::RedactedThinking(block.clone()),
            _ => Block::Other,
        }
    }
}

/// Builds the reply from the blocks in order.
fn collect_blocks(blocks: Vec<Block>, collected: &mut Collected) {
    let mut thinking_blocks = Vec::new();
    let mut reasoning = Vec::new();
    for block in blocks {
        match block {
            Block::Text(text) => collected.text.push_str(&text),
            Block::ToolUse { id, name, json, input } => {
                let arguments = if !json.trim().is_empty() {
                    json
                } else if input.as_object().is_some_and(|o| !o.is_empty()) {
                    input.to_string()
                } else {
                    "{}".to_string()
                };
                collected.tool_calls.push(ToolCall::new(id, name, arguments));
            }
            Block::Thinking { thinking, signature } => {
                thinking_blocks.push(json!({"type": "thinking", "thinking": thinking, "signature": signature}));
                reasoning.push(thinking);
            }
            Block::RedactedThinking(block) => thinking_blocks.push(block),
            Block::Other => {}
        }
    }
    collected.reasoning = reasoning.join("\n\n");
    if !thinking_blocks.is_empty() {
        collected.extra = Some(json!({"anthropic_thinking": thinking_blocks}));
    }
}

/// `usage` of a message (or of a `message_delta`, where absent fields keep their earlier value).
fn apply_usage(usage: &Value, into: &mut Usage) {
    let field = |key: &str| usage.get(key).and_then(Value::as_u64);
    if let Some(n) = field("cache_read_input_tokens") {
        into.cache_read_tokens = n;
    }
    if let Some(n) = field("cache_creation_input_tokens") {
        into.cache_write_tokens = n;
    }
    if let Some(n) = field("input_tokens") {
        into.input_tokens = n;
    }
    if let Some(n) = field("output_tokens") {
        into.output_tokens = n;
    }
}

/// Anthropic counts cached input apart; talaria's input includes it.
fn total_usage(mut usage: Usage) -> Usage {
    usage.input_tokens += usage.cache_read_tokens + usage.cache_write_tokens;
    usage
}

async fn read_stream(
    provider: &Provider,
    mut events: Events,
    on_delta: &(dyn Fn(Delta) + Send + Sync),
) -> Result<Collected, ModelError> {
    let mut collected = Collected::default();
    let mut blocks: Vec<(u64, Block)> = Vec::new();
    let mut usage = Usage::default();
    let mut stopped = false;
    let url = events.url().to_string();
    let streamed = |blocks: &[(u64, Block)]| -> String {
        blocks.iter().filter_map(|(_, b)| if let Block::Text(t) = b { Some(t.as_str()) } else { None }).collect()
    };
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| e.with_partial(&streamed(&blocks)))?;
        if event.data.trim().is_empty() {
            continue;
        }
        let data = sse::parse_data(provider, &url, &event)?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event.event.as_str());
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                let message = data.get("message").unwrap_or(&Value::Null);
                collected.model = message.get("model").and_then(Value::as_str).map(str::to_string);
                apply_usage(message.get("usage").unwrap_or(&Value::Null), &mut usage);
            }
            "content_block_start" => {
                blocks.push((index, Block::from_start(data.get("content_block").unwrap_or(&Value::Null))));
            }
            "content_block_delta" => {
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let Some((_, block)) = blocks.iter_mut().rev().find(|(i, _)| *i == index) else {
                    return Err(ModelError::Malformed {
                        provider: provider.name.clone(),
                        url: url.clone(),
                        message: format!("a delta for content block {index}, which never started"),
                    });
                };
                apply_delta(block, delta, on_delta);
            }
            "message_delta" => {
                if let Some(reason) = data.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    collected.finish_reason = Some(reason.to_string());
                }
                apply_usage(data.get("usage").unwrap_or(&Value::Null), &mut usage);
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => return Err(sse::stream_error(provider, &url, data.get("error").unwrap_or(&data))),
            // ping, content_block_stop, and event types added later
            _ => {}
        }
    }
    if !stopped {
        return Err(sse::cut_short(provider, &url, "`message_stop`", &streamed(&blocks)));
    }
    collect_blocks(blocks.into_iter().map(|(_, block)| block).collect(), &mut collected);
    collected.usage = total_usage(usage);
    Ok(collected)
}

fn apply_delta(block: &mut Block, delta: &Value, on_delta: &(dyn Fn(Delta) + Send + Sync)) {
    let piece = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
    match (block, delta.get("type").and_then(Value::as_str)) {
        (Block::Text(text), Some("text_delta")) => {
            let more = piece("text");
            if !more.is_empty() {
                text.push_str(more);
                on_delta(Delta::Text(more.to_string()));
            }
        }
        (Block::ToolUse { json, .. }, Some("input_json_delta")) => json.push_str(piece("partial_json")),
        (Block::Thinking { thinking, .. }, Some("thinking_delta")) => {
            let more = piece("thinking");
            if !more.is_empty() {
                thinking.push_str(more);
                on_delta(Delta::Reasoning(more.to_string()));
            }
        }
        (Block::Thinking { signature, .. }, Some("signature_delta")) => signature.push_str(piece("signature")),
        // citations_delta and pieces of blocks talaria does not keep
        _ => {}
    }
}

/// A whole (non-streamed) message.
pub(crate) fn parse_message(provider: &Provider, url: &str, body: &Value) -> Result<Collected, ModelError> {
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(sse::stream_error(provider, url, body.get("error").unwrap_or(body)));
    }
    let content = body.get("content").and_then(Value::as_array).ok_or_else(|| ModelError::Malformed {
        provider: provider.name.clone(),
        url: url.to_string(),
        message: format!("the answer has no content: {}", transport::truncate(&body.to_string(), 200)),
    })?;
    let mut collected = Collected {
        model: body.get("model").and_then(Value::as_str).map(str::to_string),
        finish_reason: body.get("stop_reason").and_then(Value::as_str).map(str::to_string),
        ..Collected::default()
    };
    collect_blocks(content.iter().map(Block::from_start).collect(), &mut collected);
    let mut usage = Usage::default();
    apply_usage(body.get("usage").unwrap_or(&Value::Null), &mut usage);
    collected.usage = total_usage(usage);
    Ok(collected)
}
