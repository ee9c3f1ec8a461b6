//! A2A (Agent2Agent) 1.0 over JSON-RPC: other agents find talaria by its agent card
//! (`GET /.well-known/agent-card.json`) and send it tasks at `POST /a2a`, with the same bearer
//! token as the API.
//!
//! What talaria makes of the protocol:
//! - **A context is a conversation**: a message's `contextId` names a talaria session, titled
//!   `a2a:CONTEXT`, made on first use and continued after (one task at a time in it, as a chat's
//!   next message waits). A message without one starts a new context, whose id the task says.
//! - **A task is one turn** of its context's conversation: the message's text parts (and data
//!   parts, as JSON) are what the user says; the answer is the task's one artifact, `answer`,
//!   and the agent's message in its history. Files (`raw` and `url` parts) are refused.
//! - **States**: `TASK_STATE_WORKING` while the turn runs, then `COMPLETED`, `CANCELED`
//!   (`CancelTask`, which interrupts the turn) or `FAILED` (the model failed; its status
//!   message says why). A task never waits for input: a question the agent would ask is
//!   answered "go on with your best judgement", and approvals are as the API's
//!   ([`crate::openai`]).
//! - **Methods**: `SendMessage` (answers the ended task, or at once with `returnImmediately`),
//!   `SendStreamingMessage` (the task, its answer as artifact updates as it comes, and its end
//!   as a status update; the stream closes after it), `GetTask`, `ListTasks` and `CancelTask`.
//!   A task keeps running when a stream's client goes away. Push notifications, resubscribing
//!   and the extended card are not offered (their errors say so).
//! - **Tasks are kept in memory** ([`MAX_TASKS`], the oldest ended ones forgotten first); what
//!   they said is kept in their sessions, which outlive the server.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse as _, Response};
use axum::{Extension, Json};
use http::{HeaderMap, header};
use serde_json::{Value, json};
use talaria_protocol::Outcome;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::openai::{Collected, KEEP_ALIVE, failed_to_start, new_id, valid_name};
use crate::turn::{self, Asked, Piece};
use crate::{Caller, Served};

/// The protocol version spoken.
pub const VERSION: &str = "1.0";
/// Where the JSON-RPC endpoint is.
pub const PATH: &str = "/a2a";
/// How many tasks are remembered; beyond it, the oldest ended ones are forgotten.
pub const MAX_TASKS: usize = 1000;
/// The id of a task's one artifact.
const ANSWER: &str = "answer";

/// A2A's error codes, and JSON-RPC's.
mod code {
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const NOT_CANCELABLE: i64 = -32002;
    pub const NO_PUSH: i64 = -32003;
    pub const UNSUPPORTED: i64 = -32004;
    pub const CONTENT_TYPE: i64 = -32005;
    pub const NO_EXTENDED_CARD: i64 = -32007;
    pub const VERSION: i64 = -32009;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const NO_METHOD: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const PARSE: i64 = -32700;
}

/// A refused call: its JSON-RPC error.
struct Refused(i64, String);

fn refused(code: i64, message: impl Into<String>) -> Refused {
    Refused(code, message.into())
}

/// The agent card, naming the endpoint at the host the request was sent to (which
/// [`crate::guard`] has checked is one of the server's names).
pub(crate) async fn card(headers: HeaderMap) -> Json<Value> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    // A reverse proxy that ends TLS says so; the card is the caller's own, so what it claims
    // only changes the address it is told.
    let https = headers.get("x-forwarded-proto").and_then(|h| h.to_str().ok()) == Some("https");
    let url = format!("{}://{host}{PATH}", if https { "https" } else { "http" });
    Json(json!({
        "name": "talaria",
        "description": "A general agent: it reads and edits files in its workspace, runs commands in a sandbox, searches and fetches the web, and remembers each context's conversation.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": VERSION}],
        "capabilities": {"streaming": true, "pushNotifications": false, "extendedAgentCard": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": "agent",
            "name": "Work in a workspace",
            "description": "Answer questions and carry out tasks with talaria's tools: files, commands (sandboxed), the web, memory and skills.",
            "tags": ["files", "commands", "web", "coding"],
            "examples": ["What does the README in this workspace say about testing?"],
        }],
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "bearer"}}},
        "securityRequirements": [{"schemes": {"bearer": {}}}],
    }))
}

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Working,
    Completed,
    Canceled,
    Failed,
}

impl TaskState {
    fn name(self) -> &'static str {
        match self {
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Failed => "TASK_STATE_FAILED",
        }
    }

    fn ended(self) -> bool {
        self != TaskState::Working
    }
}

/// What a task says now.
struct Status {
    state: TaskState,
    /// The answer so far.
    text: String,
    /// Why it failed.
    failure: Option<String>,
    /// When it last changed (RFC 3339).
    at: String,
}

/// One task: a turn of its context's conversation.
struct Task {
    id: String,
    context: String,
    /// The user's message, as it is shown in the task's history.
    asked: Value,
    stop: CancellationToken,
    status: Mutex<Status>,
    /// Becomes true when the task ended.
    ended: watch::Sender<bool>,
}

impl Task {
    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn state(&self) -> TaskState {
        self.status().state
    }

    /// The task as the protocol shows it, with at most `history` messages of its history.
    /// `status` as the protocol shows it: its state, when, and why it failed.
    fn shown_status(&self, status: &Status) -> Value {
        let mut shown = json!({"state": status.state.name(), "timestamp": status.at});
        if let Some(why) = &status.failure {
            shown["message"] = self.message("ROLE_AGENT", why);
        }
        shown
    }

    fn json(&self, history: Option<usize>) -> Value {
        let status = self.status();
        let shown = self.shown_status(&status);
        let mut said = vec![self.asked.clone()];
        if status.state.ended() && !status.text.is_empty() {
            said.push(self.message("ROLE_AGENT", &status.text));
        }
        let keep = history.unwrap_or(said.len()).min(said.len());
        let said = said.split_off(said.len() - keep);
        let mut task = json!({"id": self.id, "contextId": self.context, "status": shown, "history": said});
        if !status.text.is_empty() {
            task["artifacts"] = json!([{"artifactId": ANSWER, "name": ANSWER, "parts": [{"text": status.text}]}]);
        }
        task
    }

    fn message(&self, role: &str, text: &str) -> Value {
        json!({
            "messageId": new_id("msg-"),
            "role": role,
            "parts": [{"text": text}],
            "contextId": self.context,
            "taskId": self.id,
        })
    }

    fn status_update(&self) -> Value {
        let shown = self.shown_status(&self.status());
        json!({"statusUpdate": {"taskId": self.id, "contextId": self.context, "status": shown}})
    }

    fn artifact_update(&self, text: &str, append: bool, last: bool) -> Value {
        json!({"artifactUpdate": {
            "taskId": self.id,
            "contextId": self.context,
            "artifact": {"artifactId": ANSWER, "name": ANSWER, "parts": [{"text": text}]},
            "append": append,
            "lastChunk": last,
        }})
    }
}

/// The tasks this server remembers, and the order they came in.
#[derive(Default)]
pub(crate) struct Tasks(Mutex<Remembered>);

#[derive(Default)]
struct Remembered {
    by_id: HashMap<String, Arc<Task>>,
    order: VecDeque<String>,
}

impl Tasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<Arc<Task>> {
        self.lock().by_id.get(id).cloned()
    }

    /// Remember `task`, forgetting the oldest ended ones beyond [`MAX_TASKS`].
    fn add(&self, task: Arc<Task>) {
        let mut remembered = self.lock();
        remembered.order.push_back(task.id.clone());
        remembered.by_id.insert(task.id.clone(), task);
        let mut excess = remembered.by_id.len().saturating_sub(MAX_TASKS);
        let Remembered { by_id, order } = &mut *remembered;
        order.retain(|id| {
            if excess > 0 && by_id.get(id).is_some_and(|t| t.state().ended()) {
                by_id.remove(id);
                excess -= 1;
                return false;
            }
            true
        });
    }

    /// The tasks, newest first.
    fn newest_first(&self) -> Vec<Arc<Task>> {
        let remembered = self.lock();
        remembered.order.iter().rev().filter_map(|id| remembered.by_id.get(id).cloned()).collect()
    }
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// `POST /a2a`: one JSON-RPC call.
pub(crate) async fn rpc(
    State(served): State<Arc<Served>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let call: Value = match serde_json::from_slice(&body) {
        Ok(call) => call,
        Err(e) => return answer(&Value::Null, Err(refused(code::PARSE, format!("the body is not JSON: {e}")))),
    };
    let id = call.get("id").cloned().unwrap_or(Value::Null);
    if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
        return answer(&Value::Null, Err(refused(code::INVALID_REQUEST, "a call's `id` is a string or a number")));
    }
    if call.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return answer(
            &id,
            Err(refused(code::INVALID_REQUEST, "the body is not a JSON-RPC 2.0 call (`\"jsonrpc\": \"2.0\"`)")),
        );
    }
    let Some(method) = call.get("method").and_then(Value::as_str) else {
        return answer(&id, Err(refused(code::INVALID_REQUEST, "the call names no `method`")));
    };
    if let Some(version) = headers.get("a2a-version").and_then(|v| v.to_str().ok())
        && version.trim() != VERSION
        && !version.trim().is_empty()
    {
        let message = format!("this agent speaks A2A {VERSION}, not {version}: send `A2A-Version: {VERSION}`");
        return answer(&id, Err(refused(code::VERSION, message)));
    }
    let params = call.get("params").cloned().unwrap_or(Value::Null);
    if !params.is_object() {
        return answer(&id, Err(refused(code::INVALID_PARAMS, "`params` must be an object")));
    }
    let tasks = &served.a2a;
    match method {
        "SendMessage" => match send(&served, caller, &params, false).await {
            Ok(Sent { task, .. }) => {
                let immediately =
                    params.pointer("/configuration/returnImmediately").and_then(Value::as_bool) == Some(true);
                if !immediately {
                    let mut ended = task.ended.subscribe();
                    let _ = ended.wait_for(|ended| *ended).await;
                }
                answer(&id, Ok(json!({"task": task.json(history_length(&params, "/configuration/historyLength"))})))
            }
            Err(refusal) => answer(&id, Err(refusal)),
        },
        "SendStreamingMessage" => match send(&served, caller, &params, true).await {
            Ok(Sent { events: Some(events), .. }) => stream(id, events),
            Ok(Sent { events: None, .. }) => answer(&id, Err(refused(code::INTERNAL, "the task has no stream"))),
            Err(refusal) => answer(&id, Err(refusal)),
        },
        "GetTask" => answer(&id, named_task(tasks, &params).map(|t| t.json(history_length(&params, "/historyLength")))),
        "CancelTask" => match named_task(tasks, &params) {
            Ok(task) => answer(&id, cancel(&task).await),
            Err(refusal) => answer(&id, Err(refusal)),
        },
        "ListTasks" => answer(&id, list(tasks, &params)),
        "SubscribeToTask" => {
            answer(&id, Err(refused(code::UNSUPPORTED, "talaria does not resubscribe to a task: poll it with GetTask")))
        }
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => answer(
            &id,
            Err(refused(
                code::NO_PUSH,
                "talaria does not send push notifications: stream the task, or poll it with GetTask",
            )),
        ),
        "GetExtendedAgentCard" => answer(
            &id,
            Err(refused(code::NO_EXTENDED_CARD, "talaria has no extended agent card: its card is all there is")),
        ),
        other => answer(
            &id,
            Err(refused(
                code::NO_METHOD,
                format!(
                    "no method `{other}`: this agent answers SendMessage, SendStreamingMessage, GetTask, ListTasks and CancelTask"
                ),
            )),
        ),
    }
}

/// A JSON-RPC answer to the call `id`.
fn answer(id: &Value, result: Result<Value, Refused>) -> Response {
    Json(envelope(id, result)).into_response()
}

fn envelope(id: &Value, result: Result<Value, Refused>) -> Value {
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(Refused(code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    }
}

/// `historyLength` at `pointer` in `params`: how many messages of a task's history to show.
fn history_length(params: &Value, pointer: &str) -> Option<usize> {
    params.pointer(pointer).and_then(Value::as_u64).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// The task `params.id` names.
fn named_task(tasks: &Tasks, params: &Value) -> Result<Arc<Task>, Refused> {
    let Some(id) = params.get("id").and_then(Value::as_str) else {
        return Err(refused(code::INVALID_PARAMS, "name the task: `params.id`"));
    };
    tasks
        .get(id)
        .ok_or_else(|| refused(code::TASK_NOT_FOUND, format!("no task `{id}` (it never was, or it was forgotten)")))
}

/// A task begun by a message.
struct Sent {
    task: Arc<Task>,
    /// What a streamed call sends, as it comes (ends when the task did).
    events: Option<mpsc::Receiver<Value>>,
}

/// Check the message in `params`, begin its task, and keep it.
async fn send(served: &Arc<Served>, caller: Caller, params: &Value, streamed: bool) -> Result<Sent, Refused> {
    let Some(message) = params.get("message").filter(|m| m.is_object()) else {
        return Err(refused(code::INVALID_PARAMS, "send a `message`"));
    };
    if message.get("role").and_then(Value::as_str) != Some("ROLE_USER") {
        return Err(refused(code::INVALID_PARAMS, "the message's `role` must be `ROLE_USER`"));
    }
    let text = message_text(message)?;
    let tasks = &served.a2a;
    if let Some(task) = message.get("taskId").and_then(Value::as_str).filter(|t| !t.is_empty()) {
        let Some(known) = tasks.get(task) else {
            return Err(refused(code::TASK_NOT_FOUND, format!("no task `{task}` (it never was, or it was forgotten)")));
        };
        let state = known.state();
        let why = if state.ended() {
            format!(
                "task `{task}` has ended ({}): send the message without a taskId, with its contextId `{}`, to go on in the same conversation",
                state.name(),
                known.context
            )
        } else {
            format!("task `{task}` is still working and takes no more input: wait for it, or cancel it")
        };
        return Err(refused(code::UNSUPPORTED, why));
    }
    let context = match message.get("contextId").and_then(Value::as_str).filter(|c| !c.trim().is_empty()) {
        Some(context) => valid_name(context)
            .map_err(|_| refused(code::INVALID_PARAMS, "a `contextId` is at most 200 printable characters"))?,
        None => new_id("ctx-"),
    };
    let id = new_id("task-");
    let mut asked = message.clone();
    asked["contextId"] = Value::from(context.clone());
    asked["taskId"] = Value::from(id.clone());
    let (ended, _) = watch::channel(false);
    let task = Arc::new(Task {
        id,
        context: context.clone(),
        asked,
        stop: CancellationToken::new(),
        status: Mutex::new(Status { state: TaskState::Working, text: String::new(), failure: None, at: now() }),
        ended,
    });
    tasks.add(task.clone());
    let (events, receiver) = if streamed {
        let (sender, receiver) = mpsc::channel(64);
        (Some(sender), Some(receiver))
    } else {
        (None, None)
    };
    let turn = Asked {
        title: Some(format!("a2a:{context}")),
        text: text.clone(),
        transcript: text,
        stop: task.stop.clone(),
        approvals: caller.approvals,
        trace: caller.trace,
    };
    tokio::spawn(drive(served.clone(), task.clone(), turn, events));
    Ok(Sent { task, events: receiver })
}

/// The text a message says: its text parts, and its data parts as JSON.
fn message_text(message: &Value) -> Result<String, Refused> {
    let parts = message.get("parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut said = Vec::new();
    for part in parts {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            said.push(text.to_string());
        } else if let Some(data) = part.get("data") {
            said.push(data.to_string());
        } else if part.get("raw").is_some() || part.get("url").is_some() {
            return Err(refused(
                code::CONTENT_TYPE,
                "talaria takes text and data parts, not files: send the file's content as text",
            ));
        }
    }
    let text = said.join("\n");
    if text.trim().is_empty() {
        return Err(refused(code::INVALID_PARAMS, "the message has no text: send at least one text part"));
    }
    Ok(text)
}

/// Run `task`'s turn to its end, keeping what it says and sending it to `events` while that
/// is open (the task goes on when the client goes away).
async fn drive(served: Arc<Served>, task: Arc<Task>, asked: Asked, mut events: Option<mpsc::Sender<Value>>) {
    async fn emit(events: &mut Option<mpsc::Sender<Value>>, event: Value) {
        if let Some(sender) = events
            && sender.send(event).await.is_err()
        {
            *events = None;
        }
    }
    emit(&mut events, json!({"task": task.json(None)})).await;
    let (out, mut pieces) = mpsc::channel(64);
    let running = tokio::spawn(turn::run(served, asked, out));
    let mut collected = Collected::default();
    let mut chunks = 0usize;
    let mut outcome = None;
    while let Some(piece) = pieces.recv().await {
        match piece {
            Piece::Text(text) => {
                let sent = collected.push(&text);
                if sent.is_empty() {
                    continue;
                }
                task.status().text.push_str(&sent);
                let update = task.artifact_update(&sent, chunks > 0, false);
                chunks += 1;
                emit(&mut events, update).await;
            }
            Piece::Break => collected.part(),
            Piece::Done(done) => {
                let tail = collected.tail(&done.refused);
                if !tail.is_empty() || chunks > 0 {
                    task.status().text.push_str(&tail);
                    let update = task.artifact_update(&tail, chunks > 0, true);
                    emit(&mut events, update).await;
                }
                outcome = Some(done.outcome);
            }
        }
    }
    let (state, failure) = match outcome {
        Some(Outcome::Completed | Outcome::Truncated | Outcome::BudgetExhausted) => (TaskState::Completed, None),
        Some(Outcome::Interrupted) => (TaskState::Canceled, None),
        Some(Outcome::Failed(detail)) => (TaskState::Failed, Some(format!("the model failed: {detail}"))),
        Some(Outcome::Refused(why)) => (TaskState::Failed, Some(why)),
        None => {
            let (_, Json(why)) = failed_to_start(running).await;
            let why =
                why.pointer("/error/message").and_then(Value::as_str).unwrap_or("the turn did not run").to_string();
            (TaskState::Failed, Some(why))
        }
    };
    {
        let mut status = task.status();
        status.state = state;
        status.failure = failure;
        status.at = now();
    }
    emit(&mut events, task.status_update()).await;
    task.ended.send_replace(true);
}

/// Stop `task` and answer it once it ended.
async fn cancel(task: &Task) -> Result<Value, Refused> {
    let state = task.state();
    if state.ended() {
        return Err(refused(code::NOT_CANCELABLE, format!("task `{}` has already ended ({})", task.id, state.name())));
    }
    task.stop.cancel();
    let mut ended = task.ended.subscribe();
    let _ = ended.wait_for(|ended| *ended).await;
    Ok(task.json(None))
}

/// `ListTasks`: newest first, by `contextId` and `status` when given, a page at a time.
fn list(tasks: &Tasks, params: &Value) -> Result<Value, Refused> {
    let context = params.get("contextId").and_then(Value::as_str).filter(|c| !c.is_empty());
    let state = params.get("status").and_then(Value::as_str).filter(|s| *s != "TASK_STATE_UNSPECIFIED");
    let size = params.get("pageSize").and_then(Value::as_u64).unwrap_or(50).clamp(1, 100);
    let size = usize::try_from(size).unwrap_or(100);
    let from = match params.get("pageToken").and_then(Value::as_str).filter(|t| !t.is_empty()) {
        Some(token) => token
            .parse::<usize>()
            .map_err(|_| refused(code::INVALID_PARAMS, "`pageToken` is one a ListTasks answer gave"))?,
        None => 0,
    };
    let history = history_length(params, "/historyLength");
    let chosen: Vec<Arc<Task>> = tasks
        .newest_first()
        .into_iter()
        .filter(|t| context.is_none_or(|c| t.context == c))
        .filter(|t| state.is_none_or(|s| t.state().name() == s))
        .collect();
    let page: Vec<Value> = chosen.iter().skip(from).take(size).map(|t| t.json(history)).collect();
    let next = if from + page.len() < chosen.len() { (from + page.len()).to_string() } else { String::new() };
    Ok(json!({"tasks": page, "nextPageToken": next, "pageSize": size, "totalSize": chosen.len()}))
}

/// A streamed call's answer: each event as a JSON-RPC answer to `id`, a keep-alive comment
/// while nothing comes; closed once the task ended.
fn stream(id: Value, events: mpsc::Receiver<Value>) -> Response {
    let body = futures_util::stream::unfold(events, move |mut events| {
        let id = id.clone();
        async move {
            let event = match tokio::time::timeout(KEEP_ALIVE, events.recv()).await {
                Err(_) => return Some((Ok::<_, Infallible>(Bytes::from_static(b": keep-alive\n\n")), events)),
                Ok(None) => return None,
                Ok(Some(event)) => event,
            };
            Some((Ok(Bytes::from(format!("data: {}\n\n", envelope(&id, Ok(event))))), events))
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| answer(&Value::Null, Err(refused(code::INTERNAL, "cannot stream"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, state: TaskState) -> Arc<Task> {
        let (ended, _) = watch::channel(state.ended());
        Arc::new(Task {
            id: id.into(),
            context: "ctx".into(),
            asked: json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}),
            stop: CancellationToken::new(),
            status: Mutex::new(Status { state, text: "hello".into(), failure: None, at: now() }),
            ended,
        })
    }

    #[test]
    fn the_oldest_ended_tasks_are_forgotten_first() {
        let tasks = Tasks::default();
        tasks.add(task("working", TaskState::Working));
        for n in 0..MAX_TASKS {
            tasks.add(task(&format!("t{n}"), TaskState::Completed));
        }
        assert!(tasks.get("working").is_some(), "a working task is never forgotten");
        assert!(tasks.get("t0").is_none(), "the oldest ended one goes");
        assert!(tasks.get("t1").is_some());
        assert_eq!(tasks.lock().by_id.len(), MAX_TASKS);
        assert_eq!(tasks.lock().order.len(), MAX_TASKS);
    }

    #[test]
    fn history_is_cut_to_the_length_asked_for() {
        let t = task("t", TaskState::Completed);
        assert_eq!(t.json(None)["history"].as_array().map(Vec::len), Some(2));
        let one = t.json(Some(1));
        assert_eq!(one["history"][0]["role"], "ROLE_AGENT");
        assert_eq!(one["history"].as_array().map(Vec::len), Some(1));
        assert_eq!(t.json(Some(0))["history"], json!([]));
        assert_eq!(t.json(None)["artifacts"][0]["parts"][0]["text"], "hello");
    }

    #[test]
    fn files_are_refused_and_data_is_read_as_json() {
        let Err(Refused(code, _)) = message_text(&json!({"parts": [{"url": "https://x/y.pdf"}]})) else {
            panic!("a file was taken")
        };
        assert_eq!(code, code::CONTENT_TYPE);
        let text = message_text(&json!({"parts": [{"text": "sum these"}, {"data": {"a": 1}}]})).ok();
        assert_eq!(text.as_deref(), Some("sum these\n{\"a\":1}"));
        assert!(message_text(&json!({"parts": []})).is_err());
    }
}
