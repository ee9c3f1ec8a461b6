//! OpenAI Chat Completions: `chat.completion` bodies and `chat.completion.chunk` events.
//!
//! Streamed: a first chunk with the role, reasoning (`reasoning_content`, as DeepSeek, vLLM and
//! llama.cpp send it) and text one word per chunk, then the tool calls: one chunk per call with
//! its `index`, `id`, `type` and `name` (arguments `""`), then the argument pieces of all calls
//! interleaved round-robin, each keyed by `index` only. A last chunk with an empty delta carries
//! `finish_reason` (`length` for a truncated answer); with `stream_options.include_usage` every
//! chunk has `"usage": null` and a final chunk with no choices carries the usage. Then
//! `data: [DONE]`.
//!
//! [`Mode::Strict`] streams as llama-cpp-python's server does: every tool-call chunk repeats the
//! call's `id`, `type` and `function.name` beside its piece of the arguments, and carries the
//! legacy `function_call` field too; no usage chunk, whatever `stream_options` asks.

use serde_json::{Value, json};

use super::{Answer, Call, Sse, pieces, words};
use crate::Mode;

fn finish_reason(answer: &Answer<'_>) -> &'static str {
    if answer.truncated {
        "length"
    } else if answer.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn usage(answer: &Answer<'_>) -> Value {
    let u = answer.usage;
    json!({"prompt_tokens": u.input, "completion_tokens": u.output, "total_tokens": u.input + u.output})
}

fn call_id(call: &Call) -> String {
    call.id.clone().unwrap_or_else(|| format!("call_{}", call.n))
}

pub(super) fn json(answer: &Answer<'_>) -> Value {
    let content = if answer.text.is_empty() && !answer.calls.is_empty() { Value::Null } else { json!(answer.text) };
    let mut message = json!({"role": "assistant", "content": content, "refusal": null});
    if let Some(reasoning) = answer.reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    if !answer.calls.is_empty() {
        let calls: Vec<Value> = answer
            .calls
            .iter()
            .map(|c| {
                json!({"id": call_id(c), "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": format!("chatcmpl-mock{}", answer.id),
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(answer)}],
        "usage": usage(answer),
    })
}

pub(super) fn sse(answer: &Answer<'_>, include_usage: bool, mode: Mode) -> Sse {
    let include_usage = include_usage && mode == Mode::Normal;
    let chunk = |delta: Value, finish: Value| {
        let mut chunk = json!({
            "id": format!("chatcmpl-mock{}", answer.id),
            "object": "chat.completion.chunk",
            "created": answer.created,
            "model": answer.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    };
    let mut sse = Sse::default();
    let content = if answer.text.is_empty() && !answer.calls.is_empty() { Value::Null } else { json!("") };
    sse.data(&chunk(json!({"role": "assistant", "content": content}), Value::Null));
    sse.mark();
    for word in answer.reasoning.map(words).unwrap_or_default() {
        sse.data(&chunk(json!({"reasoning_content": word}), Value::Null));
    }
    for word in words(answer.text) {
        sse.data(&chunk(json!({"content": word}), Value::Null));
        sse.mark();
    }
    if mode == Mode::Strict {
        for (index, call) in answer.calls.iter().enumerate() {
            for piece in pieces(&call.arguments) {
                let function = json!({"name": call.name, "arguments": piece});
                let delta = json!({"role": "assistant", "content": null, "function_call": function,
                    "tool_calls": [{"index": index, "id": call_id(call), "type": "function", "function": function}]});
                sse.data(&chunk(delta, Value::Null));
            }
        }
        sse.data(&chunk(json!({}), json!(finish_reason(answer))));
        sse.events.push("data: [DONE]\n\n".to_owned());
        return sse;
    }
    for (index, call) in answer.calls.iter().enumerate() {
        let head = json!({"index": index, "id": call_id(call), "type": "function",
            "function": {"name": call.name, "arguments": ""}});
        sse.data(&chunk(json!({"tool_calls": [head]}), Value::Null));
    }
    let split: Vec<Vec<&str>> = answer.calls.iter().map(|c| pieces(&c.arguments)).collect();
    let rounds = split.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..rounds {
        for (index, parts) in split.iter().enumerate() {
            if let Some(part) = parts.get(round) {
                let delta = json!({"index": index, "function": {"arguments": part}});
                sse.data(&chunk(json!({"tool_calls": [delta]}), Value::Null));
            }
        }
    }
    sse.data(&chunk(json!({}), json!(finish_reason(answer))));
    if include_usage {
        sse.data(&json!({
            "id": format!("chatcmpl-mock{}", answer.id),
            "object": "chat.completion.chunk",
            "created": answer.created,
            "model": answer.model,
            "choices": [],
            "usage": usage(answer),
        }));
    }
    sse.events.push("data: [DONE]\n\n".to_owned());
    sse
}
