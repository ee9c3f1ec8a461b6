//! A Discord double (<https://discord.com/developers/docs/reference>), for the gateway's tests:
//! the REST API v10 and the Gateway WebSocket on one loopback port, as an account's `base_url`
//! makes the adapter reach one host for both.
//!
//! REST (`Authorization: Bot TOKEN`, else 401): `GET /api/v10/users/@me`, `GET
//! /api/v10/gateway/bot` (whose `url` is this double's `ws://`), `POST
//! /channels/{id}/messages`, `PATCH /channels/{id}/messages/{id}`, `POST
//! /channels/{id}/typing`, `GET /channels/{id}`; errors as Discord's `{"message", "code"}`.
//!
//! Gateway (`/?v=10&encoding=json`): HELLO with a [`HEARTBEAT_INTERVAL_MS`] interval; IDENTIFY
//! with the token starts a session (READY, sequence 1), a wrong token closes with 4004; every
//! HEARTBEAT is recorded with the sequence number it carried beside the last one sent on that
//! connection, and acknowledged unless [`DiscordFake::stop_acks`] silenced the connection; RESUME of a known session replays the dispatches after its
//! sequence number, then RESUMED; RESUME of an unknown one gets INVALID_SESSION. Every message
//! the bot posts comes back as a MESSAGE_CREATE from the bot, as on Discord.
//!
//! The test plays the users ([`DiscordFake::dm`], [`DiscordFake::guild_message`]) and the
//! platform ([`DiscordFake::drop_connection`], [`DiscordFake::stop_acks`],
//! [`DiscordFake::invalidate_session`]), and reads
//! what the bot posted per channel ([`DiscordFake::posted`]) and did on the Gateway.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

/// The bot's user id and name.
pub const BOT_ID: &str = "1100000000000000001";
pub const BOT_NAME: &str = "talaria";
/// The heartbeat interval HELLO asks for: short, so that a test sees heartbeats.
pub const HEARTBEAT_INTERVAL_MS: u64 = 500;
const GUILD_ID: &str = "1200000000000000001";

/// A message the bot posted, as the channel shows it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Posted {
    pub id: String,
    pub channel_id: String,
    /// Its content now (after edits).
    pub content: String,
    /// Contents it had before, oldest first.
    pub edits: Vec<String>,
    /// The message it replies to (`message_reference`).
    pub reply_to: Option<String>,
    /// Its `allowed_mentions`, as sent.
    pub allowed_mentions: Value,
}

/// A HEARTBEAT the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The sequence number it carried.
    pub seq: Option<u64>,
    /// The last sequence number sent on that connection before it came.
    pub last_sent: Option<u64>,
    /// The connection it came on (1 for the first).
    pub connection: usize,
    /// Whether the double acknowledged it (op 11).
    pub acked: bool,
}

/// An IDENTIFY the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identify {
    pub intents: u64,
    pub connection: usize,
}

/// A RESUME the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    pub session_id: String,
    pub seq: Option<u64>,
    pub connection: usize,
}

/// What the test asks of the live connection.
enum Control {
    Send(Value),
    /// Drop the connection without a close frame.
    Drop,
}

/// A session and every dispatch of it (dispatch `s` at index `s - 1`).
struct Session {
    id: String,
    events: Vec<Value>,
    valid: bool,
}

/// The connection the bot has open now.
struct Live {
    connection: usize,
    session: Option<String>,
    tx: mpsc::UnboundedSender<Control>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    posted: Vec<Posted>,
    typing: HashMap<String, usize>,
    /// DM channel by user id.
    dms: HashMap<String, String>,
    sessions: Vec<Session>,
    live: Option<Live>,
    connections: usize,
    identifies: Vec<Identify>,
    resumes: Vec<Resume>,
    heartbeats: Vec<Heartbeat>,
    /// The connection whose heartbeats go unacknowledged.
    silent: Option<usize>,
    /// REST requests with a wrong or missing token.
    refused: usize,
    /// What the bot sent on the Gateway that Discord would not take.
    violations: Vec<String>,
}

struct Shared {
    token: String,
    addr: SocketAddr,
    inner: Mutex<Inner>,
}

/// The Discord double, on its own thread and runtime.
pub struct DiscordFake {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    shared.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn error(status: StatusCode, code: u64, message: &str) -> Response {
    (status, Json(json!({ "message": message, "code": code }))).into_response()
}

/// A socket the server side of a WebSocket handshake produced.
pub(crate) type ServerSocket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Answer the WebSocket handshake in `request` (101) and run `serve` on the socket once the
/// connection is upgraded; 400 when `request` is no handshake.
pub(crate) fn accept_websocket<F, Fut>(mut request: Request, serve: F) -> Response
where
    F: FnOnce(ServerSocket) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let key = request.headers().get("sec-websocket-key").cloned();
    let upgrade = request.extensions_mut().remove::<hyper::upgrade::OnUpgrade>();
    let (Some(key), Some(upgrade)) = (key, upgrade) else {
        return (StatusCode::BAD_REQUEST, "not a WebSocket handshake").into_response();
    };
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            serve(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await).await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("upgrade", "websocket")
        .header("connection", "upgrade")
        .header("sec-websocket-accept", derive_accept_key(key.as_bytes()))
        .body(Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Serve the router `build` makes for the address on a free loopback port, on a thread and
/// runtime of its own; the address, and the sender that stops it when dropped.
pub(crate) fn serve_on_loopback(
    build: impl FnOnce(SocketAddr) -> axum::Router,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let app = build(addr);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
    });
    (addr, stop)
}

impl DiscordFake {
    /// Serve a bot with `token` on a free loopback port.
    pub fn start(token: &str) -> Self {
        let mut made = None;
        let (addr, stop) = serve_on_loopback(|addr| {
            let shared = Arc::new(Shared {
                token: token.to_string(),
                addr,
                inner: Mutex::new(Inner { next_id: 1_300_000_000_000_000_000, ..Inner::default() }),
            });
            made = Some(shared.clone());
            axum::Router::new()
                .route("/", axum::routing::get(gateway))
                .route("/api/v10/{*path}", axum::routing::any(rest))
                .with_state(shared)
        });
        let shared = made.expect("the router was made");
        Self { addr, shared, _stop: stop }
    }

    /// What to set as the account's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn next_id(&self) -> String {
        next_id(&mut lock(&self.shared))
    }

    /// The DM channel between user `user_id` and the bot.
    pub fn dm_channel(&self, user_id: &str) -> String {
        let mut inner = lock(&self.shared);
        if let Some(channel) = inner.dms.get(user_id) {
            return channel.clone();
        }
        let channel = next_id(&mut inner);
        inner.dms.insert(user_id.to_string(), channel.clone());
        channel
    }

    /// User `user_id` (named `name`) writes `text` to the bot in their DM channel. Returns the
    /// message's id.
    pub fn dm(&self, user_id: &str, name: &str, text: &str) -> String {
        let channel = self.dm_channel(user_id);
        let id = self.next_id();
        self.dispatch("MESSAGE_CREATE", message(&id, &channel, None, user_id, name, text, &[]));
        id
    }

    /// User `user_id` writes `text` in guild channel `channel_id`, mentioning the bot first
    /// when `mention`. Returns the message's id.
    pub fn guild_message(&self, channel_id: &str, user_id: &str, name: &str, text: &str, mention: bool) -> String {
        let id = self.next_id();
        let (text, mentions) =
            if mention { (format!("<@{BOT_ID}> {text}"), vec![BOT_ID]) } else { (text.to_string(), vec![]) };
        self.dispatch("MESSAGE_CREATE", message(&id, channel_id, Some(GUILD_ID), user_id, name, &text, &mentions));
        id
    }

    /// Dispatch event `name` with data `d` in the current session: sent at once when the bot is
    /// connected to it, kept for a RESUME otherwise.
    fn dispatch(&self, name: &str, d: Value) {
        dispatch(&self.shared, name, d);
    }

    /// Drop the bot's connection without a close frame, as a network failure does.
    pub fn drop_connection(&self) {
        if let Some(live) = lock(&self.shared).live.take() {
            let _ = live.tx.send(Control::Drop);
        }
    }

    /// Tell the bot its session is invalid and cannot be resumed (op 9, `false`).
    pub fn invalidate_session(&self) {
        let mut inner = lock(&self.shared);
        for session in &mut inner.sessions {
            session.valid = false;
        }
        if let Some(live) = &inner.live {
            let _ = live.tx.send(Control::Send(json!({ "op": 9, "d": false })));
        }
    }

    /// What the bot has posted in `channel_id`, oldest first.
    pub fn posted(&self, channel_id: &str) -> Vec<Posted> {
        lock(&self.shared).posted.iter().filter(|m| m.channel_id == channel_id).cloned().collect()
    }

    /// Typing requests for `channel_id`.
    pub fn typing(&self, channel_id: &str) -> usize {
        lock(&self.shared).typing.get(channel_id).copied().unwrap_or(0)
    }

    pub fn heartbeats(&self) -> Vec<Heartbeat> {
        lock(&self.shared).heartbeats.clone()
    }

    /// Stop acknowledging the heartbeats of the bot's current connection, as a gateway that
    /// lost it does (the connection is a zombie).
    pub fn stop_acks(&self) {
        let mut inner = lock(&self.shared);
        inner.silent = inner.live.as_ref().map(|l| l.connection);
    }

    pub fn identifies(&self) -> Vec<Identify> {
        lock(&self.shared).identifies.clone()
    }

    pub fn resumes(&self) -> Vec<Resume> {
        lock(&self.shared).resumes.clone()
    }

    /// The ids of the sessions READY started, oldest first.
    pub fn sessions(&self) -> Vec<String> {
        lock(&self.shared).sessions.iter().map(|s| s.id.clone()).collect()
    }

    /// The last sequence number of the current session.
    pub fn last_seq(&self) -> Option<u64> {
        lock(&self.shared).sessions.last().map(|s| s.events.len() as u64)
    }

    /// Gateway connections so far.
    pub fn connections(&self) -> usize {
        lock(&self.shared).connections
    }

    /// REST requests refused for their token.
    pub fn refused(&self) -> usize {
        lock(&self.shared).refused
    }

    /// What the bot sent on the Gateway that Discord would not take.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.shared).violations.clone()
    }

    /// Wait until the bot is connected to a session (the `n`th READY or a resume of it).
    pub fn wait_session(&self, n: usize, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            {
                let inner = lock(&self.shared);
                if inner.sessions.len() >= n
                    && let Some(session) = inner.live.as_ref().and_then(|l| l.session.clone())
                {
                    return session;
                }
            }
            assert!(
                start.elapsed() < timeout,
                "the bot never reached session {n}; violations: {:?}",
                self.violations()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until `done` holds of the double.
    pub fn wait_until(&self, timeout: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(start.elapsed() < timeout, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until `channel_id` shows a message of the bot's for which `done` holds; that
    /// message. Panics after `timeout`, printing what the channel shows.
    pub fn wait_for(&self, channel_id: &str, timeout: Duration, done: impl Fn(&Posted) -> bool) -> Posted {
        let start = Instant::now();
        loop {
            if let Some(m) = self.posted(channel_id).into_iter().find(|m| done(m)) {
                return m;
            }
            assert!(
                start.elapsed() < timeout,
                "channel {channel_id} never showed what was awaited; it shows {:#?}",
                self.posted(channel_id)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn next_id(inner: &mut Inner) -> String {
    inner.next_id += 1;
    inner.next_id.to_string()
}

/// A MESSAGE_CREATE's data.
fn message(
    id: &str,
    channel_id: &str,
    guild_id: Option<&str>,
    user_id: &str,
    name: &str,
    text: &str,
    mentions: &[&str],
) -> Value {
    let mut d = json!({
        "id": id,
        "channel_id": channel_id,
        "type": 0,
        "author": { "id": user_id, "username": name.to_lowercase(), "global_name": name, "discriminator": "0" },
        "content": text,
        "timestamp": "2025-01-01T00:00:00.000000+00:00",
        "tts": false,
        "mention_everyone": false,
        "mentions": mentions.iter().map(|m| json!({ "id": m, "username": BOT_NAME, "bot": true })).collect::<Vec<_>>(),
        "attachments": [],
        "embeds": [],
        "pinned": false,
    });
    if let Some(guild) = guild_id {
        d["guild_id"] = json!(guild);
        d["member"] = json!({ "roles": [] });
    }
    d
}

/// Add a dispatch to the current session and send it if the bot is connected to it.
fn dispatch(shared: &Shared, name: &str, d: Value) {
    let mut inner = lock(shared);
    let Some(session) = inner.sessions.last_mut().filter(|s| s.valid) else {
        inner.violations.push(format!("{name} dispatched with no session to carry it"));
        return;
    };
    let payload = json!({ "op": 0, "t": name, "s": session.events.len() + 1, "d": d });
    session.events.push(payload.clone());
    let id = session.id.clone();
    if let Some(live) = inner.live.as_ref().filter(|l| l.session.as_deref() == Some(id.as_str())) {
        let _ = live.tx.send(Control::Send(payload));
    }
}

async fn gateway(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let versioned =
        query.get("v").map(String::as_str) == Some("10") && query.get("encoding").map(String::as_str) == Some("json");
    accept_websocket(request, move |socket| connection(shared, socket, versioned))
}

/// One Gateway connection, until it closes or the test drops it.
async fn connection(shared: Arc<Shared>, mut socket: ServerSocket, versioned: bool) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let connection = {
        let mut inner = lock(&shared);
        inner.connections += 1;
        let connection = inner.connections;
        inner.live = Some(Live { connection, session: None, tx });
        connection
    };
    let mut link = Link { shared: shared.clone(), connection, last_sent: None };
    if !versioned {
        lock(&shared).violations.push("a connection without ?v=10&encoding=json".into());
        let _ = close(&mut socket, 4012, "Invalid API version").await;
        return;
    }
    let hello = json!({ "op": 10, "d": { "heartbeat_interval": HEARTBEAT_INTERVAL_MS } });
    if link.send(&mut socket, &hello).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            frame = socket.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    if link.receive(&mut socket, &text).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            control = rx.recv() => match control {
                Some(Control::Send(payload)) => {
                    if link.send(&mut socket, &payload).await.is_err() {
                        break;
                    }
                }
                // Dropped without a close frame.
                Some(Control::Drop) | None => return,
            },
        }
    }
    let mut inner = lock(&shared);
    if inner.live.as_ref().is_some_and(|l| l.connection == connection) {
        inner.live = None;
    }
}

async fn close(socket: &mut ServerSocket, code: u16, reason: &str) -> Result<(), ()> {
    let frame = CloseFrame { code: code.into(), reason: reason.to_string().into() };
    socket.send(Message::Close(Some(frame))).await.map_err(drop)
}

/// The double's side of one connection.
struct Link {
    shared: Arc<Shared>,
    connection: usize,
    last_sent: Option<u64>,
}

impl Link {
    async fn send(&mut self, socket: &mut ServerSocket, payload: &Value) -> Result<(), ()> {
        if let Some(s) = payload["s"].as_u64() {
            self.last_sent = Some(s);
        }
        socket.send(Message::text(payload.to_string())).await.map_err(drop)
    }

    fn violation(&self, what: String) {
        lock(&self.shared).violations.push(what);
    }

    /// Answer what the bot sent; `Err` once the connection is closed.
    async fn receive(&mut self, socket: &mut ServerSocket, text: &str) -> Result<(), ()> {
        let Ok(payload) = serde_json::from_str::<Value>(text) else {
            self.violation(format!("not JSON: {text}"));
            return close(socket, 4002, "Decode error").await.and(Err(()));
        };
        let d = &payload["d"];
        match payload["op"].as_u64() {
            Some(1) => {
                let acked = {
                    let mut inner = lock(&self.shared);
                    let acked = inner.silent != Some(self.connection);
                    let beat =
                        Heartbeat { seq: d.as_u64(), last_sent: self.last_sent, connection: self.connection, acked };
                    inner.heartbeats.push(beat);
                    acked
                };
                if acked { self.send(socket, &json!({ "op": 11 })).await } else { Ok(()) }
            }
            Some(2) => {
                if d["token"].as_str() != Some(self.shared.token.as_str()) {
                    self.violation(format!("IDENTIFY with a wrong token on connection {}", self.connection));
                    return close(socket, 4004, "Authentication failed").await.and(Err(()));
                }
                let ready = {
                    let mut inner = lock(&self.shared);
                    let intents = d["intents"].as_u64().unwrap_or(0);
                    inner.identifies.push(Identify { intents, connection: self.connection });
                    let id = format!("session-{}", inner.sessions.len() + 1);
                    let ready = json!({
                        "op": 0, "t": "READY", "s": 1,
                        "d": {
                            "v": 10,
                            "user": { "id": BOT_ID, "username": BOT_NAME, "bot": true },
                            "guilds": [],
                            "session_id": id,
                            "resume_gateway_url": format!("ws://{}", self.shared.addr),
                            "application": { "id": BOT_ID, "flags": 0 },
                        },
                    });
                    inner.sessions.push(Session { id: id.clone(), events: vec![ready.clone()], valid: true });
                    if let Some(live) = inner.live.as_mut().filter(|l| l.connection == self.connection) {
                        live.session = Some(id);
                    }
                    ready
                };
                self.send(socket, &ready).await
            }
            Some(6) => {
                if d["token"].as_str() != Some(self.shared.token.as_str()) {
                    self.violation(format!("RESUME with a wrong token on connection {}", self.connection));
                    return close(socket, 4004, "Authentication failed").await.and(Err(()));
                }
                let session_id = d["session_id"].as_str().unwrap_or_default().to_string();
                let seq = d["seq"].as_u64();
                let replay = {
                    let mut inner = lock(&self.shared);
                    inner.resumes.push(Resume { session_id: session_id.clone(), seq, connection: self.connection });
                    match inner.sessions.iter_mut().find(|s| s.id == session_id && s.valid) {
                        Some(session) => {
                            let after = usize::try_from(seq.unwrap_or(0)).unwrap_or(usize::MAX);
                            let mut replay: Vec<Value> = session.events.iter().skip(after).cloned().collect();
                            let resumed = json!({ "op": 0, "t": "RESUMED", "s": session.events.len() + 1, "d": null });
                            session.events.push(resumed.clone());
                            replay.push(resumed);
                            if let Some(live) = inner.live.as_mut().filter(|l| l.connection == self.connection) {
                                live.session = Some(session_id);
                            }
                            Some(replay)
                        }
                        None => None,
                    }
                };
                match replay {
                    Some(replay) => {
                        for payload in &replay {
                            self.send(socket, payload).await?;
                        }
                        Ok(())
                    }
                    None => self.send(socket, &json!({ "op": 9, "d": false })).await,
                }
            }
            other => {
                self.violation(format!("unknown opcode {other:?}: {text}"));
                close(socket, 4001, "Unknown opcode").await.and(Err(()))
            }
        }
    }
}

async fn rest(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let authorized =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(format!("Bot {}", shared.token).as_str());
    if !authorized {
        lock(&shared).refused += 1;
        return error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let segments: Vec<&str> = path.split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["users", "@me"]) => {
            Json(json!({ "id": BOT_ID, "username": BOT_NAME, "discriminator": "0", "bot": true })).into_response()
        }
        ("GET", ["gateway", "bot"]) => Json(json!({
            "url": format!("ws://{}", shared.addr),
            "shards": 1,
            "session_start_limit": { "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1 },
        }))
        .into_response(),
        ("POST", ["channels", channel, "messages"]) => post_message(&shared, channel, &body),
        ("PATCH", ["channels", channel, "messages", id]) => edit_message(&shared, channel, id, &body),
        ("POST", ["channels", channel, "typing"]) => {
            *lock(&shared).typing.entry((*channel).to_string()).or_default() += 1;
            StatusCode::NO_CONTENT.into_response()
        }
        ("GET", ["channels", channel]) => {
            let inner = lock(&shared);
            match inner.dms.iter().find(|(_, c)| c.as_str() == *channel) {
                Some((user, _)) => Json(json!({
                    "id": channel, "type": 1, "recipients": [{ "id": user, "username": "user", "global_name": "User" }],
                }))
                .into_response(),
                None => {
                    Json(json!({ "id": channel, "type": 0, "guild_id": GUILD_ID, "name": "general" })).into_response()
                }
            }
        }
        _ => error(StatusCode::NOT_FOUND, 0, "404: Not Found"),
    }
}

/// The message object Discord answers with, and dispatches.
fn bot_message(posted: &Posted) -> Value {
    json!({
        "id": posted.id,
        "channel_id": posted.channel_id,
        "type": if posted.reply_to.is_some() { 19 } else { 0 },
        "author": { "id": BOT_ID, "username": BOT_NAME, "bot": true },
        "content": posted.content,
        "mentions": [],
        "attachments": [],
    })
}

/// The content of a message body, or Discord's refusal of it.
fn check_content(body: &Value) -> Result<String, Box<Response>> {
    let content = body["content"].as_str().unwrap_or_default().to_string();
    if content.is_empty() {
        return Err(Box::new(error(StatusCode::BAD_REQUEST, 50006, "Cannot send an empty message")));
    }
    if content.chars().count() > 2000 {
        return Err(Box::new(error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body")));
    }
    Ok(content)
}

fn post_message(shared: &Shared, channel: &str, body: &Value) -> Response {
    let content = match check_content(body) {
        Ok(content) => content,
        Err(refused) => return *refused,
    };
    let posted = {
        let mut inner = lock(shared);
        let posted = Posted {
            id: next_id(&mut inner),
            channel_id: channel.to_string(),
            content,
            edits: Vec::new(),
            reply_to: body["message_reference"]["message_id"].as_str().map(str::to_string),
            allowed_mentions: body["allowed_mentions"].clone(),
        };
        inner.posted.push(posted.clone());
        posted
    };
    let message = bot_message(&posted);
    // The bot hears its own message, as on Discord.
    dispatch(shared, "MESSAGE_CREATE", message.clone());
    Json(message).into_response()
}

fn edit_message(shared: &Shared, channel: &str, id: &str, body: &Value) -> Response {
    let content = match check_content(body) {
        Ok(content) => content,
        Err(refused) => return *refused,
    };
    let mut inner = lock(shared);
    let Some(posted) = inner.posted.iter_mut().find(|m| m.channel_id == channel && m.id == id) else {
        return error(StatusCode::NOT_FOUND, 10008, "Unknown Message");
    };
    let before = std::mem::replace(&mut posted.content, content);
    posted.edits.push(before);
    Json(bot_message(posted)).into_response()
}
