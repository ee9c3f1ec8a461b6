//! OpenAI Responses: `response` bodies and the `response.created` ... `response.completed` stream.
//!
//! Output items, in order and one at a time: `reasoning` (a `summary_text` part, streamed as
//! `response.reasoning_summary_text.delta` per word), `message` (one `output_text` part,
//! `response.output_text.delta` per word), one `function_call` per call
//! (`response.function_call_arguments.delta` pieces). Each item is opened by
//! `response.output_item.added` and closed by `response.output_item.done` with the whole item;
//! every event carries a `sequence_number`. Item ids: `rs_mockN`, `msg_mockN`, `fc_N` with
//! `call_id` `call_N`. A truncated answer ends `incomplete` (`incomplete_details.reason`
//! `max_output_tokens`, streamed as `response.incomplete`).

use serde_json::{Value, json};

use super::{Answer, Sse, pieces, words};

fn response(answer: &Answer<'_>, status: &str, output: Vec<Value>, usage: Value) -> Value {
    json!({
        "id": format!("resp_mock{}", answer.id),
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "error": null,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "model": answer.model,
        "output": output,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "usage": usage,
    })
}

fn usage(answer: &Answer<'_>) -> Value {
    let u = answer.usage;
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input + u.output,
    })
}

fn reasoning_id(answer: &Answer<'_>) -> String {
    format!("rs_mock{}", answer.id)
}

fn message_id(answer: &Answer<'_>) -> String {
    format!("msg_mock{}", answer.id)
}

fn reasoning_item(answer: &Answer<'_>, text: &str) -> Value {
    json!({"type": "reasoning", "id": reasoning_id(answer), "summary": [{"type": "summary_text", "text": text}]})
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

fn message_item(answer: &Answer<'_>, status: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "id": message_id(answer), "status": status, "role": "assistant", "content": content})
}

fn call_item(call: &super::Call, status: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", call.n), "call_id": call.id.clone().unwrap_or_else(|| format!("call_{}", call.n)),
        "name": call.name, "arguments": arguments, "status": status})
}

fn output(answer: &Answer<'_>) -> Vec<Value> {
    let mut output = Vec::new();
    if let Some(reasoning) = answer.reasoning {
        output.push(reasoning_item(answer, reasoning));
    }
    if !answer.text.is_empty() {
        output.push(message_item(answer, "completed", vec![text_part(answer.text)]));
    }
    for call in &answer.calls {
        output.push(call_item(call, "completed", &call.arguments));
    }
    output
}

/// `completed`, or `incomplete` for a truncated answer.
fn end_status(answer: &Answer<'_>) -> &'static str {
    if answer.truncated { "incomplete" } else { "completed" }
}

pub(super) fn json(answer: &Answer<'_>) -> Value {
    response(answer, end_status(answer), output(answer), usage(answer))
}

/// Numbers the events as it writes them.
struct Stream {
    sse: Sse,
    sequence: u64,
}

impl Stream {
    fn emit(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.sse.event(kind, &data);
    }
}

pub(super) fn sse(answer: &Answer<'_>) -> Sse {
    let mut s = Stream { sse: Sse::default(), sequence: 0 };
    s.emit("response.created", json!({"response": response(answer, "in_progress", Vec::new(), Value::Null)}));
    s.emit("response.in_progress", json!({"response": response(answer, "in_progress", Vec::new(), Value::Null)}));
    s.sse.mark();
    let mut index = 0;
    if let Some(reasoning) = answer.reasoning {
        let id = reasoning_id(answer);
        let empty = json!({"type": "reasoning", "id": id, "summary": []});
        s.emit("response.output_item.added", json!({"output_index": index, "item": empty}));
        let at = json!({"item_id": id, "output_index": index, "summary_index": 0});
        let with = |mut base: Value, key: &str, value: Value| {
            base[key] = value;
            base
        };
        s.emit(
            "response.reasoning_summary_part.added",
            with(at.clone(), "part", json!({"type": "summary_text", "text": ""})),
        );
        for word in words(reasoning) {
            s.emit("response.reasoning_summary_text.delta", with(at.clone(), "delta", json!(word)));
        }
        s.emit("response.reasoning_summary_text.done", with(at.clone(), "text", json!(reasoning)));
        s.emit(
            "response.reasoning_summary_part.done",
            with(at, "part", json!({"type": "summary_text", "text": reasoning})),
        );
        s.emit("response.output_item.done", json!({"output_index": index, "item": reasoning_item(answer, reasoning)}));
        index += 1;
    }
    if !answer.text.is_empty() {
        let id = message_id(answer);
        let empty = message_item(answer, "in_progress", Vec::new());
        s.emit("response.output_item.added", json!({"output_index": index, "item": empty}));
        s.emit(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part("")}),
        );
        s.sse.mark();
        for word in words(answer.text) {
            s.emit(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": word, "logprobs": []}),
            );
            s.sse.mark();
        }
        s.emit(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": answer.text, "logprobs": []}),
        );
        s.emit(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part(answer.text)}),
        );
        let done = message_item(answer, "completed", vec![text_part(answer.text)]);
        s.emit("response.output_item.done", json!({"output_index": index, "item": done}));
        index += 1;
    }
    for call in &answer.calls {
        let id = format!("fc_{}", call.n);
        s.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": call_item(call, "in_progress", "")}),
        );
        for part in pieces(&call.arguments) {
            s.emit(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": part}),
            );
        }
        s.emit(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "name": call.name, "arguments": call.arguments}),
        );
        s.emit(
            "response.output_item.done",
            json!({"output_index": index, "item": call_item(call, "completed", &call.arguments)}),
        );
        index += 1;
    }
    let status = end_status(answer);
    s.emit(&format!("response.{status}"), json!({"response": response(answer, status, output(answer), usage(answer))}));
    s.sse
}
