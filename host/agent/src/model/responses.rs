//! OpenAI Responses (`POST {base_url}/responses`), stateless (`store: false`).
//!
//! Mapping from the OpenAI-style history: the system prompt (and any `System` message) becomes
//! `instructions`; user text is an `input_text` message; assistant text an `output_text`
//! message; each assistant tool call a `function_call` item (`call_id`, `name`, `arguments`);
//! each tool result a `function_call_output` item. Tools are `{type: function, name,
//! description, parameters, strict: false}` (the Responses API would otherwise make every schema
//! strict, which ordinary plugin schemas fail).
//!
//! Reasoning: for reasoning models (o-series, gpt-5 except `*-chat*`, codex models) the request
//! asks for `reasoning.encrypted_content`, and the answer's reasoning items are kept in the
//! assistant's `extra` as `{"responses_items": [...]}`; the ones with `encrypted_content` are
//! replayed, without their `id` and `status` (nothing is stored server-side to refer to), before
//! the assistant's message and calls. Other models reject that `include`, so they never get it.
//! No reasoning summary is requested (`reasoning.summary` fails for unverified organisations),
//! but summary and reasoning-text deltas are shown when a server sends them.

use serde_json::{Value, json};
use talaria_protocol::{Message, ToolCall, Usage};

use super::chat::emit_whole;
use super::reply::{Collected, as_text, count, tool_text};
use super::sse::{self, Events};
use super::transport;
use super::{Delta, ModelError, ModelReply, ModelRequest, Provider, ToolChoice};

pub(crate) async fn complete(
    http: &reqwest::Client,
    provider: &Provider,
    request: &ModelRequest<'_>,
    on_delta: &(dyn Fn(Delta) + Send + Sync),
) -> Result<ModelReply, ModelError> {
    let url = provider.url("responses");
    let mut builder = http.post(&url).json(&request_body(provider, request));
    if let Some(key) = &provider.api_key {
        builder = builder.bearer_auth(key);
    }
    let body = match sse::exchange(provider, &url, builder, request.stream).await? {
        sse::Answer::Stream(events) => return read_stream(provider, *events, on_delta).await?.finish(provider, &url),
        sse::Answer::Whole(body) => body,
    };
    if let Some(error) = body.get("error").filter(|e| !e.is_null()).filter(|_| body.get("output").is_none()) {
        return Err(sse::stream_error(provider, &url, error));
    }
    let collected = parse_response(provider, &url, &body)?;
    if request.stream {
        emit_whole(&collected, on_delta);
    }
    collected.finish(provider, &url)
}

/// Whether the model reasons and accepts `include: ["reasoning.encrypted_content"]`.
fn is_reasoning_model(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let o_series = name.strip_prefix('o').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    o_series || (name.starts_with("gpt-5") && !name.contains("chat")) || name.contains("codex")
}

pub(crate) fn request_body(provider: &Provider, request: &ModelRequest<'_>) -> Value {
    let mut instructions: Vec<&str> = Vec::new();
    if !request.system.is_empty() {
        instructions.push(request.system);
    }
    let mut input = Vec::new();
    for message in request.messages {
        match message {
            Message::System { content } => instructions.push(content),
            Message::User { content, images } => {
                let mut parts = vec![json!({"type": "input_text", "text": content})];
                parts.extend(images.iter().map(|i| json!({"type": "input_image", "image_url": i.data_url()})));
                input.push(json!({"type": "message", "role": "user", "content": parts}));
            }
            Message::Assistant { content, tool_calls, reasoning: _, extra } => {
                let items = extra.as_ref().and_then(|e| e.get("responses_items")).and_then(Value::as_array);
                input.extend(items.into_iter().flatten().filter_map(replayable_reasoning));
                if !content.is_empty() {
                    input.push(json!({
                        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": content}],
                    }));
                }
                input.extend(tool_calls.iter().map(|call| {
                    let arguments = talaria_protocol::arguments_or_empty(&call.arguments);
                    json!({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments})
                }));
            }
            Message::Tool { tool_call_id, name: _, content, images } => {
                let text = tool_text(provider, content, images);
                let output = if provider.vision && !images.is_empty() {
                    let mut parts = vec![json!({"type": "input_text", "text": text})];
                    parts.extend(images.iter().map(|i| json!({"type": "input_image", "image_url": i.data_url()})));
                    Value::Array(parts)
                } else {
                    json!(text)
                };
                input.push(json!({"type": "function_call_output", "call_id": tool_call_id, "output": output}));
            }
        }
    }
    let mut body = json!({"model": provider.model, "input": input, "store": false, "stream": request.stream});
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function", "name": tool.name, "description": tool.description,
                    "parameters": tool.parameters, "strict": false,
                })
            })
            .collect();
        match provider.tool_choice {
            ToolChoice::Auto => body["tool_choice"] = json!("auto"),
            ToolChoice::Required => body["tool_choice"] = json!("required"),
            ToolChoice::None => body["tool_choice"] = json!("none"),
            ToolChoice::Off => {}
        }
    }
    if is_reasoning_model(&provider.model) {
        body["include"] = json!(["reasoning.encrypted_content"]);
    }
    if let Some(max) = provider.max_tokens {
        body["max_output_tokens"] = json!(max);
    }
    body
}

/// A stored reasoning item as it can be sent back statelessly, if it can.
fn replayable_reasoning(item: &Value) -> Option<Value> {
    if item.get("type").and_then(Value::as_str) != Some("reasoning") {
        return None;
    }
    let encrypted = item.get("encrypted_content").and_then(Value::as_str).filter(|e| !e.is_empty())?;
    Some(json!({
        "type": "reasoning",
        "summary": item.get("summary").cloned().unwrap_or_else(|| json!([])),
        "encrypted_content": encrypted,
    }))
}

/// A function call being assembled.
#[derive(Debug)]
struct PartialCall {
    output_index: Option<u64>,
    item_id: String,
    call: ToolCall,
}

#[derive(Debug, Default)]
struct StreamState {
    collected: Collected,
    calls: Vec<PartialCall>,
    reasoning_items: Vec<Value>,
}

impl StreamState {
    /// The call an event is about, by item id or output index.
    fn call_for(&mut self, event: &Value) -> Option<&mut PartialCall> {
        let item_id = event.get("item_id").and_then(Value::as_str).filter(|id| !id.is_empty());
        self.find(item_id, event.get("output_index").and_then(Value::as_u64))
    }

    fn find(&mut self, item_id: Option<&str>, index: Option<u64>) -> Option<&mut PartialCall> {
        self.calls
            .iter_mut()
            .rev()
            .find(|c| item_id.is_some_and(|id| c.item_id == id) || index.is_some_and(|i| c.output_index == Some(i)))
    }

    fn apply_item(&mut self, event: &Value, done: bool) {
        let Some(item) = event.get("item") else { return };
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let call = ToolCall::new(
                    as_text(item.get("call_id")),
                    as_text(item.get("name")),
                    as_text(item.get("arguments")),
                );
                let item_id = as_text(item.get("id"));
                let output_index = event.get("output_index").and_then(Value::as_u64);
                match self.find(Some(item_id.as_str()).filter(|id| !id.is_empty()), output_index) {
                    // `done` carries the whole call.
                    Some(existing) if done => existing.call = call,
                    Some(_) => {}
                    None => self.calls.push(PartialCall { output_index, item_id, call }),
                }
            }
            Some("reasoning") if done => self.reasoning_items.push(item.clone()),
            _ => {}
        }
    }

    fn into_collected(self) -> Collected {
        let mut collected = self.collected;
        collected.tool_calls = self.calls.into_iter().map(|c| c.call).collect();
        if !self.reasoning_items.is_empty() {
            collected.extra = Some(json!({"responses_items": self.reasoning_items}));
        }
        collected
    }
}

async fn read_stream(
    provider: &Provider,
    mut events: Events,
    on_delta: &(dyn Fn(Delta) + Send + Sync),
) -> Result<Collected, ModelError> {
    let mut state = StreamState::default();
    let url = events.url().to_string();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| e.with_partial(&state.collected.text))?;
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            continue;
        }
        let data = sse::parse_data(provider, &url, &event)?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event.event.as_str());
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta = as_text(data.get("delta"));
                if !delta.is_empty() {
                    state.collected.text.push_str(&delta);
                    on_delta(Delta::Text(delta));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let delta = as_text(data.get("delta"));
                if !delta.is_empty() {
                    state.collected.reasoning.push_str(&delta);
                    on_delta(Delta::Reasoning(delta));
                }
            }
            // A new summary part after the first: a paragraph break.
            "response.reasoning_summary_part.added" if count(&data, &["summary_index"]) > 0 => {
                state.collected.reasoning.push_str("\n\n");
                on_delta(Delta::Reasoning("\n\n".into()));
            }
            "response.output_item.added" => state.apply_item(&data, false),
            "response.output_item.done" => state.apply_item(&data, true),
            "response.function_call_arguments.delta" => {
                let delta = as_text(data.get("delta"));
                if let Some(partial) = state.call_for(&data) {
                    partial.call.arguments.push_str(&delta);
                }
            }
            "response.function_call_arguments.done" => {
                let arguments = as_text(data.get("arguments"));
                if let Some(partial) = state.call_for(&data) {
                    partial.call.arguments = arguments;
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = data.get("response").unwrap_or(&Value::Null);
                let streamed = state.into_collected();
                let whole = parse_response(provider, &url, response)?;
                return Ok(prefer_whole(whole, streamed));
            }
            "response.failed" => {
                let response = data.get("response").unwrap_or(&Value::Null);
                let error = response.get("error").filter(|e| !e.is_null()).unwrap_or(response);
                return Err(sse::stream_error(provider, &url, error));
            }
            "error" => return Err(sse::stream_error(provider, &url, data.get("error").unwrap_or(&data))),
            // response.created, response.in_progress, *.done duplicates, and newer events
            _ => {}
        }
    }
    Err(sse::cut_short(provider, &url, "`response.completed`", &state.collected.text))
}

/// The final response object is authoritative; the streamed pieces fill in what it lacks (a
/// server that sends an abridged final object).
fn prefer_whole(mut whole: Collected, streamed: Collected) -> Collected {
    if whole.text.is_empty() && whole.tool_calls.is_empty() {
        whole.text = streamed.text;
        whole.tool_calls = streamed.tool_calls;
    }
    if whole.reasoning.is_empty() {
        whole.reasoning = streamed.reasoning;
    }
    if whole.extra.is_none() {
        whole.extra = streamed.extra;
    }
    whole
}

/// A whole response object (non-streamed, or the one `response.completed` carries).
pub(crate) fn parse_response(provider: &Provider, url: &str, response: &Value) -> Result<Collected, ModelError> {
    if response.get("status").and_then(Value::as_str) == Some("failed") {
        let error = response.get("error").filter(|e| !e.is_null()).unwrap_or(response);
        return Err(sse::stream_error(provider, url, error));
    }
    let output = response.get("output").and_then(Value::as_array).ok_or_else(|| ModelError::Malformed {
        provider: provider.name.clone(),
        url: url.to_string(),
        message: format!("the response has no output: {}", transport::truncate(&response.to_string(), 200)),
    })?;
    let incomplete = response.get("incomplete_details").and_then(|d| d.get("reason")).and_then(Value::as_str);
    let mut collected = Collected {
        model: response.get("model").and_then(Value::as_str).map(str::to_string),
        finish_reason: incomplete.or_else(|| response.get("status").and_then(Value::as_str)).map(str::to_string),
        usage: response.get("usage").map(usage_of).unwrap_or_default(),
        ..Collected::default()
    };
    let mut reasoning_items = Vec::new();
    let mut reasoning = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => collected.text.push_str(&as_text(part.get("text"))),
                        Some("refusal") => collected.text.push_str(&as_text(part.get("refusal"))),
                        _ => {}
                    }
                }
            }
            Some("function_call") => collected.tool_calls.push(ToolCall::new(
                as_text(item.get("call_id")),
                as_text(item.get("name")),
                as_text(item.get("arguments")),
            )),
            Some("reasoning") => {
                let texts = ["summary", "content"]
                    .iter()
                    .filter_map(|key| item.get(*key).and_then(Value::as_array))
                    .flatten()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .filter(|text| !text.is_empty())
                    .map(str::to_string);
                reasoning.extend(texts);
                reasoning_items.push(item.clone());
            }
            _ => {}
        }
    }
    for call in &mut collected.tool_calls {
        if call.arguments.trim().is_empty() {
            call.arguments = "{}".into();
        }
    }
    collected.reasoning = reasoning.join("\n\n");
    if !reasoning_items.is_empty() {
        collected.extra = Some(json!({"responses_items": reasoning_items}));
    }
    Ok(collected)
}

/// `usage` of a response. `input_tokens` already includes cached tokens.
fn usage_of(usage: &Value) -> Usage {
    Usage {
        input_tokens: count(usage, &["input_tokens"]),
        output_tokens: count(usage, &["output_tokens"]),
        cache_read_tokens: count(usage, &["input_tokens_details", "cached_tokens"]),
        cache_write_tokens: 0,
        reasoning_tokens: count(usage, &["output_tokens_details", "reasoning_tokens"]),
        estimated: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_models_are_recognised_by_name() {
        for model in ["o3", "o4-mini", "o1-preview", "gpt-5", "gpt-5.1-codex", "openai/gpt-5-mini", "codex-mini-latest"]
        {
            assert!(is_reasoning_model(model), "{model}");
        }
        for model in ["gpt-4o", "gpt-4.1-mini", "gpt-5-chat-latest", "omni-moderation", "llama3"] {
            assert!(!is_reasoning_model(model), "{model}");
        }
    }

    #[test]
    fn only_encrypted_reasoning_items_are_replayed_without_ids() {
        let stored = json!({"type": "reasoning", "id": "rs_1", "status": "completed",
            "summary": [{"type": "summary_text", "text": "thought"}], "encrypted_content": "gAAA"});
        assert_eq!(
            replayable_reasoning(&stored),
            Some(json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought"}],
                "encrypted_content": "gAAA"}))
        );
        assert_eq!(replayable_reasoning(&json!({"type": "reasoning", "id": "rs_2", "summary": []})), None);
        assert_eq!(replayable_reasoning(&json!({"type": "message"})), None);
    }
}
