//! The Telegram adapter: the Bot API (<https://core.telegram.org/bots/api>) by long polling.
//!
//! `getUpdates` brings messages and button presses; replies go out with `sendMessage` in
//! Telegram's HTML and stream by `editMessageText`. The token never enters the plugin: every
//! request names `/bot{{secret:TELEGRAM_BOT_TOKEN}}/` and the host fills it in for the Bot API
//! host only. `base_url` points the adapter at a self-hosted Bot API server (or a test double).

use std::cell::RefCell;

use serde_json::{Value, json};
use talaria_sdk::adapter::{
    Account, Adapter, Attachment, ButtonPress, Chat, ChatType, Error, Event, Message, Outbound, TextFormat,
};
use talaria_sdk::{config, http, log, secrets};

const TOKEN: &str = "TELEGRAM_BOT_TOKEN";
const DEFAULT_BASE_URL: &str = "https://api.telegram.org";
/// Telegram's limit on a message's text, in characters.
const MAX_LENGTH: u32 = 4096;
/// Telegram allows about one edit a second per chat.
const EDIT_INTERVAL_MS: u32 = 1000;
/// The longest long poll Telegram is asked for, in seconds.
const MAX_POLL_SECS: u32 = 25;

struct Telegram;

/// What the adapter remembers between calls.
#[derive(Default)]
struct State {
    /// The next update to ask for.
    offset: i64,
    bot_id: i64,
    /// The bot's @username, without the `@`, lower case.
    username: String,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn base_url() -> String {
    config::get_str("base_url").unwrap_or_else(|| DEFAULT_BASE_URL.to_string()).trim_end_matches('/').to_string()
}

/// Call a Bot API method; its `result`.
fn api(method: &str, body: &Value) -> Result<Value, Error> {
    let url = format!("{}/bot{}/{method}", base_url(), secrets::path_placeholder(TOKEN));
    let request = http::Request::post(url).json(body).map_err(|e| Error::permanent(e.to_string()))?;
    let response = request.send()?;
    let reply: Value = response.json().map_err(|_| {
        Error::from_status(
            response.status,
            format!("Telegram {method}: HTTP {} with a body that is not JSON", response.status),
            None,
        )
    })?;
    if reply["ok"].as_bool() == Some(true) {
        return Ok(reply["result"].clone());
    }
    let code = reply["error_code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(response.status);
    let description = reply["description"].as_str().unwrap_or("no description");
    let retry_after = reply["parameters"]["retry_after"].as_u64().map(|s| u32::try_from(s * 1000).unwrap_or(u32::MAX));
    Err(Error::from_status(code, format!("Telegram {method}: {code} {description}"), retry_after))
}

fn id_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// A chat id as Telegram takes it: a number, or an `@channel` name.
fn chat_id(id: &str) -> Value {
    id.parse::<i64>().map_or_else(|_| json!(id), |n| json!(n))
}

fn chat_type(kind: &str) -> ChatType {
    match kind {
        "private" => ChatType::Dm,
        "channel" => ChatType::Channel,
        _ => ChatType::Group,
    }
}

fn person_name(from: &Value) -> String {
    let first = from["first_name"].as_str().unwrap_or_default();
    let last = from["last_name"].as_str().unwrap_or_default();
    let name = format!("{first} {last}").trim().to_string();
    if name.is_empty() { from["username"].as_str().unwrap_or_default().to_string() } else { name }
}

/// Whether `message` addresses the bot, read from the entities Telegram marked in it (never
/// from the text around them): a `mention` whose text is exactly `@username` (any letter
/// case; `@talbotfan` is not `@talbot`), a `text_mention` of the bot's user id, a
/// `bot_command` written to it (`/approve@username`), or a reply to one of its messages.
fn mentions_bot(message: &Value, text: &str, state: &State) -> bool {
    let replied_to_bot = message["reply_to_message"]["from"]["id"].as_i64() == Some(state.bot_id);
    let entities = if message["text"].is_string() { &message["entities"] } else { &message["caption_entities"] };
    let units: Vec<u16> = text.encode_utf16().collect();
    let handle = format!("@{}", state.username);
    let mentioned = entities.as_array().map(Vec::as_slice).unwrap_or_default().iter().any(|entity| {
        let said = || entity_text(&units, entity).unwrap_or_default().to_lowercase();
        match entity["type"].as_str() {
            Some("mention") => !state.username.is_empty() && said() == handle,
            Some("bot_command") => !state.username.is_empty() && said().ends_with(&handle),
            Some("text_mention") => entity["user"]["id"].as_i64().is_some_and(|id| id == state.bot_id && id != 0),
            _ => false,
        }
    });
    replied_to_bot || mentioned
}

/// The part of a message an entity marks (Telegram counts `offset` and `length` in UTF-16 code
/// units); none when it lies outside the text.
fn entity_text(units: &[u16], entity: &Value) -> Option<String> {
    let offset = usize::try_from(entity["offset"].as_u64()?).ok()?;
    let length = usize::try_from(entity["length"].as_u64()?).ok()?;
    let part = units.get(offset..offset.checked_add(length)?)?;
    Some(String::from_utf16_lossy(part))
}

fn message_event(message: &Value, state: &State) -> Option<Event> {
    let from = &message["from"];
    if from["id"].as_i64() == Some(state.bot_id) {
        return None;
    }
    let chat = &message["chat"];
    let text = message["text"].as_str().or_else(|| message["caption"].as_str()).unwrap_or_default().to_string();
    let mut attachments = Vec::new();
    if let Some(sizes) = message["photo"].as_array()
        && let Some(largest) = sizes.last()
    {
        attachments.push(Attachment {
            kind: "image".into(),
            name: String::new(),
            mime: "image/jpeg".into(),
            size: largest["file_size"].as_u64().unwrap_or(0),
            data: Vec::new(),
        });
    }
    if let Some(doc) = message["document"].as_object() {
        attachments.push(Attachment {
            kind: "file".into(),
            name: doc.get("file_name").and_then(Value::as_str).unwrap_or_default().into(),
            mime: doc.get("mime_type").and_then(Value::as_str).unwrap_or_default().into(),
            size: doc.get("file_size").and_then(Value::as_u64).unwrap_or(0),
            data: Vec::new(),
        });
    }
    if text.is_empty() && attachments.is_empty() {
        return None;
    }
    let thread_id = (message["is_topic_message"].as_bool() == Some(true))
        .then(|| id_text(&message["message_thread_id"]))
        .filter(|t| !t.is_empty());
    Some(Event::Message(Message {
        id: id_text(&message["message_id"]),
        chat_id: id_text(&chat["id"]),
        chat_type: chat_type(chat["type"].as_str().unwrap_or("private")),
        chat_name: chat["title"].as_str().unwrap_or_default().to_string(),
        thread_id,
        sender_id: id_text(&from["id"]),
        sender_name: person_name(from),
        mentions_bot: mentions_bot(message, &text, state),
        text,
        reply_to: message["reply_to_message"]["message_id"].as_i64().map(|id| id.to_string()),
        attachments,
    }))
}

fn button_event(query: &Value) -> Option<Event> {
    let message = &query["message"];
    // Stop the button's spinner; the answer itself comes as a message.
    if let Err(e) = api("answerCallbackQuery", &json!({ "callback_query_id": query["id"] })) {
        log::warn(&format!("answerCallbackQuery: {e}"));
    }
    Some(Event::Button(ButtonPress {
        chat_id: id_text(&message["chat"]["id"]),
        thread_id: None,
        sender_id: id_text(&query["from"]["id"]),
        sender_name: person_name(&query["from"]),
        message_id: id_text(&message["message_id"]),
        data: query["data"].as_str()?.to_string(),
    }))
}

/// The body of `sendMessage` / `editMessageText` for `message`, in HTML or plain.
fn message_body(message: &Outbound, html: bool) -> Value {
    let mut body = json!({
        "chat_id": chat_id(&message.chat_id),
        "text": if html { &message.text } else { &message.plain },
        "link_preview_options": { "is_disabled": true },
    });
    if html {
        body["parse_mode"] = json!("HTML");
    }
    if !message.buttons.is_empty() {
        let row: Vec<Value> =
            message.buttons.iter().map(|b| json!({ "text": b.label, "callback_data": b.data })).collect();
        body["reply_markup"] = json!({ "inline_keyboard": [row] });
    }
    body
}

/// Telegram refused the HTML (an entity it cannot parse): worth sending as plain text.
fn html_refused(e: &Error) -> bool {
    matches!(e, Error::Permanent(m) if m.contains("can't parse entities"))
}

impl Adapter for Telegram {
    fn connect() -> Result<Account, Error> {
        if !secrets::exists(TOKEN) {
            return Err(Error::permanent(format!(
                "{TOKEN} is not set: put the bot's token from @BotFather in ~/.talaria/.env"
            )));
        }
        let me = api("getMe", &json!({}))?;
        let username = me["username"].as_str().unwrap_or_default().to_string();
        STATE.with_borrow_mut(|s| {
            s.bot_id = me["id"].as_i64().unwrap_or(0);
            s.username = username.to_lowercase();
        });
        Ok(Account {
            bot_id: id_text(&me["id"]),
            bot_name: username,
            format: TextFormat::TelegramHtml,
            max_length: MAX_LENGTH,
            can_edit: true,
            edit_interval_ms: EDIT_INTERVAL_MS,
            buttons: true,
            polls: true,
        })
    }

    fn poll(timeout_ms: u32) -> Result<Vec<Event>, Error> {
        let offset = STATE.with_borrow(|s| s.offset);
        let mut body = json!({
            "timeout": (timeout_ms / 1000).min(MAX_POLL_SECS),
            "allowed_updates": ["message", "callback_query"],
        });
        if offset > 0 {
            body["offset"] = json!(offset);
        }
        let updates = api("getUpdates", &body)?;
        let mut events = Vec::new();
        for update in updates.as_array().map(Vec::as_slice).unwrap_or_default() {
            if let Some(id) = update["update_id"].as_i64() {
                STATE.with_borrow_mut(|s| s.offset = s.offset.max(id + 1));
            }
            let event = if update["message"].is_object() {
                STATE.with_borrow(|s| message_event(&update["message"], s))
            } else if update["callback_query"].is_object() {
                button_event(&update["callback_query"])
            } else {
                None
            };
            events.extend(event);
        }
        Ok(events)
    }

    fn send(message: Outbound) -> Result<String, Error> {
        let mut body = message_body(&message, true);
        if let Some(thread) = message.thread_id.as_deref().and_then(|t| t.parse::<i64>().ok()) {
            body["message_thread_id"] = json!(thread);
        }
        if let Some(reply) = message.reply_to.as_deref().and_then(|r| r.parse::<i64>().ok()) {
            body["reply_parameters"] = json!({ "message_id": reply, "allow_sending_without_reply": true });
        }
        let sent = match api("sendMessage", &body) {
            Err(e) if html_refused(&e) => {
                let mut plain = message_body(&message, false);
                for key in ["message_thread_id", "reply_parameters"] {
                    if let Some(v) = body.get(key) {
                        plain[key] = v.clone();
                    }
                }
                api("sendMessage", &plain)?
            }
            other => other?,
        };
        Ok(id_text(&sent["message_id"]))
    }

    fn edit(message_id: String, message: Outbound) -> Result<(), Error> {
        let id =
            message_id.parse::<i64>().map_err(|_| Error::permanent(format!("`{message_id}` is not a message id")))?;
        let edit = |html: bool| {
            let mut body = message_body(&message, html);
            body["message_id"] = json!(id);
            api("editMessageText", &body)
        };
        match edit(true) {
            Ok(_) => Ok(()),
            Err(e) if html_refused(&e) => edit(false).map(drop),
            // Nothing changed: the edit is done already.
            Err(Error::Permanent(m)) if m.contains("message is not modified") => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn typing(chat: String, thread_id: Option<String>) -> Result<(), Error> {
        let mut body = json!({ "chat_id": chat_id(&chat), "action": "typing" });
        if let Some(thread) = thread_id.and_then(|t| t.parse::<i64>().ok()) {
            body["message_thread_id"] = json!(thread);
        }
        api("sendChatAction", &body).map(drop)
    }

    /// Sending needs nothing `connect` or `poll` keep (a Bot API call with the token in its path): the host may send
    /// from several instances at once.
    fn prepare_sender() -> Result<bool, String> {
        Ok(true)
    }

    fn chat_info(id: String) -> Result<Chat, Error> {
        let chat = api("getChat", &json!({ "chat_id": chat_id(&id) }))?;
        let name = chat["title"].as_str().map_or_else(|| person_name(&chat), str::to_string);
        Ok(Chat { id: id_text(&chat["id"]), name, chat_type: chat_type(chat["type"].as_str().unwrap_or("private")) })
    }
}

talaria_sdk::export_adapter!(Telegram);

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> State {
        State { offset: 0, bot_id: 77, username: "talbot".into() }
    }

    /// A group message with `text` and the entities Telegram would mark: every `@name`, as
    /// Telegram marks usernames (whole, up to the first character that cannot be in one).
    fn said(text: &str) -> Value {
        let units: Vec<u16> = text.encode_utf16().collect();
        let mut entities = Vec::new();
        let mut i = 0;
        while i < units.len() {
            if units[i] == u16::from(b'@') {
                let end = (i + 1..units.len())
                    .find(|&j| {
                        !char::from_u32(u32::from(units[j])).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    })
                    .unwrap_or(units.len());
                entities.push(json!({ "type": "mention", "offset": i, "length": end - i }));
                i = end;
            } else {
                i += 1;
            }
        }
        json!({ "message_id": 1, "from": { "id": 5 }, "chat": { "id": -1, "type": "supergroup" }, "text": text,
            "entities": entities })
    }

    fn addressed(message: &Value) -> bool {
        mentions_bot(message, message["text"].as_str().or_else(|| message["caption"].as_str()).unwrap_or(""), &bot())
    }

    #[test]
    fn only_a_whole_mention_of_the_bot_addresses_it() {
        assert!(!addressed(&said("ask @talbotfan about it")));
        assert!(!addressed(&said("ask @TalBotFan about it")));
        assert!(addressed(&said("@talbot hi")));
        assert!(addressed(&said("hi @TalBot!")));
        assert!(addressed(&said("¿qué tal, 🙂 @talbot?")), "offsets are UTF-16 code units");
        assert!(!addressed(&said("hi @talbo")));
        // The text names the bot but Telegram marked no mention (inside a word, or in code).
        let unmarked = json!({ "text": "mail talbot@talbot.example", "entities": [] });
        assert!(!addressed(&unmarked));
        let in_code = json!({ "text": "`@talbot`", "entities": [{ "type": "code", "offset": 0, "length": 9 }] });
        assert!(!addressed(&in_code));
    }

    #[test]
    fn a_text_mention_a_command_to_the_bot_and_a_reply_to_it_address_it() {
        let text_mention = json!({ "text": "Talbot, hi", "entities": [
            { "type": "text_mention", "offset": 0, "length": 6, "user": { "id": 77 } }] });
        assert!(addressed(&text_mention));
        let someone_else = json!({ "text": "Talbot, hi", "entities": [
            { "type": "text_mention", "offset": 0, "length": 6, "user": { "id": 78 } }] });
        assert!(!addressed(&someone_else));
        let command =
            json!({ "text": "/approve@talbot", "entities": [{ "type": "bot_command", "offset": 0, "length": 15 }] });
        assert!(addressed(&command));
        let other_bot =
            json!({ "text": "/approve@talbotfan", "entities": [{ "type": "bot_command", "offset": 0, "length": 18 }] });
        assert!(!addressed(&other_bot));
        let reply = json!({ "text": "thanks", "reply_to_message": { "from": { "id": 77 } } });
        assert!(addressed(&reply));
        let caption = json!({ "caption": "look @talbot", "caption_entities": [
            { "type": "mention", "offset": 5, "length": 7 }] });
        assert!(addressed(&caption));
        // Entities past the end of the text are ignored, not a panic.
        let broken = json!({ "text": "hi", "entities": [{ "type": "mention", "offset": 1, "length": 40 }] });
        assert!(!addressed(&broken));
    }
}
