//! `POST /v1/responses`, OpenAI's Responses API, on the same turns as chat completions
//! ([`crate::openai`] says what talaria makes of a request). The input is a string (the user's
//! message) or items, of which the messages are read; `instructions` are the client's
//! instructions; the conversation is named by the header `X-Talaria-Session`, else by the
//! body's `conversation` (its id), else by `user`.
//!
//! Streamed, the events are the whole sequence a client expects, each with its
//! `sequence_number`, one response id throughout: `response.created`, `response.in_progress`,
//! `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`
//! for each piece, `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done` and `response.completed` (or `response.failed`); then the
//! stream closes.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse as _, Response};
use http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use talaria_protocol::Outcome;
use tokio::sync::mpsc;

use crate::openai::{
    Begun, ChatMessage, Collected, Content, KEEP_ALIVE, MODEL, Wanted, begin, collect, error, new_id, now,
};
use crate::turn::{Done, Piece};
use crate::{Caller, Served};

/// A Responses request (the fields talaria reads; others are ignored).
#[derive(Deserialize)]
struct Request {
    model: String,
    input: Input,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    conversation: Option<Conversation>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<ChatMessage>),
}

/// `conversation`: an id, or an object with one.
#[derive(Deserialize)]
#[serde(untagged)]
enum Conversation {
    Id(String),
    Object { id: String },
}

impl Conversation {
    fn id(&self) -> &str {
        match self {
            Conversation::Id(id) | Conversation::Object { id } => id,
        }
    }
}

pub(crate) async fn respond(
    State(served): State<Arc<Served>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let message = format!("the request is not a Responses request: {e}");
            return error(StatusCode::BAD_REQUEST, "invalid_request_error", &message).into_response();
        }
    };
    let mut messages: Vec<ChatMessage> = Vec::new();
    if let Some(instructions) = &request.instructions {
        messages.push(ChatMessage { role: "system".into(), content: Content::Text(instructions.clone()) });
    }
    match request.input {
        Input::Text(text) => messages.push(ChatMessage { role: "user".into(), content: Content::Text(text) }),
        Input::Items(items) => messages.extend(items.into_iter().filter(|m| !m.role.is_empty())),
    }
    let named = request.conversation.as_ref().map(Conversation::id).or(request.user.as_deref());
    let wanted = Wanted { model: &request.model, tools: request.tools.as_deref(), named, messages: &messages };
    let Begun { pieces, running } = match begin(served, caller, &headers, wanted).await {
        Ok(begun) => begun,
        Err(refused) => return refused,
    };
    let ids = Ids { response: new_id("resp_"), message: new_id("msg_"), created: now() };
    if request.stream {
        return streamed(Events {
            ids,
            pieces,
            sequence: 0,
            started: false,
            ended: false,
            collected: Collected::default(),
        });
    }
    match collect(pieces, running).await {
        Ok((text, done)) => axum::Json(response(&ids, "completed", Some(&text), Some(&done))).into_response(),
        Err(refused) => refused,
    }
}

/// The ids of one response.
struct Ids {
    response: String,
    message: String,
    created: u64,
}

/// The answer's message item: in progress and empty (`text` none), or done.
fn message(ids: &Ids, text: Option<&str>) -> Value {
    let content = match text {
        Some(text) => json!([{"type": "output_text", "text": text, "annotations": []}]),
        None => json!([]),
    };
    json!({
        "type": "message",
        "id": ids.message,
        "status": if text.is_some() { "completed" } else { "in_progress" },
        "role": "assistant",
        "content": content,
    })
}

/// The response object in `status`, with its message once there is `text`, and its usage once
/// `done`.
fn response(ids: &Ids, status: &str, text: Option<&str>, done: Option<&Done>) -> Value {
    let output = match text {
        Some(_) => json!([message(ids, text)]),
        None => json!([]),
    };
    let usage = done.map_or(Value::Null, |d| {
        json!({
            "input_tokens": d.usage.input_tokens,
            "input_tokens_details": {"cached_tokens": d.usage.cache_read_tokens},
            "output_tokens": d.usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": d.usage.reasoning_tokens},
            "total_tokens": d.usage.input_tokens + d.usage.output_tokens,
        })
    });
    json!({
        "id": ids.response,
        "object": "response",
        "created_at": ids.created,
        "status": status,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        "error": Value::Null,
        "incomplete_details": Value::Null,
    })
}

/// A streamed response's state.
struct Events {
    ids: Ids,
    pieces: mpsc::Receiver<Piece>,
    sequence: u64,
    started: bool,
    ended: bool,
    collected: Collected,
}

impl Events {
    /// One event of `kind`, numbered.
    fn event(&mut self, kind: &str, mut fields: Value, out: &mut Vec<u8>) {
        fields["type"] = Value::from(kind);
        fields["sequence_number"] = Value::from(self.sequence);
        self.sequence += 1;
        out.extend_from_slice(format!("event: {kind}\ndata: {fields}\n\n").as_bytes());
    }

    /// The events before the first piece of text.
    fn start(&mut self, out: &mut Vec<u8>) {
        let created = response(&self.ids, "in_progress", None, None);
        self.event("response.created", json!({"response": created}), out);
        self.event("response.in_progress", json!({"response": created}), out);
        let item = message(&self.ids, None);
        self.event("response.output_item.added", json!({"output_index": 0, "item": item}), out);
        let part = json!({"type": "output_text", "text": "", "annotations": []});
        let added = json!({"item_id": self.ids.message, "output_index": 0, "content_index": 0, "part": part});
        self.event("response.content_part.added", added, out);
    }

    fn delta(&mut self, text: &str, out: &mut Vec<u8>) {
        let delta = json!({"item_id": self.ids.message, "output_index": 0, "content_index": 0, "delta": text});
        self.event("response.output_text.delta", delta, out);
    }

    /// The events after the last piece: the text, part, item and response done.
    fn end(&mut self, done: &Done, out: &mut Vec<u8>) {
        let error = match &done.outcome {
            Outcome::Failed(detail) => {
                Some(json!({"code": "server_error", "message": format!("the model failed: {detail}")}))
            }
            Outcome::Refused(why) => Some(json!({"code": "insufficient_quota", "message": why})),
            Outcome::Completed | Outcome::Interrupted | Outcome::BudgetExhausted | Outcome::Truncated => None,
        };
        if let Some(error) = error {
            let mut failed = response(&self.ids, "failed", None, Some(done));
            failed["error"] = error;
            self.event("response.failed", json!({"response": failed}), out);
            return;
        }
        let tail = self.collected.tail(&done.refused);
        if !tail.is_empty() {
            let sent = self.collected.push(&tail);
            self.delta(&sent, out);
        }
        let text = std::mem::take(&mut self.collected).finish(&[]);
        let at = json!({"item_id": self.ids.message, "output_index": 0, "content_index": 0});
        let mut text_done = at.clone();
        text_done["text"] = Value::from(text.as_str());
        self.event("response.output_text.done", text_done, out);
        let mut part_done = at;
        part_done["part"] = json!({"type": "output_text", "text": text, "annotations": []});
        self.event("response.content_part.done", part_done, out);
        let item = message(&self.ids, Some(&text));
        self.event("response.output_item.done", json!({"output_index": 0, "item": item}), out);
        let completed = response(&self.ids, "completed", Some(&text), Some(done));
        self.event("response.completed", json!({"response": completed}), out);
    }
}

fn streamed(events: Events) -> Response {
    let body = futures_util::stream::unfold(events, |mut e| async move {
        if e.ended {
            return None;
        }
        let mut out = Vec::new();
        if !e.started {
            e.started = true;
            e.start(&mut out);
            return Some((Ok::<_, Infallible>(Bytes::from(out)), e));
        }
        let Ok(piece) = tokio::time::timeout(KEEP_ALIVE, e.pieces.recv()).await else {
            return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), e));
        };
        match piece {
            Some(Piece::Text(text)) => {
                let sent = e.collected.push(&text);
                if !sent.is_empty() {
                    e.delta(&sent, &mut out);
                }
            }
            Some(Piece::Break) => e.collected.part(),
            Some(Piece::Done(done)) => {
                e.ended = true;
                e.end(&done, &mut out);
            }
            None => {
                e.ended = true;
                let mut failed = response(&e.ids, "failed", None, None);
                failed["error"] = json!({"code": "server_error", "message": "the turn stopped before it ended"});
                e.event("response.failed", json!({"response": failed}), &mut out);
            }
        }
        Some((Ok(Bytes::from(out)), e))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "cannot stream").into_response())
}
