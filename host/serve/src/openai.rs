//! The OpenAI-compatible API: `GET /v1/models` and `POST /v1/chat/completions`, streamed
//! (`text/event-stream`, ending `data: [DONE]`) or not, with errors in OpenAI's shape
//! (`{"error": {"message", "type", "code", "param"}}`); `POST /v1/responses` is
//! [`crate::responses`], on the same turns.
//!
//! What talaria makes of a request:
//! - **The model** is `talaria`, the only one listed: the agent with its tools, answering with
//!   the model the home is set up for. Another name is `404 model_not_found`.
//! - **A conversation** is a talaria session. The header `X-Talaria-Session: NAME` (else the
//!   body's `user`) names it: its session is titled `api:NAME` (shown by `talaria sessions`),
//!   made on first use and continued after, one request at a time. Unnamed, each request is a
//!   session of its own.
//! - **The messages**: the last one must be the user's, and it is the turn. A named
//!   conversation that already has its session keeps its own history, and the earlier messages
//!   are not read again; for a new session, the earlier messages (and system messages, as the
//!   client's instructions) come before it in the turn's text, as a transcript.
//! - **Tools**: talaria runs its own (files, commands, the web, ...) in the sandbox, as it
//!   would in the terminal; a request's `tools` are refused (`400`), since talaria cannot hand
//!   a call back for the client to run.
//! - **Approvals**: nobody is there to ask. A command or host that needs one is refused (or
//!   allowed, as the operator set `[serve] approvals`), and what was refused is said at the end
//!   of the answer.
//! - **Usage**: the turn's tokens, every model call of it, as `usage` (in the last chunk when
//!   `stream_options.include_usage` asks for it).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use talaria_protocol::{Outcome, Usage};
use tokio::sync::mpsc;

use crate::turn::{self, Asked, Done, Piece};
use crate::{Caller, Served};

/// The one model this server lists.
pub const MODEL: &str = "talaria";
/// How long a stream goes without writing: a comment is sent then, which keeps proxies from
/// closing it and tells the server when the client has gone (the turn is then stopped).
pub(crate) const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);
/// The header that names a conversation.
pub const SESSION_HEADER: &str = "x-talaria-session";

/// An error answer in OpenAI's shape.
pub(crate) fn error(status: StatusCode, kind: &str, message: &str) -> (StatusCode, Json<Value>) {
    let code = match status {
        StatusCode::UNAUTHORIZED => Value::from("invalid_api_key"),
        StatusCode::NOT_FOUND if kind == "model" => Value::from("model_not_found"),
        _ => Value::Null,
    };
    let kind = if kind == "model" { "invalid_request_error" } else { kind };
    (status, Json(json!({"error": {"message": message, "type": kind, "code": code, "param": Value::Null}})))
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub(crate) async fn models() -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "talaria"}],
    }))
}

/// A chat completion request (the fields talaria reads; others are ignored).
#[derive(Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// A message of the conversation as the client sends it: Chat Completions' `messages`, or
/// Responses' `input` items (an item without a role, such as a tool's output, is passed over).
#[derive(Deserialize)]
pub(crate) struct ChatMessage {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: Content,
}

/// A message's content: a string, or parts of which the text ones are read.
#[derive(Deserialize, Default)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
    #[default]
    None,
}

#[derive(Deserialize)]
pub(crate) struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter(|p| matches!(p.kind.as_str(), "text" | "input_text" | "output_text"))
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join("\n"),
            Content::None => String::new(),
        }
    }
}

/// A conversation's name, from the header or the body's `user`: printable and at most 200
/// characters.
pub(crate) fn conversation_name(headers: &HeaderMap, field: Option<&str>) -> Result<Option<String>, String> {
    let given = match headers.get(SESSION_HEADER) {
        Some(v) => Some(v.to_str().map_err(|_| "X-Talaria-Session must be text".to_string())?.to_string()),
        None => field.map(str::to_string),
    };
    let Some(name) = given.filter(|n| !n.trim().is_empty()) else { return Ok(None) };
    valid_name(&name).map(Some).map_err(|()| {
        "a conversation's name (X-Talaria-Session, `user` or `conversation`) is at most 200 printable characters"
            .to_string()
    })
}

/// `name` trimmed, when it can name a conversation: at most 200 printable characters.
pub(crate) fn valid_name(name: &str) -> Result<String, ()> {
    let name = name.trim();
    if name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(());
    }
    Ok(name.to_string())
}

/// The turn's text for `messages`: the last (the user's) alone when the session keeps its own
/// history, else after the earlier ones as a transcript.
pub(crate) fn turn_text(messages: &[ChatMessage], history_kept: bool) -> Result<String, String> {
    let Some((last, earlier)) = messages.split_last() else {
        return Err("there is no message: send at least the user's".into());
    };
    if last.role != "user" {
        return Err(format!("the last message must be the user's (its role is `{}`)", last.role));
    }
    let asked = last.content.text();
    if asked.trim().is_empty() {
        return Err("the user's message has no text".into());
    }
    if history_kept || earlier.is_empty() {
        return Ok(asked);
    }
    let mut text = String::new();
    let instructions: Vec<String> = earlier
        .iter()
        .filter(|m| matches!(m.role.as_str(), "system" | "developer"))
        .map(|m| m.content.text())
        .collect();
    if !instructions.is_empty() {
        text.push_str("The client's instructions:\n");
        text.push_str(&instructions.join("\n"));
        text.push_str("\n\n");
    }
    let said: Vec<String> = earlier
        .iter()
        .filter(|m| matches!(m.role.as_str(), "user" | "assistant"))
        .map(|m| format!("{}: {}", m.role, m.content.text()))
        .collect();
    if !said.is_empty() {
        text.push_str("Earlier in this conversation:\n");
        text.push_str(&said.join("\n"));
        text.push_str("\n\n");
    }
    if text.is_empty() {
        return Ok(asked);
    }
    text.push_str("Now the user says:\n");
    text.push_str(&asked);
    Ok(text)
}

/// A turn under way: its pieces as they come, and its task.
pub(crate) struct Begun {
    pub pieces: mpsc::Receiver<Piece>,
    pub running: tokio::task::JoinHandle<Result<(), turn::Failed>>,
}

/// What a request asks of a turn, from either API.
pub(crate) struct Wanted<'a> {
    pub model: &'a str,
    pub tools: Option<&'a [Value]>,
    /// The body's field that names the conversation, when the header does not.
    pub named: Option<&'a str>,
    pub messages: &'a [ChatMessage],
}

/// Check `wanted` and start its turn for `caller`; the answer to send instead when it is
/// refused.
pub(crate) async fn begin(
    served: Arc<Served>,
    caller: Caller,
    headers: &HeaderMap,
    wanted: Wanted<'_>,
) -> Result<Begun, Response> {
    let bad = |message: &str| error(StatusCode::BAD_REQUEST, "invalid_request_error", message).into_response();
    if wanted.model != MODEL {
        let message = format!("the model `{}` does not exist: this server has one, `{MODEL}`", wanted.model);
        return Err(error(StatusCode::NOT_FOUND, "model", &message).into_response());
    }
    if wanted.tools.is_some_and(|t| !t.is_empty()) {
        return Err(bad(
            "talaria runs its own tools (files, commands, the web) and cannot hand a call back to the client: leave `tools` out",
        ));
    }
    let name = conversation_name(headers, wanted.named).map_err(|m| bad(&m))?;
    // Whether the session keeps its own history is known once the turn holds its name.
    let text = turn_text(wanted.messages, true).map_err(|m| bad(&m))?;
    let transcript = turn_text(wanted.messages, false).map_err(|m| bad(&m))?;
    let (out, pieces) = mpsc::channel(64);
    let title = name.map(|name| format!("api:{name}"));
    let stop = tokio_util::sync::CancellationToken::new();
    let asked = Asked { title, text, transcript, stop, approvals: caller.approvals, trace: caller.trace };
    let running = tokio::spawn(turn::run(served, asked, out));
    Ok(Begun { pieces, running })
}

/// A new id: `prefix` and 24 random hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", crate::new_token().unwrap_or_default().get(..24).unwrap_or_default())
}

pub(crate) async fn chat(
    State(served): State<Arc<Served>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: ChatRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let message = format!("the request is not a chat completion request: {e}");
            return error(StatusCode::BAD_REQUEST, "invalid_request_error", &message).into_response();
        }
    };
    let wanted = Wanted {
        model: &request.model,
        tools: request.tools.as_deref(),
        named: request.user.as_deref(),
        messages: &request.messages,
    };
    let Begun { pieces, running } = match begin(served, caller, &headers, wanted).await {
        Ok(begun) => begun,
        Err(refused) => return refused,
    };
    let id = new_id("chatcmpl-");
    if request.stream {
        let usage = request.stream_options.is_some_and(|o| o.include_usage);
        return streamed(Chunks {
            id,
            created: now(),
            usage,
            pieces,
            running: Some(running),
            started: false,
            ended: false,
        });
    }
    whole(id, pieces, running).await
}

/// The turn's whole answer, once it ended: its text (refusals said at its end) and how it
/// ended; the error to answer with when it failed or never ran.
pub(crate) async fn collect(
    mut pieces: mpsc::Receiver<Piece>,
    running: tokio::task::JoinHandle<Result<(), turn::Failed>>,
) -> Result<(String, Done), Response> {
    let mut content = Collected::default();
    let mut ended = None;
    while let Some(piece) = pieces.recv().await {
        match piece {
            Piece::Text(text) => {
                content.push(&text);
            }
            Piece::Break => content.part(),
            Piece::Done(done) => ended = Some(done),
        }
    }
    let Some(done) = ended else { return Err(failed_to_start(running).await.into_response()) };
    match &done.outcome {
        Outcome::Failed(detail) => {
            let message = format!("the model failed: {detail}");
            return Err(error(StatusCode::BAD_GATEWAY, "api_error", &message).into_response());
        }
        // A spending limit: what OpenAI answers when a quota is used up.
        Outcome::Refused(why) => {
            return Err(error(StatusCode::TOO_MANY_REQUESTS, "insufficient_quota", why).into_response());
        }
        Outcome::Completed | Outcome::Interrupted | Outcome::BudgetExhausted | Outcome::Truncated => {}
    }
    Ok((content.finish(&done.refused), done))
}

/// The answer not streamed: all of it, once the turn ended.
async fn whole(
    id: String,
    pieces: mpsc::Receiver<Piece>,
    running: tokio::task::JoinHandle<Result<(), turn::Failed>>,
) -> Response {
    let (text, done) = match collect(pieces, running).await {
        Ok(answer) => answer,
        Err(refused) => return refused,
    };
    Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": now(),
        "model": MODEL,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason(&done.outcome),
        }],
        "usage": usage(&done.usage),
    }))
    .into_response()
}

/// Why a turn that sent nothing did not run.
pub(crate) async fn failed_to_start(
    running: tokio::task::JoinHandle<Result<(), turn::Failed>>,
) -> (StatusCode, Json<Value>) {
    let why = match running.await {
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(())) => "the conversation ended before its turn did".into(),
        Err(e) => format!("the turn stopped: {e}"),
    };
    error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", &why)
}

fn finish_reason(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Truncated => "length",
        _ => "stop",
    }
}

pub(crate) fn usage(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
}

/// The text of an answer as it comes: its messages parted by blank lines, and what was refused
/// said at the end.
#[derive(Default)]
pub(crate) struct Collected {
    text: String,
    parted: bool,
}

impl Collected {
    /// What to send for `text`: itself, after a blank line when a message ended before it.
    pub(crate) fn push(&mut self, text: &str) -> String {
        let mut sent = String::new();
        if self.parted && !text.is_empty() {
            if !self.text.is_empty() {
                sent.push_str("\n\n");
            }
            self.parted = false;
        }
        sent.push_str(text);
        self.text.push_str(&sent);
        sent
    }

    pub(crate) fn part(&mut self) {
        self.parted = true;
    }

    /// What is left to send at the end: the refusals, if any.
    pub(crate) fn tail(&self, refused: &[String]) -> String {
        if refused.is_empty() {
            return String::new();
        }
        let lines: Vec<String> = refused.iter().map(|r| format!("- {r}")).collect();
        let lead = if self.text.is_empty() { "" } else { "\n\n" };
        format!("{lead}[talaria] Refused during this turn:\n{}", lines.join("\n"))
    }

    pub(crate) fn finish(mut self, refused: &[String]) -> String {
        let tail = self.tail(refused);
        self.text.push_str(&tail);
        self.text
    }
}

/// A streamed answer's state.
struct Chunks {
    id: String,
    created: u64,
    /// Send a last chunk with the usage.
    usage: bool,
    pieces: mpsc::Receiver<Piece>,
    /// The turn's task, until it is asked why it sent nothing.
    running: Option<tokio::task::JoinHandle<Result<(), turn::Failed>>>,
    /// The role's chunk went out.
    started: bool,
    ended: bool,
}

impl Chunks {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Bytes {
        data(&json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    }
}

fn data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The answer streamed: a chunk with the role, one per piece of text, the end's, the usage's
/// when asked, and `[DONE]`; a turn that fails sends an error object instead of its end.
fn streamed(chunks: Chunks) -> Response {
    let collected = Collected::default();
    let body = futures_util::stream::unfold((chunks, collected), |(mut c, mut collected)| async move {
        if c.ended {
            return None;
        }
        let mut out: Vec<u8> = Vec::new();
        if !c.started {
            c.started = true;
            out.extend_from_slice(&c.chunk(json!({"role": "assistant", "content": ""}), None));
            return Some((Ok::<_, Infallible>(Bytes::from(out)), (c, collected)));
        }
        let Ok(piece) = tokio::time::timeout(KEEP_ALIVE, c.pieces.recv()).await else {
            return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), (c, collected)));
        };
        match piece {
            Some(Piece::Text(text)) => {
                let sent = collected.push(&text);
                if !sent.is_empty() {
                    out.extend_from_slice(&c.chunk(json!({"content": sent}), None));
                }
            }
            Some(Piece::Break) => collected.part(),
            Some(Piece::Done(done)) => {
                c.ended = true;
                if let Outcome::Failed(detail) = &done.outcome {
                    let message = format!("the model failed: {detail}");
                    out.extend_from_slice(&data(&json!({"error": {"message": message, "type": "api_error", "code": Value::Null, "param": Value::Null}})));
                } else if let Outcome::Refused(why) = &done.outcome {
                    out.extend_from_slice(&data(&json!({"error": {"message": why, "type": "insufficient_quota", "code": "insufficient_quota", "param": Value::Null}})));
                } else {
                    end(&c, &collected, &done, &mut out);
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            None => {
                c.ended = true;
                if let Some(running) = c.running.take() {
                    let (_, Json(why)) = failed_to_start(running).await;
                    out.extend_from_slice(&data(&why));
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
        }
        Some((Ok(Bytes::from(out)), (c, collected)))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "cannot stream").into_response())
}

/// The end of a streamed answer: the refusals, the finish reason, and the usage when asked.
fn end(c: &Chunks, collected: &Collected, done: &Done, out: &mut Vec<u8>) {
    let tail = collected.tail(&done.refused);
    if !tail.is_empty() {
        out.extend_from_slice(&c.chunk(json!({"content": tail}), None));
    }
    out.extend_from_slice(&c.chunk(json!({}), Some(finish_reason(&done.outcome))));
    if c.usage {
        out.extend_from_slice(&data(&json!({
            "id": c.id,
            "object": "chat.completion.chunk",
            "created": c.created,
            "model": MODEL,
            "choices": [],
            "usage": usage(&done.usage),
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, text: &str) -> ChatMessage {
        ChatMessage { role: role.into(), content: Content::Text(text.into()) }
    }

    #[test]
    fn a_new_session_gets_the_earlier_messages_as_a_transcript() {
        let messages = [
            message("system", "Answer in French."),
            message("user", "What is 2+2?"),
            message("assistant", "4"),
            message("user", "And 3+3?"),
        ];
        assert_eq!(
            turn_text(&messages, false).expect("text"),
            "The client's instructions:\nAnswer in French.\n\nEarlier in this conversation:\nuser: What is 2+2?\nassistant: 4\n\nNow the user says:\nAnd 3+3?"
        );
        assert_eq!(turn_text(&messages, true).expect("text"), "And 3+3?");
        assert_eq!(turn_text(&messages[1..2], false).expect("text"), "What is 2+2?");
    }

    #[test]
    fn the_last_message_must_be_the_user_s() {
        assert!(turn_text(&[], false).expect_err("empty").contains("no message"));
        let err =
            turn_text(&[message("user", "hi"), message("assistant", "hello")], false).expect_err("assistant last");
        assert!(err.contains("role is `assistant`"), "{err}");
    }

    #[test]
    fn messages_of_one_turn_are_parted_by_a_blank_line_and_refusals_come_last() {
        // A first message of tool calls alone, then an answer in pieces.
        let mut c = Collected::default();
        c.part();
        assert_eq!(c.push("It"), "It");
        assert_eq!(c.push(" says hi."), " says hi.");
        assert_eq!(c.finish(&[]), "It says hi.");
        let mut c = Collected::default();
        assert_eq!(c.push("Let me look."), "Let me look.");
        c.part();
        assert_eq!(c.push(""), "");
        assert_eq!(c.push("It says hi."), "\n\nIt says hi.");
        c.part();
        assert_eq!(
            c.finish(&["plugin 'terminal' wanted to run `rm -rf x`".into()]),
            "Let me look.\n\nIt says hi.\n\n[talaria] Refused during this turn:\n- plugin 'terminal' wanted to run `rm -rf x`"
        );
    }
}
