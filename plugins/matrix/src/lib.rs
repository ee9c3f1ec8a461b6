//! The Matrix adapter: the client-server API (<https://spec.matrix.org/latest/client-server-api/>).
//!
//! `/sync` long polls bring room messages, membership changes, reactions and invites (joined
//! when `auto_join`, the default); replies go out as `m.room.message` with
//! `org.matrix.custom.html`, and stream by `m.replace` edits.
//!
//! A room is a direct chat while it has two members, counting those invited; every membership
//! change in it is read again. Matrix has no buttons: a message sent with buttons names a
//! reaction for each (✅ the first, ❌ the last, a number those between) and carries them in its
//! content, and a reaction to it is that button's press (only on a message the bot sent). The access token never enters the plugin: requests carry
//! `Authorization: Bearer {{secret:MATRIX_ACCESS_TOKEN}}`, filled in by the host for the
//! homeserver only.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hasher as _};

use serde_json::{Value, json};
use talaria_sdk::adapter::{
    Account, Adapter, Button, ButtonPress, Chat, ChatType, Error, Event, Message, Outbound, TextFormat,
};
use talaria_sdk::{config, http, log, secrets};

const TOKEN: &str = "MATRIX_ACCESS_TOKEN";
const DEFAULT_BASE_URL: &str = "https://matrix-client.matrix.org";
/// A long message is split by the host below this (Matrix events may be up to 64 KiB).
const MAX_LENGTH: u32 = 16_000;
const MAX_POLL_MS: u32 = 25_000;
/// What a sync brings: room messages, membership changes and reactions, and few older ones.
const FILTER: &str = r#"{"presence":{"types":[]},"account_data":{"types":[]},"room":{"ephemeral":{"types":[]},"state":{"lazy_load_members":true},"timeline":{"limit":50,"types":["m.room.message","m.room.member","m.reaction"]}}}"#;
/// Where a message sent with buttons keeps them (label, data), for its reactions.
const BUTTONS_FIELD: &str = "org.talaria.buttons";

struct Matrix;

#[derive(Default)]
struct State {
    user_id: String,
    /// The sync token to continue from; empty before the first sync.
    since: String,
    /// Members of rooms seen, joined or invited, by room id (a DM has two); forgotten at each
    /// membership change.
    members: HashMap<String, usize>,
    /// The bot's latest messages' event ids, newest last: a reply to one addresses the bot.
    sent: std::collections::VecDeque<String>,
}

/// How many of the bot's messages are remembered for telling replies to them.
const SENT_KEPT: usize = 512;

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn base_url() -> String {
    config::get_str("base_url").unwrap_or_else(|| DEFAULT_BASE_URL.to_string()).trim_end_matches('/').to_string()
}

/// Call the client API; the JSON answer.
fn api(method: http::Method, path: &str, body: Option<&Value>) -> Result<Value, Error> {
    let url = format!("{}/_matrix/client/v3{path}", base_url());
    let mut request =
        http::Request::new(method, url).header("authorization", &format!("Bearer {}", secrets::placeholder(TOKEN)));
    if let Some(body) = body {
        request = request.json(body).map_err(|e| Error::permanent(e.to_string()))?;
    }
    let response = request.send()?;
    let answer: Value = response.json().unwrap_or(Value::Null);
    if response.is_success() {
        return Ok(answer);
    }
    let what = answer["error"].as_str().unwrap_or("no details");
    let code = answer["errcode"].as_str().unwrap_or("");
    let retry = answer["retry_after_ms"].as_u64().and_then(|ms| u32::try_from(ms).ok());
    Err(Error::from_status(response.status, format!("Matrix {path}: {} {code} {what}", response.status), retry))
}

fn txn_id() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(1);
    format!("talaria{:016x}", hasher.finish())
}

/// How many people are in `room`, joined or invited (asked once, then remembered until its
/// membership changes). When the homeserver cannot say, the room counts as a group: strangers
/// there get no answer.
fn member_count(room: &str) -> usize {
    if let Some(n) = STATE.with_borrow(|s| s.members.get(room).copied()) {
        return n;
    }
    let path = format!("/rooms/{}/members?not_membership=leave", http::encode(room));
    let Some(n) = api(http::Method::GET, &path, None).ok().and_then(|v| {
        let chunk = v["chunk"].as_array()?;
        Some(chunk.iter().filter(|e| matches!(e["content"]["membership"].as_str(), Some("join" | "invite"))).count())
    }) else {
        return 3;
    };
    STATE.with_borrow_mut(|s| s.members.insert(room.to_string(), n));
    n
}

fn chat_type(room: &str) -> ChatType {
    if member_count(room) <= 2 { ChatType::Dm } else { ChatType::Group }
}

/// An event of `room`, as the homeserver has it.
fn room_event(room: &str, event_id: &str) -> Option<Value> {
    api(http::Method::GET, &format!("/rooms/{}/event/{}", http::encode(room), http::encode(event_id)), None).ok()
}

/// Whether `event_id` of `room` is a message of the bot's: remembered when this instance sent
/// it, else asked of the homeserver.
fn sent_by_bot(room: &str, event_id: &str, user_id: &str) -> bool {
    STATE.with_borrow(|s| s.sent.iter().any(|e| e == event_id))
        || room_event(room, event_id).is_some_and(|e| e["sender"].as_str() == Some(user_id))
}

/// Whether a message's `content` addresses `user_id` (the bot), from the message's structure
/// only: its `m.mentions.user_ids`, or a pill (a link to the bot's `https://matrix.to/#/` or
/// `matrix:u/` address) in its HTML. The plain body is never searched: a name written there
/// (`talbotfan`, or the bot's id typed out) does not address it.
fn addresses(content: &Value, user_id: &str) -> bool {
    if user_id.is_empty() {
        return false;
    }
    let listed = content["m.mentions"]["user_ids"].as_array().is_some_and(|ids| ids.iter().any(|i| i == user_id));
    let html = (content["format"] == "org.matrix.custom.html").then(|| content["formatted_body"].as_str()).flatten();
    listed || html.is_some_and(|html| links(html).any(|href| pill_user(&href).as_deref() == Some(user_id)))
}

/// The `href`s of the links in `html`.
fn links(html: &str) -> impl Iterator<Item = String> + '_ {
    html.split('<').skip(1).filter_map(|tag| {
        let tag = tag.split('>').next()?;
        let mut words = tag.split_ascii_whitespace();
        if !words.next()?.eq_ignore_ascii_case("a") {
            return None;
        }
        let at = tag.find("href=")? + "href=".len();
        let rest = &tag[at..];
        let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let value = rest[1..].split(quote).next()?;
        Some(value.replace("&amp;", "&"))
    })
}

/// The user a pill links to: `https://matrix.to/#/@user:server` or `matrix:u/user:server`
/// (percent-encoding undone, any `?via=` dropped).
fn pill_user(href: &str) -> Option<String> {
    let href = href.trim();
    let id = if let Some(rest) = href.strip_prefix("https://matrix.to/#/") {
        percent_decode(rest.split('?').next()?)
    } else {
        format!("@{}", percent_decode(href.strip_prefix("matrix:u/")?.split('?').next()?))
    };
    id.starts_with('@').then_some(id)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A reply's text without the quote of the message it answers (the "fallback" older clients
/// put first: lines starting with `> `, then an empty line).
fn without_reply_fallback(body: &str) -> &str {
    if !body.starts_with("> ") {
        return body;
    }
    let mut rest = body;
    while let Some(line_end) = rest.find('\n') {
        let line = &rest[..line_end];
        rest = &rest[line_end + 1..];
        if !line.starts_with('>') {
            return if line.is_empty() { rest } else { body };
        }
    }
    body
}

fn message_event(room: &str, event: &Value, user_id: &str) -> Option<Event> {
    if event["type"] != "m.room.message" || event["sender"].as_str() == Some(user_id) {
        return None;
    }
    let content = &event["content"];
    // An edit is not a new message.
    if content["m.relates_to"]["rel_type"] == "m.replace" {
        return None;
    }
    let relates = &content["m.relates_to"];
    let thread_id =
        (relates["rel_type"] == "m.thread").then(|| relates["event_id"].as_str().map(str::to_string)).flatten();
    let reply_to = relates["m.in_reply_to"]["event_id"].as_str().map(str::to_string);
    let body = content["body"].as_str()?;
    let text = if reply_to.is_some() { without_reply_fallback(body) } else { body }.to_string();
    let replied_to_bot = reply_to.as_ref().is_some_and(|id| sent_by_bot(room, id, user_id));
    let mentioned = replied_to_bot || addresses(content, user_id);
    let sender = event["sender"].as_str().unwrap_or_default().to_string();
    let chat_type = chat_type(room);
    Some(Event::Message(Message {
        id: event["event_id"].as_str().unwrap_or_default().to_string(),
        chat_id: room.to_string(),
        chat_type,
        chat_name: String::new(),
        thread_id,
        sender_name: localpart(&sender),
        sender_id: sender,
        text,
        mentions_bot: mentioned,
        reply_to,
        attachments: Vec::new(),
    }))
}

fn localpart(user: &str) -> String {
    user.trim_start_matches('@').split(':').next().unwrap_or_default().to_string()
}

/// The reaction each of `count` buttons is pressed by: ✅ the first, ❌ the last (of two or
/// more), keycap digits those between.
fn reaction_key(index: usize, count: usize) -> String {
    match index {
        0 => "✅".to_string(),
        i if i + 1 == count => "❌".to_string(),
        i => format!("{}\u{fe0f}\u{20e3}", i + 1),
    }
}

/// The button `key` (a reaction) presses, of a message's `buttons`; also 👍/👎 and keycaps.
fn pressed(key: &str, buttons: &[Button]) -> Option<usize> {
    let key: String = key.chars().filter(|c| *c != '\u{fe0f}').collect();
    let count = buttons.len();
    match key.as_str() {
        "✅" | "✔" | "👍" if count > 0 => Some(0),
        "❌" | "✖" | "👎" if count > 1 => Some(count - 1),
        _ => {
            let digit = key.strip_suffix('\u{20e3}')?.parse::<usize>().ok()?;
            (1..=count).contains(&digit).then(|| digit - 1)
        }
    }
}

/// What a message with `buttons` says about them: which reaction presses which.
fn reactions_hint(buttons: &[Button]) -> String {
    let each: Vec<String> = buttons
        .iter()
        .enumerate()
        .map(|(i, b)| format!("{} for “{}”", reaction_key(i, buttons.len()), b.label))
        .collect();
    format!("React {}.", each.join(", "))
}

/// A reaction to a message the bot sent with buttons: that button's press.
fn reaction_event(room: &str, event: &Value, user_id: &str) -> Option<Event> {
    if event["type"] != "m.reaction" || event["sender"].as_str() == Some(user_id) {
        return None;
    }
    let relates = &event["content"]["m.relates_to"];
    if relates["rel_type"] != "m.annotation" {
        return None;
    }
    let (target, key) = (relates["event_id"].as_str()?, relates["key"].as_str()?);
    // The buttons are read from the message as the homeserver has it, and only from the bot's
    // own: anyone could write a message with such a field.
    let message = room_event(room, target)?;
    if message["sender"].as_str() != Some(user_id) {
        return None;
    }
    let buttons: Vec<Button> = message["content"][BUTTONS_FIELD]
        .as_array()?
        .iter()
        .filter_map(|b| Some(Button { label: b["label"].as_str()?.to_string(), data: b["data"].as_str()?.to_string() }))
        .collect();
    let button = buttons.get(pressed(key, &buttons)?)?;
    let sender = event["sender"].as_str().unwrap_or_default();
    Some(Event::Button(ButtonPress {
        chat_id: room.to_string(),
        thread_id: None,
        sender_id: sender.to_string(),
        sender_name: localpart(sender),
        message_id: target.to_string(),
        data: button.data.clone(),
    }))
}

/// Join the rooms `sync` invites the bot to, unless `auto_join = false`.
fn join_invited(sync: &Value) {
    if config::get::<bool>("auto_join") == Some(false) {
        return;
    }
    for room in sync["rooms"]["invite"].as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
        match api(http::Method::POST, &format!("/rooms/{}/join", http::encode(&room)), Some(&json!({}))) {
            Ok(_) => log::info(&format!("joined {room}")),
            Err(e) => log::warn(&format!("cannot join {room}: {e}")),
        }
        STATE.with_borrow_mut(|s| s.members.remove(&room));
    }
}

/// The content of a message (or of an edit's new text); with buttons, the reactions that
/// press them are named, and the buttons kept in it.
fn content(message: &Outbound) -> Value {
    if message.buttons.is_empty() {
        return json!({
            "msgtype": "m.text",
            "body": message.plain,
            "format": "org.matrix.custom.html",
            "formatted_body": message.text,
        });
    }
    let hint = reactions_hint(&message.buttons);
    let escaped = hint.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let buttons: Vec<Value> = message.buttons.iter().map(|b| json!({ "label": b.label, "data": b.data })).collect();
    json!({
        "msgtype": "m.text",
        "body": format!("{}\n\n{hint}", message.plain),
        "format": "org.matrix.custom.html",
        "formatted_body": format!("{}<br><br>{escaped}", message.text),
        BUTTONS_FIELD: buttons,
    })
}

fn send_event(room: &str, content: &Value) -> Result<String, Error> {
    let path = format!("/rooms/{}/send/m.room.message/{}", http::encode(room), txn_id());
    let sent = api(http::Method::PUT, &path, Some(content))?;
    Ok(sent["event_id"].as_str().unwrap_or_default().to_string())
}

impl Adapter for Matrix {
    fn connect() -> Result<Account, Error> {
        if !secrets::exists(TOKEN) {
            return Err(Error::permanent(format!(
                "{TOKEN} is not set: log the bot in (POST /_matrix/client/v3/login) and put its access token in ~/.talaria/.env"
            )));
        }
        let me = api(http::Method::GET, "/account/whoami", None)?;
        let user_id = me["user_id"].as_str().unwrap_or_default().to_string();
        // Start from now: what was said before the gateway came is not answered.
        let path = format!("/sync?timeout=0&filter={}", http::encode(FILTER));
        let first = api(http::Method::GET, &path, None)?;
        STATE.with_borrow_mut(|s| {
            s.user_id = user_id.clone();
            s.since = first["next_batch"].as_str().unwrap_or_default().to_string();
        });
        // Invitations made while the gateway was away come only in this first sync.
        join_invited(&first);
        Ok(Account {
            bot_id: user_id.clone(),
            bot_name: user_id,
            format: TextFormat::MatrixHtml,
            max_length: MAX_LENGTH,
            can_edit: true,
            edit_interval_ms: 1000,
            buttons: true,
            polls: true,
        })
    }

    fn poll(timeout_ms: u32) -> Result<Vec<Event>, Error> {
        let (since, user_id) = STATE.with_borrow(|s| (s.since.clone(), s.user_id.clone()));
        let path = format!(
            "/sync?timeout={}&filter={}&since={}",
            timeout_ms.min(MAX_POLL_MS),
            http::encode(FILTER),
            http::encode(&since)
        );
        let sync = api(http::Method::GET, &path, None)?;
        if let Some(next) = sync["next_batch"].as_str() {
            STATE.with_borrow_mut(|s| s.since = next.to_string());
        }
        join_invited(&sync);
        let mut events = Vec::new();
        if let Some(rooms) = sync["rooms"]["join"].as_object() {
            for (room, joined) in rooms {
                let timeline = joined["timeline"]["events"].as_array().map(Vec::as_slice).unwrap_or_default();
                let state = joined["state"]["events"].as_array().map(Vec::as_slice).unwrap_or_default();
                // Someone joined, was invited or left: the room's kind is read again.
                if timeline.iter().chain(state).any(|e| e["type"] == "m.room.member") {
                    STATE.with_borrow_mut(|s| s.members.remove(room));
                }
                for event in timeline {
                    if event["type"] == "m.room.member" {
                        // Messages after this change are judged by the room as it is now.
                        STATE.with_borrow_mut(|s| s.members.remove(room));
                    }
                    events
                        .extend(message_event(room, event, &user_id).or_else(|| reaction_event(room, event, &user_id)));
                }
            }
        }
        Ok(events)
    }

    fn send(message: Outbound) -> Result<String, Error> {
        let mut body = content(&message);
        if let Some(thread) = &message.thread_id {
            body["m.relates_to"] = json!({ "rel_type": "m.thread", "event_id": thread, "is_falling_back": true });
        } else if let Some(reply) = &message.reply_to {
            body["m.relates_to"] = json!({ "m.in_reply_to": { "event_id": reply } });
        }
        let id = send_event(&message.chat_id, &body)?;
        STATE.with_borrow_mut(|s| {
            s.sent.push_back(id.clone());
            if s.sent.len() > SENT_KEPT {
                s.sent.pop_front();
            }
        });
        Ok(id)
    }

    fn edit(message_id: String, message: Outbound) -> Result<(), Error> {
        let new = content(&message);
        let body = json!({
            "msgtype": "m.text",
            "body": format!("* {}", message.plain),
            "format": "org.matrix.custom.html",
            "formatted_body": format!("* {}", message.text),
            "m.new_content": new,
            "m.relates_to": { "rel_type": "m.replace", "event_id": message_id },
        });
        send_event(&message.chat_id, &body).map(drop)
    }

    fn typing(chat_id: String, _thread_id: Option<String>) -> Result<(), Error> {
        let user_id = STATE.with_borrow(|s| s.user_id.clone());
        let path = format!("/rooms/{}/typing/{}", http::encode(&chat_id), http::encode(&user_id));
        api(http::Method::PUT, &path, Some(&json!({ "typing": true, "timeout": 6000 }))).map(drop)
    }

    fn chat_info(chat_id: String) -> Result<Chat, Error> {
        let name = api(http::Method::GET, &format!("/rooms/{}/state/m.room.name", http::encode(&chat_id)), None)
            .ok()
            .and_then(|v| v["name"].as_str().map(str::to_string))
            .unwrap_or_default();
        let chat_type = chat_type(&chat_id);
        Ok(Chat { id: chat_id, name, chat_type })
    }
}

talaria_sdk::export_adapter!(Matrix);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const BOT: &str = "@talbot:example.org";

    #[test]
    fn only_the_mentions_list_or_a_pill_to_the_bot_addresses_it() {
        let listed = json!({ "body": "hi", "m.mentions": { "user_ids": ["@ana:example.org", BOT] } });
        assert!(addresses(&listed, BOT));
        let pill = json!({ "body": "talbot: hi", "format": "org.matrix.custom.html",
            "formatted_body": "<a href=\"https://matrix.to/#/@talbot:example.org\">talbot</a>: hi" });
        assert!(addresses(&pill, BOT));
        let encoded = json!({ "body": "hi", "format": "org.matrix.custom.html",
            "formatted_body": "hi <A class='x' href='https://matrix.to/#/%40talbot%3Aexample.org?via=example.org'>t</A>" });
        assert!(addresses(&encoded, BOT));
        let uri = json!({ "body": "hi", "format": "org.matrix.custom.html",
            "formatted_body": "<a href=\"matrix:u/talbot:example.org\">t</a> hi" });
        assert!(addresses(&uri, BOT));
        // Names in the plain body, a longer name's pill, an empty mentions list: not the bot.
        for content in [
            json!({ "body": "ask talbotfan about it" }),
            json!({ "body": "ask @talbot:example.org about it", "m.mentions": {} }),
            json!({ "body": "ask talbot about it", "m.mentions": { "user_ids": ["@talbotfan:example.org"] } }),
            json!({ "body": "ask talbotfan", "format": "org.matrix.custom.html",
                "formatted_body": "ask <a href=\"https://matrix.to/#/@talbotfan:example.org\">talbotfan</a>" }),
            json!({ "body": "see https://matrix.to/#/@talbot:example.org", "format": "org.matrix.custom.html",
                "formatted_body": "see https://matrix.to/#/@talbot:example.org" }),
        ] {
            assert!(!addresses(&content, BOT), "{content}");
        }
    }

    #[test]
    fn a_reply_s_quote_of_the_message_it_answers_is_not_its_text() {
        let reply = "> <@talbot:example.org> **Approval needed**: run `ls`\n> more\n\n/approve";
        assert_eq!(without_reply_fallback(reply), "/approve");
        assert_eq!(without_reply_fallback("/approve"), "/approve");
        assert_eq!(without_reply_fallback("> a quote I wrote\nthen my words"), "> a quote I wrote\nthen my words");
        assert_eq!(without_reply_fallback("> only a quote"), "> only a quote");
    }

    #[test]
    fn reactions_press_the_buttons_they_are_named_for() {
        let buttons: Vec<Button> = ["Allow once", "Allow for this session", "Deny"]
            .iter()
            .map(|l| Button { label: (*l).to_string(), data: format!("ap:t:{l}") })
            .collect();
        assert_eq!(
            reactions_hint(&buttons),
            "React ✅ for “Allow once”, 2\u{fe0f}\u{20e3} for “Allow for this session”, ❌ for “Deny”."
        );
        assert_eq!(pressed("✅", &buttons), Some(0));
        assert_eq!(pressed("✔\u{fe0f}", &buttons), Some(0));
        assert_eq!(pressed("👍", &buttons), Some(0));
        assert_eq!(pressed("2\u{fe0f}\u{20e3}", &buttons), Some(1));
        assert_eq!(pressed("❌", &buttons), Some(2));
        assert_eq!(pressed("👎", &buttons), Some(2));
        assert_eq!(pressed("4\u{fe0f}\u{20e3}", &buttons), None);
        assert_eq!(pressed("🎉", &buttons), None);
        assert_eq!(pressed("❌", &buttons[..1]), None, "one button: only ✅ presses it");
    }

    #[test]
    fn room_ids_are_escaped_in_paths() {
        assert_eq!(http::encode("!abc:localhost"), "%21abc%3Alocalhost");
        assert_eq!(http::encode("@bot:example.org"), "%40bot%3Aexample.org");
    }
}
