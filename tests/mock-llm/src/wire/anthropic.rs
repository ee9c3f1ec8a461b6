//! Anthropic Messages: `message` bodies and the `message_start` ... `message_stop` event stream.
//!
//! Content blocks, in order and one at a time: `thinking` (reasoning, `thinking_delta` per word,
//! then a `signature_delta`), `text` (`text_delta` per word), one `tool_use` per call
//! (`input_json_delta` pieces). A `ping` follows `message_start`, as the real API sends one.
//! `message_delta` carries `stop_reason` (`end_turn`, `tool_use`, or `max_tokens` for a
//! truncated answer) and the output tokens;
//! the input tokens are in `message_start`.

use serde_json::{Value, json};

use super::{Answer, Call, Sse, pieces, words};

/// Stands in for the opaque signature the real API puts on thinking blocks.
const SIGNATURE: &str = "mock-signature";

fn stop_reason(answer: &Answer<'_>) -> &'static str {
    if answer.truncated {
        "max_tokens"
    } else if answer.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn tool_id(call: &Call) -> String {
    call.id.clone().unwrap_or_else(|| format!("toolu_{}", call.n))
}

fn message_id(answer: &Answer<'_>) -> String {
    format!("msg_mock{}", answer.id)
}

pub(super) fn json(answer: &Answer<'_>) -> Value {
    let mut content = Vec::new();
    if let Some(reasoning) = answer.reasoning {
        content.push(json!({"type": "thinking", "thinking": reasoning, "signature": SIGNATURE}));
    }
    if !answer.text.is_empty() {
        content.push(json!({"type": "text", "text": answer.text}));
    }
    for call in &answer.calls {
        // Arguments that are not JSON go out as a string, which the real API never does.
        let input = serde_json::from_str::<Value>(&call.arguments).unwrap_or_else(|_| json!(call.arguments));
        content.push(json!({"type": "tool_use", "id": tool_id(call), "name": call.name, "input": input}));
    }
    json!({
        "id": message_id(answer),
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": stop_reason(answer),
        "stop_sequence": null,
        "usage": {
            "input_tokens": answer.usage.input,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": answer.usage.output,
        },
    })
}

pub(super) fn sse(answer: &Answer<'_>) -> Sse {
    let mut sse = Sse::default();
    sse.event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": message_id(answer),
            "type": "message",
            "role": "assistant",
            "model": answer.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {
                "input_tokens": answer.usage.input,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
        }}),
    );
    sse.event("ping", &json!({"type": "ping"}));
    sse.mark();
    let mut index = 0;
    let start = |sse: &mut Sse, index: usize, block: Value| {
        sse.event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
    };
    let delta = |sse: &mut Sse, index: usize, delta: Value| {
        sse.event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta}));
    };
    let stop = |sse: &mut Sse, index: usize| {
        sse.event("content_block_stop", &json!({"type": "content_block_stop", "index": index}));
    };
    if let Some(reasoning) = answer.reasoning {
        start(&mut sse, index, json!({"type": "thinking", "thinking": ""}));
        for word in words(reasoning) {
            delta(&mut sse, index, json!({"type": "thinking_delta", "thinking": word}));
        }
        delta(&mut sse, index, json!({"type": "signature_delta", "signature": SIGNATURE}));
        stop(&mut sse, index);
        index += 1;
    }
    if !answer.text.is_empty() {
        start(&mut sse, index, json!({"type": "text", "text": ""}));
        sse.mark();
        for word in words(answer.text) {
            delta(&mut sse, index, json!({"type": "text_delta", "text": word}));
            sse.mark();
        }
        stop(&mut sse, index);
        index += 1;
    }
    for call in &answer.calls {
        start(&mut sse, index, json!({"type": "tool_use", "id": tool_id(call), "name": call.name, "input": {}}));
        for part in pieces(&call.arguments) {
            delta(&mut sse, index, json!({"type": "input_json_delta", "partial_json": part}));
        }
        stop(&mut sse, index);
        index += 1;
    }
    sse.event(
        "message_delta",
        &json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason(answer), "stop_sequence": null},
            "usage": {"output_tokens": answer.usage.output}}),
    );
    sse.event("message_stop", &json!({"type": "message_stop"}));
    sse
}
