//! OpenAI Chat Completions (`POST {base_url}/chat/completions`), the format nearly every
//! endpoint speaks: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, DeepSeek, ...
//!
//! The history maps almost one to one: the system prompt is the first message, assistant tool
//! calls are `{id, type: function, function: {name, arguments}}` with `content` always a string
//! (`""` rather than OpenAI's `null`, which llama-cpp-python's server refuses), tool results are
//! `{role: tool, tool_call_id, content}`. Offered tools come with the provider's `tool_choice`
//! (`auto` unless configured otherwise; llama-cpp-python hides tools from the model without it). Streamed answers arrive as `chat.completion.chunk`
//! events: text deltas, tool-call deltas keyed by `index` (id and name first, arguments in
//! pieces), reasoning deltas (`reasoning_content` or `reasoning`), a final usage chunk, `[DONE]`.
//!
//! Reasoning that must go back to the provider is kept in the assistant's `extra` as
//! `{"chat_fields": {...}}`, whose fields are copied verbatim into the replayed message:
//! OpenRouter's `reasoning_details`, and `reasoning_content` on messages with tool calls
//! (DeepSeek and Kimi require it back within a tool-calling turn; only there, because older
//! DeepSeek reasoners reject it elsewhere).

use serde_json::{Map, Value, json};
use talaria_protocol::{Message, ToolCall, Usage};

use super::reply::{Collected, as_text, count, tool_text};
use super::sse::{self, Events};
use super::transport;
use super::{Delta, ModelError, ModelReply, ModelRequest, Provider, ToolChoice};

/// One call: send, then read the stream or the whole body.
pub(crate) async fn complete(
    http: &reqwest::Client,
    provider: &Provider,
    request: &ModelRequest<'_>,
    on_delta: &(dyn Fn(Delta) + Send + Sync),
) -> Result<ModelReply, ModelError> {
    let url = provider.url("chat/completions");
    let mut builder = http
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(request_bytes(provider, request));
    if let Some(key) = &provider.api_key {
        builder = builder.bearer_auth(key);
    }
    let body = match sse::exchange(provider, &url, builder, request.stream).await? {
        sse::Answer::Stream(events) => return read_stream(provider, *events, on_delta).await?.finish(provider, &url),
        sse::Answer::Whole(body) => body,
    };
    let collected = parse_completion(provider, &url, &body)?;
    if request.stream {
        // Asked to stream, answered whole: still show the answer.
        emit_whole(&collected, on_delta);
    }
    collected.finish(provider, &url)
}

/// Reports a whole answer through the delta callback.
pub(crate) fn emit_whole(collected: &Collected, on_delta: &(dyn Fn(Delta) + Send + Sync)) {
    if !collected.reasoning.is_empty() {
        on_delta(Delta::Reasoning(collected.reasoning.clone()));
    }
    if !collected.text.is_empty() {
        on_delta(Delta::Text(collected.text.clone()));
    }
}

/// The JSON body for a request, as a value (for tests and inspection; [`complete`] sends
/// [`request_bytes`]).
#[cfg(test)]
pub(crate) fn request_body(provider: &Provider, request: &ModelRequest<'_>) -> Value {
    serde_json::from_slice(&request_bytes(provider, request)).expect("the body is JSON")
}

/// The JSON body for a request, written straight from the history: nothing of it (the system
/// prompt, the messages, the tools' schemas) is copied into a value tree first, which on a long
/// tool-calling turn was most of what a request cost before it was sent.
pub(crate) fn request_bytes(provider: &Provider, request: &ModelRequest<'_>) -> Vec<u8> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(Wire::Text { role: "system", content: request.system });
    }
    // The images tool results returned follow those results, in a user message of their own
    // (a tool message holds text only).
    let mut images: Vec<Part<'_>> = Vec::new();
    for message in request.messages {
        if !matches!(message, Message::Tool { .. }) && !images.is_empty() {
            messages.push(Wire::UserParts(std::mem::take(&mut images)));
        }
        messages.push(Wire::of(provider, message));
        if let Message::Tool { tool_call_id, name, images: returned, .. } = message
            && provider.vision
            && !returned.is_empty()
        {
            if images.is_empty() {
                images.push(Part::Text("[The images the tool calls above returned]".into()));
            }
            images.push(Part::Text(format!("{name} (call {tool_call_id}):").into()));
            images.extend(returned.iter().map(|i| Part::Image(i.data_url())));
        }
    }
    if !images.is_empty() {
        messages.push(Wire::UserParts(images));
    }
    let offered = !request.tools.is_empty();
    let tool_choice = match provider.tool_choice {
        _ if !offered => None,
        ToolChoice::Auto => Some("auto"),
        ToolChoice::Required => Some("required"),
        ToolChoice::None => Some("none"),
        ToolChoice::Off => None,
    };
    // OpenAI itself rejects `max_tokens` for reasoning models; everyone else knows only it.
    let openai = provider.base_url.contains("://api.openai.com");
    let body = Body {
        model: &provider.model,
        messages,
        stream: request.stream,
        stream_options: request.stream.then_some(StreamOptions { include_usage: true }),
        tools: request.tools.iter().map(|tool| Offered { kind: "function", function: tool }).collect(),
        tool_choice,
        max_tokens: provider.max_tokens.filter(|_| !openai),
        max_completion_tokens: provider.max_tokens.filter(|_| openai),
    };
    serde_json::to_vec(&body).expect("a request body always serialises")
}

/// A request's body, borrowing from the history and the tool list.
#[derive(serde::Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Wire<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Offered<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// `{"type": "function", "function": {name, description, parameters}}`.
#[derive(serde::Serialize)]
struct Offered<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(serialize_with = "function")]
    function: &'a talaria_protocol::ToolSpec,
}

fn function<S: serde::Serializer>(tool: &&talaria_protocol::ToolSpec, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap as _;
    let mut map = s.serialize_map(Some(3))?;
    map.serialize_entry("name", &tool.name)?;
    map.serialize_entry("description", &tool.description)?;
    map.serialize_entry("parameters", &tool.parameters)?;
    map.end()
}

/// One message as the wire has it.
enum Wire<'a> {
    /// `{role, content}` with text content (system, and user without images).
    Text {
        role: &'static str,
        content: &'a str,
    },
    /// A user message of text and image parts.
    UserParts(Vec<Part<'a>>),
    Assistant {
        content: &'a str,
        calls: &'a [ToolCall],
        extra: Option<&'a Map<String, Value>>,
    },
    Tool {
        id: &'a str,
        content: std::borrow::Cow<'a, str>,
    },
}

/// A part of a user message's content.
enum Part<'a> {
    Text(std::borrow::Cow<'a, str>),
    /// A `data:` URL.
    Image(String),
}

impl<'a> Wire<'a> {
    fn of(provider: &Provider, message: &'a Message) -> Self {
        match message {
            Message::System { content } => Wire::Text { role: "system", content },
            Message::User { content, images } if images.is_empty() => Wire::Text { role: "user", content },
            Message::User { content, images } => {
                let mut parts = vec![Part::Text(content.as_str().into())];
                parts.extend(images.iter().map(|i| Part::Image(i.data_url())));
                Wire::UserParts(parts)
            }
            Message::Assistant { content, tool_calls, reasoning: _, extra } => Wire::Assistant {
                content,
                calls: tool_calls,
                extra: extra.as_ref().and_then(|e| e.get("chat_fields")).and_then(Value::as_object),
            },
            Message::Tool { tool_call_id, name: _, content, images } => {
                Wire::Tool { id: tool_call_id, content: tool_text(provider, content, images) }
            }
        }
    }
}

impl serde::Serialize for Wire<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(None)?;
        match self {
            Wire::Text { role, content } => {
                map.serialize_entry("role", role)?;
                map.serialize_entry("content", content)?;
            }
            Wire::UserParts(parts) => {
                map.serialize_entry("role", "user")?;
                map.serialize_entry("content", parts)?;
            }
            Wire::Assistant { content, calls, extra } => {
                map.serialize_entry("role", "assistant")?;
                // Always a string: `null` (what OpenAI sends) is refused by llama-cpp-python's server.
                map.serialize_entry("content", content)?;
                if !calls.is_empty() {
                    let calls: Vec<Call<'_>> = calls.iter().map(Call).collect();
                    map.serialize_entry("tool_calls", &calls)?;
                }
                // The provider's own fields, replayed verbatim (never over the ones above).
                for (key, value) in extra.iter().flat_map(|fields| fields.iter()) {
                    let ours = key == "role" || key == "content" || (key == "tool_calls" && !calls.is_empty());
                    if !ours {
                        map.serialize_entry(key, value)?;
                    }
                }
            }
            Wire::Tool { id, content } => {
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", id)?;
                map.serialize_entry("content", content)?;
            }
        }
        map.end()
    }
}

impl serde::Serialize for Part<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(2))?;
        match self {
            Part::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Part::Image(url) => {
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry("image_url", &ImageUrl { url })?;
            }
        }
        map.end()
    }
}

#[derive(serde::Serialize)]
struct ImageUrl<'a> {
    url: &'a str,
}

/// `{id, type: function, function: {name, arguments}}`.
struct Call<'a>(&'a ToolCall);

impl serde::Serialize for Call<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        #[derive(serde::Serialize)]
        struct Function<'a> {
            name: &'a str,
            arguments: &'a str,
        }
        let call = self.0;
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("id", &call.id)?;
        map.serialize_entry("type", "function")?;
        // Replayed verbatim, malformed or not: the tool result already told the model.
        let arguments = talaria_protocol::arguments_or_empty(&call.arguments);
        map.serialize_entry("function", &Function { name: &call.name, arguments })?;
        map.end()
    }
}

/// A tool call being assembled from deltas.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Everything a stream has said so far.
#[derive(Debug, Default)]
struct StreamState {
    collected: Collected,
    calls: Vec<PartialCall>,
    /// Delta `index` -> position in `calls` (the latest call with that index).
    by_index: Vec<(u64, usize)>,
    reasoning_details: Vec<Value>,
    /// The reasoning came as `reasoning_content` (DeepSeek style), which is replayed.
    reasoning_content: bool,
}

async fn read_stream(
    provider: &Provider,
    mut events: Events,
    on_delta: &(dyn Fn(Delta) + Send + Sync),
) -> Result<Collected, ModelError> {
    let mut state = StreamState::default();
    let mut done = false;
    let url = events.url().to_string();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| e.with_partial(&state.collected.text))?;
        let data = event.data.trim();
        if data == "[DONE]" {
            done = true;
            break;
        }
        if data.is_empty() {
            continue;
        }
        let chunk = sse::parse_data(provider, &url, &event)?;
        if let Some(error) = chunk.get("error") {
            return Err(sse::stream_error(provider, &url, error));
        }
        if event.event == "error" {
            return Err(sse::stream_error(provider, &url, &chunk));
        }
        state.apply(&chunk, on_delta);
    }
    if state.collected.finish_reason.as_deref() == Some("error") {
        let error = json!({"message": "the answer stopped with finish_reason `error`"});
        return Err(sse::stream_error(provider, &url, &error));
    }
    if !done && state.collected.finish_reason.is_none() {
        return Err(sse::cut_short(provider, &url, "`data: [DONE]`", &state.collected.text));
    }
    Ok(state.into_collected())
}

impl StreamState {
    fn apply(&mut self, chunk: &Value, on_delta: &(dyn Fn(Delta) + Send + Sync)) {
        if let Some(model) = chunk.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()) {
            self.collected.model = Some(model.to_string());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.collected.usage = usage_of(usage);
        }
        let Some(choice) = chunk.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
            return;
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.collected.finish_reason = Some(reason.to_string());
        }
        let Some(delta) = choice.get("delta") else { return };
        if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.collected.text.push_str(text);
            on_delta(Delta::Text(text.to_string()));
        }
        if let Some((text, from_content)) = reasoning_of(delta) {
            self.reasoning_content |= from_content;
            self.collected.reasoning.push_str(text);
            on_delta(Delta::Reasoning(text.to_string()));
        }
        if let Some(details) = delta.get("reasoning_details").and_then(Value::as_array) {
            merge_reasoning_details(&mut self.reasoning_details, details);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                self.apply_call(position, call);
            }
        }
    }

    fn apply_call(&mut self, position: usize, call: &Value) {
        let index = call.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
        let id = call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
        let known = self.by_index.iter().rev().find(|(i, _)| *i == index).map(|(_, slot)| *slot);
        // A new id at a known index is a new call (servers that number every call 0).
        let slot = match known {
            Some(slot) if id.is_none_or(|id| self.calls[slot].id.is_empty() || self.calls[slot].id == id) => slot,
            _ => {
                self.calls.push(PartialCall::default());
                self.by_index.push((index, self.calls.len() - 1));
                self.calls.len() - 1
            }
        };
        let partial = &mut self.calls[slot];
        if let Some(id) = id {
            partial.id = id.to_string();
        }
        let function = call.get("function").unwrap_or(&Value::Null);
        if let Some(name) = function.get("name").and_then(Value::as_str).filter(|n| !n.is_empty())
            && partial.name.is_empty()
        {
            partial.name = name.to_string();
        }
        match function.get("arguments") {
            Some(Value::String(piece)) => partial.arguments.push_str(piece),
            Some(Value::Null) | None => {}
            Some(whole) => partial.arguments = whole.to_string(),
        }
    }

    fn into_collected(self) -> Collected {
        let mut collected = self.collected;
        collected.tool_calls = self
            .calls
            .into_iter()
            .map(|call| {
                let arguments = talaria_protocol::arguments_or_empty(&call.arguments).to_string();
                ToolCall::new(call.id, call.name, arguments)
            })
            .collect();
        collected.extra = chat_fields(&collected, self.reasoning_content, self.reasoning_details);
        collected
    }
}

/// Reasoning text of a delta or message: `reasoning_content` (DeepSeek, vLLM), else `reasoning`
/// (OpenRouter, Ollama); `true` when it was `reasoning_content`.
fn reasoning_of(value: &Value) -> Option<(&str, bool)> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).filter(|t| !t.is_empty());
    text("reasoning_content").map(|t| (t, true)).or_else(|| text("reasoning").map(|t| (t, false)))
}

/// Folds streamed `reasoning_details` pieces into whole entries: entries with the same `index`
/// are one entry whose `text`, `summary` and `data` pieces are concatenated.
fn merge_reasoning_details(merged: &mut Vec<Value>, pieces: &[Value]) {
    for piece in pieces {
        let Some(fields) = piece.as_object() else { continue };
        let index = piece.get("index").and_then(Value::as_u64);
        let existing =
            index.and_then(|i| merged.iter_mut().find(|m| m.get("index").and_then(Value::as_u64) == Some(i)));
        let Some(Value::Object(target)) = existing else {
            merged.push(piece.clone());
            continue;
        };
        for (key, value) in fields {
            match (key.as_str(), target.get_mut(key), value) {
                ("text" | "summary" | "data", Some(Value::String(have)), Value::String(more)) => have.push_str(more),
                (_, _, Value::Null) => {}
                _ => {
                    target.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

/// The `extra` of a chat-completions answer, if anything must be replayed.
fn chat_fields(collected: &Collected, reasoning_content: bool, reasoning_details: Vec<Value>) -> Option<Value> {
    let mut fields = Map::new();
    if reasoning_content && !collected.tool_calls.is_empty() && !collected.reasoning.is_empty() {
        fields.insert("reasoning_content".into(), json!(collected.reasoning));
    }
    if !reasoning_details.is_empty() {
        fields.insert("reasoning_details".into(), Value::Array(reasoning_details));
    }
    (!fields.is_empty()).then(|| json!({"chat_fields": fields}))
}

/// A whole (non-streamed) `chat.completion`.
pub(crate) fn parse_completion(provider: &Provider, url: &str, body: &Value) -> Result<Collected, ModelError> {
    if let Some(error) = body.get("error").filter(|_| body.get("choices").is_none()) {
        return Err(sse::stream_error(provider, url, error));
    }
    let choice =
        body.get("choices").and_then(Value::as_array).and_then(|c| c.first()).ok_or_else(|| ModelError::Malformed {
            provider: provider.name.clone(),
            url: url.to_string(),
            message: format!("the answer has no choices: {}", transport::truncate(&body.to_string(), 200)),
        })?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let mut collected = Collected {
        text: content_text(message.get("content")),
        finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(str::to_string),
        model: body.get("model").and_then(Value::as_str).map(str::to_string),
        usage: body.get("usage").map(usage_of).unwrap_or_default(),
        ..Collected::default()
    };
    let reasoning_content = match reasoning_of(message) {
        Some((text, from_content)) => {
            collected.reasoning = text.to_string();
            from_content
        }
        None => false,
    };
    collected.tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|call| {
                    let function = call.get("function").unwrap_or(&Value::Null);
                    let arguments = as_text(function.get("arguments"));
                    let arguments = talaria_protocol::arguments_or_empty(&arguments).to_string();
                    ToolCall::new(as_text(call.get("id")), as_text(function.get("name")), arguments)
                })
                .collect()
        })
        .unwrap_or_default();
    let details = message.get("reasoning_details").and_then(Value::as_array).cloned().unwrap_or_default();
    collected.extra = chat_fields(&collected, reasoning_content, details);
    Ok(collected)
}

/// Message content: a string, or (some servers) a list of `{type: text, text}` parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        other => as_text(other),
    }
}

/// `usage` of a chat completion. `prompt_tokens` already includes cached tokens.
fn usage_of(usage: &Value) -> Usage {
    let cache_read = match count(usage, &["prompt_tokens_details", "cached_tokens"]) {
        0 => count(usage, &["prompt_cache_hit_tokens"]), // DeepSeek
        n => n,
    };
    Usage {
        input_tokens: count(usage, &["prompt_tokens"]),
        output_tokens: count(usage, &["completion_tokens"]),
        cache_read_tokens: cache_read,
        cache_write_tokens: count(usage, &["prompt_tokens_details", "cache_write_tokens"]),
        reasoning_tokens: count(usage, &["completion_tokens_details", "reasoning_tokens"]),
        estimated: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_go_in_each_wire_format_as_it_takes_them() {
        let provider = Provider::preset("ollama", "llava", None).expect("preset");
        let image = talaria_protocol::Image { media_type: "image/png".into(), data: "iVBORw==".into() };
        let messages = [Message::User { content: "what is this?".into(), images: vec![image] }];
        let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: false };
        let chat = request_body(&provider, &request);
        assert_eq!(
            chat["messages"][0]["content"],
            json!([{"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}])
        );
        let anthropic = super::super::anthropic::request_body(&provider, &request);
        let block = &anthropic["messages"][0]["content"][1];
        assert_eq!(block["type"], "image");
        assert_eq!(block["source"], json!({"type": "base64", "media_type": "image/png", "data": "iVBORw=="}));
        let responses = super::super::responses::request_body(&provider, &request);
        assert_eq!(
            responses["input"][0]["content"][1],
            json!({"type": "input_image", "image_url": "data:image/png;base64,iVBORw=="})
        );
        let plain = [Message::user("hi")];
        let request = ModelRequest { system: "", messages: &plain, tools: &[], stream: false };
        assert_eq!(
            request_body(&provider, &request)["messages"][0]["content"],
            json!("hi"),
            "text alone stays a string"
        );
    }

    #[test]
    fn a_whole_body_is_written_as_the_wire_has_it() {
        let mut provider = Provider::preset("ollama", "llava", None).expect("preset");
        provider.vision = true;
        provider.max_tokens = Some(512);
        let image = talaria_protocol::Image { media_type: "image/png".into(), data: "iVBORw==".into() };
        let messages = [
            Message::user("look"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall::new("call_0", "shot", "")],
                reasoning: None,
                extra: Some(json!({"chat_fields": {"reasoning_content": "hm", "role": "never", "content": "never"}})),
            },
            Message::Tool {
                tool_call_id: "call_0".into(),
                name: "shot".into(),
                content: "{\"ok\":true}".into(),
                images: vec![image],
            },
            Message::Assistant { content: "a cat".into(), tool_calls: Vec::new(), reasoning: None, extra: None },
        ];
        let tools = [std::sync::Arc::new(talaria_protocol::ToolSpec {
            name: "shot".into(),
            description: "Take a picture.".into(),
            parameters: json!({"type": "object", "properties": {}}),
            plugin: "camera".into(),
            annotations: talaria_protocol::ToolAnnotations::default(),
        })];
        let request = ModelRequest { system: "be brief", messages: &messages, tools: &tools, stream: true };
        let expected = json!({
            "model": "llava",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
                ], "reasoning_content": "hm"},
                {"role": "tool", "tool_call_id": "call_0", "content": "{\"ok\":true}"},
                {"role": "user", "content": [
                    {"type": "text", "text": "[The images the tool calls above returned]"},
                    {"type": "text", "text": "shot (call call_0):"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}
                ]},
                {"role": "assistant", "content": "a cat"}
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {
                "name": "shot", "description": "Take a picture.", "parameters": {"type": "object", "properties": {}}
            }}],
            "tool_choice": "auto",
            "max_tokens": 512
        });
        assert_eq!(request_body(&provider, &request), expected);
        // The fields come in the order above (some servers read `model` first).
        let text = String::from_utf8(request_bytes(&provider, &request)).expect("utf-8");
        assert!(text.starts_with("{\"model\":\"llava\",\"messages\":[{\"role\":\"system\""), "{text}");
        // OpenAI's own endpoint gets `max_completion_tokens` instead.
        provider.base_url = "https://api.openai.com/v1".into();
        let body = request_body(&provider, &request);
        assert_eq!((body.get("max_tokens"), &body["max_completion_tokens"]), (None, &json!(512)));
    }

    #[test]
    fn reasoning_details_pieces_merge_by_index() {
        let mut merged = Vec::new();
        merge_reasoning_details(
            &mut merged,
            &[json!({"type": "reasoning.text", "index": 0, "text": "Let me ", "format": "x"})],
        );
        merge_reasoning_details(
            &mut merged,
            &[json!({"type": "reasoning.text", "index": 0, "text": "think", "signature": null})],
        );
        merge_reasoning_details(&mut merged, &[json!({"type": "reasoning.text", "index": 0, "signature": "sig"})]);
        merge_reasoning_details(&mut merged, &[json!({"type": "reasoning.encrypted", "index": 1, "data": "abc"})]);
        assert_eq!(
            merged,
            vec![
                json!({"type": "reasoning.text", "index": 0, "text": "Let me think", "format": "x",
                    "signature": "sig"}),
                json!({"type": "reasoning.encrypted", "index": 1, "data": "abc"}),
            ]
        );
    }

    #[test]
    fn servers_that_number_every_call_zero_still_give_separate_calls() {
        let mut state = StreamState::default();
        let chunk = |id: &str, name: &str| {
            let call = json!({"index": 0, "id": id, "function": {"name": name, "arguments": "{}"}});
            json!({"choices": [{"delta": {"tool_calls": [call]}}]})
        };
        state.apply(&chunk("a", "one"), &|_| {});
        state.apply(&chunk("b", "two"), &|_| {});
        let collected = state.into_collected();
        let names: Vec<_> = collected.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str())).collect();
        assert_eq!(names, [("a", "one"), ("b", "two")]);
    }
}
