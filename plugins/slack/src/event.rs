//! A Slack event (`message` or `app_mention`, <https://api.slack.com/events>) as the adapter's
//! [`Message`].
//!
//! 1. Messages with a `bot_id` (the bot's own replies among them) or a `subtype` (edits,
//!    deletions, joins, ...) are not handed in.
//! 2. A DM is a channel whose `channel_type` is `im` (or, where the event does not say, whose id
//!    starts with `D`). The bot is mentioned by an `app_mention` or a `<@BOT>` in the text.
//! 3. The message's id is its `ts`; Slack sends both a `message` and an `app_mention` for a
//!    mention in a channel, and the gateway drops the second as seen before.
//! 4. A message written in a thread (`thread_ts`) carries it as its thread: the reply goes there,
//!    and the thread is a session of its own. A message at the top level is answered there.

use serde_json::Value;
use talaria_sdk::adapter::{Attachment, ChatType, Event, Message};

/// Who the bot is.
#[derive(Default)]
pub struct Me {
    /// Its user id (`U...`), as `auth.test` says.
    pub user_id: String,
    pub name: String,
}

/// The message for event `e`, unless nobody wrote it to be answered.
pub fn message(e: &Value, me: &Me) -> Option<Event> {
    let kind = e["type"].as_str()?;
    if !matches!(kind, "message" | "app_mention") || e["bot_id"].is_string() || e["subtype"].is_string() {
        return None;
    }
    let sender_id = e["user"].as_str()?.to_string();
    if sender_id == me.user_id {
        return None;
    }
    let raw = e["text"].as_str().unwrap_or_default();
    let (said, mentioned) = readable(raw, me);
    let mentions_bot = kind == "app_mention" || mentioned;
    let text = unescape(&said).trim().to_string();
    let attachments: Vec<Attachment> =
        e["files"].as_array().map(Vec::as_slice).unwrap_or_default().iter().map(attachment).collect();
    if text.is_empty() && attachments.is_empty() {
        return None;
    }
    let chat_id = e["channel"].as_str()?.to_string();
    let ts = e["ts"].as_str()?.to_string();
    let chat_type = match e["channel_type"].as_str() {
        Some("im") => ChatType::Dm,
        Some(_) => ChatType::Group,
        None if chat_id.starts_with('D') => ChatType::Dm,
        None => ChatType::Group,
    };
    let thread_id = e["thread_ts"].as_str().map(str::to_string);
    let profile = &e["user_profile"];
    let sender_name = [&profile["display_name"], &profile["real_name"], &profile["name"]]
        .into_iter()
        .find_map(|n| n.as_str().filter(|n| !n.is_empty()))
        .unwrap_or_default()
        .to_string();
    Some(Event::Message(Message {
        id: ts,
        chat_id,
        chat_type,
        chat_name: String::new(),
        thread_id,
        sender_id,
        sender_name,
        text,
        mentions_bot,
        reply_to: None,
        attachments,
    }))
}

/// `raw` with the bot's mention tokens (`<@UBOT>`, `<@UBOT|name>`) written as `@name`, and
/// whether there was one. Tokens are read whole: `<@UBOTX>` is someone else, and the bot's
/// name or id typed as plain text is not a mention.
fn readable(raw: &str, me: &Me) -> (String, bool) {
    let mut out = String::with_capacity(raw.len());
    let mut mentioned = false;
    let mut rest = raw;
    while let Some(start) = rest.find("<@") {
        out.push_str(&rest[..start]);
        let token = &rest[start..];
        let Some(end) = token.find('>') else {
            out.push_str(token);
            rest = "";
            break;
        };
        let id = token[2..end].split('|').next().unwrap_or_default();
        if !me.user_id.is_empty() && id == me.user_id {
            mentioned = true;
            out.push('@');
            out.push_str(&me.name);
        } else {
            out.push_str(&token[..=end]);
        }
        rest = &token[end + 1..];
    }
    out.push_str(rest);
    (out, mentioned)
}

/// Slack's text with its three escapes undone (`&lt;`, `&gt;`, `&amp;`).
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

fn attachment(file: &Value) -> Attachment {
    let mime = file["mimetype"].as_str().unwrap_or_default().to_string();
    Attachment {
        kind: talaria_sdk::adapter::attachment_kind(&mime).into(),
        name: file["name"].as_str().unwrap_or_default().to_string(),
        mime,
        size: file["size"].as_u64().unwrap_or(0),
        data: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn me() -> Me {
        Me { user_id: "UBOT".into(), name: "talaria".into() }
    }

    fn message_of(e: &Value) -> Message {
        match message(e, &me()) {
            Some(Event::Message(m)) => m,
            _ => panic!("no message for {e}"),
        }
    }

    #[test]
    fn a_dm_is_told_from_a_channel_and_a_thread_is_kept() {
        let dm = message_of(&json!({ "type": "message", "channel": "D1", "channel_type": "im", "user": "U1",
            "text": "a &lt; b", "ts": "1.1" }));
        assert_eq!((dm.chat_type, dm.thread_id, dm.mentions_bot), (ChatType::Dm, None, false));
        assert_eq!(dm.text, "a < b");

        let mention = message_of(&json!({ "type": "app_mention", "channel": "C1", "user": "U1",
            "text": "<@UBOT> hi", "ts": "2.2", "thread_ts": "1.5" }));
        assert_eq!((mention.chat_type, mention.thread_id.as_deref()), (ChatType::Group, Some("1.5")));
        assert_eq!((mention.mentions_bot, mention.text.as_str()), (true, "@talaria hi"));
    }

    #[test]
    fn only_a_whole_mention_token_of_the_bot_addresses_it() {
        let said = |text: &str| {
            message_of(&json!({ "type": "message", "channel": "C1", "channel_type": "channel", "user": "U1",
                "text": text, "ts": "1.1" }))
        };
        let m = said("<@UBOT|talaria> hi");
        assert_eq!((m.mentions_bot, m.text.as_str()), (true, "@talaria hi"));
        for text in ["ask <@UBOTFAN> about it", "ask @talaria about it", "UBOT hi", "<@UBO> hi", "<@UBOT hi"] {
            let m = said(text);
            assert!(!m.mentions_bot, "{text}");
        }
        assert_eq!(said("ask <@UBOTFAN> about it").text, "ask <@UBOTFAN> about it");
        assert!(said("x <@U2> and <@UBOT>").mentions_bot);
    }

    #[test]
    fn bots_and_subtypes_are_not_handed_in() {
        let own = json!({ "type": "message", "channel": "D1", "user": "U1", "bot_id": "B1", "text": "x", "ts": "1" });
        let edit = json!({ "type": "message", "subtype": "message_changed", "channel": "D1", "ts": "1" });
        let from_bot = json!({ "type": "message", "channel": "D1", "user": "UBOT", "text": "x", "ts": "1" });
        for e in [own, edit, from_bot] {
            assert!(message(&e, &me()).is_none(), "{e}");
        }
    }
}
