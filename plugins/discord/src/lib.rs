//! The Discord adapter: events over the Gateway WebSocket, replies through the REST API v10
//! (<https://discord.com/developers/docs/reference>).
//!
//! `connect` asks `GET /users/@me` who the bot is and `GET /gateway/bot` where the Gateway is,
//! and opens it (`gateway`: HELLO, IDENTIFY, heartbeats, RESUME). `poll` hands in the
//! MESSAGE_CREATE dispatches that came (`message`), sending heartbeats while it waits; replies
//! go out with `POST /channels/{id}/messages` in Discord's markdown and stream by `PATCH` edits.
//!
//! The token never enters the plugin: REST requests carry `Authorization: Bot {{secret:...}}`
//! and IDENTIFY / RESUME the bare placeholder; the host fills both in for Discord's hosts only.
//! `base_url` points the adapter at another origin (a test double), which then serves the
//! Gateway too.

mod gateway;
mod message;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_sdk::adapter::{Account, Adapter, Chat, ChatType, Error, Event, Outbound, TextFormat};
use talaria_sdk::{config, http, secrets};

use gateway::Gateway;
use message::Me;

const TOKEN: &str = "DISCORD_BOT_TOKEN";
const DEFAULT_BASE_URL: &str = "https://discord.com";
/// Discord's limit on a message's content, in characters.
const MAX_LENGTH: u32 = 2000;
/// Discord allows five edits of a channel's messages in five seconds; leave room for sends.
const EDIT_INTERVAL_MS: u32 = 1200;
/// Discord asks bots to name themselves this way.
const USER_AGENT: &str = "DiscordBot (https://example.invalid/talaria, 0.1.0)";

struct Discord;

thread_local! {
    static ME: RefCell<Me> = RefCell::new(Me::default());
    static GATEWAY: RefCell<Option<Gateway>> = const { RefCell::new(None) };
}

fn base_url() -> String {
    config::get_str("base_url").unwrap_or_else(|| DEFAULT_BASE_URL.to_string()).trim_end_matches('/').to_string()
}

/// Call the REST API; the JSON answer (`null` for 204 No Content).
fn api(method: http::Method, path: &str, body: Option<&Value>) -> Result<Value, Error> {
    let url = format!("{}/api/v10{path}", base_url());
    let mut request = http::Request::new(method, url)
        .header("authorization", &format!("Bot {}", secrets::placeholder(TOKEN)))
        .header("user-agent", USER_AGENT);
    if let Some(body) = body {
        request = request.json(body).map_err(|e| Error::permanent(e.to_string()))?;
    }
    let response = request.send()?;
    let answer: Value = response.json().unwrap_or(Value::Null);
    if response.is_success() {
        return Ok(answer);
    }
    // `retry_after` is in seconds, with a fraction.
    let retry = answer["retry_after"]
        .as_f64()
        .or_else(|| response.header("retry-after").and_then(|s| s.parse().ok()))
        .map(|secs| u32::try_from((secs * 1000.0).ceil() as u64).unwrap_or(u32::MAX));
    let what = answer["message"].as_str().unwrap_or("no details");
    let code = answer["code"].as_u64().map(|c| format!(" (code {c})")).unwrap_or_default();
    Err(Error::from_status(response.status, format!("Discord {path}: {} {what}{code}", response.status), retry))
}

/// `id` if it is a snowflake (decimal digits), so that it is safe in a path.
fn snowflake(id: &str) -> Result<&str, Error> {
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(id)
    } else {
        Err(Error::permanent(format!("`{id}` is not a Discord id")))
    }
}

/// The body of a message: its content, and no pings (`@everyone`, roles, users) from an answer.
fn message_body(message: &Outbound) -> Value {
    let mut body = json!({ "content": message.text, "allowed_mentions": { "parse": [] } });
    if let Some(reply) = &message.reply_to {
        body["message_reference"] = json!({ "message_id": reply, "fail_if_not_exists": false });
    }
    body
}

/// The channel a message goes to: the thread when there is one (a thread is a channel).
fn channel_of(message: &Outbound) -> Result<&str, Error> {
    snowflake(message.thread_id.as_deref().unwrap_or(&message.chat_id))
}

fn chat_type(kind: u64) -> ChatType {
    match kind {
        // DM
        1 => ChatType::Dm,
        // announcement channel
        5 => ChatType::Channel,
        // guild text, group DM, threads, forums, ...
        _ => ChatType::Group,
    }
}

impl Adapter for Discord {
    fn connect() -> Result<Account, Error> {
        if !secrets::exists(TOKEN) {
            return Err(Error::permanent(format!(
                "{TOKEN} is not set: put the bot's token (developer portal, Bot, Reset Token) in ~/.talaria/.env"
            )));
        }
        let me = api(http::Method::GET, "/users/@me", None)?;
        let id = me["id"].as_str().unwrap_or_default().to_string();
        let name = me["username"].as_str().unwrap_or_default().to_string();
        let found = api(http::Method::GET, "/gateway/bot", None)?;
        let url = found["url"].as_str().ok_or_else(|| Error::transient("Discord named no gateway URL", None))?;
        let mut gateway = Gateway::new(url);
        gateway.open()?;
        GATEWAY.with_borrow_mut(|g| *g = Some(gateway));
        ME.with_borrow_mut(|m| *m = Me { id: id.clone(), name: name.clone() });
        Ok(Account {
            bot_id: id,
            bot_name: name,
            format: TextFormat::DiscordMarkdown,
            max_length: MAX_LENGTH,
            can_edit: true,
            edit_interval_ms: EDIT_INTERVAL_MS,
            buttons: false,
            polls: true,
        })
    }

    fn poll(timeout_ms: u32) -> Result<Vec<Event>, Error> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
        let mut events = Vec::new();
        loop {
            // Once something came, take only what is there already.
            let until = if events.is_empty() { deadline } else { Instant::now() };
            let next = GATEWAY.with_borrow_mut(|g| match g {
                Some(g) => g.next(until),
                None => Err(Error::permanent("poll before connect")),
            })?;
            let Some(dispatch) = next else { return Ok(events) };
            if dispatch.name == "MESSAGE_CREATE" {
                events.extend(ME.with_borrow(|me| message::event(&dispatch.data, me)));
            }
        }
    }

    fn send(message: Outbound) -> Result<String, Error> {
        let path = format!("/channels/{}/messages", channel_of(&message)?);
        let sent = api(http::Method::POST, &path, Some(&message_body(&message)))?;
        sent["id"].as_str().map(str::to_string).ok_or_else(|| Error::permanent("Discord sent no message id"))
    }

    fn edit(message_id: String, message: Outbound) -> Result<(), Error> {
        let path = format!("/channels/{}/messages/{}", channel_of(&message)?, snowflake(&message_id)?);
        let body = json!({ "content": message.text, "allowed_mentions": { "parse": [] } });
        api(http::Method::PATCH, &path, Some(&body)).map(drop)
    }

    fn typing(chat_id: String, thread_id: Option<String>) -> Result<(), Error> {
        let channel = snowflake(thread_id.as_deref().unwrap_or(&chat_id))?;
        api(http::Method::POST, &format!("/channels/{channel}/typing"), None).map(drop)
    }

    /// Sending needs nothing `connect` or `poll` keep (a REST call with the bot token): the host may send
    /// from several instances at once.
    fn prepare_sender() -> Result<bool, String> {
        Ok(true)
    }

    fn chat_info(chat_id: String) -> Result<Chat, Error> {
        let channel = api(http::Method::GET, &format!("/channels/{}", snowflake(&chat_id)?), None)?;
        let kind = channel["type"].as_u64().unwrap_or(0);
        let name = channel["name"].as_str().map(str::to_string).unwrap_or_else(|| {
            let recipient = &channel["recipients"][0];
            recipient["global_name"].as_str().or_else(|| recipient["username"].as_str()).unwrap_or_default().to_string()
        });
        Ok(Chat { id: chat_id, name, chat_type: chat_type(kind) })
    }
}

talaria_sdk::export_adapter!(Discord);
