//! A MESSAGE_CREATE dispatch (<https://discord.com/developers/docs/resources/message>) as the
//! adapter's [`Message`].
//!
//! A message without `guild_id` is a DM; in a guild channel it mentions the bot when the bot's
//! id is among its `mentions` or it replies to one of the bot's messages. Messages from bots
//! (the bot's own included), from webhooks and system messages are not handed in.

use serde_json::Value;
use talaria_sdk::adapter::{Attachment, ChatType, Event, Message};

/// Who the bot is.
#[derive(Default)]
pub struct Me {
    pub id: String,
    pub name: String,
}

/// Message types that are someone writing: DEFAULT and REPLY.
const WRITTEN: [u64; 2] = [0, 19];

/// The event for MESSAGE_CREATE data `d`, unless nobody wrote it to be answered.
pub fn event(d: &Value, me: &Me) -> Option<Event> {
    let author = &d["author"];
    let sender_id = author["id"].as_str()?.to_string();
    if sender_id == me.id || author["bot"].as_bool() == Some(true) || d["webhook_id"].is_string() {
        return None;
    }
    if d["type"].as_u64().is_some_and(|t| !WRITTEN.contains(&t)) {
        return None;
    }
    let text = readable(d["content"].as_str().unwrap_or_default(), me);
    let attachments: Vec<Attachment> =
        d["attachments"].as_array().map(Vec::as_slice).unwrap_or_default().iter().map(attachment).collect();
    if text.is_empty() && attachments.is_empty() {
        return None;
    }
    let mentioned = d["mentions"].as_array().is_some_and(|m| m.iter().any(|u| u["id"] == me.id.as_str()));
    let replied_to_bot = d["referenced_message"]["author"]["id"] == me.id.as_str();
    let chat_type = if d["guild_id"].is_string() { ChatType::Group } else { ChatType::Dm };
    let sender_name = [&d["member"]["nick"], &author["global_name"], &author["username"]]
        .into_iter()
        .find_map(|n| n.as_str().filter(|n| !n.is_empty()))
        .unwrap_or_default()
        .to_string();
    Some(Event::Message(Message {
        id: d["id"].as_str()?.to_string(),
        chat_id: d["channel_id"].as_str()?.to_string(),
        chat_type,
        chat_name: String::new(),
        // A Discord thread is a channel of its own: its messages come with its channel id.
        thread_id: None,
        sender_id,
        sender_name,
        text,
        mentions_bot: mentioned || replied_to_bot,
        reply_to: d["message_reference"]["message_id"].as_str().map(str::to_string),
        attachments,
    }))
}

/// `content` with the bot's mention (`<@ID>` or `<@!ID>`) written as `@name`.
fn readable(content: &str, me: &Me) -> String {
    if me.id.is_empty() {
        return content.to_string();
    }
    let name = format!("@{}", me.name);
    content.replace(&format!("<@{}>", me.id), &name).replace(&format!("<@!{}>", me.id), &name).trim().to_string()
}

fn attachment(a: &Value) -> Attachment {
    let mime = a["content_type"].as_str().unwrap_or_default().to_string();
    Attachment {
        kind: talaria_sdk::adapter::attachment_kind(&mime).into(),
        name: a["filename"].as_str().unwrap_or_default().to_string(),
        mime,
        size: a["size"].as_u64().unwrap_or(0),
        data: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn me() -> Me {
        Me { id: "9".into(), name: "talaria".into() }
    }

    fn message(event: Option<Event>) -> Message {
        match event {
            Some(Event::Message(m)) => m,
            other => panic!("not a message: {}", other.is_some()),
        }
    }

    #[test]
    fn a_message_without_guild_is_a_dm_and_a_guild_mention_addresses_the_bot() {
        let dm = json!({ "id": "1", "channel_id": "5", "type": 0, "content": "hi",
            "author": { "id": "2", "username": "ana" }, "mentions": [] });
        let dm = message(event(&dm, &me()));
        assert_eq!((dm.chat_type, dm.mentions_bot, dm.sender_name.as_str()), (ChatType::Dm, false, "ana"));

        let guild = json!({ "id": "3", "channel_id": "6", "guild_id": "7", "type": 0, "content": "<@9> hi",
            "author": { "id": "2", "username": "ana", "global_name": "Ana" }, "mentions": [{ "id": "9" }] });
        let guild = message(event(&guild, &me()));
        assert_eq!((guild.chat_type, guild.mentions_bot), (ChatType::Group, true));
        assert_eq!((guild.text.as_str(), guild.sender_name.as_str()), ("@talaria hi", "Ana"));
    }

    #[test]
    fn only_the_bot_s_id_among_the_mentions_or_a_reply_to_it_addresses_it() {
        let said = |content: &str, mentions: Value, reply: Value| {
            let d = json!({ "id": "3", "channel_id": "6", "guild_id": "7", "type": 0, "content": content,
                "author": { "id": "2", "username": "ana" }, "mentions": mentions, "referenced_message": reply });
            message(event(&d, &me())).mentions_bot
        };
        // Another user whose id starts with the bot's, and the bot's mention typed without
        // Discord marking it: not the bot.
        assert!(!said("ask <@90> about it", json!([{ "id": "90" }]), Value::Null));
        assert!(!said("ask <@9> about it", json!([]), Value::Null));
        assert!(!said("ask talaria about it", json!([]), Value::Null));
        assert!(said("<@!9> hi", json!([{ "id": "9" }]), Value::Null));
        assert!(said("thanks", json!([]), json!({ "author": { "id": "9" } })));
        assert!(!said("thanks", json!([]), json!({ "author": { "id": "90" } })));
    }

    #[test]
    fn bots_webhooks_and_system_messages_are_not_handed_in() {
        let own = json!({ "id": "1", "channel_id": "5", "content": "x", "author": { "id": "9" } });
        let bot = json!({ "id": "1", "channel_id": "5", "content": "x", "author": { "id": "3", "bot": true } });
        let pin = json!({ "id": "1", "channel_id": "5", "type": 6, "content": "x", "author": { "id": "3" } });
        for d in [own, bot, pin] {
            assert!(event(&d, &me()).is_none(), "{d}");
        }
    }
}
