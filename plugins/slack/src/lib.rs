//! The Slack adapter: events over Socket Mode, replies through the Web API
//! (<https://api.slack.com/apis/socket-mode>, <https://api.slack.com/web>).
//!
//! `connect` asks `auth.test` who the bot is and opens a Socket Mode connection (`socket`:
//! `apps.connections.open`, `hello`, acknowledgements, `disconnect`). `poll` hands in the
//! `message` and `app_mention` events that came (`event`); replies go out with
//! `chat.postMessage` in mrkdwn, in the message's thread when it had one, and stream by
//! `chat.update`.
//!
//! Two tokens, neither of which enters the plugin: the app-level token (`SLACK_APP_TOKEN`,
//! `xapp-...`) opens connections, the bot token (`SLACK_BOT_TOKEN`, `xoxb-...`) calls the rest;
//! requests carry `Authorization: Bearer {{secret:...}}`, filled in by the host for Slack only.
//! `base_url` points the adapter at another origin (a test double). Slack shows no typing
//! indicator for a bot's Web API calls, so `typing` does nothing.

mod api;
mod event;
mod socket;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_sdk::adapter::{Account, Adapter, Chat, ChatType, Error, Event, Outbound, TextFormat};
use talaria_sdk::secrets;

use api::Body;
use event::Me;
use socket::Socket;

const APP_TOKEN: &str = "SLACK_APP_TOKEN";
const BOT_TOKEN: &str = "SLACK_BOT_TOKEN";
/// Slack takes up to 40,000 characters but advises staying under 4,000.
const MAX_LENGTH: u32 = 3900;
/// `chat.update` is rate limited to about fifty calls a minute.
const EDIT_INTERVAL_MS: u32 = 1200;

struct Slack;

thread_local! {
    static ME: RefCell<Me> = RefCell::new(Me::default());
    static SOCKET: RefCell<Socket> = RefCell::new(Socket::default());
}

/// `id` if it looks like a Slack id (letters and digits).
fn slack_id(id: &str) -> Result<&str, Error> {
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(id)
    } else {
        Err(Error::permanent(format!("`{id}` is not a Slack id")))
    }
}

impl Adapter for Slack {
    fn connect() -> Result<Account, Error> {
        for (token, what) in
            [(APP_TOKEN, "an app-level token (xapp-) with connections:write"), (BOT_TOKEN, "the bot token (xoxb-)")]
        {
            if !secrets::exists(token) {
                return Err(Error::permanent(format!("{token} is not set: put {what} in ~/.talaria/.env")));
            }
        }
        let me = api::call(BOT_TOKEN, "auth.test", Body::Json(&json!({})))?;
        let user_id = me["user_id"].as_str().unwrap_or_default().to_string();
        let name = me["user"].as_str().unwrap_or_default().to_string();
        ME.with_borrow_mut(|m| *m = Me { user_id: user_id.clone(), name: name.clone() });
        SOCKET.with_borrow_mut(Socket::open)?;
        Ok(Account {
            bot_id: user_id,
            bot_name: name,
            format: TextFormat::SlackMrkdwn,
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
            let Some(e) = SOCKET.with_borrow_mut(|s| s.next(until))? else { return Ok(events) };
            events.extend(ME.with_borrow(|me| event::message(&e, me)));
        }
    }

    fn send(message: Outbound) -> Result<String, Error> {
        let mut body = json!({
            "channel": slack_id(&message.chat_id)?,
            "text": message.text,
            "unfurl_links": false,
            "unfurl_media": false,
        });
        if let Some(thread) = &message.thread_id {
            body["thread_ts"] = json!(thread);
        }
        let sent = api::call(BOT_TOKEN, "chat.postMessage", Body::Json(&body))?;
        sent["ts"].as_str().map(str::to_string).ok_or_else(|| Error::permanent("chat.postMessage named no ts"))
    }

    fn edit(message_id: String, message: Outbound) -> Result<(), Error> {
        let body = json!({ "channel": slack_id(&message.chat_id)?, "ts": message_id, "text": message.text });
        api::call(BOT_TOKEN, "chat.update", Body::Json(&body)).map(drop)
    }

    /// Sending needs nothing `connect` or `poll` keep (a Web API call with the bot token): the host may send
    /// from several instances at once.
    fn prepare_sender() -> Result<bool, String> {
        Ok(true)
    }

    fn chat_info(chat_id: String) -> Result<Chat, Error> {
        let info = api::call(BOT_TOKEN, "conversations.info", Body::Query(&[("channel", slack_id(&chat_id)?)]))?;
        let channel = &info["channel"];
        let chat_type = if channel["is_im"].as_bool() == Some(true) { ChatType::Dm } else { ChatType::Group };
        Ok(Chat { id: chat_id.clone(), name: channel["name"].as_str().unwrap_or_default().to_string(), chat_type })
    }
}

talaria_sdk::export_adapter!(Slack);
