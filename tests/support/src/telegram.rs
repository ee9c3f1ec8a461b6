//! A Telegram Bot API double (<https://core.telegram.org/bots/api>), for the gateway's tests:
//! `POST /bot<TOKEN>/<method>` with a JSON body, answers `{"ok": true, "result": ...}` or
//! `{"ok": false, "error_code": N, "description": ...}` as the real one does. It knows
//! `getMe`, `getUpdates` (a real long poll, confirming updates by `offset`), `sendMessage`,
//! `editMessageText`, `sendChatAction`, `getChat`, `answerCallbackQuery` and `deleteWebhook`;
//! a wrong token gets 401.
//!
//! The test plays the users: [`TelegramFake::dm`] and [`TelegramFake::group`] queue a message,
//! [`TelegramFake::press`] a button press, and [`TelegramFake::chat`] is what the bot has shown
//! in a chat (each message with its final text after edits).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The bot's id and username.
pub const BOT_ID: i64 = 7_000_001;
pub const BOT_USERNAME: &str = "talaria_test_bot";

/// A message the bot sent, as the chat shows it now.
#[derive(Debug, Clone)]
pub struct Shown {
    pub message_id: i64,
    pub chat_id: i64,
    /// Its text now (after edits).
    pub text: String,
    pub parse_mode: Option<String>,
    /// Texts it had before, oldest first.
    pub edits: Vec<String>,
    /// Button (text, callback_data) pairs.
    pub buttons: Vec<(String, String)>,
    pub thread_id: Option<i64>,
    /// When the bot sent it.
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    /// Updates not yet confirmed.
    updates: Vec<Value>,
    next_update: i64,
    next_message: i64,
    shown: Vec<Shown>,
    /// Where each chat's messages are in `shown` (a long benchmark asks after one chat often).
    by_chat: HashMap<i64, Vec<usize>>,
    /// sendMessage calls still to answer with 502.
    failing_sends: usize,
    /// Calls by method.
    calls: HashMap<String, usize>,
    typing: HashMap<i64, usize>,
    /// getUpdates calls waiting now.
    polling: usize,
    /// How long each send, edit and typing call takes to answer (a slow platform).
    delay: Duration,
    /// sendMessage shows the message and never answers (the answer is lost on its way back).
    unanswered: bool,
}

struct Shared {
    token: String,
    inner: Mutex<Inner>,
    arrived: Notify,
}

/// The Bot API double, on its own thread and runtime.
pub struct TelegramFake {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    shared.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn ok(result: Value) -> Response {
    Json(json!({ "ok": true, "result": result })).into_response()
}

fn error(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (status, Json(json!({ "ok": false, "error_code": code, "description": description }))).into_response()
}

impl TelegramFake {
    /// Serve a bot with `token` on a free loopback port.
    pub fn start(token: &str) -> Self {
        let shared = Arc::new(Shared {
            token: token.to_string(),
            inner: Mutex::new(Inner { next_update: 1, next_message: 100, ..Inner::default() }),
            arrived: Notify::new(),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = axum::Router::new().route("/{bot}/{method}", axum::routing::post(handle)).with_state(state);
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Self { addr, shared, _stop: stop }
    }

    /// Answer every `sendMessage`, `editMessageText` and `sendChatAction` only after `delay`,
    /// as a slow platform does (calls in flight wait side by side).
    pub fn delay_sends(&self, delay: Duration) {
        lock(&self.shared).delay = delay;
    }

    /// What to set as the account's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn push(&self, update: Value) {
        let mut inner = lock(&self.shared);
        let id = inner.next_update;
        inner.next_update += 1;
        let mut update = update;
        update["update_id"] = json!(id);
        inner.updates.push(update);
        drop(inner);
        self.shared.arrived.notify_waiters();
    }

    fn next_message_id(&self) -> i64 {
        let mut inner = lock(&self.shared);
        inner.next_message += 1;
        inner.next_message
    }

    /// User `user_id` (named `name`) writes `text` to the bot in a private chat (whose id is
    /// the user's, as on Telegram). Returns the message's id.
    pub fn dm(&self, user_id: i64, name: &str, text: &str) -> i64 {
        let id = self.next_message_id();
        self.push(json!({
            "message": {
                "message_id": id,
                "from": { "id": user_id, "is_bot": false, "first_name": name },
                "chat": { "id": user_id, "type": "private", "first_name": name },
                "date": 0,
                "text": text,
            }
        }));
        id
    }

    /// User `user_id` writes `text` in group `chat_id` (a negative id, as Telegram's are).
    pub fn group(&self, chat_id: i64, user_id: i64, name: &str, text: &str) -> i64 {
        let id = self.next_message_id();
        let mut entities = Vec::new();
        let mention = format!("@{BOT_USERNAME}");
        if let Some(at) = text.find(&mention) {
            entities.push(json!({ "type": "mention", "offset": at, "length": mention.len() }));
        }
        self.push(json!({
            "message": {
                "message_id": id,
                "from": { "id": user_id, "is_bot": false, "first_name": name },
                "chat": { "id": chat_id, "type": "supergroup", "title": "Test group" },
                "date": 0,
                "text": text,
                "entities": entities,
            }
        }));
        id
    }

    /// User `user_id` writes `text` in group `chat_id`, with the entities Telegram's clients
    /// mark: every `@name` a `mention` entity over the whole name (letters, digits and `_`),
    /// however it relates to the bot's, offsets and lengths in UTF-16 code units.
    pub fn group_marked(&self, chat_id: i64, user_id: i64, name: &str, text: &str) -> i64 {
        let id = self.next_message_id();
        let units: Vec<u16> = text.encode_utf16().collect();
        let in_name = |u: u16| char::from_u32(u32::from(u)).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let mut entities = Vec::new();
        let mut i = 0;
        while i < units.len() {
            if units[i] == u16::from(b'@') && units.get(i + 1).is_some_and(|u| in_name(*u)) {
                let end = (i + 1..units.len()).find(|&j| !in_name(units[j])).unwrap_or(units.len());
                entities.push(json!({ "type": "mention", "offset": i, "length": end - i }));
                i = end;
            } else {
                i += 1;
            }
        }
        self.push(json!({
            "message": {
                "message_id": id,
                "from": { "id": user_id, "is_bot": false, "first_name": name },
                "chat": { "id": chat_id, "type": "supergroup", "title": "Test group" },
                "date": 0,
                "text": text,
                "entities": entities,
            }
        }));
        id
    }

    /// User `user_id` presses the button with `data` under message `message_id` in `chat_id`.
    pub fn press(&self, chat_id: i64, user_id: i64, name: &str, message_id: i64, data: &str) {
        self.push(json!({
            "callback_query": {
                "id": format!("cb{message_id}{user_id}"),
                "from": { "id": user_id, "is_bot": false, "first_name": name },
                "message": { "message_id": message_id, "chat": { "id": chat_id, "type": "private" }, "date": 0 },
                "data": data,
            }
        }));
    }

    /// From now on (`true`) sendMessage shows the message in its chat and never answers, as when
    /// the platform took a message and its answer never came back.
    pub fn leave_sends_unanswered(&self, unanswered: bool) {
        lock(&self.shared).unanswered = unanswered;
    }

    /// The next `n` sendMessage calls fail with 502 Bad Gateway.
    pub fn fail_sends(&self, n: usize) {
        lock(&self.shared).failing_sends = n;
    }

    /// What the bot has shown in `chat_id`, oldest first.
    pub fn chat(&self, chat_id: i64) -> Vec<Shown> {
        let inner = lock(&self.shared);
        inner.by_chat.get(&chat_id).map_or_else(Vec::new, |at| at.iter().map(|&i| inner.shown[i].clone()).collect())
    }

    /// How many messages the bot has shown in `chat_id`.
    pub fn shown_in(&self, chat_id: i64) -> usize {
        lock(&self.shared).by_chat.get(&chat_id).map_or(0, Vec::len)
    }

    /// The last message the bot showed in `chat_id`.
    pub fn last_in(&self, chat_id: i64) -> Option<Shown> {
        let inner = lock(&self.shared);
        inner.by_chat.get(&chat_id).and_then(|at| at.last()).map(|&i| inner.shown[i].clone())
    }

    /// Every message the bot has shown.
    pub fn all_shown(&self) -> Vec<Shown> {
        lock(&self.shared).shown.clone()
    }

    /// Calls of `method` so far.
    pub fn calls(&self, method: &str) -> usize {
        lock(&self.shared).calls.get(method).copied().unwrap_or(0)
    }

    /// `sendChatAction` calls for `chat_id`.
    pub fn typing(&self, chat_id: i64) -> usize {
        lock(&self.shared).typing.get(&chat_id).copied().unwrap_or(0)
    }

    /// Updates the bot has not confirmed yet.
    pub fn unconfirmed(&self) -> usize {
        lock(&self.shared).updates.len()
    }

    /// Wait until `chat_id` shows a message for which `done` holds; that message. Panics after
    /// `timeout`, printing what the chat shows.
    pub fn wait_for(&self, chat_id: i64, timeout: Duration, done: impl Fn(&Shown) -> bool) -> Shown {
        let start = Instant::now();
        loop {
            if let Some(m) = self.chat(chat_id).into_iter().find(|m| done(m)) {
                return m;
            }
            assert!(
                start.elapsed() < timeout,
                "chat {chat_id} never showed what was awaited; it shows {:#?}",
                self.chat(chat_id)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until a getUpdates call is waiting (the bot is connected and polling).
    pub fn wait_polling(&self, timeout: Duration) {
        let start = Instant::now();
        while lock(&self.shared).polling == 0 {
            assert!(start.elapsed() < timeout, "the bot never polled");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        return error(401, "Unauthorized");
    }
    let body: Value = if body.is_empty() { json!({}) } else { serde_json::from_slice(&body).unwrap_or(json!({})) };
    let delay = {
        let mut inner = lock(&shared);
        *inner.calls.entry(method.clone()).or_default() += 1;
        inner.delay
    };
    if matches!(method.as_str(), "sendMessage" | "editMessageText" | "sendChatAction") && !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match method.as_str() {
        "getMe" => ok(json!({ "id": BOT_ID, "is_bot": true, "first_name": "Talaria", "username": BOT_USERNAME })),
        "deleteWebhook" | "answerCallbackQuery" => ok(json!(true)),
        "getUpdates" => get_updates(&shared, &body).await,
        "sendMessage" => {
            let answer = send_message(&shared, &body);
            if lock(&shared).unanswered {
                std::future::pending::<()>().await;
            }
            answer
        }
        "editMessageText" => edit_message(&shared, &body),
        "sendChatAction" => {
            let chat = body["chat_id"].as_i64().unwrap_or(0);
            *lock(&shared).typing.entry(chat).or_default() += 1;
            ok(json!(true))
        }
        "getChat" => {
            let id = body["chat_id"].as_i64().unwrap_or(0);
            let kind = if id < 0 { "supergroup" } else { "private" };
            ok(json!({ "id": id, "type": kind, "title": "Test group", "first_name": "User" }))
        }
        _ => error(404, "Not Found: method not found"),
    }
}

async fn get_updates(shared: &Arc<Shared>, body: &Value) -> Response {
    let offset = body["offset"].as_i64().unwrap_or(0);
    let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0).min(50));
    let deadline = tokio::time::Instant::now() + timeout;
    lock(shared).polling += 1;
    let result = loop {
        let arrived = shared.arrived.notified();
        {
            let mut inner = lock(shared);
            // Asking from `offset` confirms every update before it.
            inner.updates.retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            if !inner.updates.is_empty() {
                break inner.updates.clone();
            }
        }
        if tokio::time::timeout_at(deadline, arrived).await.is_err() {
            break Vec::new();
        }
    };
    lock(shared).polling -= 1;
    ok(Value::Array(result))
}

fn buttons(body: &Value) -> Vec<(String, String)> {
    body["reply_markup"]["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row.as_array().cloned().unwrap_or_default())
        .map(|b| {
            (
                b["text"].as_str().unwrap_or_default().to_string(),
                b["callback_data"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Telegram refuses HTML it cannot parse; this checks the tags are balanced and known.
fn html_ok(text: &str) -> bool {
    let mut open: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        let Some(end) = rest[at..].find('>') else { return false };
        let tag = &rest[at + 1..at + end];
        rest = &rest[at + end + 1..];
        let (closing, name) = match tag.strip_prefix('/') {
            Some(name) => (true, name),
            None => (false, tag.split_whitespace().next().unwrap_or_default()),
        };
        if !["b", "strong", "i", "em", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"].contains(&name) {
            return false;
        }
        if closing {
            if open.pop().as_deref() != Some(name) {
                return false;
            }
        } else {
            open.push(name.to_string());
        }
    }
    open.is_empty()
}

/// A user who blocked the bot: sending to them is refused for good (403).
pub const BLOCKED_CHAT: i64 = 404;

fn send_message(shared: &Arc<Shared>, body: &Value) -> Response {
    let mut inner = lock(shared);
    if inner.failing_sends > 0 {
        inner.failing_sends -= 1;
        return error(502, "Bad Gateway");
    }
    let Some(chat_id) = body["chat_id"].as_i64() else { return error(400, "Bad Request: chat not found") };
    if chat_id == BLOCKED_CHAT {
        return error(403, "Forbidden: bot was blocked by the user");
    }
    let text = body["text"].as_str().unwrap_or_default().to_string();
    if text.is_empty() {
        return error(400, "Bad Request: message text is empty");
    }
    if text.chars().count() > 4096 {
        return error(400, "Bad Request: message is too long");
    }
    let parse_mode = body["parse_mode"].as_str().map(str::to_string);
    if parse_mode.as_deref() == Some("HTML") && !html_ok(&text) {
        return error(400, "Bad Request: can't parse entities: unsupported start tag");
    }
    inner.next_message += 1;
    let message_id = inner.next_message;
    let at = inner.shown.len();
    inner.by_chat.entry(chat_id).or_default().push(at);
    inner.shown.push(Shown {
        message_id,
        chat_id,
        text: text.clone(),
        parse_mode,
        edits: Vec::new(),
        buttons: buttons(body),
        thread_id: body["message_thread_id"].as_i64(),
        at: Instant::now(),
    });
    ok(json!({ "message_id": message_id, "chat": { "id": chat_id }, "date": 0, "text": text }))
}

fn edit_message(shared: &Arc<Shared>, body: &Value) -> Response {
    let mut inner = lock(shared);
    let (Some(chat_id), Some(message_id)) = (body["chat_id"].as_i64(), body["message_id"].as_i64()) else {
        return error(400, "Bad Request: message to edit not found");
    };
    let text = body["text"].as_str().unwrap_or_default().to_string();
    let parse_mode = body["parse_mode"].as_str().map(str::to_string);
    if parse_mode.as_deref() == Some("HTML") && !html_ok(&text) {
        return error(400, "Bad Request: can't parse entities: unsupported start tag");
    }
    let buttons = buttons(body);
    let inner = &mut *inner;
    let found =
        inner.by_chat.get(&chat_id).into_iter().flatten().copied().find(|&i| inner.shown[i].message_id == message_id);
    let Some(shown) = found.map(|i| &mut inner.shown[i]) else {
        return error(400, "Bad Request: message to edit not found");
    };
    if shown.text == text && shown.buttons == buttons {
        return error(400, "Bad Request: message is not modified");
    }
    let before = std::mem::replace(&mut shown.text, text);
    shown.edits.push(before);
    shown.parse_mode = parse_mode;
    shown.buttons = buttons;
    ok(json!({ "message_id": message_id, "chat": { "id": chat_id }, "date": 0 }))
}
