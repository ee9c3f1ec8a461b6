//! A Slack double (<https://api.slack.com/web>, <https://api.slack.com/apis/socket-mode>), for
//! the gateway's tests: the Web API and Socket Mode on one loopback port, as an account's
//! `base_url` makes the adapter reach one host for both.
//!
//! Web API (`Authorization: Bearer TOKEN`; answers `{"ok": true, ...}` or `{"ok": false,
//! "error": ...}`): `apps.connections.open` takes only the app-level token and hands out a
//! one-time `ws://` URL; `auth.test`, `chat.postMessage`, `chat.update` and
//! `conversations.info` take only the bot token (the other token gets
//! `not_allowed_token_type`, anything else `invalid_auth`).
//!
//! Socket Mode: a connection with a valid ticket gets `hello`, then `events_api` envelopes. An
//! envelope not acknowledged (`{"envelope_id": ...}`) before its connection ends is sent again,
//! with `retry_attempt` counted up, on the next one. [`SlackFake::disconnect`] sends a
//! `disconnect` (`refresh_requested`): new envelopes wait for the next connection, and the old
//! one is closed 10 s later unless the bot closes it first. The bot's own posts and edits come
//! back as `message` events with `bot_id` and a `message_changed` subtype, as on Slack.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::discord::{ServerSocket, accept_websocket, serve_on_loopback};

/// The bot's user id, bot id and name.
pub const BOT_USER: &str = "U0BOT0001";
pub const BOT_ID: &str = "B0BOT0001";
pub const BOT_NAME: &str = "talaria";
const TEAM: &str = "T0TEAM001";
const APP: &str = "A0APP0001";
/// How long a connection told to disconnect stays open.
const DISCONNECT_GRACE: Duration = Duration::from_secs(10);

/// A message the bot posted, as the channel shows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    pub ts: String,
    pub channel: String,
    /// Its text now (after edits).
    pub text: String,
    /// Texts it had before, oldest first.
    pub edits: Vec<String>,
    pub thread_ts: Option<String>,
}

/// An envelope sent to the bot.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub id: String,
    /// The event it carried.
    pub event: Value,
    /// The connections it was sent on (1 for the first), once each attempt.
    pub sent_on: Vec<usize>,
    pub acked: bool,
}

enum Control {
    Send(Value),
    Disconnect,
}

struct Live {
    connection: usize,
    tx: mpsc::UnboundedSender<Control>,
}

#[derive(Default)]
struct Inner {
    next_ts: u64,
    /// `apps.connections.open` calls that got a URL.
    opens: usize,
    /// Tickets handed out and not used yet.
    tickets: Vec<String>,
    connections: usize,
    /// Connections the bot closed itself.
    closed_by_bot: usize,
    /// The connection new envelopes go to (none while the bot reconnects).
    live: Option<Live>,
    envelopes: Vec<Envelope>,
    posted: Vec<Posted>,
    /// Web API calls by method.
    calls: HashMap<String, usize>,
    /// Web API calls refused for their token.
    refused: usize,
    /// What the bot sent over Socket Mode that Slack would not take.
    violations: Vec<String>,
}

struct Shared {
    app_token: String,
    bot_token: String,
    addr: SocketAddr,
    inner: Mutex<Inner>,
}

/// The Slack double, on its own thread and runtime.
pub struct SlackFake {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    shared.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn failed(error: &str) -> Response {
    Json(json!({ "ok": false, "error": error })).into_response()
}

fn next_ts(inner: &mut Inner) -> String {
    inner.next_ts += 1;
    format!("1700000000.{:06}", inner.next_ts)
}

impl SlackFake {
    /// Serve an app with app-level token `app_token` and bot token `bot_token` on a free
    /// loopback port.
    pub fn start(app_token: &str, bot_token: &str) -> Self {
        let mut made = None;
        let (addr, stop) = serve_on_loopback(|addr| {
            let shared = Arc::new(Shared {
                app_token: app_token.to_string(),
                bot_token: bot_token.to_string(),
                addr,
                inner: Mutex::new(Inner::default()),
            });
            made = Some(shared.clone());
            axum::Router::new()
                .route("/link/", axum::routing::get(link))
                .route("/api/{method}", axum::routing::any(web_api))
                .with_state(shared)
        });
        let shared = made.expect("the router was made");
        Self { addr, shared, _stop: stop }
    }

    /// What to set as the account's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The DM channel between user `user` and the bot.
    pub fn dm_channel(user: &str) -> String {
        format!("D{}", user.trim_start_matches('U'))
    }

    /// User `user` writes `text` to the bot in their DM. Returns the message's `ts`.
    pub fn dm(&self, user: &str, text: &str) -> String {
        let ts = next_ts(&mut lock(&self.shared));
        let channel = Self::dm_channel(user);
        self.event(user_message(&channel, "im", user, text, &ts));
        ts
    }

    /// User `user` writes `text` in channel `channel`, at the top level or in the thread under
    /// message `thread`, mentioning the bot first when `mention`: then Slack sends an
    /// `app_mention` too. Returns the message's `ts`.
    pub fn channel_message(
        &self,
        channel: &str,
        thread: Option<&str>,
        user: &str,
        text: &str,
        mention: bool,
    ) -> String {
        let ts = next_ts(&mut lock(&self.shared));
        let text = if mention { format!("<@{BOT_USER}> {text}") } else { text.to_string() };
        let mut message = user_message(channel, "channel", user, &text, &ts);
        let mut app_mention = json!({
            "type": "app_mention", "user": user, "text": text, "ts": ts, "channel": channel, "event_ts": ts,
        });
        if let Some(thread) = thread {
            message["thread_ts"] = json!(thread);
            app_mention["thread_ts"] = json!(thread);
        }
        self.event(message);
        if mention {
            self.event(app_mention);
        }
        ts
    }

    /// Send `event` in an `events_api` envelope (now, or on the next connection).
    fn event(&self, event: Value) {
        event_envelope(&self.shared, event);
    }

    /// Tell the bot to reconnect (`disconnect`, `refresh_requested`).
    pub fn disconnect(&self) {
        if let Some(live) = lock(&self.shared).live.take() {
            let _ = live.tx.send(Control::Disconnect);
        }
    }

    /// What the bot has posted in `channel`, oldest first.
    pub fn posted(&self, channel: &str) -> Vec<Posted> {
        lock(&self.shared).posted.iter().filter(|m| m.channel == channel).cloned().collect()
    }

    /// Every envelope sent so far.
    pub fn envelopes(&self) -> Vec<Envelope> {
        lock(&self.shared).envelopes.clone()
    }

    /// `apps.connections.open` calls that got a URL.
    pub fn opens(&self) -> usize {
        lock(&self.shared).opens
    }

    /// Socket Mode connections so far.
    pub fn connections(&self) -> usize {
        lock(&self.shared).connections
    }

    /// Connections the bot closed itself.
    pub fn closed_by_bot(&self) -> usize {
        lock(&self.shared).closed_by_bot
    }

    /// Web API calls of `method` so far.
    pub fn calls(&self, method: &str) -> usize {
        lock(&self.shared).calls.get(method).copied().unwrap_or(0)
    }

    /// Web API calls refused for their token.
    pub fn refused(&self) -> usize {
        lock(&self.shared).refused
    }

    /// What the bot sent over Socket Mode that Slack would not take.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.shared).violations.clone()
    }

    /// Wait until the bot has a connection that said hello, the `n`th or a later one.
    pub fn wait_connected(&self, n: usize, timeout: Duration) {
        self.wait_until(timeout, &format!("Socket Mode connection {n}"), |f| {
            let inner = lock(&f.shared);
            inner.live.as_ref().is_some_and(|l| l.connection >= n)
        });
    }

    /// Wait until `done` holds of the double.
    pub fn wait_until(&self, timeout: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(start.elapsed() < timeout, "never happened: {what}; violations: {:?}", self.violations());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until `channel` shows a message of the bot's for which `done` holds; that message.
    /// Panics after `timeout`, printing what the channel shows.
    pub fn wait_for(&self, channel: &str, timeout: Duration, done: impl Fn(&Posted) -> bool) -> Posted {
        let start = Instant::now();
        loop {
            if let Some(m) = self.posted(channel).into_iter().find(|m| done(m)) {
                return m;
            }
            assert!(
                start.elapsed() < timeout,
                "channel {channel} never showed what was awaited; it shows {:#?}",
                self.posted(channel)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A `message` event someone wrote.
fn user_message(channel: &str, channel_type: &str, user: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "message",
        "channel": channel,
        "channel_type": channel_type,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "team": TEAM,
        "client_msg_id": format!("msg-{ts}"),
    })
}

/// The envelope for delivery `attempt` (0 for the first).
fn envelope_json(envelope: &Envelope) -> Value {
    let attempt = envelope.sent_on.len();
    json!({
        "envelope_id": envelope.id,
        "type": "events_api",
        "accepts_response_payload": false,
        "retry_attempt": attempt,
        "retry_reason": if attempt == 0 { "" } else { "timeout" },
        "payload": {
            "token": "verification-token",
            "team_id": TEAM,
            "api_app_id": APP,
            "type": "event_callback",
            "event_id": format!("Ev{}", envelope.id),
            "event_time": 1_700_000_000,
            "event": envelope.event,
        },
    })
}

/// Wrap `event` in a new envelope and send it to the live connection, if there is one.
fn event_envelope(shared: &Shared, event: Value) {
    let mut inner = lock(shared);
    let id = format!("env-{}", inner.envelopes.len() + 1);
    let mut envelope = Envelope { id, event, sent_on: Vec::new(), acked: false };
    if let Some(live) = &inner.live {
        let payload = envelope_json(&envelope);
        envelope.sent_on.push(live.connection);
        let _ = live.tx.send(Control::Send(payload));
    }
    inner.envelopes.push(envelope);
}

async fn link(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let ticket = query.get("ticket").cloned().unwrap_or_default();
    let valid = {
        let mut inner = lock(&shared);
        let known = inner.tickets.iter().position(|t| *t == ticket);
        known.map(|at| inner.tickets.remove(at)).is_some()
    };
    if !valid {
        lock(&shared).violations.push(format!("a connection with an unknown or used ticket `{ticket}`"));
        return (StatusCode::UNAUTHORIZED, "invalid ticket").into_response();
    }
    accept_websocket(request, move |socket| connection(shared, socket))
}

/// One Socket Mode connection, until it closes.
async fn connection(shared: Arc<Shared>, mut socket: ServerSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let hello = json!({
        "type": "hello",
        "num_connections": 1,
        "debug_info": { "host": "applink-test", "approximate_connection_time": 18060 },
        "connection_info": { "app_id": APP },
    });
    if socket.send(Message::text(hello.to_string())).await.is_err() {
        return;
    }
    // Envelopes that waited, or were never acknowledged, go out now.
    let (connection, waiting) = {
        let mut inner = lock(&shared);
        inner.connections += 1;
        let connection = inner.connections;
        let mut waiting = Vec::new();
        for envelope in inner.envelopes.iter_mut().filter(|e| !e.acked) {
            waiting.push(envelope_json(envelope));
            envelope.sent_on.push(connection);
        }
        inner.live = Some(Live { connection, tx });
        (connection, waiting)
    };
    for payload in waiting {
        if socket.send(Message::text(payload.to_string())).await.is_err() {
            return;
        }
    }
    let mut closing: Option<tokio::time::Instant> = None;
    loop {
        let grace = async {
            match closing {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            frame = socket.next() => match frame {
                Some(Ok(Message::Text(text))) => acknowledged(&shared, connection, &text),
                Some(Ok(Message::Close(_))) => {
                    lock(&shared).closed_by_bot += 1;
                    break;
                }
                Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            control = rx.recv() => match control {
                Some(Control::Send(payload)) => {
                    let sent = socket.send(Message::text(payload.to_string())).await;
                    if sent.is_err() {
                        break;
                    }
                }
                Some(Control::Disconnect) => {
                    let disconnect = json!({
                        "type": "disconnect", "reason": "refresh_requested", "debug_info": { "host": "applink-test" },
                    });
                    if socket.send(Message::text(disconnect.to_string())).await.is_err() {
                        break;
                    }
                    closing = Some(tokio::time::Instant::now() + DISCONNECT_GRACE);
                }
                None => {}
            },
            () = grace => {
                let _ = socket.close(None).await;
                break;
            }
        }
    }
    let mut inner = lock(&shared);
    if inner.live.as_ref().is_some_and(|l| l.connection == connection) {
        inner.live = None;
    }
}

/// Record the acknowledgement in `text`, or what is wrong with it.
fn acknowledged(shared: &Shared, connection: usize, text: &str) {
    let mut inner = lock(shared);
    let id = serde_json::from_str::<Value>(text).ok().and_then(|v| v["envelope_id"].as_str().map(str::to_string));
    let known = id.as_deref().and_then(|id| inner.envelopes.iter_mut().find(|e| e.id == id));
    match known {
        Some(envelope) if envelope.sent_on.contains(&connection) => envelope.acked = true,
        _ => inner.violations.push(format!("connection {connection} sent {text}")),
    }
}

async fn web_api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let wanted = if method == "apps.connections.open" { &shared.app_token } else { &shared.bot_token };
    let other = if method == "apps.connections.open" { &shared.bot_token } else { &shared.app_token };
    if bearer != Some(wanted.as_str()) {
        lock(&shared).refused += 1;
        return failed(if bearer == Some(other.as_str()) { "not_allowed_token_type" } else { "invalid_auth" });
    }
    *lock(&shared).calls.entry(method.clone()).or_default() += 1;
    let json_body =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("application/json"));
    let args: Value = if json_body { serde_json::from_slice(&body).unwrap_or(Value::Null) } else { json!(query) };
    match method.as_str() {
        "apps.connections.open" => {
            let mut inner = lock(&shared);
            inner.opens += 1;
            let ticket = format!("ticket-{}", inner.opens);
            inner.tickets.push(ticket.clone());
            Json(json!({ "ok": true, "url": format!("ws://{}/link/?ticket={ticket}&app_id={APP}", shared.addr) }))
                .into_response()
        }
        "auth.test" => Json(json!({
            "ok": true, "url": "https://talaria-test.slack.com/", "team": "Talaria", "user": BOT_NAME,
            "team_id": TEAM, "user_id": BOT_USER, "bot_id": BOT_ID, "is_enterprise_install": false,
        }))
        .into_response(),
        "chat.postMessage" => post_message(&shared, &args),
        "chat.update" => update_message(&shared, &args),
        "conversations.info" => {
            let Some(channel) = args["channel"].as_str() else { return failed("channel_not_found") };
            let info = match channel.strip_prefix('D') {
                Some(user) => json!({ "id": channel, "is_im": true, "user": format!("U{user}") }),
                None => {
                    json!({ "id": channel, "name": "general", "is_channel": true, "is_im": false, "is_mpim": false })
                }
            };
            Json(json!({ "ok": true, "channel": info })).into_response()
        }
        _ => (StatusCode::NOT_FOUND, Json(json!({ "ok": false, "error": "unknown_method" }))).into_response(),
    }
}

fn channel_type(channel: &str) -> &'static str {
    if channel.starts_with('D') { "im" } else { "channel" }
}

fn post_message(shared: &Shared, args: &Value) -> Response {
    let Some(channel) = args["channel"].as_str().filter(|c| !c.is_empty()) else { return failed("channel_not_found") };
    let text = args["text"].as_str().unwrap_or_default();
    if text.is_empty() {
        return failed("no_text");
    }
    if text.chars().count() > 40_000 {
        return failed("msg_too_long");
    }
    let thread_ts = args["thread_ts"].as_str().map(str::to_string);
    let ts = {
        let mut inner = lock(shared);
        let ts = next_ts(&mut inner);
        let posted = Posted {
            ts: ts.clone(),
            channel: channel.to_string(),
            text: text.to_string(),
            edits: Vec::new(),
            thread_ts: thread_ts.clone(),
        };
        inner.posted.push(posted);
        ts
    };
    let mut message = json!({ "type": "message", "user": BOT_USER, "bot_id": BOT_ID, "text": text, "ts": ts });
    if let Some(thread) = &thread_ts {
        message["thread_ts"] = json!(thread);
    }
    // The bot hears its own message, as on Slack.
    let mut event = message.clone();
    event["channel"] = json!(channel);
    event["channel_type"] = json!(channel_type(channel));
    event["event_ts"] = json!(ts);
    event_envelope(shared, event);
    Json(json!({ "ok": true, "channel": channel, "ts": ts, "message": message })).into_response()
}

fn update_message(shared: &Shared, args: &Value) -> Response {
    let (Some(channel), Some(ts)) = (args["channel"].as_str(), args["ts"].as_str()) else {
        return failed("message_not_found");
    };
    let text = args["text"].as_str().unwrap_or_default();
    if text.is_empty() {
        return failed("no_text");
    }
    {
        let mut inner = lock(shared);
        let Some(posted) = inner.posted.iter_mut().find(|m| m.channel == channel && m.ts == ts) else {
            return failed("message_not_found");
        };
        let before = std::mem::replace(&mut posted.text, text.to_string());
        posted.edits.push(before);
    }
    event_envelope(
        shared,
        json!({
            "type": "message", "subtype": "message_changed", "channel": channel,
            "channel_type": channel_type(channel), "hidden": true, "ts": format!("{ts}1"), "event_ts": format!("{ts}1"),
            "message": { "type": "message", "user": BOT_USER, "bot_id": BOT_ID, "text": text, "ts": ts, "edited": { "user": BOT_USER } },
        }),
    );
    Json(json!({ "ok": true, "channel": channel, "ts": ts, "text": text })).into_response()
}
