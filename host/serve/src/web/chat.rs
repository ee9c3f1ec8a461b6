//! The live chat: a conversation of the host's held by the server for the browser, its events
//! sent to the page as they come (server-sent events) and drawn by `chat.js`, its approvals
//! and questions answered from the page, and a turn stopped from it.
//!
//! - `POST /chat/new` starts one (or continues a stored session: `resume`); `GET /chat/{id}`
//!   is its page: the stored turns, and the live one as it comes.
//! - `GET /chat/{id}/events`: the events, as small JSON objects (see [`shown`]); a page that
//!   subscribes during a turn is sent that turn's events so far first.
//! - `POST /chat/{id}/send`, `/stop`, `/approve` and `/answer` (each with the CSRF token): a
//!   message, an interrupt, an approval's decision (once, session, always or deny) and a
//!   question's answer. An approval or question is answered only in the chat that asked it:
//!   another chat's id for it is refused `404`.
//! - Live chats are held in memory, [`MAX_CHATS`] at once (the one idle longest is closed for
//!   a new one); what they said is in their sessions.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::response::{IntoResponse as _, Redirect, Response};
use axum::{Extension, Form};
use http::{HeaderMap, StatusCode, header};
use maud::html;
use serde::Deserialize;
use serde_json::{Value, json};
use talaria_core::{Platform, Start, Submitter};
use talaria_protocol::{ApprovalKind, Decision, Event, Op};
use tokio::sync::broadcast;

use super::{Visitor, page, refusal};
use crate::Served;
use crate::openai::KEEP_ALIVE;

/// Most live chats held at once.
pub(crate) const MAX_CHATS: usize = 16;

/// The live chats.
#[derive(Default)]
pub(crate) struct Chats(Mutex<HashMap<String, Arc<Chat>>>);

/// One live chat.
pub(crate) struct Chat {
    submitter: Submitter,
    /// Its events, to every page that listens.
    events: broadcast::Sender<String>,
    /// What it holds that a page may need: the session, the turn so far, what waits.
    state: Mutex<ChatState>,
}

#[derive(Default)]
struct ChatState {
    session_id: String,
    /// The events of the turn under way, for a page that subscribes during it.
    turn: Vec<String>,
    /// Approvals and questions waiting for an answer from this chat.
    approvals: HashSet<u64>,
    questions: HashSet<u64>,
    last_used: Option<Instant>,
    closed: bool,
}

impl Chat {
    fn state(&self) -> std::sync::MutexGuard<'_, ChatState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Send `event` to the pages, and keep it with the turn's. Each says when it was sent
    /// (`t`, Unix microseconds), so the time to the page can be measured.
    fn publish(&self, mut event: Value) {
        event["t"] = Value::from(jiff::Timestamp::now().as_microsecond());
        let text = event.to_string();
        let mut state = self.state();
        state.turn.push(text.clone());
        // Sent under the lock, so a page subscribing now gets each event once: in the turn so
        // far, or live.
        let _ = self.events.send(text);
    }
}

impl Chats {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Chat>>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<Arc<Chat>> {
        self.lock().get(id).cloned()
    }
}

/// What a chat's events are to a page: small objects, `kind` first.
fn shown(event: &Event) -> Option<Value> {
    Some(match event {
        Event::SessionStarted(started) => json!({"kind": "session", "id": started.session_id}),
        Event::TurnStarted { text } => json!({"kind": "turn", "text": text}),
        Event::TextDelta { text } => json!({"kind": "text", "text": text}),
        Event::MessageEnd => json!({"kind": "message_end"}),
        Event::ToolStarted(tool) => {
            json!({"kind": "tool", "id": tool.call_id, "name": tool.name, "preview": tool.preview})
        }
        Event::ToolFinished(tool) => {
            json!({"kind": "tool_done", "id": tool.call_id, "ok": tool.ok, "preview": tool.preview})
        }
        Event::ApprovalNeeded(asked) => json!({
            "kind": "approval",
            "id": asked.id,
            "plugin": asked.plugin,
            "what": if asked.kind == ApprovalKind::Network { "connect to" } else { "run" },
            "command": asked.command,
            "reason": asked.reason,
        }),
        Event::ApprovalResolved { id, decision } => {
            json!({"kind": "approval_done", "id": id, "decision": decision.name()})
        }
        Event::ClarifyNeeded(question) => {
            json!({"kind": "question", "id": question.id, "question": question.question, "choices": question.choices})
        }
        Event::Notice { text, .. } => json!({"kind": "notice", "text": text}),
        Event::Error { text } => json!({"kind": "error", "text": text}),
        Event::TurnEnd(end) => json!({
            "kind": "turn_end",
            "outcome": end.outcome.name(),
            "detail": match &end.outcome {
                talaria_protocol::Outcome::Failed(d) | talaria_protocol::Outcome::Refused(d) => d.as_str(),
                _ => "",
            },
        }),
        _ => return None,
    })
}

#[derive(Deserialize, Default)]
pub(crate) struct NewChat {
    /// A stored session to continue.
    #[serde(default)]
    resume: Option<String>,
}

/// `POST /chat/new`: start a live chat, and go to it.
pub(crate) async fn new(State(served): State<Arc<Served>>, Form(form): Form<NewChat>) -> Response {
    let resume = form.resume.filter(|r| !r.trim().is_empty());
    let start = Start {
        source: "api".into(),
        platform: Platform::Api,
        holder: "talaria serve (dashboard)".into(),
        interactive: true,
        stream: Some(true),
        resume,
        auto_title: true,
        ..Start::default()
    };
    let mut conversation = match served.host.start(start).await {
        Ok(conversation) => conversation,
        Err(e) => return refusal(StatusCode::BAD_REQUEST, &format!("The chat cannot start: {e}")),
    };
    let id = match crate::new_token() {
        Ok(token) => token.get(..16).unwrap_or_default().to_string(),
        Err(e) => return refusal(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    let (events, _) = broadcast::channel(1024);
    let chat = Arc::new(Chat {
        submitter: conversation.submitter(),
        events,
        state: Mutex::new(ChatState { last_used: Some(Instant::now()), ..ChatState::default() }),
    });
    let closed = {
        let mut chats = served.chats.lock();
        let closed = if chats.len() >= MAX_CHATS {
            // The one idle longest, one waiting for an approval only when all are.
            let idle = chats
                .iter()
                .min_by_key(|(_, c)| {
                    let state = c.state();
                    (!state.approvals.is_empty(), state.last_used)
                })
                .map(|(id, _)| id.clone());
            idle.and_then(|id| chats.remove(&id))
        } else {
            None
        };
        chats.insert(id.clone(), chat.clone());
        closed
    };
    if let Some(closed) = closed {
        closed.state().closed = true;
        closed.submitter.submit(Op::Shutdown { reason: "closed for a newer dashboard chat".into() });
    }
    // The chat's pump: every event to the pages, until the conversation stops.
    tokio::spawn(async move {
        while let Some(stamped) = conversation.next_event().await {
            let ended = matches!(stamped.event, Event::TurnEnd(_));
            match &stamped.event {
                Event::SessionStarted(started) => chat.state().session_id.clone_from(&started.session_id),
                Event::TurnStarted { .. } => chat.state().turn.clear(),
                Event::ApprovalNeeded(asked) => {
                    chat.state().approvals.insert(asked.id);
                }
                Event::ApprovalResolved { id, .. } => {
                    chat.state().approvals.remove(id);
                }
                Event::ClarifyNeeded(question) => {
                    chat.state().questions.insert(question.id);
                }
                _ => {}
            }
            if let Some(event) = shown(&stamped.event) {
                chat.publish(event);
            }
            if ended {
                let mut state = chat.state();
                state.turn.clear();
                state.questions.clear();
            }
        }
        chat.state().closed = true;
    });
    Redirect::to(&format!("/chat/{id}")).into_response()
}

/// `GET /chat`: the live chats, and a new one.
pub(crate) async fn index(State(served): State<Arc<Served>>, Extension(visitor): Extension<Visitor>) -> Response {
    let mut live: Vec<(String, String, Option<Instant>)> = served
        .chats
        .lock()
        .iter()
        .map(|(id, c)| {
            let state = c.state();
            (id.clone(), state.session_id.clone(), state.last_used)
        })
        .collect();
    live.sort_by_key(|(_, _, used)| std::cmp::Reverse(*used));
    let body = html! {
        h1 { "Chat" }
        form method="post" action="/chat/new" {
            input type="hidden" name="csrf" value=(visitor.csrf);
            button type="submit" { "New chat" }
        }
        @if !live.is_empty() {
            h2 { "Open chats" }
            ul {
                @for (id, session, _) in &live {
                    li { a href=(format!("/chat/{id}")) { "Chat " (id) } " " small { (session) } }
                }
            }
        }
    };
    page(&visitor, "chat", "Chat", body)
}

/// `GET /chat/{id}`: the chat's page.
pub(crate) async fn show(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Path(id): Path<String>,
) -> Response {
    let Some(chat) = served.chats.get(&id) else { return gone(&visitor) };
    let session = chat.state().session_id.clone();
    let stored =
        if session.is_empty() { Vec::new() } else { served.host.store().messages(&session).await.unwrap_or_default() };
    let body = html! {
        h1 { "Chat" }
        @if !session.is_empty() { p.hint { "Session " a href=(format!("/sessions/{session}")) { (session) } } }
        div #log data-chat=(id) data-csrf=(visitor.csrf) {
            @for message in &stored { (super::sessions::message(message.id, &message.message)) }
        }
        p #status.hint role="status" {}
        form #send method="post" action=(format!("/chat/{id}/send")) {
            input type="hidden" name="csrf" value=(visitor.csrf);
            label for="text" { "Message" }
            textarea #text name="text" rows="3" required {}
            div.buttons {
                button type="submit" { "Send" }
                button #stop type="submit" formaction=(format!("/chat/{id}/stop")) formnovalidate { "Stop" }
            }
        }
        noscript { p.hint { "Answers stream, and approvals are asked, with JavaScript on; without it, send and reload the page." } }
        script src="/static/chat.js" {}
    };
    page(&visitor, "chat", "Chat", body)
}

fn gone(visitor: &Visitor) -> Response {
    let body = html! {
        h1 { "No such chat" }
        p { "This chat is not open (the server restarted, or it was closed): its session is under " a href="/sessions" { "Sessions" } "." }
    };
    let mut response = page(visitor, "chat", "No such chat", body);
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// `GET /chat/{id}/events`: the chat's events as server-sent events.
pub(crate) async fn events(State(served): State<Arc<Served>>, Path(id): Path<String>) -> Response {
    let Some(chat) = served.chats.get(&id) else {
        return (StatusCode::NOT_FOUND, "no such chat").into_response();
    };
    let (earlier, receiver) = {
        let state = chat.state();
        (state.turn.clone(), chat.events.subscribe())
    };
    // A comment first, so the page knows at once it is listening; then the turn so far.
    let first = Bytes::from(
        std::iter::once(": listening\n\n".to_string())
            .chain(earlier.iter().map(|e| format!("data: {e}\n\n")))
            .collect::<String>(),
    );
    let live = futures_util::stream::unfold(receiver, |mut receiver| async move {
        match tokio::time::timeout(KEEP_ALIVE * 15, receiver.recv()).await {
            Err(_) => Some((Ok::<_, Infallible>(Bytes::from_static(b": keep-alive\n\n")), receiver)),
            Ok(Ok(event)) => Some((Ok(Bytes::from(format!("data: {event}\n\n"))), receiver)),
            // A page too slow to keep up misses events: it is told to reload.
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                Some((Ok(Bytes::from_static(b"data: {\"kind\":\"lagged\"}\n\n")), receiver))
            }
            Ok(Err(broadcast::error::RecvError::Closed)) => None,
        }
    });
    let body = futures_util::StreamExt::chain(futures_util::stream::iter([Ok::<_, Infallible>(first)]), live);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| (StatusCode::INTERNAL_SERVER_ERROR, "cannot stream").into_response())
}

/// What a chat's forms answer: `204` to the page's script (it asks for JSON), else back to
/// the chat's page.
fn done(headers: &HeaderMap, id: &str) -> Response {
    let wants_json =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("application/json"));
    if wants_json {
        StatusCode::NO_CONTENT.into_response()
    } else {
        Redirect::to(&format!("/chat/{id}")).into_response()
    }
}

/// The chat `id`, marked used, if it is open.
fn open(served: &Served, id: &str) -> Option<Arc<Chat>> {
    let chat = served.chats.get(id).filter(|c| !c.state().closed)?;
    chat.state().last_used = Some(Instant::now());
    Some(chat)
}

fn not_open() -> Response {
    refusal(StatusCode::NOT_FOUND, "This chat is not open: start a new one.")
}

#[derive(Deserialize)]
pub(crate) struct Said {
    text: String,
}

/// `POST /chat/{id}/send`: a message.
pub(crate) async fn send(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(said): Form<Said>,
) -> Response {
    let Some(chat) = open(&served, &id) else { return not_open() };
    if said.text.trim().is_empty() {
        return refusal(StatusCode::BAD_REQUEST, "The message is empty.");
    }
    chat.submitter.submit(Op::UserTurn { text: said.text, images: Vec::new(), sender: None, trace: None });
    done(&headers, &id)
}

/// `POST /chat/{id}/stop`: interrupt the turn under way.
pub(crate) async fn stop(State(served): State<Arc<Served>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let Some(chat) = open(&served, &id) else { return not_open() };
    chat.submitter.submit(Op::Interrupt);
    done(&headers, &id)
}

#[derive(Deserialize)]
pub(crate) struct Approval {
    approval: u64,
    decision: String,
}

/// `POST /chat/{id}/approve`: answer one of this chat's approvals.
pub(crate) async fn approve(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<Approval>,
) -> Response {
    let Some(chat) = open(&served, &id) else { return not_open() };
    let decision = match form.decision.as_str() {
        "once" => Decision::Once,
        "session" => Decision::Session,
        "always" => Decision::Always,
        "deny" => Decision::Deny,
        other => {
            return refusal(
                StatusCode::BAD_REQUEST,
                &format!("`{other}` is not a decision: once, session, always or deny"),
            );
        }
    };
    if !chat.state().approvals.contains(&form.approval) {
        return refusal(StatusCode::NOT_FOUND, "No such approval waits in this chat.");
    }
    chat.submitter.submit(Op::Approve { id: form.approval, decision });
    done(&headers, &id)
}

#[derive(Deserialize)]
pub(crate) struct Answer {
    question: u64,
    text: String,
}

/// `POST /chat/{id}/answer`: answer one of this chat's questions.
pub(crate) async fn answer(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<Answer>,
) -> Response {
    let Some(chat) = open(&served, &id) else { return not_open() };
    if !chat.state().questions.remove(&form.question) {
        return refusal(StatusCode::NOT_FOUND, "No such question waits in this chat.");
    }
    chat.submitter.submit(Op::Answer { id: form.question, text: form.text });
    done(&headers, &id)
}
